//! Address handles: `ibv_create_ah` / `ibv_destroy_ah`.
//!
//! For RoCE the kernel resolves the destination MAC from the GRH (the core's
//! `rdma_create_user_ah`), so the provider only forwards the attributes.
//! The kernel answers, besides the core's handle, ferroce's `ah_handle`:
//! the name a UD work request gives the AH in the SQ ring
//! (`ferroce_sq_wqe.ah`).

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
    /// `ferroce_create_ah_resp.ah_handle`.
    ah_handle: u32,
}

const _: () = assert!(core::mem::offset_of!(FerroceAh, ibv_ah) == 0);

/// The create-AH response: the core part, then ferroce's.
#[repr(C)]
struct CreateAhResp {
    core: ib_uverbs_create_ah_resp,
    drv: ferroce_create_ah_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateAhResp, drv) == size_of::<ib_uverbs_create_ah_resp>());

/// The ring name of an AH of this provider.
///
/// # Safety
/// `ah` is an AH `create_ah` returned (checked by the caller: its context
/// is one of this provider's).
pub(crate) unsafe fn ring_handle(ah: *const ibv_ah) -> u32 {
    // SAFETY: ibv_ah is the first field of the FerroceAh (caller).
    unsafe { (*ah.cast::<FerroceAh>()).ah_handle }
}

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
    let mut resp: CreateAhResp = unsafe { zeroed_c() };
    // SAFETY: `pd` comes from libibverbs, `attr` is the caller's (checked
    // non-NULL), `ah` is a fresh object, resp a buffer of the size passed
    // (the driver part follows the core response).
    let ret = unsafe { ibv_cmd_create_ah(pd, &mut (*ah).ibv_ah, attr, &mut resp.core, size_of::<CreateAhResp>()) };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `ah` is ours.
        unsafe { free_obj(ah) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `ah` is live and not yet shared; ibv_ah is its first field.
    unsafe {
        (*ah).ah_handle = resp.drv.ah_handle;
        &mut (*ah).ibv_ah
    }
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
