// SPDX-License-Identifier: GPL-2.0

//! A ferroce device's mutable state: its QPs (each a transport engine), CQs,
//! memory regions and address handles, behind one bottom-half spinlock
//! (`FerroceDevice::state`). Everything here is plain data; the callbacks
//! that reach it from the RDMA core are in `objects.rs`, the packets in
//! `net.rs`.
//!
//! Nothing allocates while the lock is held (the receive path runs in
//! softirq): a table that is full grows by doubling, into storage
//! allocated with the lock dropped (`Spare`, `DevState::grow`), up to its
//! kind's largest size (`quota::Kind::max_len`).

#![forbid(unsafe_code)]

use crate::transport::engine::{Qp, RecvSlot, SendSlot};
use crate::transport::memory::{check_bind, check_invalidate, check_region, check_window, needed_access, Binding, Key, MemError, Memory, Region, Window};
use crate::transport::verbs::{access, Cqe, FastReg, MwBind, RecvWqe, SendWqe};
use crate::transport::qp::QpType;
use crate::transport::error::Error as EngineError;
// The slot policy (cyclic cursor, kernel reserve) and the shared rings'
// index rules are host-tested in the engine crate.
use crate::transport::shared_ring;
use crate::transport::table::alloc_slot;
use crate::transport::wire::{Bth, Psn, Transport};
use crate::rdma::mmap::{ring_cqe, RingCqe, RingRqWqe, UserRing, RING_CQ_WAITING};
use crate::rdma::mr::{KernelMem, Odp, UserMem};
use crate::rdma::object::{CqRef, SrqRef};
use crate::rdma::qp::QpRef;
use crate::rdma::wr::QpToken;
use crate::driver::quota::Kind;
use kernel::prelude::*;

/// QPN 1 is the GSI QP; user QPNs start at 16. Each table starts at its
/// kind's `first_len` slots and grows to at most twice what one user may
/// hold (`quota::Kind::quota`).
pub(crate) const FIRST_QPN: usize = 16;
pub(crate) const GSI_QPN: usize = 1;
/// Receive slots of an SRQ-attached QP in the engine: WQEs move in from the
/// SRQ one at a time, when a message needs one.
pub(crate) const SRQ_QP_SLOTS: u32 = 2;
// A memory region's key is `index << 8 | key byte`, the key byte random
// (and never the index's previous one).
pub(crate) const MAX_QP_WR: u32 = 16384;
pub(crate) const MAX_CQE: u32 = 65536;
pub(crate) const PAGE_SIZE: usize = 4096;
/// Pages of a fast-registration region (`max_num_sg` of `alloc_mr`,
/// `max_fast_reg_page_list_len`).
pub(crate) const MAX_FAST_PAGES: u32 = 512;
/// Largest page size `map_mr_sg` accepts (the smallest is `PAGE_SIZE`).
pub(crate) const MAX_FAST_PAGE_SIZE: u64 = 1 << 30;

/// Owned slots of a work queue, as the engine's ring storage.
pub(crate) struct Slots<T>(pub(crate) KVVec<T>);

impl<T> AsRef<[T]> for Slots<T> {
    fn as_ref(&self) -> &[T] {
        &self.0
    }
}

impl<T> AsMut<[T]> for Slots<T> {
    fn as_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

pub(crate) type EngineQp = Qp<Slots<SendSlot>, Slots<RecvSlot>>;

pub(crate) use crate::rdma::net::Av;

pub(crate) struct QpEntry {
    pub(crate) qp: EngineQp,
    /// What its completions name (`ib_wc.qp`).
    pub(crate) token: QpToken,
    pub(crate) send_cq: usize,
    pub(crate) recv_cq: usize,
    /// RC: the primary path.
    pub(crate) path: Option<Av>,
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    /// `IB_SIGNAL_ALL_WR`.
    pub(crate) sig_all: bool,
    /// The core's QP: its timer and work item (armed and queued only
    /// under the device lock while the entry is in the table).
    pub(crate) core: QpRef,
    /// The deadline the timer is armed for.
    pub(crate) armed_for: Option<u64>,
    /// A `kick` is sending this QP's packets (one at a time keeps order).
    pub(crate) tx_busy: bool,
    /// Another `kick` came while one was running: look again.
    pub(crate) tx_again: bool,
    /// At which priority its send continuation runs next
    /// (`sched::continue_tx`).
    pub(crate) tx_prio: crate::transport::prio::PrioBudget,
    /// Highest request PSN sent (RC), to count retransmissions.
    pub(crate) tx_max_psn: Option<Psn>,
    /// UD: the last packet went to a QP of this device, so the next ones
    /// are built straight into the device's buffer (`net::direct_batch`).
    pub(crate) ud_direct: bool,
    /// UD: the address each request the engine holds goes to, copied from
    /// its AH when the request is taken (as a NIC copies it into the WQE:
    /// the process may destroy the AH before the datagram leaves). A
    /// request's `ah` names its slot here; `ud_av_next` is the next
    /// request's. One slot per engine SQ slot, used in the engine's
    /// order: a slot comes round again only after the engine has let go
    /// of the request that had it.
    pub(crate) ud_avs: KVVec<Option<Av>>,
    pub(crate) ud_av_next: u32,
    /// The SRQ the QP takes its receive WQEs from.
    pub(crate) srq: Option<usize>,
    /// On an SRQ: the node that carries the WQE of an unfinished message
    /// back to the SRQ if the QP is reset or destroyed (`give_back`),
    /// allocated before the lock so that giving back never allocates.
    pub(crate) srq_spare: Option<KBox<Returned>>,
    /// A process's QP (every one has them): its SQ and RQ rings.
    pub(crate) rings: Option<crate::driver::ring::QpRings>,
    /// Its PD's handle: a UD packet goes out only through an AH of this PD.
    pub(crate) pd: u32,
    /// Affiliated asynchronous events (`QpEvent::bit`) raised and not yet
    /// delivered: a `Notify` that had no room left them here.
    pub(crate) events_due: u8,
    /// On an SRQ, in ERR: `IB_EVENT_QP_LAST_WQE_REACHED` went out (once
    /// per entry into ERR).
    pub(crate) last_wqe_sent: bool,
    /// In SQD: `IB_EVENT_SQ_DRAINED` went out (once per SQD).
    pub(crate) sq_drained_sent: bool,
    /// UD: one entry per multicast group the QP is attached to, its share
    /// of its user's quota (`None`: a kernel QP's).
    pub(crate) mcast: KVec<Option<crate::driver::quota::Charge>>,
    /// Its send (0) and receive (1) side is in its CQ's list of QPs whose
    /// completions wait for room (`CqEntry::waiters`), and the next node
    /// of that list.
    pub(crate) cq_waiting: [bool; 2],
    pub(crate) cq_next: [Option<CqWaiter>; 2],
    /// In the device's list of QPs whose `events_due` a full `Notify`
    /// left (`DevState::qp_due`), and the next QP in it.
    pub(crate) due_listed: bool,
    pub(crate) due_next: Option<u32>,
    /// The pages of memory on demand its last access found absent, for
    /// the device's fault work; in the device's list of QPs waiting for
    /// it (`DevState::qp_fault`), and the next QP in it.
    pub(crate) fault: Option<FaultAt>,
    pub(crate) fault_listed: bool,
    pub(crate) fault_next: Option<u32>,
    /// A process's QP whose sender lingers (`rings::Idle::Linger`): in the
    /// device's list of them (`DevState::qp_linger`), the next QP in it,
    /// and when it joined (the linger ends `sched::LINGER_NS` later).
    pub(crate) linger_listed: bool,
    pub(crate) linger_next: Option<u32>,
    pub(crate) linger_since: u64,
    /// A process's UD QP: in the device's list of them
    /// (`DevState::qp_ud`, which an AH's destroy walks), the next in it.
    pub(crate) ud_listed: bool,
    pub(crate) ud_next: Option<u32>,
    /// An RC QP on the wire: the window of its destination (its slot in
    /// `DevState::wire`), the packets it has charged to it, the room
    /// reserved for it there when it was woken, and whether it waits for
    /// room (in that window's FIFO), with the next QP in it.
    pub(crate) wire_slot: u8,
    pub(crate) wire_charge: u32,
    pub(crate) wire_grant: u32,
    pub(crate) wire_listed: bool,
    pub(crate) wire_next: Option<u32>,
}

/// Pages of memory on demand an access found absent: `len` bytes from
/// `pos` of the pages of the region whose key was `key` (looked up again
/// by the fault work: the region may be gone by then), writable with
/// `write`.
#[derive(Clone, Copy)]
pub(crate) struct FaultAt {
    pub(crate) key: u32,
    pub(crate) pos: usize,
    pub(crate) len: usize,
    pub(crate) write: bool,
}

/// A node of a CQ's list of QPs whose completions wait for room: the send
/// (`side` 0) or receive (1) side of QP `qpn`. The list is threaded
/// through the QP entries, so that the CQ's doorbell visits only them
/// (no scan of the QP table) and queueing never allocates.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct CqWaiter {
    pub(crate) qpn: u32,
    pub(crate) side: u8,
}

