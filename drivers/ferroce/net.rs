// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 on the wire: one pair of UDP tunnel sockets (port 4791, IPv4 and
//! IPv6) per network namespace, encapsulation of the engine's transport
//! packets into IP/UDP with the ICRC, and the receive path that checks IP,
//! UDP and the ICRC before the engine sees a byte.

use crate::rdma::net::Skb;
use crate::rdma::object::{Counted, CqRef, SrqRef};
use crate::rdma::sys::{self, now_ns};
use crate::rdma::{Counter, FerroceDevice};
use crate::state::{Av, CqEntry, CqSlot, DevState, Mem};
use crate::transport::engine::{NetHeader, RxOutcome};
use crate::transport::qp::QpType;
use crate::transport::wire::ip::{self, IpHeader, IpUdpRepr, UdpHeader, IPV6_LEN, UDP_LEN};
use crate::transport::wire::{icrc, Bth};
use core::sync::atomic::Ordering;

pub(crate) use crate::transport::wire::ip::ROCE_PORT;
const ICRC_LEN: usize = 4;
/// Transport packets are written after room for the larger IP header.
const TX_HEADROOM: usize = IPV6_LEN + UDP_LEN;
/// Largest transport packet: 4096 bytes of payload plus headers and pad.
const TX_MAX_TRANSPORT: usize = crate::transport::wire::packet::tx_buffer_len(4096);
const TX_ALLOC: usize = TX_HEADROOM + TX_MAX_TRANSPORT + ICRC_LEN;

/// The socket buffer a packet of a QP with path MTU `mtu` needs: with a
/// 1024-byte MTU it fits a 2 KiB slab object, where the largest packet
/// would take an order-1 page for every ACK.
fn tx_len(mtu: crate::transport::qp::Mtu) -> usize {
    (TX_HEADROOM + crate::transport::wire::packet::tx_buffer_len(mtu.bytes() as usize) + ICRC_LEN).min(TX_ALLOC)
}

// ---------------------------------------------------------------------------
// Completions

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
    crate::rings::sync(dev, e, ahs);
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
            // A process's ring slot is free before its completion shows:
            // an application that reposts on seeing it finds the room.
            crate::rings::release(e);
            let _ = cq.push(CqSlot {
                cqe,
                qp: e.token,
                ip_version: if recv { ip_version } else { 0 },
            });
            if cq.armed.take().is_some() {
                notify.add(cq);
            }
        }
    }
    crate::rings::release(e);
}

// ---------------------------------------------------------------------------
// Transmit

/// Packets one call of `kick` sends before it leaves the rest to the QP's
/// work item. A burst larger than the receive backlog of the loopback or
/// veth device (netdev_max_backlog) would be dropped before any of it is
/// processed, when the burst comes from softirq context (the receive path
/// answering a large READ); the work item runs in process context, where
/// every dropped bottom-half lock lets the backlog drain.
pub(crate) const KICK_BUDGET_SOFTIRQ: usize = 32;
pub(crate) const KICK_BUDGET_TASK: usize = 256;

/// Packets one pass of `kick` builds under one hold of the device lock
/// before it sends them. Local packets of a batch are queued and delivered
/// together, so the receiving QP sees several requests before it answers
/// and its ACKs merge into one (the responder merges queued ACKs).
const TX_BATCH: usize = 8;

/// Packets one pass of `kick` delivers to QPs of this device under one
/// hold of the lock (`direct_batch`): no socket buffers to hold, and the
/// receiving QP answers the whole batch with one ACK.
const DIRECT_BATCH: usize = 32;

