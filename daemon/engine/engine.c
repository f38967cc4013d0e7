/*
 * engine.c: the data plane's pipeline (see engine.h). The queue is a mutex and a condition
 * variable; the threads sleep on it when idle and block in the transport's poll(2) while
 * transferring, so they never spin. A buffer's work is its collective's (coll/coll.h): this
 * file finds the job's device and buffer (in place, or a fusion slot), runs the stages'
 * hooks in order around the input check round (verdict.h), and hands the job back; mesh
 * and forget jobs change what every buffer uses, between buffers.
 */
#include "engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/bufctx.h"
#include "coll/ctx.h"
#include "coll/presel.h"
#include "coll/stage.h"
#include "engine/gpunet.h"
#include "engine/netprobe.h"
#include "engine/psview.h"
#include "engine/slots.h"
#include "engine/verdict.h"
#include "shm_wake.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/shmguard.h"

#define ENGINE_SCRATCH_BYTES (4u << 20)
/* A host job of at most this many bytes that finds the communication stage idle and
 * nothing queued behind it runs that stage on the compute thread (engine_main): the size
 * the one-round sum carries (coll/bufctx.c), whose exchange is over in a round trip. */
#define ENGINE_INLINE_BYTES (16u << 10)
/* A hand-back whose trainers the engine told of their success itself waits this long for
 * the loop to collect it before it wakes the loop (engine.c, owe_locked). */
#define ENGINE_OWED_US 1000
/* A selection job at submission of at most this many elements of host memory is queued
 * without waking the compute thread (lazy_job): its selection costs less than the
 * wake-up (a few microseconds; a bias, a norm's scale). It runs before the next job the thread
 * is woken for, which its buffer's job is, or at the latest ENGINE_LAZY_MS after it was queued
 * (engine.c, lazy_arm). */
#define ENGINE_LAZY_NUMEL 4096
#define ENGINE_LAZY_MS	  5

struct scd_engine {
	scd_engine_params_t p;
	pthread_t thread, comm_thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;	      /* the compute thread's waits, and destroy's */
	pthread_cond_t comm_cv;	      /* the communication thread's wait for a job */
	scd_job_t *head, *tail;	      /* to run */
	scd_job_t *cq_head, *cq_tail; /* compute stage done, for the communication stage */
	int cq_n, comm_busy;
	uint64_t inline_jobs; /* communicated on the compute thread (comm_here_locked) */
	int comm_inline;      /* and the last communication stage ran there */
	scd_job_t *done_head, *done_tail;
	int in_flight; /* jobs taken, not handed back, selections at submission aside */
	/* hand-backs queued without waking the loop (owe_locked), until owed_until
	 * (CLOCK_MONOTONIC; e->cv waits on that clock) */
	int owed;
	struct timespec owed_until;
	scd_engine_counts_t counts; /* hand-backs and the loop's wake-ups they asked for */
	uv_async_t async;
	uv_timer_t *lazy_timer; /* the bound on a selection queued unwoken (loop thread's) */
	int stop, stopped, comm_stopped;
	scd_transport_t *transport; /* the mesh: tcp */
	scd_gpunet_t *gpunet;	    /* what GPU buffers take (gpunet.h) */
	scd_psviews_t views;	    /* the process sets' views of the mesh (psview.h) */
	scd_bufctx_table_t *bufs;
	scd_presel_table_t *presel; /* the selections made at submission (compute thread) */
	scd_netprobe_t net;	    /* latency and bandwidth, agreed (netprobe.h) */
	scd_slots_t slots;	    /* the fusion buffers (slots.h) */
	/* host staging of a GPU buffer, and the copies between GPUs (coll/stage.h) */
	scd_coll_stage_t stage;
	/* the last fast epoch a turn of which was discarded or refused (coll/job.h,
	 * scd_fast_t), in this mesh's world: its later turns come back unrun (the
	 * communication stage's); 0 again with each mesh job, since every world numbers its
	 * epochs from 1 */
	uint64_t fast_dead;
	/* a job found the mesh's streams out of step while the transport still serves (a fast
	 * turn's words refused, engine/verdict.h rule 1): that job's error; every later job
	 * fails unrun until the next mesh job (the communication stage's) */
	char untrusted[384];
	/* scd_engine_fence: the count of fences, and the lock a delivery holds (a job
	 * submitted before the last fence delivers nothing) */
	uint64_t fence;
	pthread_mutex_t deliver_mu;
	/* under deliver_mu: the jobs in a stage that reads or writes their trainers' buffers
	 * (touch_begin), and where scd_engine_quiesce waits for the last to end */
	int touching;
	pthread_cond_t touch_cv;
};

/* Logs a failure the engine itself detected, or that a device op reported (device ops do
 * not log), once, here; the loop thread only hands job->error to the trainers. Failures
 * of the transport and the schemes were logged where they were detected. */
static void log_job_error(const scd_job_t *job)
{
	scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
}

void scd_engine_net(scd_engine_t *e, double *alpha_s_p, double *beta_s_per_byte_p)
{
	if (!e) { /* destroyed (the daemon's teardown): nothing measured */
		*alpha_s_p = *beta_s_per_byte_p = 0;
		return;
	}
	scd_netprobe_get(&e->net, alpha_s_p, beta_s_per_byte_p);
}

/* A job the engine will not run (queued at the stop, or submitted after it). */
static void job_free(scd_job_t *j)
{
	if (j->kind == SCD_JOB_MESH)
		scd_transport_boot_clear(&j->boot);
	free(j->items);
	free(j->nodes);
	free(j->set_ranks);
	free(j);
}

/* Fails a job in its compute stage (job->error says why): it still takes the input check
 * round, as this node's local fault, so that every rank fails it alike and none sends
 * its bytes. A fault its input already showed is the one reported. */
static void compute_fail(scd_job_t *job, sc_status_t st)
{
	job->status = st;
	if (job->run.fault.kind == SCD_FAULT_NONE)
		job->run.fault = (scd_fault_t){
		    .kind = SCD_FAULT_LOCAL,
		    .item = job->n_items == 1 ? 0 : SCD_FAULT_ITEM_BUFFER,
		    .count = (uint64_t)(-(int64_t)(st != SC_OK ? st : SC_ERR_SYSTEM))};
}

/* A free fusion buffer slot of device kind, sized for need bytes (waits while both are in
 * the pipeline); -1 with job->error set when there is no memory for it. */
