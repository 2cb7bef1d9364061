// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * qp_events: the affiliated asynchronous events of QPs, as a process sees
 * them (ibv_get_async_event), on one device with RC QPs connected to each
 * other through the device's own address:
 *
 * - IBV_EVENT_QP_LAST_WQE_REACHED when a QP on an SRQ enters ERR, once
 *   (IBTA 10.3.1, 11.6.3; the kernel's ib_drain_qp waits for it);
 * - IBV_EVENT_SQ_DRAINED when a QP reaches SQD with en_sqd_async_notify
 *   set, and none without it;
 * - IBV_EVENT_QP_ACCESS_ERR on the responder of an RDMA WRITE with an
 *   invalid R_Key, IBV_EVENT_QP_REQ_ERR on the responder of an RDMA READ
 *   its QP does not allow (errors no completion of the responder reports);
 *   the requester gets its completion error and no event.
 *
 *   qp_events DEVICE GID_INDEX
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testlib.h"

#define ALL_ACCESS                                                                                           \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_context *ctx;
static struct ibv_port_attr port;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_cq *cq;
static uint8_t *buf;
static union ibv_gid gid;
static int gid_index;

static void die(const char *what)
{
	fprintf(stderr, "qp_events: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The next async event within `secs` (acknowledged at once: destroy_qp
 * waits for its QP's events to be acknowledged): 0 and its type and QP, or
 * -1 when none came. */
static int next_event(double secs, enum ibv_event_type *type, struct ibv_qp **qp)
{
	double end = now() + secs;

	do {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;

		if (poll(&p, 1, 50) == 1 && ibv_get_async_event(ctx, &ev) == 0) {
			*type = ev.event_type;
			*qp = ev.element.qp;
			ibv_ack_async_event(&ev);
			return 0;
		}
	} while (now() < end);
	return -1;
}

/* Expects exactly `want` on `qp` within 5 s, then nothing else for 0.3 s. */
static void expect_event(const char *name, struct ibv_qp *qp, enum ibv_event_type want)
{
	enum ibv_event_type t;
	struct ibv_qp *q;
	char more[160];

	if (next_event(5, &t, &q)) {
		CHECK(name, 0, "no event in 5 s");
		return;
	}
	CHECK(name, t == want && q == qp, "got %s on QP %p (wanted %s on %p)", ibv_event_type_str(t), (void *)q,
	      ibv_event_type_str(want), (void *)qp);
	snprintf(more, sizeof(more), "  ...and no other event");
	CHECK(more, next_event(0.3, &t, &q) != 0, "then %s on QP %p", ibv_event_type_str(t), (void *)q);
}

static void expect_none(const char *name)
{
	enum ibv_event_type t;
	struct ibv_qp *q;

	CHECK(name, next_event(0.5, &t, &q) != 0, "got %s on QP %p", ibv_event_type_str(t), (void *)q);
}

static struct ibv_qp *make_qp(struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static void rc_connect(struct ibv_qp *qp, struct ibv_qp *peer, int access)
{
	const char *failed = tl_rc_connect_local(qp, peer->qp_num, access, port.active_mtu, &gid, gid_index, 0x100, 4);

	if (failed)
		die(failed);
}

/* One completion of `cq` within 5 s: its status, or -1. */
static int completion(struct ibv_wc *wc)
{
	double end = now() + 5;

	do {
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return wc->status;
	} while (now() < end);
	return -1;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op }, *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static void set_state(struct ibv_qp *qp, enum ibv_qp_state s, int mask, int sqd_notify)
{
	struct ibv_qp_attr a = { .qp_state = s, .en_sqd_async_notify = sqd_notify };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | mask))
		die("ibv_modify_qp");
}

static void last_wqe(void)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_qp *a, *b;
	struct ibv_wc wc;

	if (!srq)
		die("ibv_create_srq");
	a = make_qp(NULL);
	b = make_qp(srq);
	rc_connect(a, b, ALL_ACCESS);
	rc_connect(b, a, ALL_ACCESS);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + 8192 + i * 256, .length = 256, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *rb;

		if (ibv_post_srq_recv(srq, &rw, &rb))
			die("ibv_post_srq_recv");
	}
	if (post(a, IBV_WR_SEND, 0))
		die("ibv_post_send");
	CHECK("a SEND to the QP on the SRQ completes",
	      completion(&wc) == IBV_WC_SUCCESS && completion(&wc) == IBV_WC_SUCCESS, "status %d", wc.status);
	expect_none("no event while the QP on the SRQ works");
	set_state(b, IBV_QPS_ERR, 0, 0);
	expect_event("IBV_EVENT_QP_LAST_WQE_REACHED when the QP on the SRQ enters ERR", b,
		     IBV_EVENT_QP_LAST_WQE_REACHED);
	/* Back through RESET, connected again, and into ERR once more: the
	 * event comes again, once per entry into ERR. */
	set_state(b, IBV_QPS_RESET, 0, 0);
	rc_connect(b, a, ALL_ACCESS);
	set_state(b, IBV_QPS_ERR, 0, 0);
	expect_event("  ...again after RESET, reconnect and ERR", b, IBV_EVENT_QP_LAST_WQE_REACHED);
	set_state(a, IBV_QPS_ERR, 0, 0);
	expect_none("no LAST_WQE_REACHED for a QP without an SRQ");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_srq(srq);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		;
}

