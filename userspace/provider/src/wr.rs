//! The extended post API (`ibv_wr_*`, man ibv_wr_post) of QPs created with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, over the same SQ ring as `post_send`.
//!
//! `wr_start` enters the QP's critical region (a per-QP session flag: a
//! second thread waits until the first leaves it). Each builder
//! (`ibv_wr_send`, `ibv_wr_rdma_write`...) starts a request from the QP's
//! `wr_id` and `wr_flags` (SIGNALED, SOLICITED, FENCE, INLINE are kept; other
//! flags are ignored, as `post_send` ignores them); the setters that follow
//! (`wr_set_sge`, `wr_set_sge_list`, `wr_set_inline_data`,
//! `wr_set_inline_data_list`, `wr_set_ud_addr`) complete it. A request is
//! checked when the next builder or `wr_complete` closes it, with the checks
//! `post_send` makes (`qp::check_wqe`), and staged in the session's private
//! memory: nothing reaches the ring before `wr_complete`.
//!
//! `wr_complete` writes the whole batch into the ring and publishes it with
//! one doorbell decision, as `post_send` does; `wr_abort` drops it. The
//! first error of a batch (EINVAL for a request the QP cannot take or a
//! setter without a request; ENOMEM when the batch does not fit in the free
//! slots; EINVAL when the QP is not in a state that takes requests) is
//! latched, later calls of the batch do nothing, and `wr_complete` returns
//! it with nothing posted. Inline data is copied when its setter is called
//! (`IBV_SEND_INLINE` in `wr_flags` with an SGE setter: when the request is
//! closed, at the latest in `wr_complete`).

use core::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::libc_errno::{EINVAL, ENOMEM};
use crate::qp::{check_wqe, put_data, put_inline, send_doorbell, sges, sq_accepts, ud_ah, FerroceQp, SEND_FLAGS};
use crate::sys::*;
use crate::{lock, zeroed_c, Region};