static int slot_acquire(scd_engine_t *e, scd_job_t *job, const scd_device_ops_t *dev,
			uint64_t need)
{
	uint64_t want = 0;
	void *buf = NULL;
	int k = scd_slots_acquire(&e->slots, job->run.kind, dev, need, &buf, &want);
	job->run.buf = buf;
	if (k == -1)
		snprintf(job->error, sizeof(job->error), "rank %d: the engine is stopping",
			 e->p.rank);
	if (k == -2) {
		snprintf(
		    job->error, sizeof(job->error),
		    "rank %d: no memory on the %s device for a fusion buffer of %llu bytes",
		    e->p.rank, dev->name, (unsigned long long)want);
		log_job_error(job);
	}
	return k < 0 ? -1 : k;
}

/* What the engine lends job's stages (coll/ctx.h), for the calling stage's peer area pe:
 * the place of this node among what the job runs over (the mesh, or its set's view). */
static scd_coll_ctx_t coll_ctx(scd_engine_t *e, scd_job_t *job, scd_stage_t *pe)
{
	scd_transport_t *t = job->run.t;
	scd_coll_ctx_t x = {.rank = t->rank,
			    .world_size = t->size,
			    .local_size = e->p.local_size,
			    .mesh = t,
			    .t = t,
			    .kind = job->run.kind,
			    .dev = job->run.dev,
			    .buf = job->run.buf,
			    .stage = &e->stage,
			    .pe = pe,
			    .bufs = e->bufs,
			    .presel = e->presel,
			    .fault = &job->run.fault};
	scd_engine_net(e, &x.alpha_s, &x.beta_s_per_byte);
	x.t_alpha_s = x.alpha_s;
	x.t_beta_s_per_byte = x.beta_s_per_byte;
	x.nonfinite = job->run.kind == SCD_DEVICE_CPU ? job->nonfinite : SCD_NONFINITE_PASS;
	return x;
}

/* "rank R: " ahead of what job->error says. */
static void error_rank(scd_engine_t *e, scd_job_t *job)
{
	char why[480];
	memcpy(why, job->error, sizeof(why));
	why[sizeof(why) - 1] = 0;
	snprintf(job->error, sizeof(job->error), "rank %d: %.470s", e->p.rank, why);
}

/* Begins a stage of job that uses its trainers' memory: its compute stage (which copies
 * their buffers in, or sums a job run in place into its first trainer's buffer, and
 * updates their residuals), or its communication stage (whose exchange writes the buffer
 * of a job run in place, and whose scheme may write the residuals back; the delivery is
 * fenced on its own, under the same lock). Returns 0, the job failed and running nothing, when
 * a fence came after its submission (scd_engine_fence: the world re-formed, or everything
 * in flight failed): its trainers were told that it failed, and may be writing their next
 * step's input into those buffers. Else 1: the stage is counted until touch_end, and
 * scd_engine_quiesce waits for it. */
static int touch_begin(scd_engine_t *e, scd_job_t *job)
{
	pthread_mutex_lock(&e->deliver_mu);
	int stale = job->fence != e->fence;
	e->touching += !stale;
	pthread_mutex_unlock(&e->deliver_mu);
	if (stale) {
		job->status = SC_ERR_PEER;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: not run: the world re-formed (or everything in flight "
			 "failed) before it ran",
			 e->p.rank);
	}
	return !stale;
}

static void touch_end(scd_engine_t *e)
{
	pthread_mutex_lock(&e->deliver_mu);
	if (--e->touching == 0)
		pthread_cond_broadcast(&e->touch_cv);
	pthread_mutex_unlock(&e->deliver_mu);
}

/* The job's buffer: in place in the trainer's buffer where the collective allows it (one
 * tensor, on the engine's GPU for a cuda one), else a fusion slot of the size the
 * collective asks, its padding cleared. A fast turn always takes a slot: a discarded turn
 * must leave the trainers' inputs as they were, for the planned step that runs it again. */
static sc_status_t job_buffer(scd_engine_t *e, scd_job_t *job, const scd_coll_desc_t *c)
{
	scd_job_run_t *run = &job->run;
	size_t esz = sc_dtype_size(job->dtype);
	if (c->in_place && !scd_job_fast(job) && job->n_items == 1 && job->items[0].n_src > 0 &&
	    scd_device_at_home(job->items[0].src[0].device, job->items[0].src[0].ordinal)) {
		run->buf = job->items[0].src[0].dense;
		return SC_OK;
	}
	uint64_t need = c->buffer_bytes ? c->buffer_bytes(job) : job->total_numel * esz;
	run->slot = slot_acquire(e, job, run->dev, need);
	if (run->slot < 0)
		return SC_ERR_NOMEM;
	scd_job_clear_padding(run->dev, job, run->buf, esz);
	return SC_OK;
}

/*
 * The compute stage of a buffer: the device, the job's buffer, the GPU trainers' ready
 * events, and the collective's local step (coll.h: gather). What it leaves in job->run is
 * the communication stage's to finish.
 */
static void compute_buffer(scd_engine_t *e, scd_job_t *job)
{
	scd_job_run_t *run = &job->run;
	const scd_coll_desc_t *c = scd_coll_desc(job->coll.kind);
	sc_status_t st = SC_ERR_INVALID;
	if (!sc_dtype_size(job->dtype)) {
		snprintf(job->error, sizeof(job->error), "rank %d: unknown dtype %u", e->p.rank,
			 job->dtype);
		log_job_error(job);
	} else if ((st = scd_job_device(e->p.rank, job, &run->kind, &run->dev)) == SC_OK &&
		   (st = scd_job_stage_check(e->p.rank, job, run->kind)) == SC_OK &&
		   (st = job_buffer(e, job, c)) == SC_OK) {
		/* the ready events a selection at submission waited for on this stream */
		for (int i = 0; i < job->n_items; i++)
			job->items[i].ready_waited =
			    scd_presel_waited(e->presel, &job->items[i]);
		st = scd_job_stage_ready(e->p.rank, job);
	}
	if (st != SC_OK) {
		compute_fail(job, st);
		return;
	}
	const scd_device_ops_t *dev = run->dev;
	if ((st = scd_job_stage_reserve(&e->stage.peer_in, dev, job, run->kind)) != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: no room on the engine GPU cuda:%d to copy the node's "
			 "sources on other GPUs over: %s",
			 e->p.rank, scd_device_home(run->kind), sc_status_message(st));
		log_job_error(job);
		compute_fail(job, st);
		return;
	}
	scd_coll_ctx_t x = coll_ctx(e, job, &e->stage.peer_in);
	job->error[0] = 0;
	st = c->gather ? c->gather(&x, job) : SC_OK;
	if (e->stage.peer_in.st != SC_OK) {
		dev->sync(); /* what failed behind the copy is this job's too */
		snprintf(job->error, sizeof(job->error), "rank %d: %s", e->p.rank,
			 e->stage.peer_in.what);
		log_job_error(job);
		compute_fail(job, e->stage.peer_in.st);
		return;
	}
	if (st != SC_OK && job->error[0]) { /* the collective's own account (logged) */
		error_rank(e, job);
		compute_fail(job, st);
		return;
	}
	/* the local step is done (and any failure of it known) before the communication
	 * stage sends the buffer; a failure a sync within it returned (and cleared) is the
	 * job's too */
	if (st == SC_OK)
		st = dev->sync();
	if (st != SC_OK) {
		snprintf(job->error, sizeof(job->error),
			 "rank %d: the %s device failed summing the node's trainers: %s",
			 e->p.rank, dev->name, scd_job_stage_why(dev, st));
		log_job_error(job);
		compute_fail(job, st);
	}
}

