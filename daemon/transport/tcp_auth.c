/* tcp_auth.c: the data plane's proof of the job secret (see tcp_auth.h). */
#include "transport/tcp_auth.h"

#include <endian.h>
#include <sodium.h>
#include <string.h>

void scd_tcp_auth_nonce(uint8_t nonce[SCD_TCP_AUTH_NONCE_BYTES])
{
	randombytes_buf(nonce, SCD_TCP_AUTH_NONCE_BYTES);
}

void scd_tcp_auth_head(const char *tag, uint32_t word, const scd_tcp_auth_conn_t *c,
		       uint8_t head[SCD_TCP_AUTH_HEAD_BYTES])
{
	uint32_t v32;
	uint64_t v64;
	memcpy(head, tag, 4);
	v32 = htole32(word);
	memcpy(head + 4, &v32, 4);
	v64 = htole64(c->world_id);
	memcpy(head + 8, &v64, 8);
	v32 = htole32((uint32_t)c->connector_rank);
	memcpy(head + 16, &v32, 4);
	v32 = htole32((uint32_t)c->acceptor_rank);
	memcpy(head + 20, &v32, 4);
}

void scd_tcp_auth_mac(const uint8_t key[SCD_TCP_AUTH_KEY_BYTES], scd_tcp_auth_role_t role,
		      const scd_tcp_auth_conn_t *c, uint8_t mac[SCD_TCP_AUTH_MAC_BYTES])
{
	/* "SCDT", role, world id, connector rank, acceptor rank, then the connector's and
	 * the acceptor's nonces */
	uint8_t head[SCD_TCP_AUTH_HEAD_BYTES];
	scd_tcp_auth_head("SCDT", (uint32_t)role, c, head);
	crypto_auth_hmacsha256_state st;
	crypto_auth_hmacsha256_init(&st, key, SCD_TCP_AUTH_KEY_BYTES);
	crypto_auth_hmacsha256_update(&st, head, sizeof(head));
	crypto_auth_hmacsha256_update(&st, c->connector_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	crypto_auth_hmacsha256_update(&st, c->acceptor_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

int scd_tcp_auth_check(const uint8_t key[SCD_TCP_AUTH_KEY_BYTES], scd_tcp_auth_role_t role,
		       const scd_tcp_auth_conn_t *c, const uint8_t mac[SCD_TCP_AUTH_MAC_BYTES])
{
	uint8_t want[SCD_TCP_AUTH_MAC_BYTES];
	scd_tcp_auth_mac(key, role, c, want);
	int ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}
