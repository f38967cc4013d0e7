/*
 * itest_ctl.c: sparsectl against the daemons of a running job.
 *
 * Each trainer runs build/bin/sparsectl (or $SPARSECTL) on its own node's socket while
 * its client is connected: `status --json` must describe this node and this trainer,
 * `stats --json` must list the tensors the job reduced with calls > 0 (and the time inside
 * exchanges within the measured time), `pending --json` must show a tensor some rank
 * holds back, and `config set cycle_time_ms` issued on one node (the coordinator's, then a
 * non-coordinator's) must be visible through `config get` on every node's socket. Invalid
 * settings must be refused: an unknown scheme or a malformed scheme_pins with a JSON error
 * naming the key and the value, and the old value still in force on every node; a valid
 * scheme_pins is followed (the pinned tensor runs the scheme it names). Once the
 * node's trainers have left, `stats` still lists their tensors, and `stats --reset`
 * clears them.
 */
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CTL_LIMIT_MS	 20000 /* one sparsectl run */
#define CTL_PROPAGATE_MS 10000 /* a config change reaching every node */
#define CTL_OUT_BYTES	 (1 << 20)

static char ctl_path[4200];

void it_sparsectl_find(void)
{
	const char *env = getenv("SPARSECTL");
	snprintf(ctl_path, sizeof(ctl_path), "%s", env && *env ? env : "");
	if (!*ctl_path)
		snprintf(ctl_path, sizeof(ctl_path), "%s/sparsectl", it_env.self_dir);
	if (access(ctl_path, X_OK) != 0)
		IT_FAIL("cannot run sparsectl at %s (set $SPARSECTL)", ctl_path);
}

