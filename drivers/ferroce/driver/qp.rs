// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: an entry of the device's QP table (a transport engine QP
//! and what the datapath needs of it), named by its QPN. A process's QP
//! posts through rings it maps (its `post_send`/`post_recv` calls are
//! doorbells); a kernel consumer's posts through these verbs.

use super::ferroce::Ferroce;
use super::complete::{self, Notify};
use super::sched;
use crate::driver::quota::{self, Charge, Kind};
use crate::rdma::mmap::{RingMap, UserRing, RQ_WQE_SIZE, SQ_WQE_SIZE};
use crate::rdma::qp::{Qp, QpAttrIn, QpCap, QpInit, QpKind, QpQuery, QpRef, SendWr, SendWrs};
use crate::rdma::udata::{CreateQpResp, Udata};
use crate::rdma::wr::RecvWrs;
use crate::rdma::{eopnotsupp, Counter};
use crate::driver::ferroce::FerroceDevice;
use crate::driver::ring::QpRings;
use crate::driver::tables::{alloc_growing, Av, Returned, QpEntry, Slots, GSI_QPN, MAX_FAST_PAGE_SIZE, MAX_QP_WR, SRQ_QP_SLOTS};
use crate::transport::engine::{Qp as EngineQp, QpConfig, RecvSlot, SendSlot};
use crate::transport::qp::{mask, Mtu, QpState, QpType};
use crate::transport::verbs::{FastReg, Payload, RecvWqe, SendWqe, WrOpcode, MAX_INLINE, MAX_SGE};
use kernel::prelude::*;

/// A QP's data. Its state is its table entry, named by the QPN.
pub(crate) struct QpData {
    /// Its share of its user's quota (`None`: the kernel's), given back
    /// when the data is dropped.
    charge: Option<Charge>,
}

impl QpData {
    /// The account of the QP's user (`None`: a kernel QP), which its
    /// multicast attachments are charged to.
    pub(crate) fn account(&self) -> Option<&kernel::sync::Arc<quota::Account>> {
        self.charge.as_ref().map(Charge::account)
    }
}

/// The IB MTU of the device's port now.
fn port_mtu(dev: &FerroceDevice) -> Mtu {
    let e = crate::rdma::ib_mtu_from_bytes(dev.ndev_mtu().saturating_sub(crate::driver::device::ROCE_OVERHEAD));
    Mtu::from_u32(e).unwrap_or(Mtu::Mtu256)
}

/// A zero-filled slot array of `n` entries.
fn slots<T: Default>(n: u32) -> Result<KVVec<T>> {
    let mut v = KVVec::with_capacity(n as usize, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        v.push(T::default(), GFP_KERNEL_ACCOUNT)?;
    }
    Ok(v)
}

