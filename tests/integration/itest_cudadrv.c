/*
 * itest_cudadrv.c: the library's CUDA driver plumbing (client/lib/cuda.c, internal API)
 * against the driver stand-in (build/lib/libcuda-host.so), with this process playing the
 * daemon: it creates the host build's stand-in handles (gpu/scg_host_ipc.h) for a memory
 * object and two events, as the daemon's host GPU library does, and checks what the
 * library does with them. Needs no daemon support for cuda tensors.
 *
 *   cuda-driver DRIVER LOG: the allocation is mapped once, at the handle's object; the
 *       ready event is recorded once per call; waiting for done fails unless the "daemon"
 *       recorded it since the last wait; an open that fails half way (the done event's
 *       object missing) closes what it opened; the stand-in's LOG balances.
 */
#include "itest.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "scg_host_ipc.h"

/* The "daemon's" side of one handle: the object, mapped, and its handle. */
typedef struct {
	scg_host_ipc_t h;
	void *p;
} fake_t;

static void fake_make(fake_t *f, uint32_t magic, const char *tag, size_t bytes)
{
	memset(f, 0, sizeof(*f));
	f->h.magic = magic;
	f->h.bytes = bytes;
	snprintf(f->h.name, sizeof(f->h.name), "/sc-itest-drv.%d.%s", (int)getpid(), tag);
	int fd = shm_open(f->h.name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
		IT_FAIL("cannot create shared memory %s", f->h.name);
	f->p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (f->p == MAP_FAILED)
		IT_FAIL("cannot map %s", f->h.name);
}

static void fake_free(fake_t *f)
{
	munmap(f->p, f->h.bytes);
	shm_unlink(f->h.name);
}

static uint64_t records(const fake_t *f)
{
	return __atomic_load_n(&((scg_host_event_t *)f->p)->records, __ATOMIC_ACQUIRE);
}

static void record(fake_t *f)
{
	__atomic_add_fetch(&((scg_host_event_t *)f->p)->records, 1, __ATOMIC_ACQ_REL);
}

static void expect_log(const char *path, const char *kind, const char *arg, int n)
{
	int got = it_cuda_log_count(path, kind, arg);
	if (got != n)
		IT_FAIL("log %s: %d '%s %s' lines, expected %d", path, got, kind,
			arg ? arg : "*", n);
}

int it_cuda_driver(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: cuda-driver DRIVER LOG");
	const char *log = argv[2];
	fake_t mem, ready, done;
	scl_cuda_t *g = NULL;
	sc_status_t st;

	setenv("SPARSECOMM_CUDA_DRIVER", argv[1], 1);
	setenv("SC_CUDA_HOST_LOG", log, 1);
	unlink(log);
	fake_make(&mem, SCG_HOST_IPC_MEM, "mem", 8192);
	fake_make(&ready, SCG_HOST_IPC_EVENT, "ready", sizeof(scg_host_event_t));
	fake_make(&done, SCG_HOST_IPC_EVENT, "done", sizeof(scg_host_event_t));
	IT_CHECK_SC(scl_cuda_check("cuda-driver", 0), "loading the driver stand-in");
	IT_CHECK_SC(scl_cuda_open("cuda-driver", 0, &mem.h, &ready.h, &done.h, &g), "opening");
	float *base = scl_cuda_base(g);
	base[5] = 42.0f; /* the stand-in's device pointer is a mapping of the object */
	if (((float *)mem.p)[5] != 42.0f)
		IT_FAIL("the mapped allocation is not the handle's object");
	/* done was never recorded: waiting for it is a protocol error the stand-in reports */
	st = scl_cuda_sync_done(g, "cuda-driver");
	if (st != SC_ERR_SYSTEM || !strstr(sc_last_error(), "cuEventSynchronize"))
		IT_FAIL("waiting for an unrecorded done event: %s (%s)", sc_status_name(st),
			sc_last_error());
	IT_CHECK_SC(scl_cuda_record_ready(g, NULL, "cuda-driver"), "recording ready");
	if (records(&ready) != 1)
		IT_FAIL("ready recorded %llu times, expected 1",
			(unsigned long long)records(&ready));
	record(&done);
	IT_CHECK_SC(scl_cuda_sync_done(g, "cuda-driver"), "waiting for a recorded done");
	st = scl_cuda_stream_wait_done(g, NULL, "cuda-driver");
	if (st != SC_ERR_SYSTEM || !strstr(sc_last_error(), "cuStreamWaitEvent"))
		IT_FAIL("a stream wait on done without a new record: %s (%s)",
			sc_status_name(st), sc_last_error());
	record(&done);
	IT_CHECK_SC(scl_cuda_stream_wait_done(g, NULL, "cuda-driver"), "stream wait on done");
	scl_cuda_close(g);
	expect_log(log, "mem_open", mem.h.name, 1);
	expect_log(log, "mem_close", mem.h.name, 1);
	expect_log(log, "event_open", NULL, 2);
	expect_log(log, "event_destroy", NULL, 2);
	expect_log(log, "ctx_retain", "0", 1);
	expect_log(log, "ctx_release", "0", 1);

	/* half way: the done event's object is gone; what was opened is closed */
	fake_free(&done);
	g = NULL;
	st = scl_cuda_open("cuda-driver", 0, &mem.h, &ready.h, &done.h, &g);
	if (st != SC_ERR_SYSTEM || g || !strstr(sc_last_error(), "done event"))
		IT_FAIL("opening with the done event's object gone: %s (%s)",
			sc_status_name(st), sc_last_error());
	expect_log(log, "mem_open", mem.h.name, 2);
	expect_log(log, "mem_close", mem.h.name, 2);
	expect_log(log, "event_open", ready.h.name, 2);
	expect_log(log, "event_destroy", ready.h.name, 2);
	expect_log(log, "ctx_release", "0", 2);
	/* a handle that is no memory handle */
	st = scl_cuda_open("cuda-driver", 0, &ready.h, &ready.h, &ready.h, &g);
	if (st != SC_ERR_SYSTEM || !strstr(sc_last_error(), "cuIpcOpenMemHandle"))
		IT_FAIL("an event handle as the memory handle: %s (%s)", sc_status_name(st),
			sc_last_error());
	expect_log(log, "ctx_retain", "0", 3);
	expect_log(log, "ctx_release", "0", 3);
	fake_free(&mem);
	fake_free(&ready);
	it_pass();
}
