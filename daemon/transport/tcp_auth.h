/*
 * tcp_auth.h: the proof of the job secret that opens every data-plane connection
 * (tcp.c). Each side sends a fresh random nonce; each then answers with an HMAC-SHA-256,
 * under the key derived from the job secret (util/secret.h), of its role, the world id,
 * both ranks and both nonces. The acceptor answers first (with its nonce, in its ack), the
 * connector checks that answer and sends its own, and the acceptor checks it before it
 * reads anything else from the connection. The roles differ in the MAC, so neither answer
 * can be reflected as the other; the nonces make every answer good for one connection.
 * Without a secret the key is all zeros: the exchange then proves nothing.
 */
#ifndef SCD_TRANSPORT_TCP_AUTH_H
#define SCD_TRANSPORT_TCP_AUTH_H

#include <stdint.h>

#define SCD_TCP_AUTH_KEY_BYTES	 32
#define SCD_TCP_AUTH_NONCE_BYTES 32
#define SCD_TCP_AUTH_MAC_BYTES	 32

typedef enum { SCD_TCP_AUTH_CONNECTOR = 1, SCD_TCP_AUTH_ACCEPTOR = 2 } scd_tcp_auth_role_t;

/* The nonces and ranks of one connection. */
typedef struct scd_tcp_auth_conn {
	uint64_t world_id;
	int connector_rank, acceptor_rank;
	uint8_t connector_nonce[SCD_TCP_AUTH_NONCE_BYTES];
	uint8_t acceptor_nonce[SCD_TCP_AUTH_NONCE_BYTES];
} scd_tcp_auth_conn_t;

/* The fixed-size fields that open every MAC and key derivation of connection c: tag (4
 * bytes), a 32-bit word, the world id, the connector's and the acceptor's ranks, all
 * little-endian. */
#define SCD_TCP_AUTH_HEAD_BYTES 24
void scd_tcp_auth_head(const char *tag, uint32_t word, const scd_tcp_auth_conn_t *c,
		       uint8_t head[SCD_TCP_AUTH_HEAD_BYTES]);
/* Fills nonce with random bytes. */
void scd_tcp_auth_nonce(uint8_t nonce[SCD_TCP_AUTH_NONCE_BYTES]);
/* The answer of role for connection c under key. */
void scd_tcp_auth_mac(const uint8_t key[SCD_TCP_AUTH_KEY_BYTES], scd_tcp_auth_role_t role,
		      const scd_tcp_auth_conn_t *c, uint8_t mac[SCD_TCP_AUTH_MAC_BYTES]);
/* 1 when mac is role's answer for c under key (compared in constant time), else 0. */
int scd_tcp_auth_check(const uint8_t key[SCD_TCP_AUTH_KEY_BYTES], scd_tcp_auth_role_t role,
		       const scd_tcp_auth_conn_t *c, const uint8_t mac[SCD_TCP_AUTH_MAC_BYTES]);

#endif
