// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: an entry of the device's SRQ table, a FIFO of
//! receive WQEs that the QPs attached to it take from when a message
//! arrives. A process's SRQ is a ring it maps and posts to itself.

use super::ferroce::Ferroce;
use crate::driver::quota::{self, Charge, Kind};
use crate::rdma::mmap::{UserRing, RQ_WQE_SIZE};
use crate::rdma::object::{Srq, SrqRef};
use crate::rdma::udata::{CreateSrqResp, ModifySrqCmd, Udata};
use crate::rdma::vtable::SrqAttr;
use crate::rdma::wr::RecvWrs;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{alloc_growing, take_unused, SrqEntry, MAX_QP_WR};
use crate::transport::verbs::{RecvWqe, MAX_SGE};
use kernel::prelude::*;

/// An SRQ's data.
pub(crate) struct SrqData {
    /// Its index in the device's SRQ table, which QPs name.
    pub(crate) index: u32,
    /// Its share of its user's quota (`None`: the kernel's), given back
    /// when the data is dropped.
    _charge: Option<Charge>,
}

impl SrqData {
    fn index(&self) -> usize {
        self.index as usize
    }
}

/// Makes an SRQ; a process's call is answered with its ring's place, and
/// its size (a power of two) is written back into `attr`.
pub(super) fn create(
    dev: &FerroceDevice,
    srq: SrqRef,
    attr: &mut SrqAttr,
    udata: &mut Udata<'_, Ferroce>,
) -> Result<SrqData> {
    udata.refuse_driver_input()?;
    if attr.max_wr == 0 || attr.max_wr > MAX_QP_WR || attr.max_sge as usize > MAX_SGE || attr.srq_limit > attr.max_wr {
        return Err(EINVAL);
    }
    // Given back (dropped) if anything below fails.
    let charge = quota::charge(super::ucontext::account_of(udata), Kind::Srq)?;
    let entry = if udata.is_user() {
        let ring = UserRing::new(udata, attr.max_wr, RQ_WQE_SIZE)?;
        udata.respond(&CreateSrqResp { srq: ring.map() })?;
        attr.max_wr = ring.entries();
        SrqEntry::new_user(srq, ring, attr.max_sge, attr.srq_limit)?
    } else {
        SrqEntry::new(srq, attr.max_wr as usize, attr.max_sge, attr.srq_limit)?
    };
    let user = udata.is_user();
    let (mut st, index) = alloc_growing(dev, Kind::Srq, |st| st.alloc_srq(user))?;
    if let Some(slot) = st.srqs.get_mut(index) {
        *slot = Some(entry);
    }
    Ok(SrqData { index: index as u32, _charge: charge })
}

/// Resizes the SRQ (`resize`: to at least `attr.max_wr`, keeping the
/// receive WQEs posted and not yet taken, in order; fewer entries than
/// those is `EINVAL`) and/or arms the limit event.
pub(super) fn modify(
    srq: &Srq<'_, Ferroce>,
    attr: &SrqAttr,
    resize: bool,
    limit: bool,
    udata: &mut Udata<'_, Ferroce>,
) -> Result {
    let cmd = udata.request::<ModifySrqCmd>()?;
    let dev = srq.device();
    let index = srq.data().index();
    if resize {
        if attr.max_wr == 0 || attr.max_wr > MAX_QP_WR {
            return Err(EINVAL);
        }
        if udata.is_user() {
            // A process's SRQ: a new ring, the pending WQEs moved into it,
            // its place written where the provider said (the command has
            // no response); the old ring is unmapped after the lock.
            let cmd = cmd.ok_or(EINVAL)?;
            let ring = UserRing::new(udata, attr.max_wr, RQ_WQE_SIZE)?;
            udata.write_user(cmd.ring_map_addr, &ring.map())?;
            let old = {
                let mut st = dev.state.lock();
                let s = st.srqs.get_mut(index).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
                if limit && attr.srq_limit > ring.entries() {
                    return Err(EINVAL);
                }
                s.replace_user_ring(ring).map_err(|_unused| EINVAL)?
            };
            drop(old);
        } else {
            let ring = SrqEntry::alloc_ring(attr.max_wr as usize)?;
            let old = {
                let mut st = dev.state.lock();
                let s = st.srqs.get_mut(index).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
                if limit && attr.srq_limit > attr.max_wr {
                    return Err(EINVAL);
                }
                s.replace_ring(ring).map_err(|_unused| EINVAL)?
            };
            drop(old);
        }
    }
    let mut st = dev.state.lock();
    let s = st.srqs.get_mut(index).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
    if limit {
        if attr.srq_limit as usize > s.max_wr() {
            return Err(EINVAL);
        }
        s.limit = attr.srq_limit;
    }
    Ok(())
}

pub(super) fn query(srq: &Srq<'_, Ferroce>) -> Result<SrqAttr> {
    let dev = srq.device();
    let st = dev.state.lock();
    let s = st.srqs.get(srq.data().index()).and_then(|x| x.as_deref()).ok_or(EINVAL)?;
    Ok(SrqAttr { max_wr: s.max_wr() as u32, max_sge: s.max_sge, srq_limit: s.limit })
}

/// Takes an SRQ out of its table (`EBUSY` while a QP uses it); its entry
/// is dropped after the lock.
pub(super) fn destroy(srq: &Srq<'_, Ferroce>) -> Result {
    let dev = srq.device();
    let taken = take_unused(dev.state.lock().srqs.get_mut(srq.data().index()), |x| x.users)?;
    drop(taken);
    Ok(())
}

/// A kernel consumer's receive requests (a process posts through its ring:
/// `EINVAL`).
pub(super) fn post_recv(srq: &Srq<'_, Ferroce>, wrs: &mut RecvWrs<'_>) -> Result {
    let dev = srq.device();
    let mut st = dev.state.lock();
    let s = st.srqs.get_mut(srq.data().index()).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
    if s.user.is_some() {
        return Err(EINVAL);
    }
    wrs.each(|w| {
        let (sg_list, num_sge) = w.sges(s.max_sge)?;
        if s.push(RecvWqe { wr_id: w.wr_id(), sg_list, num_sge }) {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    })
}
