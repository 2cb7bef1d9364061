// SPDX-License-Identifier: GPL-2.0

//! User contexts: one per opened device file, each charged to its user's
//! quota account (shared by all the contexts of one user on the device).

use super::ferroce::Ferroce;
use crate::driver::device;
use crate::driver::quota::{Account, Accounts};
use crate::rdma::udata::{AllocUcontextResp, Udata};
use crate::driver::ferroce::FerroceDevice;
use kernel::prelude::*;
use kernel::sync::Arc;

/// A context's data.
pub(crate) struct UcontextData {
    /// The user the context's objects are charged to (`quota`): one user
    /// cannot take a whole table from the others, however many device
    /// files it opens.
    pub(crate) account: Arc<Account>,
}

/// Makes a context: answers the ABI version (as much of it as the provider
/// made room for) and opens its user's account.
pub(super) fn alloc(dev: &FerroceDevice, udata: &mut Udata<'_, Ferroce>) -> Result<UcontextData> {
    udata.respond(&AllocUcontextResp { abi_version: device::ABI_VERSION, reserved: 0 })?;
    // Allocated before the device lock is taken.
    let fresh = Accounts::prepare()?;
    let account = dev.state.lock().accounts.open(fresh)?;
    Ok(UcontextData { account })
}

pub(super) fn dealloc(dev: &FerroceDevice, ctx: UcontextData) {
    dev.state.lock().accounts.close(&ctx.account);
}

/// The quota account of a process's call (`None`: a kernel consumer's).
pub(super) fn account_of<'a>(udata: &Udata<'a, Ferroce>) -> Option<&'a Arc<Account>> {
    udata.context().map(|c| &c.account)
}
