/*
 * config.h: every setting of sparsecommd, described once in a table {name, type, default,
 * min, max, runtime-changeable, doc}. The table drives the INI file, the SPARSECOMM_<KEY>
 * environment overrides, the --<key> flags, `sparsectl config get/set` and --dump-config,
 * so they can never disagree. Each value remembers where it came from.
 *
 * Precedence, lowest first: default < file < environment < flag < runtime (sparsectl).
 */
#ifndef SCD_CONFIG_CONFIG_H
#define SCD_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "sparsecomm.h"

typedef enum { SCD_CFG_INT, SCD_CFG_STR, SCD_CFG_NUM } scd_cfg_type_t;
typedef enum {
	SCD_SRC_DEFAULT = 0,
	SCD_SRC_FILE,
	SCD_SRC_ENV,
	SCD_SRC_FLAG,
	SCD_SRC_RUNTIME
} scd_cfg_source_t;

/* What a key's flags column says: runtime-changeable (sparsectl config set, every node at
 * once) by any client of the control socket; SCD_CFG_OWNER with it: changeable only by a
 * client running as the daemon's own user or as root, for keys that name files the daemon
 * writes or that lift the operator's limits (a ctl_group member is refused, by name); and
 * the same on every node: the coordinator refuses a node's Join when such a key differs
 * from its own (world/world.c), naming the key and both values. The keys a buffer's scheme
 * or its bytes on the wire depend on have it. */
#define SCD_CFG_RT	 1
#define SCD_CFG_SAME	 2
#define SCD_CFG_OWNER	 4
#define SCD_CFG_RT_OWNER (SCD_CFG_RT | SCD_CFG_OWNER)

/* The X-macro list of settings: X(key, type, default_int, default_str, min, max, flags, doc).
 * INT: an integer (K, M, G suffixes), default_int, min and max. STR: text, default_str.
 * NUM: a decimal number, default_str its default, min and max in millionths.
 * flags: SCD_CFG_RT, SCD_CFG_RT_OWNER and SCD_CFG_SAME above (0: none). The scheme keys
 * (spardl_ .. sketch_) are read once at start and the same on every node (the ranks' schemes
 * compute the same partitions, sketches and teams). */
