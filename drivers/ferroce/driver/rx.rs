// SPDX-License-Identifier: GPL-2.0

//! The receive stage: one IP packet's IP, UDP and ICRC checks, then the
//! destination QP's engine under the device lock ([`rx_locked`], shared
//! with the transmit stage's direct delivery). What the packet leaves to do
//! (the QP to kick, an SRQ event) is returned, for after the lock.

use super::complete::{drain, Notify};
use crate::rdma::object::SrqRef;
use crate::rdma::sys::now_ns;
use crate::rdma::Counter;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{Av, DevState, Mem};
use crate::transport::engine::{DropReason, NetHeader, RxOutcome};
use crate::transport::mcast::{gid_of_ip, is_multicast_gid, MAX_QP_ATTACH, MULTICAST_QPN};
use crate::transport::qp::QpType;
use crate::transport::wire::ip::{IpHeader, UdpHeader, ROCE_PORT};
use crate::transport::wire::{icrc, Bth};

/// One received IP packet (IP header to the end of the skb). `local`: it
/// comes from this device's own transmit path (the ICRC was not computed).
/// Returns the RC QP whose send side the caller runs next (`kick`): the
/// packet may have produced an ACK, a READ response or room in the send
/// window. `burst`: a datagram of a softirq's receive pass; that QP, and
/// the QPs room in the shared window woke, are left to the device's burst
/// work item (`sched::burst_work`), which runs after the pass, unless its
/// set is full.
pub(crate) fn receive(dev: &FerroceDevice, packet: &[u8], local: bool, burst: bool) -> Option<u32> {
    dev.count(Counter::RxPackets);
    let parts = match icrc::split(packet) {
        Ok(p) => p,
        Err(_) => return dropped(dev, Counter::RxMalformed),
    };
    if UdpHeader::new_checked(parts.udp).map(|u| u.dst_port()) != Ok(ROCE_PORT) {
        return dropped(dev, Counter::RxMalformed);
    }
    if !local && parts.check_icrc_with(&crate::rdma::sys::crc32_le).is_err() {
        return dropped(dev, Counter::RxBadIcrc);
    }
    let transport = parts.transport;
    let Ok(qpn) = Bth::new_checked(transport).map(|h| h.dest_qp()) else {
        return dropped(dev, Counter::RxMalformed);
    };
    let ipv6 = parts.version == icrc::IpVersion::V6;
    let group = IpHeader::new_checked(parts.ip).ok().and_then(|h| gid_of_ip(h.dst_addr())).filter(is_multicast_gid);
    match (group, qpn == MULTICAST_QPN) {
        (Some(gid), true) => return fan_out(dev, &gid, transport, parts.ip, ipv6),
        // A multicast destination names the multicast QP and nothing else
        // (IBTA 9.2.3 / 9.6.1.5: a unicast QPN in a multicast packet, or
        // the multicast QPN in a unicast one, is malformed).
        (Some(_), false) | (None, true) => return dropped(dev, Counter::RxMalformed),
        (None, false) => {}
    }
    let mut notify = Notify::new();
    let (after, later) = {
        let mut st = dev.state.lock();
        let mut after = rx_locked(dev, &mut st, qpn, transport, parts.ip, ipv6, None, &mut notify);
        let later = burst && defer_kick(&mut st, &mut after.kick);
        (after, later)
    };
    notify.run(dev);
    if later {
        dev.queue_burst_work();
    }
    after.finish()
}

/// Leaves the QP to kick (`kick`, taken when it fits) to the device's burst
/// work; true when that work has something to do (it also runs the QPs
/// room in the shared window woke).
fn defer_kick(st: &mut DevState, kick: &mut Option<u32>) -> bool {
    if let Some(q) = *kick {
        if st.rx_kicks.add(q) {
            *kick = None;
        }
    }
    !st.rx_kicks.is_empty() || !st.wire_woken.is_empty()
}

/// A multicast datagram: a copy to every UD QP attached to group `gid`
/// (IBTA 10.5.1: each QP attached to the group receives it), none when no
/// QP is. The members are read under the lock once; each one's delivery
/// then takes it again, so that the lock is never held across a completion
/// event and a group of 56 QPs does not hold it for all of them.
fn fan_out(dev: &FerroceDevice, gid: &[u8; 16], transport: &[u8], ip: &[u8], ipv6: bool) -> Option<u32> {
    let mut members = [0u32; MAX_QP_ATTACH];
    let n = {
        let st = dev.state.lock();
        let m = st.mcast.members(gid);
        let n = m.len().min(members.len());
        if let (Some(to), Some(from)) = (members.get_mut(..n), m.get(..n)) {
            to.copy_from_slice(from);
        }
        n
    };
    if n == 0 {
        return dropped(dev, Counter::RxNoQp);
    }
    for &qpn in members.get(..n).unwrap_or(&[]) {
        let mut notify = Notify::new();
        let after = {
            let mut st = dev.state.lock();
            rx_locked(dev, &mut st, qpn, transport, ip, ipv6, None, &mut notify)
        };
        notify.run(dev);
        // UD: nothing to kick; an SRQ event fires here.
        let _ = after.finish();
    }
    None
}

