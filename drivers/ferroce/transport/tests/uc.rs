//! UC rules: the requester (UC opcodes, no AckReq, completion when the
//! last packet leaves, SQE on a local error) and the responder (no ACK or
//! NAK ever; a PSN gap, an out-of-sequence opcode, a missing receive WQE,
//! a length or R_Key error drops the message and nothing else; a FIRST or
//! ONLY packet always starts a new message).

mod common;

use common::*;
use ferroce_transport::engine::{DropReason, RxOutcome};
use ferroce_transport::qp::{Mtu, QpState};
use ferroce_transport::verbs::{access, send_flags, wc_flags, SendWqe, WcOpcode, WcStatus, WrOpcode};
use ferroce_transport::wire::packet::{self, Headers, TransportPacket};
use ferroce_transport::wire::{ImmDtRepr, Opcode, Psn, RethRepr};

const A: u32 = 0x31;
const B: u32 = 0x42;
const PSN_A: u32 = 0xff_fffe;
const PSN_B: u32 = 500;
const PMTU: u32 = 256;

struct Uc {
    a: TestQp,
    b: TestQp,
    ma: VecMemory,
    mb: VecMemory,
    src: u32,
    dst: u32,
    tgt: u32,
}

fn setup_with(b_access: u32) -> Uc {
    let a = uc_qp(A, B, Mtu::Mtu256, access::REMOTE_WRITE, PSN_A, PSN_B);
    let b = uc_qp(B, A, Mtu::Mtu256, b_access, PSN_B, PSN_A);
    let mut ma = VecMemory::default();
    let mut mb = VecMemory::default();
    let src = ma.register(PD, 0x1_0000, 1 << 16, access::LOCAL_WRITE);
    for (i, x) in ma.region_mut(src).data.iter_mut().enumerate() {
        *x = (i * 7 + 1) as u8;
    }
    let dst = mb.register(PD, 0x2_0000, 1 << 16, access::LOCAL_WRITE);
    let tgt = mb.register(PD, 0x3_0000, 1 << 16, access::REMOTE_WRITE);
    Uc { a, b, ma, mb, src, dst, tgt }
}

fn setup() -> Uc {
    setup_with(access::REMOTE_WRITE)
}

fn send(u: &Uc, wr_id: u64, off: u64, len: u32) -> SendWqe {
    send_wr(wr_id, WrOpcode::Send, &[(0x1_0000 + off, len, u.src)])
}

fn write(u: &Uc, wr_id: u64, len: u32, raddr: u64, imm: Option<u32>) -> SendWqe {
    let op = if imm.is_some() { WrOpcode::RdmaWriteWithImm } else { WrOpcode::RdmaWrite };
    let mut w = send_wr(wr_id, op, &[(0x1_0000, len, u.src)]);
    w.remote_addr = raddr;
    w.rkey = u.tgt;
    w.imm_data = imm.unwrap_or(0);
    w
}

fn post_recvs(u: &mut Uc, n: u64) {
    for i in 0..n {
        u.b.post_recv(&recv_wr(i, &[(0x2_0000 + i * 1024, 1024, u.dst)])).unwrap();
    }
}

fn p(b: &[u8]) -> TransportPacket<'_> {
    packet::parse_headers(b).unwrap()
}

/// Packets of `wqes` as A sends them.
fn packets_of(u: &mut Uc, wqes: &[SendWqe]) -> Vec<Vec<u8>> {
    for w in wqes {
        u.a.post_send(w).unwrap();
    }
    drain_tx(&mut u.a, 0, &mut u.ma)
}

fn deliver_all(u: &mut Uc, pk: &[Vec<u8>]) -> Vec<RxOutcome> {
    pk.iter().map(|x| deliver(&mut u.b, 0, &mut u.mb, x)).collect()
}

/// B must have nothing to send: UC never acknowledges.
fn assert_silent(u: &mut Uc) {
    assert!(drain_tx(&mut u.b, 0, &mut u.mb).is_empty(), "a UC responder sent a packet");
}

