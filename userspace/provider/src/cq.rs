//! Completion queues. Creation (with a completion channel and vector),
//! arming, resizing and destruction are system calls; polling reads the
//! CQ's ring (see `ring`) without one.
//!
//! Polling: under the CQ's lock, load `prod` (acquire), translate the
//! `ferroce_cqe`s between the provider's private consumer index and `prod`
//! into `ibv_wc`s, store the new `cons` (release). A CQ whose ring filled up
//! keeps further completions in the kernel and sets
//! `FERROCE_RING_CQ_WAITING`: when a poll got fewer completions than asked
//! for and finds that flag, it makes one poll system call (for one entry),
//! which moves the waiting completions into the ring, and reads the ring
//! again.
//!
//! Resizing: the kernel moves the unread completions into a new ring and
//! answers its place; the provider maps it and unmaps the old one, holding
//! the lock throughout so that no poll sees a half-replaced ring.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;
use core::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use crate::libc_errno::{EINVAL, EIO};
use crate::ring::Ring;
use crate::sys::*;
use crate::{calloc_obj, free_obj, lock, set_errno, zeroed_c};

/// The consumer's side of a CQ ring: the ring and the next index to read.
struct CqRing {
    ring: Ring,
    cons: u32,
}

/// ferroce's completion queue (`verbs_cq`, whose `ibv_cq` is at offset 0,
/// first).
#[repr(C)]
pub(crate) struct FerroceCq {
    vcq: verbs_cq,
    /// Initialised in place by `create_cq` (the object is `calloc`ed).
    ring: Mutex<CqRing>,
}

const _: () = assert!(core::mem::offset_of!(FerroceCq, vcq) == 0);

/// The create-CQ response: the core part, then ferroce's ring.
#[repr(C)]
struct CreateCqResp {
    core: ib_uverbs_create_cq_resp,
    drv: ferroce_create_cq_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateCqResp, drv) == size_of::<ib_uverbs_create_cq_resp>());

/// The resize-CQ response: the core part, then the new ring.
#[repr(C)]
struct ResizeCqResp {
    core: ib_uverbs_resize_cq_resp,
    drv: ferroce_resize_cq_resp,
}
const _: () = assert!(core::mem::offset_of!(ResizeCqResp, drv) == size_of::<ib_uverbs_resize_cq_resp>());

/// Maps a CQ ring and takes the consumer index the kernel left in it.
///
/// # Safety
/// `context` is a live context of this provider.
unsafe fn map_cq_ring(context: *mut ibv_context, m: &ferroce_ring_map) -> Result<CqRing, c_int> {
    // SAFETY: forwarded from the caller.
    let ring = unsafe { Ring::map(context, m, size_of::<ferroce_cqe>()) }?;
    let cons = ring.cons().map_or(0, |c| c.load(Ordering::Relaxed));
    Ok(CqRing { ring, cons })
}

pub(crate) unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: FerroceCq is a C structure valid when zeroed but for the
    // lock, written below before any use.
    let cq = unsafe { calloc_obj::<FerroceCq>() };
    if cq.is_null() {
        return null_mut();
    }
    // SAFETY: `cq` is a fresh allocation of the right size; the field was
    // never initialised, so nothing is dropped.
    unsafe {
        core::ptr::addr_of_mut!((*cq).ring).write(Mutex::new(CqRing {
            ring: Ring::none(),
            cons: 0,
        }))
    };
    let ibcq = cq.cast::<ibv_cq>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_cq, CreateCqResp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `context` and `channel` (or NULL) come from libibverbs; `ibcq`
    // is the ibv_cq at offset 0 of the fresh object; cmd/resp are buffers of
    // the sizes passed (the driver part follows the core response).
    let ret = unsafe {
        ibv_cmd_create_cq(
            context,
            cqe,
            channel,
            comp_vector,
            ibcq,
            &mut cmd,
            size_of::<ibv_create_cq>(),
            &mut resp.core,
            size_of::<CreateCqResp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `cq` is ours.
        unsafe { release(cq) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `context` is live.
    match unsafe { map_cq_ring(context, &resp.drv.cq) } {
        Ok(r) => {
            // SAFETY: `cq` is live and not yet shared.
            *lock(unsafe { &(*cq).ring }) = r;
            ibcq
        }
        Err(e) => {
            // SAFETY: the kernel's CQ is unusable without its ring: destroy
            // it, then the object (nothing else knows it yet).
            unsafe {
                ibv_cmd_destroy_cq(ibcq);
                release(cq);
            }
            set_errno(e);
            null_mut()
        }
    }
}

/// Frees a CQ object (its ring already unmapped or never mapped).
///
/// # Safety
/// `cq` came from `create_cq`'s allocation, with its lock initialised, and
/// is not used afterwards.
unsafe fn release(cq: *mut FerroceCq) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*cq).ring));
        free_obj(cq);
    }
}

/// The `ibv_wc` of a ring completion (same encodings, the immediate data
/// or invalidated rkey passed through as stored).
fn wc_of(c: &ferroce_cqe) -> ibv_wc {
    ibv_wc {
        wr_id: c.wr_id,
        status: c.status,
        opcode: c.opcode,
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        __bindgen_anon_1: ibv_wc__bindgen_ty_1 { imm_data: c.imm_data },
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: c.wc_flags,
        pkey_index: c.pkey_index,
        slid: c.slid,
        sl: c.sl,
        dlid_path_bits: c.dlid_path_bits,
    }
}

