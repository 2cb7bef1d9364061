//! Deterministic fuzz-style test of a QP's receive path on stable Rust.
//!
//! Builds UD, UC and RC QPs in every state (RESET, INIT, RTR, RTS, SQD, SQE
//! for UD and UC, ERR) with memory registered, receives posted and sends
//! outstanding, then feeds them random bytes and mutated valid packets of
//! every opcode (random and nearby PSNs, QPNs, P_Keys, Q_Keys, R_Keys,
//! addresses and lengths), whole multi-packet messages (on UC also started
//! at a random PSN) and responses to what the QP sent, interleaved with
//! `poll_transmit`, `on_timer` and the completion queues. The step budget is
//! shared by the three types, one episode of each (type, state) in turn.
//!
//! Properties checked after every step:
//! - nothing panics, and `poll_transmit` stops;
//! - every byte the engine writes lands in a registered region of the QP's
//!   PD whose access flags allow it; a local write lands inside a scatter
//!   entry of an outstanding receive WQE or of an outstanding READ/atomic
//!   send WQE; a remote write happens only on RC or UC and an atomic only
//!   on RC, with the QP's access flags allowing it; only RC reads memory or
//!   invalidates through an R_Key; a QP in RESET, INIT or ERR ignores
//!   every packet and writes nothing;
//! - completions come back in posting order, each work request once, never
//!   more than were posted; queue lengths agree with what was posted and
//!   polled; a receive completion never claims more bytes than its buffers;
//! - every transmitted packet parses, fits the buffer and the path MTU and
//!   goes to the right QPN; in RESET and INIT nothing is sent, in ERR at
//!   most the final NAK;
//! - after `on_timer(now)` no deadline is left at or before `now`;
//! - an RC QP never enters SQE;
//! - UC: `post_send` refuses READ, atomics and SEND with invalidate; the QP
//!   transmits only UC SEND and RDMA WRITE packets (never an ACK, NAK or
//!   response: the responder is silent), without AckReq, at consecutive
//!   PSNs from the SQ PSN, FIRST/MIDDLE/LAST in order, only in RTS and in
//!   SQD only the rest of a message already started; a send WQE completes
//!   successfully exactly when its last packet has left; no deadline is
//!   ever armed; receiving never NAKs and never enters SQE; receive
//!   completions are RECV or RECV_RDMA_WITH_IMM, in error only with a
//!   local protection error or a flush.
//!
//! The default run takes a few seconds in release; FERROCE_FUZZ_ITERS sets
//! the number of steps for long runs (`make fuzz`), FERROCE_FUZZ_SEED the
//! random sequence. The cargo-fuzz target
//! `fuzz/fuzz_targets/qp_receive.rs` drives the same entry points from
//! libFuzzer input on nightly.

mod common;

use std::collections::VecDeque;

use common::*;
use ferroce_transport::engine::{NetHeader, RxOutcome};

