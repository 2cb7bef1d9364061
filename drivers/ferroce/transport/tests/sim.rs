//! Deterministic network simulator: two RC engines joined by a lossy link
//! (seeded loss, duplication, reordering, corruption caught by a CRC-32
//! trailer as the kernel's ICRC check would), a virtual clock and
//! `Vec`-backed memory. Random workloads of SEND, RDMA WRITE, RDMA READ and
//! atomics in both directions must end with every message delivered
//! exactly once and in order, remote memory exact, and every completion
//! in order with the right status.
//!
//! `FERROCE_SIM_CASES=<n>` raises the number of random cases (default 12).

mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use common::*;
use ferroce_transport::qp::{Mtu, QpState};
use ferroce_transport::verbs::{access, Cqe, Payload, SendWqe, WcOpcode, WcStatus, WrOpcode};
use ferroce_transport::wire::icrc::crc32;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
    /// Log-uniform size in 0..=max.
    fn size(&mut self, max: u32) -> u32 {
        if self.chance(0.05) {
            return 0;
        }
        let bits = 32 - max.leading_zeros();
        let b = self.below(bits as u64 + 1) as u32;
        let v = if b == 0 { 0 } else { self.next() as u32 & ((1u64 << b) - 1) as u32 };
        v.min(max)
    }
}

#[derive(Clone, Copy, Debug)]
struct LinkCfg {
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    delay_ns: u64,
    jitter_ns: u64,
}

const CLEAN: LinkCfg = LinkCfg { loss: 0.0, dup: 0.0, reorder: 0.0, corrupt: 0.0, delay_ns: 5_000, jitter_ns: 0 };

struct Link {
    cfg: LinkCfg,
    q: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    n: u64,
    /// Drop everything (a dead path).
    down: bool,
    stats: [u64; 4],
}

impl Link {
    fn new(cfg: LinkCfg) -> Self {
        Self { cfg, q: BinaryHeap::new(), n: 0, down: false, stats: [0; 4] }
    }

    fn send(&mut self, rng: &mut Rng, now: u64, pkt: &[u8]) {
        if self.down || rng.chance(self.cfg.loss) {
            self.stats[0] += 1;
            return;
        }
        let mut frame = pkt.to_vec();
        frame.extend_from_slice(&crc32(pkt).to_le_bytes());
        let copies = if rng.chance(self.cfg.dup) {
            self.stats[1] += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = frame.clone();
            if rng.chance(self.cfg.corrupt) {
                self.stats[2] += 1;
                let i = rng.below(f.len() as u64) as usize;
                f[i] ^= 1 << rng.below(8);
            }
            let mut at = now + self.cfg.delay_ns;
            if rng.chance(self.cfg.reorder) {
                self.stats[3] += 1;
                at += rng.below(self.cfg.jitter_ns.max(1));
            }
            self.n += 1;
            self.q.push(Reverse((at, self.n, f)));
        }
    }

