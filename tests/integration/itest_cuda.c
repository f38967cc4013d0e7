/*
 * itest_cuda.c: cuda tensors (sc_tensor_opts_t.device = SC_DEVICE_CUDA) through the
 * library's CUDA IPC path, on machines without a GPU: the library loads the test stand-in
 * of the CUDA driver (build/lib/libcuda-host.so, tests/cudahost/driver.c) through
 * $SPARSECOMM_CUDA_DRIVER, whose "device pointers" are host mappings of the daemon's
 * stand-in handles, so a trainer writes and reads a cuda tensor's buffer directly.
 *
 *   cuda-refused DRIVER EXPECT [ORDINAL]: a cuda registration that must fail with
 *       SC_ERR_UNSUPPORTED naming the tensor, the rank and EXPECT (no driver at DRIVER, a
 *       library without the driver's symbols, a GPU the driver does not have, a daemon
 *       that does not serve GPU tensors); cpu tensors of the same client keep working,
 *       and options of the previous struct_size (without the device fields) register cpu.
 *   cuda-visible LOG: one GPU visible per trainer, mapped by UUID (it_cuda_visible).
 *   cuda-sums LOG [TRANSPORT [ENGINE]]: end to end (needs daemons that serve cuda tensors
 * through the host build of the GPU library, $SPARSECOMM_CUDA_LIB): exact sums of cuda tensors
 * written through their device pointers, collected by sc_wait and sc_stream_wait, COO input
 * summed exactly and a top-k tensor's GPU residual conserving every value; with TRANSPORT,
 * `sparsectl stats` on every node says the cuda tensors' buffers went over it (tcp or nccl),
 * except the small float32 sum's, summed in one round over the mesh (tcp), and the cpu
 * tensor's over tcp; after sc_finalize the stand-in's log (LOG.<rank>) shows every
 * handle opened once and closed once. cuda-killed LOG: the same with rank 1 killed (SIGKILL)
 * after registering: the others fail naming rank 1 and still close everything at sc_finalize.
 *
 * With $SCG_HOST_DEVICES = N > 1 (the GPUs that the driver stand-in and the daemons' host
 * GPU library emulate), local rank r registers its cuda tensors on cuda:(r mod N): the
 * daemon allocates them there, sums on its engine GPU (cuda:0) and copies the results
 * back, and a kernel that read another GPU's memory would fail the operation. cuda-sums
 * then also checks that each trainer's context is its own GPU's, and, its driver seeing one
 * GPU more than the daemons, that a registration on cuda:N is refused by the daemon and
 * one on cuda:N+1 by the library, each naming the tensor and the count (the daemon's
 * refusal names the GPU's UUID). ENGINE: the
 * daemons' engine GPU (cuda_device) when it is not 0: the top-k tensor, whose residual is
 * local rank 0's on cuda:0, must then fail naming the tensor and both GPUs.
 */
#include "itest.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_N 1000

/* The GPUs emulated for this job's daemons ($SCG_HOST_DEVICES at the first call, 1 when
 * unset). */
static int cuda_gpus(void)
{
	static int n;
	if (!n) {
		const char *s = getenv("SCG_HOST_DEVICES");
		n = s && *s ? atoi(s) : 1;
		n = n < 1 ? 1 : n;
	}
	return n;
}

/* The GPU this trainer's cuda tensors live on: its local rank's, modulo the GPUs. */
static int cuda_ordinal(void)
{
	return it_env.env_local_rank > 0 ? it_env.env_local_rank % cuda_gpus() : 0;
}

/* Registers name on GPU ordinal; returns the status, the tensor in *t_p. */
static sc_status_t reg_cuda(sc_client_t *c, const char *name, sc_dtype_t dtype, size_t n,
			    int ordinal, sc_tensor_t **t_p)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};

	o.device = SC_DEVICE_CUDA;
	o.device_ordinal = ordinal;
	*t_p = NULL;
	return sc_register_ex(c, name, dtype, n, &o, t_p);
}