impl QpEntry {
    /// After a reset, or at destroy, of a QP on an SRQ: `w`, the receive
    /// WQE it had taken for a message that had not completed
    /// (`Qp::unfinished_recv` before the reset), goes back to the SRQ
    /// (IBTA: an SRQ's WQE leaves it only to complete; ERR completes it
    /// with a flush error instead). A QP holds at most one such WQE (it
    /// takes one only when it holds none) and one spare node, used up here:
    /// `modify_qp` brings a new one for every reset.
    pub(crate) fn give_back(&mut self, w: Option<RecvWqe>, srqs: &mut [Option<KBox<SrqEntry>>]) {
        let (Some(si), Some(w)) = (self.srq, w) else { return };
        let (Some(srq), Some(mut n)) = (srqs.get_mut(si).and_then(|x| x.as_deref_mut()), self.srq_spare.take()) else {
            return;
        };
        n.wqe = w;
        n.next = srq.back.take();
        srq.back = Some(n);
    }

    /// Posts `w` to the engine. A UD request's AH (`w.ah`, which must
    /// exist in this QP's PD: `Invalid` otherwise) is looked up now and
    /// its address kept in the request's slot of `ud_avs`, which `w.ah`
    /// then names (see `sent_av`).
    pub(crate) fn post_send(&mut self, ahs: &[Option<AhEntry>], w: &mut SendWqe) -> Result<(), EngineError> {
        if self.qp.qp_type() != QpType::Ud {
            return self.qp.post_send(w);
        }
        let av = ahs.get(w.ah as usize).copied().flatten().filter(|a| a.pd == self.pd).map(|a| a.av);
        let n = self.ud_avs.len() as u32;
        let (Some(av), true) = (av, n > 0) else {
            return Err(EngineError::Invalid);
        };
        let slot = self.ud_av_next % n;
        w.ah = slot;
        self.qp.post_send(w)?;
        // Only once the engine holds it: a full engine refuses the request
        // and the slot still belongs to the oldest one it holds.
        if let Some(s) = self.ud_avs.get_mut(slot as usize) {
            *s = Some(av);
        }
        self.ud_av_next = (slot + 1) % n;
        Ok(())
    }

    /// Where the UD datagram the engine built for a request (`Transmit::ah`:
    /// its `ud_avs` slot) goes.
    pub(crate) fn sent_av(&self, ah: u32) -> Option<Av> {
        self.ud_avs.get(ah as usize).copied().flatten()
    }

    /// Notes a transmitted packet (`pkt`: BTH onward); true when it is an
    /// RC request at or below the highest PSN sent so far: a retransmission.
    pub(crate) fn note_request(&mut self, pkt: Option<&[u8]>) -> bool {
        let Some(bth) = pkt.and_then(|p| Bth::new_checked(p).ok()) else {
            return false;
        };
        let is_rc_request = bth
            .opcode()
            .info()
            .is_ok_and(|i| i.transport == Transport::Rc && i.is_request());
        if !is_rc_request {
            return false;
        }
        let psn = bth.psn();
        match self.tx_max_psn {
            Some(max) if !psn.is_after(max) => true,
            _ => {
                self.tx_max_psn = Some(psn);
                false
            }
        }
    }

    /// Arms (or cancels) the timer for the engine's next deadline. Called
    /// with the device lock held, so that `destroy_qp`, which removes the
    /// entry under the lock before shutting the timer down, never races a
    /// late re-arm.
    pub(crate) fn arm_timer(&mut self) {
        let want = self.qp.next_deadline();
        if want == self.armed_for {
            return;
        }
        match want {
            Some(d) => self.core.arm_timer_ns(d),
            None => self.core.cancel_timer(),
        }
        self.armed_for = want;
    }

    /// The UDP source port of this QP's packets to `dest_qpn`: in the
    /// 0xC000-0xFFFF range RoCEv2 reserves for flow entropy, fixed per QP
    /// pair so a flow stays on one path.
    pub(crate) fn qpn_source_port(&self, dest_qpn: u32) -> u16 {
        0xc000 | ((self.qp.qpn() ^ dest_qpn ^ (dest_qpn >> 14)) & 0x3fff) as u16
    }
}


/// An address handle: where it sends, and the PD it belongs to.
#[derive(Clone, Copy)]
pub(crate) struct AhEntry {
    pub(crate) av: Av,
    pub(crate) pd: u32,
}

/// One completion as it waits in a CQ.
#[derive(Clone, Copy)]
pub(crate) struct CqSlot {
    pub(crate) cqe: Cqe,
    pub(crate) qp: QpToken,
    /// IP version of the packet a UD receive came in (0: not a receive).
    pub(crate) ip_version: u8,
}

pub(crate) struct CqEntry {
    ring: KVVec<CqSlot>,
    head: usize,
    len: usize,
    /// The core's CQ, for its completion handler.
    pub(crate) cq: CqRef,
    /// Armed for the next completion (`Some(true)`: the next solicited
    /// one).
    pub(crate) armed: Option<bool>,
    /// QPs using this CQ.
    pub(crate) users: u32,
    /// A process's CQ: the ring completions go to (`ring` is then empty),
    /// and the kernel's producer index.
    pub(crate) user: Option<UserRing>,
    uprod: u32,
    /// FERROCE_RING_CQ_WAITING as last written.
    waiting: bool,
    /// Armed when a completion came but a pass's `Notify` was full: the
    /// pass runs the handler after its others (`Notify::run`). The CQ is
    /// then in the device's list of CQs due (`DevState::cq_due`).
    pub(crate) event_due: bool,
    /// The next CQ in that list.
    pub(crate) due_next: Option<u32>,
    /// `IB_EVENT_CQ_ERR` went out (once per CQ).
    pub(crate) err_sent: bool,
    /// The first of the QP sides whose completions wait for room.
    pub(crate) waiters: Option<CqWaiter>,
}

impl CqEntry {
    pub(crate) fn new(cq: CqRef, entries: usize) -> Result<KBox<Self>> {
        let ring = Self::alloc_ring(entries)?;
        Ok(KBox::new(
            Self {
                ring,
                head: 0,
                len: 0,
                cq,
                armed: None,
                users: 0,
                user: None,
                uprod: 0,
                waiting: false,
                event_due: false,
                due_next: None,
                err_sent: false,
                waiters: None,
            },
            GFP_KERNEL_ACCOUNT,
        )?)
    }

    /// A process's CQ, whose completions go to `ring`.
    pub(crate) fn new_user(cq: CqRef, ring: UserRing) -> Result<KBox<Self>> {
        let mut cq = Self::new(cq, 0)?;
        cq.user = Some(ring);
        Ok(cq)
    }

    /// Completions in the process's ring not yet read (the process's
    /// consumer index, which it may have scribbled over, bounded).
    fn user_len(&self, r: &UserRing) -> usize {
        shared_ring::unread(self.uprod, r.cons(), r.entries()) as usize
    }

    /// Notes (in the ring) whether completions wait in the kernel for room.
    pub(crate) fn set_waiting(&mut self, on: bool) {
        if let Some(r) = &self.user {
            if self.waiting != on {
                self.waiting = on;
                r.set_kflags(if on { RING_CQ_WAITING } else { 0 });
            }
        }
    }

    /// Moves a process's unread completions into `new` (resize_cq): fails
    /// when they do not fit or the consumer index is impossible.
    pub(crate) fn replace_user_ring(&mut self, new: UserRing) -> core::result::Result<UserRing, UserRing> {
        let Some(old) = self.user.take() else { return Err(new) };
        let cons = old.cons();
        let n = self.uprod.wrapping_sub(cons);
        if n > old.entries() || n > new.entries() {
            self.user = Some(old);
            return Err(new);
        }
        for i in 0..n {
            let c: RingCqe = old.read(cons.wrapping_add(i));
            new.write(i, &c);
        }
        new.set_prod(n);
        self.uprod = n;
        self.waiting = false;
        self.user = Some(new);
        Ok(old)
    }

    pub(crate) fn alloc_ring(entries: usize) -> Result<KVVec<CqSlot>> {
        let mut ring = KVVec::with_capacity(entries, GFP_KERNEL_ACCOUNT)?;
        let empty = CqSlot {
            cqe: Cqe::default(),
            qp: QpToken::NONE,
            ip_version: 0,
        };
        for _ in 0..entries {
            ring.push(empty, GFP_KERNEL_ACCOUNT)?;
        }
        Ok(ring)
    }

    pub(crate) fn len(&self) -> usize {
        match &self.user {
            Some(r) => self.user_len(r),
            None => self.len,
        }
    }

    /// A process's ring whose consumer index claims more unread entries
    /// than the ring holds (scribbled): the CQ is in error.
    pub(crate) fn overrun(&self) -> bool {
        self.user.as_ref().is_some_and(|r| shared_ring::overrun(self.uprod, r.cons(), r.entries()))
    }

    pub(crate) fn is_full(&self) -> bool {
        match &self.user {
            // A consumer index ahead of the producer (scribbled) reads as
            // full: the process's CQ stops, nothing is overwritten.
            Some(r) => !shared_ring::has_room(self.uprod, r.cons(), r.entries()),
            None => self.len >= self.ring.len(),
        }
    }

