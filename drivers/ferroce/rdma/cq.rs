// SPDX-License-Identifier: GPL-2.0

//! Completion queues: the layer's part of a CQ object, its completion
//! vector. A device has a vector per possible CPU (`num_comp_vectors`),
//! each bound to an online CPU as a NIC binds an interrupt: a CQ's
//! completion handler runs on its vector's CPU. A completion that came on
//! that CPU calls the handler at once; one that came elsewhere queues the
//! CQ's work item there, which holds a reference to the CQ until the
//! handler returned (the CQ's destroy waits for it, [`Counted`]).

use super::bindings as b;
use super::object::{Core, Counted, CqRef};
use super::vtable::Driver;
use super::Device;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicI32, Ordering};
use kernel::sync::aref::ARef;
use kernel::types::Opaque;

/// The layer's part of a CQ: the work item that runs its handler on its
/// vector's CPU, and that CPU.
pub(crate) struct CqHooks {
    work: Opaque<b::work_struct>,
    cpu: AtomicI32,
}

impl Core for b::ib_cq {
    type Extra = CqHooks;

    unsafe fn device<'a, T: Driver>(core: *mut Self) -> &'a Device<T> {
        // SAFETY: the caller passes a live CQ of a device of driver `T`,
        // which outlives its objects.
        unsafe { Device::<T>::from_ib((*core).device) }
    }
}

/// How many completion vectors a device has: one per possible CPU.
pub(crate) fn num_comp_vectors() -> u32 {
    // SAFETY: reads the kernel's CPU count.
    unsafe { b::ferroce_num_comp_vectors() }
}

/// Sets up a new CQ's work item and binds it to vector `vector`'s CPU.
///
/// # Safety
/// `ibcq` is a CQ the core allocated (zeroed) for the create in progress.
pub(super) unsafe fn init_hooks(ibcq: *mut b::ib_cq, vector: u32) {
    // SAFETY: a live, zeroed object of this layer (the caller).
    let c = unsafe { Counted::of(ibcq) };
    // SAFETY: the work item is ours, not yet in use; the CPU lookup only
    // reads the online mask.
    unsafe {
        b::ferroce_work_init(c.extra().work.get(), Some(cq_work));
        c.extra().cpu.store(b::ferroce_vector_cpu(vector), Ordering::Relaxed);
    }
}

impl Counted<b::ib_cq> {
    /// Sends the CQ's `IB_EVENT_CQ_ERR` (without the driver's lock): the CQ
    /// can take no more completions.
    pub(crate) fn error_event(&self) {
        // SAFETY: the CQ is alive (the type invariant: a reference is
        // held); the core set its event handler before the create callback.
        unsafe { b::ferroce_cq_err_event(self.core()) }
    }

    /// Calls the CQ's completion handler here (without the driver's lock:
    /// a kernel consumer's handler may poll the CQ at once).
    fn comp_handler(&self) {
        // SAFETY: the CQ is alive (the type invariant: a reference is
        // held); the core set its handler before the create callback.
        unsafe { b::ferroce_call_comp_handler(self.core()) }
    }

    /// Runs the CQ's completion handler on its vector's CPU: here when
    /// this is that CPU, else from its work item there, which takes this
    /// reference along. A work item already queued and not yet started
    /// runs the handler after this completion anyway: the reference is
    /// then dropped here. Call without the driver's lock.
    pub(crate) fn comp_event(this: CqRef) {
        let cpu = this.extra().cpu.load(Ordering::Relaxed);
        // SAFETY: reads the current CPU and the online mask.
        if unsafe { b::ferroce_comp_here(cpu) } {
            this.comp_handler();
            return;
        }
        let work = this.extra().work.get();
        let raw = ARef::into_raw(this);
        // SAFETY: the work item was set up before the CQ's create; the CQ
        // is alive while `raw`'s reference is held, which `cq_work` takes
        // over when the item is queued.
        if !unsafe { b::ferroce_comp_work_queue_on(work, cpu) } {
            // SAFETY: the reference `into_raw` gave up, not taken over.
            drop(unsafe { ARef::from_raw(raw) });
        }
    }
}

/// Offset of the work item in a CQ's counted header.
const WORK_OFFSET: usize = core::mem::offset_of!(Counted<b::ib_cq>, extra) + core::mem::offset_of!(CqHooks, work);

/// A CQ's work item: its handler on its vector's CPU.
///
/// # Safety
/// Only the kernel calls it, for the work item of a live CQ queued by
/// [`Counted::comp_event`] with a reference, which this takes back.
unsafe extern "C" fn cq_work(w: *mut b::work_struct) {
    // SAFETY: `w` is the work item inside a `Counted<ib_cq>`, whose
    // queuer gave its reference to this run (`comp_event`); the CQ lives
    // until that reference is dropped, at the end of this function.
    let cq: CqRef = unsafe {
        let core = w.cast::<u8>().sub(WORK_OFFSET).cast::<Counted<b::ib_cq>>();
        ARef::from_raw(NonNull::new_unchecked(core))
    };
    cq.comp_handler();
}