/* A dense SUM of a cpu tensor, collected with sc_stream_wait (sc_wait for cpu tensors). */
static void cpu_sums(sc_client_t *c, const char *name, uint64_t seed)
{
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, CUDA_N);
	sc_handle_t h = 0;
	char why[512];
	int ordinal = -1;

	if (sc_tensor_device(t, &ordinal) != SC_DEVICE_CPU || ordinal != 0)
		IT_FAIL("'%s': sc_tensor_device says %d (ordinal %d), registered on the cpu",
			name, (int)sc_tensor_device(t, NULL), ordinal);
	if (sc_tensor_set_stream(t, NULL) != SC_ERR_INVALID)
		IT_FAIL("sc_tensor_set_stream accepted the cpu tensor '%s'", name);
	it_fill(sc_tensor_data(t), SC_FLOAT32, CUDA_N, seed, it_env.rank, 1);
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce '%s'", name);
	IT_CHECK_SC(sc_stream_wait(c, h, NULL, IT_OP_TIMEOUT_MS), "sc_stream_wait '%s'", name);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, CUDA_N, seed, it_env.size, 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("'%s': %zu of %d elements wrong: %s", name, wrong, CUDA_N, why);
	if (sc_wait(c, h, 0) != SC_ERR_INVALID)
		IT_FAIL("sc_stream_wait did not release the handle of '%s'", name);
}

/* Options of the previous header (struct_size ending before the device fields): cpu,
 * whatever lies in memory past struct_size. */
static void old_opts_are_cpu(sc_client_t *c)
{
	sc_tensor_opts_t o = {.struct_size = offsetof(sc_tensor_opts_t, device)};
	sc_tensor_t *t = NULL;

	o.device = SC_DEVICE_CUDA; /* past struct_size: not the caller's */
	o.device_ordinal = 3;
	IT_CHECK_SC(sc_register_ex(c, "cuda.oldopts", SC_FLOAT32, CUDA_N, &o, &t),
		    "registering with the previous struct_size %u", o.struct_size);
	if (sc_tensor_device(t, NULL) != SC_DEVICE_CPU)
		IT_FAIL("opts of struct_size %u (no device fields) registered a %d tensor",
			o.struct_size, (int)sc_tensor_device(t, NULL));
}

/* Device kinds and ordinals that are no placement: SC_ERR_INVALID before the daemon. */
static void bad_placements(sc_client_t *c)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};
	sc_tensor_t *t = NULL;
	sc_status_t st;

	o.device = (sc_device_kind_t)7;
	st = sc_register_ex(c, "cuda.badkind", SC_FLOAT32, CUDA_N, &o, &t);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "device kind 7"))
		IT_FAIL("device kind 7: %s (%s), expected SC_ERR_INVALID naming it",
			sc_status_name(st), sc_last_error());
	st = reg_cuda(c, "cuda.negative", SC_FLOAT32, CUDA_N, -1, &t);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "cuda.negative"))
		IT_FAIL("GPU ordinal -1: %s (%s), expected SC_ERR_INVALID naming the tensor",
			sc_status_name(st), sc_last_error());
}

int it_cuda_refused(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: cuda-refused DRIVER EXPECT [ORDINAL]");
	int ordinal = argc > 3 ? atoi(argv[3]) : 0;
	sc_tensor_t *t = NULL;

	setenv("SPARSECOMM_CUDA_DRIVER", argv[1], 1);
	sc_client_t *c = it_connect();
	bad_placements(c);
	sc_status_t st = reg_cuda(c, "cuda.w", SC_FLOAT32, CUDA_N, ordinal, &t);
	const char *err = sc_last_error();
	if (st != SC_ERR_UNSUPPORTED)
		IT_FAIL("cuda registration with driver '%s': %s (%s), expected "
			"SC_ERR_UNSUPPORTED",
			argv[1], sc_status_name(st), err);
	if (t || !strstr(err, "'cuda.w'") || !strstr(err, argv[2]) ||
	    !it_mentions_rank(err, it_env.rank))
		IT_FAIL("the refusal does not name the tensor 'cuda.w', rank %d and '%s': %s",
			it_env.rank, argv[2], err);
	it_log("refused as expected: %s", err);
	/* the same refusal again (the load is once per process, its reason kept); another
	 * name, as a daemon that refuses after allocating keeps the first */
	st = reg_cuda(c, "cuda.w2", SC_FLOAT32, CUDA_N, ordinal, &t);
	if (st != SC_ERR_UNSUPPORTED || !strstr(sc_last_error(), argv[2]))
		IT_FAIL("second cuda registration: %s (%s)", sc_status_name(st),
			sc_last_error());
	cpu_sums(c, "cuda.cpu", 41);
	old_opts_are_cpu(c);
	sc_finalize(c);
	it_pass();
}

int it_cuda_log_count(const char *path, const char *kind, const char *arg)
{
	FILE *f = fopen(path, "r");
	char line[512], k[64], a[256];
	int pid, n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%d %63s %255s", &pid, k, a) == 3 && pid == (int)getpid() &&
		    (!kind || !strcmp(k, kind)) && (!arg || !strcmp(a, arg)))
			n++;
	fclose(f);
	return n;
}

