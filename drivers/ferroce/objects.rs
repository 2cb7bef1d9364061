// SPDX-License-Identifier: GPL-2.0

//! The verbs objects not yet behind the layer's `Driver` trait (QP, MR)
//! and their datapath verbs (post_send, post_recv): the RDMA core's
//! callbacks, turning its C structures into the transport engine's work
//! requests and back.
//!
//! Objects other than MRs live in memory the RDMA core allocates with our
//! sizes (`size_ib_*` in the device ops, core structure first); their
//! mutable state lives in the device's tables (`state.rs`), reached under
//! the device lock.

use crate::rdma::bindings as b;
use crate::net::{self, Notify};
use crate::quota::{self, Account, Charge, Kind};
use crate::driver::Ferroce;
use crate::rdma::vtable::{ah_data, cq_data, pd_data, srq_data, ucontext_data};
use crate::rdma::mmap::UserRing;
use crate::rdma::wr::{sge_list, QpToken};
use crate::rdma::udata::Udata;
use crate::rdma::wr::AhAttr;
use crate::rdma::{eopnotsupp, errno, FerroceDevice};
use crate::rings::QpRings;
use crate::state::{
    Returned, FastMr, MrEntry, MrKind, QpEntry, Slots, GSI_QPN,
    MAX_FAST_PAGES, MAX_FAST_PAGE_SIZE, MAX_QP_WR, PAGE_SIZE, SRQ_QP_SLOTS,
};
use crate::transport::engine::{Qp, QpConfig, RecvSlot, SendSlot};
use crate::transport::qp::{mask, Mtu, QpAttr, QpState, QpType};
use crate::transport::verbs::{self as ev, send_flags, FastReg, RecvWqe, SendWqe, Sge, WcOpcode, WrOpcode, MAX_INLINE, MAX_SGE};
use core::ffi::c_int;
use core::ptr::null_mut;
use kernel::prelude::*;
use kernel::sync::Arc;

#[repr(C)]
pub(crate) struct FerroceQp {
    ib: b::ib_qp,
    timer: b::timer_list,
    work: b::work_struct,
    /// As for `FerrocePd::charge`.
    charge: Option<Charge>,
}

/// The device and QPN of a QP's work item.
///
/// # Safety
/// `w` must be the `work` of a live FerroceQp.
pub(crate) unsafe fn qp_of_work<'a>(w: *mut b::work_struct) -> (&'a FerroceDevice, u32) {
    // SAFETY: guaranteed by the caller (container_of).
    unsafe {
        let qp = w.byte_sub(core::mem::offset_of!(FerroceQp, work)).cast::<FerroceQp>();
        (dev_of((*qp).ib.device), (*qp).ib.qp_num)
    }
}

/// The device and QPN of a QP's timer.
///
/// # Safety
/// `t` must be the `timer` of a live FerroceQp.
pub(crate) unsafe fn qp_of_timer<'a>(t: *mut b::timer_list) -> (&'a FerroceDevice, u32) {
    // SAFETY: guaranteed by the caller (container_of).
    unsafe {
        let qp = t.byte_sub(core::mem::offset_of!(FerroceQp, timer)).cast::<FerroceQp>();
        (dev_of((*qp).ib.device), (*qp).ib.qp_num)
    }
}

/// MRs are allocated by the driver (the core only allocates the others).
#[repr(C)]
pub(crate) struct FerroceMr {
    ib: b::ib_mr,
    umem: *mut b::ib_umem,
    /// Its index in the device's region table (the key's upper 24 bits,
    /// which the consumer's key byte of a fast region does not change).
    index: u32,
    /// Fast regions (`alloc_mr`): the page list `ib_sg_to_pages` builds
    /// through `set_page` (`max_num_sg` entries, `nstaged` used), moved
    /// into the table under the lock when complete. Empty for the others.
    staged: KVec<u64>,
    nstaged: usize,
    /// Its share of its PD's user's quota (`None`: a kernel region).
    charge: Option<Charge>,
}

// The engine's values are the kernel's, which poll_cq and post_send pass
// through.
const _: () = {
    assert!(WcOpcode::RegMr as u32 == b::ib_wc_opcode_IB_WC_REG_MR);
    assert!(WcOpcode::LocalInv as u32 == b::ib_wc_opcode_IB_WC_LOCAL_INV);
    assert!(WrOpcode::RegMr as u32 == b::ib_wr_opcode_IB_WR_REG_MR);
    assert!(WrOpcode::LocalInv as u32 == b::ib_wr_opcode_IB_WR_LOCAL_INV);
};

const _: () = {
    assert!(core::mem::offset_of!(FerroceQp, ib) == 0);
    assert!(core::mem::offset_of!(FerroceMr, ib) == 0);
};

pub(crate) const SIZE_QP: usize = core::mem::size_of::<FerroceQp>();


/// `ERR_PTR(e)`.
fn err_ptr<T>(e: Error) -> *mut T {
    e.to_errno() as isize as *mut T
}

/// The device of a core object.
///
/// # Safety
/// `ibdev` must be the `device` of a live ferroce object.
unsafe fn dev_of<'a>(ibdev: *mut b::ib_device) -> &'a FerroceDevice {
    // SAFETY: guaranteed by the caller.
    unsafe { FerroceDevice::from_ib(ibdev) }
}

