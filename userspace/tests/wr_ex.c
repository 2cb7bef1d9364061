// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * wr_ex: the extended verbs API on one device: QPs made by ibv_create_qp_ex
 * with send_ops_flags and posted with the ibv_wr_* calls, CQs made by
 * ibv_create_cq_ex and read with ibv_start_poll/ibv_next_poll and the
 * ibv_wc_read_* getters (and with ibv_poll_cq).
 *
 *   wr_ex DEVICE GID_INDEX
 *
 * RC: every ibv_wr_* operation the provider offers (send, send with
 * immediate, RDMA write, write with immediate, read, compare and swap,
 * fetch and add, send with invalidate), each setter, a batch of several
 * requests, the wr_flags (signaled, inline, fence), wr_abort, and the
 * errors of bad input. UC: send, send with immediate, RDMA write, write
 * with immediate (inline), and the refusal of what UC has no opcode for.
 * UD: send and send with immediate with ibv_wr_set_ud_addr. Data bytes and every completion field are checked.
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include "testlib.h"

static struct ibv_context *ctx;
static struct ibv_device_attr dattr;
static struct ibv_port_attr port;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *buf;
static union ibv_gid gid;
static int gid_index;

#define BUF_SIZE (1 << 20)
/* Regions of buf: A's source, A's sink, B's receive area, B's RDMA target */
#define A_SRC 0
#define A_DST 65536
#define B_RECV 131072
#define B_RDMA 262144
#define B_ATOMIC 393216
#define UD_RECV 524288

