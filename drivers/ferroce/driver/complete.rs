// SPDX-License-Identifier: GPL-2.0

//! The completion stage: finished work requests move from a QP's engine
//! into its CQs ([`drain`]), and the completion handlers of armed CQs run
//! once the device lock is dropped ([`Notify`]).

use crate::rdma::object::{Counted, CqRef};
use crate::rdma::qp::{QpEvent, QpRef};
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{CqEntry, CqSlot, CqWaiter, DevState, QpEntry};
use crate::transport::qp::QpState;
use crate::transport::verbs::{wc_flags, AsyncError, WcStatus};

/// CQs one pass records inline; more go through `CqEntry::event_due`.
const NOTIFY_CQS: usize = 8;

/// QPs with asynchronous events one pass records inline; more go through
/// `QpEntry::events_due`.
const NOTIFY_QPS: usize = 4;

/// CQ error events one pass records; a CQ that finds no room is taken by
/// a later pass (its `err_sent` stays false).
const NOTIFY_CQ_ERRS: usize = 2;

/// CQs whose completion handler must run once the device lock is dropped.
/// Each is held by a counted reference (`CqRef`) while recorded, so that
/// `destroy_cq` waits until its handler has returned. A pass that reaches
/// more armed CQs than it records marks the rest `event_due` and collects
/// them under the lock again in `run`: no event is lost.
///
/// The same for QPs' affiliated asynchronous events: each recorded QP is
/// held by a counted reference (`QpRef`) with its pending events, and
/// what finds no room waits in `QpEntry::events_due`.
pub(crate) struct Notify {
    cqs: [Option<CqRef>; NOTIFY_CQS],
    n: usize,
    qps: [Option<(QpRef, u8)>; NOTIFY_QPS],
    nq: usize,
    /// CQs whose `IB_EVENT_CQ_ERR` is to be sent.
    errs: [Option<CqRef>; NOTIFY_CQ_ERRS],
    overflowed: bool,
}

impl Notify {
    pub(crate) fn new() -> Self {
        Self {
            cqs: [const { None }; NOTIFY_CQS],
            n: 0,
            qps: [const { None }; NOTIFY_QPS],
            nq: 0,
            errs: [const { None }; NOTIFY_CQ_ERRS],
            overflowed: false,
        }
    }

    /// Takes QP `e`'s pending events (`events_due`) for delivery. Called
    /// with the device lock held; with no room they stay pending and `run`
    /// comes back for them.
    fn add_qp(&mut self, e: &mut QpEntry, due: &mut Option<u32>) {
        if e.events_due == 0 {
            return;
        }
        if let Some((_, bits)) = self.qps.iter_mut().take(self.nq).flatten().find(|(q, _)| Counted::same(q, &e.core)) {
            *bits |= core::mem::take(&mut e.events_due);
            return;
        }
        match self.qps.get_mut(self.nq) {
            Some(slot) => {
                *slot = Some((e.core.clone(), core::mem::take(&mut e.events_due)));
                self.nq += 1;
            }
            None => {
                if !e.due_listed {
                    e.due_listed = true;
                    e.due_next = due.replace(e.qp.qpn());
                }
                self.overflowed = true;
            }
        }
    }

    /// Records `cq`'s error event, once per CQ; false when this pass has
    /// no room left (a later pass sends it).
    fn add_err(&mut self, cq: &mut CqEntry) -> bool {
        if cq.err_sent {
            return true;
        }
        match self.errs.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(cq.cq.clone());
                cq.err_sent = true;
                true
            }
            None => false,
        }
    }

    /// Records `cq` (armed: the caller disarmed it) for its handler. Called
    /// with the device lock held and the CQ in its table.
    fn add(&mut self, cq: &mut CqEntry, index: u32, due: &mut Option<u32>) {
        if self.cqs.iter().take(self.n).flatten().any(|c| Counted::same(c, &cq.cq)) {
            return;
        }
        match self.cqs.get_mut(self.n) {
            Some(slot) => {
                *slot = Some(cq.cq.clone());
                self.n += 1;
            }
            None => {
                if !cq.event_due {
                    cq.event_due = true;
                    cq.due_next = due.replace(index);
                }
                self.overflowed = true;
            }
        }
    }

    /// Runs the recorded handlers (`call`) and drops their references.
    fn fire(&mut self, call: bool) {
        let n = core::mem::take(&mut self.n);
        for c in self.cqs.iter_mut().take(n).filter_map(Option::take) {
            if call {
                Counted::comp_event(c);
            }
        }
        for c in self.errs.iter_mut().filter_map(Option::take) {
            if call {
                c.error_event();
            }
        }
        let nq = core::mem::take(&mut self.nq);
        for (q, bits) in self.qps.iter_mut().take(nq).filter_map(Option::take) {
            for ev in QpEvent::ALL.into_iter().filter(|ev| call && bits & ev.bit() != 0) {
                q.event(ev);
            }
        }
    }

    /// Runs the handlers. Call without the device lock: a kernel ULP's
    /// handler may poll the CQ right away. The CQs a full pass marked
    /// `event_due` (and the QPs whose events it left) are taken from their
    /// lists under the lock, `NOTIFY_CQS` (`NOTIFY_QPS`) at a time: each is
    /// taken once, and no table is scanned.
    pub(crate) fn run(mut self, dev: &FerroceDevice) {
        self.fire(true);
        while core::mem::take(&mut self.overflowed) {
            {
                let mut guard = dev.state.lock();
                let DevState { cqs, qps, cq_due, qp_due, .. } = &mut *guard;
                while self.n < NOTIFY_CQS {
                    let Some(i) = *cq_due else { break };
                    let Some(cq) = cqs.get_mut(i as usize).and_then(|c| c.as_deref_mut()) else {
                        // Cannot happen (a CQ leaves the list at its
                        // destroy): end the list rather than loop.
                        *cq_due = None;
                        break;
                    };
                    *cq_due = cq.due_next.take();
                    cq.event_due = false;
                    self.add(cq, i, cq_due);
                }
                while self.nq < NOTIFY_QPS {
                    let Some(q) = *qp_due else { break };
                    let Some(e) = qps.get_mut(q as usize).and_then(|e| e.as_deref_mut()) else {
                        *qp_due = None;
                        break;
                    };
                    *qp_due = e.due_next.take();
                    e.due_listed = false;
                    self.add_qp(e, qp_due);
                }
                self.overflowed = cq_due.is_some() || qp_due.is_some();
            }
            self.fire(true);
        }
    }
}