/// A packet built under the lock, sent after it.
struct Ready {
    skb: Skb,
    len: usize,
    av: Option<Av>,
    sport: u16,
}

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
        let n = core::mem::take(&mut d.n);
        for &q in d.qpns.iter().take(n) {
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
        let mut batch: [Option<Ready>; TX_BATCH] = [const { None }; TX_BATCH];
        let mut n = 0usize;
        let mut direct = Direct::default();
        let more = {
            let mut st = dev.state.lock();
            let st = &mut *st;
            // One sender per QP keeps its packets in PSN order: a kick that
            // finds another one running (the system call, the receive
            // softirq and the work item can meet on different CPUs) leaves
            // it a note and returns. Marked under the lock of the first
            // batch.
            if first {
                let Some(e) = st.qp(qpn) else { return };
                // A kernel consumer posting with hard interrupts disabled
                // (the MAD layer does, under its queue's
                // spin_lock_irqsave) must not reach the IP stack from there
                // (it enables bottom halves): the QP's work item sends.
                if sys::irqs_disabled() {
                    e.core.queue_work();
                    return;
                }
                if e.tx_busy {
                    e.tx_again = true;
                    return;
                }
                e.tx_busy = true;
                e.tx_again = false;
                first = false;
            }
            if sent >= budget {
                if let Some(e) = st.qp(qpn) {
                    e.tx_busy = false;
                    e.core.queue_work();
                }
                return;
            }
            let now = now_ns();
            let mut nomem = false;
            // An RC QP whose path leads back to this device (the same
            // address at both ends) hands its packets to the receiving QP
            // right here, under this same hold of the lock: no socket
            // buffer, no IP/UDP header, no queue, no second lock. Its peer
            // answers after the batch (`peers`). So does a UD QP whose last
            // packet went to this device (each packet's AH decides).
            let local_path = st.qp(qpn).and_then(|e| match e.qp.qp_type() {
                QpType::Rc => e.path.filter(|p| p.dip == p.sip).map(Some),
                QpType::Ud => e.ud_direct.then_some(None),
            });
            if let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
                crate::rings::pull_sq(dev, e, &st.ahs);
            }
            if let Some(path) = local_path {
                let limit = DIRECT_BATCH.min(budget.saturating_sub(sent));
                direct = direct_batch(dev, st, qpn, path.as_ref(), now, limit, &mut notify);
                sent = sent.saturating_add(direct.n);
                if let Some(r) = direct.spill.take() {
                    if let Some(slot) = batch.get_mut(0) {
                        *slot = Some(r);
                        n = 1;
                    }
                }
            } else if let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
                let mut mem = Mem::of(&mut st.mrs, dev, e);
                while n < TX_BATCH && sent < budget {
                    // A socket buffer only when the engine may have a
                    // packet (most kicks after a received packet find
                    // nothing to send), sized for the QP's path MTU (a
                    // 2 KiB slab object at MTU 1024, not an order-1 page).
                    if !e.qp.may_transmit(now) {
                        break;
                    }
                    let len = tx_len(e.qp.attr().path_mtu);
                    let Some(mut skb) = Skb::alloc_tx(dev, len) else {
                        nomem = true;
                        break;
                    };
                    let buf = skb.data_mut();
                    let transport = buf.get_mut(TX_HEADROOM..len.saturating_sub(ICRC_LEN));
                    let Some(t) = transport.and_then(|t| e.qp.poll_transmit(now, &mut mem, t)) else {
                        break;
                    };
                    let av = match e.qp.qp_type() {
                        QpType::Ud => {
                            let av = e.ah_av(&st.ahs, t.ah);
                            // To this device: the next batch goes direct.
                            e.ud_direct = av.is_some_and(|a| a.dip == a.sip);
                            av
                        }
                        QpType::Rc => e.path,
                    };
                    if e.note_request(buf.get(TX_HEADROOM..TX_HEADROOM.saturating_add(t.len))) {
                        dev.count(Counter::TxRetransmit);
                    }
                    let sport = e.qpn_source_port(t.dest_qpn);
                    if let Some(slot) = batch.get_mut(n) {
                        *slot = Some(Ready { skb, len: t.len, av, sport });
                    }
                    n += 1;
                    sent = sent.saturating_add(1);
                }
            }
            drain(dev, st, qpn, 0, &mut notify);
            let mut more = n + direct.n + direct.dropped > 0;
            if n + direct.n + direct.dropped == 0 {
                if let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
                    e.arm_timer();
                    if nomem {
                        // The timer (ACK timeout) or the next event retries.
                        dev.count(Counter::TxNoMem);
                        e.tx_busy = false;
                    } else {
                        // Decided under the same lock a late kick took to
                        // leave its note: nothing is lost. A process's QP
                        // that goes idle asks for a doorbell, then looks at
                        // its ring once more.
                        more = core::mem::take(&mut e.tx_again);
                        match crate::rings::idle(e) {
                            crate::rings::Idle::Recheck => more = true,
                            crate::rings::Idle::Linger => {
                                e.core.queue_work();
                            }
                            crate::rings::Idle::Stop => {}
                        }
                        e.tx_busy = more;
                    }
                }
            }
            more
        };
        notify.run(dev);
        let _ = direct.after.finish();
        let mut local = false;
        for r in batch.iter_mut().take(n).filter_map(Option::take) {
            match r.av {
                Some(av) => local |= send(dev, r.skb, r.len, &av, r.sport),
                None => dev.count(Counter::TxNoAh),
            }
        }
        if local {
            run_local(dev, LOCAL_BUDGET);
        }
        chain.take(dev, &mut direct.peers);
        if !more {
            return;
        }
    }
}

