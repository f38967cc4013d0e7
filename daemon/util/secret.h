/*
 * secret.h: the job secret every daemon of a job holds (README.md, "Security"), and
 * the keys derived from it. The secret file is read once at start: a regular file that
 * only its owner may read or write (no group or other permission bits), of at least
 * SCD_SECRET_MIN_BYTES and at most SCD_SECRET_MAX_BYTES; its whole content, hashed
 * (BLAKE2b), is the master key. Every key is derived from the master key with libsodium's
 * crypto_kdf (a context per use and a subkey id), so every node derives the same keys:
 *
 *  - the coordinator's CURVE key pair (ZeroMQ's CurveZMQ on the coordinator channel);
 *  - one CURVE key pair per rank, which the coordinator's ZAP handler maps back to the
 *    rank that may use it;
 *  - the data plane's handshake key (an HMAC-SHA-256 key, daemon/transport/tcp_auth.h);
 *  - the peer pipe's handshake key, the same kind under its own context, so that neither
 *    handshake's answer can be relayed as the other's (daemon/world/pipe.h).
 */
#ifndef SCD_UTIL_SECRET_H
#define SCD_UTIL_SECRET_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

#define SCD_SECRET_MIN_BYTES 16
#define SCD_SECRET_MAX_BYTES 4096
#define SCD_SECRET_KEY_BYTES 32
/* A CURVE key in ZeroMQ's Z85 text, NUL included. */
#define SCD_CURVE_Z85_BYTES 41

typedef struct scd_secret {
	int present; /* 0: no secret (insecure, or loopback only) */
	uint8_t master[SCD_SECRET_KEY_BYTES];
} scd_secret_t;

typedef struct scd_curve_pair {
	char public_z85[SCD_CURVE_Z85_BYTES];
	char secret_z85[SCD_CURVE_Z85_BYTES];
} scd_curve_pair_t;

/* Reads and checks the secret file at path into s. On failure err names the file and
 * what is wrong with it (missing, not a regular file, readable by group or others, too
 * short, too long): SC_ERR_INVALID, or SC_ERR_SYSTEM when it cannot be read. */
sc_status_t scd_secret_load(const char *path, scd_secret_t *s, char *err, size_t err_len);
/* Sets s from the bytes of a secret (what scd_secret_load does with the file's content). */
void scd_secret_from_bytes(scd_secret_t *s, const void *data, size_t len);
/* Clears s's key material. */
void scd_secret_wipe(scd_secret_t *s);

/* The coordinator's CURVE key pair. */
sc_status_t scd_secret_curve_server(const scd_secret_t *s, scd_curve_pair_t *kp);
/* Rank rank's CURVE key pair (ranks 1 and up connect to the coordinator). */
sc_status_t scd_secret_curve_rank(const scd_secret_t *s, int rank, scd_curve_pair_t *kp);
/* The data plane's handshake key: all zeros without a secret. */
void scd_secret_data_key(const scd_secret_t *s, uint8_t key[SCD_SECRET_KEY_BYTES]);
/* The peer pipe's handshake key: all zeros without a secret. */
void scd_secret_pipe_key(const scd_secret_t *s, uint8_t key[SCD_SECRET_KEY_BYTES]);

#endif
