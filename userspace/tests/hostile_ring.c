// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * hostile_ring: a process that scribbles over its own ferroce rings.
 *
 *   hostile_ring DEV GID_INDEX [--seed N] [--seconds S]
 *
 * The provider maps every CQ, SQ and RQ of the process (ferroce-abi.h,
 * ABI v2). This program creates RC QP pairs (and one UD QP) on DEV, connected
 * to each other over the device's own address (GID_INDEX), runs traffic on
 * them (RDMA WRITEs and SENDs both ways), and then attacks one victim QP per
 * kind of damage by writing into its mappings directly, found through
 * /proc/self/maps (the mappings of /dev/infiniband/uverbs* that appeared
 * when the object was created):
 *
 *   sq-prod-ahead    SQ prod = cons + 2 * entries + 7 (the kernel may retire
 *                    up to `entries` more requests between the read of cons
 *                    and its own look: the claim stays impossible)
 *   sq-prod-huge     SQ prod = 0xfffffff0
 *   sq-bad-opcode    a WQE with opcode 0xdead, published
 *   sq-num-sge       a WQE with num_sge 200, published
 *   sq-inline-len    an inline WQE with inline_len 5000, published
 *   sq-bad-lkey      an RDMA WRITE whose SGE has a bogus lkey, published
 *   ud-bad-ah        (UD QP) a SEND naming AH handle 0xffff, published
 *   rq-prod-ahead    RQ prod = cons + 2 * entries + 5; the peer then sends
 *   rq-num-sge       an RQ WQE with num_sge 200, published; the peer sends
 *   cq-cons-ahead    the CQ's cons = prod + 100000 (the QP is not required
 *                    to fail: the damage is to the CQ, which raises one
 *                    IBV_EVENT_CQ_ERR)
 *   chaos            random bytes at random places of the SQ, RQ and CQ
 *                    rings while traffic runs, then a garbage SQ prod
 *
 * With --chain N (issue 17, finding 3) it does something else: N RC QPs
 * X0..XN-1 on the device's own address, each connected to the next
 * (dest_qp_num(Xi) = qpn(Xi+1), the last to X0), one zero-length SEND
 * written into every SQ ring with no doorbell, then one doorbell on X0.
 * If each delivery were taken, it would give the receiving QP work, and a
 * kernel that runs the receiver's send side nested inside the sender's
 * would recurse N deep (ferroce before issue 17 hit the kernel stack's
 * guard page at N = 256). Today the chain breaks at its first link: X1
 * takes no packet from X0, which is not its dest_qp_num (the direct path
 * knows the sending QP), and the send sides never nest anyway. Checks that
 * the kernel survives, that no QP receives anything (no packet of a QP
 * other than its peer is taken) and that X0's SEND completes, never
 * acknowledged (IBV_WC_RETRY_EXC_ERR after its short timeout).
 *
 * After an attack the program rings the QP's doorbell itself (an empty
 * post_send and post_recv written to the uverbs file, as any process may),
 * keeps posting and polling for a while, and queries every QP. Every loop
 * is bounded by time. All random choices come from --seed.
 *
 * Prints one line per victim and exits 0 when the process got through all of
 * it and every victim that must fail is in IBV_QPS_ERR, 1 otherwise.
 */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/rdma/ferroce-abi.h"
#include "testlib.h"

#define MAX_MAPS 256
#define WINDOW 8	/* sends outstanding per QP */
#define RECV_DEPTH 32	/* receives kept posted per QP */
#define MSG 64		/* SEND size */
#define WRITE_SIZE 4096 /* RDMA WRITE size */
#define AREA 65536	/* buffer bytes per QP */
#define RECV_BIT (1ull << 63)
#define QKEY 0x11111111u

enum kind {
	K_SQ_PROD_AHEAD, K_SQ_PROD_HUGE, K_SQ_BAD_OPCODE, K_SQ_NUM_SGE, K_SQ_INLINE_LEN, K_SQ_BAD_LKEY,
	K_UD_BAD_AH, K_RQ_PROD_AHEAD, K_RQ_NUM_SGE, K_CQ_CONS_AHEAD, K_CHAOS, K_NKINDS,
};
static const char *const kind_name[K_NKINDS] = {
	"sq-prod-ahead", "sq-prod-huge", "sq-bad-opcode", "sq-num-sge", "sq-inline-len", "sq-bad-lkey",
	"ud-bad-ah", "rq-prod-ahead", "rq-num-sge", "cq-cons-ahead", "chaos",
};

