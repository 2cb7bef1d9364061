// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: the layer's part of a QP object (its timer and work item,
//! set up before the driver's create and shut down in the layer's
//! destroy), and typed views of what the core passes to create, modify,
//! query and post.

use super::bindings as b;
use super::object::{Core, Counted, Live, Pd};
use super::vtable::Driver;
use super::wr::{sge_list, AhAttr, QpToken};
use super::Device;
use crate::transport::qp::{mask, Mtu, QpAttr, QpState};
use crate::transport::verbs::{send_flags, Payload, SendWqe, Sge, WrOpcode, MAX_INLINE, MAX_SGE};
use core::ffi::c_int;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::types::Opaque;

/// The layer's part of a QP: its timer and two work items (one on a
/// normal-priority workqueue, one on a high-priority one: the driver picks,
/// [`WorkPrio`]), whose callbacks call the driver's [`Driver::qp_timer`]
/// and [`Driver::qp_work`] with the QP's number, and that number (set by
/// the driver's create before the QP is reachable).
pub(crate) struct QpHooks {
    timer: Opaque<b::timer_list>,
    work: Opaque<b::work_struct>,
    work_hi: Opaque<b::work_struct>,
    qpn: AtomicU32,
}

/// Which of a QP's work items runs its next continuation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WorkPrio {
    /// At the priority of the processes (nice 0).
    Normal,
    /// Before them (a `WQ_HIGHPRI` worker, nice -20).
    High,
}

impl Core for b::ib_qp {
    type Extra = QpHooks;

    unsafe fn device<'a, T: Driver>(core: *mut Self) -> &'a Device<T> {
        // SAFETY: the caller passes a live QP of a device of driver `T`.
        unsafe { Device::<T>::from_ib((*core).device) }
    }
}

/// A counted reference to a QP: its timer, its work item, its number, and
/// the token its completions carry.
pub(crate) type QpRef = kernel::sync::aref::ARef<Counted<b::ib_qp>>;

impl Counted<b::ib_qp> {
    fn timer(&self) -> *mut b::timer_list {
        self.extra().timer.get()
    }

    fn work(&self) -> *mut b::work_struct {
        self.extra().work.get()
    }

    fn work_hi(&self) -> *mut b::work_struct {
        self.extra().work_hi.get()
    }

    /// Sets the QP's number (the driver's create, before the QP is in any
    /// table).
    pub(crate) fn set_qpn(&self, qpn: u32) {
        self.extra().qpn.store(qpn, Ordering::Relaxed);
    }

    /// The QP's number.
    pub(crate) fn qpn(&self) -> u32 {
        self.extra().qpn.load(Ordering::Relaxed)
    }

    /// What the QP's completions name.
    pub(crate) fn token(&self) -> QpToken {
        QpToken::of(self.core())
    }

    /// Arms the timer for `deadline_ns` (`ktime_get_ns` time); re-arming
    /// moves it. Ignored once the layer's destroy shut it down.
    pub(crate) fn arm_timer_ns(&self, deadline_ns: u64) {
        // SAFETY: set up before the driver's create (the type invariant:
        // the QP is alive while referenced).
        unsafe { b::ferroce_timer_arm_ns(self.timer(), deadline_ns) }
    }

    /// Cancels the timer (without waiting for a running callback).
    pub(crate) fn cancel_timer(&self) {
        // SAFETY: as above.
        unsafe { b::ferroce_timer_cancel(self.timer()) }
    }

    /// Stops the timer for good and waits for queued or running work items
    /// (process context: it sleeps). For the driver's destroy, once the QP
    /// is out of its tables and before what the callbacks read goes: a
    /// work item queued later would still run (the layer's destroy stops
    /// both again before the QP is freed).
    pub(crate) fn stop_hooks(&self) {
        // SAFETY: set up before the driver's create; the QP is alive (a
        // reference is held); the calls wait for running callbacks.
        unsafe {
            b::ferroce_timer_shutdown_sync(self.timer());
            b::ferroce_work_cancel_sync(self.work());
            b::ferroce_work_cancel_sync(self.work_hi());
        }
    }

    /// Delivers the affiliated asynchronous event `ev` to the QP's event
    /// handler. Call without the driver's lock: a kernel consumer's handler
    /// may call back into the driver (the core's handler of a process's QP
    /// queues the event for the process).
    pub(crate) fn event(&self, ev: QpEvent) {
        // SAFETY: the QP is alive (the type invariant: a reference is
        // held); the core set its handler and context before the driver's
        // create and keeps them while the QP lives.
        unsafe { b::ferroce_qp_event(self.core(), ev.core()) }
    }

