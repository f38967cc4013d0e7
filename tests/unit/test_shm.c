/* test_shm.c: a tensor's shared memory under a hostile or starved trainer (daemon/ctl/tensor.c,
 * util/shmguard.c): a shrunk object, a full /dev/shm, and faults that are not the daemon's. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl/tensor.h"
#include "shm_wake.h"
#include "unit.h"
#include "util/shmguard.h"

#include <uv.h>

static sc_status_t reg_n(scd_tensors_t *t, const char *name, uint64_t numel, scd_reg_t **r,
			 char *err, size_t err_len)
{
	scd_tensor_opts_t opts = {0};
	return scd_tensors_register(t, NULL, 0, name, SC_FLOAT32, numel, &opts, 1ull << 32, r,
				    err, err_len);
}

/* What a trainer can do with its descriptor: shrink the object under the daemon. */
static void shrink(const char *shm_name, off_t to)
{
	int fd = shm_open(shm_name, O_RDWR, 0);
	CHECK_MSG(fd >= 0, "shm_open(%s): %s", shm_name, strerror(errno));
	CHECK_EQ_INT(ftruncate(fd, to), 0);
	close(fd);
}

/* A trainer that truncates its tensor's object: the daemon's accesses read zeros instead of
 * ending in SIGBUS, and the registration reports the loss naming the tensor. */
UNIT_TEST(shm_truncated_by_trainer_is_an_error)
{
	scd_tensors_t *t;
	scd_reg_t *r, *other;
	char err[512] = "";
	uint64_t numel = 1 << 16;
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	CHECK_EQ_INT(reg_n(t, "g", numel, &r, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(reg_n(t, "h", numel, &other, err, sizeof(err)), SC_OK);
	float *d = r->data, *o = other->data;
	for (uint64_t i = 0; i < numel; i++)
		d[i] = o[i] = 1.0f;
	CHECK_TRUE(!scd_tensors_mem_lost(r, err, sizeof(err)));
	uint64_t before = scd_shmguard_faults();
	shrink(r->shm_name, 4096); /* the header page stays in the object */
	CHECK_TRUE(scd_tensors_mem_lost(r, err, sizeof(err)));
	CHECK_MSG(strstr(err, "'g'") && strstr(err, "local rank 0") && strstr(err, "truncated"),
		  "the error names the tensor, the rank and the cause: %s", err);
	CHECK_MSG(scd_shmguard_faults() > before, "the fault went through the handler");
	/* every access to the lost part completes, reading zeros, as the engine's would */
	double sum = 0;
	for (uint64_t i = 0; i < numel; i++)
		sum += ((volatile float *)d)[i];
	CHECK_NEAR(sum, 0.0, 0.0);
	for (uint64_t i = 0; i < numel; i++)
		((volatile float *)d)[i] = 2.0f;
	/* the other tensor is untouched */
	CHECK_TRUE(!scd_tensors_mem_lost(other, err, sizeof(err)));
	CHECK_NEAR(o[numel - 1], 1.0, 0.0);
	/* shrunk to nothing: the header page too */
	shrink(other->shm_name, 0);
	CHECK_NEAR(((volatile float *)o)[0], 0.0, 0.0);
	CHECK_TRUE(scd_tensors_mem_lost(other, err, sizeof(err)));
	CHECK_MSG(strstr(err, "'h'") && strstr(err, "from byte 4096 "),
		  "lost from the data: %s", err);
	scd_tensors_release(t, r);
	scd_tensors_release(t, other);
	/* a slot taken again starts clean */
	CHECK_EQ_INT(reg_n(t, "g", numel, &r, err, sizeof(err)), SC_OK);
	CHECK_TRUE(!scd_tensors_mem_lost(r, err, sizeof(err)));
	scd_tensors_destroy(t);
}

/* A SIGBUS outside the daemon's shared mappings still ends the process: the guard does
 * not hide real bugs. */
UNIT_TEST(shm_guard_leaves_other_faults_alone)
{
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		char path[] = "/tmp/sc_shmguard_XXXXXX";
		int fd = mkstemp(path);
		if (fd < 0 || scd_shmguard_install() != SC_OK || ftruncate(fd, 8192) != 0)
			_exit(2);
		unlink(path);
		volatile char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || ftruncate(fd, 0) != 0)
			_exit(2);
		(void)m[4096];
		_exit(0);
	}
	int status = 0;
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	/* SIGBUS, or SIGABRT where a sanitizer's handler was there first and reports it */
	CHECK_MSG(WIFSIGNALED(status) &&
		      (WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT),
		  "a fault outside the guarded mappings ends the process by its signal (status "
		  "%#x)",
		  status);
}

/* A /dev/shm too small for a registration: SC_ERR_NOMEM naming /dev/shm and the sizes, not
 * SIGBUS at the first touch. Needs root for a private mount of a small tmpfs there. */