#define RC_OPS                                                                                                   \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |                     \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |             \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |       \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_ATOMIC_WRITE)
#define UC_OPS                                                                                                   \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |                        \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV)
#define ALL_WC_FLAGS                                                                                             \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |          \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static void die(const char *what)
{
	fprintf(stderr, "wr_ex: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion of an ibv_cq (ibv_poll_cq); 0, or -1 after `secs` with none. */
static int poll_plain(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now() + secs;

	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			return -1;
		if (n == 1)
			return 0;
	} while (now() < end);
	return -1;
}

/* One completion of an ibv_cq_ex through the extended poll, every field
 * read with its getter into an ibv_wc; 0, or -1 after `secs` with none. */
static int poll_ex(struct ibv_cq_ex *cq, struct ibv_wc *wc, double secs)
{
	struct ibv_poll_cq_attr attr = { 0 };
	double end = now() + secs;
	int ret;

	do {
		ret = ibv_start_poll(cq, &attr);
		if (ret == 0)
			break;
		if (ret != ENOENT)
			return -1;
	} while (now() < end);
	if (ret)
		return -1;
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cq->wr_id;
	wc->status = cq->status;
	wc->opcode = ibv_wc_read_opcode(cq);
	wc->vendor_err = ibv_wc_read_vendor_err(cq);
	wc->wc_flags = ibv_wc_read_wc_flags(cq);
	wc->byte_len = ibv_wc_read_byte_len(cq);
	wc->imm_data = ibv_wc_read_imm_data(cq);
	wc->qp_num = ibv_wc_read_qp_num(cq);
	wc->src_qp = ibv_wc_read_src_qp(cq);
	wc->slid = ibv_wc_read_slid(cq);
	wc->sl = ibv_wc_read_sl(cq);
	wc->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
	ibv_end_poll(cq);
	return 0;
}

/* Whether a CQ stays empty for `secs` (what was discarded never arrives). */
static int stays_empty(struct ibv_cq *cq, double secs)
{
	struct ibv_wc wc;

	return poll_plain(cq, &wc, secs) != 0;
}

static struct ibv_cq_ex *make_cq_ex(uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a = { .cqe = 256, .wc_flags = wc_flags };

	return ibv_create_cq_ex(ctx, &a);
}

static struct ibv_qp *make_qp_ex(enum ibv_qp_type type, struct ibv_cq *scq, struct ibv_cq *rcq, uint64_t ops,
				 int sig_all, int max_send_wr)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = type,
		.send_cq = scq,
		.recv_cq = rcq,
		.sq_sig_all = sig_all,
		.cap = { .max_send_wr = max_send_wr, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = ops,
	};

	return ibv_create_qp_ex(ctx, &a);
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static void fill(size_t off, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[off + i] = (uint8_t)(seed + i * 7);
}

static int same(size_t a, size_t b, size_t len)
{
	return !memcmp(buf + a, buf + b, len);
}

static void connect_rc(struct ibv_qp *qp, struct ibv_qp *peer)
{
	/* With the FLUSH rights, as rdma-core's pyverbs asks for them on every
	 * RC QP (rc_placement's FLUSH needs the global one). */
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
	const char *failed = tl_rc_connect_local(qp, peer->qp_num, access, port.active_mtu, &gid, gid_index, 0x200, 4);

	if (failed)
		die(failed);
}

/* ---------------------------------------------------------------- refusals */

static void creation_refusals(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq_init_attr_ex ca = { .cqe = 16 };
	struct ibv_qp *qp;
	struct ibv_cq_ex *cqx;
	static const struct {
		const char *name;
		uint64_t flags;
	} bad_wc[] = {
		{ "COMPLETION_TIMESTAMP", IBV_WC_EX_WITH_COMPLETION_TIMESTAMP },
		{ "COMPLETION_TIMESTAMP_WALLCLOCK", IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK },
		{ "CVLAN", IBV_WC_EX_WITH_CVLAN },
		{ "FLOW_TAG", IBV_WC_EX_WITH_FLOW_TAG },
		{ "TM_INFO", IBV_WC_EX_WITH_TM_INFO },
	};
	static const struct {
		const char *name;
		enum ibv_qp_type type;
		uint64_t ops;
	} bad_ops[] = {
		{ "UD BIND_MW", IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW },
		{ "UD LOCAL_INV", IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_LOCAL_INV },
		{ "RC TSO", IBV_QPT_RC, IBV_QP_EX_WITH_TSO },
		{ "UC FLUSH", IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_FLUSH },
		{ "UD ATOMIC_WRITE", IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE },
		{ "UD RDMA_WRITE", IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE },
		{ "UD SEND_WITH_INV", IBV_QPT_UD, IBV_QP_EX_WITH_SEND_WITH_INV },
		{ "UD ATOMIC_FETCH_AND_ADD", IBV_QPT_UD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD },
		{ "UC RDMA_READ", IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ },
		{ "UC SEND_WITH_INV", IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV },
		{ "UC ATOMIC_CMP_AND_SWP", IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP },
	};
	char name[160];

	if (!cq)
		die("ibv_create_cq");
	for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
		errno = 0;
		qp = make_qp_ex(bad_ops[i].type, cq, cq, bad_ops[i].ops, 1, 16);
		snprintf(name, sizeof(name), "create_qp_ex: send_ops_flags %s refused with EOPNOTSUPP", bad_ops[i].name);
		CHECK(name, !qp && errno == EOPNOTSUPP, "qp %p errno %d (%s)", (void *)qp, errno, strerror(errno));
		if (qp)
			ibv_destroy_qp(qp);
	}
	qp = make_qp_ex(IBV_QPT_RC, cq, cq, RC_OPS, 1, 16);
	CHECK("create_qp_ex: every RC operation the ring carries", qp != NULL, "errno %d (%s)", errno,
	      strerror(errno));
	CHECK("  ...ibv_qp_to_qp_ex answers its qp_ex", qp && ibv_qp_to_qp_ex(qp) != NULL, "NULL");
	if (qp)
		ibv_destroy_qp(qp);
	{
		struct ibv_qp_init_attr pa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
							.max_recv_sge = 1 } };

		qp = ibv_create_qp(pd, &pa);
		if (!qp)
			die("ibv_create_qp");
		CHECK("ibv_qp_to_qp_ex of a QP without send_ops_flags is NULL", ibv_qp_to_qp_ex(qp) == NULL,
		      "not NULL");
		ibv_destroy_qp(qp);
	}

	for (size_t i = 0; i < sizeof(bad_wc) / sizeof(bad_wc[0]); i++) {
		ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | bad_wc[i].flags;
		errno = 0;
		cqx = ibv_create_cq_ex(ctx, &ca);
		snprintf(name, sizeof(name), "create_cq_ex: wc_flag %s refused with EOPNOTSUPP", bad_wc[i].name);
		CHECK(name, !cqx && errno == EOPNOTSUPP, "cq %p errno %d (%s)", (void *)cqx, errno, strerror(errno));
		if (cqx)
			ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	}
	ca.wc_flags = 0;
	ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK("create_cq_ex: IGNORE_OVERRUN refused with EOPNOTSUPP", !cqx && errno == EOPNOTSUPP, "errno %d",
	      errno);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK("create_cq_ex: SINGLE_THREADED accepted", cqx != NULL, "errno %d (%s)", errno, strerror(errno));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ca.comp_mask = 0;
	ca.flags = 0;
	ca.cqe = dattr.max_cqe + 1;
	errno = 0;
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK("create_cq_ex: more than max_cqe entries is EINVAL", !cqx && errno == EINVAL, "errno %d", errno);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ca.cqe = 16;
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK("create_cq_ex: wc_flags 0 gives a CQ without the optional getters",
	      cqx && !cqx->read_byte_len && !cqx->read_imm_data && !cqx->read_src_qp && cqx->read_opcode &&
		      cqx->read_wc_flags,
	      "cq %p", (void *)cqx);
	if (cqx) {
		struct ibv_poll_cq_attr pa = { 0 };

		CHECK("ibv_start_poll on an empty CQ is ENOENT", ibv_start_poll(cqx, &pa) == ENOENT, "not ENOENT");
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	}
	ibv_destroy_cq(cq);
}

/* ---------------------------------------------------------------- RC */

struct rc {
	struct ibv_cq_ex *acq;	/* A's CQ, extended (read with start_poll) */
	struct ibv_cq *bcq;	/* B's CQ, plain (ibv_poll_cq) */
	struct ibv_qp *a, *b;
	struct ibv_qp_ex *ax;
};

/* A completion on A's extended CQ with this wr_id, status and opcode. */
static void expect_a(struct rc *r, const char *name, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc;
	int got = poll_ex(r->acq, &wc, 10);

	CHECK(name,
	      !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == op &&
		      wc.qp_num == r->a->qp_num && (len == UINT32_MAX || wc.byte_len == len),
	      "got %d status %s wr_id %llu opcode %d qp 0x%x byte_len %u", got, ibv_wc_status_str(wc.status),
	      (unsigned long long)wc.wr_id, wc.opcode, wc.qp_num, wc.byte_len);
}

