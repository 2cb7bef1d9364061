// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * security: what a hostile local process tries against the device
 * (issue 17; tests/guest/security.sh runs it).
 *
 *   security pdwrap DEV GID_INDEX KERNEL_VA [ROUNDS]
 *       Holds 20 PDs at once, then allocates and frees PDs ROUNDS times
 *       (default 8256: twice round the PD table), holds 20 again, then
 *       one more. From a UD QP in each of them it SENDs KERNEL_VA (a kernel
 *       address, e.g. linux_banner from /proc/kallsyms) with every L_Key
 *       the kernel's first region can have (index 1, all 256 key bytes;
 *       indices 1-4 from the last PD) to a receiver of its own. With the
 *       module's test_pd_start parameter set, a wrapping 32-bit handle
 *       counter would hand the first live set the kernel's PD handle.
 *       Every attempt must complete with IBV_WC_LOC_PROT_ERR and nothing may
 *       arrive: a process's QP never reaches the kernel's DMA region.
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
 *   security intrude DEV GID_INDEX
 *       A victim RC pair A <-> B and an intruder RC QP X on the same
 *       device, all through its own address (as co-located tenants are).
 *       X knows everything an attacker could guess or sweep: B's QPN, B's
 *       next expected PSN and B's R_Key. It connects to B and sends a
 *       SEND and an RDMA WRITE at exactly that PSN; then A sends its own
 *       SEND at that PSN. B must receive A's message only, its memory must
 *       be untouched by X, and A's SEND must be acknowledged.
 *
 *   security srqkeep DEV GID_INDEX
 *       An SRQ with 4 receive WQEs and an RC QP B on it, whose peer A
 *       sends at a PSN 1000 ahead of what B expects (every packet out of
 *       sequence: NAKed, never executed); then B is destroyed. A new QP C
 *       on the same SRQ must then receive 4 SENDs from its peer D: no WQE
 *       moved into B and vanished with it.
 *
 *   security srqmid DEV GID_INDEX IPV4_ADDRESS MODE
 *       An SRQ with one receive WQE and an RC QP B on it. A raw socket
 *       sends B the first packet of a two-packet SEND (SEND_FIRST, at B's
 *       expected PSN, from B's peer's address): B takes the WQE and writes
 *       into it, and the rest never comes. Then, by MODE: "err" moves B to
 *       ERR, and the WQE completes with IBV_WC_WR_FLUSH_ERR (which also
 *       shows that B had taken it); "reset" resets B, "destroy" destroys
 *       it, and a new QP C on the SRQ must then receive a SEND from its peer
 *       D into that WQE: a WQE leaves an SRQ only to complete.
 *
 *   security resize DEV GID_INDEX
 *       A UD receiver whose CQ holds 4 completions gets 16 datagrams
 *       without polling (12 completions wait in the kernel), then the CQ is
 *       resized to 64: with no further traffic, all 16 must be polled.
 *
 *   security ipopts DEV GID_INDEX IPV4_ADDRESS
 *       A UD SEND whose IPv4 header carries 20 bytes of options (IHL 10:
 *       40 bytes, as long as an IPv6 header), sent from a raw socket to a
 *       UD QP of the device's own address. Its GRH must hold an IPv4
 *       header (RoCEv2: the last 20 bytes, version 4, the source address),
 *       not the raw bytes taken for an IPv6 header.
 *
 *   security localq DEV GID_INDEX
 *       With the module loaded with test_local_queue_max=2: a UD QP sends
 *       64 datagrams to a QP of its own device with one doorbell (its
 *       first batch goes through the device's local queue, which holds 2).
 *       Every send completes successfully; prints how many datagrams
 *       arrived ("arrived N"), for security.sh to compare with the
 *       tx_drop_local_full counter: every datagram arrived or was counted.
 *
 *   security ahpd DEV GID_INDEX
 *       A UD QP in one PD sends through an AH of another PD of the same
 *       process: the send is refused (at post, or completed with
 *       IBV_WC_LOC_QP_OP_ERR) and nothing arrives; the same send through
 *       an AH of the QP's own PD arrives (the control).
 *
 *   security hog DEV GID_INDEX
 *       Allocates PDs until the device refuses, then AHs (in one PD), CQs,
 *       RC QPs, SRQs and MRs, each until the device refuses, and checks
 *       that each stopped at the user's quota (max_pd, max_ah, max_cq,
 *       max_qp, max_srq, max_mr of ibv_query_device) with ENOMEM; then a
 *       second device file of the same process gets no PD (the quota is
 *       the user's, not the context's). Prints "holding" and keeps
 *       everything until its standard input closes. Meanwhile
 *       tests/guest/security.sh runs the neighbour (another user) and
 *       rping (the kernel's CM must still find room).
 *
 *   security memcg DEV GID_INDEX [N]
 *       Creates N (8) CQs of max_cqe entries and checks that the memory
 *       cgroup it runs in (cgroup v2, /proc/self/cgroup) grew by at least
 *       their rings' size: ring memory is charged to the process.
 *
 *   security neighbour DEV GID_INDEX
 *       One PD, CQ, RC QP, SRQ, MR and AH: run as another user while the
 *       hog holds its quota, each must be created.
 *
 * Prints "ok - NAME" / "not ok - NAME" lines; exits non-zero on failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

#define LIVE_PDS 20

struct probe {
	struct ibv_cq *cq;
	struct ibv_qp *rx;
	struct ibv_mr *mr;
	char *buf;
	int attempts, prot_err, other, arrived;
	char leaked[64];
};

/* SENDs `kva` from a UD QP in `pd` with every L_Key index `idx` can have
 * to the probe's receiver; counts what happened. */
static void probe_pd(struct probe *p, struct ibv_pd *pd, uint64_t kva, uint32_t idx)
{
	struct ibv_ah *ah = self_ah(pd);
	struct ibv_qp *tx = ud_qp(pd, p->cq, 4);
	struct ibv_sge sge = { .addr = (uintptr_t)p->buf, .length = MSG + GRH, .lkey = p->mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;

	for (uint32_t key = idx << 8; key < (idx + 1) << 8; key++) {
		struct ibv_sge ssge = { .addr = kva, .length = MSG, .lkey = key };
		struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND },
				   *sbad;
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
		int send_status = -1, before = p->arrived;

		if (key == p->mr->lkey)
			continue;
		swr.wr.ud.ah = ah;
		swr.wr.ud.remote_qpn = p->rx->qp_num;
		swr.wr.ud.remote_qkey = QKEY;
		if (ibv_post_send(tx, &swr, &sbad))
			die("ibv_post_send");
		p->attempts++;
		while (send_status < 0 && wait_one(p->cq, &wc, 5) == 1) {
			if (wc.wr_id == 2)
				send_status = (int)wc.status;
			else if (wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS)
				p->arrived++;
		}
		if (send_status == IBV_WC_LOC_PROT_ERR)
			p->prot_err++;
		else
			p->other++;
		if (send_status == IBV_WC_SUCCESS && p->arrived == before && wait_one(p->cq, &wc, 1) == 1 &&
		    wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS)
			p->arrived++;
		if (p->arrived != before) {
			if (!p->leaked[0]) {
				for (int k = 0; k < MSG && k < (int)sizeof(p->leaked) - 1; k++) {
					char ch = p->buf[GRH + k];

					p->leaked[k] = ch >= 32 && ch < 127 ? ch : '.';
				}
				printf("security: pdwrap: L_Key %#x read kernel memory: \"%s\"\n", key, p->leaked);
			}
			if (ibv_post_recv(p->rx, &rwr, &rbad))
				die("ibv_post_recv");
		}
		/* the sender went to an error state: back to RTS */
		if (send_status != IBV_WC_SUCCESS && (ibv_modify_qp(tx, &a, IBV_QP_STATE) || tl_ud_rts(tx, QKEY, 0)))
			die("ibv_modify_qp (reset to RTS)");
	}
	ibv_destroy_qp(tx);
	ibv_destroy_ah(ah);
}

/* LIVE_PDS PDs held at once (the first processes' PDs after a handle
 * counter's wrap among them), each probed with the keys of region index
 * 1 (the MAD layer's DMA region is the device's first region). */
static void probe_live(struct probe *p, uint64_t kva, const char *when)
{
	struct ibv_pd *pds[LIVE_PDS];

	for (int i = 0; i < LIVE_PDS; i++)
		if (!(pds[i] = ibv_alloc_pd(ctx)))
			die("ibv_alloc_pd");
	printf("security: pdwrap: %d live PDs %s, each probed with L_Keys 0x100-0x1ff\n", LIVE_PDS, when);
	for (int i = 0; i < LIVE_PDS; i++)
		probe_pd(p, pds[i], kva, 1);
	for (int i = 0; i < LIVE_PDS; i++)
		ibv_dealloc_pd(pds[i]);
}

static int pdwrap(uint64_t kva, long rounds)
{
	struct probe p = { 0 };
	struct ibv_pd *rpd, *pd;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad;

	/* the receiver first, outside the live sets */
	p.buf = calloc(1, 4096);
	p.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rpd = ibv_alloc_pd(ctx);
	if (!p.buf || !p.cq || !rpd)
		die("setup");
	p.mr = ibv_reg_mr(rpd, p.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!p.mr)
		die("ibv_reg_mr");
	p.rx = ud_qp(rpd, p.cq, 4);
	sge = (struct ibv_sge){ .addr = (uintptr_t)p.buf, .length = MSG + GRH, .lkey = p.mr->lkey };
	if (ibv_post_recv(p.rx, &rwr, &rbad))
		die("ibv_post_recv");

	probe_live(&p, kva, "at once");
	for (long i = 0; i < rounds; i++) {
		if (!(pd = ibv_alloc_pd(ctx)))
			die("ibv_alloc_pd");
		if (ibv_dealloc_pd(pd))
			die("ibv_dealloc_pd");
	}
	printf("security: pdwrap: %ld PDs allocated and freed\n", rounds);
	probe_live(&p, kva, "after that");
	/* and every key of the first four region indices from one PD */
	if (!(pd = ibv_alloc_pd(ctx)))
		die("ibv_alloc_pd");
	for (uint32_t idx = 1; idx <= 4; idx++)
		probe_pd(&p, pd, kva, idx);
	ibv_dealloc_pd(pd);

	CHECK("pdwrap: every SEND naming a kernel key completes with IBV_WC_LOC_PROT_ERR",
	      p.prot_err == p.attempts, "%d of %d (%d other statuses)", p.prot_err, p.attempts, p.other);
	CHECK("pdwrap: no kernel byte arrives", p.arrived == 0, "%d datagrams arrived, the first: \"%s\"", p.arrived,
	      p.leaked);
	ibv_destroy_qp(p.rx);
	ibv_dereg_mr(p.mr);
	ibv_destroy_cq(p.cq);
	ibv_dealloc_pd(rpd);
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

/* ----------------------------------------------------------------- intrude */

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp (RC)");
	return qp;
}

static void rc_to(struct ibv_qp *qp, uint32_t dest, uint32_t rq_psn, uint32_t sq_psn, int timeout)
{
	struct tl_rc_conn c = { .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, .mtu = port.active_mtu,
				.dest_qpn = dest, .rq_psn = rq_psn, .sq_psn = sq_psn, .dgid = gid,
				.sgid_index = gid_index, .max_dest_rd_atomic = 1, .max_rd_atomic = 1,
				.timeout = timeout, .retry_cnt = 1, .rnr_retry = 1 };
	const char *f = tl_rc_connect(qp, &c);

	if (f)
		die(f);
}

static int intrude(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *xpd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192), *xbuf = calloc(1, 4096);
	struct ibv_mr *mr, *xmr;
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0), *xcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a, *b, *x;
	struct ibv_wc wc;
	const uint32_t psn = 0x123456;
	int got_b = 0, a_ok = 0, x_status = -1, evil = 0;

	if (!pd || !xpd || !buf || !xbuf || !cq || !xcq)
		die("setup");
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	xmr = ibv_reg_mr(xpd, xbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !xmr)
		die("ibv_reg_mr");
	a = rc_qp(pd, cq);
	b = rc_qp(pd, cq);
	x = rc_qp(xpd, xcq);
	rc_to(a, b->qp_num, psn, psn, 14);
	rc_to(b, a->qp_num, psn, psn, 14);
	rc_to(x, b->qp_num, psn, psn, 8);
	/* B's receive buffer at 0..63, its WRITE target at 4096.. */
	memset(buf, 0, 8192);
	{
		struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_recv(b, &rw, &rb))
			die("ibv_post_recv");
	}
	/* the intruder: a WRITE with B's real R_Key, then a SEND, both at B's
	 * expected PSN */
	memset(xbuf, 'X', 4096);
	{
		struct ibv_sge s1 = { .addr = (uintptr_t)xbuf, .length = 256, .lkey = xmr->lkey };
		struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_SEND };
		struct ibv_send_wr w1 = { .wr_id = 1, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .next = &w2 },
				   *bad;

		w1.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		w1.wr.rdma.rkey = mr->rkey;
		if (ibv_post_send(x, &w1, &bad))
			die("ibv_post_send (intruder)");
	}
	/* the intruder's requests end (never acknowledged: retry exceeded) */
	for (double end = now() + 20; now() < end && x_status < 0;) {
		if (ibv_poll_cq(xcq, 1, &wc) != 1)
			continue;
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id == 2)
			x_status = (int)wc.status;
	}
	/* the legitimate peer's SEND at the same PSN */
	{
		char msg[MSG];
		struct ibv_sge s = { .addr = (uintptr_t)msg, .length = MSG, .lkey = 0 };
		struct ibv_send_wr w = { .wr_id = 3, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_INLINE },
				   *bad;

		memset(msg, 'A', MSG);
		if (ibv_post_send(a, &w, &bad))
			die("ibv_post_send (A)");
	}
	for (double end = now() + 10; now() < end && (!got_b || !a_ok);) {
		if (ibv_poll_cq(cq, 1, &wc) != 1)
			continue;
		if (wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS)
			got_b = 1;
		if (wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS)
			a_ok = 1;
	}
	for (int i = 0; i < 8192; i++)
		evil += buf[i] == 'X';
	printf("security: intrude: intruder's requests ended with %s; B received %s; %d intruder bytes in B's "
	       "memory\n",
	       x_status < 0 ? "nothing" : ibv_wc_status_str(x_status),
	       got_b ? (buf[0] == 'A' ? "A's SEND" : "a foreign SEND") : "nothing", evil);
	CHECK("intrude: no byte of a co-located intruder's SEND or WRITE (right QPN, PSN and R_Key) lands",
	      evil == 0, "%d bytes of 'X' in the victim's memory", evil);
	CHECK("intrude: the victim receives its peer's SEND at that PSN, acknowledged", got_b && a_ok && buf[0] == 'A',
	      "received %d, acknowledged %d, first byte %#x", got_b, a_ok, (unsigned char)buf[0]);
	ibv_destroy_qp(x);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(xmr);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(xcq);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(xpd);
	return failures;
}

