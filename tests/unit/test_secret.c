/*
 * test_secret.c: the job secret (util/secret.c): the file's checks, the keys derived from
 * it (the same secret gives the same keys on every node, another secret other keys), and
 * the data plane's proof of it (transport/tcp_auth.c).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/tcp_auth.h"
#include "unit.h"
#include "util/secret.h"

/* Writes len bytes of data to a fresh file of mode in /tmp; path gets its name. */
static void write_file(char *path, size_t path_len, const void *data, size_t len, mode_t mode)
{
	snprintf(path, path_len, "/tmp/sc-secret-test.XXXXXX");
	int fd = mkstemp(path);
	CHECK_TRUE(fd >= 0);
	CHECK_TRUE(write(fd, data, len) == (ssize_t)len);
	CHECK_TRUE(fchmod(fd, mode) == 0);
	close(fd);
}

static void random_bytes(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)unit_rng();
}

UNIT_TEST(secret_file_checks)
{
	uint8_t bytes[32];
	random_bytes(bytes, sizeof(bytes));
	char path[64], err[512];
	scd_secret_t s;
	write_file(path, sizeof(path), bytes, sizeof(bytes), 0600);
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_OK);
	CHECK_TRUE(s.present);
	scd_secret_t same;
	scd_secret_from_bytes(&same, bytes, sizeof(bytes));
	CHECK_TRUE(!memcmp(s.master, same.master, sizeof(s.master)));
	/* readable by group or others: refused, naming the file and its mode */
	CHECK_TRUE(chmod(path, 0644) == 0);
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, path) && strstr(err, "mode 0644"), "error: %s", err);
	CHECK_TRUE(!s.present);
	CHECK_TRUE(chmod(path, 0640) == 0);
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_TRUE(chmod(path, 0400) == 0);
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_OK);
	unlink(path);
	/* missing, too short, a directory */
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_ERR_SYSTEM);
	CHECK_MSG(strstr(err, path), "error: %s", err);
	write_file(path, sizeof(path), bytes, SCD_SECRET_MIN_BYTES - 1, 0600);
	CHECK_EQ_INT(scd_secret_load(path, &s, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "has 15 bytes"), "error: %s", err);
	unlink(path);
	CHECK_EQ_INT(scd_secret_load("/tmp", &s, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "not a regular file"), "error: %s", err);
}

/* Loads path expecting the refusal of a file another user owns: the error names the file,
 * its owner's uid 0, the daemon's uid and says to chown it. 1 when it does. */
static int refused_for_its_owner(const char *path)
{
	char err[512], want[64];
	scd_secret_t s;
	snprintf(want, sizeof(want), "the daemon runs as uid %d", (int)geteuid());
	sc_status_t st = scd_secret_load(path, &s, err, sizeof(err));
	int ok = st == SC_ERR_SYSTEM && !s.present && strstr(err, path) &&
		 strstr(err, "belongs to uid 0") && strstr(err, want) && strstr(err, "chown");
	if (!ok)
		fprintf(stderr, "status %d, error: %s\n", st, err);
	return ok;
}

/* A file the daemon's user cannot open because another user owns it (root made it for a
 * service's user). As root, a child dropped to nobody opens a file of root's; otherwise
 * the test opens root's /etc/shadow. */
UNIT_TEST(secret_file_of_another_owner)
{
	if (geteuid() != 0) {
		if (access("/etc/shadow", F_OK) != 0 || access("/etc/shadow", R_OK) == 0)
			unit_skip("not root, and no unreadable file of root's to open");
		CHECK_TRUE(refused_for_its_owner("/etc/shadow"));
		return;
	}
	char path[64];
	uint8_t bytes[32];
	random_bytes(bytes, sizeof(bytes));
	write_file(path, sizeof(path), bytes, sizeof(bytes), 0600);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
			_exit(2);
		_exit(refused_for_its_owner(path) ? 0 : 1);
	}
	int status = 0;
	CHECK_TRUE(waitpid(pid, &status, 0) == pid);
	unlink(path);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child as nobody: status %d (1: wrong error, 2: cannot drop to nobody)",
		  status);
}