/// What `direct_batch` did.
#[derive(Default)]
struct Direct {
    /// Packets delivered.
    n: usize,
    /// UD packets dropped for want of an address handle.
    dropped: usize,
    /// The receiving QPs whose send side runs after the lock.
    peers: Deferred,
    /// An SRQ limit event, fired after the lock (the batch stops there).
    after: RxAfter,
    /// A UD packet for another host, copied into a socket buffer for
    /// `send` (the batch stops there; the QP's next batches use buffers).
    spill: Option<Ready>,
}

/// `kick`'s batch for a QP whose packets go to this device: an RC QP whose
/// path (`path`) has this device's address at both ends, or a UD QP whose
/// last packet went to one of its QPs (`path` None: each packet's AH is
/// looked at). At most `limit` packets, each built into the device's
/// `local_buf` and received by the destination QP under the same hold of
/// the lock. Each counts as a local send and a received packet, as on the
/// queued local path. The peer's send side runs after the lock is dropped,
/// so that it answers the batch with one ACK.
fn direct_batch(dev: &FerroceDevice, st: &mut DevState, qpn: u32, path: Option<&Av>, now: u64, limit: usize, notify: &mut Notify) -> Direct {
    let mut d = Direct::default();
    let mut buf = core::mem::take(&mut st.local_buf);
    let mut hdr = [0u8; IPV6_LEN + UDP_LEN];
    while d.n < limit {
        let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { break };
        if !e.qp.may_transmit(now) {
            break;
        }
        let mtu = e.qp.attr().path_mtu;
        let room = crate::transport::wire::packet::tx_buffer_len(mtu.bytes() as usize);
        let mut mem = Mem::of(&mut st.mrs, dev, e);
        let Some(t) = buf.get_mut(..room).and_then(|b| e.qp.poll_transmit(now, &mut mem, b)) else { break };
        let Some(pkt) = buf.get(..t.len) else { break };
        if e.note_request(Some(pkt)) {
            dev.count(Counter::TxRetransmit);
        }
        let sport = e.qpn_source_port(t.dest_qpn);
        let av = match path {
            Some(av) => *av,
            None => match e.ah_av(&st.ahs, t.ah) {
                Some(a) if a.dip == a.sip => a,
                Some(a) => {
                    // Another host: this packet goes out in a socket
                    // buffer, and so do the QP's next ones.
                    e.ud_direct = false;
                    d.spill = spill(dev, pkt, mtu, a, sport);
                    if d.spill.is_none() {
                        d.dropped += 1;
                    }
                    break;
                }
                None => {
                    dev.count(Counter::TxNoAh);
                    d.dropped += 1;
                    continue;
                }
            },
        };
        d.n += 1;
        dev.count(Counter::TxLocal);
        dev.count(Counter::RxPackets);
        // The IP header the packet would have had (an RC QP checks its
        // addresses against its path; a UD receive hands it over as the
        // GRH). Never on a wire: IP ID 0. An RC QP's packets all have the
        // same addresses and only those are looked at: one header per
        // batch.
        let ip_len = IpUdpRepr::ip_len(av.ipv6);
        if path.is_none() || d.n == 1 {
            let total = (IpUdpRepr::header_len(av.ipv6) + ICRC_LEN).saturating_add(t.len);
            if headers(&mut hdr, &av, sport, 0, total).is_none() {
                dev.count(Counter::TxMalformed);
                break;
            }
        }
        let Some(ip) = hdr.get(..ip_len) else { break };
        // An RC packet names its sender: the receiver checks the pairing.
        let from = path.map(|_| qpn);
        let after = rx_locked(dev, st, t.dest_qpn, pkt, ip, av.ipv6, from, notify);
        if let Some(k) = after.kick {
            if !d.peers.add(k) {
                break;
            }
        }
        if after.srq_event.is_some() {
            d.after = after;
            break;
        }
    }
    st.local_buf = buf;
    d
}

