// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * rc_integrity: an RC data-integrity test through libibverbs.
 *
 *   rc_integrity DEV_A GID_A DEV_B GID_B [--qps N] [--ops N] [--max-size BYTES]
 *                [--seed N] [--timeout SECONDS] [--window N] [--sges N]
 *
 * One process opens both devices (they may be the same one) and connects
 * N RC QP pairs between them, exchanging QP numbers, PSNs and GIDs in
 * memory. A seeded random workload then runs over all pairs at once, in
 * both directions: SEND, SEND with immediate, RDMA WRITE, WRITE with
 * immediate, RDMA READ, compare-and-swap and fetch-and-add, with message
 * sizes from 0 bytes to --max-size at random buffer offsets. With --sges N
 * (up to 16) each request's local buffer and each receive buffer is cut
 * into up to N scatter/gather entries at points that depend on the seed
 * (the bytes stay where they were: the checks are the same).
 *
 * Every byte is checked. Data comes from a pattern of (seed, operation,
 * offset); the program sees both ends' memory, so after a WRITE's
 * completion (an RC ACK: the data is placed) it reads the responder's
 * buffer, after a READ its own, after a receive the receive buffer, and
 * guard bytes on both sides of every target must stay as they were. Every
 * completion is checked: SUCCESS, the wr_id of the oldest outstanding
 * request of that queue (RC completes in order), the opcode, byte_len,
 * immediate data and QP number. Atomics: each returned old value must be
 * the one the sequence of earlier atomics on that counter implies, and the
 * counters must end at the computed value (a duplicated request executed
 * twice shows up here). Nothing may complete that was not posted.
 *
 * The operation sequence depends only on --seed, never on timing. Every
 * wait has a timeout (--timeout seconds without any completion): then the
 * outstanding work is printed and the test fails instead of hanging.
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per property (counted by
 * tools/check) and exits non-zero when any failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

#define MAX_QPS 64
#define MAX_WINDOW 32
#define RECV_DEPTH 16	/* receives kept posted per QP */
#define GUARD 64	/* poisoned bytes on each side of every target */
#define SHIFT_MAX 4096	/* random start offset within a slot */
#define POISON 0xa5

enum optype { OP_SEND, OP_SEND_IMM, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_CMP_SWAP, OP_FETCH_ADD, OP_NTYPES };
static const char *const op_name[OP_NTYPES] = {
	"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "CMP_AND_SWAP", "FETCH_AND_ADD",
};
/* relative frequency of each operation */
static const unsigned op_weight[OP_NTYPES] = { 20, 10, 20, 10, 20, 10, 10 };

/* ---------------------------------------------------------------- options */

static int nqps = 4;
static long nops = 2000;
static uint32_t max_size = 262144;
static uint64_t seed = 1;
static int timeout_s = 30;
static int window = 8;
static int nsges = 1;
#define MAX_SGES 16

/* ---------------------------------------------------------------- results */

/* properties, each reported as one TAP line at the end */
enum prop { P_COMPLETIONS, P_SEND, P_WRITE, P_WRITE_IMM, P_READ, P_ATOMIC, P_GUARD, P_NO_EXTRA, P_QP_STATE, P_NPROPS };
static const char *const prop_name[P_NPROPS] = {
	"every completion SUCCESS, in order, with the right wr_id, opcode, byte_len and QP",
	"SEND and SEND with immediate: every received byte, byte_len and immediate",
	"RDMA WRITE: every byte at the responder after the completion",
	"RDMA WRITE with immediate: data at the responder, receive completion with byte_len and immediate",
	"RDMA READ: every byte read",
	"atomics: every returned old value, and the final counter values",
	"no byte outside a target written (guard bytes intact)",
	"no completion that was not asked for",
	"every QP still in RTS after the workload",
};
static long prop_fail[P_NPROPS];
static long prop_count[P_NPROPS];
static int reports; /* failure messages printed so far */
#define MAX_REPORTS 40

