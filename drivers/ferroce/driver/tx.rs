// SPDX-License-Identifier: GPL-2.0

//! The transmit stage: a QP's packets built by its engine under the device
//! lock into socket buffers ([`build`]), or, to a QP of this same device,
//! delivered to it right there ([`direct_batch`]); after the lock each
//! buffer gets its IP/UDP headers and ICRC and goes to the IP stack or to
//! the device's local queue ([`Batch::send`]).

use super::complete::Notify;
use super::rx::{rx_locked, RxAfter};
use crate::rdma::net::Skb;
use crate::rdma::sys;
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{Av, DevState, Mem};
use crate::transport::qp::QpType;
use crate::transport::wire::icrc;
use crate::transport::wire::ip::{self, IpUdpRepr, IPV6_LEN, UDP_LEN};

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

/// RC QPs whose send side runs after a batch of local deliveries (once the
/// local queue is empty, or after `direct_batch`), not after each packet.
#[derive(Default)]
pub(crate) struct Deferred {
    qpns: [u32; 8],
    n: usize,
}

impl Deferred {
    /// Notes QP `qpn`; false when the set is full (kick them first).
    pub(super) fn add(&mut self, qpn: u32) -> bool {
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

    pub(super) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The noted QPs, in order; the set is empty afterwards.
    pub(super) fn take(&mut self) -> impl Iterator<Item = u32> {
        let n = core::mem::take(&mut self.n);
        self.qpns.into_iter().take(n)
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

/// The payload bytes from which a batch's packets are received on another
/// CPU when the netdev delivers them on this one (`Batch::send`): eight
/// packets of the 1024-byte path MTU of a 1500-byte netdev.
const BULK_BYTES: usize = 8192;

/// The packets from which a batch is a receive burst (`Batch::send`): a
/// latency test's batch, its ACK and its next request, is answered in
/// place (deferred, ib_write_lat's typical latency rose from 89 to 97 us).
const BURST_MIN: usize = 3;

/// What one pass of `kick` built under the lock: socket buffers to send
/// after it, and what a direct batch delivered.
pub(super) struct Batch {
    ready: [Option<Ready>; TX_BATCH],
    n: usize,
    pub(super) direct: Direct,
    /// A socket buffer could not be had.
    pub(super) nomem: bool,
}

impl Batch {
    pub(super) fn new() -> Self {
        Self { ready: [const { None }; TX_BATCH], n: 0, direct: Direct::default(), nomem: false }
    }

    /// Whether the pass produced or dropped anything (else the QP settles).
    pub(super) fn progressed(&self) -> bool {
        self.n + self.direct.n + self.direct.dropped > 0
    }

    fn push(&mut self, r: Ready) {
        if let Some(slot) = self.ready.get_mut(self.n) {
            *slot = Some(r);
            self.n += 1;
        }
    }

    /// After the lock: fires a direct batch's SRQ event and sends the
    /// buffers. True when one went to this device's local queue (the
    /// caller delivers it).
    pub(super) fn send(&mut self, dev: &FerroceDevice) -> bool {
        let _ = core::mem::take(&mut self.direct.after).finish();
        let mut local = false;
        let n = core::mem::take(&mut self.n);
        // A batch with much to receive (BULK_BYTES): what it makes a veth
        // or the loopback deliver on this CPU is received on another
        // (`BulkSend`). A small one is received here, at once: the hop to
        // another CPU would cost its messages more time than the receiver's
        // work takes (ib_write_bw -s 64 -q 1 -t 16 across a veth: half the
        // message rate when every batch of two or more packets went).
        let bytes: usize = self.ready.iter().take(n).flatten().map(|r| r.len).sum();
        let _bulk = (bytes >= BULK_BYTES).then(crate::rdma::net::BulkSend::enter);
        // With `rx_burst` the batch leaves with bottom halves off: a veth or
        // the loopback receives it whole when they come back on (while the
        // bulk mark is still up: `_bh` goes first), and the receiving QP
        // answers it once (`sched::burst_work`), not packet by packet.
        let burst = n >= BURST_MIN && sys::burst_mark();
        let _bh = burst.then(crate::rdma::net::BhOff::enter);
        for r in self.ready.iter_mut().take(n).filter_map(Option::take) {
            match r.av {
                Some(av) => local |= send(dev, r.skb, r.len, &av, r.sport),
                None => dev.count(Counter::TxNoAh),
            }
        }
        local
    }
}

/// Builds QP `qpn`'s next packets under the device lock, at most `budget`:
/// delivered at once when they go to this device (`direct_batch`), else
/// into socket buffers of `b`. Returns how many count against the budget.
pub(super) fn build(dev: &FerroceDevice, st: &mut DevState, qpn: u32, now: u64, budget: usize, b: &mut Batch, notify: &mut Notify) -> usize {
    // An RC or UC QP whose path leads back to this device (the same address at
    // both ends) hands its packets to the receiving QP right here, under
    // this same hold of the lock: no socket buffer, no IP/UDP header, no
    // queue, no second lock. Its peer answers after the batch. So does a
    // UD QP whose last packet went to this device (each packet's AH
    // decides).
    let local_path = st.qp(qpn).and_then(|e| match e.qp.qp_type() {
        QpType::Rc | QpType::Uc => e.path.filter(|p| p.dip == p.sip).map(Some),
        QpType::Ud => e.ud_direct.then_some(None),
    });
    if let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
        crate::driver::rings::pull_sq(dev, e, &st.ahs);
    }
    if let Some(path) = local_path {
        b.direct = direct_batch(dev, st, qpn, path.as_ref(), now, DIRECT_BATCH.min(budget), notify);
        if let Some(r) = b.direct.spill.take() {
            b.push(r);
        }
        return b.direct.n;
    }
    st.wire_begin(qpn);
    let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return 0 };
    let mut mem = Mem::of(&mut st.mrs, dev, e);
    let mut sent = 0usize;
    while b.n < TX_BATCH && sent < budget {
        // A socket buffer only when the engine may have a packet (most
        // kicks after a received packet find nothing to send), sized for
        // the QP's path MTU (a 2 KiB slab object at MTU 1024, not an
        // order-1 page).
        if !e.qp.may_transmit(now) {
            break;
        }
        let len = tx_len(e.qp.attr().path_mtu);
        let Some(mut skb) = Skb::alloc_tx(dev, len) else {
            b.nomem = true;
            break;
        };
        let buf = skb.data_mut();
        let transport = buf.get_mut(TX_HEADROOM..len.saturating_sub(ICRC_LEN));
        let Some(t) = transport.and_then(|t| e.qp.poll_transmit(now, &mut mem, t)) else {
            break;
        };
        let av = match e.qp.qp_type() {
            QpType::Ud => {
                let av = e.sent_av(t.ah);
                // To this device: the next batch goes direct.
                e.ud_direct = av.is_some_and(|a| a.dip == a.sip);
                av
            }
            QpType::Rc | QpType::Uc => e.path,
        };
        if e.note_request(buf.get(TX_HEADROOM..TX_HEADROOM.saturating_add(t.len))) {
            dev.count(Counter::TxRetransmit);
        }
        let sport = e.qpn_source_port(t.dest_qpn);
        b.push(Ready { skb, len: t.len, av, sport });
        sent = sent.saturating_add(1);
    }
    let at = mem.fault.take();
    crate::driver::odp::want(dev, &mut st.qp_fault, e, qpn, at);
    st.wire_end(dev, qpn, now);
    sent
}

/// What `direct_batch` did.
#[derive(Default)]
pub(super) struct Direct {
    /// Packets delivered.
    pub(super) n: usize,
    /// UD packets dropped for want of an address handle.
    pub(super) dropped: usize,
    /// The receiving QPs whose send side runs after the lock.
    pub(super) peers: Deferred,
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
        let t = buf.get_mut(..room).and_then(|b| e.qp.poll_transmit(now, &mut mem, b));
        let at = mem.fault.take();
        crate::driver::odp::want(dev, &mut st.qp_fault, e, qpn, at);
        let Some(t) = t else { break };
        let Some(pkt) = buf.get(..t.len) else { break };
        if e.note_request(Some(pkt)) {
            dev.count(Counter::TxRetransmit);
        }
        let sport = e.qpn_source_port(t.dest_qpn);
        let av = match path {
            Some(av) => *av,
            None => match e.sent_av(t.ah) {
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
    match skb.send(dev, av) {
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
        icrc::fill_with(pkt, &sys::crc32_le).map_err(|_| ())?;
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