/// A process's verbs call: refuses driver input (ferroce's commands carry
/// none) and answers the user context that rings are made in; None for a
/// kernel caller.
///
/// # Safety
/// `udata` is null or the core's udata for the call.
unsafe fn user_call(udata: *mut b::ib_udata) -> Result<Option<*mut b::ib_ucontext>> {
    if udata.is_null() {
        return Ok(None);
    }
    // SAFETY: guaranteed by the caller.
    unsafe {
        if b::ferroce_udata_inlen(udata) != 0 {
            return Err(EINVAL);
        }
        let uctx = b::ferroce_udata_ucontext(udata);
        if uctx.is_null() {
            return Err(EINVAL);
        }
        Ok(Some(uctx))
    }
}

// --- PD and AH (driver/pd.rs, driver/ah.rs) ------------------------------------

/// The PD handle the engine and MRs use.
///
/// # Safety
/// `ibpd` must be a live ferroce PD.
unsafe fn pd_handle(ibpd: *mut b::ib_pd) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { pd_data::<Ferroce>(ibpd) }.handle
}

/// The account a PD's objects are charged to (`None`: a kernel PD).
///
/// # Safety
/// `ibpd` must be a live ferroce PD.
unsafe fn pd_account<'a>(ibpd: *mut b::ib_pd) -> Option<&'a Arc<Account>> {
    // SAFETY: guaranteed by the caller.
    unsafe { pd_data::<Ferroce>(ibpd) }.account()
}

/// Writes a new object's charge in place, as the last step of its
/// successful creation.
///
/// # Safety
/// `slot` is the `charge` field of an object the core allocated zeroed
/// for this create call, not yet written: all zeroes is not a valid
/// `Option<Charge>` to drop, so it is written, never assigned.
unsafe fn set_charge(slot: *mut Option<Charge>, charge: Option<Charge>) {
    // SAFETY: guaranteed by the caller.
    unsafe { slot.write(charge) }
}

/// Takes a destroyed object's charge (given back when dropped).
///
/// # Safety
/// `slot` is the `charge` field of an object whose create succeeded (so
/// [`set_charge`] wrote it), not used again after its destroy.
unsafe fn take_charge(slot: *mut Option<Charge>) -> Option<Charge> {
    // SAFETY: guaranteed by the caller.
    unsafe { slot.replace(None) }
}

// --- QP ------------------------------------------------------------------------

/// The IB MTU of the device's port now.
fn port_mtu(dev: &FerroceDevice) -> Mtu {
    let e = crate::rdma::ib_mtu_from_bytes(dev.ndev_mtu().saturating_sub(crate::device::ROCE_OVERHEAD));
    Mtu::from_u32(e).unwrap_or(Mtu::Mtu256)
}

