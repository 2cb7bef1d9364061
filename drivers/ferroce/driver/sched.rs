// SPDX-License-Identifier: GPL-2.0

//! The scheduler: who runs a QP's send side, and when. `kick` runs one QP's
//! passes (claim the QP, build a batch under the lock, send it after) and
//! then, iteratively, the QPs its deliveries woke; the device's local queue
//! is delivered by `run_local`; what is left over goes to the QP's or the
//! device's work item. The QP timer, the QP work item (with the linger on a
//! process's ring) and the device work item enter here.

use super::complete::{drain, Notify};
use super::tx::{self, Batch, Deferred};
use crate::rdma::sys::{self, now_ns};
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::DevState;
use core::sync::atomic::Ordering;

/// Packets one call of `kick` sends before it leaves the rest to the QP's
/// work item. A burst larger than the receive backlog of the loopback or
/// veth device (netdev_max_backlog) would be dropped before any of it is
/// processed, when the burst comes from softirq context (the receive path
/// answering a large READ); the work item runs in process context, where
/// every dropped bottom-half lock lets the backlog drain.
pub(crate) const KICK_BUDGET_SOFTIRQ: usize = 32;
pub(crate) const KICK_BUDGET_TASK: usize = 256;

/// Runs QP `qpn`'s send side: packets the engine has ready (at most
/// `budget`; the QP's work item continues when more remain) are
/// encapsulated and handed to the IP stack (or, to this device: an RC
/// QP's packets go straight to the receiving QP, `direct_batch`; others are
/// queued locally and delivered after each batch); completions go to the
/// CQs.
pub(crate) fn kick(dev: &FerroceDevice, qpn: u32, budget: usize) {
    let mut chain = Chain::default();
    kick_one(dev, qpn, budget, &mut chain);
    // The QPs this kick delivered to answer next, in turn, never nested:
    // a chain of device-local QPs (each delivering to the next) is walked
    // here with a constant stack, and past CHAIN_BUDGET kicks the rest
    // continue in their work items.
    let mut done = 0usize;
    while let Some(q) = chain.pop() {
        if done >= CHAIN_BUDGET {
            defer_kick(dev, q);
            continue;
        }
        done += 1;
        kick_one(dev, q, KICK_BUDGET_SOFTIRQ, &mut chain);
    }
}

/// Kicks one top-level `kick` runs for the QPs its deliveries woke, before
/// it leaves them to their work items.
const CHAIN_BUDGET: usize = 64;

/// QPs waiting for their turn in `kick` (FIFO, bounded; a QP that does not
/// fit is handed to its work item).
#[derive(Default)]
struct Chain {
    qpns: [u32; 16],
    head: usize,
    len: usize,
}


impl Chain {
    fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let q = self.qpns.get(self.head).copied();
        self.head = (self.head + 1) % self.qpns.len();
        self.len -= 1;
        q
    }

    /// Takes the QPs of `d` in; those that do not fit go to their work
    /// items.
    fn take(&mut self, dev: &FerroceDevice, d: &mut Deferred) {
        for q in d.take() {
            if self.qpns.iter().cycle().skip(self.head).take(self.len).any(|&x| x == q) {
                continue;
            }
            let cap = self.qpns.len();
            match self.qpns.get_mut((self.head + self.len) % cap) {
                Some(slot) if self.len < cap => {
                    *slot = q;
                    self.len += 1;
                }
                _ => defer_kick(dev, q),
            }
        }
    }
}

/// Leaves QP `qpn`'s send side to its work item (process context).
fn defer_kick(dev: &FerroceDevice, qpn: u32) {
    let st = dev.state.lock();
    if let Some(e) = st.qps.get(qpn as usize).and_then(|e| e.as_deref()) {
        e.core.queue_work();
    }
}