#define SCD_CONFIG_MAP(X)                                                                      \
	X(rank, INT, 0, NULL, 0, 4095, 0,                                                      \
	  "this node's rank in the world (0 is the coordinator)")                              \
	X(world_size, INT, 1, NULL, 1, 4096, 0, "number of nodes (daemons) in the world")      \
	X(local_size, INT, 1, NULL, 1, 64, 0, "trainer processes per node")                    \
	X(coordinator, STR, 0, "127.0.0.1:7700", 0, 0, 0,                                      \
	  "host:port the coordinator (rank 0) listens on and the other ranks join; a host "    \
	  "name is resolved (IPv4 first), an IPv6 address goes in brackets")                   \
	X(transport, STR, 0, "auto", 0, 0, 0,                                                  \
	  "transport of GPU buffers between the daemons: auto (nccl where every node loads "   \
	  "NCCL, else tcp), tcp (staged through host memory), or nccl (required); cpu "        \
	  "buffers and the daemons' own rounds always use tcp")                                \
	X(data_addr, STR, 0, "127.0.0.1", 0, 0, 0,                                             \
	  "address or host name this daemon's data plane binds to and announces to its "       \
	  "peers; a wildcard (0.0.0.0, ::) binds every interface and announces "               \
	  "advertise_addr, or else the address of the interface that reaches the coordinator") \
	X(advertise_addr, STR, 0, "", 0, 0, 0,                                                 \
	  "address or host name announced to the peers for the data plane (empty: data_addr, " \
	  "or the route to the coordinator when data_addr is a wildcard)")                     \
	X(data_port, INT, 0, NULL, 0, 65535, 0, "data-plane TCP port (0: any free port)")      \
	X(peer_port, INT, 0, NULL, 0, 65535, 0,                                                \
	  "the coordinator's peer pipe TCP port, on the coordinator's host (0: any free "      \
	  "port; rank 0 only)")                                                                \
	X(runtime_dir, STR, 0, "", 0, 0, 0,                                                    \
	  "private directory (mode 0700) for the control socket ctl.sock; empty: "             \
	  "/run/sparsecomm as root, else $XDG_RUNTIME_DIR/sparsecomm or /tmp/sparsecomm-UID")  \
	X(ctl_group, STR, 0, "", 0, 0, 0,                                                      \
	  "group (name or number) whose members may use this daemon: the runtime directory "   \
	  "0750, ctl.sock and the tensors' shared memory 0660, all of that group (empty: the " \
	  "daemon's user alone)")                                                              \
	X(cycle_time_ms, INT, 0, NULL, 0, 1000, 1,                                             \
	  "how long ready tensors are batched before they are announced (0: next loop turn)")  \
	X(fusion_threshold_bytes, INT, 16777216, NULL, 0, 1073741824, 1,                       \
	  "largest fused buffer in fusion_mode fixed; ready tensors smaller than this are "    \
	  "fused up to it")                                                                    \
	X(fusion_mode, STR, 0, "adaptive", 0, 0, 1,                                            \
	  "which tensors share a buffer: layerwise (each alone), fixed (up to "                \
	  "fusion_threshold_bytes), aligned (fusion_buffers buffers of equal tensor counts), " \
	  "adaptive (sized from measured compression and communication times)")                \
	X(fusion_buffers, INT, 4, NULL, 1, 512, 1,                                             \
	  "buffers per step in fusion_mode aligned (and adaptive until measured)")             \
	X(fusion_wait_ms, INT, 20, NULL, 0, 60000, 1,                                          \
	  "aligned and adaptive: how long a planned buffer waits for its last tensors")        \
	X(fusion_announce_whole, INT, 1, NULL, 0, 1, 1,                                        \
	  "aligned and adaptive: 1: a node announces a planned buffer's tensors together, "    \
	  "once all are ready on it (or fusion_wait_ms after the latest); 0: each as it is "   \
	  "ready")                                                                             \
	X(sparsify_on_submit, INT, 1, NULL, 0, 1, 1,                                           \
	  "1: a sparsified tensor is summed and selected on the engine's compute stage as "    \
	  "soon as the node's trainers submit it (SAFusion's order), its buffer gathers the "  \
	  "selections; 0: when its buffer is planned")                                         \
	X(op_timeout_ms, INT, 60000, NULL, 100, 3600000, 1,                                    \
	  "a data-plane operation with no progress for this long fails")                       \
	X(join_timeout_ms, INT, 60000, NULL, 100, 3600000, 0,                                  \
	  "world formation fails if some rank has not joined within this time")                \
	X(stall_timeout_ms, INT, 60000, NULL, 100, 3600000, 1,                                 \
	  "a tensor ready on some ranks but not others for this long fails on every rank")     \
	X(peer_timeout_ms, INT, 10000, NULL, 200, 3600000, 0,                                  \
	  "a daemon not heard on the coordinator channel for this long is lost and every "     \
	  "operation that needs it fails; heartbeats go every quarter of it")                  \
	X(max_tensor_bytes, INT, 4294967296LL, NULL, 4, 68719476736LL, SCD_CFG_RT_OWNER,       \
	  "largest tensor a trainer may register")                                             \
	X(max_registrations, INT, 16384, NULL, 1, 65536, SCD_CFG_RT_OWNER,                     \
	  "registrations this node's trainers may hold at once; each is a shared-memory "      \
	  "mapping, and the kernel's vm.max_map_count less 4096 bounds them whatever this "    \
	  "says")                                                                              \
	X(fast_path, INT, 1, NULL, 0, 1, SCD_CFG_SAME,                                         \
	  "1: a small cached buffer planned alone in a row runs in fast mode, its readiness "  \
	  "carried in its one-round exchange instead of announced (docs/design.md \"Fast "     \
	  "mode\")")                                                                           \
	X(fast_wait_ms, INT, 50, NULL, 1, 60000, 0,                                            \
	  "fast mode: how long a node's fast turn waits for the others before the node asks "  \
	  "the coordinator to end fast mode (the step is then announced and planned)")         \
	X(cache_max_entries, INT, 16384, NULL, 2, 16777216, SCD_CFG_SAME,                      \
	  "response cache entries a daemon keeps (one per tensor name and form, about 250 "    \
	  "bytes each); past it the least recently planned go on every daemon alike, and a "   \
	  "form that comes back is announced in full once")                                    \
	X(scheme, STR, 0, "auto", 0, 0, SCD_CFG_RT | SCD_CFG_SAME,                             \
	  "collective scheme for every buffer: auto (cost model) or a scheme name")            \
	X(scheme_pins, STR, 0, "", 0, 0, SCD_CFG_RT | SCD_CFG_SAME,                            \
	  "per-tensor pins, comma-separated PATTERN=SCHEME with shell globs, e.g. "            \
	  "'emb.*=balanced_par'; they win over scheme")                                        \
	X(netprobe_interval_jobs, INT, 20000, NULL, 0, 1000000000, SCD_CFG_SAME,               \
	  "re-measure latency and bandwidth between the daemons every this many buffers (0: "  \
	  "only at start)")                                                                    \
	X(spardl_teams, INT, 0, NULL, 0, 4096, SCD_CFG_SAME,                                   \
	  "SparDL's team count d: 0 for the paper's d = 1 until another divisor of P, "        \
	  "tried when the cost model favours it, is measured faster; else the largest "        \
	  "divisor of P not above it")                                                         \
	X(exdyna_blocks, INT, 1024, NULL, 1, 1048576, SCD_CFG_SAME,                            \
	  "ExDyna's block count n_b: the partitions are runs of blocks of numel / n_b "        \
	  "elements, rounded down to a multiple of 32")                                        \
	X(exdyna_move_blocks, INT, 1, NULL, 1, 1048576, SCD_CFG_SAME,                          \
	  "ExDyna: blocks a heavy partition gives its lighter neighbour per step (Alg. 3)")    \
	X(exdyna_alpha, NUM, 0, "1.05", 1000000, 1000000000, SCD_CFG_SAME,                     \
	  "ExDyna: a partition over alpha x the mean load gives blocks to a neighbour under "  \
	  "1/alpha of it (Alg. 3)")                                                            \
	X(exdyna_beta, NUM, 0, "1.1", 1000000, 1000000000, SCD_CFG_SAME,                       \
	  "ExDyna: the threshold's band; inside (1/beta, beta] x the target it takes the "     \
	  "fine step (Alg. 5)")                                                                \
	X(exdyna_gamma, NUM, 0, "0.005", 1, 999999, SCD_CFG_SAME,                              \
	  "ExDyna: the threshold's step (Alg. 5)")                                             \
	X(exdyna_cap, NUM, 0, "0", 0, 1000000000, SCD_CFG_SAME,                                \
	  "ExDyna variant: a rank sends at most cap x its share, its largest magnitudes (0, "  \
	  "the paper's: no cap; else at least 1, 1.25 with the grid)")                         \
	X(exdyna_grid, NUM, 0, "0", 0, 1000000000, SCD_CFG_SAME,                               \
	  "ExDyna variant: a step whose selection leaves [1/grid, grid] x the target moves "   \
	  "every rank to the best of 257 thresholds it counted (0, the paper's: Alg. 5 "       \
	  "alone; else at least 1, e.g. 1.25)")                                                \
	X(exdyna_fine_symmetric, INT, 0, NULL, 0, 1, SCD_CFG_SAME,                             \
	  "ExDyna variant: 1 steps the threshold inside the band towards the target (x(1 -/+ " \
	  "gamma/4)); 0, the paper's Alg. 5: x(1 + gamma/4) whatever the side")                \
	X(exdyna_scope, STR, 0, "model", 0, 0, SCD_CFG_SAME,                                   \
	  "ExDyna's index space: model, the paper's (the ExDyna tensors of one dtype, "        \
	  "density and scheme fuse into one buffer: one threshold, one exchange per step), "   \
	  "or tensor (each tensor alone: its own partitions, threshold and exchange)")         \
	X(sketch_rows, INT, 1, NULL, 1, 15, SCD_CFG_SAME,                                      \
	  "S2: rows of the count sketch (3 or more decode by the median)")                     \
	X(sketch_cols, NUM, 0, "2", 1000, 1000000000, SCD_CFG_SAME,                            \
	  "S2: columns of the sketch, as a multiple of the union's expected non-zeros")        \
	X(cpu_share, NUM, 0, "0", 0, 1024000000, SCD_CFG_SAME,                                 \
	  "nodes per core the cost model prices the schemes' work outside their exchanges "    \
	  "with (0: learnt at join, the daemons per core of the busiest host)")                \
	X(engine_pipeline, INT, 1, NULL, 0, 1, 0,                                              \
	  "1: a buffer's compression (local sum, sparsification ahead) runs while the "        \
	  "previous buffer is on the network (two engine threads); 0: one after the other")    \
	X(device, STR, 0, "auto", 0, 0, 0,                                                     \
	  "tensors' placements served: cpu (cuda registrations are refused), cuda (the GPU "   \
	  "device must load at start), auto (cuda tensors too when it loads)")                 \
	X(gpu_mem_limit_bytes, INT, 0, NULL, 0, 70368744177664LL, SCD_CFG_RT_OWNER,            \
	  "GPU memory this daemon may hold for cuda tensors (0: no limit but the GPU's)")      \
	X(cuda_device, INT, 0, NULL, 0, 63, 0,                                                 \
	  "the engine GPU: the node's local sums and schemes of cuda tensors run on this "     \
	  "ordinal; tensors on the node's other GPUs are copied to it and back")               \
	X(nonfinite, STR, 0, "pass", 0, 0, SCD_CFG_SAME,                                       \
	  "a NaN or infinity in a trainer's float32 input: pass (summed as it is), warn "      \
	  "(counted per tensor and logged) or error (the operation fails on every rank); "     \
	  "the same on every node")                                                            \
	X(secret_file, STR, 0, "", 0, 0, 0,                                                    \
	  "the job secret (a file only its owner may read, 16 bytes or more): the daemons "    \
	  "of a job prove that they hold it to each other (README.md, Security)")              \
	X(insecure, INT, 0, NULL, 0, 1, 0,                                                     \
	  "1 (or true): run without secret_file on addresses other than loopback, "            \
	  "authenticating nothing")                                                            \
	X(data_protection, STR, 0, "none", 0, 0, SCD_CFG_SAME,                                 \
	  "what guards the tcp data plane's bytes after each connection's handshake: none, "   \
	  "integrity (every record carries a MAC) or encrypt (and is encrypted); needs "       \
	  "secret_file, and the same on every node")                                           \
	X(log_level, STR, 0, "info", 0, 0, SCD_CFG_RT_OWNER, "error, warn, info or debug")     \
	X(metrics_addr, STR, 0, "", 0, 0, 0,                                                   \
	  "HOST:PORT of a Prometheus endpoint (GET /metrics) with the counters of "            \
	  "`sparsectl stats` and the world's state (empty: off)")                              \
	X(timeline_file, STR, 0, "", 0, 0, SCD_CFG_RT_OWNER,                                   \
	  "Chrome-trace timeline written by this daemon (empty: off); %r is the node rank, "   \
	  "and without it node 0 writes FILE, the others FILE.<rank>.json")