/* ----------------------------------------------------------------- srqkeep */

static struct ibv_qp *rc_srq_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
				       .sq_sig_all = 1,
				       .cap = { .max_send_wr = 8, .max_send_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp (RC on SRQ)");
	return qp;
}

static int srqkeep(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr;
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq;
	struct ibv_qp *a, *b, *c, *d;
	struct ibv_wc wc;
	int recvs = 0, b_recvs = 0, a_done = 0;

	if (!pd || !buf || !cq)
		die("setup");
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	srq = ibv_create_srq(pd, &sa);
	if (!mr || !srq)
		die("ibv_reg_mr/ibv_create_srq");
	for (int i = 0; i < 4; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf + 4096 + (size_t)i * 256, .length = 256, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_srq_recv(srq, &rw, &rb))
			die("ibv_post_srq_recv");
	}
	a = rc_qp(pd, cq);
	b = rc_srq_qp(pd, cq, srq);
	rc_to(a, b->qp_num, 1, 1001, 10);
	rc_to(b, a->qp_num, 1, 1, 10);
	{
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;

		if (ibv_post_send(a, &w, &bad))
			die("ibv_post_send (A)");
	}
	/* A's SEND ends (NAKed or never acknowledged) */
	for (double end = now() + 20; now() < end && !a_done;) {
		if (ibv_poll_cq(cq, 1, &wc) != 1)
			continue;
		if (wc.wr_id == 1)
			a_done = 1;
		else if (wc.wr_id >= 100)
			b_recvs++;
	}
	ibv_destroy_qp(b);
	ibv_destroy_qp(a);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		b_recvs += wc.wr_id >= 100;
	c = rc_srq_qp(pd, cq, srq);
	d = rc_qp(pd, cq);
	rc_to(c, d->qp_num, 1, 1, 14);
	rc_to(d, c->qp_num, 1, 1, 14);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 10 + (uint64_t)i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND }, *bad;

		if (ibv_post_send(d, &w, &bad))
			die("ibv_post_send (D)");
	}
	for (double end = now() + 10; now() < end && recvs < 4;)
		if (ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id >= 100 && wc.status == IBV_WC_SUCCESS)
			recvs++;
	printf("security: srqkeep: %d completions at B (the out-of-sequence QP), %d of 4 SRQ WQEs used by C\n",
	       b_recvs, recvs);
	CHECK("srqkeep: every SRQ WQE either completes or stays in the SRQ", b_recvs + recvs == 4,
	      "%d completed at B, %d used later (of 4 posted)", b_recvs, recvs);
	ibv_destroy_qp(c);
	ibv_destroy_qp(d);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------- raw packets */

