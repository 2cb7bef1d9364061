// SPDX-License-Identifier: GPL-2.0

//! ferroce's verbs in safe Rust, on the layer's [`Driver`] trait: one file
//! per object, as rdma_rxe's `rxe_*.c`. The objects not moved here yet (QP,
//! MR) are `objects.rs`'s.

#![deny(unsafe_code)]

mod ah;
pub(crate) mod cq;
pub(crate) mod pd;
pub(crate) mod srq;
pub(crate) mod ucontext;

use crate::rdma::object::{Cq, CqRef, Pd, Srq, SrqRef};
use crate::rdma::udata::Udata;
use crate::rdma::vtable::{CqAttr, Driver, SrqAttr};
use crate::rdma::wr::{AhAttr, RecvWrs, WcSink};
use crate::rdma::FerroceDevice;
use kernel::prelude::*;

/// ferroce, the [`Driver`].
pub(crate) struct Ferroce;

#[vtable]
impl Driver for Ferroce {
    type Ucontext = ucontext::UcontextData;
    type Pd = pd::PdData;
    type Ah = ah::AhData;
    type Cq = cq::CqData;
    type Srq = srq::SrqData;

    fn alloc_ucontext(dev: &FerroceDevice, udata: &mut Udata<'_, Self>) -> Result<ucontext::UcontextData> {
        ucontext::alloc(dev, udata)
    }

    fn dealloc_ucontext(dev: &FerroceDevice, ctx: ucontext::UcontextData) {
        ucontext::dealloc(dev, ctx)
    }

    fn alloc_pd(dev: &FerroceDevice, udata: &mut Udata<'_, Self>) -> Result<pd::PdData> {
        pd::alloc(dev, udata)
    }

    fn dealloc_pd(dev: &FerroceDevice, pd: pd::PdData) {
        pd::dealloc(dev, pd)
    }

    fn create_ah(pd: &Pd<'_, Self>, attr: &AhAttr<'_>, udata: &mut Udata<'_, Self>) -> Result<ah::AhData> {
        ah::create(pd, attr, udata)
    }

    fn destroy_ah(dev: &FerroceDevice, ah: ah::AhData) {
        ah::destroy(dev, ah)
    }

    fn create_cq(
        dev: &FerroceDevice,
        cq: CqRef,
        attr: &CqAttr,
        udata: &mut Udata<'_, Self>,
    ) -> Result<(cq::CqData, u32)> {
        cq::create(dev, cq, attr, udata)
    }

    fn destroy_cq(cq: &Cq<'_, Self>) -> Result {
        cq::destroy(cq)
    }

    fn resize_cq(cq: &Cq<'_, Self>, cqe: u32, udata: &mut Udata<'_, Self>) -> Result<u32> {
        cq::resize(cq, cqe, udata)
    }

    fn poll_cq(cq: &Cq<'_, Self>, out: &mut WcSink<'_>) {
        cq::poll(cq, out)
    }

    fn req_notify_cq(cq: &Cq<'_, Self>, solicited: bool, report_missed: bool) -> Result<bool> {
        cq::req_notify(cq, solicited, report_missed)
    }

    fn create_srq(
        dev: &FerroceDevice,
        srq: SrqRef,
        attr: &mut SrqAttr,
        udata: &mut Udata<'_, Self>,
    ) -> Result<srq::SrqData> {
        srq::create(dev, srq, attr, udata)
    }

    fn modify_srq(
        srq: &Srq<'_, Self>,
        attr: &SrqAttr,
        resize: bool,
        limit: bool,
        udata: &mut Udata<'_, Self>,
    ) -> Result {
        srq::modify(srq, attr, resize, limit, udata)
    }

    fn query_srq(srq: &Srq<'_, Self>) -> Result<SrqAttr> {
        srq::query(srq)
    }

    fn destroy_srq(srq: &Srq<'_, Self>) -> Result {
        srq::destroy(srq)
    }

    fn post_srq_recv(srq: &Srq<'_, Self>, wrs: &mut RecvWrs<'_>) -> Result {
        srq::post_recv(srq, wrs)
    }
}