/// `Stats::rx`'s slot for an outcome: accepted, dropped (any reason), NAK.
fn slot(o: RxOutcome) -> usize {
    match o {
        RxOutcome::Accepted => 0,
        RxOutcome::Dropped(_) => 1,
        RxOutcome::Nak => 2,
    }
}
use ferroce_transport::memory::{Key, MemError, Memory};
use ferroce_transport::qp::{mask, Mtu, QpAttr, QpState, QpType};
use ferroce_transport::verbs::{access, send_flags, Cqe, Payload, RecvWqe, SendWqe, Sge, WcStatus, WrOpcode, MAX_INLINE, MAX_SGE};
use ferroce_transport::wire::aeth::AethSyndrome;
use ferroce_transport::wire::packet::{self, Headers};
use ferroce_transport::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeader, FethRepr, IethRepr, ImmDtRepr, NakCode, Opcode,
    Operation, PKey, Position, Psn, RethRepr, Transport,
};

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn bool(&mut self) -> bool {
        self.next() & 1 != 0
    }
    /// Eight bytes a draw: payloads are most of the harness's own work.
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let n = chunk.len();
            chunk.copy_from_slice(&self.next().to_le_bytes()[..n]);
        }
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// Steps: `default`, or FERROCE_FUZZ_ITERS for long runs (`make fuzz`).
fn iterations(default: usize) -> usize {
    std::env::var("FERROCE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// The regions every QP gets (keys in registration order, from 0x100).
const REGION_LEN: usize = 4096;
/// Receive buffers: LOCAL_WRITE.
const RECV: u32 = 0x100;
/// Send sources: no rights beyond local read.
const SRC: u32 = 0x101;
/// RDMA target: every remote right.
const TARGET: u32 = 0x102;
/// RDMA target with REMOTE_READ only.
const READ_ONLY: u32 = 0x103;
/// READ and atomic result buffers: LOCAL_WRITE.
const RESULT: u32 = 0x104;
/// Every right, but another PD.
const OTHER_PD: u32 = 0x105;
const KEYS: [u32; 6] = [RECV, SRC, TARGET, READ_ONLY, RESULT, OTHER_PD];

fn base(key: u32) -> u64 {
    0x10_0000 * u64::from(key - 0xff)
}

/// A [`Memory`] that checks every write the engine makes against what the
/// engine may write at that moment, on top of `VecMemory`'s own key, PD,
/// rights and bounds checks.
struct FuzzMemory {
    inner: VecMemory,
    /// (lkey, start, end): scatter entries of outstanding receive WQEs and
    /// of outstanding READ/atomic send WQEs.
    local_ok: Vec<(u32, u64, u64)>,
    remote_write_ok: bool,
    remote_atomic_ok: bool,
    /// Whether the QP may read through an R_Key (READ responses) or
    /// invalidate one (SEND with invalidate): RC only.
    remote_read_ok: bool,
    invalidate_ok: bool,
    /// Whether the engine may write at all now.
    frozen: bool,
    writes: u64,
    bytes_written: u64,
    refused: u64,
}

impl FuzzMemory {
    fn new() -> Self {
        let mut inner = VecMemory::default();
        let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        let rights = [
            (PD, access::LOCAL_WRITE),
            (PD, 0),
            (PD, all),
            (PD, access::REMOTE_READ),
            (PD, access::LOCAL_WRITE),
            (PD + 1, all),
        ];
        for (i, (pd, acc)) in rights.into_iter().enumerate() {
            let k = inner.register(pd, base(KEYS[i]), REGION_LEN, acc);
            assert_eq!(k, KEYS[i]);
        }
        for (i, b) in inner.region_mut(SRC).data.iter_mut().enumerate() {
            *b = i as u8;
        }
        Self {
            inner,
            local_ok: Vec::new(),
            remote_write_ok: false,
            remote_atomic_ok: false,
            remote_read_ok: false,
            invalidate_ok: false,
            frozen: false,
            writes: 0,
            bytes_written: 0,
            refused: 0,
        }
    }

    /// A write of `len` bytes at `va` through `key` succeeded: check it.
    fn wrote(&mut self, pd: u32, key: Key, va: u64, len: u64, atomic: bool) {
        assert!(
            !self.frozen,
            "write through {key:?} at {va:#x} while the QP must not write"
        );
        let (k, need) = match key {
            Key::Local(k) => (k, access::LOCAL_WRITE),
            Key::Remote(k) if atomic => (k, access::REMOTE_ATOMIC),
            Key::Remote(k) => (k, access::REMOTE_WRITE),
        };
        let r = self.inner.region(k);
        assert_eq!(r.pd, pd, "write into another PD's region {k:#x}");
        assert_eq!(r.access & need, need, "write through {key:?} without the right");
        assert!(
            va >= r.base && va + len <= r.base + r.data.len() as u64,
            "write out of region bounds"
        );
        match key {
            Key::Local(k) => assert!(
                self.local_ok
                    .iter()
                    .any(|&(lk, s, e)| lk == k && va >= s && va + len <= e),
                "local write {k:#x} {va:#x}+{len} outside every outstanding WQE's scatter list"
            ),
            Key::Remote(_) if atomic => assert!(self.remote_atomic_ok, "atomic without REMOTE_ATOMIC on the QP"),
            Key::Remote(_) => assert!(self.remote_write_ok, "RDMA WRITE without REMOTE_WRITE on the QP"),
        }
        self.writes += 1;
        self.bytes_written += len;
    }

    fn note<T>(&mut self, r: Result<T, MemError>) -> Result<T, MemError> {
        if r.is_err() {
            self.refused += 1;
        }
        r
    }
}

impl Memory for FuzzMemory {
    fn read(&mut self, pd: u32, key: Key, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        if let Key::Remote(k) = key {
            assert!(self.remote_read_ok, "read through R_Key {k:#x} on a QP with no READ responder");
        }
        let r = self.inner.read(pd, key, va, dst);
        self.note(r)
    }

    fn write(&mut self, pd: u32, key: Key, va: u64, src: &[u8]) -> Result<(), MemError> {
        let r = self.inner.write(pd, key, va, src);
        if r.is_ok() {
            self.wrote(pd, key, va, src.len() as u64, false);
        }
        self.note(r)
    }

    fn check(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> Result<(), MemError> {
        if let Key::Remote(k) = key {
            assert!(write || self.remote_read_ok, "READ check of R_Key {k:#x} on a QP with no READ responder");
        }
        let r = self.inner.check(pd, key, va, len, write);
        self.note(r)
    }

    fn compare_swap(&mut self, pd: u32, rkey: u32, va: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let r = self.inner.compare_swap(pd, rkey, va, compare, swap);
        if r.is_ok() {
            self.wrote(pd, Key::Remote(rkey), va, 8, true);
        }
        self.note(r)
    }

    fn fetch_add(&mut self, pd: u32, rkey: u32, va: u64, add: u64) -> Result<u64, MemError> {
        let r = self.inner.fetch_add(pd, rkey, va, add);
        if r.is_ok() {
            self.wrote(pd, Key::Remote(rkey), va, 8, true);
        }
        self.note(r)
    }

    fn invalidate(&mut self, pd: u32, rkey: u32) -> Result<(), MemError> {
        assert!(!self.frozen, "invalidate while the QP must not act");
        assert!(self.invalidate_ok, "invalidate on a QP type without SEND with invalidate");
        // Keep the regions the harness relies on; others may go.
        if matches!(rkey, RECV | SRC | RESULT) {
            return Err(MemError::InvalidKey);
        }
        let r = self.inner.invalidate(pd, rkey);
        self.note(r)
    }
}

/// A request the QP transmitted, to answer.
#[derive(Clone, Copy, Debug)]
struct Sent {
    psn: u32,
    op: Operation,
    /// READ: response packets it asks for.
    npkts: u32,
    len: u32,
}

#[derive(Default, Debug)]
struct Stats {
    steps: u64,
    rx: [u64; 3],
    tx: u64,
    send_cqes: u64,
    recv_cqes: u64,
    timers: u64,
    episodes: u64,
    /// UC: packets accepted, packets sent, receive completions, times the
    /// send side entered SQE on its own.
    uc_accepted: u64,
    uc_tx: u64,
    uc_recv_cqes: u64,
    uc_sqe: u64,
}

const UD_QKEY: u32 = 0x1234_5678;

/// One QP under test with the harness's view of it.
struct Case {
    ty: QpType,
    qp: TestQp,
    mem: FuzzMemory,
    qpn: u32,
    dest: u32,
    qkey: u32,
    pmtu: u32,
    mtu: Mtu,
    access: u32,
    /// PSN the responder probably expects next.
    cursor: Psn,
    sent: VecDeque<Sent>,
    posted_send: VecDeque<SendWqe>,
    posted_recv: VecDeque<RecvWqe>,
    next_wr: u64,
    now: u64,
    buf: Vec<u8>,
    uc: UcTx,
}

/// What a UC requester has sent.
#[derive(Default)]
struct UcTx {
    /// The PSN of the next packet (consecutive from the SQ PSN: nothing is
    /// ever sent twice).
    psn: Psn,
    /// The message whose FIRST went out and LAST not yet: its operation,
    /// bytes sent so far and RETH length.
    msg: Option<(Operation, u32, Option<u32>)>,
    /// Messages whose last packet left, and successful send completions
    /// polled.
    done: u64,
    ok: u64,
}

impl UcTx {
    /// A packet the QP sent in `state`: a UC request, nothing else (no
    /// ACK, NAK or response: the responder is silent), at the next PSN and
    /// in its place in the message.
    fn check(&mut self, state: QpState, p: &packet::TransportPacket<'_>, pmtu: u32) {
        let h = &p.headers;
        let op = h.bth.opcode;
        assert!(
            (0x20..=0x2b).contains(&op.0) && p.info.transport == Transport::Uc && p.info.is_request(),
            "UC sent opcode {:#x}: {h:?}",
            op.0
        );
        assert!(
            matches!(p.info.operation, Operation::Send | Operation::RdmaWrite),
            "UC sent {:?}",
            p.info.operation
        );
        assert!(
            matches!(state, QpState::Rts | QpState::Sqd),
            "UC sent in {state:?}: {h:?}"
        );
        assert!(!h.bth.ack_req, "UC asked for an ACK");
        assert_eq!(h.bth.psn, self.psn, "UC PSNs go up by one, nothing is sent twice");
        self.psn = h.bth.psn.next();
        let plen = p.payload.len() as u32;
        let starts = matches!(p.info.position, Position::First | Position::Only);
        let sent = if starts {
            assert_eq!(self.msg, None, "UC started a message inside another: {h:?}");
            assert_eq!(state, QpState::Rts, "UC started a message in {state:?}");
            plen
        } else {
            let Some((o, sent, _)) = self.msg else {
                panic!("UC sent {op:?} with no message in progress")
            };
            assert_eq!(o, p.info.operation, "UC changed operation inside a message");
            sent + plen
        };
        let dma_len = if starts { h.reth.map(|r| r.dma_len) } else { self.msg.and_then(|m| m.2) };
        if matches!(p.info.position, Position::First | Position::Middle) {
            assert_eq!(plen, pmtu, "a UC FIRST or MIDDLE carries exactly the path MTU");
            self.msg = Some((p.info.operation, sent, dma_len));
        } else {
            if let Some(l) = dma_len {
                assert_eq!(sent, l, "UC WRITE sent other than its RETH length");
            }
            self.msg = None;
            self.done += 1;
        }
    }
}

fn sge(key: u32, off: u64, len: u32) -> Sge {
    Sge {
        addr: base(key) + off,
        length: len,
        lkey: key,
    }
}

impl Case {
    fn new(rng: &mut Rng, ty: QpType, target: QpState) -> Case {
        let qpn = 0x100 + rng.below(0xff_0000) as u32;
        let dest = rng.next() as u32 & 0xff_ffff;
        let mtu = rng.pick(&[Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]);
        let qp = new_qp(qpn, ty, 16, 16);
        let mut c = Case {
            ty,
            qp,
            mem: FuzzMemory::new(),
            qpn,
            dest,
            qkey: UD_QKEY,
            pmtu: mtu.bytes(),
            mtu,
            access: 0,
            cursor: Psn::new(rng.next() as u32),
            sent: VecDeque::new(),
            posted_send: VecDeque::new(),
            posted_recv: VecDeque::new(),
            next_wr: 1,
            now: 1_000_000,
            buf: vec![0u8; 4096 + 64],
            uc: UcTx::default(),
        };
        c.bring_up(rng, target);
        c
    }

    /// Takes the QP from RESET to `target`, posting receives and sends on
    /// the way.
    fn bring_up(&mut self, rng: &mut Rng, target: QpState) {
        let (ty, mtu, dest) = (self.ty, self.mtu, self.dest);
        let c = self;
        if target == QpState::Reset {
            return;
        }
        // RESET -> INIT
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: c.qkey,
            ..QpAttr::default()
        };
        if ty == QpType::Ud {
            c.qp.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY)
                .unwrap();
            c.qp.set_path_mtu(mtu);
        } else {
            c.access = rng.next() as u32 & 0xf;
            if rng.chance(70) {
                c.access = 0xf;
            }
            a.qp_access_flags = c.access;
            c.qp.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS)
                .unwrap();
        }
        for _ in 0..rng.below(12) {
            c.post_recv(rng);
        }
        if target == QpState::Init {
            return;
        }
        // INIT -> RTR
        a.qp_state = QpState::Rtr;
        if ty == QpType::Ud {
            c.qp.modify(&a, mask::STATE).unwrap();
        } else if ty == QpType::Uc {
            // No RNR timer and no READ/atomic resources on UC.
            a.path_mtu = mtu;
            a.dest_qp_num = dest;
            a.rq_psn = c.cursor.value();
            a.ah = 9;
            c.qp.modify(&a, mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN)
                .unwrap();
        } else {
            a.path_mtu = mtu;
            a.dest_qp_num = dest;
            a.rq_psn = c.cursor.value();
            a.max_dest_rd_atomic = if rng.chance(10) { 0 } else { 1 + rng.below(16) as u8 };
            a.min_rnr_timer = rng.below(32) as u8;
            a.ah = 9;
            c.qp.modify(
                &a,
                mask::STATE
                    | mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER,
            )
            .unwrap();
        }
        if target == QpState::Rtr {
            return;
        }
        // RTR -> RTS
        a.qp_state = QpState::Rts;
        a.sq_psn = rng.next() as u32 & 0xff_ffff;
        c.uc.psn = Psn::new(a.sq_psn);
        c.uc.msg = None;
        if ty != QpType::Rc {
            // UD and UC: no ACK timeout, retries or READ/atomic resources.
            c.qp.modify(&a, mask::STATE | mask::SQ_PSN).unwrap();
        } else {
            a.timeout = if rng.chance(10) { 0 } else { 1 + rng.below(20) as u8 };
            a.retry_cnt = rng.below(8) as u8;
            a.rnr_retry = rng.below(8) as u8;
            a.max_rd_atomic = rng.below(17) as u8;
            c.qp.modify(
                &a,
                mask::STATE | mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::SQ_PSN | mask::MAX_QP_RD_ATOMIC,
            )
            .unwrap();
        }
        for _ in 0..1 + rng.below(10) {
            c.post_send(rng, false);
        }
        // Some of them go out (and, on UD and UC, complete).
        for _ in 0..rng.below(12) {
            if !c.transmit_one() {
                break;
            }
        }
        match target {
            QpState::Rts => {}
            QpState::Sqd => {
                let a = QpAttr {
                    qp_state: QpState::Sqd,
                    ..QpAttr::default()
                };
                c.qp.modify(&a, mask::STATE).unwrap();
            }
            QpState::Sqe => {
                assert_ne!(ty, QpType::Rc, "RC has no SQE");
                // A send with an L_Key that does not exist: a local
                // protection error moves the QP to SQE.
                let mut w = c.wqe(rng, WrOpcode::Send);
                let mut bad = sge(SRC, 0, 16);
                bad.lkey = 0xdead;
                w.set_sges(&[bad]).unwrap();
                c.post(w);
                for _ in 0..64 {
                    if !c.transmit_one() {
                        break;
                    }
                }
            }
            QpState::Err => {
                let a = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                c.qp.modify(&a, mask::STATE).unwrap();
            }
            _ => unreachable!(),
        }
    }

    /// ERR (or anything) -> RESET -> `target` again, with fresh memory.
    fn revive(&mut self, rng: &mut Rng, target: QpState) {
        let a = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        self.qp.modify(&a, mask::STATE).unwrap();
        assert_eq!(self.qp.send_queue_len(), 0);
        assert_eq!(self.qp.recv_queue_len(), 0);
        assert_eq!(self.qp.next_deadline(), None);
        self.refresh_rights();
        assert!(
            self.qp.poll_transmit(self.now, &mut self.mem, &mut self.buf).is_none(),
            "RESET transmits"
        );
        self.posted_send.clear();
        self.posted_recv.clear();
        self.sent.clear();
        // Completions not polled before the reset are gone with it.
        self.uc = UcTx::default();
        self.mem = FuzzMemory::new();
        self.cursor = Psn::new(rng.next() as u32);
        self.bring_up(rng, target);
    }

    /// UC: SQE -> RTS, the send side going on where it stopped (the same
    /// PSN sequence: nothing was sent in SQE).
    fn resume(&mut self, rng: &mut Rng) {
        assert_eq!(self.qp.state(), QpState::Sqe);
        let a = QpAttr {
            qp_state: QpState::Rts,
            cur_qp_state: QpState::Sqe,
            ..QpAttr::default()
        };
        let m = if rng.bool() { mask::STATE | mask::CUR_STATE } else { mask::STATE };
        self.qp.modify(&a, m).unwrap();
    }

    fn post(&mut self, w: SendWqe) -> bool {
        let ok = self.qp.post_send(&w).is_ok();
        if ok {
            self.posted_send.push_back(w);
        }
        ok
    }

    fn wqe(&mut self, rng: &mut Rng, op: WrOpcode) -> SendWqe {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let mut w = SendWqe {
            wr_id,
            opcode: op,
            send_flags: if rng.chance(20) { send_flags::SOLICITED } else { 0 } | send_flags::SIGNALED,
            imm_data: rng.next() as u32,
            remote_addr: base(TARGET) + rng.below(64) as u64 * 8,
            rkey: rng.pick(&[TARGET, TARGET, READ_ONLY, 0x999]),
            compare_add: rng.next(),
            swap: rng.next(),
            ah: 5,
            remote_qpn: rng.next() as u32 & 0xff_ffff,
            remote_qkey: if rng.bool() { 0x8000_0000 } else { rng.next() as u32 },
            ..SendWqe::default()
        };
        if rng.chance(10) {
            w.send_flags |= send_flags::FENCE;
        }
        w
    }

    /// Posts a random send WQE (with `bad`, possibly one the engine must
    /// refuse or fail). UC draws from RC's opcodes now and then and must
    /// refuse those it lacks.
    fn post_send(&mut self, rng: &mut Rng, bad: bool) {
        let op = if self.ty == QpType::Ud {
            rng.pick(&[WrOpcode::Send, WrOpcode::SendWithImm])
        } else if self.ty == QpType::Uc && rng.chance(75) {
            rng.pick(&[WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::RdmaWrite, WrOpcode::RdmaWriteWithImm])
        } else {
            rng.pick(&[
                WrOpcode::Send,
                WrOpcode::SendWithImm,
                WrOpcode::SendWithInv,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaWriteWithImm,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicCmpAndSwp,
                WrOpcode::AtomicFetchAndAdd,
            ])
        };
        let mut w = self.wqe(rng, op);
        let max = if self.ty == QpType::Ud {
            self.pmtu
        } else {
            3 * self.pmtu
        };
        let len = (rng.below(max.min(REGION_LEN as u32) as usize + 1) as u32).min(REGION_LEN as u32 / 2);
        if op.is_atomic() {
            w.set_sges(&[sge(RESULT, 8 * rng.below(64) as u64, 8)]).unwrap();
        } else if op == WrOpcode::RdmaRead {
            w.set_sges(&[sge(RESULT, rng.below(REGION_LEN / 2) as u64, len)]).unwrap();
        } else if rng.chance(15) {
            w.send_flags |= send_flags::INLINE;
            let mut bytes = [0u8; MAX_INLINE];
            let n = rng.below(MAX_INLINE + 1).min(if self.ty == QpType::Ud { self.pmtu as usize } else { MAX_INLINE });
            rng.fill(&mut bytes[..n]);
            w.data = Payload::inline(&bytes[..n]).unwrap();
        } else {
            let n = 1 + rng.below(3);
            let mut left = len;
            let mut list = [Sge::default(); 3];
            for (i, s) in list.iter_mut().enumerate().take(n) {
                let l = if i == n - 1 { left } else { left / 2 };
                left -= l;
                *s = sge(SRC, rng.below(REGION_LEN / 2) as u64, l);
            }
            w.set_sges(&list[..n]).unwrap();
        }
        if self.ty == QpType::Uc && (op.is_read_or_atomic() || op == WrOpcode::SendWithInv) {
            // UC has no opcode for them (IBTA table 38): refused in every
            // state, whatever else the WQE holds.
            assert!(self.qp.post_send(&w).is_err(), "UC accepted {op:?}");
            return;
        }
        if bad {
            match rng.below(4) {
                0 => {
                    let k = rng.pick(&[0xdead, TARGET, OTHER_PD]);
                    if let Some(s) = w.sges_mut().first_mut() {
                        s.lkey = k;
                    }
                }
                1 => {
                    if let Some(s) = w.sges_mut().first_mut() {
                        s.length = REGION_LEN as u32 + 1;
                    }
                }
                2 => {
                    if let Payload::Gather { n, .. } = &mut w.data {
                        *n = MAX_SGE as u8 + 1;
                    }
                }
                _ => {
                    if self.ty == QpType::Ud {
                        let mut s = w.sges().first().copied().unwrap_or(sge(SRC, 0, 0));
                        s.length = self.pmtu + 1;
                        w.set_sges(&[s]).unwrap();
                        w.send_flags &= !send_flags::INLINE;
                    }
                }
            }
        }
        self.post(w);
    }

    /// Posts a random receive WQE (scatter lists over RECV, sometimes a
    /// bad key or a short buffer).
    fn post_recv(&mut self, rng: &mut Rng) {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let mut w = RecvWqe {
            wr_id,
            ..RecvWqe::default()
        };
        let n = 1 + rng.below(3);
        for i in 0..n {
            let off = rng.below(REGION_LEN) as u64;
            let room = (REGION_LEN as u64 - off) as u32;
            let any = rng.below(room as usize + 1) as u32;
            let len = rng.pick(&[room, room.min(40), room.min(64), any]);
            w.sg_list[i] = sge(RECV, off, len);
        }
        w.num_sge = n as u8;
        if rng.chance(3) {
            let i = rng.below(n);
            w.sg_list[i].lkey = rng.pick(&[SRC, OTHER_PD, 0xbeef, TARGET]);
        }
        if self.qp.post_recv(&w).is_ok() {
            self.posted_recv.push_back(w);
        }
    }

    /// What the engine may write right now.
    fn refresh_rights(&mut self) {
        let m = &mut self.mem;
        m.local_ok.clear();
        for w in &self.posted_recv {
            for s in w.sges() {
                m.local_ok.push((s.lkey, s.addr, s.addr + u64::from(s.length)));
            }
        }
        for w in &self.posted_send {
            if w.opcode.is_read_or_atomic() {
                for s in w.sges() {
                    m.local_ok.push((s.lkey, s.addr, s.addr + u64::from(s.length)));
                }
            }
        }
        let rc = self.ty == QpType::Rc;
        // UC executes RDMA WRITEs, never READs, atomics or invalidations,
        // whatever its access flags say.
        m.remote_write_ok = self.ty != QpType::Ud && self.access & access::REMOTE_WRITE != 0;
        m.remote_atomic_ok = rc && self.access & access::REMOTE_ATOMIC != 0;
        m.remote_read_ok = rc;
        m.invalidate_ok = rc;
    }

    /// Polls one packet out of the QP and checks it. False when none.
    fn transmit_one(&mut self) -> bool {
        self.refresh_rights();
        let state = self.qp.state();
        let Some(t) = self.qp.poll_transmit(self.now, &mut self.mem, &mut self.buf) else {
            if !matches!(self.qp.state(), QpState::Rts | QpState::Sqd) {
                // SQE or ERR cut the message in progress, if any.
                self.uc.msg = None;
            }
            return false;
        };
        assert!(
            !matches!(state, QpState::Reset | QpState::Init),
            "transmit in {state:?}"
        );
        assert!(t.len <= self.buf.len());
        let p = packet::parse(&self.buf[..t.len]).expect("the engine emits packets that parse, payload rules included");
        assert_eq!(p.headers.bth.dest_qp, t.dest_qpn);
        assert!(p.payload.len() <= self.pmtu as usize, "payload above the path MTU");
        if state == QpState::Err {
            assert!(
                matches!(p.headers.aeth.map(|a| a.syndrome), Some(AethSyndrome::Nak(_))) && p.info.operation == Operation::Acknowledge,
                "ERR sends only the final NAK: {:?}",
                p.headers
            );
        }
        match self.ty {
            QpType::Ud => {
                assert_eq!(p.info.transport, Transport::Ud);
                assert_eq!(p.headers.deth.map(|d| d.src_qp), Some(self.qpn));
            }
            QpType::Rc => {
                assert_eq!(p.info.transport, Transport::Rc);
                assert_eq!(t.dest_qpn, self.dest);
                if p.info.is_request() {
                    let len = p.headers.reth.map_or(p.payload.len() as u32, |r| r.dma_len);
                    let npkts = if p.info.operation == Operation::RdmaReadRequest {
                        len.div_ceil(self.pmtu).max(1)
                    } else {
                        1
                    };
                    self.sent.push_back(Sent {
                        psn: p.headers.bth.psn.value(),
                        op: p.info.operation,
                        npkts,
                        len,
                    });
                    if self.sent.len() > 64 {
                        self.sent.pop_front();
                    }
                }
            }
            QpType::Uc => {
                assert_eq!(t.dest_qpn, self.dest);
                self.uc.check(state, &p, self.pmtu);
            }
        }
        true
    }

    fn drain_transmit(&mut self, st: &mut Stats) {
        let state = self.qp.state();
        let mut n = 0;
        while self.transmit_one() {
            n += 1;
            st.tx += 1;
            if self.ty == QpType::Uc {
                st.uc_tx += 1;
            }
            assert!(n < 20_000, "poll_transmit does not stop ({state:?})");
            if state == QpState::Err {
                assert!(n <= 1, "ERR sends at most one packet");
            }
        }
    }

    /// A transmit pass bounded as the device's shared window bounds one
    /// (`set_send_cap`): with the bound at what the QP has in flight, no
    /// request goes out (its packets in flight do not grow); the QP says
    /// it is held back only if, the bound lifted, it has something to send.
    fn drain_capped(&mut self, rng: &mut Rng, st: &mut Stats) {
        let before = self.qp.wire_in_flight();
        let cap = before + rng.below(3) as u32;
        self.qp.set_send_cap(Some(cap));
        self.drain_transmit(st);
        let after = self.qp.wire_in_flight();
        let held = self.qp.held_by_cap(self.now);
        self.qp.set_send_cap(None);
        if cap == before && self.qp.state() != QpState::Err {
            assert!(after <= before, "a request went out past the bound: {before} -> {after} in flight");
        }
        if held {
            assert!(self.qp.may_transmit(self.now), "held by the bound, yet nothing to send without it");
        }
        let _ = self.qp.take_cc();
    }

    fn poll_cqs(&mut self, st: &mut Stats) {
        while let Some(c) = self.qp.poll_send_cq() {
            let w = self.posted_send.pop_front().expect("a send completion nobody posted");
            assert_eq!(c.wr_id, w.wr_id, "send completions out of order");
            assert_eq!(c.qp_num, self.qpn);
            st.send_cqes += 1;
            if self.ty == QpType::Uc && c.status == WcStatus::Success {
                assert_eq!(c.opcode, w.opcode.wc_opcode());
                self.uc.ok += 1;
                assert!(self.uc.ok <= self.uc.done, "UC completed a send before its last packet left");
            }
        }
        while let Some(c) = self.qp.poll_recv_cq() {
            let w = self
                .posted_recv
                .pop_front()
                .expect("a receive completion nobody posted");
            check_recv_cqe(&c, &w, self.ty);
            assert_eq!(c.qp_num, self.qpn);
            st.recv_cqes += 1;
            if self.ty == QpType::Uc {
                st.uc_recv_cqes += 1;
            }
        }
        if self.ty == QpType::Uc {
            // Every message whose last packet left has completed, in order.
            assert_eq!(self.uc.ok, self.uc.done, "UC send completions and messages sent disagree");
        }
        assert_eq!(self.qp.send_queue_len(), self.posted_send.len());
        assert_eq!(self.qp.recv_queue_len(), self.posted_recv.len());
    }

    fn timer(&mut self, rng: &mut Rng, st: &mut Stats) {
        if let Some(d) = self.qp.next_deadline() {
            if rng.chance(70) {
                self.now = self.now.max(d);
            }
        }
        self.refresh_rights();
        self.qp.on_timer(self.now);
        st.timers += 1;
        if let Some(d) = self.qp.next_deadline() {
            assert!(d > self.now, "deadline {d} left at or before now {}", self.now);
        }
        if self.ty == QpType::Uc {
            assert_eq!(self.qp.next_deadline(), None, "UC armed a timer");
        }
    }

    /// Delivers `bytes` and checks what receiving may do in this state.
    fn receive(&mut self, rng: &mut Rng, bytes: &[u8], st: &mut Stats) {
        self.refresh_rights();
        let before = self.qp.state();
        let idle = matches!(before, QpState::Reset | QpState::Init | QpState::Err);
        self.mem.frozen = idle;
        let writes = self.mem.writes;
        let ip6 = [0x60u8; 40];
        let grh = [0x5au8; 40];
        let net = match rng.below(3) {
            0 => NetHeader::Ipv4(&IPV4),
            1 => NetHeader::Ipv6(&ip6),
            _ => NetHeader::Grh(&grh),
        };
        let out = self.qp.receive(self.now, &mut self.mem, bytes, net);
        self.mem.frozen = false;
        st.rx[slot(out)] += 1;
        if idle {
            assert!(matches!(out, RxOutcome::Dropped(_)), "{before:?} processed a packet: {out:?}");
            assert_eq!(self.qp.state(), before);
            assert_eq!(self.mem.writes, writes);
        }
        if self.ty == QpType::Rc {
            assert_ne!(self.qp.state(), QpState::Sqe, "RC entered SQE");
        }
        if self.ty == QpType::Uc {
            // Silent and forgiving: no NAK, no timer; only a receive WQE it
            // cannot use (class A) stops it, in ERR.
            assert_ne!(out, RxOutcome::Nak, "UC NAKed");
            let after = self.qp.state();
            assert!(after == before || after == QpState::Err, "UC receive moved {before:?} to {after:?}");
            assert_eq!(self.qp.next_deadline(), None, "UC armed a timer");
            if out == RxOutcome::Accepted {
                st.uc_accepted += 1;
                // The responder follows the PSN of the last packet it took:
                // a FIRST or ONLY starts a message at any PSN.
                if let Ok(p) = packet::parse_headers(bytes) {
                    self.cursor = p.headers.bth.psn.next();
                }
                return;
            }
        }
        // Advance the responder cursor for in-order requests.
        if out == RxOutcome::Accepted {
            if let Ok(p) = packet::parse_headers(bytes) {
                if p.info.is_request() && p.headers.bth.psn == self.cursor {
                    let n = match p.headers.reth {
                        Some(r) if p.info.operation == Operation::RdmaReadRequest => r.dma_len.div_ceil(self.pmtu).max(1),
                        _ => 1,
                    };
                    self.cursor = self.cursor.wrapping_add(n);
                }
            }
        }
    }
}

