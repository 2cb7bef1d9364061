// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * security: what a hostile local process tries against the device
 * (issue 17; tests/guest/security.sh runs it).
 *
 *   security pdwrap DEV GID_INDEX KERNEL_VA [ROUNDS]
 *       Allocates and frees PDs ROUNDS times (default 8256: past a 32-bit
 *       handle counter started just below its wrap by the module's
 *       test_pd_start parameter, and twice round the PD table), then, from
 *       a UD QP in the last PD, SENDs KERNEL_VA (a kernel address, e.g.
 *       linux_banner from /proc/kallsyms) with every L_Key a kernel region
 *       can have in the first table slots (index 1-4, all 256 key bytes) to
 *       a second QP of its own. Every attempt must complete with
 *       IBV_WC_LOC_PROT_ERR and nothing may arrive: a user QP never
 *       reaches the kernel's DMA region.
 *
 *   security events DEV GID_INDEX [RECEIVERS]
 *       One UD sender, RECEIVERS (default 6) UD receivers, each with its
 *       own CQ on its own completion channel, armed. One ibv_post_send of
 *       one datagram to each receiver (one doorbell). Each channel must
 *       deliver one event.
 *
 *   security uaf DEV GID_INDEX SECONDS
 *       Thread 1 streams SENDs on a loopback RC QP; thread 2 keeps
 *       creating its peer (on an SRQ with its limit armed and a CQ armed
 *       for events), connecting it, and destroying the peer, the SRQ and
 *       the CQ while the traffic flows; thread 3 takes the async events
 *       (SRQ limit). Run on the KASAN kernel (make check-debug) it shows
 *       any handler or event that runs on a freed CQ or SRQ.
 *
 *   security hog DEV GID_INDEX
 *       Allocates PDs until the device refuses, then AHs (in one PD) until
 *       it refuses, checks that each stopped at the context's quota
 *       (max_pd, max_ah of ibv_query_device) with ENOMEM, prints "holding"
 *       and keeps everything until its standard input closes. Meanwhile
 *       tests/guest/security.sh runs rping (other processes and the
 *       kernel's CM must still find room).
 *
 * Prints "ok - NAME" / "not ok - NAME" lines; exits non-zero on failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

#define QKEY 0x1234u
#define MSG 64
#define GRH 40

static struct ibv_context *ctx;
static union ibv_gid gid;
static int gid_index;
static struct ibv_port_attr port;

static void die(const char *what)
{
	fprintf(stderr, "security: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx) {
		errno = ENODEV;
		die(name);
	}
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_port/gid");
}

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp (UD)");
	if (tl_ud_rts(qp, QKEY, 0))
		die("ibv_modify_qp (UD) to RTS");
	return qp;
}

static struct ibv_ah *self_ah(struct ibv_pd *pd)
{
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_ah *ah;

	aa.grh.dgid = gid;
	aa.grh.sgid_index = gid_index;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	return ah;
}

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc, double seconds)
{
	double end = now() + seconds;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now() < end)
		;
	return n;
}

/* ------------------------------------------------------------------ pdwrap */