/// A UD packet `direct_batch` built for another host, copied into a socket
/// buffer laid out as `kick` lays out its own; None (counted) when no
/// buffer could be had: the datagram is lost, as UD allows.
fn spill(dev: &FerroceDevice, pkt: &[u8], mtu: crate::transport::qp::Mtu, av: Av, sport: u16) -> Option<Ready> {
    let Some(mut skb) = Skb::alloc_tx(dev, tx_len(mtu)) else {
        dev.count(Counter::TxNoMem);
        return None;
    };
    if put(skb.data_mut(), TX_HEADROOM, pkt).is_none() {
        dev.count(Counter::TxMalformed);
        return None;
    }
    Some(Ready { skb, len: pkt.len(), av: Some(av), sport })
}

/// Wraps the transport packet at `TX_HEADROOM..` (`len` bytes) of the
/// linear skb from `kick` in UDP/IP, appends the ICRC and sends it;
/// consumes the skb. A packet to this device is only queued on the
/// device's local queue (returns true): the caller delivers the queue.
fn send(dev: &FerroceDevice, mut skb: Skb, len: usize, av: &Av, sport: u16) -> bool {
    let start = TX_HEADROOM.saturating_sub(IpUdpRepr::header_len(av.ipv6));
    let total = (IpUdpRepr::header_len(av.ipv6) + ICRC_LEN).saturating_add(len);
    let Some(pkt) = skb.data_mut().get_mut(start..start.saturating_add(total)) else {
        return false;
    };
    // The local fast path (below) hands the bytes to this device's own
    // receive path: nothing on the way can corrupt them, so the ICRC is
    // neither computed nor checked there.
    let local = av.dip == av.sip;
    if encap(pkt, av, sport, dev.next_ip_id(), !local).is_err() {
        dev.count(Counter::TxMalformed);
        return false;
    }
    // The buffer's data becomes the IP packet (checked above to be there).
    if !skb.narrow(start, total) {
        dev.count(Counter::TxMalformed);
        return false;
    }
    // Local fast path: to this very device (same address), the packet goes
    // to its receive path through the device's local queue, never through
    // the IP stack (and without an ICRC: nothing on the way can corrupt
    // it). The caller delivers the queue after its batch.
    if local {
        // A bounded queue: senders on many CPUs cannot outpace its one
        // consumer without limit (the datagram is lost, as UD allows; an
        // RC packet is retransmitted).
        if dev.local_len() >= local_queue_max() {
            dev.count(Counter::TxLocalFull);
            return true;
        }
        dev.count(Counter::TxLocal);
        dev.local_push(skb);
        return true;
    }
    match skb.send(av) {
        Ok(()) => dev.count(Counter::TxPackets),
        Err(_) => dev.count(Counter::TxNoRoute),
    }
    false
}

