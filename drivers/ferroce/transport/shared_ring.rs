//! The index rules of the rings a process shares with the kernel.
//!
//! A ring has a power-of-two number of slots and two free-running 32-bit
//! indices in its header: the producer's and the consumer's. One side of
//! each is the process, which may write anything there at any time. These
//! functions decide, from a value read once, what the kernel may do; none
//! of them can be made to claim more than the ring holds, and an impossible
//! index reads as "nothing" (a queue the kernel takes from) or "full" (a
//! queue the kernel writes to), never as room to overwrite. The glue
//! (`driver/rings.rs`, `driver/tables.rs`) reads the indices and moves the
//! bytes.
//!
//! A slot's copy is validated here too ([`send_wqe`], [`recv_wqe`]): the
//! glue copies the process's slot once into an [`SqSlot`] or [`RqSlot`]
//! and gives the engine only what these functions accept.

use super::verbs::{send_flags, MwBind, Payload, RecvWqe, SendWqe, Sge, WrOpcode, MAX_INLINE, MAX_SGE};

/// Requests a process's producer index `prod` claims beyond the `taken`
/// the kernel has consumed, or None when the claim is impossible: with the
/// `in_engine` requests the kernel still holds, more outstanding than the
/// ring's `entries` (a scribbled index; the caller fails the QP).
pub fn claimed(prod: u32, taken: u32, in_engine: usize, entries: u32) -> Option<u32> {
    let new = prod.wrapping_sub(taken);
    let outstanding = u64::from(new).saturating_add(u64::try_from(in_engine).unwrap_or(u64::MAX));
    (outstanding <= u64::from(entries)).then_some(new)
}

/// The oldest entry of a shared receive queue is there to take: the
/// producer is ahead of `taken` by 1..=`entries`. A claim beyond the ring
/// reads as empty.
pub fn srq_has_entry(prod: u32, taken: u32, entries: u32) -> Option<u32> {
    let avail = prod.wrapping_sub(taken);
    (avail != 0 && avail <= entries).then_some(avail)
}

/// Entries of a ring the kernel produces into (a CQ) that the process has
/// not consumed yet, from the process's consumer index `cons`, bounded by
/// the ring.
pub fn unread(prod: u32, cons: u32, entries: u32) -> u32 {
    prod.wrapping_sub(cons).min(entries)
}

/// Whether a ring the kernel produces into claims more unread entries than
/// it holds: its consumer index was scribbled (a CQ error, not a full CQ).
pub fn overrun(prod: u32, cons: u32, entries: u32) -> bool {
    prod.wrapping_sub(cons) > entries
}

/// Whether the kernel may write one more entry into a ring it produces
/// into. A consumer index ahead of the producer (scribbled) reads as full:
/// the queue stops, nothing unread is overwritten.
pub fn has_room(prod: u32, cons: u32, entries: u32) -> bool {
    prod.wrapping_sub(cons) < entries
}

/// A copy of one SQ slot (the ABI's `ferroce_sq_wqe`), field by field, as
/// the process wrote it: nothing in it is trusted.
#[derive(Clone, Copy, Default)]
pub struct SqSlot {
    pub wr_id: u64,
    pub opcode: u32,
    pub send_flags: u32,
    pub num_sge: u32,
    pub inline_len: u32,
    /// Big-endian for the immediate opcodes, the R_Key for SEND with
    /// Invalidate (as `ibv_send_wr.imm_data` / `invalidate_rkey`).
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// UD: the address handle, destination QP and Q_Key.
    pub ah: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    /// BIND_MW: the region's L_Key and the rights the window grants (the
    /// window's current R_Key is in `imm_data`, its new one in `rkey`,
    /// the range in `remote_addr` and `compare_add`).
    pub bind_lkey: u32,
    pub bind_access: u32,
    /// The ring's union, read as what `send_flags` says: inline bytes or a
    /// gather list (its count here is not yet checked: `num_sge` and
    /// `inline_len` are what the process wrote).
    pub data: Payload,
}

/// A copy of one RQ or SRQ slot (the ABI's `ferroce_rq_wqe`).
#[derive(Clone, Copy, Default)]
pub struct RqSlot {
    pub wr_id: u64,
    pub num_sge: u32,
    pub sge: [Sge; MAX_SGE],
}

