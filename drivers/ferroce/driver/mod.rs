// SPDX-License-Identifier: GPL-2.0

//! ferroce's verbs in safe Rust, on the layer's [`Driver`] trait: one file
//! per object, as rdma_rxe's `rxe_*.c`. The objects not moved here yet are
//! `objects.rs`'s.

#![deny(unsafe_code)]

mod ah;
pub(crate) mod pd;
pub(crate) mod ucontext;

use crate::rdma::object::Pd;
use crate::rdma::udata::Udata;
use crate::rdma::vtable::Driver;
use crate::rdma::wr::AhAttr;
use crate::rdma::FerroceDevice;
use kernel::prelude::*;

/// ferroce, the [`Driver`].
pub(crate) struct Ferroce;

#[vtable]
impl Driver for Ferroce {
    type Ucontext = ucontext::UcontextData;
    type Pd = pd::PdData;
    type Ah = ah::AhData;

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
}