/// Copies `src` to `buf[off..]`; `None` when it does not fit. (No slice
/// indexing: nothing on this path may panic.)
fn put(buf: &mut [u8], off: usize, src: &[u8]) -> Option<()> {
    let end = off.checked_add(src.len())?;
    let dst = buf.get_mut(off..end)?;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
    Some(())
}

/// Writes the IP and UDP headers in front of the transport packet and,
/// with `with_icrc`, the ICRC after it (`pkt` is exactly the IP packet).
pub(crate) fn encap(pkt: &mut [u8], av: &Av, sport: u16, ip_id: u16, with_icrc: bool) -> core::result::Result<(), ()> {
    let total = pkt.len();
    headers(pkt, av, sport, ip_id, total).ok_or(())?;
    if with_icrc {
        icrc::fill_with(pkt, &kernel_crc32).map_err(|_| ())?;
        if av.ipv6 {
            // IPv6 requires the UDP checksum; the ICRC masks it, so it is
            // computed last, over the final datagram.
            ip::fill_udp6_checksum(pkt).map_err(|_| ())?;
        }
    }
    Ok(())
}

/// Writes the IP and UDP headers of a packet of `total` bytes (IP header
/// to ICRC) at the start of `pkt` (at least those headers long).
fn headers(pkt: &mut [u8], av: &Av, sport: u16, ip_id: u16, total: usize) -> Option<()> {
    let r = IpUdpRepr {
        ipv6: av.ipv6,
        tclass: av.tclass,
        flow_label: av.flow_label,
        hop_limit: av.hop_limit,
        src: av.sip,
        dst: av.dip,
        ip_id,
        src_port: sport,
    };
    r.emit(pkt, total).ok()
}

/// The kernel's CRC-32 (accelerated where the CPU allows) for the bulk of
/// each ICRC.
fn kernel_crc32(reg: u32, data: &[u8]) -> u32 {
    sys::crc32_le(reg, data)
}

// ---------------------------------------------------------------------------
// Receive

