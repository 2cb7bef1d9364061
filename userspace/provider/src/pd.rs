//! Protection domains: `ibv_alloc_pd` / `ibv_dealloc_pd`.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;

use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's protection domain (`ibv_pd` first).
#[repr(C)]
pub(crate) struct FerrocePd {
    ibv_pd: ibv_pd,
}

const _: () = assert!(core::mem::offset_of!(FerrocePd, ibv_pd) == 0);

pub(crate) unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: FerrocePd is a C structure valid when zeroed.
    let pd = unsafe { calloc_obj::<FerrocePd>() };
    if pd.is_null() {
        return null_mut();
    }
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_alloc_pd, ib_uverbs_alloc_pd_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `context` comes from libibverbs; `pd` is a fresh object and
    // cmd/resp are buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_alloc_pd(
            context,
            &mut (*pd).ibv_pd,
            &mut cmd,
            size_of::<ibv_alloc_pd>(),
            &mut resp,
            size_of::<ib_uverbs_alloc_pd_resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `pd` is ours.
        unsafe { free_obj(pd) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `pd` is live; ibv_pd is its first field.
    unsafe { &mut (*pd).ibv_pd }
}

pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: `pd` is a PD from `alloc_pd`.
    let ret = unsafe { ibv_cmd_dealloc_pd(pd) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; ibv_pd is the first field of
        // the FerrocePd `alloc_pd` allocated.
        unsafe { free_obj(pd.cast::<FerrocePd>()) };
    }
    ret
}