    /// Queues the work item of priority `prio` (on a CPU other than this
    /// one when a process queues it). The two may both be queued: the
    /// driver's callback must allow two runs at once.
    pub(crate) fn queue_work(&self, prio: WorkPrio) {
        // SAFETY: both initialised before the driver's create; cancelled in
        // the layer's destroy before the QP is freed.
        unsafe {
            match prio {
                WorkPrio::Normal => b::ferroce_qp_work_queue(self.work()),
                WorkPrio::High => b::ferroce_qp_hi_work_queue(self.work_hi()),
            }
        }
    }
}

/// The affiliated asynchronous events a QP raises (IBTA 11.6.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum QpEvent {
    /// Local work queue catastrophic error.
    Fatal,
    /// Invalid request local work queue error.
    RequestError,
    /// Local access violation work queue error.
    AccessError,
    /// A QP on an SRQ is in ERR and will take no more WQEs from it.
    LastWqeReached,
    /// The send queue drained in SQD (asked for with `en_sqd_async_notify`).
    SqDrained,
}

impl QpEvent {
    /// Every event, in the order of [`QpEvent::bit`].
    pub(crate) const ALL: [QpEvent; 5] =
        [Self::Fatal, Self::RequestError, Self::AccessError, Self::LastWqeReached, Self::SqDrained];

    /// Its bit in a set of pending events.
    pub(crate) fn bit(self) -> u8 {
        1 << (self as u8)
    }

    fn core(self) -> b::ib_event_type {
        match self {
            Self::Fatal => b::ib_event_type_IB_EVENT_QP_FATAL,
            Self::RequestError => b::ib_event_type_IB_EVENT_QP_REQ_ERR,
            Self::AccessError => b::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
            Self::LastWqeReached => b::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
            Self::SqDrained => b::ib_event_type_IB_EVENT_SQ_DRAINED,
        }
    }
}

/// Sets up a new QP's timer and work item with `T`'s callbacks.
///
/// # Safety
/// `ibqp` is a QP the core allocated (zeroed) for the create in progress.
pub(super) unsafe fn init_hooks<T: Driver>(ibqp: *mut b::ib_qp) {
    // SAFETY: a live, zeroed object of this layer (the caller).
    let c = unsafe { Counted::of(ibqp) };
    // SAFETY: the timer and work item are ours, not yet in use.
    unsafe {
        b::ferroce_timer_setup(c.timer(), Some(qp_timer::<T>));
        b::ferroce_work_init(c.work(), Some(qp_work::<T>));
        b::ferroce_work_init(c.work_hi(), Some(qp_work_hi::<T>));
    }
}

/// Stops a QP's timer and work item for good, waiting for running
/// callbacks (process context).
///
/// # Safety
/// `ibqp` is a QP whose hooks [`init_hooks`] set up, in its destroy or
/// failed create, after the driver made it unreachable (nothing arms or
/// queues them again).
pub(super) unsafe fn shutdown_hooks(ibqp: *mut b::ib_qp) {
    // SAFETY: a live object of this layer (the caller).
    let c = unsafe { Counted::of(ibqp) };
    // SAFETY: set up by `init_hooks`; the calls wait for callbacks.
    unsafe {
        b::ferroce_timer_shutdown_sync(c.timer());
        b::ferroce_work_cancel_sync(c.work());
        b::ferroce_work_cancel_sync(c.work_hi());
    }
}

/// The QP whose hook `field` points into (`container_of`).
///
/// # Safety
/// `field` points at `offset` bytes into the `Counted<ib_qp>` of a live QP.
unsafe fn qp_of<'a, T: Driver>(field: *mut u8, offset: usize) -> (&'a Device<T>, u32) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let core = field.sub(offset).cast::<b::ib_qp>();
        (<b::ib_qp as Core>::device::<T>(core), Counted::of(core).qpn())
    }
}

/// Offsets of the hooks in a QP's counted header.
const TIMER_OFFSET: usize =
    core::mem::offset_of!(Counted<b::ib_qp>, extra) + core::mem::offset_of!(QpHooks, timer);
const WORK_OFFSET: usize = core::mem::offset_of!(Counted<b::ib_qp>, extra) + core::mem::offset_of!(QpHooks, work);
const WORK_HI_OFFSET: usize =
    core::mem::offset_of!(Counted<b::ib_qp>, extra) + core::mem::offset_of!(QpHooks, work_hi);

