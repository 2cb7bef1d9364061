// SPDX-License-Identifier: GPL-2.0

//! Verbs objects that the RDMA core allocates: the core's structure first,
//! the driver's data after it, in one allocation of the size the device
//! ops name (`size_ib_*` = [`Object::SIZE`]). The core hands the create
//! callback zeroed memory; the layer writes the driver's data only once the
//! driver's create returned it, and takes it back in the destroy callback,
//! so zeroed memory is never read as driver data.
//!
//! Drivers see an object through a borrowed view ([`Live`]: [`Pd`], [`Cq`],
//! [`Srq`], [`Mr`], `Qp`) that lives for one callback, and keep counted
//! references ([`CqRef`], [`SrqRef`], `QpRef`) to the objects whose
//! callbacks run after their lock is dropped; a destroy waits for them
//! ([`Counted`]).

use super::bindings as b;
use super::vtable::Driver;
use super::Device;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::sync::aref::{ARef, AlwaysRefCounted};
use kernel::time::{delay::fsleep, Delta};
use kernel::types::Opaque;

/// A core object `C` with driver data `D` after it.
///
/// # Invariants
/// `data` is initialised from the end of a successful create callback
/// (written by [`Object::init`]) until [`Object::take`] in the destroy
/// callback; in between, the core passes the object to no create again.
#[repr(C)]
pub(crate) struct Object<C: Core, D> {
    head: Counted<C>,
    data: MaybeUninit<D>,
}

impl<C: Core, D> Object<C, D> {
    /// The size the device ops name for the core to allocate (with
    /// `kzalloc`, whose alignment is at least 8 bytes: checked at compile
    /// time against the object's).
    pub(crate) const SIZE: usize = {
        assert!(core::mem::align_of::<Self>() <= 8);
        core::mem::size_of::<Self>()
    };

    /// Writes a new object's data, as the last step of its creation.
    ///
    /// # Safety
    /// `core` is the core structure of an allocation of [`Self::SIZE`]
    /// bytes that the core made for this create call, whose data is not
    /// initialised.
    pub(crate) unsafe fn init(core: *mut C, data: D) {
        // SAFETY: guaranteed by the caller; `core` is the first field of a
        // `#[repr(C)]` Object (through `Counted` and the transparent
        // `Opaque`).
        unsafe { (*core.cast::<Self>()).data.write(data) };
        // INVARIANT: the data is written; the core now owns a live object.
    }

    /// Takes a destroyed object's data back.
    ///
    /// # Safety
    /// `core` is an object whose create succeeded ([`Self::init`]), in its
    /// destroy callback: nothing reads its data afterwards.
    pub(crate) unsafe fn take(core: *mut C) -> D {
        // SAFETY: guaranteed by the caller; the data is initialised and is
        // read once.
        unsafe { (*core.cast::<Self>()).data.assume_init_read() }
    }

    /// A zeroed object that the driver allocates itself, as the core
    /// wants for MRs (freed with [`Self::free`]).
    pub(crate) fn alloc_zeroed() -> Result<*mut C> {
        let mut obj = KBox::<Self>::new_uninit(GFP_KERNEL_ACCOUNT)?;
        // SAFETY: one `Self` of room; all-zero bytes are the core
        // structure's initial state (what the core's own `kzalloc` gives
        // the objects it allocates) and an unset count, and `data` stays
        // uninitialised until `init`.
        unsafe { obj.as_mut_ptr().write_bytes(0, 1) };
        Ok(KBox::into_raw(obj).cast())
    }

    /// Frees an object from [`Self::alloc_zeroed`], its data not
    /// initialised or already taken.
    ///
    /// # Safety
    /// `core` came from [`Self::alloc_zeroed`] and is not used again.
    pub(crate) unsafe fn free(core: *mut C) {
        // SAFETY: the allocation `alloc_zeroed` made (the caller); a
        // `MaybeUninit` drops nothing inside it.
        drop(unsafe { KBox::from_raw(core.cast::<MaybeUninit<Self>>()) });
    }

    /// The driver data of a live object.
    ///
    /// # Safety
    /// `core` is an object whose create succeeded and whose destroy has
    /// not begun, alive for `'a`.
    pub(crate) unsafe fn data<'a>(core: *mut C) -> &'a D {
        // SAFETY: guaranteed by the caller (the type invariant).
        unsafe { (*core.cast::<Self>()).data.assume_init_ref() }
    }
}

