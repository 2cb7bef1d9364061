//! UD rules of IBTA chapter 9/10 as summarised in seeds 000 (requester) and
//! 002 (responder): one named test per rule.

mod common;

use common::*;
use ferroce_transport::engine::{DropReason, NetHeader, RxOutcome};
use ferroce_transport::error::Error;
use ferroce_transport::wire::packet::{self, Headers, TransportPacket};
use ferroce_transport::wire::{DethRepr, ImmDtRepr};
use ferroce_transport::qp::{Mtu, QpState};
use ferroce_transport::verbs::{access, send_flags, wc_flags, WcOpcode, WcStatus, WrOpcode};
use ferroce_transport::wire::{Opcode, Psn};

const QKEY: u32 = 0x1111_2222;

struct Ud {
    a: TestQp,
    b: TestQp,
    ma: VecMemory,
    mb: VecMemory,
    src: u32,
    dst: u32,
}

fn setup() -> Ud {
    let a = ud_qp(0x10, 0x0bad_0bad, Mtu::Mtu1024, 100);
    let b = ud_qp(0x20, QKEY, Mtu::Mtu1024, 500);
    let mut ma = VecMemory::default();
    let mut mb = VecMemory::default();
    let src = ma.register(PD, 0x1000, 8192, access::LOCAL_WRITE);
    for (i, x) in ma.region_mut(src).data.iter_mut().enumerate() {
        *x = i as u8;
    }
    let dst = mb.register(PD, 0x9000, 8192, access::LOCAL_WRITE);
    Ud { a, b, ma, mb, src, dst }
}

fn ud_send(wr_id: u64, len: u32, src: u32, qkey: u32) -> ferroce_transport::verbs::SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::Send, &[(0x1000, len, src)]);
    w.remote_qpn = 0x20;
    w.remote_qkey = qkey;
    w.ah = 3;
    w
}

fn parsed(p: &[u8]) -> TransportPacket<'_> {
    packet::parse_headers(p).expect("valid packet")
}

#[test]
fn ud_psn_is_previous_plus_one_from_start_psn() {
    let mut a = ud_qp(0x10, 1, Mtu::Mtu1024, 0xff_fffe);
    let mut m = VecMemory::default();
    let k = m.register(PD, 0x1000, 64, 0);
    for i in 0..4 {
        let mut w = send_wr(i, WrOpcode::Send, &[(0x1000, 8, k)]);
        w.remote_qpn = 0x20;
        a.post_send(&w).unwrap();
    }
    let pk = drain_tx(&mut a, 0, &mut m);
    let psns: Vec<u32> = pk.iter().map(|p| parsed(p).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![0xff_fffe, 0xff_ffff, 0, 1]);
}

#[test]
fn ud_deth_qkey_from_wr_when_bit31_clear() {
    let mut u = setup();
    u.a.post_send(&ud_send(1, 4, u.src, QKEY)).unwrap();
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(parsed(&pk[0]).headers.deth, Some(DethRepr { q_key: QKEY, src_qp: 0x10 }));
}

#[test]
fn ud_deth_qkey_from_qp_context_when_bit31_set() {
    let mut u = setup();
    u.a.post_send(&ud_send(1, 4, u.src, 0x8000_0001)).unwrap();
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(parsed(&pk[0]).headers.deth, Some(DethRepr { q_key: 0x0bad_0bad, src_qp: 0x10 }));
}

