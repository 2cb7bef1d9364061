/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR Linux-OpenIB) */
/*
 * ferroce-abi.h: the one contract between the ferroce kernel module and its
 * rdma-core provider (libferroce). Both sides generate their Rust from this
 * file with bindgen and assert the sizes below at build time; nothing here
 * may depend on anything but linux/types.h.
 *
 * Bump FERROCE_UVERBS_ABI_VERSION on any incompatible change: the module
 * reports it as the uverbs device's abi_version and the provider refuses a
 * module whose version differs from its own.
 */
#ifndef FERROCE_ABI_USER_H
#define FERROCE_ABI_USER_H

#include <linux/types.h>

/*
 * 3: 32 SGEs and 512 bytes of inline data per work request (SQ WQEs of 640
 * bytes, RQ WQEs of 576); 2 had 6 and 64 (192 and 128).
 */
#define FERROCE_UVERBS_ABI_VERSION 3

/*
 * ferroce's private rdma_driver_id. Unused by any in-tree driver: a shared
 * id would let another driver's unregistration remove our devices.
 */
#define FERROCE_DRIVER_ID 0x4652

/* The RDMA link type: `rdma link add NAME type ferroce netdev DEV`. */
#define FERROCE_LINK_TYPE "ferroce"

/* Response to alloc_ucontext (udata). */
struct ferroce_alloc_ucontext_resp {
	__u32 abi_version;	/* FERROCE_UVERBS_ABI_VERSION of the module */
	__u32 reserved;
};

/*
 * Rings
 * =====
 *
 * A user-space CQ, SQ, RQ and SRQ is a ring in kernel memory that the
 * process maps (mmap on the uverbs file, at the offset the create response
 * gives, map_len bytes). A ring is a header of FERROCE_RING_HDR_SIZE bytes
 * followed by `entries` slots of the queue's slot size; `entries` is a
 * power of two. Producer and consumer indices are free-running __u32
 * counters; slot i lives at index (i & (entries - 1)).
 *
 *   ring    producer  consumer  cons means                slot
 *   SQ      process   kernel    slots released (retired)  ferroce_sq_wqe
 *   RQ      process   kernel    slots released (retired)  ferroce_rq_wqe
 *   SRQ     process   kernel    slots taken               ferroce_rq_wqe
 *   CQ      kernel    process   slots read                ferroce_cqe
 *
 * Memory order: the producer writes a slot, then stores prod with release
 * semantics; the consumer loads prod with acquire semantics before it reads
 * the slots below it, and stores cons with release semantics after it is
 * done with them. A ring is full when prod - cons == entries.
 *
 * The kernel copies each WQE out of its slot once and validates the copy;
 * it never reads a slot twice. A prod that claims more than `entries`
 * outstanding slots, or a WQE the kernel refuses, moves the QP to ERR: the
 * refused request completes with IBV_WC_LOC_QP_OP_ERR, everything else on
 * the QP with IBV_WC_WR_FLUSH_ERR. A process that scribbles over its own
 * rings can only break its own QPs and CQs.
 *
 * Released slots: the SQ and RQ cons covers a work request before its
 * completion is published in the CQ ring, so a process that reposts on
 * seeing a completion finds the room.
 *
 * Doorbells: the kernel looks at an SQ whenever it works on the QP (sending,
 * receiving an ACK, a timer, its work item). When it stops with nothing
 * outstanding it may look once more a little later (its work item), and
 * otherwise sets FERROCE_RING_NEED_DB in `kflags` and then looks at prod
 * once more. After publishing a WQE the provider issues a full memory
 * barrier and reads kflags and qp_state: if FERROCE_RING_NEED_DB is set, or
 * the QP is in ERR or SQE (so that the kernel flushes the new request), it
 * rings the doorbell: a post_send system call with an empty work-request
 * list. The RQ's doorbell (an empty post_recv) is needed only in ERR: the
 * kernel takes receive WQEs when a message needs one. SRQ posts need no
 * doorbell.
 *
 * Starting values: a new ring's indices and flags are 0 except an SQ's
 * kflags (FERROCE_RING_NEED_DB: the first post rings); a resized CQ ring
 * starts with cons 0 and prod the number of completions moved into it.
 * A resized SRQ ring starts with cons 0 and prod the number of receive
 * WQEs the kernel moved into it (those posted and not yet taken, in order).
 *
 * A CQ whose ring was full has completions waiting in the kernel; the
 * kernel sets FERROCE_RING_CQ_WAITING in its kflags. A provider that finds
 * the flag set after emptying the ring polls once through the kernel (a
 * poll_cq system call for one entry, which moves the waiting completions
 * into the ring and returns none itself).
 */

#define FERROCE_RING_HDR_SIZE 256
#define FERROCE_SQ_WQE_SIZE 640
#define FERROCE_RQ_WQE_SIZE 576
#define FERROCE_CQE_SIZE 64

#define FERROCE_RING_MAX_SGE 32
#define FERROCE_RING_MAX_INLINE 512