pub(crate) unsafe extern "C" fn create_qp(
    ibqp: *mut b::ib_qp,
    init: *mut b::ib_qp_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: the core passes a zeroed QP of our size with device, pd and
    // CQs set, and a valid init attribute it reads back our caps from.
    errno(unsafe {
        (|| {
            let uctx = user_call(udata)?;
            let ia = &mut *init;
            let dev = dev_of((*ibqp).device);
            let (gsi, ty) = match ia.qp_type {
                b::ib_qp_type_IB_QPT_UD => (false, QpType::Ud),
                b::ib_qp_type_IB_QPT_GSI => (true, QpType::Ud),
                b::ib_qp_type_IB_QPT_RC => (false, QpType::Rc),
                _ => return Err(eopnotsupp()),
            };
            if ia.create_flags != 0 || !ia.rwq_ind_tbl.is_null() {
                return Err(eopnotsupp());
            }
            let srq = if ia.srq.is_null() { None } else { Some(srq_data::<Ferroce>(ia.srq).index as usize) };
            if srq.is_some() && ty != QpType::Rc {
                // UD QPs take SRQ receives too in some HCAs; ferroce keeps
                // SRQs to RC (what ibv_srq_pingpong and rdma_cm servers use).
                return Err(eopnotsupp());
            }
            let cap = &mut ia.cap;
            if cap.max_send_wr > MAX_QP_WR
                || cap.max_recv_wr > MAX_QP_WR
                || cap.max_send_sge as usize > MAX_SGE
                || cap.max_recv_sge as usize > MAX_SGE
                || cap.max_inline_data as usize > MAX_INLINE
                || ia.send_cq.is_null()
                || ia.recv_cq.is_null()
            {
                return Err(EINVAL);
            }
            let pd = pd_handle((*ibqp).pd);
            // Given back (dropped) if anything below fails.
            let charge = quota::charge(uctx.map(|u| &ucontext_data::<Ferroce>(u).account), Kind::Qp)?;
            let mtu = port_mtu(dev);
            // A process's QP gets its rings (power-of-two sizes: the
            // granted caps are what the rings hold) and learns where they
            // are before the QP exists.
            let rings = match uctx {
                None => None,
                Some(_) => {
                    let call = Udata::<Ferroce>::from_raw(udata);
                    let sq = UserRing::new(&call, cap.max_send_wr, b::FERROCE_SQ_WQE_SIZE as usize)?;
                    let rq = match srq {
                        Some(_) => None,
                        None => Some(UserRing::new(&call, cap.max_recv_wr, b::FERROCE_RQ_WQE_SIZE as usize)?),
                    };
                    let empty = b::ferroce_ring_map { offset: 0, map_len: 0, entries: 0 };
                    let ud_max_msg = if ty == QpType::Ud { mtu.bytes() } else { 0 };
                    let resp = b::ferroce_create_qp_resp {
                        sq: sq.map(),
                        rq: rq.as_ref().map_or(empty, |r| r.map()),
                        ud_max_msg,
                        reserved: 0,
                    };
                    Udata::<Ferroce>::from_raw(udata).respond(&resp)?;
                    cap.max_send_wr = sq.entries();
                    if let Some(r) = &rq {
                        cap.max_recv_wr = r.entries();
                    }
                    Some(QpRings::new(sq, rq, ud_max_msg, pd))
                }
            };
            let mut sq = KVVec::with_capacity(cap.max_send_wr as usize, GFP_KERNEL_ACCOUNT)?;
            for _ in 0..cap.max_send_wr {
                sq.push(SendSlot::default(), GFP_KERNEL_ACCOUNT)?;
            }
            let rq_slots = if srq.is_some() { SRQ_QP_SLOTS } else { cap.max_recv_wr };
            let mut rq = KVVec::with_capacity(rq_slots as usize, GFP_KERNEL_ACCOUNT)?;
            for _ in 0..rq_slots {
                rq.push(RecvSlot::default(), GFP_KERNEL_ACCOUNT)?;
            }
            let (scq, rcq) = (cq_data::<Ferroce>(ia.send_cq).index as usize, cq_data::<Ferroce>(ia.recv_cq).index as usize);
            // Allocated before the lock: a failure under it would drop the
            // rings there, and unmapping them may sleep.
            let boxed = KBox::<QpEntry>::new_uninit(GFP_KERNEL_ACCOUNT)?;
            let srq_spare = if srq.is_some() { Some(Returned::new()?) } else { None };
            let mut st = dev.state.lock();
            let qpn = st.alloc_qpn(gsi, uctx.is_some()).ok_or(if gsi { EBUSY } else { ENOMEM })?;
            let mut qp = Qp::new(
                QpConfig {
                    qpn: qpn as u32,
                    qp_type: ty,
                    pd,
                    sq_sig_all: ia.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR,
                },
                Slots(sq),
                Slots(rq),
            );
            if ty == QpType::Ud {
                qp.set_path_mtu(mtu);
            }
            let timer = core::ptr::addr_of_mut!((*ibqp.cast::<FerroceQp>()).timer);
            b::ferroce_timer_setup(timer, Some(net::qp_timer));
            let work = core::ptr::addr_of_mut!((*ibqp.cast::<FerroceQp>()).work);
            b::ferroce_work_init(work, Some(net::qp_work));
            let entry = KBox::write(
                boxed,
                QpEntry {
                    qp,
                    token: QpToken::of(ibqp),
                    send_cq: scq,
                    recv_cq: rcq,
                    path: None,
                    max_send_wr: cap.max_send_wr,
                    max_recv_wr: cap.max_recv_wr,
                    max_send_sge: cap.max_send_sge,
                    max_recv_sge: cap.max_recv_sge,
                    sig_all: ia.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR,
                    timer,
                    work,
                    armed_for: None,
                    tx_busy: false,
                    tx_again: false,
                    tx_max_psn: None,
                    ud_direct: false,
                    srq,
                    srq_spare,
                    pd,
                    rings,
                },
            );
            for i in [scq, rcq] {
                if let Some(Some(c)) = st.cqs.get_mut(i) {
                    c.users += 1;
                }
            }
            if let Some(Some(x)) = srq.and_then(|i| st.srqs.get_mut(i)) {
                x.users += 1;
            }
            if let Some(slot) = st.qps.get_mut(qpn) {
                *slot = Some(entry);
            }
            (*ibqp).qp_num = qpn as u32;
            cap.max_inline_data = MAX_INLINE as u32;
            set_charge(core::ptr::addr_of_mut!((*ibqp.cast::<FerroceQp>()).charge), charge);
            Ok(())
        })()
    })
}

/// # Safety
/// `ibqp` must be a live ferroce QP.
unsafe fn qpn_of(ibqp: *mut b::ib_qp) -> u32 {
    // SAFETY: guaranteed by the caller.
    unsafe { (*ibqp).qp_num }
}

