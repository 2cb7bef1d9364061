// SPDX-License-Identifier: GPL-2.0

//! Multicast (IBTA 11.3, Attach/Detach QP to Multicast Group; RoCEv2: the
//! group's GID is an IP multicast address): UD QPs attached to groups, the
//! group's IP membership on the netdev, and the receive fan-out of a
//! datagram to every QP attached to its group (`rx::receive`).
//!
//! The group table is the engine's (`transport::mcast`), under the device
//! lock. Attaches and detaches of every device are serialised by the
//! layer's `NetMutex`, so that a group's first attach and its join on the
//! netdev (or its last detach and the leave), which take RTNL and so
//! cannot run under the device lock, are one step.

// Safe Rust only: the compiler keeps it that way.
#![forbid(unsafe_code)]

use super::ferroce::Ferroce;
use crate::driver::ferroce::FerroceDevice;
use crate::driver::quota::{self, Kind};
use crate::driver::tables::GSI_QPN;
use crate::rdma::net::NetMutex;
use crate::rdma::qp::Qp;
use crate::transport::mcast::{Attached, McastError};
use crate::transport::qp::QpType;
use kernel::prelude::*;

/// The errno a verbs programmer expects.
fn errno(e: McastError) -> Error {
    match e {
        McastError::NotMulticast | McastError::NotAttached => EINVAL,
        McastError::NoGroup | McastError::GroupFull => ENOMEM,
    }
}

/// Attaches UD QP `qp` to the group of `gid`: `EINVAL` for another QP type
/// or a GID that is not multicast, `ENOMEM` when the group is full, every
/// group is in use or the user holds its quota of attachments. Attaching
/// twice is no error: the QP holds two attachments (the RDMA core counts
/// one per call that succeeded, and each needs its detach).
pub(super) fn attach(qp: &Qp<'_, Ferroce>, gid: &[u8; 16]) -> Result {
    let dev = qp.device();
    let qpn = qp.qpn();
    let _serial = NetMutex::lock();
    // Given back (dropped) unless the attachment is made.
    let charge = quota::charge(qp.data().account(), Kind::Mcast)?;
    let made = {
        let mut guard = dev.state.lock();
        let st = &mut *guard;
        let e = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()).ok_or(EINVAL)?;
        if e.qp.qp_type() != QpType::Ud || qpn as usize == GSI_QPN {
            return Err(EINVAL);
        }
        // Room for the charge before the group changes: nothing fails
        // after it does.
        e.mcast.reserve(1, GFP_ATOMIC)?;
        let made = st.mcast.attach(gid, qpn).map_err(errno)?;
        // One charge per attachment (a QP attached again, under another
        // LID, holds one more until its detach). Cannot fail: room was
        // reserved above.
        let _ = e.mcast.push_within_capacity(charge);
        made
    };
    if made == Attached::NewGroup {
        if let Err(err) = dev.mcast_join(gid, true) {
            // The group cannot receive: undo the attachment.
            let mut st = dev.state.lock();
            let _ = st.mcast.detach(gid, qpn);
            let _charge = st.qp(qpn).and_then(|e| e.mcast.pop());
            return Err(err);
        }
    }
    Ok(())
}

/// Detaches `qp` from the group of `gid` (`EINVAL` if it is not attached);
/// the last QP's detach leaves the group on the netdev.
pub(super) fn detach(qp: &Qp<'_, Ferroce>, gid: &[u8; 16]) -> Result {
    let dev = qp.device();
    let qpn = qp.qpn();
    let _serial = NetMutex::lock();
    let gone = {
        let mut guard = dev.state.lock();
        let st = &mut *guard;
        let e = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()).ok_or(EINVAL)?;
        let gone = st.mcast.detach(gid, qpn).map_err(errno)?;
        let _charge = e.mcast.pop();
        gone
    };
    if gone {
        leave(dev, gid);
    }
    Ok(())
}

/// Takes QP `qpn` (being destroyed, still in its table slot so that its
/// number is not reused meanwhile) out of every group it is attached to.
pub(super) fn detach_all(dev: &FerroceDevice, qpn: u32) {
    let _serial = NetMutex::lock();
    loop {
        let (gid, gone) = {
            let mut guard = dev.state.lock();
            let st = &mut *guard;
            let Some(e) = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
            if e.mcast.is_empty() {
                return;
            }
            let _charge = e.mcast.pop();
            let Some(gid) = st.mcast.group_of(qpn) else { return };
            (gid, st.mcast.detach(&gid, qpn).unwrap_or(false))
        };
        if gone {
            leave(dev, &gid);
        }
    }
}

/// Leaves the IP group of an emptied multicast group. A failure is only
/// logged: the group is gone from the device either way, and a stray
/// membership costs the netdev's filter a slot until it goes down.
fn leave(dev: &FerroceDevice, gid: &[u8; 16]) {
    if let Err(e) = dev.mcast_join(gid, false) {
        pr_warn!("leaving a multicast group on the netdev failed ({:?})\n", e);
    }
}
