/*
 * itest_cudafake.c: the library's whole cuda-tensor path (registration, submission,
 * completion, sc_finalize, a daemon that goes away) against a fake daemon in a thread of
 * this process, so it runs before any daemon serves GPU tensors. The fake speaks the
 * control protocol (proto/sparsecomm.proto) on its own socket and hands out what the
 * daemon's host GPU library would: a header-only shared object laid out by
 * sc_shm_layout_device, a memory object and two event objects named by stand-in IPC
 * handles (gpu/scg_host_ipc.h). The library maps them through the CUDA driver stand-in
 * (build/lib/libcuda-host.so), whose log must balance.
 *
 *   cuda-fake DRIVER LOG: an allreduce doubles the tensor (the fake's reduction) only after
 *       the library recorded the ready event; sc_wait, sc_poll and sc_stream_wait wait for
 *       the done event; replies that do not match (another GPU, short handles) are refused
 *       with nothing left open; after the fake daemon vanishes, operations fail and
 *       sc_finalize still closes everything.
 */
#include "itest.h"
#include "scg_host_ipc.h"
#include "shm_layout.h"
#include "sparsecomm.pb-c.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zmq.h>

#define FAKE_TENSORS 8
#define FAKE_N	     1000
#define FAKE_COO     100

/* One registered tensor of the fake: its objects, mapped. */
typedef struct {
	scg_host_ipc_t h[4]; /* header (magic unused), memory, ready, done */
	void *p[4];
	uint64_t ready_seen;
} fake_tensor_t;

typedef struct {
	char endpoint[256];
	int die_after_register; /* close the socket once a tensor is registered */
	void *zctx, *sock;
	pthread_t thread;
	volatile int stop;
	fake_tensor_t t[FAKE_TENSORS];
	int ntensors;
	char failure[256]; /* what the fake found wrong in the library's requests */
} fake_t;