static void fail(enum prop p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(enum prop p, const char *fmt, ...)
{
	va_list ap;

	prop_fail[p]++;
	if (reports++ >= MAX_REPORTS) {
		if (reports == MAX_REPORTS + 1)
			printf("FAIL: (further failure messages suppressed)\n");
		return;
	}
	printf("FAIL: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void die(const char *what)
{
	printf("not ok - setup: %s: %s\n", what, strerror(errno));
	fprintf(stderr, "rc_integrity: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* ---------------------------------------------------------------- patterns */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* the workload's random numbers (depend on --seed only) */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state += 0x9e3779b97f4a7c15ULL;
	return mix(rng_state);
}

static uint64_t word_of(uint64_t idx, uint64_t w)
{
	return mix(seed * 0x100000001b3ULL ^ mix(idx) ^ (w * 0xd6e8feb86659fd93ULL));
}

static void pattern_fill(uint8_t *p, uint64_t idx, uint32_t len)
{
	uint32_t o;

	for (o = 0; o < len; o += 8) {
		uint64_t v = word_of(idx, o / 8);
		uint32_t n = len - o < 8 ? len - o : 8;

		memcpy(p + o, &v, n);
	}
}

/* Offset of the first byte that differs from the pattern, or -1. */
static long pattern_check(const uint8_t *p, uint64_t idx, uint32_t len, long *nbad)
{
	long first = -1;
	uint32_t o, i;

	*nbad = 0;
	for (o = 0; o < len; o += 8) {
		uint64_t v = word_of(idx, o / 8);
		uint32_t n = len - o < 8 ? len - o : 8;

		if (!memcmp(p + o, &v, n))
			continue;
		for (i = 0; i < n; i++) {
			if (p[o + i] != ((uint8_t *)&v)[i]) {
				if (first < 0)
					first = o + i;
				(*nbad)++;
			}
		}
	}
	return first;
}

static int poisoned(const uint8_t *p, uint32_t len)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		if (p[i] != POISON)
			return 0;
	return 1;
}

/* ---------------------------------------------------------------- objects */

struct dev {
	const char *name;
	int gid_index;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	struct ibv_port_attr port;
	struct ibv_device_attr attr;
};

struct op {
	uint64_t idx;		/* operation number: the pattern and the wr_id */
	enum optype type;
	uint32_t size;
	uint32_t loff, roff;	/* offsets in the local and the remote slot */
	uint32_t imm;
	uint64_t expect_old;	/* atomics: the value the responder must return */
	uint64_t arg1, arg2;	/* atomics: compare/add, swap */
	int slot;
};

struct expect {			/* a message that will consume a receive */
	uint64_t idx;
	enum optype type;
	uint32_t size;
	uint32_t imm;
};

struct ep {			/* one end of a QP pair */
	struct dev *d;
	int pair, side;
	struct ep *peer;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t slot_size, buf_len;
	uint32_t psn;
	/* send queue: requests in posting order (slot = seq % window) */
	struct op sq[MAX_WINDOW];
	uint64_t posted, completed;
	/* receives: posted in order; seq % RECV_DEPTH is the slot */
	uint64_t recv_posted, recv_done;
	uint32_t recv_off[RECV_DEPTH];
	/* messages the peer sent that will consume our receives, in order */
	struct expect exp[RECV_DEPTH];
	uint64_t exp_head, exp_tail;
	/* the peer's atomic counter, as our atomics leave it */
	uint64_t remote_counter;
};

static struct dev devs[2];
static struct ep eps[2 * MAX_QPS];
static int neps;

/* Buffer layout of an endpoint: `window` local slots (sources of SEND and
 * WRITE, READ destinations, atomic results), RECV_DEPTH receive slots,
 * `window` exposed slots (targets of the peer's WRITE and READ, indexed by
 * the peer's slot), then the 8-byte atomic counter. */
static uint8_t *local_slot(struct ep *e, int i) { return e->buf + (size_t)i * e->slot_size; }
static uint8_t *recv_slot(struct ep *e, int i) { return e->buf + (size_t)(window + i) * e->slot_size; }
static uint8_t *exposed_slot(struct ep *e, int i)
{
	return e->buf + (size_t)(window + RECV_DEPTH + i) * e->slot_size;
}
static uint64_t *counter_of(struct ep *e)
{
	return (uint64_t *)(e->buf + (size_t)(2 * window + RECV_DEPTH) * e->slot_size);
}

static uint64_t recv_wr_id(struct ep *e, uint64_t seq)
{
	return (1ULL << 63) | ((uint64_t)(e - eps) << 40) | seq;
}

static const char *ep_name(struct ep *e)
{
	static char s[4][64];
	static int k;
	char *p = s[k++ & 3];

	snprintf(p, 64, "pair %d %s->%s (QPN 0x%x)", e->pair, e->d->name, e->peer->d->name, e->qp->qp_num);
	return p;
}

static void open_dev(struct dev *d)
{
	struct ibv_device **list;
	int i, n;

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), d->name))
			d->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!d->ctx) {
		errno = ENODEV;
		die(d->name);
	}
	if (ibv_query_device(d->ctx, &d->attr))
		die("ibv_query_device");
	if (ibv_query_port(d->ctx, 1, &d->port))
		die("ibv_query_port");
	if (ibv_query_gid(d->ctx, 1, d->gid_index, &d->gid))
		die("ibv_query_gid");
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		die("ibv_alloc_pd");
}