/* Zeroes `pkt` (`size` bytes) and writes an IPv4 header of `ihl` bytes (NOP
 * options past 20) from and to `ia`, and a UDP header to port 4791, for an
 * IP packet of `total` bytes; returns where the BTH goes. The IP ID is the
 * test's: the kernel would pick one, and it is in the ICRC. */
static uint8_t *raw_headers(uint8_t *pkt, size_t size, int ihl, int total, struct in_addr ia)
{
	uint8_t *udp = pkt + ihl;
	const int ulen = total - ihl;

	memset(pkt, 0, size);
	pkt[0] = 0x40 | (ihl / 4);
	pkt[2] = total >> 8, pkt[3] = total & 0xff;
	pkt[4] = 0x12, pkt[5] = 0x34;
	pkt[8] = 64, pkt[9] = IPPROTO_UDP;
	memcpy(pkt + 12, &ia, 4);
	memcpy(pkt + 16, &ia, 4);
	memset(pkt + 20, 0x01, ihl - 20);
	udp[0] = 0xc0, udp[1] = 0x01, udp[2] = 4791 >> 8, udp[3] = 4791 & 0xff;
	udp[4] = ulen >> 8, udp[5] = ulen & 0xff;
	return udp + 8;
}

/* Fills the ICRC of the `total`-byte IPv4 RoCEv2 packet and sends it to
 * `ia` from a raw socket (IP_HDRINCL: the header as written). */
