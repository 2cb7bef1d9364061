// SPDX-License-Identifier: GPL-2.0

//! The scheduler: who runs a QP's send side, and when. `kick` runs one QP's
//! passes (claim the QP, build a batch under the lock, send it after) and
//! then, iteratively, the QPs its deliveries woke; the device's local queue
//! is delivered by `run_local`; what is left over goes to the QP's or the
//! device's work item. The QP timer, the QP work item, the device's linger
//! work (which watches the rings of the processes' idle QPs) and the
//! device work item enter here.

use super::complete::{drain, Notify};
use super::tx::{self, Batch, Deferred};
use crate::rdma::sys::{self, now_ns};
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{DevState, QpEntry};
use crate::rdma::qp::WorkPrio;
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
    let mut st = dev.state.lock();
    if let Some(e) = st.qp(qpn) {
        continue_tx(e);
    }
}

/// Queues QP `e`'s send continuation on its high-priority work item while
/// its budget allows (`qp_hi_us`, then a rest of `qp_lo_us` on the normal
/// one: `transport::prio`). Under the device lock, which the budget's
/// state needs.
pub(crate) fn continue_tx(e: &mut QpEntry) {
    let high = e.tx_prio.high(now_ns(), sys::qp_hi_ns(), sys::qp_lo_ns());
    e.core.queue_work(if high { WorkPrio::High } else { WorkPrio::Normal });
}

/// One QP's part of `kick`; the QPs it delivered to join `chain`.
fn kick_one(dev: &FerroceDevice, qpn: u32, budget: usize, chain: &mut Chain) {
    let mut sent = 0usize;
    let mut first = true;
    loop {
        let mut notify = Notify::new();
        let mut batch = Batch::new();
        let mut woken: Deferred;
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
                    continue_tx(e);
                }
                return;
            }
            let n = tx::build(dev, st, qpn, now_ns(), budget.saturating_sub(sent), &mut batch, &mut notify);
            sent = sent.saturating_add(n);
            drain(dev, st, qpn, 0, &mut notify);
            woken = core::mem::take(&mut st.wire_woken);
            batch.progressed() || settle(dev, st, qpn, batch.nomem)
        };
        notify.run(dev);
        if batch.send(dev) {
            run_local(dev, LOCAL_BUDGET);
        }
        chain.take(dev, &mut batch.direct.peers);
        // QPs that room in the shared window woke run next, in turn.
        chain.take(dev, &mut woken);
        if !more {
            return;
        }
    }
}

/// How long the destroy of a process's UD or UC QP waits, at most, for
/// what it was posted to leave (`send_posted`).
const SEND_POSTED_NS: u64 = 100_000_000;