fn engine_attr(a: &b::ib_qp_attr, m: u32) -> Result<QpAttr> {
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
        path_mtu: if m & mask::PATH_MTU != 0 {
            Mtu::from_u32(a.path_mtu).ok_or(EINVAL)?
        } else {
            Mtu::default()
        },
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

pub(crate) unsafe extern "C" fn modify_qp(
    ibqp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    attr_mask: c_int,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: a QP from `create_qp` and a valid attribute structure.
    errno(unsafe {
        (|| {
            Udata::<Ferroce>::from_raw(udata).refuse_driver_data()?;
            let dev = dev_of((*ibqp).device);
            let qpn = qpn_of(ibqp);
            let mut m = attr_mask as u32;
            // Bits beyond what verbs define for RC/UD (rate limit, ...).
            if m & !0x1f_ffff != 0 {
                return Err(eopnotsupp());
            }
            let mut a = engine_attr(&*attr, m)?;
            if m & mask::PORT != 0 && a.port_num != 1 {
                return Err(EINVAL);
            }
            if m & mask::PKEY_INDEX != 0 && a.pkey_index != 0 {
                return Err(EINVAL);
            }
            // The GSI QP's port comes from creation, not from Modify QP.
            if qpn as usize == GSI_QPN && m & mask::STATE != 0 && a.qp_state == QpState::Init {
                m |= mask::PORT;
                a.port_num = 1;
            }
            let mtu = port_mtu(dev);
            if m & mask::PATH_MTU != 0 && a.path_mtu as u32 > mtu as u32 {
                // The path MTU cannot exceed what the port carries.
                return Err(EINVAL);
            }
            let path = if m & mask::AV != 0 { Some(AhAttr::from_raw(&(*attr).ah_attr).roce_av()?) } else { None };
            // A reset may give an SRQ's WQE back (`QpEntry::give_back`),
            // using up the QP's node: the next one, before the lock.
            let reset = m & mask::STATE != 0 && a.qp_state == QpState::Reset;
            let mut spare = if reset { Some(Returned::new()?) } else { None };
            let mut notify = Notify::new();
            let ret = {
                let mut st = dev.state.lock();
                let st = &mut *st;
                let e = st.qps.get_mut(qpn as usize).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
                if path.is_some() && e.qp.qp_type() != QpType::Rc {
                    return Err(EINVAL);
                }
                let unfinished = if reset { e.qp.unfinished_recv() } else { None };
                let r = e.qp.modify(&a, m).map_err(|e| Error::from_errno(e.errno()));
                if r.is_ok() {
                    if reset {
                        e.give_back(unfinished, &mut st.srqs);
                        if e.srq.is_some() && e.srq_spare.is_none() {
                            e.srq_spare = spare.take();
                        }
                    }
                    if e.qp.qp_type() == QpType::Ud {
                        e.qp.set_path_mtu(mtu);
                    }
                    if path.is_some() {
                        e.path = path;
                    }
                    e.arm_timer();
                }
                net::drain(dev, st, qpn, 0, &mut notify);
                r
            };
            notify.run(dev);
            if ret.is_ok() {
                net::kick(dev, qpn, net::KICK_BUDGET_TASK);
            }
            ret
        })()
    })
}

pub(crate) unsafe extern "C" fn query_qp(
    ibqp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    _mask: c_int,
    init: *mut b::ib_qp_init_attr,
) -> c_int {
    // SAFETY: a QP from `create_qp`; the core's output structures.
    unsafe {
        let dev = dev_of((*ibqp).device);
        let mut st = dev.state.lock();
        let Some(e) = st.qp(qpn_of(ibqp)) else {
            return EINVAL.to_errno();
        };
        let q = e.qp.attr();
        let o = &mut *attr;
        o.qp_state = e.qp.state() as u32;
        o.cur_qp_state = e.qp.state() as u32;
        o.path_mtu = q.path_mtu as u32;
        o.qkey = q.qkey;
        o.rq_psn = q.rq_psn;
        o.sq_psn = q.sq_psn;
        o.dest_qp_num = q.dest_qp_num;
        o.qp_access_flags = q.qp_access_flags as c_int;
        o.pkey_index = q.pkey_index;
        o.port_num = 1;
        o.timeout = q.timeout;
        o.retry_cnt = q.retry_cnt;
        o.rnr_retry = q.rnr_retry;
        o.min_rnr_timer = q.min_rnr_timer;
        o.max_rd_atomic = q.max_rd_atomic;
        o.max_dest_rd_atomic = q.max_dest_rd_atomic;
        o.en_sqd_async_notify = q.en_sqd_async_notify;
        o.sq_draining = u8::from(e.qp.state() == QpState::Sqd && !e.qp.is_send_idle());
        o.cap.max_send_wr = e.max_send_wr;
        o.cap.max_recv_wr = e.max_recv_wr;
        o.cap.max_send_sge = e.max_send_sge;
        o.cap.max_recv_sge = e.max_recv_sge;
        o.cap.max_inline_data = MAX_INLINE as u32;
        let i = &mut *init;
        i.cap = o.cap;
        i.sq_sig_type = if e.sig_all {
            b::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            b::ib_sig_type_IB_SIGNAL_REQ_WR
        };
    }
    0
}

pub(crate) unsafe extern "C" fn destroy_qp(ibqp: *mut b::ib_qp, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: a QP from `create_qp`; the entry is dropped after the lock.
    unsafe {
        let dev = dev_of((*ibqp).device);
        let entry = {
            let mut st = dev.state.lock();
            let mut entry = st.qps.get_mut(qpn_of(ibqp) as usize).and_then(|s| s.take());
            if let Some(e) = &entry {
                for i in [e.send_cq, e.recv_cq] {
                    if let Some(Some(c)) = st.cqs.get_mut(i) {
                        c.users = c.users.saturating_sub(1);
                        c.purge_qp(QpToken::of(ibqp));
                    }
                }
                if let Some(Some(x)) = e.srq.and_then(|i| st.srqs.get_mut(i)) {
                    x.users = x.users.saturating_sub(1);
                }
            }
            if let Some(e) = entry.as_deref_mut() {
                let w = e.qp.unfinished_recv();
                e.give_back(w, &mut st.srqs);
            }
            entry
        };
        // Out of the table, nothing re-arms the timer; wait for a running
        // callback and keep it from ever firing again.
        if let Some(e) = &entry {
            b::ferroce_timer_shutdown_sync(e.timer);
            b::ferroce_work_cancel_sync(e.work);
        }
        drop(entry);
        drop(take_charge(core::ptr::addr_of_mut!((*ibqp.cast::<FerroceQp>()).charge)));
    }
    0
}

// --- MR ------------------------------------------------------------------------

/// Access bits ferroce implements; anything else outside the optional
/// range is refused.
const MR_ACCESS: u32 = ev::access::LOCAL_WRITE
    | ev::access::REMOTE_WRITE
    | ev::access::REMOTE_READ
    | ev::access::REMOTE_ATOMIC;

fn check_access(access: c_int) -> Result<u32> {
    let a = access as u32;
    if a & !(MR_ACCESS | b::ib_access_flags_IB_ACCESS_OPTIONAL) != 0 {
        return Err(eopnotsupp());
    }
    let a = a & MR_ACCESS;
    // IBTA: remote write or atomic access requires local write.
    if a & (ev::access::REMOTE_WRITE | ev::access::REMOTE_ATOMIC) != 0 && a & ev::access::LOCAL_WRITE == 0 {
        return Err(EINVAL);
    }
    Ok(a)
}

pub(crate) unsafe extern "C" fn reg_user_mr(
    ibpd: *mut b::ib_pd,
    start: u64,
    length: u64,
    virt: u64,
    access: c_int,
    dmah: *mut b::ib_dmah,
    udata: *mut b::ib_udata,
) -> *mut b::ib_mr {
    // SAFETY: a PD from `alloc_pd`; the umem pins the user pages until
    // `dereg_mr` releases it, after removing the region from the table.
    let r = unsafe {
        (|| -> Result<*mut b::ib_mr> {
            Udata::<Ferroce>::from_raw(udata).refuse_driver_data()?;
            if !dmah.is_null() {
                return Err(eopnotsupp());
            }
            let acc = check_access(access)?;
            if length == 0 || virt.checked_add(length).is_none() || start.checked_add(length).is_none() {
                return Err(EINVAL);
            }
            let dev = dev_of((*ibpd).device);
            // Given back (dropped) if anything below fails.
            let charge = quota::charge(pd_account(ibpd), Kind::Mr)?;
            let offset = (start % PAGE_SIZE as u64) as usize;
            let npages = usize::try_from((offset as u64 + length).div_ceil(PAGE_SIZE as u64)).map_err(|_| EINVAL)?;
            let umem = kernel::error::from_err_ptr(b::ferroce_umem_get(dev.ib_ptr(), start, length, access))?;
            let release = |umem| b::ferroce_ib_umem_release(umem);
            let mut pages = KVVec::new();
            if let Err(e) = (|| -> Result {
                pages = KVVec::with_capacity(npages, GFP_KERNEL_ACCOUNT)?;
                for _ in 0..npages {
                    pages.push(null_mut(), GFP_KERNEL_ACCOUNT)?;
                }
                if b::ferroce_umem_pages(umem, pages.as_mut_ptr(), npages) != npages {
                    return Err(EFAULT);
                }
                Ok(())
            })() {
                release(umem);
                return Err(e);
            }
            let entry = MrEntry { pd: pd_handle(ibpd), access: acc, iova: virt, length, key: 0, kind: MrKind::User { pages, offset } };
            let mr = match new_mr(umem, KVec::new()).and_then(|mr| install_mr(dev, mr, entry)) {
                Ok(mr) => mr,
                Err(e) => {
                    release(umem);
                    return Err(e);
                }
            };
            (*mr).ib.iova = virt;
            (*mr).ib.length = length;
            (*mr).charge = charge;
            Ok(mr.cast())
        })()
    };
    r.unwrap_or_else(err_ptr)
}

pub(crate) unsafe extern "C" fn get_dma_mr(ibpd: *mut b::ib_pd, access: c_int) -> *mut b::ib_mr {
    // SAFETY: a PD from `alloc_pd` (the kernel's: user PDs cannot ask).
    let r = unsafe {
        (|| -> Result<*mut b::ib_mr> {
            let acc = check_access(access)?;
            let dev = dev_of((*ibpd).device);
            let entry = MrEntry { pd: pd_handle(ibpd), access: acc, iova: 0, length: u64::MAX, key: 0, kind: MrKind::Dma };
            Ok(install_mr(dev, new_mr(null_mut(), KVec::new())?, entry)?.cast())
        })()
    };
    r.unwrap_or_else(err_ptr)
}

/// A new region object (`umem` for registered user memory, `staged` the
/// page list of a fast region, else empty).
fn new_mr(umem: *mut b::ib_umem, staged: KVec<u64>) -> Result<KBox<FerroceMr>> {
    // SAFETY: `ib_mr` is plain data the core fills in; all zeroes is its
    // initial state (the core's own allocation is zeroed too).
    let ib = unsafe { core::mem::zeroed() };
    Ok(KBox::new(FerroceMr { ib, umem, index: 0, staged, nstaged: 0, charge: None }, GFP_KERNEL_ACCOUNT)?)
}

/// Enters `entry` into the device's region table and gives `mr` its keys
/// (lkey = rkey = the table's key; `index` its slot). ENOMEM when the table
/// is full; `mr` is then freed.
fn install_mr(dev: &FerroceDevice, mr: KBox<FerroceMr>, entry: MrEntry) -> Result<*mut FerroceMr> {
    let key = dev.state.lock().insert_mr(entry).ok_or(ENOMEM)?;
    let mr = KBox::into_raw(mr);
    // SAFETY: `mr` came from `KBox::into_raw` just above: valid and ours.
    unsafe {
        (*mr).index = key >> 8;
        (*mr).ib.lkey = key;
        (*mr).ib.rkey = key;
    }
    Ok(mr)
}

/// A zeroed page list of `n` entries.
fn page_list(n: usize) -> Result<KVec<u64>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        v.push(0u64, GFP_KERNEL_ACCOUNT)?;
    }
    Ok(v)
}