static void make_ep(struct ep *e)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64 },
	};
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;

	ia.cap.max_send_sge = nsges;
	ia.cap.max_recv_sge = nsges;
	e->slot_size = (GUARD + SHIFT_MAX + max_size + GUARD + 63) & ~(size_t)63;
	e->buf_len = (size_t)(2 * window + RECV_DEPTH) * e->slot_size + 4096;
	if (posix_memalign((void **)&e->buf, 4096, e->buf_len))
		die("posix_memalign");
	memset(e->buf, POISON, e->buf_len);
	*counter_of(e) = rnd();
	e->mr = ibv_reg_mr(e->d->pd, e->buf, e->buf_len, access);
	if (!e->mr)
		die("ibv_reg_mr");
	e->scq = ibv_create_cq(e->d->ctx, 128, NULL, NULL, 0);
	e->rcq = ibv_create_cq(e->d->ctx, 128, NULL, NULL, 0);
	if (!e->scq || !e->rcq)
		die("ibv_create_cq");
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	e->qp = ibv_create_qp(e->d->pd, &ia);
	if (!e->qp)
		die("ibv_create_qp");
	/* The first pair starts just below the 24-bit PSN wrap. */
	e->psn = e->pair == 0 ? 0xffffffu - 40 - 7 * (uint32_t)e->side : (uint32_t)(rnd() & 0xffffff);
}

static int clamp_rd(int v)
{
	return v < 1 ? 1 : v > 255 ? 255 : v;
}

static void connect_ep(struct ep *e)
{
	struct ep *p = e->peer;
	struct tl_rc_conn c = {
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC,
		.mtu = e->d->port.active_mtu < p->d->port.active_mtu ? e->d->port.active_mtu : p->d->port.active_mtu,
		.dest_qpn = p->qp->qp_num,
		.rq_psn = p->psn,
		.sq_psn = e->psn,
		.dgid = p->d->gid,
		.sgid_index = e->d->gid_index,
		.max_dest_rd_atomic = clamp_rd(e->d->attr.max_qp_rd_atom),
		.max_rd_atomic = clamp_rd(p->d->attr.max_qp_init_rd_atom < e->d->attr.max_qp_init_rd_atom
						  ? p->d->attr.max_qp_init_rd_atom
						  : e->d->attr.max_qp_init_rd_atom),
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
	};
	const char *failed = tl_rc_connect(e->qp, &c);

	if (failed)
		die(failed);
}

/* ---------------------------------------------------------------- the workload */

static uint64_t stat_ops[OP_NTYPES], stat_bytes[OP_NTYPES];
static uint64_t n_send_cqe, n_recv_cqe, total_bytes;
static struct timespec t_start, t_progress;
static int aborted;

static double since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Cuts the len bytes at addr into up to nsges entries of sg (each at
 * least one byte long) at points h chooses; returns how many. */
static int split_sge(struct ibv_sge *sg, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t h)
{
	int n = nsges, i;
	uint32_t left = len;

	if (len < (uint32_t)n)
		n = len ? (int)len : 1;
	for (i = 0; i < n; i++) {
		uint32_t l = i == n - 1 ? left : 1 + (uint32_t)(mix(h + i) % (left - (uint32_t)(n - 1 - i)));

		sg[i].addr = addr;
		sg[i].length = l;
		sg[i].lkey = lkey;
		addr += l;
		left -= l;
	}
	return n;
}

static void post_one_recv(struct ep *e)
{
	uint64_t seq = e->recv_posted;
	int s = seq % RECV_DEPTH;
	/* not from rnd(): receives are reposted as completions come, and the
	 * operation sequence must not depend on timing */
	uint64_t h = mix(seed ^ mix(((uint64_t)(e - eps) << 40) | seq));
	uint32_t off = GUARD + (h & 1 ? (uint32_t)((h >> 8) % SHIFT_MAX) : 0);
	struct ibv_sge sge[MAX_SGES];
	struct ibv_recv_wr wr = { .wr_id = recv_wr_id(e, seq), .sg_list = sge }, *bad;

	wr.num_sge = split_sge(sge, (uintptr_t)recv_slot(e, s) + off, max_size, e->mr->lkey, h >> 16);

	e->recv_off[s] = off;
	memset(recv_slot(e, s) + off - GUARD, POISON, GUARD);
	if (ibv_post_recv(e->qp, &wr, &bad))
		die("ibv_post_recv");
	e->recv_posted++;
}

static uint32_t rand_size(int mtu)
{
	uint32_t s;
	int bits = 0;

	while (bits < 31 && (1u << bits) < max_size)
		bits++;
	if (rnd() % 16 == 0) {
		const uint32_t edge[] = { 0, 1, 7, 8, 9, mtu - 1, mtu, mtu + 1, 2 * mtu, 2 * mtu + 1, 4095, 4096, max_size };

		s = edge[rnd() % (sizeof(edge) / sizeof(edge[0]))];
	} else {
		int e = rnd() % (bits + 1);
		uint32_t hi = 1u << e, lo = hi / 2;

		s = lo + rnd() % (hi - lo + 1);
	}
	return s > max_size ? max_size : s;
}