static uint64_t rng_state;
static uint64_t rnd(void)
{
	return tl_next(&rng_state);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "hostile_ring: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* ---------------------------------------------------------------- mappings */

struct map {
	uintptr_t start, end;
};

/* The process's mappings of the uverbs device file. */
static int uverbs_maps(struct map *m, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		die("/proc/self/maps");
	while (fgets(line, sizeof(line), f) && n < max) {
		unsigned long s, e;

		if (!strstr(line, "/dev/infiniband/uverbs"))
			continue;
		if (sscanf(line, "%lx-%lx", &s, &e) == 2)
			m[n++] = (struct map){ s, e };
	}
	fclose(f);
	return n;
}

/* The mappings in `after` that are not in `before`. */
static int new_maps(const struct map *before, int nb, const struct map *after, int na, struct map *out, int max)
{
	int i, j, n = 0;

	for (i = 0; i < na; i++) {
		int seen = 0;

		for (j = 0; j < nb; j++)
			seen |= before[j].start == after[i].start;
		if (!seen && n < max)
			out[n++] = after[i];
	}
	return n;
}

/* One ring: its mapping and geometry. */
struct ring {
	volatile uint8_t *base;
	size_t len;
	uint32_t entries;
	size_t slot;
};

static struct ferroce_ring_hdr *hdr(struct ring *r)
{
	return (struct ferroce_ring_hdr *)r->base;
}

static void *slot_at(struct ring *r, uint32_t idx)
{
	return (void *)(r->base + FERROCE_RING_HDR_SIZE + (size_t)(idx & (r->entries - 1)) * r->slot);
}

/* The geometry of a mapping holding slots of `slot` bytes: the largest
 * power of two that fits (the kernel maps whole pages). */
static void ring_of(struct ring *r, const struct map *m, size_t slot)
{
	size_t len = m->end - m->start;
	uint32_t e = 1;

	while (FERROCE_RING_HDR_SIZE + (size_t)e * 2 * slot <= len)
		e *= 2;
	r->base = (volatile uint8_t *)m->start;
	r->len = len;
	r->entries = e;
	r->slot = slot;
}

static uint32_t load32(volatile uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store32(volatile uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- objects */

struct qp {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ring sq, rq, cqr;
	int has_rings;
	uint8_t *buf; /* AREA bytes: [0, 16K) send, [16K, 32K) receive, [32K, 64K) RDMA target */
	int outstanding;
	int recvs;
	long posted, post_errors, completions, error_completions;
};

struct pair {
	enum kind kind;
	struct qp a, b; /* a is the victim; b its peer (unused for UD) */
	int ud;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *mem;
static size_t mem_len;
static int gid_index;
static union ibv_gid gid;
static struct ibv_port_attr port;
static struct ibv_ah *ud_ah;

static void make_qp(struct qp *q, int ud, uint8_t *buf)
{
	struct map before[MAX_MAPS], after[MAX_MAPS], fresh[4];
	int nb, na, nf;
	struct ibv_qp_init_attr ia = {
		.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
	};

	q->buf = buf;
	nb = uverbs_maps(before, MAX_MAPS);
	q->cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!q->cq)
		die("ibv_create_cq");
	na = uverbs_maps(after, MAX_MAPS);
	nf = new_maps(before, nb, after, na, fresh, 4);
	if (nf == 1)
		ring_of(&q->cqr, &fresh[0], FERROCE_CQE_SIZE);
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	nb = uverbs_maps(before, MAX_MAPS);
	q->qp = ibv_create_qp(pd, &ia);
	if (!q->qp)
		die("ibv_create_qp");
	na = uverbs_maps(after, MAX_MAPS);
	nf = new_maps(before, nb, after, na, fresh, 4);
	/* Which is which is settled once receives are posted (see rings_by_prod). */
	if (nf == 2 && q->cqr.base) {
		ring_of(&q->sq, &fresh[0], FERROCE_SQ_WQE_SIZE);
		ring_of(&q->rq, &fresh[1], FERROCE_RQ_WQE_SIZE);
		q->has_rings = 1;
	}
}

/* After receives were posted (and no sends): the RQ is the mapping whose
 * prod is not 0. */
static void rings_by_prod(struct qp *q)
{
	struct map s, r;

	if (!q->has_rings)
		return;
	if (load32(&hdr(&q->sq)->prod) != 0 && load32(&hdr(&q->rq)->prod) == 0) {
		s = (struct map){ (uintptr_t)q->rq.base, (uintptr_t)q->rq.base + q->rq.len };
		r = (struct map){ (uintptr_t)q->sq.base, (uintptr_t)q->sq.base + q->sq.len };
		ring_of(&q->sq, &s, FERROCE_SQ_WQE_SIZE);
		ring_of(&q->rq, &r, FERROCE_RQ_WQE_SIZE);
	}
	/* the granted depths are exact; the mapping may be longer */
	if (q->qp->qp_type == IBV_QPT_RC || q->qp->qp_type == IBV_QPT_UD) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		if (!ibv_query_qp(q->qp, &a, IBV_QP_CAP, &ia)) {
			if (a.cap.max_send_wr && (a.cap.max_send_wr & (a.cap.max_send_wr - 1)) == 0 &&
			    a.cap.max_send_wr <= q->sq.entries)
				q->sq.entries = a.cap.max_send_wr;
			if (a.cap.max_recv_wr && (a.cap.max_recv_wr & (a.cap.max_recv_wr - 1)) == 0 &&
			    a.cap.max_recv_wr <= q->rq.entries)
				q->rq.entries = a.cap.max_recv_wr;
		}
	}
}

static void post_recv(struct qp *q)
{
	struct ibv_sge sge = { .addr = (uintptr_t)q->buf + 16384 + (q->recvs % 8) * 1024, .length = 1024,
			       .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_BIT | (uint64_t)q->recvs, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(q->qp, &wr, &bad))
		q->post_errors++;
	else
		q->recvs++;
}

#define RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* Connects QP e to peer QP number dest through the device's own address,
 * PSNs starting at 1, with the given ACK timeout and retry counts. */
static void connect_rc_to(struct qp *e, uint32_t dest, int timeout, int retry)
{
	struct tl_rc_conn c = {
		.access = RC_ACCESS,
		.mtu = port.active_mtu,
		.dest_qpn = dest,
		.rq_psn = 1,
		.sq_psn = 1,
		.dgid = gid,
		.sgid_index = gid_index,
		.max_dest_rd_atomic = 1,
		.max_rd_atomic = 1,
		.timeout = timeout,
		.retry_cnt = retry,
		.rnr_retry = retry,
	};
	const char *failed = tl_rc_connect(e->qp, &c);

	if (failed)
		die(failed);
}

static void connect_rc(struct qp *e, struct qp *p)
{
	connect_rc_to(e, p->qp->qp_num, 10, 3);
}

static void to_init_rc(struct qp *e)
{
	if (tl_rc_init(e->qp, RC_ACCESS))
		die("ibv_modify_qp to INIT");
}

static void connect_ud(struct qp *e)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("ibv_modify_qp (UD) to INIT");
	for (int i = 0; i < 4; i++)
		post_recv(e);
	rings_by_prod(e);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE))
		die("ibv_modify_qp (UD) to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("ibv_modify_qp (UD) to RTS");
}