/// A datagram from the wire (IP header onwards), from the UDP tunnel's
/// receive callback: received, then the QP it woke sends.
pub(crate) fn receive_datagram(dev: &FerroceDevice, packet: &[u8]) {
    if let Some(qpn) = receive(dev, packet, false) {
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
            if !crate::rings::waiting_for_more(e) || now_ns().saturating_sub(start) > LINGER_NS {
                crate::rings::linger_done(e);
                return;
            }
            if watch.is_none() {
                watch = crate::rings::linger_watch(e);
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

/// Packets the device's local queue holds at most (4 MiB of 1 KiB
/// datagrams); more are dropped (`tx_drop_local_full`).
const LOCAL_QUEUE_MAX: u32 = 4096;

/// The local queue's bound: `LOCAL_QUEUE_MAX`, or the module's
/// `test_local_queue_max` when set (tests/guest/security.sh fills a queue
/// of 2 with one batch).
fn local_queue_max() -> u32 {
    match sys::test_local_queue_max() {
        0 => LOCAL_QUEUE_MAX,
        n => n,
    }
}

/// Local packets one pass of `run_local` hands to the receive path
/// before it leaves the rest to the device's work item.
const LOCAL_BUDGET: usize = 256;

/// RC QPs whose send side runs after a batch of local deliveries (once the
/// local queue is empty, or after `direct_batch`), not after each packet.
#[derive(Default)]
struct Deferred {
    qpns: [u32; 8],
    n: usize,
}

impl Deferred {
    /// Notes QP `qpn`; false when the set is full (kick them first).
    fn add(&mut self, qpn: u32) -> bool {
        if self.qpns.iter().take(self.n).any(|&q| q == qpn) {
            return true;
        }
        match self.qpns.get_mut(self.n) {
            Some(slot) => {
                *slot = qpn;
                self.n += 1;
                true
            }
            None => false,
        }
    }

    /// Kicks the noted QPs (what they send locally joins the queue).
    fn kick_all(&mut self, dev: &FerroceDevice) {
        let n = core::mem::take(&mut self.n);
        for &qpn in self.qpns.iter().take(n) {
            kick(dev, qpn, KICK_BUDGET_SOFTIRQ);
        }
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
                kicks.kick_all(dev);
                dev.local_depth.store(0, Ordering::Release);
                dev.queue_work();
                return;
            }
            let Some(skb) = dev.local_pop() else {
                if kicks.n == 0 {
                    break;
                }
                kicks.kick_all(dev);
                continue;
            };
            n = n.saturating_add(1);
            // A buffer from `send`: its data is the IP packet.
            let kick_qpn = receive(dev, skb.data(), true);
            skb.consume();
            if let Some(qpn) = kick_qpn {
                if !kicks.add(qpn) {
                    kicks.kick_all(dev);
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

/// One received IP packet (IP header to the end of the skb). `local`: it
/// comes from this device's own transmit path (the ICRC was not computed).
/// Returns the RC QP whose send side the caller runs next (`kick`): the
/// packet may have produced an ACK, a READ response or room in the send
/// window.
pub(crate) fn receive(dev: &FerroceDevice, packet: &[u8], local: bool) -> Option<u32> {
    dev.count(Counter::RxPackets);
    let parts = match icrc::split(packet) {
        Ok(p) => p,
        Err(_) => return dropped(dev, Counter::RxMalformed),
    };
    if UdpHeader::new_checked(parts.udp).map(|u| u.dst_port()) != Ok(ROCE_PORT) {
        return dropped(dev, Counter::RxMalformed);
    }
    if !local && parts.check_icrc_with(&kernel_crc32).is_err() {
        return dropped(dev, Counter::RxBadIcrc);
    }
    let transport = parts.transport;
    let Ok(qpn) = Bth::new_checked(transport).map(|h| h.dest_qp()) else {
        return dropped(dev, Counter::RxMalformed);
    };
    let mut notify = Notify::new();
    let after = {
        let mut st = dev.state.lock();
        rx_locked(dev, &mut st, qpn, transport, parts.ip, parts.version == icrc::IpVersion::V6, None, &mut notify)
    };
    notify.run(dev);
    after.finish()
}

/// What delivering a packet under the device lock leaves for after it.
#[derive(Default)]
struct RxAfter {
    /// The RC QP whose send side should run (`kick`).
    kick: Option<u32>,
    /// An SRQ that fell below its limit (the event fires without the
    /// lock), held by a counted reference until it has.
    srq_event: Option<SrqRef>,
}

impl RxAfter {
    /// Fires the SRQ event; the QP to kick.
    fn finish(mut self) -> Option<u32> {
        if let Some(srq) = self.srq_event.take() {
            srq.limit_event();
        }
        self.kick
    }
}

/// The part of the receive path under the device lock: one transport
/// packet (BTH onwards, checked ICRC or none) for QP `qpn`, which came in
/// IP header `ip`. Shared by packets from the wire and the local queue
/// (`receive`) and by RC packets a QP of this device sends to another
/// (`kick`, which delivers them without a socket buffer).
///
/// `from`: the QP of this device that sent an RC packet on the direct path
/// (`direct_batch`). Every QP connected through the device's own address
/// has the same IP addresses, whichever process owns it, so there the
/// address check cannot tell tenants apart; the sender's QPN can: it must
/// be the receiver's dest_qp_num, and the receiver's peer must be it.
#[allow(clippy::too_many_arguments)] // the receive context of one packet, passed down once
fn rx_locked(
    dev: &FerroceDevice,
    st: &mut DevState,
    qpn: u32,
    transport: &[u8],
    ip: &[u8],
    ipv6: bool,
    from: Option<u32>,
    notify: &mut Notify,
) -> RxAfter {
    // The version the IP header says (an IPv4 header with options can be
    // as long as an IPv6 one).
    let (net, ipv) = if ipv6 { (NetHeader::Ipv6(ip), 6) } else { (NetHeader::Ipv4(ip), 4) };
    let mut after = RxAfter::default();
    let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else {
        dev.count(Counter::RxNoQp);
        return after;
    };
    // A connected QP takes packets only from its peer, to the address its
    // path names (IBTA: the source of an RC packet must match the QP
    // context; RoCE carries the GIDs as IP addresses).
    if e.qp.qp_type() == QpType::Rc && !from_path(e.path.as_ref(), ip, ipv6) {
        dev.count(Counter::RxAddrMismatch);
        return after;
    }
    if let Some(sender) = from {
        if e.qp.qp_type() != QpType::Rc || e.qp.dest_qp_num() != sender {
            dev.count(Counter::RxAddrMismatch);
            return after;
        }
    }
    // A QP on an SRQ takes a receive WQE from it when a message that needs
    // one begins and the QP has none.
    crate::rings::pull_rq(dev, e);
    if let Some(si) = e.srq {
        // Only the request the responder will execute next takes a WQE
        // out of the SRQ (IBTA: an SRQ's WQEs stay there until a message
        // consumes one): a duplicate, or a packet ahead of the expected
        // PSN, must not move one into this QP, where a reset or destroy
        // would lose it.
        use crate::transport::qp::QpState;
        let bth = crate::transport::wire::Bth::new_checked(transport).ok();
        let needs = bth
            .as_ref()
            .and_then(|h| h.opcode().info().ok())
            .is_some_and(|i| i.is_request() && i.consumes_recv_wqe());
        let next = bth.as_ref().is_some_and(|h| h.psn() == e.qp.expected_psn())
            && !matches!(e.qp.state(), QpState::Reset | QpState::Init | QpState::Err);
        if needs && next && e.qp.recv_queue_len() == 0 {
            if let Some(srq) = st.srqs.get_mut(si).and_then(|x| x.as_deref_mut()) {
                if let Some((w, fire)) = srq.take() {
                    match w {
                        Ok(w) => {
                            let _ = e.qp.post_recv(&w);
                        }
                        Err(wr_id) => {
                            dev.count(Counter::RingBadWqe);
                            let _ = e.qp.fail_recv(wr_id, crate::transport::verbs::WcStatus::LocQpOpErr);
                        }
                    }
                    if fire {
                        after.srq_event = Some(srq.srq.clone());
                    }
                }
            }
        }
    }
    let mut mem = Mem::of(&mut st.mrs, dev, e);
    match e.qp.receive(now_ns(), &mut mem, transport, net) {
        RxOutcome::Accepted => dev.count(Counter::RxAccepted),
        RxOutcome::Dropped => dev.count(Counter::RxDropped),
        RxOutcome::Nak => dev.count(Counter::RxNak),
    }
    let rc = e.qp.qp_type() == QpType::Rc;
    drain(dev, st, qpn, ipv, notify);
    // The send side runs only when it may have something to do: most
    // packets of a stream leave nothing to answer, and a kick would take
    // the lock twice to find that out.
    let go = rc
        && match st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
            None => false,
            Some(e) => {
                let go = e.tx_busy || e.qp.may_transmit(now_ns()) || crate::rings::unsettled(e);
                if !go {
                    e.arm_timer();
                }
                go
            }
        };
    after.kick = go.then_some(qpn);
    after
}

/// Counts a packet the receive path drops; nothing to kick.
fn dropped(dev: &FerroceDevice, c: Counter) -> Option<u32> {
    dev.count(c);
    None
}

/// Whether an IP header's source is the path's remote address and its
/// destination the path's local one. A QP without a path (before RTR)
/// takes nothing.
fn from_path(path: Option<&Av>, ip: &[u8], ipv6: bool) -> bool {
    let (Some(av), Ok(h)) = (path, IpHeader::new_checked(ip)) else { return false };
    let n = if ipv6 { 16 } else { 4 };
    av.ipv6 == ipv6 && h.is_ipv6() == ipv6 && av.dip.get(..n) == Some(h.src_addr()) && av.sip.get(..n) == Some(h.dst_addr())
}
