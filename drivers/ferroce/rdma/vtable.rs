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
use super::object::{create_counted, destroy_counted, Cq, CqRef, Object, Pd, Srq, SrqRef};
use super::udata::Udata;
use super::wr::{AhAttr, RecvWrs, WcSink};
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
    /// A completion queue's data.
    type Cq: Send + Sync + 'static;
    /// A shared receive queue's data.
    type Srq: Send + Sync + 'static;

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

    /// Makes a CQ of at least `attr.cqe` entries; answers its data and the
    /// entries it has. `cq` is the first counted reference to it.
    fn create_cq(dev: &FerroceDevice, cq: CqRef, attr: &CqAttr, udata: &mut Udata<'_, Self>) -> Result<(Self::Cq, u32)>;

    /// Takes a CQ out of use (`EBUSY` while a QP uses it) and drops the
    /// driver's references to it; the layer then waits for the others and
    /// drops its data.
    fn destroy_cq(cq: &Cq<'_, Self>) -> Result;

    /// Resizes a CQ to at least `cqe` entries, keeping its completions;
    /// answers the entries it has.
    fn resize_cq(cq: &Cq<'_, Self>, cqe: u32, udata: &mut Udata<'_, Self>) -> Result<u32>;

    /// Moves completions into `out` (a kernel consumer's poll).
    fn poll_cq(cq: &Cq<'_, Self>, out: &mut WcSink<'_>);

    /// Arms a CQ for its next (`solicited`: next solicited) completion;
    /// answers whether completions wait already (asked for by
    /// `report_missed`).
    fn req_notify_cq(cq: &Cq<'_, Self>, solicited: bool, report_missed: bool) -> Result<bool>;

    /// Makes a basic SRQ; answers its data and writes the granted sizes
    /// into `attr`. `srq` is the first counted reference to it.
    fn create_srq(dev: &FerroceDevice, srq: SrqRef, attr: &mut SrqAttr, udata: &mut Udata<'_, Self>) -> Result<Self::Srq>;

    /// Changes an SRQ's size (`resize`) and/or limit (`limit`).
    fn modify_srq(srq: &Srq<'_, Self>, attr: &SrqAttr, resize: bool, limit: bool, udata: &mut Udata<'_, Self>) -> Result;

    /// An SRQ's attributes.
    fn query_srq(srq: &Srq<'_, Self>) -> Result<SrqAttr>;

    /// Takes an SRQ out of use (`EBUSY` while a QP uses it), as
    /// [`Self::destroy_cq`].
    fn destroy_srq(srq: &Srq<'_, Self>) -> Result;

    /// Posts a kernel consumer's receive requests to an SRQ.
    fn post_srq_recv(srq: &Srq<'_, Self>, wrs: &mut RecvWrs<'_>) -> Result;
}

/// What a CQ is created with.
pub(crate) struct CqAttr {
    /// Entries asked for.
    pub(crate) cqe: u32,
    /// Its completion vector.
    pub(crate) comp_vector: u32,
    /// `ib_cq_init_attr.flags` (timestamps and the like).
    pub(crate) flags: u32,
}

/// An SRQ's sizes and limit (`ib_srq_attr`).
#[derive(Clone, Copy)]
pub(crate) struct SrqAttr {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) srq_limit: u32,
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
        ops.create_cq = Some(Self::create_cq);
        ops.destroy_cq = Some(Self::destroy_cq);
        ops.resize_user_cq = Some(Self::resize_cq);
        ops.poll_cq = Some(Self::poll_cq);
        ops.req_notify_cq = Some(Self::req_notify_cq);
        ops.size_ib_cq = Object::<b::ib_cq, T::Cq>::SIZE;
        ops.create_srq = Some(Self::create_srq);
        ops.modify_srq = Some(Self::modify_srq);
        ops.query_srq = Some(Self::query_srq);
        ops.destroy_srq = Some(Self::destroy_srq);
        ops.post_srq_recv = Some(Self::post_srq_recv);
        ops.size_ib_srq = Object::<b::ib_srq, T::Srq>::SIZE;
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

    unsafe extern "C" fn create_cq(
        ibcq: *mut b::ib_cq,
        attr: *const b::ib_cq_init_attr,
        attrs: *mut b::uverbs_attr_bundle,
    ) -> c_int {
        // SAFETY: the core passes a zeroed CQ of our size with `device`
        // and its handler set, a valid attribute, and for a process its
        // attribute bundle (whose udata is the call's), else null.
        let (dev, a, mut udata) = unsafe {
            (FerroceDevice::from_ib((*ibcq).device), &*attr, Udata::<T>::from_raw(b::ferroce_attrs_udata(attrs)))
        };
        let attr = CqAttr { cqe: a.cqe, comp_vector: a.comp_vector, flags: a.flags };
        // SAFETY: this create call's CQ.
        let r = unsafe { create_counted(ibcq, |cq| T::create_cq(dev, cq, &attr, &mut udata)) };
        errno(r.map(|(cq, cqe)| {
            // SAFETY: this create call's CQ, not yet initialised; the core
            // reads `cqe` back.
            unsafe {
                Object::init(ibcq, cq);
                (*ibcq).cqe = cqe as c_int;
            }
        }))
    }

    unsafe extern "C" fn destroy_cq(ibcq: *mut b::ib_cq, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a CQ whose create succeeded, in its destroy.
        errno(unsafe { destroy_counted::<_, T::Cq>(ibcq, || T::destroy_cq(&Cq::<T>::from_core(ibcq))) })
    }

    unsafe extern "C" fn resize_cq(ibcq: *mut b::ib_cq, cqe: u32, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a live CQ (the core holds it for the call) and the
        // call's udata.
        let (cq, mut udata) = unsafe { (Cq::<T>::from_core(ibcq), Udata::from_raw(udata)) };
        errno(T::resize_cq(&cq, cqe, &mut udata).map(|n| {
            // SAFETY: as above; the core reads `cqe` back.
            unsafe { (*ibcq).cqe = n as c_int };
        }))
    }

    unsafe extern "C" fn poll_cq(ibcq: *mut b::ib_cq, num: c_int, wc: *mut b::ib_wc) -> c_int {
        // SAFETY: a live CQ, and room for `num` completions at `wc`.
        let (cq, mut out) =
            unsafe { (Cq::<T>::from_core(ibcq), WcSink::from_raw(wc, usize::try_from(num).unwrap_or(0))) };
        T::poll_cq(&cq, &mut out);
        out.written() as c_int
    }

    unsafe extern "C" fn req_notify_cq(ibcq: *mut b::ib_cq, flags: b::ib_cq_notify_flags) -> c_int {
        // SAFETY: a live CQ.
        let cq = unsafe { Cq::<T>::from_core(ibcq) };
        let solicited =
            flags & b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK == b::ib_cq_notify_flags_IB_CQ_SOLICITED;
        let missed = flags & b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        match T::req_notify_cq(&cq, solicited, missed) {
            Ok(waiting) => c_int::from(waiting),
            Err(e) => e.to_errno(),
        }
    }

    unsafe extern "C" fn create_srq(
        ibsrq: *mut b::ib_srq,
        init: *mut b::ib_srq_init_attr,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed SRQ of our size with `device`
        // and its handler set, a valid init attribute it reads the granted
        // sizes back from, and the call's udata or null.
        let (dev, ia, mut udata) =
            unsafe { (FerroceDevice::from_ib((*ibsrq).device), &mut *init, Udata::<T>::from_raw(udata)) };
        if ia.srq_type != b::ib_srq_type_IB_SRQT_BASIC {
            return super::eopnotsupp().to_errno();
        }
        let mut attr = SrqAttr { max_wr: ia.attr.max_wr, max_sge: ia.attr.max_sge, srq_limit: ia.attr.srq_limit };
        // SAFETY: this create call's SRQ.
        let r = unsafe { create_counted(ibsrq, |srq| T::create_srq(dev, srq, &mut attr, &mut udata)) };
        errno(r.map(|srq| {
            // SAFETY: this create call's SRQ, not yet initialised.
            unsafe { Object::init(ibsrq, srq) };
            ia.attr.max_wr = attr.max_wr;
            ia.attr.max_sge = attr.max_sge;
        }))
    }

    unsafe extern "C" fn modify_srq(
        ibsrq: *mut b::ib_srq,
        attr: *mut b::ib_srq_attr,
        mask: b::ib_srq_attr_mask,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: a live SRQ, a valid attribute and the call's udata.
        let (srq, a, mut udata) = unsafe { (Srq::<T>::from_core(ibsrq), &*attr, Udata::from_raw(udata)) };
        let attr = SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit };
        let resize = mask & b::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0;
        let limit = mask & b::ib_srq_attr_mask_IB_SRQ_LIMIT != 0;
        errno(T::modify_srq(&srq, &attr, resize, limit, &mut udata))
    }

    unsafe extern "C" fn query_srq(ibsrq: *mut b::ib_srq, attr: *mut b::ib_srq_attr) -> c_int {
        // SAFETY: a live SRQ and the core's output structure.
        let (srq, out) = unsafe { (Srq::<T>::from_core(ibsrq), &mut *attr) };
        errno(T::query_srq(&srq).map(|a| {
            out.max_wr = a.max_wr;
            out.max_sge = a.max_sge;
            out.srq_limit = a.srq_limit;
        }))
    }

    unsafe extern "C" fn destroy_srq(ibsrq: *mut b::ib_srq, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: an SRQ whose create succeeded, in its destroy.
        errno(unsafe { destroy_counted::<_, T::Srq>(ibsrq, || T::destroy_srq(&Srq::<T>::from_core(ibsrq))) })
    }

    unsafe extern "C" fn post_srq_recv(
        ibsrq: *mut b::ib_srq,
        wr: *const b::ib_recv_wr,
        bad: *mut *const b::ib_recv_wr,
    ) -> c_int {
        // SAFETY: a live SRQ and the core's valid list of requests.
        let (srq, mut wrs) = unsafe { (Srq::<T>::from_core(ibsrq), RecvWrs::from_raw(wr)) };
        let r = T::post_srq_recv(&srq, &mut wrs);
        if r.is_err() && !bad.is_null() {
            // SAFETY: the core's output pointer, checked non-null.
            unsafe { *bad = wrs.failed() };
        }
        errno(r)
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

/// The driver data of a live CQ that a QP's creation names.
///
/// # Safety
/// `ibcq` is a ferroce CQ whose create succeeded and whose destroy has
/// not begun, alive for `'a`.
pub(crate) unsafe fn cq_data<'a, T: Driver>(ibcq: *mut b::ib_cq) -> &'a T::Cq {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_cq, T::Cq>::data(ibcq) }
}

/// The driver data of a live SRQ that a QP's creation names.
///
/// # Safety
/// As for [`cq_data`].
pub(crate) unsafe fn srq_data<'a, T: Driver>(ibsrq: *mut b::ib_srq) -> &'a T::Srq {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_srq, T::Srq>::data(ibsrq) }
}
