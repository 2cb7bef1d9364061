// SPDX-License-Identifier: GPL-2.0

//! ferroce, the layer's [`Driver`](crate::rdma::vtable::Driver) (its
//! callbacks are in `driver/mod.rs`), and its device.

/// ferroce, the [`Driver`](crate::rdma::vtable::Driver).
pub(crate) struct Ferroce;

/// A ferroce device.
pub(crate) type FerroceDevice = crate::rdma::Device<Ferroce>;
