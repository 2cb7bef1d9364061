// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * comp_vector: completion vectors, through libibverbs, on one device.
 *
 *   comp_vector DEVICE GID_INDEX VECTORS VECTOR ROUNDS
 *
 * The device has VECTORS completion vectors (the guest's CPUs); a CQ on
 * vector VECTORS does not exist (EINVAL). On vector VECTOR (-1: on every
 * vector in turn), a UD QP sends ROUNDS datagrams to itself through a CQ
 * armed on a completion channel: each send and receive completes intact
 * and each round's completion event arrives (within 5 s), no event is
 * lost or repeated. Which CPU ran the CQ's handler is for the caller to
 * see (tests/guest/ud.sh traces ib_uverbs_comp_handler).
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define QKEY 0x1234
#define LEN 64
#define SLOT 256 /* GRH + payload, with room */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t buf[2 * SLOT];
static union ibv_gid gid;
static int gid_index;

static void die(const char *what)
{
	fprintf(stderr, "comp_vector: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* Waits (5 s at most) for the channel's next event, which must be `cq`'s. */
static int wait_event(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	if (poll(&p, 1, 5000) != 1)
		return -1;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
		return -1;
	ibv_ack_cq_events(ev_cq, 1);
	return ev_cq == cq ? 0 : -1;
}

/* ROUNDS datagrams from a UD QP to itself through a CQ on `vector`: how many failed. */
static int run_vector(int vector, int rounds)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	int bad = 0, events = 0;

	if (!ch)
		die("ibv_create_comp_channel");
	cq = ibv_create_cq(ctx, 8, NULL, ch, vector);
	if (!cq) {
		printf("not ok - CQ on vector %d: ibv_create_cq: %s\n", vector, strerror(errno));
		failures++;
		ibv_destroy_comp_channel(ch);
		return 1;
	}
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(pd, &ia);
	if (!qp || tl_ud_rts(qp, QKEY, 0))
		die("UD QP");
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = (uint8_t)gid_index, .hop_limit = 64 },
	};
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");

	for (int r = 0; r < rounds && !bad; r++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = SLOT, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rb;
		struct ibv_sge ss = { .addr = (uintptr_t)buf + SLOT, .length = LEN, .lkey = mr->lkey };
		struct ibv_send_wr sw = {
			.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
			.wr.ud = { .ah = ah, .remote_qpn = qp->qp_num, .remote_qkey = QKEY },
		}, *sb;
		int seen = 0;

		memset(buf, 0, SLOT);
		for (int k = 0; k < LEN; k++)
			buf[SLOT + k] = (uint8_t)(r * 7 + k);
		if (ibv_post_recv(qp, &rw, &rb) || ibv_req_notify_cq(cq, 0) || ibv_post_send(qp, &sw, &sb)) {
			bad = 1;
			break;
		}
		/* Both completions; an event for each arming that found none yet. */
		while (seen != 3 && !bad) {
			struct ibv_wc wc[2];
			int n;

			if (wait_event(ch, cq)) {
				printf("# vector %d round %d: no completion event in 5 s (seen %d)\n", vector, r, seen);
				bad = 1;
				break;
			}
			events++;
			if (ibv_req_notify_cq(cq, 0))
				bad = 1;
			while ((n = ibv_poll_cq(cq, 2, wc)) > 0)
				for (int i = 0; i < n; i++) {
					if (wc[i].status != IBV_WC_SUCCESS) {
						printf("# vector %d round %d: %s\n", vector, r, ibv_wc_status_str(wc[i].status));
						bad = 1;
					}
					seen |= (int)wc[i].wr_id;
				}
			if (n < 0)
				bad = 1;
		}
		if (!bad && memcmp(buf + 40, buf + SLOT, LEN)) {
			printf("# vector %d round %d: datagram not intact\n", vector, r);
			bad = 1;
		}
	}
	/* The last arming must stay quiet: no event without a completion. */
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int spurious = !bad && poll(&p, 1, 100) != 0;

	char name[96];
	snprintf(name, sizeof(name), "%d datagrams and their events through a CQ on vector %d", rounds, vector);
	CHECK(name, !bad && !spurious, "%d events, %s", events, spurious ? "an event with no completion" : "a round failed");
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	if (ibv_destroy_cq(cq))
		die("ibv_destroy_cq");
	ibv_destroy_comp_channel(ch);
	return bad || spurious;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: comp_vector DEVICE GID_INDEX VECTORS VECTOR ROUNDS\n");
		return 2;
	}
	int vectors = atoi(argv[3]), vector = atoi(argv[4]), rounds = atoi(argv[5]);

	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	if (ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		die("PD and MR");

	CHECK("num_comp_vectors is one per CPU", ctx->num_comp_vectors == vectors, "%d, expected %d",
	      ctx->num_comp_vectors, vectors);
	errno = 0;
	struct ibv_cq *none = ibv_create_cq(ctx, 8, NULL, NULL, ctx->num_comp_vectors);
	CHECK("a CQ on vector num_comp_vectors is refused (EINVAL)", !none && errno == EINVAL, "%s",
	      none ? "created" : strerror(errno));
	if (none)
		ibv_destroy_cq(none);

	if (vector >= 0)
		run_vector(vector, rounds);
	else
		for (int v = 0; v < ctx->num_comp_vectors; v++)
			run_vector(v, rounds);

	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failures ? 1 : 0;
}