static void *obj_make(scg_host_ipc_t *h, uint32_t magic, const char *tag, int id, size_t bytes)
{
	h->magic = magic;
	h->bytes = bytes;
	snprintf(h->name, sizeof(h->name), "/sc-itest-fake.%d.%d.%s", (int)getpid(), id, tag);
	int fd = shm_open(h->name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
		IT_FAIL("fake daemon: cannot create %s", h->name);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		IT_FAIL("fake daemon: cannot map %s", h->name);
	return p;
}

static void fake_send(fake_t *f, zmq_msg_t *id, Sparsecomm__DaemonMsg *m)
{
	size_t len = sparsecomm__daemon_msg__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		IT_FAIL("fake daemon: out of memory");
	sparsecomm__daemon_msg__pack(m, buf);
	zmq_send(f->sock, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
	zmq_send(f->sock, buf, len, 0);
	free(buf);
}

/* A registration: the header page, the allocation and the events. A name starting with
 * "bad-ordinal" gets a header on GPU 5, "bad-handle" a memory handle of 10 bytes. */
static void fake_register(fake_t *f, zmq_msg_t *id, uint64_t seq,
			  const Sparsecomm__RegisterTensor *r)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__RegisterReply rr = SPARSECOMM__REGISTER_REPLY__INIT;
	Sparsecomm__ErrorReply er = SPARSECOMM__ERROR_REPLY__INIT;
	int k = f->ntensors;

	m.seq = seq;
	if (!r->opts || r->opts->device_kind != SC_DEVICE_CUDA || k == FAKE_TENSORS ||
	    r->dtype != SC_FLOAT32) {
		er.status = SC_ERR_UNSUPPORTED;
		er.message = "the fake daemon serves float32 cuda tensors only";
		m.body_case = SPARSECOMM__DAEMON_MSG__BODY_ERROR;
		m.error = &er;
		fake_send(f, id, &m);
		return;
	}
	fake_tensor_t *t = &f->t[f->ntensors++];
	sc_shm_header_t *h = obj_make(&t->h[0], 0, "h", k, SC_SHM_DATA_OFFSET);
	uint64_t alloc = sc_shm_layout_device(h, r->numel, 4, r->opts->coo_capacity, 1);
	h->magic = SC_SHM_MAGIC;
	h->version = SC_SHM_VERSION;
	h->header_bytes = sizeof(*h);
	h->dtype = r->dtype;
	h->numel = r->numel;
	h->result_nnz = UINT64_MAX;
	h->device_kind = SC_DEVICE_CUDA;
	h->device_ordinal = strncmp(r->name, "bad-ordinal", 11) ? r->opts->device_ordinal : 5;
	t->p[1] = obj_make(&t->h[1], SCG_HOST_IPC_MEM, "mem", k, alloc);
	t->p[2] = obj_make(&t->h[2], SCG_HOST_IPC_EVENT, "ready", k, sizeof(scg_host_event_t));
	t->p[3] = obj_make(&t->h[3], SCG_HOST_IPC_EVENT, "done", k, sizeof(scg_host_event_t));
	rr.tensor_id = (uint32_t)k;
	rr.shm_name = t->h[0].name;
	rr.shm_bytes = SC_SHM_DATA_OFFSET;
	rr.mem_ipc.data = (uint8_t *)&t->h[1];
	rr.mem_ipc.len = strncmp(r->name, "bad-handle", 10) ? sizeof(t->h[1]) : 10;
	rr.ready_event_ipc.data = (uint8_t *)&t->h[2];
	rr.ready_event_ipc.len = sizeof(t->h[2]);
	rr.done_event_ipc.data = (uint8_t *)&t->h[3];
	rr.done_event_ipc.len = sizeof(t->h[3]);
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_REG;
	m.reg = &rr;
	fake_send(f, id, &m);
	if (f->die_after_register)
		f->stop = 1;
}

/* An allreduce: refused unless the ready event was recorded since the last one; the
 * "reduction" doubles the data; done is recorded before the completion goes out. */
static void fake_allreduce(fake_t *f, zmq_msg_t *id, const Sparsecomm__Collective *a)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__Completion cp = SPARSECOMM__COMPLETION__INIT;

	cp.handle = a->handle;
	cp.status = SC_OK;
	if (a->tensor_id >= (uint32_t)f->ntensors) {
		cp.status = SC_ERR_NOT_FOUND;
		cp.error = "fake daemon: no such tensor";
	} else {
		fake_tensor_t *t = &f->t[a->tensor_id];
		scg_host_event_t *ready = t->p[2], *done = t->p[3];
		uint64_t n = __atomic_load_n(&ready->records, __ATOMIC_ACQUIRE);
		if (n == t->ready_seen) {
			cp.status = SC_ERR_PROTOCOL;
			cp.error = "fake daemon: submitted without recording the ready event";
			snprintf(f->failure, sizeof(f->failure), "%s", cp.error);
		} else {
			float *x = t->p[1];
			t->ready_seen = n;
			for (size_t i = 0; i < FAKE_N; i++)
				x[i] *= 2.0f;
			__atomic_add_fetch(&done->records, 1, __ATOMIC_ACQ_REL);
		}
	}
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_COMPLETION;
	m.completion = &cp;
	fake_send(f, id, &m);
}

