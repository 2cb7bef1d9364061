// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * srq_ud: UD QPs that take their receives from one shared receive queue,
 * through libibverbs, on one device.
 *
 *   srq_ud DEVICE GID_INDEX
 *
 * Two UD QPs on one SRQ and a sender. Datagrams sent to either QP, in a
 * seeded random order, each land in the SRQ's next receive, in the order
 * posted, and complete with the QP that took it (qp_num) and the sender's
 * QPN, intact. A datagram with the wrong Q_Key is dropped and takes no
 * receive away from the others. A UD QP with an SRQ refuses ibv_post_recv
 * (EINVAL).
 *
 * Then two UC QPs on another SRQ, each the peer of a UC sender, with a path
 * MTU of 256: SENDs of one to four packets and RDMA WRITEs with immediate,
 * to either QP in a seeded random order, each take the SRQ's next receive
 * in the order posted and complete with the QP that took it, the length,
 * the immediate and the data intact.
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
#include <endian.h>

#include "testlib.h"

#define QKEY 0x5a5a
#define LEN 128
#define SLOT 256 /* GRH + payload, with room */
#define N 60

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *buf; /* N receive slots, then one send slot */
static struct ibv_cq *scq, *rcq;
static struct ibv_srq *srq;

static void die(const char *what)
{
	fprintf(stderr, "srq_ud: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct ibv_qp *ud_qp(struct ibv_srq *s)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .srq = s, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = 4, .max_recv_wr = s ? 0 : 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp (UD)");
	if (tl_ud_rts(qp, QKEY, 0))
		die("ibv_modify_qp to RTS");
	return qp;
}

static uint8_t pattern(int n, int k)
{
	return (uint8_t)(n * 29 + k * 3 + 7);
}

/* Sends datagram `n` to QP `dqpn` with Q_Key `qkey`; waits for its completion. */
static void send_one(struct ibv_qp *s, struct ibv_ah *ah, uint32_t dqpn, uint32_t qkey, int n)
{
	uint8_t *p = buf + (size_t)N * SLOT;
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = LEN, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)n, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.wr.ud = { .ah = ah, .remote_qpn = dqpn, .remote_qkey = qkey },
	}, *bad;
	struct ibv_wc wc;
	int got;

	for (int k = 0; k < LEN; k++)
		p[k] = pattern(n, k);
	if (ibv_post_send(s, &wr, &bad))
		die("ibv_post_send");
	while ((got = ibv_poll_cq(scq, 1, &wc)) == 0)
		;
	if (got < 0 || wc.status != IBV_WC_SUCCESS)
		die("send completion");
}

/* The next receive completion within 3 s (status -1: none). */
static struct ibv_wc next_recv(void)
{
	struct ibv_wc wc = { .status = (enum ibv_wc_status)-1 };
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		int got = ibv_poll_cq(rcq, 1, &wc);

		if (got < 0)
			die("ibv_poll_cq");
		if (got)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 3000);
	wc.status = (enum ibv_wc_status)-1;
	return wc;
}

#define UC_N 30
#define UC_SLOT 1024

