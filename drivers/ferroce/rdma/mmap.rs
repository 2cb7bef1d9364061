// SPDX-License-Identifier: GPL-2.0

//! Rings shared with a process (`include/uapi/rdma/ferroce-abi.h`): memory
//! the kernel allocates in a user context's mmap space, which the process
//! maps and writes at any moment.

use super::bindings as b;
use super::udata::Udata;
use super::vtable::Driver;
use crate::transport::shared_ring::{RqSlot, SqSlot};
use crate::transport::verbs::{send_flags, Cqe, Payload, Sge};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Relaxed, Release};


const _: () = assert!(core::mem::size_of::<b::ferroce_ring_hdr>() == b::FERROCE_RING_HDR_SIZE as usize);
const _: () = assert!(core::mem::size_of::<b::ferroce_sq_wqe>() == b::FERROCE_SQ_WQE_SIZE as usize);
const _: () = assert!(core::mem::size_of::<b::ferroce_rq_wqe>() == b::FERROCE_RQ_WQE_SIZE as usize);
const _: () = assert!(core::mem::size_of::<b::ferroce_cqe>() == b::FERROCE_CQE_SIZE as usize);
const _: () = assert!(core::mem::offset_of!(b::ferroce_ring_hdr, cons) == 64);
const _: () = assert!(core::mem::offset_of!(b::ferroce_ring_hdr, kflags) == 128);
const _: () = assert!(core::mem::offset_of!(b::ferroce_ring_hdr, qp_state) == 132);
const _: () = assert!(b::FERROCE_RING_MAX_SGE as usize == MAX_SGE_RING && b::FERROCE_RING_MAX_INLINE as usize == MAX_INLINE_RING);
const MAX_SGE_RING: usize = crate::transport::verbs::MAX_SGE;
const MAX_INLINE_RING: usize = crate::transport::verbs::MAX_INLINE;

/// The slot sizes of the rings (ferroce-abi.h): completions, send and
/// receive work requests.
pub(crate) const CQE_SIZE: usize = b::FERROCE_CQE_SIZE as usize;
pub(crate) const SQ_WQE_SIZE: usize = b::FERROCE_SQ_WQE_SIZE as usize;
pub(crate) const RQ_WQE_SIZE: usize = b::FERROCE_RQ_WQE_SIZE as usize;

/// The rings' slots (ferroce-abi.h): a completion, a send and a receive
/// work request, and the header's flags.
pub(crate) use super::bindings::{ferroce_cqe as RingCqe, ferroce_rq_wqe as RingRqWqe, ferroce_sq_wqe as RingSqWqe};
pub(crate) const RING_NEED_DB: u32 = b::FERROCE_RING_NEED_DB;
pub(crate) const RING_CQ_WAITING: u32 = b::FERROCE_RING_CQ_WAITING;

/// A copy of a send slot, field by field, for the engine's checks
/// (`transport::shared_ring::send_wqe`).
pub(crate) fn sq_slot(w: &RingSqWqe) -> SqSlot {
    // SAFETY: a union of plain bytes and integers in our own copy of the
    // slot; any bytes are a value of either member.
    let (sge, inline) = unsafe { (&w.__bindgen_anon_1.sge, &w.__bindgen_anon_1.inline_data) };
    // The union read as the flags say (send_wqe checks the counts).
    let data = if w.send_flags & send_flags::INLINE != 0 {
        Payload::Inline { bytes: *inline, len: 0 }
    } else {
        let mut list = [Sge::default(); MAX_SGE_RING];
        for (o, i) in list.iter_mut().zip(sge.iter()) {
            *o = Sge { addr: i.addr, length: i.length, lkey: i.lkey };
        }
        Payload::Gather { list, n: 0 }
    };
    SqSlot {
        wr_id: w.wr_id,
        opcode: w.opcode,
        send_flags: w.send_flags,
        num_sge: w.num_sge,
        inline_len: w.inline_len,
        imm_data: w.imm_data,
        remote_addr: w.remote_addr,
        rkey: w.rkey,
        compare_add: w.compare_add,
        swap: w.swap,
        ah: w.ah,
        remote_qpn: w.remote_qpn,
        remote_qkey: w.remote_qkey,
        bind_lkey: w.bind_lkey,
        bind_access: w.bind_access,
        data,
    }
}

/// A copy of a receive slot (RQ or SRQ), for `shared_ring::recv_wqe`.
pub(crate) fn rq_slot(w: &RingRqWqe) -> RqSlot {
    let mut s = RqSlot { wr_id: w.wr_id, num_sge: w.num_sge, ..RqSlot::default() };
    for (o, i) in s.sge.iter_mut().zip(w.sge.iter()) {
        *o = Sge { addr: i.addr, length: i.length, lkey: i.lkey };
    }
    s
}

