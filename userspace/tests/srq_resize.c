// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * srq_resize: resizing a shared receive queue that holds posted receive
 * work requests (ibv_modify_srq with IBV_SRQ_MAX_WR), through libibverbs,
 * on an RC QP pair of one device.
 *
 *   srq_resize DEVICE GID_INDEX
 *
 * The receiving QP takes its receives from an SRQ of 16 entries holding 10
 * posted WQEs. Shrinking it below those 10 is EINVAL and changes nothing; a
 * resize to 256 keeps the 10, in order, and takes 200 more (more than the
 * old ring held); then 210 SENDs arrive, each in the receive posted for it
 * (wr_id and payload checked), in the order posted. A second resize with
 * 50 WQEs still pending and a limit armed in the same call, then more
 * traffic. ibv_query_srq reports each size.
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#include <errno.h>
#include <poll.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testlib.h"

#define LEN 64
#define SLOTS 512

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *buf; /* SLOTS receive slots, then SLOTS send slots */
static struct ibv_cq *scq, *rcq;
static struct ibv_srq *srq;
static struct ibv_qp *snd, *rcv;
static uint64_t next_post, next_expect; /* wr_ids: the slot number, in order */

static void die(const char *what)
{
	fprintf(stderr, "srq_resize: %s: %s\n", what, strerror(errno));
	exit(2);
}

static int err_of(int ret)
{
	return ret == -1 ? errno : ret;
}

static uint8_t pattern(uint64_t n, int k)
{
	return (uint8_t)(n * 13 + (uint64_t)k * 7 + 1);
}

/* Posts `n` receives to the SRQ, each a slot of its own; 0 or the errno. */
static int post(int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t id = next_post;
		struct ibv_sge sge = {
			.addr = (uintptr_t)buf + (id % SLOTS) * LEN, .length = LEN, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
		int ret = ibv_post_srq_recv(srq, &wr, &bad);

		if (ret)
			return ret;
		next_post++;
	}
	return 0;
}

/* Sends `n` messages, message i carrying the pattern of the receive it is
 * meant for, and checks each arrives there, in order. Returns the number
 * received as expected. */
static int traffic(int n)
{
	int good = 0, sent = 0, acked = 0;
	uint64_t base = next_expect;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (good < n || acked < n) {
		/* a few in flight at a time (the send queue is 16 deep) */
		while (sent < n && sent - acked < 8) {
			uint64_t id = base + (uint64_t)sent;
			uint8_t *p = buf + (SLOTS + id % SLOTS) * LEN;
			struct ibv_sge sge = { .addr = (uintptr_t)p, .length = LEN, .lkey = mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED }, *bad;

			for (int k = 0; k < LEN; k++)
				p[k] = pattern(id, k);
			if (ibv_post_send(snd, &wr, &bad))
				die("ibv_post_send");
			sent++;
		}
		struct ibv_wc wc;
		int m = ibv_poll_cq(scq, 1, &wc);

		if (m < 0)
			die("ibv_poll_cq");
		if (m) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "send %llu: %s\n", (unsigned long long)wc.wr_id,
					ibv_wc_status_str(wc.status));
				return good;
			}
			acked++;
		}
		m = ibv_poll_cq(rcq, 1, &wc);
		if (m < 0)
			die("ibv_poll_cq");
		if (m) {
			const uint8_t *p = buf + (wc.wr_id % SLOTS) * LEN;
			int ok = wc.status == IBV_WC_SUCCESS && wc.wr_id == next_expect && wc.byte_len == LEN;

			for (int k = 0; ok && k < LEN; k++)
				ok = p[k] == pattern(wc.wr_id, k);
			if (!ok) {
				fprintf(stderr,
					"receive: wr_id %llu (expected %llu), %s, %u bytes, data %02x %02x .. %02x (expected %02x %02x .. %02x)\n",
					(unsigned long long)wc.wr_id, (unsigned long long)next_expect,
					ibv_wc_status_str(wc.status), wc.byte_len, p[0], p[1], p[LEN - 1],
					pattern(wc.wr_id, 0), pattern(wc.wr_id, 1), pattern(wc.wr_id, LEN - 1));
				return good;
			}
			next_expect++;
			good++;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30) {
			fprintf(stderr, "timeout: %d sent, %d acked, %d received\n", sent, acked, good);
			return good;
		}
	}
	return good;
}

