//! RC rules: one named test per requester, responder and completer rule.

mod common;

use common::*;
use ferroce_transport::engine::{DropReason, RxOutcome};
use ferroce_transport::wire::packet::{self, Headers, TransportPacket};
use ferroce_transport::wire::RethRepr;
use ferroce_transport::qp::{mask, Mtu, QpAttr, QpState, QpType};
use ferroce_transport::verbs::{access, send_flags, wc_flags, AsyncError, FastReg, SendWqe, WcOpcode, WcStatus, WrOpcode};
use ferroce_transport::wire::{AethRepr, AethSyndrome, DethRepr, FethRepr, NakCode, Opcode, Psn};

const A: u32 = 0x11;
const B: u32 = 0x22;
const PSN_A: u32 = 1000;
const PSN_B: u32 = 0xff_fff0;

struct Rc {
    a: TestQp,
    b: TestQp,
    ma: VecMemory,
    mb: VecMemory,
    src: u32,
    dst: u32,
    tgt: u32,
}

fn setup_with(p: RcParams) -> Rc {
    let a = rc_qp(A, B, p, PSN_A, PSN_B);
    let b = rc_qp(B, A, p, PSN_B, PSN_A);
    let mut ma = VecMemory::default();
    let mut mb = VecMemory::default();
    let src = ma.register(PD, 0x1_0000, 1 << 16, access::LOCAL_WRITE);
    for (i, x) in ma.region_mut(src).data.iter_mut().enumerate() {
        *x = (i * 7) as u8;
    }
    let dst = mb.register(PD, 0x2_0000, 1 << 16, access::LOCAL_WRITE);
    let tgt = mb.register(PD, 0x3_0000, 1 << 16, access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC);
    for (i, x) in mb.region_mut(tgt).data.iter_mut().enumerate() {
        *x = (i * 3) as u8;
    }
    Rc { a, b, ma, mb, src, dst, tgt }
}

fn setup() -> Rc {
    setup_with(RcParams { mtu: Mtu::Mtu256, ..RcParams::default() })
}

fn send(r: &Rc, wr_id: u64, len: u32) -> SendWqe {
    send_wr(wr_id, WrOpcode::Send, &[(0x1_0000, len, r.src)])
}

fn write(r: &Rc, wr_id: u64, len: u32, raddr: u64) -> SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::RdmaWrite, &[(0x1_0000, len, r.src)]);
    w.remote_addr = raddr;
    w.rkey = r.tgt;
    w
}

fn read(r: &Rc, wr_id: u64, len: u32, laddr: u64, raddr: u64) -> SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::RdmaRead, &[(laddr, len, r.src)]);
    w.remote_addr = raddr;
    w.rkey = r.tgt;
    w
}

fn p(b: &[u8]) -> TransportPacket<'_> {
    packet::parse_headers(b).unwrap()
}

fn aeth(b: &[u8]) -> (AethSyndrome, u32) {
    let a = p(b).headers.aeth.unwrap();
    (a.syndrome, a.msn)
}

fn request(opcode: Opcode, psn: u32, payload: &[u8], f: impl FnOnce(&mut Headers)) -> Vec<u8> {
    let mut h = Headers::bth_only(opcode, 0xffff, B, Psn::new(psn));
    h.bth.ack_req = true;
    f(&mut h);
    craft(&h, payload)
}

/// An RDMA READ request at `psn` for `len` bytes at `va` of `rkey`.
fn read_request(psn: u32, va: u64, rkey: u32, len: u32) -> Vec<u8> {
    request(Opcode::RC_RDMA_READ_REQUEST, psn, &[], |h| {
        h.reth = Some(RethRepr { va, r_key: rkey, dma_len: len });
    })
}

fn post_recvs(r: &mut Rc, n: u64) {
    for i in 0..n {
        r.b.post_recv(&recv_wr(i, &[(0x2_0000 + i * 1024, 1024, r.dst)])).unwrap();
    }
}

#[test]
fn rc_segmentation_by_pmtu_first_middle_last_psn_plus_one_ackreq_on_last() {
    let mut r = setup();
    r.a.post_send(&send(&r, 1, 256 * 3 + 10)).unwrap();
    r.a.post_send(&send(&r, 2, 256)).unwrap();
    r.a.post_send(&send(&r, 3, 0)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    let ops: Vec<Opcode> = pk.iter().map(|b| p(b).headers.bth.opcode).collect();
    use Opcode as O;
    assert_eq!(ops, vec![O::RC_SEND_FIRST, O::RC_SEND_MIDDLE, O::RC_SEND_MIDDLE, O::RC_SEND_LAST, O::RC_SEND_ONLY, O::RC_SEND_ONLY]);
    let psns: Vec<u32> = pk.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, (0..6).map(|i| PSN_A + i).collect::<Vec<_>>());
    let lens: Vec<usize> = pk.iter().map(|b| p(b).payload.len()).collect();
    assert_eq!(lens, vec![256, 256, 256, 10, 256, 0]);
    let ackreq: Vec<bool> = pk.iter().map(|b| p(b).headers.bth.ack_req).collect();
    assert_eq!(ackreq, vec![false, false, false, true, true, true]);
}

#[test]
fn rc_ackreq_set_periodically_within_long_messages() {
    let mut r = setup();
    r.a.post_send(&write(&r, 1, 256 * 40, 0x3_0000)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    let with: Vec<usize> = (0..pk.len()).filter(|&i| p(&pk[i]).headers.bth.ack_req).collect();
    assert_eq!(with, vec![31, 39]);
}

#[test]
fn rc_solicited_event_bit_reaches_the_receive_completion() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    let mut w = send(&r, 1, 700);
    w.send_flags |= send_flags::SOLICITED;
    r.a.post_send(&w).unwrap();
    r.a.post_send(&send(&r, 2, 300)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (_, rr) = all_cqes(&mut r.b);
    let got: Vec<(u64, u32)> = rr.iter().map(|c| (c.wr_id, c.wc_flags)).collect();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, wc_flags::SOLICITED, "SE on the last packet of a multi-packet SEND");
    assert_eq!(got[1].1, 0, "no SE, no flag");
}

#[test]
fn rc_send_write_read_atomic_end_to_end() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    let mut w = send(&r, 1, 700);
    w.opcode = WrOpcode::SendWithImm;
    w.imm_data = 0x1234;
    r.a.post_send(&w).unwrap();
    r.a.post_send(&write(&r, 2, 600, 0x3_0100)).unwrap();
    r.a.post_send(&read(&r, 3, 600, 0x1_8000, 0x3_0100)).unwrap();
    let mut fa = send_wr(4, WrOpcode::AtomicFetchAndAdd, &[(0x1_9000, 8, r.src)]);
    fa.remote_addr = 0x3_1000;
    fa.rkey = r.tgt;
    fa.compare_add = 5;
    r.a.post_send(&fa).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    let got: Vec<(u64, WcStatus, WcOpcode)> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    use WcOpcode::*;
    assert_eq!(got, vec![(1, WcStatus::Success, Send), (2, WcStatus::Success, RdmaWrite), (3, WcStatus::Success, RdmaRead), (4, WcStatus::Success, FetchAdd)]);
    let (_, rr) = all_cqes(&mut r.b);
    assert_eq!((rr[0].byte_len, rr[0].imm_data, rr[0].wc_flags, rr[0].src_qp), (700, 0x1234, wc_flags::WITH_IMM, A));
    assert_eq!(r.mb.bytes(r.dst, 0, 700), r.ma.bytes(r.src, 0, 700));
    assert_eq!(r.mb.bytes(r.tgt, 0x100, 600), r.ma.bytes(r.src, 0, 600));
    assert_eq!(r.ma.bytes(r.src, 0x8000, 600), r.mb.bytes(r.tgt, 0x100, 600));
    let orig = u64::from_ne_bytes(r.ma.bytes(r.src, 0x9000, 8).try_into().unwrap());
    let want = u64::from_ne_bytes(r.mb.bytes(r.tgt, 0x1000, 8).try_into().unwrap()).wrapping_sub(5);
    assert_eq!(orig, want);
}