void it_cuda_log_balanced(const char *path, int tensors)
{
	static const char *kinds[6] = {"ctx_retain", "ctx_release", "mem_open",
				       "mem_close",  "event_open",  "event_destroy"};
	int n[6], sum = 0;

	for (int k = 0; k < 6; k++)
		sum += n[k] = it_cuda_log_count(path, kinds[k], NULL);
	if (n[0] != tensors || n[1] != tensors || n[2] != tensors || n[3] != tensors ||
	    n[4] != 2 * tensors || n[5] != 2 * tensors ||
	    sum != it_cuda_log_count(path, NULL, NULL))
		IT_FAIL("%s: for %d cuda tensors, contexts retained %d released %d, memory "
			"opened %d closed %d, events opened %d destroyed %d (%d lines in all)",
			path, tensors, n[0], n[1], n[2], n[3], n[4], n[5],
			it_cuda_log_count(path, NULL, NULL));
}

/* Sets up the driver stand-in and its log (argv[1], LOG: LOG.<rank>) for this rank;
 * returns the log's path. */
const char *it_cuda_stand_in(int argc, char **argv)
{
	static char driver[4200], log[4200];

	if (argc < 2)
		IT_FAIL("usage: %s LOG", argv[0]);
	snprintf(driver, sizeof(driver), "%s/../lib/libcuda-host.so", it_env.self_dir);
	snprintf(log, sizeof(log), "%s.%d", argv[1], it_env.env_rank);
	unlink(log);
	setenv("SPARSECOMM_CUDA_DRIVER", driver, 1);
	setenv("SC_CUDA_HOST_LOG", log, 1);
	return log;
}

static sc_tensor_t *cuda_tensor(sc_client_t *c, const char *name, sc_dtype_t dtype)
{
	sc_tensor_t *t = NULL;
	int ordinal = -1;

	IT_CHECK_SC(reg_cuda(c, name, dtype, CUDA_N, cuda_ordinal(), &t),
		    "registering '%s' on cuda:%d", name, cuda_ordinal());
	if (sc_tensor_device(t, &ordinal) != SC_DEVICE_CUDA || ordinal != cuda_ordinal())
		IT_FAIL("'%s': sc_tensor_device says %d, ordinal %d, registered on cuda:%d",
			name, (int)sc_tensor_device(t, NULL), ordinal, cuda_ordinal());
	if (!sc_tensor_data(t) || ((uintptr_t)sc_tensor_data(t) & 63u))
		IT_FAIL("'%s': device pointer %p is not 64-byte aligned", name,
			sc_tensor_data(t));
	return t;
}

/* Sparse cuda tensors: COO input summed exactly (small integers), and a top-k tensor whose
 * residual lives on the GPU conserving every value (what was sent, the input less the
 * node's residual, summed over the job by a lossless cpu tensor, equals the result). */
