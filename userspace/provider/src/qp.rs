//! Queue pairs (RC and UD use the same commands) on the system-call path:
//! creation, query, modification, destruction, and posting of send and
//! receive work requests through the kernel.
//!
//! `ibv_create_qp` reaches `create_qp`; `ibv_create_qp_ex` reaches it too
//! when the mask is only `IBV_QP_INIT_ATTR_PD` (libibverbs' inline
//! dispatch), and `create_qp_ex` otherwise. The extended work-request API
//! (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, `ibv_wr_*`) is not offered:
//! `ibv_qp_to_qp_ex` answers NULL for ferroce QPs.
//!
//! A QP created with an SRQ (`srq` in the init attribute) takes its receive
//! buffers from that SRQ: the kernel attaches it, and `post_recv` on such a
//! QP is refused (the buffers go to `ibv_post_srq_recv`).

use core::ffi::c_int;
use core::mem::{size_of, MaybeUninit};
use core::ptr::null_mut;

use crate::libc_errno::{EINVAL, EOPNOTSUPP};
use crate::sys::*;
use crate::{calloc_obj, free_obj, set_errno, zeroed_c};

/// ferroce's queue pair (`verbs_qp`, whose `ibv_qp` is at offset 0, first).
#[repr(C)]
pub(crate) struct FerroceQp {
    vqp: verbs_qp,
    /// Scatter/gather limits the kernel granted at creation, which bound the
    /// work requests this provider forwards.
    max_send_sge: u32,
    max_recv_sge: u32,
    /// Created with an SRQ: receive work requests are posted there.
    has_srq: bool,
}

const _: () = assert!(core::mem::offset_of!(FerroceQp, vqp) == 0);

/// Creates the QP for a plain init attribute; on success `attr.cap` holds
/// what the kernel granted.
///
/// # Safety
/// `pd` is a PD of this provider.
unsafe fn create(pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> *mut ibv_qp {
    // An SRQ of another context has a handle that means nothing (or
    // something else) to this context's kernel object table.
    // SAFETY: `pd` is a PD of this provider; `attr.srq`, when set, is an
    // SRQ the caller created.
    if !attr.srq.is_null() && unsafe { (*attr.srq).context != (*pd).context } {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: FerroceQp is a C structure valid when zeroed (a zero
    // verbs_qp comp_mask says "no extended QP" to ibv_qp_to_qp_ex).
    let qp = unsafe { calloc_obj::<FerroceQp>() };
    if qp.is_null() {
        return null_mut();
    }
    let ibqp = qp.cast::<ibv_qp>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_qp, ib_uverbs_create_qp_resp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs, `attr` is a valid init attribute,
    // `ibqp` is the ibv_qp at offset 0 of the fresh object and cmd/resp are
    // buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_qp(
            pd,
            ibqp,
            attr,
            &mut cmd,
            size_of::<ibv_create_qp>(),
            &mut resp,
            size_of::<ib_uverbs_create_qp_resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `qp` is ours.
        unsafe { free_obj(qp) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `qp` is live and not yet shared.
    unsafe {
        (*qp).max_send_sge = attr.cap.max_send_sge;
        (*qp).max_recv_sge = attr.cap.max_recv_sge;
        (*qp).has_srq = !attr.srq.is_null();
    }
    ibqp
}

pub(crate) unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    if pd.is_null() || attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's init attribute, checked non-NULL; `pd` is from
    // libibverbs.
    unsafe { create(pd, &mut *attr) }
}

pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr_ex: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr_ex.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's extended init attribute, checked non-NULL.
    let a = unsafe { &mut *attr_ex };
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // A PD, and create flags only when there are none; anything else (XRC,
    // RSS, TSO, the ibv_wr_* send API...) is not offered.
    let supported = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if a.comp_mask & !supported != 0 || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0) {
        set_errno(EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: `a.pd` is a PD the caller allocated (checked non-NULL).
    if unsafe { (*a.pd).context } != context {
        set_errno(EINVAL);
        return null_mut();
    }
    let mut attr = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // SAFETY: `a.pd` is a PD of this context.
    let qp = unsafe { create(a.pd, &mut attr) };
    if !qp.is_null() {
        a.cap = attr.cap;
    }
    qp
}

pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if attr.is_null() || init_attr.is_null() {
        return EINVAL;
    }
    // SAFETY: a plain C command structure.
    let mut cmd: ibv_query_qp = unsafe { zeroed_c() };
    // SAFETY: `qp` is a QP from `create_qp`; attr/init_attr are the
    // caller's (checked non-NULL); cmd is a buffer of the size passed.
    unsafe { ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, &mut cmd, size_of::<ibv_query_qp>()) }
}

pub(crate) unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
    if attr.is_null() {
        return EINVAL;
    }
    // SAFETY: a plain C command structure.
    let mut cmd: ibv_modify_qp = unsafe { zeroed_c() };
    // SAFETY: `qp` is a QP from `create_qp`; attr is the caller's (checked
    // non-NULL); cmd is a buffer of the size passed. For RoCE the kernel
    // resolves the destination MAC of an address vector.
    unsafe { ibv_cmd_modify_qp(qp, attr, attr_mask, &mut cmd, size_of::<ibv_modify_qp>()) }
}

pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: `qp` is a QP from `create_qp`. libibverbs waits there for the
    // events the kernel reported to be acknowledged.
    let ret = unsafe { ibv_cmd_destroy_qp(qp) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; the ibv_qp is at offset 0 of
        // the FerroceQp `create` allocated.
        unsafe { free_obj(qp.cast::<FerroceQp>()) };
    }
    ret
}

