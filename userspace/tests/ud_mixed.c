// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * ud_mixed: one UD QP whose sends go, in random bursts, to a QP of its own
 * device and to a QP of another device across the network. ferroce delivers
 * a UD QP's packets for its own device without a socket buffer and the others
 * through the IP stack, choosing per packet: every send must complete, and
 * each receiver must get exactly its messages, intact.
 *
 *   ud_mixed DEVICE_A GID_INDEX_A DEVICE_B GID_INDEX_B [BURSTS]
 *
 * The sender and the local receiver are on DEVICE_A, the remote receiver on
 * DEVICE_B. Prints one "ok - NAME" or "not ok - NAME" line per check (counted
 * by tools/check); exits non-zero when any check failed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testlib.h"

#define MSG 256
#define GRH 40
#define BURST 8
#define RECVS 64
#define QKEY 0x11u

static void die(const char *what)
{
	fprintf(stderr, "ud_mixed: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* A device with its PD, one buffer (send area, then receive slots) and MR. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
	int gid_index;
};

struct rq {
	struct side *s;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	unsigned got;		/* messages received so far */
	unsigned char *seen;	/* per message number: received */
	unsigned char tag;	/* this receiver in `dest` */
};

/* Per message number: the receiver it was sent to (its tag). */
static unsigned char *dest;

static void open_side(struct side *s, const char *name, int gid_index)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	size_t len = (size_t)(BURST + RECVS) * (MSG + GRH);

	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			s->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!s->ctx)
		die(name);
	s->gid_index = gid_index;
	if (ibv_query_gid(s->ctx, 1, gid_index, &s->gid))
		die("ibv_query_gid");
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = calloc(1, len);
	if (!s->pd || !s->buf)
		die("ibv_alloc_pd");
	s->mr = ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr)
		die("ibv_reg_mr");
}

static struct ibv_qp *ud_qp(struct side *s, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = BURST, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	if (tl_ud_rts(qp, QKEY, 0))
		die("ibv_modify_qp to RTS");
	return qp;
}