/* The collective's exchange over the transport it takes (the mesh, or for a buffer on a
 * GPU on every rank, as the verdict round says, the one gpunet picks where the collective
 * takes it), its bytes and its report. */
static sc_status_t comm_run(scd_engine_t *e, scd_job_t *job, const scd_coll_desc_t *c,
			    scd_coll_ctx_t *x, int all_cuda)
{
	sc_status_t st;
	/* a process set's job picks over its view, with the set's own communicator */
	scd_gpunet_t *g = job->nodes
			      ? scd_psviews_gpunet(&e->views, job, e->p.transport, e->p.secret)
			      : e->gpunet;
	if (all_cuda && c->gpunet && !g) {
		st = job->status = SC_ERR_NOMEM;
		snprintf(job->error, sizeof(job->error),
			 "process set %u: out of memory for its GPU transport", job->pset);
		error_rank(e, job);
		log_job_error(job);
		return st;
	}
	if (all_cuda && c->gpunet &&
	    (st = scd_gpunet_pick(g, job->run.t, job->timeout_ms, &x->t, &x->t_alpha_s,
				  &x->t_beta_s_per_byte, job->error, sizeof(job->error))) !=
		SC_OK) {
		job->status = st;
		error_rank(e, job);
		log_job_error(job);
		return st;
	}
	scd_transport_t *t = x->t;
	job->transport_name = t->ops->name;
	scd_transport_counters_t c0, c1;
	t->ops->counters(t, &c0);
	st = c->run(x, job);
	t->ops->counters(t, &c1);
	job->bytes_sent = c1.bytes_sent - c0.bytes_sent;
	job->bytes_recv = c1.bytes_recv - c0.bytes_recv;
	if (c->predict)
		c->predict(x, job);
	if (st != SC_OK && t != job->run.t)
		scd_gpunet_failed(g);
	/* a carried verdict's failure is the one every rank has (logged); any other is
	 * logged where the transport or the scheme saw it */
	if (st != SC_OK && job->run.prep.verdict &&
	    scd_verdict_carry_end(job->run.prep.verdict, job, st))
		return job->status;
	if (st != SC_OK) {
		job->status = st;
		error_rank(e, job);
	}
	return st;
}

/* Whether job's collective carries the input check round in its one exchange over the
 * mesh or its set's view (coll.h): not under transport = nccl for a global job, where a
 * buffer on a GPU on every rank must take NCCL, and only the round can tell that it is. */
static int carries_verdict(const scd_engine_t *e, const scd_coll_desc_t *c,
			   const scd_job_t *job)
{
	if (!c->carries_verdict ||
	    (c->gpunet && e->p.transport && !strcmp(e->p.transport, "nccl")))
		return 0;
	return c->carries_verdict(job, job->run.t->size);
}

/*
 * A fast turn (coll/job.h, scd_fast_t) before its exchange: SC_OK to run it. A turn of an
 * epoch that ended at an earlier turn (e->fast_dead) comes back unrun, discarded, with no
 * byte sent, as on every rank (each discarded or refused that earlier turn alike). A turn
 * that cannot carry its words in the one-round sum of the global set fails, alike on
 * every rank (decided from agreed fields), also with no byte sent.
 */
static sc_status_t fast_start(scd_engine_t *e, const scd_coll_desc_t *c, scd_job_t *job)
{
	if (job->fast.epoch == e->fast_dead) {
		job->fast.discarded = 1;
		job->status = SC_IN_PROGRESS;
		snprintf(job->error, sizeof(job->error),
			 "fast turn %llu of epoch %llu not run: the epoch ended at an earlier "
			 "turn",
			 (unsigned long long)job->fast.turn,
			 (unsigned long long)job->fast.epoch);
		return job->status;
	}
	if (job->nodes || !carries_verdict(e, c, job)) {
		job->status = SC_ERR_INVALID;
		snprintf(job->error, sizeof(job->error),
			 "tensor '%s': a fast turn runs only as the one-round sum of the "
			 "global set (%llu elements)",
			 job->n_items > 0 && job->items[0].name ? job->items[0].name : "?",
			 (unsigned long long)job->total_numel);
		error_rank(e, job);
		log_job_error(job);
		return job->status;
	}
	return SC_OK;
}

/* A job on a mesh whose streams a job found out of step (e->untrusted) fails unrun, with
 * no byte sent, its mesh marked broken (the world re-forms, holding it until then, as the
 * job that found it); the bytes of the exchange that did not pair would otherwise be read
 * by this one's. */
static sc_status_t untrusted_refuse(scd_engine_t *e, scd_job_t *job)
{
	if (!e->untrusted[0])
		return SC_OK;
	job->status = SC_ERR_PROTOCOL;
	job->mesh_broken = 1;
	snprintf(job->error, sizeof(job->error),
		 "rank %d: not run: the mesh's streams are out of step until the world "
		 "re-forms (%s)",
		 e->p.rank, e->untrusted);
	scd_debug(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
	return job->status;
}

/* The delivery of a job's result to its trainers (under deliver_mu): nothing once a
 * fence came after its submission (the world re-formed: its trainers were told that it
 * failed, and their buffers hold their next step's input). */
static void deliver(scd_engine_t *e, const scd_coll_desc_t *c, scd_coll_ctx_t *x,
		    scd_job_t *job)
{
	const scd_device_ops_t *dev = job->run.dev;
	sc_status_t st;
	if (job->fence != e->fence) {
		job->status = SC_ERR_PEER;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: the world re-formed before the result was delivered",
			 e->p.rank);
		return;
	}
	if (c->deliver && (st = c->deliver(x, job)) != SC_OK) {
		job->status = st;
		error_rank(e, job);
		log_job_error(job);
		return;
	}
	/* the trainers read their results once the job is back: they must be there (a GPU
	 * trainer's stream may instead wait on its done event, recorded behind them) */
	if ((st = scd_job_stage_done(e->p.rank, job)) != SC_OK)
		return;
	if ((st = dev->sync()) != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error),
			 "rank %d: the %s device failed delivering the result: %s", e->p.rank,
			 dev->name, scd_job_stage_why(dev, st));
		log_job_error(job);
	}
}

