/*
 * seeds.c: writes the harnesses' seed corpora (fuzz/corpus/<harness>/) from the daemon's
 * own encoders, so every seed is a valid input in the layout its harness reads (see each
 * fuzz_<name>.c). Built with the normal compiler and run by `make fuzz-seeds`; the files
 * it writes are committed.
 *
 *   fuzz-seeds DIR    writes DIR/<harness>/<seed>
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "device/device.h"
#include "device/format.h"
#include "device/msgops.h"
#include "scheme/scheme_internal.h"
#include "sparsecomm.pb-c.h"
#include "transport/tcp_seal.h"
#include "world_protocol.h"

static const char *root;

/* DIR/harness/name = head (hn bytes) then body (bn bytes). */
static void put(const char *harness, const char *name, const void *head, size_t hn,
		const void *body, size_t bn)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, harness);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", root, harness, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(head, 1, hn, f) != hn || (bn && fwrite(body, 1, bn, f) != bn) ||
	    fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* A list of n ascending indices: whole runs (rows), or scattered over numel. */
static void make_list(uint32_t *idx, float *val, uint64_t n, uint64_t numel, int rows)
{
	for (uint64_t i = 0; i < n; i++) {
		idx[i] = rows ? (uint32_t)(40 + i) : (uint32_t)(i * (numel / n));
		val[i] = 0.5f + (float)i;
	}
}

static void scheme_msg_seeds(void)
{
	const scd_device_ops_t *dev = &scd_device_cpu_ops;
	uint32_t idx[64];
	float val[64];
	static uint8_t buf[4096];
	const struct {
		const char *name;
		uint64_t numel, n;
		int rows;
	} cases[] = {{"coo", 60000, 12, 0}, {"bitmap", 600, 60, 0}, {"runs", 1000, 64, 1}};
	for (size_t c = 0; c < 3; c++) {
		make_list(idx, val, cases[c].n, cases[c].numel, cases[c].rows);
		scd_coo_t src = {idx, val, cases[c].n, cases[c].n};
		uint64_t bytes = 0;
		if (scd_scheme_msg_encode(dev, &src, cases[c].numel, buf, sizeof(buf),
					  &bytes) != SC_OK)
			exit(1);
		uint16_t head[2] = {(uint16_t)(cases[c].numel - 1), 64};
		put("scheme_msg", cases[c].name, head, 4, buf, bytes);
	}
}

/* The formats harness's header: decoder, numel - 1 (u16), parameter. */
static void put_format(const char *name, uint8_t which, uint64_t numel, uint8_t param,
		       const void *body, size_t bn)
{
	uint8_t head[4] = {which, (uint8_t)(numel - 1), (uint8_t)((numel - 1) >> 8), param};
	put("formats", name, head, 4, body, bn);
}

static void formats_seeds(void)
{
	enum { NUMEL = 700, N = 40 };
	uint32_t idx[N];
	float val[N], dense[NUMEL] = {0};
	static uint8_t buf[8192];
	make_list(idx, val, N, NUMEL, 0);
	for (int i = 0; i < N; i++)
		dense[idx[i]] = val[i];
	scd_coo_t src = {idx, val, N, N};
	uint64_t bytes = 0;
	if (scd_coo_encode(&src, buf, sizeof(buf), &bytes) == SC_OK)
		put_format("coo", 0, NUMEL, 0, buf, bytes);
	if (scd_bitmap_encode(&src, NUMEL, buf, sizeof(buf), &bytes) == SC_OK)
		put_format("bitmap", 1, NUMEL, 0, buf, bytes);
	const scd_partmap_t *map;
	uint8_t param = 3 | 1 << 3; /* 4 partitions, partition 1 */
	if (scd_partmap_acquire(NUMEL, 4, 7, &map) == SC_OK) {
		if (scd_hash_bitmap_encode(map, 1, dense, buf, sizeof(buf), &bytes) == SC_OK) {
			put_format("hash_bitmap", 2, NUMEL, param, buf, bytes);
			put_format("hash_bitmap_dense", 3, NUMEL, param, buf, bytes);
		}
		scd_partmap_release(map);
	}
	if (scd_blocks_encode(&src, NUMEL, 8, buf, sizeof(buf), &bytes) == SC_OK) {
		put_format("blocks", 4, NUMEL, 7, buf, bytes);
		put_format("blocks_apply", 5, NUMEL, 7, buf, bytes);
	}
	make_list(idx, val, N, NUMEL, 1);
	scd_idx_runs_encode(idx, N, buf);
	put_format("runs", 6, NUMEL, 0, buf, 8 * scd_idx_count_runs(idx, N));
}