static void cuda_sparse(sc_client_t *c, int engine)
{
	enum { NNZ = 100 };
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .device = SC_DEVICE_CUDA,
			      .device_ordinal = cuda_ordinal(),
			      .coo_capacity = NNZ};
	sc_tensor_t *coo = NULL, *tk = NULL,
		    *sent = it_register(c, "cuda.sent", SC_FLOAT32, CUDA_N);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_register_ex(c, "cuda.coo", SC_FLOAT32, CUDA_N, &o, &coo),
		    "registering 'cuda.coo'");
	o.coo_capacity = 0;
	o.sparsifier = SC_SPARSIFY_TOPK;
	o.density = 0.05;
	IT_CHECK_SC(sc_register_ex(c, "cuda.topk", SC_FLOAT32, CUDA_N, &o, &tk),
		    "registering 'cuda.topk'");
	/* COO: rank r's entries at (7 j + 3 r) mod N, value (r + 1)(j mod 5 + 1) */
	uint32_t *ci = sc_tensor_coo_indices(coo);
	float *cv = sc_tensor_coo_values(coo);
	for (uint32_t j = 0; j < NNZ; j++) {
		ci[j] = (7 * j + 3 * (uint32_t)it_env.rank) % CUDA_N;
		cv[j] = (float)((it_env.rank + 1) * (int)(j % 5 + 1));
	}
	IT_CHECK_SC(sc_allreduce_coo_async(c, coo, NNZ, SC_OP_SUM, &h), "allreduce 'cuda.coo'");
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "sc_wait 'cuda.coo'");
	static float want[CUDA_N];
	memset(want, 0, sizeof(want));
	for (int r = 0; r < it_env.size; r++)
		for (uint32_t j = 0; j < NNZ; j++)
			want[(7 * j + 3 * (uint32_t)r) % CUDA_N] +=
			    (float)((r + 1) * (int)(j % 5 + 1));
	const float *got = sc_tensor_data(coo);
	for (int i = 0; i < CUDA_N; i++)
		if (got[i] != want[i])
			IT_FAIL("'cuda.coo'[%d] = %g, the sum over %d ranks is %g", i, got[i],
				it_env.size, want[i]);
	/* top-k: integers, so every sum is exact in any order */
	float *g = sc_tensor_data(tk);
	static float in[CUDA_N];
	for (int i = 0; i < CUDA_N; i++)
		in[i] = g[i] = (float)((i * 31 + it_env.rank * 17) % 23 - 11);
	IT_CHECK_SC(sc_allreduce_async(c, tk, SC_OP_SUM, &h), "allreduce 'cuda.topk'");
	if (engine != 0) { /* the residual is on cuda:0, the engine elsewhere */
		char why[160];
		int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		snprintf(why, sizeof(why),
			 "tensor 'cuda.topk': its error-feedback residual is local rank 0's, "
			 "on cuda:0, and this daemon's engine sums on cuda:%d",
			 engine);
		if (r != SC_ERR_UNSUPPORTED || !strstr(it_wait_error(), why))
			IT_FAIL("'cuda.topk' with the engine on cuda:%d: %s (%s), expected "
				"SC_ERR_UNSUPPORTED with '%s'",
				engine, it_wait_name(r), it_wait_error(), why);
		it_log("failed as expected: %s", it_wait_error());
		return;
	}
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "sc_wait 'cuda.topk'");
	const float *res = sc_tensor_residual(tk);
	if (!res)
		IT_FAIL("'cuda.topk' has no residual");
	float *s = sc_tensor_data(sent);
	int have_res = 0;
	for (int i = 0; i < CUDA_N; i++) {
		s[i] =
		    in[i] - res[i]; /* local rank 0 reads the node's residual, the others 0 */
		have_res |= res[i] != 0;
	}
	if (sc_local_rank(c) == 0 && !have_res)
		IT_FAIL("'cuda.topk' at density 0.05 left no residual on local rank 0");
	IT_CHECK_SC(sc_allreduce(c, sent, SC_OP_SUM, IT_OP_TIMEOUT_MS),
		    "allreduce 'cuda.sent'");
	for (int i = 0; i < CUDA_N; i++)
		if (g[i] != s[i])
			IT_FAIL(
			    "'cuda.topk'[%d] = %g, but the ranks sent %g in all: not conserved",
			    i, g[i], s[i]);
}

/* Fails unless `sparsectl stats` on this node gives tensor name's string field as want. */
static void expect_stats_str(const char *name, const char *field, const char *want)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *ts = it_json_get(s, "tensors");
	const char *got = NULL;
	for (size_t i = 0; ts && ts->type == IT_JARR && i < ts->n; i++) {
		const it_json_t *nm = it_json_get(ts->items[i], "name");
		const it_json_t *v = it_json_get(ts->items[i], field);
		if (nm && nm->type == IT_JSTR && !strcmp(nm->str, name) && v &&
		    v->type == IT_JSTR)
			got = v->str;
	}
	if (!got || strcmp(got, want))
		IT_FAIL("'%s': %s %s, expected %s", name, field, got ? got : "(not listed)",
			want);
	it_json_free(s);
}

void it_expect_transport(const char *name, const char *want)
{
	expect_stats_str(name, "transport", want);
}

/* A float32 cuda tensor on the fp16 wire: exact sums of small integers; staged through
 * host memory over tcp it converts like a cpu tensor, over NCCL it keeps 32 bits and
 * `sparsectl stats` says so. */
static void cuda_wire(sc_client_t *c, const char *transport)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .wire = SC_WIRE_FP16};
	sc_tensor_t *t = NULL;
	char why[512];
	o.device = SC_DEVICE_CUDA;
	o.device_ordinal = cuda_ordinal();
	IT_CHECK_SC(sc_register_ex(c, "cuda.wire", SC_FLOAT32, CUDA_N, &o, &t),
		    "registering 'cuda.wire' (fp16 wire)");
	for (int step = 0; step < 2; step++) {
		it_fill(sc_tensor_data(t), SC_FLOAT32, CUDA_N, 80 + step, it_env.rank, 1);
		IT_CHECK_SC(sc_tensor_set_stream(t, NULL), "sc_tensor_set_stream 'cuda.wire'");
		IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "'cuda.wire'");
		size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, CUDA_N, 80 + step,
					it_env.size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("'cuda.wire' step %d: %zu elements wrong: %s", step, wrong,
				why);
	}
	if (transport && sc_local_rank(c) == 0 && it_env.size > 1)
		expect_stats_str("cuda.wire", "wire",
				 strcmp(transport, "nccl") ? "fp16" : "fp16 as fp32 (nccl)");
}