/* UC QPs on an SRQ: see the header. */
static void uc_on_srq(const union ibv_gid *gid, int gid_index)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = UC_N, .max_sge = 1 } };
	struct ibv_srq *s2 = ibv_create_srq(pd, &sa);
	/* UC_N receive slots, a send slot, a WRITE target */
	uint8_t *ub = calloc(UC_N + 2, UC_SLOT);
	struct ibv_mr *m2 = ub ? ibv_reg_mr(pd, ub, (size_t)(UC_N + 2) * UC_SLOT,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_qp *a[2], *b[2];

	if (!s2 || !m2)
		die("UC: ibv_create_srq / ibv_reg_mr");
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_UC, .sq_sig_all = 1,
			.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		a[i] = ibv_create_qp(pd, &ia);
		ia.srq = s2;
		ia.cap.max_recv_wr = 0;
		b[i] = ibv_create_qp(pd, &ia);
		CHECK(i ? "the second UC QP on the SRQ" : "a UC QP on an SRQ is created", a[i] && b[i], "%s",
		      strerror(errno));
		if (!a[i] || !b[i])
			return;
	}
	for (int i = 0; i < 2; i++) {
		struct tl_rc_conn c = { .access = IBV_ACCESS_REMOTE_WRITE, .mtu = IBV_MTU_256, .dgid = *gid,
					.sgid_index = gid_index, .rq_psn = 100, .sq_psn = 100 };
		const char *err;

		c.dest_qpn = b[i]->qp_num;
		err = tl_rc_connect(a[i], &c);
		c.dest_qpn = a[i]->qp_num;
		if (!err)
			err = tl_rc_connect(b[i], &c);
		if (err)
			die(err);
	}
	for (int i = 0; i < UC_N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)ub + (size_t)i * UC_SLOT, .length = UC_SLOT, .lkey = m2->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100u + (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_srq_recv(s2, &wr, &bad))
			die("ibv_post_srq_recv (UC)");
	}
	uint8_t *sb = ub + (size_t)UC_N * UC_SLOT, *tgt = sb + UC_SLOT;
	uint64_t seed = tl_seed(23);
	int good = 0, to0 = 0, writes = 0, shown = 0;

	for (int n = 0; n < UC_N; n++) {
		int to = (int)(tl_next(&seed) & 1), wimm = n % 3 == 2;
		uint32_t len = wimm ? 600 : (uint32_t[]){ 100, 256, 700, 1000 }[tl_next(&seed) % 4];
		struct ibv_sge sge = { .addr = (uintptr_t)sb, .length = len, .lkey = m2->lkey };
		struct ibv_send_wr wr = {
			.wr_id = (uint64_t)n, .sg_list = &sge, .num_sge = 1,
			.opcode = wimm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND,
			.imm_data = htobe32(0x1000u + (uint32_t)n),
			.wr.rdma = { .remote_addr = (uintptr_t)tgt, .rkey = m2->rkey },
		}, *bad;
		struct ibv_wc sw;
		int got;

		for (uint32_t k = 0; k < len; k++)
			sb[k] = (uint8_t)(n * 13 + k * 5 + 1);
		if (ibv_post_send(a[to], &wr, &bad))
			die("ibv_post_send (UC)");
		while ((got = ibv_poll_cq(scq, 1, &sw)) == 0)
			;
		if (got < 0 || sw.status != IBV_WC_SUCCESS)
			die("UC send completion");
		struct ibv_wc wc = next_recv();
		const uint8_t *p = wimm ? tgt : ub + (size_t)(wc.wr_id - 100 < UC_N ? wc.wr_id - 100 : 0) * UC_SLOT;
		int ok = wc.status == IBV_WC_SUCCESS && wc.wr_id == 100u + (uint64_t)n && wc.qp_num == b[to]->qp_num &&
			 wc.byte_len == len &&
			 wc.opcode == (wimm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV) &&
			 (!wimm || ((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x1000u + (uint32_t)n));

		ok = ok && !memcmp(p, sb, len);
		good += ok;
		to0 += to == 0;
		writes += wimm;
		if (!ok && shown++ < 3)
			fprintf(stderr, "UC message %d (%s, %u bytes) to QP %d: wr_id %llu, status %d, opcode %d, "
				"qp_num %#x (%#x), %u bytes\n", n, wimm ? "write imm" : "send", len, to,
				(unsigned long long)wc.wr_id, (int)wc.status, (int)wc.opcode, wc.qp_num,
				b[to]->qp_num, wc.byte_len);
	}
	CHECK("two UC QPs on one SRQ: SENDs of 1 to 4 packets and RDMA WRITEs with immediate each take the "
	      "SRQ's next receive, in the order posted, complete with the QP that took it, intact",
	      good == UC_N && to0 > 0 && to0 < UC_N && writes > 0, "%d of %d (%d to the first QP)", good, UC_N, to0);

	struct ibv_sge sge = { .addr = (uintptr_t)ub, .length = 8, .lkey = m2->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(b[0], &wr, &bad);

	CHECK("ibv_post_recv on a UC QP with an SRQ: EINVAL", (ret == -1 ? errno : ret) == EINVAL, "%d", ret);
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(a[i]);
		ibv_destroy_qp(b[i]);
	}
	CHECK("the UC QPs' SRQ is destroyed", !ibv_destroy_srq(s2), "%s", strerror(errno));
	ibv_dereg_mr(m2);
	free(ub);
}

