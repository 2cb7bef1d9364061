//! RC requester: send WQEs to request packets.
//!
//! Segmentation by PMTU into FIRST/MIDDLE/LAST/ONLY, PSN assignment, AckReq
//! policy, the `max_rd_atomic` limit and fences, a bounded window of
//! unacknowledged PSNs, and go-back-N repositioning ([`Qp::seek`]) for the
//! completer.

use super::super::engine::{Qp, RecvSlot, SendSlot, Transmit};
use super::super::memory::Memory;
use super::super::wire::packet::{self, Headers};
use super::super::qp::{QpState, QpType};
use super::super::ring::Storage;
use super::super::memory::MemError;
use super::super::sg::{self, SgError};
use super::super::verbs::{send_flags, WcStatus, WrOpcode};
use super::super::wire::{AtomicEthRepr, FethRepr, IethRepr, ImmDtRepr, Opcode, Psn, RethRepr};
use super::{ack_timeout_ns, ACK_REQ_EVERY, MAX_MESSAGE};

/// Requester progress through the send queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReqState {
    /// WQE the next packet comes from.
    pub(crate) req_seq: u64,
    /// One past the last WQE started (given PSNs).
    pub(crate) sent_seq: u64,
    /// Byte offset in `req_seq` of the next packet (READ: of the resumed
    /// request).
    pub(crate) req_off: u32,
    /// PSN of the next packet.
    pub(crate) next_psn: Psn,
    /// One past the last PSN given to a WQE.
    pub(crate) psn_hi: Psn,
    /// READs and atomics started and not completed.
    pub(crate) rd_atomic: u8,
    /// Packets sent since the last AckReq.
    pub(crate) since_ack_req: u32,
    /// A local buffer of the next packet is memory on demand whose pages
    /// are not present ([`MemError::Fault`]): nothing is sent until the
    /// glue has faulted them in ([`Qp::fault_resolved`]).
    pub(crate) fault_wait: bool,
}

/// Why a requester step stopped without a packet.
pub(crate) enum Stop {
    /// The WQE completes with this status (class B).
    Wc(WcStatus),
    /// A local buffer's pages are not present: wait, change nothing.
    Fault,
}

impl From<WcStatus> for Stop {
    fn from(st: WcStatus) -> Self {
        Stop::Wc(st)
    }
}

/// The status of a local buffer's refusal, or the wait for its pages.
pub(crate) fn sg_stop(e: SgError) -> Stop {
    match e {
        SgError::Length => Stop::Wc(WcStatus::LocLenErr),
        SgError::Mem(MemError::Fault) => Stop::Fault,
        SgError::Mem(_) => Stop::Wc(WcStatus::LocProtErr),
    }
}