/// `ib_alloc_mr`: a fast-registration region of up to `max_num_sg` pages,
/// invalid until a REG_MR work request registers it. Only
/// `IB_MR_TYPE_MEM_REG` (no SG_GAPS or integrity regions).
pub(crate) unsafe extern "C" fn alloc_mr(ibpd: *mut b::ib_pd, mr_type: b::ib_mr_type, max_num_sg: u32) -> *mut b::ib_mr {
    // SAFETY: a PD from `alloc_pd` (`ib_alloc_mr` is a kernel verb).
    let r = unsafe {
        (|| -> Result<*mut b::ib_mr> {
            if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
                return Err(eopnotsupp());
            }
            if max_num_sg == 0 || max_num_sg > MAX_FAST_PAGES {
                return Err(EINVAL);
            }
            let n = max_num_sg as usize;
            let dev = dev_of((*ibpd).device);
            let pages = page_list(n)?;
            let staged = page_list(n)?;
            let fast = FastMr { pages, npages: 0, page_size: PAGE_SIZE as u64, first_off: 0, valid: false };
            let entry = MrEntry { pd: pd_handle(ibpd), access: 0, iova: 0, length: 0, key: 0, kind: MrKind::Fast(fast) };
            Ok(install_mr(dev, new_mr(null_mut(), staged)?, entry)?.cast())
        })()
    };
    r.unwrap_or_else(err_ptr)
}