/* Registrations on a GPU past the node's (the trainer's driver sees N + 1 GPUs, the
 * daemons N): the library refuses cuda:N+1, the daemon cuda:N, each naming the tensor and
 * the count. `sparsectl status` names the engine GPU and the count. Every context this
 * trainer retained is its own GPU's. */
static void cuda_gpu_placement(sc_client_t *c, const char *log, int engine)
{
	int n = cuda_gpus();
	char want[200], arg[16];
	sc_tensor_t *t = NULL;
	sc_status_t st = reg_cuda(c, "cuda.far", SC_FLOAT32, CUDA_N, n + 1, &t);
	snprintf(want, sizeof(want), "cuda:%d does not exist: the CUDA driver sees %d GPU",
		 n + 1, n + 1);
	if (st != SC_ERR_UNSUPPORTED || t || !strstr(sc_last_error(), "'cuda.far'") ||
	    !strstr(sc_last_error(), want))
		IT_FAIL("registering 'cuda.far' on cuda:%d: %s (%s), expected "
			"SC_ERR_UNSUPPORTED naming the tensor and '%s'",
			n + 1, sc_status_name(st), sc_last_error(), want);
	st = reg_cuda(c, "cuda.far", SC_FLOAT32, CUDA_N, n, &t);
	snprintf(
	    want, sizeof(want),
	    "its GPU GPU-53434748-0000-0000-0000-0000000000%02x (the trainer's cuda:%d) is "
	    "not one this daemon serves: it sees %d GPUs",
	    n, n, n);
	if (st != SC_ERR_UNSUPPORTED || t || !strstr(sc_last_error(), "'cuda.far'") ||
	    !strstr(sc_last_error(), want) || !it_mentions_rank(sc_last_error(), it_env.rank))
		IT_FAIL("registering 'cuda.far' on cuda:%d, a GPU the daemon lacks: %s (%s), "
			"expected SC_ERR_UNSUPPORTED naming the tensor, rank %d and '%s'",
			n, sc_status_name(st), sc_last_error(), it_env.rank, want);
	it_log("refused as expected: %s", sc_last_error());
	/* `sparsectl status` names the engine GPU and the GPUs served */
	const char *args[] = {"status", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *gpu = it_json_get(s, "gpu");
	snprintf(want, sizeof(want), "cuda:%d, the engine's, of %d (host)", engine, n);
	if (!gpu || gpu->type != IT_JSTR || strcmp(gpu->str, want))
		IT_FAIL("sparsectl status: gpu is '%s', expected '%s'",
			gpu && gpu->type == IT_JSTR ? gpu->str : "(missing)", want);
	it_json_free(s);
	snprintf(arg, sizeof(arg), "%d", cuda_ordinal());
	int own = it_cuda_log_count(log, "ctx_retain", arg),
	    all = it_cuda_log_count(log, "ctx_retain", NULL);
	if (!own || own != all)
		IT_FAIL("%s: %d of %d contexts retained are cuda:%d's, this trainer's GPU", log,
			own, all, cuda_ordinal());
}

int it_cuda_sums(int argc, char **argv)
{
	const char *log = it_cuda_stand_in(argc, argv);
	if (cuda_gpus() > 1) { /* this trainer's driver sees one GPU more than the daemons */
		char more[16];
		snprintf(more, sizeof(more), "%d", cuda_gpus() + 1);
		setenv("SCG_HOST_DEVICES", more, 1);
	}
	sc_client_t *c = it_connect();
	sc_tensor_t *a = cuda_tensor(c, "cuda.a", SC_FLOAT32);
	sc_tensor_t *b = cuda_tensor(c, "cuda.b", SC_FLOAT64);
	char why[512];

	for (int step = 0; step < 3; step++) {
		sc_handle_t ha = 0, hb = 0;

		it_fill(sc_tensor_data(a), SC_FLOAT32, CUDA_N, 50 + step, it_env.rank, 1);
		it_fill(sc_tensor_data(b), SC_FLOAT64, CUDA_N, 60 + step, it_env.rank, 2);
		IT_CHECK_SC(sc_tensor_set_stream(a, NULL), "sc_tensor_set_stream 'cuda.a'");
		IT_CHECK_SC(sc_allreduce_async(c, a, SC_OP_SUM, &ha), "allreduce 'cuda.a'");
		IT_CHECK_SC(sc_allreduce_async(c, b, SC_OP_AVERAGE, &hb), "allreduce 'cuda.b'");
		IT_CHECK_SC(sc_wait(c, ha, IT_OP_TIMEOUT_MS), "sc_wait 'cuda.a' step %d", step);
		IT_CHECK_SC(sc_stream_wait(c, hb, NULL, IT_OP_TIMEOUT_MS),
			    "sc_stream_wait 'cuda.b' step %d", step);
		size_t wrong = it_check(sc_tensor_data(a), SC_FLOAT32, CUDA_N, 50 + step,
					it_env.size, 1, SC_OP_SUM, why, sizeof(why));
		if (!wrong)
			wrong = it_check(sc_tensor_data(b), SC_FLOAT64, CUDA_N, 60 + step,
					 it_env.size, 2, SC_OP_AVERAGE, why, sizeof(why));
		if (wrong)
			IT_FAIL("step %d: %zu elements wrong: %s", step, wrong, why);
	}
	cpu_sums(c, "cuda.cpu", 70); /* cpu tensors beside cuda ones */
	cuda_wire(c, argc > 2 ? argv[2] : NULL);
	int engine = argc > 3 ? atoi(argv[3]) : 0;
	cuda_sparse(c, engine);
	if (cuda_gpus() > 1)
		cuda_gpu_placement(c, log, engine);
	if (argc > 2 && sc_local_rank(c) == 0) {
		/* 'cuda.a', a float32 sum of 4000 bytes, is summed in one round over the mesh,
		 * which carries the input check round (transport auto) */
		it_expect_transport("cuda.a", "tcp");
		const char *cuda[] = {"cuda.b", "cuda.coo", "cuda.topk"};
		for (size_t i = 0; i < sizeof(cuda) / sizeof(cuda[0]) - (engine != 0); i++)
			it_expect_transport(cuda[i],
					    argv[2]); /* cuda.topk failed: not listed */
		it_expect_transport("cuda.cpu", "tcp");
	}
	sc_finalize(c);
	it_cuda_log_balanced(log, 5);
	it_pass();
}

/*
 * One GPU visible per trainer, as srun and most launchers place them: local rank r's
 * driver sees the node's GPU r mod N alone, as its cuda:0 (SC_CUDA_HOST_VISIBLE plays
 * CUDA_VISIBLE_DEVICES), then node GPU 7, which the daemons lack, as its cuda:1. The
 * daemon must find cuda:0 by its UUID and allocate there (the stand-in refuses to open a
 * handle of another GPU than the context's), and the sums are exact; a registration on
 * cuda:1 is refused by the daemon naming the tensor, the rank and the GPU's UUID.
 */
int it_cuda_visible(int argc, char **argv)
{
	const char *log = it_cuda_stand_in(argc, argv);
	int node = it_env.env_local_rank > 0 ? it_env.env_local_rank % cuda_gpus() : 0;
	char vis[32], why[512];
	const char *unseen = "GPU-53434748-0000-0000-0000-000000000007";
	sc_tensor_t *t = NULL, *u = NULL;

	snprintf(vis, sizeof(vis), "%d,7", node);
	setenv("SC_CUDA_HOST_VISIBLE", vis, 1);
	sc_client_t *c = it_connect();
	IT_CHECK_SC(reg_cuda(c, "cuda.v", SC_FLOAT32, CUDA_N, 0, &t),
		    "registering 'cuda.v' on cuda:0, the node's GPU %d", node);
	for (int step = 0; step < 2; step++) {
		it_fill(sc_tensor_data(t), SC_FLOAT32, CUDA_N, 90 + step, it_env.rank, 1);
		IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "'cuda.v' step %d",
			    step);
		size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, CUDA_N, 90 + step,
					it_env.size, 1, SC_OP_SUM, why, sizeof(why));
		if (wrong)
			IT_FAIL("'cuda.v' step %d: %zu elements wrong: %s", step, wrong, why);
	}
	sc_status_t st = reg_cuda(c, "cuda.unseen", SC_FLOAT32, CUDA_N, 1, &u);
	if (st != SC_ERR_UNSUPPORTED || u || !strstr(sc_last_error(), "'cuda.unseen'") ||
	    !strstr(sc_last_error(), unseen) || !it_mentions_rank(sc_last_error(), it_env.rank))
		IT_FAIL("registering 'cuda.unseen' on cuda:1, the node's GPU 7: %s (%s), "
			"expected SC_ERR_UNSUPPORTED naming the tensor, rank %d and %s",
			sc_status_name(st), sc_last_error(), it_env.rank, unseen);
	it_log("refused as expected: %s", sc_last_error());
	if (it_cuda_log_count(log, "wrong_device", NULL))
		IT_FAIL("%s: a handle of another GPU than this trainer's was opened", log);
	sc_finalize(c);
	it_cuda_log_balanced(log, 1);
	it_pass();
}