#[test]
fn rc_nak_psn_sequence_error_once_per_sequence_error() {
    let mut r = setup();
    post_recvs(&mut r, 4);
    let ahead = request(Opcode::RC_SEND_ONLY, PSN_A + 2, b"x", |_| {});
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &ahead), RxOutcome::Nak);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &request(Opcode::RC_SEND_ONLY, PSN_A + 3, b"x", |_| {})), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(out.len(), 1, "one NAK per sequence error");
    assert_eq!(aeth(&out[0]).0, AethSyndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(p(&out[0]).headers.bth.psn.value(), PSN_A, "the NAK carries the ePSN");
    // The expected packet clears the error; a new gap NAKs again.
    deliver(&mut r.b, 0, &mut r.mb, &request(Opcode::RC_SEND_ONLY, PSN_A, b"x", |_| {}));
    deliver(&mut r.b, 0, &mut r.mb, &request(Opcode::RC_SEND_ONLY, PSN_A + 5, b"x", |_| {}));
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(out.len(), 2);
    assert_eq!(aeth(&out[1]).0, AethSyndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(p(&out[1]).headers.bth.psn.value(), PSN_A + 1);
    assert_eq!(r.b.state(), QpState::Rts, "a sequence error is not fatal");
}

#[test]
fn rc_requester_goes_back_n_from_naked_psn() {
    let mut r = setup();
    post_recvs(&mut r, 4);
    for i in 0..4 {
        r.a.post_send(&send(&r, i, 10)).unwrap();
    }
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    // Packet 1 is lost; 2 and 3 trigger one sequence NAK for PSN_A + 1.
    for i in [0, 2, 3] {
        deliver(&mut r.b, 0, &mut r.mb, &pk[i]);
    }
    let resp = drain_tx(&mut r.b, 0, &mut r.mb);
    for x in &resp {
        deliver(&mut r.a, 0, &mut r.ma, x);
    }
    let again = drain_tx(&mut r.a, 0, &mut r.ma);
    let psns: Vec<u32> = again.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![PSN_A + 1, PSN_A + 2, PSN_A + 3]);
    for x in &again {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s.len(), 4);
    assert_eq!(all_cqes(&mut r.b).1.len(), 4, "each send delivered once");
}

/// A loss halves the packets the requester keeps in flight (AIMD: a path
/// that drops bursts is not overrun again); the rest completes.
#[test]
fn rc_loss_halves_the_window_then_everything_completes() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, sq: 256, ..RcParams::default() });
    // 200 one-packet WRITEs (MTU 256): the window bounds the first burst.
    for i in 0..200 {
        r.a.post_send(&write(&r, i, 16, 0x3_0000)).unwrap();
    }
    let first = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(first.len(), 128, "full window before any loss");
    // The first packet is lost: the responder NAKs the gap once.
    for x in &first[1..] {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    for x in &drain_tx(&mut r.b, 0, &mut r.mb) {
        deliver(&mut r.a, 0, &mut r.ma, x);
    }
    let again = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(again.len(), 64, "window halved after the loss");
    assert_eq!(p(&again[0]).headers.bth.psn.value(), PSN_A, "go back to the lost PSN");
    // Everything from here on arrives: the exchange completes all 200 and
    // the window grows again.
    for x in &again {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s.len(), 200);
    assert!(!r.a.may_transmit(0));
}

/// After losses shrink the window below ACK_REQ_EVERY packets, a long
/// message still moves: the packet that fills the window asks for the ACK
/// (without it the requester would wait for the ACK timeout). No timer runs
/// here, so a stall shows as an incomplete transfer.
#[test]
fn rc_small_window_asks_for_the_ack_that_opens_it() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, sq: 256, ..RcParams::default() });
    // Four losses: 128 -> 64 -> 32 -> 16 -> 8 packets.
    for round in 0..4u64 {
        for i in 0..2 {
            r.a.post_send(&write(&r, round * 2 + i, 16, 0x3_0000)).unwrap();
        }
        let sent = drain_tx(&mut r.a, 0, &mut r.ma);
        for x in &sent[1..] {
            deliver(&mut r.b, 0, &mut r.mb, x);
        }
        exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    }
    assert_eq!(all_cqes(&mut r.a).0.len(), 8, "the lost WRITEs were retransmitted");
    // One 64-packet WRITE (16 KiB at MTU 256).
    r.a.post_send(&write(&r, 100, 16384, 0x3_0000)).unwrap();
    let burst = drain_tx(&mut r.a, 0, &mut r.ma);
    assert!(burst.len() < 16, "a reduced window ({} packets sent)", burst.len());
    assert!(p(burst.last().unwrap()).headers.bth.ack_req, "the packet that fills the window asks for an ACK");
    for x in &burst {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s.len(), 1, "the long WRITE completes without a timeout");
    assert_eq!(r.mb.region(r.tgt).data[..16384], r.ma.region(r.src).data[..16384]);
}

#[test]
fn rc_nak_invalid_request_on_opcode_sequence_error_moves_both_to_error() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    let bad = request(Opcode::RC_SEND_MIDDLE, PSN_A, &[0u8; 256], |_| {});
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &bad), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(aeth(&out[0]).0, AethSyndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(r.b.state(), QpState::Err);
    assert!(all_cqes(&mut r.b).1.iter().all(|c| c.status == WcStatus::WrFlushErr));
    // No receive WQE reports it: the responder raises the affiliated
    // asynchronous error, once.
    assert_eq!(r.b.take_async_error(), Some(AsyncError::InvalidRequest));
    assert_eq!(r.b.take_async_error(), None);
    // The requester side: REM_INV_REQ_ERR, then flush.
    r.a.post_send(&send(&r, 1, 4)).unwrap();
    r.a.post_send(&send(&r, 2, 4)).unwrap();
    drain_tx(&mut r.a, 0, &mut r.ma);
    let mut nak = out[0].clone();
    nak[5..8].copy_from_slice(&A.to_be_bytes()[1..]);
    nak[9..12].copy_from_slice(&PSN_A.to_be_bytes()[1..]);
    deliver(&mut r.a, 0, &mut r.ma, &nak);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!((s[0].status, s[1].status), (WcStatus::RemInvReqErr, WcStatus::WrFlushErr));
    assert_eq!(r.a.state(), QpState::Err);
}

#[test]
fn rc_nak_remote_access_error_gives_rem_access_err_and_flush() {
    let mut r = setup();
    let mut w = write(&r, 1, 100, 0x3_0000);
    w.rkey = 0x4444;
    r.a.post_send(&w).unwrap();
    r.a.post_send(&send(&r, 2, 4)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!((s[0].status, s[1].status), (WcStatus::RemAccessErr, WcStatus::WrFlushErr));
    assert_eq!((r.a.state(), r.b.state()), (QpState::Err, QpState::Err));
    assert_eq!((r.a.take_async_error(), r.b.take_async_error()), (None, Some(AsyncError::AccessViolation)));
    // Out of bounds and a READ without REMOTE_READ are access errors too.
    let mut r = setup();
    r.mb.region_mut(r.tgt).access = access::REMOTE_WRITE;
    r.a.post_send(&read(&r, 1, 16, 0x1_0000, 0x3_0000)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
}

#[test]
fn rc_nak_remote_operational_error_for_bad_receive_lkey() {
    let mut r = setup();
    r.b.post_recv(&recv_wr(9, &[(0x2_0000, 1024, 0x999)])).unwrap();
    r.a.post_send(&send(&r, 1, 10)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemOpErr);
    let c = r.b.poll_recv_cq().unwrap();
    assert_eq!((c.wr_id, c.status), (9, WcStatus::LocProtErr));
    // The completion reports it: no asynchronous error.
    assert_eq!(r.b.take_async_error(), None);
}

#[test]
fn rc_send_longer_than_receive_buffer_is_invalid_request_and_local_length_error() {
    let mut r = setup();
    r.b.post_recv(&recv_wr(9, &[(0x2_0000, 100, r.dst)])).unwrap();
    r.a.post_send(&send(&r, 1, 200)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemInvReqErr);
    assert_eq!(r.b.poll_recv_cq().unwrap().status, WcStatus::LocLenErr);
}

#[test]
fn rc_rnr_nak_carries_min_rnr_timer_and_requester_waits() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, min_rnr_timer: 14, ..RcParams::default() });
    r.a.post_send(&send(&r, 1, 10)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(aeth(&out[0]).0, AethSyndrome::RnrNak { timer: 14 });
    assert_eq!(p(&out[0]).headers.bth.psn.value(), PSN_A);
    deliver(&mut r.a, 1000, &mut r.ma, &out[0]);
    // 1.28 ms for code 14: nothing before, the retry after.
    assert_eq!(r.a.next_deadline(), Some(1000 + 1_280_000));
    assert!(drain_tx(&mut r.a, 1000 + 1_279_999, &mut r.ma).is_empty());
    r.a.on_timer(1000 + 1_280_000);
    post_recvs(&mut r, 1);
    let again = drain_tx(&mut r.a, 1000 + 1_280_000, &mut r.ma);
    assert_eq!(p(&again[0]).headers.bth.psn.value(), PSN_A);
    deliver(&mut r.b, 0, &mut r.mb, &again[0]);
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 2_000_000);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
}

#[test]
fn rc_write_with_immediate_needs_receive_wqe_rnr_before_data_lands() {
    let mut r = setup();
    let mut w = write(&r, 1, 16, 0x3_0000);
    w.opcode = WrOpcode::RdmaWriteWithImm;
    w.imm_data = 99;
    r.a.post_send(&w).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    let before = r.mb.bytes(r.tgt, 0, 16).to_vec();
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Nak);
    assert_eq!(r.mb.bytes(r.tgt, 0, 16), &before[..]);
    post_recvs(&mut r, 1);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Accepted);
    let c = r.b.poll_recv_cq().unwrap();
    assert_eq!((c.opcode, c.imm_data, c.byte_len), (WcOpcode::RecvRdmaWithImm, 99, 16));
}