static int pdwrap(uint64_t kva, long rounds)
{
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq;
	struct ibv_qp *tx, *rx;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	char *buf = calloc(1, 4096);
	long i;
	int attempts = 0, prot_err = 0, other = 0, arrived = 0;
	char leaked[64] = "";

	for (i = 0; i < rounds; i++) {
		pd = ibv_alloc_pd(ctx);
		if (!pd)
			die("ibv_alloc_pd");
		if (i + 1 < rounds && ibv_dealloc_pd(pd))
			die("ibv_dealloc_pd");
	}
	printf("security: pdwrap: %ld PDs allocated and freed; probing L_Keys 0x100-0x4ff at %#" PRIx64 "\n",
	       rounds, kva);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!cq || !mr || !buf)
		die("ibv_create_cq/ibv_reg_mr");
	ah = self_ah(pd);
	rx = ud_qp(pd, cq, 4);
	tx = ud_qp(pd, cq, 4);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = MSG + GRH, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad;

	/* one receive waits at the receiver, posted again when used */
	if (ibv_post_recv(rx, &rwr, &rbad))
		die("ibv_post_recv");
	for (uint32_t key = 0x100; key < 0x500; key++) {
		struct ibv_sge ssge = { .addr = kva, .length = MSG, .lkey = key };
		struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND },
				   *sbad;
		struct ibv_wc wc;

		if (key == mr->lkey)
			continue;
		swr.wr.ud.ah = ah;
		swr.wr.ud.remote_qpn = rx->qp_num;
		swr.wr.ud.remote_qkey = QKEY;
		int before = arrived;

		if (ibv_post_send(tx, &swr, &sbad))
			die("ibv_post_send");
		attempts++;
		/* the send's completion; a receive if anything arrived */
		int send_status = -1;

		while (send_status < 0 && wait_one(cq, &wc, 5) == 1) {
			if (wc.wr_id == 2)
				send_status = (int)wc.status;
			else if (wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS)
				arrived++;
		}
		if (send_status == IBV_WC_LOC_PROT_ERR)
			prot_err++;
		else
			other++;
		if (send_status == IBV_WC_SUCCESS && arrived == before && wait_one(cq, &wc, 1) == 1 && wc.wr_id == 1 &&
		    wc.status == IBV_WC_SUCCESS)
			arrived++;
		if (arrived && !leaked[0]) {
			for (int k = 0; k < MSG && k < (int)sizeof(leaked) - 1; k++)
				leaked[k] = buf[GRH + k] >= 32 && buf[GRH + k] < 127 ? buf[GRH + k] : '.';
			printf("security: pdwrap: L_Key %#x read kernel memory: \"%s\"\n", key, leaked);
		}
		if (arrived != before && ibv_post_recv(rx, &rwr, &rbad))
			die("ibv_post_recv");
		/* the sender went to an error state: back to RTS for the next key */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

		if (send_status != IBV_WC_SUCCESS && (ibv_modify_qp(tx, &a, IBV_QP_STATE) || tl_ud_rts(tx, QKEY, 0)))
			die("ibv_modify_qp (reset to RTS)");
	}
	CHECK("pdwrap: every SEND naming a kernel key completes with IBV_WC_LOC_PROT_ERR",
	      prot_err == attempts, "%d of %d (%d other statuses)", prot_err, attempts, other);
	CHECK("pdwrap: no kernel byte arrives", arrived == 0, "%d datagrams arrived, the first: \"%s\"", arrived,
	      leaked);
	ibv_destroy_qp(tx);
	ibv_destroy_qp(rx);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------------ events */

static int events(int nrecv)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = (size_t)(nrecv + 2) * (MSG + GRH);
	char *buf = calloc(1, len);
	struct ibv_mr *mr;
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *tx;
	struct ibv_ah *ah;
	struct ibv_comp_channel *ch[64];
	struct ibv_cq *cq[64];
	struct ibv_qp *rx[64];
	struct ibv_send_wr wr[64], *bad;
	struct ibv_sge sge[64];
	struct ibv_wc wc;
	int got = 0;

	if (!pd || !buf || !scq || nrecv < 1 || nrecv > 64)
		die("setup");
	mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	ah = self_ah(pd);
	tx = ud_qp(pd, scq, 64);
	for (int i = 0; i < nrecv; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf + (size_t)(i + 1) * (MSG + GRH), .length = MSG + GRH,
				      .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rb;

		ch[i] = ibv_create_comp_channel(ctx);
		if (!ch[i])
			die("ibv_create_comp_channel");
		fcntl(ch[i]->fd, F_SETFL, fcntl(ch[i]->fd, F_GETFL) | O_NONBLOCK);
		cq[i] = ibv_create_cq(ctx, 8, NULL, ch[i], 0);
		if (!cq[i])
			die("ibv_create_cq");
		rx[i] = ud_qp(pd, cq[i], 4);
		if (ibv_post_recv(rx[i], &rw, &rb))
			die("ibv_post_recv");
	}
	/* a first datagram to this device: the sender's next ones take the
	 * device's direct path, all in one pass */
	{
		struct ibv_sge s0 = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
		struct ibv_send_wr w0 = { .wr_id = 100, .sg_list = &s0, .num_sge = 1, .opcode = IBV_WR_SEND };
		struct ibv_qp *sink = ud_qp(pd, scq, 4);

		w0.wr.ud.ah = ah;
		w0.wr.ud.remote_qpn = sink->qp_num;
		w0.wr.ud.remote_qkey = QKEY;
		if (ibv_post_send(tx, &w0, &bad) || wait_one(scq, &wc, 5) != 1)
			die("first datagram");
		ibv_destroy_qp(sink);
	}
	for (int i = 0; i < nrecv; i++)
		if (ibv_req_notify_cq(cq[i], 0))
			die("ibv_req_notify_cq");
	for (int i = 0; i < nrecv; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = (uint64_t)i, .sg_list = &sge[i], .num_sge = 1,
					      .opcode = IBV_WR_SEND, .next = i + 1 < nrecv ? &wr[i + 1] : NULL };
		wr[i].wr.ud.ah = ah;
		wr[i].wr.ud.remote_qpn = rx[i]->qp_num;
		wr[i].wr.ud.remote_qkey = QKEY;
	}
	if (ibv_post_send(tx, wr, &bad))
		die("ibv_post_send");
	for (int i = 0; i < nrecv; i++) {
		struct pollfd p = { .fd = ch[i]->fd, .events = POLLIN };
		struct ibv_cq *ecq;
		void *ectx;

		if (poll(&p, 1, 5000) == 1 && ibv_get_cq_event(ch[i], &ecq, &ectx) == 0) {
			ibv_ack_cq_events(ecq, 1);
			got++;
		} else {
			printf("security: events: receiver %d (QP %u): no completion event in 5 s (%d completions "
			       "in its CQ)\n",
			       i, rx[i]->qp_num, ibv_poll_cq(cq[i], 1, &wc));
		}
	}
	CHECK("events: one doorbell, one datagram to each of the armed receivers, every channel gets its event",
	      got == nrecv, "%d of %d events", got, nrecv);
	for (int i = 0; i < nrecv; i++) {
		ibv_destroy_qp(rx[i]);
		ibv_destroy_cq(cq[i]);
		ibv_destroy_comp_channel(ch[i]);
	}
	ibv_destroy_qp(tx);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* --------------------------------------------------------------------- uaf */

