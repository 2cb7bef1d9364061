// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * mcast: UD multicast on one device, through libibverbs (IBTA 10.5.1 and
 * 11.3, Attach/Detach QP to Multicast Group; RoCEv2 multicast GIDs are IP
 * multicast addresses).
 *
 *   mcast DEVICE GID_INDEX GROUP
 *   mcast DEVICE GID_INDEX GROUP recv|send
 *
 * GROUP is an IPv4 or IPv6 multicast address; GID_INDEX the source GID of
 * the same family. A sender and three receivers: two attached to the group
 * get every datagram sent to it (with the sender's QPN and a GRH naming the
 * group), the third none; after a detach, the detached QP gets none. A
 * unicast QPN sent to the group, and the multicast QPN sent to a unicast
 * GID, reach nobody. Then the verbs errors (EINVAL for a QP that is not UD,
 * a unicast GID or a detach of a QP that is not attached; ENOMEM past
 * max_mcast_qp_attach; EBUSY for a destroy while attached), a process that
 * exits with its QPs attached, and a group made anew after its last QP left.
 *
 * With recv or send, one side of a test across devices (another driver's
 * included): the receiver attaches a QP, prints "joined GROUP" and waits
 * up to 60 s for N datagrams; the sender, started after that line, sends
 * them and waits for their completions (mckey's sender does not, and a
 * driver that sends from a work item, as rdma_rxe does, may lose them when
 * the sender destroys its QP at once).
 *
 * Prints one "ok - NAME" or "not ok - NAME" line per check (counted by
 * tools/check); exits non-zero when any check failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "testlib.h"

#define QKEY 0x1c0ffee
#define MCAST_QPN 0xffffffu
#define ANY_QPN 0xffffffffu /* receive_round: from any sender */
#define N 8
#define LEN 256
#define SLOT 1024 /* one receive buffer: GRH + payload, with room */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_cq *scq;
static uint8_t *buf;
static int gid_index;
static int v6;

struct rq {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int slot; /* first receive buffer */
};

static void die(const char *what)
{
	fprintf(stderr, "mcast: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* A verbs call's error: libibverbs returns it, or -1 with errno. */
static int err_of(int ret)
{
	return ret == -1 ? errno : ret;
}

static struct ibv_qp *make_qp(struct ibv_cq *cq, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = type,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 2 * N, .max_recv_wr = 4 * N, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	if (type == IBV_QPT_UD && tl_ud_rts(qp, QKEY, 0))
		die("ibv_modify_qp to RTS");
	return qp;
}

static struct rq make_rq(int slot)
{
	struct rq r = { .slot = slot };

	r.cq = ibv_create_cq(ctx, 8 * N, NULL, NULL, 0);
	if (!r.cq)
		die("ibv_create_cq");
	r.qp = make_qp(r.cq, IBV_QPT_UD);
	for (int i = 0; i < 4 * N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + (size_t)(slot + i) * SLOT, .length = SLOT, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)(slot + i), .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(r.qp, &wr, &bad))
			die("ibv_post_recv");
	}
	return r;
}

static void destroy_rq(struct rq *r)
{
	if (ibv_destroy_qp(r->qp) || ibv_destroy_cq(r->cq))
		die("destroy");
}

/* The payload of datagram `i` of round `round`. */
static uint8_t pattern(int round, int i, int k)
{
	return (uint8_t)(round * 31 + i * 7 + k);
}

/* Sends N datagrams of round `round` from `s` through `ah` to `dqpn`;
 * returns how many completed successfully. */
static int send_round(struct ibv_qp *s, struct ibv_ah *ah, uint32_t dqpn, int round)
{
	int ok = 0, done = 0;
	struct timespec t0, t;

	for (int i = 0; i < N; i++) {
		uint8_t *p = buf + (size_t)i * SLOT;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = LEN, .lkey = mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.wr.ud = { .ah = ah, .remote_qpn = dqpn, .remote_qkey = QKEY },
		}, *bad;

		for (int k = 0; k < LEN; k++)
			p[k] = pattern(round, i, k);
		if (ibv_post_send(s, &wr, &bad))
			die("ibv_post_send");
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (done < N) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(scq, 1, &wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n) {
			done++;
			ok += wc.status == IBV_WC_SUCCESS;
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			break;
	}
	return ok;
}

/*
 * Polls `r` for `ms` milliseconds or until N datagrams came; counts those
 * that are round `round`'s, intact, from QPN `src` with a GRH whose
 * destination is `group`. *other: completions that are not.
 */