static void connect_qp(struct ibv_qp *qp, struct ibv_qp *peer, const union ibv_gid *gid, int gid_index)
{
	struct ibv_port_attr port;

	if (ibv_query_port(ctx, 1, &port))
		die("ibv_query_port");
	const char *failed =
		tl_rc_connect_local(qp, peer->qp_num, IBV_ACCESS_LOCAL_WRITE, port.active_mtu, gid, gid_index, 0x100, 1);

	if (failed)
		die(failed);
}

int main(int argc, char **argv)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq_attr a, q;
	union ibv_gid gid;
	int gid_index, ret, got;

	if (argc != 3) {
		fprintf(stderr, "usage: srq_resize DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(2 * SLOTS, LEN);
	if (!pd || !buf || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("setup");
	mr = ibv_reg_mr(pd, buf, 2 * SLOTS * LEN, IBV_ACCESS_LOCAL_WRITE);
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	srq = ibv_create_srq(pd, &sa);
	if (!mr || !scq || !rcq || !srq)
		die("ibv_reg_mr / ibv_create_cq / ibv_create_srq");
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	snd = ibv_create_qp(pd, &ia);
	ia.recv_cq = rcq;
	ia.srq = srq;
	rcv = ibv_create_qp(pd, &ia);
	if (!snd || !rcv)
		die("ibv_create_qp");
	connect_qp(snd, rcv, &gid, gid_index);
	connect_qp(rcv, snd, &gid, gid_index);

	ret = post(10);
	CHECK("10 receives posted to an SRQ of 16", ret == 0, "%s", strerror(ret));
	ret = ibv_query_srq(srq, &q);
	int old = ret ? 0 : (int)q.max_wr;

	memset(&a, 0, sizeof(a));
	a.max_wr = 4;
	ret = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	CHECK("resizing below the 10 WQEs pending: EINVAL", err_of(ret) == EINVAL, "%s",
	      ret ? strerror(err_of(ret)) : "accepted");
	ret = ibv_query_srq(srq, &q);
	CHECK("...and the SRQ keeps its size", ret == 0 && (int)q.max_wr == old, "max_wr %u, was %d", q.max_wr, old);

	a.max_wr = 256;
	ret = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	CHECK("resize to 256 with 10 WQEs pending", ret == 0, "%s", strerror(err_of(ret)));
	ret = ibv_query_srq(srq, &q);
	CHECK("...ibv_query_srq reports at least 256", ret == 0 && q.max_wr >= 256, "max_wr %u", q.max_wr);
	ret = post(200);
	CHECK("...200 more receives posted (more than the old ring held)", ret == 0, "%s", strerror(ret));
	got = traffic(210);
	CHECK("...210 SENDs arrive in the 210 receives, in the order posted (the 10 moved first)", got == 210,
	      "%d of 210", got);

	ret = post(50);
	memset(&a, 0, sizeof(a));
	a.max_wr = 100;
	a.srq_limit = 20;
	ret = ret ? ret : ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT);
	CHECK("resize to 100 with 50 pending and a limit armed in the same call", ret == 0, "%s",
	      strerror(err_of(ret)));
	ret = ibv_query_srq(srq, &q);
	CHECK("...ibv_query_srq reports the size and the limit", ret == 0 && q.max_wr >= 100 && q.srq_limit == 20,
	      "max_wr %u, srq_limit %u", q.max_wr, q.srq_limit);
	ret = post(40);
	got = ret ? 0 : traffic(90);
	CHECK("...90 SENDs arrive in order", got == 90, "%d of 90 (post: %s)", got, strerror(ret));
	/* read (and acknowledge) the limit event: an unacknowledged one would
	 * hold ibv_destroy_srq forever */
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev = { .event_type = IBV_EVENT_COMM_EST };
	int ready = poll(&pfd, 1, 5000) == 1 && !ibv_get_async_event(ctx, &ev);

	if (ready)
		ibv_ack_async_event(&ev);
	CHECK("...the limit armed with the resize fires once the SRQ holds fewer than 20",
	      ready && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq, "%s",
	      ready ? ibv_event_type_str(ev.event_type) : "no event in 5 s");

	ibv_destroy_qp(rcv);
	ibv_destroy_qp(snd);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(rcq);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failures ? 1 : 0;
}