/// Work requests forwarded per system call. libibverbs builds each command
/// on its stack (`alloca`), so a long list is posted as a series of bounded
/// commands rather than one unbounded one; the verbs contract (everything
/// before `*bad_wr` was posted) holds across the series.
const POST_CHUNK: usize = 16;

/// A work-request list element (`ibv_send_wr`, `ibv_recv_wr`).
pub(crate) trait WorkRequest: Copy {
    fn next(&self) -> *mut Self;
    fn set_next(&mut self, next: *mut Self);
}

impl WorkRequest for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl WorkRequest for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Posts the caller's list `wr` with `post` (an `ibv_cmd_post_*`), at most
/// `POST_CHUNK` requests a call, each request first checked by `check`.
/// The caller's list is never modified: `post` sees copies, linked among
/// themselves, that share the caller's scatter/gather arrays. On failure
/// `*bad_wr` names the caller's request that failed (or the first of the
/// call that failed when the kernel could not say) and the errno returns.
///
/// # Safety
/// `wr` is NULL or a valid list; `bad_wr` is valid for writes.
pub(crate) unsafe fn post_chunked<W: WorkRequest>(
    wr: *mut W,
    bad_wr: *mut *mut W,
    check: impl Fn(&W) -> Result<(), c_int>,
    post: impl Fn(*mut W, *mut *mut W) -> c_int,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        let mut copies = [MaybeUninit::<W>::uninit(); POST_CHUNK];
        let mut origs = [null_mut::<W>(); POST_CHUNK];
        let mut n = 0;
        let mut invalid = 0;
        while n < POST_CHUNK && !cur.is_null() {
            // SAFETY: `cur` is an element of the caller's valid list.
            let w = unsafe { &*cur };
            if let Err(e) = check(w) {
                invalid = e;
                break;
            }
            let mut c = *w;
            c.set_next(null_mut());
            copies[n].write(c);
            origs[n] = cur;
            cur = w.next();
            n += 1;
        }
        if n > 0 {
            let base = copies.as_mut_ptr().cast::<W>();
            for i in 1..n {
                // SAFETY: elements 0..n are initialised, inside `copies`.
                unsafe { (*base.add(i - 1)).set_next(base.add(i)) };
            }
            let mut bad: *mut W = null_mut();
            let ret = post(base, &mut bad);
            if ret != 0 {
                // `bad` points into `copies` (libibverbs walks the list it
                // was given); map it back to the caller's element.
                let off = (bad as usize).wrapping_sub(base as usize) / size_of::<W>();
                let idx = if bad.is_null() || off >= n { 0 } else { off };
                // SAFETY: `bad_wr` is valid for writes (caller's contract).
                unsafe { *bad_wr = origs[idx] };
                return ret;
            }
        }
        if invalid != 0 {
            // SAFETY: as above; `cur` is the rejected request.
            unsafe { *bad_wr = cur };
            return invalid;
        }
    }
    0
}

/// The scatter/gather list of a work request, within the QP's (or SRQ's)
/// limit.
pub(crate) fn check_sges(num_sge: c_int, sg_list: *mut ibv_sge, max: u32) -> Result<(), c_int> {
    match u32::try_from(num_sge) {
        Ok(n) if n <= max && (n == 0 || !sg_list.is_null()) => Ok(()),
        _ => Err(EINVAL),
    }
}

pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` is the ibv_qp at offset 0 of a FerroceQp from `create`.
    let (is_ud, max_sge) = unsafe { ((*qp).qp_type == IBV_QPT_UD, (*qp.cast::<FerroceQp>()).max_send_sge) };
    let check = |w: &ibv_send_wr| {
        check_sges(w.num_sge, w.sg_list, max_sge)?;
        if is_ud {
            // A UD request carries its destination; libibverbs reads the
            // AH's handle, so a missing one must not get that far.
            // SAFETY: on a UD QP the `ud` member is the one in use.
            let ah = unsafe { w.wr.ud.ah };
            if ah.is_null() || (w.opcode != IBV_WR_SEND && w.opcode != IBV_WR_SEND_WITH_IMM) {
                return Err(EINVAL);
            }
        }
        Ok(())
    };
    let post = |w: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr| {
        // SAFETY: `qp` is this provider's QP; `w` is a valid chunk and `bad`
        // a valid out-pointer (post_chunked's contract).
        unsafe { ibv_cmd_post_send(qp, w, bad) }
    };
    // SAFETY: `wr`/`bad_wr` are the caller's list and out-pointer.
    unsafe { post_chunked(wr, bad_wr, check, post) }
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `qp` is the ibv_qp at offset 0 of a FerroceQp from `create`.
    let (max_sge, has_srq) = unsafe {
        let q = &*qp.cast::<FerroceQp>();
        (q.max_recv_sge, q.has_srq)
    };
    if has_srq {
        // The QP has no receive queue of its own: the first request (the
        // whole list) is refused, nothing is posted.
        if !bad_wr.is_null() {
            // SAFETY: the caller's out-pointer, checked non-NULL.
            unsafe { *bad_wr = wr };
        }
        return EINVAL;
    }
    let check = |w: &ibv_recv_wr| check_sges(w.num_sge, w.sg_list, max_sge);
    let post = |w: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr| {
        // SAFETY: `qp` is this provider's QP; `w` is a valid chunk and `bad`
        // a valid out-pointer (post_chunked's contract).
        unsafe { ibv_cmd_post_recv(qp, w, bad) }
    };
    // SAFETY: `wr`/`bad_wr` are the caller's list and out-pointer.
    unsafe { post_chunked(wr, bad_wr, check, post) }
}