/// The send operations each QP type takes through `ibv_wr_*`: those whose
/// opcode the kernel accepts in a ring slot for that type.
const RC_OPS: u64 = (IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_FLUSH
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;
const UC_OPS: u64 = (IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV) as u64;
const UD_OPS: u64 = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;

/// Whether a QP of `qp_type` can offer every operation in `flags`.
pub(crate) fn send_ops_ok(qp_type: u32, flags: u64) -> bool {
    let ops = match qp_type {
        IBV_QPT_RC => RC_OPS,
        IBV_QPT_UC => UC_OPS,
        IBV_QPT_UD => UD_OPS,
        _ => return false,
    };
    flags & !ops == 0
}

/// The request being built: its slot so far, and its gather list until the
/// request is closed.
struct Pending {
    wqe: ferroce_sq_wqe,
    sge: [ibv_sge; FERROCE_RING_MAX_SGE as usize],
    num_sge: usize,
    /// An inline setter filled the slot's payload.
    inline_set: bool,
    /// A UD destination was set.
    has_ah: bool,
}

/// A batch between `wr_start` and `wr_complete`/`wr_abort`.
struct Batch {
    open: bool,
    /// The first error of the batch (0: none).
    err: c_int,
    /// Closed requests, in order, not yet in the ring.
    staged: Vec<ferroce_sq_wqe>,
    cur: Option<Pending>,
}

/// A QP's `ibv_wr_*` state: the critical-region flag and the batch (its
/// lock is only ever contended by a caller breaking the region).
pub(crate) struct WrSession {
    region: Region,
    batch: Mutex<Batch>,
}

impl WrSession {
    pub(crate) fn new() -> WrSession {
        WrSession {
            region: Region::new(),
            batch: Mutex::new(Batch {
                open: false,
                err: 0,
                staged: Vec::new(),
                cur: None,
            }),
        }
    }
}

impl Batch {
    fn fail(&mut self, err: c_int) {
        if self.err == 0 {
            self.err = err;
        }
    }

    /// Closes the request being built: checked, then staged.
    fn close(&mut self, q: &FerroceQp) {
        let Some(mut p) = self.cur.take() else { return };
        if self.err != 0 {
            return;
        }
        if matches!(p.wqe.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV | IBV_WR_FLUSH | IBV_WR_ATOMIC_WRITE) {
            // A local operation moves no data, FLUSH none either, and ATOMIC
            // WRITE carries its 8 bytes in the slot: setters are ignored.
            p.num_sge = 0;
            p.inline_set = true;
            p.wqe.inline_len = 0;
            p.wqe.send_flags &= !IBV_SEND_INLINE;
        }
        let list = p.sge.get(..p.num_sge).unwrap_or(&[]);
        let r = if p.inline_set {
            Ok(())
        } else {
            // SAFETY: with IBV_SEND_INLINE in wr_flags, the caller promised
            // the SGEs' memory readable until the batch is posted.
            unsafe { put_data(&mut p.wqe, list) }
        };
        // A UD request needs its destination.
        let addressed = if q.is_ud && !p.has_ah { Err(EINVAL) } else { Ok(()) };
        let r = r.and_then(|()| check_wqe(q, &p.wqe)).and(addressed);
        match r {
            Ok(()) => self.staged.push(p.wqe),
            Err(e) => self.fail(e),
        }
    }

    /// The request the setters apply to; EINVAL latched without one.
    fn current(&mut self) -> Option<&mut Pending> {
        if !self.open || self.err != 0 {
            return None;
        }
        if self.cur.is_none() {
            self.fail(EINVAL);
        }
        self.cur.as_mut()
    }
}

/// The FerroceQp of an extended QP.
///
/// # Safety
/// `qpx` is the `ibv_qp_ex` of a QP `create_qp_ex` made with send ops.
unsafe fn qp_of<'a>(qpx: *mut ibv_qp_ex) -> &'a FerroceQp {
    // SAFETY: the ibv_qp_ex overlays the ibv_qp at offset 0 of the
    // FerroceQp (asserted in `qp`).
    unsafe { &*qpx.cast::<FerroceQp>() }
}

/// A builder: closes the previous request and starts one of `opcode` from
/// the QP's `wr_id` and `wr_flags`, `fill` adding the operation's fields.
///
/// # Safety
/// `qpx` is the `ibv_qp_ex` of a QP `create_qp_ex` made with send ops.
unsafe fn build(qpx: *mut ibv_qp_ex, opcode: u32, fill: impl FnOnce(&mut ferroce_sq_wqe)) {
    // SAFETY: forwarded from the caller.
    let q = unsafe { qp_of(qpx) };
    // SAFETY: the caller's live ibv_qp_ex.
    let (wr_id, wr_flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
    let mut b = lock(&q.wr.batch);
    if !b.open {
        return;
    }
    b.close(q);
    if b.err != 0 {
        return;
    }
    // The batch must fit in the ring's free slots (checked again when it
    // is posted): this also bounds the staging memory.
    if b.staged.len() >= lock(&q.sq).free() as usize {
        b.fail(ENOMEM);
        return;
    }
    // SAFETY: all-zero is a valid WQE and a valid SGE array.
    let (mut wqe, sge): (ferroce_sq_wqe, [ibv_sge; FERROCE_RING_MAX_SGE as usize]) = unsafe { (zeroed_c(), zeroed_c()) };
    wqe.wr_id = wr_id;
    wqe.opcode = opcode;
    wqe.send_flags = wr_flags & SEND_FLAGS;
    fill(&mut wqe);
    b.cur = Some(Pending {
        wqe,
        sge,
        num_sge: 0,
        inline_set: false,
        has_ah: false,
    });
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { build(qpx, IBV_WR_SEND, |_| {}) }
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm_data: __be32) {
    // SAFETY: as in `wr_send`. The immediate data is in network order, as
    // the slot carries it.
    unsafe { build(qpx, IBV_WR_SEND_WITH_IMM, |w| w.imm_data = imm_data) }
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: as in `wr_send`; the slot carries the rkey in imm_data.
    unsafe { build(qpx, IBV_WR_SEND_WITH_INV, |w| w.imm_data = invalidate_rkey) }
}

/// An RDMA builder (WRITE, WRITE with immediate, READ).
///
/// # Safety
/// As `build`.
unsafe fn rdma(qpx: *mut ibv_qp_ex, opcode: u32, rkey: u32, remote_addr: u64, imm_data: u32) {
    // SAFETY: forwarded from the caller.
    unsafe {
        build(qpx, opcode, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.imm_data = imm_data;
        })
    }
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { rdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0) }
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: __be32) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data) }
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { rdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0) }
}

/// An atomic builder (compare and swap, fetch and add).
///
/// # Safety
/// As `build`.
unsafe fn atomic(qpx: *mut ibv_qp_ex, opcode: u32, rkey: u32, remote_addr: u64, compare_add: u64, swap: u64) {
    // SAFETY: forwarded from the caller.
    unsafe {
        build(qpx, opcode, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.compare_add = compare_add;
            w.swap = swap;
        })
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr, compare, swap) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe { atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, add, 0) }
}