/// What a UD QP's send slot is checked against.
#[derive(Clone, Copy)]
pub struct UdSend {
    /// The QP's PD.
    pub pd: u32,
    /// The PD of the AH the slot names, None when there is no such AH.
    pub ah_pd: Option<u32>,
    /// The longest message (the path MTU fixed at creation).
    pub max_msg: u32,
}

/// The engine's send WQE for a slot's copy, or None when the copy is
/// malformed: an unknown opcode or flag, more inline bytes or SGEs than
/// allowed (`max_sge`: the QP's), and for a UD QP (`ud`) an opcode other
/// than SEND, an AH that does not exist or belongs to another PD (IBTA
/// 10.2.3: a handle of another process names another PD), or a message
/// longer than the path MTU.
pub fn send_wqe(w: &SqSlot, max_sge: u32, ud: Option<UdSend>) -> Option<SendWqe> {
    let opcode = WrOpcode::from_u32(w.opcode)?;
    let flags = w.send_flags;
    let known = send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE;
    if flags & !known != 0 {
        return None;
    }
    // A local operation moves no data: a gather list or inline bytes
    // there is a malformed request.
    // FLUSH and ATOMIC WRITE carry theirs in the slot itself.
    if (opcode.is_local() || opcode.is_placement()) && (w.num_sge != 0 || flags & send_flags::INLINE != 0) {
        return None;
    }
    let mut wqe = SendWqe {
        wr_id: w.wr_id,
        opcode,
        send_flags: flags,
        remote_addr: w.remote_addr,
        rkey: w.rkey,
        compare_add: w.compare_add,
        swap: w.swap,
        ..SendWqe::default()
    };
    wqe.data = match (&w.data, flags & send_flags::INLINE != 0) {
        (Payload::Inline { bytes, .. }, true) => {
            let n = usize::try_from(w.inline_len).ok().filter(|&n| n <= MAX_INLINE)?;
            Payload::Inline { bytes: *bytes, len: u16::try_from(n).ok()? }
        }
        (Payload::Gather { list, .. }, false) => {
            let n = usize::try_from(w.num_sge).ok().filter(|&n| n <= MAX_SGE && n <= max_sge as usize)?;
            Payload::Gather { list: *list, n: u8::try_from(n).ok()? }
        }
        _ => return None,
    };
    wqe.imm_data = match opcode {
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => u32::from_be(w.imm_data),
        // The R_Key to invalidate; FLUSH: the FETH bits.
        WrOpcode::SendWithInv | WrOpcode::LocalInv | WrOpcode::Flush => w.imm_data,
        _ => 0,
    };
    if opcode == WrOpcode::BindMw {
        wqe.bind = MwBind {
            mw_key: w.imm_data,
            new_key: w.rkey,
            mr_key: w.bind_lkey,
            access: w.bind_access,
            addr: w.remote_addr,
            length: w.compare_add,
        };
    }
    if let Some(ud) = ud {
        if !matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm) || ud.ah_pd != Some(ud.pd) {
            return None;
        }
        wqe.ah = w.ah;
        wqe.remote_qpn = w.remote_qpn & 0xff_ffff;
        wqe.remote_qkey = w.remote_qkey;
        if wqe.length()? > ud.max_msg {
            return None;
        }
    }
    Some(wqe)
}