static void config_seeds(void)
{
	static const char conf[] = "[sparsecommd]\n# a comment\nworld_size = 4\nrank = 1\n"
				   "fusion_threshold_bytes = 16M\nscheme = auto\n"
				   "exdyna_alpha = 1.05\nlog_level = info\n";
	put("config", "file", conf, sizeof(conf) - 1, NULL, 0);
	/* first byte: the key of the runtime change (cycle_time_ms), then its value */
	uint8_t key = SCD_CFG_cycle_time_ms;
	put("config", "runtime", &key, 1, "5\n", 2);
}

/* Appends one record (length u16 then the packed message) to a conversation. */
static size_t record(uint8_t *out, size_t at, const uint8_t *prefix, size_t pn, size_t len,
		     void (*pack)(const void *, uint8_t *), const void *m)
{
	memcpy(out + at, prefix, pn);
	out[at + pn] = (uint8_t)len, out[at + pn + 1] = (uint8_t)(len >> 8);
	pack(m, out + at + pn + 2);
	return at + pn + 2 + len;
}

static void pack_peer(const void *m, uint8_t *out)
{
	sparsecomm__peer_msg__pack(m, out);
}

/* One record of the peer conversation: the sender's rank, then the message. */
static size_t peer_record(uint8_t *out, size_t at, uint8_t rank, const Sparsecomm__PeerMsg *m)
{
	return record(out, at, &rank, 1, sparsecomm__peer_msg__get_packed_size(m), pack_peer,
		      m);
}