typedef enum {
#define SCD_CFG_ENUM_(key, type, di, ds, mn, mx, rt, doc) SCD_CFG_##key,
	SCD_CONFIG_MAP(SCD_CFG_ENUM_)
#undef SCD_CFG_ENUM_
	    SCD_CFG_COUNT
} scd_cfg_key_t;

typedef struct scd_config {
	int64_t ival[SCD_CFG_COUNT];
	double dval[SCD_CFG_COUNT];
	char *sval[SCD_CFG_COUNT];
	scd_cfg_source_t source[SCD_CFG_COUNT];
} scd_config_t;

/* Description of one key. */
typedef struct scd_cfg_desc {
	const char *name;
	scd_cfg_type_t type;
	int64_t def_int;
	const char *def_str;
	int64_t min, max;
	int runtime; /* the flags column: SCD_CFG_RT, SCD_CFG_OWNER, SCD_CFG_SAME */
	const char *doc;
} scd_cfg_desc_t;

extern const scd_cfg_desc_t scd_cfg_desc[SCD_CFG_COUNT];

void scd_config_init(scd_config_t *cfg);
void scd_config_free(scd_config_t *cfg);
/* The key called name (dashes and underscores alike), or -1. */
int scd_config_find(const char *name);
/* Sets key from text, checking type and range; err gets a message on failure. */
sc_status_t scd_config_set(scd_config_t *cfg, int key, const char *value, scd_cfg_source_t src,
			   char *err, size_t err_len);