#[test]
fn ud_only_send_only_and_send_only_with_immediate() {
    let mut u = setup();
    for op in [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::SendWithInv,
    ] {
        let mut w = ud_send(1, 4, u.src, QKEY);
        w.opcode = op;
        assert_eq!(u.a.post_send(&w), Err(Error::Invalid), "{op:?}");
        assert_eq!(Error::Invalid.errno(), -22);
    }
    u.a.post_send(&ud_send(1, 4, u.src, QKEY)).unwrap();
    let mut w = ud_send(2, 4, u.src, QKEY);
    w.opcode = WrOpcode::SendWithImm;
    w.imm_data = 0xabcd;
    u.a.post_send(&w).unwrap();
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(parsed(&pk[0]).headers.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(parsed(&pk[1]).headers.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(parsed(&pk[1]).headers.immdt, Some(ImmDtRepr { imm: 0xabcd }));
}

#[test]
fn ud_payload_zero_to_pmtu_is_sent() {
    let mut u = setup();
    u.a.post_send(&ud_send(1, 0, u.src, QKEY)).unwrap();
    u.a.post_send(&ud_send(2, 1024, u.src, QKEY)).unwrap();
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(pk.len(), 2);
    assert_eq!(parsed(&pk[0]).payload.len(), 0);
    assert_eq!(parsed(&pk[1]).payload, u.ma.bytes(u.src, 0, 1024));
    let (s, _) = all_cqes(&mut u.a);
    assert!(s.iter().all(|c| c.status == WcStatus::Success));
}

#[test]
fn ud_payload_above_pmtu_is_local_length_error_class_b() {
    let mut u = setup();
    u.a.post_send(&ud_send(1, 1025, u.src, QKEY)).unwrap();
    u.a.post_send(&ud_send(2, 4, u.src, QKEY)).unwrap();
    assert!(drain_tx(&mut u.a, 0, &mut u.ma).is_empty());
    let (s, _) = all_cqes(&mut u.a);
    assert_eq!(s[0].status, WcStatus::LocLenErr);
    assert_eq!(s[1].status, WcStatus::WrFlushErr);
    assert_eq!(u.a.state(), QpState::Sqe);
}

#[test]
fn ud_send_completes_when_packet_is_handed_off() {
    let mut u = setup();
    u.a.post_send(&ud_send(9, 16, u.src, QKEY)).unwrap();
    assert!(u.a.poll_send_cq().is_none());
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(pk.len(), 1);
    let c = u.a.poll_send_cq().unwrap();
    assert_eq!((c.wr_id, c.status, c.opcode), (9, WcStatus::Success, WcOpcode::Send));
    assert_eq!(u.a.next_deadline(), None, "no response is awaited");
}

fn craft_ud(opcode: Opcode, psn: u32, qkey: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = Headers::bth_only(opcode, 0xffff, 0x20, Psn::new(psn));
    h.deth = Some(DethRepr { q_key: qkey, src_qp: 0x33 });
    if opcode == Opcode::UD_SEND_ONLY_WITH_IMMEDIATE {
        h.immdt = Some(ImmDtRepr { imm: 77 });
    }
    craft(&h, payload)
}

#[test]
fn ud_receiver_ignores_psn() {
    let mut u = setup();
    for i in 0..3 {
        u.b.post_recv(&recv_wr(i, &[(0x9000 + i * 1100, 1100, u.dst)])).unwrap();
    }
    for psn in [77, 5, 0xff_ffff] {
        assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft_ud(Opcode::UD_SEND_ONLY, psn, QKEY, b"abcd")), RxOutcome::Accepted);
    }
    assert_eq!(all_cqes(&mut u.b).1.len(), 3);
}

#[test]
fn ud_qkey_mismatch_silently_dropped_no_wqe_no_cqe() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 1100, u.dst)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY ^ 1, b"abcd");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Dropped(DropReason::Key));
    assert!(all_cqes(&mut u.b).1.is_empty());
    assert_eq!(u.b.recv_queue_len(), 1, "no WQE used");
    assert!(drain_tx(&mut u.b, 0, &mut u.mb).is_empty(), "no response");
    // The WQE is still there for the next good packet.
    let p = craft_ud(Opcode::UD_SEND_ONLY, 2, QKEY, b"abcd");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Accepted);
    assert_eq!(all_cqes(&mut u.b).1[0].wr_id, 1);
}