static void peer_msg_seeds(void)
{
	static uint8_t out[4096];
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	/* a plan caching two tensors and running them fused, then one naming them again */
	Sparsecomm__CacheEntry e[2] = {SPARSECOMM__CACHE_ENTRY__INIT,
				       SPARSECOMM__CACHE_ENTRY__INIT};
	Sparsecomm__CacheEntry *pe[2] = {&e[0], &e[1]};
	e[0].id = 0, e[0].name = "layer0.weight", e[0].numel = 4096;
	e[1].id = 1, e[1].name = "layer0.bias", e[1].numel = 64;
	Sparsecomm__TensorSig sig = SPARSECOMM__TENSOR_SIG__INIT;
	sig.coo_area = 1, sig.allow_lossy = 1, sig.sparsifier = 1, sig.density = 0.01;
	sig.scheme = "agsparse";
	e[0].sig = &sig;
	uint32_t ids[2] = {0, 1};
	Sparsecomm__Response r = SPARSECOMM__RESPONSE__INIT, *pr2[2] = {&r, NULL};
	r.cache_ids = ids, r.n_cache_ids = 2;
	/* and an error answering rank 1's announcement alone (a late step) */
	Sparsecomm__Response re = SPARSECOMM__RESPONSE__INIT;
	char *ren[1] = {"layer1.weight"};
	int32_t rer[1] = {1};
	re.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR, re.names = ren, re.n_names = 1;
	re.status = SC_ERR_STALLED, re.error = "stalled", re.ranks = rer, re.n_ranks = 1;
	pr2[1] = &re;
	Sparsecomm__Response **pr = pr2;
	Sparsecomm__Plan p = SPARSECOMM__PLAN__INIT;
	p.cycle = 1, p.new_entries = pe, p.n_new_entries = 2, p.responses = pr,
	p.n_responses = 2;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PLAN, m.plan = &p;
	size_t n = peer_record(out, 0, 0, &m);
	p.cycle = 2, p.n_new_entries = 0;
	n = peer_record(out, n, 0, &m);
	put("peer_msg", "plans", out, n, NULL, 0);
	/* a join with a tcp blob (port, address) */
	uint8_t blob[11] = {0x1c, 0x1e, '1', '2', '7', '.', '0', '.', '0', '.', '1'};
	Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
	j.protocol_version = SCD_WORLD_PROTOCOL_VERSION, j.rank = 1, j.world_size = 2;
	j.local_size = 1, j.transport = "tcp";
	j.transport_blob = (ProtobufCBinaryData){sizeof(blob), blob};
	j.host_id = 0x9e3779b97f4a7c15ull, j.cores = 2; /* its host and cores (world/host.h) */
	Sparsecomm__ConfigSet sk = SPARSECOMM__CONFIG_SET__INIT, *psk = &sk;
	sk.key = "sketch_rows", sk.value = "1";
	j.same_keys = &psk, j.n_same_keys = 1;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN, m.join = &j;
	put("peer_msg", "join", out, peer_record(out, 0, 0, &m), NULL, 0);
	/* world info of two ranks */
	Sparsecomm__PeerInfo pi[2] = {SPARSECOMM__PEER_INFO__INIT, SPARSECOMM__PEER_INFO__INIT};
	Sparsecomm__PeerInfo *ppi[2] = {&pi[0], &pi[1]};
	pi[1].rank = 1;
	pi[0].transport_blob = pi[1].transport_blob = j.transport_blob;
	pi[0].host_id = pi[1].host_id = j.host_id, pi[0].cores = pi[1].cores = j.cores;
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	wi.peers = ppi, wi.n_peers = 2, wi.world_id = 99, wi.transport = "tcp";
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD, m.world = &wi;
	put("peer_msg", "world", out, peer_record(out, 0, 0, &m), NULL, 0);
	/* a runtime configuration change */
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	cs.key = "scheme", cs.value = "agsparse";
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY, m.config_apply = &cs;
	put("peer_msg", "config", out, peer_record(out, 0, 0, &m), NULL, 0);
	/* ranks 1 and 2 announce a tensor as a member of a group of two (GroupTag), rank 2
	 * by its cached id after a plan; rank 1 abandons another */
	Sparsecomm__TensorRequest tr = SPARSECOMM__TENSOR_REQUEST__INIT, *ptr = &tr;
	tr.name = "layer0.weight", tr.numel = 4096, tr.sig = &sig;
	Sparsecomm__Abandon ab = SPARSECOMM__ABANDON__INIT, ab2 = SPARSECOMM__ABANDON__INIT;
	Sparsecomm__Abandon *pab[2] = {&ab, &ab2};
	ab.name = "layer1.weight", ab.status = SC_ERR_MISMATCH, ab.reason = "numel differs";
	/* a step the node failed before announcing it */
	ab2.name = "layer2.weight", ab2.status = SC_ERR_STALLED, ab2.reason = "stalled";
	ab2.step = 1;
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	rl.rank = 1, rl.requests = &ptr, rl.n_requests = 1, rl.abandoned = pab;
	rl.n_abandoned = 2;
	Sparsecomm__GroupTag gt = SPARSECOMM__GROUP_TAG__INIT, *pgt = &gt;
	gt.name = "layer0.weight", gt.group = 1, gt.size = 2;
	rl.groups = &pgt, rl.n_groups = 1;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_READY, m.ready = &rl;
	n = peer_record(out, 0, 1, &m);
	p.cycle = 1, p.n_new_entries = 2;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PLAN, m.plan = &p;
	n = peer_record(out, n, 0, &m);
	rl.rank = 2, rl.n_requests = 0, rl.n_abandoned = 0, rl.cached_ids = ids;
	rl.n_cached_ids = 1;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_READY, m.ready = &rl;
	n = peer_record(out, n, 2, &m);
	put("peer_msg", "ready", out, n, NULL, 0);
}

static void pack_client(const void *m, uint8_t *out)
{
	sparsecomm__client_msg__pack(m, out);
}