fn check_recv_cqe(c: &Cqe, w: &RecvWqe, ty: QpType) {
    assert_eq!(c.wr_id, w.wr_id, "receive completions out of order");
    if c.status != WcStatus::Success {
        // UC drops a message it cannot take; only a receive WQE it cannot
        // use completes in error (then the QP is in ERR and flushes).
        if ty == QpType::Uc {
            assert!(
                matches!(c.status, WcStatus::LocProtErr | WcStatus::WrFlushErr),
                "UC receive completed with {:?}",
                c.status
            );
        }
        return;
    }
    match c.opcode {
        ferroce_transport::verbs::WcOpcode::Recv => {
            assert!(
                c.byte_len <= w.length(),
                "received {} bytes into {}",
                c.byte_len,
                w.length()
            );
            if ty == QpType::Ud {
                assert!(c.byte_len >= 40);
            }
        }
        ferroce_transport::verbs::WcOpcode::RecvRdmaWithImm => assert_ne!(ty, QpType::Ud),
        op => panic!("receive completion with opcode {op:?}"),
    }
}

fn implemented_opcodes() -> Vec<Opcode> {
    (0..=u8::MAX).map(Opcode).filter(|op| op.info().is_ok()).collect()
}

/// An R_Key and a virtual address: mostly meaningful, sometimes not.
fn target(rng: &mut Rng, len: u32) -> (u32, u64) {
    let key = if rng.chance(85) {
        rng.pick(&KEYS)
    } else {
        rng.next() as u32
    };
    let b = if (0x100..0x106).contains(&key) {
        base(key)
    } else {
        rng.next()
    };
    let off = match rng.below(6) {
        0 => 0,
        1 => (REGION_LEN as u64).wrapping_sub(u64::from(len)),
        2 => (REGION_LEN as u64).wrapping_sub(u64::from(len)).wrapping_add(1),
        3 => rng.below(REGION_LEN) as u64 & !7,
        4 => rng.below(REGION_LEN) as u64,
        _ => rng.next(),
    };
    (key, b.wrapping_add(off))
}