/* A receive on B's plain CQ. */
static void expect_b(struct rc *r, const char *name, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len,
		     int with_imm, uint32_t imm)
{
	struct ibv_wc wc;
	int got = poll_plain(r->bcq, &wc, 10);

	CHECK(name,
	      !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == op && wc.byte_len == len &&
		      wc.qp_num == r->b->qp_num && wc.src_qp == r->a->qp_num &&
		      !!(wc.wc_flags & IBV_WC_WITH_IMM) == with_imm && (!with_imm || wc.imm_data == htonl(imm)),
	      "got %d status %s wr_id %llu opcode %d byte_len %u qp 0x%x src_qp 0x%x flags 0x%x imm 0x%x", got,
	      ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id, wc.opcode, wc.byte_len, wc.qp_num,
	      wc.src_qp, wc.wc_flags, ntohl(wc.imm_data));
}

static void start(struct rc *r, uint64_t wr_id, unsigned flags)
{
	ibv_wr_start(r->ax);
	r->ax->wr_id = wr_id;
	r->ax->wr_flags = flags;
}

static void rc_ops(struct rc *r)
{
	uint32_t rkey = mr->rkey, lkey = mr->lkey;
	uint64_t rdma = (uintptr_t)buf + B_RDMA, atom = (uintptr_t)buf + B_ATOMIC;
	struct ibv_sge two[2] = {
		{ .addr = (uintptr_t)buf + A_SRC, .length = 100, .lkey = lkey },
		{ .addr = (uintptr_t)buf + A_SRC + 1000, .length = 300, .lkey = lkey },
	};
	uint8_t p1[10], p2[20], p3[30];
	struct ibv_data_buf parts[3] = { { p1, 10 }, { p2, 20 }, { p3, 30 } };
	uint8_t stack[48];
	int ret;

	for (int i = 0; i < 32; i++)
		if (post_recv(r->b, 100 + i, B_RECV + i * 4096, 4096))
			die("ibv_post_recv");

	/* SEND with one SGE */
	fill(A_SRC, 4096, 1);
	start(r, 1, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 3000);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_send + set_sge: wr_complete", ret == 0, "%d (%s)", ret, strerror(ret));
	expect_a(r, "  ...SEND completion (start_poll: wr_id, opcode, qp_num)", 1, IBV_WC_SEND, UINT32_MAX);
	expect_b(r, "  ...B receives 3000 bytes (ibv_poll_cq)", 100, IBV_WC_RECV, 3000, 0, 0);
	CHECK("  ...bytes intact", same(A_SRC, B_RECV, 3000), "differ");

	/* SEND with immediate, two SGEs */
	fill(A_SRC, 4096, 2);
	start(r, 2, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
	ibv_wr_send_imm(r->ax, htonl(0x12345678));
	ibv_wr_set_sge_list(r->ax, 2, two);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_send_imm + set_sge_list (2 SGEs, solicited): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...SEND completion", 2, IBV_WC_SEND, UINT32_MAX);
	expect_b(r, "  ...B receives 400 bytes with the immediate data", 101, IBV_WC_RECV, 400, 1, 0x12345678);
	CHECK("  ...bytes intact, in SGE order",
	      same(A_SRC, B_RECV + 4096, 100) && same(A_SRC + 1000, B_RECV + 4096 + 100, 300), "differ");

	/* RDMA WRITE */
	fill(A_SRC, 8192, 3);
	start(r, 3, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(r->ax, rkey, rdma);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 8192);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_rdma_write (8 KiB): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...RDMA_WRITE completion", 3, IBV_WC_RDMA_WRITE, UINT32_MAX);
	CHECK("  ...bytes at B's address", same(A_SRC, B_RDMA, 8192), "differ");

	/* RDMA WRITE with immediate, inline data */
	for (int i = 0; i < 48; i++)
		stack[i] = (uint8_t)(0xa0 + i);
	start(r, 4, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write_imm(r->ax, rkey, rdma + 100, htonl(0xcafe));
	ibv_wr_set_inline_data(r->ax, stack, 48);
	ret = ibv_wr_complete(r->ax);
	memset(stack, 0, sizeof(stack)); /* copied by the setter */
	CHECK("RC ibv_wr_rdma_write_imm + set_inline_data (48 B): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...RDMA_WRITE completion", 4, IBV_WC_RDMA_WRITE, UINT32_MAX);
	expect_b(r, "  ...B gets RECV_RDMA_WITH_IMM, 48 bytes, the immediate data", 102, IBV_WC_RECV_RDMA_WITH_IMM, 48,
		 1, 0xcafe);
	{
		int ok = 1;

		for (int i = 0; i < 48; i++)
			ok &= buf[B_RDMA + 100 + i] == (uint8_t)(0xa0 + i);
		CHECK("  ...inline bytes at B's address", ok, "differ");
	}

	/* RDMA READ */
	fill(B_RDMA, 16384, 4);
	memset(buf + A_DST, 0, 16384);
	start(r, 5, IBV_SEND_SIGNALED);
	ibv_wr_rdma_read(r->ax, rkey, rdma);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_DST, 16384);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_rdma_read (16 KiB): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...RDMA_READ completion, byte_len 16384", 5, IBV_WC_RDMA_READ, 16384);
	CHECK("  ...bytes read", same(B_RDMA, A_DST, 16384), "differ");

	/* Atomics, the second fenced behind the first */
	*(uint64_t *)(buf + B_ATOMIC) = 5;
	start(r, 6, IBV_SEND_SIGNALED);
	ibv_wr_atomic_cmp_swp(r->ax, rkey, atom, 5, 9);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_DST, 8);
	r->ax->wr_id = 7;
	r->ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	ibv_wr_atomic_fetch_add(r->ax, rkey, atom, 3);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_DST + 8, 8);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_atomic_cmp_swp + ibv_wr_atomic_fetch_add (fenced) in one batch: wr_complete", ret == 0,
	      "%d", ret);
	expect_a(r, "  ...COMP_SWAP completion, byte_len 8", 6, IBV_WC_COMP_SWAP, 8);
	expect_a(r, "  ...FETCH_ADD completion, byte_len 8", 7, IBV_WC_FETCH_ADD, 8);
	CHECK("  ...original values returned (5, then 9) and the target is 12",
	      *(uint64_t *)(buf + A_DST) == 5 && *(uint64_t *)(buf + A_DST + 8) == 9 &&
		      *(uint64_t *)(buf + B_ATOMIC) == 12,
	      "got %llu, %llu, target %llu", (unsigned long long)*(uint64_t *)(buf + A_DST),
	      (unsigned long long)*(uint64_t *)(buf + A_DST + 8), (unsigned long long)*(uint64_t *)(buf + B_ATOMIC));

	/* SEND with an inline list */
	memset(p1, 0x11, sizeof(p1));
	memset(p2, 0x22, sizeof(p2));
	memset(p3, 0x33, sizeof(p3));
	start(r, 8, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_inline_data_list(r->ax, 3, parts);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_send + set_inline_data_list (3 buffers): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...SEND completion", 8, IBV_WC_SEND, UINT32_MAX);
	expect_b(r, "  ...B receives 60 bytes", 103, IBV_WC_RECV, 60, 0, 0);
	CHECK("  ...bytes in buffer order",
	      !memcmp(buf + B_RECV + 3 * 4096, p1, 10) && !memcmp(buf + B_RECV + 3 * 4096 + 10, p2, 20) &&
		      !memcmp(buf + B_RECV + 3 * 4096 + 30, p3, 30),
	      "differ");

	/* IBV_SEND_INLINE in wr_flags with an SGE setter: the bytes travel in
	 * the slot, so an lkey that names no MR does not matter. */
	for (int i = 0; i < 40; i++)
		stack[i] = (uint8_t)(0x40 + i);
	start(r, 9, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, 0xdead00, (uintptr_t)stack, 40);
	ret = ibv_wr_complete(r->ax);
	memset(stack, 0, sizeof(stack));
	CHECK("RC wr_flags IBV_SEND_INLINE with set_sge (unregistered buffer, bad lkey): wr_complete", ret == 0, "%d",
	      ret);
	expect_a(r, "  ...SEND completion (the inline flag honoured)", 9, IBV_WC_SEND, UINT32_MAX);
	expect_b(r, "  ...B receives 40 bytes", 104, IBV_WC_RECV, 40, 0, 0);
	{
		int ok = 1;

		for (int i = 0; i < 40; i++)
			ok &= buf[B_RECV + 4 * 4096 + i] == (uint8_t)(0x40 + i);
		CHECK("  ...bytes as they were at wr_complete", ok, "differ");
	}

	/* A batch of four SENDs, only the last signaled (sq_sig_all is 0):
	 * IBV_SEND_SIGNALED is honoured both ways. Zero length included. */
	fill(A_SRC, 4096, 5);
	ibv_wr_start(r->ax);
	for (int i = 0; i < 4; i++) {
		r->ax->wr_id = 20 + i;
		r->ax->wr_flags = i == 3 ? IBV_SEND_SIGNALED : 0;
		ibv_wr_send(r->ax);
		if (i != 2)
			ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC + i * 100, 100 + i);
	}
	ret = ibv_wr_complete(r->ax);
	CHECK("RC batch of 4 SENDs, the third of 0 bytes, only the last signaled: wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...one completion, the signaled one's", 23, IBV_WC_SEND, UINT32_MAX);
	CHECK("  ...and no other", stays_empty(ibv_cq_ex_to_cq(r->acq), 0.5), "another completion");
	for (int i = 0; i < 4; i++) {
		char name[80];

		snprintf(name, sizeof(name), "  ...B receives message %d in order (%d bytes)", i, i == 2 ? 0 : 100 + i);
		expect_b(r, name, 105 + i, IBV_WC_RECV, i == 2 ? 0 : 100 + i, 0, 0);
	}
	CHECK("  ...bytes of the batch intact",
	      same(A_SRC, B_RECV + 5 * 4096, 100) && same(A_SRC + 100, B_RECV + 6 * 4096, 101) &&
		      same(A_SRC + 300, B_RECV + 8 * 4096, 103),
	      "differ");
}

