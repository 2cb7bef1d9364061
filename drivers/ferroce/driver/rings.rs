// SPDX-License-Identifier: GPL-2.0

//! The kernel's side of the rings a process shares with ferroce
//! (`include/uapi/rdma/ferroce-abi.h`): taking work requests out of a QP's
//! SQ and RQ rings, publishing the QP's state and the released slots, and
//! the doorbell flag. Everything runs under the device lock.
//!
//! The process may rewrite its rings at any moment. Each slot is copied
//! once ([`UserRing::read`]) and only the copy is looked at; a producer
//! index that claims more than the ring holds, or a request the copy shows
//! to be malformed, moves the QP to ERR (the request completes with
//! LOC_QP_OP_ERR, the rest flush): the damage stays with the process's own
//! QP.

#![forbid(unsafe_code)]

use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use super::ring::QpRings;
use crate::rdma::mmap::{rq_slot, sq_slot, RingRqWqe, RingSqWqe, UserRing, RING_NEED_DB};
use crate::transport::shared_ring::{self, recv_wqe, UdSend};
use crate::driver::tables::{AhEntry, DevState, QpEntry};
use crate::transport::qp::{QpState, QpType};
use crate::transport::linger::Idle as LingerIdle;
use crate::transport::verbs::{SendWqe, WcStatus};

/// The engine's copy of one SQ slot, or None when the copy is malformed
/// (`shared_ring::send_wqe`, host-tested): a UD QP's slot must name an AH
/// of the QP's PD.
fn send_wqe(w: &RingSqWqe, e: &QpEntry, r: &QpRings, ahs: &[Option<AhEntry>]) -> Option<SendWqe> {
    let ud = (e.qp.qp_type() == QpType::Ud).then(|| UdSend {
        pd: r.pd,
        ah_pd: ahs.get(w.ah as usize).and_then(|a| a.as_ref()).map(|a| a.pd),
        max_msg: r.ud_max_msg,
    });
    shared_ring::send_wqe(&sq_slot(w), e.max_send_sge, ud)
}

/// How many slots a ring's producer claims beyond `taken`, or None when
/// the claim is impossible (more outstanding than the ring holds).
fn claimed(ring: &UserRing, taken: u32, in_engine: usize) -> Option<u32> {
    crate::transport::shared_ring::claimed(ring.prod(), taken, in_engine, ring.entries())
}

/// Takes the SQ ring's new work requests into the engine; returns how
/// many it took.
pub(crate) fn pull_sq(dev: &FerroceDevice, e: &mut QpEntry, ahs: &[Option<AhEntry>]) -> u32 {
    let Some(r) = e.rings.as_ref() else { return 0 };
    let Some(new) = claimed(&r.sq, r.sq_taken, e.qp.send_queue_len()) else {
        // Once: in ERR nothing more is taken from this ring until its
        // producer index makes sense again.
        if e.qp.state() != QpState::Err {
            dev.count(Counter::RingCorrupt);
            let _ = e.qp.fail_send(0, WcStatus::LocQpOpErr);
        }
        return 0;
    };
    for _ in 0..new {
        let len = take_sq_slot(dev, e, ahs);
        if let Some(r) = e.rings.as_mut() {
            r.sq_taken = r.sq_taken.wrapping_add(1);
            r.linger.took(len);
        }
    }
    if new > 0 {
        doorbell_heard(e);
    }
    new
}

/// An AH of PD `pd` is about to go: takes into the engine what the
/// processes' UD QPs in that PD have posted and the kernel has not taken
/// yet (a QP that lingers, or whose sender is between two looks at its
/// ring, got no doorbell for it), while the AH still exists; their work
/// items send it. Requests the engine holds keep their own copy of their
/// address (`QpEntry::post_send`). A walk of the processes' UD QPs.
pub(crate) fn take_posted_ud(dev: &FerroceDevice, st: &mut DevState, pd: u32) {
    let mut cur = st.qp_ud;
    for _ in 0..st.qps.len() {
        let Some(q) = cur else { break };
        let Some(e) = st.qps.get_mut(q as usize).and_then(|e| e.as_deref_mut()) else { break };
        cur = e.ud_next;
        let posted = e.rings.as_ref().is_some_and(|r| r.sq.prod() != r.sq_taken);
        if e.pd == pd && posted && pull_sq(dev, e, &st.ahs) > 0 {
            crate::driver::sched::continue_tx(e);
        }
    }
}

