//! Shared receive queues (basic SRQs) on the system-call path: creation,
//! modification (resizing `max_wr`, arming `srq_limit`), query, destruction
//! and posting of receive work requests all go through the kernel.
//!
//! `ibv_create_srq_ex` reaches `create_srq` for a basic SRQ with only a PD
//! (libibverbs' inline dispatch); XRC and tag-matching SRQs are not offered
//! (no `create_srq_ex`, so libibverbs answers EOPNOTSUPP). QPs attach to an
//! SRQ through the `srq` of their init attribute (see `qp`).
//!
//! No driver-specific data travels either way: the kernel's SRQ is reached
//! only through system calls, never mapped.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;

use crate::libc_errno::EINVAL;
use crate::qp::{check_sges, post_chunked};
use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's shared receive queue (`verbs_srq`, whose `ibv_srq` is at
/// offset 0, first; a zero `srq_type` is `IBV_SRQT_BASIC`).
#[repr(C)]
pub(crate) struct FerroceSrq {
    vsrq: verbs_srq,
    /// Scatter/gather entries a work request may carry, as the kernel
    /// granted at creation (a modification never changes it).
    max_sge: u32,
}

const _: () = assert!(core::mem::offset_of!(FerroceSrq, vsrq) == 0);
const _: () = assert!(core::mem::offset_of!(verbs_srq, srq) == 0);

/// The attributes `ibv_modify_srq` may change.
const MODIFY_MASK: c_int = (IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) as c_int;

pub(crate) unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    if pd.is_null() || attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: FerroceSrq is a C structure valid when zeroed.
    let srq = unsafe { calloc_obj::<FerroceSrq>() };
    if srq.is_null() {
        return null_mut();
    }
    let ibsrq = srq.cast::<ibv_srq>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_srq, ib_uverbs_create_srq_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs, `attr` is the caller's init
    // attribute (checked non-NULL), `ibsrq` is the ibv_srq at offset 0 of
    // the fresh object and cmd/resp are buffers of the sizes passed. On
    // success libibverbs has stored the handle and the granted sizes in
    // `attr.attr`.
    let ret = unsafe {
        ibv_cmd_create_srq(
            pd,
            ibsrq,
            attr,
            &mut cmd,
            size_of::<ibv_create_srq>(),
            &mut resp,
            size_of::<ib_uverbs_create_srq_resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `srq` is ours.
        unsafe { free_obj(srq) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `srq` is live and not yet shared; `attr` is valid.
    unsafe { (*srq).max_sge = (*attr).attr.max_sge };
    ibsrq
}

pub(crate) unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, attr_mask: c_int) -> c_int {
    if attr.is_null() || attr_mask & !MODIFY_MASK != 0 {
        return EINVAL;
    }
    // SAFETY: a plain C command structure.
    let mut cmd: ibv_modify_srq = unsafe { zeroed_c() };
    // SAFETY: `srq` is an SRQ from `create_srq`; attr is the caller's
    // (checked non-NULL); cmd is a buffer of the size passed. The kernel
    // resizes the queue (IBV_SRQ_MAX_WR) and arms the limit event
    // (IBV_SRQ_LIMIT).
    unsafe { ibv_cmd_modify_srq(srq, attr, attr_mask, &mut cmd, size_of::<ibv_modify_srq>()) }
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
        // SAFETY: the kernel object is gone; the ibv_srq is at offset 0 of
        // the FerroceSrq `create_srq` allocated.
        unsafe { free_obj(srq.cast::<FerroceSrq>()) };
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
    let max_sge = unsafe { (*srq.cast::<FerroceSrq>()).max_sge };
    let check = |w: &ibv_recv_wr| check_sges(w.num_sge, w.sg_list, max_sge);
    let post = |w: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr| {
        // SAFETY: `srq` is this provider's SRQ; `w` is a valid chunk and
        // `bad` a valid out-pointer (post_chunked's contract).
        unsafe { ibv_cmd_post_srq_recv(srq, w, bad) }
    };
    // SAFETY: `wr`/`bad_wr` are the caller's list and out-pointer.
    unsafe { post_chunked(wr, bad_wr, check, post) }
}
