// SPDX-License-Identifier: GPL-2.0

//! Completion queues: an entry of the device's CQ table. A kernel
//! consumer's CQ keeps its completions in the entry and is polled through
//! `poll_cq`; a process's CQ is a ring it maps and polls itself, where the
//! kernel writes completions (`CqEntry::push`).

use super::ferroce::Ferroce;
use super::complete::{self, Notify};
use super::sched;
use crate::driver::quota::{self, Charge, Kind};
use crate::rdma::cq::num_comp_vectors;
use crate::rdma::mmap::{UserRing, CQE_SIZE};
use crate::rdma::object::{Cq, CqRef};
use crate::rdma::udata::{CreateCqResp, ResizeCqResp, Udata};
use crate::rdma::vtable::CqAttr;
use crate::rdma::wr::WcSink;
use crate::rdma::eopnotsupp;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::tables::{alloc_growing, take_unused, CqEntry, MAX_CQE};
use kernel::prelude::*;

/// A CQ's data.
pub(crate) struct CqData {
    /// Its index in the device's CQ table, which QPs name.
    pub(crate) index: u32,
    /// Its share of its user's quota (`None`: the kernel's), given back
    /// when the data is dropped.
    _charge: Option<Charge>,
}

impl CqData {
    fn index(&self) -> usize {
        self.index as usize
    }
}

/// Makes a CQ. A process's call is answered with its ring's place in the
/// context's mmap space.
pub(super) fn create(
    dev: &FerroceDevice,
    cq: CqRef,
    attr: &CqAttr,
    udata: &mut Udata<'_, Ferroce>,
) -> Result<(CqData, u32)> {
    if attr.flags != 0 {
        return Err(eopnotsupp());
    }
    if attr.comp_vector >= num_comp_vectors() || attr.cqe == 0 || attr.cqe > MAX_CQE {
        return Err(EINVAL);
    }
    udata.refuse_driver_input()?;
    // Given back (dropped) if anything below fails.
    let charge = quota::charge(super::ucontext::account_of(udata), Kind::Cq)?;
    let (entry, cqe) = if udata.is_user() {
        let ring = UserRing::new(udata, attr.cqe, CQE_SIZE)?;
        udata.respond(&CreateCqResp { cq: ring.map() })?;
        let n = ring.entries();
        (CqEntry::new_user(cq, ring)?, n)
    } else {
        (CqEntry::new(cq, attr.cqe as usize)?, attr.cqe)
    };
    let user = udata.is_user();
    let (mut st, index) = alloc_growing(dev, Kind::Cq, |st| st.alloc_cq(user))?;
    if let Some(slot) = st.cqs.get_mut(index) {
        *slot = Some(entry);
    }
    Ok((CqData { index: index as u32, _charge: charge }, cqe))
}

/// Takes a CQ out of its table (`EBUSY` while a QP uses it). Its entry,
/// with the table's reference and a process's ring (whose unmapping may
/// sleep), is dropped after the lock.
pub(super) fn destroy(cq: &Cq<'_, Ferroce>) -> Result {
    let dev = cq.device();
    let taken = {
        let mut st = dev.state.lock();
        let index = cq.data().index();
        if st.cqs.get(index).and_then(|c| c.as_deref()).is_some_and(|c| c.users == 0) {
            st.unlink_cq_due(index as u32);
        }
        take_unused(st.cqs.get_mut(index), |c| c.users)?
    };
    drop(taken);
    Ok(())
}