static struct ibv_pd *upd;
static struct ibv_mr *umr;
static char *ubuf;
static pthread_mutex_t ulock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_qp *usender; /* thread 1's QP, reconnected to each new peer */
static volatile int ustop;
static long usent, urounds, uevents;

#define RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static void *uaf_sender(void *arg)
{
	struct ibv_cq *cq = arg;
	struct ibv_wc wc[16];

	while (!ustop) {
		struct ibv_sge sge = { .addr = (uintptr_t)ubuf, .length = MSG, .lkey = umr->lkey };
		struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		pthread_mutex_lock(&ulock);
		if (ibv_post_send(usender, &wr, &bad) == 0)
			usent++;
		pthread_mutex_unlock(&ulock);
		ibv_poll_cq(cq, 16, wc);
	}
	return NULL;
}

static void *uaf_async(void *arg)
{
	(void)arg;
	while (!ustop) {
		struct ibv_async_event ev;
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };

		if (poll(&p, 1, 100) != 1 || ibv_get_async_event(ctx, &ev))
			continue;
		uevents++;
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

static int uaf(double seconds)
{
	struct ibv_cq *scq;
	pthread_t t1, t3;
	double end = now() + seconds;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1,
						.max_recv_sge = 1 } };

	upd = ibv_alloc_pd(ctx);
	ubuf = calloc(1, 65536);
	if (!upd || !ubuf)
		die("setup");
	umr = ibv_reg_mr(upd, ubuf, 65536, RC_ACCESS);
	scq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!umr || !scq)
		die("ibv_reg_mr/ibv_create_cq");
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	ia.send_cq = ia.recv_cq = scq;
	usender = ibv_create_qp(upd, &ia);
	if (!usender)
		die("ibv_create_qp");
	pthread_create(&t1, NULL, uaf_sender, scq);
	pthread_create(&t3, NULL, uaf_async, NULL);
	while (now() < end) {
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 64, NULL, ch, 0) : NULL;
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 1 } };
		struct ibv_srq *srq = ibv_create_srq(upd, &sa);
		struct ibv_qp_init_attr pa = ia;
		struct ibv_qp *peer;
		struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
		struct ibv_srq_attr lim = { .srq_limit = 30 };

		if (!cq || !srq)
			die("ibv_create_cq/ibv_create_srq");
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		pa.send_cq = pa.recv_cq = cq;
		pa.srq = srq;
		peer = ibv_create_qp(upd, &pa);
		if (!peer)
			die("ibv_create_qp (peer)");
		for (int i = 0; i < 32; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)ubuf + 4096 + (i % 8) * MSG, .length = MSG,
					       .lkey = umr->lkey };
			struct ibv_recv_wr rw = { .sg_list = &sge, .num_sge = 1 }, *rb;

			ibv_post_srq_recv(srq, &rw, &rb);
		}
		ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT);
		ibv_req_notify_cq(cq, 0);
		struct tl_rc_conn c = { .access = RC_ACCESS, .mtu = port.active_mtu, .dgid = gid,
					.sgid_index = gid_index, .rq_psn = 1, .sq_psn = 1, .max_dest_rd_atomic = 1,
					.max_rd_atomic = 1, .timeout = 8, .retry_cnt = 1, .rnr_retry = 1 };
		pthread_mutex_lock(&ulock);
		ibv_modify_qp(usender, &reset, IBV_QP_STATE);
		c.dest_qpn = peer->qp_num;
		tl_rc_connect(usender, &c);
		pthread_mutex_unlock(&ulock);
		c.dest_qpn = usender->qp_num;
		tl_rc_connect(peer, &c);
		/* let some traffic and events through, then pull the peer, its
		 * SRQ and its CQ out from under them */
		usleep((useconds_t)(urounds % 7) * 300);
		ibv_req_notify_cq(cq, 0);
		ibv_destroy_qp(peer);
		ibv_destroy_srq(srq);
		{
			/* the events this CQ got must be acknowledged before it goes */
			struct ibv_cq *ecq;
			void *ectx;
			int n = 0;

			while (ibv_get_cq_event(ch, &ecq, &ectx) == 0)
				n++;
			if (n)
				ibv_ack_cq_events(cq, n);
		}
		if (ibv_destroy_cq(cq))
			die("ibv_destroy_cq");
		ibv_destroy_comp_channel(ch);
		urounds++;
	}
	ustop = 1;
	pthread_join(t1, NULL);
	pthread_join(t3, NULL);
	printf("security: uaf: %ld peers (with SRQ and CQ) destroyed under traffic, %ld SENDs posted, %ld async "
	       "events\n",
	       urounds, usent, uevents);
	CHECK("uaf: peers, SRQs and CQs destroyed under traffic, the process went through", urounds > 0,
	      "no round");
	ibv_destroy_qp(usender);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(umr);
	ibv_dealloc_pd(upd);
	return failures;
}