    pub(crate) fn push(&mut self, slot: CqSlot) -> bool {
        if let Some(r) = &self.user {
            if !shared_ring::has_room(self.uprod, r.cons(), r.entries()) {
                return false;
            }
            r.write(self.uprod, &ring_cqe(&slot.cqe));
            self.uprod = self.uprod.wrapping_add(1);
            r.set_prod(self.uprod);
            return true;
        }
        let cap = self.ring.len();
        if self.len >= cap {
            return false;
        }
        let at = (self.head + self.len) % cap;
        if let Some(s) = self.ring.get_mut(at) {
            *s = slot;
            self.len += 1;
            true
        } else {
            false
        }
    }

    pub(crate) fn pop(&mut self) -> Option<CqSlot> {
        if self.len == 0 {
            return None;
        }
        let s = self.ring.get(self.head).copied();
        self.head = (self.head + 1) % self.ring.len().max(1);
        self.len -= 1;
        s
    }

    /// Moves the waiting completions into `ring` (resize); fails when they
    /// do not fit.
    pub(crate) fn replace_ring(&mut self, mut ring: KVVec<CqSlot>) -> core::result::Result<KVVec<CqSlot>, KVVec<CqSlot>> {
        if self.len > ring.len() {
            return Err(ring);
        }
        let mut n = 0;
        while let Some(s) = self.pop() {
            if let Some(d) = ring.get_mut(n) {
                *d = s;
            }
            n += 1;
        }
        let old = core::mem::replace(&mut self.ring, ring);
        self.head = 0;
        self.len = n;
        Ok(old)
    }

    /// Removes the completions of a destroyed QP (their `ib_wc.qp` would
    /// dangle), keeping the order of the others.
    pub(crate) fn purge_qp(&mut self, qp: QpToken) {
        // A process's completions name QPs by number, not by pointer.
        let n = if self.user.is_some() { 0 } else { self.len };
        let mut kept = 0;
        for _ in 0..n {
            if let Some(s) = self.pop() {
                if s.qp != qp {
                    let _ = self.push(s);
                    kept += 1;
                }
            }
        }
        let _ = kept;
    }
}

/// A receive WQE given back to its SRQ (`QpEntry::give_back`), in a list
/// of nodes that the QPs on the SRQ brought with them.
pub(crate) struct Returned {
    wqe: RecvWqe,
    next: Option<KBox<Returned>>,
}

impl Returned {
    pub(crate) fn new() -> Result<KBox<Self>> {
        Ok(KBox::new(Self { wqe: RecvWqe::default(), next: None }, GFP_KERNEL_ACCOUNT)?)
    }
}

/// A shared receive queue: a FIFO of receive WQEs that QPs attached to it
/// take from when a message arrives.
pub(crate) struct SrqEntry {
    /// WQEs given back by QPs reset or destroyed mid-message: taken first.
    back: Option<KBox<Returned>>,
    ring: KVVec<RecvWqe>,
    head: usize,
    len: usize,
    pub(crate) max_sge: u32,
    /// Armed limit (0: not armed): below it, the limit event fires once.
    pub(crate) limit: u32,
    pub(crate) users: u32,
    /// The core's SRQ, for its limit event.
    pub(crate) srq: SrqRef,
    /// A process's SRQ: its ring (then `ring` is empty) and the WQEs taken.
    pub(crate) user: Option<UserRing>,
    taken: u32,
}

impl Drop for SrqEntry {
    /// The given-back list, one node at a time (a recursive drop would
    /// take stack in proportion to its length).
    fn drop(&mut self) {
        let mut n = self.back.take();
        while let Some(mut x) = n {
            n = x.next.take();
        }
    }
}

impl SrqEntry {
    pub(crate) fn new(srq: SrqRef, max_wr: usize, max_sge: u32, limit: u32) -> Result<KBox<Self>> {
        let ring = Self::alloc_ring(max_wr)?;
        Ok(KBox::new(Self { back: None, ring, head: 0, len: 0, max_sge, limit, users: 0, srq, user: None, taken: 0 }, GFP_KERNEL_ACCOUNT)?)
    }

