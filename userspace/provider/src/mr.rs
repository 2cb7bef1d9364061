//! Memory regions: `ibv_reg_mr` / `ibv_dereg_mr` (the kernel pins and maps
//! the pages; the provider only carries the handle and keys).

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