static uint32_t rand_off(void)
{
	return GUARD + (rnd() & 1 ? (uint32_t)(rnd() % SHIFT_MAX) : 0);
}

/* Requests of a pair's one direction wait when its window is full, and
 * receive-consuming ones when the peer has no receive to spare. */
static int can_issue(struct ep *e, enum optype t)
{
	if (e->posted - e->completed >= (uint64_t)window)
		return 0;
	if (t == OP_SEND || t == OP_SEND_IMM || t == OP_WRITE_IMM)
		return e->peer->exp_tail - e->peer->exp_head < RECV_DEPTH;
	return 1;
}

static void issue(struct ep *e, uint64_t idx, enum optype t, uint32_t size)
{
	struct ep *p = e->peer;
	int slot = e->posted % window;
	struct op *o = &e->sq[slot];
	struct ibv_sge sge, sgl[MAX_SGES];
	struct ibv_send_wr wr, *bad;
	uint8_t *l = local_slot(e, slot), *r = exposed_slot(p, slot);

	memset(o, 0, sizeof(*o));
	memset(&wr, 0, sizeof(wr));
	o->idx = idx;
	o->type = t;
	o->size = size;
	o->slot = slot;
	o->loff = rand_off();
	o->roff = rand_off();
	o->imm = (uint32_t)word_of(idx, ~0ULL);
	wr.wr_id = idx;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	sge.addr = (uintptr_t)l + o->loff;
	sge.length = size;
	sge.lkey = e->mr->lkey;
	if (size == 0 && (idx & 1))
		wr.num_sge = 0;
	switch (t) {
	case OP_SEND:
	case OP_SEND_IMM:
	case OP_WRITE:
	case OP_WRITE_IMM:
		pattern_fill(l + o->loff, idx, size);
		if (t == OP_SEND || t == OP_SEND_IMM) {
			wr.opcode = t == OP_SEND ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
		} else {
			wr.opcode = t == OP_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
			wr.wr.rdma.remote_addr = (uintptr_t)r + o->roff;
			wr.wr.rdma.rkey = p->mr->rkey;
			memset(r + o->roff - GUARD, POISON, GUARD);
			memset(r + o->roff + size, POISON, GUARD);
		}
		if (t != OP_WRITE) {
			/* the message takes the peer's next receive */
			uint64_t rs = p->exp_tail;
			uint8_t *rb = recv_slot(p, rs % RECV_DEPTH) + p->recv_off[rs % RECV_DEPTH];
			struct expect *x = &p->exp[rs % RECV_DEPTH];

			x->idx = idx;
			x->type = t;
			x->size = size;
			x->imm = o->imm;
			p->exp_tail++;
			/* after the data: untouched; WRITE with immediate: nothing */
			memset(t == OP_WRITE_IMM ? rb : rb + size, POISON, GUARD);
			wr.imm_data = htonl(o->imm);
		}
		break;
	case OP_READ:
		/* the responder's side wrote its data locally */
		pattern_fill(r + o->roff, idx, size);
		memset(l + o->loff - GUARD, POISON, GUARD);
		memset(l + o->loff + size, POISON, GUARD);
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = (uintptr_t)r + o->roff;
		wr.wr.rdma.rkey = p->mr->rkey;
		break;
	case OP_CMP_SWAP:
	case OP_FETCH_ADD:
		o->loff = GUARD + 8 * (rnd() % 64);
		o->size = size = 8;
		sge.addr = (uintptr_t)l + o->loff;
		sge.length = 8;
		wr.num_sge = 1;
		memset(l + o->loff - GUARD, POISON, 2 * GUARD + 8);
		o->expect_old = e->remote_counter;
		if (t == OP_FETCH_ADD) {
			/* small adds, and now and then one that carries far */
			o->arg1 = rnd() % 4 ? rnd() % 1000 : rnd();
			e->remote_counter += o->arg1;
			wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		} else {
			o->arg1 = rnd() % 4 ? e->remote_counter : e->remote_counter ^ (1ULL << (rnd() % 64));
			o->arg2 = rnd();
			if (o->arg1 == e->remote_counter)
				e->remote_counter = o->arg2;
			wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		}
		wr.wr.atomic.remote_addr = (uintptr_t)counter_of(p);
		wr.wr.atomic.rkey = p->mr->rkey;
		wr.wr.atomic.compare_add = o->arg1;
		wr.wr.atomic.swap = o->arg2;
		break;
	default:
		break;
	}
	if (nsges > 1 && wr.num_sge == 1 && t != OP_CMP_SWAP && t != OP_FETCH_ADD) {
		wr.num_sge = split_sge(sgl, sge.addr, sge.length, sge.lkey, mix(seed ^ idx));
		wr.sg_list = sgl;
	}
	if (ibv_post_send(e->qp, &wr, &bad)) {
		fail(P_COMPLETIONS, "op #%" PRIu64 " %s size %u on %s: ibv_post_send: %s", idx, op_name[t], size,
		     ep_name(e), strerror(errno));
		aborted = 1;
		return;
	}
	e->posted++;
	stat_ops[t]++;
	stat_bytes[t] += size;
	total_bytes += size;
}

