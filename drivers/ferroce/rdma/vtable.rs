// SPDX-License-Identifier: GPL-2.0

//! The driver's verbs as a Rust trait, and the C callbacks of
//! `ib_device_ops` that call it ([`Adapter`]).
//!
//! Each callback turns the core's pointers into the layer's typed views,
//! calls the driver, and writes its result into the core's object (see
//! [`Object`]). The verbs not yet behind the trait are `objects.rs`'s
//! callbacks, which [`super::device_ops`] still names directly.

use super::bindings as b;
use super::errno;
use super::object::{Object, Pd};
use super::udata::Udata;
use super::wr::AhAttr;
use super::FerroceDevice;
use core::ffi::c_int;
use core::marker::PhantomData;
use kernel::prelude::*;

/// A driver of verbs objects: one associated type per object, the data
/// the layer keeps after the core's structure.
#[vtable]
pub(crate) trait Driver: Sized + 'static {
    /// A user context's data (one per opened device file).
    type Ucontext: Send + Sync + 'static;
    /// A protection domain's data.
    type Pd: Send + Sync + 'static;
    /// An address handle's data.
    type Ah: Send + Sync + 'static;

    /// Makes a process's context (the core calls it once per device file).
    fn alloc_ucontext(dev: &FerroceDevice, udata: &mut Udata<'_, Self>) -> Result<Self::Ucontext>;

    /// Frees a context, after every object made in it was destroyed.
    fn dealloc_ucontext(dev: &FerroceDevice, ctx: Self::Ucontext);

    /// Allocates a PD (`udata` is a process's call, or none for a kernel
    /// consumer).
    fn alloc_pd(dev: &FerroceDevice, udata: &mut Udata<'_, Self>) -> Result<Self::Pd>;

    /// Frees a PD. The core calls it once every object in the PD is gone.
    fn dealloc_pd(dev: &FerroceDevice, pd: Self::Pd);

    /// Makes an AH in `pd` for the address `attr`. A kernel consumer may
    /// call it in atomic context: it must not sleep.
    fn create_ah(pd: &Pd<'_, Self>, attr: &AhAttr<'_>, udata: &mut Udata<'_, Self>) -> Result<Self::Ah>;

    /// Destroys an AH (it may be called in atomic context).
    fn destroy_ah(dev: &FerroceDevice, ah: Self::Ah);
}

/// The C callbacks of a [`Driver`].
pub(crate) struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    /// Fills the slots of `ops` that the trait covers: the callbacks and the
    /// sizes the core allocates.
    pub(crate) fn fill(ops: &mut b::ib_device_ops) {
        ops.alloc_ucontext = Some(Self::alloc_ucontext);
        ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
        ops.alloc_pd = Some(Self::alloc_pd);
        ops.dealloc_pd = Some(Self::dealloc_pd);
        ops.create_ah = Some(Self::create_ah);
        ops.create_user_ah = Some(Self::create_ah);
        ops.destroy_ah = Some(Self::destroy_ah);
        ops.size_ib_ucontext = Object::<b::ib_ucontext, T::Ucontext>::SIZE;
        ops.size_ib_pd = Object::<b::ib_pd, T::Pd>::SIZE;
        ops.size_ib_ah = Object::<b::ib_ah, T::Ah>::SIZE;
    }

    unsafe extern "C" fn alloc_ucontext(uctx: *mut b::ib_ucontext, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: the core passes a zeroed context of our size with
        // `device` set, and the udata of the process's call, whose context
        // is this one (not yet initialised: `for_new_context`).
        let (dev, mut udata) =
            unsafe { (FerroceDevice::from_ib((*uctx).device), Udata::<T>::for_new_context(udata)) };
        errno(T::alloc_ucontext(dev, &mut udata).map(|ctx| {
            // SAFETY: this create call's context, not yet initialised.
            unsafe { Object::init(uctx, ctx) }
        }))
    }

    unsafe extern "C" fn dealloc_ucontext(uctx: *mut b::ib_ucontext) {
        // SAFETY: a context whose `alloc_ucontext` succeeded (the core
        // calls this for no other), after every object in it was
        // destroyed: nothing reads its data again.
        let (dev, ctx) =
            unsafe { (FerroceDevice::from_ib((*uctx).device), Object::<b::ib_ucontext, T::Ucontext>::take(uctx)) };
        T::dealloc_ucontext(dev, ctx);
    }

    unsafe extern "C" fn alloc_pd(ibpd: *mut b::ib_pd, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: the core passes a zeroed PD of our size with `device`
        // set (a ferroce device), and its udata of the call or null.
        let (dev, mut udata) = unsafe { (FerroceDevice::from_ib((*ibpd).device), Udata::from_raw(udata)) };
        errno(T::alloc_pd(dev, &mut udata).map(|pd| {
            // SAFETY: this create call's PD, not yet initialised.
            unsafe { Object::init(ibpd, pd) }
        }))
    }

    unsafe extern "C" fn dealloc_pd(ibpd: *mut b::ib_pd, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a PD whose `alloc_pd` succeeded, in its destroy: nothing
        // reads its data again.
        let (dev, pd) = unsafe { (FerroceDevice::from_ib((*ibpd).device), Object::<b::ib_pd, T::Pd>::take(ibpd)) };
        T::dealloc_pd(dev, pd);
        0
    }

    unsafe extern "C" fn create_ah(
        ibah: *mut b::ib_ah,
        init: *mut b::rdma_ah_init_attr,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed AH of our size with `device`
        // and `pd` set (a live ferroce PD it holds for the AH), a valid
        // init attribute whose `ah_attr` (and its GID entry) is valid for
        // the call, and its udata or null.
        let (pd, attr, mut udata) =
            unsafe { (Pd::<T>::from_core((*ibah).pd), AhAttr::from_raw(&*(*init).ah_attr), Udata::from_raw(udata)) };
        errno(T::create_ah(&pd, &attr, &mut udata).map(|ah| {
            // SAFETY: this create call's AH, not yet initialised.
            unsafe { Object::init(ibah, ah) }
        }))
    }

    unsafe extern "C" fn destroy_ah(ibah: *mut b::ib_ah, _flags: u32) -> c_int {
        // SAFETY: an AH whose `create_ah` succeeded, in its destroy.
        let (dev, ah) = unsafe { (FerroceDevice::from_ib((*ibah).device), Object::<b::ib_ah, T::Ah>::take(ibah)) };
        T::destroy_ah(dev, ah);
        0
    }
}

/// The driver data of a live AH that a kernel work request names.
///
/// # Safety
/// `ibah` is a ferroce AH whose `create_ah` succeeded and that the core
/// keeps alive for `'a` (the work request's call).
pub(crate) unsafe fn ah_data<'a, T: Driver>(ibah: *mut b::ib_ah) -> &'a T::Ah {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_ah, T::Ah>::data(ibah) }
}

/// The driver data of a live user context that another object's callback
/// names.
///
/// # Safety
/// `uctx` is a ferroce context whose `alloc_ucontext` succeeded and that
/// lives for `'a` (the core keeps a call's context alive for the call).
pub(crate) unsafe fn ucontext_data<'a, T: Driver>(uctx: *mut b::ib_ucontext) -> &'a T::Ucontext {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_ucontext, T::Ucontext>::data(uctx) }
}

/// The driver data of a live PD that another object's callback names.
///
/// # Safety
/// `ibpd` is a ferroce PD whose `alloc_pd` succeeded and whose
/// `dealloc_pd` has not begun, alive for `'a`.
pub(crate) unsafe fn pd_data<'a, T: Driver>(ibpd: *mut b::ib_pd) -> &'a T::Pd {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_pd, T::Pd>::data(ibpd) }
}