/// Reads up to `max` completions from the ring into `wc`, publishes the new
/// consumer index and returns how many it read.
///
/// # Safety
/// `wc` is valid for `max` writes.
unsafe fn drain(r: &mut CqRing, wc: *mut ibv_wc, max: usize) -> usize {
    let (Some(prod), Some(cons)) = (r.ring.prod(), r.ring.cons()) else {
        return 0;
    };
    // A prod more than a ring ahead is a ring this process scribbled over:
    // read at most one ring's worth (every slot address is masked anyway).
    let avail = prod.load(Ordering::Acquire).wrapping_sub(r.cons).min(r.ring.entries()) as usize;
    let n = avail.min(max);
    for i in 0..n {
        let slot = r.ring.slot::<ferroce_cqe>(r.cons.wrapping_add(i as u32));
        if slot.is_null() {
            break;
        }
        // SAFETY: the slot is inside the mapping and below the acquired
        // prod, so the kernel wrote it and leaves it alone until cons
        // passes it; `wc` holds `max > i` entries (caller).
        unsafe { wc.add(i).write(wc_of(&slot.read())) };
    }
    r.cons = r.cons.wrapping_add(n as u32);
    if n > 0 {
        cons.store(r.cons, Ordering::Release);
    }
    n
}

pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
        set_errno(EINVAL);
        return -1;
    }
    if num_entries == 0 {
        return 0;
    }
    let want = num_entries as usize;
    // SAFETY: `cq` is the ibv_cq at offset 0 of a FerroceCq from
    // `create_cq`.
    let mut r = lock(unsafe { &(*cq.cast::<FerroceCq>()).ring });
    if !r.ring.is_mapped() {
        // A resize that could not map the new ring left the CQ without one.
        set_errno(EIO);
        return -1;
    }
    // SAFETY: `wc` holds `num_entries` entries (the caller's contract).
    let mut got = unsafe { drain(&mut r, wc, want) };
    if got < want {
        // The kernel sets CQ_WAITING and then looks at cons; we stored cons
        // and now look at the flag: a full barrier between the two sides'
        // store and load so that one of them sees the other.
        fence(Ordering::SeqCst);
        let waiting = r
            .ring
            .kflags()
            .is_some_and(|k| k.load(Ordering::Acquire) & FERROCE_RING_CQ_WAITING != 0);
        if waiting {
            // SAFETY: a zeroed ibv_wc is a valid value.
            let mut tmp: ibv_wc = unsafe { zeroed_c() };
            // SAFETY: `cq` is this provider's CQ; `tmp` holds one entry.
            // The kernel moves the waiting completions into the ring and
            // normally returns none itself; one it returns anyway comes
            // before those now in the ring.
            let ret = unsafe { ibv_cmd_poll_cq(cq, 1, &mut tmp) };
            if ret < 0 {
                return if got > 0 { got as c_int } else { -1 };
            }
            if ret > 0 {
                // SAFETY: got < want entries were written so far.
                unsafe { wc.add(got).write(tmp) };
                got += 1;
            }
            // SAFETY: as above, `want - got` entries remain from `wc + got`.
            got += unsafe { drain(&mut r, wc.add(got), want - got) };
        }
    }
    got as c_int
}

pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: `cq` is a CQ from `create_cq`.
    unsafe { ibv_cmd_req_notify_cq(cq, solicited_only) }
}

pub(crate) unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: `cq` is the ibv_cq at offset 0 of a FerroceCq from
    // `create_cq`.
    let mut r = lock(unsafe { &(*cq.cast::<FerroceCq>()).ring });
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_resize_cq, ResizeCqResp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `cq` is a CQ from `create_cq`; cmd/resp are buffers of the
    // sizes passed. On success libibverbs stores the new size in cq->cqe.
    let ret = unsafe {
        ibv_cmd_resize_cq(
            cq,
            cqe,
            &mut cmd,
            size_of::<ibv_resize_cq>(),
            &mut resp.core,
            size_of::<ResizeCqResp>(),
        )
    };
    if ret != 0 {
        return ret;
    }
    // The kernel now fills the new ring; the old one is dead either way.
    // SAFETY: `cq` is live, so is its context.
    let new = unsafe { map_cq_ring((*cq).context, &resp.drv.cq) };
    r.ring.unmap();
    match new {
        Ok(n) => {
            *r = n;
            0
        }
        Err(e) => e,
    }
}

pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` is a CQ from `create_cq`. libibverbs waits there for the
    // events the kernel reported to be acknowledged.
    let ret = unsafe { ibv_cmd_destroy_cq(cq) };
    if ret == 0 {
        let fcq = cq.cast::<FerroceCq>();
        // SAFETY: the kernel object is gone and nobody polls a CQ being
        // destroyed (verbs contract); the ibv_cq is at offset 0 of the
        // FerroceCq `create_cq` allocated.
        unsafe {
            lock(&(*fcq).ring).ring.unmap();
            release(fcq);
        }
    }
    ret
}