#[test]
fn ud_unsupported_or_reserved_opcode_silently_dropped() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 1100, u.dst)])).unwrap();
    // An RC SEND ONLY aimed at a UD QP: unsupported on this QP (class D).
    let mut h = Headers::bth_only(Opcode::RC_SEND_ONLY, 0xffff, 0x20, Psn::new(0));
    h.bth.ack_req = true;
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft(&h, &[0u8; 4])), RxOutcome::Dropped(DropReason::Header));
    // Reserved UD opcodes 0x60-0x63 and 0x66-0x7f.
    for op in [0x60u8, 0x63, 0x66, 0x7f] {
        let mut p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, b"abcd");
        p[0] = op;
        assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Dropped(DropReason::Header), "{op:#x}");
    }
    assert!(all_cqes(&mut u.b).1.is_empty());
    assert_eq!(u.b.recv_queue_len(), 1);
}

#[test]
fn ud_no_posted_receive_silently_dropped() {
    let mut u = setup();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, b"abcd");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Dropped(DropReason::NoWqe));
    assert!(drain_tx(&mut u.b, 0, &mut u.mb).is_empty());
    assert_eq!(u.b.state(), QpState::Rts);
}

#[test]
fn ud_length_error_silently_dropped_no_wqe_used() {
    let mut u = setup();
    // 40 GRH bytes + 100 payload > 120-byte buffer.
    u.b.post_recv(&recv_wr(1, &[(0x9000, 120, u.dst)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, &[5u8; 100]);
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Dropped(DropReason::Length));
    assert!(all_cqes(&mut u.b).1.is_empty());
    assert_eq!(u.b.recv_queue_len(), 1);
    // A payload larger than the PMTU is dropped too.
    u.b.set_path_mtu(Mtu::Mtu256);
    u.b.post_recv(&recv_wr(2, &[(0x9000, 4096, u.dst)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, &[5u8; 300]);
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Dropped(DropReason::Length));
    assert!(all_cqes(&mut u.b).1.is_empty());
}

#[test]
fn ud_grh_40_bytes_at_start_of_receive_buffer() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 20, u.dst), (0x9100, 100, u.dst)])).unwrap();
    u.b.post_recv(&recv_wr(2, &[(0x9200, 200, u.dst)])).unwrap();
    u.b.post_recv(&recv_wr(3, &[(0x9400, 200, u.dst)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 1, QKEY, b"hello");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &p), RxOutcome::Accepted);
    // IPv4: 20 zero bytes, then the IPv4 header (split over two SGEs here).
    assert_eq!(u.mb.bytes(u.dst, 0, 20), &[0u8; 20]);
    assert_eq!(u.mb.bytes(u.dst, 0x100, 20), &IPV4);
    assert_eq!(u.mb.bytes(u.dst, 0x100 + 20, 5), b"hello");
    let ip6 = [0x60u8; 40];
    assert_eq!(u.b.receive(0, &mut u.mb, &p, NetHeader::Ipv6(&ip6)), RxOutcome::Accepted);
    assert_eq!(u.mb.bytes(u.dst, 0x200, 40), &ip6);
    let grh = [9u8; 40];
    assert_eq!(u.b.receive(0, &mut u.mb, &p, NetHeader::Grh(&grh)), RxOutcome::Accepted);
    assert_eq!(u.mb.bytes(u.dst, 0x400, 45), [&grh[..], b"hello"].concat());
    let c = u.b.poll_recv_cq().unwrap();
    assert_eq!((c.wr_id, c.status, c.opcode, c.byte_len), (1, WcStatus::Success, WcOpcode::Recv, 45));
    assert_eq!(c.wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
    assert_eq!((c.imm_data, c.src_qp, c.qp_num), (77, 0x33, 0x20));
}

