// SPDX-License-Identifier: GPL-2.0

//! The send windows a device's RC QPs on the wire share
//! (`transport::rc::shared`), one per destination (by a hash of its
//! address, `slot_of`), in the driver. Every RC QP whose path leaves the
//! device charges the packets it has in flight to its destination's window
//! after each engine step (`wire_sync`, from `complete::drain`, which runs
//! after every receive, transmit pass, timer and modify); a transmit pass
//! sends no more than the window allows (`wire_begin`, `wire_end`); a QP
//! it holds back waits in the window's FIFO, threaded through the QP
//! table, and room that frees goes to the oldest waiter (reserved for it;
//! it is kicked after the lock). QPs whose packets stay in the device (the
//! direct path), UC and UD QPs are not bounded.

use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{DevState, QpEntry};
use crate::transport::qp::QpType;
use crate::transport::rc::shared::{slot_of, CcEvents, SharedWindow};

/// One destination's window and the FIFO of the QPs waiting for room in
/// it (threaded through `QpEntry::wire_next`).
#[derive(Default)]
pub(crate) struct WireSlot {
    pub(crate) w: SharedWindow,
    head: Option<u32>,
    tail: Option<u32>,
}

/// The window slot of QP entry `e`'s requests, if they go on the wire (an
/// RC QP whose path does not lead back to this device).
fn slot_for(e: &QpEntry) -> Option<usize> {
    if e.qp.qp_type() != QpType::Rc {
        return None;
    }
    e.path.filter(|p| p.dip != p.sip).map(|p| slot_of(&p.dip))
}

impl DevState {
    /// After an engine step of QP `qpn`: its charge becomes what it has in
    /// flight now, its window learns what it saw (acknowledgements, losses,
    /// timeouts), and room that freed goes to the waiters.
    pub(crate) fn wire_sync(&mut self, dev: &FerroceDevice, qpn: u32) {
        let Some(e) = self.qp(qpn) else { return };
        let ev = e.qp.take_cc();
        let target = slot_for(e);
        let (new, ev) = match target {
            Some(_) => (e.qp.wire_in_flight(), ev),
            None => (0, CcEvents::default()),
        };
        let cur = usize::from(e.wire_slot);
        if let Some(t) = target.filter(|&t| t != cur) {
            // A new path, to another destination: out of the old window.
            self.wire_forget(qpn);
            if let Some(e) = self.qp(qpn) {
                e.wire_slot = u8::try_from(t).unwrap_or(0);
            }
        }
        let Some(e) = self.qp(qpn) else { return };
        let slot = usize::from(e.wire_slot);
        let old = e.wire_charge;
        if old == new && ev.is_empty() {
            return;
        }
        e.wire_charge = new;
        let Some(s) = self.wire.get_mut(slot) else { return };
        let (cuts, cwnd) = (s.w.cuts(), s.w.cwnd());
        s.w.update(old, new, ev);
        if s.w.cuts() != cuts {
            dev.count(Counter::TxWindowCut);
        }
        if s.w.cwnd() != cwnd {
            dev.set_gauge(Counter::TxWindow, u64::from(s.w.cwnd()));
        }
        self.wire_wake(slot);
    }

    /// Before a transmit pass of QP `qpn`: bounds its packets in flight to
    /// what it has plus its allowance (its reservation, and the free room
    /// when no QP waits).
    pub(crate) fn wire_begin(&mut self, qpn: u32) {
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        if slot_for(e).is_none() {
            return;
        }
        let Some(s) = self.wire.get(usize::from(e.wire_slot)) else { return };
        let allow = s.w.allowance(e.wire_grant, s.head.is_some());
        e.qp.set_send_cap(Some(e.qp.wire_in_flight().saturating_add(allow)));
    }