pub(super) fn create(qp: QpRef, init: &mut QpInit<'_, Ferroce>, udata: &mut Udata<'_, Ferroce>) -> Result<QpData> {
    udata.refuse_driver_input()?;
    let pd = init.pd();
    let dev = pd.device();
    let (gsi, ty) = match init.kind() {
        QpKind::Ud => (false, QpType::Ud),
        QpKind::Gsi => (true, QpType::Ud),
        QpKind::Rc => (false, QpType::Rc),
        QpKind::Uc => (false, QpType::Uc),
        QpKind::Other => return Err(eopnotsupp()),
    };
    if init.wants_extensions() {
        return Err(eopnotsupp());
    }
    let srq = init.srq().map(|s| s.index as usize);
    if srq.is_some() && gsi {
        // RC, UC and UD QPs take receives from an SRQ; the GSI QP has its
        // own receive queue.
        return Err(eopnotsupp());
    }
    let mut cap = init.cap();
    let (scq, rcq) = init.cqs().ok_or(EINVAL)?;
    let (scq, rcq) = (scq.index as usize, rcq.index as usize);
    if cap.max_send_wr > MAX_QP_WR
        || cap.max_recv_wr > MAX_QP_WR
        || cap.max_send_sge as usize > MAX_SGE
        || cap.max_recv_sge as usize > MAX_SGE
        || cap.max_inline_data as usize > MAX_INLINE
    {
        return Err(EINVAL);
    }
    let pd_handle = pd.data().handle;
    // Given back (dropped) if anything below fails.
    let charge = quota::charge(super::ucontext::account_of(udata), Kind::Qp)?;
    let mtu = port_mtu(dev);
    // A process's QP gets its rings (power-of-two sizes: the granted caps
    // are what the rings hold) and learns where they are before the QP
    // exists.
    let rings = if udata.is_user() {
        let sq = UserRing::new(udata, cap.max_send_wr, SQ_WQE_SIZE)?;
        let rq = match srq {
            Some(_) => None,
            None => Some(UserRing::new(udata, cap.max_recv_wr, RQ_WQE_SIZE)?),
        };
        let empty = RingMap { offset: 0, map_len: 0, entries: 0 };
        let ud_max_msg = if ty == QpType::Ud { mtu.bytes() } else { 0 };
        let resp = CreateQpResp {
            sq: sq.map(),
            rq: rq.as_ref().map_or(empty, |r| r.map()),
            ud_max_msg,
            reserved: 0,
        };
        udata.respond(&resp)?;
        cap.max_send_wr = sq.entries();
        if let Some(r) = &rq {
            cap.max_recv_wr = r.entries();
        }
        Some(QpRings::new(sq, rq, ud_max_msg, pd_handle))
    } else {
        None
    };
    let sq = slots::<SendSlot>(cap.max_send_wr)?;
    let ud_avs = if ty == QpType::Ud { slots::<Option<Av>>(cap.max_send_wr)? } else { KVVec::new() };
    let rq = slots::<RecvSlot>(if srq.is_some() { SRQ_QP_SLOTS } else { cap.max_recv_wr })?;
    // Allocated before the lock: a failure under it would drop the rings
    // there, and unmapping them may sleep.
    let boxed = KBox::<QpEntry>::new_uninit(GFP_KERNEL_ACCOUNT)?;
    let srq_spare = if srq.is_some() { Some(Returned::new()?) } else { None };
    let sig_all = init.sig_all();
    cap.max_inline_data = MAX_INLINE as u32;
    let user = udata.is_user();
    let (mut st, qpn) = if gsi {
        // QP 1 is the one GSI QP: taken is taken, growing does not help.
        let mut st = dev.state.lock();
        let n = st.alloc_qpn(true, user).ok_or(EBUSY)?;
        (st, n)
    } else {
        alloc_growing(dev, Kind::Qp, |st| st.alloc_qpn(false, user))?
    };
    let mut engine = EngineQp::new(
        QpConfig { qpn: qpn as u32, qp_type: ty, pd: pd_handle, sq_sig_all: sig_all },
        Slots(sq),
        Slots(rq),
    );
    if ty == QpType::Ud {
        engine.set_path_mtu(mtu);
    }
    // Before the entry is in the table: its timer and work item find it
    // by this number.
    qp.set_qpn(qpn as u32);
    let entry = KBox::write(
        boxed,
        QpEntry {
            qp: engine,
            token: qp.token(),
            core: qp,
            send_cq: scq,
            recv_cq: rcq,
            path: None,
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            sig_all,
            armed_for: None,
            tx_busy: false,
            tx_again: false,
            tx_prio: crate::transport::prio::PrioBudget::new(),
            tx_max_psn: None,
            ud_direct: false,
            ud_avs,
            ud_av_next: 0,
            srq,
            srq_spare,
            pd: pd_handle,
            rings,
            events_due: 0,
            last_wqe_sent: false,
            sq_drained_sent: false,
            mcast: KVec::new(),
            cq_waiting: [false; 2],
            cq_next: [None; 2],
            due_listed: false,
            due_next: None,
            fault: None,
            fault_listed: false,
            fault_next: None,
            linger_listed: false,
            linger_next: None,
            linger_since: 0,
            ud_listed: false,
            ud_next: None,
            wire_slot: 0,
            wire_charge: 0,
            wire_grant: 0,
            wire_listed: false,
            wire_next: None,
        },
    );
    for i in [scq, rcq] {
        if let Some(Some(c)) = st.cqs.get_mut(i) {
            c.users += 1;
        }
    }
    if let Some(Some(x)) = srq.and_then(|i| st.srqs.get_mut(i)) {
        x.users += 1;
    }
    if let Some(slot) = st.qps.get_mut(qpn) {
        *slot = Some(entry);
    }
    if ty == QpType::Ud && user {
        st.enter_qp_ud(qpn as u32);
    }
    drop(st);
    init.set_cap(&cap);
    Ok(QpData { charge })
}

