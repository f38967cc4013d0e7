/*
 * hvdflags.c: horovodrun's flags (hvdflags.h). -np, -H/--hosts, --hostfile and --verbose
 * are sparsecomm-run's own (opts.c); these are the rest of horovodrun's usage: each one
 * either sets the daemon setting of the same meaning (README.md, "Coming from Horovod")
 * or is a usage error that says what to use instead.
 */
#include "hvdflags.h"

#include "horovod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* horovodrun's flags with no equivalent here, and what to do instead. */
static const struct {
	const char *flag, *why;
} refused[] = {
    {"--hierarchical-allreduce", "the collective scheme is chosen per buffer by the cost "
				 "model (or --daemon-arg --scheme)"},
    {"--no-hierarchical-allreduce", "the collective scheme is chosen per buffer by the "
				    "cost model (or --daemon-arg --scheme)"},
    {"--hierarchical-allgather", "allgather has one algorithm here"},
    {"--no-hierarchical-allgather", "allgather has one algorithm here"},
    {"--autotune", SC_HOROVOD_NO_AUTOTUNE " (HOROVOD_AUTOTUNE is refused alike)"},
    {"--autotune-log-file", "there is no autotuner"},
    {"--autotune-warmup-samples", "there is no autotuner"},
    {"--autotune-steps-per-sample", "there is no autotuner"},
    {"--autotune-bayes-opt-max-samples", "there is no autotuner"},
    {"--autotune-gaussian-process-noise", "there is no autotuner"},
    {"--timeline-mark-cycles", "the timeline has no cycle markers"},
    {"--no-stall-check", "a stalled tensor always fails after stall_timeout_ms "
			 "(--stall-check-shutdown-time-seconds sets it)"},
    {"--stall-check-warning-time-seconds", "there is no stall warning: a stalled tensor "
					   "fails after stall_timeout_ms "
					   "(--stall-check-shutdown-time-seconds)"},
    {"--mpi-threads-disable", "no MPI is used"},
    {"--num-nccl-streams", "the daemon owns its NCCL streams"},
    {"--thread-affinity", "the daemon's threads are not pinned"},
    {"--gloo", "the daemons are the controller; no Gloo or MPI is used"},
    {"--mpi", "the daemons are the controller; to start under mpirun see docs/deployment.md "
	      "(Under a scheduler)"},
    {"--jsrun", "to start under a scheduler see docs/deployment.md (Under a scheduler)"},
    {"--mpi-args", "no MPI is used"},
    {"--binding-args", "no MPI is used"},
    {"--tcp", "the data plane's transport is the daemons' setting transport "
	      "(--daemon-arg --transport tcp)"},
    {"--gloo-timeout-seconds", "use --start-timeout or --timeout"},
    {"--config-file", "give the settings as options, or a daemon config file with "
		      "--daemon-arg --config --daemon-arg FILE"},
    {"--min-np", "elastic jobs are not supported: the job's size is fixed"},
    {"--max-np", "elastic jobs are not supported: the job's size is fixed"},
    {"--slots-per-host", "use -H HOST:SLOTS or --per-node"},
    {"--slots", "use -H HOST:SLOTS or --per-node"},
    {"--host-discovery-script", "elastic jobs are not supported: the job's size is fixed"},
    {"--reset-limit", "elastic jobs are not supported"},
    {"--blacklist-cooldown-range", "elastic jobs are not supported"},
    {"--elastic-timeout", "elastic jobs are not supported"},
    {"-p", "use --rsh-agent 'ssh -p PORT'"},
    {"--ssh-port", "use --rsh-agent 'ssh -p PORT'"},
    {"-i", "use --rsh-agent 'ssh -i FILE'"},
    {"--ssh-identity-file", "use --rsh-agent 'ssh -i FILE'"},
    {"--network-interface", "the daemons' data plane binds data_addr (--daemon-arg "
			    "--data_addr)"},
    {"--network-interfaces", "the daemons' data plane binds data_addr (--daemon-arg "
			     "--data_addr)"},
    {"--output-filename", "every line is printed with its \"[rank] \" prefix; redirect "
			  "the output"},
    {"--prefix-output-with-timestamp", "lines are prefixed with the rank alone"},
    {"--log-hide-timestamp", "the daemons' log format is fixed"},
    {"--log-without-timestamp", "the daemons' log format is fixed"},
    {"-cb", "see sparsecommd --version and the Python sparsecomm.torch.nccl_built()"},
    {"--check-build", "see sparsecommd --version and the Python "
		      "sparsecomm.torch.nccl_built()"},
};

/* Appends "--KEY VALUE" to the daemons' arguments (room: opts.c allocates four daemon
 * arguments per word of the command line, what --fusion-threshold-mb=N adds). */
