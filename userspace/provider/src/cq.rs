//! Completion queues. Creation (with a completion channel and vector),
//! arming, resizing and destruction are system calls; polling reads the
//! CQ's ring (see `ring`) without one.
//!
//! `ibv_create_cq_ex` (`create_cq_ex`) makes the same CQ with the
//! extended poll: `ibv_start_poll` enters the CQ's critical region (a flag
//! a second poller waits on) and reads one completion as `poll_cq` does,
//! into the CQ's current entry; `ibv_next_poll` reads the next;
//! `ibv_end_poll` leaves. The `ibv_wc_read_*` calls answer from the current
//! entry. The `wc_flags` offered are those rdma-core's rxe offers, every
//! field a ring completion carries: BYTE_LEN, IMM, QP_NUM, SRC_QP, SLID,
//! SL, DLID_PATH_BITS. Others (completion timestamps: the ring carries
//! none; CVLAN, flow tag, tag matching) are EOPNOTSUPP.
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

use crate::libc_errno::{EINVAL, EIO, ENOENT, EOPNOTSUPP};
use crate::ring::Ring;
use crate::sys::*;
use crate::{calloc_obj, free_obj, lock, set_errno, zeroed_c, Region};

/// The consumer's side of a CQ ring: the ring and the next index to read.
struct CqRing {
    ring: Ring,
    cons: u32,
    /// The completion an `ibv_start_poll`/`ibv_next_poll` read last, which
    /// the `ibv_wc_read_*` calls answer from.
    cur: ibv_wc,
}

/// ferroce's completion queue (`verbs_cq`, whose `ibv_cq` is at offset 0,
/// first).
#[repr(C)]
pub(crate) struct FerroceCq {
    vcq: verbs_cq,
    /// Initialised in place by `new_cq` (the object is `calloc`ed).
    ring: Mutex<CqRing>,
    /// Set between `ibv_start_poll` (when it found a completion) and
    /// `ibv_end_poll`: the CQ's critical region for the extended poll.
    polling: Region,
}

const _: () = assert!(core::mem::offset_of!(FerroceCq, vcq) == 0);

/// The create-CQ response: the core part, then ferroce's ring.
#[repr(C)]
struct CreateCqResp {
    core: ib_uverbs_create_cq_resp,
    drv: ferroce_create_cq_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateCqResp, drv) == size_of::<ib_uverbs_create_cq_resp>());

/// The extended create-CQ response: the core part, then ferroce's ring.
#[repr(C)]
struct CreateCqExResp {
    core: ib_uverbs_ex_create_cq_resp,
    drv: ferroce_create_cq_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateCqExResp, drv) == size_of::<ib_uverbs_ex_create_cq_resp>());
// The ibv_cq, and the ibv_cq_ex that overlays it, at offset 0.
const _: () = assert!(core::mem::offset_of!(verbs_cq, __bindgen_anon_1) == 0);

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
    // SAFETY: a zeroed ibv_wc is a valid value.
    let cur = unsafe { zeroed_c() };
    Ok(CqRing { ring, cons, cur })
}

