//! The verbs vocabulary shared with userspace: work requests, work
//! completions and the numeric values libibverbs gives them.
//!
//! Every numeric value here equals the libibverbs one (`enum ibv_wc_status`,
//! `enum ibv_wr_opcode`, `enum ibv_send_flags`, ...), so the kernel glue and
//! the provider pass them through without translation tables.

/// Scatter/gather entries per work request (`max_send_sge`/`max_recv_sge`).
pub const MAX_SGE: usize = 32;

/// Bytes of inline data a send work request can carry (`max_inline_data`).
pub const MAX_INLINE: usize = 512;

/// Bytes of Global Route Header space verbs reserves at the start of the
/// first receive buffer of a UD QP.
pub const GRH_LEN: usize = 40;

/// An affiliated asynchronous error the responder raises on its QP when
/// no completion can report it (IBTA 11.6.3.1: the error was not
/// associated with a receive WQE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncError {
    /// Local work queue catastrophic error (`IB_EVENT_QP_FATAL`).
    Fatal,
    /// Invalid request local work queue error (`IB_EVENT_QP_REQ_ERR`).
    InvalidRequest,
    /// Local access violation work queue error (`IB_EVENT_QP_ACCESS_ERR`).
    AccessViolation,
}

/// `enum ibv_wc_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum WcStatus {
    /// The work request completed without error.
    #[default]
    Success = 0,
    /// Local length error: a message did not fit its buffers or the PMTU.
    LocLenErr = 1,
    /// Local QP operation error (an internal consistency error).
    LocQpOpErr = 2,
    /// Local protection error: an L_Key, PD or access check failed.
    LocProtErr = 4,
    /// Flushed: the QP entered the error state before the request ran.
    WrFlushErr = 5,
    /// A memory window bind failed its checks (IBTA 10.6.7.2).
    MwBindErr = 6,
    /// The responder sent an unexpected or malformed response.
    BadRespErr = 7,
    /// Local access error on a remote request (responder side).
    LocAccessErr = 8,
    /// The responder NAKed with Invalid Request.
    RemInvReqErr = 9,
    /// The responder NAKed with Remote Access Error.
    RemAccessErr = 10,
    /// The responder NAKed with Remote Operational Error.
    RemOpErr = 11,
    /// The transport retry counter was exhausted.
    RetryExcErr = 12,
    /// The RNR retry counter was exhausted.
    RnrRetryExcErr = 13,
    /// Anything else.
    GeneralErr = 21,
}

/// `enum ibv_wc_opcode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum WcOpcode {
    /// A send (any flavour) on the send queue.
    #[default]
    Send = 0,
    /// An RDMA WRITE (with or without immediate) on the send queue.
    RdmaWrite = 1,
    /// An RDMA READ on the send queue.
    RdmaRead = 2,
    /// An atomic compare and swap on the send queue.
    CompSwap = 3,
    /// An atomic fetch and add on the send queue.
    FetchAdd = 4,
    /// A memory window bind (`IBV_WC_BIND_MW`).
    BindMw = 5,
    /// A local invalidate (`IBV_WC_LOCAL_INV`, `IB_WC_LOCAL_INV`).
    LocalInv = 6,
    /// A FLUSH (`IBV_WC_FLUSH`).
    Flush = 8,
    /// An ATOMIC WRITE (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite = 9,
    /// A fast registration. Kernel QPs only: the kernel's `IB_WC_REG_MR`
    /// (libibverbs has no such completion).
    RegMr = 10,
    /// A received send.
    Recv = 128,
    /// A received RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// `enum ibv_wr_opcode`, restricted to what the engine executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum WrOpcode {
    /// RDMA WRITE.
    RdmaWrite = 0,
    /// RDMA WRITE with immediate data.
    RdmaWriteWithImm = 1,
    /// SEND.
    #[default]
    Send = 2,
    /// SEND with immediate data.
    SendWithImm = 3,
    /// RDMA READ.
    RdmaRead = 4,
    /// Atomic compare and swap.
    AtomicCmpAndSwp = 5,
    /// Atomic fetch and add.
    AtomicFetchAndAdd = 6,
    /// Local invalidate (`IB_WR_LOCAL_INV`): invalidates the key in
    /// [`SendWqe::imm_data`] (a kernel consumer's fast region, a
    /// process's type 2B memory window).
    LocalInv = 7,
    /// Memory window bind (`IBV_WR_BIND_MW`): applies [`SendWqe::bind`].
    BindMw = 8,
    /// SEND with invalidate.
    SendWithInv = 9,
    /// FLUSH (IBTA 1.5): the range `remote_addr`, length
    /// [`SendWqe::compare_add`], of `rkey`'s region (or the whole region)
    /// made visible; [`SendWqe::imm_data`] holds the FETH bits (placement
    /// type in bits 3..0, selectivity level in bits 5..4).
    Flush = 14,
    /// ATOMIC WRITE (IBTA 1.5): the 8 bytes of [`SendWqe::compare_add`]
    /// (in memory order) written at once at `remote_addr`.
    AtomicWrite = 15,
    /// Fast registration (`IB_WR_REG_MR`, the kernel's value): applies
    /// [`SendWqe::reg`]. Kernel QPs only.
    RegMr = 0x20,
}