#[test]
fn ud_end_to_end_send_and_receive() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 2000, u.dst)])).unwrap();
    let mut w = ud_send(5, 1000, u.src, QKEY);
    w.send_flags = send_flags::SOLICITED;
    u.a.post_send(&w).unwrap();
    for p in drain_tx(&mut u.a, 0, &mut u.ma) {
        assert!(parsed(&p).headers.bth.solicited);
        deliver(&mut u.b, 0, &mut u.mb, &p);
    }
    let c = u.b.poll_recv_cq().unwrap();
    assert_eq!((c.byte_len, c.src_qp), (1040, 0x10));
    assert_eq!(c.wc_flags, wc_flags::GRH | wc_flags::SOLICITED, "the SE bit reaches the completion");
    assert_eq!(u.mb.bytes(u.dst, 40, 1000), u.ma.bytes(u.src, 0, 1000));
}

#[test]
fn ud_invalid_lkey_is_local_protection_error_class_b() {
    let mut u = setup();
    u.a.post_send(&ud_send(1, 8, 0x999, QKEY)).unwrap();
    u.a.post_send(&ud_send(2, 8, u.src, QKEY)).unwrap();
    assert!(drain_tx(&mut u.a, 0, &mut u.ma).is_empty(), "transmission stops");
    let (s, _) = all_cqes(&mut u.a);
    assert_eq!((s[0].wr_id, s[0].status), (1, WcStatus::LocProtErr));
    assert_eq!((s[1].wr_id, s[1].status), (2, WcStatus::WrFlushErr));
    // Send Queue Error: the receive side keeps working (C10-38) ...
    assert_eq!(u.a.state(), QpState::Sqe);
    let rk = u.ma.register(PD, 0x40000, 256, access::LOCAL_WRITE);
    u.a.post_recv(&recv_wr(7, &[(0x40000, 256, rk)])).unwrap();
    let mut p = craft_ud(Opcode::UD_SEND_ONLY, 1, 0x0bad_0bad, b"xy");
    p[5..8].copy_from_slice(&[0, 0, 0x10]);
    assert_eq!(deliver(&mut u.a, 0, &mut u.ma, &p), RxOutcome::Accepted);
    // ... posts to the SQ are flushed, and SQE -> RTS resumes sending.
    u.a.post_send(&ud_send(3, 8, u.src, QKEY)).unwrap();
    assert_eq!(u.a.poll_send_cq().unwrap().status, WcStatus::WrFlushErr);
    let attr = ferroce_transport::qp::QpAttr { qp_state: QpState::Rts, ..Default::default() };
    u.a.modify(&attr, ferroce_transport::qp::mask::STATE).unwrap();
    u.a.post_send(&ud_send(4, 8, u.src, QKEY)).unwrap();
    assert_eq!(drain_tx(&mut u.a, 0, &mut u.ma).len(), 1);
    assert_eq!(u.a.poll_send_cq().unwrap().status, WcStatus::Success);
}

#[test]
fn ud_receive_bad_lkey_is_local_qp_error_class_a() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 200, 0x777)])).unwrap();
    u.b.post_recv(&recv_wr(2, &[(0x9000, 200, u.dst)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, b"abcd");
    deliver(&mut u.b, 0, &mut u.mb, &p);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r[0].status, WcStatus::LocProtErr);
    assert_eq!(r[1].status, WcStatus::WrFlushErr);
    assert_eq!(u.b.state(), QpState::Err);
}

#[test]
fn ud_nothing_received_before_rtr() {
    let mut q = new_qp(0x20, ferroce_transport::qp::QpType::Ud, 4, 4);
    let mut m = VecMemory::default();
    let k = m.register(PD, 0x9000, 256, access::LOCAL_WRITE);
    let a = ferroce_transport::qp::QpAttr { qp_state: QpState::Init, qkey: QKEY, ..Default::default() };
    use ferroce_transport::qp::mask;
    q.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY).unwrap();
    q.post_recv(&recv_wr(1, &[(0x9000, 256, k)])).unwrap();
    let p = craft_ud(Opcode::UD_SEND_ONLY, 1, QKEY, b"abcd");
    assert_eq!(deliver(&mut q, 0, &mut m, &p), RxOutcome::Dropped(DropReason::State));
    assert_eq!(q.post_send(&ud_send(1, 4, k, QKEY)), Err(Error::Invalid), "no sends before RTS");
}

