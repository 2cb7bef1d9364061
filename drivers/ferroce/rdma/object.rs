// SPDX-License-Identifier: GPL-2.0

//! Verbs objects that the RDMA core allocates: the core's structure first,
//! the driver's data after it, in one allocation of the size the device
//! ops name (`size_ib_*` = [`Object::SIZE`]). The core hands the create
//! callback zeroed memory; the layer writes the driver's data only once the
//! driver's create returned it, and takes it back in the destroy callback,
//! so zeroed memory is never read as driver data.
//!
//! Drivers see an object through a borrowed view ([`Pd`]) that lives for
//! one callback.

use super::bindings as b;
use super::vtable::Driver;
use super::FerroceDevice;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

/// A core object `C` with driver data `D` after it.
///
/// # Invariants
/// `data` is initialised from the end of a successful create callback
/// (written by [`Object::init`]) until [`Object::take`] in the destroy
/// callback; in between, the core passes the object to no create again.
#[repr(C)]
pub(crate) struct Object<C, D> {
    core: C,
    data: MaybeUninit<D>,
}

impl<C, D> Object<C, D> {
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
        // `#[repr(C)]` Object.
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

/// A live protection domain, for one callback.
pub(crate) struct Pd<'a, T: Driver> {
    core: *mut b::ib_pd,
    _p: PhantomData<&'a T::Pd>,
}

impl<'a, T: Driver> Pd<'a, T> {
    /// # Safety
    /// `core` is a ferroce PD whose `alloc_pd` succeeded and whose
    /// `dealloc_pd` has not begun, alive for `'a`.
    pub(crate) unsafe fn from_core(core: *mut b::ib_pd) -> Self {
        Self { core, _p: PhantomData }
    }

    /// The driver's data of the PD.
    pub(crate) fn data(&self) -> &'a T::Pd {
        // SAFETY: a live PD (the type's constructor).
        unsafe { Object::<b::ib_pd, T::Pd>::data(self.core) }
    }

    /// The device the PD belongs to.
    pub(crate) fn device(&self) -> &'a FerroceDevice {
        // SAFETY: a live PD of a ferroce device; the device outlives it.
        unsafe { FerroceDevice::from_ib((*self.core).device) }
    }
}