/* Checks a target [p, p+size) against the pattern and its guard bytes. */
static void check_data(enum prop prop, struct ep *e, const struct op *o, const char *where, const uint8_t *p)
{
	long nbad, first = pattern_check(p, o->idx, o->size, &nbad);

	prop_count[prop]++;
	if (first >= 0) {
		uint64_t v = word_of(o->idx, first / 8);

		fail(prop,
		     "op #%" PRIu64 " %s size %u on %s: %s: %ld of %u bytes wrong, first at offset %ld "
		     "(expected 0x%02x, got 0x%02x; local offset %u, remote offset %u)",
		     o->idx, op_name[o->type], o->size, ep_name(e), where, nbad, o->size, first,
		     ((uint8_t *)&v)[first % 8], p[first], o->loff, o->roff);
	}
	prop_count[P_GUARD]++;
	if (!poisoned(p - GUARD, GUARD) || !poisoned(p + o->size, GUARD))
		fail(P_GUARD, "op #%" PRIu64 " %s size %u on %s: %s: bytes %s the target were written",
		     o->idx, op_name[o->type], o->size, ep_name(e), where,
		     poisoned(p - GUARD, GUARD) ? "after" : "before");
}

static enum ibv_wc_opcode wc_opcode(enum optype t)
{
	switch (t) {
	case OP_SEND:
	case OP_SEND_IMM:
		return IBV_WC_SEND;
	case OP_WRITE:
	case OP_WRITE_IMM:
		return IBV_WC_RDMA_WRITE;
	case OP_READ:
		return IBV_WC_RDMA_READ;
	case OP_CMP_SWAP:
		return IBV_WC_COMP_SWAP;
	default:
		return IBV_WC_FETCH_ADD;
	}
}

static void send_completion(struct ep *e, const struct ibv_wc *wc)
{
	struct op *o;

	n_send_cqe++;
	prop_count[P_COMPLETIONS]++;
	if (e->completed == e->posted) {
		fail(P_NO_EXTRA, "%s: send completion wr_id %" PRIu64 " status %s with nothing outstanding",
		     ep_name(e), (uint64_t)wc->wr_id, ibv_wc_status_str(wc->status));
		return;
	}
	o = &e->sq[e->completed % window];
	e->completed++;
	if (wc->status != IBV_WC_SUCCESS || wc->wr_id != o->idx || wc->opcode != wc_opcode(o->type) ||
	    wc->byte_len != o->size || wc->qp_num != e->qp->qp_num) {
		fail(P_COMPLETIONS,
		     "%s: send completion wr_id %" PRIu64 " status %s (%d, vendor_err 0x%x) opcode %d byte_len %u "
		     "qp_num 0x%x; expected op #%" PRIu64 " %s size %u (opcode %d)",
		     ep_name(e), (uint64_t)wc->wr_id, ibv_wc_status_str(wc->status), wc->status, wc->vendor_err,
		     wc->opcode, wc->byte_len, wc->qp_num, o->idx, op_name[o->type], o->size, wc_opcode(o->type));
		if (wc->status != IBV_WC_SUCCESS)
			aborted = 1; /* the QP is in the error state now */
		return;
	}
	switch (o->type) {
	case OP_WRITE:
		check_data(P_WRITE, e, o, "responder memory", exposed_slot(e->peer, o->slot) + o->roff);
		break;
	case OP_WRITE_IMM:
		check_data(P_WRITE_IMM, e, o, "responder memory", exposed_slot(e->peer, o->slot) + o->roff);
		break;
	case OP_READ:
		check_data(P_READ, e, o, "read destination", local_slot(e, o->slot) + o->loff);
		break;
	case OP_CMP_SWAP:
	case OP_FETCH_ADD: {
		uint8_t *l = local_slot(e, o->slot) + o->loff;
		uint64_t got;

		memcpy(&got, l, 8);
		prop_count[P_ATOMIC]++;
		if (got != o->expect_old)
			fail(P_ATOMIC,
			     "op #%" PRIu64 " %s on %s: returned 0x%016" PRIx64 ", expected 0x%016" PRIx64
			     " (compare/add 0x%" PRIx64 ", swap 0x%" PRIx64 ")",
			     o->idx, op_name[o->type], ep_name(e), got, o->expect_old, o->arg1, o->arg2);
		prop_count[P_GUARD]++;
		if (!poisoned(l - GUARD, GUARD) || !poisoned(l + 8, GUARD))
			fail(P_GUARD, "op #%" PRIu64 " %s on %s: bytes around the 8-byte result were written",
			     o->idx, op_name[o->type], ep_name(e));
		break;
	}
	default:
		break;
	}
}