UNIT_TEST(shm_full_devshm_is_nomem)
{
	if (geteuid() != 0)
		unit_skip("needs root to mount a 1 MiB tmpfs on /dev/shm in a mount namespace");
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		unit_skip("cannot make a private mount namespace: %s", strerror(errno));
	if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
		unit_skip("cannot mount a small tmpfs on /dev/shm: %s", strerror(errno));
	scd_tensors_t *t;
	scd_reg_t *r;
	char err[512] = "";
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	/* fits */
	CHECK_EQ_INT(reg_n(t, "small", 1024, &r, err, sizeof(err)), SC_OK);
	/* 4 MiB and a page: more than the whole mount */
	CHECK_EQ_INT(reg_n(t, "big", 1 << 20, &r, err, sizeof(err)), SC_ERR_NOMEM);
	CHECK_MSG(strstr(err, "'big'") && strstr(err, "/dev/shm") && strstr(err, "4198400") &&
		      strstr(err, "of 1048576 bytes free"),
		  "the error names the tensor, /dev/shm and the sizes: %s", err);
	CHECK_EQ_INT(scd_tensors_live(t), 1);
	scd_tensors_destroy(t);
}

/* max_registrations above what the kernel's vm.max_map_count leaves (65530 by default):
 * the limit is the kernel's, less headroom, and its refusal says so. */
UNIT_TEST(shm_registrations_below_max_map_count)
{
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
	unsigned long maps = 0;
	if (!f || fscanf(f, "%lu", &maps) != 1)
		unit_skip("cannot read /proc/sys/vm/max_map_count");
	fclose(f);
	if (maps > 200000)
		unit_skip("vm.max_map_count is %lu: too many mappings to reach here", maps);
	struct statvfs vfs; /* each registration of one element is an object of 8 KiB */
	if (statvfs("/dev/shm", &vfs) != 0 ||
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)maps * 8192 + (64u << 20))
		unit_skip("/dev/shm has less than the %lu MiB that %lu registrations take",
			  maps * 8192 / (1 << 20) + 64, maps);
	scd_tensors_t *t;
	scd_reg_t *r;
	char err[512] = "", name[32];
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	scd_tensors_reg_limit(t, UINT32_MAX);
	sc_status_t st = SC_OK;
	uint32_t n = 0;
	for (; n < maps + 10 && st == SC_OK; n++) {
		snprintf(name, sizeof(name), "t%u", n);
		st = reg_n(t, name, 1, &r, err, sizeof(err));
	}
	CHECK_MSG(st == SC_ERR_LIMIT && strstr(err, "vm.max_map_count"),
		  "registration %u of a kernel limit of %lu mappings: %s (%s)", n, maps,
		  sc_status_name(st), err);
	CHECK_MSG(n - 1 < maps && n - 1 >= maps / 2, "%u registrations held of %lu mappings",
		  n - 1, maps);
	/* the process can still map: the headroom is there */
	void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(m != MAP_FAILED);
	scd_tensors_destroy(t);
}

typedef struct {
	uv_loop_t *loop;
	int timer_fired_first, ready;
	sc_status_t st;
	uint64_t seq;
	scd_reg_t *r;
	uint64_t ready_ms;
} async_t;

static void on_ready(void *arg, struct scd_session *s, uint64_t seq, scd_reg_t *r,
		     sc_status_t st, const char *err)
{
	async_t *a = arg;
	if (s != arg) /* the session ended: nothing to answer, and the registration gone */
		r = NULL;
	a->ready = 1;
	a->st = st;
	a->seq = seq;
	a->r = r;
	a->ready_ms = uv_now(a->loop);
}

static void on_beat(uv_timer_t *h)
{
	async_t *a = h->data;
	if (!a->ready)
		a->timer_fired_first++;
}

/* A registration of 1 GiB is prepared on a worker: the call returns before its pages are
 * reserved, the loop's timers keep firing meanwhile (the heartbeats of a daemon), and the
 * callback brings the registration, found by id only from then on. */