impl WrOpcode {
    /// The `ibv_wr_opcode` value `v`, if the engine executes it and a
    /// process may post it: fast registration ([`WrOpcode::RegMr`]) is not
    /// among them (the kernel glue maps it from `ib_send_wr` itself).
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::RdmaWrite,
            1 => Self::RdmaWriteWithImm,
            2 => Self::Send,
            3 => Self::SendWithImm,
            4 => Self::RdmaRead,
            5 => Self::AtomicCmpAndSwp,
            6 => Self::AtomicFetchAndAdd,
            7 => Self::LocalInv,
            8 => Self::BindMw,
            9 => Self::SendWithInv,
            14 => Self::Flush,
            15 => Self::AtomicWrite,
            _ => return None,
        })
    }

    /// The completion opcode reported for this request on the send queue.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            Self::RdmaWrite | Self::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            Self::Send | Self::SendWithImm | Self::SendWithInv => WcOpcode::Send,
            Self::RdmaRead => WcOpcode::RdmaRead,
            Self::AtomicCmpAndSwp => WcOpcode::CompSwap,
            Self::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            Self::LocalInv => WcOpcode::LocalInv,
            Self::BindMw => WcOpcode::BindMw,
            Self::Flush => WcOpcode::Flush,
            Self::AtomicWrite => WcOpcode::AtomicWrite,
            Self::RegMr => WcOpcode::RegMr,
        }
    }

    /// Whether this is a local memory operation: executed by the requester
    /// when it reaches it, in order, without a packet.
    pub fn is_local(self) -> bool {
        matches!(self, Self::RegMr | Self::LocalInv | Self::BindMw)
    }

    /// Whether the responder answers with data (RDMA READ, atomics), which
    /// counts against `max_rd_atomic`.
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            Self::RdmaRead | Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd | Self::Flush | Self::AtomicWrite
        )
    }

    /// FLUSH or ATOMIC WRITE: one request packet with its data in the
    /// WQE, answered by an empty READ response.
    pub fn is_placement(self) -> bool {
        matches!(self, Self::Flush | Self::AtomicWrite)
    }

    /// Whether this is an atomic operation.
    pub fn is_atomic(self) -> bool {
        matches!(self, Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd)
    }
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    /// Wait for earlier RDMA READs and atomics to complete first.
    pub const FENCE: u32 = 1 << 0;
    /// Generate a completion on success.
    pub const SIGNALED: u32 = 1 << 1;
    /// Set the solicited event bit in the last packet.
    pub const SOLICITED: u32 = 1 << 2;
    /// The payload is in [`super::SendWqe::inline`], not behind L_Keys.
    pub const INLINE: u32 = 1 << 3;
}

/// `enum ibv_wc_flags`.
pub mod wc_flags {
    /// The first 40 bytes of the receive buffer hold a GRH.
    pub const GRH: u32 = 1 << 0;
    /// `imm_data` is valid.
    pub const WITH_IMM: u32 = 1 << 1;
    /// `invalidated_rkey` (in `imm_data`) is valid.
    pub const WITH_INV: u32 = 1 << 3;
    /// The received message asked for a solicited event (the BTH SE bit of
    /// its last packet). Not an `ibv_wc_flags` bit: it decides whether a CQ
    /// armed for solicited completions raises its event, and is never
    /// reported.
    pub const SOLICITED: u32 = 1 << 30;
}

