//! One queue pair: the object the kernel glue drives.
//!
//! A [`Qp`] owns its send and receive queues (fixed-capacity rings over
//! caller storage) and the requester, responder and completer state of its
//! transport. Every entry point takes what it needs as arguments (memory,
//! `now`, a transmit buffer) and returns what happened; nothing blocks,
//! allocates or reads a clock.
//!
//! The glue's loop, per QP:
//! - verbs: [`Qp::modify`], [`Qp::post_send`], [`Qp::post_recv`];
//! - a packet for this QP arrived: [`Qp::receive`];
//! - the device may transmit: [`Qp::poll_transmit`] until `None`;
//! - time passed [`Qp::next_deadline`]: [`Qp::on_timer`];
//! - after any of the above: [`Qp::poll_send_cq`] / [`Qp::poll_recv_cq`]
//!   until `None`, moving completions to the CQs.

use super::error::Error;
use super::memory::Memory;
use super::wire::packet;
use super::qp::{mask, modify_is_ok, QpAttr, QpState, QpType, MAX_RD_ATOMIC};
use super::rc::completer::CompState;
use super::rc::requester::ReqState;
use super::rc::responder::RespState;
use super::ring::{Ring, Storage};
use super::verbs::{send_flags, AsyncError, Cqe, RecvWqe, SendWqe, WcOpcode, WcStatus, WrOpcode, GRH_LEN, MAX_SGE};
use super::wire::Psn;

/// A send queue slot: the work request and its progress.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendSlot {
    pub(super) wqe: SendWqe,
    /// `Some` once the request completed (successfully or not).
    pub(super) status: Option<WcStatus>,
    /// Vendor error for the completion (the NAK syndrome).
    pub(super) vendor_err: u32,
    /// Whether the requester started it (PSNs assigned).
    pub(super) started: bool,
    /// PSN of its first packet.
    pub(super) first_psn: Psn,
    /// PSNs it uses: packets of a SEND/WRITE, response packets of a READ,
    /// 1 for an atomic.
    pub(super) npkts: u32,
    /// Message length.
    pub(super) len: u32,
    /// READ: response packets received in order.
    pub(super) resp_pkts: u32,
}

impl SendSlot {
    /// PSN of the last packet.
    pub(super) fn last_psn(&self) -> Psn {
        self.first_psn.wrapping_add(self.npkts.saturating_sub(1))
    }
}

/// A receive queue slot: the work request and, once used, its completion.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvSlot {
    pub(super) wqe: RecvWqe,
    pub(super) cqe: Option<Cqe>,
}

/// Parameters fixed at QP creation.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Transport service.
    pub qp_type: QpType,
    /// Protection domain handle; memory must belong to it.
    pub pd: u32,
    /// `IBV_SIGNAL_ALL_WR`: every send request completes with a CQE.
    pub sq_sig_all: bool,
}

/// Where a transmitted packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written to the buffer: BTH through payload and pad. The caller
    /// appends the ICRC and wraps it in UDP/IP.
    pub len: usize,
    /// Address handle: the WR's `ah` on UD, the QP's primary path on RC.
    pub ah: u32,
    /// Destination QPN (also in the BTH).
    pub dest_qpn: u32,
}

/// Network header of a received packet, from which verbs' 40 GRH bytes are
/// made.
#[derive(Clone, Copy, Debug)]
pub enum NetHeader<'a> {
    /// The 40 bytes to place in front of a UD receive buffer, as is.
    Grh(&'a [u8; GRH_LEN]),
    /// The packet's IPv4 header: RoCEv2 places its first 20 bytes in the
    /// last 20 of the GRH space, the first 20 are zero.
    Ipv4(&'a [u8]),
    /// The packet's IPv6 header: its 40 bytes form the GRH.
    Ipv6(&'a [u8]),
}

impl NetHeader<'_> {
    /// The RoCEv2 pseudo-GRH.
    pub fn grh(&self) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        match self {
            NetHeader::Grh(b) => g = **b,
            NetHeader::Ipv4(h) => {
                if let (Some(dst), Some(src)) = (g.get_mut(20..), h.get(..20)) {
                    super::sg::copy_exact(dst, src);
                }
            }
            NetHeader::Ipv6(h) => {
                if let Some(src) = h.get(..GRH_LEN) {
                    super::sg::copy_exact(&mut g, src);
                }
            }
        }
        g
    }
}