static void fake_hello(fake_t *f, zmq_msg_t *id, uint64_t seq)
{
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__HelloReply hr = SPARSECOMM__HELLO_REPLY__INIT;

	hr.protocol_version = SC_PROTOCOL_VERSION;
	hr.size = hr.local_size = hr.node_count = 1;
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_HELLO;
	m.hello = &hr;
	fake_send(f, id, &m);
}

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	double deadline = it_now_s() + 60;

	while (!f->stop && it_now_s() < deadline) {
		zmq_pollitem_t it = {f->sock, 0, ZMQ_POLLIN, 0};
		if (zmq_poll(&it, 1, 100) <= 0)
			continue;
		zmq_msg_t id, body;
		zmq_msg_init(&id);
		zmq_msg_init(&body);
		if (zmq_msg_recv(&id, f->sock, 0) >= 0 &&
		    zmq_msg_recv(&body, f->sock, 0) >= 0) {
			Sparsecomm__ClientMsg *m = sparsecomm__client_msg__unpack(
			    NULL, zmq_msg_size(&body), zmq_msg_data(&body));
			if (m && m->body_case == SPARSECOMM__CLIENT_MSG__BODY_HELLO)
				fake_hello(f, &id, m->seq);
			else if (m && m->body_case == SPARSECOMM__CLIENT_MSG__BODY_REG)
				fake_register(f, &id, m->seq, m->reg);
			else if (m && m->body_case == SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE)
				fake_allreduce(f, &id, m->collective);
			if (m)
				sparsecomm__client_msg__free_unpacked(m, NULL);
		}
		zmq_msg_close(&id);
		zmq_msg_close(&body);
	}
	zmq_close(f->sock); /* a daemon that is gone: the client sees the disconnection */
	__atomic_store_n(&f->sock, NULL, __ATOMIC_RELEASE);
	return NULL;
}

static void fake_start(fake_t *f, const char *log, int die_after_register)
{
	int zero = 0;

	memset(f, 0, sizeof(*f));
	f->die_after_register = die_after_register;
	snprintf(f->endpoint, sizeof(f->endpoint), "ipc://%s.%s.sock", log,
		 die_after_register ? "die" : "fake");
	f->zctx = zmq_ctx_new();
	f->sock = zmq_socket(f->zctx, ZMQ_ROUTER);
	zmq_setsockopt(f->sock, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_bind(f->sock, f->endpoint) < 0)
		IT_FAIL("fake daemon: cannot bind %s: %s", f->endpoint,
			zmq_strerror(zmq_errno()));
	if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
		IT_FAIL("fake daemon: cannot start its thread");
}

static void fake_stop(fake_t *f)
{
	f->stop = 1;
	pthread_join(f->thread, NULL);
	zmq_ctx_term(f->zctx);
	for (int k = 0; k < f->ntensors; k++)
		for (int i = 0; i < 4; i++) {
			munmap(f->t[k].p[i], f->t[k].h[i].bytes);
			shm_unlink(f->t[k].h[i].name);
		}
	if (f->failure[0])
		IT_FAIL("%s", f->failure);
}

static sc_status_t reg(sc_client_t *c, const char *name, int ordinal, sc_tensor_t **t_p)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};

	o.device = SC_DEVICE_CUDA;
	o.device_ordinal = ordinal;
	o.coo_capacity = FAKE_COO;
	return sc_register_ex(c, name, SC_FLOAT32, FAKE_N, &o, t_p);
}

/* Fills x with i, submits, collects with how (0 sc_wait, 1 sc_poll, 2 sc_stream_wait),
 * and checks the doubled values. */
static void round_trip(sc_client_t *c, sc_tensor_t *t, int how)
{
	float *x = sc_tensor_data(t);
	sc_handle_t h = 0;
	sc_status_t st;

	for (int i = 0; i < FAKE_N; i++)
		x[i] = (float)i;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce (collect %d)", how);
	if (how == 1) {
		double deadline = it_now_s() + 30;
		while ((st = sc_poll(c, h)) == SC_IN_PROGRESS && it_now_s() < deadline)
			it_sleep_ms(1);
	} else if (how == 2) {
		st = sc_stream_wait(c, h, NULL, IT_OP_TIMEOUT_MS);
	} else {
		st = sc_wait(c, h, IT_OP_TIMEOUT_MS);
	}
	IT_CHECK_SC(st, "collecting the allreduce (collect %d)", how);
	for (int i = 0; i < FAKE_N; i++)
		if (x[i] != 2.0f * (float)i)
			IT_FAIL("collect %d: element %d is %g, expected %g", how, i, x[i],
				2.0 * i);
}