int main(int argc, char **argv)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = N, .max_sge = 1 } };
	union ibv_gid gid;
	int gid_index;

	if (argc != 3) {
		fprintf(stderr, "usage: srq_ud DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(N + 1, SLOT);
	if (!pd || !buf || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("setup");
	mr = ibv_reg_mr(pd, buf, (size_t)(N + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE);
	scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0);
	srq = ibv_create_srq(pd, &sa);
	if (!mr || !scq || !rcq || !srq)
		die("ibv_reg_mr / ibv_create_cq / ibv_create_srq");
	struct ibv_qp *s = ud_qp(NULL), *q[2] = { ud_qp(srq), ud_qp(srq) };
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1, .grh = { .dgid = gid, .sgid_index = (uint8_t)gid_index, .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);

	if (!ah)
		die("ibv_create_ah");
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + (size_t)i * SLOT, .length = SLOT, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_srq_recv(srq, &wr, &bad))
			die("ibv_post_srq_recv");
	}

	/* A wrong Q_Key first: dropped, and it takes no receive away. */
	send_one(s, ah, q[0]->qp_num, QKEY + 1, 1000);
	uint64_t seed = tl_seed(19);
	int good = 0, took = 0, other = 0;

	for (int n = 0; n < N - 10; n++) {
		int to = (int)(tl_next(&seed) & 1);

		send_one(s, ah, q[to]->qp_num, QKEY, n);
		struct ibv_wc wc = next_recv();
		const uint8_t *p = buf + (size_t)(wc.wr_id < N ? wc.wr_id : 0) * SLOT + 40;
		int ok = wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)n && wc.qp_num == q[to]->qp_num &&
			 wc.src_qp == s->qp_num && wc.byte_len == LEN + 40 && (wc.wc_flags & IBV_WC_GRH);

		for (int k = 0; ok && k < LEN; k++)
			ok = p[k] == pattern(n, k);
		good += ok;
		took += wc.status == IBV_WC_SUCCESS && to == 0;
		if (!ok && other++ < 3)
			fprintf(stderr, "datagram %d to QP %d: wr_id %llu, status %d, qp_num %#x (%#x), src_qp %#x, %u bytes\n",
				n, to, (unsigned long long)wc.wr_id, (int)wc.status, wc.qp_num, q[to]->qp_num,
				wc.src_qp, wc.byte_len);
	}
	CHECK("two UD QPs on one SRQ: each datagram lands in the SRQ's next receive, in the order posted, "
	      "completed with the QP that took it, the sender's QPN and a GRH, intact",
	      good == N - 10 && took > 0 && took < N - 10, "%d of %d (%d to the first QP)", good, N - 10, took);
	CHECK("a datagram with the wrong Q_Key took no receive (the first one went to datagram 0)", other == 0,
	      "%d wrong", other);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SLOT, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(q[0], &wr, &bad);

	CHECK("ibv_post_recv on a UD QP with an SRQ: EINVAL", (ret == -1 ? errno : ret) == EINVAL, "%d", ret);

	uc_on_srq(&gid, gid_index);

	ibv_destroy_ah(ah);
	ibv_destroy_qp(q[0]);
	ibv_destroy_qp(q[1]);
	ibv_destroy_qp(s);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(rcq);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failures ? 1 : 0;
}