/*
 * A sticky GPU fault, injected into the daemons' host GPU library by $SCG_HOST_FAULT = 1
 * (its first sync reports an illegal address, and every later call fails): the first cuda
 * allreduce fails; from then on every cuda allreduce fails at once with one error naming
 * the fault, a new cuda registration is refused naming it, cpu tensors are still summed
 * exactly, and `sparsectl status` and the metrics endpoint (METRICS, HOST:PORT) say the
 * GPU is lost.
 */
int it_cuda_lost(int argc, char **argv)
{
	const char *log = it_cuda_stand_in(argc, argv);
	const char *fault = "cudaErrorIllegalAddress, injected by SCG_HOST_FAULT";
	sc_tensor_t *u = NULL;
	sc_handle_t h = 0;

	if (argc < 3)
		IT_FAIL("usage: cuda-lost LOG METRICS");
	sc_client_t *c = it_connect();
	sc_tensor_t *t = cuda_tensor(c, "cuda.lost", SC_FLOAT32);
	it_fill(sc_tensor_data(t), SC_FLOAT32, CUDA_N, 95, it_env.rank, 1);
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce 'cuda.lost'");
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	if (r == SC_OK || r == IT_HANG || !strstr(it_wait_error(), "cudaErrorIllegalAddress"))
		IT_FAIL("'cuda.lost' with a GPU fault at the first sync: %s (%s), expected a "
			"failure naming the fault",
			it_wait_name(r), it_wait_error());
	it_log("the faulted step failed: %s", it_wait_error());
	for (int step = 0; step < 2; step++) { /* the same error, at once, every time */
		double t0 = it_now_s();
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce 'cuda.lost'");
		r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		const char *e = it_wait_error();
		if (r != SC_ERR_SYSTEM || !strstr(e, "'cuda.lost'") ||
		    !strstr(e, "the GPU is lost") || !strstr(e, fault) ||
		    !it_mentions_rank(e, it_env.rank))
			IT_FAIL("'cuda.lost' after the fault, step %d: %s (%s), expected "
				"SC_ERR_SYSTEM naming the tensor, 'the GPU is lost' and '%s'",
				step, it_wait_name(r), e, fault);
		if (it_now_s() - t0 > 5)
			IT_FAIL("'cuda.lost' took %.1f s to fail on a lost GPU",
				it_now_s() - t0);
	}
	it_log("failed at once as expected: %s", it_wait_error());
	sc_status_t st = reg_cuda(c, "cuda.new", SC_FLOAT32, CUDA_N, cuda_ordinal(), &u);
	if (st != SC_ERR_SYSTEM || u || !strstr(sc_last_error(), "'cuda.new'") ||
	    !strstr(sc_last_error(), fault))
		IT_FAIL("registering 'cuda.new' on a lost GPU: %s (%s), expected SC_ERR_SYSTEM "
			"naming the tensor and the fault",
			sc_status_name(st), sc_last_error());
	cpu_sums(c, "cuda.cpu", 96); /* cpu tensors are still served */
	const char *args[] = {"status", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *gpu = it_json_get(s, "gpu"), *lost = it_json_get(s, "gpu_lost");
	if (!gpu || gpu->type != IT_JSTR || strncmp(gpu->str, "lost: ", 6) ||
	    !strstr(gpu->str, fault) || !lost || lost->type != IT_JBOOL || lost->num != 1)
		IT_FAIL("sparsectl status: gpu '%s', gpu_lost %s: expected 'lost: ...%s...' "
			"and true",
			gpu && gpu->type == IT_JSTR ? gpu->str : "(missing)",
			lost ? (lost->type == IT_JBOOL && lost->num == 1 ? "true" : "not true")
			     : "(missing)",
			fault);
	it_json_free(s);
	char *m = it_metrics_scrape(argv[2]);
	if (!strstr(m, "\nsparsecomm_gpu_lost 1\n"))
		IT_FAIL("the metrics at %s lack 'sparsecomm_gpu_lost 1'", argv[2]);
	free(m);
	sc_finalize(c);
	it_cuda_log_balanced(log, 1);
	it_pass();
}

int it_cuda_killed(int argc, char **argv)
{
	const char *log = it_cuda_stand_in(argc, argv);
	sc_client_t *c = it_connect();
	sc_tensor_t *k = cuda_tensor(c, "cuda.k", SC_FLOAT32);
	sc_handle_t h = 0;

	if (it_env.size < 2)
		IT_FAIL("needs at least 2 trainers, the job has %d", it_env.size);
	if (it_env.rank == 1) {
		it_log("registered 'cuda.k'; dying before submitting it");
		fflush(NULL);
		raise(SIGKILL);
		IT_FAIL("still alive after SIGKILL");
	}
	it_fill(sc_tensor_data(k), SC_FLOAT32, CUDA_N, 80, it_env.rank, 1);
	IT_CHECK_SC(sc_allreduce_async(c, k, SC_OP_SUM, &h), "allreduce 'cuda.k'");
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	if (r == SC_OK || r == IT_HANG)
		IT_FAIL("'cuda.k' after rank 1 died: %s (%s)", it_wait_name(r),
			it_wait_error());
	if (!it_mentions_rank(it_wait_error(), 1))
		IT_FAIL("the error for 'cuda.k' does not name rank 1: %s", it_wait_error());
	sc_finalize(c);
	it_cuda_log_balanced(log, 1);
	it_pass();
}

/*
 * Process sets of cuda tensors, 3 nodes x 1: {0, 2} and {1, 2}. Each set's float32 sums
 * are exact over its members only, and with transport nccl (argv[2]) `sparsectl stats`
 * says each set's tensor went over nccl: the set's own communicator, made over its part
 * of the mesh (a set's job never takes the world's).
 */
int it_cuda_psets(int argc, char **argv)
{
	const char *log = it_cuda_stand_in(argc, argv);
	sc_client_t *c = it_connect();
	int rank = sc_rank(c);
	if (sc_size(c) != 3 || sc_local_size(c) != 1)
		IT_FAIL("runs as 3 nodes x 1, not %d trainers", sc_size(c));
	static const int sets[2][2] = {{0, 2}, {1, 2}};
	for (int s = 0; s < 2; s++) {
		int id = -1;
		IT_CHECK_SC(sc_process_set_add(c, sets[s], 2, IT_OP_TIMEOUT_MS, &id),
			    "adding set %d", s + 1);
		if (id != s + 1)
			IT_FAIL("set %d got id %d", s + 1, id);
	}
	int mine = 0;
	for (int s = 0; s < 2; s++) {
		if (rank != sets[s][0] && rank != sets[s][1])
			continue;
		mine++;
		char name[32];
		snprintf(name, sizeof(name), "cuda.ps%d", s + 1);
		sc_tensor_opts_t o = {.struct_size = sizeof(o)};
		o.device = SC_DEVICE_CUDA;
		o.device_ordinal = cuda_ordinal();
		o.process_set = s + 1;
		sc_tensor_t *t = NULL;
		IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, CUDA_N, &o, &t),
			    "registering '%s' in set %d", name, s + 1);
		for (int step = 0; step < 3; step++) {
			float *v = sc_tensor_data(t);
			for (size_t i = 0; i < CUDA_N; i++)
				v[i] = (float)((rank + 1) * 1000 + step * 10 + (int)(i % 97));
			IT_CHECK_SC(sc_tensor_set_stream(t, NULL), "sc_tensor_set_stream");
			IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "'%s' step %d", name, step);
			for (size_t i = 0; i < CUDA_N; i++) {
				float want =
				    (float)((sets[s][0] + 1) * 1000 + (sets[s][1] + 1) * 1000 +
					    2 * (step * 10 + (int)(i % 97)));
				if (v[i] != want)
					IT_FAIL("'%s' step %d: element %zu is %g, expected %g",
						name, step, i, (double)v[i], (double)want);
			}
		}
		if (argc > 2)
			it_expect_transport(name, argv[2]);
	}
	it_log("cuda sums in {0,2} and {1,2} exact%s%s", argc > 2 ? ", over " : "",
	       argc > 2 ? argv[2] : "");
	sc_finalize(c);
	it_cuda_log_balanced(log, mine);
	it_pass();
}
