// SPDX-License-Identifier: GPL-2.0

//! ferroce's verbs in safe Rust, on the layer's [`Driver`] trait: one file
//! per object, as rdma_rxe's `rxe_*.c`.

#![deny(unsafe_code)]

mod ah;
mod complete;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod ferroce;
mod mcast;
mod odp;
pub(crate) mod mr;
pub(crate) mod pd;
pub(crate) mod qp;
pub(crate) mod quota;
pub(crate) mod ring;
pub(crate) mod rings;
mod rx;
mod sched;
pub(crate) mod srq;
pub(crate) mod tables;
mod tx;
pub(crate) mod window;
pub(crate) mod ucontext;

use crate::rdma::mr::{KernelMem, PageStage};
use crate::rdma::object::{Cq, CqRef, Mr, Mw, Pd, Srq, SrqRef};
use crate::rdma::qp::{Qp, QpAttrIn, QpInit, QpQuery, QpRef, SendWrs};
use crate::rdma::udata::Udata;
use crate::rdma::vtable::{Advice, CqAttr, Driver, SrqAttr};
use crate::rdma::wr::{AhAttr, RecvWrs, WcSink};
use crate::rdma::{DeviceAttrs, NetDev, PortAttrs};
use tables::DevState;
use kernel::prelude::*;

pub(crate) use ferroce::{Ferroce, FerroceDevice};

#[vtable]
impl Driver for Ferroce {
    type State = DevState;
    type Ucontext = ucontext::UcontextData;
    type Pd = pd::PdData;
    type Ah = ah::AhData;
    type Cq = cq::CqData;
    type Srq = srq::SrqData;
    type Mr = mr::MrData;
    type Mw = mr::MwData;
    type Qp = qp::QpData;

    const MAX_MR_PAGE_SIZE: u64 = crate::driver::tables::MAX_FAST_PAGE_SIZE;

    fn check_newlink(name: &CStr, ndev: &NetDev) -> Result {
        crate::driver::device::check_newlink(name, ndev)
    }

    fn new_state() -> Result<DevState> {
        DevState::new()
    }

    fn device_attrs(dev: &FerroceDevice) -> DeviceAttrs {
        crate::driver::device::device_attrs(dev.node_guid())
    }

    fn port_attrs(ndev: &NetDev) -> PortAttrs {
        crate::driver::device::port_attrs(ndev)
    }

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

    fn reg_user_mr(
        pd: &Pd<'_, Self>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        udata: &mut Udata<'_, Self>,
    ) -> Result<(mr::MrData, u32)> {
        mr::reg_user(pd, start, length, iova, access, udata)
    }

    fn get_dma_mr(pd: &Pd<'_, Self>, access: u32, mem: KernelMem) -> Result<(mr::MrData, u32)> {
        mr::get_dma(pd, access, mem)
    }

    fn alloc_mr(pd: &Pd<'_, Self>, max_num_sg: u32, mem: KernelMem) -> Result<(mr::MrData, u32)> {
        mr::alloc(pd, max_num_sg, mem)
    }

    fn page_stage(mr: &mr::MrData) -> Option<&PageStage> {
        mr.stage.as_ref()
    }

    fn map_mr_sg(mr: &Mr<'_, Self>, page_size: u64, iova: u64) -> Result {
        mr::map_sg(mr, page_size, iova)
    }

    fn dereg_mr(mr: &Mr<'_, Self>) -> Result {
        mr::dereg(mr)
    }

    fn alloc_mw(pd: &Pd<'_, Self>, type2: bool, udata: &mut Udata<'_, Self>) -> Result<(mr::MwData, u32)> {
        mr::alloc_mw(pd, type2, udata)
    }

    fn dealloc_mw(mw: &Mw<'_, Self>) -> Result {
        mr::dealloc_mw(mw)
    }

    fn create_qp(qp: QpRef, init: &mut QpInit<'_, Self>, udata: &mut Udata<'_, Self>) -> Result<qp::QpData> {
        qp::create(qp, init, udata)
    }

    fn modify_qp(qp: &Qp<'_, Self>, attr: &QpAttrIn<'_>, udata: &mut Udata<'_, Self>) -> Result {
        qp::modify(qp, attr, udata)
    }

    fn query_qp(qp: &Qp<'_, Self>) -> Result<QpQuery> {
        qp::query(qp)
    }

    fn destroy_qp(qp: &Qp<'_, Self>) -> Result {
        qp::destroy(qp)
    }

    fn post_send(qp: &Qp<'_, Self>, wrs: &mut SendWrs<'_, Self>) -> Result {
        qp::post_send(qp, wrs)
    }

    fn post_recv(qp: &Qp<'_, Self>, wrs: &mut RecvWrs<'_>) -> Result {
        qp::post_recv(qp, wrs)
    }

    fn attach_mcast(qp: &Qp<'_, Self>, gid: &[u8; 16]) -> Result {
        mcast::attach(qp, gid)
    }

    fn detach_mcast(qp: &Qp<'_, Self>, gid: &[u8; 16]) -> Result {
        mcast::detach(qp, gid)
    }

    fn qp_timer(dev: &FerroceDevice, qpn: u32) {
        sched::qp_timer(dev, qpn)
    }

    fn qp_work(dev: &FerroceDevice, qpn: u32, prio: crate::rdma::qp::WorkPrio) {
        sched::qp_work(dev, qpn, prio)
    }

    fn receive(dev: &FerroceDevice, packet: &[u8]) {
        sched::receive_datagram(dev, packet)
    }

    fn device_work(dev: &FerroceDevice) {
        sched::device_work(dev)
    }

    fn fault_work(dev: &FerroceDevice) {
        odp::fault_work(dev)
    }

    fn linger_work(dev: &FerroceDevice) {
        sched::linger_work(dev)
    }

    fn burst_work(dev: &FerroceDevice) {
        sched::burst_work(dev)
    }

    fn advise_mr(pd: &Pd<'_, Self>, advice: Advice, sync: bool, sges: &[(u64, u32, u32)]) -> Result {
        odp::advise_mr(pd, advice, sync, sges)
    }
}