/// The BTH opcode of packet `first`/`last` of a SEND or RDMA WRITE.
fn send_write_opcode(op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode::*;
    match (op, first, last) {
        (Send, true, true) => Opcode::RC_SEND_ONLY,
        (SendWithImm, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (SendWithInv, true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (Send | SendWithImm | SendWithInv, true, false) => Opcode::RC_SEND_FIRST,
        (Send | SendWithImm | SendWithInv, false, false) => Opcode::RC_SEND_MIDDLE,
        (Send, false, true) => Opcode::RC_SEND_LAST,
        (SendWithImm, false, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (SendWithInv, false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (RdmaWrite | RdmaRead | AtomicCmpAndSwp | AtomicFetchAndAdd | LocalInv | RegMr | BindMw | Flush | AtomicWrite, true, true) => {
            Opcode::RC_RDMA_WRITE_ONLY
        }
        (RdmaWriteWithImm, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (_, true, false) => Opcode::RC_RDMA_WRITE_FIRST,
        (_, false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (RdmaWriteWithImm, false, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (_, false, true) => Opcode::RC_RDMA_WRITE_LAST,
    }
}

/// Packets (PSNs) a message of `len` bytes takes at `pmtu`: at least one.
pub fn packets(len: u32, pmtu: u32) -> u32 {
    len.div_ceil(pmtu.max(1)).max(1)
}

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    /// Whether the window of unacknowledged PSNs has room.
    pub(crate) fn window_open(&self) -> bool {
        // UC has no acknowledgements, so no window.
        self.ty == QpType::Uc || self.comp.una.distance_to(self.req.next_psn) < self.send_window()
    }

    /// The packets the requester may have in flight now: its congestion
    /// window, further bounded during a transmit pass by the device's
    /// shared window ([`Qp::set_send_cap`]).
    fn send_window(&self) -> u32 {
        match self.comp.cap {
            Some(cap) => self.cwnd().min(cap),
            None => self.cwnd(),
        }
    }

    /// Whether the WQE may start now: fences wait for earlier READs and
    /// atomics; READs and atomics wait for `max_rd_atomic`.
    fn can_start(&self, op: WrOpcode, flags: u32) -> bool {
        if flags & send_flags::FENCE != 0 && self.req.rd_atomic > 0 {
            return false;
        }
        if op.is_read_or_atomic() && self.req.rd_atomic >= self.attr.max_rd_atomic.max(1) {
            return false;
        }
        true
    }

    /// Assigns PSNs to WQE `seq` after checking its local buffers.
    fn start_wqe<M: Memory>(&mut self, mem: &mut M, seq: u64) -> Result<(), Stop> {
        // Borrowed, not copied: the slot changes only after its last use.
        let wqe = &self.sq_at(seq).ok_or(WcStatus::LocQpOpErr)?.wqe;
        let len = wqe.length().ok_or(WcStatus::LocLenErr)?;
        if len > MAX_MESSAGE {
            return Err(WcStatus::LocLenErr.into());
        }
        let op = wqe.opcode;
        if op.is_atomic() {
            let space = wqe.sges().iter().fold(0u32, |a, s| a.saturating_add(s.length));
            if space < 8 {
                return Err(WcStatus::LocLenErr.into());
            }
        }
        if !wqe.is_inline() {
            // Local buffers are validated before the first packet so a bad
            // L_Key fails the WQE before any byte reaches the wire.
            let write = op.is_read_or_atomic();
            sg::check(mem, self.pd, wqe.sges(), write).map_err(|e| match e {
                MemError::Fault => Stop::Fault,
                _ => Stop::Wc(WcStatus::LocProtErr),
            })?;
        }
        let npkts = if op.is_atomic() || op.is_placement() { 1 } else { packets(len, self.pmtu()) };
        let psn = self.req.next_psn;
        if let Some(s) = self.sq_at_mut(seq) {
            s.started = true;
            s.first_psn = psn;
            s.npkts = npkts;
            s.len = if op.is_atomic() { 8 } else { len };
            s.resp_pkts = 0;
        }
        self.req.sent_seq = seq.saturating_add(1);
        self.req.psn_hi = psn.wrapping_add(npkts);
        self.req.req_off = 0;
        if op.is_read_or_atomic() {
            self.req.rd_atomic = self.req.rd_atomic.saturating_add(1);
        }
        Ok(())
    }

    /// Positions the requester at `psn` (go-back-N): the WQE holding it,
    /// the byte offset of that packet, or the end of what was sent.
    pub(crate) fn seek(&mut self, psn: Psn) {
        let pmtu = self.pmtu();
        let mut seq = self.comp.comp_seq;
        while seq < self.req.sent_seq {
            let Some(s) = self.sq_at(seq).copied() else { break };
            if s.wqe.opcode.is_local() {
                seq = seq.saturating_add(1);
                continue;
            }
            let before = psn.is_before(s.first_psn);
            if before || psn.in_range(s.first_psn, s.npkts.max(1)) {
                let (p, k) = if before { (s.first_psn, 0) } else { (psn, s.first_psn.distance_to(psn)) };
                self.req.req_seq = seq;
                self.req.next_psn = p;
                self.req.req_off = if s.wqe.opcode.is_atomic() { 0 } else { k.saturating_mul(pmtu) };
                return;
            }
            seq = seq.saturating_add(1);
        }
        self.req.req_seq = self.req.sent_seq;
        self.req.next_psn = self.req.psn_hi;
        self.req.req_off = 0;
    }

    /// The next request packet, if the requester may send one. Local
    /// operations (fast registration, local invalidate) the requester
    /// reaches on the way are executed here, in order: after every earlier
    /// WQE started, before any later one.
    pub(crate) fn req_transmit<M: Memory>(&mut self, now: u64, mem: &mut M, buf: &mut [u8]) -> Option<Transmit> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if let Some(t) = self.comp.rnr_until {
            if now < t {
                return None;
            }
            self.comp.rnr_until = None;
        }
        if self.req.fault_wait {
            return None;
        }
        loop {
            let seq = self.req.req_seq;
            if seq >= self.req.sent_seq {
                // A new message: only in RTS (SQD finishes what was started).
                if self.state != QpState::Rts {
                    return None;
                }
                let (status, opcode, flags) = {
                    let s = self.sq_at(seq)?;
                    (s.status, s.wqe.opcode, s.wqe.send_flags)
                };
                if status.is_some() || !self.can_start(opcode, flags) {
                    return None;
                }
                if opcode.is_local() {
                    if let Err(st) = self.run_local(mem, seq) {
                        self.req_error(seq, st);
                        return None;
                    }
                    continue;
                }
                if !self.window_open() {
                    return None;
                }
                if let Err(stop) = self.start_wqe(mem, seq) {
                    self.req_stop(seq, stop);
                    return None;
                }
            } else if self.sq_at(seq)?.wqe.opcode.is_local() {
                // Going back (go-back-N) over a local operation: it ran
                // once, when first reached, and sends nothing.
                self.req.req_seq = seq.saturating_add(1);
                continue;
            } else if !self.window_open() {
                return None;
            }
            let psn = self.req.next_psn;
            let len = match self.build_request(mem, seq, buf) {
                Ok(len) => len,
                Err(stop) => {
                    self.req_stop(seq, stop);
                    return None;
                }
            };
            if self.ty == QpType::Uc {
                // Nothing comes back: the WQE completes when its last
                // packet leaves.
                if self.req.req_seq > seq {
                    self.complete_send(seq, WcStatus::Success, 0);
                    self.skip_completed();
                }
            } else if self.comp.ack_deadline.is_none() || psn == self.comp.una {
                // The timer runs from the send of the oldest packet not
                // acknowledged (its first send, or a resend after going
                // back), so a requester the shared window held back is not
                // timed for the wait.
                self.comp.ack_deadline = ack_timeout_ns(self.attr.timeout).map(|t| now.saturating_add(t));
            }
            return Some(Transmit { len, ah: self.attr.ah, dest_qpn: self.attr.dest_qp_num });
        }
    }

    /// A requester step that stopped: class B error, or the wait for a
    /// local buffer's pages.
    fn req_stop(&mut self, seq: u64, stop: Stop) {
        match stop {
            Stop::Wc(st) => self.req_error(seq, st),
            Stop::Fault => self.req.fault_wait = true,
        }
    }

    /// Class B requester error: the WQE `seq` completes with `status` and
    /// the rest of the send queue is flushed; an RC QP enters ERR, a UC QP
    /// SQE (its receive side keeps working, IBTA 10.3.1).
    fn req_error(&mut self, seq: u64, status: WcStatus) {
        self.complete_send(seq, status, 0);
        if self.ty == QpType::Uc {
            self.enter_sq_error();
        } else {
            self.enter_error();
        }
    }

    /// Executes the local operation WQE `seq` (the requester reached it):
    /// it takes no PSN and completes at once, its completion reported in
    /// order after those of the WQEs before it.
    fn run_local<M: Memory>(&mut self, mem: &mut M, seq: u64) -> Result<(), WcStatus> {
        let wqe = self.sq_at(seq).ok_or(WcStatus::LocQpOpErr)?.wqe;
        let r = match wqe.opcode {
            WrOpcode::RegMr => mem.fast_register(self.pd, &wqe.reg),
            WrOpcode::LocalInv => mem.invalidate(self.pd, wqe.imm_data),
            WrOpcode::BindMw => mem.bind_mw(self.pd, &wqe.bind),
            _ => return Err(WcStatus::LocQpOpErr),
        };
        // A bind's failure is its own status (IBTA 10.6.7.2), an
        // invalidate's a local protection error.
        r.map_err(|_| if wqe.opcode == WrOpcode::BindMw { WcStatus::MwBindErr } else { WcStatus::LocProtErr })?;
        let psn = self.req.next_psn;
        if let Some(s) = self.sq_at_mut(seq) {
            s.started = true;
            s.first_psn = psn;
            s.npkts = 0;
            s.len = 0;
            s.resp_pkts = 0;
        }
        self.req.sent_seq = seq.saturating_add(1);
        self.req.req_seq = seq.saturating_add(1);
        self.req.req_off = 0;
        self.complete_send(seq, WcStatus::Success, 0);
        self.skip_completed();
        Ok(())
    }

    /// Writes the packet at the requester position of WQE `seq` and
    /// advances. The slot is borrowed, not copied (it holds up to 512
    /// bytes of gather list or inline data): the requester state changes
    /// only after its last use.
    fn build_request<M: Memory>(&mut self, mem: &mut M, seq: u64, buf: &mut [u8]) -> Result<usize, Stop> {
        let fail = WcStatus::LocQpOpErr;
        let slot = self.sq_at(seq).ok_or(fail)?;
        let wqe = &slot.wqe;
        let psn = self.req.next_psn;
        let off = self.req.req_off;
        let mut h = Headers::bth_only(Opcode::RC_ACKNOWLEDGE, self.pkey, self.attr.dest_qp_num, psn);
        let op = wqe.opcode;
        if op.is_read_or_atomic() {
            h.bth.ack_req = true;
            let mut plen = 0usize;
            if op == WrOpcode::RdmaRead {
                h.bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
                h.reth = Some(RethRepr {
                    va: wqe.remote_addr.wrapping_add(u64::from(off)),
                    r_key: wqe.rkey,
                    dma_len: slot.len.saturating_sub(off),
                });
            } else if op == WrOpcode::AtomicWrite {
                h.bth.opcode = Opcode::RC_ATOMIC_WRITE;
                h.reth = Some(RethRepr { va: wqe.remote_addr, r_key: wqe.rkey, dma_len: 8 });
                plen = 8;
            } else if op == WrOpcode::Flush {
                h.bth.opcode = Opcode::RC_FLUSH;
                let bits = wqe.imm_data;
                h.feth = Some(FethRepr { placement: (bits & 0xf) as u8, selectivity: ((bits >> 4) & 0x3) as u8 });
                let len = u32::try_from(wqe.compare_add).map_err(|_| WcStatus::LocLenErr)?;
                h.reth = Some(RethRepr { va: wqe.remote_addr, r_key: wqe.rkey, dma_len: len });
            } else {
                let (opcode, swap_add, compare) = if op == WrOpcode::AtomicCmpAndSwp {
                    (Opcode::RC_COMPARE_SWAP, wqe.swap, wqe.compare_add)
                } else {
                    (Opcode::RC_FETCH_ADD, wqe.compare_add, 0)
                };
                h.bth.opcode = opcode;
                h.atomic_eth = Some(AtomicEthRepr { va: wqe.remote_addr, r_key: wqe.rkey, swap_add, compare });
            }
            let hlen = packet::emit_headers(&h, plen, buf).map_err(|_| fail)?;
            if plen > 0 {
                let dst = buf.get_mut(hlen..hlen.checked_add(plen).ok_or(fail)?).ok_or(fail)?;
                if !super::super::sg::copy_exact(dst, &wqe.compare_add.to_ne_bytes()) {
                    return Err(fail.into());
                }
            }
            let next = slot.first_psn.wrapping_add(slot.npkts);
            let total = packet::finish(buf, hlen, plen).map_err(|_| fail)?;
            self.req.req_seq = self.req.req_seq.saturating_add(1);
            self.req.next_psn = next;
            self.req.req_off = 0;
            self.req.since_ack_req = 0;
            return Ok(total);
        }
        let pmtu = self.pmtu();
        let plen = slot.len.saturating_sub(off).min(pmtu);
        let first = off == 0;
        let end = off.saturating_add(plen);
        let last = end >= slot.len;
        h.bth.opcode = send_write_opcode(op, first, last);
        if self.ty == QpType::Uc {
            h.bth.opcode = h.bth.opcode.uc();
        }
        let is_write = matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm);
        if first && is_write {
            h.reth = Some(RethRepr { va: wqe.remote_addr, r_key: wqe.rkey, dma_len: slot.len });
        }
        if last {
            match op {
                WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => h.immdt = Some(ImmDtRepr { imm: wqe.imm_data }),
                WrOpcode::SendWithInv => h.ieth = Some(IethRepr { r_key: wqe.imm_data }),
                _ => {}
            }
            h.bth.solicited = wqe.send_flags & send_flags::SOLICITED != 0
                && !matches!(op, WrOpcode::RdmaWrite);
        }
        let since = self.req.since_ack_req.saturating_add(1);
        // AckReq every ACK_REQ_EVERY packets, every half window when the
        // congestion window is smaller, and on the packet that fills the
        // window: without it a window shorter than ACK_REQ_EVERY would wait
        // for the ACK timeout. The window is the one that holds the
        // requester now: the shared window's bound too, so that a QP it
        // lets send a few packets of a long message gets them acknowledged.
        let cwnd = self.send_window();
        let fills = self.comp.una.distance_to(psn.next()) >= cwnd;
        h.bth.ack_req = self.ty == QpType::Rc && (last || fills || since >= ACK_REQ_EVERY.min((cwnd / 2).max(1)));
        let plen_us = plen as usize;
        let hlen = packet::emit_headers(&h, plen_us, buf).map_err(|_| fail)?;
        let pend = hlen.checked_add(plen_us).ok_or(fail)?;
        let payload = buf.get_mut(hlen..pend).ok_or(fail)?;
        if wqe.is_inline() {
            let src = wqe.inline_data().get(off as usize..end as usize).ok_or(WcStatus::LocLenErr)?;
            if !super::super::sg::copy_exact(payload, src) {
                return Err(fail.into());
            }
        } else {
            sg::gather(mem, self.pd, wqe.sges(), u64::from(off), payload).map_err(sg_stop)?;
        }
        let total = packet::finish(buf, hlen, plen_us).map_err(|_| fail)?;
        self.req.since_ack_req = if h.bth.ack_req { 0 } else { since };
        self.req.next_psn = psn.next();
        if last {
            self.req.req_seq = self.req.req_seq.saturating_add(1);
            self.req.req_off = 0;
        } else {
            self.req.req_off = end;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_segmentation_packet_count() {
        assert_eq!(packets(0, 256), 1);
        assert_eq!(packets(1, 256), 1);
        assert_eq!(packets(256, 256), 1);
        assert_eq!(packets(257, 256), 2);
        assert_eq!(packets(1 << 20, 4096), 256);
    }

    #[test]
    fn rc_segmentation_opcodes_first_middle_last_only() {
        use WrOpcode::*;
        assert_eq!(send_write_opcode(Send, true, true), Opcode::RC_SEND_ONLY);
        assert_eq!(send_write_opcode(Send, true, false), Opcode::RC_SEND_FIRST);
        assert_eq!(send_write_opcode(SendWithImm, false, false), Opcode::RC_SEND_MIDDLE);
        assert_eq!(send_write_opcode(SendWithImm, false, true), Opcode::RC_SEND_LAST_WITH_IMMEDIATE);
        assert_eq!(send_write_opcode(SendWithInv, false, true), Opcode::RC_SEND_LAST_WITH_INVALIDATE);
        assert_eq!(send_write_opcode(RdmaWrite, true, false), Opcode::RC_RDMA_WRITE_FIRST);
        assert_eq!(send_write_opcode(RdmaWriteWithImm, false, false), Opcode::RC_RDMA_WRITE_MIDDLE);
        assert_eq!(send_write_opcode(RdmaWrite, false, true), Opcode::RC_RDMA_WRITE_LAST);
        assert_eq!(send_write_opcode(RdmaWriteWithImm, true, true), Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
    }
}