/* Whether a runtime change of the key called name to value would be accepted, tried on a
 * scratch configuration: what a daemon checks before proposing or broadcasting it. */
sc_status_t scd_config_probe(const char *name, const char *value, char *err, size_t err_len);
/* What a text key may hold beyond being text (config_check.c): log_level's levels, a
 * known scheme or auto for scheme, a PATTERN=SCHEME list of known schemes for
 * scheme_pins. SC_OK for other keys; err names the key and the value otherwise. */
sc_status_t scd_config_check_text(int key, const char *value, char *err, size_t err_len);
/* Longest scheme_pins item, with its terminating NUL. */
#define SCD_PIN_ITEM_MAX 160
/* The next comma-separated item of a scheme_pins list: copied into item (cut at its last
 * '=', *scheme_p pointing after it, or NULL when there is none), *pins advanced past it
 * and its comma. 1 for an item, -1 for one longer than len - 1 (truncated), 0 at the end. */
int scd_config_pin_next(const char **pins, char *item, size_t len, const char **scheme_p);
/* Loads an INI file (sections ignored, '#' and ';' comments). */
sc_status_t scd_config_load_file(scd_config_t *cfg, const char *path, char *err,
				 size_t err_len);
/* The same from an open stream; name is what the messages call it. */
sc_status_t scd_config_load_stream(scd_config_t *cfg, FILE *f, const char *name, char *err,
				   size_t err_len);