/// # Safety
/// Only the kernel calls it, for the timer or work item of a live
/// QP (both are shut down before the QP is freed).
unsafe extern "C" fn qp_timer<T: Driver>(t: *mut b::timer_list) {
    // SAFETY: the timer of a live QP (shut down before the QP is freed).
    let (dev, qpn) = unsafe { qp_of::<T>(t.cast(), TIMER_OFFSET) };
    T::qp_timer(dev, qpn);
}

/// # Safety
/// Only the kernel calls it, for the timer or work item of a live
/// QP (both are shut down before the QP is freed).
unsafe extern "C" fn qp_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: the work item of a live QP (cancelled before it is freed).
    let (dev, qpn) = unsafe { qp_of::<T>(w.cast(), WORK_OFFSET) };
    T::qp_work(dev, qpn, WorkPrio::Normal);
}

/// # Safety
/// As `qp_work`, for the high-priority work item.
unsafe extern "C" fn qp_work_hi<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: the high-priority work item of a live QP (cancelled before
    // it is freed).
    let (dev, qpn) = unsafe { qp_of::<T>(w.cast(), WORK_HI_OFFSET) };
    T::qp_work(dev, qpn, WorkPrio::High);
}

/// A live QP.
pub(crate) type Qp<'a, T> = Live<'a, b::ib_qp, T, <T as Driver>::Qp>;

impl<T: Driver, D> Live<'_, b::ib_qp, T, D> {
    /// Its number.
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: a live QP (the type invariant); set when it was created.
        unsafe { Counted::of(self.core_ptr()) }.qpn()
    }

    /// Whether a process made it (it posts through its rings).
    pub(crate) fn is_user(&self) -> bool {
        // SAFETY: a live QP.
        unsafe { b::ferroce_qp_is_user(self.core_ptr()) }
    }
}

/// The kind of QP asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum QpKind {
    Rc,
    Uc,
    Ud,
    /// The GSI QP (QP1), a UD QP of the RDMA core's CM.
    Gsi,
    /// Another kind (XRC, raw packet, driver-specific).
    Other,
}

/// A QP's queue sizes (`ib_qp_cap`).
#[derive(Clone, Copy, Default)]
pub(crate) struct QpCap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

impl QpCap {
    fn of(c: &b::ib_qp_cap) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }

    fn write(&self, c: &mut b::ib_qp_cap) {
        c.max_send_wr = self.max_send_wr;
        c.max_recv_wr = self.max_recv_wr;
        c.max_send_sge = self.max_send_sge;
        c.max_recv_sge = self.max_recv_sge;
        c.max_inline_data = self.max_inline_data;
    }
}

/// What a QP is created with (`ib_qp_init_attr`), for the create call.
///
/// # Invariants
/// `ibqp` is the QP being created, with `pd` (a live PD of `T`) set;
/// `raw`'s CQs and SRQ, when set, are live objects of `T` the core holds
/// for the call.
pub(crate) struct QpInit<'a, T: Driver> {
    raw: &'a mut b::ib_qp_init_attr,
    ibqp: *mut b::ib_qp,
    _p: PhantomData<T>,
}

impl<'a, T: Driver> QpInit<'a, T> {
    pub(crate) fn kind(&self) -> QpKind {
        match self.raw.qp_type {
            b::ib_qp_type_IB_QPT_RC => QpKind::Rc,
            b::ib_qp_type_IB_QPT_UC => QpKind::Uc,
            b::ib_qp_type_IB_QPT_UD => QpKind::Ud,
            b::ib_qp_type_IB_QPT_GSI => QpKind::Gsi,
            _ => QpKind::Other,
        }
    }

    /// Whether it asks for create flags or a receive WQ indirection table.
    pub(crate) fn wants_extensions(&self) -> bool {
        self.raw.create_flags != 0 || !self.raw.rwq_ind_tbl.is_null()
    }