static int receive_round(struct rq *r, int round, uint32_t src, const union ibv_gid *group, int ms, int *other)
{
	int good = 0;
	struct timespec t0, t;

	*other = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(r->cq, 1, &wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n) {
			const uint8_t *g = buf + wc.wr_id * SLOT, *p = g + 40;
			/* RoCEv2: the GRH is the IPv6 header, or an IPv4 header
			 * in its last 20 bytes. */
			int dst_ok = v6 ? !memcmp(g + 24, group->raw, 16) : !memcmp(g + 36, group->raw + 12, 4);
			int ok = wc.status == IBV_WC_SUCCESS && (src == ANY_QPN || wc.src_qp == src) &&
				 (wc.wc_flags & IBV_WC_GRH) &&
				 wc.byte_len == LEN + 40 && dst_ok;
			int i = -1;

			for (int k = 0; ok && k < N && i < 0; k++)
				if (p[0] == pattern(round, k, 0) && p[LEN - 1] == pattern(round, k, LEN - 1))
					i = k;
			for (int k = 0; ok && i >= 0 && k < LEN; k++)
				ok = p[k] == pattern(round, i, k);
			if (ok && i >= 0)
				good++;
			else
				(*other)++;
			/* the buffer goes back */
			struct ibv_sge sge = { .addr = (uintptr_t)g, .length = SLOT, .lkey = mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = wc.wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

			if (ibv_post_recv(r->qp, &wr, &bad))
				die("ibv_post_recv");
			if (good == N && ms > 0)
				ms = 100; /* anything more (a duplicate) shows soon */
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return good;
	}
}

int main(int argc, char **argv)
{
	union ibv_gid group = { 0 }, own;
	struct ibv_device_attr attr;
	struct in_addr a4;
	struct ibv_qp *s;
	struct ibv_ah *ah, *ah_uni;
	struct rq r[3];
	int good, other, ret;

	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: mcast DEVICE GID_INDEX GROUP [recv|send] (GROUP: an IPv4 or IPv6 multicast address)\n");
		return 2;
	}
	gid_index = atoi(argv[2]);
	if (inet_pton(AF_INET, argv[3], &a4) == 1) {
		group.raw[10] = group.raw[11] = 0xff;
		memcpy(group.raw + 12, &a4, 4);
	} else if (inet_pton(AF_INET6, argv[3], group.raw) == 1) {
		v6 = 1;
	} else {
		fprintf(stderr, "mcast: %s is not an IP address\n", argv[3]);
		return 2;
	}
	ctx = tl_open_device(argv[1]);
	if (!ctx)
		die(argv[1]);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(128, SLOT);
	if (!pd || !buf)
		die("ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, 128 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	scq = ibv_create_cq(ctx, 4 * N, NULL, NULL, 0);
	if (!mr || !scq || ibv_query_gid(ctx, 1, gid_index, &own))
		die("ibv_reg_mr / ibv_create_cq / ibv_query_gid");

	if (ibv_query_device(ctx, &attr))
		die("ibv_query_device");
	if (argc == 5 && !strcmp(argv[4], "recv")) {
		/* one side of a test across devices: attach a QP, say so, and
		 * wait for the sender's N datagrams */
		struct rq r0 = make_rq(8);

		ret = ibv_attach_mcast(r0.qp, &group, 0);
		CHECK("receiver: attach a UD QP to the group", ret == 0, "%s", strerror(err_of(ret)));
		printf("joined %s\n", argv[3]);
		fflush(stdout);
		good = receive_round(&r0, 1, ANY_QPN, &group, 60000, &other);
		CHECK("receiver: every datagram sent to the group arrives once, intact, with a GRH naming the group",
		      good == N && other == 0, "%d good, %d other of %d", good, other, N);
		ret = ibv_detach_mcast(r0.qp, &group, 0);
		CHECK("receiver: detach", ret == 0, "%s", strerror(err_of(ret)));
		return failures ? 1 : 0;
	}
	if (argc == 5 && !strcmp(argv[4], "send")) {
		struct ibv_ah_attr sa = {
			.is_global = 1,
			.port_num = 1,
			.grh = { .dgid = group, .sgid_index = (uint8_t)gid_index, .hop_limit = 8 },
		};

		s = make_qp(scq, IBV_QPT_UD);
		ah = ibv_create_ah(pd, &sa);
		if (!ah)
			die("ibv_create_ah (multicast GID)");
		int sent = send_round(s, ah, MCAST_QPN, 1);
		CHECK("sender: N datagrams to the group's multicast QPN complete", sent == N, "%d of %d", sent, N);
		return failures ? 1 : 0;
	}
	if (argc == 5) {
		/* the child of the exit check: attach, then exit with the QPs
		 * attached and every object left for the kernel to clean up */
		union ibv_gid full = group;

		full.raw[15] ^= 0x55;
		for (int i = 0; i < attr.max_mcast_qp_attach; i++) {
			struct ibv_qp *qp = make_qp(scq, IBV_QPT_UD);

			/* the first under a second LID too (two attachments) */
			if (ibv_attach_mcast(qp, &full, 0) || (!i && ibv_attach_mcast(qp, &full, 0xc001)))
				die("ibv_attach_mcast (child)");
		}
		_exit(0);
	}
	CHECK("query_device: max_mcast_grp, max_mcast_qp_attach and max_total_mcast_qp_attach are offered",
	      attr.max_mcast_grp > 0 && attr.max_mcast_qp_attach > 0 &&
		      attr.max_total_mcast_qp_attach >= attr.max_mcast_qp_attach,
	      "%d %d %d", attr.max_mcast_grp, attr.max_mcast_qp_attach, attr.max_total_mcast_qp_attach);

	s = make_qp(scq, IBV_QPT_UD);
	for (int i = 0; i < 3; i++)
		r[i] = make_rq(8 + i * 4 * N);
	ret = ibv_attach_mcast(r[0].qp, &group, 0);
	CHECK("attach a UD QP to the group", ret == 0, "%s", strerror(err_of(ret)));
	ret = ibv_attach_mcast(r[1].qp, &group, 0);
	CHECK("attach a second UD QP to the group", ret == 0, "%s", strerror(err_of(ret)));
	ret = ibv_attach_mcast(r[0].qp, &group, 0);
	CHECK("attaching a QP twice is no error", ret == 0, "%s", strerror(err_of(ret)));

	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = group, .sgid_index = (uint8_t)gid_index, .hop_limit = 1 },
	};
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah (multicast GID)");
	aa.grh.dgid = own;
	ah_uni = ibv_create_ah(pd, &aa);
	if (!ah_uni)
		die("ibv_create_ah (own GID)");

	int sent = send_round(s, ah, MCAST_QPN, 1);
	CHECK("N datagrams to the multicast QPN complete on the sender", sent == N, "%d of %d", sent, N);
	for (int i = 0; i < 2; i++) {
		good = receive_round(&r[i], 1, s->qp_num, &group, 3000, &other);
		CHECK(i ? "...the second attached QP receives each once" :
			  "...the first attached QP receives each once, from the sender's QPN, with a GRH naming the group",
		      good == N && other == 0, "%d good, %d other of %d", good, other, N);
	}
	good = receive_round(&r[2], 1, s->qp_num, &group, 300, &other);
	CHECK("...a QP that is not attached receives none", good + other == 0, "%d", good + other);

	ret = ibv_detach_mcast(r[1].qp, &group, 0);
	CHECK("detach the second QP", ret == 0, "%s", strerror(err_of(ret)));
	send_round(s, ah, MCAST_QPN, 2);
	good = receive_round(&r[0], 2, s->qp_num, &group, 3000, &other);
	CHECK("after the detach, the QP still attached receives every datagram", good == N && other == 0,
	      "%d good, %d other", good, other);
	good = receive_round(&r[1], 2, s->qp_num, &group, 300, &other);
	CHECK("...and the detached QP none", good + other == 0, "%d", good + other);

	/* IBTA 9.6.1.5 / 10.5.1: a multicast packet names QP 0xFFFFFF, and
	 * QP 0xFFFFFF is for multicast packets only. */
	send_round(s, ah, r[0].qp->qp_num, 3);
	good = receive_round(&r[0], 3, s->qp_num, &group, 300, &other);
	CHECK("a datagram to the group with a unicast destination QPN is dropped", good + other == 0, "%d",
	      good + other);
	send_round(s, ah_uni, MCAST_QPN, 4);
	good = receive_round(&r[0], 4, s->qp_num, &own, 300, &other);
	CHECK("a datagram to a unicast GID with the multicast QPN is dropped", good + other == 0, "%d",
	      good + other);

	ret = ibv_detach_mcast(r[1].qp, &group, 0);
	CHECK("detaching a QP that is not attached: EINVAL", err_of(ret) == EINVAL, "%s", strerror(err_of(ret)));
	ret = ibv_attach_mcast(r[0].qp, &own, 0);
	CHECK("attaching to a unicast GID: EINVAL", err_of(ret) == EINVAL, "%s", strerror(err_of(ret)));
	struct ibv_qp *rc = make_qp(scq, IBV_QPT_RC);
	ret = ibv_attach_mcast(rc, &group, 0);
	CHECK("attaching an RC QP: EINVAL", err_of(ret) == EINVAL, "%s", strerror(err_of(ret)));
	ibv_destroy_qp(rc);

	/* max_mcast_qp_attach QPs in one group, and one more. */
	union ibv_gid full = group;
	full.raw[15] ^= 0x55;
	int max = attr.max_mcast_qp_attach, n = 0;
	struct ibv_qp **many = calloc((size_t)max + 1, sizeof(*many));

	if (!many)
		die("calloc");
	for (int i = 0; i <= max; i++)
		many[i] = make_qp(scq, IBV_QPT_UD);
	while (n < max && !ibv_attach_mcast(many[n], &full, 0))
		n++;
	ret = ibv_attach_mcast(many[max], &full, 0);
	CHECK("max_mcast_qp_attach QPs attach to one group; one more: ENOMEM", n == max && err_of(ret) == ENOMEM,
	      "%d of %d attached; then %s", n, max, strerror(err_of(ret)));
	ret = ibv_destroy_qp(many[0]);
	CHECK("destroying a QP that is attached: EBUSY (the verbs say detach first)", err_of(ret) == EBUSY, "%s",
	      ret ? strerror(err_of(ret)) : "destroyed");
	for (int i = 0; i < n; i++)
		if (ibv_detach_mcast(many[i], &full, 0))
			die("ibv_detach_mcast");
	for (int i = 0; i <= max; i++)
		if (ibv_destroy_qp(many[i]))
			die("ibv_destroy_qp");

	/* One GID under two LIDs: the RDMA core counts two attachments (RoCE
	 * ignores the LID), each with its detach, and only then may the QP go. */
	struct ibv_qp *two = make_qp(scq, IBV_QPT_UD);
	int a1 = ibv_attach_mcast(two, &full, 0), a2 = ibv_attach_mcast(two, &full, 0xc001);
	int d1 = ibv_detach_mcast(two, &full, 0), d2 = ibv_detach_mcast(two, &full, 0xc001);
	int x = ibv_destroy_qp(two);

	CHECK("a QP attached to one group under two LIDs detaches twice, then is destroyed",
	      !a1 && !a2 && !d1 && !d2 && !x, "attach %d %d, detach %d %d, destroy %s", a1, a2, d1, d2,
	      x ? strerror(err_of(x)) : "ok");

	/* A process that exits with its QPs attached leaves the group to the
	 * others: its QPs are detached on the way out. */
	int status = -1;
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", argv[0], argv[1], argv[2], argv[3], "attach-and-exit", (char *)NULL);
		_exit(3);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		die("fork");
	n = 0;
	for (int i = 0; i < max; i++)
		many[i] = make_qp(scq, IBV_QPT_UD);
	while (n < max && !ibv_attach_mcast(many[n], &full, 0))
		n++;
	CHECK("after a process exits with max_mcast_qp_attach QPs attached (one under two LIDs), the group takes as many again",
	      WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == max, "child status %#x, %d of %d attached",
	      status, n, max);
	for (int i = 0; i < n; i++)
		ibv_detach_mcast(many[i], &full, 0);
	for (int i = 0; i < max; i++)
		ibv_destroy_qp(many[i]);
	free(many);

	/* The group's last QP leaves it (the device leaves the IP group), and
	 * a QP that attaches afterwards makes it again and receives. */
	ret = ibv_detach_mcast(r[0].qp, &group, 0);
	destroy_rq(&r[0]);
	int ret2 = ibv_attach_mcast(r[2].qp, &group, 0);
	send_round(s, ah, MCAST_QPN, 5);
	good = receive_round(&r[2], 5, s->qp_num, &group, 3000, &other);
	CHECK("after the group's last QP detached, a QP attaches anew and receives every datagram",
	      ret == 0 && ret2 == 0 && good == N && other == 0, "detach %s, attach %s, %d good, %d other",
	      strerror(err_of(ret)), strerror(err_of(ret2)), good, other);
	ret = ibv_detach_mcast(r[2].qp, &group, 0);
	CHECK("...and detaches", ret == 0, "%s", strerror(err_of(ret)));

	ibv_destroy_ah(ah);
	ibv_destroy_ah(ah_uni);
	destroy_rq(&r[1]);
	destroy_rq(&r[2]);
	ibv_destroy_qp(s);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return failures ? 1 : 0;
}
