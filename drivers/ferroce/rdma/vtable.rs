// SPDX-License-Identifier: GPL-2.0

//! The driver's verbs as a Rust trait, and the C callbacks of
//! `ib_device_ops` that call it ([`Adapter`]).
//!
//! Each callback turns the core's pointers into the layer's typed views,
//! calls the driver, and writes its result into the core's object (see
//! [`Object`]). [`Adapter::fill`] sets every verb's slot of
//! `ib_device_ops` and the object sizes in one place.

use super::bindings as b;
use super::errno;
use super::mr::{KernelMem, PageStage};
use super::object::{create_counted, destroy_counted, Counted, Cq, CqRef, Mr, Mw, Object, Pd, Srq, SrqRef};
use super::qp::{init_hooks, shutdown_hooks, write_query, Qp, QpAttrIn, QpInit, QpQuery, QpRef, SendWrs};
use super::udata::Udata;
use super::wr::{AhAttr, RecvWrs, WcSink};
use super::{Device, DeviceAttrs, NetDev, PortAttrs};
use core::ffi::c_int;
use core::marker::PhantomData;
use kernel::prelude::*;

/// A driver of verbs objects: one associated type per object, the data
/// the layer keeps after the core's structure.
#[vtable]
pub(crate) trait Driver: Sized + 'static {
    /// A device's state: its object tables, behind the device lock.
    type State: Send + 'static;
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
    /// A memory region's data.
    type Mr: Send + Sync + 'static;
    /// A memory window's data.
    type Mw: Send + Sync + 'static;
    /// A queue pair's data.
    type Qp: Send + Sync + 'static;

    /// The largest page size a fast-registration region is mapped with.
    const MAX_MR_PAGE_SIZE: u64;

    /// Checks `rdma link add NAME type ferroce netdev DEV` before the
    /// layer allocates the device.
    fn check_newlink(name: &CStr, ndev: &NetDev) -> Result;

    /// A new device's state (before it is registered).
    fn new_state() -> Result<Self::State>;

    /// What `query_device` answers.
    fn device_attrs(dev: &Device<Self>) -> DeviceAttrs;

    /// What `query_port` answers of port 1 on netdev `ndev`.
    fn port_attrs(ndev: &NetDev) -> PortAttrs;

    /// Makes a process's context (the core calls it once per device file).
    fn alloc_ucontext(dev: &Device<Self>, udata: &mut Udata<'_, Self>) -> Result<Self::Ucontext>;

    /// Frees a context, after every object made in it was destroyed.
    fn dealloc_ucontext(dev: &Device<Self>, ctx: Self::Ucontext);

    /// Allocates a PD (`udata` is a process's call, or none for a kernel
    /// consumer).
    fn alloc_pd(dev: &Device<Self>, udata: &mut Udata<'_, Self>) -> Result<Self::Pd>;

    /// Frees a PD. The core calls it once every object in the PD is gone.
    fn dealloc_pd(dev: &Device<Self>, pd: Self::Pd);

    /// Makes an AH in `pd` for the address `attr`. A kernel consumer may
    /// call it in atomic context: it must not sleep.
    fn create_ah(pd: &Pd<'_, Self>, attr: &AhAttr<'_>, udata: &mut Udata<'_, Self>) -> Result<Self::Ah>;

    /// Destroys an AH (it may be called in atomic context).
    fn destroy_ah(dev: &Device<Self>, ah: Self::Ah);

    /// Makes a CQ of at least `attr.cqe` entries; answers its data and the
    /// entries it has. `cq` is the first counted reference to it.
    fn create_cq(dev: &Device<Self>, cq: CqRef, attr: &CqAttr, udata: &mut Udata<'_, Self>) -> Result<(Self::Cq, u32)>;

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
    fn create_srq(dev: &Device<Self>, srq: SrqRef, attr: &mut SrqAttr, udata: &mut Udata<'_, Self>) -> Result<Self::Srq>;

    /// Changes an SRQ's size (`resize`) and/or limit (`limit`).
    fn modify_srq(srq: &Srq<'_, Self>, attr: &SrqAttr, resize: bool, limit: bool, udata: &mut Udata<'_, Self>) -> Result;

    /// An SRQ's attributes.
    fn query_srq(srq: &Srq<'_, Self>) -> Result<SrqAttr>;

    /// Takes an SRQ out of use (`EBUSY` while a QP uses it), as
    /// [`Self::destroy_cq`].
    fn destroy_srq(srq: &Srq<'_, Self>) -> Result;

    /// Posts a kernel consumer's receive requests to an SRQ.
    fn post_srq_recv(srq: &Srq<'_, Self>, wrs: &mut RecvWrs<'_>) -> Result;

    /// Registers `length` bytes of the calling process's memory at
    /// `start`, addressed from `iova`; answers the data and the key (lkey
    /// and rkey alike).
    fn reg_user_mr(
        pd: &Pd<'_, Self>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        udata: &mut Udata<'_, Self>,
    ) -> Result<(Self::Mr, u32)>;

    /// A kernel consumer's region of all memory, reached through `mem`.
    fn get_dma_mr(pd: &Pd<'_, Self>, access: u32, mem: KernelMem) -> Result<(Self::Mr, u32)>;

    /// A fast-registration region of up to `max_num_sg` pages, invalid
    /// until a REG_MR work request registers it; its pages are reached
    /// through `mem`.
    fn alloc_mr(pd: &Pd<'_, Self>, max_num_sg: u32, mem: KernelMem) -> Result<(Self::Mr, u32)>;

    /// Where a fast region's pages are staged by `ib_map_mr_sg` (`None`:
    /// not a fast region).
    fn page_stage(mr: &Self::Mr) -> Option<&PageStage>;

    /// Takes the staged pages as the fast region's page list, of pages of
    /// `page_size` bytes from `iova`.
    fn map_mr_sg(mr: &Mr<'_, Self>, page_size: u64, iova: u64) -> Result;

    /// Takes a region out of use: no packet reaches its memory after this
    /// returns (the layer then drops its data, unpinning the memory).
    fn dereg_mr(mr: &Mr<'_, Self>) -> Result;

    /// Makes a memory window of type 1 (or 2B: `type2`) in `pd`; answers
    /// its data and its first R_Key.
    fn alloc_mw(pd: &Pd<'_, Self>, type2: bool, udata: &mut Udata<'_, Self>) -> Result<(Self::Mw, u32)>;

    /// Takes a window out of use (unbinding it); the layer then drops its
    /// data.
    fn dealloc_mw(mw: &Mw<'_, Self>) -> Result;

    /// Makes a QP: sets its number on `qp` (the first counted reference)
    /// before it is reachable, and the granted sizes in `init`.
    fn create_qp(qp: QpRef, init: &mut QpInit<'_, Self>, udata: &mut Udata<'_, Self>) -> Result<Self::Qp>;

    /// Modify QP.
    fn modify_qp(qp: &Qp<'_, Self>, attr: &QpAttrIn<'_>, udata: &mut Udata<'_, Self>) -> Result;

    /// Query QP.
    fn query_qp(qp: &Qp<'_, Self>) -> Result<QpQuery>;

    /// Takes a QP out of use and drops the driver's references to it; the
    /// layer then stops its timer and work item, waits for the other
    /// references and drops its data.
    fn destroy_qp(qp: &Qp<'_, Self>) -> Result;

    /// Posts a kernel consumer's send requests (a process's call is its
    /// doorbell, with none).
    fn post_send(qp: &Qp<'_, Self>, wrs: &mut SendWrs<'_, Self>) -> Result;

    /// Posts a kernel consumer's receive requests (a process's call is its
    /// doorbell, with none).
    fn post_recv(qp: &Qp<'_, Self>, wrs: &mut RecvWrs<'_>) -> Result;

    /// A QP's timer fired (softirq context).
    /// Attaches UD QP `qp` to the multicast group of GID `gid`
    /// (`ibv_attach_mcast`).
    fn attach_mcast(qp: &Qp<'_, Self>, gid: &[u8; 16]) -> Result;

    /// Detaches `qp` from the group of `gid` (`ibv_detach_mcast`).
    fn detach_mcast(qp: &Qp<'_, Self>, gid: &[u8; 16]) -> Result;

    fn qp_timer(dev: &Device<Self>, qpn: u32);

    /// A QP's work item of priority `prio` runs (process context). Its two
    /// items may run at once, on two CPUs.
    fn qp_work(dev: &Device<Self>, qpn: u32, prio: super::qp::WorkPrio);

    /// A RoCEv2 datagram arrived for `dev`: `packet` is its bytes from the
    /// IP header on, nothing checked yet (softirq context).
    fn receive(dev: &Device<Self>, packet: &[u8]);

    /// The device's work item runs (process context; queued by
    /// `Device::queue_work`).
    fn device_work(dev: &Device<Self>);

    /// Faults in the pages of memory on demand the datapath found absent
    /// and lets the QPs that waited for them go on (process context).
    fn fault_work(dev: &Device<Self>);

    /// Watches the send rings of the QPs that linger and runs those a
    /// process posted to (process context; queued by
    /// `Device::queue_linger_work`).
    fn linger_work(dev: &Device<Self>);

    /// Runs what the datagrams of a receive burst left to do (bottom-half
    /// context, after the softirq's receive pass; queued by
    /// `Device::queue_burst_work`).
    fn burst_work(dev: &Device<Self>);

    /// `ibv_advise_mr`: prefetches the ranges `sges` names (`(addr, len,
    /// lkey)`) of regions on demand of `pd`; `sync`: before returning.
    fn advise_mr(pd: &Pd<'_, Self>, advice: Advice, sync: bool, sges: &[(u64, u32, u32)]) -> Result;
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

/// What `ibv_advise_mr` asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advice {
    /// Fault the pages in for reading.
    Prefetch,
    /// Fault them in writable.
    PrefetchWrite,
    /// Take the pages already present, fault none in.
    PrefetchNoFault,
}

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
        ops.reg_user_mr = Some(Self::reg_user_mr);
        ops.get_dma_mr = Some(Self::get_dma_mr);
        ops.alloc_mr = Some(Self::alloc_mr);
        ops.map_mr_sg = Some(Self::map_mr_sg);
        ops.dereg_mr = Some(Self::dereg_mr);
        ops.advise_mr = Some(Self::advise_mr);
        ops.alloc_mw = Some(Self::alloc_mw);
        ops.dealloc_mw = Some(Self::dealloc_mw);
        ops.size_ib_mw = Object::<b::ib_mw, T::Mw>::SIZE;
        ops.create_qp = Some(Self::create_qp);
        ops.modify_qp = Some(Self::modify_qp);
        ops.query_qp = Some(Self::query_qp);
        ops.destroy_qp = Some(Self::destroy_qp);
        ops.post_send = Some(Self::post_send);
        ops.post_recv = Some(Self::post_recv);
        ops.attach_mcast = Some(Self::attach_mcast);
        ops.detach_mcast = Some(Self::detach_mcast);
        ops.size_ib_qp = Object::<b::ib_qp, T::Qp>::SIZE;
    }

    /// Makes an MR object with `create`'s data and key (the core wants
    /// the driver to allocate MRs); `ERR_PTR` on failure.
    fn new_mr(create: impl FnOnce() -> Result<(T::Mr, u32)>, range: Option<(u64, u64)>) -> *mut b::ib_mr {
        let r = Object::<b::ib_mr, T::Mr>::alloc_zeroed().and_then(|ibmr| match create() {
            Ok((data, key)) => {
                // SAFETY: our new object, not yet initialised or seen by
                // the core.
                unsafe {
                    Object::init(ibmr, data);
                    (*ibmr).lkey = key;
                    (*ibmr).rkey = key;
                    if let Some((iova, length)) = range {
                        (*ibmr).iova = iova;
                        (*ibmr).length = length;
                    }
                }
                Ok(ibmr)
            }
            Err(e) => {
                // SAFETY: from `alloc_zeroed`, never initialised.
                unsafe { Object::<b::ib_mr, T::Mr>::free(ibmr) };
                Err(e)
            }
        });
        r.unwrap_or_else(|e| e.to_errno() as isize as *mut b::ib_mr)
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn alloc_ucontext(uctx: *mut b::ib_ucontext, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: the core passes a zeroed context of our size with
        // `device` set, and the udata of the process's call, whose context
        // is this one (not yet initialised: `for_new_context`).
        let (dev, mut udata) =
            unsafe { (Device::<T>::from_ib((*uctx).device), Udata::<T>::for_new_context(udata)) };
        errno(T::alloc_ucontext(dev, &mut udata).map(|ctx| {
            // SAFETY: this create call's context, not yet initialised.
            unsafe { Object::init(uctx, ctx) }
        }))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn dealloc_ucontext(uctx: *mut b::ib_ucontext) {
        // SAFETY: a context whose `alloc_ucontext` succeeded (the core
        // calls this for no other), after every object in it was
        // destroyed: nothing reads its data again.
        let (dev, ctx) =
            unsafe { (Device::<T>::from_ib((*uctx).device), Object::<b::ib_ucontext, T::Ucontext>::take(uctx)) };
        T::dealloc_ucontext(dev, ctx);
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn alloc_pd(ibpd: *mut b::ib_pd, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: the core passes a zeroed PD of our size with `device`
        // set (a ferroce device), and its udata of the call or null.
        let (dev, mut udata) = unsafe { (Device::<T>::from_ib((*ibpd).device), Udata::from_raw(udata)) };
        errno(T::alloc_pd(dev, &mut udata).map(|pd| {
            // SAFETY: this create call's PD, not yet initialised.
            unsafe { Object::init(ibpd, pd) }
        }))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn dealloc_pd(ibpd: *mut b::ib_pd, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a PD whose `alloc_pd` succeeded, in its destroy: nothing
        // reads its data again.
        let (dev, pd) = unsafe { (Device::<T>::from_ib((*ibpd).device), Object::<b::ib_pd, T::Pd>::take(ibpd)) };
        T::dealloc_pd(dev, pd);
        0
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
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

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn destroy_ah(ibah: *mut b::ib_ah, _flags: u32) -> c_int {
        // SAFETY: an AH whose `create_ah` succeeded, in its destroy.
        let (dev, ah) = unsafe { (Device::<T>::from_ib((*ibah).device), Object::<b::ib_ah, T::Ah>::take(ibah)) };
        T::destroy_ah(dev, ah);
        0
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn create_cq(
        ibcq: *mut b::ib_cq,
        attr: *const b::ib_cq_init_attr,
        attrs: *mut b::uverbs_attr_bundle,
    ) -> c_int {
        // SAFETY: the core passes a zeroed CQ of our size with `device`
        // and its handler set, a valid attribute, and for a process its
        // attribute bundle (whose udata is the call's), else null.
        let (dev, a, mut udata) = unsafe {
            (Device::<T>::from_ib((*ibcq).device), &*attr, Udata::<T>::from_raw(b::ferroce_attrs_udata(attrs)))
        };
        let attr = CqAttr { cqe: a.cqe, comp_vector: a.comp_vector, flags: a.flags };
        // SAFETY: this create call's CQ, zeroed, not yet reachable.
        unsafe { super::cq::init_hooks(ibcq, a.comp_vector) };
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

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn destroy_cq(ibcq: *mut b::ib_cq, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a CQ whose create succeeded, in its destroy.
        errno(unsafe { destroy_counted::<_, T::Cq>(ibcq, || T::destroy_cq(&Cq::<T>::from_core(ibcq))) })
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn resize_cq(ibcq: *mut b::ib_cq, cqe: u32, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a live CQ (the core holds it for the call) and the
        // call's udata.
        let (cq, mut udata) = unsafe { (Cq::<T>::from_core(ibcq), Udata::from_raw(udata)) };
        errno(T::resize_cq(&cq, cqe, &mut udata).map(|n| {
            // SAFETY: as above; the core reads `cqe` back.
            unsafe { (*ibcq).cqe = n as c_int };
        }))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn poll_cq(ibcq: *mut b::ib_cq, num: c_int, wc: *mut b::ib_wc) -> c_int {
        // SAFETY: a live CQ, and room for `num` completions at `wc`.
        let (cq, mut out) =
            unsafe { (Cq::<T>::from_core(ibcq), WcSink::from_raw(wc, usize::try_from(num).unwrap_or(0))) };
        T::poll_cq(&cq, &mut out);
        out.written() as c_int
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
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

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn create_srq(
        ibsrq: *mut b::ib_srq,
        init: *mut b::ib_srq_init_attr,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed SRQ of our size with `device`
        // and its handler set, a valid init attribute it reads the granted
        // sizes back from, and the call's udata or null.
        let (dev, ia, mut udata) =
            unsafe { (Device::<T>::from_ib((*ibsrq).device), &mut *init, Udata::<T>::from_raw(udata)) };
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

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
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

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn query_srq(ibsrq: *mut b::ib_srq, attr: *mut b::ib_srq_attr) -> c_int {
        // SAFETY: a live SRQ and the core's output structure.
        let (srq, out) = unsafe { (Srq::<T>::from_core(ibsrq), &mut *attr) };
        errno(T::query_srq(&srq).map(|a| {
            out.max_wr = a.max_wr;
            out.max_sge = a.max_sge;
            out.srq_limit = a.srq_limit;
        }))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn destroy_srq(ibsrq: *mut b::ib_srq, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: an SRQ whose create succeeded, in its destroy.
        errno(unsafe { destroy_counted::<_, T::Srq>(ibsrq, || T::destroy_srq(&Srq::<T>::from_core(ibsrq))) })
    }

    #[allow(clippy::too_many_arguments)] // the core's callback
    ///
    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn reg_user_mr(
        ibpd: *mut b::ib_pd,
        start: u64,
        length: u64,
        virt: u64,
        access: c_int,
        dmah: *mut b::ib_dmah,
        udata: *mut b::ib_udata,
    ) -> *mut b::ib_mr {
        if !dmah.is_null() {
            // DMA handles (TPH steering) are for devices that DMA.
            return super::eopnotsupp().to_errno() as isize as *mut b::ib_mr;
        }
        // SAFETY: a live PD the core holds for the call, and its udata.
        let (pd, mut udata) = unsafe { (Pd::<T>::from_core(ibpd), Udata::<T>::from_raw(udata)) };
        Self::new_mr(|| T::reg_user_mr(&pd, start, length, virt, access as u32, &mut udata), Some((virt, length)))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn get_dma_mr(ibpd: *mut b::ib_pd, access: c_int) -> *mut b::ib_mr {
        // SAFETY: a live PD the core holds for the call.
        let pd = unsafe { Pd::<T>::from_core(ibpd) };
        Self::new_mr(|| T::get_dma_mr(&pd, access as u32, KernelMem::new()), None)
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn alloc_mr(ibpd: *mut b::ib_pd, mr_type: b::ib_mr_type, max_num_sg: u32) -> *mut b::ib_mr {
        if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
            // SG_GAPS and integrity regions are not offered.
            return super::eopnotsupp().to_errno() as isize as *mut b::ib_mr;
        }
        // SAFETY: a live PD the core holds for the call.
        let pd = unsafe { Pd::<T>::from_core(ibpd) };
        Self::new_mr(|| T::alloc_mr(&pd, max_num_sg, KernelMem::new()), None)
    }

    /// `ib_sg_to_pages`' callback: stages one page of the region.
    ///
    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn set_page(ibmr: *mut b::ib_mr, addr: u64) -> c_int {
        // SAFETY: called by `ib_sg_to_pages` inside our `map_mr_sg`, for
        // the live MR being mapped.
        let mr = unsafe { Mr::<T>::from_core(ibmr) };
        match T::page_stage(mr.data()) {
            Some(stage) => errno(stage.push(addr)),
            None => EINVAL.to_errno(),
        }
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn map_mr_sg(
        ibmr: *mut b::ib_mr,
        sg: *mut b::scatterlist,
        sg_nents: c_int,
        sg_offset: *mut u32,
    ) -> c_int {
        // SAFETY: a live MR of ours (the consumer owns it for the call).
        let (mr, ps) = unsafe { (Mr::<T>::from_core(ibmr), u64::from((*ibmr).page_size)) };
        if !ps.is_power_of_two() || ps < kernel::page::PAGE_SIZE as u64 || ps > T::MAX_MR_PAGE_SIZE {
            return EINVAL.to_errno();
        }
        let Some(stage) = T::page_stage(mr.data()) else {
            return EINVAL.to_errno();
        };
        stage.reset();
        // SAFETY: our MR with a valid page size, and the consumer's mapped
        // scatterlist of `sg_nents` entries; `set_page` stages each page.
        let n = unsafe { b::ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, Some(Self::set_page)) };
        if n < 0 {
            return n;
        }
        // SAFETY: `ib_sg_to_pages` set the MR's iova.
        let iova = unsafe { (*ibmr).iova };
        match T::map_mr_sg(&mr, ps, iova) {
            Ok(()) => n,
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn advise_mr(
        ibpd: *mut b::ib_pd,
        advice: b::ib_uverbs_advise_mr_advice,
        flags: u32,
        sg_list: *mut b::ib_sge,
        num_sge: u32,
        _attrs: *mut b::uverbs_attr_bundle,
    ) -> c_int {
        let advice = match advice {
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => Advice::Prefetch,
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => Advice::PrefetchWrite,
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => Advice::PrefetchNoFault,
            _ => return super::eopnotsupp().to_errno(),
        };
        if flags & !b::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0 {
            return super::eopnotsupp().to_errno();
        }
        let sync = flags & b::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
        let mut list = KVec::new();
        for i in 0..num_sge as usize {
            // SAFETY: the core passes `num_sge` entries it copied from the
            // process (and checked the count of).
            let s = unsafe { *sg_list.add(i) };
            if list.push((s.addr, s.length, s.lkey), GFP_KERNEL).is_err() {
                return ENOMEM.to_errno();
            }
        }
        // SAFETY: a live PD of ours the core holds for the call.
        match T::advise_mr(unsafe { &Pd::<T>::from_core(ibpd) }, advice, sync, &list) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn dereg_mr(ibmr: *mut b::ib_mr, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a live MR of ours, in its destroy.
        if let Err(e) = T::dereg_mr(unsafe { &Mr::<T>::from_core(ibmr) }) {
            return e.to_errno();
        }
        // SAFETY: out of the driver's use; the data is taken once, then
        // the allocation `new_mr` made is freed.
        unsafe {
            drop(Object::<b::ib_mr, T::Mr>::take(ibmr));
            Object::<b::ib_mr, T::Mr>::free(ibmr);
        }
        0
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn alloc_mw(ibmw: *mut b::ib_mw, udata: *mut b::ib_udata) -> c_int {
        // SAFETY: the core passes a zeroed window of our size with
        // `device`, `pd` (a live ferroce PD it holds for the window) and
        // `type` set, and its udata.
        let (pd, ty, mut udata) = unsafe { (Pd::<T>::from_core((*ibmw).pd), (*ibmw).type_, Udata::<T>::from_raw(udata)) };
        let type2 = match ty {
            b::ib_mw_type_IB_MW_TYPE_1 => false,
            b::ib_mw_type_IB_MW_TYPE_2 => true,
            _ => return EINVAL.to_errno(),
        };
        errno(T::alloc_mw(&pd, type2, &mut udata).map(|(mw, key)| {
            // SAFETY: this create call's window, not yet initialised; the
            // core reads its R_Key back.
            unsafe {
                Object::init(ibmw, mw);
                (*ibmw).rkey = key;
            }
        }))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn dealloc_mw(ibmw: *mut b::ib_mw) -> c_int {
        // SAFETY: a live window of ours, in its destroy.
        if let Err(e) = T::dealloc_mw(unsafe { &Mw::<T>::from_core(ibmw) }) {
            return e.to_errno();
        }
        // SAFETY: out of the driver's use: the data is taken once (the
        // core frees the memory).
        drop(unsafe { Object::<b::ib_mw, T::Mw>::take(ibmw) });
        0
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn create_qp(
        ibqp: *mut b::ib_qp,
        init: *mut b::ib_qp_init_attr,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: the core passes a zeroed QP of our size with `device`,
        // `pd` and its CQs and SRQ (live objects it holds) set, a valid init
        // attribute it reads our sizes back from, and the call's udata.
        let (mut init, mut udata) = unsafe { (QpInit::<T>::from_raw(&mut *init, ibqp), Udata::<T>::from_raw(udata)) };
        // SAFETY: this create call's QP, zeroed: its hooks are set up
        // before anything can reach it.
        unsafe { init_hooks::<T>(ibqp) };
        // SAFETY: this create call's QP.
        let r = unsafe { create_counted(ibqp, |qp| T::create_qp(qp, &mut init, &mut udata)) };
        match r {
            Ok(data) => {
                // SAFETY: this create call's QP, not yet initialised; its
                // number is the one the driver set; the core reads
                // `qp_num` back.
                unsafe {
                    Object::init(ibqp, data);
                    (*ibqp).qp_num = Counted::of(ibqp).qpn();
                }
                0
            }
            Err(e) => {
                // SAFETY: the failed create's QP, unreachable: its hooks
                // stop before the core frees it.
                unsafe { shutdown_hooks(ibqp) };
                e.to_errno()
            }
        }
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn modify_qp(
        ibqp: *mut b::ib_qp,
        attr: *mut b::ib_qp_attr,
        attr_mask: c_int,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // SAFETY: a live QP, a valid attribute for the call, its udata.
        let (qp, a, mut udata) = unsafe { (Qp::<T>::from_core(ibqp), &*attr, Udata::from_raw(udata)) };
        errno(T::modify_qp(&qp, &QpAttrIn::new(a, attr_mask as u32), &mut udata))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn query_qp(
        ibqp: *mut b::ib_qp,
        attr: *mut b::ib_qp_attr,
        _mask: c_int,
        init: *mut b::ib_qp_init_attr,
    ) -> c_int {
        // SAFETY: a live QP and the core's output structures.
        let (qp, o, i) = unsafe { (Qp::<T>::from_core(ibqp), &mut *attr, &mut *init) };
        errno(T::query_qp(&qp).map(|q| write_query(&q, o, i)))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn destroy_qp(ibqp: *mut b::ib_qp, _udata: *mut b::ib_udata) -> c_int {
        // SAFETY: a QP whose create succeeded, in its destroy; once the
        // driver made it unreachable, its hooks stop (nothing re-arms
        // them) before the references are waited for.
        errno(unsafe {
            destroy_counted::<_, T::Qp>(ibqp, || {
                T::destroy_qp(&Qp::<T>::from_core(ibqp))?;
                shutdown_hooks(ibqp);
                Ok(())
            })
        })
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn attach_mcast(ibqp: *mut b::ib_qp, gid: *mut b::ib_gid, _lid: u16) -> c_int {
        // SAFETY: a live QP; the GID (16 bytes, valid for any bits) is the
        // core's for the call.
        let (qp, gid) = unsafe { (Qp::<T>::from_core(ibqp), (*gid).raw) };
        errno(T::attach_mcast(&qp, &gid))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn detach_mcast(ibqp: *mut b::ib_qp, gid: *mut b::ib_gid, _lid: u16) -> c_int {
        // SAFETY: as in `attach_mcast`.
        let (qp, gid) = unsafe { (Qp::<T>::from_core(ibqp), (*gid).raw) };
        errno(T::detach_mcast(&qp, &gid))
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn post_send(
        ibqp: *mut b::ib_qp,
        wr: *const b::ib_send_wr,
        bad: *mut *const b::ib_send_wr,
    ) -> c_int {
        // SAFETY: a live QP and the core's valid list of requests.
        let (qp, mut wrs) = unsafe { (Qp::<T>::from_core(ibqp), SendWrs::<T>::from_raw(wr)) };
        let r = T::post_send(&qp, &mut wrs);
        if r.is_err() && !bad.is_null() {
            // SAFETY: the core's output pointer, checked non-null.
            unsafe { *bad = wrs.failed() };
        }
        errno(r)
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
    unsafe extern "C" fn post_recv(
        ibqp: *mut b::ib_qp,
        wr: *const b::ib_recv_wr,
        bad: *mut *const b::ib_recv_wr,
    ) -> c_int {
        // SAFETY: a live QP and the core's valid list of requests.
        let (qp, mut wrs) = unsafe { (Qp::<T>::from_core(ibqp), RecvWrs::from_raw(wr)) };
        let r = T::post_recv(&qp, &mut wrs);
        if r.is_err() && !bad.is_null() {
            // SAFETY: the core's output pointer, checked non-null.
            unsafe { *bad = wrs.failed() };
        }
        errno(r)
    }

    /// # Safety
    /// Only the RDMA core calls it, through the `ib_device_ops` slot
    /// `fill` sets, with the arguments that slot's contract names.
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
pub(super) unsafe fn ah_data<'a, T: Driver>(ibah: *mut b::ib_ah) -> &'a T::Ah {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_ah, T::Ah>::data(ibah) }
}

/// The driver data of a live CQ that a QP's creation names.
///
/// # Safety
/// `ibcq` is a ferroce CQ whose create succeeded and whose destroy has
/// not begun, alive for `'a`.
pub(super) unsafe fn cq_data<'a, T: Driver>(ibcq: *mut b::ib_cq) -> &'a T::Cq {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_cq, T::Cq>::data(ibcq) }
}

/// The driver data of a live SRQ that a QP's creation names.
///
/// # Safety
/// As for [`cq_data`].
pub(super) unsafe fn srq_data<'a, T: Driver>(ibsrq: *mut b::ib_srq) -> &'a T::Srq {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_srq, T::Srq>::data(ibsrq) }
}

/// The driver data of a live MR that a kernel work request names.
///
/// # Safety
/// As for [`cq_data`].
pub(super) unsafe fn mr_data<'a, T: Driver>(ibmr: *mut b::ib_mr) -> &'a T::Mr {
    // SAFETY: guaranteed by the caller.
    unsafe { Object::<b::ib_mr, T::Mr>::data(ibmr) }
}
