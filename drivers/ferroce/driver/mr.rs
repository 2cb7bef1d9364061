// SPDX-License-Identifier: GPL-2.0

//! Memory regions: an entry of the device's region table (what the
//! transport engine checks keys, bounds and access against), named by its
//! key (`index << 8 | key byte`). A process's region pins its pages; a
//! kernel consumer has the DMA region (all memory) and fast-registration
//! regions whose page list a REG_MR work request installs.

use super::ferroce::Ferroce;
use crate::driver::quota::{self, Charge, Kind, OdpCharge};
use crate::rdma::mr::{KernelMem, Odp, PageStage, Umem, UserMem, ACCESS_ON_DEMAND, ACCESS_OPTIONAL};
use crate::rdma::object::{Mr, Mw, Pd};
use crate::rdma::udata::Udata;
use crate::rdma::eopnotsupp;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{alloc_growing, unbind_from, FastMr, MrEntry, MrKind, WindowEntry, MAX_FAST_PAGES, PAGE_SIZE};
use crate::transport::verbs::access;
use kernel::prelude::*;

/// An MR's data. A process's pinned memory is in its table entry, which
/// `dereg` takes out and drops (unpinning it) after the lock.
pub(crate) struct MrData {
    /// Its index in the device's region table (the key's upper 24 bits,
    /// which the consumer's key byte of a fast region does not change).
    pub(crate) index: u32,
    /// A fast region's page list as `ib_map_mr_sg` stages it (`max_num_sg`
    /// entries); `None` for the others.
    pub(crate) stage: Option<PageStage>,
    /// Its share of its PD's user's quota (`None`: a kernel region).
    _charge: Option<Charge>,
    /// A region on demand's pages, charged to the same user.
    _odp: Option<OdpCharge>,
}

/// Access bits ferroce implements; anything else outside the optional
/// range is refused.
const MR_ACCESS: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::FLUSH_GLOBAL;

/// The access bits of a registration: `EOPNOTSUPP` for a capability
/// ferroce lacks (optional bits are ignored), `EINVAL` for remote write or
/// atomic access without local write (IBTA). On demand is how a process's
/// region is registered, not a right of it: not in the result.
pub(crate) fn check_access(a: u32) -> Result<u32> {
    if a & !(MR_ACCESS | ACCESS_OPTIONAL | ACCESS_ON_DEMAND) != 0 {
        return Err(eopnotsupp());
    }
    let a = a & MR_ACCESS;
    if a & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0 && a & access::LOCAL_WRITE == 0 {
        return Err(EINVAL);
    }
    Ok(a)
}

/// Enters `entry` into the device's region table; its key. A full table
/// gives the entry back, dropped (a process's pages unpinned, which may
/// sleep) after the lock.
fn install(dev: &FerroceDevice, entry: MrEntry) -> Result<u32> {
    // A full table hands the entry back for the second try; if that fails
    // too, it is dropped here, after `alloc_growing` released the lock.
    let mut entry = Some(entry);
    let (_st, key) = alloc_growing(dev, Kind::Mr, |st| match st.insert_mr(entry.take()?) {
        Ok(key) => Some(key),
        Err(back) => {
            entry = Some(back);
            None
        }
    })?;
    Ok(key)
}

pub(super) fn reg_user(
    pd: &Pd<'_, Ferroce>,
    start: u64,
    length: u64,
    iova: u64,
    acc: u32,
    udata: &mut Udata<'_, Ferroce>,
) -> Result<(MrData, u32)> {
    udata.refuse_driver_data()?;
    let granted = check_access(acc)?;
    // Implicit on demand (the whole address space) is not offered:
    // odp_caps does not announce it.
    if acc & ACCESS_ON_DEMAND != 0 && start == 0 && length == u64::MAX {
        return Err(eopnotsupp());
    }
    // Longer than the device's max_mr_size: refused as query_device says.
    if length == 0
        || length > super::device::MAX_MR_SIZE
        || iova.checked_add(length).is_none()
        || start.checked_add(length).is_none()
    {
        return Err(EINVAL);
    }
    let dev = pd.device();
    // Given back (dropped) if anything below fails.
    let charge = quota::charge(pd.data().account(), Kind::Mr)?;
    let mut odp_charge = None;
    let (pages, offset) = if acc & ACCESS_ON_DEMAND != 0 {
        // The pages' tables before the core allocates its own.
        let npages = usize::try_from((start % PAGE_SIZE as u64 + length).div_ceil(PAGE_SIZE as u64)).map_err(|_| EINVAL)?;
        if let Some(a) = pd.data().account() {
            odp_charge = Some(OdpCharge::take(a, npages, crate::rdma::sys::totalram_pages())?);
        }
        let odp = Odp::get(dev, start, length, acc)?;
        let offset = odp.offset();
        (UserMem::Odp(odp), offset)
    } else {
        let offset = (start % PAGE_SIZE as u64) as usize;
        let npages = usize::try_from((offset as u64 + length).div_ceil(PAGE_SIZE as u64)).map_err(|_| EINVAL)?;
        // Unpinned (dropped) if anything below fails.
        (UserMem::Pinned(Umem::get(dev, start, length, acc, npages)?), offset)
    };
    let entry = MrEntry {
        pd: pd.data().handle,
        access: granted,
        iova,
        length,
        key: 0,
        kind: MrKind::User { pages, offset },
        windows: 0,
    };
    let key = install(dev, entry)?;
    Ok((MrData { index: key >> 8, stage: None, _charge: charge, _odp: odp_charge }, key))
}