/// `ib_sg_to_pages`' callback: appends one page address to the staged list.
unsafe extern "C" fn set_page(ibmr: *mut b::ib_mr, addr: u64) -> c_int {
    // SAFETY: called by `ib_sg_to_pages` from our `map_mr_sg`, for one of
    // our MRs, which the caller has to itself for the mapping (the core's
    // contract: a ULP does not map one MR twice at once).
    let mr = unsafe { &mut *ibmr.cast::<FerroceMr>() };
    match mr.staged.get_mut(mr.nstaged) {
        Some(p) => {
            *p = addr;
            mr.nstaged += 1;
            0
        }
        None => ENOMEM.to_errno(),
    }
}

/// `ib_map_mr_sg`: the page list of a fast region, built by the core's
/// `ib_sg_to_pages` (which sets the MR's iova and length). ferroce's DMA
/// addresses are kernel virtual addresses (no dma_device: the core's
/// virtual DMA), so each page is `page_size` contiguous kernel bytes. The
/// list takes effect for the next REG_MR; returns the elements mapped.
pub(crate) unsafe extern "C" fn map_mr_sg(
    ibmr: *mut b::ib_mr,
    sg: *mut b::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut u32,
) -> c_int {
    // SAFETY: an MR of ours (the core calls this for `alloc_mr`'s regions,
    // which have a staged list; others are refused) and the ULP's mapped
    // scatterlist of `sg_nents` entries.
    unsafe {
        let mr = ibmr.cast::<FerroceMr>();
        let ps = u64::from((*ibmr).page_size);
        if !ps.is_power_of_two() || ps < PAGE_SIZE as u64 || ps > MAX_FAST_PAGE_SIZE || (*mr).staged.is_empty() {
            return EINVAL.to_errno();
        }
        (*mr).nstaged = 0;
        let n = b::ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, Some(set_page));
        if n < 0 {
            return n;
        }
        let first_off = (*ibmr).iova & (ps - 1);
        let dev = dev_of((*ibmr).device);
        let mut st = dev.state.lock();
        let Some(MrEntry { kind: MrKind::Fast(f), .. }) = st.mrs.get_mut((*mr).index as usize).and_then(|m| m.as_mut()) else {
            return EINVAL.to_errno();
        };
        let used = (*mr).nstaged.min((*mr).staged.len()).min(f.pages.len());
        for (d, s) in f.pages.iter_mut().zip((*mr).staged.iter()).take(used) {
            *d = *s;
        }
        f.npages = used;
        f.page_size = ps;
        f.first_off = if used == 0 { 0 } else { first_off };
        n
    }
}

pub(crate) unsafe extern "C" fn dereg_mr(ibmr: *mut b::ib_mr, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: an MR from `reg_user_mr`/`get_dma_mr`/`alloc_mr`: removed from
    // the table (so no packet touches its pages any more) before the pages
    // are unpinned.
    unsafe {
        let dev = dev_of((*ibmr).device);
        let index = (*ibmr.cast::<FerroceMr>()).index;
        let entry = dev.state.lock().remove_mr_at(index);
        drop(entry);
        let mr = KBox::from_raw(ibmr.cast::<FerroceMr>());
        if !mr.umem.is_null() {
            b::ferroce_ib_umem_release(mr.umem);
        }
    }
    0
}