#[test]
fn rc_duplicate_send_and_write_are_reacked_not_reexecuted() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    r.a.post_send(&send(&r, 1, 10)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    deliver(&mut r.b, 0, &mut r.mb, &pk[0]);
    drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Accepted);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(out.len(), 1);
    assert!(matches!(aeth(&out[0]).0, AethSyndrome::Ack { .. }));
    assert_eq!(p(&out[0]).headers.bth.psn.value(), PSN_A);
    assert_eq!(all_cqes(&mut r.b).1.len(), 1, "executed once");
    assert_eq!(r.b.recv_queue_len(), 1);
}

#[test]
fn rc_duplicate_read_regenerated_from_read_resources() {
    let mut r = setup();
    r.a.post_send(&read(&r, 1, 600, 0x1_8000, 0x3_0000)).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    let first = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(first.len(), 3);
    // The duplicate of the whole request, and one resuming at packet 2.
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    let again = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(again, first, "same responses, regenerated");
    let resume = read_request(PSN_A + 2, 0x3_0000 + 512, r.tgt, 88);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &resume), RxOutcome::Accepted);
    let tail = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(tail.len(), 1);
    assert_eq!(p(&tail[0]).headers.bth.psn.value(), PSN_A + 2);
    assert_eq!(p(&tail[0]).payload, p(&first[2]).payload);
    assert_eq!(r.b.state(), QpState::Rts);
}

#[test]
fn rc_duplicate_atomic_replays_cached_result_without_reexecuting() {
    let mut r = setup();
    let mut fa = send_wr(1, WrOpcode::AtomicFetchAndAdd, &[(0x1_9000, 8, r.src)]);
    fa.remote_addr = 0x3_1000;
    fa.rkey = r.tgt;
    fa.compare_add = 1;
    r.a.post_send(&fa).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    let first = drain_tx(&mut r.b, 0, &mut r.mb);
    let after = r.mb.bytes(r.tgt, 0x1000, 8).to_vec();
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    let again = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(again, first, "cached original value replayed");
    assert_eq!(r.mb.bytes(r.tgt, 0x1000, 8), &after[..], "not executed twice");
    assert_eq!(p(&again[0]).headers.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
}

#[test]
fn rc_duplicate_write_after_atomic_is_acked_at_its_own_psn() {
    // Found against rdma_rxe (tests/guest/interop.sh): a duplicate WRITE
    // re-ACKed with ePSN - 1 named the PSN of a later atomic, and rxe's
    // completer took that plain ACK as the atomic's completion, without
    // its result. Only an ATOMIC ACKNOWLEDGE may carry the atomic's PSN.
    let mut r = setup();
    let mut w = send_wr(1, WrOpcode::RdmaWrite, &[(0x1_8000, 16, r.src)]);
    w.remote_addr = 0x3_0000;
    w.rkey = r.tgt;
    r.a.post_send(&w).unwrap();
    let mut fa = send_wr(2, WrOpcode::AtomicFetchAndAdd, &[(0x1_9000, 8, r.src)]);
    fa.remote_addr = 0x3_1000;
    fa.rkey = r.tgt;
    fa.compare_add = 1;
    r.a.post_send(&fa).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(req.len(), 2);
    for pkt in &req {
        deliver(&mut r.b, 0, &mut r.mb, pkt);
    }
    drain_tx(&mut r.b, 0, &mut r.mb);
    // The WRITE again (the requester went back N).
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &req[0]), RxOutcome::Accepted);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(out.len(), 1);
    assert!(matches!(aeth(&out[0]).0, AethSyndrome::Ack { .. }));
    assert_eq!(p(&out[0]).headers.bth.psn.value(), PSN_A, "the WRITE's PSN, not the atomic's");
}

#[test]
fn rc_msn_counts_completed_messages() {
    let mut r = setup();
    post_recvs(&mut r, 3);
    for i in 0..3 {
        r.a.post_send(&send(&r, i, 300)).unwrap();
    }
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    let mut msns = Vec::new();
    for x in &pk {
        deliver(&mut r.b, 0, &mut r.mb, x);
        for o in drain_tx(&mut r.b, 0, &mut r.mb) {
            msns.push(aeth(&o).1);
        }
    }
    assert_eq!(msns, vec![1, 2, 3]);
}

#[test]
fn rc_ack_coalescing_one_ack_covers_all_earlier_psns() {
    let mut r = setup();
    post_recvs(&mut r, 5);
    for i in 0..5 {
        r.a.post_send(&send(&r, i, 10)).unwrap();
    }
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    for x in &pk {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    let acks = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(acks.len(), 1, "queued ACKs coalesce");
    deliver(&mut r.a, 0, &mut r.ma, acks.last().unwrap());
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert_eq!(r.a.next_deadline(), None, "nothing outstanding");
}

#[test]
fn rc_implied_nak_reissues_read_when_ack_passes_it() {
    let mut r = setup();
    post_recvs(&mut r, 1);
    r.a.post_send(&read(&r, 1, 100, 0x1_8000, 0x3_0000)).unwrap();
    r.a.post_send(&send(&r, 2, 10)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    for x in &pk {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    let resp = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(resp.len(), 2);
    // The READ response is lost; the ACK of the SEND passes the READ.
    deliver(&mut r.a, 0, &mut r.ma, &resp[1]);
    assert!(r.a.poll_send_cq().is_none());
    let again = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(p(&again[0]).headers.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(p(&again[0]).headers.bth.psn.value(), PSN_A);
    for x in &again {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(all_cqes(&mut r.b).1.len(), 1);
}

/// The reorder that breaks rdma_rxe's requester (Linux 7.2): the ACK of a
/// WRITE arrives among the responses of the READ after it. An older ACK
/// acknowledges nothing new; the READ's responses are placed by PSN and
/// the READ completes with all of its data, once, without a retry.
#[test]
fn rc_old_ack_among_read_responses_changes_nothing() {
    let mut r = setup();
    r.a.post_send(&write(&r, 1, 100, 0x3_0000)).unwrap();
    r.a.post_send(&read(&r, 2, 1000, 0x1_8000, 0x3_0400)).unwrap();
    for x in &drain_tx(&mut r.a, 0, &mut r.ma) {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    let resp = drain_tx(&mut r.b, 0, &mut r.mb);
    let ops: Vec<Opcode> = resp.iter().map(|x| p(x).headers.bth.opcode).collect();
    assert_eq!(ops[0], Opcode::RC_ACKNOWLEDGE, "the WRITE's ACK first: {ops:?}");
    assert_eq!(resp.len(), 5, "ACK, then 4 READ responses at MTU 256");
    // READ FIRST, the old ACK, the rest of the READ, the ACK once more.
    for i in [1, 0, 2, 3, 4, 0] {
        assert_ne!(deliver(&mut r.a, 0, &mut r.ma, &resp[i]), RxOutcome::Nak);
    }
    let (s, _) = all_cqes(&mut r.a);
    let got: Vec<(u64, WcStatus, WcOpcode)> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(got, vec![(1, WcStatus::Success, WcOpcode::RdmaWrite), (2, WcStatus::Success, WcOpcode::RdmaRead)]);
    assert_eq!(s[1].byte_len, 1000);
    assert_eq!(r.ma.bytes(r.src, 0x8000, 1000), r.mb.bytes(r.tgt, 0x400, 1000), "every byte of the READ");
    assert!(drain_tx(&mut r.a, 0, &mut r.ma).is_empty(), "no retransmission");
    assert_eq!(r.a.next_deadline(), None, "nothing outstanding");
    assert_eq!(r.a.state(), QpState::Rts);
}

#[test]
fn rc_max_rd_atomic_limits_outstanding_reads_and_fence_waits() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, max_rd_atomic: 2, ..RcParams::default() });
    for i in 0..4 {
        r.a.post_send(&read(&r, i, 8, 0x1_8000 + 8 * i, 0x3_0000)).unwrap();
    }
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(pk.len(), 2, "only max_rd_atomic READs outstanding");
    for x in &pk {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(all_cqes(&mut r.a).0.len(), 4);
    // A fenced SEND waits for the earlier READ.
    post_recvs(&mut r, 1);
    r.a.post_send(&read(&r, 5, 8, 0x1_8000, 0x3_0000)).unwrap();
    let mut s = send(&r, 6, 8);
    s.send_flags |= send_flags::FENCE;
    r.a.post_send(&s).unwrap();
    assert_eq!(drain_tx(&mut r.a, 0, &mut r.ma).len(), 1);
}

#[test]
fn rc_responder_nak_invalid_request_beyond_max_dest_rd_atomic_zero() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, max_rd_atomic: 0, ..RcParams::default() });
    let req = read_request(PSN_A, 0x3_0000, r.tgt, 8);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &req), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(aeth(&out[0]).0, AethSyndrome::Nak(NakCode::InvalidRequest));
}