pub(super) fn modify(qp: &Qp<'_, Ferroce>, attr: &QpAttrIn<'_>, udata: &mut Udata<'_, Ferroce>) -> Result {
    udata.refuse_driver_data()?;
    let dev = qp.device();
    let qpn = qp.qpn();
    let mut m = attr.mask();
    // Bits beyond what verbs define for RC/UD (rate limit, ...).
    if m & !0x1f_ffff != 0 {
        return Err(eopnotsupp());
    }
    let mut a = attr.engine()?;
    if m & mask::PORT != 0 && a.port_num != 1 {
        return Err(EINVAL);
    }
    if m & mask::PKEY_INDEX != 0 && a.pkey_index != 0 {
        return Err(EINVAL);
    }
    // The GSI QP's port comes from creation, not from Modify QP.
    if qpn as usize == GSI_QPN && m & mask::STATE != 0 && a.qp_state == QpState::Init {
        m |= mask::PORT;
        a.port_num = 1;
    }
    let mtu = port_mtu(dev);
    if m & mask::PATH_MTU != 0 && a.path_mtu as u32 > mtu as u32 {
        // The path MTU cannot exceed what the port carries.
        return Err(EINVAL);
    }
    let path = attr.av().map(|av| av.roce_av()).transpose()?;
    // A reset may give an SRQ's WQE back (`QpEntry::give_back`), using up
    // the QP's node: the next one, before the lock.
    let reset = m & mask::STATE != 0 && a.qp_state == QpState::Reset;
    let mut spare = if reset { Some(Returned::new()?) } else { None };
    let mut notify = Notify::new();
    let ret = {
        let mut st = dev.state.lock();
        let st = &mut *st;
        let e = st.qps.get_mut(qpn as usize).and_then(|x| x.as_deref_mut()).ok_or(EINVAL)?;
        if path.is_some() && e.qp.qp_type() == QpType::Ud {
            return Err(EINVAL);
        }
        let unfinished = if reset { e.qp.unfinished_recv() } else { None };
        let r = e.qp.modify(&a, m).map_err(|e| Error::from_errno(e.errno()));
        if r.is_ok() {
            if reset {
                e.give_back(unfinished, &mut st.srqs);
                if e.srq.is_some() && e.srq_spare.is_none() {
                    e.srq_spare = spare.take();
                }
            }
            if e.qp.qp_type() == QpType::Ud {
                e.qp.set_path_mtu(mtu);
            }
            if path.is_some() {
                e.path = path;
            }
            e.arm_timer();
        }
        complete::drain(dev, st, qpn, 0, &mut notify);
        r
    };
    notify.run(dev);
    if ret.is_ok() {
        sched::kick(dev, qpn, sched::KICK_BUDGET_TASK);
    }
    ret
}

pub(super) fn query(qp: &Qp<'_, Ferroce>) -> Result<QpQuery> {
    let dev = qp.device();
    let mut st = dev.state.lock();
    let e = st.qp(qp.qpn()).ok_or(EINVAL)?;
    Ok(QpQuery {
        state: e.qp.state(),
        attr: e.qp.attr(),
        sq_draining: e.qp.state() == QpState::Sqd && !e.qp.is_send_idle(),
        cap: QpCap {
            max_send_wr: e.max_send_wr,
            max_recv_wr: e.max_recv_wr,
            max_send_sge: e.max_send_sge,
            max_recv_sge: e.max_recv_sge,
            max_inline_data: MAX_INLINE as u32,
        },
        sig_all: e.sig_all,
    })
}