    fn next_at(&self) -> Option<u64> {
        self.q.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next frame due at `now` whose CRC checks out (corrupt frames
    /// are dropped here, before the engine, as the ICRC check does).
    fn recv(&mut self, now: u64) -> Option<Option<Vec<u8>>> {
        if self.next_at()? > now {
            return None;
        }
        let Reverse((_, _, mut f)) = self.q.pop()?;
        if f.len() < 4 {
            return Some(None);
        }
        let crc = f.split_off(f.len() - 4);
        if crc32(&f).to_le_bytes() != crc[..] {
            return Some(None);
        }
        Some(Some(f))
    }
}

/// An expected receive completion: opcode, byte_len, immediate, payload.
type ExpRecv = (WcOpcode, u32, Option<u32>, Option<Vec<u8>>);

/// What one side expects to see once its peer's work has run.
#[derive(Default)]
struct Expect {
    /// Requester side: (wr_id, opcode) of each send completion in order.
    send: Vec<(u64, WcOpcode)>,
    /// Responder side: (opcode, byte_len, imm, payload) of each receive.
    recv: Vec<ExpRecv>,
    /// Requester side: (offset in read region, bytes) of each READ.
    reads: Vec<(usize, Vec<u8>)>,
    /// Requester side: (offset in atomic result region, original value).
    atomics: Vec<(usize, u64)>,
}

const TARGET: usize = 1 << 17;
const COUNTERS: usize = 4;

struct Side {
    qp: TestQp,
    mem: VecMemory,
    src: u32,
    rdst: u32,
    ares: u32,
    target: u32,
    counters: u32,
    recv: u32,
    recv_stride: usize,
    /// Model of `target` and `counters` as the peer's work should leave them.
    model: Vec<u8>,
    model_ctr: [u64; COUNTERS],
    exp: Expect,
    scq: Vec<Cqe>,
    rcq: Vec<Cqe>,
}

const SRC_BASE: u64 = 0x10_0000_0000;
const RDST_BASE: u64 = 0x20_0000_0000;
const ARES_BASE: u64 = 0x30_0000_0000;
const TARGET_BASE: u64 = 0x40_0000_0000;
const CTR_BASE: u64 = 0x50_0000_0000;
const RECV_BASE: u64 = 0x60_0000_0000;

struct Plan {
    ops: usize,
    max_size: u32,
    src_len: usize,
    read_len: usize,
    nrecv: usize,
    max_recv: u32,
}

impl Side {
    fn new(qp: TestQp, rng: &mut Rng, plan: &Plan) -> Self {
        let mut mem = VecMemory::default();
        let src = mem.register(PD, SRC_BASE, plan.src_len, 0);
        for x in mem.region_mut(src).data.iter_mut() {
            *x = rng.next() as u8;
        }
        let rdst = mem.register(PD, RDST_BASE, plan.read_len, access::LOCAL_WRITE);
        let ares = mem.register(PD, ARES_BASE, 8 * plan.ops, access::LOCAL_WRITE);
        let target = mem.register(PD, TARGET_BASE, TARGET, access::REMOTE_WRITE | access::REMOTE_READ);
        let init: Vec<u8> = (0..TARGET).map(|_| rng.next() as u8).collect();
        mem.region_mut(target).data.copy_from_slice(&init);
        let counters = mem.register(PD, CTR_BASE, 8 * COUNTERS, access::REMOTE_ATOMIC);
        let recv = mem.register(PD, RECV_BASE, plan.nrecv * plan.max_recv as usize, access::LOCAL_WRITE);
        Side {
            qp,
            mem,
            src,
            rdst,
            ares,
            target,
            counters,
            recv,
            recv_stride: plan.max_recv as usize,
            model: init,
            model_ctr: [0; COUNTERS],
            exp: Expect::default(),
            scq: Vec::new(),
            rcq: Vec::new(),
        }
    }
}

/// Generates `plan.ops` random work requests from `x` against `y`, posts
/// them, and records what each side must see.
fn workload(rng: &mut Rng, x: &mut Side, y: &mut Side, plan: &Plan, big: bool) {
    let mut read_off = 0usize;
    // Remote ranges of earlier READs. The responder may answer a READ after
    // executing later requests (IBTA ordering: only a fenced request waits
    // for earlier READs), so a WRITE over a READ's range is fenced.
    let mut read_ranges: Vec<(usize, usize)> = Vec::new();
    let mut fence;
    let mut recv_n = 0usize;
    let mut post_recv = |y: &mut Side| {
        let a = RECV_BASE + (recv_n * plan.max_recv as usize) as u64;
        y.qp.post_recv(&recv_wr(recv_n as u64, &[(a, plan.max_recv, y.recv)])).unwrap();
        recv_n += 1;
    };
    for i in 0..plan.ops {
        let kind = rng.below(7);
        let mut size = rng.size(plan.max_size);
        if big && i == 0 {
            size = plan.max_size;
        }
        let wr_id = i as u64;
        let mut w = SendWqe { wr_id, ..SendWqe::default() };
        // A gather list of 1..=3 pieces of the source region.
        let gather = |w: &mut SendWqe, size: u32, rng: &mut Rng| -> u64 {
            let off = rng.below((plan.src_len as u64).saturating_sub(size as u64) + 1);
            let pieces = 1 + rng.below(3) as u32;
            let mut list = Vec::new();
            let mut done = 0u32;
            for p in 0..pieces {
                let len = if p == pieces - 1 { size - done } else { rng.below((size - done) as u64 + 1) as u32 };
                list.push((SRC_BASE + off + done as u64, len, x.src));
                done += len;
            }
            let (s, n) = sges(&list);
            w.data = Payload::Gather { list: s, n };
            off
        };
        let imm = rng.next() as u32;
        fence = false;
        match kind {
            0 | 1 => {
                let size = size.min(plan.max_recv);
                let off = gather(&mut w, size, rng) as usize;
                w.opcode = if kind == 0 { WrOpcode::Send } else { WrOpcode::SendWithImm };
                w.imm_data = imm;
                let data = x.mem.bytes(x.src, off, size as usize).to_vec();
                y.exp.recv.push((WcOpcode::Recv, size, (kind == 1).then_some(imm), Some(data)));
                post_recv(y);
                x.exp.send.push((wr_id, WcOpcode::Send));
            }
            2 | 3 => {
                let size = size.min(TARGET as u32);
                let off = gather(&mut w, size, rng) as usize;
                let toff = rng.below((TARGET - size as usize) as u64 + 1) as usize;
                w.opcode = if kind == 2 { WrOpcode::RdmaWrite } else { WrOpcode::RdmaWriteWithImm };
                w.remote_addr = TARGET_BASE + toff as u64;
                w.rkey = y.target;
                w.imm_data = imm;
                let data = x.mem.bytes(x.src, off, size as usize).to_vec();
                y.model[toff..toff + size as usize].copy_from_slice(&data);
                fence = read_ranges.iter().any(|&(o, n)| o < toff + size as usize && toff < o + n);
                if kind == 3 {
                    y.exp.recv.push((WcOpcode::RecvRdmaWithImm, size, Some(imm), None));
                    post_recv(y);
                }
                x.exp.send.push((wr_id, WcOpcode::RdmaWrite));
            }
            4 => {
                let size = size.min(TARGET as u32).min((plan.read_len - read_off) as u32);
                let toff = rng.below((TARGET - size as usize) as u64 + 1) as usize;
                w.opcode = WrOpcode::RdmaRead;
                w.remote_addr = TARGET_BASE + toff as u64;
                w.rkey = y.target;
                let (s, n) = sges(&[(RDST_BASE + read_off as u64, size, x.rdst)]);
                w.data = Payload::Gather { list: s, n };
                x.exp.reads.push((read_off, y.model[toff..toff + size as usize].to_vec()));
                read_ranges.push((toff, size as usize));
                read_off += size as usize;
                x.exp.send.push((wr_id, WcOpcode::RdmaRead));
            }
            _ => {
                let c = rng.below(COUNTERS as u64) as usize;
                let old = y.model_ctr[c];
                w.remote_addr = CTR_BASE + 8 * c as u64;
                w.rkey = y.counters;
                let (s, n) = sges(&[(ARES_BASE + 8 * i as u64, 8, x.ares)]);
                w.data = Payload::Gather { list: s, n };
                if kind == 5 {
                    w.opcode = WrOpcode::AtomicFetchAndAdd;
                    w.compare_add = rng.next() >> 8;
                    y.model_ctr[c] = old.wrapping_add(w.compare_add);
                    x.exp.send.push((wr_id, WcOpcode::FetchAdd));
                } else {
                    w.opcode = WrOpcode::AtomicCmpAndSwp;
                    w.compare_add = if rng.chance(0.5) { old } else { rng.next() };
                    w.swap = rng.next();
                    if old == w.compare_add {
                        y.model_ctr[c] = w.swap;
                    }
                    x.exp.send.push((wr_id, WcOpcode::CompSwap));
                }
                x.exp.atomics.push((8 * i, old));
            }
        }
        if fence || rng.chance(0.1) {
            w.send_flags |= ferroce_transport::verbs::send_flags::FENCE;
        }
        x.qp.post_send(&w).unwrap();
    }
}

struct Net {
    now: u64,
    rng: Rng,
    ab: Link,
    ba: Link,
}

/// Runs the two sides until `done` holds or a QP leaves RTS; returns the
/// virtual time used.
fn run(net: &mut Net, a: &mut Side, b: &mut Side, limit_ns: u64, done: impl Fn(&Side, &Side) -> bool) -> u64 {
    let start = net.now;
    let mut buf = vec![0u8; 4096 + 64];
    // Each side may put this many packets on the wire per microsecond.
    const BURST: usize = 16;
    loop {
        for (s, link) in [(&mut *a, &mut net.ab), (&mut *b, &mut net.ba)] {
            s.qp.on_timer(net.now);
            for _ in 0..BURST {
                let Some(t) = poll_checked(&mut s.qp, net.now, &mut s.mem, &mut buf) else { break };
                link.send(&mut net.rng, net.now, &buf[..t.len]);
            }
        }
        for (link, s) in [(&mut net.ab, &mut *b), (&mut net.ba, &mut *a)] {
            while let Some(f) = link.recv(net.now) {
                if let Some(f) = f {
                    deliver(&mut s.qp, net.now, &mut s.mem, &f);
                }
            }
        }
        for s in [&mut *a, &mut *b] {
            while let Some(c) = s.qp.poll_send_cq() {
                s.scq.push(c);
            }
            while let Some(c) = s.qp.poll_recv_cq() {
                s.rcq.push(c);
            }
        }
        if done(a, b) || a.qp.state() != QpState::Rts || b.qp.state() != QpState::Rts {
            return net.now - start;
        }
        assert!(net.now - start < limit_ns, "simulation made no progress by {} ns", net.now - start);
        // Next event: a tick while anyone may send, else the next arrival
        // or deadline.
        let mut next = net.now + 1_000;
        let idle_next = [net.ab.next_at(), net.ba.next_at(), a.qp.next_deadline(), b.qp.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        // With nothing in flight, jump to the next timer instead of ticking.
        if net.ab.q.is_empty() && net.ba.q.is_empty() {
            if let Some(t) = idle_next {
                next = next.max(t);
            }
        }
        net.now = next;
    }
}

fn check(x: &Side, y: &Side, label: &str) {
    // Requester completions: in posting order, all successful.
    let got: Vec<(u64, WcOpcode)> = x.scq.iter().map(|c| (c.wr_id, c.opcode)).collect();
    assert_eq!(got, x.exp.send, "{label}: send completions");
    for c in &x.scq {
        assert_eq!(c.status, WcStatus::Success, "{label}: {c:?}");
    }
    // Receives: exactly once, in order, with the right bytes.
    assert_eq!(y.rcq.len(), y.exp.recv.len(), "{label}: receive count");
    for (k, (c, e)) in y.rcq.iter().zip(&y.exp.recv).enumerate() {
        assert_eq!(c.status, WcStatus::Success, "{label}: recv {k}");
        assert_eq!(c.wr_id, k as u64, "{label}: recv order");
        assert_eq!((c.opcode, c.byte_len), (e.0, e.1), "{label}: recv {k}");
        assert_eq!(c.imm_data, e.2.unwrap_or(0), "{label}: imm {k}");
        if let Some(data) = &e.3 {
            let at = k * y.recv_stride;
            assert!(y.mem.bytes(y.recv, at, data.len()) == &data[..], "{label}: recv {k} payload");
        }
    }
    assert!(y.mem.region(y.target).data == y.model, "{label}: remote memory differs from the model");
    let ctr: Vec<u64> = y.mem.region(y.counters).data.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
    assert_eq!(ctr, y.model_ctr, "{label}: atomic counters");
    for (off, data) in &x.exp.reads {
        assert!(x.mem.bytes(x.rdst, *off, data.len()) == &data[..], "{label}: read data at {off}");
    }
    for (off, orig) in &x.exp.atomics {
        let v = u64::from_ne_bytes(x.mem.bytes(x.ares, *off, 8).try_into().unwrap());
        assert_eq!(v, *orig, "{label}: atomic original value at {off}");
    }
}

fn params(rng: &mut Rng, plan: &Plan) -> RcParams {
    let mtu = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096][rng.below(5) as usize];
    RcParams {
        mtu,
        timeout: 9,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: 1 + rng.below(8) as u8,
        sq: plan.ops + 1,
        rq: plan.ops + 1,
        ..RcParams::default()
    }
}

/// One random case: workloads both ways over links `cfg`; returns the
/// link statistics (lost, duplicated, corrupted, reordered).
fn case(seed: u64, cfg: LinkCfg, plan: &Plan, big: bool) -> [u64; 4] {
    let mut rng = Rng(seed);
    let p = params(&mut rng, plan);
    let psn_a = rng.below(1 << 24) as u32;
    let psn_b = rng.below(1 << 24) as u32;
    let qa = rc_qp(0x11, 0x22, p, psn_a, psn_b);
    let qb = rc_qp(0x22, 0x11, p, psn_b, psn_a);
    let mut a = Side::new(qa, &mut rng, plan);
    let mut b = Side::new(qb, &mut rng, plan);
    workload(&mut rng, &mut a, &mut b, plan, big);
    workload(&mut rng, &mut b, &mut a, plan, false);
    let mut net = Net { now: 0, rng: Rng(seed ^ 0x5eed), ab: Link::new(cfg), ba: Link::new(cfg) };
    let label = format!("seed {seed:#x} mtu {:?} {cfg:?}", p.mtu);
    run(&mut net, &mut a, &mut b, 60_000_000_000, |a, b| {
        a.scq.len() == a.exp.send.len() && b.scq.len() == b.exp.send.len()
    });
    check(&a, &b, &label);
    check(&b, &a, &label);
    let mut st = net.ab.stats;
    for (s, t) in st.iter_mut().zip(net.ba.stats) {
        *s += t;
    }
    st
}

fn cases() -> u64 {
    std::env::var("FERROCE_SIM_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12)
}

#[test]
fn sim_rc_random_workloads_exactly_once_in_order_exact_memory() {
    let plan = Plan { ops: 24, max_size: 16 << 10, src_len: 64 << 10, read_len: 24 * (16 << 10), nrecv: 25, max_recv: 16 << 10 };
    let mut rng = Rng(0xfe77_0ce0);
    let only: Option<u64> = std::env::var("FERROCE_SIM_SEED").ok().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    for i in 0..cases() {
        let cfg = LinkCfg {
            loss: rng.below(6) as f64 / 100.0,
            dup: rng.below(6) as f64 / 100.0,
            reorder: rng.below(20) as f64 / 100.0,
            corrupt: rng.below(3) as f64 / 100.0,
            delay_ns: 5_000,
            jitter_ns: 20_000,
        };
        if only.is_none_or(|s| s == 0x1000 + i) {
            case(0x1000 + i, cfg, &plan, false);
        }
    }
}

#[test]
fn sim_rc_ten_percent_loss_with_duplication_and_reordering_all_operation_types() {
    let plan = Plan { ops: 30, max_size: 8 << 10, src_len: 32 << 10, read_len: 30 * (8 << 10), nrecv: 31, max_recv: 8 << 10 };
    let cfg = LinkCfg { loss: 0.10, dup: 0.05, reorder: 0.2, corrupt: 0.02, delay_ns: 5_000, jitter_ns: 30_000 };
    let mut total = [0u64; 4];
    for i in 0..cases().div_ceil(2).max(2) {
        let st = case(0x2000 + i, cfg, &plan, false);
        for (t, s) in total.iter_mut().zip(st) {
            *t += s;
        }
    }
    assert!(total.iter().all(|&n| n > 0), "every impairment happened: {total:?}");
}

#[test]
fn sim_rc_one_mib_messages() {
    // The first request of the workload is a full 1 MiB; PMTU random.
    let plan = Plan { ops: 4, max_size: 1 << 20, src_len: 1 << 20, read_len: 4 << 20, nrecv: 5, max_recv: 1 << 20 };
    let cfg = LinkCfg { loss: 0.01, dup: 0.01, reorder: 0.05, corrupt: 0.005, delay_ns: 5_000, jitter_ns: 20_000 };
    for i in 0..2 {
        case(0x3000 + i, cfg, &plan, true);
    }
}

fn pair(p: RcParams) -> (Side, Side) {
    let plan = Plan { ops: 8, max_size: 4096, src_len: 8192, read_len: 8192, nrecv: 8, max_recv: 4096 };
    let mut rng = Rng(1);
    let a = Side::new(rc_qp(0x11, 0x22, p, 10, 20), &mut rng, &plan);
    let b = Side::new(rc_qp(0x22, 0x11, p, 20, 10), &mut rng, &plan);
    (a, b)
}

fn sends(a: &mut Side, n: u64) {
    for i in 0..n {
        let w = send_wr(i, WrOpcode::Send, &[(SRC_BASE, 100, a.src)]);
        a.qp.post_send(&w).unwrap();
    }
}

#[test]
fn sim_rc_retry_exhausted_gives_retry_exc_err_and_flushes() {
    let p = RcParams { retry_cnt: 3, timeout: 5, ..RcParams::default() };
    let (mut a, mut b) = pair(p);
    sends(&mut a, 3);
    let mut net = Net { now: 0, rng: Rng(3), ab: Link::new(CLEAN), ba: Link::new(CLEAN) };
    net.ab.down = true;
    let t = run(&mut net, &mut a, &mut b, 1_000_000_000, |_, _| false);
    let st: Vec<WcStatus> = a.scq.iter().map(|c| c.status).collect();
    assert_eq!(st, vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr, WcStatus::WrFlushErr]);
    assert_eq!(a.qp.state(), QpState::Err);
    // 1 + 3 retries, each a local ACK timeout of 4.096 us * 2^5.
    let to = 4096u64 << 5;
    assert!(t >= 4 * to && t < 4 * to + 50_000, "took {t} ns");
}

#[test]
fn sim_rc_rnr_retry_exhausted_gives_rnr_retry_exc_err_and_flushes() {
    let p = RcParams { rnr_retry: 2, min_rnr_timer: 3, ..RcParams::default() };
    let (mut a, mut b) = pair(p);
    sends(&mut a, 2);
    let mut net = Net { now: 0, rng: Rng(4), ab: Link::new(CLEAN), ba: Link::new(CLEAN) };
    let t = run(&mut net, &mut a, &mut b, 1_000_000_000, |_, _| false);
    let st: Vec<WcStatus> = a.scq.iter().map(|c| c.status).collect();
    assert_eq!(st, vec![WcStatus::RnrRetryExcErr, WcStatus::WrFlushErr]);
    assert_eq!(a.qp.state(), QpState::Err);
    // Two RNR waits of at least the 30 us of timer code 3.
    assert!(t >= 2 * 30_000, "took {t} ns");
    assert_eq!(b.qp.state(), QpState::Rts, "the responder is unaffected");
}

#[test]
fn sim_rc_rnr_retry_7_is_infinite() {
    let p = RcParams { rnr_retry: 7, min_rnr_timer: 1, ..RcParams::default() };
    let (mut a, mut b) = pair(p);
    sends(&mut a, 1);
    let mut net = Net { now: 0, rng: Rng(5), ab: Link::new(CLEAN), ba: Link::new(CLEAN) };
    // 2 ms of RNR NAKs every ~20 us: far more than 7 retries.
    let mut limit_hit = false;
    let t = {
        let start = net.now;
        let mut buf = vec![0u8; 8192];
        while net.now - start < 2_000_000 {
            for (s, link) in [(&mut a, &mut net.ab), (&mut b, &mut net.ba)] {
                s.qp.on_timer(net.now);
                while let Some(t) = poll_checked(&mut s.qp, net.now, &mut s.mem, &mut buf) {
                    link.send(&mut net.rng, net.now, &buf[..t.len]);
                }
            }
            for (link, s) in [(&mut net.ab, &mut b), (&mut net.ba, &mut a)] {
                while let Some(f) = link.recv(net.now) {
                    deliver(&mut s.qp, net.now, &mut s.mem, &f.unwrap());
                }
            }
            net.now += 1_000;
            limit_hit = true;
        }
        net.now
    };
    assert!(limit_hit && t >= 2_000_000);
    assert_eq!(a.qp.state(), QpState::Rts);
    assert!(a.qp.poll_send_cq().is_none());
    b.qp.post_recv(&recv_wr(0, &[(RECV_BASE, 4096, b.recv)])).unwrap();
    run(&mut net, &mut a, &mut b, 1_000_000_000, |a, _| !a.scq.is_empty());
    assert_eq!(a.scq[0].status, WcStatus::Success);
}