/* kflags */
#define FERROCE_RING_NEED_DB (1U << 0)		/* SQ: ring the doorbell */
#define FERROCE_RING_CQ_WAITING (1U << 1)	/* CQ: completions wait in the kernel */

struct ferroce_ring_hdr {
	__u32 prod;		/* written by the producer only */
	__u32 rsvd0[15];
	__u32 cons;		/* written by the consumer only */
	__u32 rsvd1[15];
	__u32 kflags;		/* written by the kernel: FERROCE_RING_* */
	__u32 qp_state;		/* SQ and RQ: the QP's state (IBV_QPS_*), by the kernel */
	__u32 rsvd2[14];
	__u32 rsvd3[16];
};

struct ferroce_sge {
	__u64 addr;
	__u32 length;
	__u32 lkey;
};

/* One send work request: the fields of struct ibv_send_wr. */
struct ferroce_sq_wqe {
	__u64 wr_id;
	__u32 opcode;		/* IBV_WR_* */
	__u32 send_flags;	/* IBV_SEND_* */
	__u32 num_sge;		/* 0 with IBV_SEND_INLINE */
	__u32 inline_len;	/* with IBV_SEND_INLINE */
	__u32 imm_data;		/* _WITH_IMM: network order; SEND_WITH_INV, LOCAL_INV: the rkey; BIND_MW: the window's rkey;
				   FLUSH: placement type (bits 3..0) and selectivity level (bits 5..4) */
	__u32 rkey;		/* RDMA, atomic, FLUSH, ATOMIC_WRITE; BIND_MW: the window's new rkey */
	__u64 remote_addr;	/* RDMA, atomic, FLUSH, ATOMIC_WRITE; BIND_MW: the window's first address */
	__u64 compare_add;	/* atomic; BIND_MW: the window's length; FLUSH: the length;
				   ATOMIC_WRITE: the 8 bytes, in memory order */
	__u64 swap;		/* atomic compare and swap */
	__u32 ah;		/* UD: ferroce_create_ah_resp.ah_handle */
	__u32 remote_qpn;	/* UD */
	__u32 remote_qkey;	/* UD */
	__u32 bind_lkey;	/* BIND_MW: the region's lkey */
	__u32 bind_access;	/* BIND_MW: IBV_ACCESS_REMOTE_* the window grants */
	__u32 rsvd;
	union {
		struct ferroce_sge sge[FERROCE_RING_MAX_SGE];
		__u8 inline_data[FERROCE_RING_MAX_INLINE];
	};
	__u32 rsvd2[12];
};

/* One receive work request (RQ and SRQ). */
struct ferroce_rq_wqe {
	__u64 wr_id;
	__u32 num_sge;
	__u32 rsvd;
	struct ferroce_sge sge[FERROCE_RING_MAX_SGE];
	__u32 rsvd2[12];
};

/* One completion: the fields of struct ibv_wc, in its encodings. */
struct ferroce_cqe {
	__u64 wr_id;
	__u32 status;		/* IBV_WC_* status */
	__u32 opcode;		/* IBV_WC_* opcode */
	__u32 vendor_err;
	__u32 byte_len;
	__u32 imm_data;		/* network order; IBV_WC_WITH_INV: the rkey */
	__u32 qp_num;
	__u32 src_qp;
	__u32 wc_flags;		/* IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV */
	__u16 pkey_index;
	__u16 slid;
	__u8 sl;
	__u8 dlid_path_bits;
	__u16 rsvd;
	__u32 rsvd2[4];
};

/* Where a ring is: mmap `map_len` bytes at `offset` on the uverbs file. */
struct ferroce_ring_map {
	__aligned_u64 offset;
	__u32 map_len;
	__u32 entries;		/* slots (power of two); 0: no ring */
};

struct ferroce_create_cq_resp {
	struct ferroce_ring_map cq;
};

/* resize_cq: the new ring (the waiting completions moved into it). */
struct ferroce_resize_cq_resp {
	struct ferroce_ring_map cq;
};

struct ferroce_create_qp_resp {
	struct ferroce_ring_map sq;
	struct ferroce_ring_map rq;	/* entries 0 on an SRQ-attached QP */
	__u32 ud_max_msg;	/* UD: longest message (the path MTU); longer is EINVAL */
	__u32 reserved;
};

struct ferroce_create_srq_resp {
	struct ferroce_ring_map srq;
};

/*
 * Modify SRQ with IBV_SRQ_MAX_WR (a resize): the command has no response,
 * so the provider names where the kernel writes the new ring's place (a
 * struct ferroce_ring_map in the caller's memory). The provider holds its
 * SRQ's lock across the call (no post meanwhile), then maps the new ring
 * and unmaps the old one. Without this command a resize is EINVAL.
 */
struct ferroce_modify_srq_cmd {
	__aligned_u64 ring_map_addr;
};

struct ferroce_create_ah_resp {
	__u32 ah_handle;	/* names the AH in ferroce_sq_wqe.ah */
	__u32 reserved;
};

#endif /* FERROCE_ABI_USER_H */