#[test]
fn uc_requester_opcodes_psns_no_ackreq_and_completion_when_sent() {
    let mut u = setup();
    let mut s2 = send(&u, 2, 0, 0);
    s2.opcode = WrOpcode::SendWithImm;
    s2.imm_data = 0x1234;
    let pk = { let w = [send(&u, 1, 0, PMTU * 2 + 5), s2, write(&u, 3, PMTU + 1, 0x3_0000, Some(9))]; packets_of(&mut u, &w) };
    use Opcode as O;
    let ops: Vec<Opcode> = pk.iter().map(|b| p(b).headers.bth.opcode).collect();
    assert_eq!(
        ops,
        vec![
            O::UC_SEND_FIRST,
            O::UC_SEND_MIDDLE,
            O::UC_SEND_LAST,
            O::UC_SEND_ONLY_WITH_IMMEDIATE,
            O::UC_RDMA_WRITE_FIRST,
            O::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE
        ]
    );
    let psns: Vec<u32> = pk.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, (0..6).map(|i| Psn::new(PSN_A).wrapping_add(i).value()).collect::<Vec<_>>(), "PSNs wrap at 2^24");
    assert!(pk.iter().all(|b| !p(b).headers.bth.ack_req), "UC never asks for an ACK");
    assert_eq!(p(&pk[4]).headers.reth.map(|r| r.dma_len), Some(PMTU + 1));
    // Every WQE completed when its last packet left; no timer is armed.
    let (s, _) = all_cqes(&mut u.a);
    let got: Vec<(u64, WcStatus, WcOpcode)> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(u.a.next_deadline(), None);
    assert!(u.a.is_send_idle());
}

#[test]
fn uc_post_send_refuses_read_atomic_and_send_with_invalidate() {
    let mut u = setup();
    for op in [WrOpcode::RdmaRead, WrOpcode::AtomicCmpAndSwp, WrOpcode::AtomicFetchAndAdd, WrOpcode::SendWithInv] {
        let mut w = send(&u, 1, 0, 8);
        w.opcode = op;
        assert!(u.a.post_send(&w).is_err(), "{op:?} on UC");
    }
    assert_eq!(u.a.send_queue_len(), 0);
}

#[test]
fn uc_send_write_and_immediates_end_to_end_with_no_response() {
    let mut u = setup();
    post_recvs(&mut u, 3);
    let mut w = send(&u, 1, 0, 700);
    w.send_flags |= send_flags::SOLICITED;
    let pk = { let w = [w, write(&u, 2, 600, 0x3_0100, None), write(&u, 3, 10, 0x3_0000, Some(0xabc))]; packets_of(&mut u, &w) };
    assert!(deliver_all(&mut u, &pk).iter().all(|o| *o == RxOutcome::Accepted));
    assert_silent(&mut u);
    assert_eq!(u.mb.bytes(u.dst, 0, 700), u.ma.bytes(u.src, 0, 700));
    assert_eq!(u.mb.bytes(u.tgt, 0x100, 600), u.ma.bytes(u.src, 0, 600));
    let (_, r) = all_cqes(&mut u.b);
    let got: Vec<(u64, WcOpcode, u32, u32, u32)> = r.iter().map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm_data, c.wc_flags)).collect();
    assert_eq!(
        got,
        vec![
            (0, WcOpcode::Recv, 700, 0, wc_flags::SOLICITED),
            (1, WcOpcode::RecvRdmaWithImm, 10, 0xabc, wc_flags::WITH_IMM)
        ]
    );
    assert_eq!(r[0].src_qp, A);
}