static const char *state_name(int s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s <= 6 ? n[s] : "UNKNOWN";
}

static int qp_state(struct qp *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(q->qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

/* ---------------------------------------------------------------- traffic */

static void post_sends(struct qp *q, struct qp *peer, int ud)
{
	while (q->outstanding < WINDOW) {
		struct ibv_sge sge = { .addr = (uintptr_t)q->buf, .length = MSG, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)q->posted, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ud) {
			wr.opcode = IBV_WR_SEND;
			wr.wr.ud.ah = ud_ah;
			wr.wr.ud.remote_qpn = q->qp->qp_num;
			wr.wr.ud.remote_qkey = QKEY;
		} else if (q->posted % 2 == 0 && peer) {
			wr.opcode = IBV_WR_RDMA_WRITE;
			sge.length = WRITE_SIZE;
			wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + 32768 + (q->posted % 4) * WRITE_SIZE;
			wr.wr.rdma.rkey = mr->rkey;
		} else {
			wr.opcode = q->posted % 4 == 1 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
			wr.imm_data = htobe32((uint32_t)q->posted);
			if (q->posted % 3 == 0)
				wr.send_flags = IBV_SEND_INLINE;
		}
		if (ibv_post_send(q->qp, &wr, &bad)) {
			q->post_errors++;
			return;
		}
		q->posted++;
		q->outstanding++;
	}
}

static void poll_qp(struct qp *q, int repost)
{
	struct ibv_wc wc[16];
	int n, i;

	n = ibv_poll_cq(q->cq, 16, wc);
	for (i = 0; i < n; i++) {
		q->completions++;
		if (wc[i].status != IBV_WC_SUCCESS)
			q->error_completions++;
		if (wc[i].wr_id & RECV_BIT) {
			if (repost && wc[i].status == IBV_WC_SUCCESS)
				post_recv(q);
		} else if (q->outstanding > 0) {
			q->outstanding--;
		}
	}
}

/* Runs traffic on a pair for `seconds`: `a_posts` says whether the victim
 * posts (sends and receives) itself. */
static void traffic(struct pair *p, double seconds, int a_posts, int chaos)
{
	double end = now() + seconds;

	while (now() < end) {
		if (a_posts)
			post_sends(&p->a, p->ud ? NULL : &p->b, p->ud);
		poll_qp(&p->a, a_posts);
		if (!p->ud) {
			post_sends(&p->b, &p->a, 0);
			poll_qp(&p->b, 1);
		}
		if (chaos && (rnd() % 16) == 0) {
			struct ring *r[3] = { &p->a.sq, &p->a.rq, &p->a.cqr };
			struct ring *t = r[rnd() % 3];
			size_t off = rnd() % t->len, len = 1 + rnd() % 64;

			if (off + len > t->len)
				len = t->len - off;
			for (size_t i = 0; i < len; i++)
				t->base[off + i] = (uint8_t)rnd();
		}
	}
}

/* An empty post_send and post_recv for the QP, written to the uverbs file:
 * the doorbell, rung by the process itself. */
static void doorbell(struct qp *q)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		union {
			struct ib_uverbs_post_send s;
			struct ib_uverbs_post_recv r;
		};
	} cmd;
	uint32_t resp = 0;
	ssize_t n;

	memset(&cmd, 0, sizeof(cmd));
	cmd.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	cmd.hdr.in_words = (sizeof(cmd.hdr) + sizeof(cmd.s)) / 4;
	cmd.hdr.out_words = sizeof(resp) / 4;
	cmd.s.response = (uintptr_t)&resp;
	cmd.s.qp_handle = q->qp->handle;
	cmd.s.wqe_size = sizeof(struct ib_uverbs_send_wr);
	n = write(ctx->cmd_fd, &cmd, sizeof(cmd.hdr) + sizeof(cmd.s));
	if (n < 0)
		printf("  (send doorbell: %s)\n", strerror(errno));
	memset(&cmd, 0, sizeof(cmd));
	cmd.hdr.command = IB_USER_VERBS_CMD_POST_RECV;
	cmd.hdr.in_words = (sizeof(cmd.hdr) + sizeof(cmd.r)) / 4;
	cmd.hdr.out_words = sizeof(resp) / 4;
	cmd.r.response = (uintptr_t)&resp;
	cmd.r.qp_handle = q->qp->handle;
	cmd.r.wqe_size = sizeof(struct ib_uverbs_recv_wr);
	n = write(ctx->cmd_fd, &cmd, sizeof(cmd.hdr) + sizeof(cmd.r));
	if (n < 0)
		printf("  (receive doorbell: %s)\n", strerror(errno));
}