/* --------------------------------------------------------------------- hog */

static int hog(void)
{
	struct ibv_device_attr da;
	static struct ibv_pd *pds[8192];
	static struct ibv_ah *ahs[8192];
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	int np = 0, na = 0, perr, aerr;
	char c;

	if (ibv_query_device(ctx, &da))
		die("ibv_query_device");
	while (np < 8192 && (pds[np] = ibv_alloc_pd(ctx)))
		np++;
	perr = errno;
	aa.grh.dgid = gid;
	aa.grh.sgid_index = gid_index;
	aa.grh.hop_limit = 64;
	if (np > 0) {
		/* every AH goes to a distinct flow label: distinct objects */
		while (na < 8192) {
			aa.grh.flow_label = (uint32_t)na;
			if (!(ahs[na] = ibv_create_ah(pds[0], &aa)))
				break;
			na++;
		}
	}
	aerr = errno;
	printf("security: hog: %d PDs (%s), %d AHs (%s); max_pd %d, max_ah %d\n", np, strerror(perr), na,
	       strerror(aerr), da.max_pd, da.max_ah);
	CHECK("hog: a process's PDs stop at its quota (max_pd) with ENOMEM", np == da.max_pd && perr == ENOMEM,
	      "%d PDs, then %s", np, strerror(perr));
	CHECK("hog: a process's AHs stop at its quota (max_ah) with ENOMEM", na == da.max_ah && aerr == ENOMEM,
	      "%d AHs, then %s", na, strerror(aerr));
	printf("holding\n");
	while (read(0, &c, 1) > 0)
		;
	for (int i = 0; i < na; i++)
		ibv_destroy_ah(ahs[i]);
	for (int i = 0; i < np; i++)
		ibv_dealloc_pd(pds[i]);
	return failures;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: security pdwrap|events|uaf DEV GID_INDEX [ARGS]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	gid_index = atoi(argv[3]);
	open_dev(argv[2]);
	if (!strcmp(argv[1], "pdwrap") && argc >= 5)
		return pdwrap(strtoull(argv[4], NULL, 16), argc > 5 ? atol(argv[5]) : 8256) ? 1 : 0;
	if (!strcmp(argv[1], "events"))
		return events(argc > 4 ? atoi(argv[4]) : 6) ? 1 : 0;
	if (!strcmp(argv[1], "hog"))
		return hog() ? 1 : 0;
	if (!strcmp(argv[1], "uaf") && argc >= 5)
		return uaf(atof(argv[4])) ? 1 : 0;
	fprintf(stderr, "security: unknown test %s\n", argv[1]);
	return 2;
}