static void sq_drained(void)
{
	struct ibv_qp *a = make_qp(NULL), *b = make_qp(NULL);
	struct ibv_wc wc;

	rc_connect(a, b, ALL_ACCESS);
	rc_connect(b, a, ALL_ACCESS);
	set_state(a, IBV_QPS_SQD, 0, 0);
	expect_none("RTS -> SQD without en_sqd_async_notify: no event");
	set_state(a, IBV_QPS_RTS, 0, 0);
	if (post(a, IBV_WR_RDMA_WRITE, mr->rkey))
		die("ibv_post_send");
	set_state(a, IBV_QPS_SQD, IBV_QP_EN_SQD_ASYNC_NOTIFY, 1);
	expect_event("IBV_EVENT_SQ_DRAINED: RTS -> SQD with en_sqd_async_notify, a WRITE in flight", a,
		     IBV_EVENT_SQ_DRAINED);
	CHECK("  ...the WRITE completed", completion(&wc) == IBV_WC_SUCCESS, "status %d", wc.status);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
}

static void responder_errors(void)
{
	struct ibv_qp *a = make_qp(NULL), *b = make_qp(NULL);
	struct ibv_wc wc;
	int st;

	rc_connect(a, b, ALL_ACCESS);
	rc_connect(b, a, ALL_ACCESS);
	if (post(a, IBV_WR_RDMA_WRITE, mr->rkey ^ 0x80))
		die("ibv_post_send");
	st = completion(&wc);
	CHECK("RDMA WRITE with an invalid R_Key: the requester gets REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR,
	      "status %d", st);
	expect_event("  ...the responder raises IBV_EVENT_QP_ACCESS_ERR (the requester none)", b,
		     IBV_EVENT_QP_ACCESS_ERR);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		;

	a = make_qp(NULL);
	b = make_qp(NULL);
	rc_connect(a, b, ALL_ACCESS);
	rc_connect(b, a, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (post(a, IBV_WR_RDMA_READ, mr->rkey))
		die("ibv_post_send");
	st = completion(&wc);
	CHECK("RDMA READ to a QP without REMOTE_READ: the requester gets REM_INV_REQ_ERR",
	      st == IBV_WC_REM_INV_REQ_ERR, "status %d", st);
	expect_event("  ...the responder raises IBV_EVENT_QP_REQ_ERR (the requester none)", b, IBV_EVENT_QP_REQ_ERR);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: qp_events DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("query");
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	pd = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, 65536);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!pd || !buf || !cq)
		die("setup");
	memset(buf, 0, 65536);
	mr = ibv_reg_mr(pd, buf, 65536, ALL_ACCESS);
	if (!mr)
		die("ibv_reg_mr");

	last_wqe();
	sq_drained();
	responder_errors();

	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("qp_events: %d failed\n", failures);
	return failures ? 1 : 0;
}