/// Takes a QP out of its table, its CQs and SRQ; after the lock, stops
/// its timer and work item (a lingering work item reads the SQ ring
/// without the lock), then drops the entry (its reference and rings, whose
/// unmapping may sleep).
pub(super) fn destroy(qp: &Qp<'_, Ferroce>) -> Result {
    let dev = qp.device();
    // Datagrams the process posted (UD, UC) leave before the QP goes, as
    // from a NIC, which has them by the time the post returns: a QP that
    // lingers may not have taken them yet.
    let unacked = dev.state.lock().qp(qp.qpn()).is_some_and(|e| matches!(e.qp.qp_type(), QpType::Ud | QpType::Uc) && e.rings.is_some());
    if unacked {
        sched::send_posted(dev, qp.qpn());
    }
    // Out of its multicast groups first, while its QPN is still its own.
    super::mcast::detach_all(dev, qp.qpn());
    let entry = {
        let mut st = dev.state.lock();
        st.unlink_qp_ud(qp.qpn());
        st.unlink_cq_waiters(qp.qpn());
        st.unlink_qp_due(qp.qpn());
        st.unlink_qp_fault(qp.qpn());
        st.unlink_qp_linger(qp.qpn());
        st.wire_forget(qp.qpn());
        let mut entry = st.qps.get_mut(qp.qpn() as usize).and_then(|s| s.take());
        if let Some(e) = &entry {
            for i in [e.send_cq, e.recv_cq] {
                if let Some(Some(c)) = st.cqs.get_mut(i) {
                    c.users = c.users.saturating_sub(1);
                    c.purge_qp(e.token);
                }
            }
            if let Some(Some(x)) = e.srq.and_then(|i| st.srqs.get_mut(i)) {
                x.users = x.users.saturating_sub(1);
            }
        }
        if let Some(e) = entry.as_deref_mut() {
            let w = e.qp.unfinished_recv();
            e.give_back(w, &mut st.srqs);
        }
        entry
    };
    if let Some(e) = &entry {
        e.core.stop_hooks();
    }
    drop(entry);
    // Its charge to the shared window went back: room for the waiters.
    sched::kick_woken(dev);
    Ok(())
}

/// The engine's copy of a REG_MR request: the region, the new key (its
/// upper 24 bits must stay the region's, IBTA and `ib_update_fast_reg_key`),
/// access rights, and the iova and length `map_mr_sg` gave the MR.
fn fast_reg(w: &SendWr<'_, Ferroce>) -> Result<FastReg> {
    let r = w.reg().ok_or(EINVAL)?;
    let stage = r.mr.stage.as_ref().ok_or(EINVAL)?;
    if !r.mem_reg || r.key >> 8 != r.mr.index {
        return Err(EINVAL);
    }
    let access = super::mr::check_access(r.access).map_err(|_| EINVAL)?;
    if r.iova.checked_add(r.length).is_none() || r.length > (stage.capacity() as u64).saturating_mul(MAX_FAST_PAGE_SIZE) {
        return Err(EINVAL);
    }
    Ok(FastReg { mr: r.mr.index, key: r.key, access, iova: r.iova, length: r.length })
}

