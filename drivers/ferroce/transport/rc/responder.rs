//! RC responder: request packets in, memory effects and responses out.
//!
//! ePSN validation (in order, duplicate, out of sequence), the opcode
//! sequence, receive WQE use, RDMA WRITE/READ and atomics against R_Keys,
//! the MSN, read/atomic resources (`max_dest_rd_atomic`) for replaying
//! duplicates, and the NAKs: PSN sequence error (once per error), RNR
//! (with the QP's minimum RNR timer), invalid request, remote access and
//! remote operational errors. Responses leave in PSN order through a small
//! queue in which consecutive ACKs coalesce.

use super::super::engine::{complete_recv, DropReason, Qp, RecvSlot, RxOutcome, SendSlot, Transmit};
use super::super::memory::{Key, MemError, Memory};
use super::super::wire::packet::{self, Headers, TransportPacket};
use super::super::qp::MAX_RD_ATOMIC;
use super::super::ring::{Ring, Storage};
use super::super::sg::{self, SgError};
use super::super::verbs::{access, wc_flags, AsyncError, Cqe, WcOpcode, WcStatus};
use super::super::wire::aeth::CREDITS_UNLIMITED;
use super::super::wire::{feth, AethRepr, AethSyndrome, AtomicAckEthRepr, NakCode, Opcode, Operation, Position, Psn, Transport};
use super::super::qp::QpType;
use super::super::uc::UcError;
use super::requester::packets;

/// Response queue depth: every resource can have a job, with an ACK or NAK
/// between each pair.
const JOBS: usize = 2 * MAX_RD_ATOMIC as usize + 4;

/// The message the responder is in the middle of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InProgress {
    /// Between messages: the next packet must be FIRST or ONLY.
    #[default]
    None,
    /// A multi-packet SEND into receive WQE `rq_seq`, `off` bytes placed.
    Send { rq_seq: u64, off: u32 },
    /// A multi-packet RDMA WRITE: next address, R_Key, bytes left, total.
    Write { va: u64, rkey: u32, left: u32, total: u32 },
}

/// A READ or atomic the responder executed, kept to answer duplicates.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resource {
    kind: ResKind,
    first_psn: Psn,
    npkts: u32,
    va: u64,
    rkey: u32,
    len: u32,
    /// Atomic: the value read (replayed for a duplicate).
    orig: u64,
    /// MSN carried by its responses.
    msn: u32,
    /// A response job refers to it: not to be recycled yet.
    busy: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ResKind {
    #[default]
    Free,
    Read,
    Atomic,
}

/// A response waiting to be sent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Job {
    #[default]
    Empty,
    /// ACKNOWLEDGE of `psn` and everything before it.
    Ack { psn: Psn, msn: u32 },
    /// NAK or RNR NAK for `psn`.
    Nak { psn: Psn, syndrome: AethSyndrome, msn: u32 },
    /// READ response packets of resource `res` from `psn` (at byte `off`);
    /// `start` is the PSN of the request being answered (original or
    /// duplicate), which decides FIRST/MIDDLE.
    Read { res: u8, start: Psn, psn: Psn, off: u32 },
    /// ATOMIC ACKNOWLEDGE of resource `res`.
    Atomic { res: u8 },
}

/// Responder state.
pub struct RespState {
    /// Expected PSN of the next request.
    pub(crate) epsn: Psn,
    /// Message sequence number: messages completed, 24 bits.
    pub(crate) msn: u32,
    /// A sequence error or RNR NAK went out and no in-order packet has
    /// arrived since: further out-of-sequence packets are dropped silently
    /// (IBTA 9.7.5.2.2: one NAK per sequence error).
    pub(crate) nak_sent: bool,
    pub(crate) cur: InProgress,
    pub(crate) res: [Resource; MAX_RD_ATOMIC as usize],
    /// Next resource slot to try when recycling (round robin = oldest).
    pub(crate) res_next: u8,
    pub(crate) jobs: Ring<Job, [Job; JOBS]>,
    /// The NAK of a fatal error, sent even though the QP is in ERR.
    pub(crate) final_nak: Option<(Psn, AethSyndrome)>,
}

