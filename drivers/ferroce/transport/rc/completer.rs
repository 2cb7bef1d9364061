//! RC completer: responses to completions.
//!
//! ACK coalescing (an ACK covers every earlier PSN), implied NAK (an ACK or
//! response beyond an unanswered READ or atomic), READ response placement,
//! atomic results, NAK handling (go-back-N from the NAKed PSN; RNR waits),
//! the retry and RNR retry counters and the local ACK timer. Every
//! requester error completes the WQE with its `ibv_wc_status` and moves the
//! QP to ERR, flushing the rest (IBTA: RC has no SQE state).

use super::super::engine::{DropReason, Qp, RecvSlot, RxOutcome, SendSlot};
use super::super::memory::{MemError, Memory};
use super::super::wire::packet::TransportPacket;
use super::super::qp::{QpState, QpType};
use super::super::ring::Storage;
use super::super::sg::{self, SgError};
use super::super::verbs::{WcStatus, WrOpcode};
use super::super::wire::{AethRepr, AethSyndrome, NakCode, Operation, Psn};
use super::shared::CcEvents;
use super::{ack_timeout_ns, rnr_timer_ns, MIN_CWND, RNR_RETRY_INFINITE, WINDOW};

/// Completer state.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompState {
    /// Oldest WQE not completed.
    pub(crate) comp_seq: u64,
    /// First PSN not acknowledged.
    pub(crate) una: Psn,
    /// Transport retries left before RETRY_EXC_ERR.
    pub(crate) retry_left: u8,
    /// RNR retries left before RNR_RETRY_EXC_ERR (unused when infinite).
    pub(crate) rnr_left: u8,
    /// Local ACK timer.
    pub(crate) ack_deadline: Option<u64>,
    /// End of an RNR wait: no request is sent before it.
    pub(crate) rnr_until: Option<u64>,
    /// PSN the requester went back to after a gap, implied NAK or sequence
    /// NAK; the same event is not acted on again until progress.
    pub(crate) rewound_at: Option<Psn>,
    /// Congestion window in packets (0: not yet reduced, [`WINDOW`]):
    /// halved on each loss the requester acts on, grown by one per window
    /// of acknowledged packets, between [`MIN_CWND`] and [`WINDOW`].
    pub(crate) cwnd: u32,
    /// Packets acknowledged towards the next growth step.
    pub(crate) cwnd_acc: u32,
    /// What the device's shared window has not yet been told
    /// ([`Qp::take_cc`]).
    pub(crate) cc: CcEvents,
    /// The most packets the requester may have in flight, set by the
    /// device around one transmit pass from its shared window ([`Qp::set_send_cap`];
    /// `None`: only the QP's own window bounds it).
    pub(crate) cap: Option<u32>,
}

