//! Queue pairs (RC and UD use the same commands). Creation, query,
//! modification and destruction are system calls; posting work requests
//! writes them into the QP's send and receive rings (see `ring`).
//!
//! `ibv_create_qp` reaches `create_qp`; `ibv_create_qp_ex` reaches it too
//! when the mask is only `IBV_QP_INIT_ATTR_PD` (libibverbs' inline
//! dispatch), and `create_qp_ex` otherwise. With
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` the QP is an extended one
//! (`ibv_qp_to_qp_ex` answers its `ibv_qp_ex`) and takes the `ibv_wr_*`
//! calls (see `wr`): on RC SEND, SEND with immediate, SEND with
//! invalidate, RDMA WRITE (with immediate), RDMA READ, compare and swap
//! and fetch and add; on UD SEND and SEND with immediate. Those are the
//! opcodes the kernel takes from a ring slot. Asking for another operation
//! (local invalidate, which the kernel takes only from kernel QPs; memory
//! windows; TSO; FLUSH; ATOMIC_WRITE) or for one the QP type cannot do is
//! EOPNOTSUPP, as rdma-core's rxe provider answers. Without the flag,
//! `ibv_qp_to_qp_ex` answers NULL.
//!
//! Both posting APIs write the same slots and make the same checks
//! (`check_wqe`): `post_send` one request at a time, the `ibv_wr_*` calls
//! a batch staged in private memory and published by `wr_complete`.
//!
//! A QP created with an SRQ (`srq` in the init attribute) takes its receive
//! buffers from that SRQ: the kernel attaches it and gives it no receive
//! ring, and `post_recv` on such a QP is refused (the buffers go to
//! `ibv_post_srq_recv`).
//!
//! Posting (`post_send`, `post_recv`): under the side's lock, each work
//! request is checked as the kernel would check it (the errors verbs
//! programmers expect: EINVAL for a request the QP cannot take, ENOMEM for a
//! full queue, `*bad_wr` naming the first request not posted), written into
//! the next slot, and published with a release store of `prod`. The kernel
//! copies and validates each slot once; whatever it refuses completes in
//! error and moves the QP to ERR.
//!
//! Doorbells: after publishing, a full barrier, then a look at the ring's
//! `kflags` and `qp_state`. The kernel sets `FERROCE_RING_NEED_DB` when it
//! stops looking at an idle SQ (and then checks `prod` once more): only
//! then, or when the QP is in error (the new requests are to be flushed),
//! does `post_send` make a system call, a post with an empty list. A receive
//! ring needs that doorbell only in error.

use core::ffi::c_int;
use core::mem::size_of;
use core::ptr::null_mut;
use core::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use crate::libc_errno::{EINVAL, ENOMEM, EOPNOTSUPP};
use crate::ring::Ring;
use crate::sys::*;
use crate::{calloc_obj, free_obj, lock, set_errno, zeroed_c};

/// The producer's side of a ring (SQ, RQ, SRQ): the ring and the next index
/// to write, kept here so that a scribbled header cannot move it.
pub(crate) struct ProdRing {
    pub(crate) ring: Ring,
    pub(crate) prod: u32,
}

impl ProdRing {
    pub(crate) const fn none() -> ProdRing {
        ProdRing {
            ring: Ring::none(),
            prod: 0,
        }
    }

    /// Maps a ring of `T` slots and takes the producer index the kernel
    /// left in it.
    ///
    /// # Safety
    /// `context` is a live context of this provider.
    pub(crate) unsafe fn map<T>(context: *mut ibv_context, m: &ferroce_ring_map) -> Result<ProdRing, c_int> {
        // SAFETY: forwarded from the caller.
        let ring = unsafe { Ring::map(context, m, size_of::<T>()) }?;
        let prod = ring.prod().map_or(0, |p| p.load(Ordering::Relaxed));
        Ok(ProdRing { ring, prod })
    }

    /// How many slots are free (the consumer's index acquired, so that it
    /// is done with the slots about to be overwritten); 0 without a ring.
    pub(crate) fn free(&self) -> u32 {
        self.ring.cons().map_or(0, |c| {
            self.ring
                .entries()
                .saturating_sub(self.prod.wrapping_sub(c.load(Ordering::Acquire)))
        })
    }

    /// Whether another slot is free.
    fn has_room(&self) -> bool {
        self.free() > 0
    }

    /// Writes the first `len` bytes of `slot` (its fields and the part of
    /// its gather list or inline data in use: the kernel reads no more) at
    /// `prod` and publishes it (release store of `prod`). Nothing is
    /// written without a ring or when `T` is not its slot type.
    pub(crate) fn push<T>(&mut self, slot: &T, len: usize) -> bool {
        let p = self.ring.slot::<T>(self.prod);
        let Some(prod) = self.ring.prod() else {
            return false;
        };
        if p.is_null() {
            return false;
        }
        // SAFETY: the slot is inside the mapping, of type T, and free (the
        // caller checked `has_room`): the kernel does not read it until
        // prod passes it; at most size_of::<T>() bytes are copied.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(slot).cast::<u8>(),
                p.cast::<u8>(),
                len.min(size_of::<T>()),
            )
        };
        self.prod = self.prod.wrapping_add(1);
        prod.store(self.prod, Ordering::Release);
        true
    }

    /// The QP state the kernel publishes in the header (`IBV_QPS_*`;
    /// `IBV_QPS_UNKNOWN` without a ring).
    fn qp_state(&self) -> u32 {
        self.ring
            .qp_state()
            .map_or(IBV_QPS_UNKNOWN, |s| s.load(Ordering::Acquire))
    }

    fn kflags(&self) -> u32 {
        self.ring.kflags().map_or(0, |k| k.load(Ordering::Acquire))
    }
}

/// ferroce's queue pair (`verbs_qp`, whose `ibv_qp` is at offset 0, first).
#[repr(C)]
pub(crate) struct FerroceQp {
    pub(crate) vqp: verbs_qp,
    /// Scatter/gather limits the kernel granted at creation, which bound the
    /// work requests this provider posts.
    pub(crate) max_send_sge: u32,
    max_recv_sge: u32,
    /// Created with an SRQ: receive work requests are posted there.
    has_srq: bool,
    pub(crate) is_ud: bool,
    /// UC: SEND and RDMA WRITE only.
    is_uc: bool,
    /// UD: the longest message (`ferroce_create_qp_resp.ud_max_msg`).
    ud_max_msg: u32,
    /// The rings, each under its lock; initialised in place by `create`
    /// (the object is `calloc`ed).
    pub(crate) sq: Mutex<ProdRing>,
    rq: Mutex<ProdRing>,
    /// The `ibv_wr_*` batch between `wr_start` and `wr_complete`/`wr_abort`
    /// (see `wr`); initialised in place by `create`.
    pub(crate) wr: crate::wr::WrSession,
}

// The ibv_qp, and the ibv_qp_ex that overlays it, at offset 0.
const _: () = assert!(core::mem::offset_of!(FerroceQp, vqp) == 0);
const _: () = assert!(core::mem::offset_of!(verbs_qp, __bindgen_anon_1) == 0);

/// The create-QP response: the core part, then ferroce's rings.
#[repr(C)]
struct CreateQpResp {
    core: ib_uverbs_create_qp_resp,
    drv: ferroce_create_qp_resp,
}
const _: () = assert!(core::mem::offset_of!(CreateQpResp, drv) == size_of::<ib_uverbs_create_qp_resp>());

/// Frees a QP object after unmapping its rings.
///
/// # Safety
/// `qp` came from `create`'s allocation with its locks initialised, the
/// kernel object is gone (or never was), and `qp` is not used afterwards.
unsafe fn release(qp: *mut FerroceQp) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        lock(&(*qp).sq).ring.unmap();
        lock(&(*qp).rq).ring.unmap();
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*qp).sq));
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*qp).rq));
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*qp).wr));
        free_obj(qp);
    }
}

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
    // SAFETY: FerroceQp is a C structure valid when zeroed but for the
    // locks and the wr session, written below before any use (a zero
    // verbs_qp comp_mask says "no extended QP" to ibv_qp_to_qp_ex).
    let qp = unsafe { calloc_obj::<FerroceQp>() };
    if qp.is_null() {
        return null_mut();
    }
    // SAFETY: `qp` is a fresh allocation; the fields were never initialised.
    unsafe {
        core::ptr::addr_of_mut!((*qp).sq).write(Mutex::new(ProdRing::none()));
        core::ptr::addr_of_mut!((*qp).rq).write(Mutex::new(ProdRing::none()));
        core::ptr::addr_of_mut!((*qp).wr).write(crate::wr::WrSession::new());
    }
    let ibqp = qp.cast::<ibv_qp>();
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_create_qp, CreateQpResp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `pd` comes from libibverbs, `attr` is a valid init attribute,
    // `ibqp` is the ibv_qp at offset 0 of the fresh object and cmd/resp are
    // buffers of the sizes passed (the driver part follows the core
    // response).
    let ret = unsafe {
        ibv_cmd_create_qp(
            pd,
            ibqp,
            attr,
            &mut cmd,
            size_of::<ibv_create_qp>(),
            &mut resp.core,
            size_of::<CreateQpResp>(),
        )
    };
    if ret != 0 {
        // SAFETY: the kernel created nothing; `qp` is ours.
        unsafe { release(qp) };
        set_errno(ret);
        return null_mut();
    }
    // SAFETY: `pd` is live, so is its context.
    let context = unsafe { (*pd).context };
    let d = &resp.drv;
    // SAFETY: `context` is live.
    let sq = unsafe { ProdRing::map::<ferroce_sq_wqe>(context, &d.sq) };
    // No receive ring on an SRQ-attached QP (entries 0).
    let rq = if d.rq.entries == 0 {
        Ok(ProdRing::none())
    } else {
        // SAFETY: `context` is live.
        unsafe { ProdRing::map::<ferroce_rq_wqe>(context, &d.rq) }
    };
    // SAFETY: `qp` is live and not yet shared.
    let q = unsafe { &mut *qp };
    let err = match (sq, rq) {
        (Ok(s), Ok(r)) => {
            *lock(&q.sq) = s;
            *lock(&q.rq) = r;
            0
        }
        (Err(e), Ok(mut r)) | (Ok(mut r), Err(e)) => {
            r.ring.unmap();
            e
        }
        (Err(e), Err(_)) => e,
    };
    if err != 0 {
        // SAFETY: the kernel's QP is unusable without its rings: destroy
        // it, then the object (nothing else knows it yet).
        unsafe {
            ibv_cmd_destroy_qp(ibqp);
            release(qp);
        }
        set_errno(err);
        return null_mut();
    }
    q.max_send_sge = attr.cap.max_send_sge.min(FERROCE_RING_MAX_SGE);
    q.max_recv_sge = attr.cap.max_recv_sge.min(FERROCE_RING_MAX_SGE);
    q.has_srq = !attr.srq.is_null();
    q.is_ud = attr.qp_type == IBV_QPT_UD;
    q.is_uc = attr.qp_type == IBV_QPT_UC;
    q.ud_max_msg = d.ud_max_msg;
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
    // A PD, create flags only when there are none, and the ibv_wr_* send
    // operations the QP type can carry over the ring (`wr::send_ops_ok`);
    // anything else (XRC, RSS, TSO, memory windows...) is not offered.
    let supported = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    let wants_wr = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if a.comp_mask & !supported != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        || (wants_wr && !crate::wr::send_ops_ok(a.qp_type, a.send_ops_flags))
    {
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
        if wants_wr {
            // SAFETY: `qp` is the ibv_qp at offset 0 of the FerroceQp
            // `create` just made, not yet shared.
            unsafe { crate::wr::install(&mut *qp.cast::<FerroceQp>(), a.send_ops_flags) };
        }
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
        // SAFETY: the kernel object is gone and nobody posts to a QP being
        // destroyed (verbs contract); the ibv_qp is at offset 0 of the
        // FerroceQp `create` allocated.
        unsafe { release(qp.cast::<FerroceQp>()) };
    }
    ret
}

/// The gather list of a work request within the QP's (or SRQ's) limit, as
/// a slice.
///
/// # Safety
/// `sg_list` holds `num_sge` entries when `num_sge > 0` (the caller's
/// contract with verbs).
pub(crate) unsafe fn sges<'a>(num_sge: c_int, sg_list: *const ibv_sge, max: u32) -> Result<&'a [ibv_sge], c_int> {
    match u32::try_from(num_sge) {
        Ok(0) => Ok(&[]),
        Ok(n) if n <= max && n <= FERROCE_RING_MAX_SGE && !sg_list.is_null() => {
            // SAFETY: `n` entries at a non-NULL `sg_list` (caller).
            Ok(unsafe { core::slice::from_raw_parts(sg_list, n as usize) })
        }
        _ => Err(EINVAL),
    }
}

/// The bytes of a send slot the kernel reads: its fields, then
/// `inline_len` inline bytes or `num_sge` entries.
pub(crate) fn sq_wqe_len(w: &ferroce_sq_wqe) -> usize {
    let head = core::mem::offset_of!(ferroce_sq_wqe, __bindgen_anon_1);
    let used = if w.send_flags & IBV_SEND_INLINE != 0 {
        w.inline_len as usize
    } else {
        w.num_sge as usize * size_of::<ferroce_sge>()
    };
    head + used
}

/// The bytes of a receive slot the kernel reads.
fn rq_wqe_len(w: &ferroce_rq_wqe) -> usize {
    core::mem::offset_of!(ferroce_rq_wqe, sge) + w.num_sge as usize * size_of::<ferroce_sge>()
}

/// The ring form of a gather list.
fn ring_sges(list: &[ibv_sge]) -> [ferroce_sge; FERROCE_RING_MAX_SGE as usize] {
    let mut out = [ferroce_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; FERROCE_RING_MAX_SGE as usize];
    for (o, s) in out.iter_mut().zip(list) {
        *o = ferroce_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    out
}

/// A receive work request in its ring form, or EINVAL when its gather list
/// exceeds `max_sge`.
///
/// # Safety
/// `w` is a valid receive work request.
pub(crate) unsafe fn recv_wqe(w: &ibv_recv_wr, max_sge: u32) -> Result<ferroce_rq_wqe, c_int> {
    // SAFETY: the caller's valid request.
    let list = unsafe { sges(w.num_sge, w.sg_list, max_sge) }?;
    Ok(ferroce_rq_wqe {
        wr_id: w.wr_id,
        num_sge: list.len() as u32,
        rsvd: 0,
        sge: ring_sges(list),
        rsvd2: Default::default(),
    })
}

/// Posts a list of receive work requests into a receive ring (RQ or SRQ):
/// each one checked by `check` and `recv_wqe`, ENOMEM when the ring is full.
/// Returns 0 or the errno of the first request not posted (stored in
/// `*bad_wr`).
///
/// # Safety
/// `wr` is NULL or a valid list; `bad_wr` is NULL or valid for writes.
pub(crate) unsafe fn post_recv_ring(
    r: &mut ProdRing,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    check: impl Fn(&ProdRing) -> Result<(), c_int>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: an element of the caller's valid list.
        let w = unsafe { &*cur };
        let posted = check(r)
            // SAFETY: `w` is valid.
            .and_then(|()| unsafe { recv_wqe(w, max_sge) })
            .and_then(|wqe| {
                if r.has_room() && r.push(&wqe, rq_wqe_len(&wqe)) {
                    Ok(())
                } else {
                    Err(ENOMEM)
                }
            });
        if let Err(e) = posted {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-pointer, checked non-NULL.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

/// The send opcodes a QP of each type takes: UD only SENDs, UC SENDs and
/// RDMA WRITEs (no UC opcode carries an invalidate, a READ or an atomic).
fn opcode_ok(q: &FerroceQp, opcode: u32) -> bool {
    match opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => true,
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => !q.is_ud,
        IBV_WR_SEND_WITH_INV | IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            !q.is_ud && !q.is_uc
        }
        // Memory windows: bound and invalidated on RC and UC QPs.
        IBV_WR_BIND_MW | IBV_WR_LOCAL_INV => !q.is_ud,
        // IBTA 1.5 placement operations, RC only (through ibv_wr_flush and
        // ibv_wr_atomic_write: struct ibv_send_wr cannot carry them).
        IBV_WR_FLUSH | IBV_WR_ATOMIC_WRITE => !q.is_ud && !q.is_uc,
        _ => false,
    }
}

/// The ring handle of a UD destination: an AH of this context and of the
/// QP's PD (the kernel fails the QP over one of another PD), else EINVAL.
///
/// # Safety
/// `qp` is this provider's QP; `ah` is NULL or an AH the caller created.
pub(crate) unsafe fn ud_ah(qp: *mut ibv_qp, ah: *mut ibv_ah) -> Result<u32, c_int> {
    // SAFETY: a non-NULL AH is one the caller created (any provider's
    // ibv_ah starts with its context and PD); `qp` is live.
    if ah.is_null() || unsafe { (*ah).context != (*qp).context || (*ah).pd != (*qp).pd } {
        return Err(EINVAL);
    }
    // SAFETY: an AH of this context is a FerroceAh.
    Ok(unsafe { crate::ah::ring_handle(ah) })
}

/// Puts `data` into the slot as its inline payload (EINVAL when it is
/// longer than a slot carries).
pub(crate) fn put_inline(wqe: &mut ferroce_sq_wqe, data: &[u8]) -> Result<(), c_int> {
    let mut buf = [0u8; FERROCE_RING_MAX_INLINE as usize];
    buf.get_mut(..data.len()).ok_or(EINVAL)?.copy_from_slice(data);
    wqe.num_sge = 0;
    wqe.inline_len = data.len() as u32;
    wqe.send_flags |= IBV_SEND_INLINE;
    wqe.__bindgen_anon_1 = ferroce_sq_wqe__bindgen_ty_1 { inline_data: buf };
    Ok(())
}

/// Fills the slot's payload from a gather list: with `IBV_SEND_INLINE` in
/// its flags the bytes are gathered now, as verbs promises (the buffers may
/// be reused as soon as the post returns), else the list itself.
///
/// # Safety
/// With `IBV_SEND_INLINE`, the memory the list names is readable (the
/// inline contract).
pub(crate) unsafe fn put_data(wqe: &mut ferroce_sq_wqe, list: &[ibv_sge]) -> Result<(), c_int> {
    if wqe.send_flags & IBV_SEND_INLINE == 0 {
        wqe.num_sge = list.len() as u32;
        wqe.__bindgen_anon_1 = ferroce_sq_wqe__bindgen_ty_1 { sge: ring_sges(list) };
        return Ok(());
    }
    let mut data = [0u8; FERROCE_RING_MAX_INLINE as usize];
    let mut at = 0usize;
    for s in list {
        let len = s.length as usize;
        let dst = data.get_mut(at..at.saturating_add(len)).ok_or(EINVAL)?;
        if len > 0 {
            // SAFETY: `dst` is `len` bytes of `data`; the source is the
            // caller's readable buffer (inline contract).
            unsafe { core::ptr::copy_nonoverlapping(s.addr as usize as *const u8, dst.as_mut_ptr(), len) };
        }
        at += len;
    }
    put_inline(wqe, data.get(..at).ok_or(EINVAL)?)
}

/// The checks the kernel makes on a slot at post time, on its ring form
/// (EINVAL for anything the QP cannot take): the opcode for the QP type,
/// the gather list within the QP's limit, inline data only on SEND and
/// WRITE and within a slot, a UD message within the path MTU.
pub(crate) fn check_wqe(q: &FerroceQp, w: &ferroce_sq_wqe) -> Result<(), c_int> {
    if !opcode_ok(q, w.opcode) {
        return Err(EINVAL);
    }
    let total = if w.send_flags & IBV_SEND_INLINE != 0 {
        let is_read_or_atomic = matches!(
            w.opcode,
            IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        );
        if is_read_or_atomic || w.inline_len > FERROCE_RING_MAX_INLINE {
            return Err(EINVAL);
        }
        u64::from(w.inline_len)
    } else {
        if w.num_sge > q.max_send_sge.min(FERROCE_RING_MAX_SGE) {
            return Err(EINVAL);
        }
        // SAFETY: a union of plain integers; without INLINE the list is
        // the member in use.
        let sge = unsafe { &w.__bindgen_anon_1.sge };
        sge.iter().take(w.num_sge as usize).map(|s| u64::from(s.length)).sum()
    };
    let total = u32::try_from(total).map_err(|_| EINVAL)?;
    // A UD message is one packet: longer than the path MTU is refused.
    if q.is_ud && total > q.ud_max_msg {
        return Err(EINVAL);
    }
    Ok(())
}

/// A send work request in its ring form, after the checks the kernel makes
/// at post time (EINVAL for anything the QP cannot take).
///
/// # Safety
/// `qp` is this provider's QP, `w` a valid send work request for it (its
/// gather list, and with `IBV_SEND_INLINE` the memory the list names,
/// readable).
unsafe fn send_wqe(qp: *mut ibv_qp, q: &FerroceQp, w: &ibv_send_wr) -> Result<ferroce_sq_wqe, c_int> {
    // First: the opcode says which member of the request's union is used
    // (FLUSH and ATOMIC WRITE have none: ibv_wr_* only).
    if !opcode_ok(q, w.opcode) || matches!(w.opcode, IBV_WR_FLUSH | IBV_WR_ATOMIC_WRITE) {
        return Err(EINVAL);
    }
    // SAFETY: the caller's valid request.
    let list = unsafe { sges(w.num_sge, w.sg_list, q.max_send_sge) }?;
    // SAFETY: all-zero is a valid WQE (integers and arrays of them).
    let mut wqe: ferroce_sq_wqe = unsafe { zeroed_c() };
    wqe.wr_id = w.wr_id;
    wqe.opcode = w.opcode;
    wqe.send_flags = w.send_flags & SEND_FLAGS;
    if matches!(
        w.opcode,
        IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV
    ) {
        // SAFETY: a union of two u32s: the immediate data (already in
        // network order) or the rkey to invalidate, passed as stored.
        wqe.imm_data = unsafe { w.__bindgen_anon_1.imm_data };
    }
    if q.is_ud {
        // SAFETY: on a UD QP the `ud` member is the one in use.
        let ud = unsafe { w.wr.ud };
        // SAFETY: `qp` is this provider's QP; the AH is NULL or the
        // caller's.
        wqe.ah = unsafe { ud_ah(qp, ud.ah) }?;
        wqe.remote_qpn = ud.remote_qpn;
        wqe.remote_qkey = ud.remote_qkey;
    } else {
        match w.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                // SAFETY: RDMA requests use the `rdma` member.
                let r = unsafe { w.wr.rdma };
                wqe.remote_addr = r.remote_addr;
                wqe.rkey = r.rkey;
            }
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: atomic requests use the `atomic` member.
                let a = unsafe { w.wr.atomic };
                wqe.remote_addr = a.remote_addr;
                wqe.rkey = a.rkey;
                wqe.compare_add = a.compare_add;
                wqe.swap = a.swap;
            }
            IBV_WR_BIND_MW => {
                // SAFETY: a bind uses the `bind_mw` member; its window and
                // region are the caller's (NULL region: a type 1 unbind).
                unsafe {
                    let b = &w.__bindgen_anon_2.bind_mw;
                    put_bind(&mut wqe, b.mw, b.rkey, &b.bind_info)?;
                }
            }
            _ => {}
        }
    }
    if matches!(w.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV) {
        // A local operation moves no data: its gather list is ignored.
        wqe.send_flags &= !IBV_SEND_INLINE;
        return Ok(wqe);
    }
    // Inline data is refused on READ and atomics before anything is read.
    if wqe.send_flags & IBV_SEND_INLINE != 0 {
        check_wqe(q, &wqe)?;
    }
    // SAFETY: the inline contract is the caller's.
    unsafe { put_data(&mut wqe, list) }?;
    check_wqe(q, &wqe)?;
    Ok(wqe)
}

/// Fills a bind's slot: the window `mw` (by its current rkey) takes
/// `rkey` over `info`'s range of its region. EINVAL without a window.
///
/// # Safety
/// `mw` is NULL or a window of this context; `info.mr` NULL or a region.
pub(crate) unsafe fn put_bind(wqe: &mut ferroce_sq_wqe, mw: *mut ibv_mw, rkey: u32, info: &ibv_mw_bind_info) -> Result<(), c_int> {
    if mw.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the caller's live window and, when not NULL, region.
    unsafe {
        wqe.imm_data = (*mw).rkey;
        wqe.bind_lkey = if info.mr.is_null() { 0 } else { (*info.mr).lkey };
    }
    wqe.rkey = rkey;
    wqe.remote_addr = info.addr;
    wqe.compare_add = info.length;
    wqe.bind_access = info.mw_access_flags;
    Ok(())
}

/// The send flags ferroce acts on; others (checksum offloads...) are
/// ignored, as the system-call path always did: the kernel refuses a slot
/// with unknown flags.
pub(crate) const SEND_FLAGS: u32 = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

/// Whether the send queue takes requests in the QP state the kernel
/// published: not yet (RESET, INIT, RTR) or not a state at all (a
/// scribbled header) is EINVAL; SQD, SQE and ERR take requests (the last
/// two flush them).
pub(crate) fn sq_accepts(s: &ProdRing) -> Result<(), c_int> {
    if matches!(s.qp_state(), IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE | IBV_QPS_ERR) {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// After requests were published on the SQ: the doorbell system call when
/// the kernel asked for one or the QP is in error (so that it flushes the
/// new requests). Releases the send side's lock first.
///
/// # Safety
/// `qp` is this provider's QP and `s` its send side.
pub(crate) unsafe fn send_doorbell(qp: *mut ibv_qp, s: std::sync::MutexGuard<'_, ProdRing>) {
    // The kernel sets NEED_DB and then looks at prod; we stored prod and
    // now look at the flag: a full barrier so one side sees the other.
    fence(Ordering::SeqCst);
    let need_db = s.kflags() & FERROCE_RING_NEED_DB != 0;
    let state = s.qp_state();
    drop(s);
    if need_db || state == IBV_QPS_ERR || state == IBV_QPS_SQE {
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: `qp` is this provider's QP; an empty list is a
        // doorbell. Its result does not change what was posted: the
        // requests are in the ring, for the kernel's next look.
        unsafe { ibv_cmd_post_send(qp, null_mut(), &mut bad) };
    }
}

pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` is the ibv_qp at offset 0 of a FerroceQp from `create`.
    let q = unsafe { &*qp.cast::<FerroceQp>() };
    let mut s = lock(&q.sq);
    let mut cur = wr;
    let mut ret = 0;
    let mut published = 0usize;
    while !cur.is_null() {
        // SAFETY: an element of the caller's valid list.
        let w = unsafe { &*cur };
        let posted = sq_accepts(&s)
            // SAFETY: `qp` is this provider's QP and `w` a valid request.
            .and_then(|()| unsafe { send_wqe(qp, q, w) })
            .and_then(|wqe| {
                if s.has_room() && s.push(&wqe, sq_wqe_len(&wqe)) {
                    Ok(())
                } else {
                    Err(ENOMEM)
                }
            });
        if let Err(e) = posted {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-pointer, checked non-NULL.
                unsafe { *bad_wr = cur };
            }
            ret = e;
            break;
        }
        published += 1;
        cur = w.next;
    }
    if published > 0 {
        // SAFETY: `qp` is this provider's QP, `s` its send side.
        unsafe { send_doorbell(qp, s) };
    }
    ret
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `qp` is the ibv_qp at offset 0 of a FerroceQp from `create`.
    let q = unsafe { &*qp.cast::<FerroceQp>() };
    if q.has_srq {
        // The QP has no receive queue of its own: the first request (the
        // whole list) is refused, nothing is posted.
        if !bad_wr.is_null() {
            // SAFETY: the caller's out-pointer, checked non-NULL.
            unsafe { *bad_wr = wr };
        }
        return EINVAL;
    }
    let mut r = lock(&q.rq);
    let before = r.prod;
    // Receives may be posted from INIT on; RESET (or not a state at all) is
    // EINVAL. A QP without a receive ring (no receive queue) is always full.
    let check = |r: &ProdRing| match r.qp_state() {
        _ if !r.ring.is_mapped() => Err(ENOMEM),
        IBV_QPS_INIT | IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE | IBV_QPS_ERR => Ok(()),
        _ => Err(EINVAL),
    };
    // SAFETY: `wr`/`bad_wr` are the caller's list and out-pointer.
    let ret = unsafe { post_recv_ring(&mut r, wr, bad_wr, q.max_recv_sge, check) };
    if r.prod != before {
        // Only a QP in error needs to hear of new receives (to flush them).
        fence(Ordering::SeqCst);
        let state = r.qp_state();
        drop(r);
        if state == IBV_QPS_ERR {
            let mut bad: *mut ibv_recv_wr = null_mut();
            // SAFETY: `qp` is this provider's QP; an empty list is a
            // doorbell (its result does not change what was posted).
            unsafe { ibv_cmd_post_recv(qp, null_mut(), &mut bad) };
        }
    }
    ret
}