/// One QP's part of `kick`; the QPs it delivered to join `chain`.
fn kick_one(dev: &FerroceDevice, qpn: u32, budget: usize, chain: &mut Chain) {
    let mut sent = 0usize;
    let mut first = true;
    loop {
        let mut notify = Notify::new();
        let mut batch = Batch::new();
        let more = {
            let mut st = dev.state.lock();
            let st = &mut *st;
            if first {
                if !claim(st, qpn) {
                    return;
                }
                first = false;
            }
            if sent >= budget {
                if let Some(e) = st.qp(qpn) {
                    e.tx_busy = false;
                    e.core.queue_work();
                }
                return;
            }
            let n = tx::build(dev, st, qpn, now_ns(), budget.saturating_sub(sent), &mut batch, &mut notify);
            sent = sent.saturating_add(n);
            drain(dev, st, qpn, 0, &mut notify);
            batch.progressed() || settle(dev, st, qpn, batch.nomem)
        };
        notify.run(dev);
        if batch.send(dev) {
            run_local(dev, LOCAL_BUDGET);
        }
        chain.take(dev, &mut batch.direct.peers);
        if !more {
            return;
        }
    }
}

/// Makes this kick QP `qpn`'s one sender (under the device lock): one
/// sender per QP keeps its packets in PSN order. A kick that finds another
/// one running (the system call, the receive softirq and the work item can
/// meet on different CPUs) leaves it a note and returns false.
fn claim(st: &mut DevState, qpn: u32) -> bool {
    let Some(e) = st.qp(qpn) else { return false };
    // A kernel consumer posting with hard interrupts disabled (the MAD
    // layer does, under its queue's spin_lock_irqsave) must not reach the
    // IP stack from there (it enables bottom halves): the QP's work item
    // sends.
    if sys::irqs_disabled() {
        e.core.queue_work();
        return false;
    }
    if e.tx_busy {
        e.tx_again = true;
        return false;
    }
    e.tx_busy = true;
    e.tx_again = false;
    true
}

/// A pass found nothing to send: the QP's timer is armed and its sender
/// stops, unless a late kick left a note or the process's ring has more
/// (true: go on). Decided under the same lock a late kick takes to leave
/// its note: nothing is lost.
fn settle(dev: &FerroceDevice, st: &mut DevState, qpn: u32, nomem: bool) -> bool {
    let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return false };
    e.arm_timer();
    if nomem {
        // The timer (ACK timeout) or the next event retries.
        dev.count(Counter::TxNoMem);
        e.tx_busy = false;
        return false;
    }
    // A process's QP that goes idle lingers, or asks for a doorbell and
    // looks at its ring once more.
    let mut more = core::mem::take(&mut e.tx_again);
    match crate::driver::rings::idle(e) {
        crate::driver::rings::Idle::Recheck => more = true,
        crate::driver::rings::Idle::Linger => e.core.queue_work(),
        crate::driver::rings::Idle::Stop => {}
    }
    e.tx_busy = more;
    more
}

/// A datagram from the wire (IP header onwards), from the UDP tunnel's
/// receive callback: received, then the QP it woke sends.
pub(crate) fn receive_datagram(dev: &FerroceDevice, packet: &[u8]) {
    if let Some(qpn) = super::rx::receive(dev, packet, false) {
        kick(dev, qpn, KICK_BUDGET_SOFTIRQ);
    }
}

/// The QP timer: retransmission, RNR back-off and other engine deadlines.
pub(crate) fn qp_timer(dev: &FerroceDevice, qpn: u32) {
    let mut notify = Notify::new();
    {
        let mut st = dev.state.lock();
        if let Some(e) = st.qp(qpn) {
            e.armed_for = None;
            e.qp.on_timer(now_ns());
            drain(dev, &mut st, qpn, 0, &mut notify);
        } else {
            return;
        }
    }
    notify.run(dev);
    kick(dev, qpn, KICK_BUDGET_SOFTIRQ);
}

/// The QP's work item: continues a send side that had more to send than
/// one `kick` may send.
pub(crate) fn qp_work(dev: &FerroceDevice, qpn: u32) {
    linger_wait(dev, qpn);
    kick(dev, qpn, KICK_BUDGET_TASK);
}