static void raw_send(uint8_t *pkt, int total, struct in_addr ia)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr = ia };
	uint32_t c = tl_icrc4(pkt, (size_t)total);
	int fd, one = 1;

	pkt[total - 4] = c, pkt[total - 3] = c >> 8, pkt[total - 2] = c >> 16, pkt[total - 1] = c >> 24;
	fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	if (fd < 0)
		die("raw socket (needs CAP_NET_RAW)");
	setsockopt(fd, IPPROTO_IP, IP_HDRINCL, &one, sizeof(one));
	if (sendto(fd, pkt, total, 0, (struct sockaddr *)&to, sizeof(to)) != total)
		die("sendto");
	close(fd);
}

/* ------------------------------------------------------------------ srqmid */

/* SEND_FIRST of PMTU bytes to `qpn` at `psn`, from and to `ia` (a raw
 * socket: the IP ID is in the ICRC, so the test picks it). */
static void send_first(struct in_addr ia, uint32_t qpn, uint32_t psn, int pmtu)
{
	static uint8_t pkt[20 + 8 + 12 + 4096 + 4];
	const int total = 20 + 8 + 12 + pmtu + 4;
	uint8_t *bth = raw_headers(pkt, sizeof(pkt), 20, total, ia);

	bth[0] = 0x00; /* RC SEND_FIRST */
	bth[2] = bth[3] = 0xff;
	bth[5] = qpn >> 16, bth[6] = qpn >> 8, bth[7] = qpn;
	bth[9] = psn >> 16, bth[10] = psn >> 8, bth[11] = psn;
	memset(bth + 12, 'm', pmtu);
	raw_send(pkt, total, ia);
}