static void recv_completion(struct ep *e, const struct ibv_wc *wc)
{
	uint64_t seq = e->recv_done;
	int s = seq % RECV_DEPTH;
	struct expect *x;
	struct op o;
	uint8_t *rb;
	int imm;
	enum prop prop;

	n_recv_cqe++;
	prop_count[P_COMPLETIONS]++;
	if (e->exp_head == e->exp_tail) {
		fail(P_NO_EXTRA, "%s: receive completion wr_id 0x%" PRIx64 " status %s byte_len %u: no message was sent",
		     ep_name(e->peer), (uint64_t)wc->wr_id, ibv_wc_status_str(wc->status), wc->byte_len);
		if (wc->status != IBV_WC_SUCCESS)
			aborted = 1;
		return;
	}
	x = &e->exp[e->exp_head % RECV_DEPTH];
	imm = x->type != OP_SEND;
	prop = x->type == OP_WRITE_IMM ? P_WRITE_IMM : P_SEND;
	rb = recv_slot(e, s) + e->recv_off[s];
	if (wc->status != IBV_WC_SUCCESS || wc->wr_id != recv_wr_id(e, seq) ||
	    wc->opcode != (x->type == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV) ||
	    wc->qp_num != e->qp->qp_num) {
		fail(P_COMPLETIONS,
		     "%s: receive completion wr_id 0x%" PRIx64 " status %s (%d, vendor_err 0x%x) opcode %d byte_len %u "
		     "qp_num 0x%x; expected receive 0x%" PRIx64 " for op #%" PRIu64 " %s size %u",
		     ep_name(e->peer), (uint64_t)wc->wr_id, ibv_wc_status_str(wc->status), wc->status, wc->vendor_err,
		     wc->opcode, wc->byte_len, wc->qp_num, recv_wr_id(e, seq), x->idx, op_name[x->type], x->size);
		if (wc->status != IBV_WC_SUCCESS)
			aborted = 1;
	} else {
		prop_count[prop]++;
		if (wc->byte_len != x->size || !!(wc->wc_flags & IBV_WC_WITH_IMM) != imm ||
		    (imm && wc->imm_data != htonl(x->imm)))
			fail(prop,
			     "%s: receive for op #%" PRIu64 " %s size %u: byte_len %u, wc_flags 0x%x, imm 0x%08x "
			     "(expected 0x%08x)",
			     ep_name(e->peer), x->idx, op_name[x->type], x->size, wc->byte_len, wc->wc_flags,
			     ntohl(wc->imm_data), x->imm);
		memset(&o, 0, sizeof(o));
		o.idx = x->idx;
		o.type = x->type;
		o.size = x->size;
		o.loff = e->recv_off[s];
		if (x->type == OP_WRITE_IMM) {
			prop_count[P_GUARD]++;
			if (!poisoned(rb, GUARD))
				fail(P_GUARD, "%s: op #%" PRIu64 " WRITE with immediate wrote into the receive buffer",
				     ep_name(e->peer), x->idx);
		} else {
			check_data(P_SEND, e->peer, &o, "receive buffer", rb);
		}
	}
	e->exp_head++;
	e->recv_done++;
	post_one_recv(e);
}