    /// The WQE slots of a kernel consumer's SRQ.
    pub(crate) fn alloc_ring(max_wr: usize) -> Result<KVVec<RecvWqe>> {
        let mut ring = KVVec::with_capacity(max_wr, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..max_wr {
            ring.push(RecvWqe::default(), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(ring)
    }

    /// A kernel consumer's SRQ resized: its WQEs move, in order, into
    /// `ring`; the old slots come back (to be freed after the lock).
    /// `Err(ring)` when `ring` cannot hold them (or this is a process's SRQ).
    pub(crate) fn replace_ring(&mut self, mut ring: KVVec<RecvWqe>) -> core::result::Result<KVVec<RecvWqe>, KVVec<RecvWqe>> {
        if self.user.is_some() || self.len > ring.len() {
            return Err(ring);
        }
        let cap = self.ring.len();
        for (i, slot) in ring.iter_mut().take(self.len).enumerate() {
            if let Some(w) = self.ring.get((self.head + i) % cap.max(1)) {
                *slot = *w;
            }
        }
        self.head = 0;
        Ok(core::mem::replace(&mut self.ring, ring))
    }

    /// A process's SRQ resized: the WQEs it posted that were not taken yet
    /// are copied, in order, into `new`'s first slots (validated when taken,
    /// as every WQE of the ring), and `new` starts with cons 0 and prod
    /// their number. The old ring comes back (unmapped after the lock).
    /// `Err(new)` when `new` cannot hold them. A producer index that claims
    /// more than the old ring holds moves nothing (it read as empty).
    pub(crate) fn replace_user_ring(&mut self, new: UserRing) -> core::result::Result<UserRing, UserRing> {
        let Some(old) = self.user.take() else { return Err(new) };
        let avail = crate::transport::shared_ring::srq_has_entry(old.prod(), self.taken, old.entries()).unwrap_or(0);
        if avail > new.entries() {
            self.user = Some(old);
            return Err(new);
        }
        for i in 0..avail {
            let w: RingRqWqe = old.read_rq(self.taken.wrapping_add(i));
            new.write(i, &w);
        }
        new.set_cons(0);
        new.set_prod(avail);
        self.taken = 0;
        self.user = Some(new);
        Ok(old)
    }

    /// A process's SRQ, whose WQEs come from `ring`.
    pub(crate) fn new_user(srq: SrqRef, ring: UserRing, max_sge: u32, limit: u32) -> Result<KBox<Self>> {
        let mut s = Self::new(srq, 0, max_sge, limit)?;
        s.user = Some(ring);
        Ok(s)
    }

    pub(crate) fn max_wr(&self) -> usize {
        match &self.user {
            Some(r) => r.entries() as usize,
            None => self.ring.len(),
        }
    }

    /// The oldest WQE of a process's SRQ (`Err(wr_id)`: malformed), and
    /// whether taking it crossed the armed limit. A producer index that
    /// claims more than the ring holds reads as empty (counted by the
    /// caller as an RNR).
    fn pop_user(&mut self, r: &UserRing) -> Option<(core::result::Result<RecvWqe, u64>, bool)> {
        let avail = shared_ring::srq_has_entry(r.prod(), self.taken, r.entries())?;
        let slot: RingRqWqe = r.read_rq(self.taken);
        self.taken = self.taken.wrapping_add(1);
        r.set_cons(self.taken);
        let left = avail - 1;
        let fire = self.limit != 0 && left < self.limit;
        if fire {
            self.limit = 0;
        }
        Some((crate::driver::ring::srq_wqe(&slot, self.max_sge), fire))
    }

    /// The oldest WQE (`Err(wr_id)`: a malformed one from a process's
    /// ring), and whether taking it crossed the armed limit (the limit
    /// disarms itself then).
    pub(crate) fn take(&mut self) -> Option<(core::result::Result<RecvWqe, u64>, bool)> {
        if let Some(mut n) = self.back.take() {
            self.back = n.next.take();
            return Some((Ok(n.wqe), false));
        }
        if let Some(r) = self.user.take() {
            let out = self.pop_user(&r);
            self.user = Some(r);
            return out;
        }
        self.pop().map(|(w, f)| (Ok(w), f))
    }

    pub(crate) fn push(&mut self, w: RecvWqe) -> bool {
        let cap = self.ring.len();
        if self.len >= cap {
            return false;
        }
        match self.ring.get_mut((self.head + self.len) % cap) {
            Some(s) => {
                *s = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    fn pop(&mut self) -> Option<(RecvWqe, bool)> {
        if self.len == 0 {
            return None;
        }
        let w = *self.ring.get(self.head)?;
        self.head = (self.head + 1) % self.ring.len();
        self.len -= 1;
        let fire = self.limit != 0 && (self.len as u32) < self.limit;
        if fire {
            self.limit = 0;
        }
        Some((w, fire))
    }
}

pub(crate) enum MrKind {
    /// Kernel virtual addresses (get_dma_mr): only kernel QPs, in the
    /// kernel's PD, can name it.
    Dma(KernelMem),
    /// A process's pages, pinned or on demand; `offset` is the region's
    /// start within the first. Dropped (unpinned, or the umem released,
    /// which may sleep) only without the device lock.
    User { pages: UserMem, offset: usize },
    /// A fast-registration region (`alloc_mr`), kernel QPs only: the page
    /// list `map_mr_sg` stored (kernel virtual addresses, ferroce's DMA
    /// addresses, each the start of `page_size` contiguous bytes) and the
    /// state the REG_MR / invalidate work requests change.
    Fast(FastMr),
    /// A process's memory window (`alloc_mw`): its R_Key names, when it
    /// is bound, a range of a region of its PD. Windows share the
    /// regions' key space (and table), as the IBTA has it.
    Window(WindowEntry),
}

/// A memory window's type and binding.
pub(crate) struct WindowEntry {
    /// Type 2B, else type 1.
    pub(crate) type2: bool,
    /// Where it is bound (its region holds one count of `windows` for it).
    pub(crate) binding: Option<Binding>,
}

pub(crate) struct FastMr {
    /// Where its pages are (kernel addresses).
    pub(crate) mem: KernelMem,
    /// `max_num_sg` entries (kmalloc'ed: freed under the lock when an
    /// insertion fails); the first `npages` are mapped.
    pub(crate) pages: KVec<u64>,
    pub(crate) npages: usize,
    pub(crate) page_size: u64,
    /// Where the mapped bytes start in the first page.
    pub(crate) first_off: u64,
    /// Registered (REG_MR) and not invalidated since: only then does the
    /// key name memory.
    pub(crate) valid: bool,
}

impl FastMr {
    /// The kernel address of byte `off` of the region and the bytes
    /// contiguous from there (to the end of its page).
    fn at(&self, off: u64) -> core::result::Result<(u64, u64), MemError> {
        let pos = off.checked_add(self.first_off).ok_or(MemError::OutOfBounds)?;
        let ps = self.page_size.max(1);
        let idx = usize::try_from(pos / ps).map_err(|_| MemError::OutOfBounds)?;
        if idx >= self.npages {
            return Err(MemError::OutOfBounds);
        }
        let page = *self.pages.get(idx).ok_or(MemError::OutOfBounds)?;
        let in_page = pos % ps;
        Ok((page.checked_add(in_page).ok_or(MemError::OutOfBounds)?, ps - in_page))
    }

    /// Copies the region's bytes from `off` into `dst`, a page at a time
    /// (each page is `page_size` contiguous kernel bytes).
    fn read(&self, off: u64, dst: &mut [u8]) -> core::result::Result<(), MemError> {
        let mut done = 0usize;
        while done < dst.len() {
            let (addr, run) = self.at(off.checked_add(done as u64).ok_or(MemError::OutOfBounds)?)?;
            let n = usize::try_from(run).unwrap_or(usize::MAX).min(dst.len() - done);
            self.mem.read(addr, dst.get_mut(done..done + n).ok_or(MemError::OutOfBounds)?);
            done += n;
        }
        Ok(())
    }

    /// Copies `src` into the region's bytes from `off`.
    fn write(&self, off: u64, src: &[u8]) -> core::result::Result<(), MemError> {
        let mut done = 0usize;
        while done < src.len() {
            let (addr, run) = self.at(off.checked_add(done as u64).ok_or(MemError::OutOfBounds)?)?;
            let n = usize::try_from(run).unwrap_or(usize::MAX).min(src.len() - done);
            self.mem.write(addr, src.get(done..done + n).ok_or(MemError::OutOfBounds)?);
            done += n;
        }
        Ok(())
    }
}

pub(crate) struct MrEntry {
    /// The handle of the PD it belongs to (`DevState::alloc_pd`: unique
    /// among live PDs).
    pub(crate) pd: u32,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) key: u32,
    pub(crate) kind: MrKind,
    /// Windows bound to this region: while any is, it cannot be
    /// deregistered (`EBUSY`), so a window never names a freed region.
    pub(crate) windows: u32,
}

impl MrEntry {
    /// What the engine's access checks see of this region: an invalid
    /// (free) fast region names no memory; kernel virtual addresses
    /// belong to kernel QPs only.
    fn region(&self) -> Region {
        Region {
            key: self.key,
            pd: self.pd,
            access: self.access,
            iova: self.iova,
            length: self.length,
            valid: !matches!(&self.kind, MrKind::Fast(f) if !f.valid),
            kernel_only: matches!(&self.kind, MrKind::Dma(_) | MrKind::Fast(_)),
        }
    }

    /// What the window checks see of this entry, if it is a window.
    fn window(&self) -> Option<Window> {
        match &self.kind {
            MrKind::Window(w) => Some(Window { key: self.key, pd: self.pd, type2: w.type2, binding: w.binding }),
            _ => None,
        }
    }
}


/// The device's tables.
pub(crate) struct DevState {
    pub(crate) qps: KVVec<Option<KBox<QpEntry>>>,
    next_qp: usize,
    pub(crate) cqs: KVVec<Option<KBox<CqEntry>>>,
    next_cq: usize,
    pub(crate) mrs: KVVec<Option<MrEntry>>,
    mr_gen: KVVec<u8>,
    next_mr: usize,
    pub(crate) ahs: KVVec<Option<AhEntry>>,
    next_ah: usize,
    pub(crate) srqs: KVVec<Option<KBox<SrqEntry>>>,
    next_srq: usize,
    /// Live PD handles (index 0 unused): a handle is its slot, so no two
    /// live PDs ever share one, however many were allocated before.
    pds: KVVec<Option<PdOwner>>,
    next_pd: usize,
    /// The users with a context open, and what each holds.
    pub(crate) accounts: crate::driver::quota::Accounts,
    /// CQs whose completion event a full `Notify` pass left for
    /// `Notify::run` (threaded through `CqEntry::due_next`), and QPs whose
    /// asynchronous events it left (through `QpEntry::due_next`): run
    /// takes them from here, never by a scan of the tables.
    pub(crate) cq_due: Option<u32>,
    pub(crate) qp_due: Option<u32>,
    /// QPs whose access to memory on demand found pages absent (threaded
    /// through `QpEntry::fault_next`): the device's fault work takes them
    /// from here.
    pub(crate) qp_fault: Option<u32>,
    /// QPs that linger (threaded through `QpEntry::linger_next`), watched
    /// by the device's linger work, and how many (at most
    /// `sched::MAX_LINGERING`).
    pub(crate) qp_linger: Option<u32>,
    pub(crate) lingering: u32,
    /// The processes' UD QPs (threaded through `QpEntry::ud_next`):
    /// `rings::take_posted_ud` walks them when an AH goes.
    pub(crate) qp_ud: Option<u32>,
    /// The linger work is running and looks at the list without sleeping
    /// between looks: a doorbell enters its QP in the list instead of
    /// kicking it in the process's call (`sched::doorbell`). Cleared by
    /// the work, under the lock, before it sleeps or ends.
    pub(crate) linger_spinning: bool,
    /// The multicast groups and the UD QPs attached to each.
    pub(crate) mcast: crate::transport::mcast::Groups<KVVec<crate::transport::mcast::Group>>,
    /// Where `net::kick` builds an RC packet for a QP of this same device,
    /// which it then delivers from here (no socket buffer): room for the
    /// largest transport packet.
    pub(crate) local_buf: KVVec<u8>,
    /// The send windows the RC QPs on the wire share, one per destination
    /// (by address hash), each with the FIFO of QPs waiting for room in it
    /// (`window.rs`).
    pub(crate) wire: [crate::driver::window::WireSlot; crate::transport::rc::shared::SHARED_SLOTS],
    /// Waiters that just left the FIFO with room reserved, for the next
    /// `kick` to run after its lock.
    pub(crate) wire_woken: crate::driver::tx::Deferred,
    /// RC QPs that received in this softirq's receive pass and have
    /// something to send, for the device's burst work to run once after
    /// it (`sched::burst_work`): one ACK for a burst of requests.
    pub(crate) rx_kicks: crate::driver::tx::Deferred,
}

fn table<T>(n: usize) -> Result<KVVec<Option<T>>> {
    let mut v = KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        v.push(None, GFP_KERNEL_ACCOUNT)?;
    }
    Ok(v)
}

/// Doubles `kind`'s table (up to its largest size): the storage is
/// allocated with the device lock dropped, the entries move under it and
/// the old storage is freed after it. `ENOMEM` at the largest size. Called
/// by an allocation that found no slot, which then tries once more; it may
/// sleep (a kernel consumer's AH, made in atomic context, never grows its
/// table: it has the kernel reserve).
pub(crate) fn grow(dev: &crate::driver::ferroce::FerroceDevice, kind: Kind) -> Result {
    let len = dev.state.lock().grown_len(kind).ok_or(ENOMEM)?;
    let mut spare = Spare::new(kind, len)?;
    dev.state.lock().grow(&mut spare);
    drop(spare);
    Ok(())
}

/// The device lock's guard.
pub(crate) type StateGuard<'a> = kernel::sync::lock::Guard<'a, DevState, crate::rdma::sync::BhSpinLockBackend>;

/// Allocates in `kind`'s table with `alloc` under the device lock; when
/// it finds no slot the table grows (`grow`, the lock dropped) and `alloc`
/// runs once more. Returns the guard, still held (the caller enters its
/// object under the same hold), and what `alloc` gave; `ENOMEM` when the
/// table is at its largest or still full. May sleep.
pub(crate) fn alloc_growing<'a, R>(
    dev: &'a crate::driver::ferroce::FerroceDevice,
    kind: Kind,
    mut alloc: impl FnMut(&mut DevState) -> Option<R>,
) -> Result<(StateGuard<'a>, R)> {
    let mut st = dev.state.lock();
    if let Some(r) = alloc(&mut st) {
        return Ok((st, r));
    }
    drop(st);
    grow(dev, kind)?;
    let mut st = dev.state.lock();
    let r = alloc(&mut st).ok_or(ENOMEM)?;
    Ok((st, r))
}

/// Takes an object out of its table slot unless something still uses it
/// (`EBUSY`): the destroy verbs of CQs and SRQs, which QPs reference.
pub(crate) fn take_unused<T>(slot: Option<&mut Option<KBox<T>>>, users: impl Fn(&T) -> u32) -> Result<Option<KBox<T>>> {
    match slot {
        Some(s) if s.as_deref().is_some_and(|x| users(x) > 0) => Err(EBUSY),
        Some(s) => Ok(s.take()),
        None => Ok(None),
    }
}

/// Moves the entries of `t` into `spare` when `spare` is longer (another
/// allocation may have grown `t` since `spare` was made) and swaps them:
/// `spare` is left with `t`'s old storage, all free, to be dropped once
/// the lock is.
fn move_into<T>(t: &mut KVVec<Option<T>>, spare: &mut KVVec<Option<T>>) -> bool {
    if spare.len() <= t.len() {
        return false;
    }
    for (to, from) in spare.iter_mut().zip(t.iter_mut()) {
        *to = from.take();
    }
    core::mem::swap(t, spare);
    true
}

/// The storage of a bigger table, allocated with the device lock dropped:
/// `DevState::grow` moves the entries in under the lock.
pub(crate) enum Spare {
    Qp(KVVec<Option<KBox<QpEntry>>>),
    Cq(KVVec<Option<KBox<CqEntry>>>),
    Srq(KVVec<Option<KBox<SrqEntry>>>),
    /// The regions and their slots' last key bytes.
    Mr(KVVec<Option<MrEntry>>, KVVec<u8>),
    Ah(KVVec<Option<AhEntry>>),
    Pd(KVVec<Option<PdOwner>>),
}

impl Spare {
    /// `len` free slots for `kind`'s table (`EINVAL` for a kind whose
    /// table does not grow).
    pub(crate) fn new(kind: Kind, len: usize) -> Result<Self> {
        Ok(match kind {
            Kind::Qp => Spare::Qp(table(len)?),
            Kind::Cq => Spare::Cq(table(len)?),
            Kind::Srq => Spare::Srq(table(len)?),
            Kind::Mr => {
                let mut gen = KVVec::with_capacity(len, GFP_KERNEL_ACCOUNT)?;
                gen.resize(len, 0u8, GFP_KERNEL_ACCOUNT)?;
                Spare::Mr(table(len)?, gen)
            }
            Kind::Ah => Spare::Ah(table(len)?),
            Kind::Pd => Spare::Pd(table(len)?),
            Kind::Mcast => return Err(EINVAL),
        })
    }
}

impl DevState {
    pub(crate) fn new() -> Result<Self> {
        let mut mr_gen = KVVec::with_capacity(Kind::Mr.first_len(), GFP_KERNEL_ACCOUNT)?;
        mr_gen.resize(Kind::Mr.first_len(), 0u8, GFP_KERNEL_ACCOUNT)?;
        let pds = Kind::Pd.first_len();
        Ok(Self {
            qps: table(Kind::Qp.first_len())?,
            next_qp: 0,
            cqs: table(Kind::Cq.first_len())?,
            next_cq: 0,
            mrs: table(Kind::Mr.first_len())?,
            mr_gen,
            next_mr: 0,
            ahs: table(Kind::Ah.first_len())?,
            next_ah: 0,
            srqs: table(Kind::Srq.first_len())?,
            next_srq: 0,
            pds: table(pds)?,
            next_pd: crate::rdma::test_pd_start() as usize % pds,
            accounts: crate::driver::quota::Accounts::new(),
            cq_due: None,
            qp_due: None,
            qp_fault: None,
            qp_linger: None,
            lingering: 0,
            qp_ud: None,
            linger_spinning: false,
            mcast: {
                use crate::transport::mcast::{Group, Groups, MAX_GROUPS};
                let mut v = KVVec::with_capacity(MAX_GROUPS, GFP_KERNEL_ACCOUNT)?;
                v.resize(MAX_GROUPS, Group::EMPTY, GFP_KERNEL_ACCOUNT)?;
                Groups::new(v)
            },
            local_buf: {
                let n = crate::transport::wire::packet::tx_buffer_len(4096);
                let mut v = KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
                v.resize(n, 0, GFP_KERNEL_ACCOUNT)?;
                v
            },
            wire: core::array::from_fn(|_| crate::driver::window::WireSlot::default()),
            wire_woken: crate::driver::tx::Deferred::default(),
            rx_kicks: crate::driver::tx::Deferred::default(),
        })
    }

    /// The slots `kind`'s table has now.
    fn table_len(&self, kind: Kind) -> usize {
        match kind {
            Kind::Qp => self.qps.len(),
            Kind::Cq => self.cqs.len(),
            Kind::Srq => self.srqs.len(),
            Kind::Mr => self.mrs.len(),
            Kind::Ah => self.ahs.len(),
            Kind::Pd => self.pds.len(),
            Kind::Mcast => Kind::Mcast.max_len(),
        }
    }

    /// The length `kind`'s table doubles to (at most its largest), or
    /// `None` at its largest.
    pub(crate) fn grown_len(&self, kind: Kind) -> Option<usize> {
        let n = self.table_len(kind);
        (n < kind.max_len()).then(|| n.saturating_mul(2).clamp(1, kind.max_len()))
    }

    /// Moves `spare`'s table in (when it is longer than the one it
    /// replaces) and leaves the old storage, all free, in `spare`; drop it
    /// after the lock. Handles and keys are slot indices, which do not
    /// change; cursors stay where they were.
    pub(crate) fn grow(&mut self, spare: &mut Spare) -> bool {
        match spare {
            Spare::Qp(v) => move_into(&mut self.qps, v),
            Spare::Cq(v) => move_into(&mut self.cqs, v),
            Spare::Srq(v) => move_into(&mut self.srqs, v),
            Spare::Ah(v) => move_into(&mut self.ahs, v),
            Spare::Pd(v) => move_into(&mut self.pds, v),
            Spare::Mr(v, gen) => {
                if gen.len() != v.len() || !move_into(&mut self.mrs, v) {
                    return false;
                }
                for (to, from) in gen.iter_mut().zip(self.mr_gen.iter()) {
                    *to = *from;
                }
                core::mem::swap(&mut self.mr_gen, gen);
                true
            }
        }
    }

    /// A free QPN (the GSI QP asks for QPN 1).
    pub(crate) fn alloc_qpn(&mut self, gsi: bool, user: bool) -> Option<usize> {
        if gsi {
            return matches!(self.qps.get(GSI_QPN), Some(None)).then_some(GSI_QPN);
        }
        alloc_slot(&self.qps, &mut self.next_qp, FIRST_QPN, user)
    }

    pub(crate) fn qp(&mut self, qpn: u32) -> Option<&mut QpEntry> {
        self.qps.get_mut(qpn as usize)?.as_deref_mut()
    }

    /// Takes QP `qpn`'s sides out of their CQs' waiter lists (its destroy):
    /// a walk of each list it is in, bounded by the QP table.
    pub(crate) fn unlink_cq_waiters(&mut self, qpn: u32) {
        for side in 0..2u8 {
            let s = usize::from(side);
            let Some(e) = self.qps.get(qpn as usize).and_then(|e| e.as_deref()) else { return };
            if !e.cq_waiting.get(s).copied().unwrap_or(false) {
                continue;
            }
            let cq_idx = if side == 0 { e.send_cq } else { e.recv_cq };
            let next = e.cq_next.get(s).copied().flatten();
            let node = CqWaiter { qpn, side };
            let Some(cq) = self.cqs.get_mut(cq_idx).and_then(|c| c.as_deref_mut()) else { continue };
            if cq.waiters == Some(node) {
                cq.waiters = next;
            } else {
                let mut cur = cq.waiters;
                for _ in 0..self.qps.len().saturating_mul(2) {
                    let Some(c) = cur else { break };
                    let Some(p) = self.qps.get_mut(c.qpn as usize).and_then(|e| e.as_deref_mut()) else { break };
                    let Some(link) = p.cq_next.get_mut(usize::from(c.side)) else { break };
                    if *link == Some(node) {
                        *link = next;
                        break;
                    }
                    cur = *link;
                }
            }
            if let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) {
                if let (Some(w), Some(n)) = (e.cq_waiting.get_mut(s), e.cq_next.get_mut(s)) {
                    *w = false;
                    *n = None;
                }
            }
        }
    }

    /// Takes CQ `index` out of the list of CQs due (its destroy): a walk
    /// of the list, bounded by the CQ table.
    pub(crate) fn unlink_cq_due(&mut self, index: u32) {
        let Some(cq) = self.cqs.get_mut(index as usize).and_then(|c| c.as_deref_mut()) else { return };
        if !cq.event_due {
            return;
        }
        cq.event_due = false;
        let next = cq.due_next.take();
        if self.cq_due == Some(index) {
            self.cq_due = next;
            return;
        }
        let mut cur = self.cq_due;
        for _ in 0..self.cqs.len() {
            let Some(c) = cur else { break };
            let Some(p) = self.cqs.get_mut(c as usize).and_then(|c| c.as_deref_mut()) else { break };
            if p.due_next == Some(index) {
                p.due_next = next;
                break;
            }
            cur = p.due_next;
        }
    }

    /// Takes QP `qpn` out of the list of QPs with events due (its
    /// destroy).
    pub(crate) fn unlink_qp_due(&mut self, qpn: u32) {
        unlink_qp(&mut self.qps, &mut self.qp_due, qpn, |e| (&mut e.due_listed, &mut e.due_next));
    }

    /// Takes QP `qpn` out of the list of QPs waiting for a fault (its
    /// destroy).
    pub(crate) fn unlink_qp_fault(&mut self, qpn: u32) {
        unlink_qp(&mut self.qps, &mut self.qp_fault, qpn, |e| (&mut e.fault_listed, &mut e.fault_next));
    }

    /// Takes QP `qpn` out of the list of QPs that linger (its destroy).
    pub(crate) fn unlink_qp_linger(&mut self, qpn: u32) {
        if self.qp(qpn).is_some_and(|e| e.linger_listed) {
            self.lingering = self.lingering.saturating_sub(1);
        }
        unlink_qp(&mut self.qps, &mut self.qp_linger, qpn, |e| (&mut e.linger_listed, &mut e.linger_next));
    }

    /// Enters QP `qpn`, a process's UD QP, in the list of them.
    pub(crate) fn enter_qp_ud(&mut self, qpn: u32) {
        let _ = link_qp(&mut self.qps, &mut self.qp_ud, qpn, |e| (&mut e.ud_listed, &mut e.ud_next));
    }

    /// Takes QP `qpn` out of the list of the processes' UD QPs (its
    /// destroy).
    pub(crate) fn unlink_qp_ud(&mut self, qpn: u32) {
        unlink_qp(&mut self.qps, &mut self.qp_ud, qpn, |e| (&mut e.ud_listed, &mut e.ud_next));
    }

    /// Enters QP `qpn` in the list of QPs that linger, from `now`: true if
    /// the list was empty (the linger work may have ended: queue it).
    /// False, and nothing entered, for a QP already in it or a full list
    /// (see `enter_linger_room`).
    pub(crate) fn enter_linger(&mut self, qpn: u32, now: u64) -> bool {
        let head = self.qp_linger;
        let Some(e) = link_qp(&mut self.qps, &mut self.qp_linger, qpn, |e| (&mut e.linger_listed, &mut e.linger_next)) else {
            return false;
        };
        e.linger_since = now;
        self.lingering = self.lingering.saturating_add(1);
        head.is_none()
    }

    /// Takes out of the list of QPs that linger those whose linger is over
    /// (`done`: their process posted, or the time is up), at most
    /// `out.len()`, into `out` (each with `rings::linger_done` called);
    /// returns how many. A walk of the list, which `sched::MAX_LINGERING`
    /// bounds.
    pub(crate) fn take_lingering(&mut self, dev: &crate::driver::ferroce::FerroceDevice, out: &mut [u32], mut done: impl FnMut(&mut QpEntry) -> bool) -> usize {
        let mut n = 0usize;
        let mut prev: Option<u32> = None;
        let mut cur = self.qp_linger;
        for _ in 0..self.qps.len() {
            let Some(q) = cur else { break };
            if n >= out.len() {
                break;
            }
            let Some(e) = self.qps.get_mut(q as usize).and_then(|e| e.as_deref_mut()) else {
                // Cannot be (destroy unlinks): the list ends here.
                self.linger_link_after(prev, None);
                break;
            };
            let next = e.linger_next;
            if !done(e) {
                prev = Some(q);
                cur = next;
                continue;
            }
            e.linger_listed = false;
            e.linger_next = None;
            self.lingering = self.lingering.saturating_sub(1);
            crate::driver::rings::linger_done(dev, e, self.lingering);
            self.linger_link_after(prev, next);
            if let Some(slot) = out.get_mut(n) {
                *slot = q;
                n += 1;
            }
            cur = next;
        }
        n
    }

    /// In the list of QPs that linger, makes `next` follow `prev` (the
    /// list's head when `prev` is `None`).
    fn linger_link_after(&mut self, prev: Option<u32>, next: Option<u32>) {
        match prev.and_then(|p| self.qps.get_mut(p as usize)).and_then(|e| e.as_deref_mut()) {
            Some(p) => p.linger_next = next,
            None => self.qp_linger = next,
        }
    }

    /// Enters QP entry `e` (number `qpn`) in the list of QPs waiting for a
    /// fault of `f`'s pages (the newest access's range replaces an older
    /// one: each retry finds what is still absent).
    pub(crate) fn want_fault(head: &mut Option<u32>, e: &mut QpEntry, qpn: u32, f: FaultAt) {
        e.fault = Some(f);
        if !e.fault_listed {
            e.fault_listed = true;
            e.fault_next = head.replace(qpn);
        }
    }

    /// The next QP waiting for a fault, out of the list, with its range.
    pub(crate) fn next_fault(&mut self) -> Option<(u32, Option<FaultAt>)> {
        let qpn = self.qp_fault?;
        let Some(e) = self.qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else {
            // Cannot be (destroy unlinks): the list ends here.
            self.qp_fault = None;
            return None;
        };
        self.qp_fault = e.fault_next.take();
        e.fault_listed = false;
        Some((qpn, e.fault.take()))
    }

    /// The on-demand memory and the position of `len` bytes at `addr` of
    /// the region of L_Key `lkey` in PD `pd` (`ibv_advise_mr`): `EINVAL`
    /// for no such region of the PD, one not on demand or a range outside
    /// it, `EPERM` for `write` to a region without local write.
    pub(crate) fn odp_range(&self, pd: u32, lkey: u32, addr: u64, len: u32, write: bool) -> Result<(Odp, usize)> {
        let Some(mr) = self.mrs.get((lkey >> 8) as usize).and_then(|m| m.as_ref()) else { return Err(EINVAL) };
        let MrKind::User { pages: UserMem::Odp(odp), offset } = &mr.kind else { return Err(EINVAL) };
        if mr.key != lkey || mr.pd != pd {
            return Err(EINVAL);
        }
        let off = addr.checked_sub(mr.iova).ok_or(EINVAL)?;
        if off.checked_add(u64::from(len)).is_none_or(|end| end > mr.length) {
            return Err(EINVAL);
        }
        if write && mr.access & crate::transport::verbs::access::LOCAL_WRITE == 0 {
            return Err(EPERM);
        }
        let pos = user_pos(off, *offset).map_err(|_| EINVAL)?;
        Ok((odp.clone(), pos))
    }

    /// The on-demand memory of the region whose key is `key`, if it is
    /// still that region's, for a fault outside the lock.
    pub(crate) fn odp_of(&self, key: u32) -> Option<Odp> {
        match self.mrs.get((key >> 8) as usize).and_then(|m| m.as_ref()) {
            Some(MrEntry { key: k, kind: MrKind::User { pages, .. }, .. }) if *k == key => pages.odp().cloned(),
            _ => None,
        }
    }

    pub(crate) fn alloc_cq(&mut self, user: bool) -> Option<usize> {
        alloc_slot(&self.cqs, &mut self.next_cq, 0, user)
    }

    pub(crate) fn alloc_srq(&mut self, user: bool) -> Option<usize> {
        alloc_slot(&self.srqs, &mut self.next_srq, 0, user)
    }

    pub(crate) fn alloc_ah(&mut self, user: bool) -> Option<usize> {
        alloc_slot(&self.ahs, &mut self.next_ah, 1, user)
    }

    /// A new PD handle (never 0, never one of a live PD).
    pub(crate) fn alloc_pd(&mut self, owner: PdOwner) -> Option<u32> {
        let idx = alloc_slot(&self.pds, &mut self.next_pd, 1, owner == PdOwner::User)?;
        *self.pds.get_mut(idx)? = Some(owner);
        Some(idx as u32)
    }

    pub(crate) fn free_pd(&mut self, handle: u32) {
        if let Some(s) = self.pds.get_mut(handle as usize) {
            *s = None;
        }
    }

    /// Inserts a region and returns its key (L_Key = R_Key). Index 0 is never
    /// used, so key 0 is always invalid; the key byte is random, and never
    /// the one the index had before, so a freed key does not come back at
    /// once and a key cannot be guessed from the order of registrations.
    pub(crate) fn insert_mr(&mut self, mut mr: MrEntry) -> core::result::Result<u32, MrEntry> {
        let user = matches!(mr.kind, MrKind::User { .. } | MrKind::Window(_));
        let Some(idx) = alloc_slot(&self.mrs, &mut self.next_mr, 1, user) else { return Err(mr) };
        let Some(gen) = self.mr_gen.get_mut(idx) else { return Err(mr) };
        let mut byte = (crate::rdma::random_u32() & 0xff) as u8;
        if byte == *gen {
            byte = byte.wrapping_add(1);
        }
        *gen = byte;
        let key = ((idx as u32) << 8) | u32::from(*gen);
        mr.key = key;
        match self.mrs.get_mut(idx) {
            Some(slot) => {
                *slot = Some(mr);
                Ok(key)
            }
            None => Err(mr),
        }
    }

    /// Removes the region at table index `index` (`key >> 8`: the index
    /// does not change with the consumer's key byte of a fast region).
    pub(crate) fn remove_mr_at(&mut self, index: u32) -> Option<MrEntry> {
        self.mrs.get_mut(index as usize)?.take()
    }
}

/// Enters QP `qpn` at the head of the list `head` threaded through the
/// QP entries by `link` (its listed flag and next field), the twin of
/// `unlink_qp`; the entry. None, and nothing done, for a QP not in the
/// table or already listed.
fn link_qp<'a>(
    qps: &'a mut [Option<KBox<QpEntry>>],
    head: &mut Option<u32>,
    qpn: u32,
    link: impl Fn(&mut QpEntry) -> (&mut bool, &mut Option<u32>),
) -> Option<&'a mut QpEntry> {
    let e = qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut())?;
    let (listed, next) = link(e);
    if *listed {
        return None;
    }
    *listed = true;
    *next = head.replace(qpn);
    Some(e)
}