    /// The PD it is created in.
    pub(crate) fn pd(&self) -> Pd<'a, T> {
        // SAFETY: the QP's PD, live (the type invariant).
        unsafe { Pd::<T>::from_core((*self.ibqp).pd) }
    }

    /// Its send and receive CQs (`None` when either is missing).
    pub(crate) fn cqs(&self) -> Option<(&'a T::Cq, &'a T::Cq)> {
        if self.raw.send_cq.is_null() || self.raw.recv_cq.is_null() {
            return None;
        }
        // SAFETY: live CQs of `T` (the type invariant).
        unsafe { Some((super::vtable::cq_data::<T>(self.raw.send_cq), super::vtable::cq_data::<T>(self.raw.recv_cq))) }
    }

    /// Its SRQ, if it takes receives from one.
    pub(crate) fn srq(&self) -> Option<&'a T::Srq> {
        // SAFETY: a live SRQ of `T` when set (the type invariant).
        (!self.raw.srq.is_null()).then(|| unsafe { super::vtable::srq_data::<T>(self.raw.srq) })
    }

    pub(crate) fn cap(&self) -> QpCap {
        QpCap::of(&self.raw.cap)
    }

    /// The sizes granted, which the core reads back.
    pub(crate) fn set_cap(&mut self, cap: &QpCap) {
        cap.write(&mut self.raw.cap);
    }

    /// Whether every send request completes (`IB_SIGNAL_ALL_WR`).
    pub(crate) fn sig_all(&self) -> bool {
        self.raw.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR
    }
}

/// The attributes of a Modify QP (`ib_qp_attr` and its mask), for the call.
pub(crate) struct QpAttrIn<'a> {
    raw: &'a b::ib_qp_attr,
    mask: u32,
}

impl QpAttrIn<'_> {
    /// The attribute mask (`IB_QP_*` bits, the engine's [`mask`]).
    pub(crate) fn mask(&self) -> u32 {
        self.mask
    }

    /// The engine's attributes; `EINVAL` for a state or MTU out of range.
    pub(crate) fn engine(&self) -> Result<QpAttr> {
        let (a, m) = (self.raw, self.mask);
        let state = |v: u32, bit: u32| -> Result<QpState> {
            if m & bit == 0 {
                return Ok(QpState::Reset);
            }
            QpState::from_u32(v).ok_or(EINVAL)
        };
        let narrow = |v: u32| u8::try_from(v).map_err(|_| EINVAL);
        Ok(QpAttr {
            qp_state: state(a.qp_state, mask::STATE)?,
            cur_qp_state: state(a.cur_qp_state, mask::CUR_STATE)?,
            path_mtu: if m & mask::PATH_MTU != 0 { Mtu::from_u32(a.path_mtu).ok_or(EINVAL)? } else { Mtu::default() },
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags as u32,
            pkey_index: a.pkey_index,
            port_num: if m & mask::PORT != 0 { narrow(a.port_num)? } else { 0 },
            ah: 0,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            en_sqd_async_notify: a.en_sqd_async_notify,
        })
    }

    /// The primary path's address ([`mask::AV`]).
    pub(crate) fn av(&self) -> Option<AhAttr<'_>> {
        // SAFETY: the core resolved the address's GID entry for the call
        // (`ib_modify_qp_with_udata` holds `sgid_attr`).
        (self.mask & mask::AV != 0).then(|| unsafe { AhAttr::from_raw(&self.raw.ah_attr) })
    }
}

// The engine's access bits of memory windows and FLUSH are the kernel's
// (IBTA 1.5 FLUSH rights on QPs and regions), passed through as they come.
const _: () = {
    use crate::transport::verbs::access;
    assert!(access::MW_BIND == b::ib_access_flags_IB_ACCESS_MW_BIND);
    assert!(access::ZERO_BASED == b::ib_access_flags_IB_ZERO_BASED);
    assert!(access::FLUSH_GLOBAL == b::ib_access_flags_IB_ACCESS_FLUSH_GLOBAL);
    assert!(access::FLUSH_PERSISTENT == b::ib_access_flags_IB_ACCESS_FLUSH_PERSISTENT);
};

/// What Query QP answers.
pub(crate) struct QpQuery {
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    pub(crate) sq_draining: bool,
    pub(crate) cap: QpCap,
    pub(crate) sig_all: bool,
}

/// A kernel consumer's send work request, for one call.
pub(crate) struct SendWr<'a, T: Driver> {
    raw: *const b::ib_send_wr,
    _p: PhantomData<(&'a b::ib_send_wr, T)>,
}

/// A REG_MR request's region and the key, access and range to register.
pub(crate) struct RegWr<'a, T: Driver> {
    pub(crate) mr: &'a T::Mr,
    /// Whether the MR is a memory-registration region (`IB_MR_TYPE_MEM_REG`).
    pub(crate) mem_reg: bool,
    pub(crate) key: u32,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
}