fn near(rng: &mut Rng, v: u32) -> u32 {
    v.wrapping_add(rng.below(7) as u32).wrapping_sub(3)
}

/// Headers for `opcode` aimed at the QP of `c`, with random and nearby
/// field values; `psn` is the intended PSN.
fn headers(rng: &mut Rng, c: &Case, opcode: Opcode, psn: Psn, payload_len: usize) -> Headers {
    let info = opcode.info().unwrap();
    let dest_qp = match rng.below(20) {
        0 => near(rng, c.qpn) & 0xff_ffff,
        1 => rng.next() as u32 & 0xff_ffff,
        _ => c.qpn,
    };
    let pkey = match rng.below(20) {
        0 => rng.next() as u16,
        1 => 0x7fff,
        2 => 0x8001,
        _ => 0xffff,
    };
    let mut h = Headers::new(BthRepr {
        opcode,
        solicited: rng.bool(),
        mig_req: rng.bool(),
        pad_count: 0,
        pkey: PKey(pkey),
        fecn: rng.chance(5),
        becn: rng.chance(5),
        dest_qp,
        ack_req: rng.bool(),
        psn,
    });
    for ext in info.headers.iter() {
        match ext {
            ExtHeader::Deth => {
                let q_key = match rng.below(10) {
                    0 => near(rng, c.qkey),
                    1 => c.qkey | 0x8000_0000,
                    2 => rng.next() as u32,
                    _ => c.qkey,
                };
                h.deth = Some(DethRepr {
                    q_key,
                    src_qp: rng.next() as u32 & 0xff_ffff,
                });
            }
            ExtHeader::Feth => {
                h.feth = Some(FethRepr {
                    placement: if rng.chance(4) { rng.next() as u8 & 0xf } else { 1 },
                    selectivity: rng.below(4) as u8,
                });
            }
            ExtHeader::Reth => {
                let dma_len = match rng.below(8) {
                    0 => 0,
                    1 => payload_len as u32,
                    2 => c.pmtu,
                    3 => 2 * c.pmtu,
                    4 => REGION_LEN as u32,
                    5 => REGION_LEN as u32 + 1,
                    6 => rng.next() as u32,
                    _ => rng.below(3 * c.pmtu as usize + 1) as u32,
                };
                let (r_key, va) = target(rng, dma_len);
                h.reth = Some(RethRepr { va, r_key, dma_len });
            }
            ExtHeader::AtomicEth => {
                let (r_key, va) = target(rng, 8);
                h.atomic_eth = Some(AtomicEthRepr {
                    va,
                    r_key,
                    swap_add: rng.next(),
                    compare: rng.next(),
                });
            }
            ExtHeader::Aeth => {
                let syndrome = match rng.below(8) {
                    0..=2 => AethSyndrome::Ack {
                        credits: rng.below(32) as u8,
                    },
                    3 => AethSyndrome::RnrNak {
                        timer: rng.below(32) as u8,
                    },
                    4..=6 => AethSyndrome::Nak(rng.pick(&[
                        NakCode::PsnSequenceError,
                        NakCode::InvalidRequest,
                        NakCode::RemoteAccessError,
                        NakCode::RemoteOperationalError,
                        NakCode::InvalidRdRequest,
                    ])),
                    _ => AethSyndrome::from_byte(rng.next() as u8),
                };
                h.aeth = Some(AethRepr {
                    syndrome,
                    msn: rng.next() as u32 & 0xff_ffff,
                });
            }
            ExtHeader::AtomicAckEth => h.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: rng.next() }),
            ExtHeader::ImmDt => h.immdt = Some(ImmDtRepr { imm: rng.next() as u32 }),
            ExtHeader::Ieth => {
                let r_key = if rng.chance(80) {
                    rng.pick(&KEYS)
                } else {
                    rng.next() as u32
                };
                h.ieth = Some(IethRepr { r_key });
            }
            ExtHeader::CnpReserved => {}
        }
    }
    h
}

