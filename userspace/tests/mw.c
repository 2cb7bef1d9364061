// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * mw: memory windows (IBTA 10.6.7), as a process uses them, with RC QPs of
 * one device connected through its own address. QP "b" owns the memory and
 * binds windows to it; QP "a" reaches it through the windows' R_Keys.
 *
 * - the device announces type 1 and type 2B windows;
 * - a type 2B window bound by IBV_WR_BIND_MW (post_send and ibv_wr_bind_mw)
 *   takes RDMA WRITE and READ inside its range and rights, and refuses
 *   (remote access error) a reference outside its range, without the
 *   right, through its old key, or through a QP other than the one it is
 *   bound to, and leaves the memory untouched;
 * - LOCAL_INV (post_send and ibv_wr_local_inv) and a received SEND with
 *   Invalidate free it; a type 1 window cannot be invalidated;
 * - a bind fails with IBV_WC_MW_BIND_ERR for a region without MW_BIND, a
 *   range outside the region, remote write over a region without local
 *   write, a type 2B window still bound and a key of another index;
 * - a type 1 window binds with ibv_bind_mw, rebinds (the old key stops
 *   working) and unbinds with length 0;
 * - ibv_dereg_mr of a region with a bound window is EBUSY; after the
 *   window goes, it succeeds;
 * - a UD QP refuses a bind (EINVAL);
 * - a process that exits with bound windows is cleaned up.
 *
 *   mw DEVICE GID_INDEX
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

#define LEN 65536
#define ALL_ACCESS                                                                                           \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_context *ctx;
static struct ibv_port_attr port;
static struct ibv_pd *pd;
static struct ibv_mr *mr_a, *mr_b;
static uint8_t *buf_a, *buf_b;
static union ibv_gid gid;
static int gid_index;

struct pair {
	struct ibv_qp *a, *b;
	struct ibv_cq *ca, *cb;
};

static void die(const char *what)
{
	fprintf(stderr, "mw: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *make_qp(struct ibv_cq *cq, int ex)
{
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_RC,
		.send_cq = cq,
		.recv_cq = cq,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp *qp;

	if (ex) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_RDMA_WRITE;
	}
	qp = ibv_create_qp_ex(ctx, &ia);
	if (!qp)
		die("ibv_create_qp_ex");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, struct ibv_qp *peer)
{
	const char *failed = tl_rc_connect_local(qp, peer->qp_num, ALL_ACCESS, port.active_mtu, &gid, gid_index, 0x100, 4);

	if (failed)
		die(failed);
}

/* Two connected RC QPs, each with its own CQ (`ex`: b has the ibv_wr_* API). */
static struct pair make_pair(int ex)
{
	struct pair p;

	p.ca = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	p.cb = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!p.ca || !p.cb)
		die("ibv_create_cq");
	p.a = make_qp(p.ca, 0);
	p.b = make_qp(p.cb, ex);
	connect_qp(p.a, p.b);
	connect_qp(p.b, p.a);
	return p;
}

static void free_pair(struct pair *p)
{
	if (ibv_destroy_qp(p->a) || ibv_destroy_qp(p->b) || ibv_destroy_cq(p->ca) || ibv_destroy_cq(p->cb))
		die("destroy");
}

/* One completion of `cq` within 5 s: its status, or -1. */
static int completion(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double end = now() + 5;

	do {
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return wc->status;
	} while (now() < end);
	wc->opcode = -1;
	return -1;
}

/* Posts a type 2B bind of `mw` on `qp` to `len` bytes at `off` of `mr`
 * with `access`, new key `rkey`; the completion's status (and opcode in
 * `op`). */
static int bind2(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw, struct ibv_mr *mr, uint32_t rkey,
		 size_t off, size_t len, unsigned int access)
{
	struct ibv_send_wr wr = { .wr_id = 7, .opcode = IBV_WR_BIND_MW }, *bad;
	struct ibv_wc wc;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)mr->addr + off;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	if (ibv_post_send(qp, &wr, &bad))
		return -2;
	if (completion(cq, &wc) != IBV_WC_SUCCESS)
		return wc.status;
	return wc.opcode == IBV_WC_BIND_MW ? IBV_WC_SUCCESS : -3;
}

/* An RDMA WRITE (or READ) of `len` bytes from a's buffer to `off` of b's
 * buffer through `rkey`: the completion's status. */
static int rdma(struct pair *p, enum ibv_wr_opcode op, uint32_t rkey, size_t off, size_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf_a, .length = len, .lkey = mr_a->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = op }, *bad;
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = (uintptr_t)buf_b + off;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(p->a, &wr, &bad))
		return -2;
	return completion(p->ca, &wc);
}

