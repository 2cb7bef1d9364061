// SPDX-License-Identifier: GPL-2.0

//! A spinlock that disables bottom halves, for state shared between process
//! context (verbs calls) and the UDP receive path (softirq). The kernel
//! crate's `SpinLock` uses plain `spin_lock`, which would deadlock when the
//! receive softirq interrupts a holder on the same CPU. A caller that has
//! hard interrupts disabled already (a kernel verbs consumer under its own
//! `spin_lock_irqsave`) gets a plain `spin_lock`: no softirq can run there,
//! and `spin_unlock_bh` would run pending softirqs with interrupts off.

use crate::ffi as b;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

/// A `spinlock_t` taken with `spin_lock_bh`, protecting a `T`.
///
/// # Invariants
/// `lock` was initialised by [`BhLock::init`] before any other use, and the
/// value never moves afterwards (it lives inside memory the RDMA core
/// allocated for a device and frees only after teardown).
pub(crate) struct BhLock<T> {
    lock: UnsafeCell<b::spinlock_t>,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialised by the spinlock.
unsafe impl<T: Send> Sync for BhLock<T> {}
// SAFETY: as above; the lock itself may be used from any CPU.
unsafe impl<T: Send> Send for BhLock<T> {}

impl<T> BhLock<T> {
    /// Initialises a lock in place.
    ///
    /// # Safety
    /// `this` must point to writable memory for a `BhLock<T>` that is not
    /// in use and will not move while the lock is used.
    pub(crate) unsafe fn init(this: *mut Self, data: T) {
        // SAFETY: guaranteed by the caller; `spin_lock_init` fully
        // initialises the lock.
        unsafe {
            core::ptr::addr_of_mut!((*this).data).write(UnsafeCell::new(data));
            b::ferroce_spin_lock_init((*this).lock.get());
        }
    }

    pub(crate) fn lock(&self) -> BhGuard<'_, T> {
        // SAFETY: the lock was initialised (type invariant).
        let bh = unsafe { b::ferroce_spin_lock_bh(self.lock.get()) };
        BhGuard { lock: self, bh }
    }

    /// Drops the protected value in place.
    ///
    /// # Safety
    /// No other reference to the lock may exist, and it is not used again.
    pub(crate) unsafe fn drop_in_place(this: *mut Self) {
        // SAFETY: guaranteed by the caller.
        unsafe { core::ptr::drop_in_place((*this).data.get()) };
    }
}

pub(crate) struct BhGuard<'a, T> {
    lock: &'a BhLock<T>,
    /// Bottom halves were disabled by `lock` (not when the caller had hard
    /// interrupts disabled already: a kernel consumer in atomic context).
    bh: bool,
}

impl<T> Deref for BhGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for BhGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for BhGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock, taken in `lock`.
        unsafe { b::ferroce_spin_unlock_bh(self.lock.lock.get(), self.bh) };
    }
}
