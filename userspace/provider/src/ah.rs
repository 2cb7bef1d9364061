//! Address handles: `ibv_create_ah` / `ibv_destroy_ah`.
//!
//! For RoCE the kernel resolves the destination MAC from the GRH (the core's
//! `rdma_create_user_ah`), so the provider only forwards the attributes.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;

use crate::libc_errno::EINVAL;
use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's address handle (`ibv_ah` first).
#[repr(C)]
pub(crate) struct FerroceAh {
    ibv_ah: ibv_ah,
}

const _: () = assert!(core::mem::offset_of!(FerroceAh, ibv_ah) == 0);

pub(crate) unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    if attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: FerroceAh is a C structure valid when zeroed.
    let ah = unsafe { calloc_obj::<FerroceAh>() };
    if ah.is_null() {
        return null_mut();
    }
    // SAFETY: a plain C response structure.
    let mut resp: ib_uverbs_create_ah_resp = unsafe { zeroed_c() };
    // SAFETY: `pd` comes from libibverbs, `attr` is the caller's (checked
    // non-NULL), `ah` is a fresh object, resp a buffer of the size passed.
    let ret = unsafe { ibv_cmd_create_ah(pd, &mut (*ah).ibv_ah, attr, &mut resp, size_of::<ib_uverbs_create_ah_resp>()) };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `ah` is ours.
        unsafe { free_obj(ah) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `ah` is live; ibv_ah is its first field.
    unsafe { &mut (*ah).ibv_ah }
}

pub(crate) unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: `ah` is an AH from `create_ah`.
    let ret = unsafe { ibv_cmd_destroy_ah(ah) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; ibv_ah is the first field of
        // the FerroceAh `create_ah` allocated.
        unsafe { free_obj(ah.cast::<FerroceAh>()) };
    }
    ret
}
