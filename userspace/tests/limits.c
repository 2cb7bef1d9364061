// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * limits: a device's advertised maximums, reached and passed (issue 10).
 *
 *   limits DEV GID_INDEX [--qps N]
 *
 * 1. Creates PDs, CQs, MRs, AHs and RC QPs one kind at a time until the
 *    device refuses: the count reached must be the advertised maximum less
 *    what the kernel itself holds (the MAD layer's PD, CQ and GSI QP; at
 *    most 8 of each), and the refusal must be ENOMEM or EINVAL (never a
 *    crash, never success past the maximum). Also: a CQ of max_cqe + 1
 *    entries, a QP with max_qp_wr + 1 work requests or max_sge + 1 SGEs,
 *    each refused with EINVAL or ENOMEM. Everything is freed again.
 * 2. Connects --qps RC QPs (default 1000; pairs on the same device, through
 *    its own address) and has every QP send 4 messages of 4 KiB with a
 *    pattern of its own to its peer at once; every received byte is
 *    checked.
 * Prints one "ok - NAME" or "not ok - NAME" line per check; exits non-zero
 * when any failed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fails;
static void result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - ", ok ? "ok" : "not ok");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (!ok)
		fails++;
}
static void die(const char *what)
{
	fprintf(stderr, "limits: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* at most, of each kind, held by the kernel's own users (the MAD layer's
 * PD, CQ and GSI QP) or reserved (QPNs below 16) */
#define KERNEL_HELD 16
#define MSGS 4
#define MSG 4096

static struct ibv_context *ctx;
static struct ibv_device_attr da;
static struct ibv_port_attr pa;
static union ibv_gid gid;
static int gidx;

/* reached NAME COUNT MAX ERR: the count and the refusal of one kind */
static void reached(const char *name, long count, long max, int err)
{
	result(count <= max && count >= max - KERNEL_HELD, "%s: %ld created, advertised %ld", name, count, max);
	result(err == ENOMEM || err == EINVAL, "%s: one past the maximum refused with %s", name,
	       err == ENOMEM ? "ENOMEM" : err == EINVAL ? "EINVAL" : strerror(err));
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t wr, uint32_t sge)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = sge, .max_recv_sge = sge },
	};
	return ibv_create_qp(pd, &ia);
}

static void limits(void)
{
	long n, max;
	int err;
	struct ibv_pd *pd0 = ibv_alloc_pd(ctx);
	if (!pd0)
		die("ibv_alloc_pd");

	/* PDs */
	max = da.max_pd;
	struct ibv_pd **pds = calloc(max + 2, sizeof(*pds));
	for (n = 0, err = 0; n <= max; n++) {
		pds[n] = ibv_alloc_pd(ctx);
		if (!pds[n]) {
			err = errno;
			break;
		}
	}
	reached("PD", n + 1 /* pd0 */, max, err);
	while (n-- > 0)
		ibv_dealloc_pd(pds[n]);
	free(pds);

	/* CQs */
	max = da.max_cq;
	struct ibv_cq **cqs = calloc(max + 2, sizeof(*cqs));
	for (n = 0, err = 0; n <= max; n++) {
		cqs[n] = ibv_create_cq(ctx, 1, NULL, NULL, 0);
		if (!cqs[n]) {
			err = errno;
			break;
		}
	}
	reached("CQ", n, max, err);
	while (n-- > 0)
		ibv_destroy_cq(cqs[n]);
	free(cqs);
	errno = 0;
	struct ibv_cq *big = ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0);
	result(!big && (errno == EINVAL || errno == ENOMEM), "CQ of max_cqe + 1 (%d) entries refused (%s)", da.max_cqe + 1,
	       big ? "created" : strerror(errno));
	if (big)
		ibv_destroy_cq(big);

	/* MRs over one buffer */
	static char buf[4096] __attribute__((aligned(4096)));
	max = da.max_mr;
	struct ibv_mr **mrs = calloc(max + 2, sizeof(*mrs));
	for (n = 0, err = 0; n <= max; n++) {
		mrs[n] = ibv_reg_mr(pd0, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		if (!mrs[n]) {
			err = errno;
			break;
		}
	}
	reached("MR", n, max, err);
	while (n-- > 0)
		ibv_dereg_mr(mrs[n]);
	free(mrs);

	/* AHs */
	max = da.max_ah;
	struct ibv_ah **ahs = calloc(max + 2, sizeof(*ahs));
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = (uint8_t)gidx, .hop_limit = 64 },
	};
	for (n = 0, err = 0; n <= max; n++) {
		ahs[n] = ibv_create_ah(pd0, &aa);
		if (!ahs[n]) {
			err = errno;
			break;
		}
	}
	reached("AH", n, max, err);
	while (n-- > 0)
		ibv_destroy_ah(ahs[n]);
	free(ahs);

	/* QPs (RC, one CQ) */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	max = da.max_qp;
	struct ibv_qp **qps = calloc(max + 2, sizeof(*qps));
	for (n = 0, err = 0; n <= max; n++) {
		qps[n] = rc_qp(pd0, cq, cq, 1, 1);
		if (!qps[n]) {
			err = errno;
			break;
		}
	}
	reached("QP", n, max, err);
	while (n-- > 0)
		ibv_destroy_qp(qps[n]);
	free(qps);
	errno = 0;
	struct ibv_qp *q = rc_qp(pd0, cq, cq, da.max_qp_wr + 1, 1);
	result(!q && (errno == EINVAL || errno == ENOMEM), "QP with max_qp_wr + 1 (%d) work requests refused (%s)",
	       da.max_qp_wr + 1, q ? "created" : strerror(errno));
	if (q)
		ibv_destroy_qp(q);
	errno = 0;
	q = rc_qp(pd0, cq, cq, 1, da.max_sge + 1);
	result(!q && (errno == EINVAL || errno == ENOMEM), "QP with max_sge + 1 (%d) SGEs refused (%s)", da.max_sge + 1,
	       q ? "created" : strerror(errno));
	if (q)
		ibv_destroy_qp(q);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd0);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, uint32_t rq_psn, uint32_t sq_psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.dest_qp_num = dest;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp to RTS");
}

