/* test_tensors.c: the node's registrations (daemon/ctl/tensor.c): the registration limit,
 * the releases a node remembers, unguessable shared-memory names, cuda registrations
 * freed off the caller's thread (device/cuda_free.c), and the runtime directory's lock
 * (util/dirlock.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl/tensor.h"
#include "device/cuda_free.h"
#include "scg_host_ipc.h"
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

/* A trainer that releases a name while another trainer of the node keeps it is
 * remembered by the node tensor (let_go: its next registration replaces its old one, as
 * a new shape does), however many names it releases meanwhile; registering the name
 * again forgets it, and the last trainer's release frees the node tensor with it. */
UNIT_TEST(tensors_release_remembered_while_another_keeps_it)
{
	scd_tensors_t *t;
	scd_reg_t *x0, *x1, *o;
	char err[512] = "", name[32];
	CHECK_EQ_INT(scd_tensors_create(2, NULL, NULL, &t), SC_OK);
	CHECK_EQ_INT(reg(t, "x", 0, &x0, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "x", 1, &x1, err, sizeof(err)), SC_OK);
	scd_ntensor_t *nt = scd_tensors_find(t, "x");
	CHECK_TRUE(nt && nt->let_go == 0);
	scd_tensors_release(t, x0);
	CHECK_TRUE(scd_tensors_find(t, "x") == nt && nt->let_go == 1);
	for (int k = 0; k < 200; k++) { /* past any bounded list of released names */
		snprintf(name, sizeof(name), "churn.%d", k);
		CHECK_EQ_INT(reg(t, name, 0, &o, err, sizeof(err)), SC_OK);
		scd_tensors_release(t, o);
		CHECK_TRUE(scd_tensors_find(t, name) == NULL);
	}
	CHECK_TRUE(nt->let_go == 1);
	CHECK_EQ_INT(reg(t, "x", 0, &x0, err, sizeof(err)), SC_OK);
	CHECK_TRUE(nt->let_go == 0);
	scd_tensors_release(t, x1);
	CHECK_TRUE(nt->let_go == 2);
	scd_tensors_release(t, x0);
	CHECK_TRUE(scd_tensors_find(t, "x") == NULL);
	scd_tensors_destroy(t);
}

/* The failed steps a trainer owes for a name outlive the node tensor: released by every
 * trainer of the node, registered again, the name still has them (owed.h); they go when the
 * trainer that owes them is forgiven (it ended or joined), held or released. */
