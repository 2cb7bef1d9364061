// SPDX-License-Identifier: GPL-2.0

//! One QP's rings as the kernel keeps them ([`QpRings`]: the process's SQ
//! and RQ and how far the kernel has taken and released them), and an SRQ
//! slot's copy as the engine's WQE. What is done
//! with them under the device lock is in `rings.rs`.

#![forbid(unsafe_code)]

use crate::rdma::mmap::{rq_slot, RingRqWqe, UserRing, RING_NEED_DB};
use crate::transport::linger::Linger;
use crate::transport::qp::QpState;
use crate::transport::shared_ring::recv_wqe;
use crate::transport::verbs::RecvWqe;

/// A QP's rings and what the kernel has done with them.
pub(crate) struct QpRings {
    pub(crate) sq: UserRing,
    /// None on a QP attached to an SRQ.
    pub(crate) rq: Option<UserRing>,
    /// Work requests taken from each ring so far (free-running).
    pub(crate) sq_taken: u32,
    pub(crate) rq_taken: u32,
    /// What the kernel last wrote, to write only changes.
    pub(crate) sq_cons: u32,
    pub(crate) rq_cons: u32,
    pub(crate) need_db: bool,
    /// Whether the sender lingers or asks for a doorbell (see `rings::idle`).
    pub(crate) linger: Linger,
    pub(crate) state: Option<QpState>,
    /// UD: the longest message (the path MTU fixed at creation).
    pub(crate) ud_max_msg: u32,
    pub(crate) pd: u32,
}

impl QpRings {
    /// A new QP's rings: the kernel is idle, so the first post rings the
    /// doorbell.
    pub(crate) fn new(sq: UserRing, rq: Option<UserRing>, ud_max_msg: u32, pd: u32) -> Self {
        sq.set_kflags(RING_NEED_DB);
        Self {
            sq,
            rq,
            sq_taken: 0,
            rq_taken: 0,
            sq_cons: 0,
            rq_cons: 0,
            need_db: true,
            linger: Linger::new(),
            state: None,
            ud_max_msg,
            pd,
        }
    }
}

/// One SRQ slot as a receive WQE; `Err(wr_id)` when it is malformed.
pub(crate) fn srq_wqe(w: &RingRqWqe, max_sge: u32) -> core::result::Result<RecvWqe, u64> {
    recv_wqe(&rq_slot(w), max_sge).ok_or(w.wr_id)
}