/// The core's structure of an object and the count of the references
/// ([`CqRef`], [`SrqRef`]) that the layer handed out to it, as rxe's pool
/// elements have: the object's destroy callback waits for the count to
/// fall to 0 before it returns and the core frees the memory
/// ([`Counted::wait_unreferenced`]).
///
/// The driver gets the first reference in the create callback and keeps
/// it in its tables; code that uses the object after dropping the
/// driver's lock (a completion handler, an SRQ event) clones it under the
/// lock first.
///
/// # Invariants
/// While `refs` is above 0, the object is alive: its destroy callback has
/// not returned.
#[repr(C)]
pub(crate) struct Counted<C: Core> {
    core: Opaque<C>,
    refs: AtomicU32,
    /// What the layer keeps beside the core's structure from before the
    /// driver's create (a QP's timer and work item).
    pub(super) extra: C::Extra,
}

// SAFETY: a `Counted` is only reached through `&` (a reference count, and
// the core's own callbacks that the core calls from any context); the
// core's structure is behind `Opaque`, never read as Rust data.
unsafe impl<C: Core> Send for Counted<C> {}
// SAFETY: as above.
unsafe impl<C: Core> Sync for Counted<C> {}

// SAFETY: `refs` counts every `ARef` (the first one made by `first`, the
// others by `inc_ref`), and the destroy callback waits for it to reach 0
// before the core may free the object, so the object outlives them all.
unsafe impl<C: Core> AlwaysRefCounted for Counted<C> {
    fn inc_ref(&self) {
        // A new reference from an existing one (as `Arc::clone`).
        self.refs.fetch_add(1, Ordering::Relaxed);
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: the caller owns a reference, so the object is alive.
        // Release: everything this holder did with the object happens
        // before the destroy's acquire load sees the count drop.
        unsafe { obj.as_ref() }.refs.fetch_sub(1, Ordering::Release);
    }
}

impl<C: Core> Counted<C> {
    /// The first reference to a new object, for the driver's create.
    ///
    /// # Safety
    /// `core` is the core structure of an object of this layer, allocated
    /// by the core for the create callback in progress, whose count was
    /// never set; its destroy (or the failed create) calls
    /// [`Self::wait_unreferenced`].
    unsafe fn first(core: *mut C) -> ARef<Self> {
        let c = core.cast::<Self>();
        // SAFETY: `core` is the first field of a `#[repr(C)]` Counted in
        // live memory (the caller); nothing else reaches it yet.
        unsafe { (*c).refs.store(1, Ordering::Relaxed) };
        // SAFETY: the count of 1 just stored is the reference returned;
        // `c` is not null (a live allocation).
        // INVARIANT: the object lives until its destroy, which waits.
        unsafe { ARef::from_raw(NonNull::new_unchecked(c)) }
    }

    /// Waits until no reference is left (after the driver took the object
    /// out of its tables: only references already handed out remain, and
    /// each is dropped soon after the lock was).
    ///
    /// # Safety
    /// `core` is an object of this layer whose count was set by
    /// [`Self::first`], in its destroy callback or failed create (process
    /// context: the wait sleeps).
    unsafe fn wait_unreferenced(core: *mut C) {
        // SAFETY: a live object (the caller); only the atomic is read.
        let refs = unsafe { &(*core.cast::<Self>()).refs };
        while refs.load(Ordering::Acquire) != 0 {
            fsleep(Delta::from_micros(20));
        }
    }

    pub(super) fn core(&self) -> *mut C {
        self.core.get()
    }

    /// The layer's part beside the core's structure.
    pub(super) fn extra(&self) -> &C::Extra {
        &self.extra
    }

    /// The counted header of the core structure `core`.
    ///
    /// # Safety
    /// `core` is an object of this layer, alive for `'a`.
    pub(super) unsafe fn of<'a>(core: *mut C) -> &'a Self {
        // SAFETY: `core` is the first field of a `#[repr(C)]` Counted
        // (the caller); only `&` access through atomics and `Opaque`.
        unsafe { &*core.cast::<Self>() }
    }

    /// Whether two references name the same object.
    pub(crate) fn same(a: &ARef<Self>, b: &ARef<Self>) -> bool {
        core::ptr::eq::<Self>(&**a, &**b)
    }
}

/// A counted reference to a CQ, for its completion handler.
pub(crate) type CqRef = ARef<Counted<b::ib_cq>>;

/// A counted reference to an SRQ, for its limit event.
pub(crate) type SrqRef = ARef<Counted<b::ib_srq>>;

impl Counted<b::ib_srq> {
    /// Sends the SRQ's `IB_EVENT_SRQ_LIMIT_REACHED` (without the lock).
    pub(crate) fn limit_event(&self) {
        // SAFETY: the SRQ is alive (the type invariant).
        unsafe { b::ferroce_srq_limit_event(self.core()) }
    }
}