#[test]
fn uc_lost_middle_packet_drops_that_message_only_and_reuses_its_receive_wqe() {
    let mut u = setup();
    post_recvs(&mut u, 2);
    let pk = { let w = [send(&u, 1, 0, PMTU * 3), send(&u, 2, 100, PMTU + 3)]; packets_of(&mut u, &w) };
    assert_eq!(pk.len(), 5);
    // Packet 1 (MIDDLE of message 1) is lost.
    let out = deliver_all(&mut u, &[pk[0].clone(), pk[2].clone(), pk[3].clone(), pk[4].clone()]);
    assert_eq!(out, vec![RxOutcome::Accepted, RxOutcome::Dropped(DropReason::Sequence), RxOutcome::Accepted, RxOutcome::Accepted]);
    assert_silent(&mut u);
    // Message 2 landed in receive WQE 0 (message 1 gave it back), from its start.
    let (_, r) = all_cqes(&mut u.b);
    let got: Vec<(u64, WcStatus, u32)> = r.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
    assert_eq!(got, vec![(0, WcStatus::Success, PMTU + 3)]);
    assert_eq!(u.mb.bytes(u.dst, 0, (PMTU + 3) as usize), u.ma.bytes(u.src, 100, (PMTU + 3) as usize));
    assert_eq!(u.b.state(), QpState::Rts);
}

#[test]
fn uc_lost_last_packet_then_first_of_next_message_starts_it() {
    let mut u = setup();
    post_recvs(&mut u, 2);
    let pk = { let w = [write(&u, 1, PMTU * 2, 0x3_0000, Some(1)), send(&u, 2, 0, 20)]; packets_of(&mut u, &w) };
    assert_eq!(pk.len(), 3);
    // The WRITE's LAST (with immediate) is lost: no receive WQE is used.
    let out = deliver_all(&mut u, &[pk[0].clone(), pk[2].clone()]);
    assert_eq!(out, vec![RxOutcome::Accepted, RxOutcome::Accepted]);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.opcode, c.byte_len)).collect::<Vec<_>>(), vec![(0, WcOpcode::Recv, 20)]);
}

#[test]
fn uc_out_of_sequence_middle_and_last_are_dropped_until_a_first_or_only() {
    let mut u = setup();
    post_recvs(&mut u, 2);
    let pk = { let w = [send(&u, 1, 0, PMTU * 3), send(&u, 2, 0, 5)]; packets_of(&mut u, &w) };
    // Duplicate of the FIRST after MIDDLE: restarts the message; the stale
    // MIDDLE and LAST that follow are out of sequence and dropped.
    let out = deliver_all(&mut u, &[pk[0].clone(), pk[1].clone(), pk[0].clone(), pk[2].clone(), pk[3].clone()]);
    assert_eq!(
        out,
        vec![RxOutcome::Accepted, RxOutcome::Accepted, RxOutcome::Accepted, RxOutcome::Dropped(DropReason::Sequence), RxOutcome::Accepted]
    );
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.byte_len)).collect::<Vec<_>>(), vec![(0, 5)]);
}

#[test]
fn uc_no_receive_wqe_drops_the_message_silently_and_the_next_one_is_received() {
    let mut u = setup();
    let pk = { let w = [send(&u, 1, 0, PMTU * 2), send(&u, 2, 0, 9)]; packets_of(&mut u, &w) };
    let out = deliver_all(&mut u, &pk[..2]);
    assert_eq!(out, vec![RxOutcome::Dropped(DropReason::NoWqe), RxOutcome::Dropped(DropReason::Sequence)]);
    assert_silent(&mut u);
    post_recvs(&mut u, 1);
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &pk[2]), RxOutcome::Accepted);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.byte_len)).collect::<Vec<_>>(), vec![(0, 9)]);
    assert_eq!(u.b.state(), QpState::Rts);
}