static int srqmid(const char *addr, const char *mode)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 16384);
	struct ibv_mr *mr;
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq;
	struct ibv_qp *a, *b, *c, *d;
	struct ibv_wc wc;
	struct in_addr ia;
	const int pmtu = 128 << port.active_mtu;
	const uint32_t psn = 0x4321;
	int got = 0, before = 0;
	char what[96];

	if (!pd || !buf || !cq || !inet_aton(addr, &ia))
		die("setup");
	mr = ibv_reg_mr(pd, buf, 16384, IBV_ACCESS_LOCAL_WRITE);
	srq = ibv_create_srq(pd, &sa);
	if (!mr || !srq)
		die("ibv_reg_mr/ibv_create_srq");
	{
		struct ibv_sge rs = { .addr = (uintptr_t)buf + 8192, .length = 8192, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_srq_recv(srq, &rw, &rb))
			die("ibv_post_srq_recv");
	}
	a = rc_qp(pd, cq);
	b = rc_srq_qp(pd, cq, srq);
	rc_to(a, b->qp_num, 1, 1, 10);
	rc_to(b, a->qp_num, psn, 1, 10);
	send_first(ia, b->qp_num, psn, pmtu);
	for (double end = now() + 1; now() < end;)
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			before++;
	if (!strcmp(mode, "err")) {
		struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };

		if (ibv_modify_qp(b, &qa, IBV_QP_STATE))
			die("ibv_modify_qp (ERR)");
		got = wait_one(cq, &wc, 5) == 1 && wc.wr_id == 100 && wc.status == IBV_WC_WR_FLUSH_ERR;
		snprintf(what, sizeof(what), "%s", got ? "flushed" : "no flush completion of WQE 100");
		printf("security: srqmid err: %d completions before ERR; WQE 100 %s\n", before, what);
		CHECK("srqmid err: the WQE of a message in progress completes with a flush error at ERR",
		      got && !before, "%s, %d completions before", what, before);
		ibv_destroy_qp(b);
		b = NULL;
	} else {
		if (!strcmp(mode, "reset")) {
			struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RESET };

			if (ibv_modify_qp(b, &qa, IBV_QP_STATE))
				die("ibv_modify_qp (RESET)");
		} else {
			ibv_destroy_qp(b);
			b = NULL;
		}
		c = rc_srq_qp(pd, cq, srq);
		d = rc_qp(pd, cq);
		rc_to(c, d->qp_num, 1, 1, 14);
		rc_to(d, c->qp_num, 1, 1, 14);
		{
			struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
			struct ibv_send_wr w = { .wr_id = 10, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;

			memset(buf, 'd', 64);
			if (ibv_post_send(d, &w, &bad))
				die("ibv_post_send (D)");
		}
		for (double end = now() + 10; now() < end && !got;)
			if (ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 100)
				got = wc.status == IBV_WC_SUCCESS && wc.byte_len == 64 ? 1 : -1;
		snprintf(what, sizeof(what), "%s", got == 1 ? "received D's SEND" :
			 got ? ibv_wc_status_str(wc.status) : "not used in 10 s (lost)");
		printf("security: srqmid %s: %d completions before; WQE 100 %s\n", mode, before, what);
		CHECK(!strcmp(mode, "reset") ? "srqmid reset: the WQE of a message in progress stays in the SRQ"
					    : "srqmid destroy: the WQE of a message in progress stays in the SRQ",
		      got == 1 && !before && !memcmp(buf + 8192, "dddd", 4), "%s, %d completions before", what,
		      before);
		ibv_destroy_qp(c);
		ibv_destroy_qp(d);
	}
	if (b)
		ibv_destroy_qp(b);
	ibv_destroy_qp(a);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------------ resize */

/* With `grow`, the receive CQ of 4 entries is resized to 64 once the 16
 * datagrams arrived; without, the process just polls it: each poll that
 * empties it tells the kernel (the ring's waiting flag), which moves the
 * completions that waited for room in (the CQ's list of waiting QPs). */
static int resize(int grow)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(16 + 1, MSG + GRH);
	struct ibv_mr *mr;
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp *tx, *rx;
	struct ibv_ah *ah;
	struct ibv_wc wc[16];
	int sent = 0, got = 0;

	if (!pd || !buf || !scq || !rcq)
		die("setup");
	mr = ibv_reg_mr(pd, buf, (size_t)17 * (MSG + GRH), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	ah = self_ah(pd);
	tx = ud_qp(pd, scq, 16);
	{
		struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_UD,
					       .cap = { .max_send_wr = 1, .max_recv_wr = 16, .max_send_sge = 1,
							.max_recv_sge = 1 } };

		rx = ibv_create_qp(pd, &ia);
		if (!rx || tl_ud_rts(rx, QKEY, 0))
			die("ibv_create_qp (receiver)");
	}
	for (int i = 0; i < 16; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf + (size_t)(i + 1) * (MSG + GRH), .length = MSG + GRH,
				      .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_recv(rx, &rw, &rb))
			die("ibv_post_recv");
	}
	for (int i = 0; i < 16; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;

		w.wr.ud.ah = ah;
		w.wr.ud.remote_qpn = rx->qp_num;
		w.wr.ud.remote_qkey = QKEY;
		if (ibv_post_send(tx, &w, &bad))
			die("ibv_post_send");
	}
	for (double end = now() + 10; now() < end && sent < 16;) {
		int n = ibv_poll_cq(scq, 16, wc);

		sent += n > 0 ? n : 0;
	}
	usleep(200000); /* every datagram has arrived: 4 in the CQ, 12 waiting */
	if (grow && ibv_resize_cq(rcq, 64))
		die("ibv_resize_cq");
	for (double end = now() + 5; now() < end && got < 16;) {
		int n = ibv_poll_cq(rcq, 16, wc);

		got += n > 0 ? n : 0;
	}
	printf("security: %s: 16 datagrams sent (%d completed), %d receive completions after %s\n",
	       grow ? "resize" : "cqpoll", sent, got, grow ? "the resize" : "the CQ filled");
	if (grow)
		CHECK("resize: after ibv_resize_cq every waiting completion is polled, with no further traffic",
		      got == 16, "%d of 16", got);
	else
		CHECK("cqpoll: a CQ of 4 entries, 16 completions: polling alone brings every one, "
		      "with no further traffic",
		      got == 16, "%d of 16", got);
	ibv_destroy_qp(tx);
	ibv_destroy_qp(rx);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------------ ipopts */

