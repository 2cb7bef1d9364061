//! The rings of `ferroce-abi.h` (ABI v2), as this process maps them.
//!
//! Every CQ, SQ, RQ and SRQ is a ring in kernel memory that the provider
//! maps at creation (`mmap` on the context's `cmd_fd`, at the offset and
//! length the create response names): a header of `FERROCE_RING_HDR_SIZE`
//! bytes, then `entries` slots (a power of two). The indices in the header
//! are free-running `u32` counters; slot `i` is at `i & (entries - 1)`.
//!
//! The producer writes a slot with plain stores, then stores `prod` with
//! release semantics; the consumer loads `prod` with acquire semantics
//! before reading the slots below it and stores `cons` with release
//! semantics when it is done with them. The provider produces on SQ, RQ and
//! SRQ rings and consumes on CQ rings; it keeps its own index (the one it
//! writes) in private memory, so that a process scribbling over its rings
//! cannot make the provider index outside them: every slot address is
//! masked, whatever the header says.
//!
//! A `Ring` is only touched under the lock of the object that owns it (the
//! CQ, the QP's send or receive side, the SRQ).

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::null_mut;
use core::sync::atomic::AtomicU32;

use crate::libc_errno::EINVAL;
use crate::sys::*;

// The ABI as this provider was compiled: every structure the size the
// header promises, the header's indices where the kernel expects them.
const _: () = assert!(size_of::<ferroce_ring_hdr>() == FERROCE_RING_HDR_SIZE as usize);
const _: () = assert!(size_of::<ferroce_sq_wqe>() == FERROCE_SQ_WQE_SIZE as usize);
const _: () = assert!(size_of::<ferroce_rq_wqe>() == FERROCE_RQ_WQE_SIZE as usize);
const _: () = assert!(size_of::<ferroce_cqe>() == FERROCE_CQE_SIZE as usize);
const _: () = assert!(offset_of!(ferroce_ring_hdr, prod) == 0);
const _: () = assert!(offset_of!(ferroce_ring_hdr, cons) == 64);
const _: () = assert!(offset_of!(ferroce_ring_hdr, kflags) == 128);
const _: () = assert!(offset_of!(ferroce_ring_hdr, qp_state) == 132);
const _: () = assert!(size_of::<ferroce_sge>() == 16);
const _: () = assert!(size_of::<ferroce_ring_map>() == 16);
const _: () = assert!(size_of::<ferroce_create_qp_resp>() == 40);
const _: () = assert!(size_of::<ferroce_create_ah_resp>() == 8);
// Slots are naturally aligned (the ring starts on a page).
const _: () = assert!(FERROCE_RING_HDR_SIZE.is_multiple_of(8));
const _: () = assert!(
    FERROCE_SQ_WQE_SIZE.is_multiple_of(8)
        && FERROCE_RQ_WQE_SIZE.is_multiple_of(8)
        && FERROCE_CQE_SIZE.is_multiple_of(8)
);

const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_SHARED: c_int = 1;

extern "C" {
    /// libc's `mmap`.
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    /// libc's `munmap`.
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
}

/// One mapped ring, or none (`base` NULL: an SRQ-attached QP's RQ, a CQ
/// whose resize lost its ring).
pub(crate) struct Ring {
    base: *mut u8,
    map_len: usize,
    /// Slots (a power of two); 0 without a ring.
    entries: u32,
    slot_size: usize,
}

// SAFETY: a Ring is a mapping of shared memory that any thread of the
// process may use; the owning object's lock serialises the users.
unsafe impl Send for Ring {}

impl Ring {
    /// No ring.
    pub(crate) const fn none() -> Ring {
        Ring {
            base: null_mut(),
            map_len: 0,
            entries: 0,
            slot_size: 0,
        }
    }

    /// Maps the ring a create (or resize) response describes, on the
    /// context's command file. `slot_size` is the ring's slot type's size.
    /// Fails with EINVAL when the description is not a ring of that slot
    /// size (entries not a power of two, the mapping too short for the
    /// slots), with mmap's errno when the mapping fails.
    ///
    /// # Safety
    /// `context` is a live context of this provider.
    pub(crate) unsafe fn map(context: *mut ibv_context, m: &ferroce_ring_map, slot_size: usize) -> Result<Ring, c_int> {
        let entries = m.entries;
        let map_len = m.map_len as usize;
        let need = (entries as usize)
            .checked_mul(slot_size)
            .and_then(|s| s.checked_add(FERROCE_RING_HDR_SIZE as usize));
        let off = i64::try_from(m.offset).map_err(|_| EINVAL)?;
        if !entries.is_power_of_two() || need.is_none_or(|n| n > map_len) {
            return Err(EINVAL);
        }
        // SAFETY: `context` is live; its cmd_fd is the uverbs file the
        // kernel's mmap handler serves. A fresh shared mapping of map_len
        // bytes aliases nothing of this process.
        let p = unsafe {
            mmap(
                null_mut(),
                map_len,
                PROT_READ | PROT_WRITE,
                MAP_SHARED,
                (*context).cmd_fd,
                off,
            )
        };
        if p as isize == -1 || p.is_null() {
            return Err(crate::errno().max(1));
        }
        Ok(Ring {
            base: p.cast(),
            map_len,
            entries,
            slot_size,
        })
    }

    /// Unmaps the ring (nothing without one).
    pub(crate) fn unmap(&mut self) {
        if !self.base.is_null() {
            // SAFETY: `base`/`map_len` are a mapping of `map`, not used
            // after this (the ring becomes none).
            unsafe { munmap(self.base.cast(), self.map_len) };
        }
        *self = Ring::none();
    }

    pub(crate) fn is_mapped(&self) -> bool {
        !self.base.is_null()
    }

    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// A 32-bit word of the header (`prod`, `cons`, `kflags`, `qp_state`).
    fn word(&self, offset: usize) -> Option<&AtomicU32> {
        if self.base.is_null() {
            return None;
        }
        // SAFETY: the mapping is at least a header long, page aligned, and
        // lives as long as `self` (unmapping takes `&mut self`); the word is
        // 4-byte aligned and only ever accessed atomically by this provider.
        Some(unsafe { AtomicU32::from_ptr(self.base.add(offset).cast::<u32>()) })
    }

    pub(crate) fn prod(&self) -> Option<&AtomicU32> {
        self.word(offset_of!(ferroce_ring_hdr, prod))
    }

    pub(crate) fn cons(&self) -> Option<&AtomicU32> {
        self.word(offset_of!(ferroce_ring_hdr, cons))
    }

    pub(crate) fn kflags(&self) -> Option<&AtomicU32> {
        self.word(offset_of!(ferroce_ring_hdr, kflags))
    }

    pub(crate) fn qp_state(&self) -> Option<&AtomicU32> {
        self.word(offset_of!(ferroce_ring_hdr, qp_state))
    }

    /// The slot of free-running index `idx`, as a `T` (the ring's slot
    /// type); NULL without a ring.
    pub(crate) fn slot<T>(&self, idx: u32) -> *mut T {
        if self.base.is_null() || size_of::<T>() != self.slot_size {
            return null_mut();
        }
        let i = (idx & (self.entries - 1)) as usize;
        // SAFETY: `map` checked that the header and `entries` slots of
        // `slot_size` bytes fit in the mapping; `i < entries`.
        unsafe {
            self.base
                .add(FERROCE_RING_HDR_SIZE as usize + i * self.slot_size)
                .cast()
        }
    }
}