UNIT_TEST(tensors_owed_steps_kept_past_the_release)
{
	scd_tensors_t *t;
	scd_reg_t *a0, *a1;
	char err[512] = "";
	CHECK_EQ_INT(scd_tensors_create(2, NULL, NULL, &t), SC_OK);
	CHECK_EQ_INT(reg(t, "a", 0, &a0, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg(t, "a", 1, &a1, err, sizeof(err)), SC_OK);
	scd_ntensor_t *nt = scd_tensors_find(t, "a");
	nt->carry.count[0] = 2;
	nt->carry.status = SC_ERR_STALLED;
	snprintf(nt->carry.msg, sizeof(nt->carry.msg), "step failed");
	scd_tensors_release(t, a0);
	scd_tensors_release(t, a1);
	CHECK_TRUE(scd_tensors_find(t, "a") == NULL);
	CHECK_EQ_INT(reg(t, "a", 1, &a1, err, sizeof(err)), SC_OK);
	nt = scd_tensors_find(t, "a");
	CHECK_TRUE(nt && nt->carry.count[0] == 2 && nt->carry.count[1] == 0);
	CHECK_TRUE(nt->carry.status == SC_ERR_STALLED && !strcmp(nt->carry.msg, "step failed"));
	/* forgiven while held, and while released */
	scd_tensors_forgive(t, 0);
	CHECK_TRUE(nt->carry.count[0] == 0);
	nt->carry.count[1] = 1;
	scd_tensors_release(t, a1);
	scd_tensors_forgive(t, 1);
	CHECK_EQ_INT(reg(t, "a", 0, &a0, err, sizeof(err)), SC_OK);
	nt = scd_tensors_find(t, "a");
	CHECK_TRUE(nt && nt->carry.count[1] == 0);
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

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Whether the shared object of the host build's IPC handle h exists. */
static int handle_object_exists(const unsigned char *h)
{
	scg_host_ipc_t hh;
	char path[128];
	struct stat st;
	memcpy(&hh, h, sizeof(hh));
	snprintf(path, sizeof(path), "/dev/shm%s", hh.name);
	return stat(path, &st) == 0;
}

/*
 * A cuda registration (through the host build of the GPU library, next to this runner) is
 * freed off the caller's thread: releasing it, as unregistering or a trainer's exit does,
 * returns at once while the free, which here takes 1 s as cudaFree waits for the device
 * ($SCG_HOST_FREE_DELAY_MS), runs on the release thread (cuda_free.c); the memory held is
 * whole IPC granules; destroying the table waits for every free, so no exported object
 * outlives it.
 */
UNIT_TEST_TIMEOUT(tensors_gpu_free_off_the_caller, 60)
{
	char lib[4200], exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK_TRUE(n > 0);
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	snprintf(lib, sizeof(lib), "%s/../lib/libsparsecomm-cuda-host.so", exe);
	if (access(lib, R_OK) != 0)
		unit_skip("%s is not built (needs CCCL)", lib);
	setenv("SPARSECOMM_CUDA_LIB", lib, 1);
	setenv("SCG_HOST_FREE_DELAY_MS", "1000", 1);
	scd_tensors_t *t;
	scd_reg_t *a, *b;
	char err[512] = "";
	scd_tensor_opts_t opts = {.device_kind = SC_DEVICE_CUDA, .device_uuid_len = 16};
	scg_host_uuid(0, opts.device_uuid);
	CHECK_EQ_INT(scd_tensors_create(2, NULL, NULL, &t), SC_OK);
	scd_tensors_gpu_policy(t, 1, 0);
	sc_status_t st = scd_tensors_register(t, NULL, 0, "g", SC_FLOAT32, 16, &opts, 1 << 20,
					      &a, err, sizeof(err));
	CHECK_MSG(st == SC_OK, "%s", err);
	CHECK_EQ_INT(scd_tensors_register(t, NULL, 1, "g", SC_FLOAT32, 16, &opts, 1 << 20, &b,
					  err, sizeof(err)),
		     SC_OK);
	CHECK_TRUE(a->gpu_mem && b->gpu_mem);
	CHECK_TRUE(scd_tensors_gpu_bytes(t) == 2 * SCG_IPC_GRANULARITY_BYTES);
	unsigned char ha[SCG_IPC_HANDLE_BYTES], hb[SCG_IPC_HANDLE_BYTES];
	memcpy(ha, a->mem_ipc, sizeof(ha));
	memcpy(hb, b->mem_ipc, sizeof(hb));
	CHECK_TRUE(handle_object_exists(ha) && handle_object_exists(hb));
	uint64_t q0, d0, q1, d1;
	scd_cuda_free_counts(&q0, &d0);
	double t0 = now_s();
	scd_tensors_release(t, a);
	double took = now_s() - t0;
	CHECK_MSG(took < 0.5, "releasing a cuda registration took %.3f s on the caller", took);
	CHECK_MSG(handle_object_exists(ha), "the 1 s free already ran on the caller's thread");
	CHECK_TRUE(scd_tensors_gpu_bytes(t) == SCG_IPC_GRANULARITY_BYTES);
	scd_cuda_free_counts(&q1, &d1);
	CHECK_TRUE(q1 == q0 + 1);
	CHECK_EQ_INT(scd_cuda_free_drain(10000), 0);
	CHECK_MSG(!handle_object_exists(ha), "the object is unlinked once the free ran");
	scd_tensors_destroy(t); /* b's free, waited for */
	CHECK_MSG(!handle_object_exists(hb), "the table's destruction left b's object behind");
	scd_cuda_free_counts(&q1, &d1);
	CHECK_TRUE(q1 == q0 + 2 && d1 == q1);
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