/* See itest.h. */
int it_run_ctl(const char *sock, char *out, size_t out_len, const char *const *args)
{
	const char *argv[16];
	int n = 0;
	argv[n++] = ctl_path;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--json";
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		IT_FAIL("pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		IT_FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(pfd[1], 1);
		execv(ctl_path, (char *const *)argv);
		dprintf(2, "cannot run %s: %s\n", ctl_path, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	size_t len = 0;
	double deadline = it_now_s() + CTL_LIMIT_MS / 1000.0;
	int killed = 0;
	for (;;) {
		int left = (int)((deadline - it_now_s()) * 1000.0);
		if (left <= 0) {
			kill(pid, SIGKILL);
			killed = 1;
			break;
		}
		struct pollfd p = {pfd[0], POLLIN, 0};
		int k = poll(&p, 1, left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			continue;
		ssize_t r = read(pfd[0], out + len, out_len - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == out_len - 1)
			break;
	}
	out[len] = 0;
	close(pfd[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (killed)
		IT_FAIL("sparsectl %s %s did not finish within %d ms", args[0],
			args[1] ? args[1] : "", CTL_LIMIT_MS);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs sparsectl and parses its JSON; fails on a non-zero exit or invalid JSON. */
static it_json_t *ctl_json(const char *sock, const char *const *args)
{
	static char out[CTL_OUT_BYTES];
	char err[256];
	int rc = it_run_ctl(sock, out, sizeof(out), args);
	if (rc != 0)
		IT_FAIL("sparsectl --socket %s --json %s %s exited with %d; output: %.500s",
			sock, args[0], args[1] ? args[1] : "", rc, out);
	it_json_t *v = it_json_parse(out, err, sizeof(err));
	if (!v)
		IT_FAIL("sparsectl --json %s printed invalid JSON (%s): %.500s", args[0], err,
			out);
	if (v->type != IT_JOBJ)
		IT_FAIL(
		    "sparsectl --json %s printed a JSON value that is not an object: %.200s",
		    args[0], out);
	return v;
}

static const it_json_t *need(const it_json_t *obj, const char *key, it_jtype_t type,
			     const char *what)
{
	const it_json_t *v = it_json_get(obj, key);
	if (!v)
		IT_FAIL("%s: no key \"%s\"", what, key);
	if (v->type != type)
		IT_FAIL("%s: \"%s\" has JSON type %d, expected %d", what, key, (int)v->type,
			(int)type);
	return v;
}

/* The peer pipe is up between the coordinator and every node: on the coordinator "pipe"
 * is true for every other rank, on a node for rank 0 alone (it comes up within a few
 * milliseconds of the world forming: polled for 3 s). */
static void check_pipes(const char *sock, int rank, int ws)
{
	const char *args[] = {"status", NULL};
	char why[160] = "";
	for (int tries = 0; tries < 30; tries++) {
		it_json_t *s = ctl_json(sock, args);
		const it_json_t *peers = need(s, "peers", IT_JARR, "status --json");
		why[0] = 0;
		for (size_t i = 0; i < peers->n && !why[0]; i++) {
			const it_json_t *p = peers->items[i];
			int pr = (int)need(p, "rank", IT_JNUM, "status --json peer")->num;
			int up = need(p, "pipe", IT_JBOOL, "status --json peer")->num != 0;
			int want = pr != rank && (rank == 0 || pr == 0);
			if (up != want)
				snprintf(why, sizeof(why), "node %d: peer %d's pipe is %s",
					 rank, pr, up ? "up" : "not up");
		}
		it_json_free(s);
		if (!why[0] || ws == 1)
			return;
		usleep(100 * 1000);
	}
	IT_FAIL("status --json: %s", why);
}

static void check_status(const char *sock, int node_rank, int node_count)
{
	const char *args[] = {"status", NULL};
	it_json_t *s = ctl_json(sock, args);
	int rank = (int)need(s, "rank", IT_JNUM, "status --json")->num;
	int ws = (int)need(s, "world_size", IT_JNUM, "status --json")->num;
	const it_json_t *peers = need(s, "peers", IT_JARR, "status --json");
	const it_json_t *clients = need(s, "clients", IT_JARR, "status --json");
	if (node_rank >= 0 && rank != node_rank)
		IT_FAIL("status --json: rank %d, but this trainer's node is %d", rank,
			node_rank);
	if (node_count >= 0 && ws != node_count)
		IT_FAIL("status --json: world_size %d, but the job has %d nodes", ws,
			node_count);
	if (ws > 1 && peers->n == 0)
		IT_FAIL("status --json: world of %d daemons but no peers listed", ws);
	/* every peer in the world and heard lately (heartbeats every peer_timeout_ms / 4;
	 * 10000 by default), this node never */
	for (size_t i = 0; i < peers->n; i++) {
		const it_json_t *p = peers->items[i];
		int pr = (int)need(p, "rank", IT_JNUM, "status --json peer")->num;
		const char *state = need(p, "state", IT_JSTR, "status --json peer")->str;
		double heard = need(p, "heard_ms_ago", IT_JNUM, "status --json peer")->num;
		if (strcmp(state, "connected") != 0)
			IT_FAIL("status --json: peer %d is %s while the job runs", pr, state);
		if (pr == rank ? heard != -1 : heard < 0 || heard > 10000)
			IT_FAIL("status --json: peer %d of node %d last heard %g ms ago", pr,
				rank, heard);
	}
	int found = 0;
	for (size_t i = 0; i < clients->n; i++) {
		const it_json_t *pid = it_json_get(clients->items[i], "pid");
		const it_json_t *r = it_json_get(clients->items[i], "rank");
		if (pid && pid->type == IT_JNUM && (int)pid->num == (int)getpid()) {
			found = 1;
			if (!r || r->type != IT_JNUM || (int)r->num != it_env.rank)
				IT_FAIL(
				    "status --json: this trainer (pid %d) is listed with rank "
				    "%d, expected %d",
				    (int)getpid(), r && r->type == IT_JNUM ? (int)r->num : -1,
				    it_env.rank);
		}
	}
	if (!found)
		IT_FAIL("status --json: this trainer (pid %d) is not among the %zu clients",
			(int)getpid(), clients->n);
	it_log("status --json: node %d of %d, %zu peers, %zu clients", rank, ws, peers->n,
	       clients->n);
	it_json_free(s);
	check_pipes(sock, rank, ws);
}

static void check_stats(const char *sock, const char *const *names, int n_names)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = ctl_json(sock, args);
	const it_json_t *ts = need(s, "tensors", IT_JARR, "stats --json");
	for (int k = 0; k < n_names; k++) {
		const it_json_t *hit = NULL;
		for (size_t i = 0; i < ts->n; i++) {
			const it_json_t *nm = it_json_get(ts->items[i], "name");
			if (nm && nm->type == IT_JSTR && strcmp(nm->str, names[k]) == 0)
				hit = ts->items[i];
		}
		if (!hit)
			IT_FAIL("stats --json does not list tensor '%s' (%zu tensors listed)",
				names[k], ts->n);
		const it_json_t *calls = need(hit, "calls", IT_JNUM, names[k]);
		if (!(calls->num > 0))
			IT_FAIL("stats --json: tensor '%s' has calls %g after allreduces",
				names[k], calls->num);
		/* the last call's time inside exchanges is part of its measured time */
		double meas = need(hit, "measured_s", IT_JNUM, names[k])->num,
		       xchg = need(hit, "exchange_s", IT_JNUM, names[k])->num;
		if (!(xchg >= 0 && xchg <= meas))
			IT_FAIL("stats --json: tensor '%s': exchange_s %g of measured_s %g",
				names[k], xchg, meas);
		/* and its CPU time too (one engine thread: never more than the wall time) */
		double cpu = need(hit, "cpu_s", IT_JNUM, names[k])->num;
		if (!(cpu > 0 && cpu <= meas * 1.01 + 1e-4))
			IT_FAIL("stats --json: tensor '%s': cpu_s %g of measured_s %g",
				names[k], cpu, meas);
	}
	it_log("stats --json lists the job's %d tensors with calls > 0 (%zu tensors)", n_names,
	       ts->n);
	it_json_free(s);
}

/* The value of key through `config get KEY --json` on sock. */
static void config_get(const char *sock, const char *key, char *val, size_t val_len)
{
	const char *args[] = {"config", "get", key, NULL};
	it_json_t *s = ctl_json(sock, args);
	const it_json_t *cfg = need(s, "config", IT_JARR, "config get --json");
	for (size_t i = 0; i < cfg->n; i++) {
		const it_json_t *k = it_json_get(cfg->items[i], "key");
		const it_json_t *v = it_json_get(cfg->items[i], "value");
		if (k && k->type == IT_JSTR && strcmp(k->str, key) == 0 && v &&
		    v->type == IT_JSTR) {
			snprintf(val, val_len, "%s", v->str);
			it_json_free(s);
			return;
		}
	}
	IT_FAIL("config get %s --json has no entry for %s", key, key);
}

/* Waits (bounded) until config get on sock shows want; a set propagates through the
 * coordinator, so it may reach a node shortly after the set returned. */
static void expect_config(const char *sock, const char *key, const char *want)
{
	char val[256] = "";
	double deadline = it_now_s() + CTL_PROPAGATE_MS / 1000.0;
	do {
		config_get(sock, key, val, sizeof(val));
		if (strcmp(val, want) == 0)
			return;
		it_sleep_ms(100);
	} while (it_now_s() < deadline);
	IT_FAIL("config get %s on %s: '%s' %d ms after the set, expected '%s'", key, sock, val,
		CTL_PROPAGATE_MS, want);
}

static void config_set(const char *sock, const char *key, const char *value)
{
	char out[4096];
	const char *args[] = {"config", "set", key, value, NULL};
	int rc = it_run_ctl(sock, out, sizeof(out), args);
	if (rc != 0)
		IT_FAIL("sparsectl config set %s %s on %s exited with %d: %.300s", key, value,
			sock, rc, out);
}

/* A refused set: non-zero exit and, under --json, one object whose "error" names the key
 * and the value and whose "status" is the status name. */
static void config_set_refused(const char *sock, const char *key, const char *value)
{
	char out[4096], err[256];
	const char *args[] = {"config", "set", key, value, NULL};
	int rc = it_run_ctl(sock, out, sizeof(out), args);
	if (rc == 0)
		IT_FAIL("sparsectl config set %s %s was accepted (exit 0), expected a refusal",
			key, value);
	it_json_t *v = it_json_parse(out, err, sizeof(err));
	if (!v || v->type != IT_JOBJ)
		IT_FAIL(
		    "sparsectl --json config set %s %s: the error is not a JSON object (%s): "
		    "%.300s",
		    key, value, v ? "not an object" : err, out);
	const it_json_t *e = it_json_get(v, "error"), *st = it_json_get(v, "status");
	if (!e || e->type != IT_JSTR || !strstr(e->str, key) || !strstr(e->str, value))
		IT_FAIL(
		    "sparsectl --json config set %s %s: \"error\" does not name the key and "
		    "the value: %.300s",
		    key, value, out);
	if (!st || st->type != IT_JSTR || strncmp(st->str, "SC_ERR_", 7) != 0)
		IT_FAIL("sparsectl --json config set %s %s: no \"status\" name: %.300s", key,
			value, out);
	it_log("config set %s %s refused (exit %d, %s): %s", key, value, rc, st->str, e->str);
	it_json_free(v);
}

static void check_relative_timeline(const char *sock)
{
	char dir[] = "/tmp/sc-ctl-rel-XXXXXX", was[4096], want[256], path[300];
	if (!mkdtemp(dir) || !getcwd(was, sizeof(was)) || chdir(dir) != 0)
		IT_FAIL("a directory for the relative timeline: %s", strerror(errno));
	config_set(sock, "timeline_file", "ctl-rel-%r.json");
	snprintf(want, sizeof(want), "%s/ctl-rel-%%r.json", dir);
	expect_config(sock, "timeline_file", want);
	config_set(sock, "timeline_file", "");
	expect_config(sock, "timeline_file", "");
	if (chdir(was) != 0)
		IT_FAIL("chdir %s: %s", was, strerror(errno));
	it_sleep_ms(300); /* the other nodes close theirs in the same turn of the stream */
	for (int r = 0; r < 64; r++) {
		snprintf(path, sizeof(path), "%s/ctl-rel-%d.json", dir, r);
		unlink(path);
	}
	if (rmdir(dir) != 0)
		IT_FAIL("rmdir %s: %s (a timeline file other than ctl-rel-RANK.json?)", dir,
			strerror(errno));
	it_log("a relative timeline_file is taken from sparsectl's directory: %s", want);
}

/* Every node's socket when the launcher's layout (DIR/node<i>/ctl.sock) is recognised;
 * otherwise only this node's. Returns how many were written. */
static int node_sockets(char socks[][4200], int max)
{
	const char *s = it_env.socket;
	const char *tail = strstr(s, "/node");
	int node = -1, len = 0;
	if (!tail || it_env.env_node_count < 1 ||
	    sscanf(tail, "/node%d/ctl.sock%n", &node, &len) != 1 || tail[len] != 0) {
		snprintf(socks[0], sizeof(socks[0]), "%s", s);
		return 1;
	}
	int n = it_env.env_node_count < max ? it_env.env_node_count : max;
	for (int i = 0; i < n; i++)
		snprintf(socks[i], sizeof(socks[i]), "%.*s/node%d/ctl.sock", (int)(tail - s), s,
			 i);
	return n;
}

/* The tensor's calls in `stats --json` on sock, or -1 when it is not listed. */
static double stats_calls(const char *sock, const char *name)
{
	return it_stats_number(sock, name, "calls");
}

/* The scheme of the tensor's last call in `stats --json` on sock. */
static void stats_scheme(const char *sock, const char *name, char *out, size_t out_len)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = ctl_json(sock, args);
	const it_json_t *ts = need(s, "tensors", IT_JARR, "stats --json");
	snprintf(out, out_len, "(not listed)");
	for (size_t i = 0; i < ts->n; i++) {
		const it_json_t *nm = it_json_get(ts->items[i], "name");
		if (nm && nm->type == IT_JSTR && strcmp(nm->str, name) == 0)
			snprintf(out, out_len, "%s",
				 need(ts->items[i], "scheme", IT_JSTR, name)->str);
	}
	it_json_free(s);
}

/* Waits (bounded) until the node's daemon lists no trainer. */
static void wait_no_clients(const char *sock)
{
	const char *args[] = {"status", NULL};
	double deadline = it_now_s() + CTL_PROPAGATE_MS / 1000.0;
	for (;;) {
		it_json_t *s = ctl_json(sock, args);
		size_t n = need(s, "clients", IT_JARR, "status --json")->n;
		it_json_free(s);
		if (n == 0)
			return;
		if (it_now_s() > deadline)
			IT_FAIL("status --json still lists %zu trainer(s) %d ms after they "
				"finished",
				n, CTL_PROPAGATE_MS);
		it_sleep_ms(100);
	}
}

/* After every trainer of the node has left: the tensors' statistics are still listed,
 * `stats --reset` prints them once more and clears them. */
static void check_stats_kept(const char *sock, const char *const *names, int n_names)
{
	wait_no_clients(sock);
	for (int k = 0; k < n_names; k++) {
		double calls = stats_calls(sock, names[k]);
		if (!(calls > 0))
			IT_FAIL("stats --json after the trainers left: tensor '%s' %s",
				names[k], calls < 0 ? "is no longer listed" : "has no calls");
	}
	const char *reset[] = {"stats", "--reset", NULL};
	it_json_t *s = ctl_json(sock, reset);
	const it_json_t *r = need(s, "reset", IT_JBOOL, "stats --reset --json");
	if (!(r->num > 0))
		IT_FAIL("stats --reset --json: \"reset\" is false");
	it_json_free(s);
	for (int k = 0; k < n_names; k++)
		if (stats_calls(sock, names[k]) >= 0)
			IT_FAIL("stats --json after stats --reset still lists tensor '%s'",
				names[k]);
	it_log("stats kept %d tensors after the trainers left; --reset cleared them", n_names);
}

/* Node ranks some tensor is waiting for; -1 when pending does not list it. */
static void check_pending(const char *sock, const char *name)
{
	const char *args[] = {"pending", NULL};
	double deadline = it_now_s() + CTL_PROPAGATE_MS / 1000.0;
	for (;;) {
		it_json_t *s = ctl_json(sock, args);
		const it_json_t *ts = it_json_get(s, "tensors");
		for (size_t i = 0; ts && ts->type == IT_JARR && i < ts->n; i++) {
			const it_json_t *nm = it_json_get(ts->items[i], "name");
			if (nm && nm->type == IT_JSTR && strcmp(nm->str, name) == 0) {
				it_log("pending --json lists '%s' while rank 0 holds it back",
				       name);
				it_json_free(s);
				return;
			}
		}
		it_json_free(s);
		if (it_now_s() > deadline)
			IT_FAIL("pending --json does not list '%s', which rank 0 has not "
				"submitted, within %d ms",
				name, CTL_PROPAGATE_MS);
		it_sleep_ms(100);
	}
}

double it_stats_number(const char *sock, const char *name, const char *field)
{
	if (!*ctl_path)
		it_sparsectl_find();
	const char *args[] = {"stats", NULL};
	it_json_t *s = ctl_json(sock, args);
	const it_json_t *ts = need(s, "tensors", IT_JARR, "stats --json");
	double v = -1;
	for (size_t i = 0; i < ts->n; i++) {
		const it_json_t *nm = it_json_get(ts->items[i], "name");
		if (nm && nm->type == IT_JSTR && strcmp(nm->str, name) == 0)
			v = need(ts->items[i], field, IT_JNUM, name)->num;
	}
	it_json_free(s);
	return v;
}

it_json_t *it_ctl_json(const char *sock, const char *const *args)
{
	if (!*ctl_path)
		it_sparsectl_find();
	return ctl_json(sock, args);
}

void it_ctl_config_set(const char *sock, const char *key, const char *value)
{
	if (!*ctl_path)
		it_sparsectl_find();
	config_set(sock, key, value);
	expect_config(sock, key, value);
}

int it_ctl(int argc, char **argv)
{
	it_sparsectl_find();
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	const char *names[] = {"ctl.a", "ctl.b"};
	size_t numel[] = {1000, 10};
	char why[512];
	for (int k = 0; k < 2; k++) {
		sc_tensor_t *t = it_register(c, names[k], SC_FLOAT32, numel[k]);
		for (int step = 0; step < 2; step++) {
			it_fill(sc_tensor_data(t), SC_FLOAT32, numel[k], (uint64_t)step, rank,
				1);
			IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "allreduce of '%s'", names[k]);
			if (it_check(sc_tensor_data(t), SC_FLOAT32, numel[k], (uint64_t)step,
				     size, 1, SC_OP_SUM, why, sizeof(why)))
				IT_FAIL("'%s': wrong sum: %s", names[k], why);
		}
	}
	check_status(it_env.socket, it_env.env_node_rank, it_env.env_node_count);
	check_stats(it_env.socket, names, 2);

	/* pending: rank 0 holds 'ctl.p' back until the other ranks have seen it pending. */
	if (size >= 2) {
		sc_tensor_t *p = it_register(c, "ctl.p", SC_FLOAT32, 100);
		sc_handle_t h = 0;
		it_fill(sc_tensor_data(p), SC_FLOAT32, 100, 3, rank, 1);
		if (rank != 0) {
			IT_CHECK_SC(sc_allreduce_async(c, p, SC_OP_SUM, &h),
				    "allreduce 'ctl.p'");
			if (it_env.env_local_rank == 0 || it_env.env_local_rank < 0)
				check_pending(it_env.socket, "ctl.p");
			it_barrier(c, "ctl.pending", 0);
		} else {
			it_barrier(c, "ctl.pending", 0);
			IT_CHECK_SC(sc_allreduce_async(c, p, SC_OP_SUM, &h),
				    "allreduce 'ctl.p'");
		}
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("'ctl.p': %s: %s", it_wait_name(r), it_wait_error());
		if (it_check(sc_tensor_data(p), SC_FLOAT32, 100, 3, size, 1, SC_OP_SUM, why,
			     sizeof(why)))
			IT_FAIL("'ctl.p': wrong sum: %s", why);
	}

	/* config: set on the coordinator's node, then on the last node; seen everywhere. */
	char socks[64][4200];
	int n_socks = node_sockets(socks, 64);
	char before[256];
	config_get(it_env.socket, "cycle_time_ms", before, sizeof(before));
	it_barrier(c, "ctl.cfg0", 0);
	const char *values[] = {"2", "3"};
	for (int round = 0; round < 2; round++) {
		int setter = round == 0 ? 0 : size - 1;
		if (rank == setter) {
			config_set(it_env.socket, "cycle_time_ms", values[round]);
			config_set_refused(it_env.socket, "no_such_key_xyz", "1");
			config_set_refused(it_env.socket, "cycle_time_ms", "not-a-number");
		}
		it_barrier(c, round == 0 ? "ctl.cfg1" : "ctl.cfg2", 0);
		expect_config(it_env.socket, "cycle_time_ms", values[round]);
		if (rank == 0)
			for (int i = 0; i < n_socks; i++)
				expect_config(socks[i], "cycle_time_ms", values[round]);
		it_log("cycle_time_ms %s (set by rank %d) seen on %s", values[round], setter,
		       rank == 0 && n_socks > 1 ? "every node's socket" : "this node");
		it_barrier(c, round == 0 ? "ctl.cfg3" : "ctl.cfg4", 0);
	}
	it_log("cycle_time_ms was %s before the test", before);

	/* refused before anything is applied: the old scheme and pins stay on every node */
	char scheme0[256], pins0[256];
	config_get(it_env.socket, "scheme", scheme0, sizeof(scheme0));
	config_get(it_env.socket, "scheme_pins", pins0, sizeof(pins0));
	if (rank == size - 1) {
		config_set_refused(it_env.socket, "scheme", "nosuch");
		config_set_refused(it_env.socket, "scheme_pins", "garbage");
		config_set_refused(it_env.socket, "scheme_pins", "emb.*=nosuch");
		config_set_refused(it_env.socket, "scheme_pins", "emb.*=agsparse,");
		/* a timeline no node can open: it used to be "applied on every node" (exit
		 * 0, config get naming the file) while each daemon only logged its failure */
		config_set_refused(it_env.socket, "timeline_file", "/nonexistent-dir/ctl.json");
	}
	it_barrier(c, "ctl.cfg5", 0);
	it_sleep_ms(300); /* a wrongly broadcast change would have arrived by now */
	for (int i = 0; i < (rank == 0 ? n_socks : 1); i++) {
		const char *sock = rank == 0 ? socks[i] : it_env.socket;
		expect_config(sock, "scheme", scheme0);
		expect_config(sock, "scheme_pins", pins0);
		expect_config(sock, "timeline_file", "");
	}
	it_barrier(c, "ctl.cfg6", 0);

	/* a relative timeline file given to config set is taken from sparsectl's directory,
	 * as timeline start's: it went to each daemon's own working directory */
	if (rank == 0)
		check_relative_timeline(it_env.socket);
	it_barrier(c, "ctl.cfg6b", 0);

	/* a valid pin is applied everywhere and followed: 'ctl.pin' runs AGsparse */
	if (rank == 0)
		config_set(it_env.socket, "scheme_pins", "ctl.zz=dense_ring,ctl.pi*=agsparse");
	it_barrier(c, "ctl.cfg7", 0);
	expect_config(it_env.socket, "scheme_pins", "ctl.zz=dense_ring,ctl.pi*=agsparse");
	it_barrier(c, "ctl.cfg8", 0);
	sc_tensor_t *pt = it_register(c, "ctl.pin", SC_FLOAT32, 300);
	it_fill(sc_tensor_data(pt), SC_FLOAT32, 300, 5, rank, 1);
	IT_CHECK_SC(sc_allreduce(c, pt, SC_OP_SUM, IT_OP_TIMEOUT_MS), "allreduce 'ctl.pin'");
	if (it_check(sc_tensor_data(pt), SC_FLOAT32, 300, 5, size, 1, SC_OP_SUM, why,
		     sizeof(why)))
		IT_FAIL("'ctl.pin': wrong sum: %s", why);
	char scheme[64];
	stats_scheme(it_env.socket, "ctl.pin", scheme, sizeof(scheme));
	if (strcmp(scheme, "agsparse") != 0)
		IT_FAIL("'ctl.pin' ran %s, but scheme_pins pins ctl.pi* to agsparse", scheme);
	it_log("scheme_pins ctl.pi*=agsparse followed by 'ctl.pin'");
	it_barrier(c, "ctl.cfg9", 0);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	if (it_env.env_local_rank <= 0)
		check_stats_kept(it_env.socket, names, 2);
	it_pass();
}

double it_node_stat(const char *field)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *v = it_json_get(s, field);
	double n = v && v->type == IT_JNUM ? v->num : -1;
	it_json_free(s);
	if (n < 0)
		IT_FAIL("sparsectl stats gives no %s", field);
	return n;
}