/* The communication stage of a buffer: the network probe when due, the input check
 * round (or its words carried in the collective's exchange, with a fast turn's), the
 * collective's exchange and delivery, the GPU trainers' done events. */
static void comm_buffer(scd_engine_t *e, scd_job_t *job)
{
	scd_job_run_t *run = &job->run;
	const scd_coll_desc_t *c = scd_coll_desc(job->coll.kind);
	if (untrusted_refuse(e, job) != SC_OK ||
	    (scd_job_fast(job) && fast_start(e, c, job) != SC_OK))
		return;
	/* the probe is the whole world's: never among a set's nodes alone */
	sc_status_t st =
	    job->probe && !job->nodes
		? scd_netprobe_run(&e->net, e->transport, e->p.world_size, job->timeout_ms)
		: SC_OK;
	if (st != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error), "rank %d: network probe: %s",
			 e->p.rank, scd_transport_error());
		return;
	}
	/* the input check round, or its words carried in the collective's one exchange */
	int all_cuda = 0;
	scd_verdict_carry_t carry;
	run->prep.verdict = NULL;
	if (scd_job_fast(job)) {
		scd_fast_carry_init(&carry, job, &run->fault, e->p.rank, e->p.local_size);
		run->prep.verdict = &carry;
	} else if (carries_verdict(e, c, job)) {
		scd_verdict_carry_init(&carry, job, &run->fault, e->p.rank, e->p.local_size);
		run->prep.verdict = &carry;
	} else if ((st = scd_verdict_input(run->t, job, &run->fault, e->p.rank, e->p.local_size,
					   &all_cuda)) != SC_OK)
		return;
	scd_coll_ctx_t x = coll_ctx(e, job, &e->stage.peer_out);
	st = comm_run(e, job, c, &x, all_cuda);
	run->prep.verdict = NULL;
	/* a turn discarded, or whose words were refused, ends its epoch here */
	if (scd_job_fast(job) && (job->fast.discarded || (st != SC_OK && job->mesh_broken)))
		e->fast_dead = job->fast.epoch;
	if (st != SC_OK && job->mesh_broken)
		snprintf(e->untrusted, sizeof(e->untrusted), "%.*s",
			 (int)sizeof(e->untrusted) - 1, job->error);
	if (st != SC_OK)
		return;
	pthread_mutex_lock(&e->deliver_mu);
	deliver(e, c, &x, job);
	pthread_mutex_unlock(&e->deliver_mu);
}

/* The world re-formed: the buffers' state (scheme contexts, residuals) belongs to the old
 * mesh and its peers, so it goes with the old transport; every rank starts again from
 * none, as a daemon that joins anew does. The communication stage has drained. */
static sc_status_t drop_mesh(scd_engine_t *e)
{
	scd_bufctx_table_destroy(e->bufs);
	e->bufs = NULL;
	scd_presel_clear(e->presel);  /* the old world's cache ids */
	scd_psviews_clear(&e->views); /* views of the old mesh */
	pthread_mutex_lock(&e->mu);
	scd_transport_t *old = e->transport;
	e->transport = NULL;
	pthread_mutex_unlock(&e->mu);
	scd_transport_destroy(old);
	return scd_bufctx_table_create(&e->p.schemes, &e->bufs);
}

static void run_mesh(scd_engine_t *e, scd_job_t *job)
{
	int tmo = e->p.join_timeout_ms;
	/* the buffers' schemes are priced with the nodes per core of this world (the key's,
	 * else what the join learnt), the same on every rank; the table starts anew with it */
	e->p.schemes.cpu_share = e->p.cpu_share > 0 ? e->p.cpu_share : job->cpu_share;
	scd_info(SCD_SUB_ENGINE, "schemes priced at %.3g nodes per core (%s)",
		 e->p.schemes.cpu_share,
		 e->p.cpu_share > 0 ? "the cpu_share key"
				    : "the busiest host's, learnt at join");
	/* a dead epoch was the old world's: every rank of the new one starts with none (a
	 * daemon started anew has none), whatever turn a failure split in the old one */
	e->fast_dead = 0;
	e->untrusted[0] = '\0';
	if (drop_mesh(e) != SC_OK) {
		job->status = SC_ERR_NOMEM;
		snprintf(job->error, sizeof(job->error), "no memory for the buffers' state");
		return;
	}
	/* The backend logs a failure where it detects it; the status goes up unchanged. */
	scd_gpunet_reset(e->gpunet);
	scd_transport_t *t = NULL;
	sc_status_t st = scd_transport_create(&job->boot, ENGINE_SCRATCH_BYTES, tmo, &t);
	pthread_mutex_lock(&e->mu); /* scd_engine_peer_gone reads it from the loop thread */
	e->transport = t;
	pthread_mutex_unlock(&e->mu);
	if (st == SC_OK)
		st = scd_netprobe_run(&e->net, e->transport, e->p.world_size, tmo);
	if (st != SC_OK) {
		job->status = st;
		snprintf(job->error, sizeof(job->error), "data plane mesh: %s",
			 scd_transport_error());
		return;
	}
	/* the cpu device's fusion buffers, ahead of the first job (another device gets its
	 * own at its first fused jobs) */
	if (scd_slots_prepare(&e->slots) != SC_OK)
		scd_warn(SCD_SUB_ENGINE,
			 "no memory for the fusion buffers yet: the first fused "
			 "job tries again");
}

/* Wakes the threads waiting on e->cv: the compute thread above all (the stop's and the
 * communication queue's waits too); counts.asleep tells that none did since the compute
 * thread last began to wait with no deadline. Called with e->mu held. */
static void wake_compute_locked(scd_engine_t *e)
{
	e->counts.asleep = 0;
	pthread_cond_broadcast(&e->cv);
}

/* Wakes the loop to collect the hand-backs queued (owed ones too). Called with e->mu held. */
static void wake_loop_locked(scd_engine_t *e)
{
	e->owed = 0;
	e->counts.wakes++;
	uv_async_send(&e->async);
}

