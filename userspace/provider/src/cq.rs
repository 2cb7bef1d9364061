//! Completion queues on the system-call path: creation (with a completion
//! channel and vector), polling, arming, resizing and destruction all go
//! through the kernel.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;

use crate::libc_errno::EINVAL;
use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's completion queue (`verbs_cq`, whose `ibv_cq` is at offset 0,
/// first).
#[repr(C)]
pub(crate) struct FerroceCq {
    vcq: verbs_cq,
}

const _: () = assert!(core::mem::offset_of!(FerroceCq, vcq) == 0);

/// The most completions fetched by one poll system call: bounds the
/// response buffer libibverbs allocates (72 bytes a completion). Polling
/// may always return fewer completions than asked for.
const MAX_POLL: c_int = 4096;

pub(crate) unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: FerroceCq is a C structure valid when zeroed.
    let cq = unsafe { calloc_obj::<FerroceCq>() };
    if cq.is_null() {
        return null_mut();
    }
    let ibcq = cq.cast::<ibv_cq>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_cq, ib_uverbs_create_cq_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `context` and `channel` (or NULL) come from libibverbs; `ibcq`
    // is the ibv_cq at offset 0 of the fresh object; cmd/resp are buffers of
    // the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_cq(
            context,
            cqe,
            channel,
            comp_vector,
            ibcq,
            &mut cmd,
            size_of::<ibv_create_cq>(),
            &mut resp,
            size_of::<ib_uverbs_create_cq_resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `cq` is ours.
        unsafe { free_obj(cq) };
        set_errno(ret);
        return null_mut();
    }
    ibcq
}

pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
        set_errno(EINVAL);
        return -1;
    }
    if num_entries == 0 {
        return 0;
    }
    // SAFETY: `cq` is a CQ from `create_cq`; `wc` holds `num_entries`
    // entries (the caller's contract), at least the count asked for here.
    // Returns the number polled, or -1 with errno set.
    unsafe { ibv_cmd_poll_cq(cq, num_entries.min(MAX_POLL), wc) }
}

pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: `cq` is a CQ from `create_cq`.
    unsafe { ibv_cmd_req_notify_cq(cq, solicited_only) }
}

pub(crate) unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_resize_cq, ib_uverbs_resize_cq_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `cq` is a CQ from `create_cq`; cmd/resp are buffers of the
    // sizes passed. On success libibverbs stores the new size in cq->cqe.
    unsafe {
        ibv_cmd_resize_cq(
            cq,
            cqe,
            &mut cmd,
            size_of::<ibv_resize_cq>(),
            &mut resp,
            size_of::<ib_uverbs_resize_cq_resp>(),
        )
    }
}

pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` is a CQ from `create_cq`. libibverbs waits there for the
    // events the kernel reported to be acknowledged.
    let ret = unsafe { ibv_cmd_destroy_cq(cq) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; the ibv_cq is at offset 0 of
        // the FerroceCq `create_cq` allocated.
        unsafe { free_obj(cq.cast::<FerroceCq>()) };
    }
    ret
}
