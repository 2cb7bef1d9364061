//! Shared receive queues (basic SRQs). Creation, modification (arming
//! `srq_limit`; resizing `max_wr`, which moves the pending receive WQEs
//! into a new ring), query and destruction are system calls;
//! posting receive work requests writes them into the SRQ's ring (see
//! `ring`), with no doorbell: the kernel takes a receive WQE from the ring
//! when a message needs one.
//!
//! `ibv_create_srq_ex` reaches `create_srq` for a basic SRQ with only a PD
//! (libibverbs' inline dispatch); XRC and tag-matching SRQs are not offered
//! (no `create_srq_ex`, so libibverbs answers EOPNOTSUPP). QPs attach to an
//! SRQ through the `srq` of their init attribute (see `qp`).

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;
use std::sync::Mutex;

use crate::libc_errno::EINVAL;
use crate::qp::{post_recv_ring, ProdRing};
use crate::sys::*;
use crate::{calloc_obj, free_obj, lock, set_errno, zeroed_c};

/// ferroce's shared receive queue (`verbs_srq`, whose `ibv_srq` is at
/// offset 0, first; a zero `srq_type` is `IBV_SRQT_BASIC`).
#[repr(C)]
pub(crate) struct FerroceSrq {
    vsrq: verbs_srq,
    /// Scatter/gather entries a work request may carry, as the kernel
    /// granted at creation (a modification never changes it).
    max_sge: u32,
    /// The ring, under its lock; initialised in place by `create_srq` (the
    /// object is `calloc`ed).
    ring: Mutex<ProdRing>,
}

const _: () = assert!(core::mem::offset_of!(FerroceSrq, vsrq) == 0);
const _: () = assert!(core::mem::offset_of!(verbs_srq, srq) == 0);

/// The create-SRQ response: the core part, then ferroce's ring.
#[repr(C)]
struct CreateSrqResp {
    core: ib_uverbs_create_srq_resp,
    drv: ferroce_create_srq_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateSrqResp, drv) == size_of::<ib_uverbs_create_srq_resp>());

/// Frees an SRQ object after unmapping its ring.
///
/// # Safety
/// `srq` came from `create_srq`'s allocation with its lock initialised, the
/// kernel object is gone (or never was), and `srq` is not used afterwards.
unsafe fn release(srq: *mut FerroceSrq) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        lock(&(*srq).ring).ring.unmap();
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*srq).ring));
        free_obj(srq);
    }
}

/// The attributes `ibv_modify_srq` may change.
const MODIFY_MASK: c_int = (IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) as c_int;