/// Takes QP `qpn` out of a singly linked list of QPs whose head is `head`
/// and whose "listed" flag and next node `link` names: a walk of the
/// list, bounded by the QP table.
pub(super) fn unlink_qp(
    qps: &mut [Option<KBox<QpEntry>>],
    head: &mut Option<u32>,
    qpn: u32,
    link: impl Fn(&mut QpEntry) -> (&mut bool, &mut Option<u32>),
) {
    let Some(e) = qps.get_mut(qpn as usize).and_then(|e| e.as_deref_mut()) else { return };
    let (listed, next) = link(e);
    if !*listed {
        return;
    }
    *listed = false;
    let next = next.take();
    if *head == Some(qpn) {
        *head = next;
        return;
    }
    let mut cur = *head;
    for _ in 0..qps.len() {
        let Some(c) = cur else { break };
        let Some(p) = qps.get_mut(c as usize).and_then(|e| e.as_deref_mut()) else { break };
        let (_, pn) = link(p);
        if *pn == Some(qpn) {
            *pn = next;
            break;
        }
        cur = *pn;
    }
}

/// Who owns a PD: the kernel, or a process (its QPs never reach the
/// kernel's regions).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PdOwner {
    Kernel,
    User,
}

/// The engine's view of this device's memory regions; refused references
/// are counted on the device.
pub(crate) struct Mem<'a> {
    pub(crate) mrs: &'a mut [Option<MrEntry>],
    pub(crate) dev: &'a crate::driver::ferroce::FerroceDevice,
    /// The QP is a process's: regions of kernel addresses (`MrKind::Dma`,
    /// `MrKind::Fast`) are refused to it whatever its PD.
    pub(crate) user: bool,
    /// The QP's number: a type 2B window is bound to, reached through and
    /// invalidated by one QP.
    pub(crate) qpn: u32,
    /// The pages of memory on demand the last refused access needed
    /// ([`MemError::Fault`]): the glue hands them to the fault work.
    pub(crate) fault: Option<FaultAt>,
}