/*
 * A hand-back that ended its trainers' operations in their headers (early_done_locked) and
 * ran on the compute thread, whose wait for the next job then keeps the deadline: the loop
 * is not woken for it at once. The woken trainer's next message makes the loop collect it
 * (scd_engine_collect, which the loop calls before it reads one), so in a loop of small
 * operations the loop wakes once a step, for the message, and the trainer does not share
 * the cores with the loop's second wake-up as it resumes. Anything else gets the hand-back
 * at most ENGINE_OWED_US later: the compute thread wakes the loop then, or when a job comes
 * that no collect preceded (engine_main, owed_flush_locked). Called with e->mu held.
 */
static void owe_locked(scd_engine_t *e)
{
	if (e->owed)
		return;
	e->owed_until = scd_deadline_on(CLOCK_MONOTONIC, ENGINE_OWED_US);
	e->owed = 1;
}

/* The compute thread, about to run a job or stop: a hand-back still owed wakes the loop
 * now (the loop collected none since). Called with e->mu held. */
static void owed_flush_locked(scd_engine_t *e)
{
	if (e->owed && e->done_head)
		wake_loop_locked(e);
	e->owed = 0;
}

/* The compute thread's wait for a job (e->mu held): until the owed hand-back's deadline,
 * when one is owed, then it wakes the loop. */
static void wait_job_locked(scd_engine_t *e)
{
	if (!e->owed) {
		e->counts.asleep = 1; /* until a wake-up (wake_compute_locked) */
		pthread_cond_wait(&e->cv, &e->mu);
		return;
	}
	if (pthread_cond_timedwait(&e->cv, &e->mu, &e->owed_until) == ETIMEDOUT)
		owed_flush_locked(e);
}

/* The hand-back's queueing alone (finish_locked). */
static void queue_done_locked(scd_engine_t *e, scd_job_t *job)
{
	job->next = NULL;
	/* (a fast turn whose words were refused set it already: engine/verdict.h) */
	if (job->kind == SCD_JOB_ALLREDUCE && job->status != SC_OK)
		job->mesh_broken =
		    job->mesh_broken || !e->transport || scd_transport_broken(e->transport);
	if (e->done_tail)
		e->done_tail->next = job;
	else
		e->done_head = job;
	e->done_tail = job;
	e->counts.handed++;
	if (job->kind != SCD_JOB_PRESELECT)
		e->in_flight--;
}

/* Hands a finished job to the loop thread. Buffers come back in order (only the
 * communication stage, or the single thread, finishes them); a selection job at submission
 * comes back from the compute stage, ahead of buffers still on the network, and its done
 * handler (world/presel.c) relies on no order and is not urgent (it releases what the
 * selection read). So a selection wakes the loop only when no other job is in the engine:
 * otherwise it waits in the list for that job's hand-back, which comes later (every job
 * ends, within its timeouts) and wakes the loop, which drains the whole list. Called with
 * e->mu held. */
static void finish_locked(scd_engine_t *e, scd_job_t *job)
{
	queue_done_locked(e, job);
	if (job->kind == SCD_JOB_PRESELECT && e->in_flight > 0)
		return;
	wake_loop_locked(e);
}

/*
 * A buffer job that succeeded ends its trainers' operations itself, where their headers can
 * tell it (coll/job.h, done_hdr; the loop's own rule, ctl.c complete_in_header): a trainer
 * woken here gets its result one hand-off sooner than through the loop thread, which is
 * asleep in the meantime on a host whose cores are shared. Under deliver_mu, so no fence
 * came since the delivery (a world that re-formed told the trainers that the job failed;
 * their buffers are their next step's), and with the job already queued for the hand-back
 * (e->mu held): the loop hands back what is queued before it reads a trainer's message
 * (scd_engine_collect), so whatever the woken trainer does next, the loop sees it after
 * this job's end. A mapping the trainer shrank is left to the loop, which tells it why.
 * Every trainer of the job is told so, or none is (one whose header cannot tell it, or
 * whose mapping is lost, leaves them all to the loop): the trainers of a node never hear
 * different outcomes of one job, even when a failure overtakes its hand-back (ctl.c,
 * complete). Returns the operations ended.
 */
static int early_done_locked(scd_engine_t *e, scd_job_t *job)
{
	if (job->kind != SCD_JOB_ALLREDUCE || job->status != SC_OK || job->fence != e->fence)
		return 0;
	int n = 0;
	for (int i = 0; i < job->n_items; i++)
		for (int k = 0; k < job->items[i].n_src; k++) {
			const scd_job_src_t *s = &job->items[i].src[k];
			uint64_t at;
			if (!s->done_hdr || (s->done_guard != UINT32_MAX &&
					     scd_shmguard_lost(s->done_guard, &at)))
				return 0;
			n++;
		}
	for (int i = 0; i < job->n_items; i++)
		for (int k = 0; k < job->items[i].n_src; k++) {
			scd_job_src_t *s = &job->items[i].src[k];
			sc_shm_done(s->done_hdr, s->done_handle);
			s->woke = 1;
		}
	return n;
}

/* Loop thread: hands finished jobs back, one at a time off the queue, so a collect that
 * a hand-back's handler makes (a re-form it starts) goes on in order from the next. */
void scd_engine_collect(scd_engine_t *e)
{
	if (!e)
		return;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		scd_job_t *job = e->done_head;
		if (job) {
			e->done_head = job->next;
			if (!e->done_head)
				e->done_tail = NULL;
		}
		e->owed = 0; /* what is queued is the loop's now */
		pthread_mutex_unlock(&e->mu);
		if (!job)
			return;
		e->p.done(e->p.done_arg, job);
	}
}

/* The communication stage of any job (a passthrough has nothing to send), then its release
 * of what the compute stage held, and its hand-back. */