UNIT_TEST(secret_derived_keys)
{
	uint8_t a[32], b[32];
	random_bytes(a, sizeof(a));
	memcpy(b, a, sizeof(b));
	b[31] ^= 1;
	scd_secret_t sa, sa2, sb, none = {0};
	scd_secret_from_bytes(&sa, a, sizeof(a));
	scd_secret_from_bytes(&sa2, a, sizeof(a));
	scd_secret_from_bytes(&sb, b, sizeof(b));
	scd_curve_pair_t x, y;
	/* the same secret: the same keys on every node */
	CHECK_EQ_INT(scd_secret_curve_server(&sa, &x), SC_OK);
	CHECK_EQ_INT(scd_secret_curve_server(&sa2, &y), SC_OK);
	CHECK_TRUE(!strcmp(x.public_z85, y.public_z85) && !strcmp(x.secret_z85, y.secret_z85));
	CHECK_EQ_INT(strlen(x.public_z85), 40);
	CHECK_EQ_INT(scd_secret_curve_rank(&sa, 3, &x), SC_OK);
	CHECK_EQ_INT(scd_secret_curve_rank(&sa2, 3, &y), SC_OK);
	CHECK_TRUE(!strcmp(x.public_z85, y.public_z85));
	/* another rank, another use, another secret: other keys */
	CHECK_EQ_INT(scd_secret_curve_rank(&sa, 4, &y), SC_OK);
	CHECK_TRUE(strcmp(x.public_z85, y.public_z85) != 0);
	CHECK_EQ_INT(scd_secret_curve_server(&sa, &y), SC_OK);
	CHECK_TRUE(strcmp(x.public_z85, y.public_z85) != 0);
	CHECK_EQ_INT(scd_secret_curve_rank(&sb, 3, &y), SC_OK);
	CHECK_TRUE(strcmp(x.public_z85, y.public_z85) != 0);
	uint8_t ka[32], ka2[32], kb[32], k0[32], zero[32] = {0};
	scd_secret_data_key(&sa, ka);
	scd_secret_data_key(&sa2, ka2);
	scd_secret_data_key(&sb, kb);
	scd_secret_data_key(&none, k0);
	CHECK_TRUE(!memcmp(ka, ka2, 32));
	CHECK_TRUE(memcmp(ka, kb, 32) != 0);
	CHECK_TRUE(!memcmp(k0, zero, 32));
	CHECK_TRUE(memcmp(ka, zero, 32) != 0);
	/* no secret: no CURVE keys */
	CHECK_EQ_INT(scd_secret_curve_server(&none, &x), SC_ERR_INVALID);
}

UNIT_TEST(secret_tcp_proof)
{
	uint8_t key[32], other[32];
	random_bytes(key, sizeof(key));
	memcpy(other, key, sizeof(other));
	other[0] ^= 0x80;
	scd_tcp_auth_conn_t c = {
	    .world_id = unit_rng(), .connector_rank = 2, .acceptor_rank = 1};
	scd_tcp_auth_nonce(c.connector_nonce);
	scd_tcp_auth_nonce(c.acceptor_nonce);
	CHECK_TRUE(memcmp(c.connector_nonce, c.acceptor_nonce, 32) != 0);
	uint8_t mac[32];
	scd_tcp_auth_mac(key, SCD_TCP_AUTH_CONNECTOR, &c, mac);
	CHECK_TRUE(scd_tcp_auth_check(key, SCD_TCP_AUTH_CONNECTOR, &c, mac));
	/* the wrong secret, the other role (a reflected answer), another world, rank or
	 * nonce, a flipped bit: refused */
	CHECK_TRUE(!scd_tcp_auth_check(other, SCD_TCP_AUTH_CONNECTOR, &c, mac));
	CHECK_TRUE(!scd_tcp_auth_check(key, SCD_TCP_AUTH_ACCEPTOR, &c, mac));
	scd_tcp_auth_conn_t d = c;
	d.world_id ^= 1;
	CHECK_TRUE(!scd_tcp_auth_check(key, SCD_TCP_AUTH_CONNECTOR, &d, mac));
	d = c;
	d.connector_rank = 3;
	CHECK_TRUE(!scd_tcp_auth_check(key, SCD_TCP_AUTH_CONNECTOR, &d, mac));
	d = c;
	d.acceptor_nonce[7] ^= 4;
	CHECK_TRUE(!scd_tcp_auth_check(key, SCD_TCP_AUTH_CONNECTOR, &d, mac));
	mac[31] ^= 1;
	CHECK_TRUE(!scd_tcp_auth_check(key, SCD_TCP_AUTH_CONNECTOR, &c, mac));
}