/* A local operation (LOCAL_INV of `rkey`) posted on b: its status. */
static int local_inv(struct pair *p, uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = 11, .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = rkey }, *bad;
	struct ibv_wc wc;

	if (ibv_post_send(p->b, &wr, &bad))
		return -2;
	if (completion(p->cb, &wc) != IBV_WC_SUCCESS)
		return wc.status;
	return wc.opcode == IBV_WC_LOCAL_INV ? IBV_WC_SUCCESS : -3;
}

static struct ibv_mw *alloc(enum ibv_mw_type t)
{
	struct ibv_mw *mw = ibv_alloc_mw(pd, t);

	if (!mw)
		die("ibv_alloc_mw");
	return mw;
}

/* Whether b's buffer from `off` holds `len` bytes of `v`. */
static int holds(size_t off, size_t len, uint8_t v)
{
	for (size_t i = 0; i < len; i++)
		if (buf_b[off + i] != v)
			return 0;
	return 1;
}

static void caps(void)
{
	struct ibv_device_attr a;

	if (ibv_query_device(ctx, &a))
		die("ibv_query_device");
	CHECK("the device announces type 1 and type 2B memory windows",
	      (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) &&
		      a.max_mw > 0,
	      "device_cap_flags %#x, max_mw %d", a.device_cap_flags, a.max_mw);
}