static void comm_job(scd_engine_t *e, scd_job_t *job)
{
	double cpu0 = scd_thread_cpu_s();
	/* a job a fence overtook exchanges nothing more: one run in place would write its
	 * trainer's buffer, which holds their next step's input once they were told it
	 * failed, and any other its trainers' residuals; one under way when the fence comes
	 * is waited for (scd_engine_quiesce, after peer_gone ends its transfers) */
	if (!job->run.passthrough && touch_begin(e, job)) {
		uint64_t tl = scd_tl_begin();
		comm_buffer(e, job);
		scd_job_tl(job, "buffer", tl);
		touch_end(e);
	}
	scd_bufctx_release(&job->run.prep);
	job->time_s = scd_now_s() - job->run.t0;
	job->cpu_s = job->run.cpu_s + (scd_thread_cpu_s() - cpu0);
	/* the stages run one after the other, so their CPU time fits in the wall time; but a
	 * thread's CPU clock and CLOCK_MONOTONIC are separate clocks, and on a virtual
	 * machine the first can run a few percent ahead over a few milliseconds: keep the
	 * promise of sparsecomm.h (cpu_s at most measured_s) */
	if (job->cpu_s > job->time_s)
		job->cpu_s = job->time_s;
	if (job->run.slot >= 0)
		scd_slots_release(&e->slots, job->run.kind, job->run.slot);
	if (job->run.coo_copy)
		job->run.coo_copy_dev->free(job->run.coo_copy);
	job->run.coo_copy = NULL;
	pthread_mutex_lock(&e->deliver_mu);
	pthread_mutex_lock(&e->mu);
	queue_done_locked(e, job);
	int early = early_done_locked(e, job);
	e->counts.early += (uint64_t)early;
	if (early && (e->comm_inline || !e->p.pipeline))
		owe_locked(e); /* none of this job's trainers waits for the loop */
	else
		wake_loop_locked(e);
	pthread_mutex_unlock(&e->mu);
	pthread_mutex_unlock(&e->deliver_mu);
}

/* Waits (e->mu held) until the communication stage has nothing queued or running. */
static void drain_locked(scd_engine_t *e)
{
	while ((e->cq_head || e->comm_busy) && !e->comm_stopped)
		pthread_cond_wait(&e->cv, &e->mu);
}

/* Waits until the communication stage is idle (a view that goes may be in use there). */
static void drain(void *arg)
{
	scd_engine_t *e = arg;
	pthread_mutex_lock(&e->mu);
	drain_locked(e);
	pthread_mutex_unlock(&e->mu);
}

/* What a buffer's job runs over (psview.h, scd_psviews_transport); fails the job when
 * it cannot run. */
static sc_status_t job_transport(scd_engine_t *e, scd_job_t *job)
{
	sc_status_t st =
	    scd_psviews_transport(&e->views, e->transport, e->p.local_size, job, drain, e);
	if (st != SC_OK) {
		job->status = st;
		job->run.passthrough = 1;
		error_rank(e, job);
		log_job_error(job);
	}
	return st;
}

/* A selection job's device, as a buffer's compute stage finds it (compute_buffer): the
 * sources' device, a GPU not lost and the residual on the engine GPU, and room for copies
 * of sources on other GPUs (the selection waits for the GPU trainers' ready events
 * itself). A lost GPU is no failure here: the buffer reports it. A failure is said in
 * job->error with this rank and logged. */
static sc_status_t preselect_device(scd_engine_t *e, scd_job_t *job, scd_coll_ctx_t *x)
{
	scd_job_run_t *run = &job->run;
	sc_status_t st = scd_job_device(e->p.rank, job, &run->kind, &run->dev);
	if (st == SC_OK && scd_device_lost(run->kind))
		return SC_ERR_SYSTEM;
	if (st == SC_OK && (st = scd_job_stage_check(e->p.rank, job, run->kind)) == SC_OK &&
	    (st = scd_job_stage_reserve(x->pe, run->dev, job, run->kind)) != SC_OK) {
		snprintf(
		    job->error, sizeof(job->error),
		    "rank %d: tensor '%s': no room on the engine GPU cuda:%d to copy the "
		    "node's sources on other GPUs over for its selection at submission: %s",
		    e->p.rank, scd_coll_item_name(&job->items[0]), scd_device_home(run->kind),
		    sc_status_message(st));
		log_job_error(job);
	}
	if (st != SC_OK)
		return st;
	x->kind = run->kind;
	x->dev = run->dev;
	x->nonfinite = run->kind == SCD_DEVICE_CPU ? job->nonfinite : SCD_NONFINITE_PASS;
	return SC_OK;
}

/* A selection job at submission (coll/presel.h), on the compute thread, handed back as
 * soon as it ends (finish_locked: with the next job's wake-up of the loop when one is in
 * the engine): it has nothing to send and nothing waits for it in the pipeline's order. A
 * failed one is logged; its buffer then sums and selects the tensor itself. */
static void preselect_job(scd_engine_t *e, scd_job_t *job)
{
	job->status = SC_OK;
	job->run = (scd_job_run_t){.slot = -1, .t0 = scd_now_s(), .passthrough = 1};
	scd_fault_t fault = {0};
	scd_coll_ctx_t x = {.rank = e->p.rank,
			    .local_size = e->p.local_size,
			    .stage = &e->stage,
			    .pe = &e->stage.peer_in,
			    .presel = e->presel,
			    .fault = &fault};
	job->error[0] = 0;
	sc_status_t st = preselect_device(e, job, &x); /* said and logged there */
	if (st == SC_OK && (st = scd_allreduce_preselect(&x, e->presel, job)) != SC_OK) {
		error_rank(e, job);
		log_job_error(job);
	}
	job->status = st;
	job->time_s = job->compute_s = scd_now_s() - job->run.t0;
	pthread_mutex_lock(&e->mu);
	finish_locked(e, job);
	pthread_mutex_unlock(&e->mu);
}

/* The compute stage of any job. A mesh or forget job changes what every buffer uses (the
 * transport, the buffers' state), so it waits for the communication stage to drain. */
static void compute_job(scd_engine_t *e, scd_job_t *job)
{
	job->status = SC_OK;
	job->run = (scd_job_run_t){.slot = -1, .t0 = scd_now_s()};
	double cpu0 = scd_thread_cpu_s();
	if (job->kind != SCD_JOB_ALLREDUCE) {
		pthread_mutex_lock(&e->mu);
		drain_locked(e);
		pthread_mutex_unlock(&e->mu);
		job->run.passthrough = 1;
		if (job->kind == SCD_JOB_MESH)
			run_mesh(e, job);
		else {
			if (job->forget_cache_id != UINT32_MAX) {
				if (!job->forget_node_only)
					scd_bufctx_forget(e->bufs, job->forget_cache_id);
				scd_presel_forget(e->presel, job->forget_cache_id);
			}
			scd_presel_forget_key(e->presel, job->forget_presel_key);
		}
	} else if (!touch_begin(e, job)) {
		job->run.passthrough = 1; /* dropped at its hand-back (world/apply.c) */
	} else {
		if (!e->transport) {
			snprintf(job->error, sizeof(job->error),
				 "rank %d: the data plane never formed", e->p.rank);
			scd_error(SCD_SUB_ENGINE, "%s: %s", SCD_JOB_NAME(job), job->error);
			job->status = SC_ERR_PEER;
			job->run.passthrough = 1; /* no transport to run the check round on */
		} else if (job_transport(e, job) == SC_OK) {
			uint64_t tl = scd_tl_begin();
			compute_buffer(e, job);
			scd_job_tl(job, "compress", tl);
		}
		touch_end(e);
	}
	job->compute_s = scd_now_s() - job->run.t0;
	job->run.cpu_s = scd_thread_cpu_s() - cpu0;
}

