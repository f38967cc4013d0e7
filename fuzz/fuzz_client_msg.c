/*
 * fuzz_client_msg.c: the control protocol as a local client speaks it (ctl/ctl.c). The
 * input is a conversation: records of (client u8, length u16, a ClientMsg of that length),
 * each served by scd_ctl_dispatch as the control socket would, with up to four clients
 * (socket identities). The daemon is built in memory: one node of two trainers, no socket
 * (replies are dropped), small tensors only (max_tensor_bytes 64K), the world's upcalls
 * stubbed. Everything is torn down after each input.
 */
#include "fuzz.h"

#include <unistd.h>

#include "ctl/ctl.h"

static void announce(scd_world_t *w, scd_ntensor_t *nt) {}
static void abandon(scd_world_t *w, const char *name, sc_status_t status, const char *reason) {}
static void forget(scd_world_t *w, const char *name) {}
static void node_state(scd_world_t *w, int degraded, const char *reason) {}
static void pending(scd_world_t *w, uint64_t query_id) {}
static void config_propose(scd_world_t *w, const char *key, const char *value) {}
static void status(scd_world_t *w, Sparsecomm__StatusReply *r, struct scd_arena *a) {}
static void fusion_stats(scd_world_t *w, Sparsecomm__StatsReply *r, struct scd_arena *a) {}
static void barrier_enter(scd_world_t *w, uint64_t seq) {}
static void node_join(scd_world_t *w, int last_rank) {}
static void fail_step(scd_world_t *w, const char *name, sc_status_t status, const char *reason)
{
}
static void node_left(scd_world_t *w, const char *reason) {}
static const scd_ctl_upcalls_t up = {announce,	    abandon,	    forget,    node_state,
				     pending,	    config_propose, status,    fusion_stats,
				     barrier_enter, node_join,	    fail_step, node_left};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	static scd_daemon_t d;
	char err[256];
	memset(&d, 0, sizeof(d));
	d.loop = uv_default_loop();
	d.rank = 0, d.world_size = 1, d.local_size = 2, d.notify_fd = -1;
	scd_config_init(&d.cfg);
	scd_config_set(&d.cfg, SCD_CFG_max_tensor_bytes, "64K", SCD_SRC_FLAG, err, sizeof(err));
	scd_ctl_t *ctl;
	if (scd_ctl_create(&d, &up, &ctl) != SC_OK)
		return 0;
	d.ctl = ctl;
	/* the daemon's own user, a process that exists (this one), no connection */
	scd_peer_cred_t cred = {1, (uint32_t)geteuid(), (uint32_t)getegid(), (int)getpid(), -1};
	while (size) {
		uint8_t ident[2] = {'c', (uint8_t)(fuzz_take(&data, &size, 1) % 4)};
		size_t len = (size_t)fuzz_take(&data, &size, 2);
		len = len < size ? len : size;
		uint8_t *msg = fuzz_copy(data, len);
		scd_ctl_dispatch(ctl, ident, sizeof(ident), &cred, msg, len);
		free(msg);
		data += len, size -= len;
	}
	scd_ctl_destroy(ctl);
	uv_run(d.loop, UV_RUN_NOWAIT); /* the sessions' handles closed */
	free(ctl);
	scd_config_free(&d.cfg);
	return 0;
}