static uint8_t pattern(int qp, int msg, int i) { return (uint8_t)(qp * 131 + msg * 17 + i * 7 + (i >> 8)); }

static void many(int nqp)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	int cqe = nqp * MSGS;
	if (cqe > da.max_cqe)
		cqe = da.max_cqe;
	struct ibv_cq *scq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	size_t len = (size_t)nqp * MSGS * MSG * 2; /* send half, receive half */
	uint8_t *buf = aligned_alloc(4096, len);
	if (!pd || !scq || !rcq || !buf)
		die("setup for many QPs");
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	struct ibv_qp **qp = calloc(nqp, sizeof(*qp));
	int made = 0;
	for (int i = 0; i < nqp; i++) {
		qp[i] = rc_qp(pd, scq, rcq, MSGS, 1);
		if (!qp[i])
			break;
		made++;
	}
	result(made == nqp, "%d RC QPs created (%d asked)", made, nqp);
	if (made != nqp)
		return;
	/* PSNs: QP i sends from 1000 + 7i, its peer expects exactly that */
	for (int i = 0; i < nqp; i++)
		to_rts(qp[i], qp[i ^ 1]->qp_num, 1000 + (uint32_t)(i ^ 1) * 7, 1000 + (uint32_t)i * 7);
	uint8_t *sbuf = buf, *rbuf = buf + len / 2;
	for (int i = 0; i < nqp; i++) {
		for (int m = 0; m < MSGS; m++) {
			size_t off = ((size_t)i * MSGS + m) * MSG;
			struct ibv_sge sge = { (uintptr_t)(rbuf + off), MSG, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)i << 8 | m, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp[i], &wr, &bad))
				die("ibv_post_recv");
			for (int k = 0; k < MSG; k++)
				sbuf[off + k] = pattern(i, m, k);
		}
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int m = 0; m < MSGS; m++) {
		for (int i = 0; i < nqp; i++) {
			size_t off = ((size_t)i * MSGS + m) * MSG;
			struct ibv_sge sge = { (uintptr_t)(sbuf + off), MSG, mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)i << 8 | m, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (ibv_post_send(qp[i], &wr, &bad))
				die("ibv_post_send");
		}
	}
	long want = (long)nqp * MSGS, sdone = 0, rdone = 0, bad_wc = 0;
	struct ibv_wc wc[64];
	for (;;) {
		int k = ibv_poll_cq(scq, 64, wc);
		for (int j = 0; j < k; j++)
			bad_wc += wc[j].status != IBV_WC_SUCCESS;
		sdone += k > 0 ? k : 0;
		k = ibv_poll_cq(rcq, 64, wc);
		for (int j = 0; j < k; j++)
			bad_wc += wc[j].status != IBV_WC_SUCCESS || wc[j].byte_len != MSG;
		rdone += k > 0 ? k : 0;
		if (sdone >= want && rdone >= want)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 120) {
			fprintf(stderr, "limits: after 120 s: %ld of %ld sends, %ld of %ld receives complete\n", sdone,
				want, rdone, want);
			break;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	result(sdone == want && rdone == want && !bad_wc, "%d RC QPs at once: %ld sends and %ld receives of %d bytes, all SUCCESS (%.2f s)",
	       nqp, sdone, rdone, MSG, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	/* QP i's messages land in its peer's receive buffers */
	long wrong = 0;
	for (int i = 0; i < nqp; i++)
		for (int m = 0; m < MSGS; m++) {
			size_t off = ((size_t)(i ^ 1) * MSGS + m) * MSG;
			for (int k = 0; k < MSG; k++)
				wrong += rbuf[off + k] != pattern(i, m, k);
		}
	result(wrong == 0, "%d RC QPs at once: every received byte verified (%ld wrong)", nqp, wrong);
	for (int i = 0; i < nqp; i++)
		ibv_destroy_qp(qp[i]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	free(buf);
	free(qp);
}

int main(int argc, char **argv)
{
	int nqp = 1000;
	if (argc < 3) {
		fprintf(stderr, "usage: limits DEV GID_INDEX [--qps N]\n");
		return 2;
	}
	if (argc >= 5 && !strcmp(argv[3], "--qps"))
		nqp = atoi(argv[4]) & ~1;
	gidx = atoi(argv[2]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_device/port/gid");
	printf("max_pd %d max_cq %d max_cqe %d max_mr %d max_ah %d max_qp %d max_qp_wr %d max_sge %d\n", da.max_pd,
	       da.max_cq, da.max_cqe, da.max_mr, da.max_ah, da.max_qp, da.max_qp_wr, da.max_sge);
	limits();
	many(nqp);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return fails ? 1 : 0;
}