/*
 * Runs job's communication stage on the compute thread instead of handing it over, when
 * that saves the hand-over's wake-up without holding back another job: a small host job
 * (ENGINE_INLINE_BYTES, whose exchange is short) with the communication stage idle and no
 * job waiting for the compute stage. comm_busy keeps the communication thread off the
 * stage meanwhile, so jobs still communicate one at a time, in order; the timeline's
 * events go on the engine.comm lane as the communication thread's do. Returns whether it
 * ran the job. Called with e->mu held (released while the job runs).
 */
static int comm_here_locked(scd_engine_t *e, scd_job_t *job)
{
	uint64_t bytes = job->total_numel * sc_dtype_size(job->dtype);
	if (job->kind != SCD_JOB_ALLREDUCE || job->run.kind != SCD_DEVICE_CPU ||
	    bytes > ENGINE_INLINE_BYTES || e->cq_head || e->comm_busy || e->head || e->stop ||
	    e->comm_stopped)
		return 0;
	e->comm_busy = 1;
	scd_stage_hand_over(&e->stage.peer_out);
	e->comm_inline = 1;
	pthread_mutex_unlock(&e->mu);
	scd_tl_thread("engine.comm");
	comm_job(e, job);
	scd_tl_thread("engine.compute");
	pthread_mutex_lock(&e->mu);
	e->comm_busy = 0;
	e->inline_jobs++;
	wake_compute_locked(e);
	return 1;
}

/* The compute thread: takes jobs in submission order, runs their compute stage, and
 * queues them for the communication stage (at most one waiting), or runs that too when
 * the engine is not pipelined. */
static void *engine_main(void *arg)
{
	scd_engine_t *e = arg;
	scd_tl_thread(e->p.pipeline ? "engine.compute" : "engine");
	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->head && !e->stop)
			wait_job_locked(e);
		owed_flush_locked(e);
		if (e->stop)
			break;
		scd_job_t *job = e->head;
		e->head = job->next;
		if (!e->head)
			e->tail = NULL;
		pthread_mutex_unlock(&e->mu);
		if (job->kind == SCD_JOB_PRESELECT) {
			preselect_job(e, job);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		compute_job(e, job);
		if (!e->p.pipeline) {
			comm_job(e, job);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		pthread_mutex_lock(&e->mu);
		if (comm_here_locked(e, job))
			continue;
		while (e->cq_n >= 1 && !e->stop && !e->comm_stopped)
			pthread_cond_wait(&e->cv, &e->mu);
		job->next = NULL;
		if (e->cq_tail)
			e->cq_tail->next = job;
		else
			e->cq_head = job;
		e->cq_tail = job;
		e->cq_n++;
		pthread_cond_signal(&e->comm_cv);
	}
	e->stopped = 1;
	wake_compute_locked(e);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* The communication thread: the communication stage of each job, in order. */
static void *comm_main(void *arg)
{
	scd_engine_t *e = arg;
	scd_tl_thread("engine.comm");
	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->cq_head && !e->stop) {
			pthread_cond_wait(&e->comm_cv, &e->mu);
			e->counts.comm_wakes++;
		}
		if (e->stop)
			break;
		scd_job_t *job = e->cq_head;
		e->cq_head = job->next;
		if (!e->cq_head)
			e->cq_tail = NULL;
		e->cq_n--;
		e->comm_busy = 1;
		if (e->comm_inline) /* the compute thread ran the last one (comm_here_locked) */
			scd_stage_hand_over(&e->stage.peer_out);
		e->comm_inline = 0;
		wake_compute_locked(e);
		pthread_mutex_unlock(&e->mu);
		comm_job(e, job);
		pthread_mutex_lock(&e->mu);
		e->comm_busy = 0;
		wake_compute_locked(e);
	}
	e->comm_stopped = 1;
	wake_compute_locked(e);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* Loop thread: hands finished jobs back (async callbacks coalesce: drain the queue). */
static void on_async(uv_async_t *h)
{
	scd_engine_collect(h->data);
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h);
}

/* Loop thread: the selections queued without a wake-up have waited ENGINE_LAZY_MS. */
static void on_lazy(uv_timer_t *t)
{
	scd_engine_t *e = t->data;
	pthread_mutex_lock(&e->mu);
	if (e->head)
		wake_compute_locked(e);
	pthread_mutex_unlock(&e->mu);
}

/* Loop thread: bounds the wait of a selection just queued unwoken (once armed, the timer
 * covers the later ones too: it wakes the thread for every job queued by then). */
static void lazy_arm(scd_engine_t *e)
{
	if (!uv_is_active((uv_handle_t *)e->lazy_timer))
		uv_timer_start(e->lazy_timer, on_lazy, ENGINE_LAZY_MS, 0);
}

/* A small selection of host memory: its work costs less than the compute thread's
 * wake-up. A device's selection is not deferred: its kernels then overlap the backward
 * pass of the tensors after it, instead of waiting in front of its buffer's job. */
static int lazy_job(const scd_engine_t *e, const scd_job_t *job)
{
	if (job->kind != SCD_JOB_PRESELECT || job->total_numel > ENGINE_LAZY_NUMEL ||
	    !e->lazy_timer)
		return 0;
	for (int i = 0; i < job->n_items; i++)
		for (int s = 0; s < job->items[i].n_src; s++)
			if (job->items[i].src[s].device != SCD_DEVICE_CPU)
				return 0;
	return 1;
}

