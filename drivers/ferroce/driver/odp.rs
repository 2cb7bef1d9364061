// SPDX-License-Identifier: GPL-2.0

//! Memory on demand (`IBV_ACCESS_ON_DEMAND`): the device's fault work and
//! `ibv_advise_mr`.
//!
//! The datapath runs under the device lock (softirq, or a sender's
//! context) and never faults: an access that finds a page absent touches
//! nothing and returns `MemError::Fault`; the engine then waits (a
//! requester: `fault_wait`), answers RNR NAK (a responder), or drops the
//! response and asks again (a completer). The glue enters the QP with the
//! range in the device's list (`DevState::want_fault`) and queues the
//! fault work, which faults the range in with the lock dropped, in process
//! context, then lets the QP go on and kicks it.

use super::ferroce::{Ferroce, FerroceDevice};
use super::sched::{kick, KICK_BUDGET_TASK};
use super::tables::{DevState, FaultAt, QpEntry};
use crate::rdma::object::Pd;
use crate::rdma::vtable::Advice;
use crate::rdma::Counter;
use kernel::prelude::*;

/// Faults one run of the work item does before it queues itself again,
/// so that one device's faults do not hold a worker.
const FAULTS_PER_RUN: usize = 64;

/// After an engine call: the range its memory view found absent (if any)
/// goes with QP `e` (number `qpn`) to the fault work. Under the lock.
pub(crate) fn want(dev: &FerroceDevice, head: &mut Option<u32>, e: &mut QpEntry, qpn: u32, at: Option<FaultAt>) {
    if let Some(at) = at {
        DevState::want_fault(head, e, qpn, at);
        dev.queue_fault_work();
    }
}

/// The device's fault work ([`crate::rdma::vtable::Driver::fault_work`]).
pub(crate) fn fault_work(dev: &FerroceDevice) {
    for _ in 0..FAULTS_PER_RUN {
        let (qpn, job) = {
            let mut st = dev.state.lock();
            let Some((qpn, at)) = st.next_fault() else { return };
            // The region may have gone since: then there is nothing to
            // fault, and the QP's retry finds its key invalid.
            (qpn, at.and_then(|a| st.odp_of(a.key).map(|odp| (odp, a))))
        };
        if let Some((odp, at)) = job {
            dev.count(Counter::OdpFault);
            // A range that cannot be faulted in (unmapped, or read-only
            // for a write) is marked so: the retry then fails the access
            // (local protection error, remote access error) instead of
            // waiting again.
            if odp.fault(at.pos, at.len, at.write, true).is_err() {
                dev.count(Counter::OdpFaultFailed);
            }
            // The last reference may release the umem (it sleeps): here,
            // outside the lock.
            drop(odp);
        }
        if let Some(e) = dev.state.lock().qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
            e.qp.fault_resolved();
        }
        kick(dev, qpn, KICK_BUDGET_TASK);
    }
    dev.queue_fault_work();
}

/// `ibv_advise_mr`: each range is checked against its region under the
/// lock, then faulted in (or, without `sync`, queued for the module's
/// workqueue) with the lock dropped.
pub(crate) fn advise_mr(pd: &Pd<'_, Ferroce>, advice: Advice, sync: bool, sges: &[(u64, u32, u32)]) -> Result {
    let dev = pd.device();
    let handle = pd.data().handle;
    let write = advice == Advice::PrefetchWrite;
    let fault = advice != Advice::PrefetchNoFault;
    let mut jobs = KVec::with_capacity(sges.len(), GFP_KERNEL)?;
    {
        let st = dev.state.lock();
        for &(addr, len, lkey) in sges {
            let (odp, pos) = st.odp_range(handle, lkey, addr, len, write)?;
            // Room was reserved above: this push does not allocate.
            jobs.push((odp, pos, len as usize), GFP_ATOMIC)?;
        }
    }
    for (odp, pos, len) in jobs {
        if len == 0 {
            continue;
        }
        if sync {
            odp.fault(pos, len, write, fault)?;
        } else {
            odp.prefetch_async(pos, len, write, fault)?;
        }
    }
    Ok(())
}