int it_cuda_fake(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: cuda-fake DRIVER LOG");
	const char *log = argv[2];
	sc_client_t *c = NULL;
	sc_tensor_t *t = NULL, *bad = NULL;
	fake_t f;
	int ordinal = -1;
	sc_status_t st;

	setenv("SPARSECOMM_CUDA_DRIVER", argv[1], 1);
	setenv("SC_CUDA_HOST_LOG", log, 1);
	unlink(log);
	fake_start(&f, log, 0);
	IT_CHECK_SC(sc_connect(f.endpoint, IT_CONNECT_TIMEOUT_MS, &c),
		    "connecting to the fake");
	IT_CHECK_SC(reg(c, "w", 0, &t), "registering 'w' on cuda:0");
	if (sc_tensor_device(t, &ordinal) != SC_DEVICE_CUDA || ordinal != 0)
		IT_FAIL("'w': sc_tensor_device %d ordinal %d", (int)sc_tensor_device(t, NULL),
			ordinal);
	sc_shm_header_t e;
	sc_shm_layout_device(&e, FAKE_N, 4, FAKE_COO, 1);
	char *base = sc_tensor_data(t);
	if ((char *)sc_tensor_coo_indices(t) != base + e.coo_idx_offset ||
	    (char *)sc_tensor_coo_values(t) != base + e.coo_val_offset ||
	    (const char *)sc_tensor_residual(t) != base + e.residual_offset)
		IT_FAIL(
		    "'w': the COO area and residual are not at the device layout's offsets");
	base[0] = 1;
	if (((char *)f.t[0].p[1])[0] != 1)
		IT_FAIL("'w': sc_tensor_data is not the daemon's allocation");
	if (sc_tensor_result_nnz(t) != SC_RESULT_DENSE)
		IT_FAIL("'w': sc_tensor_result_nnz does not read the host header");
	IT_CHECK_SC(sc_tensor_set_stream(t, NULL), "sc_tensor_set_stream");
	for (int how = 0; how < 3; how++)
		round_trip(c, t, how);
	st = reg(c, "bad-ordinal", 0, &bad);
	if (st != SC_ERR_PROTOCOL || !strstr(sc_last_error(), "another GPU"))
		IT_FAIL("a header on another GPU: %s (%s)", sc_status_name(st),
			sc_last_error());
	st = reg(c, "bad-handle", 0, &bad);
	if (st != SC_ERR_PROTOCOL || !strstr(sc_last_error(), "10,"))
		IT_FAIL("a 10-byte memory handle: %s (%s)", sc_status_name(st),
			sc_last_error());
	st = sc_register(c, "cpu", SC_FLOAT32, 10, &bad);
	if (st != SC_ERR_UNSUPPORTED)
		IT_FAIL("the fake's refusal: %s (%s)", sc_status_name(st), sc_last_error());
	if (it_cuda_log_count(log, "mem_open", NULL) != 1)
		IT_FAIL("refused registrations opened memory handles");
	sc_finalize(c);
	fake_stop(&f);
	it_cuda_log_balanced(log, 1);

	/* the daemon goes away after a registration */
	fake_start(&f, log, 1);
	IT_CHECK_SC(sc_connect(f.endpoint, IT_CONNECT_TIMEOUT_MS, &c),
		    "connecting to the fake");
	IT_CHECK_SC(reg(c, "gone", 0, &t), "registering 'gone' on cuda:0");
	for (double end = it_now_s() + 30; __atomic_load_n(&f.sock, __ATOMIC_ACQUIRE);)
		if (it_now_s() > end)
			IT_FAIL("the fake daemon did not go away");
		else
			it_sleep_ms(10);
	sc_handle_t h = 0;
	st = sc_allreduce_async(c, t, SC_OP_SUM, &h);
	if (st == SC_OK)
		st = sc_wait(c, h, IT_ERROR_TIMEOUT_MS);
	if (st != SC_ERR_CONNECT)
		IT_FAIL("an allreduce after the daemon went away: %s (%s)", sc_status_name(st),
			sc_last_error());
	sc_finalize(c);
	fake_stop(&f);
	it_cuda_log_balanced(log, 2);
	it_pass();
}