static int ipopts(const char *addr)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *buf = calloc(1, MSG + GRH);
	struct ibv_mr *mr;
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *rx;
	struct ibv_wc wc;
	struct in_addr ia;
	uint8_t pkt[256];
	const int ihl = 40, tlen = 12 + 8 + MSG + 4, total = ihl + 8 + tlen;
	uint8_t *bth;
	int got;

	if (!pd || !buf || !cq || !inet_aton(addr, &ia))
		die("setup");
	mr = ibv_reg_mr(pd, buf, MSG + GRH, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	rx = ud_qp(pd, cq, 2);
	{
		struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = MSG + GRH, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_recv(rx, &rw, &rb))
			die("ibv_post_recv");
	}
	bth = raw_headers(pkt, sizeof(pkt), ihl, total, ia);
	bth[0] = 0x64; /* UD SEND only */
	bth[2] = bth[3] = 0xff;
	bth[5] = rx->qp_num >> 16, bth[6] = rx->qp_num >> 8, bth[7] = rx->qp_num;
	bth[12] = QKEY >> 24, bth[13] = QKEY >> 16, bth[14] = QKEY >> 8, bth[15] = QKEY & 0xff;
	bth[19] = 0x77; /* source QP */
	memset(bth + 20, 'o', MSG);
	raw_send(pkt, total, ia);
	got = wait_one(cq, &wc, 5);
	printf("security: ipopts: %s; GRH bytes 0, 20: %#x %#x\n",
	       got == 1 ? ibv_wc_status_str(wc.status) : "no completion", buf[0], buf[20]);
	CHECK("ipopts: a UD SEND with IPv4 options arrives", got == 1 && wc.status == IBV_WC_SUCCESS, "%s",
	      got == 1 ? ibv_wc_status_str(wc.status) : "no completion in 5 s");
	CHECK("ipopts: its GRH holds an IPv4 header (version 4 and the source address in its last 20 bytes)",
	      got == 1 && (wc.wc_flags & IBV_WC_GRH) && buf[20] >> 4 == 4 && !memcmp(buf + 32, &ia, 4) &&
		      buf[0] == 0,
	      "GRH[0] %#x, GRH[20] %#x", buf[0], buf[20]);
	ibv_destroy_qp(rx);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* -------------------------------------------------------------------- ahpd */

/* One SEND from a new UD QP in `pd` through `ah` to `rx`: 1 if it arrived,
 * 0 if not; *refused says whether the post or its completion failed. */
