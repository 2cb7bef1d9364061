// SPDX-License-Identifier: GPL-2.0

//! ferroce: a software RDMA device speaking RoCEv2 (IBTA transport over
//! UDP/IP), driven by unmodified verbs software through its rdma-core
//! provider.
//!
//! Layout:
//! - [`rdma`]: the layer between ferroce and the kernel: the only module
//!   that names C declarations ([`rdma::bindings`]). It is generic over the
//!   [`rdma::vtable::Driver`] trait and never imports the driver: the
//!   device structure and its registration, the verbs callbacks, counted
//!   objects, socket buffers and the UDP tunnel sockets, user rings, pinned
//!   memory, the device lock ([`rdma::sync`]);
//! - [`driver`]: ferroce as a `Driver`, in safe Rust: the verbs one file per
//!   object, the data path as stages (`sched`, `tx`, `rx`, `complete`), the
//!   device's tables (`tables`), what each user may hold of them (`quota`),
//!   the rings a process shares with the kernel (`rings`) and what the
//!   device answers (`device`);
//! - [`transport`]: the sans-IO IBTA transport engine, shared verbatim with
//!   the host crate in `transport/` where it is tested and simulated.
//!
//! Every module but `rdma` is safe Rust.

use kernel::prelude::*;

mod driver;
mod rdma;
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
        let registration = rdma::Registration::new::<driver::Ferroce>()?;
        pr_info!(
            "loaded: `rdma link add NAME type ferroce netdev DEV` creates a device (uverbs ABI {})\n",
            rdma::ABI_VERSION
        );
        Ok(Self {
            _registration: registration,
        })
    }
}