// --- post_send / post_recv --------------------------------------------------------

/// Inline data of a work request, gathered before the device lock is taken
/// (copying from userspace may fault and sleep).
struct Inline {
    data: [u8; MAX_INLINE],
    len: u16,
}

/// Gathers the inline payload an `IB_SEND_INLINE` request names: user
/// addresses for a user QP (copied once, here), kernel addresses for a
/// kernel QP. At most `MAX_INLINE` bytes (the advertised max_inline_data).
///
/// # Safety
/// `ibqp` and `wr` must be the core's live QP and work request, in the
/// process that posted it.
unsafe fn gather_inline(ibqp: *mut b::ib_qp, wr: *const b::ib_send_wr) -> Result<Inline> {
    // SAFETY: guaranteed by the caller.
    let w = unsafe { &*wr };
    let n = usize::try_from(w.num_sge).map_err(|_| EINVAL)?;
    if n > MAX_SGE {
        return Err(EINVAL);
    }
    // SAFETY: as above.
    let user = unsafe { b::ferroce_qp_is_user(ibqp) };
    let mut out = Inline { data: [0; MAX_INLINE], len: 0 };
    let mut at = 0usize;
    for i in 0..n {
        // SAFETY: the core passes `num_sge` entries.
        let s = unsafe { &*w.sg_list.add(i) };
        let len = s.length as usize;
        let dst = out.data.get_mut(at..at.checked_add(len).ok_or(EINVAL)?).ok_or(EINVAL)?;
        if user {
            // SAFETY: `dst` has `len` bytes; the user address is checked by
            // copy_from_user.
            if unsafe { b::ferroce_copy_from_user(dst.as_mut_ptr().cast(), s.addr, len) } != 0 {
                return Err(EFAULT);
            }
        } else if len > 0 {
            // SAFETY: a kernel ULP names kernel memory it owns for the call.
            unsafe { core::ptr::copy_nonoverlapping(s.addr as usize as *const u8, dst.as_mut_ptr(), len) };
        }
        at += len;
    }
    out.len = at as u16;
    Ok(out)
}

/// The engine's copy of a REG_MR request: the region, the new key (its
/// upper 24 bits must stay the region's, IBTA and `ib_update_fast_reg_key`),
/// access rights, and the iova and length `map_mr_sg` gave the MR.
///
/// # Safety
/// `r.mr` must be null or a live MR of the QP's device (the core's
/// contract for a posted IB_WR_REG_MR).
unsafe fn fast_reg(r: &b::ib_reg_wr) -> Result<FastReg> {
    if r.mr.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: guaranteed by the caller.
    let m = unsafe { &*r.mr.cast::<FerroceMr>() };
    if m.ib.type_ != b::ib_mr_type_IB_MR_TYPE_MEM_REG || m.staged.is_empty() || r.key >> 8 != m.index {
        return Err(EINVAL);
    }
    let access = check_access(r.access).map_err(|_| EINVAL)?;
    if m.ib.iova.checked_add(m.ib.length).is_none() || m.ib.length > (m.staged.len() as u64).saturating_mul(MAX_FAST_PAGE_SIZE) {
        return Err(EINVAL);
    }
    Ok(FastReg { mr: m.index, key: r.key, access, iova: m.ib.iova, length: m.ib.length })
}

/// # Safety
/// `wr` must be a valid work request of the core (an `ib_ud_wr` on UD QPs).
unsafe fn send_wqe(wr: *const b::ib_send_wr, e: &QpEntry, inline: Option<&Inline>) -> Result<SendWqe> {
    // SAFETY: guaranteed by the caller.
    let w = unsafe { &*wr };
    // Fast registration and local invalidate come from kernel ULPs only:
    // a process's QP posts through its ring, whose opcodes `from_u32`
    // (without them) decodes.
    let opcode = match w.opcode {
        b::ib_wr_opcode_IB_WR_REG_MR => WrOpcode::RegMr,
        b::ib_wr_opcode_IB_WR_LOCAL_INV => WrOpcode::LocalInv,
        op => WrOpcode::from_u32(op).ok_or(EINVAL)?,
    };
    let flags = w.send_flags as u32;
    let (sg_list, num_sge) = match inline {
        Some(_) => ([Sge::default(); MAX_SGE], 0),
        None if opcode.is_local() => ([Sge::default(); MAX_SGE], 0),
        // SAFETY: the core passes `num_sge` entries.
        None => unsafe { sge_list(w.sg_list, w.num_sge, e.max_send_sge)? },
    };
    let mut wqe = SendWqe {
        // SAFETY: both union members are plain integers/pointers.
        wr_id: unsafe { w.__bindgen_anon_1.wr_id },
        opcode,
        send_flags: flags & (send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE),
        sg_list,
        num_sge,
        ..SendWqe::default()
    };
    if let Some(i) = inline {
        wqe.inline = i.data;
        wqe.inline_len = i.len;
    }
    wqe.imm_data = match opcode {
        // SAFETY: a union of plain integers; either member is initialised.
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => u32::from_be(unsafe { w.ex.imm_data }),
        // SAFETY: as above.
        WrOpcode::SendWithInv | WrOpcode::LocalInv => unsafe { w.ex.invalidate_rkey },
        _ => 0,
    };
    match opcode {
        WrOpcode::RegMr => {
            // SAFETY: an IB_WR_REG_MR request is an `ib_reg_wr`.
            let r = unsafe { &*wr.cast::<b::ib_reg_wr>() };
            // SAFETY: the ULP's MR, alive while the request is posted.
            wqe.reg = unsafe { fast_reg(r)? };
        }
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            // SAFETY: RDMA work requests are `ib_rdma_wr`s (the core copies
            // them from userspace with that layout).
            let r = unsafe { &*wr.cast::<b::ib_rdma_wr>() };
            wqe.remote_addr = r.remote_addr;
            wqe.rkey = r.rkey;
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            // SAFETY: atomic work requests are `ib_atomic_wr`s.
            let a = unsafe { &*wr.cast::<b::ib_atomic_wr>() };
            wqe.remote_addr = a.remote_addr;
            wqe.rkey = a.rkey;
            wqe.compare_add = a.compare_add;
            wqe.swap = a.swap;
        }
        _ => {}
    }
    if e.qp.qp_type() == QpType::Ud {
        if !matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm) {
            return Err(EINVAL);
        }
        // SAFETY: UD work requests are `ib_ud_wr`s (caller).
        let ud = unsafe { &*wr.cast::<b::ib_ud_wr>() };
        if ud.ah.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the core holds the AH for the call.
        wqe.ah = unsafe { ah_data::<Ferroce>(ud.ah) }.index;
        wqe.remote_qpn = ud.remote_qpn;
        wqe.remote_qkey = ud.remote_qkey;
        // A UD message is one packet: longer than the path MTU is refused
        // at post time (EINVAL), not completed in error.
        let len = wqe.length().ok_or(EINVAL)?;
        if len > e.qp.attr().path_mtu.bytes() {
            return Err(EINVAL);
        }
    }
    Ok(wqe)
}

