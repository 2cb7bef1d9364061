// SPDX-License-Identifier: GPL-2.0

//! Address handles: an entry of the device's AH table (the address vector
//! and the PD), named by its index in UD work requests.

use super::ferroce::Ferroce;
use crate::driver::quota::{self, Charge, Kind};
use crate::rdma::object::Pd;
use crate::rdma::udata::{CreateAhResp, Udata};
use crate::rdma::wr::AhAttr;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{alloc_growing, AhEntry, DevState};
use kernel::prelude::*;

/// An AH's data.
pub(crate) struct AhData {
    /// Its index in the device's AH table.
    pub(crate) index: u32,
    /// Its share of its PD's user's quota (`None`: the kernel's), given
    /// back when the AH's data is dropped.
    _charge: Option<Charge>,
}

/// Makes an AH. Nothing here sleeps: a kernel consumer may call it in
/// atomic context. A process's call is answered with the AH's index.
pub(super) fn create(pd: &Pd<'_, Ferroce>, attr: &AhAttr<'_>, udata: &mut Udata<'_, Ferroce>) -> Result<AhData> {
    let dev = pd.device();
    let av = attr.roce_av()?;
    // A process's AH is charged to the user of its PD; given back
    // (dropped) if anything below fails.
    let account = pd.data().account();
    let charge = quota::charge(account, Kind::Ah)?;
    let entry = AhEntry { av, pd: pd.data().handle };
    let index = if account.is_some() {
        // Only a process's AH grows the table: its call may sleep.
        let (mut st, idx) = alloc_growing(dev, Kind::Ah, |st| st.alloc_ah(true))?;
        place(&mut st.ahs, idx, entry)
    } else {
        let mut st = dev.state.lock();
        let idx = st.alloc_ah(false).ok_or(ENOMEM)?;
        place(&mut st.ahs, idx, entry)
    };
    if let Err(e) = udata.respond(&CreateAhResp { ah_handle: index as u32, reserved: 0 }) {
        clear(&mut dev.state.lock(), index);
        return Err(e);
    }
    Ok(AhData { index: index as u32, _charge: charge })
}

/// Puts `entry` in the free slot `idx`; the index.
fn place(ahs: &mut [Option<AhEntry>], idx: usize, entry: AhEntry) -> usize {
    if let Some(slot) = ahs.get_mut(idx) {
        *slot = Some(entry);
    }
    idx
}

pub(super) fn destroy(dev: &FerroceDevice, ah: AhData) {
    let mut guard = dev.state.lock();
    let st = &mut *guard;
    // What was posted with it before this call is sent with it.
    if let Some(pd) = st.ahs.get(ah.index as usize).and_then(|a| a.as_ref()).map(|a| a.pd) {
        crate::driver::rings::take_posted_ud(dev, st, pd);
    }
    clear(st, ah.index as usize);
}

/// Frees AH slot `index`.
fn clear(st: &mut DevState, index: usize) {
    if let Some(slot) = st.ahs.get_mut(index) {
        *slot = None;
    }
}