/// Where a ring is in the context's mmap space (ferroce-abi.h).
pub(crate) use super::bindings::ferroce_ring_map as RingMap;

/// A completion in the process's encoding (`ibv_wc`'s fields).
pub(crate) fn ring_cqe(c: &Cqe) -> b::ferroce_cqe {
    use crate::transport::verbs::wc_flags;
    // SAFETY: a plain C structure of integers.
    let mut o: b::ferroce_cqe = unsafe { core::mem::zeroed() };
    o.wr_id = c.wr_id;
    o.status = c.status as u32;
    o.opcode = c.opcode as u32;
    o.vendor_err = c.vendor_err;
    o.byte_len = c.byte_len;
    o.imm_data = if c.wc_flags & wc_flags::WITH_IMM != 0 { c.imm_data.to_be() } else { c.imm_data };
    o.qp_num = c.qp_num;
    o.src_qp = c.src_qp;
    o.wc_flags = c.wc_flags & (wc_flags::GRH | wc_flags::WITH_IMM | wc_flags::WITH_INV);
    o.pkey_index = c.pkey_index;
    o
}

/// A ring's memory: `base` in the kernel's address space, `entry` the mmap
/// entry that owns it. Dropping it removes the entry (the memory goes with
/// the last mapping of it).
///
/// # Invariants
/// `base` is the start of the entry's memory, header first, for as long as
/// `entry` has not been removed, i.e. while this value lives.
struct RingMem {
    base: *mut u8,
    entry: *mut b::rdma_user_mmap_entry,
}

// SAFETY: the pointers name the entry's memory, which is not tied to a
// thread; through a `RingMem` only the header's words are reached, each
// with an atomic access (`word`); the slots are reached through the
// `UserRing` (not `Sync`), under the device lock.
unsafe impl Send for RingMem {}

impl RingMem {
    /// The `u32` of the ring's header at `offset` (an `offset_of!` of one
    /// of its fields). The process may write it at any moment: every
    /// kernel access to it is atomic, through this view.
    fn word(&self, offset: usize) -> &Atomic<u32> {
        let p = self.base.wrapping_add(offset).cast::<u32>();
        // SAFETY: callers pass the offset of a `u32` field of the header,
        // which lies inside the live ring (invariant, for as long as
        // `self`), so `p` is valid and 4-byte aligned; no kernel access to
        // it is non-atomic.
        unsafe { Atomic::from_ptr(p) }
    }

    fn prod(&self) -> u32 {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, prod)).load(Acquire)
    }
}

impl Drop for RingMem {
    fn drop(&mut self) {
        // SAFETY: our entry, removed once; the memory goes when the last
        // mapping does. Dropped without the device lock (may sleep).
        unsafe { b::ferroce_ring_destroy(self.entry) }
    }
}

/// A ring in memory a process maps: the header, then `entries` slots of
/// `stride` bytes. Everything in it may change under us at any moment, so
/// every read is one copy and every index is checked.
pub(crate) struct UserRing {
    mem: RingMem,
    entries: u32,
    stride: usize,
    offset: u64,
    map_len: u32,
    /// Not `Sync`: the slots are read and written through `&self` by one
    /// holder of the device lock at a time.
    _not_sync: core::marker::PhantomData<core::cell::Cell<()>>,
}

