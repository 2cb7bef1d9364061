// SPDX-License-Identifier: GPL-2.0

//! ferroce: a software RDMA device speaking RoCEv2 (IBTA transport over
//! UDP/IP), driven by unmodified verbs software through its rdma-core
//! provider.
//!
//! Layout:
//! - [`rdma`]: the boundary with the kernel's RDMA core: module
//!   registrations, the device structure, device and port queries, link
//!   add/delete; [`rdma::bindings`] (the bindgen-generated C declarations)
//!   and [`rdma::sync`] (the device lock, a `kernel::sync::lock::Backend`);
//! - [`driver`]: the verbs, one file per object, on the layer's `Driver`
//!   trait (safe Rust);
//! - [`net`]: per-namespace UDP tunnel sockets, encapsulation, receive;
//! - [`rings`]: the SQ/RQ rings a process shares with the kernel (copied
//!   once, validated, doorbell flag);
//! - [`state`]: the device's tables and the engine's view of memory;
//! - [`quota`]: what each user may hold of those tables;
//! - [`device`]: what a ferroce device is and answers, in safe Rust;
//! - [`transport`]: the sans-IO IBTA transport engine, shared verbatim with
//!   the host crate in `transport/` where it is tested and simulated.
//!
//! `unsafe` code lives in the modules that face C (`rdma`, and `net` until
//! it moves there), each block with its proof; `driver`, `state`, `rings`,
//! `quota`, `device` and the engine have none.

use kernel::prelude::*;

mod device;
mod driver;
mod net;
mod quota;
mod rdma;
mod rings;
mod state;
#[allow(dead_code, unused_imports, unreachable_pub, missing_docs, clippy::all)]
mod transport;

module! {
    type: Ferroce,
    name: "ferroce",
    authors: ["ferroce developers"],
    description: "Software RDMA over Converged Ethernet (RoCEv2) device",
    license: "GPL",
    alias: ["rdma-link-ferroce"],
}

struct Ferroce {
    _registration: rdma::Registration,
}

impl kernel::Module for Ferroce {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let registration = rdma::Registration::new()?;
        pr_info!(
            "loaded: `rdma link add NAME type ferroce netdev DEV` creates a device (uverbs ABI {})\n",
            device::ABI_VERSION
        );
        Ok(Self {
            _registration: registration,
        })
    }
}