/// A payload length the wire layer accepts for `opcode`, around the path
/// MTU (sometimes above it, which the engine must refuse).
fn payload_len(rng: &mut Rng, opcode: Opcode, pmtu: usize) -> usize {
    let info = opcode.info().unwrap();
    if !info.payload {
        return 0;
    }
    match info.position {
        Position::First | Position::Middle => {
            if rng.chance(75) {
                pmtu
            } else {
                4 * (1 + rng.below(pmtu / 4 + 2))
            }
        }
        Position::Last => {
            let over = if rng.chance(10) { 8 } else { 0 };
            1 + rng.below(pmtu + over)
        }
        Position::Only => match rng.below(4) {
            0 => 0,
            1 => pmtu - rng.below(2),
            _ => {
                let over = if rng.chance(10) { 8 } else { 0 };
                rng.below(pmtu + over + 1)
            }
        },
    }
}

/// A PSN for a packet of `info` to the QP of `c`.
fn psn_for(rng: &mut Rng, c: &Case, info: &ferroce_transport::wire::OpcodeInfo) -> Psn {
    if info.is_response() && !c.sent.is_empty() && rng.chance(85) {
        let s = c.sent[rng.below(c.sent.len())];
        let k = rng.below(s.npkts.max(1) as usize) as u32;
        return Psn::new(near(rng, s.psn.wrapping_add(k)));
    }
    match rng.below(10) {
        0 => Psn::new(rng.next() as u32),
        1 => c.cursor.wrapping_sub(1 + rng.below(64) as u32),
        2 => c.cursor.wrapping_add(1 + rng.below(3) as u32),
        3 => Psn::new(near(rng, c.cursor.value())),
        _ => c.cursor,
    }
}