static int ahpd_send(struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_qp *rx, struct ibv_cq *rcq, struct ibv_mr *mr,
		     char *buf, int *refused)
{
	struct ibv_cq *scq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *tx;
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int arrived = 0;

	if (!scq)
		die("ibv_create_cq");
	tx = ud_qp(pd, scq, 4);
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = rx->qp_num;
	w.wr.ud.remote_qkey = QKEY;
	*refused = 0;
	if (ibv_post_send(tx, &w, &bad))
		*refused = 1;
	else if (wait_one(scq, &wc, 5) != 1 || wc.status != IBV_WC_SUCCESS)
		*refused = 1;
	for (double end = now() + 1; now() < end && !arrived;)
		if (ibv_poll_cq(rcq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS)
			arrived = 1;
	ibv_destroy_qp(tx);
	ibv_destroy_cq(scq);
	return arrived;
}

static int ahpd(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other = ibv_alloc_pd(ctx);
	char *buf = calloc(4, MSG + GRH);
	struct ibv_mr *mr;
	struct ibv_cq *rcq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *rx;
	struct ibv_ah *own, *foreign;
	int refused_own, refused_foreign, got_own, got_foreign;

	if (!pd || !other || !buf || !rcq)
		die("setup");
	mr = ibv_reg_mr(pd, buf, (size_t)4 * (MSG + GRH), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	own = self_ah(pd);
	foreign = self_ah(other);
	rx = ud_qp(pd, rcq, 4);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf + (size_t)(i + 1) * (MSG + GRH), .length = MSG + GRH,
				      .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 10 + (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_recv(rx, &rw, &rb))
			die("ibv_post_recv");
	}
	got_own = ahpd_send(pd, own, rx, rcq, mr, buf, &refused_own);
	got_foreign = ahpd_send(pd, foreign, rx, rcq, mr, buf, &refused_foreign);
	printf("security: ahpd: own PD's AH: %s, %s; other PD's AH: %s, %s\n", refused_own ? "refused" : "sent",
	       got_own ? "arrived" : "nothing arrived", refused_foreign ? "refused" : "sent",
	       got_foreign ? "arrived" : "nothing arrived");
	CHECK("ahpd: a SEND through an AH of the QP's own PD arrives (control)", got_own && !refused_own,
	      "refused %d, arrived %d", refused_own, got_own);
	CHECK("ahpd: a SEND through an AH of another PD is refused and nothing arrives",
	      refused_foreign && !got_foreign, "refused %d, arrived %d", refused_foreign, got_foreign);
	ibv_destroy_qp(rx);
	ibv_destroy_ah(own);
	ibv_destroy_ah(foreign);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(other);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------------ localq */

static int localq(void)
{
	enum { N = 64 };
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(N + 1, MSG + GRH);
	struct ibv_mr *mr;
	struct ibv_cq *scq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0);
	struct ibv_qp *tx, *rx;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int sent = 0, ok = 0, arrived = 0;

	if (!pd || !buf || !scq || !rcq)
		die("setup");
	mr = ibv_reg_mr(pd, buf, (size_t)(N + 1) * (MSG + GRH), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	ah = self_ah(pd);
	tx = ud_qp(pd, scq, N);
	rx = ud_qp(pd, rcq, N);
	for (int i = 0; i < N; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf + (size_t)(i + 1) * (MSG + GRH), .length = MSG + GRH,
				      .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rb;

		if (ibv_post_recv(rx, &rw, &rb))
			die("ibv_post_recv");
	}
	{
		/* One list, one call: one doorbell for the 64. */
		static struct ibv_send_wr w[N];
		static struct ibv_sge s[N];
		struct ibv_send_wr *bad;

		for (int i = 0; i < N; i++) {
			s[i] = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
			w[i] = (struct ibv_send_wr){ .wr_id = (uint64_t)i, .sg_list = &s[i], .num_sge = 1,
						     .opcode = IBV_WR_SEND, .next = i + 1 < N ? &w[i + 1] : NULL };
			w[i].wr.ud.ah = ah;
			w[i].wr.ud.remote_qpn = rx->qp_num;
			w[i].wr.ud.remote_qkey = QKEY;
		}
		if (ibv_post_send(tx, w, &bad))
			die("ibv_post_send");
	}
	for (double end = now() + 10; now() < end && sent < N;)
		if (ibv_poll_cq(scq, 1, &wc) == 1) {
			sent++;
			ok += wc.status == IBV_WC_SUCCESS;
		}
	/* Whatever was not dropped arrives at once (the same device); wait a
	 * second for stragglers. */
	for (double end = now() + 1; now() < end;)
		if (ibv_poll_cq(rcq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS)
			arrived++;
	printf("security: localq: %d of %d sends completed, %d successfully; arrived %d\n", sent, N, ok, arrived);
	CHECK("localq: every datagram sent into a full local queue completes successfully (UD may lose it)",
	      sent == N && ok == N, "%d completions, %d successful", sent, ok);
	CHECK("localq: some datagrams were lost to the bound", arrived < N, "all %d arrived", arrived);
	printf("arrived %d\n", arrived);
	ibv_destroy_qp(tx);
	ibv_destroy_qp(rx);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	return failures;
}

/* ------------------------------------------------------------------ memcg */

/* memory.current of this process's cgroup (cgroup v2), or -1. */
static long long memcg_current(void)
{
	char line[512], path[640];
	long long v = -1;
	FILE *f = fopen("/proc/self/cgroup", "r");

	if (!f)
		return -1;
	path[0] = 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.current", line + 3);
		}
	fclose(f);
	if (!path[0] || !(f = fopen(path, "r")))
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* CQs whose rings (shared with the process, made by the kernel) are
 * charged to the process's memory cgroup: memory.current grows by at least
 * the rings' size. */
static int memcg(int ncq)
{
	struct ibv_device_attr da;
	struct ibv_cq *cqs[64];
	long long before, after, want;
	int n = 0;

	if (ibv_query_device(ctx, &da))
		die("ibv_query_device");
	if (ncq > 64)
		ncq = 64;
	before = memcg_current();
	if (before < 0)
		die("memory.current of this process's cgroup");
	while (n < ncq && (cqs[n] = ibv_create_cq(ctx, da.max_cqe, NULL, NULL, 0)))
		n++;
	after = memcg_current();
	/* a CQE of the ring is at least 32 bytes (ibv_wc is 48) */
	want = (long long)n * da.max_cqe * 32;
	printf("security: memcg: %d CQs of %d entries; memory.current %lld -> %lld (+%lld, at least %lld expected)\n", n,
	       da.max_cqe, before, after, after - before, want);
	CHECK("memcg: the rings of a process's CQs are charged to its memory cgroup", n == ncq && after - before >= want,
	      "%d CQs, memory.current +%lld, expected at least +%lld", n, after - before, want);
	for (int i = 0; i < n; i++)
		ibv_destroy_cq(cqs[i]);
	return failures;
}

/* --------------------------------------------------------------------- hog */

/* One kind of object taken until the device refuses: how many, and the
 * errno of the refusal. */
struct take {
	const char *what;
	int max, n, err;
};

static void take_report(struct take *t)
{
	printf("security: hog: %d %ss (%s); max %d\n", t->n, t->what, strerror(t->err), t->max);
	CHECK("hog: a user's objects stop at its quota (max_*) with ENOMEM", t->n == t->max && t->err == ENOMEM,
	      "%d %ss, then %s (max %d)", t->n, t->what, strerror(t->err), t->max);
}

#define HOG_MAX 8192
#define TAKE(t, arr, expr)                                                     \
	do {                                                                   \
		errno = 0;                                                     \
		while ((t).n < HOG_MAX && ((arr)[(t).n] = (expr)))             \
			(t).n++;                                               \
		(t).err = errno;                                               \
		take_report(&(t));                                             \
	} while (0)

static int hog(void)
{
	struct ibv_device_attr da;
	static struct ibv_pd *pds[HOG_MAX];
	static struct ibv_ah *ahs[HOG_MAX];
	static struct ibv_cq *cqs[HOG_MAX];
	static struct ibv_qp *qps[HOG_MAX];
	static struct ibv_srq *srqs[HOG_MAX];
	static struct ibv_mr *mrs[HOG_MAX];
	static char buf[4096];
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1, .max_sge = 1 } };
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct take tp = { .what = "PD" }, ta = { .what = "AH" }, tc = { .what = "CQ" };
	struct take tq = { .what = "QP" }, ts = { .what = "SRQ" }, tm = { .what = "MR" };
	struct ibv_context *ctx2;
	struct ibv_pd *pd2;
	struct ibv_device **list;
	char c;

	if (ibv_query_device(ctx, &da))
		die("ibv_query_device");
	tp.max = da.max_pd;
	ta.max = da.max_ah;
	tc.max = da.max_cq;
	tq.max = da.max_qp;
	ts.max = da.max_srq;
	tm.max = da.max_mr;
	TAKE(tp, pds, ibv_alloc_pd(ctx));
	if (tp.n < 1)
		die("no PD at all");
	aa.grh.dgid = gid;
	aa.grh.sgid_index = gid_index;
	aa.grh.hop_limit = 64;
	/* every AH goes to a distinct flow label: distinct objects */
	TAKE(ta, ahs, (aa.grh.flow_label = (uint32_t)ta.n, ibv_create_ah(pds[0], &aa)));
	TAKE(tc, cqs, ibv_create_cq(ctx, 1, NULL, NULL, 0));
	if (tc.n < 1)
		die("no CQ at all");
	qa.send_cq = qa.recv_cq = cqs[0];
	TAKE(tq, qps, ibv_create_qp(pds[0], &qa));
	TAKE(ts, srqs, ibv_create_srq(pds[0], &sa));
	TAKE(tm, mrs, ibv_reg_mr(pds[0], buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));

	/* A second device file of the same user: the quota is the user's. */
	ctx2 = NULL;
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), ibv_get_device_name(ctx->device)))
			ctx2 = ctx2 ? ctx2 : ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx2)
		die("ibv_open_device (a second context)");
	errno = 0;
	pd2 = ibv_alloc_pd(ctx2);
	CHECK("hog: a second context of the same user gets no PD past the user's quota (ENOMEM)",
	      !pd2 && errno == ENOMEM, "%s", pd2 ? "a PD was allocated" : strerror(errno));
	if (pd2)
		ibv_dealloc_pd(pd2);
	ibv_close_device(ctx2);

	printf("holding\n");
	while (read(0, &c, 1) > 0)
		;
	for (int i = 0; i < tm.n; i++)
		ibv_dereg_mr(mrs[i]);
	for (int i = 0; i < tq.n; i++)
		ibv_destroy_qp(qps[i]);
	for (int i = 0; i < ts.n; i++)
		ibv_destroy_srq(srqs[i]);
	for (int i = 0; i < tc.n; i++)
		ibv_destroy_cq(cqs[i]);
	for (int i = 0; i < ta.n; i++)
		ibv_destroy_ah(ahs[i]);
	for (int i = 0; i < tp.n; i++)
		ibv_dealloc_pd(pds[i]);
	return failures;
}

