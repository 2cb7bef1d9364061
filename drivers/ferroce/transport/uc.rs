//! Unreliable Connected: RC's SEND and RDMA WRITE messages (segmented by
//! PMTU, one PSN per packet, the same opcodes in the UC range) with no
//! acknowledgements, retransmission, READs or atomics.
//!
//! The requester is RC's ([`super::rc::requester`]) with three
//! differences: no AckReq and no ACK timer, no window, and a WQE completes
//! as soon as its last packet is handed off (as a UD send does). A local
//! error moves the QP to SQE, not ERR (IBTA 10.3.1: UC and UD use SQE).
//!
//! The responder is RC's for an in-order packet of a message; what differs
//! is what a loss or an error does (IBTA 9.7.5.1 and the class D and E
//! responder errors): nothing is NAKed and the QP keeps running; the
//! message in progress is dropped and its receive WQE is reused by the
//! next message:
//! - a PSN gap or an opcode out of sequence drops the message in progress;
//!   a FIRST or ONLY packet always starts a new message, whatever its PSN;
//!   MIDDLE and LAST packets of a dropped message are dropped;
//! - no receive WQE (RNR), a message longer than its receive WQE, an
//!   invalid R_Key or a WRITE the QP does not allow: the message is
//!   dropped;
//! - a receive WQE the responder cannot use (a bad L_Key, class A)
//!   completes with its error and the QP enters ERR.

use super::engine::{complete_recv, DropReason, Qp, RecvSlot, RxOutcome, SendSlot};
use super::memory::Memory;
use super::rc::responder::InProgress;
use super::ring::Storage;
use super::verbs::{Cqe, WcOpcode, WcStatus};
use super::wire::packet::TransportPacket;
use super::wire::{Operation, Position, Transport};

/// What the RC responder's error became on a UC QP.
pub(crate) enum UcError {
    /// Class D/E: the message is dropped, the QP keeps running.
    DropMessage,
    /// Class A: the receive WQE `seq` completes with `status`, the QP
    /// enters ERR.
    Fatal { seq: u64, status: WcStatus },
}

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    /// UC RQ Logic: one request packet.
    pub(crate) fn uc_respond<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> RxOutcome {
        if !self.state.receives() {
            return RxOutcome::Dropped(DropReason::State);
        }
        if rx.info.transport != Transport::Uc || !rx.info.is_request() {
            return RxOutcome::Dropped(DropReason::Header);
        }
        let psn = rx.headers.bth.psn;
        let op = rx.info.operation;
        let starts = matches!(rx.info.position, Position::First | Position::Only);
        let continues = !starts
            && psn == self.resp.epsn
            && match self.resp.cur {
                InProgress::None => false,
                InProgress::Send { .. } => op == Operation::Send,
                InProgress::Write { .. } => op == Operation::RdmaWrite,
            };
        if !continues {
            self.uc_drop_message();
        }
        self.resp.epsn = psn.next();
        if !starts && self.resp.cur == InProgress::None {
            return RxOutcome::Dropped(DropReason::Sequence);
        }
        let rq_next = self.rq_next;
        match self.uc_in_order(mem, rx) {
            Ok(o) => o,
            Err(UcError::DropMessage) => {
                self.uc_drop_message();
                // A FIRST or ONLY that failed gives back the WQE it took.
                self.rq_next = self.rq_next.min(rq_next);
                RxOutcome::Dropped(DropReason::Invalid)
            }
            Err(UcError::Fatal { seq, status }) => {
                complete_recv(self, seq, Cqe { status, opcode: WcOpcode::Recv, ..Cqe::default() });
                self.resp.cur = InProgress::None;
                self.enter_error();
                RxOutcome::Dropped(DropReason::Memory)
            }
        }
    }

    /// Whether a UC request, arriving at a QP on an SRQ that holds no
    /// receive WQE, takes the SRQ's next one: a SEND's FIRST or ONLY
    /// packet, or an RDMA WRITE ONLY with immediate, starts a message
    /// whatever its PSN; an RDMA WRITE LAST with immediate completes the
    /// WRITE in progress when it is in sequence. A MIDDLE or LAST that
    /// `uc_respond` will drop takes none. A message dropped after taking
    /// one leaves it in the QP for the next message (`uc_drop_message`),
    /// so a loss holds no second WQE back from the SRQ.
    pub(crate) fn uc_takes_srq_wqe(&self, rx: &TransportPacket<'_>) -> bool {
        if rx.info.transport != Transport::Uc {
            return false;
        }
        match rx.info.position {
            Position::First | Position::Only => true,
            Position::Middle | Position::Last => {
                rx.info.operation == Operation::RdmaWrite
                    && rx.headers.bth.psn == self.resp.epsn
                    && matches!(self.resp.cur, InProgress::Write { .. })
            }
        }
    }

    /// Drops the message in progress: a SEND gives its receive WQE back
    /// (the last one taken: each message takes one, in order), to be
    /// filled again from its start by the next message.
    pub(crate) fn uc_drop_message(&mut self) {
        if let InProgress::Send { rq_seq, .. } = self.resp.cur {
            if rq_seq.saturating_add(1) == self.rq_next {
                self.rq_next = rq_seq;
            }
        }
        self.resp.cur = InProgress::None;
    }
}