pub(super) fn get_dma(pd: &Pd<'_, Ferroce>, acc: u32, mem: KernelMem) -> Result<(MrData, u32)> {
    let granted = check_access(acc)?;
    let entry =
        MrEntry { pd: pd.data().handle, access: granted, iova: 0, length: u64::MAX, key: 0, kind: MrKind::Dma(mem), windows: 0 };
    let key = install(pd.device(), entry)?;
    Ok((MrData { index: key >> 8, stage: None, _charge: None, _odp: None }, key))
}

/// A zeroed page list of `n` entries.
fn page_list(n: usize) -> Result<KVec<u64>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        v.push(0u64, GFP_KERNEL_ACCOUNT)?;
    }
    Ok(v)
}

pub(super) fn alloc(pd: &Pd<'_, Ferroce>, max_num_sg: u32, mem: KernelMem) -> Result<(MrData, u32)> {
    if max_num_sg == 0 || max_num_sg > MAX_FAST_PAGES {
        return Err(EINVAL);
    }
    let n = max_num_sg as usize;
    let stage = PageStage::new(n)?;
    let fast = FastMr { mem, pages: page_list(n)?, npages: 0, page_size: PAGE_SIZE as u64, first_off: 0, valid: false };
    let entry =
        MrEntry { pd: pd.data().handle, access: 0, iova: 0, length: 0, key: 0, kind: MrKind::Fast(fast), windows: 0 };
    let key = install(pd.device(), entry)?;
    Ok((MrData { index: key >> 8, stage: Some(stage), _charge: None, _odp: None }, key))
}

/// `ib_map_mr_sg`: the staged pages become the fast region's page list.
/// ferroce's DMA addresses are kernel virtual addresses (no dma_device:
/// the core's virtual DMA), so each page is `page_size` contiguous kernel
/// bytes. The list takes effect for the next REG_MR.
pub(super) fn map_sg(mr: &Mr<'_, Ferroce>, page_size: u64, iova: u64) -> Result {
    let data = mr.data();
    let stage = data.stage.as_ref().ok_or(EINVAL)?;
    let dev = mr.device();
    let mut st = dev.state.lock();
    let Some(MrEntry { kind: MrKind::Fast(f), .. }) = st.mrs.get_mut(data.index as usize).and_then(|m| m.as_mut()) else {
        return Err(EINVAL);
    };
    let used = stage.len().min(f.pages.len());
    for (d, s) in f.pages.iter_mut().zip(stage.staged()).take(used) {
        *d = s;
    }
    f.npages = used;
    f.page_size = page_size;
    f.first_off = if used == 0 { 0 } else { iova & (page_size - 1) };
    Ok(())
}

/// Takes a region out of the table: no packet touches its pages after
/// this; the layer unpins them when it drops the data. `EBUSY` while a
/// memory window is bound to it (`ibv_dereg_mr`).
pub(super) fn dereg(mr: &Mr<'_, Ferroce>) -> Result {
    let entry = {
        let mut st = mr.device().state.lock();
        let idx = mr.data().index as usize;
        if st.mrs.get(idx).and_then(|m| m.as_ref()).is_some_and(|m| m.windows > 0) {
            return Err(EBUSY);
        }
        st.remove_mr_at(mr.data().index)
    };
    drop(entry);
    Ok(())
}

/// A memory window's data: its index in the region table (a window's
/// R_Key changes with each bind; its index does not).
pub(crate) struct MwData {
    index: u32,
    /// Its share of its PD's user's quota of regions (whose table it
    /// shares).
    _charge: Option<Charge>,
}

/// `alloc_mw`: a window of type 1 or 2B, unbound, its first R_Key.
pub(super) fn alloc_mw(pd: &Pd<'_, Ferroce>, type2: bool, udata: &mut Udata<'_, Ferroce>) -> Result<(MwData, u32)> {
    udata.refuse_driver_data()?;
    let charge = quota::charge(pd.data().account(), Kind::Mr)?;
    let entry = MrEntry {
        pd: pd.data().handle,
        access: 0,
        iova: 0,
        length: 0,
        key: 0,
        kind: MrKind::Window(WindowEntry { type2, binding: None }),
        windows: 0,
    };
    let key = install(pd.device(), entry)?;
    Ok((MwData { index: key >> 8, _charge: charge }, key))
}

/// `dealloc_mw`: the window leaves the table; its region, if it was bound,
/// lets it go.
pub(super) fn dealloc_mw(mw: &Mw<'_, Ferroce>) -> Result {
    let mut st = mw.device().state.lock();
    if let Some(MrEntry { kind: MrKind::Window(w), .. }) = st.remove_mr_at(mw.data().index) {
        if let Some(b) = w.binding {
            unbind_from(&mut st.mrs, b.mr_key);
        }
    }
    Ok(())
}
