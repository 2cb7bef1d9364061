// SPDX-License-Identifier: GPL-2.0

//! The device's shared send window (`transport::rc::shared`) in the
//! driver. Every RC QP whose path leaves the device charges the packets it
//! has in flight to the window after each engine step (`wire_sync`, from
//! `complete::drain`, which runs after every receive, transmit pass, timer
//! and modify); a transmit pass sends no more than the window allows
//! (`wire_begin`, `wire_end`); a QP it holds back waits in a FIFO
//! threaded through the QP table, and room that frees goes to the oldest
//! waiter (reserved for it; it is kicked after the lock). QPs whose packets stay
//! in the device (the direct path), UC and UD QPs are not bounded.

use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{DevState, QpEntry};
use crate::transport::qp::QpType;
use crate::transport::rc::shared::CcEvents;

/// Whether QP entry `e`'s requests go on the wire: an RC QP whose path
/// does not lead back to this device.
fn on_wire(e: &QpEntry) -> bool {
    e.qp.qp_type() == QpType::Rc && e.path.is_some_and(|p| p.dip != p.sip)
}

impl DevState {
    /// After an engine step of QP `qpn`: its charge becomes what it has in
    /// flight now, the window learns what it saw (acknowledgements, losses,
    /// timeouts), and room that freed goes to the waiters.
    pub(crate) fn wire_sync(&mut self, dev: &FerroceDevice, qpn: u32) {
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        let ev = e.qp.take_cc();
        let (new, ev) = if on_wire(e) { (e.qp.wire_in_flight(), ev) } else { (0, CcEvents::default()) };
        let old = e.wire_charge;
        if old == new && ev.is_empty() {
            return;
        }
        e.wire_charge = new;
        let (cuts, cwnd) = (self.wire.cuts(), self.wire.cwnd());
        self.wire.update(old, new, ev);
        if self.wire.cuts() != cuts {
            dev.count(Counter::TxWindowCut);
        }
        if self.wire.cwnd() != cwnd {
            dev.set_gauge(Counter::TxWindow, u64::from(self.wire.cwnd()));
        }
        self.wire_wake();
    }

    /// Before a transmit pass of QP `qpn`: bounds its packets in flight to
    /// what it has plus its allowance (its reservation, and the free room
    /// when no QP waits).
    pub(crate) fn wire_begin(&mut self, qpn: u32) {
        let waiters = self.wire_head.is_some();
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        if !on_wire(e) {
            return;
        }
        let allow = self.wire.allowance(e.wire_grant, waiters);
        e.qp.set_send_cap(Some(e.qp.wire_in_flight().saturating_add(allow)));
    }

    /// After QP `qpn`'s transmit pass: the bound lifts, its reservation
    /// goes back, what it sent is charged, and it joins the waiters if
    /// only the window held it back.
    pub(crate) fn wire_end(&mut self, dev: &FerroceDevice, qpn: u32, now: u64) {
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        let held = e.qp.held_by_cap(now);
        e.qp.set_send_cap(None);
        let grant = core::mem::take(&mut e.wire_grant);
        self.wire.release(grant);
        self.wire_sync(dev, qpn);
        if held {
            self.wire_enqueue(dev, qpn);
        }
        self.wire_wake();
    }

    /// QP `qpn` goes (its destroy): its charge and reservation go back,
    /// and it leaves the waiters.
    pub(crate) fn wire_forget(&mut self, qpn: u32) {
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        let (charge, grant, listed) = (core::mem::take(&mut e.wire_charge), core::mem::take(&mut e.wire_grant), e.wire_listed);
        self.wire.update(charge, 0, CcEvents::default());
        self.wire.release(grant);
        if listed {
            self.wire_unlink(qpn);
        }
        self.wire_wake();
    }

    /// QP `qpn` joins the end of the waiters (once).
    fn wire_enqueue(&mut self, dev: &FerroceDevice, qpn: u32) {
        let tail = self.wire_tail;
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        if e.wire_listed {
            return;
        }
        e.wire_listed = true;
        e.wire_next = None;
        dev.count(Counter::TxWindowWait);
        match tail.and_then(|t| self.qps.get_mut(t as usize)).and_then(|e| e.as_deref_mut()) {
            Some(t) => t.wire_next = Some(qpn),
            // (a tail that is gone cannot be: destroy unlinks)
            None => self.wire_head = Some(qpn),
        }
        self.wire_tail = Some(qpn);
    }

    /// Takes QP `qpn` out of the waiters: a walk of them.
    fn wire_unlink(&mut self, qpn: u32) {
        let mut prev: Option<u32> = None;
        let mut cur = self.wire_head;
        for _ in 0..self.qps.len() {
            let Some(c) = cur else { return };
            let Some(e) = self.qps.get_mut(c as usize).and_then(|e| e.as_deref_mut()) else { return };
            if c != qpn {
                prev = cur;
                cur = e.wire_next;
                continue;
            }
            let next = e.wire_next.take();
            e.wire_listed = false;
            match prev.and_then(|p| self.qps.get_mut(p as usize)).and_then(|e| e.as_deref_mut()) {
                Some(p) => p.wire_next = next,
                None => self.wire_head = next,
            }
            if self.wire_tail == Some(qpn) {
                self.wire_tail = prev;
            }
            return;
        }
    }

    /// While the window has room, the oldest waiter leaves the FIFO with
    /// a reservation, into the woken set (`wire_woken`) that the next
    /// `kick` runs after its lock (`sched::kick_woken` where no kick
    /// follows); when the set is full, into its work item.
    fn wire_wake(&mut self) {
        let DevState { qps, wire, wire_head, wire_tail, wire_woken, .. } = self;
        while let Some(q) = *wire_head {
            if wire.room() == 0 {
                return;
            }
            let Some(e) = qps.get_mut(q as usize).and_then(|e| e.as_deref_mut()) else {
                // Cannot be (destroy unlinks): the list ends here.
                *wire_head = None;
                *wire_tail = None;
                return;
            };
            *wire_head = e.wire_next.take();
            if wire_head.is_none() {
                *wire_tail = None;
            }
            e.wire_listed = false;
            e.wire_grant = e.wire_grant.saturating_add(wire.reserve());
            if !wire_woken.add(q) {
                e.core.queue_work();
            }
        }
    }
}