impl<'a, T: Driver> SendWr<'a, T> {
    fn wr(&self) -> &'a b::ib_send_wr {
        // SAFETY: a valid request of the list (`SendWrs`' invariant).
        unsafe { &*self.raw }
    }

    /// Whether it asks for its data inline.
    pub(crate) fn is_inline(&self) -> bool {
        self.wr().send_flags as u32 & send_flags::INLINE != 0
    }

    /// Copies the inline payload into `out`: from the process's memory for
    /// a process's call (`user`), from kernel memory the consumer owns
    /// otherwise. `EINVAL` when longer than `out`.
    pub(crate) fn gather_inline(&self, user: bool, out: &mut [u8; MAX_INLINE]) -> Result<u16> {
        let w = self.wr();
        let n = usize::try_from(w.num_sge).map_err(|_| EINVAL)?;
        if n > MAX_SGE {
            return Err(EINVAL);
        }
        let mut at = 0usize;
        for i in 0..n {
            // SAFETY: the core passes `num_sge` entries.
            let s = unsafe { &*w.sg_list.add(i) };
            let len = s.length as usize;
            let dst = out.get_mut(at..at.checked_add(len).ok_or(EINVAL)?).ok_or(EINVAL)?;
            if user {
                // SAFETY: `dst` has `len` bytes; copy_from_user checks the
                // user address.
                if unsafe { b::ferroce_copy_from_user(dst.as_mut_ptr().cast(), s.addr, len) } != 0 {
                    return Err(EFAULT);
                }
            } else if len > 0 {
                // SAFETY: a kernel consumer names kernel memory it owns for
                // the call, `len` bytes.
                unsafe { core::ptr::copy_nonoverlapping(s.addr as usize as *const u8, dst.as_mut_ptr(), len) };
            }
            at += len;
        }
        u16::try_from(at).map_err(|_| EINVAL)
    }

    /// The engine's request: everything but the AH of a UD send and the
    /// region of a REG_MR ([`Self::ud`], [`Self::reg`]); the scatter list
    /// is refused (`EINVAL`) when longer than `max_sge`, and left empty for
    /// inline and local requests.
    pub(crate) fn wqe(&self, max_sge: u32) -> Result<SendWqe> {
        let w = self.wr();
        // Fast registration and local invalidate come from kernel
        // consumers only: a process's QP posts through its ring, whose
        // opcodes `from_u32` (without them) decodes.
        let opcode = match w.opcode {
            b::ib_wr_opcode_IB_WR_REG_MR => WrOpcode::RegMr,
            b::ib_wr_opcode_IB_WR_LOCAL_INV => WrOpcode::LocalInv,
            op => WrOpcode::from_u32(op).ok_or(EINVAL)?,
        };
        let flags = w.send_flags as u32;
        let (sg_list, num_sge) = if self.is_inline() || opcode.is_local() {
            ([Sge::default(); MAX_SGE], 0)
        } else {
            // SAFETY: the core passes `num_sge` entries.
            unsafe { sge_list(w.sg_list, w.num_sge, max_sge)? }
        };
        let mut wqe = SendWqe {
            // SAFETY: both union members are plain integers/pointers.
            wr_id: unsafe { w.__bindgen_anon_1.wr_id },
            opcode,
            send_flags: flags & (send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE),
            data: Payload::Gather { list: sg_list, n: num_sge },
            ..SendWqe::default()
        };
        wqe.imm_data = match opcode {
            // SAFETY: a union of plain integers; either member is set.
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => u32::from_be(unsafe { w.ex.imm_data }),
            // SAFETY: as above.
            WrOpcode::SendWithInv | WrOpcode::LocalInv => unsafe { w.ex.invalidate_rkey },
            _ => 0,
        };
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                // SAFETY: RDMA requests are `ib_rdma_wr`s (the core copies
                // a process's with that layout too).
                let r = unsafe { &*self.raw.cast::<b::ib_rdma_wr>() };
                wqe.remote_addr = r.remote_addr;
                wqe.rkey = r.rkey;
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                // SAFETY: atomic requests are `ib_atomic_wr`s.
                let a = unsafe { &*self.raw.cast::<b::ib_atomic_wr>() };
                wqe.remote_addr = a.remote_addr;
                wqe.rkey = a.rkey;
                wqe.compare_add = a.compare_add;
                wqe.swap = a.swap;
            }
            _ => {}
        }
        Ok(wqe)
    }

    /// A UD request's AH (`None`: none given), remote QPN and Q_Key.
    ///
    /// Only for requests posted to a UD QP (they are `ib_ud_wr`s).
    pub(crate) fn ud(&self) -> (Option<&'a T::Ah>, u32, u32) {
        // SAFETY: the caller's QP is UD: the core's requests are `ib_ud_wr`s.
        let ud = unsafe { &*self.raw.cast::<b::ib_ud_wr>() };
        // SAFETY: the core holds a named AH for the call; a live AH of `T`.
        let ah = (!ud.ah.is_null()).then(|| unsafe { super::vtable::ah_data::<T>(ud.ah) });
        (ah, ud.remote_qpn, ud.remote_qkey)
    }

    /// A REG_MR request's region and what to register (`None`: not a
    /// REG_MR, or no region named).
    pub(crate) fn reg(&self) -> Option<RegWr<'a, T>> {
        if self.wr().opcode != b::ib_wr_opcode_IB_WR_REG_MR {
            return None;
        }
        // SAFETY: an IB_WR_REG_MR request is an `ib_reg_wr`.
        let r = unsafe { &*self.raw.cast::<b::ib_reg_wr>() };
        if r.mr.is_null() {
            return None;
        }
        // SAFETY: the consumer's MR of this device, alive while the request
        // is posted (the core's contract).
        let (ib, mr) = unsafe { (&*r.mr, super::vtable::mr_data::<T>(r.mr)) };
        Some(RegWr {
            mr,
            mem_reg: ib.type_ == b::ib_mr_type_IB_MR_TYPE_MEM_REG,
            key: r.key,
            access: r.access as u32,
            iova: ib.iova,
            length: ib.length,
        })
    }
}