impl<'a> Mem<'a> {
    /// The view for QP entry `e`.
    pub(crate) fn of(mrs: &'a mut [Option<MrEntry>], dev: &'a crate::driver::ferroce::FerroceDevice, e: &QpEntry) -> Self {
        Mem { mrs, dev, user: e.rings.is_some(), qpn: e.qp.qpn(), fault: None }
    }

    /// Notes the pages an access to memory on demand found absent.
    fn noted<T>(&mut self, r: core::result::Result<T, MemError>, at: Option<FaultAt>) -> core::result::Result<T, MemError> {
        if let (Err(MemError::Fault), Some(at)) = (&r, at) {
            self.dev.count(crate::rdma::Counter::OdpAbsent);
            self.fault = Some(at);
        }
        r
    }
}

impl Mem<'_> {
    /// The region `key` names, checked for PD, access (`write`, or the
    /// atomic right when `atomic`) and bounds.
    fn lookup(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> core::result::Result<&MrEntry, MemError> {
        self.lookup_need(pd, key, va, len, write, false)
    }

    fn lookup_need(
        &mut self,
        pd: u32,
        key: Key,
        va: u64,
        len: u64,
        write: bool,
        atomic: bool,
    ) -> core::result::Result<&MrEntry, MemError> {
        self.lookup_rights(pd, key, va, len, needed_access(key, write, atomic))
    }

    /// The region `key` names, checked for PD, the rights `need` and
    /// bounds; a refusal is counted.
    fn lookup_rights(&mut self, pd: u32, key: Key, va: u64, len: u64, need: u32) -> core::result::Result<&MrEntry, MemError> {
        use crate::rdma::Counter;
        let dev = self.dev;
        self.find(pd, key, va, len, need).inspect_err(|e| {
            dev.count(match e {
                MemError::InvalidKey => Counter::MemBadKey,
                MemError::PdMismatch => Counter::MemBadPd,
                MemError::AccessDenied => Counter::MemNoAccess,
                MemError::OutOfBounds | MemError::Misaligned => Counter::MemOutOfBounds,
                MemError::Fault => Counter::OdpAbsent,
            })
        })
    }

    fn find(&mut self, pd: u32, key: Key, va: u64, len: u64, need: u32) -> core::result::Result<&MrEntry, MemError> {
        let k = match key {
            Key::Local(k) | Key::Remote(k) => k,
        };
        let user = self.user;
        let mut mr = self.mrs.get((k >> 8) as usize).and_then(|m| m.as_ref()).ok_or(MemError::InvalidKey)?;
        if let Some(win) = mr.window() {
            // A window has an R_Key only; its checks (IBTA 10.6.7) replace
            // the region's rights, then the bytes are the region's.
            let Key::Remote(_) = key else { return Err(MemError::InvalidKey) };
            let mr_key = check_window(&win, k, pd, self.qpn, need, va, len)?;
            mr = self.mrs.get((mr_key >> 8) as usize).and_then(|m| m.as_ref()).ok_or(MemError::InvalidKey)?;
            if mr.key != mr_key || matches!(mr.kind, MrKind::Window(_)) {
                return Err(MemError::InvalidKey);
            }
            return Ok(mr);
        }
        // The IBTA checks, in order, are the engine's (host-tested):
        // an invalid (free) fast region names no memory; kernel virtual
        // addresses belong to kernel QPs only (a process's QP can name such
        // a region by no PD handle: defence in depth behind the handles'
        // uniqueness).
        check_region(&mr.region(), k, pd, user, need, va, len)?;
        Ok(mr)
    }
}