#[test]
fn rc_send_with_invalidate_reports_and_invalidates_rkey() {
    let mut r = setup();
    post_recvs(&mut r, 1);
    let mut w = send(&r, 1, 10);
    w.opcode = WrOpcode::SendWithInv;
    w.imm_data = r.tgt;
    r.a.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let c = r.b.poll_recv_cq().unwrap();
    assert_eq!((c.wc_flags, c.imm_data), (wc_flags::WITH_INV, r.tgt));
    assert!(!r.mb.region(r.tgt).valid);
}

#[test]
fn rc_local_protection_error_completes_in_error_and_flushes() {
    let mut r = setup();
    r.a.post_send(&send_wr(1, WrOpcode::Send, &[(0x1_0000, 10, 0x5555)])).unwrap();
    r.a.post_send(&send(&r, 2, 10)).unwrap();
    assert!(drain_tx(&mut r.a, 0, &mut r.ma).is_empty());
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!((s[0].status, s[1].status), (WcStatus::LocProtErr, WcStatus::WrFlushErr));
    assert_eq!(r.a.state(), QpState::Err, "RC has no SQE state");
}

#[test]
fn rc_modify_to_error_flushes_both_queues() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    r.b.post_send(&send_wr(1, WrOpcode::Send, &[(0x2_0000, 4, r.dst)])).unwrap();
    r.b.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, mask::STATE).unwrap();
    let (s, rr) = all_cqes(&mut r.b);
    assert_eq!(s.len(), 1);
    assert_eq!(rr.len(), 2);
    assert!(s.iter().chain(&rr).all(|c| c.status == WcStatus::WrFlushErr));
    assert_eq!(rr[0].opcode, WcOpcode::Recv);
    // Posting in ERR completes at once with a flush.
    r.b.post_recv(&recv_wr(7, &[(0x2_0000, 4, r.dst)])).unwrap();
    assert_eq!(r.b.poll_recv_cq().unwrap().status, WcStatus::WrFlushErr);
    // ERR -> RESET -> INIT works again.
    r.b.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, mask::STATE).unwrap();
    assert_eq!(r.b.state(), QpState::Reset);
}

#[test]
fn rc_modify_errors_leave_qp_unchanged() {
    let mut r = setup();
    let e = r.a.modify(&QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, mask::STATE);
    assert_eq!(e.unwrap_err().errno(), -22);
    assert_eq!(r.a.state(), QpState::Rts);
    // RTS->RTS may not carry TIMEOUT (only SQD->SQD may).
    assert!(r.a.modify(&QpAttr { timeout: 3, ..QpAttr::default() }, mask::TIMEOUT).is_err());
    assert_eq!(r.a.attr().timeout, 8);
    // A value out of range is refused even on a legal transition.
    let bad = QpAttr { qp_state: QpState::Rts, min_rnr_timer: 40, ..QpAttr::default() };
    assert!(r.a.modify(&bad, mask::STATE | mask::MIN_RNR_TIMER).is_err());
    assert_eq!(r.a.attr().min_rnr_timer, 1);
}

#[test]
fn rc_status_values_equal_ibv_wc_status() {
    assert_eq!(WcStatus::Success as u32, 0);
    assert_eq!(WcStatus::LocLenErr as u32, 1);
    assert_eq!(WcStatus::LocProtErr as u32, 4);
    assert_eq!(WcStatus::WrFlushErr as u32, 5);
    assert_eq!(WcStatus::RemInvReqErr as u32, 9);
    assert_eq!(WcStatus::RemAccessErr as u32, 10);
    assert_eq!(WcStatus::RemOpErr as u32, 11);
    assert_eq!(WcStatus::RetryExcErr as u32, 12);
    assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
}

#[test]
fn rc_read_resources_recycle_oldest_first_keeping_newer_ones_for_duplicates() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, max_rd_atomic: 2, ..RcParams::default() });
    let rkey = r.tgt;
    let rd = |psn: u32| read_request(psn, 0x3_0000, rkey, 8);
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A));
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 1));
    assert_eq!(drain_tx(&mut r.b, 0, &mut r.mb).len(), 2);
    // A stale duplicate of the first READ is queued again, then a third
    // READ arrives: it takes the oldest slot (cancelling the stale reply).
    // A duplicate of the second READ then abandons the third's queued
    // reply (its requester resends it) and is answered from the second's
    // resource, which was kept; the third's duplicate finds its own.
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A));
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 2));
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 1));
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let psns: Vec<u32> = out.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![PSN_A + 1]);
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 2));
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let psns: Vec<u32> = out.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![PSN_A + 2]);
}

#[test]
fn rc_duplicate_read_is_answered_before_the_streams_queued_after_it() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, max_rd_atomic: 2, ..RcParams::default() });
    let rkey = r.tgt;
    let rd = |psn: u32, len: u32| read_request(psn, 0x3_0000, rkey, len);
    // A one-packet READ, then an eight-packet one right behind it.
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A, 8));
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 1, 8 * 256));
    // The first response is lost on the wire; the second stream has
    // started when the requester's timer resends both requests.
    let mut buf = vec![0u8; 5000];
    r.b.poll_transmit(0, &mut r.mb, &mut buf).unwrap();
    r.b.poll_transmit(0, &mut r.mb, &mut buf).unwrap();
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A, 8));
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let psns: Vec<u32> = out.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![PSN_A], "the duplicate is answered at once, the stale stream dropped");
    assert_eq!(p(&out[0]).headers.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(p(&out[0]).payload, &r.mb.region_mut(r.tgt).data[..8]);
    // The resent second READ is answered whole from its resource.
    deliver(&mut r.b, 0, &mut r.mb, &rd(PSN_A + 1, 8 * 256));
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let psns: Vec<u32> = out.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, (PSN_A + 1..PSN_A + 9).collect::<Vec<_>>());
    assert_eq!(p(&out[0]).headers.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    assert_eq!(p(&out[7]).headers.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_LAST);
}

#[test]
fn rc_sqd_finishes_message_in_progress_and_starts_no_new_one() {
    let mut r = setup();
    post_recvs(&mut r, 2);
    r.a.post_send(&send(&r, 1, 256 * 3)).unwrap();
    r.a.post_send(&send(&r, 2, 10)).unwrap();
    let mut buf = vec![0u8; 5000];
    let t = r.a.poll_transmit(0, &mut r.ma, &mut buf).unwrap();
    let first = buf[..t.len].to_vec();
    r.a.modify(&QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() }, mask::STATE).unwrap();
    let rest = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(rest.len(), 2, "the started message finishes");
    assert!(!r.a.is_send_idle());
    for x in std::iter::once(&first).chain(&rest) {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert!(r.a.is_send_idle(), "drained");
    assert_eq!(all_cqes(&mut r.a).0.len(), 1, "the second WR did not start");
    r.a.modify(&QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, mask::STATE).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(all_cqes(&mut r.a).0.len(), 1);
    assert_eq!(all_cqes(&mut r.b).1.len(), 2);
}

// --- Fast registration (IB_WR_REG_MR), local and remote invalidation -------

const FR_IOVA: u64 = 0x7000_1234;
const FR_ACCESS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;

/// B's fast region (4 KiB of pages) and a REG_MR for it with consumer key
/// byte `byte`.
fn fast_setup(r: &mut Rc, byte: u8) -> (u32, SendWqe) {
    let h = r.mb.alloc_fast(PD, 4096);
    let mut w = send_wr(50, WrOpcode::RegMr, &[]);
    w.reg = FastReg { mr: h, key: fast_key(h, byte), access: FR_ACCESS, iova: FR_IOVA, length: 4096 };
    (h, w)
}

fn local_inv(wr_id: u64, key: u32) -> SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::LocalInv, &[]);
    w.imm_data = key;
    w
}

#[test]
fn rc_fast_reg_then_remote_write_and_read_through_the_new_rkey() {
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 0x5a);
    let key = fast_key(h, 0x5a);
    // Before registration the key names nothing.
    assert!(!r.mb.fast[h as usize].valid);
    r.b.post_send(&reg).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.b);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].wr_id, s[0].status, s[0].opcode, s[0].byte_len), (50, WcStatus::Success, WcOpcode::RegMr, 0));
    let f = &r.mb.fast[h as usize];
    assert!(f.valid);
    assert_eq!((f.key, f.iova, f.length, f.access), (key, FR_IOVA, 4096, FR_ACCESS));
    // WRITE 1000 bytes (4 packets) at iova + 100 through the new R_Key.
    let mut w = write(&r, 1, 1000, FR_IOVA + 100);
    w.rkey = key;
    r.a.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(&r.mb.fast[h as usize].data[100..1100], r.ma.bytes(r.src, 0, 1000));
    // READ it back into another part of A's buffer.
    let mut rd = read(&r, 2, 1000, 0x1_0000 + 8192, FR_IOVA + 100);
    rd.rkey = key;
    r.a.post_send(&rd).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert!(s.iter().all(|c| c.status == WcStatus::Success), "{s:?}");
    assert_eq!(r.ma.bytes(r.src, 8192, 1000), r.ma.bytes(r.src, 0, 1000));
    // The old key byte no longer names it.
    let mut w = write(&r, 3, 8, FR_IOVA);
    w.rkey = fast_key(h, 0);
    r.a.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
}

