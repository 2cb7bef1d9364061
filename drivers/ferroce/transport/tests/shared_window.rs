//! Many RC QPs through one narrow link, with and without the send window
//! a device's QPs share (`rc::shared`), in virtual time: 64 QP pairs, each
//! requester with 32 RDMA WRITEs of 8 packets, through a drop-tail queue
//! that holds 50 packets and sends one every 10 us (the ACKs come back
//! unhindered). The device side here is what `driver/window.rs` does in
//! the kernel: charge after every step, bound each transmit pass, a FIFO
//! of the QPs the bound held back, room reserved for the oldest.
//!
//! Each QP's own window never goes below 8 packets, so without the shared
//! window the 64 QPs keep 512 or more in flight against 50 places: the
//! queue drops most of every round, the QPs resend from the first loss and
//! run out of retries. With it, every WRITE completes and lands, and few
//! packets are sent twice.

mod common;

use std::collections::VecDeque;

use common::*;
use ferroce_transport::qp::{Mtu, QpState};
use ferroce_transport::rc::shared::SharedWindow;
use ferroce_transport::verbs::{access, WcStatus, WrOpcode};

const QPS: usize = 64;
const WRITES: u64 = 32;
const LEN: u32 = 2048; // 8 packets at MTU 256
const QUEUE: usize = 50;
const SERVICE_NS: u64 = 10_000;
const DELAY_NS: u64 = 20_000;
const SRC: u64 = 0x1_0000;
const DST: u64 = 0x10_0000;

/// The device's side: the window, the charges, the FIFO of waiters.
struct Dev {
    w: SharedWindow,
    fifo: VecDeque<usize>,
    listed: Vec<bool>,
    charge: Vec<u32>,
    grant: Vec<u32>,
}

impl Dev {
    fn new() -> Self {
        Self { w: SharedWindow::new(), fifo: VecDeque::new(), listed: vec![false; QPS], charge: vec![0; QPS], grant: vec![0; QPS] }
    }

    fn sync(&mut self, i: usize, qp: &mut TestQp) {
        let ev = qp.take_cc();
        let new = qp.wire_in_flight();
        self.w.update(self.charge[i], new, ev);
        self.charge[i] = new;
        while self.w.room() > 0 {
            let Some(j) = self.fifo.pop_front() else { break };
            self.listed[j] = false;
            self.grant[j] += self.w.reserve();
        }
    }

    fn begin(&self, i: usize, qp: &mut TestQp) {
        let allow = self.w.allowance(self.grant[i], !self.fifo.is_empty());
        qp.set_send_cap(Some(qp.wire_in_flight() + allow));
    }

    fn end(&mut self, i: usize, qp: &mut TestQp, now: u64) {
        let held = qp.held_by_cap(now);
        qp.set_send_cap(None);
        self.w.release(std::mem::take(&mut self.grant[i]));
        if held && !self.listed[i] {
            self.listed[i] = true;
            self.fifo.push_back(i);
        }
        self.sync(i, qp);
    }
}

struct Outcome {
    /// Per requester: its completions' statuses.
    status: Vec<Vec<WcStatus>>,
    /// Request packets sent, and dropped by the full queue.
    sent: u64,
    dropped: u64,
    /// Every WRITE's bytes at the responder.
    landed: bool,
    /// Cuts of the shared window.
    cuts: u64,
}