/// The position in a process's pinned range of byte `off` of its region,
/// which starts `first` bytes into the first page.
fn user_pos(off: u64, first: usize) -> core::result::Result<usize, MemError> {
    usize::try_from(off).ok().and_then(|o| o.checked_add(first)).ok_or(MemError::OutOfBounds)
}

impl Memory for Mem<'_> {
    fn read(&mut self, pd: u32, key: Key, va: u64, dst: &mut [u8]) -> core::result::Result<(), MemError> {
        let mr = self.lookup(pd, key, va, dst.len() as u64, false)?;
        let (r, at) = match &mr.kind {
            MrKind::Dma(mem) => {
                mem.read(va, dst);
                (Ok(()), None)
            }
            MrKind::User { pages, offset } => {
                let pos = user_pos(va - mr.iova, *offset)?;
                (pages.read(pos, dst), Some(FaultAt { key: mr.key, pos, len: dst.len(), write: false }))
            }
            MrKind::Fast(f) => (f.read(va - mr.iova, dst), None),
            MrKind::Window(_) => (Err(MemError::InvalidKey), None),
        };
        self.noted(r, at)
    }

    fn write(&mut self, pd: u32, key: Key, va: u64, src: &[u8]) -> core::result::Result<(), MemError> {
        let mr = self.lookup(pd, key, va, src.len() as u64, true)?;
        let (r, at) = match &mr.kind {
            MrKind::Dma(mem) => {
                mem.write(va, src);
                (Ok(()), None)
            }
            MrKind::User { pages, offset } => {
                let pos = user_pos(va - mr.iova, *offset)?;
                (pages.write(pos, src), Some(FaultAt { key: mr.key, pos, len: src.len(), write: true }))
            }
            MrKind::Fast(f) => (f.write(va - mr.iova, src), None),
            MrKind::Window(_) => (Err(MemError::InvalidKey), None),
        };
        self.noted(r, at)
    }

    /// Key, PD, rights and bounds; for memory on demand, also whether the
    /// pages are present now (else [`MemError::Fault`], noted).
    fn check(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> core::result::Result<(), MemError> {
        let mr = self.lookup(pd, key, va, len, write)?;
        let (r, at) = match &mr.kind {
            MrKind::User { pages: p @ UserMem::Odp(_), offset } => {
                let pos = user_pos(va - mr.iova, *offset)?;
                let n = usize::try_from(len).map_err(|_| MemError::OutOfBounds)?;
                (p.present(pos, len, write), Some(FaultAt { key: mr.key, pos, len: n, write }))
            }
            _ => (Ok(()), None),
        };
        self.noted(r, at)
    }

    fn compare_swap(&mut self, pd: u32, rkey: u32, va: u64, compare: u64, swap: u64) -> core::result::Result<u64, MemError> {
        self.atomic(pd, rkey, va, true, |m, addr| m.compare_swap(addr, compare, swap), |u, pos| u.compare_swap(pos, compare, swap))
    }

    fn invalidate(&mut self, pd: u32, rkey: u32) -> core::result::Result<(), MemError> {
        // A type 2B window of the QP's (SEND with Invalidate from the
        // peer, LOCAL_INV from the owner), or a kernel consumer's fast
        // region; the key must be the current one, consumer byte included.
        let qpn = self.qpn;
        let idx = (rkey >> 8) as usize;
        if let Some(win) = self.mrs.get(idx).and_then(|m| m.as_ref()).and_then(MrEntry::window) {
            check_invalidate(&win, rkey, pd, qpn)?;
            return self.unbind(idx);
        }
        if self.user {
            // Fast regions are the kernel's: no process QP touches them.
            return Err(MemError::InvalidKey);
        }
        let mr = self
            .mrs
            .get_mut((rkey >> 8) as usize)
            .and_then(|m| m.as_mut())
            .filter(|m| m.key == rkey)
            .ok_or(MemError::InvalidKey)?;
        if mr.pd != pd {
            return Err(MemError::PdMismatch);
        }
        match &mut mr.kind {
            MrKind::Fast(f) => {
                f.valid = false;
                Ok(())
            }
            _ => Err(MemError::InvalidKey),
        }
    }

    fn fast_register(&mut self, pd: u32, reg: &FastReg) -> core::result::Result<(), MemError> {
        if self.user {
            return Err(MemError::InvalidKey);
        }
        let mr = self.mrs.get_mut(reg.mr as usize).and_then(|m| m.as_mut()).ok_or(MemError::InvalidKey)?;
        // The consumer owns the key's low byte only.
        if reg.key >> 8 != reg.mr {
            return Err(MemError::InvalidKey);
        }
        if mr.pd != pd {
            return Err(MemError::PdMismatch);
        }
        let MrKind::Fast(f) = &mut mr.kind else {
            return Err(MemError::InvalidKey);
        };
        // IBTA: only a free (invalid) region can be registered.
        if f.valid {
            return Err(MemError::InvalidKey);
        }
        if reg.access & !(access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC) != 0 {
            return Err(MemError::AccessDenied);
        }
        let mapped = (f.npages as u64)
            .checked_mul(f.page_size)
            .and_then(|b| b.checked_sub(f.first_off))
            .ok_or(MemError::OutOfBounds)?;
        if reg.length > mapped || reg.iova.checked_add(reg.length).is_none() {
            return Err(MemError::OutOfBounds);
        }
        mr.key = reg.key;
        mr.access = reg.access;
        mr.iova = reg.iova;
        mr.length = reg.length;
        f.valid = true;
        Ok(())
    }

    fn fetch_add(&mut self, pd: u32, rkey: u32, va: u64, add: u64) -> core::result::Result<u64, MemError> {
        self.atomic(pd, rkey, va, true, |m, addr| m.fetch_add(addr, add), |u, pos| u.fetch_add(pos, add))
    }

    fn atomic_write(&mut self, pd: u32, rkey: u32, va: u64, value: [u8; 8]) -> core::result::Result<(), MemError> {
        let v = u64::from_ne_bytes(value);
        self.atomic(pd, rkey, va, false, |m, addr| m.write64(addr, v), |u, pos| u.write64(pos, v)).map(|_| ())
    }

    fn flush(&mut self, pd: u32, rkey: u32, va: u64, len: u64, need: u32, whole: bool) -> core::result::Result<(), MemError> {
        // The whole region (or window): its rights only, from its own
        // first address.
        let (va, len) = if whole {
            let base = match self.mrs.get((rkey >> 8) as usize) {
                Some(Some(MrEntry { kind: MrKind::Window(w), .. })) => w.binding.map(|b| b.addr),
                Some(Some(mr)) => Some(mr.iova),
                _ => None,
            };
            (base.unwrap_or(0), 0)
        } else {
            (va, len)
        };
        self.lookup_rights(pd, Key::Remote(rkey), va, len, need).map(|_| ())
    }

    fn bind_mw(&mut self, pd: u32, bind: &MwBind) -> core::result::Result<(), MemError> {
        let idx = (bind.mw_key >> 8) as usize;
        let win = self.mrs.get(idx).and_then(|m| m.as_ref()).and_then(MrEntry::window).ok_or(MemError::InvalidKey)?;
        let mr_idx = (bind.mr_key >> 8) as usize;
        let region = match self.mrs.get(mr_idx) {
            Some(Some(mr)) if mr_idx != idx && !matches!(mr.kind, MrKind::Window(_)) => Some(mr.region()),
            _ => None,
        };
        let binding = check_bind(&win, region.as_ref(), pd, self.qpn, bind)?;
        // A type 1 window may be bound again while bound: its old region
        // lets it go first.
        if win.binding.is_some() {
            self.unbind(idx)?;
        }
        if let Some(b) = binding {
            match self.mrs.get_mut(mr_idx) {
                Some(Some(mr)) => mr.windows = mr.windows.saturating_add(1),
                _ => return Err(MemError::InvalidKey),
            }
            if let Some(Some(MrEntry { kind: MrKind::Window(w), .. })) = self.mrs.get_mut(idx) {
                w.binding = Some(b);
            }
        }
        if let Some(Some(e)) = self.mrs.get_mut(idx) {
            e.key = bind.new_key;
        }
        Ok(())
    }
}