#[test]
fn uc_too_long_message_and_bad_rkey_drop_the_message_qp_stays_in_rts() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(7, &[(0x2_0000, 100, u.dst)])).unwrap();
    let mut bad = write(&u, 2, 50, 0x3_0000, None);
    bad.rkey ^= 0x55;
    let pk = { let w = [send(&u, 1, 0, 300), bad, send(&u, 3, 0, 60)]; packets_of(&mut u, &w) };
    let out = deliver_all(&mut u, &pk);
    assert_eq!(out, vec![RxOutcome::Dropped(DropReason::Invalid), RxOutcome::Dropped(DropReason::Sequence), RxOutcome::Dropped(DropReason::Invalid), RxOutcome::Accepted]);
    assert_silent(&mut u);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), vec![(7, WcStatus::Success, 60)]);
    assert_eq!(u.b.state(), QpState::Rts);
}

#[test]
fn uc_write_without_remote_write_access_is_dropped() {
    let mut u = setup_with(0);
    let pk = { let w = [write(&u, 1, 16, 0x3_0000, None)]; packets_of(&mut u, &w) };
    assert_eq!(deliver_all(&mut u, &pk), vec![RxOutcome::Dropped(DropReason::Invalid)]);
    assert_eq!(u.mb.bytes(u.tgt, 0, 16), &[0u8; 16]);
    assert_silent(&mut u);
}

#[test]
fn uc_bad_lkey_in_receive_wqe_completes_it_in_error_and_the_qp_enters_err() {
    let mut u = setup();
    u.b.post_recv(&recv_wr(5, &[(0x2_0000, 100, u.dst ^ 0x77)])).unwrap();
    let pk = { let w = [send(&u, 1, 0, 10)]; packets_of(&mut u, &w) };
    assert_eq!(deliver_all(&mut u, &pk), vec![RxOutcome::Dropped(DropReason::Memory)]);
    assert_eq!(u.b.state(), QpState::Err);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(5, WcStatus::LocProtErr)]);
    assert_silent(&mut u);
}

#[test]
fn uc_local_protection_error_moves_the_requester_to_sqe_and_receive_keeps_working() {
    let mut u = setup();
    let mut bad = send(&u, 1, 0, 10);
    bad.sges_mut()[0].lkey ^= 0x10;
    assert!({ let w = [bad, send(&u, 2, 0, 10)]; packets_of(&mut u, &w) }.is_empty());
    assert_eq!(u.a.state(), QpState::Sqe);
    let (s, _) = all_cqes(&mut u.a);
    assert_eq!(s.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]);
    // B -> A still works: A's receive side is untouched by SQE.
    u.a.post_recv(&recv_wr(9, &[(0x1_0000, 64, u.src)])).unwrap();
    u.b.post_send(&send_wr(4, WrOpcode::Send, &[(0x2_0000, 4, u.dst)])).unwrap();
    for x in drain_tx(&mut u.b, 0, &mut u.mb) {
        assert_eq!(deliver(&mut u.a, 0, &mut u.ma, &x), RxOutcome::Accepted);
    }
    let (_, r) = all_cqes(&mut u.a);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), vec![(9, WcStatus::Success, 4)]);
}

#[test]
fn uc_ignores_rc_packets_and_ackreq_gets_no_ack() {
    let mut u = setup();
    post_recvs(&mut u, 2);
    // An RC SEND ONLY at the right PSN: not UC, dropped.
    let mut h = Headers::bth_only(Opcode::RC_SEND_ONLY, 0xffff, B, Psn::new(PSN_A));
    h.bth.ack_req = true;
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft(&h, &[])), RxOutcome::Dropped(DropReason::Header));
    // A UC WRITE ONLY with immediate and AckReq set: accepted, never ACKed.
    let mut h = Headers::bth_only(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0xffff, B, Psn::new(77));
    h.bth.ack_req = true;
    h.reth = Some(RethRepr { va: 0x3_0000, r_key: u.tgt, dma_len: 0 });
    h.immdt = Some(ImmDtRepr { imm: 5 });
    assert_eq!(deliver(&mut u.b, 0, &mut u.mb, &craft(&h, &[])), RxOutcome::Accepted);
    assert_silent(&mut u);
    let (_, r) = all_cqes(&mut u.b);
    assert_eq!(r.iter().map(|c| (c.opcode, c.imm_data)).collect::<Vec<_>>(), vec![(WcOpcode::RecvRdmaWithImm, 5)]);
}