fn run(shared: bool) -> Outcome {
    let p = RcParams { mtu: Mtu::Mtu256, sq: 64, timeout: 8, retry_cnt: 7, ..RcParams::default() };
    let mut a: Vec<TestQp> = (0..QPS).map(|i| rc_qp(0x100 + i as u32, 0x200 + i as u32, p, 0, 0)).collect();
    let mut b: Vec<TestQp> = (0..QPS).map(|i| rc_qp(0x200 + i as u32, 0x100 + i as u32, p, 0, 0)).collect();
    let mut ma = VecMemory::default();
    let mut mb = VecMemory::default();
    let src = ma.register(PD, SRC, QPS * LEN as usize, 0);
    for (k, x) in ma.region_mut(src).data.iter_mut().enumerate() {
        *x = (k * 13 + k / 251) as u8;
    }
    let dst = mb.register(PD, DST, QPS * LEN as usize, access::REMOTE_WRITE);
    for (i, qp) in a.iter_mut().enumerate() {
        for n in 0..WRITES {
            let off = i as u64 * u64::from(LEN);
            let mut w = send_wr(n, WrOpcode::RdmaWrite, &[(SRC + off, LEN, src)]);
            w.remote_addr = DST + off;
            w.rkey = dst;
            qp.post_send(&w).unwrap();
        }
    }
    let mut dev = Dev::new();
    let mut queue: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    let mut to_b: VecDeque<(u64, usize, Vec<u8>)> = VecDeque::new();
    let mut to_a: VecDeque<(u64, usize, Vec<u8>)> = VecDeque::new();
    let mut status: Vec<Vec<WcStatus>> = vec![Vec::new(); QPS];
    let (mut sent, mut dropped) = (0u64, 0u64);
    let mut buf = vec![0u8; 4096 + 64];
    let mut now = 0u64;
    while now < 5_000_000_000 {
        now += SERVICE_NS;
        for (i, qp) in a.iter_mut().enumerate() {
            if qp.next_deadline().is_some_and(|d| d <= now) {
                qp.on_timer(now);
                if shared {
                    dev.sync(i, qp);
                }
            }
        }
        while to_b.front().is_some_and(|x| x.0 <= now) {
            let (_, i, pkt) = to_b.pop_front().unwrap();
            deliver(&mut b[i], now, &mut mb, &pkt);
            while let Some(t) = b[i].poll_transmit(now, &mut mb, &mut buf) {
                to_a.push_back((now + DELAY_NS, i, buf[..t.len].to_vec()));
            }
        }
        while to_a.front().is_some_and(|x| x.0 <= now) {
            let (_, i, pkt) = to_a.pop_front().unwrap();
            deliver(&mut a[i], now, &mut ma, &pkt);
            if shared {
                dev.sync(i, &mut a[i]);
            }
        }
        if let Some((i, pkt)) = queue.pop_front() {
            to_b.push_back((now + DELAY_NS, i, pkt));
        }
        for (i, qp) in a.iter_mut().enumerate() {
            if shared {
                dev.begin(i, qp);
            }
            while let Some(t) = qp.poll_transmit(now, &mut ma, &mut buf) {
                sent += 1;
                if queue.len() < QUEUE {
                    queue.push_back((i, buf[..t.len].to_vec()));
                } else {
                    dropped += 1;
                }
            }
            if shared {
                dev.end(i, qp, now);
            }
            while let Some(c) = qp.poll_send_cq() {
                status[i].push(c.status);
            }
        }
        let finished = status.iter().filter(|s| s.len() as u64 == WRITES).count();
        if finished == QPS || a.iter().any(|q| q.state() == QpState::Err) {
            break;
        }
    }
    let landed = mb.bytes(dst, 0, QPS * LEN as usize) == ma.bytes(src, 0, QPS * LEN as usize);
    Outcome { status, sent, dropped, landed, cuts: dev.w.cuts() }
}

#[test]
fn shared_window_64_qps_through_a_50_packet_queue_all_complete_with_few_resends() {
    let o = run(true);
    let unique = QPS as u64 * WRITES * u64::from(LEN / 256);
    for (i, s) in o.status.iter().enumerate() {
        assert_eq!(s.len() as u64, WRITES, "QP {i}: {} completions", s.len());
        assert!(s.iter().all(|&x| x == WcStatus::Success), "QP {i}: {s:?}");
    }
    assert!(o.landed, "every byte at the responder");
    assert!(o.cuts > 0, "the queue's drops cut the window");
    let resent = o.sent - unique;
    eprintln!("shared window: {} packets sent for {unique}, {} dropped, {} cuts", o.sent, o.dropped, o.cuts);
    assert!(resent * 20 < unique, "fewer than 5% sent twice: {resent} of {unique}");
}

#[test]
fn without_the_shared_window_the_same_qps_exhaust_their_retries() {
    let o = run(false);
    let failed = o.status.iter().filter(|s| s.contains(&WcStatus::RetryExcErr)).count();
    eprintln!("no shared window: {} packets sent, {} dropped, {failed} QPs with RETRY_EXC_ERR", o.sent, o.dropped);
    assert!(failed > 0, "the link this test builds overruns QPs bounded only by their own windows");
}