/* One record of client c's conversation. */
static size_t client_record(uint8_t *out, size_t at, uint8_t c, Sparsecomm__ClientMsg *m)
{
	m->seq++;
	return record(out, at, &c, 1, sparsecomm__client_msg__get_packed_size(m), pack_client,
		      m);
}

static void client_msg_seeds(void)
{
	static uint8_t out[4096];
	Sparsecomm__ClientMsg m = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Hello h = SPARSECOMM__HELLO__INIT;
	h.protocol_version = SC_PROTOCOL_VERSION, h.local_rank = -1, h.header_completion = 1;
	h.submit_channel = 1, h.silent_accept = 1;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO, m.hello = &h;
	/* a trainer: hello, register a COO tensor, submit it, bye */
	size_t n = client_record(out, 0, 0, &m);
	Sparsecomm__TensorOpts o = SPARSECOMM__TENSOR_OPTS__INIT;
	o.coo_capacity = 16, o.allow_lossy = 1, o.density = 0.01;
	Sparsecomm__RegisterTensor rt = SPARSECOMM__REGISTER_TENSOR__INIT;
	rt.name = "emb", rt.dtype = 0, rt.numel = 1024, rt.opts = &o;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_REG, m.reg = &rt;
	n = client_record(out, n, 0, &m);
	Sparsecomm__Allreduce ar = SPARSECOMM__ALLREDUCE__INIT;
	ar.coo = 1, ar.nnz = 4;
	Sparsecomm__Collective a = SPARSECOMM__COLLECTIVE__INIT;
	a.tensor_id = 1, a.handle = 7;
	a.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE, a.allreduce = &ar;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE, m.collective = &a;
	n = client_record(out, n, 0, &m);
	Sparsecomm__Empty empty = SPARSECOMM__EMPTY__INIT;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_BYE, m.bye = &empty;
	n = client_record(out, n, 0, &m);
	put("client_msg", "trainer", out, n, NULL, 0);
	/* sparsectl: hello, status, stats, pending, config get and set */
	h.role = SPARSECOMM__ROLE__ROLE_CONTROL;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO, m.hello = &h;
	n = client_record(out, 0, 1, &m);
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATUS, m.status = &empty;
	n = client_record(out, n, 1, &m);
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATS, m.stats = &empty;
	n = client_record(out, n, 1, &m);
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_PENDING, m.pending = &empty;
	n = client_record(out, n, 1, &m);
	Sparsecomm__ConfigGet cg = SPARSECOMM__CONFIG_GET__INIT;
	cg.key = "scheme";
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_GET, m.config_get = &cg;
	n = client_record(out, n, 1, &m);
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	cs.key = "cycle_time_ms", cs.value = "3";
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_SET, m.config_set = &cs;
	n = client_record(out, n, 1, &m);
	put("client_msg", "control", out, n, NULL, 0);
	/* the collectives: two trainers register a tensor; a max, a broadcast from rank 1, an
	 * allgather of 3 elements, an alltoall (one trainer's counts over the tensor's size), a
	 * reduce-scatter in rows of 2 from each, a request that names no collective, a barrier
	 * and a join from each */
	h.role = SPARSECOMM__ROLE__ROLE_TRAINER;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_HELLO, m.hello = &h;
	n = client_record(out, 0, 0, &m);
	n = client_record(out, n, 2, &m);
	Sparsecomm__RegisterTensor rd = SPARSECOMM__REGISTER_TENSOR__INIT;
	rd.name = "w", rd.dtype = 3, rd.numel = 8;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_REG, m.reg = &rd;
	n = client_record(out, n, 0, &m);
	n = client_record(out, n, 2, &m);
	Sparsecomm__Allreduce mx = SPARSECOMM__ALLREDUCE__INIT;
	mx.op = SC_OP_MAX;
	Sparsecomm__Collective c = SPARSECOMM__COLLECTIVE__INIT;
	c.tensor_id = 1, c.handle = 9;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLREDUCE, c.allreduce = &mx;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_COLLECTIVE, m.collective = &c;
	n = client_record(out, n, 0, &m);
	Sparsecomm__Broadcast bc = SPARSECOMM__BROADCAST__INIT;
	bc.root_rank = 1;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_BROADCAST, c.broadcast = &bc, c.handle = 10;
	n = client_record(out, n, 2, &m);
	Sparsecomm__Allgather ag = SPARSECOMM__ALLGATHER__INIT;
	ag.count = 3;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLGATHER, c.allgather = &ag, c.handle = 11;
	n = client_record(out, n, 0, &m);
	uint64_t sends[2] = {3, 9}; /* the second trainer's sum over the tensor's 8 */
	Sparsecomm__Alltoall at = SPARSECOMM__ALLTOALL__INIT;
	at.send_counts = sends, at.n_send_counts = 2;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_ALLTOALL, c.alltoall = &at, c.handle = 14;
	n = client_record(out, n, 2, &m);
	sends[1] = 5;
	n = client_record(out, n, 0, &m);
	Sparsecomm__Reducescatter rs = SPARSECOMM__REDUCESCATTER__INIT;
	rs.op = SC_OP_SUM, rs.row_elems = 2;
	c.body_case = SPARSECOMM__COLLECTIVE__BODY_REDUCESCATTER, c.reducescatter = &rs;
	c.handle = 15;
	n = client_record(out, n, 0, &m);
	n = client_record(out, n, 2, &m);
	c.body_case = SPARSECOMM__COLLECTIVE__BODY__NOT_SET, c.handle = 16; /* no body */
	n = client_record(out, n, 0, &m);
	Sparsecomm__Barrier b = SPARSECOMM__BARRIER__INIT;
	b.handle = 12;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_BARRIER, m.barrier = &b;
	n = client_record(out, n, 0, &m);
	n = client_record(out, n, 2, &m);
	Sparsecomm__TrainerJoin j = SPARSECOMM__TRAINER_JOIN__INIT;
	j.handle = 13;
	m.body_case = SPARSECOMM__CLIENT_MSG__BODY_TRAINER_JOIN, m.trainer_join = &j;
	n = client_record(out, n, 2, &m);
	n = client_record(out, n, 0, &m);
	put("client_msg", "collectives", out, n, NULL, 0);
}