/// An ACK reached past a READ or atomic whose response is missing.
struct ImpliedNak(Psn);

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    /// Moves the completer past WQEs that already completed (local
    /// operations, which complete when the requester reaches them), so
    /// that it always names the oldest one waiting for the wire.
    pub(crate) fn skip_completed(&mut self) {
        while self.comp.comp_seq < self.req.sent_seq
            && self.sq_at(self.comp.comp_seq).is_some_and(|s| s.status.is_some())
        {
            self.comp.comp_seq = self.comp.comp_seq.saturating_add(1);
        }
    }

    /// Completes every WQE wholly covered by an acknowledgement of `psn`
    /// and all before it. Stops at a READ/atomic still waiting for its
    /// response: that is an implied NAK, returned with the PSN to resume.
    fn ack_through(&mut self, now: u64, psn: Psn) -> Result<(), ImpliedNak> {
        let before = self.comp.una;
        let mut res = Ok(());
        while self.comp.comp_seq < self.req.sent_seq {
            let seq = self.comp.comp_seq;
            let Some(s) = self.sq_at(seq).copied() else { break };
            if s.status.is_some() {
                self.comp.comp_seq = seq.saturating_add(1);
                continue;
            }
            if psn.is_before(s.first_psn) {
                break;
            }
            if s.wqe.opcode.is_read_or_atomic() {
                // The responder executes in order: an ACK past a READ means
                // its response packets were lost.
                res = Err(ImpliedNak(s.first_psn.wrapping_add(s.resp_pkts)));
                break;
            }
            if s.last_psn().is_after(psn) {
                // Partially acknowledged multi-packet message.
                if psn.next().is_after(self.comp.una) {
                    self.comp.una = psn.next();
                }
                break;
            }
            self.complete_send(seq, WcStatus::Success, 0);
            self.comp.comp_seq = seq.saturating_add(1);
            self.comp.una = s.first_psn.wrapping_add(s.npkts);
        }
        if self.comp.comp_seq >= self.req.sent_seq {
            self.comp.una = self.req.psn_hi;
        }
        if self.comp.una != before {
            self.grow_cwnd(before.distance_to(self.comp.una));
            self.progress(now);
        }
        res
    }

    /// Forward progress: counters reload, the ACK timer restarts, and a
    /// requester that went back further than needed moves up.
    fn progress(&mut self, now: u64) {
        self.comp.retry_left = self.attr.retry_cnt;
        self.comp.rnr_left = self.attr.rnr_retry;
        self.comp.rewound_at = None;
        self.comp.ack_deadline = if self.comp.comp_seq < self.req.sent_seq {
            ack_timeout_ns(self.attr.timeout).map(|t| now.saturating_add(t))
        } else {
            None
        };
        if self.req.next_psn.is_before(self.comp.una) {
            self.seek(self.comp.una);
        }
    }

    /// Go back to `psn` unless this very event was already acted on.
    fn rewind_once(&mut self, psn: Psn) {
        if self.comp.rewound_at != Some(psn) {
            self.comp.rewound_at = Some(psn);
            self.on_loss();
            self.seek(psn);
        }
    }

    /// The packets in flight the requester allows now.
    pub(crate) fn cwnd(&self) -> u32 {
        if self.comp.cwnd == 0 {
            WINDOW
        } else {
            self.comp.cwnd.clamp(MIN_CWND, WINDOW)
        }
    }

    /// A loss (sequence NAK, implied NAK, local ACK timeout): every loss
    /// costs the packets in flight after it (the responder drops them), so
    /// the window halves (multiplicative decrease) and a path that drops
    /// bursts (a full socket buffer, a slow receiver) is not overrun again.
    fn on_loss(&mut self) {
        self.comp.cwnd = (self.cwnd() / 2).max(MIN_CWND);
        self.comp.cwnd_acc = 0;
        self.comp.cc.losses = self.comp.cc.losses.saturating_add(1);
    }

    /// Packets this QP has in flight on its path: from the first
    /// unacknowledged PSN to the next one it sends (0 for a QP that is not
    /// an RC requester in RTS or SQD). What it charges to the device's
    /// shared window.
    pub fn wire_in_flight(&self) -> u32 {
        if self.ty != QpType::Rc || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return 0;
        }
        if self.req.next_psn.is_before(self.comp.una) {
            return 0;
        }
        self.comp.una.distance_to(self.req.next_psn).min(WINDOW)
    }

    /// What the shared window has not yet been told: packets acknowledged,
    /// losses and timeouts since the last call.
    pub fn take_cc(&mut self) -> CcEvents {
        core::mem::take(&mut self.comp.cc)
    }

    /// Bounds the packets in flight to `cap` (`None`: no bound but the
    /// QP's own window) until the next call. The device sets it around
    /// one transmit pass; [`Qp::may_transmit`] outside such a pass
    /// answers as if there were none.
    pub fn set_send_cap(&mut self, cap: Option<u32>) {
        self.comp.cap = cap;
    }

    /// Whether this QP has a request ready that only the bound of
    /// [`Qp::set_send_cap`] holds back.
    pub fn held_by_cap(&mut self, now: u64) -> bool {
        let Some(cap) = self.comp.cap else { return false };
        if self.may_transmit(now) {
            return false;
        }
        self.comp.cap = None;
        let held = self.may_transmit(now);
        self.comp.cap = Some(cap);
        held
    }

    /// `acked` packets newly acknowledged: one more packet of window per
    /// window's worth (additive increase).
    fn grow_cwnd(&mut self, acked: u32) {
        self.comp.cc.acked = self.comp.cc.acked.saturating_add(acked);
        let w = self.cwnd();
        if w >= WINDOW {
            return;
        }
        self.comp.cwnd_acc = self.comp.cwnd_acc.saturating_add(acked);
        if self.comp.cwnd_acc >= w {
            self.comp.cwnd_acc = self.comp.cwnd_acc.saturating_sub(w);
            self.comp.cwnd = w.saturating_add(1).min(WINDOW);
        }
    }

    /// Completes the oldest WQE with `status`, then ERR and flush.
    fn fail(&mut self, status: WcStatus, vendor_err: u32) {
        let seq = self.comp.comp_seq;
        self.complete_send(seq, status, vendor_err);
        self.enter_error();
    }

    /// Processes a response packet (ACKNOWLEDGE, READ response, ATOMIC
    /// ACKNOWLEDGE).
    pub(crate) fn complete_response<M: Memory>(&mut self, now: u64, mem: &mut M, rx: &TransportPacket<'_>) -> RxOutcome {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return RxOutcome::Dropped(DropReason::State);
        }
        let psn = rx.headers.bth.psn;
        // Only PSNs that were sent can be answered; anything before the
        // first unacknowledged PSN is a stale duplicate.
        if !psn.is_before(self.req.psn_hi) || psn.is_before(self.comp.una.prev()) {
            return RxOutcome::Dropped(DropReason::Sequence);
        }
        match rx.info.operation {
            Operation::Acknowledge => {
                let Some(AethRepr { syndrome, .. }) = rx.headers.aeth else {
                    return RxOutcome::Dropped(DropReason::Header);
                };
                self.on_acknowledge(now, psn, syndrome)
            }
            Operation::RdmaReadResponse => self.on_read_response(now, mem, rx),
            Operation::AtomicAcknowledge => self.on_atomic_ack(now, mem, rx),
            _ => RxOutcome::Dropped(DropReason::Header),
        }
    }

    fn on_acknowledge(&mut self, now: u64, psn: Psn, syndrome: AethSyndrome) -> RxOutcome {
        let vendor = u32::from(syndrome.to_byte().unwrap_or(0));
        match syndrome {
            AethSyndrome::Ack { .. } => {
                if let Err(ImpliedNak(p)) = self.ack_through(now, psn) {
                    self.rewind_once(p);
                }
                RxOutcome::Accepted
            }
            AethSyndrome::Nak(NakCode::PsnSequenceError) => {
                // The responder expects `psn`: all before it arrived.
                if psn.is_before(self.comp.una) {
                    return RxOutcome::Dropped(DropReason::Sequence);
                }
                let implied = self.ack_through(now, psn.prev());
                let target = match implied {
                    Err(ImpliedNak(p)) => p,
                    Ok(()) => psn,
                };
                if self.comp.rewound_at == Some(target) {
                    return RxOutcome::Dropped(DropReason::Sequence);
                }
                if self.comp.retry_left == 0 {
                    self.fail(WcStatus::RetryExcErr, vendor);
                    return RxOutcome::Accepted;
                }
                self.comp.retry_left = self.comp.retry_left.saturating_sub(1);
                self.rewind_once(target);
                RxOutcome::Accepted
            }
            AethSyndrome::RnrNak { timer } => {
                if psn.is_before(self.comp.una) {
                    return RxOutcome::Dropped(DropReason::Sequence);
                }
                if let Err(ImpliedNak(p)) = self.ack_through(now, psn.prev()) {
                    self.rewind_once(p);
                    return RxOutcome::Accepted;
                }
                if self.comp.rnr_left == 0 {
                    self.fail(WcStatus::RnrRetryExcErr, vendor);
                    return RxOutcome::Accepted;
                }
                if self.attr.rnr_retry != RNR_RETRY_INFINITE {
                    self.comp.rnr_left = self.comp.rnr_left.saturating_sub(1);
                }
                self.comp.rnr_until = Some(now.saturating_add(rnr_timer_ns(timer)));
                self.comp.ack_deadline = None;
                self.seek(psn);
                RxOutcome::Accepted
            }
            AethSyndrome::Nak(code) => {
                if psn.is_before(self.comp.una) {
                    return RxOutcome::Dropped(DropReason::Sequence);
                }
                let _ = self.ack_through(now, psn.prev());
                let status = match code {
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError | NakCode::PsnSequenceError => WcStatus::RemOpErr,
                };
                self.fail(status, vendor);
                RxOutcome::Accepted
            }
            AethSyndrome::Reserved(_) => RxOutcome::Dropped(DropReason::Header),
        }
    }

    /// The oldest WQE after implicitly acknowledging everything before
    /// `psn`; `None` (after rewinding) when an earlier READ/atomic is still
    /// unanswered.
    fn oldest_after_implicit_ack(&mut self, now: u64, psn: Psn) -> Option<u64> {
        if let Err(ImpliedNak(p)) = self.ack_through(now, psn.prev()) {
            if p != psn {
                // A response for a later request overtook a missing one.
                self.rewind_once(p);
                return None;
            }
        }
        let seq = self.comp.comp_seq;
        let open = self.sq_at(seq)?.status.is_none();
        (seq < self.req.sent_seq && open).then_some(seq)
    }

    fn on_read_response<M: Memory>(&mut self, now: u64, mem: &mut M, rx: &TransportPacket<'_>) -> RxOutcome {
        let psn = rx.headers.bth.psn;
        let Some(seq) = self.oldest_after_implicit_ack(now, psn) else {
            return RxOutcome::Dropped(DropReason::Sequence);
        };
        // Borrowed, not copied (a slot holds up to 32 SGEs or 512 inline
        // bytes): this path runs for every response packet.
        let Some(s) = self.sq_at(seq) else {
            return RxOutcome::Dropped(DropReason::Sequence);
        };
        // A READ's data, or the empty response of a FLUSH or ATOMIC WRITE.
        if s.wqe.opcode != WrOpcode::RdmaRead && !s.wqe.opcode.is_placement() {
            return RxOutcome::Dropped(DropReason::Sequence);
        }
        let expected = s.first_psn.wrapping_add(s.resp_pkts);
        if psn != expected {
            if psn.is_after(expected) && psn.in_range(s.first_psn, s.npkts) {
                // A response packet went missing: re-request from it.
                self.rewind_once(expected);
            }
            return RxOutcome::Dropped(DropReason::Sequence);
        }
        let pmtu = self.pmtu();
        let off = s.resp_pkts.saturating_mul(pmtu);
        let want = s.len.saturating_sub(off).min(pmtu);
        let is_last = s.resp_pkts.saturating_add(1) >= s.npkts;
        // Positions are relative to the (possibly re-issued) request, so
        // only "ends the message or not" and the length are checked.
        if rx.info.is_last() != is_last || rx.payload.len() != want as usize {
            return RxOutcome::Dropped(DropReason::Length);
        }
        match sg::scatter(mem, self.pd, s.wqe.sges(), u64::from(off), rx.payload) {
            Ok(()) => {}
            Err(SgError::Mem(MemError::Fault)) => return self.response_fault(psn),
            Err(_) => {
                self.fail(WcStatus::LocProtErr, 0);
                return RxOutcome::Accepted;
            }
        }
        if let Some(slot) = self.sq_at_mut(seq) {
            slot.resp_pkts = slot.resp_pkts.saturating_add(1);
        }
        self.comp.una = psn.next();
        self.comp.cc.acked = self.comp.cc.acked.saturating_add(1);
        if is_last {
            self.complete_send(seq, WcStatus::Success, 0);
            self.comp.comp_seq = seq.saturating_add(1);
            self.skip_completed();
            self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
            if self.comp.comp_seq >= self.req.sent_seq {
                self.comp.una = self.req.psn_hi;
            }
        }
        self.progress(now);
        RxOutcome::Accepted
    }

    /// A READ response or atomic ACK whose local buffer is memory on
    /// demand not present: dropped, nothing completed; the requester goes
    /// back to the request (`psn`) and sends it again once the glue has
    /// faulted the pages in ([`Qp::fault_resolved`]). The responder
    /// answers the READ again, or the duplicate atomic from its resource.
    fn response_fault(&mut self, psn: Psn) -> RxOutcome {
        self.req.fault_wait = true;
        self.seek(psn);
        RxOutcome::Dropped(DropReason::Memory)
    }

    fn on_atomic_ack<M: Memory>(&mut self, now: u64, mem: &mut M, rx: &TransportPacket<'_>) -> RxOutcome {
        let psn = rx.headers.bth.psn;
        let Some(orig) = rx.headers.atomic_ack_eth.map(|a| a.orig_data) else {
            return RxOutcome::Dropped(DropReason::Header);
        };
        let Some(seq) = self.oldest_after_implicit_ack(now, psn) else {
            return RxOutcome::Dropped(DropReason::Sequence);
        };
        let Some(s) = self.sq_at(seq) else {
            return RxOutcome::Dropped(DropReason::Sequence);
        };
        if !s.wqe.opcode.is_atomic() || s.first_psn != psn {
            return RxOutcome::Dropped(DropReason::Sequence);
        }
        match sg::scatter(mem, self.pd, s.wqe.sges(), 0, &orig.to_ne_bytes()) {
            Ok(()) => {}
            Err(SgError::Mem(MemError::Fault)) => return self.response_fault(psn),
            Err(_) => {
                self.fail(WcStatus::LocProtErr, 0);
                return RxOutcome::Accepted;
            }
        }
        self.complete_send(seq, WcStatus::Success, 0);
        self.comp.comp_seq = seq.saturating_add(1);
        self.skip_completed();
        self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
        self.comp.una = if self.comp.comp_seq >= self.req.sent_seq { self.req.psn_hi } else { psn.next() };
        self.comp.cc.acked = self.comp.cc.acked.saturating_add(1);
        self.progress(now);
        RxOutcome::Accepted
    }

    /// Local ACK timeout and RNR wait expiry.
    pub(crate) fn rc_on_timer(&mut self, now: u64) {
        if self.comp.rnr_until.is_some_and(|t| now >= t) {
            self.comp.rnr_until = None;
        }
        let Some(d) = self.comp.ack_deadline else { return };
        if now < d || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        if self.comp.comp_seq >= self.req.sent_seq {
            self.comp.ack_deadline = None;
            return;
        }
        if self.req.next_psn == self.comp.una {
            // Nothing is on the wire (the requester went back and has not
            // sent again: the device's shared window holds it back): no
            // packet was lost, so no retry is counted; the timer waits for
            // the next send.
            self.comp.ack_deadline = ack_timeout_ns(self.attr.timeout).map(|t| now.saturating_add(t));
            return;
        }
        if self.comp.retry_left == 0 {
            self.fail(WcStatus::RetryExcErr, 0);
            return;
        }
        self.comp.retry_left = self.comp.retry_left.saturating_sub(1);
        self.comp.rewound_at = Some(self.comp.una);
        self.comp.cc.timeouts = self.comp.cc.timeouts.saturating_add(1);
        self.on_loss();
        self.seek(self.comp.una);
        self.comp.ack_deadline = ack_timeout_ns(self.attr.timeout).map(|t| now.saturating_add(t));
    }
}