impl Default for RespState {
    fn default() -> Self {
        Self {
            epsn: Psn::ZERO,
            msn: 0,
            nak_sent: false,
            cur: InProgress::None,
            res: [Resource::default(); MAX_RD_ATOMIC as usize],
            res_next: 0,
            jobs: Ring::new([Job::Empty; JOBS]),
            final_nak: None,
        }
    }
}

impl core::fmt::Debug for RespState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RespState")
            .field("epsn", &self.epsn)
            .field("msn", &self.msn)
            .field("nak_sent", &self.nak_sent)
            .field("cur", &self.cur)
            .finish_non_exhaustive()
    }
}

const ACK: AethSyndrome = AethSyndrome::Ack { credits: CREDITS_UNLIMITED };

fn next_msn(msn: u32) -> u32 {
    msn.wrapping_add(1) & 0xff_ffff
}

/// Why a request failed fatally (IBTA class C/A/J responder errors).
struct Fatal {
    nak: NakCode,
    /// Receive WQE in use and the status of its completion.
    rqe: Option<(u64, WcStatus)>,
}

impl Fatal {
    fn nak(nak: NakCode) -> Self {
        Self { nak, rqe: None }
    }
}

enum Step {
    Done(RxOutcome),
    Fatal(Fatal),
}

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    fn push_job(&mut self, job: Job) -> bool {
        self.resp.jobs.push(job).is_ok()
    }

    /// Queues an ACK of `psn`, merged into a queued ACK right before it
    /// (an ACK covers all earlier PSNs).
    fn push_ack(&mut self, psn: Psn) {
        let msn = self.resp.msn;
        let n = self.resp.jobs.len();
        if let Some(Job::Ack { psn: p, msn: m }) = n.checked_sub(1).and_then(|i| self.resp.jobs.get_mut(i)) {
            if !psn.is_before(*p) {
                *p = psn;
                *m = msn;
            }
            return;
        }
        let _ = self.push_job(Job::Ack { psn, msn });
    }

    /// Queues a sequence-error or RNR NAK, once per error.
    fn push_retry_nak(&mut self, psn: Psn, syndrome: AethSyndrome) -> RxOutcome {
        if !self.resp.nak_sent {
            let msn = self.resp.msn;
            if self.push_job(Job::Nak { psn, syndrome, msn }) {
                self.resp.nak_sent = true;
            }
        }
        RxOutcome::Nak
    }

    /// A fatal error: the NAK goes out, the receive WQE in use (if any)
    /// completes with its error (else the QP raises an affiliated
    /// asynchronous error), the QP enters ERR and flushes.
    fn fatal(&mut self, psn: Psn, f: Fatal) -> RxOutcome {
        if let Some((seq, status)) = f.rqe {
            let opcode = WcOpcode::Recv;
            complete_recv(self, seq, Cqe { status, opcode, ..Cqe::default() });
        } else {
            // No completion reports it: an affiliated asynchronous error
            // does (IBTA 11.6.3.1, table 85).
            self.async_error = Some(match f.nak {
                NakCode::InvalidRequest => AsyncError::InvalidRequest,
                NakCode::RemoteAccessError => AsyncError::AccessViolation,
                _ => AsyncError::Fatal,
            });
        }
        self.resp.final_nak = Some((psn, AethSyndrome::Nak(f.nak)));
        self.resp.jobs.clear();
        self.enter_error();
        RxOutcome::Nak
    }

    /// Processes an RC request packet.
    pub(crate) fn respond<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> RxOutcome {
        if !self.state.receives() {
            return RxOutcome::Dropped(DropReason::State);
        }
        if rx.info.transport != Transport::Rc || !rx.info.is_request() {
            return RxOutcome::Dropped(DropReason::Header);
        }
        let psn = rx.headers.bth.psn;
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            // Out of sequence: one PSN sequence error NAK carrying ePSN.
            let epsn = self.resp.epsn;
            return self.push_retry_nak(epsn, AethSyndrome::Nak(NakCode::PsnSequenceError));
        }
        if d < 0 {
            return self.duplicate(rx);
        }
        match self.in_order(mem, rx) {
            Step::Done(o) => o,
            Step::Fatal(f) => self.fatal(psn, f),
        }
    }

    /// The UC responder's use of the in-order path: what would be NAKed on
    /// RC drops the message, except a receive WQE that cannot be used
    /// (class A), which completes in error.
    pub(crate) fn uc_in_order<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Result<RxOutcome, UcError> {
        match self.in_order(mem, rx) {
            Step::Done(o) => Ok(o),
            Step::Fatal(Fatal { rqe: Some((seq, status @ WcStatus::LocProtErr)), .. }) => Err(UcError::Fatal { seq, status }),
            Step::Fatal(_) => Err(UcError::DropMessage),
        }
    }

    fn in_order<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        let info = &rx.info;
        // Opcode sequence: a message in progress continues with MIDDLE or
        // LAST of the same operation; otherwise FIRST or ONLY.
        let continues = matches!(info.position, Position::Middle | Position::Last);
        let ok = match self.resp.cur {
            InProgress::None => !continues,
            InProgress::Send { .. } => continues && info.operation == Operation::Send,
            InProgress::Write { .. } => continues && info.operation == Operation::RdmaWrite,
        };
        if !ok {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        let flags = self.attr.qp_access_flags;
        let allowed = match info.operation {
            Operation::RdmaWrite => flags & access::REMOTE_WRITE != 0,
            Operation::RdmaReadRequest => flags & access::REMOTE_READ != 0,
            Operation::CompareSwap | Operation::FetchAdd => flags & access::REMOTE_ATOMIC != 0,
            Operation::AtomicWrite => flags & access::REMOTE_WRITE != 0,
            // Each placement type asked for needs its right (oA19-4).
            Operation::Flush => rx.headers.feth.is_some_and(|f| {
                (f.placement & feth::PLT_GLOBAL == 0 || flags & access::FLUSH_GLOBAL != 0)
                    && (f.placement & feth::PLT_PERSISTENT == 0 || flags & access::FLUSH_PERSISTENT != 0)
            }),
            _ => true,
        };
        if !allowed {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        // Every packet but the last of a message carries exactly PMTU
        // bytes; none carries more.
        let pmtu = self.pmtu() as usize;
        let plen = rx.payload.len();
        if plen > pmtu || (matches!(info.position, Position::First | Position::Middle) && plen != pmtu) {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        self.resp.nak_sent = false;
        match info.operation {
            Operation::Send => self.recv_send(mem, rx),
            Operation::RdmaWrite => self.recv_write(mem, rx),
            Operation::RdmaReadRequest => self.recv_read(mem, rx),
            Operation::CompareSwap | Operation::FetchAdd => self.recv_atomic(mem, rx),
            Operation::AtomicWrite | Operation::Flush => self.recv_placement(mem, rx),
            _ => Step::Done(RxOutcome::Dropped(DropReason::Header)),
        }
    }

    /// Accepts the in-order packet: ePSN moves on, an ACK is queued when
    /// asked for.
    fn accept(&mut self, rx: &TransportPacket<'_>) -> Step {
        self.resp.epsn = rx.headers.bth.psn.next();
        if rx.headers.bth.ack_req && self.ty == QpType::Rc {
            self.push_ack(rx.headers.bth.psn);
        }
        Step::Done(RxOutcome::Accepted)
    }

    fn rnr(&mut self, psn: Psn) -> Step {
        if self.ty == QpType::Uc {
            // Class D: no receive WQE drops a UC message, with no NAK.
            self.uc_drop_message();
            return Step::Done(RxOutcome::Dropped(DropReason::NoWqe));
        }
        let timer = self.attr.min_rnr_timer;
        Step::Done(self.push_retry_nak(psn, AethSyndrome::RnrNak { timer }))
    }

    fn recv_send<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        let took = !matches!(self.resp.cur, InProgress::Send { .. });
        let (seq, off) = match self.resp.cur {
            InProgress::Send { rq_seq, off } => (rq_seq, off),
            _ => {
                // FIRST/ONLY takes a receive WQE; none posted: RNR NAK.
                let seq = self.rq_next;
                if seq >= self.rq_end() {
                    return self.rnr(rx.headers.bth.psn);
                }
                self.rq_next = seq.saturating_add(1);
                (seq, 0)
            }
        };
        // Borrowed, not copied (up to 32 SGEs): read before the QP changes.
        let Some(slot) = self.rq_at(seq) else {
            return Step::Fatal(Fatal::nak(NakCode::RemoteOperationalError));
        };
        match sg::scatter(mem, self.pd, slot.wqe.sges(), u64::from(off), rx.payload) {
            Ok(()) => {}
            // The receive buffer is memory on demand, not present: RNR NAK
            // (the requester sends the packet again after the timer), the
            // WQE stays where it was, and the glue faults the pages in.
            Err(SgError::Mem(MemError::Fault)) => {
                if took {
                    self.rq_next = seq;
                }
                return self.rnr(rx.headers.bth.psn);
            }
            // Message longer than the receive buffers: invalid request,
            // the WQE completes with a local length error.
            Err(SgError::Length) => {
                return Step::Fatal(Fatal { nak: NakCode::InvalidRequest, rqe: Some((seq, WcStatus::LocLenErr)) })
            }
            // A bad L_Key in the receive WQE: remote operational error
            // for the requester, local protection error here (class A).
            Err(SgError::Mem(_)) => {
                return Step::Fatal(Fatal {
                    nak: NakCode::RemoteOperationalError,
                    rqe: Some((seq, WcStatus::LocProtErr)),
                })
            }
        }
        let off = off.saturating_add(rx.payload.len() as u32);
        if !rx.info.is_last() {
            self.resp.cur = InProgress::Send { rq_seq: seq, off };
            return self.accept(rx);
        }
        let mut flags = 0;
        let mut imm = 0;
        if let Some(v) = rx.headers.immdt.map(|i| i.imm) {
            flags |= wc_flags::WITH_IMM;
            imm = v;
        }
        if let Some(rkey) = rx.headers.ieth.map(|i| i.r_key) {
            if mem.invalidate(self.pd, rkey).is_err() {
                return Step::Fatal(Fatal { nak: NakCode::InvalidRequest, rqe: Some((seq, WcStatus::LocProtErr)) });
            }
            flags |= wc_flags::WITH_INV;
            imm = rkey;
        }
        if rx.headers.bth.solicited {
            flags |= wc_flags::SOLICITED;
        }
        let cqe = Cqe {
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: off,
            imm_data: imm,
            src_qp: self.attr.dest_qp_num,
            wc_flags: flags,
            pkey_index: self.attr.pkey_index,
            ..Cqe::default()
        };
        complete_recv(self, seq, cqe);
        self.resp.cur = InProgress::None;
        self.resp.msn = next_msn(self.resp.msn);
        self.accept(rx)
    }

    fn recv_write<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        let (va, rkey, left, total) = match self.resp.cur {
            InProgress::Write { va, rkey, left, total } => (va, rkey, left, total),
            _ => {
                let Some(r) = rx.headers.reth else {
                    return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
                };
                if r.dma_len > super::MAX_MESSAGE {
                    return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
                }
                // The whole target range is checked before any byte lands
                // (memory on demand: and present, else RNR NAK).
                if r.dma_len > 0 {
                    match mem.check(self.pd, Key::Remote(r.r_key), r.va, u64::from(r.dma_len), true) {
                        Ok(()) => {}
                        Err(MemError::Fault) => return self.rnr(rx.headers.bth.psn),
                        Err(_) => return Step::Fatal(Fatal::nak(NakCode::RemoteAccessError)),
                    }
                }
                (r.va, r.r_key, r.dma_len, r.dma_len)
            }
        };
        let plen = rx.payload.len() as u32;
        let last = rx.info.is_last();
        if plen > left || (last && plen != left) || (!last && plen == left) {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        // WRITE with immediate consumes a receive WQE: RNR NAK before any
        // byte lands when none is posted.
        if rx.info.immediate && self.rq_next >= self.rq_end() {
            return self.rnr(rx.headers.bth.psn);
        }
        if plen > 0 {
            match mem.write(self.pd, Key::Remote(rkey), va, rx.payload) {
                Ok(()) => {}
                // Pages on demand went away since the first packet: RNR
                // NAK for this one; nothing moved on.
                Err(MemError::Fault) => return self.rnr(rx.headers.bth.psn),
                Err(_) => return Step::Fatal(Fatal::nak(NakCode::RemoteAccessError)),
            }
        }
        if !last {
            self.resp.cur = InProgress::Write {
                va: va.wrapping_add(u64::from(plen)),
                rkey,
                left: left.saturating_sub(plen),
                total,
            };
            return self.accept(rx);
        }
        if let Some(imm) = rx.headers.immdt.map(|i| i.imm) {
            let seq = self.rq_next;
            self.rq_next = seq.saturating_add(1);
            let cqe = Cqe {
                status: WcStatus::Success,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: total,
                imm_data: imm,
                src_qp: self.attr.dest_qp_num,
                wc_flags: if rx.headers.bth.solicited { wc_flags::WITH_IMM | wc_flags::SOLICITED } else { wc_flags::WITH_IMM },
                pkey_index: self.attr.pkey_index,
                ..Cqe::default()
            };
            complete_recv(self, seq, cqe);
        }
        self.resp.cur = InProgress::None;
        self.resp.msn = next_msn(self.resp.msn);
        self.accept(rx)
    }

    /// The resource slot for a new READ/atomic: always the oldest. The
    /// requester has at most `max_rd_atomic` (<= our `max_dest_rd_atomic`)
    /// READs/atomics outstanding and has started this one, so the oldest
    /// is answered; a response to it still queued (a stale duplicate's) is
    /// cancelled.
    fn alloc_resource(&mut self) -> Option<usize> {
        let n = usize::from(self.attr.max_dest_rd_atomic.min(MAX_RD_ATOMIC));
        let i = usize::from(self.resp.res_next).checked_rem(n)?;
        let res = u8::try_from(i).ok()?;
        if self.resp.res.get(i).is_some_and(|r| r.busy) {
            for k in 0..self.resp.jobs.len() {
                if let Some(j) = self.resp.jobs.get_mut(k) {
                    if matches!(j, Job::Read { res: x, .. } | Job::Atomic { res: x } if *x == res) {
                        *j = Job::Empty;
                    }
                }
            }
        }
        self.resp.res_next = u8::try_from(i.saturating_add(1).checked_rem(n)?).ok()?;
        Some(i)
    }

    fn recv_read<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        if self.attr.max_dest_rd_atomic == 0 {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        let Some(r) = rx.headers.reth else {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        };
        if r.dma_len > super::MAX_MESSAGE {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        if r.dma_len > 0 {
            match mem.check(self.pd, Key::Remote(r.r_key), r.va, u64::from(r.dma_len), false) {
                Ok(()) => {}
                Err(MemError::Fault) => return self.rnr(rx.headers.bth.psn),
                Err(_) => return Step::Fatal(Fatal::nak(NakCode::RemoteAccessError)),
            }
        }
        // No free resource or queue slot: drop without moving ePSN; the
        // requester's timer resends.
        if self.resp.jobs.is_full() {
            return Step::Done(RxOutcome::Dropped(DropReason::Busy));
        }
        let Some(i) = self.alloc_resource() else {
            return Step::Done(RxOutcome::Dropped(DropReason::Busy));
        };
        self.answer_with_read(i, rx.headers.bth.psn, r.va, r.r_key, r.dma_len)
    }

    /// Records a READ resource in slot `i` for the request at `psn` (its
    /// `len` bytes at `va` of `rkey`; 0 for FLUSH and ATOMIC WRITE, whose
    /// answer is an empty READ response), completes the message (MSN),
    /// queues the response stream and moves ePSN past the PSNs it takes.
    fn answer_with_read(&mut self, i: usize, psn: Psn, va: u64, rkey: u32, len: u32) -> Step {
        let npkts = packets(len, self.pmtu());
        self.resp.msn = next_msn(self.resp.msn);
        let res = Resource { kind: ResKind::Read, first_psn: psn, npkts, va, rkey, len, orig: 0, msn: self.resp.msn, busy: true };
        if let Some(slot) = self.resp.res.get_mut(i) {
            *slot = res;
        }
        let res = u8::try_from(i).unwrap_or(0);
        let _ = self.push_job(Job::Read { res, start: psn, psn, off: 0 });
        self.resp.epsn = psn.wrapping_add(npkts);
        Step::Done(RxOutcome::Accepted)
    }

    fn recv_atomic<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        if self.attr.max_dest_rd_atomic == 0 {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        let Some(a) = rx.headers.atomic_eth else {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        };
        if a.va % 8 != 0 {
            return Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        }
        if self.resp.jobs.is_full() {
            return Step::Done(RxOutcome::Dropped(DropReason::Busy));
        }
        // The atomic runs first and takes a resource after: memory on
        // demand not present (RNR NAK), like every refusal, then leaves
        // the resources as they were. (A resource is always found: there
        // is at least one, and the oldest is reused.)
        let result = if rx.info.operation == Operation::CompareSwap {
            mem.compare_swap(self.pd, a.r_key, a.va, a.compare, a.swap_add)
        } else {
            mem.fetch_add(self.pd, a.r_key, a.va, a.swap_add)
        };
        let orig = match result {
            Ok(v) => v,
            Err(MemError::Fault) => return self.rnr(rx.headers.bth.psn),
            Err(MemError::Misaligned) => return Step::Fatal(Fatal::nak(NakCode::InvalidRequest)),
            Err(_) => return Step::Fatal(Fatal::nak(NakCode::RemoteAccessError)),
        };
        let Some(i) = self.alloc_resource() else {
            return Step::Done(RxOutcome::Dropped(DropReason::Busy));
        };
        let psn = rx.headers.bth.psn;
        self.resp.msn = next_msn(self.resp.msn);
        let res = Resource {
            kind: ResKind::Atomic,
            first_psn: psn,
            npkts: 1,
            va: a.va,
            rkey: a.r_key,
            len: 8,
            orig,
            msn: self.resp.msn,
            busy: true,
        };
        if let Some(slot) = self.resp.res.get_mut(i) {
            *slot = res;
        }
        let _ = self.push_job(Job::Atomic { res: u8::try_from(i).unwrap_or(0) });
        self.resp.epsn = psn.next();
        Step::Done(RxOutcome::Accepted)
    }

    /// FLUSH and ATOMIC WRITE (IBTA 1.5): executed once, answered by an
    /// RDMA READ response of length zero (a READ resource of no bytes,
    /// which a duplicate finds and replays without executing again).
    /// Each takes a read/atomic resource (counted by `max_dest_rd_atomic`,
    /// as rdma_rxe counts them). The checks, in order:
    /// - ATOMIC WRITE: a RETH of length 8 and 8 bytes of payload, an
    ///   8-byte aligned address (else Invalid Request); the region's
    ///   `REMOTE_WRITE` (else Remote Access Error);
    /// - FLUSH: a known placement type (global visibility, persistence, at
    ///   least one) and selectivity (a range, or the whole region), else
    ///   Invalid Request; the region's rights for the placement types and,
    ///   for a range, its bounds (else Remote Access Error).
    fn recv_placement<M: Memory>(&mut self, mem: &mut M, rx: &TransportPacket<'_>) -> Step {
        let invalid = || Step::Fatal(Fatal::nak(NakCode::InvalidRequest));
        if self.attr.max_dest_rd_atomic == 0 {
            return invalid();
        }
        let Some(r) = rx.headers.reth else { return invalid() };
        let result = if rx.info.operation == Operation::AtomicWrite {
            let Ok(value) = <[u8; 8]>::try_from(rx.payload) else { return invalid() };
            if r.dma_len != 8 || r.va % 8 != 0 {
                return invalid();
            }
            if self.resp.jobs.is_full() {
                return Step::Done(RxOutcome::Dropped(DropReason::Busy));
            }
            mem.atomic_write(self.pd, r.r_key, r.va, value)
        } else {
            let Some(f) = rx.headers.feth else { return invalid() };
            let known = feth::PLT_GLOBAL | feth::PLT_PERSISTENT;
            if f.placement == 0 || f.placement & !known != 0 || f.selectivity > feth::SEL_MR {
                return invalid();
            }
            if self.resp.jobs.is_full() {
                return Step::Done(RxOutcome::Dropped(DropReason::Busy));
            }
            let mut need = 0;
            if f.placement & feth::PLT_GLOBAL != 0 {
                need |= access::FLUSH_GLOBAL;
            }
            if f.placement & feth::PLT_PERSISTENT != 0 {
                need |= access::FLUSH_PERSISTENT;
            }
            let whole = f.selectivity == feth::SEL_MR;
            let r = mem.flush(self.pd, r.r_key, r.va, u64::from(r.dma_len), need, whole);
            // Every write this responder executed before the FLUSH is
            // made visible before its response leaves.
            core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
            r
        };
        match result {
            Ok(()) => {}
            Err(MemError::Fault) => return self.rnr(rx.headers.bth.psn),
            Err(MemError::Misaligned) => return invalid(),
            Err(_) => return Step::Fatal(Fatal::nak(NakCode::RemoteAccessError)),
        }
        let Some(i) = self.alloc_resource() else {
            return Step::Done(RxOutcome::Dropped(DropReason::Busy));
        };
        self.answer_with_read(i, rx.headers.bth.psn, r.va, r.r_key, 0)
    }

    /// A request behind ePSN: answered again, never executed again.
    fn duplicate(&mut self, rx: &TransportPacket<'_>) -> RxOutcome {
        let psn = rx.headers.bth.psn;
        match rx.info.operation {
            Operation::Send | Operation::RdmaWrite => {
                // Re-ACK (C9-105), coalesced, with the duplicate's own PSN:
                // ePSN - 1 may be the last PSN of a READ or the PSN of an
                // atomic, which only their responses may carry (rdma_rxe's
                // completer takes a plain ACK at that PSN as the READ's or
                // atomic's completion, without its data).
                self.push_ack(psn);
                RxOutcome::Accepted
            }
            // A FLUSH or ATOMIC WRITE left a READ resource of no bytes.
            Operation::RdmaReadRequest | Operation::Flush | Operation::AtomicWrite => {
                let pmtu = self.pmtu();
                let found = self.resp.res.iter().position(|r| {
                    r.kind == ResKind::Read && psn.in_range(r.first_psn, r.npkts)
                });
                let Some(i) = found else { return RxOutcome::Dropped(DropReason::Sequence) };
                let Some(r) = self.resp.res.get(i).copied() else { return RxOutcome::Dropped(DropReason::Sequence) };
                let off = r.first_psn.distance_to(psn).saturating_mul(pmtu);
                let res = u8::try_from(i).unwrap_or(0);
                let job = Job::Read { res, start: psn, psn, off };
                // The requester went back to `psn` and resends everything
                // after it: the streams queued for later READs would only
                // delay this answer (it discards them while it waits), so
                // they go (the IBTA lets a responder stop the READ
                // responses in progress on a duplicate; rdma_rxe does).
                self.abandon_reads_after(psn);
                // Restart the stream in place if it is still queued, so one
                // lost packet does not double the traffic.
                for k in 0..self.resp.jobs.len() {
                    if let Some(j) = self.resp.jobs.get_mut(k) {
                        if matches!(j, Job::Read { res: x, .. } if *x == res) {
                            *j = job;
                            return RxOutcome::Accepted;
                        }
                    }
                }
                if self.push_job(job) {
                    if let Some(r) = self.resp.res.get_mut(i) {
                        r.busy = true;
                    }
                    return RxOutcome::Accepted;
                }
                RxOutcome::Dropped(DropReason::Busy)
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = self
                    .resp
                    .res
                    .iter()
                    .position(|r| r.kind == ResKind::Atomic && r.first_psn == psn);
                let Some(i) = found else { return RxOutcome::Dropped(DropReason::Sequence) };
                if self.resp.res.get(i).is_some_and(|r| r.busy) {
                    // Its response is still queued.
                    return RxOutcome::Accepted;
                }
                // Replay the saved result; the atomic is not executed again.
                self.abandon_reads_after(psn);
                let res = u8::try_from(i).unwrap_or(0);
                if self.push_job(Job::Atomic { res }) {
                    if let Some(r) = self.resp.res.get_mut(i) {
                        r.busy = true;
                    }
                    return RxOutcome::Accepted;
                }
                RxOutcome::Dropped(DropReason::Busy)
            }
            _ => RxOutcome::Dropped(DropReason::Sequence),
        }
    }

    /// Cancels the queued READ response streams of requests after `psn`
    /// (a duplicate at `psn` means the requester resends them) and frees
    /// their resources for those duplicates to find.
    fn abandon_reads_after(&mut self, psn: Psn) {
        for k in 0..self.resp.jobs.len() {
            let Some(j) = self.resp.jobs.get_mut(k) else { continue };
            let Job::Read { res, start, .. } = *j else { continue };
            if start.is_after(psn) {
                *j = Job::Empty;
                if let Some(r) = self.resp.res.get_mut(usize::from(res)) {
                    r.busy = false;
                }
            }
        }
    }

    fn response_headers(&self, opcode: Opcode, psn: Psn) -> Headers {
        Headers::bth_only(opcode, self.pkey, self.attr.dest_qp_num, psn)
    }

    fn emit_ack(&self, psn: Psn, syndrome: AethSyndrome, msn: u32, buf: &mut [u8]) -> Option<Transmit> {
        let mut h = self.response_headers(Opcode::RC_ACKNOWLEDGE, psn);
        h.aeth = Some(AethRepr { syndrome, msn });
        let hlen = packet::emit_headers(&h, 0, buf).ok()?;
        let len = packet::finish(buf, hlen, 0).ok()?;
        Some(Transmit { len, ah: self.attr.ah, dest_qpn: self.attr.dest_qp_num })
    }

    /// The next response packet, if any.
    pub(crate) fn resp_transmit<M: Memory>(&mut self, mem: &mut M, buf: &mut [u8]) -> Option<Transmit> {
        if let Some((psn, syndrome)) = self.resp.final_nak.take() {
            return self.emit_ack(psn, syndrome, self.resp.msn, buf);
        }
        if !self.state.receives() {
            return None;
        }
        while matches!(self.resp.jobs.get(0), Some(Job::Empty)) {
            self.resp.jobs.pop();
        }
        let job = *self.resp.jobs.get(0)?;
        match job {
            Job::Empty => None,
            Job::Ack { psn, msn } => {
                self.resp.jobs.pop();
                self.emit_ack(psn, ACK, msn, buf)
            }
            Job::Nak { psn, syndrome, msn } => {
                self.resp.jobs.pop();
                self.emit_ack(psn, syndrome, msn, buf)
            }
            Job::Atomic { res } => {
                self.resp.jobs.pop();
                let r = self.resp.res.get_mut(usize::from(res))?;
                r.busy = false;
                let r = *r;
                let mut h = self.response_headers(Opcode::RC_ATOMIC_ACKNOWLEDGE, r.first_psn);
                h.aeth = Some(AethRepr { syndrome: ACK, msn: r.msn });
                h.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: r.orig });
                let hlen = packet::emit_headers(&h, 0, buf).ok()?;
                let len = packet::finish(buf, hlen, 0).ok()?;
                Some(Transmit { len, ah: self.attr.ah, dest_qpn: self.attr.dest_qp_num })
            }
            Job::Read { res, start, psn, off } => self.read_response(mem, res, start, psn, off, buf),
        }
    }

    fn read_response<M: Memory>(
        &mut self,
        mem: &mut M,
        res: u8,
        start: Psn,
        psn: Psn,
        off: u32,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if self.req.fault_wait {
            return None;
        }
        let r = *self.resp.res.get(usize::from(res))?;
        let plen = r.len.saturating_sub(off).min(self.pmtu());
        let end = off.saturating_add(plen);
        let first = psn == start;
        let last = end >= r.len;
        let opcode = match (first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        let mut h = self.response_headers(opcode, psn);
        if first || last {
            h.aeth = Some(AethRepr { syndrome: ACK, msn: r.msn });
        }
        let plen_us = plen as usize;
        let hlen = packet::emit_headers(&h, plen_us, buf).ok()?;
        let payload = buf.get_mut(hlen..hlen.checked_add(plen_us)?)?;
        let got = if plen > 0 { mem.read(self.pd, Key::Remote(r.rkey), r.va.wrapping_add(u64::from(off)), payload) } else { Ok(()) };
        if let Err(MemError::Fault) = got {
            // Pages on demand went away since the request was checked: the
            // response waits (with the QP's requester) until the glue has
            // faulted them in.
            self.req.fault_wait = true;
            return None;
        }
        if got.is_err() {
            // The region went away under the READ: remote access error.
            let _ = self.fatal(psn, Fatal::nak(NakCode::RemoteAccessError));
            let (p, s) = self.resp.final_nak.take()?;
            return self.emit_ack(p, s, self.resp.msn, buf);
        }
        let len = packet::finish(buf, hlen, plen_us).ok()?;
        if last {
            self.resp.jobs.pop();
            if let Some(x) = self.resp.res.get_mut(usize::from(res)) {
                x.busy = false;
            }
        } else if let Some(Job::Read { psn: p, off: o, .. }) = self.resp.jobs.get_mut(0) {
            *p = psn.next();
            *o = end;
        }
        Some(Transmit { len, ah: self.attr.ah, dest_qpn: self.attr.dest_qp_num })
    }
}