/* Streams of valid records (fuzz_seal.c: mode, cipher, read size, then the stream) under
 * the harness's fixed key: an empty record, a short one, one of 3000 bytes. */
static void seal_seeds(void)
{
	static uint8_t out[4 + 3 * (3000 + 64)], plain[3000];
	uint8_t key[SCD_SEAL_KEY_BYTES];
	memset(key, 0x11, sizeof(key));
	for (size_t i = 0; i < sizeof(plain); i++)
		plain[i] = (uint8_t)(i * 7);
	for (int mode = SCD_SEAL_INTEGRITY; mode <= SCD_SEAL_ENCRYPT; mode++)
		for (int cipher = SCD_SEAL_CHACHA20; cipher <= SCD_SEAL_AES256GCM; cipher++) {
			scd_seal_t *s = scd_seal_new(mode, cipher, key, key);
			if (!s)
				continue; /* no AES-GCM on this CPU */
			size_t n = 4;
			out[0] = (uint8_t)(mode - SCD_SEAL_INTEGRITY);
			out[1] = (uint8_t)cipher;
			out[2] = 99; /* reads of 100 bytes */
			out[3] = 0;
			n += scd_seal_record(s, plain, 0, out + n);
			n += scd_seal_record(s, plain, 5, out + n);
			n += scd_seal_record(s, plain, 3000, out + n);
			char name[64];
			snprintf(name, sizeof(name), "%s_%s", scd_seal_mode_name(mode),
				 scd_seal_cipher_name(cipher));
			put("seal", name, out, n, NULL, 0);
			scd_seal_free(s);
		}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz-seeds DIR\n");
		return 2;
	}
	root = argv[1];
	scheme_msg_seeds();
	formats_seeds();
	config_seeds();
	peer_msg_seeds();
	client_msg_seeds();
	seal_seeds();
	return 0;
}