#[test]
fn rc_local_inv_then_remote_access_is_refused_and_memory_untouched() {
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 7);
    let key = fast_key(h, 7);
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&local_inv(51, key)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.b);
    let ops: Vec<_> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(ops, [(50, WcStatus::Success, WcOpcode::RegMr), (51, WcStatus::Success, WcOpcode::LocalInv)]);
    assert!(!r.mb.fast[h as usize].valid);
    let mut w = write(&r, 1, 16, FR_IOVA);
    w.rkey = key;
    r.a.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
    assert!(r.mb.fast[h as usize].data.iter().all(|&x| x == 0), "an invalid region was written");
    // READ is refused the same way (a fresh pair: A is in ERR now).
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 7);
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&local_inv(51, fast_key(h, 7))).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let mut rd = read(&r, 2, 16, 0x1_0000, FR_IOVA);
    rd.rkey = fast_key(h, 7);
    r.a.post_send(&rd).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.a);
    assert_eq!(s[0].status, WcStatus::RemAccessErr);
}

#[test]
fn rc_send_with_invalidate_invalidates_a_fast_registered_rkey() {
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 9);
    r.b.post_send(&reg).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert!(r.mb.fast[h as usize].valid);
    post_recvs(&mut r, 1);
    let mut w = send(&r, 1, 10);
    w.opcode = WrOpcode::SendWithInv;
    w.imm_data = fast_key(h, 9);
    r.a.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let c = r.b.poll_recv_cq().unwrap();
    assert_eq!((c.status, c.wc_flags, c.imm_data), (WcStatus::Success, wc_flags::WITH_INV, fast_key(h, 9)));
    assert!(!r.mb.fast[h as usize].valid);
    // Registered again (the consumer bumps the key byte) it works again.
    let mut reg2 = reg;
    reg2.reg.key = fast_key(h, 10);
    r.b.post_send(&reg2).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert!(r.mb.fast[h as usize].valid);
    assert_eq!(r.mb.fast[h as usize].key, fast_key(h, 10));
}

#[test]
fn rc_fast_reg_takes_effect_in_order_when_the_requester_reaches_it() {
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 1);
    // B: a 3-packet SEND, then REG_MR, then a 1-packet SEND.
    for i in 0..2 {
        r.a.post_recv(&recv_wr(i, &[(0x1_0000 + i * 1024, 1024, r.src)])).unwrap();
    }
    r.b.post_send(&send_wr(1, WrOpcode::Send, &[(0x2_0000, 600, r.dst)])).unwrap();
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&send_wr(3, WrOpcode::Send, &[(0x2_0000, 8, r.dst)])).unwrap();
    // Posting executes nothing.
    assert!(!r.mb.fast[h as usize].valid);
    let mut buf = vec![0u8; 4096 + 64];
    let mut pkts = Vec::new();
    for n in 0..3 {
        let t = poll_checked(&mut r.b, 0, &mut r.mb, &mut buf).unwrap();
        pkts.push(buf[..t.len].to_vec());
        // Not before the SEND ahead of it was wholly processed.
        assert!(!r.mb.fast[h as usize].valid, "REG_MR took effect during packet {n} of the SEND before it");
    }
    // The next packet is the later SEND: the registration ran first.
    let t = poll_checked(&mut r.b, 0, &mut r.mb, &mut buf).unwrap();
    assert!(r.mb.fast[h as usize].valid, "REG_MR did not take effect before the SEND after it");
    pkts.push(buf[..t.len].to_vec());
    assert_eq!(p(&pkts[3]).headers.bth.psn, Psn::new(PSN_B).wrapping_add(3), "REG_MR used no PSN");
    // Completed at once but reported in order: nothing before the ACKs.
    assert!(r.b.poll_send_cq().is_none());
    for pk in &pkts {
        deliver(&mut r.a, 0, &mut r.ma, pk);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.b);
    let ops: Vec<_> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        ops,
        [(1, WcStatus::Success, WcOpcode::Send), (50, WcStatus::Success, WcOpcode::RegMr), (3, WcStatus::Success, WcOpcode::Send)]
    );
    assert!(r.b.is_send_idle());
}

#[test]
fn rc_go_back_n_over_a_local_operation_does_not_run_it_again() {
    let mut r = setup();
    let (h, reg) = fast_setup(&mut r, 2);
    for i in 0..2 {
        r.a.post_recv(&recv_wr(i, &[(0x1_0000 + i * 1024, 1024, r.src)])).unwrap();
    }
    r.b.post_send(&send_wr(1, WrOpcode::Send, &[(0x2_0000, 600, r.dst)])).unwrap();
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&local_inv(52, fast_key(h, 2))).unwrap();
    r.b.post_send(&send_wr(3, WrOpcode::Send, &[(0x2_0000, 8, r.dst)])).unwrap();
    // Everything B sends is lost once; the ACK timeout sends it again.
    let lost = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(lost.len(), 4);
    assert!(!r.mb.fast[h as usize].valid, "registered then invalidated");
    let t = r.b.next_deadline().unwrap();
    r.b.on_timer(t);
    // Re-registering would fail (or leave it valid): it is not run again.
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, t);
    let (s, _) = all_cqes(&mut r.b);
    let ops: Vec<_> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        ops,
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (50, WcStatus::Success, WcOpcode::RegMr),
            (52, WcStatus::Success, WcOpcode::LocalInv),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert!(!r.mb.fast[h as usize].valid);
    let (_, rr) = all_cqes(&mut r.a);
    assert_eq!(rr.len(), 2);
}

#[test]
fn rc_fast_reg_errors_complete_in_error_and_flush() {
    // Registering a region that is already valid (IBTA: it must be free).
    let mut r = setup();
    let (_, reg) = fast_setup(&mut r, 3);
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&reg).unwrap();
    r.b.post_send(&local_inv(53, 0x4242)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let (s, _) = all_cqes(&mut r.b);
    let st: Vec<_> = s.iter().map(|c| (c.status, c.opcode)).collect();
    assert_eq!(
        st,
        [
            (WcStatus::Success, WcOpcode::RegMr),
            (WcStatus::LocProtErr, WcOpcode::RegMr),
            (WcStatus::WrFlushErr, WcOpcode::LocalInv)
        ]
    );
    assert_eq!(r.b.state(), QpState::Err);
    // Invalidating a key that names nothing.
    let mut r = setup();
    r.b.post_send(&local_inv(54, 0x4242)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.b.poll_send_cq().unwrap().status, WcStatus::LocProtErr);
    // Another PD's region.
    let mut r = setup();
    let h = r.mb.alloc_fast(PD + 1, 4096);
    let mut w = send_wr(55, WrOpcode::RegMr, &[]);
    w.reg = FastReg { mr: h, key: fast_key(h, 1), access: FR_ACCESS, iova: 0, length: 4096 };
    r.b.post_send(&w).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.b.poll_send_cq().unwrap().status, WcStatus::LocProtErr);
}

#[test]
fn rc_local_operations_are_not_inline_and_not_on_ud() {
    let mut r = setup();
    let (_, mut reg) = fast_setup(&mut r, 4);
    reg.send_flags |= send_flags::INLINE;
    assert!(r.b.post_send(&reg).is_err());
    let mut ud = ud_qp(0x33, 0x1111, Mtu::Mtu256, 0);
    reg.send_flags = 0;
    assert!(ud.post_send(&reg).is_err());
    assert!(ud.post_send(&local_inv(1, 0x4242)).is_err());
    // Process rings use from_u32: a process binds and invalidates
    // windows; fast registration is the kernel's.
    assert_eq!(WrOpcode::from_u32(WrOpcode::RegMr as u32), None);
    assert_eq!(WrOpcode::from_u32(7), Some(WrOpcode::LocalInv));
    assert_eq!(WrOpcode::from_u32(8), Some(WrOpcode::BindMw));
    assert_eq!((WcOpcode::BindMw as u32, WcOpcode::LocalInv as u32, WcOpcode::RegMr as u32), (5, 6, 10));
}

