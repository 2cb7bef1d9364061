// SPDX-License-Identifier: GPL-2.0

//! Memory regions: the memory the transport reads and writes. A process's
//! region is pinned pages ([`Umem`], copied through `kmap`) or memory on
//! demand ([`Odp`]: nothing pinned, pages faulted in outside the
//! datapath); a kernel
//! consumer's regions are kernel virtual addresses ([`KernelMem`]), and the
//! page list of its fast-registration regions is staged by the core
//! ([`PageStage`]).

use super::bindings as b;
use super::Device;
use crate::transport::memory::MemError;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// Access bits a consumer may set that a device may ignore
/// (`IB_ACCESS_OPTIONAL`).
pub(crate) const ACCESS_OPTIONAL: u32 = b::ib_access_flags_IB_ACCESS_OPTIONAL;

/// Registration on demand (`IB_ACCESS_ON_DEMAND`): nothing pinned.
pub(crate) const ACCESS_ON_DEMAND: u32 = b::ib_access_flags_IB_ACCESS_ON_DEMAND;

/// A process's memory, pinned (`ib_umem_get`) until dropped, and its
/// pages. Dropping it may sleep: not under a spinlock.
///
/// # Invariants
/// `raw` is a umem of this object's own, released once, in `drop`;
/// `pages` are its pinned pages, in order, valid until then.
pub(crate) struct Umem {
    raw: NonNull<b::ib_umem>,
    pages: KVVec<*mut b::page>,
}