unsafe extern "C" fn wr_bind_mw(qpx: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, info: *const ibv_mw_bind_info) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex; the window and
    // the bind information are the caller's (a NULL one fails the batch).
    unsafe {
        if info.is_null() || mw.is_null() {
            build(qpx, IBV_WR_BIND_MW, |_| {});
            lock(&qp_of(qpx).wr.batch).fail(EINVAL);
            return;
        }
        let info = &*info;
        build(qpx, IBV_WR_BIND_MW, |w| {
            // Cannot fail: the window is not NULL.
            let _ = crate::qp::put_bind(w, mw, rkey, info);
        });
    }
}

unsafe extern "C" fn wr_atomic_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex; `atomic_wr` points
    // at the caller's 8 bytes (a NULL one fails the batch).
    unsafe {
        if atomic_wr.is_null() {
            build(qpx, IBV_WR_ATOMIC_WRITE, |_| {});
            lock(&qp_of(qpx).wr.batch).fail(EINVAL);
            return;
        }
        let value = atomic_wr.cast::<[u8; 8]>().read_unaligned();
        build(qpx, IBV_WR_ATOMIC_WRITE, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            // The 8 bytes in memory order; the kernel sends them as they are.
            w.compare_add = u64::from_ne_bytes(value);
        });
    }
}