static void daemon_set(opts_t *o, const char *key, const char *value)
{
	char *k = malloc(strlen(key) + 3), *v = strdup(value);
	if (!k || !v)
		run_die_usage("out of memory");
	sprintf(k, "--%s", key);
	o->daemon_args[o->n_daemon_args++] = k;
	o->daemon_args[o->n_daemon_args++] = v;
}

/* horovodrun's --log-level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL) as log_level. */
static const char *log_level(const char *v)
{
	const char *level = sc_horovod_log_level(v);
	if (!level)
		run_die_usage(
		    "--log-level is TRACE, DEBUG, INFO, WARNING, ERROR or FATAL, not '%s'", v);
	return level;
}

void run_hvd_env(opts_t *o)
{
	const char *v = getenv("HOROVOD_START_TIMEOUT");
	if (v)
		o->ready_timeout_s = run_parse_seconds("HOROVOD_START_TIMEOUT", v);
	/* as --autotune: a Horovod setting that would change the job is never ignored */
	v = getenv("HOROVOD_AUTOTUNE");
	if (sc_horovod_autotune(v))
		run_die_usage("HOROVOD_AUTOTUNE=%s asks for Horovod's autotuner, which has no "
			      "equivalent here: " SC_HOROVOD_NO_AUTOTUNE "; unset it",
			      v);
}

bool run_hvd_flag(opts_t *o, const char *name, const char **val_p, int argc, char **argv,
		  int *i_p)
{
	for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++)
		if (!strcmp(name, refused[k].flag))
			run_die_usage("horovodrun's %s has no equivalent here: %s", name,
				      refused[k].why);
	static const char *const with_value[] = {
	    "--start-timeout", "--fusion-threshold-mb",
	    "--cycle-time-ms", "--timeline-filename",
	    "--log-level",     "--stall-check-shutdown-time-seconds",
	    "--cache-capacity"};
	bool known = !strcmp(name, "--disable-cache");
	for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]) && !known; k++)
		known = !strcmp(name, with_value[k]);
	if (!known)
		return false;
	const char *val = *val_p;
	if (val && !strcmp(name, "--disable-cache"))
		run_die_usage("--disable-cache takes no value");
	if (!val && strcmp(name, "--disable-cache")) {
		if (*i_p + 1 >= argc)
			run_die_usage("%s needs a value", name);
		val = argv[++*i_p];
	}
	char buf[32];
	if (!strcmp(name, "--start-timeout")) {
		o->ready_timeout_s = run_parse_seconds(name, val);
	} else if (!strcmp(name, "--fusion-threshold-mb")) {
		/* Horovod fuses up to the threshold: fusion_mode fixed does that here. */
		int mb = run_parse_int(name, val, 0, 1024);
		snprintf(buf, sizeof(buf), "%lld", (long long)mb << 20);
		daemon_set(o, "fusion_threshold_bytes", buf);
		daemon_set(o, "fusion_mode", "fixed");
	} else if (!strcmp(name, "--cycle-time-ms")) {
		char *end;
		double ms = strtod(val, &end);
		if (end == val || *end || !(ms >= 0) || ms > 1000)
			run_die_usage(
			    "--cycle-time-ms needs milliseconds from 0 to 1000, not '%s'", val);
		snprintf(buf, sizeof(buf), "%d", (int)(ms + 0.5));
		daemon_set(o, "cycle_time_ms", buf);
	} else if (!strcmp(name, "--timeline-filename")) {
		daemon_set(o, "timeline_file", val);
	} else if (!strcmp(name, "--log-level")) {
		daemon_set(o, "log_level", log_level(val));
	} else if (!strcmp(name, "--stall-check-shutdown-time-seconds")) {
		double s = run_parse_seconds(name, val);
		if (s > 3600)
			run_die_usage("%s: at most 3600 seconds, not '%s'", name, val);
		snprintf(buf, sizeof(buf), "%lld", (long long)(s * 1000 + 0.5));
		daemon_set(o, "stall_timeout_ms", buf);
	} else if (!strcmp(name, "--cache-capacity")) {
		/* 0, Horovod's cache turned off, keeps the default: the response cache here
		 * cannot be turned off, and only saves the announcements' bytes */
		int n = run_parse_int(name, val, 0, 16777216);
		if (n == 1)
			run_die_usage("--cache-capacity: 0 or at least 2 entries, not 1");
		snprintf(buf, sizeof(buf), "%d", n);
		if (n)
			daemon_set(o, "cache_max_entries", buf);
	}
	/* --disable-cache: horovodrun's cache of its host checks; sparsecomm-run has none. */
	*val_p = val;
	return true;
}