/* wr_abort and the errors wr_complete reports: nothing of a refused or
 * aborted batch reaches the peer. */
static void rc_discards(struct rc *r, uint32_t max_send_wr)
{
	uint32_t lkey = mr->lkey;
	struct ibv_sge seven[7];
	uint8_t big[513];
	int ret;

	for (int i = 0; i < 7; i++)
		seven[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + A_SRC + i * 8, .length = 8, .lkey = lkey };
	memset(big, 7, sizeof(big));

	start(r, 30, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 64);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 64);
	ibv_wr_abort(r->ax);
	CHECK("RC wr_abort: nothing completes on A", stays_empty(ibv_cq_ex_to_cq(r->acq), 0.5), "a completion");
	CHECK("  ...nothing reaches B", stays_empty(r->bcq, 0.1), "a receive");

	start(r, 31, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_inline_data(r->ax, big, 513);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC inline data longer than 512 bytes: wr_complete is EINVAL", ret == EINVAL, "%d", ret);

	start(r, 32, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge_list(r->ax, 7, seven);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC 7 SGEs (more than max_send_sge): wr_complete is EINVAL", ret == EINVAL, "%d", ret);

	start(r, 33, IBV_SEND_SIGNALED);
	ibv_wr_rdma_read(r->ax, mr->rkey, (uintptr_t)buf + B_RDMA);
	ibv_wr_set_inline_data(r->ax, big, 8);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC inline data on an RDMA READ: wr_complete is EINVAL", ret == EINVAL, "%d", ret);

	start(r, 34, IBV_SEND_SIGNALED);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 8);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC a setter before any builder: wr_complete is EINVAL", ret == EINVAL, "%d", ret);

	/* A good request, then a bad one: the whole batch is refused */
	start(r, 35, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 8);
	ibv_wr_send(r->ax);
	ibv_wr_set_inline_data(r->ax, big, 513);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC a good request then a bad one: wr_complete is EINVAL", ret == EINVAL, "%d", ret);

	/* More requests than the send queue holds */
	ibv_wr_start(r->ax);
	for (uint32_t i = 0; i < 4 * max_send_wr + 8; i++) {
		r->ax->wr_id = 1000 + i;
		r->ax->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(r->ax);
		ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 8);
	}
	ret = ibv_wr_complete(r->ax);
	CHECK("RC a batch larger than the send queue: wr_complete is ENOMEM", ret == ENOMEM, "%d", ret);
	CHECK("  ...none of the refused batches completes on A", stays_empty(ibv_cq_ex_to_cq(r->acq), 0.5),
	      "a completion");
	CHECK("  ...none reaches B", stays_empty(r->bcq, 0.1), "a receive");

	/* The QP still works, and exactly this request arrives */
	fill(A_SRC, 64, 9);
	start(r, 36, IBV_SEND_SIGNALED);
	ibv_wr_send(r->ax);
	ibv_wr_set_sge(r->ax, lkey, (uintptr_t)buf + A_SRC, 64);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC a good batch after the refused ones: wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...its completion", 36, IBV_WC_SEND, UINT32_MAX);
	expect_b(r, "  ...B's next receive is this message (64 bytes)", 109, IBV_WC_RECV, 64, 0, 0);
	CHECK("  ...bytes intact", same(A_SRC, B_RECV + 9 * 4096, 64), "differ");

	/* wr_complete with no wr_start is refused, and legacy post_send still
	 * works on an extended QP */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf + A_SRC, .length = 16, .lkey = lkey };
		struct ibv_send_wr wr = { .wr_id = 37, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		ret = ibv_wr_complete(r->ax);
		CHECK("RC wr_complete without wr_start is EINVAL", ret == EINVAL, "%d", ret);
		ret = ibv_post_send(r->a, &wr, &bad);
		CHECK("RC ibv_post_send on an extended QP", ret == 0, "%d", ret);
		expect_a(r, "  ...its completion", 37, IBV_WC_SEND, UINT32_MAX);
		expect_b(r, "  ...B receives it", 110, IBV_WC_RECV, 16, 0, 0);
	}
}

