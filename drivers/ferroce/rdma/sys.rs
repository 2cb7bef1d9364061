// SPDX-License-Identifier: GPL-2.0

//! Small kernel services the driver's stages use, as safe functions: the
//! clock, scheduling points and short sleeps, the interrupt flag, the
//! kernel's CRC-32, and the module parameters tests set.

use super::bindings as b;
use kernel::time::{ClockSource, Monotonic};

/// The monotonic clock in nanoseconds (`ktime_get_ns`).
pub(crate) fn now_ns() -> u64 {
    // `ktime_get` is in 0..=KTIME_MAX (the kernel crate's ClockSource
    // contract): the conversion never fails.
    u64::try_from(Monotonic::ktime_get()).unwrap_or(0)
}

/// How long a QP's send continuation may run at high priority before it
/// rests (the module parameter `qp_hi_us`, in ns; 0: never).
pub(crate) fn qp_hi_ns() -> u64 {
    // SAFETY: reads a module parameter.
    unsafe { b::ferroce_qp_hi_ns() }
}

/// How long it then rests at normal priority (`qp_lo_us`, in ns; 0: never
/// rests).
pub(crate) fn qp_lo_ns() -> u64 {
    // SAFETY: reads a module parameter.
    unsafe { b::ferroce_qp_lo_ns() }
}

/// Pages of memory the machine has (`totalram_pages`).
pub(crate) fn totalram_pages() -> usize {
    // SAFETY: reads a counter; any context.
    unsafe { b::ferroce_totalram_pages() as usize }
}

/// A scheduling point (`cond_resched`). Process context only: the callers
/// are work items.
pub(crate) fn cond_resched() {
    // SAFETY: `cond_resched` may be called from any process context; it
    // is a no-op where the task may not be preempted.
    unsafe { b::ferroce_cond_resched() }
}

/// Sleeps `min_us` to `max_us` microseconds (`usleep_range`), giving the
/// CPU away. Process context only (work items); not `fsleep`, which for
/// ten microseconds busy-waits in `udelay` and keeps the CPU the process
/// we wait for may need.
pub(crate) fn usleep_range(min_us: u32, max_us: u32) {
    // SAFETY: a sleep; the callers run in work items (process context).
    unsafe { b::ferroce_usleep(min_us.into(), max_us.into()) }
}

/// Whether hard interrupts are disabled on this CPU.
pub(crate) fn irqs_disabled() -> bool {
    // SAFETY: reads the CPU's interrupt flag.
    unsafe { b::ferroce_irqs_disabled() }
}

/// The CRC-32 register update of the kernel's `crc32_le` (accelerated
/// where the CPU allows).
pub(crate) fn crc32_le(reg: u32, data: &[u8]) -> u32 {
    // SAFETY: `data` is a valid slice for the call.
    unsafe { b::ferroce_crc32_le(reg, data.as_ptr(), data.len()) }
}

/// Marks this CPU as in a receive burst when the module parameter
/// `rx_burst` is on (returns whether): what it receives until its burst
/// work runs is answered after the pass.
pub(crate) fn burst_mark() -> bool {
    // SAFETY: a per-CPU flag; no precondition.
    unsafe { b::ferroce_burst_mark() }
}

/// Whether this CPU is in a receive burst (`burst_mark`).
pub(crate) fn in_burst() -> bool {
    // SAFETY: reads a per-CPU flag and a module parameter.
    unsafe { b::ferroce_in_burst() }
}

/// Ends this CPU's receive burst (its burst work runs).
pub(crate) fn burst_clear() {
    // SAFETY: a per-CPU flag; no precondition.
    unsafe { b::ferroce_burst_clear() }
}

/// The module parameter `test_local_queue_max` (0: unset).
pub(crate) fn test_local_queue_max() -> u32 {
    // SAFETY: reads a module parameter.
    unsafe { b::ferroce_test_local_queue_max() }
}
