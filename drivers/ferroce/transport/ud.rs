//! Unreliable Datagram: the SQ Logic and RQ Logic of IBTA chapter 9/10 for
//! UD (one packet per message, no responses).

use super::engine::{complete_recv, DropReason, NetHeader, Qp, RecvSlot, RxOutcome, SendSlot, Transmit};
use super::memory::{MemError, Memory};
use super::wire::packet::{self, Headers, TransportPacket};
use super::qp::QpState;
use super::ring::Storage;
use super::sg::{self, SgError};
use super::verbs::{send_flags, wc_flags, Cqe, WcOpcode, WcStatus, WrOpcode, GRH_LEN};
use super::wire::{DethRepr, ImmDtRepr, Opcode, Transport};

/// DETH Q_Key bit 31: the WR asks for the QP's own Q_Key (controlled Q_Key).
pub const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// The Q_Key a UD send puts in its DETH: the WR's, unless bit 31 of it is
/// set, then the QP context's (IBTA 10.2.5 / seed 000).
pub fn deth_qkey(wr_qkey: u32, qp_qkey: u32) -> u32 {
    if wr_qkey & QKEY_CONTROLLED != 0 {
        qp_qkey
    } else {
        wr_qkey
    }
}

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    /// UD SQ Logic: one SEND ONLY (with immediate) packet per WQE, PSN =
    /// previous + 1; the WQE completes as soon as its packet is handed off.
    pub(super) fn ud_transmit<M: Memory>(&mut self, mem: &mut M, buf: &mut [u8]) -> Option<Transmit> {
        if self.state != QpState::Rts || self.req.fault_wait {
            return None;
        }
        let seq = self.req.req_seq;
        // The slot is borrowed, not copied (it holds up to 32 SGEs or 512
        // inline bytes): the QP changes only after its last use.
        let slot = self.sq_at(seq)?;
        if slot.status.is_some() {
            return None;
        }
        let wqe = &slot.wqe;
        let len = wqe.length().unwrap_or(u32::MAX);
        // Table 20-2: an "only" packet carries 0..=PMTU bytes. Larger is a
        // locally detected error associated with the WQE (class B).
        if len > self.pmtu() {
            self.ud_local_error(seq, WcStatus::LocLenErr);
            return None;
        }
        let opcode = if wqe.opcode == WrOpcode::SendWithImm {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
        let (ah, dest_qpn) = (wqe.ah, wqe.remote_qpn & 0xff_ffff);
        let psn = self.req.next_psn;
        let mut h = Headers::bth_only(opcode, self.pkey, dest_qpn, psn);
        h.bth.solicited = wqe.send_flags & send_flags::SOLICITED != 0;
        h.deth = Some(DethRepr { q_key: deth_qkey(wqe.remote_qkey, self.attr.qkey), src_qp: self.qpn });
        if wqe.opcode == WrOpcode::SendWithImm {
            h.immdt = Some(ImmDtRepr { imm: wqe.imm_data });
        }
        let plen = usize::try_from(len).ok()?;
        let hlen = packet::emit_headers(&h, plen, buf).ok()?;
        let end = hlen.checked_add(plen)?;
        let payload = buf.get_mut(hlen..end)?;
        let gathered = if wqe.is_inline() {
            if !super::sg::copy_exact(payload, wqe.inline_data().get(..plen)?) {
                return None;
            }
            Ok(())
        } else {
            sg::gather(mem, self.pd, wqe.sges(), 0, payload)
        };
        if let Err(e) = gathered {
            // Table 20-3: a locally detected memory protection error
            // (e.g. an invalid L_Key in the gather list) is class B.
            let st = match e {
                SgError::Length => WcStatus::LocLenErr,
                // Memory on demand not present: nothing sent, the WQE
                // waits for its pages.
                SgError::Mem(MemError::Fault) => {
                    self.req.fault_wait = true;
                    return None;
                }
                SgError::Mem(_) => WcStatus::LocProtErr,
            };
            self.ud_local_error(seq, st);
            return None;
        }
        let total = packet::finish(buf, hlen, plen).ok()?;
        self.req.next_psn = psn.next();
        self.req.req_seq = seq.saturating_add(1);
        self.req.sent_seq = self.req.req_seq;
        self.comp.comp_seq = self.req.req_seq;
        if let Some(s) = self.sq_at_mut(seq) {
            s.len = len;
            s.first_psn = psn;
            s.npkts = 1;
            s.started = true;
            s.status = Some(WcStatus::Success);
        }
        Some(Transmit { len: total, ah, dest_qpn })
    }

    /// Class B handling for UD: the WQE completes in error and the QP
    /// enters the Send Queue Error state, which flushes the rest of the SQ
    /// while the receive side keeps working (IBTA 10.3.1, C10-38).
    fn ud_local_error(&mut self, seq: u64, status: WcStatus) {
        self.complete_send(seq, status, 0);
        self.enter_sq_error();
    }

    /// UD RQ Logic.
    pub(super) fn ud_receive<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>, net: &NetHeader<'_>) -> RxOutcome {
        if !self.state.receives() {
            return RxOutcome::Dropped(DropReason::State);
        }
        // Class D: only SEND ONLY (with immediate) of the UD transport; any
        // other opcode (reserved ones never get past the parser) is dropped.
        if rx.info.transport != Transport::Ud {
            return RxOutcome::Dropped(DropReason::Header);
        }
        let Some(DethRepr { q_key: qkey, src_qp }) = rx.headers.deth else {
            return RxOutcome::Dropped(DropReason::Header);
        };
        // Q_Key violation: silently dropped, no WQE used, no CQE.
        if qkey != self.attr.qkey {
            return RxOutcome::Dropped(DropReason::Key);
        }
        // A UD message is one packet of at most PMTU bytes.
        let plen = rx.payload.len();
        if plen > self.pmtu() as usize {
            return RxOutcome::Dropped(DropReason::Length);
        }
        // No RQ WQE: silently dropped.
        let seq = self.rq_next;
        // Borrowed, not copied (up to 32 SGEs): read before the QP changes.
        let Some(slot) = self.rq_at(seq) else {
            return RxOutcome::Dropped(DropReason::NoWqe);
        };
        // Length error (message plus GRH larger than the buffer): class D.
        let Some(need) = plen.checked_add(GRH_LEN) else {
            return RxOutcome::Dropped(DropReason::Length);
        };
        if (slot.wqe.length() as usize) < need {
            return RxOutcome::Dropped(DropReason::Length);
        }
        let grh = net.grh();
        let res = sg::scatter(mem, self.pd, slot.wqe.sges(), 0, &grh)
            .and_then(|()| sg::scatter(mem, self.pd, slot.wqe.sges(), GRH_LEN as u64, rx.payload));
        if let Err(SgError::Mem(MemError::Fault)) = res {
            // The receive buffer is memory on demand, not present: the
            // datagram is dropped (class D) and the WQE stays for the next
            // one, which finds the pages faulted in.
            return RxOutcome::Dropped(DropReason::Memory);
        }
        self.rq_next = seq.saturating_add(1);
        if res.is_err() {
            // Local QP error while executing (bad L_Key in the scatter
            // list): class A, the WQE completes in error, the QP enters ERR.
            complete_recv(self, seq, Cqe { status: WcStatus::LocProtErr, opcode: WcOpcode::Recv, ..Cqe::default() });
            self.enter_error();
            return RxOutcome::Dropped(DropReason::Memory);
        }
        let mut flags = wc_flags::GRH;
        if rx.headers.immdt.map(|i| i.imm).is_some() {
            flags |= wc_flags::WITH_IMM;
        }
        if rx.headers.bth.solicited {
            flags |= wc_flags::SOLICITED;
        }
        let cqe = Cqe {
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: u32::try_from(need).unwrap_or(u32::MAX),
            imm_data: rx.headers.immdt.map_or(0, |i| i.imm),
            src_qp,
            wc_flags: flags,
            pkey_index: self.attr.pkey_index,
            ..Cqe::default()
        };
        complete_recv(self, seq, cqe);
        RxOutcome::Accepted
    }
}