/// A UC QP on an SRQ (the glue's rule, played here: when the QP holds no
/// receive WQE, it takes the SRQ's next one for a packet `takes_srq_wqe`
/// names; completions move out after each packet). A message that loses a
/// packet keeps its WQE in the QP for the next message; a WRITE with
/// immediate takes one only at its LAST, in sequence; a stray MIDDLE or
/// LAST takes none. Every WQE taken completes.
#[test]
fn uc_on_an_srq_takes_a_wqe_only_for_a_message_it_will_complete() {
    let mut u = setup();
    let mut srq: std::collections::VecDeque<u64> = (10..20).collect();
    let mut taken = Vec::new();
    let mut r = Vec::new();
    let out = {
        let mut deliver_srq = |u: &mut Uc, pkt: &[u8]| {
            if u.b.recv_queue_len() == 0 && u.b.takes_srq_wqe(pkt) {
                let id = srq.pop_front().unwrap();
                taken.push(id);
                u.b.post_recv(&recv_wr(id, &[(0x2_0000 + (id - 10) * 1024, 1024, u.dst)])).unwrap();
            }
            let o = deliver(&mut u.b, 0, &mut u.mb, pkt);
            r.extend(all_cqes(&mut u.b).1);
            o
        };
        let w = [
            send(&u, 1, 0, PMTU * 3),
            send(&u, 2, 100, PMTU + 3),
            write(&u, 3, PMTU * 2, 0x3_0000, Some(0xabc)),
            send(&u, 4, 7, 9),
            write(&u, 5, PMTU * 3, 0x3_0000, Some(0xdef)),
            send(&u, 6, 5, 11),
        ];
        let pk = packets_of(&mut u, &w);
        assert_eq!(pk.len(), 3 + 2 + 2 + 1 + 3 + 1);
        // Message 1 loses its MIDDLE (pk[1]); message 5 loses its MIDDLE (pk[9]).
        let mut out = Vec::new();
        for (i, x) in pk.iter().enumerate() {
            if i != 1 && i != 9 {
                out.push(deliver_srq(&mut u, x));
            }
        }
        // A stray SEND MIDDLE and LAST (message 1's, again) take nothing.
        assert_eq!(deliver_srq(&mut u, &pk[1]), RxOutcome::Dropped(DropReason::Sequence));
        assert_eq!(deliver_srq(&mut u, &pk[2]), RxOutcome::Dropped(DropReason::Sequence));
        out
    };
    assert_silent(&mut u);
    // Message 1's WQE (10) went to message 2; the WRITE took 11 at its
    // LAST; message 4 took 12; message 5's LAST, out of sequence, took
    // none; message 6 took 13.
    let (acc, seq) = (RxOutcome::Accepted, RxOutcome::Dropped(DropReason::Sequence));
    assert_eq!(out, vec![acc, seq, acc, acc, acc, acc, acc, acc, seq, acc]);
    assert_eq!(taken, vec![10, 11, 12, 13]);
    let got: Vec<(u64, WcOpcode, u32)> = r.iter().map(|c| (c.wr_id, c.opcode, c.byte_len)).collect();
    assert_eq!(
        got,
        vec![(10, WcOpcode::Recv, PMTU + 3), (11, WcOpcode::RecvRdmaWithImm, PMTU * 2), (12, WcOpcode::Recv, 9), (13, WcOpcode::Recv, 11)]
    );
    assert_eq!(r[1].imm_data, 0xabc);
    assert_eq!(u.mb.bytes(u.dst, 0, (PMTU + 3) as usize), u.ma.bytes(u.src, 100, (PMTU + 3) as usize));
    assert_eq!(u.b.recv_queue_len(), 0, "no WQE held back from the SRQ");
    assert_eq!(u.b.state(), QpState::Rts);
}