/// What delivering a packet under the device lock leaves for after it.
#[derive(Default)]
pub(super) struct RxAfter {
    /// The RC QP whose send side should run (`kick`).
    pub(super) kick: Option<u32>,
    /// An SRQ that fell below its limit (the event fires without the
    /// lock), held by a counted reference until it has.
    pub(super) srq_event: Option<SrqRef>,
}

impl RxAfter {
    /// Fires the SRQ event; the QP to kick.
    pub(super) fn finish(mut self) -> Option<u32> {
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
pub(super) fn rx_locked(
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
    // path names (IBTA: the source of an RC or UC packet must match the QP
    // context; RoCE carries the GIDs as IP addresses).
    let connected = matches!(e.qp.qp_type(), QpType::Rc | QpType::Uc);
    if connected && !from_path(e.path.as_ref(), ip, ipv6) {
        dev.count(Counter::RxAddrMismatch);
        return after;
    }
    if let Some(sender) = from {
        if !connected || e.qp.dest_qp_num() != sender {
            dev.count(Counter::RxAddrMismatch);
            return after;
        }
    }
    // A QP on an SRQ takes a receive WQE from it when a message that needs
    // one begins and the QP has none.
    crate::driver::rings::pull_rq(dev, e);
    if let Some(si) = e.srq {
        // Only the request the responder will execute next takes a WQE
        // out of the SRQ (IBTA: an SRQ's WQEs stay there until a message
        // consumes one): a duplicate, or a packet ahead of the expected
        // PSN, must not move one into this QP, where a reset or destroy
        // would lose it; nor may a datagram the UD QP will drop (a wrong
        // Q_Key) hold one back from the SRQ's other QPs.
        // (asked only when the QP holds no WQE: most packets of a stream
        // find one there, and the question parses the headers again)
        if e.qp.recv_queue_len() == 0 && e.qp.takes_srq_wqe(transport) {
            if let Some(srq) = st.srqs.get_mut(si).and_then(|x| x.as_deref_mut()) {
                if let Some(ev) = srq_to_qp(dev, srq, e) {
                    after.srq_event = Some(ev);
                }
            }
        }
    }
    let mut mem = Mem::of(&mut st.mrs, dev, e);
    match e.qp.receive(now_ns(), &mut mem, transport, net) {
        RxOutcome::Accepted => dev.count(Counter::RxAccepted),
        RxOutcome::Dropped(why) => {
            dev.count(Counter::RxDropped);
            dev.count(match why {
                DropReason::Header => Counter::RxDropHeader,
                DropReason::Key => Counter::RxDropKey,
                DropReason::State => Counter::RxDropState,
                DropReason::Sequence => Counter::RxDropSequence,
                DropReason::NoWqe => Counter::RxDropNoWqe,
                DropReason::Length => Counter::RxDropLength,
                DropReason::Invalid => Counter::RxDropInvalid,
                DropReason::Busy => Counter::RxDropBusy,
                DropReason::Memory => Counter::RxDropMemory,
            });
        }
        RxOutcome::Nak => dev.count(Counter::RxNak),
    }
    let at = mem.fault.take();
    crate::driver::odp::want(dev, &mut st.qp_fault, e, qpn, at);
    let rc = e.qp.qp_type() == QpType::Rc;
    drain(dev, st, qpn, ipv, notify);
    // The send side runs only when it may have something to do: most
    // packets of a stream leave nothing to answer, and a kick would take
    // the lock twice to find that out.
    let go = rc
        && match st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
            None => false,
            Some(e) => {
                let go = e.tx_busy || e.qp.may_transmit(now_ns()) || crate::driver::rings::unsettled(e);
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

/// Moves the SRQ's oldest WQE into QP `e` (or fails a malformed one of a
/// process's ring); the SRQ to raise the limit event for, if taking it
/// crossed the armed limit. Not inlined: the WQE (up to 32 SGEs) is off
/// the stack before the packet goes on through the engine and `drain`.
#[inline(never)]
fn srq_to_qp(dev: &FerroceDevice, srq: &mut crate::driver::tables::SrqEntry, e: &mut crate::driver::tables::QpEntry) -> Option<SrqRef> {
    let (w, fire) = srq.take()?;
    match w {
        Ok(w) => {
            let _ = e.qp.post_recv(&w);
        }
        Err(wr_id) => {
            dev.count(Counter::RingBadWqe);
            let _ = e.qp.fail_recv(wr_id, crate::transport::verbs::WcStatus::LocQpOpErr);
        }
    }
    fire.then(|| srq.srq.clone())
}