impl Mem<'_> {
    /// Unbinds the window at table index `idx`: its region lets it go.
    fn unbind(&mut self, idx: usize) -> core::result::Result<(), MemError> {
        let b = match self.mrs.get_mut(idx) {
            Some(Some(MrEntry { kind: MrKind::Window(w), .. })) => w.binding.take(),
            _ => return Err(MemError::InvalidKey),
        };
        if let Some(b) = b {
            unbind_from(self.mrs, b.mr_key);
        }
        Ok(())
    }
}

/// The region of key `mr_key` lets one bound window go.
pub(crate) fn unbind_from(mrs: &mut [Option<MrEntry>], mr_key: u32) {
    if let Some(Some(mr)) = mrs.get_mut((mr_key >> 8) as usize) {
        if mr.key == mr_key {
            mr.windows = mr.windows.saturating_sub(1);
        }
    }
}

impl Mem<'_> {
    /// Runs an 8-byte atomic on the region: `on_kernel` for kernel memory
    /// (the address), `on_user` for pinned pages (the aligned position in
    /// the pinned range, so inside one page).
    /// `rmw`: a read-modify-write (needs `REMOTE_ATOMIC`), else an ATOMIC
    /// WRITE (needs `REMOTE_WRITE`).
    fn atomic(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        rmw: bool,
        on_kernel: impl FnOnce(&KernelMem, u64) -> core::result::Result<u64, MemError>,
        on_user: impl FnOnce(&UserMem, usize) -> core::result::Result<u64, MemError>,
    ) -> core::result::Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let mr = self.lookup_need(pd, Key::Remote(rkey), va, 8, true, rmw)?;
        match &mr.kind {
            MrKind::Dma(mem) => on_kernel(mem, va),
            MrKind::User { pages, offset } => {
                let pos = user_pos(va - mr.iova, *offset)?;
                let at = FaultAt { key: mr.key, pos, len: 8, write: true };
                let r = on_user(pages, pos);
                self.noted(r, Some(at))
            }
            MrKind::Fast(f) => {
                let (addr, run) = f.at(va - mr.iova)?;
                // Pages are at least PAGE_SIZE aligned, `va` is 8-aligned,
                // so the 8 bytes are in one page unless the region starts
                // misaligned in it.
                if addr % 8 != 0 || run < 8 {
                    return Err(MemError::Misaligned);
                }
                on_kernel(&f.mem, addr)
            }
            MrKind::Window(_) => Err(MemError::InvalidKey),
        }
    }
}