/// A request the glue refuses after taking it from a process's ring (a
/// malformed WQE) moves the QP to ERR: what was queued before it flushes,
/// in order, then it completes with LOC_QP_OP_ERR; receives likewise.
#[test]
fn refused_ring_wqe_moves_qp_to_err_after_flushing_the_queue() {
    let mut a = ud_qp(0x10, QKEY, Mtu::Mtu1024, 0);
    let mut m = VecMemory::default();
    let k = m.register(PD, 0x1000, 64, access::LOCAL_WRITE);
    for i in 0..2 {
        let mut w = send_wr(i, WrOpcode::Send, &[(0x1000, 8, k)]);
        w.remote_qpn = 0x20;
        w.send_flags |= send_flags::SIGNALED;
        a.post_send(&w).unwrap();
    }
    a.post_recv(&recv_wr(7, &[(0x1000, 64, k)])).unwrap();
    a.fail_send(99, WcStatus::LocQpOpErr).unwrap();
    assert_eq!(a.state(), QpState::Err);
    let got: Vec<_> = core::iter::from_fn(|| a.poll_send_cq()).map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, [(0, WcStatus::WrFlushErr), (1, WcStatus::WrFlushErr), (99, WcStatus::LocQpOpErr)]);
    a.fail_recv(8, WcStatus::LocQpOpErr).unwrap();
    let got: Vec<_> = core::iter::from_fn(|| a.poll_recv_cq()).map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        [(7, WcStatus::WrFlushErr, WcOpcode::Recv), (8, WcStatus::LocQpOpErr, WcOpcode::Recv)]
    );
    assert!(a.poll_send_cq().is_none());
}

/// A datagram to the multicast QP (0xFFFFFF): a UD QP takes it (the driver
/// hands it only to the QPs attached to the destination group); any other
/// destination QP than its own or the multicast one is dropped, and a
/// connected QP never takes a multicast packet.
#[test]
fn ud_multicast_qpn_is_taken_by_ud_qps_only() {
    use ferroce_transport::mcast::MULTICAST_QPN;
    let craft_to = |dest: u32| {
        let mut h = Headers::bth_only(Opcode::UD_SEND_ONLY, 0xffff, dest, Psn::new(9));
        h.deth = Some(DethRepr { q_key: QKEY, src_qp: 0x33 });
        craft(&h, b"mcst")
    };
    let mut u = setup();
    u.b.post_recv(&recv_wr(1, &[(0x9000, 1100, u.dst)])).unwrap();
    u.b.post_recv(&recv_wr(2, &[(0x9000 + 1100, 1100, u.dst)])).unwrap();
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft_to(0x21)), RxOutcome::Dropped(DropReason::Header), "another QP's datagram");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft_to(MULTICAST_QPN)), RxOutcome::Accepted);
    let (_, recv) = all_cqes(&mut u.b);
    assert_eq!(recv.len(), 1);
    assert_eq!((recv[0].wr_id, recv[0].status, recv[0].src_qp, recv[0].byte_len), (1, WcStatus::Success, 0x33, 40 + 4));
    // The Q_Key rule holds for multicast as for unicast.
    let mut h = Headers::bth_only(Opcode::UD_SEND_ONLY, 0xffff, MULTICAST_QPN, Psn::new(9));
    h.deth = Some(DethRepr { q_key: QKEY ^ 1, src_qp: 0x33 });
    let bad = craft(&h, b"mcst");
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &bad), RxOutcome::Dropped(DropReason::Key));
    assert_eq!(u.b.recv_queue_len(), 1, "no WQE used by the wrong Q_Key");
    // An RC or UC QP: the multicast QP is not its number.
    let mut rc = rc_qp(0x40, 0x41, RcParams::default(), 0, 0);
    let mut mrc = VecMemory::default();
    let d = mrc.register(PD, 0x9000, 4096, access::LOCAL_WRITE);
    rc.post_recv(&recv_wr(5, &[(0x9000, 1000, d)])).unwrap();
    let mut h = Headers::bth_only(Opcode::RC_SEND_ONLY, 0xffff, MULTICAST_QPN, Psn::new(0));
    h.deth = None;
    assert_eq!(deliver(&mut rc, 0, &mut mrc, &craft(&h, &[0u8; 4])), RxOutcome::Dropped(DropReason::Header));
    assert!(all_cqes(&mut rc).1.is_empty());
}

