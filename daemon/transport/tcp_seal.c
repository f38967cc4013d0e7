/* tcp_seal.c: the record layer of the tcp data plane (see tcp_seal.h). */
#include "transport/tcp_seal.h"

#include <endian.h>
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define REC_MAX (SCD_SEAL_HEAD_BYTES + SCD_SEAL_RECORD_BYTES + SCD_SEAL_TAG_BYTES)

struct scd_seal {
	/* AES-256-GCM's expanded keys (16-byte aligned: the seal is allocated aligned) */
	crypto_aead_aes256gcm_state aes_tx, aes_rx;
	scd_seal_mode_t mode;
	scd_seal_cipher_t cipher;
	uint8_t tx_key[SCD_SEAL_KEY_BYTES], rx_key[SCD_SEAL_KEY_BYTES];
	uint64_t tx_seq, rx_seq; /* the next record's number, its nonce */
	/* send: the record in tx not yet wholly written, and its plaintext bytes */
	size_t tx_len, tx_off, tx_plain;
	/* receive: bytes of the current record read, its length once its header is in (0
	 * before), and the opened plaintext waiting in rx at [rx_pos, rx_end) */
	size_t rx_got, rx_len, rx_pos, rx_end;
	unsigned char tx[REC_MAX], rx[REC_MAX];
};

const char *scd_seal_mode_name(int mode)
{
	switch (mode) {
	case SCD_SEAL_NONE:
		return "none";
	case SCD_SEAL_INTEGRITY:
		return "integrity";
	case SCD_SEAL_ENCRYPT:
		return "encrypt";
	default:
		return "unknown";
	}
}

const char *scd_seal_cipher_name(int cipher)
{
	return cipher == SCD_SEAL_AES256GCM ? "aes-256-gcm" : "chacha20-poly1305";
}

int scd_seal_mode_parse(const char *name)
{
	for (int m = SCD_SEAL_NONE; m <= SCD_SEAL_ENCRYPT; m++)
		if (name && strcmp(name, scd_seal_mode_name(m)) == 0)
			return m;
	return -1;
}

int scd_seal_aes_available(void)
{
	return sodium_init() >= 0 && crypto_aead_aes256gcm_is_available();
}

/*
 * Keyed BLAKE2b (crypto_generichash) of the direction, the mode, the cipher, the world,
 * both ranks and both nonces, under the handshake's key: a PRF over the whole transcript
 * in one call. crypto_kdf would only take an 8-byte context and a subkey number, too
 * little to bind the nonces. Binding the mode and the cipher means that a handshake whose
 * negotiation was tampered with gives the two ends different keys, and its first record
 * fails.
 */