/* A WQE written at the SQ's next slot and published behind the provider's
 * back. */
static void publish_sq(struct qp *q, const struct ferroce_sq_wqe *w)
{
	uint32_t prod = load32(&hdr(&q->sq)->prod);

	memcpy(slot_at(&q->sq, prod), w, sizeof(*w));
	store32(&hdr(&q->sq)->prod, prod + 1);
}

static void attack(struct pair *p)
{
	struct qp *q = &p->a;
	struct ferroce_ring_hdr *sq = hdr(&q->sq), *rq = hdr(&q->rq), *cq = hdr(&q->cqr);
	struct ferroce_sq_wqe w;
	struct ferroce_rq_wqe rw;

	memset(&w, 0, sizeof(w));
	memset(&rw, 0, sizeof(rw));
	w.wr_id = 0xbad0000 + p->kind;
	w.send_flags = IBV_SEND_SIGNALED;
	switch (p->kind) {
	case K_SQ_PROD_AHEAD:
		store32(&sq->prod, load32(&sq->cons) + 2 * q->sq.entries + 7);
		break;
	case K_SQ_PROD_HUGE:
		store32(&sq->prod, 0xfffffff0u);
		break;
	case K_SQ_BAD_OPCODE:
		w.opcode = 0xdead;
		publish_sq(q, &w);
		break;
	case K_SQ_NUM_SGE:
		w.opcode = IBV_WR_SEND;
		w.num_sge = 200;
		publish_sq(q, &w);
		break;
	case K_SQ_INLINE_LEN:
		w.opcode = IBV_WR_SEND;
		w.send_flags |= IBV_SEND_INLINE;
		w.inline_len = 5000;
		publish_sq(q, &w);
		break;
	case K_SQ_BAD_LKEY:
		w.opcode = IBV_WR_RDMA_WRITE;
		w.num_sge = 1;
		w.sge[0].addr = (uintptr_t)q->buf;
		w.sge[0].length = 512;
		w.sge[0].lkey = 0xdeadbeef;
		w.remote_addr = (uintptr_t)p->b.buf + 32768;
		w.rkey = mr->rkey;
		publish_sq(q, &w);
		break;
	case K_UD_BAD_AH:
		w.opcode = IBV_WR_SEND;
		w.ah = 0xffff;
		w.remote_qpn = q->qp->qp_num;
		w.remote_qkey = QKEY;
		publish_sq(q, &w);
		break;
	case K_RQ_PROD_AHEAD:
		store32(&rq->prod, load32(&rq->cons) + 2 * q->rq.entries + 5);
		break;
	case K_RQ_NUM_SGE: {
		uint32_t prod = load32(&rq->prod);

		rw.wr_id = RECV_BIT | 0xbad;
		rw.num_sge = 200;
		memcpy(slot_at(&q->rq, prod), &rw, sizeof(rw));
		store32(&rq->prod, prod + 1);
		break;
	}
	case K_CQ_CONS_AHEAD:
		store32(&cq->cons, load32(&cq->prod) + 100000);
		break;
	case K_CHAOS:
		traffic(p, 1.0, 1, 1);
		store32(&sq->prod, (uint32_t)rnd() | 0x80000000u);
		break;
	default:
		break;
	}
}