static void post_recv(struct rq *r, unsigned slot)
{
	char *at = r->s->buf + (size_t)(BURST + slot) * (MSG + GRH);
	struct ibv_sge sge = { .addr = (uintptr_t)at, .length = MSG + GRH, .lkey = r->s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(r->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void make_rq(struct rq *r, struct side *s, unsigned total, unsigned char tag)
{
	r->s = s;
	r->tag = tag;
	r->cq = ibv_create_cq(s->ctx, RECVS, NULL, NULL, 0);
	if (!r->cq)
		die("ibv_create_cq");
	r->qp = ud_qp(s, r->cq);
	r->seen = calloc(total, 1);
	if (!r->seen)
		die("calloc");
	for (unsigned i = 0; i < RECVS; i++)
		post_recv(r, i);
}

static struct ibv_ah *ah_to(struct side *from, struct side *to)
{
	struct ibv_ah_attr a = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = to->gid, .sgid_index = from->gid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(from->pd, &a);

	if (!ah)
		die("ibv_create_ah");
	return ah;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/*
 * Takes the receive completions there are; counts bad ones. A message
 * carries its number (4 bytes) and then that number's byte pattern.
 */
static void reap(struct rq *r, unsigned total, unsigned *bad, unsigned *dup)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(r->cq, 16, wc);

	if (n < 0)
		die("ibv_poll_cq");
	for (int i = 0; i < n; i++) {
		const unsigned char *m = (unsigned char *)r->s->buf + (size_t)(BURST + wc[i].wr_id) * (MSG + GRH) + GRH;
		uint32_t num;
		int ok = wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == MSG + GRH;

		memcpy(&num, m, 4);
		for (int k = 4; ok && k < MSG; k++)
			ok = m[k] == (unsigned char)(num * 7 + k);
		if (!ok || num >= total || dest[num] != r->tag) {
			(*bad)++;
		} else if (r->seen[num]) {
			(*dup)++;
		} else {
			r->seen[num] = 1;
			r->got++;
		}
		post_recv(r, (unsigned)wc[i].wr_id);
	}
}

int main(int argc, char **argv)
{
	struct side a = { 0 }, b = { 0 };
	struct rq local, remote;
	struct ibv_cq *scq;
	struct ibv_qp *sqp;
	struct ibv_ah *ah_local, *ah_remote;
	unsigned bursts, total, want_local = 0, want_remote = 0, sent_ok = 0, send_bad = 0;
	unsigned bad = 0, dup = 0, switches = 0, late = 0;
	uint64_t rng = tl_seed(42);
	int last = -1;

	if (argc < 5) {
		fprintf(stderr, "usage: ud_mixed DEVICE_A GID_INDEX_A DEVICE_B GID_INDEX_B [BURSTS]\n");
		return 2;
	}
	bursts = argc > 5 ? (unsigned)atoi(argv[5]) : 100;
	total = bursts * BURST;
	open_side(&a, argv[1], atoi(argv[2]));
	open_side(&b, argv[3], atoi(argv[4]));
	scq = ibv_create_cq(a.ctx, BURST * 2, NULL, NULL, 0);
	if (!scq)
		die("ibv_create_cq");
	sqp = ud_qp(&a, scq);
	dest = calloc(total, 1);
	if (!dest)
		die("calloc");
	make_rq(&local, &a, total, 1);
	make_rq(&remote, &b, total, 2);
	ah_local = ah_to(&a, &a);
	ah_remote = ah_to(&a, &b);

	for (unsigned n = 0; n < bursts; n++) {
		struct ibv_send_wr wr[BURST], *bad_wr;
		struct ibv_sge sge[BURST];
		struct timespec t0;
		unsigned done = 0;

		for (unsigned i = 0; i < BURST; i++) {
			uint32_t num = n * BURST + i;
			unsigned char *m = (unsigned char *)a.buf + (size_t)i * (MSG + GRH);
			int to_local = tl_next(&rng) & 1;

			memcpy(m, &num, 4);
			for (int k = 4; k < MSG; k++)
				m[k] = (unsigned char)(num * 7 + k);
			switches += last >= 0 && last != to_local;
			last = to_local;
			dest[num] = to_local ? 1 : 2;
			want_local += to_local;
			want_remote += !to_local;
			sge[i] = (struct ibv_sge){ .addr = (uintptr_t)m, .length = MSG, .lkey = a.mr->lkey };
			wr[i] = (struct ibv_send_wr){
				.wr_id = num, .sg_list = &sge[i], .num_sge = 1, .opcode = IBV_WR_SEND,
				.next = i + 1 < BURST ? &wr[i + 1] : NULL,
				.wr.ud = { .ah = to_local ? ah_local : ah_remote,
					   .remote_qpn = to_local ? local.qp->qp_num : remote.qp->qp_num,
					   .remote_qkey = QKEY },
			};
		}
		/* the whole burst in one post: one pass of the kernel meets
		 * both kinds of destination */
		if (ibv_post_send(sqp, wr, &bad_wr))
			die("ibv_post_send");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (done < BURST && ms_since(&t0) < 5000) {
			struct ibv_wc wc[BURST];
			int k = ibv_poll_cq(scq, BURST, wc);

			if (k < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < k; i++) {
				done++;
				if (wc[i].status == IBV_WC_SUCCESS)
					sent_ok++;
				else
					send_bad++;
			}
			reap(&local, total, &bad, &dup);
			reap(&remote, total, &bad, &dup);
		}
		/* the burst's messages arrive before the next burst reuses
		 * the send buffers */
		while ((local.got < want_local || remote.got < want_remote) && ms_since(&t0) < 5000) {
			reap(&local, total, &bad, &dup);
			reap(&remote, total, &bad, &dup);
		}
		if (local.got < want_local || remote.got < want_remote)
			late++;
	}
	printf("# %u sends: %u to the local QP, %u to the remote one, %u switches of destination\n",
	       total, want_local, want_remote, switches);
	CHECK("every send completed successfully", sent_ok == total && !send_bad, "%u of %u, %u failed",
	      sent_ok, total, send_bad);
	CHECK("the local QP received each of its messages once, intact", local.got == want_local,
	      "%u of %u", local.got, want_local);
	CHECK("the remote QP received each of its messages once, intact", remote.got == want_remote,
	      "%u of %u", remote.got, want_remote);
	CHECK("no message corrupted, misdelivered or duplicated", !bad && !dup, "%u bad, %u duplicated", bad, dup);
	CHECK("every burst arrived within 5 s", !late, "%u bursts late", late);
	return failures ? 1 : 0;
}