/// A counted object's create, as the layer runs it: the first reference
/// goes to `create`; when it fails, the references it may have handed out
/// are waited for before the core frees the memory.
///
/// # Safety
/// As for [`Counted::first`]; the data is written with [`Object::init`]
/// by the caller on success.
pub(crate) unsafe fn create_counted<C: Core, R>(
    core: *mut C,
    create: impl FnOnce(ARef<Counted<C>>) -> Result<R>,
) -> Result<R> {
    // SAFETY: forwarded from the caller.
    let r = create(unsafe { Counted::first(core) });
    if r.is_err() {
        // SAFETY: as above; the create failed, the core frees the object.
        unsafe { Counted::wait_unreferenced(core) };
    }
    r
}

/// A counted object's destroy, as the layer runs it: `destroy` (the
/// driver's; it takes the object out of its tables and drops its
/// references), then the wait for the references handed out, then the
/// data taken back and dropped. When `destroy` fails, the object stays as
/// it was.
///
/// # Safety
/// `core` is an object of this layer with data `D` whose create
/// succeeded, in its destroy callback.
pub(crate) unsafe fn destroy_counted<C: Core, D>(core: *mut C, destroy: impl FnOnce() -> Result) -> Result {
    destroy()?;
    // SAFETY: guaranteed by the caller.
    unsafe {
        Counted::wait_unreferenced(core);
        drop(Object::<C, D>::take(core));
    }
    Ok(())
}

/// A core structure that names its device.
pub(crate) trait Core: Sized {
    /// What the layer keeps beside it (valid when all zeroes: the core
    /// allocates it with `kzalloc`).
    type Extra;


    /// The object's device.
    ///
    /// # Safety
    /// `core` is a live object of a ferroce device.
    unsafe fn device<'a, T: Driver>(core: *mut Self) -> &'a Device<T>;
}

macro_rules! core_device {
    ($($t:ty),*) => {$(
        impl Core for $t {
            type Extra = ();

            unsafe fn device<'a, T: Driver>(core: *mut Self) -> &'a Device<T> {
                // SAFETY: the caller passes a live object of a device of
                // driver `T`, which outlives its objects.
                unsafe { Device::<T>::from_ib((*core).device) }
            }
        }
    )*};
}
core_device!(b::ib_ucontext, b::ib_pd, b::ib_ah, b::ib_srq, b::ib_mr, b::ib_mw);

/// A live object of core type `C` and driver data `D`, for one callback
/// (aliases [`Pd`], [`Cq`], [`Srq`], [`Mr`]).
///
/// # Invariants
/// `core` is an object of this layer whose create succeeded and whose
/// destroy has not begun (or is the callback in progress, before the
/// data is taken), alive for `'a`.
pub(crate) struct Live<'a, C: Core, T: Driver, D> {
    core: *mut C,
    _p: PhantomData<(&'a D, &'a T)>,
}

/// A live protection domain.
pub(crate) type Pd<'a, T> = Live<'a, b::ib_pd, T, <T as Driver>::Pd>;
/// A live completion queue.
pub(crate) type Cq<'a, T> = Live<'a, b::ib_cq, T, <T as Driver>::Cq>;
/// A live shared receive queue.
pub(crate) type Srq<'a, T> = Live<'a, b::ib_srq, T, <T as Driver>::Srq>;
/// A live memory region.
pub(crate) type Mr<'a, T> = Live<'a, b::ib_mr, T, <T as Driver>::Mr>;
/// A live memory window.
pub(crate) type Mw<'a, T> = Live<'a, b::ib_mw, T, <T as Driver>::Mw>;

impl<'a, C: Core, T: Driver, D> Live<'a, C, T, D> {
    /// # Safety
    /// As the type invariant says of `core`.
    pub(crate) unsafe fn from_core(core: *mut C) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { core, _p: PhantomData }
    }

    /// The driver's data of the object.
    pub(crate) fn data(&self) -> &'a D {
        // SAFETY: a live object with its data (the type invariant).
        unsafe { Object::<C, D>::data(self.core) }
    }

    /// The core's structure (for the layer's own accessors).
    pub(super) fn core_ptr(&self) -> *mut C {
        self.core
    }

    /// The device the object belongs to.
    pub(crate) fn device(&self) -> &'a Device<T> {
        // SAFETY: a live object of a device of driver `T` (the type
        // invariant).
        unsafe { C::device::<T>(self.core) }
    }
}