// SAFETY: the umem is released once by its owner, from any thread (the
// core's umem has no thread affinity); the pages are reached only through
// `kmap` copies and atomics, which any thread may do.
unsafe impl Send for Umem {}
// SAFETY: as above: `&Umem` copies and runs atomics, both thread-safe.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `length` bytes from `start` of the calling process's memory
    /// for `access` (process context: it may sleep and fault pages in),
    /// `npages` pages (`EFAULT` when the umem has fewer).
    pub(crate) fn get<T: super::vtable::Driver>(dev: &Device<T>, start: u64, length: u64, access: u32, npages: usize) -> Result<Self> {
        // SAFETY: a live device; the core checks the range against the
        // process's mappings and its pinning limit (first: the page list
        // below is as long as the range, which the process chose).
        let raw = kernel::error::from_err_ptr(unsafe {
            b::ferroce_umem_get(dev.ib_ptr(), start, length, access as core::ffi::c_int)
        })?;
        let raw = NonNull::new(raw).ok_or(EFAULT)?;
        // INVARIANT: a new umem, ours (released by `drop` if anything
        // below fails); `pages` is filled below before any use.
        let mut umem = Self { raw, pages: KVVec::new() };
        umem.pages = KVVec::with_capacity(npages, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..npages {
            umem.pages.push(core::ptr::null_mut(), GFP_KERNEL_ACCOUNT)?;
        }
        // SAFETY: our live umem; room for `npages` page pointers.
        let got = unsafe { b::ferroce_umem_pages(umem.raw.as_ptr(), umem.pages.as_mut_ptr(), npages) };
        if got != npages {
            return Err(EFAULT);
        }
        Ok(umem)
    }

    /// The page holding byte `pos` of the pinned range, and `pos`'s offset
    /// in it.
    fn page(&self, pos: usize) -> core::result::Result<(*mut b::page, usize), MemError> {
        let page = *self.pages.get(pos / PAGE_SIZE).ok_or(MemError::OutOfBounds)?;
        Ok((page, pos % PAGE_SIZE))
    }

    /// Copies between `buf` and the pinned bytes from `pos` (`to_pages`:
    /// buf -> pages), a page at a time.
    fn copy(&self, pos: usize, buf: *mut u8, len: usize, to_pages: bool) -> core::result::Result<(), MemError> {
        let mut done = 0usize;
        while done < len {
            let (page, in_page) = self.page(pos.checked_add(done).ok_or(MemError::OutOfBounds)?)?;
            let n = (PAGE_SIZE - in_page).min(len - done);
            // SAFETY: `page` is pinned while `self` lives (the type
            // invariant); `in_page + n <= PAGE_SIZE`; `buf + done .. + n`
            // lies in the caller's buffer of `len` bytes.
            unsafe {
                if to_pages {
                    b::ferroce_copy_to_page(page, in_page as u32, buf.add(done).cast_const().cast(), n as u32);
                } else {
                    b::ferroce_copy_from_page(buf.add(done).cast(), page, in_page as u32, n as u32);
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Reads the pinned bytes from `pos` into `dst`.
    pub(crate) fn read(&self, pos: usize, dst: &mut [u8]) -> core::result::Result<(), MemError> {
        self.copy(pos, dst.as_mut_ptr(), dst.len(), false)
    }

    /// Writes `src` into the pinned bytes from `pos`.
    pub(crate) fn write(&self, pos: usize, src: &[u8]) -> core::result::Result<(), MemError> {
        self.copy(pos, src.as_ptr().cast_mut(), src.len(), true)
    }

    /// The 8-byte-aligned word at `pos`, for an atomic.
    fn word(&self, pos: usize) -> core::result::Result<(*mut b::page, u32), MemError> {
        if !pos.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (page, off) = self.page(pos)?;
        Ok((page, off as u32))
    }

    /// Compare and swap of the 8-byte word at `pos`; the old value.
    pub(crate) fn compare_swap(&self, pos: usize, compare: u64, swap: u64) -> core::result::Result<u64, MemError> {
        let (page, off) = self.word(pos)?;
        // SAFETY: a pinned page (the type invariant); an aligned word
        // inside it.
        Ok(unsafe { b::ferroce_page_cmpxchg(page, off, compare, swap) })
    }

    /// Fetch and add on the 8-byte word at `pos`; the old value.
    pub(crate) fn fetch_add(&self, pos: usize, add: u64) -> core::result::Result<u64, MemError> {
        let (page, off) = self.word(pos)?;
        // SAFETY: as in `compare_swap`.
        Ok(unsafe { b::ferroce_page_fetch_add(page, off, add) })
    }

    /// Stores `value` in the 8-byte word at `pos` in one store (ATOMIC
    /// WRITE); 0.
    pub(crate) fn write64(&self, pos: usize, value: u64) -> core::result::Result<u64, MemError> {
        let (page, off) = self.word(pos)?;
        // SAFETY: as in `compare_swap`.
        unsafe { b::ferroce_page_write64(page, off, value) };
        Ok(0)
    }
}

/// A process's memory on demand (`IB_ACCESS_ON_DEMAND`): nothing pinned;
/// the core's `ib_umem_odp` follows the process's page tables, and
/// ferroce's table of the pages present is filled by [`Odp::fault`]
/// (process context) and emptied by the MMU notifier before a page goes.
/// The datapath never faults: an access to an absent page returns
/// [`MemError::Fault`] and touches nothing; the driver faults the range in
/// later and retries.
///
/// # Invariants
/// `raw` holds one reference to a live `ferroce_odp`, dropped once, in
/// `drop` (which may sleep: the last reference releases the umem).
pub(crate) struct Odp {
    raw: NonNull<b::ferroce_odp>,
}

// SAFETY: the C object is reference-counted and locked inside (helpers.c):
// any thread may take or drop a reference and access it.
unsafe impl Send for Odp {}
// SAFETY: as above: every access through `&Odp` takes the object's lock.
unsafe impl Sync for Odp {}

/// Which of the C atomics `ferroce_odp_atomic` runs.
#[derive(Clone, Copy)]
enum OdpAtomic {
    CompareSwap = 0,
    FetchAdd = 1,
    Store = 2,
}

impl Odp {
    /// Registers `length` bytes from `start` of the calling process's
    /// memory on demand (process context). Nothing is faulted in.
    pub(crate) fn get<T: super::vtable::Driver>(dev: &Device<T>, start: u64, length: u64, access: u32) -> Result<Self> {
        // SAFETY: a live device; the core checks the range and access.
        let raw = kernel::error::from_err_ptr(unsafe {
            b::ferroce_odp_get(dev.ib_ptr(), start, length, access as core::ffi::c_int)
        })?;
        // INVARIANT: a new object with our one reference.
        Ok(Self { raw: NonNull::new(raw).ok_or(EFAULT)? })
    }

    /// The region's first byte's offset in its first page.
    pub(crate) fn offset(&self) -> usize {
        // SAFETY: a live object (the type invariant).
        unsafe { b::ferroce_odp_offset(self.raw.as_ptr()) as usize }
    }

    /// Faults `len` bytes from `pos` (of the pages' range) in, writable
    /// with `write`; `fault` false takes only pages already present (a
    /// prefetch without faults). Process context: it sleeps.
    pub(crate) fn fault(&self, pos: usize, len: usize, write: bool, fault: bool) -> Result {
        // SAFETY: a live object; process context (the caller's contract,
        // stated above).
        kernel::error::to_result(unsafe { b::ferroce_odp_fault(self.raw.as_ptr(), pos as u64, len as u64, write, fault) })
    }

    /// As [`Odp::fault`], on the module's workqueue: returns at once.
    pub(crate) fn prefetch_async(&self, pos: usize, len: usize, write: bool, fault: bool) -> Result {
        // SAFETY: a live object; the work item takes its own reference.
        kernel::error::to_result(unsafe {
            b::ferroce_odp_prefetch_async(self.raw.as_ptr(), pos as u64, len as u64, write, fault)
        })
    }

    /// The C answer of an access as the engine's error.
    fn result(r: core::ffi::c_int) -> core::result::Result<(), MemError> {
        match r {
            0 => Ok(()),
            r if r == EAGAIN.to_errno() => Err(MemError::Fault),
            r if r == EINVAL.to_errno() => Err(MemError::Misaligned),
            r if r == EFAULT.to_errno() => Err(MemError::AccessDenied),
            _ => Err(MemError::OutOfBounds),
        }
    }

    /// Whether `len` bytes from `pos` are present (and writable with
    /// `write`): [`MemError::Fault`] when not.
    pub(crate) fn present(&self, pos: usize, len: u64, write: bool) -> core::result::Result<(), MemError> {
        // SAFETY: a live object; callable in any context.
        Self::result(unsafe { b::ferroce_odp_present(self.raw.as_ptr(), pos as u64, len, write) })
    }

    fn copy(&self, pos: usize, buf: *mut u8, len: usize, to_pages: bool) -> core::result::Result<(), MemError> {
        let len = u32::try_from(len).map_err(|_| MemError::OutOfBounds)?;
        // SAFETY: a live object; `buf` holds `len` bytes of the caller's.
        Self::result(unsafe { b::ferroce_odp_copy(self.raw.as_ptr(), pos as u64, buf.cast(), len, to_pages) })
    }

    fn atomic(&self, pos: usize, op: OdpAtomic, a: u64, b_: u64) -> core::result::Result<u64, MemError> {
        let mut old = 0u64;
        // SAFETY: a live object; `old` is ours.
        Self::result(unsafe { b::ferroce_odp_atomic(self.raw.as_ptr(), pos as u64, op as core::ffi::c_int, a, b_, &mut old) })?;
        Ok(old)
    }
}

impl Clone for Odp {
    fn clone(&self) -> Self {
        // SAFETY: a live object; the new handle owns the new reference.
        unsafe { b::ferroce_odp_ref(self.raw.as_ptr()) };
        Self { raw: self.raw }
    }
}

impl Drop for Odp {
    fn drop(&mut self) {
        // SAFETY: our reference, dropped once (the type invariant).
        unsafe { b::ferroce_odp_put(self.raw.as_ptr()) }
    }
}

/// A process's region's memory: pinned, or on demand.
pub(crate) enum UserMem {
    Pinned(Umem),
    Odp(Odp),
}

impl UserMem {
    /// Reads the bytes from `pos` of the region's pages into `dst`.
    pub(crate) fn read(&self, pos: usize, dst: &mut [u8]) -> core::result::Result<(), MemError> {
        match self {
            Self::Pinned(u) => u.read(pos, dst),
            Self::Odp(o) => o.copy(pos, dst.as_mut_ptr(), dst.len(), false),
        }
    }

    /// Writes `src` into the region's pages from `pos`.
    pub(crate) fn write(&self, pos: usize, src: &[u8]) -> core::result::Result<(), MemError> {
        match self {
            Self::Pinned(u) => u.write(pos, src),
            Self::Odp(o) => o.copy(pos, src.as_ptr().cast_mut(), src.len(), true),
        }
    }

    /// Whether the bytes can be touched now (pinned memory always can).
    pub(crate) fn present(&self, pos: usize, len: u64, write: bool) -> core::result::Result<(), MemError> {
        match self {
            Self::Pinned(_) => Ok(()),
            Self::Odp(o) => o.present(pos, len, write),
        }
    }

    /// The on-demand memory, if it is.
    pub(crate) fn odp(&self) -> Option<&Odp> {
        match self {
            Self::Pinned(_) => None,
            Self::Odp(o) => Some(o),
        }
    }

    pub(crate) fn compare_swap(&self, pos: usize, compare: u64, swap: u64) -> core::result::Result<u64, MemError> {
        match self {
            Self::Pinned(u) => u.compare_swap(pos, compare, swap),
            Self::Odp(o) => o.atomic(pos, OdpAtomic::CompareSwap, compare, swap),
        }
    }

    pub(crate) fn fetch_add(&self, pos: usize, add: u64) -> core::result::Result<u64, MemError> {
        match self {
            Self::Pinned(u) => u.fetch_add(pos, add),
            Self::Odp(o) => o.atomic(pos, OdpAtomic::FetchAdd, add, 0),
        }
    }

    pub(crate) fn write64(&self, pos: usize, value: u64) -> core::result::Result<u64, MemError> {
        match self {
            Self::Pinned(u) => u.write64(pos, value),
            Self::Odp(o) => o.atomic(pos, OdpAtomic::Store, value, 0),
        }
    }
}

/// A kernel consumer's memory, named by kernel virtual addresses (its DMA
/// region, and the pages of its fast regions: ferroce has no DMA device,
/// so the core's virtual DMA makes DMA addresses kernel addresses).
///
/// Only the layer makes one ([`Driver::get_dma_mr`], [`Driver::alloc_mr`]):
/// its accesses are sound for addresses that a kernel consumer named for
/// a region of the kernel's PD, memory it owns while its work request is
/// posted (the RDMA core's contract). The driver's region checks keep
/// processes' QPs from such regions.
///
/// [`Driver::get_dma_mr`]: super::vtable::Driver::get_dma_mr
/// [`Driver::alloc_mr`]: super::vtable::Driver::alloc_mr
pub(crate) struct KernelMem(());

impl KernelMem {
    pub(super) fn new() -> Self {
        Self(())
    }

    /// Copies `dst.len()` bytes from kernel address `addr`.
    pub(crate) fn read(&self, addr: u64, dst: &mut [u8]) {
        // SAFETY: memory a kernel consumer owns (the type's contract);
        // `dst` is ours.
        unsafe { core::ptr::copy_nonoverlapping(addr as usize as *const u8, dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `src` to kernel address `addr`.
    pub(crate) fn write(&self, addr: u64, src: &[u8]) {
        // SAFETY: as in `read`, a buffer posted for receiving.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), addr as usize as *mut u8, src.len()) }
    }

    /// Compare and swap of the aligned word at `addr`; the old value.
    pub(crate) fn compare_swap(&self, addr: u64, compare: u64, swap: u64) -> core::result::Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        // SAFETY: as in `read`; aligned.
        Ok(unsafe { b::ferroce_va_cmpxchg(addr as usize as *mut u64, compare, swap) })
    }

    /// Fetch and add on the aligned word at `addr`; the old value.
    pub(crate) fn fetch_add(&self, addr: u64, add: u64) -> core::result::Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        // SAFETY: as in `compare_swap`.
        Ok(unsafe { b::ferroce_va_fetch_add(addr as usize as *mut u64, add) })
    }

    /// Stores `value` in the aligned word at `addr` in one store; 0.
    pub(crate) fn write64(&self, addr: u64, value: u64) -> core::result::Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        // SAFETY: as in `compare_swap`.
        unsafe { b::ferroce_va_write64(addr as usize as *mut u64, value) };
        Ok(0)
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: ours, released once (the type invariant).
        unsafe { b::ferroce_ib_umem_release(self.raw.as_ptr()) }
    }
}

/// The page list that the core's `ib_sg_to_pages` builds for a
/// fast-registration region (`ib_map_mr_sg`), one page address at a time.
/// Atomics, since the core calls back with only the MR's pointer; a
/// consumer maps one MR at a time (the core's contract), so the stage has
/// one writer.
pub(crate) struct PageStage {
    pages: KVec<AtomicU64>,
    n: AtomicUsize,
}

impl PageStage {
    /// Room for `max` pages.
    pub(crate) fn new(max: usize) -> Result<Self> {
        let mut pages = KVec::with_capacity(max, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..max {
            pages.push(AtomicU64::new(0), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(Self { pages, n: AtomicUsize::new(0) })
    }

    pub(super) fn reset(&self) {
        self.n.store(0, Ordering::Relaxed);
    }

    /// Appends a page; `ENOMEM` when full.
    pub(super) fn push(&self, addr: u64) -> Result {
        let i = self.n.load(Ordering::Relaxed);
        let slot = self.pages.get(i).ok_or(ENOMEM)?;
        slot.store(addr, Ordering::Relaxed);
        self.n.store(i + 1, Ordering::Relaxed);
        Ok(())
    }

    /// The pages staged by the last mapping.
    pub(crate) fn staged(&self) -> impl Iterator<Item = u64> + '_ {
        let n = self.n.load(Ordering::Relaxed).min(self.pages.len());
        self.pages.iter().take(n).map(|p| p.load(Ordering::Relaxed))
    }

    /// How many pages it has room for (`max_num_sg`).
    pub(crate) fn capacity(&self) -> usize {
        self.pages.len()
    }

    /// How many pages the last mapping staged.
    pub(crate) fn len(&self) -> usize {
        self.n.load(Ordering::Relaxed).min(self.pages.len())
    }
}