/* Applies Horovod's variables for the settings above that Horovod has too
 * (config_horovod.c), then every SPARSECOMM_<KEY> environment variable, which wins. */
sc_status_t scd_config_load_env(scd_config_t *cfg, char *err, size_t err_len);
/* Applies HOROVOD_FUSION_THRESHOLD (and fusion_mode fixed), HOROVOD_CYCLE_TIME,
 * HOROVOD_TIMELINE, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, HOROVOD_LOG_LEVEL and
 * HOROVOD_CACHE_CAPACITY (cache_max_entries) in the table's units; err names the variable
 * on error. */
sc_status_t scd_config_load_horovod_env(scd_config_t *cfg, char *err, size_t err_len);
/* The value as text (into buf) and the source's name. */
const char *scd_config_text(const scd_config_t *cfg, int key, char *buf, size_t len);
const char *scd_config_source_name(scd_cfg_source_t src);
void scd_config_dump(const scd_config_t *cfg, FILE *out);

static inline int64_t scd_cfg_int(const scd_config_t *cfg, scd_cfg_key_t key)
{
	return cfg->ival[key];
}
static inline const char *scd_cfg_str(const scd_config_t *cfg, scd_cfg_key_t key)
{
	return cfg->sval[key];
}
static inline double scd_cfg_num(const scd_config_t *cfg, scd_cfg_key_t key)
{
	return cfg->dval[key];
}

#endif