/* Polls every CQ once; returns the number of completions handled. */
static int poll_all(void)
{
	struct ibv_wc wc[16];
	int i, j, n, total = 0;

	for (i = 0; i < neps; i++) {
		struct ep *e = &eps[i];

		n = ibv_poll_cq(e->scq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (j = 0; j < n; j++)
			send_completion(e, &wc[j]);
		total += n;
		n = ibv_poll_cq(e->rcq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (j = 0; j < n; j++)
			recv_completion(e, &wc[j]);
		total += n;
	}
	return total;
}

static const char *qp_state_name(enum ibv_qp_state s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

static enum ibv_qp_state qp_state(struct ep *e)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(e->qp, &a, IBV_QP_STATE, &ia))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static void dump_outstanding(void)
{
	int i;
	uint64_t k;

	for (i = 0; i < neps; i++) {
		struct ep *e = &eps[i];

		printf("  %s: QP state %s; sends posted %" PRIu64 ", completed %" PRIu64 "; messages to it %" PRIu64
		       ", received %" PRIu64 "\n",
		       ep_name(e), qp_state_name(qp_state(e)), e->posted, e->completed, e->peer->exp_tail,
		       e->peer->exp_head);
		for (k = e->completed; k < e->posted; k++) {
			struct op *o = &e->sq[k % window];

			printf("    outstanding: op #%" PRIu64 " %s size %u\n", o->idx, op_name[o->type], o->size);
		}
		for (k = e->peer->exp_head; k < e->peer->exp_tail; k++) {
			struct expect *x = &e->peer->exp[k % RECV_DEPTH];

			printf("    not received: op #%" PRIu64 " %s size %u\n", x->idx, op_name[x->type], x->size);
		}
	}
	fflush(stdout);
}

/* Polls until `done` says so; 0 on timeout (no completion for timeout_s). */
static int wait_until(int (*done)(void *), void *arg, const char *what)
{
	int idle = 0;

	while (!done(arg) && !aborted) {
		if (poll_all()) {
			clock_gettime(CLOCK_MONOTONIC, &t_progress);
			idle = 0;
			continue;
		}
		if (since(&t_progress) > timeout_s) {
			printf("FAIL: no completion for %d s while waiting for %s; outstanding work:\n", timeout_s, what);
			dump_outstanding();
			return 0;
		}
		if (++idle > 64)
			usleep(200);
		else
			sched_yield();
	}
	return !aborted;
}

struct issue_wait {
	struct ep *e;
	enum optype t;
};

static int can_issue_cb(void *arg)
{
	struct issue_wait *w = arg;

	return can_issue(w->e, w->t);
}

static int all_done_cb(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < neps; i++)
		if (eps[i].completed != eps[i].posted || eps[i].exp_head != eps[i].exp_tail)
			return 0;
	return 1;
}

static int run_workload(void)
{
	long i;
	unsigned wsum = 0;
	int t;
	char what[128];

	for (t = 0; t < OP_NTYPES; t++)
		wsum += op_weight[t];
	clock_gettime(CLOCK_MONOTONIC, &t_start);
	t_progress = t_start;
	for (i = 0; i < nops && !aborted; i++) {
		struct issue_wait w;
		unsigned r;
		uint32_t size;

		w.e = &eps[rnd() % neps];
		r = rnd() % wsum;
		for (t = 0; r >= op_weight[t]; t++)
			r -= op_weight[t];
		w.t = (enum optype)t;
		size = rand_size(128 << w.e->d->port.active_mtu);
		snprintf(what, sizeof(what), "room to post op #%ld %s on %s", i, op_name[w.t], ep_name(w.e));
		if (!wait_until(can_issue_cb, &w, what))
			return 0;
		issue(w.e, (uint64_t)i, w.t, size);
		if (nops >= 10 && (i + 1) % (nops / 10) == 0) {
			printf("progress: %ld/%ld operations posted, %.1f MB, %" PRIu64 " send and %" PRIu64
			       " receive completions, %.1f s\n",
			       i + 1, nops, total_bytes / 1e6, n_send_cqe, n_recv_cqe, since(&t_start));
			fflush(stdout);
		}
	}
	return wait_until(all_done_cb, NULL, "the last completions");
}

/* ---------------------------------------------------------------- main */

static void usage(void)
{
	fprintf(stderr,
		"usage: rc_integrity DEV_A GID_A DEV_B GID_B [--qps N] [--ops N] [--max-size BYTES]\n"
		"                    [--seed N] [--timeout SECONDS] [--window N] [--sges N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int i, failed = 0, ok_run;
	double secs;

	if (argc < 5)
		usage();
	devs[0].name = argv[1];
	devs[0].gid_index = atoi(argv[2]);
	devs[1].name = argv[3];
	devs[1].gid_index = atoi(argv[4]);
	for (i = 5; i < argc; i++) {
		const char *a = argv[i];

		if (i + 1 >= argc)
			usage();
		if (!strcmp(a, "--qps"))
			nqps = atoi(argv[++i]);
		else if (!strcmp(a, "--ops"))
			nops = atol(argv[++i]);
		else if (!strcmp(a, "--max-size"))
			max_size = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(a, "--seed"))
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(a, "--timeout"))
			timeout_s = atoi(argv[++i]);
		else if (!strcmp(a, "--window"))
			window = atoi(argv[++i]);
		else if (!strcmp(a, "--sges"))
			nsges = atoi(argv[++i]);
		else
			usage();
	}
	if (nqps < 1 || nqps > MAX_QPS || nops < 0 || max_size < 16 || max_size > (1u << 30) || timeout_s < 1 ||
	    window < 1 || window > MAX_WINDOW || nsges < 1 || nsges > MAX_SGES)
		usage();
	rng_state = seed;
	setvbuf(stdout, NULL, _IOLBF, 0);

	open_dev(&devs[0]);
	if (!strcmp(devs[0].name, devs[1].name)) {
		devs[1].ctx = devs[0].ctx;
		devs[1].pd = devs[0].pd;
		devs[1].attr = devs[0].attr;
		devs[1].port = devs[0].port;
		if (ibv_query_gid(devs[1].ctx, 1, devs[1].gid_index, &devs[1].gid))
			die("ibv_query_gid");
	} else {
		open_dev(&devs[1]);
	}
	neps = 2 * nqps;
	for (i = 0; i < neps; i++) {
		eps[i].d = &devs[i & 1];
		eps[i].pair = i / 2;
		eps[i].side = i & 1;
		eps[i].peer = &eps[i ^ 1];
		make_ep(&eps[i]);
	}
	for (i = 0; i < neps; i++)
		eps[i].remote_counter = *counter_of(eps[i].peer);
	for (i = 0; i < neps; i++)
		connect_ep(&eps[i]);
	for (i = 0; i < neps; i++)
		while (eps[i].recv_posted < RECV_DEPTH)
			post_one_recv(&eps[i]);
	printf("rc_integrity: %s (GID %d, active MTU %d, max_qp_rd_atom %d) <-> %s (GID %d, active MTU %d); %d QP "
	       "pairs, %ld operations, sizes 0..%u, window %d, seed %" PRIu64 "\n",
	       devs[0].name, devs[0].gid_index, 128 << devs[0].port.active_mtu, devs[0].attr.max_qp_rd_atom,
	       devs[1].name, devs[1].gid_index, 128 << devs[1].port.active_mtu, nqps, nops, max_size, window, seed);
	printf("ok - setup: %d RC QP pairs between %s and %s in RTS\n", nqps, devs[0].name, devs[1].name);

	ok_run = run_workload();
	secs = since(&t_start);

	/* final counters: every atomic applied exactly once */
	for (i = 0; i < neps && ok_run; i++) {
		uint64_t v = *counter_of(eps[i].peer);

		prop_count[P_ATOMIC]++;
		if (v != eps[i].remote_counter)
			fail(P_ATOMIC, "%s: the counter at the responder is 0x%016" PRIx64 ", expected 0x%016" PRIx64,
			     ep_name(&eps[i]), v, eps[i].remote_counter);
	}
	/* nothing more may complete */
	if (ok_run) {
		struct timespec t0;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (since(&t0) < 0.5)
			if (!poll_all())
				usleep(1000);
	}
	prop_count[P_NO_EXTRA] = n_send_cqe + n_recv_cqe;
	for (i = 0; i < neps; i++) {
		enum ibv_qp_state s = qp_state(&eps[i]);

		prop_count[P_QP_STATE]++;
		if (s != IBV_QPS_RTS)
			fail(P_QP_STATE, "%s: QP state %s", ep_name(&eps[i]), qp_state_name(s));
	}

	printf("summary: %.1f s, %.1f MB in %" PRIu64 " send and %" PRIu64 " receive completions (%.2f MB/s)\n", secs,
	       total_bytes / 1e6, n_send_cqe, n_recv_cqe, secs > 0 ? total_bytes / 1e6 / secs : 0.0);
	for (i = 0; i < OP_NTYPES; i++)
		printf("  %-20s %6" PRIu64 " operations, %10" PRIu64 " bytes\n", op_name[i], stat_ops[i], stat_bytes[i]);

	if (!ok_run)
		printf("not ok - all %ld operations completed (stopped: %s)\n", nops,
		       aborted ? "error completion or post failure" : "timeout");
	else
		printf("ok - all %ld operations completed\n", nops);
	failed += !ok_run;
	for (i = 0; i < P_NPROPS; i++) {
		if (prop_fail[i]) {
			printf("not ok - %s (%ld of %ld checks failed)\n", prop_name[i], prop_fail[i], prop_count[i]);
			failed++;
		} else {
			printf("ok - %s (%ld checks)\n", prop_name[i], prop_count[i]);
		}
	}

	/* teardown */
	{
		int bad = 0;

		for (i = 0; i < neps; i++) {
			bad |= ibv_destroy_qp(eps[i].qp) != 0;
			bad |= ibv_destroy_cq(eps[i].scq) != 0;
			bad |= ibv_destroy_cq(eps[i].rcq) != 0;
			bad |= ibv_dereg_mr(eps[i].mr) != 0;
			free(eps[i].buf);
		}
		bad |= ibv_dealloc_pd(devs[0].pd) != 0;
		if (devs[1].pd != devs[0].pd)
			bad |= ibv_dealloc_pd(devs[1].pd) != 0;
		bad |= ibv_close_device(devs[0].ctx) != 0;
		if (devs[1].ctx != devs[0].ctx)
			bad |= ibv_close_device(devs[1].ctx) != 0;
		printf("%s - teardown: QPs, CQs, MRs, PDs destroyed\n", bad ? "not ok" : "ok");
		failed += bad;
	}
	printf("rc_integrity: %s\n", failed ? "FAILED" : "passed");
	return failed ? 1 : 0;
}