static void type2(void)
{
	struct pair p = make_pair(0);
	struct ibv_mw *mw = alloc(IBV_MW_TYPE_2);
	uint32_t old = mw->rkey, key = ibv_inc_rkey(mw->rkey);
	int st;

	CHECK("ibv_alloc_mw gives a type 2B window an R_Key", mw->rkey != 0 && mw->type == IBV_MW_TYPE_2,
	      "rkey %#x type %d", mw->rkey, mw->type);
	/* Local write among the rights, as verbs programs pass it: ignored. */
	st = bind2(p.b, p.cb, mw, mr_b, key, 4096, 4096,
		   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE);
	CHECK("IBV_WR_BIND_MW of a type 2B window completes (IBV_WC_BIND_MW)", st == IBV_WC_SUCCESS, "status %d", st);
	mw->rkey = key;
	memset(buf_b, 0, LEN);
	memset(buf_a, 0xa5, 256);
	st = rdma(&p, IBV_WR_RDMA_WRITE, key, 4096 + 128, 256);
	CHECK("an RDMA WRITE through the window lands", st == IBV_WC_SUCCESS && holds(4096 + 128, 256, 0xa5),
	      "status %d", st);
	memset(buf_b + 8000, 0x3c, 64);
	st = rdma(&p, IBV_WR_RDMA_READ, key, 8000, 64);
	CHECK("an RDMA READ through the window reads", st == IBV_WC_SUCCESS && buf_a[0] == 0x3c && buf_a[63] == 0x3c,
	      "status %d", st);
	memset(buf_a, 0x77, 256);
	st = rdma(&p, IBV_WR_RDMA_WRITE, key, 8192 - 8, 16);
	CHECK("a WRITE crossing the window's end: remote access error, nothing written",
	      st == IBV_WC_REM_ACCESS_ERR && holds(8192 - 8, 16, 0), "status %d", st);
	free_pair(&p);

	/* The window stays bound to b's QP, which is gone: a new pair. */
	p = make_pair(0);
	st = rdma(&p, IBV_WR_RDMA_WRITE, key, 4096, 16);
	CHECK("a type 2B window through a QP other than the one that bound it: remote access error",
	      st == IBV_WC_REM_ACCESS_ERR && holds(4096, 16, 0), "status %d", st);
	free_pair(&p);
	CHECK("ibv_dealloc_mw of a bound window", ibv_dealloc_mw(mw) == 0, "%s", strerror(errno));

	p = make_pair(0);
	mw = alloc(IBV_MW_TYPE_2);
	old = mw->rkey;
	key = ibv_inc_rkey(old);
	st = bind2(p.b, p.cb, mw, mr_b, key, 0, 4096, IBV_ACCESS_REMOTE_WRITE);
	st = st ? st : rdma(&p, IBV_WR_RDMA_READ, key, 0, 16);
	CHECK("a READ through a window without REMOTE_READ: remote access error", st == IBV_WC_REM_ACCESS_ERR,
	      "status %d", st);
	free_pair(&p);
	p = make_pair(0);
	st = rdma(&p, IBV_WR_RDMA_WRITE, old, 0, 16);
	CHECK("the window's key before its bind: remote access error", st == IBV_WC_REM_ACCESS_ERR && holds(0, 16, 0),
	      "status %d", st);
	free_pair(&p);
	ibv_dealloc_mw(mw);

	/* Invalidation by LOCAL_INV, then by a received SEND with Invalidate. */
	p = make_pair(0);
	mw = alloc(IBV_MW_TYPE_2);
	key = ibv_inc_rkey(mw->rkey);
	st = bind2(p.b, p.cb, mw, mr_b, key, 0, 4096, IBV_ACCESS_REMOTE_WRITE);
	if (st == IBV_WC_SUCCESS)
		mw->rkey = key; /* the caller's, after a type 2B bind */
	st = st ? st : local_inv(&p, key);
	CHECK("IBV_WR_LOCAL_INV of a bound type 2B window completes (IBV_WC_LOCAL_INV)", st == IBV_WC_SUCCESS,
	      "status %d", st);
	st = local_inv(&p, key);
	CHECK("LOCAL_INV of a window already free: local protection error", st == IBV_WC_LOC_PROT_ERR, "status %d",
	      st);
	free_pair(&p);
	p = make_pair(0);
	st = rdma(&p, IBV_WR_RDMA_WRITE, key, 0, 16);
	CHECK("a WRITE through an invalidated window: remote access error", st == IBV_WC_REM_ACCESS_ERR, "status %d",
	      st);
	free_pair(&p);

	p = make_pair(0);
	key = ibv_inc_rkey(key);
	st = bind2(p.b, p.cb, mw, mr_b, key, 0, 4096, IBV_ACCESS_REMOTE_WRITE);
	CHECK("an invalidated type 2B window binds again", st == IBV_WC_SUCCESS, "status %d", st);
	mw->rkey = key;
	{
		struct ibv_sge rs = { .addr = (uintptr_t)buf_b + 32768, .length = 64, .lkey = mr_b->lkey };
		struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &rs, .num_sge = 1 }, *rb;
		struct ibv_sge ss = { .addr = (uintptr_t)buf_a, .length = 8, .lkey = mr_a->lkey };
		struct ibv_send_wr sw = { .wr_id = 6, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV },
				   *sb;
		struct ibv_wc wc;

		sw.invalidate_rkey = key;
		if (ibv_post_recv(p.b, &rw, &rb) || ibv_post_send(p.a, &sw, &sb))
			die("post");
		st = completion(p.ca, &wc);
		st = st ? st : completion(p.cb, &wc);
		CHECK("a received SEND with Invalidate frees the window (IBV_WC_WITH_INV)",
		      st == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == key,
		      "status %d flags %#x rkey %#x", st, wc.wc_flags, wc.invalidated_rkey);
		st = rdma(&p, IBV_WR_RDMA_WRITE, key, 0, 16);
		CHECK("...and a WRITE through it then: remote access error", st == IBV_WC_REM_ACCESS_ERR, "status %d",
		      st);
	}
	free_pair(&p);

	/* Bind errors: each completes with IBV_WC_MW_BIND_ERR. */
	{
		struct ibv_mr *nobind = ibv_reg_mr(pd, buf_b, LEN, ALL_ACCESS);
		struct ibv_mr *rdonly = ibv_reg_mr(pd, buf_b, LEN, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
		struct {
			const char *name;
			struct ibv_mr *mr;
			uint32_t key;
			size_t off, len;
			unsigned int access;
		} cases[] = {
			{ "a bind to a region without IBV_ACCESS_MW_BIND: IBV_WC_MW_BIND_ERR", nobind, 1, 0, 64,
			  IBV_ACCESS_REMOTE_READ },
			{ "a bind past the region's end: IBV_WC_MW_BIND_ERR", mr_b, 1, LEN - 32, 64,
			  IBV_ACCESS_REMOTE_READ },
			{ "remote write over a region without local write: IBV_WC_MW_BIND_ERR", rdonly, 1, 0, 64,
			  IBV_ACCESS_REMOTE_WRITE },
			{ "a new key of another index: IBV_WC_MW_BIND_ERR", mr_b, 0x100, 0, 64, IBV_ACCESS_REMOTE_READ },
			{ "a type 2B bind of length 0: IBV_WC_MW_BIND_ERR", mr_b, 1, 0, 0, IBV_ACCESS_REMOTE_READ },
		};

		if (!nobind || !rdonly)
			die("ibv_reg_mr");
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			p = make_pair(0);
			mw = alloc(IBV_MW_TYPE_2);
			key = cases[i].key == 1 ? ibv_inc_rkey(mw->rkey) : mw->rkey + cases[i].key;
			st = bind2(p.b, p.cb, mw, cases[i].mr, key, cases[i].off, cases[i].len, cases[i].access);
			CHECK(cases[i].name, st == IBV_WC_MW_BIND_ERR, "status %d", st);
			free_pair(&p);
			ibv_dealloc_mw(mw);
		}
		p = make_pair(0);
		mw = alloc(IBV_MW_TYPE_2);
		key = ibv_inc_rkey(mw->rkey);
		st = bind2(p.b, p.cb, mw, mr_b, key, 0, 64, IBV_ACCESS_REMOTE_READ);
		if (st == IBV_WC_SUCCESS)
			mw->rkey = key;
		st = st ? st : bind2(p.b, p.cb, mw, mr_b, ibv_inc_rkey(key), 0, 64, IBV_ACCESS_REMOTE_READ);
		CHECK("a second bind of a bound type 2B window: IBV_WC_MW_BIND_ERR", st == IBV_WC_MW_BIND_ERR,
		      "status %d", st);
		free_pair(&p);
		errno = 0;
		CHECK("ibv_dereg_mr of a region with a bound window: EBUSY", ibv_dereg_mr(mr_b) == EBUSY,
		      "errno %d", errno);
		ibv_dealloc_mw(mw);
		if (ibv_dereg_mr(nobind) || ibv_dereg_mr(rdonly))
			die("ibv_dereg_mr");
	}

	/* The extended API: ibv_wr_bind_mw, then ibv_wr_local_inv. */
	p = make_pair(1);
	mw = alloc(IBV_MW_TYPE_2);
	key = ibv_inc_rkey(mw->rkey);
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.b);
		struct ibv_mw_bind_info bi = { .mr = mr_b, .addr = (uintptr_t)buf_b, .length = 512,
					       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
		struct ibv_wc wc;
		int r;

		ibv_wr_start(x);
		x->wr_id = 21;
		ibv_wr_bind_mw(x, mw, key, &bi);
		r = ibv_wr_complete(x);
		st = r ? -2 : completion(p.cb, &wc);
		CHECK("ibv_wr_bind_mw binds", st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "ret %d status %d", r,
		      st);
		memset(buf_a, 0x42, 64);
		st = rdma(&p, IBV_WR_RDMA_WRITE, key, 256, 64);
		CHECK("...a WRITE through it lands", st == IBV_WC_SUCCESS && holds(256, 64, 0x42), "status %d", st);
		ibv_wr_start(x);
		x->wr_id = 22;
		ibv_wr_local_inv(x, key);
		r = ibv_wr_complete(x);
		st = r ? -2 : completion(p.cb, &wc);
		CHECK("ibv_wr_local_inv invalidates", st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
		      "ret %d status %d", r, st);
		st = rdma(&p, IBV_WR_RDMA_WRITE, key, 256, 64);
		CHECK("...and a WRITE through it then: remote access error", st == IBV_WC_REM_ACCESS_ERR, "status %d",
		      st);
	}
	free_pair(&p);
	ibv_dealloc_mw(mw);
}