/// A receive WQE in the middle of a message (SEND_FIRST executed, the rest
/// not arrived) is "unfinished": the glue gives it back to its SRQ before a
/// reset drops it. A completed one is not, and ERR completes it instead.
#[test]
fn rc_unfinished_recv_is_the_wqe_of_the_message_in_progress() {
    let mut r = setup();
    assert!(r.b.unfinished_recv().is_none());
    r.b.post_recv(&recv_wr(7, &[(0x2_0000, 1024, r.dst)])).unwrap();
    assert_eq!(r.b.unfinished_recv().map(|w| w.wr_id), Some(7));
    r.a.post_send(&send(&r, 1, 256 * 2 + 5)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(pk.len(), 3);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Accepted);
    assert_eq!(r.b.unfinished_recv().map(|w| w.wr_id), Some(7), "the message is in progress");
    for x in &pk[1..] {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    assert!(r.b.unfinished_recv().is_none(), "completed: nothing to give back");
    assert_eq!(r.b.poll_recv_cq().map(|c| (c.wr_id, c.status)), Some((7, WcStatus::Success)));
    // In progress again, then ERR: the WQE completes with a flush error.
    r.b.post_recv(&recv_wr(8, &[(0x2_0000, 1024, r.dst)])).unwrap();
    r.a.post_send(&send(&r, 2, 256 * 2 + 5)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    deliver(&mut r.b, 0, &mut r.mb, &pk[0]);
    r.b.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, mask::STATE).unwrap();
    assert!(r.b.unfinished_recv().is_none());
    assert_eq!(r.b.poll_recv_cq().map(|c| (c.wr_id, c.status)), Some((8, WcStatus::WrFlushErr)));
}

fn atomic_write(r: &Rc, wr_id: u64, raddr: u64, value: [u8; 8]) -> SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::AtomicWrite, &[]);
    w.remote_addr = raddr;
    w.rkey = r.tgt;
    w.compare_add = u64::from_ne_bytes(value);
    w
}

fn flush(r: &Rc, wr_id: u64, raddr: u64, len: u64, placement: u32, whole: bool) -> SendWqe {
    let mut w = send_wr(wr_id, WrOpcode::Flush, &[]);
    w.remote_addr = raddr;
    w.rkey = r.tgt;
    w.compare_add = len;
    w.imm_data = placement | if whole { 1 << 4 } else { 0 };
    w
}

#[test]
fn rc_atomic_write_places_8_bytes_and_is_answered_by_an_empty_read_response() {
    let mut r = setup();
    r.a.post_send(&atomic_write(&r, 1, 0x3_0200, *b"ferroce!")).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    let q = p(&req[0]);
    assert_eq!((q.headers.bth.opcode, q.payload, q.headers.bth.ack_req), (Opcode::RC_ATOMIC_WRITE, &b"ferroce!"[..], true));
    assert_eq!(q.headers.reth.map(|x| (x.va, x.dma_len)), Some((0x3_0200, 8)));
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    assert_eq!(r.mb.bytes(r.tgt, 0x200, 8), b"ferroce!");
    let resp = drain_tx(&mut r.b, 0, &mut r.mb);
    let a = p(&resp[0]);
    assert_eq!((a.headers.bth.opcode, a.payload.len()), (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0));
    // A duplicate is answered again and not executed again.
    r.mb.region_mut(r.tgt).data[0x200] = 0;
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    assert_eq!(drain_tx(&mut r.b, 0, &mut r.mb), resp);
    assert_eq!(r.mb.bytes(r.tgt, 0x200, 1), &[0]);
    deliver(&mut r.a, 0, &mut r.ma, &resp[0]);
    let c = r.a.poll_send_cq().unwrap();
    assert_eq!((c.wr_id, c.status, c.opcode), (1, WcStatus::Success, WcOpcode::AtomicWrite));
}

#[test]
fn rc_atomic_write_misaligned_is_invalid_request_without_write_right_remote_access_error() {
    let mut r = setup();
    r.a.post_send(&atomic_write(&r, 1, 0x3_0204, [1; 8])).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemInvReqErr);
    assert_eq!(r.mb.bytes(r.tgt, 0x204, 8), &[(0x204 * 3) as u8, (0x205 * 3) as u8, (0x206 * 3) as u8, (0x207 * 3) as u8, (0x208 * 3) as u8, (0x209 * 3) as u8, (0x20a * 3) as u8, (0x20b * 3) as u8]);
    let mut r = setup();
    r.mb.region_mut(r.tgt).access = access::REMOTE_READ;
    r.a.post_send(&atomic_write(&r, 1, 0x3_0200, [1; 8])).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
    // A length other than 8 in the RETH, or a payload other than 8 bytes.
    for (dma_len, payload) in [(16u32, &[0u8; 8][..]), (8, &[0u8; 4][..])] {
        let mut r = setup();
        let req = request(Opcode::RC_ATOMIC_WRITE, PSN_A, payload, |h| {
            h.reth = Some(RethRepr { va: 0x3_0200, r_key: r.tgt, dma_len });
        });
        deliver(&mut r.b, 0, &mut r.mb, &req);
        let resp = drain_tx(&mut r.b, 0, &mut r.mb);
        assert_eq!(aeth(&resp[0]).0, AethSyndrome::Nak(NakCode::InvalidRequest), "{dma_len} {}", payload.len());
    }
}

/// RC QPs granting both FLUSH rights (as rdma-core's tests do).
fn setup_flush() -> Rc {
    let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    setup_with(RcParams { mtu: Mtu::Mtu256, access: all | access::FLUSH_GLOBAL | access::FLUSH_PERSISTENT, ..RcParams::default() })
}

#[test]
fn rc_flush_needs_the_placement_rights_of_qp_and_region_and_completes_empty() {
    const GLOBAL: u32 = 1;
    const PERSISTENT: u32 = 2;
    let mut r = setup_flush();
    r.mb.region_mut(r.tgt).access |= access::FLUSH_GLOBAL;
    r.a.post_send(&write(&r, 1, 64, 0x3_0000)).unwrap();
    r.a.post_send(&flush(&r, 2, 0x3_0000, 64, GLOBAL, false)).unwrap();
    r.a.post_send(&flush(&r, 3, 0, 12_345_678, GLOBAL, true)).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    let f = p(&req[1]);
    assert_eq!((f.headers.bth.opcode, f.payload.len()), (Opcode::RC_FLUSH, 0));
    assert_eq!(f.headers.feth, Some(FethRepr { placement: 1, selectivity: 0 }));
    assert_eq!(p(&req[2]).headers.feth, Some(FethRepr { placement: 1, selectivity: 1 }));
    for q in &req {
        deliver(&mut r.b, 0, &mut r.mb, q);
    }
    for q in drain_tx(&mut r.b, 0, &mut r.mb) {
        deliver(&mut r.a, 0, &mut r.ma, &q);
    }
    let (s, _) = all_cqes(&mut r.a);
    let got: Vec<(u64, WcStatus, WcOpcode)> = s.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(got, vec![(1, WcStatus::Success, WcOpcode::RdmaWrite), (2, WcStatus::Success, WcOpcode::Flush), (3, WcStatus::Success, WcOpcode::Flush)]);
    // Persistence the region was not registered for: remote access error.
    let mut r = setup_flush();
    r.mb.region_mut(r.tgt).access |= access::FLUSH_GLOBAL;
    r.a.post_send(&flush(&r, 1, 0x3_0000, 64, PERSISTENT, false)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
    // A range past the region: remote access error; the whole region: fine.
    let mut r = setup_flush();
    r.mb.region_mut(r.tgt).access |= access::FLUSH_GLOBAL;
    r.a.post_send(&flush(&r, 1, 0x3_0000, (1 << 16) + 1, GLOBAL, false)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemAccessErr);
    // The QP without the right, or an unknown placement type or
    // selectivity: invalid request.
    let mut r = setup_flush();
    r.mb.region_mut(r.tgt).access |= access::FLUSH_GLOBAL;
    let mut a = QpAttr { qp_access_flags: access::REMOTE_WRITE, ..QpAttr::default() };
    a.qp_state = QpState::Rts;
    r.b.modify(&a, mask::ACCESS_FLAGS).unwrap();
    r.a.post_send(&flush(&r, 1, 0x3_0000, 8, GLOBAL, false)).unwrap();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RemInvReqErr);
    for (placement, selectivity) in [(0u8, 0u8), (4, 0), (1, 2)] {
        let mut r = setup_flush();
        r.mb.region_mut(r.tgt).access |= access::FLUSH_GLOBAL;
        let req = request(Opcode::RC_FLUSH, PSN_A, &[], |h| {
            h.feth = Some(FethRepr { placement, selectivity });
            h.reth = Some(RethRepr { va: 0x3_0000, r_key: r.tgt, dma_len: 8 });
        });
        deliver(&mut r.b, 0, &mut r.mb, &req);
        let resp = drain_tx(&mut r.b, 0, &mut r.mb);
        assert_eq!(aeth(&resp[0]).0, AethSyndrome::Nak(NakCode::InvalidRequest), "{placement} {selectivity}");
    }
}

// --- memory on demand (MemError::Fault): nothing touched, retried later ---

