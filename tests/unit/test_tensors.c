/* test_tensors.c: the node's registrations (daemon/ctl/tensor.c): the registration limit,
 * unguessable shared-memory names, and the runtime directory's lock (util/dirlock.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl/tensor.h"
#include "unit.h"
#include "util/dirlock.h"

static sc_status_t reg(scd_tensors_t *t, const char *name, int local_rank, scd_reg_t **r,
		       char *err, size_t err_len)
{
	scd_tensor_opts_t opts = {0};
	return scd_tensors_register(t, NULL, local_rank, name, SC_FLOAT32, 16, &opts, 1 << 20,
				    r, err, err_len);
}

/* One registration past max_registrations is SC_ERR_LIMIT naming the key; releasing one
 * makes room again. */
UNIT_TEST(tensors_registration_limit)
{
	scd_tensors_t *t;
	scd_reg_t *r[4];
	char err[512] = "";
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	scd_tensors_reg_limit(t, 3);
	CHECK_EQ_INT(reg(t, "a", 0, &r[0], err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "b", 0, &r[1], err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "c", 0, &r[2], err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_tensors_live(t), 3);
	CHECK_EQ_INT(reg(t, "d", 0, &r[3], err, sizeof(err)), SC_ERR_LIMIT);
	CHECK_MSG(strstr(err, "max_registrations") && strstr(err, "'d'") && strstr(err, " 3 "),
		  "the error names the key, the tensor and the count: %s", err);
	uint32_t freed = r[1]->id;
	scd_tensors_release(t, r[1]);
	CHECK_EQ_INT(scd_tensors_live(t), 2);
	CHECK_EQ_INT(reg(t, "d", 0, &r[3], err, sizeof(err)), SC_OK);
	/* the released slot is taken again: churn does not grow the table */
	CHECK_EQ_INT(r[3]->id, freed);
	CHECK_TRUE(scd_tensors_reg(t, freed) == r[3]);
	for (int k = 0; k < 1000; k++) {
		scd_tensors_release(t, r[3]);
		CHECK_EQ_INT(reg(t, "d", 0, &r[3], err, sizeof(err)), SC_OK);
		CHECK_MSG(r[3]->id <= 3, "registration %d took id %u of a table of 3", k,
			  r[3]->id);
	}
	scd_tensors_destroy(t);
}

/* A name with a control byte (a newline or an escape would forge the log's lines; a NUL
 * cannot reach the daemon but ends the library's string) is refused, the error naming the
 * byte and never holding it; printable names, UTF-8 included, are taken. */
UNIT_TEST(tensors_names_control_bytes_refused)
{
	scd_tensors_t *t;
	scd_reg_t *r;
	char err[512] = "";
	static const char *const bad[] = {"line\nforged", "esc\x1b[31mred", "tab\there",
					  "del\x7f", "\r"};
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		CHECK_EQ_INT(reg(t, bad[i], 0, &r, err, sizeof(err)), SC_ERR_INVALID);
		CHECK_MSG(strstr(err, "control character 0x"), "name %zu: %s", i, err);
		for (const char *p = err; *p; p++)
			CHECK_MSG((unsigned char)*p >= 0x20 && *p != 0x7f,
				  "name %zu: the error holds the control byte 0x%02x", i,
				  (unsigned char)*p);
	}
	CHECK_EQ_INT(scd_tensors_live(t), 0);
	CHECK_EQ_INT(reg(t, "layer.0/weight", 0, &r, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "g\xc3\xa9n\xc3\xa9ral", 0, &r, err, sizeof(err)), SC_OK);
	scd_tensors_destroy(t);
}

/* The names carry the daemon's pid first (stale objects are found by it) and then a part
 * nobody else can guess: two registrations never differ only in their sequence number. */
UNIT_TEST(tensors_shm_names_unpredictable)
{
	scd_tensors_t *t;
	scd_reg_t *a, *b;
	char err[512] = "", pre[64];
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	CHECK_EQ_INT(reg(t, "x", 0, &a, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "y", 0, &b, err, sizeof(err)), SC_OK);
	snprintf(pre, sizeof(pre), "/sparsecomm.%d.", (int)getpid());
	CHECK_MSG(!strncmp(a->shm_name, pre, strlen(pre)), "name %s", a->shm_name);
	const char *ra = strrchr(a->shm_name, '.'), *rb = strrchr(b->shm_name, '.');
	CHECK_MSG(strlen(ra) == 17 && strlen(rb) == 17 && strcmp(ra, rb) != 0,
		  "random parts of 16 hex digits that differ: %s %s", a->shm_name, b->shm_name);
	char path[128];
	struct stat st;
	snprintf(path, sizeof(path), "/dev/shm%s", a->shm_name);
	CHECK_MSG(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "%s is mode 0600", path);
	scd_tensors_destroy(t);
	CHECK_MSG(stat(path, &st) != 0, "%s removed with the table", path);
}

/* A second lock of the same runtime directory fails naming the directory and the pid of
 * the holder; once the holder lets go, the directory can be taken again. */
UNIT_TEST(dirlock_one_daemon_per_runtime_dir)
{
	char dir[] = "/tmp/sc-dirlock-XXXXXX", err[512] = "", pid[32];
	CHECK_TRUE(mkdtemp(dir) != NULL);
	int fd1 = -1, fd2 = -1;
	CHECK_EQ_INT(scd_dirlock_take(dir, &fd1, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_dirlock_take(dir, &fd2, err, sizeof(err)), SC_ERR_BUSY);
	snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
	CHECK_MSG(strstr(err, dir) && strstr(err, pid), "the error names %s and %s: %s", dir,
		  pid, err);
	close(fd1);
	CHECK_EQ_INT(scd_dirlock_take(dir, &fd2, err, sizeof(err)), SC_OK);
	close(fd2);
	char lock[64];
	snprintf(lock, sizeof(lock), "%s/sparsecommd.lock", dir);
	unlink(lock);
	rmdir(dir);
}
