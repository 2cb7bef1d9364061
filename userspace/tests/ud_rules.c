// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * ud_rules: checks, through libibverbs, the UD rules of the IBTA that can be
 * seen from outside a device, and that bad verbs input is refused with the
 * errno a verbs programmer expects.
 *
 *   ud_rules DEVICE GID_INDEX
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
#include <unistd.h>
#include <arpa/inet.h>

#include "testlib.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char *buf;
static union ibv_gid gid;
static int gid_index;
static int mtu_bytes;
#define BUF_SIZE 65536

struct qp {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void die(const char *what)
{
	fprintf(stderr, "ud_rules: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct qp make_qp(uint32_t qkey, int max_send_sge, int to_state_rts)
{
	struct qp q;
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = max_send_sge, .max_recv_sge = 1 },
	};

	q.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!q.cq)
		die("ibv_create_cq");
	ia.send_cq = ia.recv_cq = q.cq;
	q.qp = ibv_create_qp(pd, &ia);
	if (!q.qp)
		die("ibv_create_qp");
	if (to_state_rts && tl_ud_rts(q.qp, qkey, 0x123))
		die("ibv_modify_qp to RTS");
	return q;
}

static int post_recv(struct qp *q, uint64_t wr_id, size_t off, size_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(q->qp, &wr, &bad);
}

static int post_send_ex(struct qp *q, struct ibv_ah *ah, uint32_t dqpn, uint32_t qkey, uint64_t wr_id,
			size_t off, size_t len, uint32_t lkey, int num_sge, int imm, struct ibv_send_wr **badp)
{
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)buf + off, .length = len, .lkey = lkey },
		{ .addr = (uintptr_t)buf + off + len, .length = 1, .lkey = lkey },
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = sge, .num_sge = num_sge,
		.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(0xfeedf00d),
		.wr.ud = { .ah = ah, .remote_qpn = dqpn, .remote_qkey = qkey },
	}, *bad = NULL;
	int ret = ibv_post_send(q->qp, &wr, &bad);

	if (badp)
		*badp = (bad == &wr) ? bad : (struct ibv_send_wr *)1;
	return ret;
}

static int post_send(struct qp *q, struct ibv_ah *ah, uint32_t dqpn, uint32_t qkey, uint64_t wr_id,
		     size_t off, size_t len)
{
	return post_send_ex(q, ah, dqpn, qkey, wr_id, off, len, mr->lkey, 1, 0, NULL);
}

/* Polls one completion within ms milliseconds; 1 found, 0 none. */
static int poll_one(struct qp *q, struct ibv_wc *wc, int ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(q->cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return 0;
	}
}

/* Polls until a completion with this opcode class shows up (sends and
 * receives share one CQ per QP here). */