/// `enum ibv_access_flags`.
pub mod access {
    /// Local write access (receive buffers, RDMA READ destinations).
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// Remote RDMA WRITE access.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Remote RDMA READ access.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Remote atomic access.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Memory windows may be bound to the region.
    pub const MW_BIND: u32 = 1 << 4;
    /// A window (or region) addressed from 0 rather than from its VA.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// A region registered on demand (`IBV_ACCESS_ON_DEMAND`). It grants
    /// nothing; a QP's access flags may carry it (programs pass their
    /// regions' flags, as rdma-core's tests do), and it is ignored there.
    pub const ON_DEMAND: u32 = 1 << 6;
    /// FLUSH for global visibility may target the region.
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    /// FLUSH for persistence may target the region.
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
}

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address in the registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// L_Key of the region.
    pub lkey: u32,
}

/// What a fast registration ([`WrOpcode::RegMr`], `struct ib_reg_wr` with
/// the MR's `iova` and `length` at posting time) applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FastReg {
    /// The region, a handle of the glue's (its table index).
    pub mr: u32,
    /// The key it takes (L_Key = R_Key); the low byte is the consumer's.
    pub key: u32,
    /// [`access`] bits.
    pub access: u32,
    /// First virtual address.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
}

/// What a memory window bind ([`WrOpcode::BindMw`], `ibv_mw_bind_info`
/// with the window's keys) applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MwBind {
    /// The window, named by its current R_Key.
    pub mw_key: u32,
    /// The R_Key it takes: the same index, the low byte the consumer's.
    pub new_key: u32,
    /// The region it is bound to (its L_Key); ignored by an unbind.
    pub mr_key: u32,
    /// The [`access`] rights it grants (remote read, write, atomic).
    pub access: u32,
    /// First address, in the region's address space.
    pub addr: u64,
    /// Length in bytes; 0 unbinds a type 1 window.
    pub length: u64,
}

/// What a send work request carries: a gather list or inline bytes, in one
/// storage (as the ring's union), so that a request of 32 SGEs or 512
/// inline bytes costs 512 bytes, not both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A gather list: the first `n` entries are used.
    Gather { list: [Sge; MAX_SGE], n: u8 },
    /// Inline bytes ([`send_flags::INLINE`]): the first `len` are used.
    Inline { bytes: [u8; MAX_INLINE], len: u16 },
}

impl Default for Payload {
    fn default() -> Self {
        Payload::Gather { list: [Sge::default(); MAX_SGE], n: 0 }
    }
}

impl Payload {
    /// A gather list of `list`, or None when it has more than [`MAX_SGE`]
    /// entries.
    pub fn gather(list: &[Sge]) -> Option<Self> {
        let mut all = [Sge::default(); MAX_SGE];
        all.get_mut(..list.len())?.copy_from_slice(list);
        Some(Payload::Gather { list: all, n: u8::try_from(list.len()).ok()? })
    }

    /// Inline bytes, or None when there are more than [`MAX_INLINE`].
    pub fn inline(data: &[u8]) -> Option<Self> {
        let mut bytes = [0u8; MAX_INLINE];
        bytes.get_mut(..data.len())?.copy_from_slice(data);
        Some(Payload::Inline { bytes, len: u16::try_from(data.len()).ok()? })
    }

    /// Whether the counts are within the maximums.
    pub fn in_bounds(&self) -> bool {
        match self {
            Payload::Gather { n, .. } => usize::from(*n) <= MAX_SGE,
            Payload::Inline { len, .. } => usize::from(*len) <= MAX_INLINE,
        }
    }
}

/// A send work request (`struct ibv_send_wr` minus the chaining pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWqe {
    /// Caller cookie returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: WrOpcode,
    /// [`send_flags`] bits.
    pub send_flags: u32,
    /// The gather list, or the inline bytes when [`send_flags::INLINE`]
    /// is set.
    pub data: Payload,
    /// Immediate data (host order) or, for SEND with invalidate, the R_Key
    /// to invalidate.
    pub imm_data: u32,
    /// RDMA and atomic target virtual address.
    pub remote_addr: u64,
    /// RDMA and atomic target R_Key.
    pub rkey: u32,
    /// Compare operand of compare-and-swap.
    pub compare_add: u64,
    /// Swap operand of compare-and-swap; add operand of fetch-and-add
    /// travels in `compare_add` as in `ibv_send_wr.wr.atomic`.
    pub swap: u64,
    /// UD: address handle index, opaque to the engine, returned with each
    /// transmitted packet.
    pub ah: u32,
    /// UD: destination QPN.
    pub remote_qpn: u32,
    /// UD: Q_Key (bit 31 set: use the QP's own Q_Key).
    pub remote_qkey: u32,
    /// [`WrOpcode::RegMr`]: the registration.
    pub reg: FastReg,
    /// [`WrOpcode::BindMw`]: the bind.
    pub bind: MwBind,
}