#[test]
fn rc_odp_absent_receive_buffer_is_rnr_naked_and_the_wqe_stays() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, min_rnr_timer: 1, ..RcParams::default() });
    post_recvs(&mut r, 1);
    r.mb.region_mut(r.dst).absent = true;
    r.a.post_send(&send(&r, 1, 600)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(pk.len(), 3);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(aeth(&out[0]).0, AethSyndrome::RnrNak { timer: 1 });
    assert_eq!(p(&out[0]).headers.bth.psn.value(), PSN_A);
    assert!(r.mb.faults > 0);
    assert!(r.b.poll_recv_cq().is_none());
    deliver(&mut r.a, 0, &mut r.ma, &out[0]);
    // The glue faults the pages in; after the RNR timer the message is
    // sent again and lands in the same receive WQE.
    r.mb.region_mut(r.dst).absent = false;
    r.a.on_timer(1_000_000);
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 1_000_000);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
    let c = r.b.poll_recv_cq().unwrap();
    assert_eq!((c.wr_id, c.status, c.byte_len), (0, WcStatus::Success, 600));
    assert_eq!(r.mb.bytes(r.dst, 0, 600), r.ma.bytes(r.src, 0, 600));
}

#[test]
fn rc_odp_absent_middle_packet_target_is_rnr_naked_there_and_resumed() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, min_rnr_timer: 1, ..RcParams::default() });
    r.a.post_send(&write(&r, 1, 600, 0x3_0000)).unwrap();
    let pk = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[0]), RxOutcome::Accepted);
    // The pages go (an invalidation) between the first and second packet.
    r.mb.region_mut(r.tgt).absent = true;
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &pk[1]), RxOutcome::Nak);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let nak = out.iter().find(|x| matches!(aeth(x).0, AethSyndrome::RnrNak { .. })).expect("an RNR NAK");
    assert_eq!(p(nak).headers.bth.psn.value(), PSN_A + 1);
    deliver(&mut r.a, 0, &mut r.ma, nak);
    r.mb.region_mut(r.tgt).absent = false;
    r.a.on_timer(1_000_000);
    let again = drain_tx(&mut r.a, 1_000_000, &mut r.ma);
    assert_eq!(p(&again[0]).headers.bth.psn.value(), PSN_A + 1, "resumed at the NAKed packet");
    for x in &again {
        deliver(&mut r.b, 1_000_000, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 1_000_000);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
    assert_eq!(r.mb.bytes(r.tgt, 0, 600), r.ma.bytes(r.src, 0, 600));
}

#[test]
fn rc_odp_absent_read_and_atomic_targets_are_rnr_naked_not_executed() {
    for i in 0..2 {
        let mut rr = setup_with(RcParams { mtu: Mtu::Mtu256, min_rnr_timer: 1, ..RcParams::default() });
        let w = if i == 0 {
            read(&rr, 1, 300, 0x1_8000, 0x3_0100)
        } else {
            let mut fa = send_wr(2, WrOpcode::AtomicFetchAndAdd, &[(0x1_9000, 8, rr.src)]);
            fa.remote_addr = 0x3_1000;
            fa.rkey = rr.tgt;
            fa.compare_add = 5;
            fa
        };
        let before = rr.mb.bytes(rr.tgt, 0x1000, 8).to_vec();
        rr.mb.region_mut(rr.tgt).absent = true;
        rr.a.post_send(&w).unwrap();
        let pk = drain_tx(&mut rr.a, 0, &mut rr.ma);
        assert_eq!(deliver(&mut rr.b, 0, &mut rr.mb, &pk[0]), RxOutcome::Nak, "request {i}");
        let out = drain_tx(&mut rr.b, 0, &mut rr.mb);
        assert_eq!(out.len(), 1, "only the NAK, no response");
        assert!(matches!(aeth(&out[0]).0, AethSyndrome::RnrNak { .. }));
        assert_eq!(rr.mb.bytes(rr.tgt, 0x1000, 8), &before[..], "nothing executed");
        deliver(&mut rr.a, 0, &mut rr.ma, &out[0]);
        rr.mb.region_mut(rr.tgt).absent = false;
        rr.a.on_timer(1_000_000);
        exchange(&mut rr.a, &mut rr.ma, &mut rr.b, &mut rr.mb, 1_000_000);
        assert_eq!(rr.a.poll_send_cq().unwrap().status, WcStatus::Success, "request {i}");
    }
}

#[test]
fn rc_odp_absent_gather_list_waits_without_sending_then_resumes() {
    let mut r = setup();
    post_recvs(&mut r, 1);
    r.ma.region_mut(r.src).absent = true;
    r.a.post_send(&send(&r, 1, 600)).unwrap();
    assert!(drain_tx(&mut r.a, 0, &mut r.ma).is_empty(), "nothing sent");
    assert!(r.a.fault_waiting());
    assert!(!r.a.may_transmit(0));
    assert!(r.a.poll_send_cq().is_none(), "no completion, no error");
    assert_eq!(r.a.state(), QpState::Rts);
    r.ma.region_mut(r.src).absent = false;
    r.a.fault_resolved();
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
    assert_eq!(r.mb.bytes(r.dst, 0, 600), r.ma.bytes(r.src, 0, 600));
}

#[test]
fn rc_odp_read_response_into_absent_buffer_is_dropped_and_asked_again() {
    let mut r = setup();
    r.a.post_send(&read(&r, 1, 600, 0x1_8000, 0x3_0100)).unwrap();
    let req = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(req.len(), 1);
    deliver(&mut r.b, 0, &mut r.mb, &req[0]);
    let resp = drain_tx(&mut r.b, 0, &mut r.mb);
    assert_eq!(resp.len(), 3);
    // The local buffer's pages went after the request was sent.
    r.ma.region_mut(r.src).absent = true;
    assert_eq!(deliver(&mut r.a, 0, &mut r.ma, &resp[0]), RxOutcome::Dropped(DropReason::Memory));
    assert!(r.a.fault_waiting());
    assert!(drain_tx(&mut r.a, 0, &mut r.ma).is_empty());
    r.ma.region_mut(r.src).absent = false;
    r.a.fault_resolved();
    let again = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(p(&again[0]).headers.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    for x in &again {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    let c = r.a.poll_send_cq().unwrap();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert_eq!(r.ma.bytes(r.src, 0x8000, 600), r.mb.bytes(r.tgt, 0x100, 600));
}

#[test]
fn rc_qp_access_flags_take_on_demand_and_refuse_unknown_bits() {
    let mut r = setup();
    let mut a = QpAttr { qp_access_flags: access::REMOTE_WRITE | access::ON_DEMAND, ..QpAttr::default() };
    a.qp_state = QpState::Rts;
    assert!(r.b.modify(&a, mask::ACCESS_FLAGS).is_ok(), "ON_DEMAND (a region flag) is accepted and ignored");
    a.qp_access_flags = access::REMOTE_WRITE | 1 << 12;
    assert!(r.b.modify(&a, mask::ACCESS_FLAGS).is_err(), "an unknown bit is refused");
}

/// The device's shared window bounds an RC requester for one transmit pass
/// (`set_send_cap`): it sends up to the bound, says that only the bound
/// holds it back, charges what it has in flight, reports the packets
/// acknowledged, and goes on when the bound lifts.
#[test]
fn rc_shared_window_cap_bounds_packets_in_flight() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, sq: 256, ..RcParams::default() });
    for i in 0..20 {
        r.a.post_send(&write(&r, i, 16, 0x3_0000)).unwrap();
    }
    r.a.set_send_cap(Some(5));
    let first = drain_tx(&mut r.a, 0, &mut r.ma);
    assert_eq!(first.len(), 5, "the bound, not the QP's own window of 128");
    assert_eq!(r.a.wire_in_flight(), 5);
    assert!(r.a.held_by_cap(0));
    r.a.set_send_cap(None);
    assert!(!r.a.held_by_cap(0));
    assert!(r.a.may_transmit(0), "outside a pass, no bound");
    for x in &first {
        deliver(&mut r.b, 0, &mut r.mb, x);
    }
    for x in &drain_tx(&mut r.b, 0, &mut r.mb) {
        deliver(&mut r.a, 0, &mut r.ma, x);
    }
    let cc = r.a.take_cc();
    assert_eq!((cc.acked, cc.losses, cc.timeouts), (5, 0, 0));
    assert!(r.a.take_cc().is_empty(), "reported once");
    assert_eq!(r.a.wire_in_flight(), 0);
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, 0);
    assert_eq!(all_cqes(&mut r.a).0.len(), 20);
    assert_eq!(r.a.wire_in_flight(), 0);
}