unsafe extern "C" fn wr_flush(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, len: usize, ty: u8, level: u8) {
    // Placement types ferroce knows (global visibility, persistence) and
    // the two selectivity levels; the length fits the RETH's 32 bits.
    let known = (IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT) as u8;
    let ok = ty != 0 && ty & !known == 0 && u32::from(level) <= IBV_FLUSH_MR && u32::try_from(len).is_ok();
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    unsafe {
        build(qpx, IBV_WR_FLUSH, |w| {
            w.rkey = rkey;
            w.remote_addr = remote_addr;
            w.compare_add = len as u64;
            // The FETH's bits: placement type 3..0, selectivity 5..4.
            w.imm_data = u32::from(ty) | (u32::from(level) << 4);
        });
        if !ok {
            lock(&qp_of(qpx).wr.batch).fail(EINVAL);
        }
    }
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: as in `wr_send`.
    unsafe { build(qpx, IBV_WR_LOCAL_INV, |w| w.imm_data = invalidate_rkey) }
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    let mut b = lock(&q.wr.batch);
    let Some(p) = b.current() else { return };
    let n = c_int::try_from(num_sge).unwrap_or(-1);
    // SAFETY: `sg_list` holds `num_sge` entries (the caller's contract);
    // the list is copied now, as the API allows its reuse on return.
    match unsafe { sges(n, sg_list, q.max_send_sge) } {
        Ok(list) => {
            p.sge.iter_mut().zip(list).for_each(|(o, s)| *o = *s);
            p.num_sge = list.len();
            p.inline_set = false;
        }
        Err(e) => b.fail(e),
    }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: a one-entry list on the stack.
    unsafe { wr_set_sge_list(qpx, 1, &sge) }
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    let mut b = lock(&q.wr.batch);
    let Some(p) = b.current() else { return };
    let bufs = if num_buf == 0 || buf_list.is_null() {
        &[][..]
    } else {
        // SAFETY: `buf_list` holds `num_buf` entries (the caller's
        // contract).
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    let mut data = [0u8; FERROCE_RING_MAX_INLINE as usize];
    let mut at = 0usize;
    for d in bufs {
        let Some(dst) = data.get_mut(at..at.saturating_add(d.length)) else {
            b.fail(EINVAL);
            return;
        };
        if d.length > 0 {
            // SAFETY: `dst` is `d.length` bytes of `data`; the source is the
            // caller's readable buffer (copied now, per the API).
            unsafe { core::ptr::copy_nonoverlapping(d.addr.cast::<u8>(), dst.as_mut_ptr(), d.length) };
        }
        at += d.length;
    }
    match put_inline(&mut p.wqe, data.get(..at).unwrap_or(&[])) {
        Ok(()) => {
            p.inline_set = true;
            p.num_sge = 0;
        }
        Err(e) => b.fail(e),
    }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: a one-entry list on the stack.
    unsafe { wr_set_inline_data_list(qpx, 1, &buf) }
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    let mut b = lock(&q.wr.batch);
    let Some(p) = b.current() else { return };
    // SAFETY: the ibv_qp_ex starts with the QP's ibv_qp; `ah` is NULL or
    // the caller's.
    match unsafe { ud_ah(qpx.cast::<ibv_qp>(), ah) } {
        Ok(h) => {
            p.wqe.ah = h;
            p.wqe.remote_qpn = remote_qpn;
            p.wqe.remote_qkey = remote_qkey;
            p.has_ah = true;
        }
        Err(e) => b.fail(e),
    }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    q.wr.region.enter();
    let mut b = lock(&q.wr.batch);
    b.open = true;
    b.err = 0;
    b.staged.clear();
    b.cur = None;
}

/// Ends the critical region: the batch is emptied and the flag released.
fn end(q: &FerroceQp, mut b: std::sync::MutexGuard<'_, Batch>) {
    b.open = false;
    b.staged.clear();
    b.cur = None;
    drop(b);
    q.wr.region.leave();
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    let mut b = lock(&q.wr.batch);
    if !b.open {
        // No wr_start: nothing to post, and no region to leave.
        return EINVAL;
    }
    b.close(q);
    let ret = if b.err != 0 {
        b.err
    } else if b.staged.is_empty() {
        0
    } else {
        let mut s = lock(&q.sq);
        let fits = sq_accepts(&s).and_then(|()| {
            if (s.free() as usize) < b.staged.len() {
                Err(ENOMEM)
            } else {
                Ok(())
            }
        });
        match fits {
            Ok(()) => {
                for w in b.staged.drain(..) {
                    // Room was checked for the whole batch; a push fails
                    // only without a mapped ring.
                    if !s.push(&w, crate::qp::sq_wqe_len(&w)) {
                        break;
                    }
                }
                // SAFETY: the ibv_qp_ex starts with the QP's ibv_qp; `s`
                // is its send side.
                unsafe { send_doorbell(qpx.cast::<ibv_qp>(), s) };
                0
            }
            Err(e) => e,
        }
    };
    end(q, b);
    ret
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: libibverbs passes the QP's own ibv_qp_ex.
    let q = unsafe { qp_of(qpx) };
    let b = lock(&q.wr.batch);
    if b.open {
        end(q, b);
    }
}

/// Makes `q` an extended QP: the builders of the operations in `flags`
/// (checked by `send_ops_ok`), the setters and the region calls, and the
/// mark that lets `ibv_qp_to_qp_ex` answer it.
pub(crate) fn install(q: &mut FerroceQp, flags: u64) {
    let has = |f: u32| flags & u64::from(f) != 0;
    q.vqp.comp_mask |= VERBS_QP_EX;
    // SAFETY: the union's ibv_qp_ex member extends the ibv_qp member that
    // the kernel command filled; only the extension's fields are written.
    let x = unsafe { &mut q.vqp.__bindgen_anon_1.qp_ex };
    x.wr_send = has(IBV_QP_EX_WITH_SEND).then_some(wr_send as unsafe extern "C" fn(_));
    x.wr_send_imm = has(IBV_QP_EX_WITH_SEND_WITH_IMM).then_some(wr_send_imm as unsafe extern "C" fn(_, _));
    x.wr_send_inv = has(IBV_QP_EX_WITH_SEND_WITH_INV).then_some(wr_send_inv as unsafe extern "C" fn(_, _));
    x.wr_rdma_write = has(IBV_QP_EX_WITH_RDMA_WRITE).then_some(wr_rdma_write as unsafe extern "C" fn(_, _, _));
    x.wr_rdma_write_imm =
        has(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM).then_some(wr_rdma_write_imm as unsafe extern "C" fn(_, _, _, _));
    x.wr_rdma_read = has(IBV_QP_EX_WITH_RDMA_READ).then_some(wr_rdma_read as unsafe extern "C" fn(_, _, _));
    x.wr_atomic_cmp_swp =
        has(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP).then_some(wr_atomic_cmp_swp as unsafe extern "C" fn(_, _, _, _, _));
    x.wr_atomic_fetch_add =
        has(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD).then_some(wr_atomic_fetch_add as unsafe extern "C" fn(_, _, _, _));
    x.wr_bind_mw = has(IBV_QP_EX_WITH_BIND_MW).then_some(wr_bind_mw as unsafe extern "C" fn(_, _, _, _));
    x.wr_local_inv = has(IBV_QP_EX_WITH_LOCAL_INV).then_some(wr_local_inv as unsafe extern "C" fn(_, _));
    x.wr_atomic_write = has(IBV_QP_EX_WITH_ATOMIC_WRITE).then_some(wr_atomic_write as unsafe extern "C" fn(_, _, _, _));
    x.wr_flush = has(IBV_QP_EX_WITH_FLUSH).then_some(wr_flush as unsafe extern "C" fn(_, _, _, _, _, _));
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
}