/* Another user, while the hog holds its quota: one of each object. */
static int neighbour(void)
{
	static char buf[4096];
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1, .max_sge = 1 } };
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_qp *qp = NULL;
	struct ibv_srq *srq = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_ah *ah = NULL;

	if (pd && cq) {
		qa.send_cq = qa.recv_cq = cq;
		qp = ibv_create_qp(pd, &qa);
		srq = ibv_create_srq(pd, &sa);
		mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		ah = self_ah(pd);
	}
	CHECK("neighbour: another user creates a PD, CQ, QP, SRQ, MR and AH while the hog holds its quota",
	      pd && cq && qp && srq && mr && ah, "pd %p cq %p qp %p srq %p mr %p ah %p", (void *)pd, (void *)cq,
	      (void *)qp, (void *)srq, (void *)mr, (void *)ah);
	if (ah)
		ibv_destroy_ah(ah);
	if (mr)
		ibv_dereg_mr(mr);
	if (srq)
		ibv_destroy_srq(srq);
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
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
	if (!strcmp(argv[1], "ipopts") && argc >= 5)
		return ipopts(argv[4]) ? 1 : 0;
	if (!strcmp(argv[1], "resize"))
		return resize(1) ? 1 : 0;
	if (!strcmp(argv[1], "cqpoll"))
		return resize(0) ? 1 : 0;
	if (!strcmp(argv[1], "ahpd"))
		return ahpd() ? 1 : 0;
	if (!strcmp(argv[1], "localq"))
		return localq() ? 1 : 0;
	if (!strcmp(argv[1], "srqmid") && argc >= 6)
		return srqmid(argv[4], argv[5]) ? 1 : 0;
	if (!strcmp(argv[1], "srqkeep"))
		return srqkeep() ? 1 : 0;
	if (!strcmp(argv[1], "intrude"))
		return intrude() ? 1 : 0;
	if (!strcmp(argv[1], "hog"))
		return hog() ? 1 : 0;
	if (!strcmp(argv[1], "neighbour"))
		return neighbour() ? 1 : 0;
	if (!strcmp(argv[1], "memcg"))
		return memcg(argc > 4 ? atoi(argv[4]) : 8) ? 1 : 0;
	if (!strcmp(argv[1], "uaf") && argc >= 5)
		return uaf(atof(argv[4])) ? 1 : 0;
	fprintf(stderr, "security: unknown test %s\n", argv[1]);
	return 2;
}