impl Drop for Notify {
    /// A pass that did not run its handlers (it cannot happen on today's
    /// paths) drops its references all the same, or destroy_cq would wait
    /// forever.
    fn drop(&mut self) {
        self.fire(false);
    }
}

/// Moves the finished completions of QP `qpn` into its CQs. A full CQ
/// leaves the rest waiting in the QP (counted), to be moved by a later call.
pub(crate) fn drain(dev: &FerroceDevice, st: &mut DevState, qpn: u32, ip_version: u8, notify: &mut Notify) {
    // Every engine step comes here: the shared window learns of it.
    st.wire_sync(dev, qpn);
    let DevState { qps, cqs, ahs, cq_due, qp_due, .. } = st;
    let Some(e) = qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else {
        return;
    };
    crate::driver::rings::sync(dev, e, ahs);
    for recv in [false, true] {
        let idx = if recv { e.recv_cq } else { e.send_cq };
        let Some(cq) = cqs.get_mut(idx).and_then(|c| c.as_deref_mut()) else {
            continue;
        };
        loop {
            if cq.is_full() {
                let pending = if recv { e.qp.recv_queue_len() } else { e.qp.send_queue_len() };
                // A process's ring whose consumer index claims more than
                // the ring holds can take no completion again: the CQ is
                // in error (IBTA 11.6.3: CQ error, an affiliated
                // asynchronous event), once; its completions stay in the
                // QP, nothing is overwritten.
                if pending > 0 && cq.overrun() && !cq.err_sent && notify.add_err(cq) {
                    dev.count(Counter::RingCorrupt);
                }
                if pending > 0 {
                    dev.count(Counter::CqFull);
                    // Into the CQ's list of sides to drain when it has room.
                    let side = usize::from(recv);
                    if let (Some(w), Some(n)) = (e.cq_waiting.get_mut(side), e.cq_next.get_mut(side)) {
                        if !*w {
                            *w = true;
                            *n = cq.waiters;
                            cq.waiters = Some(CqWaiter { qpn, side: u8::from(recv) });
                        }
                    }
                    // A process polls its ring without us: tell it to come
                    // back through the kernel for the rest.
                    cq.set_waiting(true);
                }
                break;
            }
            let c = if recv { e.qp.poll_recv_cq() } else { e.qp.poll_send_cq() };
            let Some(cqe) = c else { break };
            // A CQ armed for solicited completions only raises its event
            // for a receive whose message asked for one (SE) or for an
            // unsuccessful completion (IBTA 11.4.2.2, as rxe does).
            let solicited = cqe.status != WcStatus::Success || cqe.wc_flags & wc_flags::SOLICITED != 0;
            // A process's ring slot is free before its completion shows:
            // an application that reposts on seeing it finds the room.
            crate::driver::rings::release(e);
            let _ = cq.push(CqSlot {
                cqe,
                qp: e.token,
                ip_version: if recv { ip_version } else { 0 },
            });
            if cq.armed.is_some_and(|solicited_only| !solicited_only || solicited) {
                cq.armed = None;
                notify.add(cq, idx as u32, cq_due);
            }
        }
    }
    crate::driver::rings::release(e);
    raise_events(e);
    notify.add_qp(e, qp_due);
}

/// Notes the affiliated asynchronous events QP `e` has come to (in
/// `events_due`), each once:
/// - the responder's error that no completion reports (IBTA 11.6.3.1);
/// - on an SRQ, in ERR with every receive WQE it took completed: last WQE
///   reached (IBTA 10.3.1; the kernel's `ib_drain_qp` waits for it);
/// - in SQD with the send queue drained, when asked for
///   (`en_sqd_async_notify`).
fn raise_events(e: &mut QpEntry) {
    if let Some(err) = e.qp.take_async_error() {
        let ev = match err {
            AsyncError::Fatal => QpEvent::Fatal,
            AsyncError::InvalidRequest => QpEvent::RequestError,
            AsyncError::AccessViolation => QpEvent::AccessError,
        };
        e.events_due |= ev.bit();
    }
    let state = e.qp.state();
    if state != QpState::Err {
        e.last_wqe_sent = false;
    } else if e.srq.is_some() && !e.last_wqe_sent && e.qp.recv_queue_len() == 0 {
        e.last_wqe_sent = true;
        e.events_due |= QpEvent::LastWqeReached.bit();
    }
    if state != QpState::Sqd {
        e.sq_drained_sent = false;
    } else if !e.sq_drained_sent && e.qp.is_send_idle() && e.qp.attr().en_sqd_async_notify != 0 {
        e.sq_drained_sent = true;
        e.events_due |= QpEvent::SqDrained.bit();
    }
}
