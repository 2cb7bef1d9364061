/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Helpers the guest test programs share (header only, one copy each):
 * a seeded random stream, the modify_qp sequence that connects an RC QP and
 * the ok / not ok line of a check.
 */
#ifndef FERROCE_TESTLIB_H
#define FERROCE_TESTLIB_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Checks that fail so far (a program's exit status). */
static int failures __attribute__((unused));

/*
 * One "ok - NAME" or "not ok - NAME: why" line (tools/check counts them);
 * the rest of the arguments are printf's, saying why.
 */
#define CHECK(name, cond, ...)                                                 \
	do {                                                                   \
		if (cond) {                                                    \
			printf("ok - %s\n", name);                             \
		} else {                                                       \
			printf("not ok - %s: ", name);                         \
			printf(__VA_ARGS__);                                   \
			printf("\n");                                          \
			failures++;                                            \
		}                                                              \
		fflush(stdout);                                                \
	} while (0)

/* The device called `name`, opened; NULL with errno ENODEV if none is. */
static inline struct ibv_context *tl_open_device(const char *name)
{
	struct ibv_context *ctx = NULL;
	struct ibv_device **list;
	int n;

	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx)
		errno = ENODEV;
	return ctx;
}

/* xorshift64*: the same seed gives the same stream on every run. */
static inline uint64_t tl_seed(uint64_t seed)
{
	return seed * 0x9e3779b97f4a7c15ull + 1; /* never 0, which would stick */
}

static inline uint64_t tl_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* CRC-32 (IEEE 802.3, reflected), the CRC of the ICRC: register `c` fed
 * with n bytes (start with 0xffffffff, complement at the end). */
static inline uint32_t tl_crc32_update(uint32_t c, const uint8_t *p, size_t n)
{
	static uint32_t table[256];
	static int ready;

	if (!ready) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t t = i;

			for (int k = 0; k < 8; k++)
				t = t & 1 ? 0xedb88320u ^ (t >> 1) : t >> 1;
			table[i] = t;
		}
		ready = 1;
	}
	while (n--)
		c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

/*
 * The ICRC of an IPv4 RoCEv2 packet, as IBTA annex A17 masks it: `ip` points
 * at the IPv4 header (its length from IHL, options included), `len` is the
 * whole IP packet with the 4 ICRC bytes. Eight bytes of ones, then the IP
 * header with TOS, TTL and checksum masked, UDP with its checksum masked,
 * the BTH with its reserved byte masked, then the rest.
 */
static inline uint32_t tl_icrc4(const uint8_t *ip, size_t len)
{
	static const uint8_t ones[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	size_t ihl = (size_t)(ip[0] & 0x0f) * 4, head = ihl + 8 + 12;
	uint8_t h[60 + 8 + 12];
	uint32_t c;

	memcpy(h, ip, head);
	h[1] = 0xff;			/* TOS */
	h[8] = 0xff;			/* TTL */
	h[10] = h[11] = 0xff;		/* IP checksum */
	h[ihl + 6] = h[ihl + 7] = 0xff;	/* UDP checksum */
	h[ihl + 8 + 4] = 0xff;		/* BTH FECN, BECN, reserved */
	c = tl_crc32_update(0xffffffffu, ones, 8);
	c = tl_crc32_update(c, h, head);
	c = tl_crc32_update(c, ip + head, len - head - 4);
	return ~c;
}

/* A UD QP from RESET to RTS with Q_Key `qkey`. Returns 0, or -1 with errno set. */
static inline int tl_ud_rts(struct ibv_qp *qp, uint32_t qkey, uint32_t sq_psn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = qkey };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -1 : 0;
}

/* What an RC QP needs to reach RTS: its peer and the connection's knobs. */
struct tl_rc_conn {
	int access;			/* qp_access_flags */
	enum ibv_mtu mtu;
	uint32_t dest_qpn;
	uint32_t rq_psn, sq_psn;	/* the peer's first PSN, ours */
	union ibv_gid dgid;
	int sgid_index;
	int max_dest_rd_atomic, max_rd_atomic;
	int timeout, retry_cnt, rnr_retry;
};

/* RESET (or INIT) to INIT. Returns 0, or -1 with errno set. */
static inline int tl_rc_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ? -1 : 0;
}

/*
 * INIT, RTR and RTS of an RC or UC QP (UC: with the attributes UC has).
 * Returns NULL, or the step that failed (errno set),
 * for the caller's message.
 */
static inline const char *tl_rc_connect(struct ibv_qp *qp, const struct tl_rc_conn *c)
{
	struct ibv_qp_attr a;
	int uc = qp->qp_type == IBV_QPT_UC;

	if (tl_rc_init(qp, c->access))
		return "ibv_modify_qp to INIT";
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = c->mtu;
	a.dest_qp_num = c->dest_qpn;
	a.rq_psn = c->rq_psn;
	a.max_dest_rd_atomic = c->max_dest_rd_atomic;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = c->dgid;
	a.ah_attr.grh.sgid_index = c->sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	/* UC has no READ/atomic resources, RNR timer, ACK timeout or retries. */
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  (uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		return "ibv_modify_qp to RTR";
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = c->sq_psn;
	a.timeout = c->timeout;
	a.retry_cnt = c->retry_cnt;
	a.rnr_retry = c->rnr_retry;
	a.max_rd_atomic = c->max_rd_atomic;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN |
				  (uc ? 0 : IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		return "ibv_modify_qp to RTS";
	return NULL;
}

/*
 * An RC (or UC) QP connected to QP `peer_qpn` of the same device, through
 * its own GID: `psn` both ways, `rd_atomic` READ/atomic resources each way,
 * and the ACK timeout (14: 67 ms), retries and RNR retries (7) of a
 * loss-free loopback. NULL, or the step that failed (errno set).
 */
static inline const char *tl_rc_connect_local(struct ibv_qp *qp, uint32_t peer_qpn, int access, enum ibv_mtu mtu,
					      const union ibv_gid *gid, int gid_index, uint32_t psn, int rd_atomic)
{
	struct tl_rc_conn c = {
		.access = access,
		.mtu = mtu,
		.dest_qpn = peer_qpn,
		.rq_psn = psn,
		.sq_psn = psn,
		.dgid = *gid,
		.sgid_index = gid_index,
		.max_dest_rd_atomic = rd_atomic,
		.max_rd_atomic = rd_atomic,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
	};

	return tl_rc_connect(qp, &c);
}

#endif