/// A UD QP on an SRQ takes the SRQ's next receive WQE only for a datagram
/// it will accept: not one with another Q_Key, longer than the path MTU, or
/// arriving before the QP receives (the glue asks before it moves a WQE).
#[test]
fn ud_takes_an_srq_wqe_only_for_a_datagram_it_accepts() {
    let craft = |qkey: u32, len: usize| {
        let mut h = Headers::bth_only(Opcode::UD_SEND_ONLY, 0xffff, 0x20, Psn::new(77));
        h.deth = Some(DethRepr { q_key: qkey, src_qp: 0x33 });
        craft(&h, &vec![0u8; len])
    };
    let u = setup();
    assert!(u.b.takes_srq_wqe(&craft(QKEY, 64)), "any PSN: UD has no sequence");
    assert!(!u.b.takes_srq_wqe(&craft(QKEY ^ 1, 64)), "wrong Q_Key");
    assert!(!u.b.takes_srq_wqe(&craft(QKEY, 1024 + 4)), "longer than the path MTU (1024)");
    assert!(!u.b.takes_srq_wqe(&[0u8; 3]), "not a packet");
    let mut fresh = setup();
    let reset = ferroce_transport::qp::QpAttr { qp_state: QpState::Reset, ..Default::default() };
    fresh.b.modify(&reset, ferroce_transport::qp::mask::STATE).unwrap();
    assert!(!fresh.b.takes_srq_wqe(&craft(QKEY, 64)), "a QP in RESET receives nothing");
}

#[test]
fn ud_odp_absent_send_buffer_waits_and_absent_receive_buffer_drops_keeping_the_wqe() {
    let mut u = setup();
    u.ma.region_mut(u.src).absent = true;
    u.a.post_send(&ud_send(1, 100, u.src, QKEY)).unwrap();
    assert!(drain_tx(&mut u.a, 0, &mut u.ma).is_empty());
    assert!(u.a.fault_waiting());
    assert!(u.a.poll_send_cq().is_none());
    u.ma.region_mut(u.src).absent = false;
    u.a.fault_resolved();
    let pk = drain_tx(&mut u.a, 0, &mut u.ma);
    assert_eq!(pk.len(), 1);
    assert_eq!(u.a.poll_send_cq().unwrap().status, WcStatus::Success);
    u.b.post_recv(&recv_wr(7, &[(0x9000, 1100, u.dst)])).unwrap();
    u.mb.region_mut(u.dst).absent = true;
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &pk[0]), RxOutcome::Dropped(DropReason::Memory));
    assert!(u.b.poll_recv_cq().is_none());
    assert_eq!(u.b.state(), QpState::Rts);
    u.mb.region_mut(u.dst).absent = false;
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &pk[0]), RxOutcome::Accepted);
    let c = u.b.poll_recv_cq().unwrap();
    assert_eq!((c.wr_id, c.status, c.byte_len), (7, WcStatus::Success, 140));
}