/// Resizes a CQ, keeping its unread completions (`EINVAL` when they do
/// not fit).
pub(super) fn resize(cq: &Cq<'_, Ferroce>, cqe: u32, udata: &mut Udata<'_, Ferroce>) -> Result<u32> {
    if cqe == 0 || cqe > MAX_CQE {
        return Err(EINVAL);
    }
    udata.refuse_driver_input()?;
    let dev = cq.device();
    let index = cq.data().index();
    let n = if udata.is_user() {
        // A process's CQ: a new ring, the unread completions moved into
        // it, the old one unmapped by the provider.
        let ring = UserRing::new(udata, cqe, CQE_SIZE)?;
        let n = ring.entries();
        udata.respond(&ResizeCqResp { cq: ring.map() })?;
        // Whichever ring is left over is dropped (unmapped, which may
        // sleep) after the lock.
        let left = {
            let mut st = dev.state.lock();
            match st.cqs.get_mut(index).and_then(|c| c.as_deref_mut()) {
                None => Err(ring),
                Some(c) => c.replace_user_ring(ring),
            }
        };
        let _old = left.map_err(|_unused| EINVAL)?;
        n
    } else {
        let ring = CqEntry::alloc_ring(cqe as usize)?;
        let old = {
            let mut st = dev.state.lock();
            let c = st.cqs.get_mut(index).and_then(|c| c.as_deref_mut()).ok_or(EINVAL)?;
            c.replace_ring(ring).map_err(|_| EINVAL)?
        };
        drop(old);
        cqe
    };
    // Completions that waited in the QPs for room move now: the consumer
    // may wait for them with no traffic to come.
    doorbell(dev, index);
    Ok(n)
}

/// A kernel consumer's poll. A process polls its ring itself: its call
/// here asks for the completions that waited for room to be moved (none
/// is returned).
pub(super) fn poll(cq: &Cq<'_, Ferroce>, out: &mut WcSink<'_>) {
    let dev = cq.device();
    let index = cq.data().index();
    let mut st = dev.state.lock();
    let Some(c) = st.cqs.get_mut(index).and_then(|c| c.as_deref_mut()) else {
        return;
    };
    if c.user.is_some() {
        c.set_waiting(false);
        drop(st);
        doorbell(dev, index);
        return;
    }
    while out.has_room() {
        let Some(s) = c.pop() else { break };
        out.push(&s.cqe, s.qp, s.ip_version);
    }
}

/// Arms a CQ; whether completions wait already.
pub(super) fn req_notify(cq: &Cq<'_, Ferroce>, solicited: bool, report_missed: bool) -> Result<bool> {
    let dev = cq.device();
    let mut st = dev.state.lock();
    let c = st.cqs.get_mut(cq.data().index()).and_then(|c| c.as_deref_mut()).ok_or(EINVAL)?;
    // Armed for the next completion, it stays so until that one comes,
    // whatever a later request for solicited ones says.
    c.armed = Some(solicited && c.armed != Some(false));
    Ok(report_missed && c.len() > 0)
}

/// Moves the waiting completions of the QPs using CQ `index` into it
/// (after its consumer made room), and lets their send sides go on.
fn doorbell(dev: &FerroceDevice, index: usize) {
    let mut notify = Notify::new();
    let mut kicks = KVVec::new();
    {
        let mut st = dev.state.lock();
        // Only the QP sides whose completions waited for room, from the
        // CQ's list (no scan of the QP table); one that finds the CQ full
        // again goes back into a new list.
        let mut cur = st.cqs.get_mut(index).and_then(|c| c.as_deref_mut()).and_then(|c| c.waiters.take());
        let mut visits = st.qps.len().saturating_mul(2);
        while let Some(w) = cur {
            if visits == 0 {
                break;
            }
            visits -= 1;
            let Some(e) = st.qp(w.qpn) else { break };
            let side = usize::from(w.side);
            cur = e.cq_next.get_mut(side).and_then(Option::take);
            if let Some(f) = e.cq_waiting.get_mut(side) {
                *f = false;
            }
            complete::drain(dev, &mut st, w.qpn, 0, &mut notify);
            if kicks.last() != Some(&w.qpn) {
                let _ = kicks.push(w.qpn, GFP_ATOMIC);
            }
        }
    }
    notify.run(dev);
    for qpn in kicks.iter() {
        sched::kick(dev, *qpn, sched::KICK_BUDGET_TASK);
    }
}