fn emit(h: &Headers, payload: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0u8; 4096 + 128];
    let n = packet::emit(h, payload, &mut out).ok()?;
    out.truncate(n);
    Some(out)
}

fn mutate(rng: &mut Rng, p: &mut Vec<u8>) {
    if p.is_empty() {
        return;
    }
    match rng.below(6) {
        0 => {
            let at = rng.below(p.len());
            p[at] ^= 1 << rng.below(8);
        }
        1 => {
            let at = rng.below(p.len().min(12));
            p[at] = rng.next() as u8;
        }
        2 => {
            let at = rng.below(p.len().min(40));
            p[at] = rng.next() as u8;
        }
        3 => p.truncate(rng.below(p.len())),
        4 => p.extend((0..4 * (1 + rng.below(4))).map(|_| rng.next() as u8)),
        _ => {
            // Pad count bits only.
            if p.len() > 1 {
                p[1] ^= (1 + rng.below(3) as u8) << 4;
            }
        }
    }
}

/// Step (a): random bytes, half the time behind a plausible BTH.
fn random_packet(rng: &mut Rng, c: &Case, opcodes: &[Opcode]) -> Vec<u8> {
    let len = rng.below(c.pmtu as usize + 80);
    let mut p = vec![0u8; len];
    rng.fill(&mut p);
    if len >= 12 && rng.bool() {
        p[0] = rng.pick(opcodes).0;
        p[1] &= 0x30;
        p[2] = 0xff;
        p[3] = 0xff;
        p[5..8].copy_from_slice(&c.qpn.to_be_bytes()[1..]);
        if rng.bool() {
            p[9..12].copy_from_slice(&c.cursor.value().to_be_bytes()[1..]);
        }
        if rng.bool() {
            p.truncate(len & !3);
        }
    }
    p
}

