// SPDX-License-Identifier: GPL-2.0

//! Protection domains.

use super::ucontext::account_of;
use super::ferroce::Ferroce;
use crate::driver::quota::{self, Account, Charge, Kind};
use crate::rdma::udata::Udata;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{alloc_growing, PdOwner};
use kernel::prelude::*;
use kernel::sync::Arc;

/// A PD's data.
pub(crate) struct PdData {
    /// Its slot in the device's PD table: the identity its MRs, QPs and AHs
    /// carry, unique among live PDs however many came and went (a wrapping
    /// counter would, after 2^32 allocations, hand a process the handle of
    /// the kernel's PD and with it its DMA region).
    pub(crate) handle: u32,
    /// Its share of its user's quota (`None`: the kernel's).
    charge: Option<Charge>,
}

impl PdData {
    /// The account the PD's objects are charged to (`None`: a kernel PD).
    pub(crate) fn account(&self) -> Option<&Arc<Account>> {
        self.charge.as_ref().map(Charge::account)
    }
}

pub(super) fn alloc(dev: &FerroceDevice, udata: &mut Udata<'_, Ferroce>) -> Result<PdData> {
    udata.refuse_driver_data()?;
    let owner = if udata.is_user() { PdOwner::User } else { PdOwner::Kernel };
    // Given back (dropped) if the table is full.
    let charge = quota::charge(account_of(udata), Kind::Pd)?;
    let (_st, handle) = alloc_growing(dev, Kind::Pd, |st| st.alloc_pd(owner))?;
    Ok(PdData { handle, charge })
}

pub(super) fn dealloc(dev: &FerroceDevice, pd: PdData) {
    // Nothing names the handle any more: the core deallocates a PD only
    // after every object in it is gone. The charge goes back with `pd`.
    dev.state.lock().free_pd(pd.handle);
}