static void derive(const uint8_t auth_key[SCD_TCP_AUTH_KEY_BYTES], const scd_tcp_auth_conn_t *c,
		   char dir, scd_seal_mode_t mode, scd_seal_cipher_t cipher,
		   uint8_t key[SCD_SEAL_KEY_BYTES])
{
	uint8_t head[SCD_TCP_AUTH_HEAD_BYTES];
	scd_tcp_auth_head("SCDS", (uint32_t)dir | (uint32_t)mode << 8 | (uint32_t)cipher << 16,
			  c, head);
	crypto_generichash_state st;
	crypto_generichash_init(&st, auth_key, SCD_TCP_AUTH_KEY_BYTES, SCD_SEAL_KEY_BYTES);
	crypto_generichash_update(&st, head, sizeof(head));
	crypto_generichash_update(&st, c->connector_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	crypto_generichash_update(&st, c->acceptor_nonce, SCD_TCP_AUTH_NONCE_BYTES);
	crypto_generichash_final(&st, key, SCD_SEAL_KEY_BYTES);
	sodium_memzero(&st, sizeof(st));
}

void scd_seal_keys(const uint8_t auth_key[SCD_TCP_AUTH_KEY_BYTES], const scd_tcp_auth_conn_t *c,
		   scd_seal_mode_t mode, scd_seal_cipher_t cipher,
		   uint8_t to_acceptor[SCD_SEAL_KEY_BYTES],
		   uint8_t to_connector[SCD_SEAL_KEY_BYTES])
{
	derive(auth_key, c, 'A', mode, cipher, to_acceptor);
	derive(auth_key, c, 'C', mode, cipher, to_connector);
}

scd_seal_t *scd_seal_new(scd_seal_mode_t mode, scd_seal_cipher_t cipher,
			 const uint8_t tx_key[SCD_SEAL_KEY_BYTES],
			 const uint8_t rx_key[SCD_SEAL_KEY_BYTES])
{
	if (mode == SCD_SEAL_NONE || sodium_init() < 0 ||
	    (cipher == SCD_SEAL_AES256GCM && !crypto_aead_aes256gcm_is_available()))
		return NULL;
	size_t bytes = (sizeof(scd_seal_t) + 63) / 64 * 64;
	scd_seal_t *s = aligned_alloc(64, bytes);
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->cipher = cipher;
	memcpy(s->tx_key, tx_key, SCD_SEAL_KEY_BYTES);
	memcpy(s->rx_key, rx_key, SCD_SEAL_KEY_BYTES);
	if (cipher == SCD_SEAL_AES256GCM) {
		crypto_aead_aes256gcm_beforenm(&s->aes_tx, tx_key);
		crypto_aead_aes256gcm_beforenm(&s->aes_rx, rx_key);
	}
	return s;
}

void scd_seal_free(scd_seal_t *s)
{
	if (!s)
		return;
	/* the keys, and with encrypt the last records' plaintext in tx and rx */
	sodium_memzero(s, sizeof(*s));
	free(s);
}

size_t scd_seal_ready(const scd_seal_t *s)
{
	return s ? s->rx_end - s->rx_pos : 0;
}

/* The 96-bit nonce of record seq: the counter, little-endian, then zeros. */
static void nonce_of(uint64_t seq, unsigned char n[12])
{
	uint64_t v = htole64(seq);
	memcpy(n, &v, 8);
	memset(n + 8, 0, 4);
}

size_t scd_seal_record(scd_seal_t *s, const void *plain, size_t len, unsigned char *rec)
{
	unsigned char npub[12], *payload = rec + SCD_SEAL_HEAD_BYTES, *tag = payload + len;
	uint32_t h = htole32((uint32_t)len);
	memcpy(rec, &h, SCD_SEAL_HEAD_BYTES);
	nonce_of(s->tx_seq++, npub);
	/* integrity: the header and the payload are the additional data of an empty
	 * message; encrypt: the header alone */
	const unsigned char *m = plain;
	size_t mlen = len, adlen = SCD_SEAL_HEAD_BYTES;
	if (s->mode == SCD_SEAL_INTEGRITY) {
		if (plain != payload && len)
			memcpy(payload, plain, len);
		m = payload; /* of no bytes, but libsodium wants a pointer */
		mlen = 0;
		adlen += len;
	}
	if (s->cipher == SCD_SEAL_AES256GCM)
		crypto_aead_aes256gcm_encrypt_detached_afternm(payload, tag, NULL, m, mlen, rec,
							       adlen, NULL, npub, &s->aes_tx);
	else
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(
		    payload, tag, NULL, m, mlen, rec, adlen, NULL, npub, s->tx_key);
	return SCD_SEAL_HEAD_BYTES + len + SCD_SEAL_TAG_BYTES;
}

ssize_t scd_seal_open(scd_seal_t *s, unsigned char *rec, size_t rec_len, unsigned char *out)
{
	uint32_t h;
	if (rec_len < SCD_SEAL_HEAD_BYTES + SCD_SEAL_TAG_BYTES)
		return -1;
	memcpy(&h, rec, SCD_SEAL_HEAD_BYTES);
	size_t len = le32toh(h);
	if (len > SCD_SEAL_RECORD_BYTES ||
	    rec_len != SCD_SEAL_HEAD_BYTES + len + SCD_SEAL_TAG_BYTES)
		return -1;
	unsigned char npub[12], *payload = rec + SCD_SEAL_HEAD_BYTES, *tag = payload + len;
	nonce_of(s->rx_seq, npub);
	const unsigned char *c = payload;
	size_t clen = len, adlen = SCD_SEAL_HEAD_BYTES;
	if (s->mode == SCD_SEAL_INTEGRITY) {
		clen = 0; /* c stays a pointer of no bytes: libsodium wants one */
		adlen += len;
	}
	int rc = s->cipher == SCD_SEAL_AES256GCM
		     ? crypto_aead_aes256gcm_decrypt_detached_afternm(
			   out, NULL, c, clen, tag, rec, adlen, npub, &s->aes_rx)
		     : crypto_aead_chacha20poly1305_ietf_decrypt_detached(
			   out, NULL, c, clen, tag, rec, adlen, npub, s->rx_key);
	if (rc != 0)
		return -1;
	if (s->mode == SCD_SEAL_INTEGRITY && out != payload && len)
		memcpy(out, payload, len);
	s->rx_seq++;
	return (ssize_t)len;
}

/* Seals the next record from the bytes of iov at offset skip: straight from the caller's
 * buffer when it lies in one piece, else gathered into the record first. */
static void seal_next(scd_seal_t *s, const struct iovec *iov, int niov, size_t skip, size_t len)
{
	int k = 0;
	while (k < niov && skip >= iov[k].iov_len)
		skip -= iov[k++].iov_len;
	const unsigned char *plain = (const unsigned char *)iov[k].iov_base + skip;
	if (iov[k].iov_len - skip < len) {
		unsigned char *dst = s->tx + SCD_SEAL_HEAD_BYTES;
		for (size_t got = 0; got < len; k++, skip = 0) {
			size_t n = iov[k].iov_len - skip;
			if (n > len - got)
				n = len - got;
			memcpy(dst + got, (const unsigned char *)iov[k].iov_base + skip, n);
			got += n;
		}
		plain = dst;
	}
	s->tx_len = scd_seal_record(s, plain, len, s->tx);
	s->tx_off = 0;
	s->tx_plain = len;
}

ssize_t scd_seal_send_sealed(scd_seal_t *s, int fd, const struct iovec *iov, int niov)
{
	size_t total = 0, done = 0;
	for (int k = 0; k < niov; k++)
		total += iov[k].iov_len;
	for (;;) {
		if (s->tx_off < s->tx_len) {
			if (total - done < s->tx_plain) { /* the caller broke its promise */
				errno = EINVAL;
				return -1;
			}
			ssize_t w = send(fd, s->tx + s->tx_off, s->tx_len - s->tx_off,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return done ? (ssize_t)done : -1;
			s->tx_off += (size_t)w;
			if (s->tx_off < s->tx_len) {
				if (done)
					return (ssize_t)done;
				errno = EAGAIN;
				return -1;
			}
			done += s->tx_plain;
			s->tx_len = s->tx_off = s->tx_plain = 0;
		}
		if (done == total)
			return (ssize_t)done;
		size_t len = total - done;
		seal_next(s, iov, niov, done,
			  len < SCD_SEAL_RECORD_BYTES ? len : SCD_SEAL_RECORD_BYTES);
	}
}

ssize_t scd_seal_recv_sealed(scd_seal_t *s, int fd, void *buf, size_t len)
{
	for (;;) {
		if (s->rx_pos < s->rx_end) {
			size_t n = s->rx_end - s->rx_pos;
			if (n > len)
				n = len;
			memcpy(buf, s->rx + s->rx_pos, n);
			s->rx_pos += n;
			return (ssize_t)n;
		}
		/* the header first, then the rest of the record: nothing of the next record
		 * is read before this one is opened */
		size_t want =
		    s->rx_len ? s->rx_len - s->rx_got : SCD_SEAL_HEAD_BYTES - s->rx_got;
		ssize_t n = recv(fd, s->rx + s->rx_got, want, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n;
		s->rx_got += (size_t)n;
		if (!s->rx_len) {
			if (s->rx_got < SCD_SEAL_HEAD_BYTES)
				continue;
			uint32_t h;
			memcpy(&h, s->rx, SCD_SEAL_HEAD_BYTES);
			size_t plen = le32toh(h);
			if (plen > SCD_SEAL_RECORD_BYTES) {
				errno = EPROTO;
				return -1;
			}
			s->rx_len = SCD_SEAL_HEAD_BYTES + plen + SCD_SEAL_TAG_BYTES;
		}
		if (s->rx_got < s->rx_len)
			continue;
		/* A whole record: opened straight into the caller's buffer when it takes all
		 * of it, else in place to be handed out piece by piece. */
		size_t plen = s->rx_len - SCD_SEAL_HEAD_BYTES - SCD_SEAL_TAG_BYTES;
		unsigned char *out = len >= plen ? buf : s->rx + SCD_SEAL_HEAD_BYTES;
		if (scd_seal_open(s, s->rx, s->rx_len, out) < 0) {
			errno = EBADMSG;
			return -1;
		}
		s->rx_got = s->rx_len = 0;
		if (out == buf) {
			if (plen)
				return (ssize_t)plen;
			continue;
		}
		s->rx_pos = SCD_SEAL_HEAD_BYTES;
		s->rx_end = SCD_SEAL_HEAD_BYTES + plen;
	}
}