pub(crate) unsafe extern "C" fn post_send(
    ibqp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad: *mut *const b::ib_send_wr,
) -> c_int {
    // SAFETY: a QP from `create_qp`; `wr` is the core's valid list; `bad`
    // receives the first failing request.
    unsafe {
        let dev = dev_of((*ibqp).device);
        let qpn = qpn_of(ibqp);
        let mut cur = wr;
        let mut ret = 0;
        if b::ferroce_qp_is_user(ibqp) {
            // A process's QP posts through its SQ ring; the system call is
            // its doorbell, and carries no requests.
            if !cur.is_null() {
                if !bad.is_null() {
                    *bad = cur;
                }
                return EINVAL.to_errno();
            }
            dev.count(crate::rdma::Counter::RingDoorbell);
        }
        while !cur.is_null() {
            let inline = if (*cur).send_flags as u32 & send_flags::INLINE != 0 {
                match gather_inline(ibqp, cur) {
                    Ok(i) => Some(i),
                    Err(x) => {
                        ret = x.to_errno();
                        break;
                    }
                }
            } else {
                None
            };
            let r = {
                let mut st = dev.state.lock();
                match st.qp(qpn) {
                    None => Err(EINVAL),
                    Some(e) => send_wqe(cur, e, inline.as_ref())
                        .and_then(|w| e.qp.post_send(&w).map_err(|x| Error::from_errno(x.errno()))),
                }
            };
            if let Err(x) = r {
                ret = x.to_errno();
                break;
            }
            cur = (*cur).next;
        }
        if ret != 0 && !bad.is_null() {
            *bad = cur;
        }
        net::kick(dev, qpn, net::KICK_BUDGET_TASK);
        ret
    }
}

pub(crate) unsafe extern "C" fn post_recv(
    ibqp: *mut b::ib_qp,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    // SAFETY: as for `post_send`.
    unsafe {
        let dev = dev_of((*ibqp).device);
        let qpn = qpn_of(ibqp);
        let mut cur = wr;
        let mut ret = 0;
        let mut notify = Notify::new();
        {
            let mut st = dev.state.lock();
            match st.qp(qpn) {
                None => ret = EINVAL.to_errno(),
                Some(e) if e.srq.is_some() => ret = EINVAL.to_errno(),
                // A process's QP posts through its RQ ring; the system call
                // (its doorbell, needed in ERR) carries no requests.
                Some(e) if e.rings.is_some() => {
                    if cur.is_null() {
                        crate::rings::pull_rq(dev, e);
                    } else {
                        ret = EINVAL.to_errno();
                    }
                }
                Some(e) => {
                    while !cur.is_null() {
                        let w = &*cur;
                        let r = sge_list(w.sg_list, w.num_sge, e.max_recv_sge).and_then(|(sg_list, num_sge)| {
                            let wqe = RecvWqe { wr_id: w.__bindgen_anon_1.wr_id, sg_list, num_sge };
                            e.qp.post_recv(&wqe).map_err(|x| Error::from_errno(x.errno()))
                        });
                        if let Err(x) = r {
                            ret = x.to_errno();
                            break;
                        }
                        cur = w.next;
                    }
                }
            }
            // Posting to a QP in ERR flushes at once.
            net::drain(dev, &mut st, qpn, 0, &mut notify);
        }
        notify.run(dev);
        if ret != 0 && !bad.is_null() {
            *bad = cur;
        }
        ret
    }
}