/// Why the engine dropped a packet without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Transport headers that do not parse, name another QP, or carry an
    /// opcode (or lack an extension header) this QP type does not take.
    Header,
    /// A P_Key or Q_Key that does not match the QP's.
    Key,
    /// The QP's state takes no such packet (a request before RTR, a
    /// response outside RTS/SQD).
    State,
    /// Out of sequence: a stale duplicate, a response to nothing
    /// outstanding or out of order, a repeated NAK, a UC packet outside a
    /// message.
    Sequence,
    /// No receive WQE (UD, UC: RC answers with an RNR NAK).
    NoWqe,
    /// Longer than the path MTU or the receive buffer (UD), or a READ
    /// response of the wrong length.
    Length,
    /// A UC request that RC would answer with a NAK (invalid request,
    /// remote access or length error): its message is dropped.
    Invalid,
    /// The responder's resources are in use: dropped unseen, without
    /// moving the expected PSN; the requester's timer resends.
    Busy,
    /// The local buffer: an on-demand page absent (retried once faulted
    /// in), or a protection error that moved the QP to ERR.
    Memory,
}

/// What a received packet led to, for the caller's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxOutcome {
    /// Processed (including duplicates answered without re-execution).
    Accepted,
    /// Silently dropped, for the reason given (the device counts each).
    Dropped(DropReason),
    /// Answered with a NAK (sequence error, RNR, or a fatal NAK).
    Nak,
}

/// A queue pair over send storage `S` and receive storage `R`.
pub struct Qp<S, R> {
    pub(super) qpn: u32,
    pub(super) ty: QpType,
    pub(super) pd: u32,
    pub(super) sq_sig_all: bool,
    pub(super) state: QpState,
    pub(super) attr: QpAttr,
    /// The P_Key value of `attr.pkey_index` (the glue owns the table).
    pub(super) pkey: u16,
    pub(super) sq: Ring<SendSlot, S>,
    /// Sequence number of `sq` entry 0.
    pub(super) sq_head: u64,
    pub(super) rq: Ring<RecvSlot, R>,
    /// Sequence number of `rq` entry 0.
    pub(super) rq_head: u64,
    /// Next receive WQE the responder takes.
    pub(super) rq_next: u64,
    pub(super) req: ReqState,
    pub(super) comp: CompState,
    pub(super) resp: RespState,
    /// An affiliated asynchronous error not yet taken by the glue.
    pub(super) async_error: Option<AsyncError>,
}