/// Allocates a CQ object, has `cmd` create the kernel's CQ for it (and
/// answer the ring's place), and maps the ring. NULL with `errno` on
/// failure, nothing left behind.
///
/// # Safety
/// `context` is a live context of this provider; `cmd` makes one
/// `ibv_cmd_create_cq*` call for the `verbs_cq` it is given.
unsafe fn new_cq(
    context: *mut ibv_context,
    cmd: impl FnOnce(*mut verbs_cq) -> Result<ferroce_ring_map, c_int>,
) -> *mut FerroceCq {
    // SAFETY: FerroceCq is a C structure valid when zeroed but for the
    // lock and the poll session, written below before any use.
    let cq = unsafe { calloc_obj::<FerroceCq>() };
    if cq.is_null() {
        return null_mut();
    }
    // SAFETY: `cq` is a fresh allocation of the right size; the fields were
    // never initialised, so nothing is dropped.
    unsafe {
        core::ptr::addr_of_mut!((*cq).ring).write(Mutex::new(CqRing {
            ring: Ring::none(),
            cons: 0,
            // SAFETY: a zeroed ibv_wc is a valid value.
            cur: zeroed_c(),
        }));
        core::ptr::addr_of_mut!((*cq).polling).write(Region::new());
    }
    // SAFETY: `cq` is live; its verbs_cq is at offset 0.
    let map = match cmd(unsafe { core::ptr::addr_of_mut!((*cq).vcq) }) {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: the kernel created nothing; `cq` is ours.
            unsafe { release(cq) };
            set_errno(e);
            return null_mut();
        }
    };
    // SAFETY: `context` is live.
    match unsafe { map_cq_ring(context, &map) } {
        Ok(r) => {
            // SAFETY: `cq` is live and not yet shared.
            *lock(unsafe { &(*cq).ring }) = r;
            cq
        }
        Err(e) => {
            // SAFETY: the kernel's CQ is unusable without its ring: destroy
            // it, then the object (nothing else knows it yet).
            unsafe {
                ibv_cmd_destroy_cq(cq.cast::<ibv_cq>());
                release(cq);
            }
            set_errno(e);
            null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let cmd = |vcq: *mut verbs_cq| {
        // SAFETY: plain C command/response structures.
        let (mut cmd, mut resp): (ibv_create_cq, CreateCqResp) = unsafe { (zeroed_c(), zeroed_c()) };
        // SAFETY: `context` and `channel` (or NULL) come from libibverbs;
        // the ibv_cq is at offset 0 of the fresh verbs_cq; cmd/resp are
        // buffers of the sizes passed (the driver part follows the core
        // response).
        let ret = unsafe {
            ibv_cmd_create_cq(
                context,
                cqe,
                channel,
                comp_vector,
                vcq.cast::<ibv_cq>(),
                &mut cmd,
                size_of::<ibv_create_cq>(),
                &mut resp.core,
                size_of::<CreateCqResp>(),
            )
        };
        if ret == 0 { Ok(resp.drv.cq) } else { Err(ret) }
    };
    // SAFETY: `context` is this provider's; `cmd` creates the CQ once.
    unsafe { new_cq(context, cmd) }.cast::<ibv_cq>()
}

/// The `wc_flags` an extended CQ offers: every field a ring completion
/// carries (rdma-core's rxe offers the same set). Completion timestamps
/// (the ring has none), CVLAN, flow tags and tag matching are refused with
/// EOPNOTSUPP.
const WC_FLAGS: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's attribute, checked non-NULL.
    let a = unsafe { &*attr };
    // Creation flags: SINGLE_THREADED is a hint (the CQ keeps its lock);
    // IGNORE_OVERRUN and parent domains are not offered.
    let flags_ok = a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS == 0 || a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED == 0;
    if a.wc_flags & !WC_FLAGS != 0 || a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 || !flags_ok {
        set_errno(EOPNOTSUPP);
        return null_mut();
    }
    let cmd = |vcq: *mut verbs_cq| {
        // SAFETY: plain C command/response structures.
        let (mut cmd, mut resp): (ibv_create_cq_ex, CreateCqExResp) = unsafe { (zeroed_c(), zeroed_c()) };
        // SAFETY: `context` comes from libibverbs, `a` is the caller's
        // attribute, `vcq` the fresh verbs_cq; cmd/resp are buffers of the
        // sizes passed (the driver part follows the core response).
        let ret = unsafe {
            ibv_cmd_create_cq_ex(
                context,
                a,
                null_mut(),
                vcq,
                &mut cmd,
                size_of::<ibv_create_cq_ex>(),
                &mut resp.core,
                size_of::<CreateCqExResp>(),
                0,
            )
        };
        if ret == 0 { Ok(resp.drv.cq) } else { Err(ret) }
    };
    // SAFETY: `context` is this provider's; `cmd` creates the CQ once.
    let cq = unsafe { new_cq(context, cmd) };
    if cq.is_null() {
        return null_mut();
    }
    let has = |f: u32| a.wc_flags & u64::from(f) != 0;
    // SAFETY: `cq` is live and not yet shared; the union's ibv_cq_ex member
    // extends the ibv_cq the kernel command filled, and only the
    // extension's callbacks are written.
    let x = unsafe { &mut (*cq).vcq.__bindgen_anon_1.cq_ex };
    x.start_poll = Some(start_poll);
    x.next_poll = Some(next_poll);
    x.end_poll = Some(end_poll);
    x.read_opcode = Some(read_opcode);
    x.read_vendor_err = Some(read_vendor_err);
    x.read_wc_flags = Some(read_wc_flags);
    x.read_byte_len = has(IBV_WC_EX_WITH_BYTE_LEN).then_some(read_byte_len as unsafe extern "C" fn(_) -> _);
    x.read_imm_data = has(IBV_WC_EX_WITH_IMM).then_some(read_imm_data as unsafe extern "C" fn(_) -> _);
    x.read_qp_num = has(IBV_WC_EX_WITH_QP_NUM).then_some(read_qp_num as unsafe extern "C" fn(_) -> _);
    x.read_src_qp = has(IBV_WC_EX_WITH_SRC_QP).then_some(read_src_qp as unsafe extern "C" fn(_) -> _);
    x.read_slid = has(IBV_WC_EX_WITH_SLID).then_some(read_slid as unsafe extern "C" fn(_) -> _);
    x.read_sl = has(IBV_WC_EX_WITH_SL).then_some(read_sl as unsafe extern "C" fn(_) -> _);
    x.read_dlid_path_bits =
        has(IBV_WC_EX_WITH_DLID_PATH_BITS).then_some(read_dlid_path_bits as unsafe extern "C" fn(_) -> _);
    x
}

