/*
 * tcp_seal.h: the record layer of the tcp data plane (data_protection = integrity or
 * encrypt). After the handshake (tcp.c, tcp_auth.h) every byte of a connection travels in
 * records: a 4-byte little-endian payload length (at most SCD_SEAL_RECORD_BYTES), the
 * payload, and a 16-byte AEAD tag. Each direction has its own key, derived from the job
 * secret and both handshake nonces, and numbers its records with a 64-bit counter that is
 * the AEAD nonce, so a record that is altered, replayed, reordered, dropped or cut short
 * fails its tag. The cipher is AES-256-GCM where both ends have the CPU support, else
 * ChaCha20-Poly1305-IETF. integrity sends the payload in clear and authenticates it (as
 * additional data, with the header); encrypt encrypts it too (the header is the
 * additional data).
 *
 * scd_seal_send and scd_seal_recv are send(2) and recv(2) for the nonblocking poll loops of
 * tcp_exchange.c and tcp_ring.c. A NULL seal (data_protection = none) is the raw socket,
 * with no copy and no state. With a seal, plaintext bytes count as sent only once their
 * record is wholly on the wire: until then the call returns -1 with EAGAIN and the caller
 * offers the same bytes again (at least as many as before) when the socket is writable.
 * Received records are opened whole; plaintext of an opened record that the caller did not
 * take yet waits in the seal (scd_seal_ready), and a loop must not sleep in poll while it
 * does. A record that fails its check makes scd_seal_recv return -1 with EBADMSG, and a
 * header announcing more than SCD_SEAL_RECORD_BYTES -1 with EPROTO.
 */
#ifndef SCD_TRANSPORT_TCP_SEAL_H
#define SCD_TRANSPORT_TCP_SEAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "transport/tcp_auth.h"

/* Payload bytes per record at most: large enough that the per-record cost (header, tag,
 * one AEAD call, two recv(2) calls) is a few per cent at 1 Gbit/s and beyond, small
 * enough that a record stays in the L2 cache between sealing and sending
 * (docs/performance.md). */
#define SCD_SEAL_RECORD_BYTES (64u << 10)
#define SCD_SEAL_HEAD_BYTES   4
#define SCD_SEAL_TAG_BYTES    16
#define SCD_SEAL_KEY_BYTES    32

typedef enum {
	SCD_SEAL_NONE = 0,
	SCD_SEAL_INTEGRITY = 1,
	SCD_SEAL_ENCRYPT = 2,
} scd_seal_mode_t;

typedef enum {
	SCD_SEAL_CHACHA20 = 0, /* ChaCha20-Poly1305-IETF */
	SCD_SEAL_AES256GCM = 1,
} scd_seal_cipher_t;

typedef struct scd_seal scd_seal_t;

/* "none", "integrity", "encrypt"; the cipher's name. */
const char *scd_seal_mode_name(int mode);
const char *scd_seal_cipher_name(int cipher);
/* The mode named by name, or -1. */
int scd_seal_mode_parse(const char *name);
/* 1 when this CPU runs AES-256-GCM (libsodium's crypto_aead_aes256gcm_is_available). */
int scd_seal_aes_available(void);

/* The two session keys of connection c, one per direction, for mode and cipher. */
void scd_seal_keys(const uint8_t auth_key[SCD_TCP_AUTH_KEY_BYTES], const scd_tcp_auth_conn_t *c,
		   scd_seal_mode_t mode, scd_seal_cipher_t cipher,
		   uint8_t to_acceptor[SCD_SEAL_KEY_BYTES],
		   uint8_t to_connector[SCD_SEAL_KEY_BYTES]);

/* A seal that sends under tx_key and receives under rx_key (NULL when out of memory).
 * mode must not be none. */
scd_seal_t *scd_seal_new(scd_seal_mode_t mode, scd_seal_cipher_t cipher,
			 const uint8_t tx_key[SCD_SEAL_KEY_BYTES],
			 const uint8_t rx_key[SCD_SEAL_KEY_BYTES]);
void scd_seal_free(scd_seal_t *s);

/* The sealed halves of scd_seal_send and scd_seal_recv (s not NULL). */
ssize_t scd_seal_send_sealed(scd_seal_t *s, int fd, const struct iovec *iov, int niov);
ssize_t scd_seal_recv_sealed(scd_seal_t *s, int fd, void *buf, size_t len);

/* sendmsg(2) of the bytes of iov through s (raw when s is NULL): see above. Inline, so
 * that data_protection = none costs one test of a pointer. */
static inline ssize_t scd_seal_send(scd_seal_t *s, int fd, const struct iovec *iov, int niov)
{
	if (s)
		return scd_seal_send_sealed(s, fd, iov, niov);
	struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)niov};
	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* recv(2) of at most len bytes through s (raw when s is NULL). 0: the peer closed. */
static inline ssize_t scd_seal_recv(scd_seal_t *s, int fd, void *buf, size_t len)
{
	return s ? scd_seal_recv_sealed(s, fd, buf, len) : recv(fd, buf, len, MSG_DONTWAIT);
}
/* Plaintext bytes opened and waiting in s (0 when s is NULL). */
size_t scd_seal_ready(const scd_seal_t *s);

/* The record layer without a socket (benchmarks, tests). scd_seal_record seals len <=
 * SCD_SEAL_RECORD_BYTES bytes of plain as s's next record into rec (len +
 * SCD_SEAL_HEAD_BYTES + SCD_SEAL_TAG_BYTES bytes) and returns the record's length.
 * scd_seal_open opens rec, a whole record of rec_len bytes, as s's next received one, its
 * payload going to out (which may be rec + SCD_SEAL_HEAD_BYTES); returns the payload's
 * length, or -1 when the record fails its check. */
size_t scd_seal_record(scd_seal_t *s, const void *plain, size_t len, unsigned char *rec);
ssize_t scd_seal_open(scd_seal_t *s, unsigned char *rec, size_t rec_len, unsigned char *out);

#endif