/// A requester that went back after a timeout and that the shared window
/// then holds back has nothing on the wire: its ACK timer expires without
/// counting a retry (no packet was lost), however long the wait, and the
/// resend completes. Once packets are on the wire again, a lost one still
/// costs a retry, and the last retry ends in RETRY_EXC_ERR.
#[test]
fn rc_ack_timer_counts_no_retry_while_the_shared_window_holds_the_requester() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, retry_cnt: 1, ..RcParams::default() });
    r.a.post_send(&write(&r, 1, 16, 0x3_0000)).unwrap();
    assert_eq!(drain_tx(&mut r.a, 0, &mut r.ma).len(), 1, "lost");
    let t = r.a.next_deadline().unwrap();
    r.a.on_timer(t);
    let cc = r.a.take_cc();
    assert_eq!((cc.timeouts, cc.losses), (1, 1));
    assert_eq!(r.a.wire_in_flight(), 0, "went back: nothing in flight");
    // The shared window has no room.
    r.a.set_send_cap(Some(0));
    assert!(drain_tx(&mut r.a, t, &mut r.ma).is_empty());
    assert!(r.a.held_by_cap(t));
    r.a.set_send_cap(None);
    let mut now = t;
    for _ in 0..20 {
        now = r.a.next_deadline().unwrap();
        r.a.on_timer(now);
    }
    assert_eq!(r.a.state(), QpState::Rts);
    assert!(r.a.poll_send_cq().is_none(), "no retry was spent on the wait");
    assert!(r.a.take_cc().is_empty());
    // Room again: the resend goes, and is lost too; the ACK timer runs
    // from that resend and spends the last retry.
    let again = drain_tx(&mut r.a, now + 1, &mut r.ma);
    assert_eq!(again.len(), 1);
    assert_eq!(r.a.next_deadline(), Some(now + 1 + (4096 << 8)), "timed from the resend");
    r.a.on_timer(now + 1 + (4096 << 8));
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::RetryExcErr);
}

/// The same resend, delivered, completes: the wait cost nothing.
#[test]
fn rc_requester_held_by_the_shared_window_completes_when_room_comes() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, retry_cnt: 1, ..RcParams::default() });
    r.a.post_send(&write(&r, 1, 16, 0x3_0000)).unwrap();
    drain_tx(&mut r.a, 0, &mut r.ma);
    let t = r.a.next_deadline().unwrap();
    r.a.on_timer(t);
    r.a.set_send_cap(Some(0));
    assert!(drain_tx(&mut r.a, t, &mut r.ma).is_empty());
    r.a.set_send_cap(None);
    let later = r.a.next_deadline().unwrap();
    r.a.on_timer(later);
    exchange(&mut r.a, &mut r.ma, &mut r.b, &mut r.mb, later);
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
    assert_eq!(r.mb.bytes(r.tgt, 0, 16), r.ma.bytes(r.src, 0, 16));
}

/// A requester the shared window lets send a few packets of a long
/// message asks for the ACK on the last of them: without it, nothing would
/// acknowledge them before the ACK timeout (a retry spent, the window cut
/// and everything sent again).
#[test]
fn rc_packet_that_fills_the_shared_window_bound_asks_for_an_ack() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, ..RcParams::default() });
    // One 64-packet WRITE (16 KiB at MTU 256), 5 packets at a time.
    r.a.post_send(&write(&r, 1, 16384, 0x3_0000)).unwrap();
    let mut now = 0;
    for round in 0..13u32 {
        r.a.set_send_cap(Some(r.a.wire_in_flight() + 5));
        let sent = drain_tx(&mut r.a, now, &mut r.ma);
        r.a.set_send_cap(None);
        assert!(!sent.is_empty() && sent.len() <= 5, "round {round}: {} packets", sent.len());
        assert!(p(sent.last().unwrap()).headers.bth.ack_req, "round {round}: the last packet the bound allows asks for an ACK");
        for x in &sent {
            deliver(&mut r.b, now, &mut r.mb, x);
        }
        for x in &drain_tx(&mut r.b, now, &mut r.mb) {
            deliver(&mut r.a, now, &mut r.ma, x);
        }
        assert_eq!(r.a.wire_in_flight(), 0, "round {round}: all acknowledged");
        now += 1000;
    }
    assert_eq!(r.a.poll_send_cq().unwrap().status, WcStatus::Success);
    assert!(r.a.take_cc().losses == 0, "no loss, no timeout");
    assert_eq!(r.mb.bytes(r.tgt, 0, 16384), r.ma.bytes(r.src, 0, 16384));
}

/// Every packet an RC QP drops unanswered names why (the device counts
/// each reason: `rx_qp_*`), and none of them changes the QP.
#[test]
fn rc_drops_name_their_reason() {
    let mut r = setup();
    post_recvs(&mut r, 1);
    let dropped = |why| RxOutcome::Dropped(why);
    // An ACK of a PSN the requester never sent: out of sequence.
    let mut h = Headers::bth_only(Opcode::RC_ACKNOWLEDGE, 0xffff, A, Psn::new(PSN_A + 100));
    h.aeth = Some(AethRepr { syndrome: AethSyndrome::Ack { credits: 31 }, msn: 0 });
    assert_eq!(deliver(&mut r.a, 0, &mut r.ma, &craft(&h, &[])), dropped(DropReason::Sequence));
    // A UD SEND to an RC QP: not its transport.
    let mut h = Headers::bth_only(Opcode::UD_SEND_ONLY, 0xffff, B, Psn::new(PSN_A));
    h.deth = Some(DethRepr { q_key: 1, src_qp: A });
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &craft(&h, b"ud")), dropped(DropReason::Header));
    // A P_Key of another partition.
    let req = request(Opcode::RC_SEND_ONLY, PSN_A, b"pk", |h| h.bth.pkey = ferroce_transport::wire::PKey(0x8123));
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &req), dropped(DropReason::Key));
    // A request to a QP that is only in INIT.
    let mut q = new_qp(B, QpType::Rc, 4, 4);
    let a = QpAttr { qp_state: QpState::Init, port_num: 1, ..QpAttr::default() };
    q.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS).unwrap();
    let req = request(Opcode::RC_SEND_ONLY, PSN_A, b"in", |_| {});
    assert_eq!(deliver(&mut q, 0, &mut r.mb, &req), dropped(DropReason::State));
    // None of them moved either QP: the SEND the responder expects lands.
    assert!(drain_tx(&mut r.b, 0, &mut r.mb).is_empty(), "no answer to a drop");
    r.a.post_send(&send(&r, 1, 10)).unwrap();
    for x in &drain_tx(&mut r.a, 0, &mut r.ma) {
        assert_eq!(deliver(&mut r.b, 0, &mut r.mb, x), RxOutcome::Accepted);
    }
    for x in &drain_tx(&mut r.b, 0, &mut r.mb) {
        assert_eq!(deliver(&mut r.a, 0, &mut r.ma, x), RxOutcome::Accepted);
    }
    let (s, rv) = all_cqes(&mut r.a);
    assert_eq!((s.len(), s[0].status, rv.len()), (1, WcStatus::Success, 0));
    assert_eq!(all_cqes(&mut r.b).1.len(), 1);
    // A READ response when no READ is outstanding: out of sequence.
    let mut h = Headers::bth_only(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0xffff, A, Psn::new(PSN_A + 1));
    h.aeth = Some(AethRepr { syndrome: AethSyndrome::Ack { credits: 31 }, msn: 1 });
    assert_eq!(deliver(&mut r.a, 0, &mut r.ma, &craft(&h, &[0u8; 16])), dropped(DropReason::Sequence));
    assert_eq!((r.a.state(), r.b.state()), (QpState::Rts, QpState::Rts));
}

/// A responder whose job queue is full (its answers not yet sent) drops a
/// request unseen, `Busy`, without moving its expected PSN: the
/// requester's resend of it is executed once room is made.
#[test]
fn rc_responder_drops_unseen_while_its_answers_wait() {
    let mut r = setup_with(RcParams { mtu: Mtu::Mtu256, max_rd_atomic: 2, ..RcParams::default() });
    let rkey = r.tgt;
    let rd = |psn: u32| read_request(psn, 0x3_0000, rkey, 8);
    // READs whose responses are never let out: each takes a job.
    let mut psn = PSN_A;
    let busy = loop {
        let out = deliver(&mut r.b, 0, &mut r.mb, &rd(psn));
        if out != RxOutcome::Accepted {
            break out;
        }
        psn += 1;
        assert!(psn < PSN_A + 1000, "the job queue never filled");
    };
    assert_eq!(busy, RxOutcome::Dropped(DropReason::Busy));
    assert!(psn - PSN_A > 2, "more READs were taken than resources ({})", psn - PSN_A);
    // Nothing moved: the same READ again is dropped again.
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &rd(psn)), RxOutcome::Dropped(DropReason::Busy));
    // The answers leave; the resent READ is then executed and answered.
    assert!(!drain_tx(&mut r.b, 0, &mut r.mb).is_empty());
    assert_eq!(deliver(&mut r.b, 0, &mut r.mb, &rd(psn)), RxOutcome::Accepted);
    let out = drain_tx(&mut r.b, 0, &mut r.mb);
    let psns: Vec<u32> = out.iter().map(|b| p(b).headers.bth.psn.value()).collect();
    assert_eq!(psns, vec![psn]);
    assert_eq!(p(&out[0]).headers.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(r.b.state(), QpState::Rts);
}