impl UserRing {
    /// A zeroed ring of at least `want` slots (a power of two, at least 1)
    /// in the mmap space of the context of the process's call `udata`
    /// (`EINVAL` for a kernel consumer's call).
    pub(crate) fn new<T: Driver>(udata: &Udata<'_, T>, want: u32, stride: usize) -> Result<Self> {
        let uctx = udata.raw_context().ok_or(EINVAL)?;
        let entries = want.max(1).checked_next_power_of_two().ok_or(EINVAL)?;
        let len = (entries as usize)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(b::FERROCE_RING_HDR_SIZE as usize))
            .ok_or(EINVAL)?;
        let map_len = u32::try_from(len.next_multiple_of(kernel::page::PAGE_SIZE)).map_err(|_| EINVAL)?;
        let mut offset = 0u64;
        let mut entry = core::ptr::null_mut();
        // SAFETY: the live context of the call in progress, in process
        // context (`raw_context`); the outputs are ours.
        let base = unsafe { b::ferroce_ring_create(uctx, len, &mut offset, &mut entry) };
        if base.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: the entry's memory, header first.
        let mem = RingMem { base: base.cast(), entry };
        Ok(Self { mem, entries, stride, offset, map_len, _not_sync: core::marker::PhantomData })
    }

    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// What the process needs to map it.
    pub(crate) fn map(&self) -> b::ferroce_ring_map {
        b::ferroce_ring_map { offset: self.offset, map_len: self.map_len, entries: self.entries }
    }

    fn word(&self, offset: usize) -> &Atomic<u32> {
        self.mem.word(offset)
    }

    /// The producer index (acquire: slots below it are written).
    pub(crate) fn prod(&self) -> u32 {
        self.mem.prod()
    }

    /// The consumer index (acquire: slots below it are done with).
    pub(crate) fn cons(&self) -> u32 {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, cons)).load(Acquire)
    }

    pub(crate) fn set_prod(&self, v: u32) {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, prod)).store(v, Release)
    }

    pub(crate) fn set_cons(&self, v: u32) {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, cons)).store(v, Release)
    }

    /// `WRITE_ONCE`: a relaxed store.
    pub(crate) fn set_kflags(&self, v: u32) {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, kflags)).store(v, Relaxed)
    }

    pub(crate) fn set_qp_state(&self, v: u32) {
        self.word(core::mem::offset_of!(b::ferroce_ring_hdr, qp_state)).store(v, Relaxed)
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let i = (index & (self.entries - 1)) as usize;
        // SAFETY: `i < entries`, so the slot lies inside the ring's
        // allocation of header + entries * stride bytes.
        unsafe { self.mem.base.add(b::FERROCE_RING_HDR_SIZE as usize + i * self.stride) }
    }

    /// Copies bytes `from..from + len` of slot `index` into the same bytes
    /// of `out` (clamped to the slot and to T).
    fn read_part<T: Copy>(&self, index: u32, out: &mut T, from: usize, len: usize) {
        let end = from.saturating_add(len).min(core::mem::size_of::<T>()).min(self.stride);
        if from >= end {
            return;
        }
        // SAFETY: bytes `from..end` of the slot (inside the ring: `end` is
        // at most the stride) into the same bytes of `out` (at most its
        // size); T is one of the ring's slot structures, valid for any
        // bytes.
        unsafe {
            b::ferroce_ring_read(
                core::ptr::from_mut(out).cast::<u8>().add(from).cast(),
                self.slot(index).add(from).cast(),
                end - from,
            )
        }
    }

    /// One copy of SQ slot `index`: its fields, then only the part of its
    /// union that they say is used (the gather list's `num_sge` entries or
    /// `inline_len` bytes, each at most the slot's); the rest stays zero.
    /// Each byte is read once: the copy is what the checks see.
    pub(crate) fn read_sq(&self, index: u32) -> RingSqWqe {
        const HEAD: usize = core::mem::offset_of!(RingSqWqe, __bindgen_anon_1);
        // SAFETY: a plain C structure of integers (and a union of them):
        // all-zero bytes are a value.
        let mut w: RingSqWqe = unsafe { core::mem::MaybeUninit::zeroed().assume_init() };
        self.read_part(index, &mut w, 0, HEAD);
        let used = if w.send_flags & send_flags::INLINE != 0 {
            (w.inline_len as usize).min(MAX_INLINE_RING)
        } else {
            (w.num_sge as usize).min(MAX_SGE_RING) * core::mem::size_of::<b::ferroce_sge>()
        };
        self.read_part(index, &mut w, HEAD, used);
        w
    }

    /// One copy of RQ (or SRQ) slot `index`: its count, then the entries
    /// it says are used (at most the slot's).
    pub(crate) fn read_rq(&self, index: u32) -> RingRqWqe {
        const HEAD: usize = core::mem::offset_of!(RingRqWqe, sge);
        // SAFETY: as in `read_sq`.
        let mut w: RingRqWqe = unsafe { core::mem::MaybeUninit::zeroed().assume_init() };
        self.read_part(index, &mut w, 0, HEAD);
        let used = (w.num_sge as usize).min(MAX_SGE_RING) * core::mem::size_of::<b::ferroce_sge>();
        self.read_part(index, &mut w, HEAD, used);
        w
    }

    /// One copy of slot `index` (a plain C structure of integers, for
    /// which any bytes are a value).
    pub(crate) fn read<T: Copy>(&self, index: u32) -> T {
        let mut out = core::mem::MaybeUninit::<T>::zeroed();
        let n = core::mem::size_of::<T>().min(self.stride);
        // SAFETY: `n` bytes from the slot into our own buffer; T is one of
        // the ring's slot structures, valid for any bytes.
        unsafe {
            b::ferroce_ring_read(out.as_mut_ptr().cast(), self.slot(index).cast(), n);
            out.assume_init()
        }
    }

    /// Writes slot `index` (the CQ, where the kernel produces).
    pub(crate) fn write<T: Copy>(&self, index: u32, v: &T) {
        let n = core::mem::size_of::<T>().min(self.stride);
        // SAFETY: `n` bytes into the slot, inside the ring.
        unsafe { core::ptr::copy_nonoverlapping(core::ptr::from_ref(v).cast::<u8>(), self.slot(index), n) }
    }
}