/// Sends what a process's UD or UC QP `qpn` was posted and has not sent
/// yet, before the QP goes (as from a NIC, which holds the requests by the
/// time the post returns: the linger work, or the kernel's sender between
/// two looks at the ring, may not have taken them yet). A kick that finds
/// another sender running only leaves it a note, and that sender's next
/// pass would find the QP gone: this waits until no sender runs, the ring
/// is taken and the engine has nothing ready (a sender that stopped for
/// want of memory or a page fault counts as done), for at most
/// `SEND_POSTED_NS` (a process posting without end cannot hold its own
/// destroy). Process context.
pub(crate) fn send_posted(dev: &FerroceDevice, qpn: u32) {
    let start = now_ns();
    loop {
        kick(dev, qpn, KICK_BUDGET_TASK);
        let done = {
            let mut st = dev.state.lock();
            st.qp(qpn).is_none_or(|e| !e.tx_busy && crate::driver::rings::sq_taken_all(e) && !e.qp.may_transmit(now_ns()))
        };
        if done || now_ns().saturating_sub(start) > SEND_POSTED_NS {
            return;
        }
        sys::usleep_range(10, 20);
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
        continue_tx(e);
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
    let Some(e) = st.qp(qpn) else { return false };
    e.arm_timer();
    if nomem {
        // The timer (ACK timeout) or the next event retries.
        dev.count(Counter::TxNoMem);
        e.tx_busy = false;
        return false;
    }
    // A process's QP that goes idle lingers (joins the device's list of
    // them, which the linger work watches), or asks for a doorbell and
    // looks at its ring once more.
    let mut more = core::mem::take(&mut e.tx_again);
    let idle = crate::driver::rings::idle(dev, e);
    let idle = match idle {
        crate::driver::rings::Idle::Linger if st.lingering >= MAX_LINGERING => {
            st.qp(qpn).map_or(crate::driver::rings::Idle::Stop, |e| crate::driver::rings::linger_refused(dev, e))
        }
        crate::driver::rings::Idle::Linger => {
            if st.enter_linger(qpn, now_ns()) {
                dev.queue_linger_work();
            }
            crate::driver::rings::Idle::Stop
        }
        other => other,
    };
    if matches!(idle, crate::driver::rings::Idle::Recheck) {
        more = true;
    }
    if let Some(e) = st.qp(qpn) {
        e.tx_busy = more;
    }
    more
}

/// A datagram from the wire (IP header onwards), from the UDP tunnel's
/// receive callback: received, then the QP it woke sends.
pub(crate) fn receive_datagram(dev: &FerroceDevice, packet: &[u8]) {
    // With `rx_burst`, what the datagram leaves to do waits for the end of
    // the softirq's receive pass (`burst_work`).
    let burst = sys::in_burst();
    match super::rx::receive(dev, packet, false, burst) {
        Some(qpn) => kick(dev, qpn, KICK_BUDGET_SOFTIRQ),
        None if burst => {}
        // An ACK that left its QP nothing to send may still have made room
        // in the shared window for others.
        None => kick_woken(dev),
    }
}

/// The device's burst work item (bottom-half context, after a softirq's
/// receive pass): runs the send sides of the RC QPs that received in the
/// pass, once each (a responder answers the burst's requests with one
/// ACK), then the QPs room in the shared window woke.
pub(crate) fn burst_work(dev: &FerroceDevice) {
    // What this CPU receives from now on is answered in place, until it
    // sends (or is handed) another batch.
    sys::burst_clear();
    let mut kicks = core::mem::take(&mut dev.state.lock().rx_kicks);
    kick_all(dev, &mut kicks);
    kick_woken(dev);
}

/// Runs the QPs that room in the shared window woke (`DevState::wire_woken`)
/// where no `kick` follows to take them.
pub(crate) fn kick_woken(dev: &FerroceDevice) {
    let mut woken = {
        let mut st = dev.state.lock();
        if st.wire_woken.is_empty() {
            return;
        }
        core::mem::take(&mut st.wire_woken)
    };
    for qpn in woken.take() {
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

/// The QP's work item (of priority `prio`, `continue_tx`): continues a
/// send side that had more to send than one `kick` may send.
pub(crate) fn qp_work(dev: &FerroceDevice, qpn: u32, prio: WorkPrio) {
    dev.count(match prio {
        WorkPrio::High => Counter::TxContHigh,
        WorkPrio::Normal => Counter::TxContNormal,
    });
    kick(dev, qpn, KICK_BUDGET_TASK);
}

/// How long a QP lingers: the linger work waits this long for the process
/// to post more (see `rings::idle`).
pub(crate) const LINGER_NS: u64 = 300_000;
/// For this long after a QP it watches was posted to, the linger work looks
/// again without sleeping (a sleep of 10 us takes far longer to come back
/// from than the process takes to post); then it sleeps 10-20 us between
/// looks.
const LINGER_SPIN_NS: u64 = 50_000;
/// While it spins, the linger work looks at the rings (under the device
/// lock) every this many ns.
const LINGER_LOOK_NS: u64 = 2_000;
/// QPs that linger at once, at most: the linger work walks all of them
/// under the device lock at every look. Past this many, a QP that would
/// linger asks for the doorbell instead (its process then rings it).
pub(crate) const MAX_LINGERING: u32 = 128;
/// With more than this many QPs lingering, a linger ends after
/// `LINGER_SPIN_NS` instead of `LINGER_NS` (the list drains faster, and
/// the QPs of a process posting to many make room for each other).
const CROWDED: u32 = MAX_LINGERING / 4;
/// QPs one look of the linger work takes out of the list before it kicks
/// them.
const LINGER_TAKE: usize = 16;

/// The device's linger work: one for all the QPs that linger (not a work
/// item each: with tens of QPs lingering at once, as many workers spinning
/// took the CPUs from the processes posting to them). It looks at the
/// send rings of the QPs in the device's list (`DevState::qp_linger`);
/// a QP whose process posted, or whose `LINGER_NS` are up, leaves the
/// list (`rings::linger_done` decides whether it asks for the doorbell)
/// and is kicked. It returns when the list is empty; a QP that joins an
/// empty list queues it again.
pub(crate) fn linger_work(dev: &FerroceDevice) {
    let mut active = now_ns();
    loop {
        let mut ready = [0u32; LINGER_TAKE];
        let mut posted = false;
        let (n, spin) = {
            let mut st = dev.state.lock();
            let now = now_ns();
            let limit = if st.lingering > CROWDED { LINGER_SPIN_NS } else { LINGER_NS };
            let n = st.take_lingering(dev, &mut ready, |e| {
                if !crate::driver::rings::waiting_for_more(e) {
                    posted = true;
                    return true;
                }
                now.saturating_sub(e.linger_since) > limit
            });
            if posted {
                active = now;
            }
            // The work ends when it finds the list empty and has nothing
            // to kick; from then on a doorbell kicks in its own call.
            let spin = now.saturating_sub(active) < LINGER_SPIN_NS && (n > 0 || st.qp_linger.is_some());
            st.linger_spinning = spin;
            if n == 0 && st.qp_linger.is_none() {
                return;
            }
            (n, spin)
        };
        for &q in ready.get(..n).unwrap_or(&[]) {
            kick(dev, q, KICK_BUDGET_TASK);
        }
        sys::cond_resched();
        if n > 0 {
            continue;
        }
        if spin {
            // Posts from the processes and kicks of other QPs go on
            // meanwhile: the lock is not held.
            let t0 = now_ns();
            while now_ns().saturating_sub(t0) < LINGER_LOOK_NS {
                kernel::processor::cpu_relax();
            }
        } else {
            // A short sleep in process context: the process whose next
            // request we wait for may need this very CPU. (Not
            // `kernel::time::delay::fsleep`: for 10 us it busy-waits in
            // udelay and keeps the CPU; rings.sh counted 6836 system calls
            // for 20000 64-byte writes with it, against fewer than 4000
            // asleep.)
            sys::usleep_range(10, 20);
        }
    }
}

/// A process rang QP `qpn`'s doorbell (an empty `ibv_post_send` system
/// call). While the linger work looks at the rings without sleeping, the
/// QP joins its list and the work sends on its own CPU: the process goes
/// back to posting at once (with `ib_write_bw -q 64`, each QP's first
/// request of a burst rang, and the process then spent the call sending,
/// its responder answering and the completion). Otherwise the call kicks.
pub(crate) fn doorbell(dev: &FerroceDevice, qpn: u32) {
    {
        let mut st = dev.state.lock();
        if st.linger_spinning && st.lingering < MAX_LINGERING {
            // The work is looping (it cleared the flag under this lock
            // before it could end): it takes the QP at its next look. The
            // doorbell is heard: the process's next posts need not ring
            // until the kernel asks again (they rang 2.5 times an ask with
            // `ib_write_bw -q 64` while the flag stayed up until the take).
            let _ = st.enter_linger(qpn, now_ns());
            if let Some(e) = st.qp(qpn) {
                crate::driver::rings::doorbell_heard(e);
            }
            return;
        }
    }
    kick(dev, qpn, KICK_BUDGET_TASK);
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
            let kick_qpn = super::rx::receive(dev, skb.data(), true, false);
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