    /// After QP `qpn`'s transmit pass: the bound lifts, its reservation
    /// goes back, what it sent is charged, and it joins the waiters if
    /// only the window held it back.
    pub(crate) fn wire_end(&mut self, dev: &FerroceDevice, qpn: u32, now: u64) {
        let Some(e) = self.qp(qpn) else { return };
        let held = e.qp.held_by_cap(now);
        e.qp.set_send_cap(None);
        let grant = core::mem::take(&mut e.wire_grant);
        let slot = usize::from(e.wire_slot);
        if let Some(s) = self.wire.get_mut(slot) {
            s.w.release(grant);
        }
        self.wire_sync(dev, qpn);
        if held {
            self.wire_enqueue(dev, qpn);
        }
        let slot = self.qp(qpn).map_or(slot, |e| usize::from(e.wire_slot));
        self.wire_wake(slot);
    }

    /// QP `qpn` leaves its window (its destroy, or a path to another
    /// destination): its charge and reservation go back, and it leaves the
    /// waiters.
    pub(crate) fn wire_forget(&mut self, qpn: u32) {
        let Some(e) = self.qp(qpn) else { return };
        let (charge, grant, listed) = (core::mem::take(&mut e.wire_charge), core::mem::take(&mut e.wire_grant), e.wire_listed);
        let slot = usize::from(e.wire_slot);
        if let Some(s) = self.wire.get_mut(slot) {
            s.w.update(charge, 0, CcEvents::default());
            s.w.release(grant);
        }
        if listed {
            self.wire_unlink(slot, qpn);
        }
        self.wire_wake(slot);
    }

    /// QP `qpn` joins the end of its window's waiters (once).
    fn wire_enqueue(&mut self, dev: &FerroceDevice, qpn: u32) {
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
        if e.wire_listed {
            return;
        }
        let slot = usize::from(e.wire_slot);
        let Some(tail) = self.wire.get(slot).map(|s| s.tail) else { return };
        e.wire_listed = true;
        e.wire_next = None;
        dev.count(Counter::TxWindowWait);
        let linked = match tail.and_then(|t| self.qps.get_mut(t as usize)).and_then(|e| e.as_deref_mut()) {
            Some(t) => {
                t.wire_next = Some(qpn);
                true
            }
            // (a tail that is gone cannot be: destroy unlinks)
            None => false,
        };
        if let Some(s) = self.wire.get_mut(slot) {
            if !linked {
                s.head = Some(qpn);
            }
            s.tail = Some(qpn);
        }
    }

    /// Takes QP `qpn` out of window `slot`'s waiters (`tables::unlink_qp`,
    /// a walk of them); when it was the last, the one before it becomes
    /// the last (another walk).
    fn wire_unlink(&mut self, slot: usize, qpn: u32) {
        let DevState { qps, wire, .. } = self;
        let Some(s) = wire.get_mut(slot) else { return };
        crate::driver::tables::unlink_qp(qps, &mut s.head, qpn, |e| (&mut e.wire_listed, &mut e.wire_next));
        if s.tail != Some(qpn) {
            return;
        }
        s.tail = None;
        let mut cur = s.head;
        for _ in 0..qps.len() {
            let Some(c) = cur else { return };
            s.tail = Some(c);
            cur = qps.get(c as usize).and_then(|e| e.as_deref()).and_then(|e| e.wire_next);
        }
    }

    /// While window `slot` has room, its oldest waiter leaves the FIFO
    /// with a reservation, into the woken set (`wire_woken`) that the next
    /// `kick` runs after its lock (`sched::kick_woken` where no kick
    /// follows); when the set is full, into its work item.
    fn wire_wake(&mut self, slot: usize) {
        let DevState { qps, wire, wire_woken, .. } = self;
        let Some(s) = wire.get_mut(slot) else { return };
        while let Some(q) = s.head {
            if s.w.room() == 0 {
                return;
            }
            let Some(e) = qps.get_mut(q as usize).and_then(|e| e.as_deref_mut()) else {
                // Cannot be (destroy unlinks): the list ends here.
                s.head = None;
                s.tail = None;
                return;
            };
            s.head = e.wire_next.take();
            if s.head.is_none() {
                s.tail = None;
            }
            e.wire_listed = false;
            e.wire_grant = e.wire_grant.saturating_add(s.w.reserve());
            if !wire_woken.add(q) {
                crate::driver::sched::continue_tx(e);
            }
        }
    }
}