/// Step (b): one valid packet of a random opcode, maybe mutated.
fn valid_packet(rng: &mut Rng, c: &Case, opcodes: &[Opcode]) -> Option<Vec<u8>> {
    let own: Vec<Opcode> = opcodes
        .iter()
        .copied()
        .filter(|o| {
            let t = o.info().unwrap().transport;
            match c.ty {
                QpType::Ud => t == Transport::Ud,
                QpType::Uc => t == Transport::Uc,
                QpType::Rc => t == Transport::Rc,
            }
        })
        .collect();
    let opcode = if rng.chance(85) {
        rng.pick(&own)
    } else {
        rng.pick(opcodes)
    };
    let info = opcode.info().unwrap();
    let plen = payload_len(rng, opcode, c.pmtu as usize);
    let mut payload = vec![0u8; plen];
    rng.fill(&mut payload);
    let psn = psn_for(rng, c, &info);
    let h = headers(rng, c, opcode, psn, plen);
    let mut p = emit(&h, &payload)?;
    if rng.chance(25) {
        mutate(rng, &mut p);
    }
    Some(p)
}

/// Step (c): a whole message (SEND or WRITE, several packets) at the
/// cursor (on UC now and then at a random PSN: a FIRST or ONLY starts a
/// message anywhere), or the responses to a request the QP sent; one
/// packet may be mutated, dropped or repeated.
fn message(rng: &mut Rng, c: &Case) -> Vec<Vec<u8>> {
    let pmtu = c.pmtu as usize;
    let mut out = Vec::new();
    let respond = c.ty == QpType::Rc && !c.sent.is_empty() && rng.bool();
    if respond {
        let s = c.sent[rng.below(c.sent.len())];
        let psn = Psn::new(s.psn);
        let ack = |rng: &mut Rng, op: Opcode, p: Psn, plen: usize| {
            let mut h = headers(rng, c, op, p, plen);
            h.bth.dest_qp = c.qpn;
            h.bth.pkey = PKey(0xffff);
            if let Some(a) = h.aeth.as_mut() {
                if rng.chance(90) {
                    a.syndrome = AethSyndrome::Ack { credits: 31 };
                }
            }
            let mut payload = vec![0u8; plen];
            rng.fill(&mut payload);
            emit(&h, &payload)
        };
        match s.op {
            Operation::RdmaReadRequest => {
                let n = s.npkts.max(1);
                for i in 0..n {
                    let left = (s.len as usize).saturating_sub(i as usize * pmtu);
                    let (op, plen) = match (i == 0, i + 1 == n) {
                        (true, true) => (Opcode::RC_RDMA_READ_RESPONSE_ONLY, left.min(pmtu)),
                        (true, false) => (Opcode::RC_RDMA_READ_RESPONSE_FIRST, pmtu),
                        (false, false) => (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, pmtu),
                        (false, true) => (Opcode::RC_RDMA_READ_RESPONSE_LAST, left.clamp(1, pmtu)),
                    };
                    out.extend(ack(rng, op, psn.wrapping_add(i), plen));
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                out.extend(ack(rng, Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, 0));
            }
            _ => out.extend(ack(rng, Opcode::RC_ACKNOWLEDGE, psn, 0)),
        }
    } else if c.ty == QpType::Rc && rng.chance(30) {
        // A READ or an atomic at the cursor, mostly aimed well.
        let (op, len) = match rng.below(3) {
            0 => (Opcode::RC_RDMA_READ_REQUEST, rng.below(3 * pmtu + 1) as u32),
            1 => (Opcode::RC_COMPARE_SWAP, 8),
            _ => (Opcode::RC_FETCH_ADD, 8),
        };
        let mut h = headers(rng, c, op, c.cursor, 0);
        h.bth.dest_qp = c.qpn;
        h.bth.pkey = PKey(0xffff);
        let va = base(TARGET) + (rng.below(REGION_LEN - (len as usize).min(REGION_LEN)) as u64 & !7);
        if rng.chance(80) {
            if let Some(r) = h.reth.as_mut() {
                *r = RethRepr {
                    va,
                    r_key: TARGET,
                    dma_len: len,
                };
            }
            if let Some(a) = h.atomic_eth.as_mut() {
                a.va = va;
                a.r_key = TARGET;
            }
        }
        out.extend(emit(&h, &[]));
    } else if c.ty != QpType::Ud {
        let write = rng.bool();
        let n = 1 + rng.below(4);
        let total = if n == 1 {
            rng.below(pmtu + 1)
        } else {
            (n - 1) * pmtu + 1 + rng.below(pmtu)
        };
        let imm = rng.chance(30);
        let start = if c.ty == QpType::Uc && rng.chance(15) {
            Psn::new(rng.next() as u32)
        } else {
            c.cursor
        };
        let (rkey, va) = if rng.chance(80) {
            (
                TARGET,
                base(TARGET) + rng.below(REGION_LEN - total.min(REGION_LEN)) as u64,
            )
        } else {
            target(rng, total as u32)
        };
        for i in 0..n {
            let (first, last) = (i == 0, i + 1 == n);
            let op = match (write, first, last, imm) {
                (false, true, true, false) => Opcode::RC_SEND_ONLY,
                (false, true, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                (false, true, false, _) => Opcode::RC_SEND_FIRST,
                (false, false, false, _) => Opcode::RC_SEND_MIDDLE,
                (false, false, true, false) => Opcode::RC_SEND_LAST,
                (false, false, true, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                (true, true, true, false) => Opcode::RC_RDMA_WRITE_ONLY,
                (true, true, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                (true, true, false, _) => Opcode::RC_RDMA_WRITE_FIRST,
                (true, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
                (true, false, true, false) => Opcode::RC_RDMA_WRITE_LAST,
                (true, false, true, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            };
            let op = if c.ty == QpType::Uc { op.uc() } else { op };
            let plen = if last { total - i * pmtu } else { pmtu };
            let mut h = headers(rng, c, op, start.wrapping_add(i as u32), plen);
            h.bth.dest_qp = c.qpn;
            h.bth.pkey = PKey(0xffff);
            if let Some(r) = h.reth.as_mut() {
                *r = RethRepr {
                    va,
                    r_key: rkey,
                    dma_len: total as u32,
                };
            }
            let mut payload = vec![0u8; plen];
            rng.fill(&mut payload);
            out.extend(emit(&h, &payload));
        }
    } else {
        // UD: a clean SEND ONLY to the QP.
        let op = rng.pick(&[Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE]);
        let plen = rng.below(pmtu + 1);
        let psn = Psn::new(rng.next() as u32);
        let mut h = headers(rng, c, op, psn, plen);
        h.bth.dest_qp = c.qpn;
        h.bth.pkey = PKey(0xffff);
        h.deth = Some(DethRepr {
            q_key: c.qkey,
            src_qp: 0x77,
        });
        let mut payload = vec![0u8; plen];
        rng.fill(&mut payload);
        out.extend(emit(&h, &payload));
    }
    if !out.is_empty() && rng.chance(20) {
        let i = rng.below(out.len());
        match rng.below(3) {
            0 => mutate(rng, &mut out[i]),
            1 => {
                out.remove(i);
            }
            _ => {
                let p = out[i].clone();
                out.insert(i, p);
            }
        }
    }
    out
}

fn step(rng: &mut Rng, c: &mut Case, opcodes: &[Opcode], st: &mut Stats) {
    st.steps += 1;
    c.now += rng.below(200_000) as u64;
    // An RC QP dies of its first bad request, so it mostly gets whole
    // messages and responses; UD shrugs off anything; UC drops a bad
    // message and goes on, but needs whole messages to get anywhere.
    let (random, valid, msg) = match c.ty {
        QpType::Rc => (8, 20, 80),
        QpType::Uc => (15, 50, 80),
        QpType::Ud => (25, 65, 80),
    };
    let r = rng.below(100);
    if r < random {
        let p = random_packet(rng, c, opcodes);
        c.receive(rng, &p, st);
    } else if r < valid {
        if let Some(p) = valid_packet(rng, c, opcodes) {
            c.receive(rng, &p, st);
        }
    } else if r < msg {
        for p in message(rng, c) {
            c.receive(rng, &p, st);
            if rng.chance(30) {
                c.drain_transmit(st);
            }
        }
    } else if r < 83 {
        c.drain_transmit(st);
    } else if r < 86 {
        c.drain_capped(rng, st);
    } else if r < 90 {
        c.timer(rng, st);
    } else if r < 94 {
        c.poll_cqs(st);
    } else if r < 96 {
        c.post_recv(rng);
    } else if r < 99 {
        let bad = rng.chance(20);
        c.post_send(rng, bad);
    } else {
        {
            // Now and then a long silence: timers fire one after the
            // other, with retransmissions in between.
            for _ in 0..8 {
                if let Some(d) = c.qp.next_deadline() {
                    c.now = c.now.max(d);
                }
                c.timer(rng, st);
                c.drain_transmit(st);
            }
        }
    }
    if rng.chance(30) {
        c.drain_transmit(st);
    }
    if rng.chance(30) {
        c.poll_cqs(st);
    }
    // Keep receives posted most of the time, so packets get as far as
    // the memory.
    if c.posted_recv.len() < 8 && rng.chance(50) {
        c.post_recv(rng);
    }
}

fn run(seed: u64, steps: usize) -> Stats {
    let mut rng = Rng(seed);
    let opcodes = implemented_opcodes();
    assert_eq!(opcodes.len(), 40);
    let cases: [(QpType, QpState); 20] = [
        (QpType::Ud, QpState::Reset),
        (QpType::Ud, QpState::Init),
        (QpType::Ud, QpState::Rtr),
        (QpType::Ud, QpState::Rts),
        (QpType::Ud, QpState::Sqd),
        (QpType::Ud, QpState::Sqe),
        (QpType::Ud, QpState::Err),
        (QpType::Uc, QpState::Reset),
        (QpType::Uc, QpState::Init),
        (QpType::Uc, QpState::Rtr),
        (QpType::Uc, QpState::Rts),
        (QpType::Uc, QpState::Sqd),
        (QpType::Uc, QpState::Sqe),
        (QpType::Uc, QpState::Err),
        (QpType::Rc, QpState::Reset),
        (QpType::Rc, QpState::Init),
        (QpType::Rc, QpState::Rtr),
        (QpType::Rc, QpState::Rts),
        (QpType::Rc, QpState::Sqd),
        (QpType::Rc, QpState::Err),
    ];
    let mut st = Stats::default();
    let mut seen = [false; 20];
    let mut done = 0;
    let mut episode = 0;
    while done < steps {
        let i = episode % cases.len();
        let (ty, state) = cases[i];
        episode += 1;
        let mut c = Case::new(&mut rng, ty, state);
        if c.qp.state() == state {
            seen[i] = true;
        } else {
            // SQE needs its send to fail, which it does unless the queue
            // was full; anything else must be where it was put.
            assert_eq!(
                state,
                QpState::Sqe,
                "{ty:?} built in {:?} instead of {state:?}",
                c.qp.state()
            );
        }
        c.poll_cqs(&mut st);
        let n = 50 + rng.below(400);
        let mut ran = 0;
        let mut in_err = 0;
        let mut in_sqe = 0;
        while ran < n {
            let was = c.qp.state();
            step(&mut rng, &mut c, &opcodes, &mut st);
            ran += 1;
            // A UC QP whose send side failed (a bad WQE) goes back to RTS
            // after a few steps in SQE, unless SQE is what is under test.
            if ty == QpType::Uc && c.qp.state() == QpState::Sqe && state != QpState::Sqe {
                if was != QpState::Sqe {
                    st.uc_sqe += 1;
                }
                in_sqe += 1;
                if in_sqe > 10 {
                    c.resume(&mut rng);
                    in_sqe = 0;
                }
            }
            // A QP that fell into ERR has little left to show: a few more
            // steps there, then the next episode.
            if c.qp.state() == QpState::Err && state != QpState::Err {
                in_err += 1;
                if in_err > 10 {
                    c.revive(&mut rng, state);
                    in_err = 0;
                }
            }
        }
        // Settle: everything comes back, nothing more than was posted.
        c.drain_transmit(&mut st);
        c.poll_cqs(&mut st);
        let a = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        c.qp.modify(&a, mask::STATE).unwrap();
        c.drain_transmit(&mut st);
        c.poll_cqs(&mut st);
        assert!(
            c.posted_send.is_empty() && c.posted_recv.is_empty(),
            "ERR flushes every WQE"
        );
        done += ran;
        st.episodes += 1;
    }
    if steps >= 10_000 {
        assert!(seen.iter().all(|&s| s), "not every (type, state) was built: {seen:?}");
    }
    st
}

#[test]
fn qp_fuzz_receive_path_in_every_state() {
    // FERROCE_FUZZ_SEED picks another sequence (for long runs on many cores).
    let seed = std::env::var("FERROCE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED_F00D_CAFE_0001);
    let st = run(seed, iterations(1_000_000));
    eprintln!("qp_fuzz: {st:?}");
    // The harness must reach deep enough to matter.
    if st.steps >= 100_000 {
        assert!(
            st.rx[slot(RxOutcome::Accepted)] > st.steps / 50,
            "too few packets accepted: {st:?}"
        );
        assert!(st.rx[slot(RxOutcome::Nak)] > 100, "too few NAKs: {st:?}");
        assert!(
            st.uc_accepted > st.steps / 200 && st.uc_tx > 1_000 && st.uc_recv_cqes > 1_000 && st.uc_sqe > 10,
            "UC not reached deep enough: {st:?}"
        );
        assert!(
            st.recv_cqes > 1_000 && st.send_cqes > 1_000,
            "too few completions: {st:?}"
        );
    }
}