/// A kernel consumer's send request as the engine takes it.
fn send_wqe(w: &SendWr<'_, Ferroce>, e: &QpEntry, inline: Option<(&[u8; MAX_INLINE], u16)>) -> Result<SendWqe> {
    let mut wqe = w.wqe(e.max_send_sge)?;
    if let Some((data, len)) = inline {
        wqe.data = Payload::Inline { bytes: *data, len };
    }
    if wqe.opcode == WrOpcode::RegMr {
        wqe.reg = fast_reg(w)?;
    }
    if e.qp.qp_type() == QpType::Ud {
        if !matches!(wqe.opcode, WrOpcode::Send | WrOpcode::SendWithImm) {
            return Err(EINVAL);
        }
        let (ah, remote_qpn, remote_qkey) = w.ud();
        wqe.ah = ah.ok_or(EINVAL)?.index;
        wqe.remote_qpn = remote_qpn;
        wqe.remote_qkey = remote_qkey;
        // A UD message is one packet: longer than the path MTU is refused
        // at post time (EINVAL), not completed in error.
        let len = wqe.length().ok_or(EINVAL)?;
        if len > e.qp.attr().path_mtu.bytes() {
            return Err(EINVAL);
        }
    }
    Ok(wqe)
}

pub(super) fn post_send(qp: &Qp<'_, Ferroce>, wrs: &mut SendWrs<'_, Ferroce>) -> Result {
    let dev = qp.device();
    let qpn = qp.qpn();
    let user = qp.is_user();
    if user {
        // A process's QP posts through its SQ ring; the system call is its
        // doorbell, and carries no requests.
        if !wrs.is_empty() {
            return Err(EINVAL);
        }
        dev.count(Counter::RingDoorbell);
        sched::doorbell(dev, qpn);
        return Ok(());
    }
    let r = wrs.each(|w| post_one(dev, qpn, user, w));
    sched::kick(dev, qpn, sched::KICK_BUDGET_TASK);
    r
}

/// Posts one kernel consumer's send request. Not inlined: its request
/// (up to 512 inline bytes and 32 SGEs) is off the stack before `kick`
/// sends, whose call chain is deep.
#[inline(never)]
fn post_one(dev: &FerroceDevice, qpn: u32, user: bool, w: &SendWr<'_, Ferroce>) -> Result {
    // Inline data is copied before the lock (a process's copy may fault
    // and sleep).
    let mut data = [0u8; MAX_INLINE];
    let inline = if w.is_inline() { Some(w.gather_inline(user, &mut data)?) } else { None };
    let mut guard = dev.state.lock();
    let st = &mut *guard;
    let e = st.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()).ok_or(EINVAL)?;
    let mut wqe = send_wqe(w, e, inline.map(|n| (&data, n)))?;
    e.post_send(&st.ahs, &mut wqe).map_err(|x| Error::from_errno(x.errno()))
}

/// Posts one kernel consumer's receive request (not inlined: its 32 SGEs
/// are off the stack before `drain`).
#[inline(never)]
fn post_recv_one(e: &mut QpEntry, w: &crate::rdma::wr::RecvWr<'_>) -> Result {
    let (sg_list, num_sge) = w.sges(e.max_recv_sge)?;
    let wqe = RecvWqe { wr_id: w.wr_id(), sg_list, num_sge };
    e.qp.post_recv(&wqe).map_err(|x| Error::from_errno(x.errno()))
}

pub(super) fn post_recv(qp: &Qp<'_, Ferroce>, wrs: &mut RecvWrs<'_>) -> Result {
    let dev = qp.device();
    let qpn = qp.qpn();
    let mut notify = Notify::new();
    let r = {
        let mut st = dev.state.lock();
        let r = match st.qp(qpn) {
            None => Err(EINVAL),
            Some(e) if e.srq.is_some() => Err(EINVAL),
            // A process's QP posts through its RQ ring; the system call
            // (its doorbell, needed in ERR) carries no requests.
            Some(e) if e.rings.is_some() => {
                if wrs.is_empty() {
                    crate::driver::rings::pull_rq(dev, e);
                    Ok(())
                } else {
                    Err(EINVAL)
                }
            }
            Some(e) => wrs.each(|w| post_recv_one(e, w)),
        };
        // Posting to a QP in ERR flushes at once.
        complete::drain(dev, &mut st, qpn, 0, &mut notify);
        r
    };
    notify.run(dev);
    r
}