sc_status_t scd_engine_create(const scd_engine_params_t *p, scd_engine_t **e_p)
{
	scd_engine_t *e = calloc(1, sizeof(*e));
	if (!e)
		return SC_ERR_NOMEM;
	e->p = *p;
	scd_slots_init(&e->slots, p->fusion_bytes);
	scd_netprobe_init(&e->net);
	scd_psviews_init(&e->views);
	if (scd_gpunet_create(p->transport, p->secret, &e->gpunet) != SC_OK) {
		free(e);
		return SC_ERR_NOMEM;
	}
	if (scd_bufctx_table_create(&e->p.schemes, &e->bufs) != SC_OK ||
	    scd_presel_table_create(e->p.schemes.sketch_block, &e->presel) != SC_OK) {
		scd_bufctx_table_destroy(e->bufs);
		scd_gpunet_destroy(e->gpunet);
		free(e);
		return SC_ERR_NOMEM;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->deliver_mu, NULL);
	pthread_condattr_t ca; /* e->cv's timed waits count on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_cond_init(&e->touch_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&e->comm_cv, NULL);
	uv_async_init(p->loop, &e->async, on_async);
	e->async.data = e;
	e->comm_stopped = !e->p.pipeline;
	int failed = e->p.pipeline && pthread_create(&e->comm_thread, NULL, comm_main, e) != 0;
	if (!failed && pthread_create(&e->thread, NULL, engine_main, e) != 0) {
		pthread_mutex_lock(&e->mu);
		e->stop = 1;
		pthread_cond_broadcast(&e->comm_cv);
		pthread_mutex_unlock(&e->mu);
		scd_slots_stop(&e->slots);
		if (e->p.pipeline)
			pthread_join(e->comm_thread, NULL);
		failed = 1;
	}
	if (failed) {
		scd_bufctx_table_destroy(e->bufs);
		scd_presel_table_destroy(e->presel);
		scd_gpunet_destroy(e->gpunet);
		uv_close((uv_handle_t *)&e->async, on_closed); /* frees e once closed */
		return SC_ERR_SYSTEM;
	}
	/* without the timer, every job wakes the compute thread */
	if ((e->lazy_timer = malloc(sizeof(*e->lazy_timer))) &&
	    uv_timer_init(p->loop, e->lazy_timer) != 0) {
		free(e->lazy_timer);
		e->lazy_timer = NULL;
	}
	if (e->lazy_timer)
		e->lazy_timer->data = e;
	*e_p = e;
	return SC_OK;
}

void scd_engine_submit(scd_engine_t *e, scd_job_t *job)
{
	if (!e) { /* destroyed (the daemon's teardown): its trainers were failed already */
		job_free(job);
		return;
	}
	job->next = NULL;
	job->fence = e->fence; /* written by the submitting thread alone */
	pthread_mutex_lock(&e->mu);
	if (e->tail)
		e->tail->next = job;
	else
		e->head = job;
	e->tail = job;
	if (job->kind != SCD_JOB_PRESELECT)
		e->in_flight++;
	/* a small selection waits for the next wake-up, within ENGINE_LAZY_MS */
	int lazy = lazy_job(e, job);
	if (lazy)
		e->counts.lazy++;
	else
		wake_compute_locked(e); /* the compute thread (the communication
					 * thread waits on comm_cv, for the compute
					 * stage's jobs only) */
	pthread_mutex_unlock(&e->mu);
	if (lazy)
		lazy_arm(e);
}

scd_transport_t *scd_engine_transport(scd_engine_t *e)
{
	return e ? e->transport : NULL;
}

void scd_engine_fence(scd_engine_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->deliver_mu); /* a delivery under way ends first */
	e->fence++;
	pthread_mutex_unlock(&e->deliver_mu);
}

int scd_engine_quiesce(scd_engine_t *e, int timeout_ms)
{
	if (!e)
		return 0;
	struct timespec dl = scd_deadline_on(CLOCK_MONOTONIC, (int64_t)timeout_ms * 1000);
	pthread_mutex_lock(&e->deliver_mu);
	while (e->touching > 0)
		if (pthread_cond_timedwait(&e->touch_cv, &e->deliver_mu, &dl) != 0)
			break;
	int left = e->touching;
	pthread_mutex_unlock(&e->deliver_mu);
	return left;
}

void scd_engine_peer_gone(scd_engine_t *e, int rank)
{
	if (!e) /* no engine yet (or a harness without one) */
		return;
	pthread_mutex_lock(&e->mu);
	scd_transport_t *t = e->transport;
	if (t && t->ops->peer_gone)
		t->ops->peer_gone(t, rank);
	pthread_mutex_unlock(&e->mu);
	scd_gpunet_peer_gone(e->gpunet, rank);
	scd_psviews_peer_gone(&e->views, rank);
}

uint64_t scd_engine_inline_jobs(scd_engine_t *e)
{
	if (!e)
		return 0;
	pthread_mutex_lock(&e->mu);
	uint64_t n = e->inline_jobs;
	pthread_mutex_unlock(&e->mu);
	return n;
}

scd_engine_counts_t scd_engine_counts(scd_engine_t *e)
{
	if (!e)
		return (scd_engine_counts_t){0};
	pthread_mutex_lock(&e->mu);
	scd_engine_counts_t c = e->counts;
	c.asleep = c.asleep && !e->owed && !e->comm_busy && !e->cq_head;
	pthread_mutex_unlock(&e->mu);
	return c;
}

void scd_engine_set_fusion_bytes(scd_engine_t *e, uint64_t bytes)
{
	if (e)
		scd_slots_set_want(&e->slots, bytes);
}

sc_status_t scd_engine_destroy(scd_engine_t *e, int timeout_ms)
{
	if (!e)
		return SC_OK;
	/* e->cv's clock */
	struct timespec dl = scd_deadline_on(CLOCK_MONOTONIC, (int64_t)timeout_ms * 1000);
	pthread_mutex_lock(&e->mu);
	e->stop = 1;
	wake_compute_locked(e);
	pthread_cond_broadcast(&e->comm_cv);
	scd_slots_stop(&e->slots); /* the compute stage may wait for a slot */
	while (!e->stopped || !e->comm_stopped)
		if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) != 0)
			break;
	int stopped = e->stopped && e->comm_stopped;
	pthread_mutex_unlock(&e->mu);
	if (!stopped)
		return SC_ERR_TIMEOUT;
	pthread_join(e->thread, NULL);
	if (e->p.pipeline)
		pthread_join(e->comm_thread, NULL);
	/* what the stop left queued (no trainer waits for it any more: the daemon stops) */
	scd_job_t *lists[] = {e->head, e->cq_head, e->done_head};
	for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++)
		for (scd_job_t *j = lists[k], *next; j; j = next) {
			next = j->next;
			job_free(j);
		}
	e->head = e->cq_head = e->done_head = NULL;
	scd_bufctx_table_destroy(e->bufs);
	scd_presel_table_destroy(e->presel);
	scd_gpunet_destroy(e->gpunet);
	scd_psviews_destroy(&e->views);
	scd_transport_destroy(e->transport);
	scd_slots_destroy(&e->slots);
	scd_netprobe_destroy(&e->net);
	scd_coll_stage_free(&e->stage);
	if (e->lazy_timer) {
		uv_timer_stop(e->lazy_timer);
		uv_close((uv_handle_t *)e->lazy_timer, on_timer_closed);
	}
	uv_close((uv_handle_t *)&e->async, on_closed); /* frees e */
	return SC_OK;
}