pub(crate) unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    if pd.is_null() || attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: FerroceSrq is a C structure valid when zeroed but for the
    // lock, written below before any use.
    let srq = unsafe { calloc_obj::<FerroceSrq>() };
    if srq.is_null() {
        return null_mut();
    }
    // SAFETY: `srq` is a fresh allocation; the field was never initialised.
    unsafe { core::ptr::addr_of_mut!((*srq).ring).write(Mutex::new(ProdRing::none())) };
    let ibsrq = srq.cast::<ibv_srq>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_srq, CreateSrqResp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs, `attr` is the caller's init
    // attribute (checked non-NULL), `ibsrq` is the ibv_srq at offset 0 of
    // the fresh object and cmd/resp are buffers of the sizes passed (the
    // driver part follows the core response). On success libibverbs has
    // stored the handle and the granted sizes in `attr.attr`.
    let ret = unsafe {
        ibv_cmd_create_srq(
            pd,
            ibsrq,
            attr,
            &mut cmd,
            size_of::<ibv_create_srq>(),
            &mut resp.core,
            size_of::<CreateSrqResp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `srq` is ours.
        unsafe { release(srq) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `pd` and its context are live.
    match unsafe { ProdRing::map::<ferroce_rq_wqe>((*pd).context, &resp.drv.srq) } {
        Ok(r) => {
            // SAFETY: `srq` is live and not yet shared; `attr` is valid.
            unsafe {
                *lock(&(*srq).ring) = r;
                (*srq).max_sge = (*attr).attr.max_sge.min(FERROCE_RING_MAX_SGE);
            }
            ibsrq
        }
        Err(e) => {
            // SAFETY: the kernel's SRQ is unusable without its ring: destroy
            // it, then the object (nothing else knows it yet).
            unsafe {
                ibv_cmd_destroy_srq(ibsrq);
                release(srq);
            }
            set_errno(e);
            null_mut()
        }
    }
}

/// The modify-SRQ command: the core part, then ferroce's (where a resize
/// writes the new ring's place).
#[repr(C)]
struct ModifySrqCmd {
    core: ibv_modify_srq,
    drv: ferroce_modify_srq_cmd,
}
const _: () = assert!(core::mem::offset_of!(ModifySrqCmd, drv) == size_of::<ibv_modify_srq>());

pub(crate) unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, attr_mask: c_int) -> c_int {
    if attr.is_null() || attr_mask & !MODIFY_MASK != 0 {
        return EINVAL;
    }
    // SAFETY: `srq` is the ibv_srq at offset 0 of a FerroceSrq from
    // `create_srq`.
    let s = unsafe { &*srq.cast::<FerroceSrq>() };
    // Held across the call: no post while the kernel moves the pending
    // receive WQEs into a new ring.
    let mut r = lock(&s.ring);
    // SAFETY: a plain C structure, valid zeroed.
    let mut map: ferroce_ring_map = unsafe { zeroed_c() };
    // SAFETY: a plain C command structure.
    let mut cmd: ModifySrqCmd = unsafe { zeroed_c() };
    cmd.drv.ring_map_addr = core::ptr::addr_of_mut!(map) as u64;
    // SAFETY: `srq` is an SRQ from `create_srq`; attr is the caller's
    // (checked non-NULL); cmd is a buffer of the size passed, the driver
    // part after the core's. On a resize the kernel writes the new ring's
    // place into `map`, which lives across the call.
    let ret = unsafe { ibv_cmd_modify_srq(srq, attr, attr_mask, &mut cmd.core, size_of::<ModifySrqCmd>()) };
    if ret != 0 || attr_mask & IBV_SRQ_MAX_WR as c_int == 0 {
        return ret;
    }
    // SAFETY: the SRQ's context is live; the kernel wrote `map`.
    match unsafe { ProdRing::map::<ferroce_rq_wqe>((*srq).context, &map) } {
        Ok(new) => {
            r.ring.unmap();
            *r = new;
            0
        }
        // The kernel uses the new ring, which cannot be mapped: posts
        // fail (no ring) until the SRQ is destroyed.
        Err(e) => {
            r.ring.unmap();
            *r = ProdRing::none();
            e
        }
    }
}

pub(crate) unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    if attr.is_null() {
        return EINVAL;
    }
    // SAFETY: a plain C command structure.
    let mut cmd: ibv_query_srq = unsafe { zeroed_c() };
    // SAFETY: `srq` is an SRQ from `create_srq`; attr is the caller's
    // (checked non-NULL); cmd is a buffer of the size passed.
    unsafe { ibv_cmd_query_srq(srq, attr, &mut cmd, size_of::<ibv_query_srq>()) }
}

pub(crate) unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: `srq` is an SRQ from `create_srq`. libibverbs waits there for
    // the events the kernel reported to be acknowledged; the kernel refuses
    // (EBUSY) while QPs are still attached.
    let ret = unsafe { ibv_cmd_destroy_srq(srq) };
    if ret == 0 {
        // SAFETY: the kernel object is gone and nobody posts to an SRQ being
        // destroyed (verbs contract); the ibv_srq is at offset 0 of the
        // FerroceSrq `create_srq` allocated.
        unsafe { release(srq.cast::<FerroceSrq>()) };
    }
    ret
}

pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `srq` is the ibv_srq at offset 0 of a FerroceSrq from
    // `create_srq`.
    let s = unsafe { &*srq.cast::<FerroceSrq>() };
    let mut r = lock(&s.ring);
    // No state to check and no doorbell: an SRQ's ring is read by the
    // kernel whenever a message needs a receive.
    // SAFETY: `wr`/`bad_wr` are the caller's list and out-pointer.
    unsafe { post_recv_ring(&mut r, wr, bad_wr, s.max_sge, |_| Ok(())) }
}