/// The engine's receive WQE for a slot's copy, or None when it names more
/// SGEs than allowed (`max_sge`: the QP's or SRQ's).
pub fn recv_wqe(w: &RqSlot, max_sge: u32) -> Option<RecvWqe> {
    let n = usize::try_from(w.num_sge).ok().filter(|&n| n <= MAX_SGE && n <= max_sge as usize)?;
    let mut wqe = RecvWqe { wr_id: w.wr_id, ..RecvWqe::default() };
    for (o, s) in wqe.sg_list.iter_mut().zip(w.sge.iter()).take(n) {
        *o = *s;
    }
    wqe.num_sge = u8::try_from(n).ok()?;
    Some(wqe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_bounded_by_the_ring() {
        assert_eq!(claimed(5, 5, 0, 8), Some(0));
        assert_eq!(claimed(13, 5, 0, 8), Some(8), "a full ring");
        assert_eq!(claimed(13, 5, 1, 8), None, "one more than the ring holds, with one in the kernel");
        assert_eq!(claimed(14, 5, 0, 8), None);
        assert_eq!(claimed(4, 5, 0, 8), None, "a producer behind the consumer: 2^32 - 1 claimed");
        assert_eq!(claimed(2, u32::MAX - 1, 0, 8), Some(4), "across the wrap of the free-running index");
        assert_eq!(claimed(0, 0, usize::MAX, 8), None);
    }

    #[test]
    fn a_consumer_index_ahead_of_the_producer_is_an_overrun_a_full_ring_is_not() {
        assert!(!overrun(8, 0, 8), "full");
        assert!(!overrun(3, 1, 8));
        assert!(!overrun(2, u32::MAX - 1, 8), "across the wrap");
        assert!(overrun(9, 0, 8));
        assert!(overrun(5, 100_005, 8), "cons = prod + 100000");
        assert!(overrun(0, 1, 8), "cons one ahead");
    }

    #[test]
    fn an_srq_claim_beyond_the_ring_is_empty() {
        assert_eq!(srq_has_entry(7, 7, 16), None);
        assert_eq!(srq_has_entry(8, 7, 16), Some(1));
        assert_eq!(srq_has_entry(23, 7, 16), Some(16));
        assert_eq!(srq_has_entry(24, 7, 16), None);
        assert_eq!(srq_has_entry(0xffff_fff0, 7, 16), None);
    }

    #[test]
    fn a_scribbled_consumer_never_makes_room() {
        // Normal: 3 unread of 4, room for one more.
        assert_eq!(unread(10, 7, 4), 3);
        assert!(has_room(10, 7, 4));
        assert!(!has_room(11, 7, 4), "full");
        // The process wrote a consumer index ahead of the producer.
        assert_eq!(unread(10, 11, 4), 4, "reads as full, not as 2^32 - 1");
        assert!(!has_room(10, 11, 4));
        assert!(!has_room(10, 0x8000_0000, 4));
        // Across the wrap.
        assert_eq!(unread(1, u32::MAX, 4), 2);
        assert!(has_room(1, u32::MAX, 4));
    }

    fn sge(len: u32) -> Sge {
        Sge { addr: 0x1000, length: len, lkey: 7 }
    }

    fn send(opcode: WrOpcode) -> SqSlot {
        SqSlot { wr_id: 42, opcode: opcode as u32, num_sge: 1, data: gather(&[sge(100)]), ..SqSlot::default() }
    }

    fn gather(list: &[Sge]) -> Payload {
        Payload::gather(list).expect("at most MAX_SGE")
    }

    const UD: UdSend = UdSend { pd: 3, ah_pd: Some(3), max_msg: 1024 };

    #[test]
    fn a_well_formed_send_slot_becomes_its_wqe() {
        let mut w = send(WrOpcode::SendWithImm);
        w.imm_data = 0x1234_5678u32.to_be();
        w.send_flags = send_flags::SIGNALED | send_flags::SOLICITED;
        let q = send_wqe(&w, 2, None).expect("accepted");
        assert_eq!((q.wr_id, q.opcode, q.sges().len(), q.imm_data), (42, WrOpcode::SendWithImm, 1, 0x1234_5678));
        assert_eq!(q.sges()[0].length, 100);
        let mut inv = send(WrOpcode::SendWithInv);
        inv.imm_data = 0xabcd;
        assert_eq!(send_wqe(&inv, 2, None).map(|q| q.imm_data), Some(0xabcd), "the R_Key as it is");
    }

    #[test]
    fn a_bind_slot_carries_the_window_the_region_and_the_range() {
        let w = SqSlot {
            opcode: WrOpcode::BindMw as u32,
            imm_data: 0x1234_5601,
            rkey: 0x1234_5602,
            bind_lkey: 0x77_0003,
            bind_access: 6,
            remote_addr: 0x1000,
            compare_add: 0x200,
            ..SqSlot::default()
        };
        let q = send_wqe(&w, 2, None).expect("accepted");
        assert_eq!(q.opcode, WrOpcode::BindMw);
        assert_eq!(q.bind, MwBind { mw_key: 0x1234_5601, new_key: 0x1234_5602, mr_key: 0x77_0003, access: 6, addr: 0x1000, length: 0x200 });
        let inv = SqSlot { opcode: WrOpcode::LocalInv as u32, imm_data: 0xabcd, ..SqSlot::default() };
        assert_eq!(send_wqe(&inv, 2, None).map(|q| q.imm_data), Some(0xabcd), "the R_Key as it is");
        assert!(send_wqe(&SqSlot { num_sge: 1, ..w }, 2, None).is_none(), "a local operation with a gather list");
        assert!(send_wqe(&SqSlot { send_flags: send_flags::INLINE, ..inv }, 2, None).is_none(), "inline");
        assert!(send_wqe(&SqSlot { opcode: WrOpcode::RegMr as u32, ..inv }, 2, None).is_none(), "fast registration is the kernel's");
        let ud = UdSend { pd: 1, ah_pd: Some(1), max_msg: 4096 };
        assert!(send_wqe(&w, 2, Some(ud)).is_none(), "no bind on UD");
    }

    #[test]
    fn malformed_send_slots_are_refused() {
        let mut w = send(WrOpcode::Send);
        w.opcode = 0xdead;
        assert!(send_wqe(&w, 2, None).is_none(), "unknown opcode");
        let mut w = send(WrOpcode::Send);
        w.send_flags = 1 << 20;
        assert!(send_wqe(&w, 2, None).is_none(), "unknown flag");
        let mut w = send(WrOpcode::Send);
        w.num_sge = 3;
        assert!(send_wqe(&w, 2, None).is_none(), "more SGEs than the QP allows");
        w.num_sge = MAX_SGE as u32 + 1;
        assert!(send_wqe(&w, u32::MAX, None).is_none(), "more SGEs than a slot holds");
        let mut w = send(WrOpcode::Send);
        w.send_flags = send_flags::INLINE;
        assert!(send_wqe(&w, 2, None).is_none(), "the inline flag over a gather list");
        w.data = Payload::inline(&[0x5a; MAX_INLINE]).expect("fits");
        w.inline_len = MAX_INLINE as u32 + 1;
        assert!(send_wqe(&w, 2, None).is_none(), "more inline bytes than a slot holds");
        w.inline_len = MAX_INLINE as u32;
        let q = send_wqe(&w, 2, None).expect("a full slot of inline bytes");
        assert_eq!((q.inline_data().len(), q.length()), (MAX_INLINE, Some(MAX_INLINE as u32)));
        assert!(q.inline_data().iter().all(|&b| b == 0x5a));
        w.send_flags = 0;
        assert!(send_wqe(&w, 2, None).is_none(), "inline bytes without the inline flag");
    }

    #[test]
    fn a_ud_slot_needs_a_send_to_an_ah_of_its_pd_within_the_mtu() {
        assert!(send_wqe(&send(WrOpcode::Send), 2, Some(UD)).is_some());
        assert!(send_wqe(&send(WrOpcode::RdmaWrite), 2, Some(UD)).is_none(), "UD has no RDMA");
        let other = UdSend { ah_pd: Some(4), ..UD };
        assert!(send_wqe(&send(WrOpcode::Send), 2, Some(other)).is_none(), "another PD's AH");
        let none = UdSend { ah_pd: None, ..UD };
        assert!(send_wqe(&send(WrOpcode::Send), 2, Some(none)).is_none(), "no such AH");
        let mut long = send(WrOpcode::Send);
        long.data = gather(&[sge(1025)]);
        assert!(send_wqe(&long, 2, Some(UD)).is_none(), "longer than the path MTU");
        let mut w = send(WrOpcode::Send);
        w.remote_qpn = 0xff00_0012;
        assert_eq!(send_wqe(&w, 2, Some(UD)).map(|q| q.remote_qpn), Some(0x12), "24-bit QPN");
    }

    #[test]
    fn receive_slots_are_bounded_by_the_queues_sges() {
        let mut w = RqSlot { wr_id: 9, num_sge: 2, ..RqSlot::default() };
        w.sge[1] = sge(64);
        assert_eq!(recv_wqe(&w, 2).map(|q| (q.wr_id, q.length())), Some((9, 64)));
        assert!(recv_wqe(&w, 1).is_none());
        w.num_sge = u32::MAX;
        assert!(recv_wqe(&w, u32::MAX).is_none());
    }
}