UNIT_TEST(shm_big_registration_off_the_loop)
{
	uv_loop_t loop;
	uv_timer_t beat;
	async_t a = {.loop = &loop};
	scd_tensors_t *t;
	scd_tensor_opts_t opts = {0};
	char err[512] = "";
	CHECK_EQ_INT(uv_loop_init(&loop), 0);
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	uv_timer_init(&loop, &beat);
	beat.data = &a;
	uv_timer_start(&beat, on_beat, 1, 1);
	scd_reg_t *now = NULL;
	uint64_t t0 = uv_hrtime();
	sc_status_t st = scd_tensors_register_async(
	    t, &loop, (struct scd_session *)&a, 0, "big", SC_FLOAT32, 1ull << 28, &opts,
	    1ull << 32, 7, on_ready, &a, &now, err, sizeof(err));
	double call_ms = (double)(uv_hrtime() - t0) / 1e6;
	CHECK_MSG(st == SC_IN_PROGRESS, "register_async: %s", err);
	CHECK_TRUE(!a.ready && !now);
	CHECK_TRUE(scd_tensors_live(t) == 1);
	while (!a.ready)
		uv_run(&loop, UV_RUN_ONCE);
	double total_ms = (double)(uv_hrtime() - t0) / 1e6;
	CHECK_EQ_INT(a.st, SC_OK);
	CHECK_TRUE(a.seq == 7 && a.r && scd_tensors_reg(t, a.r->id) == a.r);
	CHECK_MSG(a.timer_fired_first >= 2 && call_ms < total_ms / 2,
		  "the loop ran %d timer callbacks while 1 GiB was prepared in %.1f ms (the "
		  "call took %.1f ms)",
		  a.timer_fired_first, total_ms, call_ms);
	CHECK_NEAR(((float *)a.r->data)[(1u << 28) - 1], 0.0, 0.0);
	/* one still being prepared when the session ends, and then the daemon stops: it is
	 * released, its callback has no session to answer, and nothing is left mapped */
	async_t b = {.loop = &loop};
	st = scd_tensors_register_async(t, &loop, (struct scd_session *)&b, 0, "big2",
					SC_FLOAT32, 1ull << 26, &opts, 1ull << 32, 8, on_ready,
					&b, &now, err, sizeof(err));
	CHECK_MSG(st == SC_IN_PROGRESS, "register_async: %s", err);
	scd_tensors_forget_session(t, (struct scd_session *)&b);
	uv_close((uv_handle_t *)&beat, NULL);
	scd_tensors_destroy(t);
	CHECK_TRUE(b.ready && !b.r);
	/* a small one is done at once, without the callback */
	CHECK_EQ_INT(scd_tensors_create(1, NULL, NULL, &t), SC_OK);
	async_t c = {.loop = &loop};
	st = scd_tensors_register_async(t, &loop, (struct scd_session *)&c, 0, "small",
					SC_FLOAT32, 1024, &opts, 1ull << 32, 9, on_ready, &c,
					&now, err, sizeof(err));
	CHECK_MSG(st == SC_OK && now && !c.ready, "register_async: %s", err);
	CHECK_TRUE(scd_tensors_reg(t, now->id) == now);
	scd_tensors_destroy(t);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
}

/* The completion's futex (proto/shm_wake.h): another process's sc_shm_done wakes a waiter
 * and names the handle; a wait on an unchanged word ends at its deadline; and once the
 * header's page is gone (a trainer truncated its object) every call fails quietly instead
 * of raising SIGBUS, as the library relies on (this test runs in a forked child: a SIGBUS
 * fails it). */
UNIT_TEST(shm_wake_across_processes_and_truncation)
{
	int fd = memfd_create("sc-wake", 0);
	CHECK_MSG(fd >= 0, "memfd_create: %s", strerror(errno));
	CHECK_EQ_INT(ftruncate(fd, 4096), 0);
	sc_shm_header_t *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK_TRUE(h != MAP_FAILED);
	CHECK_TRUE(sc_shm_alive(h));
	uint32_t seen = sc_shm_done_seq(h);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		usleep(50000);
		sc_shm_done(h, 42);
		_exit(0);
	}
	struct timespec t0, t1, dl;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dl = t0;
	dl.tv_sec += 10;
	while (sc_shm_done_seq(h) == seen) /* a signal may end a wait early: look again */
		CHECK_EQ_INT(sc_shm_wait(h, seen, &dl), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK_MSG(t1.tv_sec - t0.tv_sec < 5, "the wake came %ld s late",
		  (long)(t1.tv_sec - t0.tv_sec));
	CHECK_TRUE(sc_shm_is_done(h, 42));
	CHECK_TRUE(!sc_shm_is_done(h, 41) && !sc_shm_is_done(h, 0));
	CHECK_EQ_INT((int)(sc_shm_done_seq(h) - seen), 1);
	int status = 0;
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* nobody bumps the word: the wait ends at its deadline */
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_nsec += 50000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	CHECK_EQ_INT(sc_shm_wait(h, sc_shm_done_seq(h), &dl), ETIMEDOUT);
	sc_shm_wake(h); /* this process's own bump, as the library's I/O thread makes */
	CHECK_EQ_INT((int)(sc_shm_done_seq(h) - seen), 2);
	/* the page gone: no SIGBUS, and a wait does not sleep */
	CHECK_EQ_INT(ftruncate(fd, 0), 0);
	CHECK_TRUE(!sc_shm_alive(h));
	sc_shm_wake(h);
	dl.tv_sec += 30;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ_INT(sc_shm_wait(h, 0, &dl), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK_TRUE(t1.tv_sec - t0.tv_sec < 2);
	munmap(h, 4096);
	close(fd);
}