/// A kernel consumer's list of send work requests, and where posting
/// stopped.
///
/// # Invariants
/// `cur` is null or a valid request of the core's list (whose `next` chain
/// is valid), of the layout its opcode and the QP's type say, for `'a`.
pub(crate) struct SendWrs<'a, T: Driver> {
    cur: *const b::ib_send_wr,
    _p: PhantomData<(&'a b::ib_send_wr, T)>,
}

impl<'a, T: Driver> SendWrs<'a, T> {
    /// # Safety
    /// `first` is null or the first of the core's valid list for `'a`.
    pub(super) unsafe fn from_raw(first: *const b::ib_send_wr) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { cur: first, _p: PhantomData }
    }

    /// Whether the list is empty (a process's doorbell).
    pub(crate) fn is_empty(&self) -> bool {
        self.cur.is_null()
    }

    /// Calls `post` on each request in order; stops at the first error,
    /// leaving the list at the request that failed.
    pub(crate) fn each(&mut self, mut post: impl FnMut(&SendWr<'a, T>) -> Result) -> Result {
        while !self.cur.is_null() {
            post(&SendWr { raw: self.cur, _p: PhantomData })?;
            // SAFETY: a valid request (the type invariant).
            // INVARIANT: its `next` is null or valid.
            self.cur = unsafe { (*self.cur).next };
        }
        Ok(())
    }

    /// The request posting stopped at (for the core's `bad_wr`).
    pub(super) fn failed(&self) -> *const b::ib_send_wr {
        self.cur
    }
}

/// Writes a Query QP answer into the core's structures.
pub(super) fn write_query(q: &QpQuery, o: &mut b::ib_qp_attr, i: &mut b::ib_qp_init_attr) {
    let a = &q.attr;
    o.qp_state = q.state as u32;
    o.cur_qp_state = q.state as u32;
    o.path_mtu = a.path_mtu as u32;
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.qp_access_flags = a.qp_access_flags as c_int;
    o.pkey_index = a.pkey_index;
    o.port_num = 1;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    o.min_rnr_timer = a.min_rnr_timer;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.en_sqd_async_notify = a.en_sqd_async_notify;
    o.sq_draining = u8::from(q.sq_draining);
    q.cap.write(&mut o.cap);
    i.cap = o.cap;
    i.sq_sig_type = if q.sig_all { b::ib_sig_type_IB_SIGNAL_ALL_WR } else { b::ib_sig_type_IB_SIGNAL_REQ_WR };
}

impl<'a, T: Driver> QpInit<'a, T> {
    /// # Safety
    /// As the type invariant says.
    pub(super) unsafe fn from_raw(raw: &'a mut b::ib_qp_init_attr, ibqp: *mut b::ib_qp) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { raw, ibqp, _p: PhantomData }
    }
}

impl<'a> QpAttrIn<'a> {
    pub(super) fn new(raw: &'a b::ib_qp_attr, mask: u32) -> Self {
        Self { raw, mask }
    }
}
