/* secret.c: the job secret file and the keys derived from it (see secret.h). */
#include "util/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

/* crypto_kdf contexts: 8 characters each, one per use of a derived key. */
#define KDF_CTX_CURVE_SERVER "scdcoord"
#define KDF_CTX_CURVE_RANK   "scdranks"
#define KDF_CTX_DATA	     "scddatap"
#define KDF_CTX_PIPE	     "scdpeerp"

_Static_assert(crypto_kdf_KEYBYTES == SCD_SECRET_KEY_BYTES, "kdf key size");
_Static_assert(crypto_auth_hmacsha256_KEYBYTES == SCD_SECRET_KEY_BYTES, "hmac key size");

void scd_secret_from_bytes(scd_secret_t *s, const void *data, size_t len)
{
	crypto_generichash(s->master, sizeof(s->master), data, len, NULL, 0);
	s->present = 1;
}

sc_status_t scd_secret_load(const char *path, scd_secret_t *s, char *err, size_t err_len)
{
	memset(s, 0, sizeof(*s));
	if (sodium_init() < 0) {
		snprintf(err, err_len, "secret_file %s: libsodium cannot initialise", path);
		return SC_ERR_SYSTEM;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat owner;
	if (fd < 0 && errno == EACCES && stat(path, &owner) == 0 && owner.st_uid != geteuid()) {
		/* Owner-only, so it must be the daemon's own: a file made by root for a
		 * service's user is the usual case. */
		snprintf(
		    err, err_len,
		    "secret_file %s: %s: it belongs to uid %d and the daemon runs as uid %d, "
		    "which must own it (chown it to that user, keeping mode 0600)",
		    path, strerror(EACCES), (int)owner.st_uid, (int)geteuid());
		return SC_ERR_SYSTEM;
	}
	if (fd < 0) {
		snprintf(err, err_len, "secret_file %s: %s", path, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	struct stat st;
	sc_status_t status = SC_ERR_INVALID;
	unsigned char buf[SCD_SECRET_MAX_BYTES + 1];
	size_t got = 0;
	if (fstat(fd, &st) < 0) {
		snprintf(err, err_len, "secret_file %s: %s", path, strerror(errno));
		status = SC_ERR_SYSTEM;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, err_len, "secret_file %s is not a regular file", path);
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		snprintf(err, err_len,
			 "secret_file %s has mode %04o: group and others must have no access "
			 "(chmod 600 %s)",
			 path, (unsigned)(st.st_mode & 07777), path);
		goto out;
	}
	while (got < sizeof(buf)) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, err_len, "secret_file %s: %s", path, strerror(errno));
			status = SC_ERR_SYSTEM;
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got < SCD_SECRET_MIN_BYTES || got > SCD_SECRET_MAX_BYTES) {
		snprintf(err, err_len, "secret_file %s has %s%zu bytes, a secret has %d to %d",
			 path, got > SCD_SECRET_MAX_BYTES ? "over " : "",
			 got > SCD_SECRET_MAX_BYTES ? (size_t)SCD_SECRET_MAX_BYTES : got,
			 SCD_SECRET_MIN_BYTES, SCD_SECRET_MAX_BYTES);
		goto out;
	}
	scd_secret_from_bytes(s, buf, got);
	status = SC_OK;
out:
	sodium_memzero(buf, sizeof(buf));
	close(fd);
	return status;
}

void scd_secret_wipe(scd_secret_t *s)
{
	sodium_memzero(s, sizeof(*s));
}

/* A CURVE key pair whose secret key is subkey id of ctx. */
static sc_status_t curve_pair(const scd_secret_t *s, uint64_t id, const char *ctx,
			      scd_curve_pair_t *kp)
{
	uint8_t sk[32];
	sc_status_t st = SC_ERR_SYSTEM;
	if (!s->present)
		return SC_ERR_INVALID;
	if (crypto_kdf_derive_from_key(sk, sizeof(sk), id, ctx, s->master) == 0 &&
	    zmq_z85_encode(kp->secret_z85, sk, sizeof(sk)) &&
	    zmq_curve_public(kp->public_z85, kp->secret_z85) == 0)
		st = SC_OK;
	sodium_memzero(sk, sizeof(sk));
	return st;
}

sc_status_t scd_secret_curve_server(const scd_secret_t *s, scd_curve_pair_t *kp)
{
	return curve_pair(s, 0, KDF_CTX_CURVE_SERVER, kp);
}

sc_status_t scd_secret_curve_rank(const scd_secret_t *s, int rank, scd_curve_pair_t *kp)
{
	return curve_pair(s, (uint64_t)rank, KDF_CTX_CURVE_RANK, kp);
}

/* A 32-byte key of context ctx: all zeros without a secret. */
static void plain_key(const scd_secret_t *s, const char *ctx, uint8_t key[SCD_SECRET_KEY_BYTES])
{
	if (!s->present)
		memset(key, 0, SCD_SECRET_KEY_BYTES);
	else
		crypto_kdf_derive_from_key(key, SCD_SECRET_KEY_BYTES, 0, ctx, s->master);
}

void scd_secret_data_key(const scd_secret_t *s, uint8_t key[SCD_SECRET_KEY_BYTES])
{
	plain_key(s, KDF_CTX_DATA, key);
}

void scd_secret_pipe_key(const scd_secret_t *s, uint8_t key[SCD_SECRET_KEY_BYTES])
{
	plain_key(s, KDF_CTX_PIPE, key);
}
