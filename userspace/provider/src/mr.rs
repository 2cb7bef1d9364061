//! Memory regions: `ibv_reg_mr` / `ibv_dereg_mr` (the kernel pins and maps
//! the pages, or follows them on demand; the provider only carries the
//! handle and keys), `ibv_advise_mr` (the kernel prefetches), and memory
//! windows: `ibv_alloc_mw` / `ibv_dealloc_mw`, and `ibv_bind_mw` of a type 1
//! window, posted on the QP's ring as rdma-core's providers do.

use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::ptr::null_mut;

use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's memory region (`verbs_mr` first, as libibverbs' `verbs_get_mr`
/// expects).
#[repr(C)]
pub(crate) struct FerroceMr {
    vmr: verbs_mr,
}

const _: () = assert!(core::mem::offset_of!(FerroceMr, vmr) == 0);

pub(crate) unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: FerroceMr is a C structure valid when zeroed.
    let mr = unsafe { calloc_obj::<FerroceMr>() };
    if mr.is_null() {
        return null_mut();
    }
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_reg_mr, ib_uverbs_reg_mr_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs; `mr` is a fresh object and cmd/resp
    // are buffers of the sizes passed. The range is checked by the kernel.
    let ret = unsafe {
        ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            hca_va,
            access,
            &mut (*mr).vmr,
            &mut cmd,
            size_of::<ibv_reg_mr>(),
            &mut resp,
            size_of::<ib_uverbs_reg_mr_resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel registered nothing; `mr` is ours.
        unsafe { free_obj(mr) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `mr` is live; ibv_mr is the first field of verbs_mr.
    unsafe { &mut (*mr).vmr.ibv_mr }
}

/// `ibv_advise_mr`: the kernel faults the ranges of regions on demand in
/// (with `IBV_ADVISE_MR_FLAG_FLUSH` before it returns).
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int {
    // SAFETY: arguments forwarded from libibverbs; the kernel checks them.
    unsafe { ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sges) }
}

pub(crate) unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: `vmr` is an MR from `reg_mr`.
    let ret = unsafe { ibv_cmd_dereg_mr(vmr) };
    if ret == 0 {
        // SAFETY: the registration is gone; verbs_mr is the first field of
        // the FerroceMr `reg_mr` allocated.
        unsafe { free_obj(vmr.cast::<FerroceMr>()) };
    }
    ret
}

pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: ibv_mw is a C structure valid when zeroed.
    let mw = unsafe { calloc_obj::<ibv_mw>() };
    if mw.is_null() {
        return null_mut();
    }
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_alloc_mw, ib_uverbs_alloc_mw_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs; `mw` is a fresh object; cmd and
    // resp are buffers of the sizes passed. The type is checked by the
    // kernel.
    let ret = unsafe {
        ibv_cmd_alloc_mw(pd, ty, mw, &mut cmd, size_of::<ibv_alloc_mw>(), &mut resp, size_of::<ib_uverbs_alloc_mw_resp>())
    };
    if ret != 0 {
        // SAFETY: the kernel made nothing; `mw` is ours.
        unsafe { free_obj(mw) };
        set_errno(ret);
        return null_mut();
    }
    mw
}

pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: `mw` is a window from `alloc_mw`.
    let ret = unsafe { ibv_cmd_dealloc_mw(mw) };
    if ret == 0 {
        // SAFETY: the window is gone; the object is the one `alloc_mw` made.
        unsafe { free_obj(mw) };
    }
    ret
}

/// `ibv_inc_rkey`: the next key of the same index (the low byte is the
/// consumer's).
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_bind_mw`: binds a type 1 window by a BIND_MW request on `qp`'s
/// send queue; the window takes its next rkey at once (a failed bind's
/// completion tells the caller to take it back, as with every provider).
pub(crate) unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    if qp.is_null() || mw.is_null() || bind.is_null() {
        return crate::libc_errno::EINVAL;
    }
    // SAFETY: the caller's live window and bind description.
    let (ty, rkey, b) = unsafe { ((*mw).type_, (*mw).rkey, &*bind) };
    if ty != IBV_MW_TYPE_1 || b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return crate::libc_errno::EINVAL;
    }
    // SAFETY: all-zero is a valid request.
    let mut wr: ibv_send_wr = unsafe { zeroed_c() };
    wr.wr_id = b.wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = b.send_flags;
    let new = inc_rkey(rkey);
    // The union member a bind uses (writing it is safe).
    wr.__bindgen_anon_2.bind_mw.mw = mw;
    wr.__bindgen_anon_2.bind_mw.rkey = new;
    wr.__bindgen_anon_2.bind_mw.bind_info = b.bind_info;
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: this provider's QP and a one-request list.
    let ret = unsafe { crate::qp::post_send(qp, &mut wr, &mut bad) };
    if ret == 0 {
        // SAFETY: the caller's live window.
        unsafe { (*mw).rkey = new };
    }
    ret
}