/// Takes the SQ ring's next slot (`sq_taken`) into the engine, or fails it
/// (a malformed one); its length. Not inlined: the slot's copies (up to
/// 32 SGEs or 512 inline bytes) are off the stack when the caller goes on,
/// deep in the datapath's call chain.
#[inline(never)]
fn take_sq_slot(dev: &FerroceDevice, e: &mut QpEntry, ahs: &[Option<AhEntry>]) -> u32 {
    let Some(r) = e.rings.as_ref() else { return 0 };
    let slot: RingSqWqe = r.sq.read_sq(r.sq_taken);
    let mut len = 0;
    let ok = match send_wqe(&slot, e, r, ahs) {
        Some(mut w) => {
            len = w.length().unwrap_or(u32::MAX);
            e.post_send(ahs, &mut w).is_ok()
        }
        None => false,
    };
    if !ok {
        dev.count(Counter::RingBadWqe);
        let _ = e.qp.fail_send(slot.wr_id, WcStatus::LocQpOpErr);
    }
    len
}

/// Takes the RQ ring's slot `index` into the engine, or fails it (not
/// inlined, as `take_sq_slot`).
#[inline(never)]
fn take_rq_slot(dev: &FerroceDevice, e: &mut QpEntry, index: u32) {
    let Some(rq) = e.rings.as_ref().and_then(|r| r.rq.as_ref()) else { return };
    let slot: RingRqWqe = rq.read_rq(index);
    let ok = match recv_wqe(&rq_slot(&slot), e.max_recv_sge) {
        Some(w) => e.qp.post_recv(&w).is_ok(),
        None => false,
    };
    if !ok {
        dev.count(Counter::RingBadWqe);
        let _ = e.qp.fail_recv(slot.wr_id, WcStatus::LocQpOpErr);
    }
}

/// Takes the RQ ring's new work requests into the engine.
pub(crate) fn pull_rq(dev: &FerroceDevice, e: &mut QpEntry) {
    let Some(rq) = e.rings.as_ref().and_then(|r| r.rq.as_ref()) else { return };
    let taken = e.rings.as_ref().map_or(0, |r| r.rq_taken);
    let Some(new) = claimed(rq, taken, e.qp.recv_queue_len()) else {
        if e.qp.state() != QpState::Err {
            dev.count(Counter::RingCorrupt);
            let _ = e.qp.fail_recv(0, WcStatus::LocQpOpErr);
        }
        return;
    };
    for i in 0..new {
        take_rq_slot(dev, e, taken.wrapping_add(i));
    }
    if let Some(r) = e.rings.as_mut() {
        r.rq_taken = r.rq_taken.wrapping_add(new);
    }
}

/// Publishes the QP's state and its released slots. In ERR the rings are
/// emptied first (their requests flush): the state is written, then a full
/// barrier, then the producer indices are read, so a request the process
/// published before it saw ERR is always taken (it rings the doorbell for
/// what it publishes after).
pub(crate) fn sync(dev: &FerroceDevice, e: &mut QpEntry, ahs: &[Option<AhEntry>]) {
    let state = e.qp.state();
    let Some(r) = e.rings.as_mut() else { return };
    if r.state != Some(state) {
        r.state = Some(state);
        r.sq.set_qp_state(state as u32);
        if let Some(rq) = &r.rq {
            rq.set_qp_state(state as u32);
        }
        if state == QpState::Err {
            kernel::sync::barrier::smp_mb();
        }
    }
    if state == QpState::Err {
        pull_sq(dev, e, ahs);
        pull_rq(dev, e);
    }
}

/// Writes the released slot counts (after completions moved to the CQs).
pub(crate) fn release(e: &mut QpEntry) {
    let (sq_len, rq_len) = (e.qp.send_queue_len() as u32, e.qp.recv_queue_len() as u32);
    let Some(r) = e.rings.as_mut() else { return };
    let sq_cons = r.sq_taken.wrapping_sub(sq_len);
    if sq_cons != r.sq_cons {
        r.sq_cons = sq_cons;
        r.sq.set_cons(sq_cons);
    }
    if let Some(rq) = &r.rq {
        let rq_cons = r.rq_taken.wrapping_sub(rq_len);
        if rq_cons != r.rq_cons {
            r.rq_cons = rq_cons;
            rq.set_cons(rq_cons);
        }
    }
}

/// The kernel took the QP's new requests, or heard its doorbell and has it
/// in the linger work's list (which takes them at its next look): the
/// process need not ring again until asked.
pub(crate) fn doorbell_heard(e: &mut QpEntry) {
    if let Some(r) = e.rings.as_mut() {
        if r.need_db {
            r.need_db = false;
            r.sq.set_kflags(0);
        }
    }
}

