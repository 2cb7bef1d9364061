// SPDX-License-Identifier: GPL-2.0

//! The device lock: a spinlock that disables bottom halves, for state
//! shared between process context (verbs calls) and the UDP receive path
//! (softirq), as a [`Backend`] of the kernel crate's [`Lock`].
//!
//! The kernel crate's `SpinLock` takes a plain `spin_lock`, which would
//! deadlock when the receive softirq interrupts a holder on the same CPU. A
//! caller that has hard interrupts disabled already (a kernel verbs
//! consumer under its own `spin_lock_irqsave`) gets a plain `spin_lock`: no
//! softirq can run there, and `spin_unlock_bh` would run pending softirqs
//! with interrupts off. The guard remembers which (`GuardState`).
//!
//! From the kernel crate's `Lock` the device state gets in-place
//! initialisation with a lockdep class of its own and a guard that cannot
//! move to another thread (`kernel::sync::lock::Guard`).

use super::bindings as b;
use kernel::ffi::c_char;
use kernel::sync::lock::{Backend, Lock};

/// `spin_lock_bh`, or `spin_lock` where hard interrupts are off already.
pub(crate) struct BhSpinLockBackend;

/// A value protected by a [`BhSpinLockBackend`] spinlock.
pub(crate) type BhLock<T> = Lock<T, BhSpinLockBackend>;

// SAFETY: `init` initialises the spinlock; `lock` (and a `try_lock` that
// answers `Some`) leave it held by the caller until `unlock`, which releases
// it the way it was taken (bottom halves re-enabled only if they were
// disabled, as `GuardState` records). So only one guard exists at a time.
unsafe impl Backend for BhSpinLockBackend {
    type State = b::spinlock_t;
    /// Bottom halves were disabled (false: hard interrupts were off).
    type GuardState = bool;

    unsafe fn init(ptr: *mut Self::State, name: *const c_char, key: *mut kernel::bindings::lock_class_key) {
        // SAFETY: the caller passes writable memory for a spinlock that is
        // not in use, a NUL-terminated static name and a static key.
        unsafe { kernel::bindings::__spin_lock_init(ptr.cast(), name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller passes an initialised spinlock.
        unsafe { b::ferroce_spin_lock_bh(ptr) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        let mut bh = false;
        // SAFETY: the caller passes an initialised spinlock; `bh` is ours.
        unsafe { b::ferroce_spin_trylock_bh(ptr, &mut bh) }.then_some(bh)
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: the caller holds the lock, taken by `lock` or `try_lock`
        // with this guard state.
        unsafe { b::ferroce_spin_unlock_bh(ptr, *guard_state) }
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: the caller passes an initialised spinlock.
        unsafe { kernel::bindings::spin_assert_is_held(ptr.cast()) }
    }
}
