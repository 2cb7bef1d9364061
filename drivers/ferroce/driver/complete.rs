// SPDX-License-Identifier: GPL-2.0

//! The completion stage: finished work requests move from a QP's engine
//! into its CQs ([`drain`]), and the completion handlers of armed CQs run
//! once the device lock is dropped ([`Notify`]).

use crate::rdma::object::{Counted, CqRef};
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{CqEntry, CqSlot, DevState};
use crate::transport::verbs::{wc_flags, WcStatus};

/// CQs one pass records inline; more go through `CqEntry::event_due`.
const NOTIFY_CQS: usize = 8;

/// CQs whose completion handler must run once the device lock is dropped.
/// Each is held by a counted reference (`CqRef`) while recorded, so that
/// `destroy_cq` waits until its handler has returned. A pass that reaches
/// more armed CQs than it records marks the rest `event_due` and collects
/// them under the lock again in `run`: no event is lost.
pub(crate) struct Notify {
    cqs: [Option<CqRef>; NOTIFY_CQS],
    n: usize,
    overflowed: bool,
}

impl Notify {
    pub(crate) fn new() -> Self {
        Self {
            cqs: [const { None }; NOTIFY_CQS],
            n: 0,
            overflowed: false,
        }
    }

    /// Records `cq` (armed: the caller disarmed it) for its handler. Called
    /// with the device lock held and the CQ in its table.
    fn add(&mut self, cq: &mut CqEntry) {
        if self.cqs.iter().take(self.n).flatten().any(|c| Counted::same(c, &cq.cq)) {
            return;
        }
        match self.cqs.get_mut(self.n) {
            Some(slot) => {
                *slot = Some(cq.cq.clone());
                self.n += 1;
            }
            None => {
                cq.event_due = true;
                self.overflowed = true;
            }
        }
    }

    /// Runs the recorded handlers (`call`) and drops their references.
    fn fire(&mut self, call: bool) {
        let n = core::mem::take(&mut self.n);
        for c in self.cqs.iter_mut().take(n).filter_map(Option::take) {
            if call {
                c.comp_handler();
            }
        }
    }

    /// Runs the handlers. Call without the device lock: a kernel ULP's
    /// handler may poll the CQ right away. The CQs a full pass marked
    /// `event_due` are collected under the lock, `NOTIFY_CQS` at a time (a
    /// loop bounded by the number of CQs, each taken once).
    pub(crate) fn run(mut self, dev: &FerroceDevice) {
        self.fire(true);
        while core::mem::take(&mut self.overflowed) {
            {
                let mut st = dev.state.lock();
                for cq in st.cqs.iter_mut().filter_map(|c| c.as_deref_mut()) {
                    if !cq.event_due {
                        continue;
                    }
                    if self.n >= NOTIFY_CQS {
                        self.overflowed = true;
                        break;
                    }
                    cq.event_due = false;
                    self.add(cq);
                }
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
    let DevState { qps, cqs, ahs, .. } = st;
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
                if pending > 0 {
                    dev.count(Counter::CqFull);
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
                notify.add(cq);
            }
        }
    }
    crate::driver::rings::release(e);
}