impl Default for SendWqe {
    fn default() -> Self {
        Self {
            wr_id: 0,
            opcode: WrOpcode::Send,
            send_flags: 0,
            data: Payload::default(),
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ah: 0,
            remote_qpn: 0,
            remote_qkey: 0,
            reg: FastReg::default(),
            bind: MwBind::default(),
        }
    }
}

impl SendWqe {
    /// The gather entries in use (none for inline data).
    pub fn sges(&self) -> &[Sge] {
        match &self.data {
            Payload::Gather { list, n } => list.get(..usize::from(*n)).unwrap_or(list),
            Payload::Inline { .. } => &[],
        }
    }

    /// The gather entries in use, to change.
    pub fn sges_mut(&mut self) -> &mut [Sge] {
        match &mut self.data {
            Payload::Gather { list, n } => {
                let n = usize::from(*n).min(list.len());
                list.get_mut(..n).unwrap_or_default()
            }
            Payload::Inline { .. } => &mut [],
        }
    }

    /// Replaces the gather list (None: more than [`MAX_SGE`] entries).
    pub fn set_sges(&mut self, list: &[Sge]) -> Option<()> {
        self.data = Payload::gather(list)?;
        Some(())
    }

    /// The inline bytes in use (none for a gather list).
    pub fn inline_data(&self) -> &[u8] {
        match &self.data {
            Payload::Inline { bytes, len } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            Payload::Gather { .. } => &[],
        }
    }

    /// Whether the payload is well formed: its counts within the maximums,
    /// inline bytes exactly when [`send_flags::INLINE`] is set.
    pub fn payload_ok(&self) -> bool {
        self.data.in_bounds() && self.is_inline() == matches!(self.data, Payload::Inline { .. })
    }

    /// Whether the payload is inline.
    pub fn is_inline(&self) -> bool {
        self.send_flags & send_flags::INLINE != 0
    }

    /// Message length in bytes (atomics: 8, local operations: 0), or `None`
    /// on overflow.
    pub fn length(&self) -> Option<u32> {
        if self.opcode.is_local() || self.opcode.is_placement() {
            return Some(0);
        }
        if self.opcode.is_atomic() {
            return Some(8);
        }
        if self.is_inline() {
            return u32::try_from(self.inline_data().len()).ok();
        }
        self.sges()
            .iter()
            .try_fold(0u32, |acc, s| acc.checked_add(s.length))
    }
}

/// A receive work request (`struct ibv_recv_wr` minus the chaining pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecvWqe {
    /// Caller cookie returned in the completion.
    pub wr_id: u64,
    /// Scatter list (the first `num_sge` entries are used).
    pub sg_list: [Sge; MAX_SGE],
    /// Entries used in `sg_list`.
    pub num_sge: u8,
}

impl RecvWqe {
    /// The scatter entries in use.
    pub fn sges(&self) -> &[Sge] {
        self.sg_list
            .get(..usize::from(self.num_sge))
            .unwrap_or(&self.sg_list)
    }

    /// Total buffer space, saturating at `u32::MAX`.
    pub fn length(&self) -> u32 {
        self.sges()
            .iter()
            .fold(0u32, |acc, s| acc.saturating_add(s.length))
    }
}

/// A work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cqe {
    /// The work request's cookie.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Vendor error (the AETH syndrome of a NAK, else 0).
    pub vendor_err: u32,
    /// Bytes transferred (receives: including the 40 GRH bytes on UD).
    pub byte_len: u32,
    /// Immediate data (host order), or the invalidated R_Key with
    /// [`wc_flags::WITH_INV`].
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// UD receives: the source QPN.
    pub src_qp: u32,
    /// [`wc_flags`] bits.
    pub wc_flags: u32,
    /// UD receives: P_Key index the packet matched.
    pub pkey_index: u16,
}