/// Frees a CQ object (its ring already unmapped or never mapped).
///
/// # Safety
/// `cq` came from `new_cq`'s allocation, with its lock initialised, and
/// is not used afterwards.
unsafe fn release(cq: *mut FerroceCq) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*cq).ring));
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*cq).polling));
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

/// Reads up to `want` completions into `wc`: the ring's, then, when it
/// held fewer and the kernel keeps completions waiting, those (see the
/// module's text). Returns how many, or -1 with `errno` when there is no
/// ring or the kernel's poll failed before any completion was read.
///
/// # Safety
/// `cq` is this provider's CQ, `r` its ring under its lock, `wc` valid for
/// `want` writes.
unsafe fn poll_ring(cq: *mut ibv_cq, r: &mut CqRing, wc: *mut ibv_wc, want: usize) -> c_int {
    if !r.ring.is_mapped() {
        // A resize that could not map the new ring left the CQ without one.
        set_errno(EIO);
        return -1;
    }
    // SAFETY: `wc` holds `want` entries (the caller's contract).
    let mut got = unsafe { drain(r, wc, want) };
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
            got += unsafe { drain(r, wc.add(got), want - got) };
        }
    }
    got as c_int
}

pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
        set_errno(EINVAL);
        return -1;
    }
    if num_entries == 0 {
        return 0;
    }
    // SAFETY: `cq` is the ibv_cq at offset 0 of a FerroceCq from `new_cq`.
    let mut r = lock(unsafe { &(*cq.cast::<FerroceCq>()).ring });
    // SAFETY: `cq` is this provider's, `r` its ring, `wc` holds
    // `num_entries` entries (the caller's contract).
    unsafe { poll_ring(cq, &mut r, wc, num_entries as usize) }
}

/// The FerroceCq of an extended CQ.
///
/// # Safety
/// `cq` is the `ibv_cq_ex` of a CQ `create_cq_ex` made.
unsafe fn cq_of<'a>(cq: *mut ibv_cq_ex) -> &'a FerroceCq {
    // SAFETY: the ibv_cq_ex overlays the ibv_cq at offset 0 of the
    // FerroceCq (asserted above).
    unsafe { &*cq.cast::<FerroceCq>() }
}

/// Reads the next completion into `cur` and the CQ's `status` and `wr_id`:
/// 0, ENOENT when there is none, or an errno. The slot is released at
/// once (its copy is what the `read_*` calls answer from).
///
/// # Safety
/// `cq` is the `ibv_cq_ex` of a CQ `create_cq_ex` made.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: forwarded from the caller.
    let c = unsafe { cq_of(cq) };
    let mut r = lock(&c.ring);
    // SAFETY: a zeroed ibv_wc is a valid value.
    let mut wc: ibv_wc = unsafe { zeroed_c() };
    // SAFETY: the ibv_cq_ex starts with the CQ's ibv_cq; `wc` holds one
    // entry.
    match unsafe { poll_ring(cq.cast::<ibv_cq>(), &mut r, &mut wc, 1) } {
        1 => {
            r.cur = wc;
            // SAFETY: the caller's live ibv_cq_ex.
            unsafe {
                (*cq).status = wc.status;
                (*cq).wr_id = wc.wr_id;
            }
            0
        }
        0 => ENOENT,
        _ => crate::errno().max(1),
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `attr` is NULL or the caller's.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return EINVAL;
    }
    // SAFETY: libibverbs passes the CQ's own ibv_cq_ex.
    let c = unsafe { cq_of(cq) };
    c.polling.enter();
    // SAFETY: as above.
    let ret = unsafe { advance(cq) };
    if ret != 0 {
        // No completion: the caller does not call ibv_end_poll.
        c.polling.leave();
    }
    ret
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: libibverbs passes the CQ's own ibv_cq_ex.
    unsafe { advance(cq) }
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: libibverbs passes the CQ's own ibv_cq_ex.
    unsafe { cq_of(cq) }.polling.leave();
}

/// A field of the completion the last poll read.
///
/// # Safety
/// `cq` is the `ibv_cq_ex` of a CQ `create_cq_ex` made.
unsafe fn read<T>(cq: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: forwarded from the caller.
    f(&lock(&unsafe { cq_of(cq) }.ring).cur)
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: libibverbs passes the CQ's own ibv_cq_ex.
    unsafe { read(cq, |w| w.opcode) }
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.vendor_err) }
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> core::ffi::c_uint {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.wc_flags) }
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.byte_len) }
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: as in `read_opcode`; the union is two u32s (the immediate
    // data or the invalidated rkey), either one a valid value.
    unsafe { read(cq, |w| w.__bindgen_anon_1.imm_data) }
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.qp_num) }
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.src_qp) }
}

unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| u32::from(w.slid)) }
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.sl) }
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as in `read_opcode`.
    unsafe { read(cq, |w| w.dlid_path_bits) }
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