static int must_fail(enum kind k)
{
	return k != K_CQ_CONS_AHEAD;
}

/* --chain N: see the top of the file. Returns the number of failures. */
static int chain(int n)
{
	struct qp *q = calloc(n, sizeof(*q));
	int sends = 0, sends_ok = 0, recvs = 0, bad = 0, i;
	double end;

	if (!q)
		die("calloc");
	for (i = 0; i < n; i++) {
		make_qp(&q[i], 0, mem + (size_t)i * AREA);
		if (!q[i].has_rings) {
			printf("hostile_ring: cannot find the rings of QP %u\n", q[i].qp->qp_num);
			return 1;
		}
		to_init_rc(&q[i]);
		post_recv(&q[i]);
		rings_by_prod(&q[i]);
	}
	/* ACK timeout 0.5 s, one retry: X0's SEND ends soon */
	for (i = 0; i < n; i++)
		connect_rc_to(&q[i], q[(i + 1) % n].qp->qp_num, 17, 1);
	/* Behind the provider's back: no doorbell. */
	for (i = 0; i < n; i++) {
		struct ferroce_sq_wqe w;

		memset(&w, 0, sizeof(w));
		w.wr_id = (uint64_t)i;
		w.opcode = IBV_WR_SEND;
		w.send_flags = IBV_SEND_SIGNALED;
		publish_sq(&q[i], &w);
	}
	printf("hostile_ring: chain of %d RC QPs (QPN %u..%u), one SEND in every ring, one doorbell\n", n,
	       q[0].qp->qp_num, q[n - 1].qp->qp_num);
	doorbell(&q[0]);
	end = now() + 60;
	while (sends < 1 && now() < end) {
		for (i = 0; i < n; i++) {
			struct ibv_wc wc[4];
			int k = ibv_poll_cq(q[i].cq, 4, wc);

			for (int j = 0; j < k; j++) {
				if (!(wc[j].wr_id & RECV_BIT)) {
					sends++;
					sends_ok += wc[j].status == IBV_WC_SUCCESS;
				} else if (wc[j].status == IBV_WC_SUCCESS) {
					recvs++;
				} else if (bad++ < 5) {
					printf("  QP %u: receive completion %s\n", q[i].qp->qp_num,
					       ibv_wc_status_str(wc[j].status));
				}
			}
		}
	}
	usleep(200000); /* anything a QP might still take */
	for (i = 0; i < n; i++) {
		struct ibv_wc wc[4];
		int k = ibv_poll_cq(q[i].cq, 4, wc);

		for (int j = 0; j < k; j++)
			if ((wc[j].wr_id & RECV_BIT) && wc[j].status == IBV_WC_SUCCESS)
				recvs++;
	}
	printf("hostile_ring: chain: %d SEND completed (%d acknowledged), %d receives taken, %d receives flushed\n",
	       sends, sends_ok, recvs, bad);
	for (i = 0; i < n; i++) {
		ibv_destroy_qp(q[i].qp);
		ibv_destroy_cq(q[i].cq);
	}
	free(q);
	return sends == 1 && sends_ok == 0 && recvs == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct pair pairs[K_NKINDS];
	double seconds = 1.5;
	uint64_t seed = 1;
	int i, n, failed = 0, chain_len = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: hostile_ring DEV GID_INDEX [--seed N] [--seconds S]\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	for (i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--chain"))
			chain_len = atoi(argv[i + 1]);
	}
	rng_state = tl_seed(seed);
	setvbuf(stdout, NULL, _IOLBF, 0);

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx) {
		errno = ENODEV;
		die(argv[1]);
	}
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_port/gid");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	mem_len = (size_t)(chain_len > 2 * K_NKINDS ? chain_len : 2 * K_NKINDS) * AREA;
	if (posix_memalign((void **)&mem, 4096, mem_len))
		die("posix_memalign");
	memset(mem, 0x5a, mem_len);
	mr = ibv_reg_mr(pd, mem, mem_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		die("ibv_reg_mr");
	{
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };

		aa.grh.dgid = gid;
		aa.grh.sgid_index = gid_index;
		aa.grh.hop_limit = 64;
		ud_ah = ibv_create_ah(pd, &aa);
		if (!ud_ah)
			die("ibv_create_ah");
	}

	if (chain_len > 0) {
		failed = chain(chain_len);
		ibv_destroy_ah(ud_ah);
		ibv_dereg_mr(mr);
		ibv_dealloc_pd(pd);
		ibv_close_device(ctx);
		return failed;
	}

	/* Set up every pair before any damage: the attacks run on a device
	 * whose other QPs are busy. */
	for (i = 0; i < K_NKINDS; i++) {
		struct pair *p = &pairs[i];

		memset(p, 0, sizeof(*p));
		p->kind = i;
		p->ud = i == K_UD_BAD_AH;
		make_qp(&p->a, p->ud, mem + (size_t)2 * i * AREA);
		if (!p->a.has_rings) {
			printf("hostile_ring: cannot find the rings of QP %u in /proc/self/maps (is this a ferroce "
			       "device with ABI v2?)\n",
			       p->a.qp->qp_num);
			return 1;
		}
		if (p->ud) {
			connect_ud(&p->a);
			continue;
		}
		make_qp(&p->b, 0, mem + (size_t)(2 * i + 1) * AREA);
		to_init_rc(&p->a);
		to_init_rc(&p->b);
		for (int r = 0; r < RECV_DEPTH; r++) {
			post_recv(&p->a);
			post_recv(&p->b);
		}
		rings_by_prod(&p->a);
		connect_rc(&p->a, &p->b);
		connect_rc(&p->b, &p->a);
	}
	printf("hostile_ring: %d victims on %s, seed %" PRIu64 "\n", K_NKINDS, argv[1], seed);

	for (i = 0; i < K_NKINDS; i++) {
		struct pair *p = &pairs[i];
		int s;

		traffic(p, 0.3, 1, 0);
		attack(p);
		doorbell(&p->a);
		/* the victim leaves its rings alone for a while (its peer keeps
		 * sending, so the kernel takes receive WQEs), then posts again */
		traffic(p, seconds, 0, 0);
		traffic(p, seconds, 1, 0);
		s = qp_state(&p->a);
		printf("victim %-14s QP %u: %s (sent %ld, %ld post errors, %ld completions, %ld in error)%s\n",
		       kind_name[i], p->a.qp->qp_num, state_name(s), p->a.posted, p->a.post_errors, p->a.completions,
		       p->a.error_completions, must_fail(i) ? "" : " (not required to fail)");
		if (must_fail(i) && s != IBV_QPS_ERR) {
			printf("FAIL: victim %s is not in ERR\n", kind_name[i]);
			failed++;
		}
	}
	/* The CQ whose consumer index went ahead of its producer is in error:
	 * exactly one IBV_EVENT_CQ_ERR for it, none for the CQs no attack
	 * touched (chaos may have hit its own CQ). Every event is taken and
	 * acknowledged (destroy waits for that). */
	{
		int cq_err[K_NKINDS] = { 0 }, other = 0;
		struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;

		while (poll(&pf, 1, 500) == 1 && ibv_get_async_event(ctx, &ev) == 0) {
			if (ev.event_type == IBV_EVENT_CQ_ERR) {
				int k;

				for (k = 0; k < K_NKINDS && pairs[k].a.cq != ev.element.cq && pairs[k].b.cq != ev.element.cq;
				     k++)
					;
				if (k < K_NKINDS)
					cq_err[k]++;
				else
					other++;
			}
			ibv_ack_async_event(&ev);
		}
		printf("CQ error events: cq-cons-ahead %d, chaos %d, other victims %d\n", cq_err[K_CQ_CONS_AHEAD],
		       cq_err[K_CHAOS], other);
		for (i = 0; i < K_NKINDS; i++) {
			int want = i == K_CQ_CONS_AHEAD;

			if (i != K_CHAOS && cq_err[i] != want) {
				printf("FAIL: victim %s: %d IBV_EVENT_CQ_ERR (want %d)\n", kind_name[i], cq_err[i], want);
				failed++;
			}
		}
	}
	for (i = 0; i < K_NKINDS; i++)
		if (!pairs[i].ud)
			printf("peer of %-14s QP %u: %s\n", kind_name[i], pairs[i].b.qp->qp_num,
			       state_name(qp_state(&pairs[i].b)));
	/* Tear down in the ordinary way: the kernel must cope with what is
	 * left in the rings. */
	for (i = 0; i < K_NKINDS; i++) {
		struct qp *qs[2] = { &pairs[i].a, &pairs[i].b };

		for (int j = 0; j < 2; j++) {
			if (!qs[j]->qp)
				continue;
			if (ibv_destroy_qp(qs[j]->qp))
				printf("ibv_destroy_qp: %s\n", strerror(errno));
			if (ibv_destroy_cq(qs[j]->cq))
				printf("ibv_destroy_cq: %s\n", strerror(errno));
		}
	}
	ibv_destroy_ah(ud_ah);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("hostile_ring: the process survived; %s\n",
	       failed ? "some victims are not in ERR" : "every damaged QP is in ERR");
	return failed ? 1 : 0;
}