static int poll_kind(struct qp *q, struct ibv_wc *wc, int recv, int ms)
{
	while (poll_one(q, wc, ms)) {
		if (!!(wc->opcode & IBV_WC_RECV) == recv)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_port_attr port;
	struct ibv_wc wc;
	int i, n, ret;

	if (argc != 3) {
		fprintf(stderr, "usage: ud_rules DEVICE GID_INDEX\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_port/gid");
	mtu_bytes = 128 << port.active_mtu;
	pd = ibv_alloc_pd(ctx);
	buf = aligned_alloc(4096, BUF_SIZE);
	if (!pd || !buf)
		die("ibv_alloc_pd");
	memset(buf, 0, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");

	struct qp a = make_qp(0x1111, 1, 1);	/* sender, own Q_Key 0x1111 */
	struct qp b = make_qp(0x2222, 1, 1);	/* receiver, Q_Key 0x2222 */
	struct qp c = make_qp(0x2222, 1, 1);	/* sender whose own Q_Key is B's */

	/* C9-/C10-: Q_Key mismatch: silently dropped, no receive WQE used, no CQE. */
	memcpy(buf + 8192, "ferroce-qkey", 12);
	CHECK("post receive on B", post_recv(&b, 77, 16384, 2048) == 0, "errno %d", errno);
	CHECK("send with a wrong Q_Key completes at the sender (UD: on hand-off)",
	      post_send(&a, ah, b.qp->qp_num, 0x3333, 1, 8192, 12) == 0 && poll_kind(&a, &wc, 0, 2000) &&
	      wc.status == IBV_WC_SUCCESS, "status %d", wc.status);
	CHECK("Q_Key mismatch: the receiver gets no completion", !poll_kind(&b, &wc, 0 + 1, 700), "got wr_id %llu",
	      (unsigned long long)wc.wr_id);
	CHECK("send with the right Q_Key", post_send(&a, ah, b.qp->qp_num, 0x2222, 2, 8192, 12) == 0, "errno %d", errno);
	ret = poll_kind(&b, &wc, 1, 2000);
	CHECK("  ...uses the receive WQE that stayed posted (same wr_id)", ret && wc.wr_id == 77 && wc.status == IBV_WC_SUCCESS,
	      "ret %d wr_id %llu status %d", ret, (unsigned long long)wc.wr_id, wc.status);
	CHECK("  ...byte_len counts the 40 GRH bytes", ret && wc.byte_len == 40 + 12, "byte_len %u", wc.byte_len);
	CHECK("  ...GRH flag set", ret && (wc.wc_flags & IBV_WC_GRH), "wc_flags 0x%x", wc.wc_flags);
	CHECK("  ...source QPN reported", ret && wc.src_qp == a.qp->qp_num, "src_qp 0x%x", wc.src_qp);
	CHECK("  ...payload after the 40 GRH bytes", !memcmp(buf + 16384 + 40, "ferroce-qkey", 12), "payload differs");
	if (!memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12))
		CHECK("  ...GRH space holds the IPv4 header in its last 20 bytes (source address = ours)",
		      (unsigned char)buf[16384 + 20] == 0x45 && !memcmp(buf + 16384 + 20 + 12, gid.raw + 12, 4),
		      "byte 20 = 0x%02x", (unsigned char)buf[16384 + 20]);
	poll_kind(&a, &wc, 0, 100);

	/* C10-: Q_Key bit 31 set in the WR: the sending QP's own Q_Key is used. */
	CHECK("post receive on B again", post_recv(&b, 78, 16384, 2048) == 0, "errno %d", errno);
	post_send(&a, ah, b.qp->qp_num, 0x80000000 | 0x2222, 3, 8192, 12);
	CHECK("bit 31 set, sender's own Q_Key 0x1111 != 0x2222: dropped", !poll_kind(&b, &wc, 1, 700), "wr_id %llu",
	      (unsigned long long)wc.wr_id);
	post_send(&c, ah, b.qp->qp_num, 0x80001234, 4, 8192, 12);
	ret = poll_kind(&b, &wc, 1, 2000);
	CHECK("bit 31 set, sender's own Q_Key 0x2222 matches: received", ret && wc.wr_id == 78, "ret %d", ret);
	poll_kind(&a, &wc, 0, 100);
	poll_kind(&c, &wc, 0, 100);

	/* Immediate data. */
	post_recv(&b, 79, 16384, 2048);
	post_send_ex(&a, ah, b.qp->qp_num, 0x2222, 5, 8192, 12, mr->lkey, 1, 1, NULL);
	ret = poll_kind(&b, &wc, 1, 2000);
	CHECK("SEND with immediate: IBV_WC_WITH_IMM and the value", ret && (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      ntohl(wc.imm_data) == 0xfeedf00d, "ret %d flags 0x%x imm 0x%x", ret, wc.wc_flags, ntohl(wc.imm_data));
	poll_kind(&a, &wc, 0, 100);

	/* Inline data: every size up to the QP's max_inline_data, from memory
	 * that is not registered at all; one byte more is refused. */
	{
		struct ibv_qp_init_attr ia = {
			.qp_type = IBV_QPT_UD, .sq_sig_all = 1, .send_cq = a.cq, .recv_cq = a.cq,
			.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1,
				 .max_inline_data = 64 },
		};
		struct ibv_qp *iq = ibv_create_qp(pd, &ia);
		unsigned int cap = ia.cap.max_inline_data, sz, good = 0;
		char stackbuf[1024];

		CHECK("QP with max_inline_data 64 created, cap reported", iq && cap >= 64, "qp %p cap %u",
		      (void *)iq, cap);
		if (iq && !tl_ud_rts(iq, 0x1111, 0x123)) {
			for (sz = 0; sz <= cap && sz < sizeof(stackbuf); sz++) {
				struct ibv_sge sge = { .addr = (uintptr_t)stackbuf, .length = sz, .lkey = 0 };
				struct ibv_send_wr wr = {
					.wr_id = 1000 + sz, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
					.wr.ud = { .ah = ah, .remote_qpn = b.qp->qp_num, .remote_qkey = 0x2222 },
				}, *bad;

				for (unsigned int k = 0; k < sz; k++)
					stackbuf[k] = (char)(sz * 7 + k);
				memset(buf + 16384, 0, 40 + sz + 16);
				post_recv(&b, 2000 + sz, 16384, 2048);
				if (ibv_post_send(iq, &wr, &bad))
					break;
				memset(stackbuf, 0xee, sizeof(stackbuf)); /* copied at post time */
				if (!poll_kind(&b, &wc, 1, 2000) || wc.wr_id != 2000 + sz || wc.byte_len != 40 + sz)
					break;
				for (unsigned int k = 0; k < sz; k++)
					if (buf[16384 + 40 + k] != (char)(sz * 7 + k))
						goto inline_done;
				good++;
				while (poll_one(&a, &wc, 0))
					;
			}
inline_done:
			CHECK("IBV_SEND_INLINE of every size 0..max_inline_data delivered intact (copied at post time)",
			      good == cap + 1, "%u of %u sizes", good, cap + 1);
			struct ibv_sge sge = { .addr = (uintptr_t)stackbuf, .length = cap + 1, .lkey = 0 };
			struct ibv_send_wr wr = {
				.wr_id = 3000, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				.wr.ud = { .ah = ah, .remote_qpn = b.qp->qp_num, .remote_qkey = 0x2222 },
			}, *bad;
			ret = ibv_post_send(iq, &wr, &bad);
			CHECK("inline request above max_inline_data refused with EINVAL", ret == EINVAL, "ret %d", ret);
		}
		if (iq)
			ibv_destroy_qp(iq);
		while (poll_one(&a, &wc, 50))
			;
	}

	/* Zero-length and exactly-MTU messages. */
	post_recv(&b, 80, 16384, 8192);
	post_send(&a, ah, b.qp->qp_num, 0x2222, 6, 8192, 0);
	ret = poll_kind(&b, &wc, 1, 2000);
	CHECK("zero-length SEND received (byte_len 40)", ret && wc.byte_len == 40, "ret %d len %u", ret, wc.byte_len);
	post_recv(&b, 81, 16384, 8192);
	CHECK("SEND of exactly the path MTU accepted", post_send(&a, ah, b.qp->qp_num, 0x2222, 7, 0, mtu_bytes) == 0,
	      "errno %d", errno);
	ret = poll_kind(&b, &wc, 1, 2000);
	CHECK("  ...received", ret && wc.byte_len == 40 + (unsigned)mtu_bytes, "ret %d len %u", ret, wc.byte_len);
	while (poll_one(&a, &wc, 50))
		;

	/* Length error at the receiver: message larger than the posted buffer. */
	post_recv(&b, 82, 16384, 40 + 8);
	post_send(&a, ah, b.qp->qp_num, 0x2222, 8, 0, 64);
	CHECK("message longer than the receive buffer: silently dropped", !poll_kind(&b, &wc, 1, 700), "got status %d",
	      wc.status);
	poll_kind(&a, &wc, 0, 100);

	/* Bad verbs input. */
	struct ibv_send_wr *bad;
	errno = 0;
	ret = post_send_ex(&a, ah, b.qp->qp_num, 0x2222, 9, 0, mtu_bytes + 1, mr->lkey, 1, 0, &bad);
	CHECK("message longer than the path MTU refused at post time with EINVAL", ret == EINVAL && bad != NULL,
	      "ret %d", ret);
	ret = post_send_ex(&a, ah, b.qp->qp_num, 0x2222, 10, 0, 8, mr->lkey, 2, 0, &bad);
	CHECK("num_sge above the QP's max_send_sge refused with EINVAL", ret == EINVAL, "ret %d", ret);
	struct qp r = make_qp(0x2222, 1, 0);
	ret = post_send(&r, ah, b.qp->qp_num, 0x2222, 11, 0, 8);
	CHECK("post_send on a QP in RESET refused with EINVAL", ret == EINVAL, "ret %d", ret);
	ret = ibv_destroy_cq(b.cq);
	CHECK("destroying a CQ still used by a QP refused with EBUSY", ret == EBUSY, "ret %d", ret);
	ret = post_send_ex(&a, ah, b.qp->qp_num, 0x2222, 12, 0, 8, mr->lkey ^ 0x100, 1, 0, NULL);
	CHECK("invalid L_Key: post accepted", ret == 0, "ret %d", ret);
	ret = poll_kind(&a, &wc, 0, 2000);
	CHECK("  ...completes with IBV_WC_LOC_PROT_ERR", ret && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 12,
	      "ret %d status %d", ret, wc.status);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qia);
	CHECK("  ...and the UD QP is in SQE (class B error, send side)", qa.qp_state == IBV_QPS_SQE, "state %d",
	      qa.qp_state);

	/* Solicited-only arming (IBTA 11.4.2.2): a CQ armed for solicited
	 * completions raises no event for a message without the SE bit, and
	 * one for a message with it. */
	{
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *scq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
		struct ibv_qp_init_attr sia = {
			.qp_type = IBV_QPT_UD, .sq_sig_all = 1, .send_cq = scq, .recv_cq = scq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct qp s = { .cq = scq, .qp = scq ? ibv_create_qp(pd, &sia) : NULL };
		struct qp t = make_qp(0x2222, 1, 1);
		struct ibv_sge sg = { .addr = (uintptr_t)buf + 8192, .length = 12, .lkey = mr->lkey };
		struct ibv_send_wr sw = {
			.wr_id = 21, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
		}, *sbad;
		struct pollfd pfd;
		struct ibv_cq *ecq = NULL;
		void *ectx;
		int got;

		if (!s.qp || tl_ud_rts(s.qp, 0x2222, 0x124))
			die("solicited: ibv_create_qp/modify");
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = s.qp->qp_num;
		sw.wr.ud.remote_qkey = 0x2222;
		post_recv(&s, 90, 20480, 2048);
		post_recv(&s, 91, 22528, 2048);
		CHECK("CQ armed for solicited completions only", ibv_req_notify_cq(scq, 1) == 0, "errno %d", errno);
		post_send(&t, ah, s.qp->qp_num, 0x2222, 20, 8192, 12);
		pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
		CHECK("  ...a SEND without SE raises no event", poll(&pfd, 1, 700) == 0, "an event came");
		CHECK("  ...post a SEND with SE", ibv_post_send(t.qp, &sw, &sbad) == 0, "errno %d", errno);
		got = poll(&pfd, 1, 3000) == 1 && ibv_get_cq_event(ch, &ecq, &ectx) == 0;
		CHECK("  ...which raises the event", got && ecq == scq, "got %d", got);
		if (got)
			ibv_ack_cq_events(ecq, 1);
		ret = poll_kind(&s, &wc, 1, 2000) && wc.wr_id == 90;
		ret = ret && poll_kind(&s, &wc, 1, 2000) && wc.wr_id == 91;
		CHECK("  ...and both receives completed, in order", ret, "wr_id %llu", (unsigned long long)wc.wr_id);
		poll_kind(&t, &wc, 0, 100);
		poll_kind(&t, &wc, 0, 100);
		ibv_destroy_qp(t.qp); ibv_destroy_cq(t.cq);
		ibv_destroy_qp(s.qp); ibv_destroy_cq(scq);
		ibv_destroy_comp_channel(ch);
	}

	/*
	 * Unsignaled sends, then the AH and the QP destroyed at once (rdma_cm's
	 * mckey does so): every datagram still arrives. A NIC copies the AH
	 * into the WQE at post time; here the kernel may take the requests
	 * from the ring after the post returned, and may be sending some when
	 * the destroy comes. 48 rounds of 12, every other one to a multicast
	 * group.
	 */
	{
		enum { ROUNDS = 48, PER = 12 };
		int lost = 0, bad = 0, posted = 0, r_i, k;
		struct qp rx = make_qp(0x4444, 1, 1);
		/* Odd rounds send to a multicast group rx is attached to: those
		 * datagrams go through the IP stack (sent after the kernel's
		 * sender dropped its lock), the others inside the device. */
		union ibv_gid group = { .raw = { 0xff, 0x0e, [13] = 1, [14] = 3, [15] = 7 } };
		struct ibv_ah_attr ga = aa;

		if (!memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12)) {
			memset(group.raw, 0, 16);
			group.raw[10] = group.raw[11] = 0xff;
			group.raw[12] = 239; group.raw[13] = 1; group.raw[14] = 3; group.raw[15] = 7;
		}
		ga.grh.dgid = group;
		ga.grh.hop_limit = 8;
		if (ibv_attach_mcast(rx.qp, &group, 0))
			die("ibv_attach_mcast");
		struct ibv_qp_init_attr sa = {
			.qp_type = IBV_QPT_UD, .sq_sig_all = 0,
			.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		};

		for (r_i = 0; r_i < ROUNDS; r_i++) {
			struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
			struct ibv_qp *sq;
			struct ibv_ah *sah = ibv_create_ah(pd, r_i % 2 ? &ga : &aa);
			uint32_t to = r_i % 2 ? 0xffffff : rx.qp->qp_num;
			int pause = (r_i / 2) % 8 * 25;

			if (!scq || !sah)
				die("ibv_create_cq/ah");
			sa.send_cq = sa.recv_cq = scq;
			sq = ibv_create_qp(pd, &sa);
			if (!sq || tl_ud_rts(sq, 0x4444, 0x123))
				die("ibv_create_qp (unsignaled sender)");
			for (k = 0; k < PER; k++)
				if (post_recv(&rx, 1000 + k, 24576 + k * 512, 512))
					die("ibv_post_recv");
			for (k = 0; k < PER; k++) {
				struct ibv_sge sge = { .addr = (uintptr_t)buf + 8192 + k, .length = 16, .lkey = mr->lkey };
				struct ibv_send_wr wr = {
					.wr_id = k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					.wr.ud = { .ah = sah, .remote_qpn = to, .remote_qkey = 0x4444 },
				}, *sbad;

				posted += ibv_post_send(sq, &wr, &sbad) == 0;
				/* Half-way, and before the destroy, a pause of
				 * 0 to 175 us (mckey leaves its group there):
				 * the kernel's sender may be mid-batch when
				 * the destroy comes. */
				if (k == PER / 2 && pause)
					usleep(pause);
			}
			if (pause)
				usleep(pause);
			if (ibv_destroy_ah(sah) || ibv_destroy_qp(sq) || ibv_destroy_cq(scq))
				die("destroy the unsignaled sender");
			for (k = 0; k < PER; k++) {
				if (!poll_kind(&rx, &wc, 1, 2000)) {
					lost += PER - k;
					break;
				}
				bad += wc.status != IBV_WC_SUCCESS || wc.wr_id != (uint64_t)(1000 + k) ||
				       memcmp(buf + 24576 + k * 512 + 40, buf + 8192 + k, 16);
			}
			if (lost)
				break;
		}
		CHECK("unsignaled UD sends, AH and QP destroyed right after the posts: all posted",
		      posted == (r_i < ROUNDS ? r_i + 1 : ROUNDS) * PER, "%d posted", posted);
		CHECK("  ...every datagram arrives, in order, intact (48 rounds of 12)", !lost && !bad,
		      "round %d: %d lost, %d wrong", r_i, lost, bad);
		ibv_detach_mcast(rx.qp, &group, 0);
		ibv_destroy_qp(rx.qp); ibv_destroy_cq(rx.cq);
	}

	union ibv_gid nowhere;
	memset(&nowhere, 0, sizeof(nowhere));
	nowhere.raw[0] = 0xfd; nowhere.raw[1] = 0x99; nowhere.raw[15] = 1;
	if (!memcmp(gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12)) {
		nowhere.raw[0] = 0;
		nowhere.raw[1] = 0;
		nowhere.raw[10] = nowhere.raw[11] = 0xff;
		nowhere.raw[12] = 198; nowhere.raw[13] = 51; nowhere.raw[14] = 100; nowhere.raw[15] = 1;
	}
	struct ibv_ah_attr ua = aa;
	ua.grh.dgid = nowhere;
	errno = 0;
	struct ibv_ah *uah = ibv_create_ah(pd, &ua);
	CHECK("AH to an unreachable GID refused with an errno", !uah && errno != 0, "ah %p errno %d", (void *)uah, errno);

	ibv_destroy_qp(r.qp); ibv_destroy_cq(r.cq);
	ibv_destroy_qp(a.qp); ibv_destroy_cq(a.cq);
	ibv_destroy_qp(b.qp); ibv_destroy_cq(b.cq);
	ibv_destroy_qp(c.qp); ibv_destroy_cq(c.cq);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ud_rules: %d failed\n", failures);
	return failures ? 1 : 0;
}