/// Whether the kernel has taken every request of the QP's SQ ring (a
/// producer index that claims more than the ring holds has nothing to
/// take).
pub(crate) fn sq_taken_all(e: &QpEntry) -> bool {
    e.rings.as_ref().is_none_or(|r| claimed(&r.sq, r.sq_taken, e.qp.send_queue_len()).is_none_or(|n| n == 0))
}

/// Whether a lingering QP's ring still has nothing new (its work item
/// waits a little longer for the process's next request).
pub(crate) fn waiting_for_more(e: &QpEntry) -> bool {
    e.rings.as_ref().is_some_and(|r| r.linger.waiting() && r.sq.prod() == r.sq_taken)
}

/// Whether a process's QP needs its sender to look at the SQ ring: new
/// requests, or an idle send side that has neither asked for a doorbell nor
/// queued a linger yet.
pub(crate) fn unsettled(e: &QpEntry) -> bool {
    e.rings
        .as_ref()
        .is_some_and(|r| r.sq.prod() != r.sq_taken || (!r.need_db && !r.linger.is_armed()))
}

/// What a sender that found nothing to do does next.
pub(crate) enum Idle {
    /// New requests arrived while it asked for a doorbell: go on.
    Recheck,
    /// Queue the QP's work item to linger: wait a little for the process's
    /// next request and look again, without asking for a doorbell.
    Linger,
    /// Stop (an ACK, a timer or a queued linger comes back, or the
    /// doorbell was asked for).
    Stop,
}

/// The sender found nothing to do. With requests outstanding an ACK or
/// timer brings the kernel back. Otherwise the QP lingers (its work item
/// waits a little, `net::linger_wait`, and looks at the ring again) or asks
/// for a doorbell and looks at the producer once more, as
/// `transport::linger` decides (host-tested there).
pub(crate) fn idle(dev: &FerroceDevice, e: &mut QpEntry) -> Idle {
    let busy = e.qp.send_queue_len() != 0;
    let Some(r) = e.rings.as_mut() else { return Idle::Stop };
    match r.linger.on_idle(busy) {
        LingerIdle::Stop => Idle::Stop,
        LingerIdle::Linger => Idle::Linger,
        LingerIdle::AskDoorbell => ask_doorbell(dev, Counter::RingAskIdle, r, e.qp.send_queue_len()),
    }
}

/// Sets FERROCE_RING_NEED_DB, then looks at the producer once more (the
/// process publishes, then looks at the flag: one side sees the other).
/// `Recheck` only for requests the sender can take (`in_engine`: requests
/// the engine holds): a producer index that claims more than the ring
/// holds (a process scribbling on its ring) is not new work, and a sender
/// that rechecked it would loop forever (uverbs_fuzz hung a system call
/// so).
/// A doorbell newly asked for counts in `why`.
fn ask_doorbell(dev: &FerroceDevice, why: Counter, r: &mut QpRings, in_engine: usize) -> Idle {
    if !r.need_db {
        dev.count(why);
        r.need_db = true;
        r.sq.set_kflags(RING_NEED_DB);
    }
    // The flag before the index; the process does the mirror image.
    kernel::sync::barrier::smp_mb();
    match claimed(&r.sq, r.sq_taken, in_engine) {
        Some(n) if n > 0 => Idle::Recheck,
        _ => Idle::Stop,
    }
}

/// The device has no room for another lingering QP (`sched::settle`):
/// this one, which `idle` told to linger, asks for the doorbell instead.
pub(crate) fn linger_refused(dev: &FerroceDevice, e: &mut QpEntry) -> Idle {
    let in_engine = e.qp.send_queue_len();
    let Some(r) = e.rings.as_mut() else { return Idle::Stop };
    r.linger.cancel();
    ask_doorbell(dev, Counter::RingAskFull, r, in_engine)
}

/// The end of a linger (its work item waited), `others` other QPs still
/// lingering: whether it found requests decides whether the QP keeps
/// lingering; without any, the doorbell is asked for.
pub(crate) fn linger_done(dev: &FerroceDevice, e: &mut QpEntry, others: u32) {
    let in_engine = e.qp.send_queue_len();
    let Some(r) = e.rings.as_mut() else { return };
    let pending = r.sq.prod().wrapping_sub(r.sq_taken).min(r.sq.entries());
    if r.linger.done_among(pending, others) {
        let _ = ask_doorbell(dev, Counter::RingAskLinger, r, in_engine);
    }
}