impl<S: Storage<SendSlot>, R: Storage<RecvSlot>> Qp<S, R> {
    /// A QP in RESET over the given queue storage (its length is the queue
    /// depth; contents are ignored).
    pub fn new(cfg: QpConfig, sq: S, rq: R) -> Self {
        Self {
            qpn: cfg.qpn & 0xff_ffff,
            ty: cfg.qp_type,
            pd: cfg.pd,
            sq_sig_all: cfg.sq_sig_all,
            state: QpState::Reset,
            attr: QpAttr::default(),
            pkey: 0xffff,
            sq: Ring::new(sq),
            sq_head: 0,
            rq: Ring::new(rq),
            rq_head: 0,
            rq_next: 0,
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::default(),
            async_error: None,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The transport service.
    pub fn qp_type(&self) -> QpType {
        self.ty
    }

    /// The affiliated asynchronous error the QP raised (the responder's
    /// fatal error with no receive WQE to report it), once.
    pub fn take_async_error(&mut self) -> Option<AsyncError> {
        self.async_error.take()
    }

    /// Current state (changes by Modify QP and by errors).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Current attributes (`ibv_query_qp`).
    pub fn attr(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a
    }

    /// Sets the P_Key value the QP sends and accepts, resolved by the glue
    /// from `pkey_index` and the port's P_Key table.
    pub fn set_pkey(&mut self, pkey: u16) {
        self.pkey = pkey;
    }

    /// Sets the path MTU directly: for UD, where Modify QP carries no
    /// PATH_MTU, the glue passes the port's active MTU here.
    pub fn set_path_mtu(&mut self, mtu: super::qp::Mtu) {
        self.attr.path_mtu = mtu;
    }

    /// Path MTU in bytes.
    pub(super) fn pmtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// Modify QP: checks `mask` against the transition table and the value
    /// ranges, then applies it. Errors leave the QP unchanged.
    pub fn modify(&mut self, attr: &QpAttr, attr_mask: u32) -> Result<(), Error> {
        let cur = self.state;
        let next = if attr_mask & mask::STATE != 0 { attr.qp_state } else { cur };
        modify_is_ok(self.ty, cur, next, attr_mask)?;
        if attr_mask & mask::CUR_STATE != 0 && attr.cur_qp_state != cur {
            return Err(Error::Invalid);
        }
        attr.validate(attr_mask)?;
        let a = &mut self.attr;
        let m = |bit: u32| attr_mask & bit != 0;
        if m(mask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if m(mask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if m(mask::PORT) {
            a.port_num = attr.port_num;
        }
        if m(mask::QKEY) {
            a.qkey = attr.qkey;
        }
        if m(mask::AV) {
            a.ah = attr.ah;
        }
        if m(mask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if m(mask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if m(mask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            self.comp.retry_left = attr.retry_cnt;
        }
        if m(mask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            self.comp.rnr_left = attr.rnr_retry;
        }
        if m(mask::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
            self.resp.epsn = Psn::new(attr.rq_psn);
        }
        if m(mask::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
            let p = Psn::new(attr.sq_psn);
            self.req.next_psn = p;
            self.req.psn_hi = p;
            self.comp.una = p;
        }
        if m(mask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if m(mask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if m(mask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if m(mask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic.min(MAX_RD_ATOMIC);
        }
        if m(mask::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        match next {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(),
            QpState::Sqe => {}
            _ => self.state = next,
        }
        Ok(())
    }

    /// Back to RESET: queues emptied without completions, transport state
    /// cleared; attributes keep their values until set again.
    fn reset(&mut self) {
        self.state = QpState::Reset;
        self.sq.clear();
        self.rq.clear();
        self.sq_head = 0;
        self.rq_head = 0;
        self.rq_next = 0;
        self.req = ReqState::default();
        self.comp = CompState::default();
        self.resp = RespState::default();
        self.async_error = None;
    }

    /// Enters ERR: every outstanding work request completes with
    /// `WR_FLUSH_ERR` (IBTA 10.3.1: the Error state flushes both queues).
    pub(super) fn enter_error(&mut self) {
        self.state = QpState::Err;
        self.flush_sq();
        self.flush_rq();
        self.comp.ack_deadline = None;
        self.comp.rnr_until = None;
    }

    /// Enters SQE (UD send-side error): the send queue is flushed, the
    /// receive side keeps running.
    pub(super) fn enter_sq_error(&mut self) {
        self.state = QpState::Sqe;
        self.flush_sq();
    }

    fn flush_sq(&mut self) {
        for i in 0..self.sq.len() {
            if let Some(s) = self.sq.get_mut(i) {
                if s.status.is_none() {
                    s.status = Some(WcStatus::WrFlushErr);
                }
            }
        }
        let end = self.sq_end();
        self.req.req_seq = end;
        self.req.sent_seq = end;
        self.comp.comp_seq = end;
        self.req.req_off = 0;
        self.req.rd_atomic = 0;
    }

    fn flush_rq(&mut self) {
        let qpn = self.qpn;
        for i in 0..self.rq.len() {
            if let Some(s) = self.rq.get_mut(i) {
                if s.cqe.is_none() {
                    s.cqe = Some(Cqe {
                        wr_id: s.wqe.wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode: WcOpcode::Recv,
                        qp_num: qpn,
                        ..Cqe::default()
                    });
                }
            }
        }
        self.rq_next = self.rq_end();
        self.resp.cur = super::rc::responder::InProgress::None;
    }

    pub(super) fn sq_end(&self) -> u64 {
        self.sq_head.saturating_add(self.sq.len() as u64)
    }

    pub(super) fn rq_end(&self) -> u64 {
        self.rq_head.saturating_add(self.rq.len() as u64)
    }

    /// The send slot with sequence number `seq`.
    pub(super) fn sq_at(&self, seq: u64) -> Option<&SendSlot> {
        let i = usize::try_from(seq.checked_sub(self.sq_head)?).ok()?;
        self.sq.get(i)
    }

    /// The send slot with sequence number `seq`, mutably.
    pub(super) fn sq_at_mut(&mut self, seq: u64) -> Option<&mut SendSlot> {
        let i = usize::try_from(seq.checked_sub(self.sq_head)?).ok()?;
        self.sq.get_mut(i)
    }

    /// The receive slot with sequence number `seq`.
    pub(super) fn rq_at(&self, seq: u64) -> Option<&RecvSlot> {
        let i = usize::try_from(seq.checked_sub(self.rq_head)?).ok()?;
        self.rq.get(i)
    }

    /// The receive slot with sequence number `seq`, mutably.
    pub(super) fn rq_at_mut(&mut self, seq: u64) -> Option<&mut RecvSlot> {
        let i = usize::try_from(seq.checked_sub(self.rq_head)?).ok()?;
        self.rq.get_mut(i)
    }

    /// Post Send: queues `wqe`. Refused with `EINVAL` in RESET, INIT and
    /// RTR, for an opcode the QP type does not support, too many SGEs or
    /// too much inline data; with `ENOMEM` when the queue is full. In ERR
    /// and SQE the request is accepted and flushed.
    pub fn post_send(&mut self, wqe: &SendWqe) -> Result<(), Error> {
        if !self.state.accepts_send_wr()
            || !wqe.payload_ok()
            || (wqe.is_inline() && (wqe.opcode.is_atomic() || wqe.opcode.is_local() || wqe.opcode == WrOpcode::RdmaRead))
            || wqe.length().is_none()
        {
            return Err(Error::Invalid);
        }
        let allowed = match self.ty {
            QpType::Ud => matches!(wqe.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            // UC: no READs, atomics or SEND with invalidate (IBTA table 38
            // has no UC opcode for them).
            QpType::Uc => !wqe.opcode.is_read_or_atomic() && wqe.opcode != WrOpcode::SendWithInv,
            QpType::Rc => true,
        };
        if !allowed {
            return Err(Error::Invalid);
        }
        let flushed = matches!(self.state, QpState::Err | QpState::Sqe);
        let slot = SendSlot {
            wqe: *wqe,
            status: if flushed { Some(WcStatus::WrFlushErr) } else { None },
            ..SendSlot::default()
        };
        self.sq.push(slot).map_err(|_| Error::QueueFull)?;
        if flushed {
            let end = self.sq_end();
            self.req.req_seq = end;
            self.req.sent_seq = end;
            self.comp.comp_seq = end;
        }
        Ok(())
    }

    /// Post Receive: queues `wqe`. `EINVAL` in RESET or with too many SGEs,
    /// `ENOMEM` when full; flushed at once in ERR.
    pub fn post_recv(&mut self, wqe: &RecvWqe) -> Result<(), Error> {
        if !self.state.accepts_recv_wr() || usize::from(wqe.num_sge) > MAX_SGE {
            return Err(Error::Invalid);
        }
        let flushed = self.state == QpState::Err;
        let cqe = flushed.then_some(Cqe {
            wr_id: wqe.wr_id,
            status: WcStatus::WrFlushErr,
            opcode: WcOpcode::Recv,
            qp_num: self.qpn,
            ..Cqe::default()
        });
        self.rq.push(RecvSlot { wqe: *wqe, cqe }).map_err(|_| Error::QueueFull)?;
        if flushed {
            self.rq_next = self.rq_end();
        }
        Ok(())
    }

    /// A send request the glue took from its consumer but refuses (a
    /// malformed WQE in a process's ring, which no system call can return
    /// an error for): the QP enters ERR, flushing what is queued, and the
    /// request completes with `status` after them. `ENOMEM` when the queue
    /// has no room for it.
    pub fn fail_send(&mut self, wr_id: u64, status: WcStatus) -> Result<(), Error> {
        if self.state != QpState::Err {
            self.enter_error();
        }
        let slot = SendSlot {
            wqe: SendWqe { wr_id, send_flags: send_flags::SIGNALED, ..SendWqe::default() },
            status: Some(status),
            ..SendSlot::default()
        };
        self.sq.push(slot).map_err(|_| Error::QueueFull)?;
        let end = self.sq_end();
        self.req.req_seq = end;
        self.req.sent_seq = end;
        self.comp.comp_seq = end;
        Ok(())
    }

    /// The receive counterpart of [`Qp::fail_send`].
    pub fn fail_recv(&mut self, wr_id: u64, status: WcStatus) -> Result<(), Error> {
        if self.state != QpState::Err {
            self.enter_error();
        }
        let cqe = Cqe { wr_id, status, opcode: WcOpcode::Recv, qp_num: self.qpn, ..Cqe::default() };
        self.rq.push(RecvSlot { wqe: RecvWqe { wr_id, ..RecvWqe::default() }, cqe: Some(cqe) }).map_err(|_| Error::QueueFull)?;
        self.rq_next = self.rq_end();
        Ok(())
    }

    /// Next send completion, in posting order. Successful unsignaled
    /// requests are retired silently.
    pub fn poll_send_cq(&mut self) -> Option<Cqe> {
        loop {
            // The fields only: a slot is large (its gather list or inline
            // bytes).
            let (status, wr_id, opcode, flags, vendor_err, len) = {
                let s = self.sq.get(0)?;
                (s.status?, s.wqe.wr_id, s.wqe.opcode, s.wqe.send_flags, s.vendor_err, s.len)
            };
            self.sq.pop();
            self.sq_head = self.sq_head.saturating_add(1);
            let signaled = self.sq_sig_all || flags & send_flags::SIGNALED != 0;
            if status != WcStatus::Success || signaled {
                return Some(Cqe {
                    wr_id,
                    status,
                    opcode: opcode.wc_opcode(),
                    vendor_err,
                    byte_len: if status == WcStatus::Success { len } else { 0 },
                    qp_num: self.qpn,
                    ..Cqe::default()
                });
            }
        }
    }

    /// Next receive completion, in posting order.
    pub fn poll_recv_cq(&mut self) -> Option<Cqe> {
        let c = self.rq.get(0)?.cqe?;
        self.rq.pop();
        self.rq_head = self.rq_head.saturating_add(1);
        Some(c)
    }

    /// Work requests on the send queue not yet retired by
    /// [`Qp::poll_send_cq`].
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }

    /// Work requests on the receive queue not yet retired.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// The oldest receive WQE the QP holds and has not completed: for a QP
    /// on an SRQ, the one taken for the message in progress. The glue gives
    /// it back to the SRQ before a reset or destroy, which would drop it
    /// without a completion (a WQE leaves an SRQ only to complete).
    pub fn unfinished_recv(&self) -> Option<RecvWqe> {
        (0..self.rq.len()).filter_map(|i| self.rq.get(i)).find(|s| s.cqe.is_none()).map(|s| s.wqe)
    }

    /// RC: the PSN the responder expects next (the one request that may
    /// begin a new message; duplicates and requests ahead of it never take
    /// a receive WQE). The glue takes an SRQ's WQE for a packet only when
    /// its PSN is this one.
    pub fn expected_psn(&self) -> Psn {
        self.resp.epsn
    }

    /// Whether a packet for this QP, attached to an SRQ, should take the
    /// SRQ's next receive WQE (the glue asks when the QP holds none): it is
    /// a request that consumes one, the QP receives, and the message will be
    /// executed. RC: its PSN is the one expected (no duplicate, nothing
    /// ahead). UC: a message's FIRST or ONLY packet, whatever its PSN (UC
    /// resynchronises there), or the LAST with immediate of the RDMA WRITE
    /// in progress. UD: its Q_Key is the QP's and it fits the path MTU
    /// (what `ud_receive` drops takes nothing away from the other QPs).
    pub fn takes_srq_wqe(&self, pkt: &[u8]) -> bool {
        let Ok(rx) = packet::parse_headers(pkt) else { return false };
        if !(rx.info.is_request() && rx.info.consumes_recv_wqe())
            || matches!(self.state, QpState::Reset | QpState::Init | QpState::Err)
        {
            return false;
        }
        match self.ty {
            QpType::Ud => {
                rx.info.transport == super::wire::Transport::Ud
                    && rx.headers.deth.is_some_and(|d| d.q_key == self.attr.qkey)
                    && rx.payload.len() <= self.pmtu() as usize
            }
            QpType::Uc => self.uc_takes_srq_wqe(&rx),
            QpType::Rc => rx.headers.bth.psn == self.resp.epsn,
        }
    }

    /// RC: the peer's QPN (`dest_qp_num`), without copying the attributes
    /// (the glue checks it for every packet of its direct path).
    pub fn dest_qp_num(&self) -> u32 {
        self.attr.dest_qp_num
    }

    /// Whether the send queue has drained: in SQD, the moment the glue may
    /// raise `IB_EVENT_SQ_DRAINED`.
    pub fn is_send_idle(&self) -> bool {
        self.req.req_seq == self.req.sent_seq && self.comp.comp_seq == self.req.sent_seq
    }

    /// Processes one received packet addressed to this QP: `pkt` is the
    /// transport packet (BTH through payload and pad, ICRC verified and
    /// removed), `net` its network header.
    pub fn receive<M: Memory>(&mut self, now: u64, mem: &mut M, pkt: &[u8], net: NetHeader<'_>) -> RxOutcome {
        let Ok(rx) = packet::parse_headers(pkt) else {
            return RxOutcome::Dropped(DropReason::Header);
        };
        // A UD QP also takes datagrams to the multicast QP (the caller
        // hands it only those of a group it is attached to).
        let to_me = rx.headers.bth.dest_qp == self.qpn
            || (self.ty == QpType::Ud && rx.headers.bth.dest_qp == super::mcast::MULTICAST_QPN);
        if !to_me {
            return RxOutcome::Dropped(DropReason::Header);
        }
        if !rx.headers.bth.pkey.matches(super::wire::PKey(self.pkey)) {
            return RxOutcome::Dropped(DropReason::Key);
        }
        match self.ty {
            QpType::Ud => self.ud_receive(mem, &rx, &net),
            QpType::Uc => self.uc_respond(mem, &rx),
            QpType::Rc => {
                if rx.info.is_response() {
                    self.complete_response(now, mem, &rx)
                } else {
                    self.respond(mem, &rx)
                }
            }
        }
    }

    /// Whether [`Qp::poll_transmit`] may have a packet now. `false`
    /// guarantees it has none and would change nothing, so the glue skips
    /// allocating a buffer; `true` may still find nothing (a READ waiting
    /// for `max_rd_atomic`, a fence).
    pub fn may_transmit(&self, now: u64) -> bool {
        match self.ty {
            QpType::Ud => {
                self.state == QpState::Rts
                    && !self.req.fault_wait
                    && self.sq_at(self.req.req_seq).is_some_and(|s| s.status.is_none())
            }
            QpType::Uc => {
                if self.req.fault_wait {
                    return false;
                }
                let seq = self.req.req_seq;
                // A message started goes on in SQD; a new one starts in RTS.
                (seq < self.req.sent_seq && matches!(self.state, QpState::Rts | QpState::Sqd))
                    || (self.state == QpState::Rts && self.sq_at(seq).is_some_and(|s| s.status.is_none()))
            }
            QpType::Rc => {
                if self.resp.final_nak.is_some() || (self.state.receives() && !self.resp.jobs.is_empty()) {
                    return true;
                }
                if !matches!(self.state, QpState::Rts | QpState::Sqd) {
                    return false;
                }
                if self.req.fault_wait || self.comp.rnr_until.is_some_and(|t| now < t) {
                    return false;
                }
                let seq = self.req.req_seq;
                if seq >= self.req.sent_seq {
                    self.state == QpState::Rts
                        && self.sq_at(seq)
                            .is_some_and(|s| s.status.is_none() && (s.wqe.opcode.is_local() || self.window_open()))
                } else {
                    self.window_open() && self.sq_at(seq).is_some()
                }
            }
        }
    }

    /// Writes the next packet this QP wants to send into `buf` (at least
    /// [`packet::tx_buffer_len`] of the path MTU; 4096 + 43 always suffices).
    /// RC responses go before new requests.
    pub fn poll_transmit<M: Memory>(&mut self, now: u64, mem: &mut M, buf: &mut [u8]) -> Option<Transmit> {
        match self.ty {
            QpType::Ud => self.ud_transmit(mem, buf),
            QpType::Uc => self.req_transmit(now, mem, buf),
            QpType::Rc => {
                if let Some(t) = self.resp_transmit(mem, buf) {
                    return Some(t);
                }
                self.req_transmit(now, mem, buf)
            }
        }
    }

    /// Whether the requester waits for the pages of a local buffer
    /// ([`MemError::Fault`](super::memory::MemError::Fault)).
    pub fn fault_waiting(&self) -> bool {
        self.req.fault_wait
    }

    /// The pages a requester waited for were faulted in (or their fault
    /// failed: the retry then completes the WQE in error): it goes on.
    pub fn fault_resolved(&mut self) {
        self.req.fault_wait = false;
    }

    /// The earliest time [`Qp::on_timer`] must run, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.comp.ack_deadline, self.comp.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs expired timers (local ACK timeout, RNR wait).
    pub fn on_timer(&mut self, now: u64) {
        if self.ty == QpType::Rc {
            self.rc_on_timer(now);
        }
    }

    /// Completes the send slot `seq` with `status` (and `vendor_err`).
    pub(super) fn complete_send(&mut self, seq: u64, status: WcStatus, vendor_err: u32) {
        if let Some(s) = self.sq_at_mut(seq) {
            if s.status.is_none() {
                s.status = Some(status);
                s.vendor_err = vendor_err;
            }
        }
    }
}

/// Marks the receive completion `cqe` on the slot `seq`.
pub(super) fn complete_recv<S: Storage<SendSlot>, R: Storage<RecvSlot>>(qp: &mut Qp<S, R>, seq: u64, mut cqe: Cqe) {
    let qpn = qp.qpn;
    if let Some(slot) = qp.rq_at_mut(seq) {
        cqe.wr_id = slot.wqe.wr_id;
        cqe.qp_num = qpn;
        slot.cqe = Some(cqe);
    }
}