/// How long a lingering QP's work item waits for the process to post
/// more (see `rings::idle`), sleeping 10-20 us at a time.
const LINGER_NS: u64 = 300_000;
/// The first part of a linger polls without sleeping (a sleep of 10 us
/// takes far longer to come back from than the process takes to post).
const LINGER_SPIN_NS: u64 = 50_000;

/// A lingering QP's work item: waits (at most `LINGER_NS`) until the
/// process has posted more before the kick that takes it, so that a
/// process streaming requests finds the kernel still looking at its ring.
fn linger_wait(dev: &FerroceDevice, qpn: u32) {
    let start = now_ns();
    let mut watch = None;
    loop {
        {
            let mut st = dev.state.lock();
            let Some(e) = st.qp(qpn) else { return };
            if !crate::driver::rings::waiting_for_more(e) || now_ns().saturating_sub(start) > LINGER_NS {
                crate::driver::rings::linger_done(e);
                return;
            }
            if watch.is_none() {
                watch = crate::driver::rings::linger_watch(e);
            }
        }
        if now_ns().saturating_sub(start) < LINGER_SPIN_NS {
            // Spin on the producer index without the lock (posts from the
            // process, kicks of other QPs go on meanwhile), coming back to
            // the lock at most every 10 us.
            let t0 = now_ns();
            if let Some((prod, taken)) = watch.as_ref() {
                // The watch holds the SQ ring's memory: no lock needed.
                while prod.prod() == *taken && now_ns().saturating_sub(t0) < 10_000 {
                    kernel::processor::cpu_relax();
                }
            }
            sys::cond_resched();
            continue;
        }
        // A short sleep in process context (the work item): the process
        // whose next request we wait for may need this very CPU. (Not
        // `kernel::time::delay::fsleep`: for 10 us it busy-waits in udelay
        // and keeps the CPU; rings.sh counts 6836 system calls for 20000
        // 64-byte writes with it, against fewer than 4000 asleep.)
        sys::usleep_range(10, 20);
    }
}

/// Local packets one pass of `run_local` hands to the receive path
/// before it leaves the rest to the device's work item.
const LOCAL_BUDGET: usize = 256;

/// Kicks the QPs of `d` (what they send locally joins the queue).
fn kick_all(dev: &FerroceDevice, d: &mut Deferred) {
    for qpn in d.take() {
        kick(dev, qpn, KICK_BUDGET_SOFTIRQ);
    }
}

/// Drains the device's local queue (packets `send` queued to this very
/// device) if no other pass runs; at most `budget` packets, then the
/// device's work item continues. Iteration instead of recursion: a busy
/// pair of QPs cannot grow the stack (what the receive path answers is
/// queued behind), and one queue keeps every QP's packets in order. The
/// send sides that received packets want run once the queue is empty:
/// a responder that took a batch of requests answers them with one ACK.
pub(crate) fn run_local(dev: &FerroceDevice, budget: usize) {
    let mut kicks = Deferred::default();
    loop {
        if dev
            .local_depth
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return; // the running pass will see our packets
        }
        let mut n = 0usize;
        loop {
            if n >= budget {
                kick_all(dev, &mut kicks);
                dev.local_depth.store(0, Ordering::Release);
                dev.queue_work();
                return;
            }
            let Some(skb) = dev.local_pop() else {
                if kicks.is_empty() {
                    break;
                }
                kick_all(dev, &mut kicks);
                continue;
            };
            n = n.saturating_add(1);
            // A buffer from `send`: its data is the IP packet.
            let kick_qpn = super::rx::receive(dev, skb.data(), true);
            skb.consume();
            if let Some(qpn) = kick_qpn {
                if !kicks.add(qpn) {
                    kick_all(dev, &mut kicks);
                    let _ = kicks.add(qpn);
                }
            }
        }
        dev.local_depth.store(0, Ordering::Release);
        // A packet queued after our last look but before the release would
        // otherwise wait for the next local send.
        if dev.local_is_empty() {
            return;
        }
    }
}

/// The device's work item: continues the local queue.
pub(crate) fn device_work(dev: &FerroceDevice) {
    run_local(dev, LOCAL_BUDGET);
}