/* SEND with Invalidate: the ring carries it, but a process's MR cannot be
 * invalidated remotely (only the kernel's fast-registration MRs can), so
 * the peer answers Invalid Request and both QPs go to error. Last. */
/*
 * IBTA 1.5 placement operations through ibv_wr_*: ATOMIC WRITE (8 bytes in
 * one store) and FLUSH for global visibility (a range, and the whole
 * region), each answered by an empty READ response. A region cannot be
 * registered for persistence (ferroce has no persistent memory); a FLUSH
 * for it is a remote access error (the host test and pyverbs check that).
 */
static void rc_placement(struct rc *r)
{
	static const uint8_t word[8] = { 'f', 'e', 'r', 'r', 'o', 'c', 'e', '!' };
	struct ibv_mr *fmr = ibv_reg_mr(pd, buf, BUF_SIZE,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL);
	struct ibv_mr *pmr;
	int ret;

	CHECK("ibv_reg_mr with IBV_ACCESS_FLUSH_GLOBAL", fmr != NULL, "%s", strerror(errno));
	errno = 0;
	pmr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_PERSISTENT);
	CHECK("ibv_reg_mr with IBV_ACCESS_FLUSH_PERSISTENT: EOPNOTSUPP (no persistent memory)",
	      !pmr && errno == EOPNOTSUPP, "mr %p errno %d", (void *)pmr, errno);
	if (pmr)
		ibv_dereg_mr(pmr);
	if (!fmr)
		return;
	memset(buf + B_ATOMIC + 64, 0, 8);
	start(r, 50, IBV_SEND_SIGNALED);
	ibv_wr_atomic_write(r->ax, mr->rkey, (uintptr_t)buf + B_ATOMIC + 64, word);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_atomic_write: wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...ATOMIC_WRITE completion", 50, IBV_WC_ATOMIC_WRITE, UINT32_MAX);
	CHECK("  ...the 8 bytes at B's address", !memcmp(buf + B_ATOMIC + 64, word, 8), "differ");
	start(r, 51, IBV_SEND_SIGNALED);
	ibv_wr_flush(r->ax, fmr->rkey, (uintptr_t)buf + B_RDMA, 8192, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_flush (a range, global visibility): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...FLUSH completion", 51, IBV_WC_FLUSH, UINT32_MAX);
	start(r, 52, IBV_SEND_SIGNALED);
	ibv_wr_flush(r->ax, fmr->rkey, 0, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_flush (the whole region): wr_complete", ret == 0, "%d", ret);
	expect_a(r, "  ...FLUSH completion", 52, IBV_WC_FLUSH, UINT32_MAX);
	start(r, 53, IBV_SEND_SIGNALED);
	ibv_wr_flush(r->ax, fmr->rkey, 0, 0, 0x4, IBV_FLUSH_RANGE);
	ret = ibv_wr_complete(r->ax);
	CHECK("ibv_wr_flush of an unknown placement type: EINVAL, nothing posted",
	      ret == EINVAL && stays_empty(ibv_cq_ex_to_cq(r->acq), 0.3), "%d", ret);
	ibv_dereg_mr(fmr);
}

static void rc_send_inv(struct rc *r)
{
	struct ibv_wc wc;
	int got, ret;

	start(r, 40, IBV_SEND_SIGNALED);
	ibv_wr_send_inv(r->ax, mr->rkey);
	ibv_wr_set_sge(r->ax, mr->lkey, (uintptr_t)buf + A_SRC, 32);
	ret = ibv_wr_complete(r->ax);
	CHECK("RC ibv_wr_send_inv: wr_complete", ret == 0, "%d", ret);
	got = poll_ex(r->acq, &wc, 10);
	CHECK("  ...the peer refuses to invalidate a process's MR: REM_INV_REQ_ERR",
	      !got && wc.wr_id == 40 && wc.status == IBV_WC_REM_INV_REQ_ERR, "got %d wr_id %llu status %s", got,
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	got = poll_plain(r->bcq, &wc, 10);
	CHECK("  ...B's receive completes in error (the IETH arrived)", !got && wc.status != IBV_WC_SUCCESS,
	      "got %d status %s", got, ibv_wc_status_str(wc.status));
}

static void rc(void)
{
	struct rc r;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	r.acq = make_cq_ex(ALL_WC_FLAGS);
	if (!r.acq)
		die("ibv_create_cq_ex");
	r.bcq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!r.bcq)
		die("ibv_create_cq");
	r.a = make_qp_ex(IBV_QPT_RC, ibv_cq_ex_to_cq(r.acq), ibv_cq_ex_to_cq(r.acq), RC_OPS, 0, 16);
	r.b = make_qp_ex(IBV_QPT_RC, r.bcq, r.bcq, IBV_QP_EX_WITH_SEND, 0, 16);
	if (!r.a || !r.b)
		die("ibv_create_qp_ex (RC)");
	r.ax = ibv_qp_to_qp_ex(r.a);
	if (!r.ax)
		die("ibv_qp_to_qp_ex");
	connect_rc(r.a, r.b);
	connect_rc(r.b, r.a);
	if (ibv_query_qp(r.a, &qa, IBV_QP_CAP, &qia))
		die("ibv_query_qp");
	rc_ops(&r);
	rc_placement(&r);
	rc_discards(&r, qa.cap.max_send_wr);
	rc_send_inv(&r);
	ibv_destroy_qp(r.a);
	ibv_destroy_qp(r.b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(r.acq));
	ibv_destroy_cq(r.bcq);
}

/* ---------------------------------------------------------------- UC */

/*
 * A UC QP through ibv_wr_*: SEND (two SGEs), SEND with immediate, RDMA
 * WRITE of several packets, RDMA WRITE with immediate from inline data;
 * then the legacy ibv_post_send refusing what UC has no opcode for.
 */
static void uc(void)
{
	struct rc r;
	uint32_t rkey = mr->rkey, lkey = mr->lkey;
	uint64_t rdma = (uintptr_t)buf + B_RDMA;
	struct ibv_sge two[2] = {
		{ .addr = (uintptr_t)buf + A_SRC, .length = 1000, .lkey = lkey },
		{ .addr = (uintptr_t)buf + A_SRC + 2000, .length = 500, .lkey = lkey },
	};
	uint8_t stack[40];
	int ret;

	r.acq = make_cq_ex(ALL_WC_FLAGS);
	r.bcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!r.acq || !r.bcq)
		die("UC CQs");
	r.a = make_qp_ex(IBV_QPT_UC, ibv_cq_ex_to_cq(r.acq), ibv_cq_ex_to_cq(r.acq), UC_OPS, 0, 16);
	r.b = make_qp_ex(IBV_QPT_UC, r.bcq, r.bcq, IBV_QP_EX_WITH_SEND, 0, 16);
	CHECK("ibv_create_qp_ex: a UC QP with send_ops_flags SEND, SEND_IMM, RDMA_WRITE, RDMA_WRITE_IMM",
	      r.a && r.b, "errno %d (%s)", errno, strerror(errno));
	if (!r.a || !r.b)
		return;
	r.ax = ibv_qp_to_qp_ex(r.a);
	if (!r.ax)
		die("ibv_qp_to_qp_ex (UC)");
	connect_rc(r.a, r.b);
	connect_rc(r.b, r.a);
	for (int i = 0; i < 8; i++)
		if (post_recv(r.b, 200 + i, B_RECV + i * 4096, 4096))
			die("ibv_post_recv (UC)");

	fill(A_SRC, 4096, 11);
	start(&r, 21, IBV_SEND_SIGNALED);
	ibv_wr_send(r.ax);
	ibv_wr_set_sge_list(r.ax, 2, two);
	ret = ibv_wr_complete(r.ax);
	CHECK("UC ibv_wr_send + set_sge_list (2 SGEs, 1500 B): wr_complete", ret == 0, "%d", ret);
	expect_a(&r, "  ...SEND completion", 21, IBV_WC_SEND, UINT32_MAX);
	expect_b(&r, "  ...B receives 1500 bytes", 200, IBV_WC_RECV, 1500, 0, 0);
	CHECK("  ...bytes intact, in SGE order",
	      same(A_SRC, B_RECV, 1000) && same(A_SRC + 2000, B_RECV + 1000, 500), "differ");

	start(&r, 22, IBV_SEND_SIGNALED);
	ibv_wr_send_imm(r.ax, htonl(0xabcd));
	ibv_wr_set_sge(r.ax, lkey, (uintptr_t)buf + A_SRC, 10);
	ret = ibv_wr_complete(r.ax);
	CHECK("UC ibv_wr_send_imm: wr_complete", ret == 0, "%d", ret);
	expect_a(&r, "  ...SEND completion", 22, IBV_WC_SEND, UINT32_MAX);
	expect_b(&r, "  ...B receives 10 bytes with the immediate data", 201, IBV_WC_RECV, 10, 1, 0xabcd);

	fill(A_SRC, 8192, 12);
	start(&r, 23, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(r.ax, rkey, rdma);
	ibv_wr_set_sge(r.ax, lkey, (uintptr_t)buf + A_SRC, 8192);
	ret = ibv_wr_complete(r.ax);
	CHECK("UC ibv_wr_rdma_write (8 KiB): wr_complete", ret == 0, "%d", ret);
	expect_a(&r, "  ...RDMA_WRITE completion", 23, IBV_WC_RDMA_WRITE, UINT32_MAX);

	for (int i = 0; i < 40; i++)
		stack[i] = (uint8_t)(0x50 + i);
	start(&r, 24, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write_imm(r.ax, rkey, rdma + 8192, htonl(0xbeef));
	ibv_wr_set_inline_data(r.ax, stack, 40);
	ret = ibv_wr_complete(r.ax);
	CHECK("UC ibv_wr_rdma_write_imm + set_inline_data (40 B): wr_complete", ret == 0, "%d", ret);
	expect_a(&r, "  ...RDMA_WRITE completion", 24, IBV_WC_RDMA_WRITE, UINT32_MAX);
	expect_b(&r, "  ...B gets RECV_RDMA_WITH_IMM, 40 bytes, the immediate data", 202, IBV_WC_RECV_RDMA_WITH_IMM,
		 40, 1, 0xbeef);
	/* The WRITE with immediate came after the plain WRITE: both landed. */
	{
		int ok = same(A_SRC, B_RDMA, 8192);

		for (int i = 0; i < 40; i++)
			ok &= buf[B_RDMA + 8192 + i] == (uint8_t)(0x50 + i);
		CHECK("  ...both WRITEs' bytes at B's addresses", ok, "differ");
	}

	{
		static const struct {
			const char *name;
			enum ibv_wr_opcode op;
		} bad[] = {
			{ "RDMA_READ", IBV_WR_RDMA_READ },
			{ "ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD },
			{ "SEND_WITH_INV", IBV_WR_SEND_WITH_INV },
		};
		char name[128];

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf + A_DST, .length = 8, .lkey = lkey };
			struct ibv_send_wr wr = { .wr_id = 30 + i, .sg_list = &sge, .num_sge = 1,
						  .opcode = bad[i].op, .send_flags = IBV_SEND_SIGNALED }, *badwr = NULL;

			wr.wr.rdma.remote_addr = rdma;
			wr.wr.rdma.rkey = rkey;
			ret = ibv_post_send(r.a, &wr, &badwr);
			snprintf(name, sizeof(name), "UC ibv_post_send %s refused with EINVAL", bad[i].name);
			CHECK(name, ret == EINVAL && badwr == &wr, "%d (%s)", ret, strerror(ret));
		}
		{
			struct ibv_wc wc;

			CHECK("  ...and nothing was posted", poll_ex(r.acq, &wc, 0.3) != 0, "a completion came");
		}
	}
	ibv_destroy_qp(r.a);
	ibv_destroy_qp(r.b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(r.acq));
	ibv_destroy_cq(r.bcq);
}

/* ---------------------------------------------------------------- UD */

static void ud(void)
{
	const uint32_t qkey = 0x11110000;
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq_ex *rcq = make_cq_ex(ALL_WC_FLAGS);
	struct ibv_qp *s, *d;
	struct ibv_qp_ex *sx;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 64 } };
	struct ibv_ah *ah;
	struct ibv_wc wc;
	uint8_t msg[50];
	uint32_t mtu = 128u << port.active_mtu;
	int got, ret;

	if (!scq || !rcq)
		die("ibv_create_cq(_ex)");
	s = make_qp_ex(IBV_QPT_UD, scq, scq, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 1, 16);
	d = make_qp_ex(IBV_QPT_UD, ibv_cq_ex_to_cq(rcq), ibv_cq_ex_to_cq(rcq), IBV_QP_EX_WITH_SEND, 1, 16);
	CHECK("UD create_qp_ex with SEND and SEND_WITH_IMM", s && d, "errno %d (%s)", errno, strerror(errno));
	if (!s || !d)
		return;
	sx = ibv_qp_to_qp_ex(s);
	if (!sx || tl_ud_rts(s, qkey, 1) || tl_ud_rts(d, qkey, 1))
		die("UD QP setup");
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	for (int i = 0; i < 8; i++)
		if (post_recv(d, 200 + i, UD_RECV + i * 8192, 8192))
			die("ibv_post_recv");

	fill(A_SRC, 4096, 11);
	ibv_wr_start(sx);
	sx->wr_id = 50;
	sx->wr_flags = 0;
	ibv_wr_send(sx);
	ibv_wr_set_ud_addr(sx, ah, d->qp_num, qkey);
	ibv_wr_set_sge(sx, mr->lkey, (uintptr_t)buf + A_SRC, 1000);
	ret = ibv_wr_complete(sx);
	CHECK("UD ibv_wr_send + set_ud_addr + set_sge (1000 B): wr_complete", ret == 0, "%d", ret);
	got = poll_plain(scq, &wc, 10);
	CHECK("  ...SEND completion (ibv_poll_cq)",
	      !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 50 && wc.opcode == IBV_WC_SEND, "got %d %s", got,
	      ibv_wc_status_str(wc.status));
	got = poll_ex(rcq, &wc, 10);
	CHECK("  ...receive (start_poll): RECV, byte_len 40 + 1000, GRH flag, qp_num, src_qp",
	      !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 200 && wc.opcode == IBV_WC_RECV &&
		      wc.byte_len == 1040 && (wc.wc_flags & IBV_WC_GRH) && !(wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.qp_num == d->qp_num && wc.src_qp == s->qp_num,
	      "got %d %s wr_id %llu opcode %d byte_len %u flags 0x%x qp 0x%x src 0x%x", got,
	      ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id, wc.opcode, wc.byte_len, wc.wc_flags,
	      wc.qp_num, wc.src_qp);
	CHECK("  ...bytes intact after the GRH", same(A_SRC, UD_RECV + 40, 1000), "differ");
	CHECK("  ...slid, sl, dlid_path_bits read (0 on RoCE)", wc.slid == 0 && wc.sl == 0 && wc.dlid_path_bits == 0,
	      "slid %u sl %u dlid_path_bits %u", wc.slid, wc.sl, wc.dlid_path_bits);

	for (int i = 0; i < 50; i++)
		msg[i] = (uint8_t)(0x70 + i);
	ibv_wr_start(sx);
	sx->wr_id = 51;
	ibv_wr_send_imm(sx, htonl(0xabcdef01));
	ibv_wr_set_ud_addr(sx, ah, d->qp_num, qkey);
	ibv_wr_set_inline_data(sx, msg, 50);
	sx->wr_id = 52;
	ibv_wr_send(sx);
	ibv_wr_set_sge(sx, mr->lkey, (uintptr_t)buf + A_SRC, 10);
	ibv_wr_set_ud_addr(sx, ah, d->qp_num, qkey);
	ret = ibv_wr_complete(sx);
	CHECK("UD batch: send_imm with inline data, then send with set_sge before set_ud_addr: wr_complete",
	      ret == 0, "%d", ret);
	got = poll_plain(scq, &wc, 10);
	CHECK("  ...first SEND completion", !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 51, "got %d", got);
	got = poll_plain(scq, &wc, 10);
	CHECK("  ...second SEND completion", !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 52, "got %d", got);
	got = poll_ex(rcq, &wc, 10);
	CHECK("  ...receive with the immediate data, byte_len 90",
	      !got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 201 && wc.byte_len == 90 &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xabcdef01) && wc.src_qp == s->qp_num,
	      "got %d byte_len %u flags 0x%x imm 0x%x", got, wc.byte_len, wc.wc_flags, ntohl(wc.imm_data));
	CHECK("  ...inline bytes intact", !memcmp(buf + UD_RECV + 8192 + 40, msg, 50), "differ");
	got = poll_ex(rcq, &wc, 10);
	CHECK("  ...second receive, 10 bytes", !got && wc.wr_id == 202 && wc.byte_len == 50, "got %d byte_len %u", got,
	      wc.byte_len);

	ibv_wr_start(sx);
	sx->wr_id = 53;
	ibv_wr_send(sx);
	ibv_wr_set_sge(sx, mr->lkey, (uintptr_t)buf + A_SRC, 10);
	ret = ibv_wr_complete(sx);
	CHECK("UD send without set_ud_addr: wr_complete is EINVAL", ret == EINVAL, "%d", ret);
	ibv_wr_start(sx);
	ibv_wr_send(sx);
	ibv_wr_set_ud_addr(sx, ah, d->qp_num, qkey);
	ibv_wr_set_sge(sx, mr->lkey, (uintptr_t)buf + A_SRC, mtu + 1);
	ret = ibv_wr_complete(sx);
	CHECK("UD send longer than the path MTU: wr_complete is EINVAL", ret == EINVAL, "%d", ret);
	CHECK("  ...nothing of the refused batches arrives", stays_empty(ibv_cq_ex_to_cq(rcq), 0.5), "a receive");
	CHECK("  ...nor completes", stays_empty(scq, 0.1), "a completion");

	ibv_destroy_ah(ah);
	ibv_destroy_qp(s);
	ibv_destroy_qp(d);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(ibv_cq_ex_to_cq(rcq));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: wr_ex DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	if (ibv_query_device(ctx, &dattr) || ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("query");
	pd = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, BUF_SIZE);
	if (!pd || !buf)
		die("setup");
	memset(buf, 0, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		die("ibv_reg_mr");

	creation_refusals();
	rc();
	uc();
	ud();

	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("wr_ex: %d failed\n", failures);
	return failures ? 1 : 0;
}