static void type1(void)
{
	struct pair p = make_pair(0);
	struct ibv_mw *mw = alloc(IBV_MW_TYPE_1);
	struct ibv_mw_bind b = { .wr_id = 31, .send_flags = IBV_SEND_SIGNALED };
	uint32_t first;
	struct ibv_wc wc;
	int r, st;

	b.bind_info.mr = mr_b;
	b.bind_info.addr = (uintptr_t)buf_b + 1024;
	b.bind_info.length = 1024;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	first = mw->rkey;
	r = ibv_bind_mw(p.b, mw, &b);
	st = r ? -2 : completion(p.cb, &wc);
	CHECK("ibv_bind_mw of a type 1 window completes and gives it a new key",
	      st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && mw->rkey != first, "ret %d status %d", r, st);
	memset(buf_b, 0, LEN);
	memset(buf_a, 0x5a, 64);
	st = rdma(&p, IBV_WR_RDMA_WRITE, mw->rkey, 1024, 64);
	CHECK("a WRITE through the type 1 window lands", st == IBV_WC_SUCCESS && holds(1024, 64, 0x5a), "status %d",
	      st);
	st = local_inv(&p, mw->rkey);
	CHECK("LOCAL_INV of a type 1 window: local protection error", st == IBV_WC_LOC_PROT_ERR, "status %d", st);
	free_pair(&p);

	/* A type 1 window is reachable from any QP of its PD. */
	p = make_pair(0);
	first = mw->rkey;
	b.bind_info.addr = (uintptr_t)buf_b + 2048;
	r = ibv_bind_mw(p.b, mw, &b);
	st = r ? -2 : completion(p.cb, &wc);
	CHECK("a type 1 window binds again, to another range", st == IBV_WC_SUCCESS && mw->rkey != first,
	      "ret %d status %d", r, st);
	st = rdma(&p, IBV_WR_RDMA_WRITE, mw->rkey, 2048, 64);
	CHECK("...a WRITE there through its new key lands", st == IBV_WC_SUCCESS && holds(2048, 64, 0x5a),
	      "status %d", st);
	st = rdma(&p, IBV_WR_RDMA_WRITE, first, 2048, 64);
	CHECK("...its old key: remote access error", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	free_pair(&p);
	p = make_pair(0);
	errno = 0;
	CHECK("ibv_dereg_mr of a region with a bound type 1 window: EBUSY", ibv_dereg_mr(mr_b) == EBUSY, "errno %d",
	      errno);
	b.bind_info.length = 0;
	b.bind_info.addr = 0;
	b.bind_info.mr = NULL;
	r = ibv_bind_mw(p.b, mw, &b);
	st = r ? -2 : completion(p.cb, &wc);
	CHECK("a bind of length 0 unbinds a type 1 window", st == IBV_WC_SUCCESS, "ret %d status %d", r, st);
	st = rdma(&p, IBV_WR_RDMA_WRITE, mw->rkey, 2048, 64);
	CHECK("...a WRITE through it then: remote access error", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	free_pair(&p);
	CHECK("ibv_dealloc_mw of a type 1 window", ibv_dealloc_mw(mw) == 0, "%s", strerror(errno));
}

static void ud_refuses(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UD, .cap = { .max_send_wr = 4, .max_recv_wr = 4,
								    .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_mw *mw = alloc(IBV_MW_TYPE_2);
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad;
	struct ibv_qp *qp;
	int r;

	ia.send_cq = ia.recv_cq = cq;
	qp = cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp || tl_ud_rts(qp, 0x11, 0))
		die("UD QP");
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = mr_b;
	wr.bind_mw.bind_info.addr = (uintptr_t)buf_b;
	wr.bind_mw.bind_info.length = 64;
	r = ibv_post_send(qp, &wr, &bad);
	CHECK("a UD QP refuses IBV_WR_BIND_MW (EINVAL)", r == EINVAL, "ret %d", r);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_mw(mw);
}

/* A child binds windows over its region and exits without freeing
 * anything: the kernel's cleanup of its context must deregister the region
 * after the windows (the first attempt is EBUSY). */
static void exit_with_bound_windows(const char *dev)
{
	pid_t pid = fork();
	int status = -1;

	if (pid == 0) {
		struct pair p;
		struct ibv_mw *m1, *m2;
		struct ibv_mw_bind b = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_wc wc;

		ctx = tl_open_device(dev);
		pd = ctx ? ibv_alloc_pd(ctx) : NULL;
		mr_b = pd ? ibv_reg_mr(pd, buf_b, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND) : NULL;
		if (!mr_b)
			_exit(3);
		p = make_pair(0);
		m1 = alloc(IBV_MW_TYPE_1);
		m2 = alloc(IBV_MW_TYPE_2);
		b.bind_info.mr = mr_b;
		b.bind_info.addr = (uintptr_t)buf_b;
		b.bind_info.length = 64;
		b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
		if (ibv_bind_mw(p.b, m1, &b) || completion(p.cb, &wc) != IBV_WC_SUCCESS)
			_exit(4);
		if (bind2(p.b, p.cb, m2, mr_b, ibv_inc_rkey(m2->rkey), 0, 64, IBV_ACCESS_REMOTE_READ))
			_exit(5);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	CHECK("a process exits with windows bound to its region (the kernel cleans up)",
	      WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: mw DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_port");
	pd = ibv_alloc_pd(ctx);
	buf_a = aligned_alloc(4096, LEN);
	buf_b = aligned_alloc(4096, LEN);
	if (!pd || !buf_a || !buf_b)
		die("ibv_alloc_pd");
	memset(buf_b, 0, LEN);
	mr_a = ibv_reg_mr(pd, buf_a, LEN, ALL_ACCESS);
	mr_b = ibv_reg_mr(pd, buf_b, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	if (!mr_a || !mr_b)
		die("ibv_reg_mr");
	caps();
	type2();
	type1();
	ud_refuses();
	CHECK("with its windows gone, the region deregisters", ibv_dereg_mr(mr_b) == 0, "%s", strerror(errno));
	exit_with_bound_windows(argv[1]);
	ibv_dereg_mr(mr_a);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failures ? 1 : 0;
}
