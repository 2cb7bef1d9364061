//! libFuzzer target for a QP's receive path: `cargo +nightly fuzz run
//! qp_receive` from `drivers/ferroce/transport`.
//!
//! The input is a script. Byte 0 picks the QP type (bit 0 clear: UD; set:
//! RC, or UC when bit 7 is set too), the
//! state it is brought to (bits 1..=3: RESET, INIT, RTR, RTS, SQD, SQE for
//! UD, ERR) and the path MTU (bits 4..=6). Then, until the input runs out:
//! one control byte, then for a packet a 2-byte big-endian length and that
//! many bytes, fed to `Qp::receive`. The control byte's low bits choose
//! what follows the packet: `poll_transmit` until it stops, `on_timer` at
//! the next deadline, polling both completion queues, posting another
//! receive or send. Nothing may panic; every write must land inside a
//! scatter entry of an outstanding WQE (local) or happen on an RC QP whose
//! access flags allow it (remote); completions never exceed what was
//! posted. `tests/qp_fuzz.rs` runs the same properties on stable with a
//! generator that knows the protocol.
#![no_main]

use ferroce_transport::engine::{NetHeader, Qp, QpConfig, RecvSlot, SendSlot};
use ferroce_transport::memory::{Key, MemError, Memory};
use ferroce_transport::qp::{mask, Mtu, QpAttr, QpState, QpType};
use ferroce_transport::verbs::{access, send_flags, RecvWqe, SendWqe, Sge, WrOpcode};
use libfuzzer_sys::fuzz_target;

const PD: u32 = 1;
const LEN: u64 = 4096;
/// (key, PD, rights): receive buffers, send sources, RDMA target, another
/// PD's region. Region `i` starts at `(i + 1) << 20`; key = `0x100 + i`.
const REGIONS: [(u32, u32); 4] = [
    (PD, access::LOCAL_WRITE),
    (PD, 0),
    (
        PD,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    ),
    (PD + 1, 0xf),
];

struct Mem {
    data: Vec<Vec<u8>>,
    /// (lkey, start, end) a local write may hit.
    local_ok: Vec<(u32, u64, u64)>,
    remote_ok: bool,
}

impl Mem {
    fn find(&self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> Result<(usize, usize), MemError> {
        let (k, need) = match (key, write) {
            (Key::Local(k), false) => (k, 0),
            (Key::Local(k), true) => (k, access::LOCAL_WRITE),
            (Key::Remote(k), false) => (k, access::REMOTE_READ),
            (Key::Remote(k), true) => (k, access::REMOTE_WRITE),
        };
        let i = k.checked_sub(0x100).ok_or(MemError::InvalidKey)? as usize;
        let &(rpd, rights) = REGIONS.get(i).ok_or(MemError::InvalidKey)?;
        if rpd != pd {
            return Err(MemError::PdMismatch);
        }
        if rights & need != need {
            return Err(MemError::AccessDenied);
        }
        let base = (i as u64 + 1) << 20;
        let off = va.checked_sub(base).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(len).is_none_or(|end| end > LEN) {
            return Err(MemError::OutOfBounds);
        }
        Ok((i, off as usize))
    }

    fn wrote(&self, key: Key, va: u64, len: u64) {
        match key {
            Key::Local(k) => assert!(
                self.local_ok
                    .iter()
                    .any(|&(lk, s, e)| lk == k && va >= s && va + len <= e),
                "local write outside every outstanding WQE"
            ),
            Key::Remote(_) => assert!(self.remote_ok, "remote write the QP does not allow"),
        }
    }

    fn atomic(&mut self, pd: u32, rkey: u32, va: u64, f: impl FnOnce(u64) -> u64) -> Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (i, o) = self.find(pd, Key::Remote(rkey), va, 8, true)?;
        if REGIONS[i].1 & access::REMOTE_ATOMIC == 0 {
            return Err(MemError::AccessDenied);
        }
        self.wrote(Key::Remote(rkey), va, 8);
        let cell: &mut [u8; 8] = (&mut self.data[i][o..o + 8]).try_into().unwrap();
        let old = u64::from_ne_bytes(*cell);
        *cell = f(old).to_ne_bytes();
        Ok(old)
    }
}

impl Memory for Mem {
    fn read(&mut self, pd: u32, key: Key, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (i, o) = self.find(pd, key, va, dst.len() as u64, false)?;
        dst.copy_from_slice(&self.data[i][o..o + dst.len()]);
        Ok(())
    }

    fn write(&mut self, pd: u32, key: Key, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (i, o) = self.find(pd, key, va, src.len() as u64, true)?;
        self.wrote(key, va, src.len() as u64);
        self.data[i][o..o + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn check(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> Result<(), MemError> {
        self.find(pd, key, va, len, write).map(|_| ())
    }

    fn compare_swap(&mut self, pd: u32, rkey: u32, va: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.atomic(pd, rkey, va, |old| if old == compare { swap } else { old })
    }

    fn fetch_add(&mut self, pd: u32, rkey: u32, va: u64, add: u64) -> Result<u64, MemError> {
        self.atomic(pd, rkey, va, |old| old.wrapping_add(add))
    }
}

type FuzzQp = Qp<Vec<SendSlot>, Vec<RecvSlot>>;

const QPN: u32 = 0x12;

fn sge(region: u32, off: u64, len: u32) -> Sge {
    Sge {
        addr: (u64::from(region) + 1) << 20 | off,
        length: len,
        lkey: 0x100 + region,
    }
}

struct Harness {
    qp: FuzzQp,
    mem: Mem,
    sends: Vec<SendWqe>,
    recvs: Vec<RecvWqe>,
    polled_sends: usize,
    polled_recvs: usize,
    now: u64,
    buf: Vec<u8>,
    seq: u64,
}

impl Harness {
    fn post_recv(&mut self, len: u32) {
        self.seq += 1;
        let mut w = RecvWqe {
            wr_id: self.seq,
            num_sge: 1,
            ..RecvWqe::default()
        };
        w.sg_list[0] = sge(0, (self.seq * 64) % 2048, len.min(2048));
        if self.qp.post_recv(&w).is_ok() {
            self.recvs.push(w);
        }
    }

    fn post_send(&mut self, sel: u8) {
        self.seq += 1;
        let ud = self.qp.qp_type() == QpType::Ud;
        let opcode = if ud {
            [WrOpcode::Send, WrOpcode::SendWithImm][usize::from(sel & 1)]
        } else {
            [
                WrOpcode::Send,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicFetchAndAdd,
                WrOpcode::AtomicCmpAndSwp,
                WrOpcode::SendWithImm,
                WrOpcode::RdmaWriteWithImm,
                WrOpcode::SendWithInv,
            ][usize::from(sel & 7)]
        };
        let len = u32::from(sel >> 3) * 97;
        let mut w = SendWqe {
            wr_id: self.seq,
            opcode,
            send_flags: send_flags::SIGNALED,
            remote_addr: 3 << 20,
            rkey: 0x102,
            remote_qpn: 0x34,
            ..SendWqe::default()
        };
        let s = if opcode.is_read_or_atomic() {
            sge(0, 2048, if opcode.is_atomic() { 8 } else { len })
        } else {
            sge(1, 0, len)
        };
        let _ = w.set_sges(&[s]);
        if self.qp.post_send(&w).is_ok() {
            self.sends.push(w);
        }
    }

    fn rights(&mut self) {
        self.mem.local_ok.clear();
        let recvs = self.recvs.iter().skip(self.polled_recvs).flat_map(|w| w.sges().iter());
        let reads = self
            .sends
            .iter()
            .skip(self.polled_sends)
            .filter(|w| w.opcode.is_read_or_atomic())
            .flat_map(|w| w.sges().iter());
        for s in recvs.chain(reads) {
            self.mem.local_ok.push((s.lkey, s.addr, s.addr + u64::from(s.length)));
        }
        // RC and UC QPs are created with every remote right.
        self.mem.remote_ok = self.qp.qp_type() != QpType::Ud;
    }

    fn transmit(&mut self) {
        for n in 0.. {
            self.rights();
            let Some(t) = self.qp.poll_transmit(self.now, &mut self.mem, &mut self.buf) else {
                break;
            };
            assert!(t.len <= self.buf.len());
            assert!(
                ferroce_transport::wire::packet::parse_headers(&self.buf[..t.len]).is_ok(),
                "unparseable packet sent"
            );
            assert!(n < 10_000, "poll_transmit does not stop");
        }
    }

    fn poll(&mut self) {
        while let Some(c) = self.qp.poll_send_cq() {
            let w = self
                .sends
                .get(self.polled_sends)
                .expect("send completion nobody posted");
            assert_eq!(c.wr_id, w.wr_id);
            self.polled_sends += 1;
        }
        while let Some(c) = self.qp.poll_recv_cq() {
            let w = self
                .recvs
                .get(self.polled_recvs)
                .expect("receive completion nobody posted");
            assert_eq!(c.wr_id, w.wr_id);
            self.polled_recvs += 1;
        }
    }
}

fn build(sel: u8) -> Harness {
    let ty = match (sel & 1, sel >> 7) {
        (0, _) => QpType::Ud,
        (_, 0) => QpType::Rc,
        _ => QpType::Uc,
    };
    let target = QpState::from_u32(u32::from((sel >> 1) & 7) % 7).unwrap_or(QpState::Rts);
    let mtu = Mtu::from_u32(1 + u32::from(sel >> 4) % 5).unwrap_or_default();
    let cfg = QpConfig {
        qpn: QPN,
        qp_type: ty,
        pd: PD,
        sq_sig_all: true,
    };
    let mut h = Harness {
        qp: Qp::new(cfg, vec![SendSlot::default(); 8], vec![RecvSlot::default(); 8]),
        mem: Mem {
            data: vec![vec![0; LEN as usize]; REGIONS.len()],
            local_ok: Vec::new(),
            remote_ok: false,
        },
        sends: Vec::new(),
        recvs: Vec::new(),
        polled_sends: 0,
        polled_recvs: 0,
        now: 1_000,
        buf: vec![0; 4096 + 64],
        seq: 0,
    };
    let rc = ty != QpType::Ud;
    let uc = ty == QpType::Uc;
    let steps = [QpState::Init, QpState::Rtr, QpState::Rts];
    let want = match target {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        _ => 3,
    };
    let mut a = QpAttr {
        port_num: 1,
        qkey: 0x11,
        qp_access_flags: 0xf,
        path_mtu: mtu,
        dest_qp_num: 0x34,
        rq_psn: 100,
        sq_psn: 200,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    for (i, &s) in steps.iter().enumerate().take(want) {
        a.qp_state = s;
        let m = match (i, rc) {
            (0, false) => mask::PKEY_INDEX | mask::PORT | mask::QKEY,
            (0, true) => mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
            (1, false) => 0,
            (1, true) if uc => mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN,
            (_, true) if uc && i == 2 => mask::SQ_PSN,
            (1, true) => {
                mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER
            }
            (_, false) => mask::SQ_PSN,
            (_, true) => mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::SQ_PSN | mask::MAX_QP_RD_ATOMIC,
        };
        h.qp.modify(&a, mask::STATE | m).expect("legal transition");
        if i == 0 {
            if !rc {
                h.qp.set_path_mtu(mtu);
            }
            for k in 0..4 {
                h.post_recv(64 + 600 * k);
            }
        }
    }
    if want == 3 {
        for k in 0..6u8 {
            h.post_send(k.wrapping_mul(37));
        }
        h.transmit();
    }
    let go = |h: &mut Harness, s: QpState| {
        let a = QpAttr {
            qp_state: s,
            ..QpAttr::default()
        };
        let _ = h.qp.modify(&a, mask::STATE);
    };
    match target {
        QpState::Sqd => go(&mut h, QpState::Sqd),
        QpState::Err => go(&mut h, QpState::Err),
        QpState::Sqe if !rc => {
            // A send from a region of another PD fails locally: SQE.
            h.seq += 1;
            let mut w = SendWqe {
                wr_id: h.seq,
                send_flags: send_flags::SIGNALED,
                ..SendWqe::default()
            };
            let _ = w.set_sges(&[sge(3, 0, 16)]);
            if h.qp.post_send(&w).is_ok() {
                h.sends.push(w);
            }
            h.transmit();
        }
        _ => {}
    }
    h
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let mut h = build(sel);
    let ipv4 = [0x45u8, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    while let Some((&ctl, r)) = rest.split_first() {
        rest = r;
        let len = match rest {
            [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])).min(rest.len() - 2),
            _ => 0,
        };
        let pkt = rest.get(2..2 + len).unwrap_or(&[]);
        rest = rest.get(2 + len..).unwrap_or(&[]);
        h.rights();
        let state = h.qp.state();
        let _ = h.qp.receive(h.now, &mut h.mem, pkt, NetHeader::Ipv4(&ipv4));
        if matches!(state, QpState::Reset | QpState::Init | QpState::Err) {
            assert_eq!(h.qp.state(), state, "a packet changed a QP that ignores packets");
        }
        if h.qp.qp_type() == QpType::Rc {
            assert_ne!(h.qp.state(), QpState::Sqe);
        }
        if h.qp.qp_type() == QpType::Uc {
            // A UC responder never moves its QP but into ERR (class A).
            assert!(h.qp.state() == state || h.qp.state() == QpState::Err, "a packet moved a UC QP to {:?}", h.qp.state());
        }
        h.now += u64::from(ctl >> 4) * 1_000_000;
        match ctl & 7 {
            0 | 1 => h.transmit(),
            2 => {
                if let Some(d) = h.qp.next_deadline() {
                    h.now = h.now.max(d);
                }
                h.qp.on_timer(h.now);
                if let Some(d) = h.qp.next_deadline() {
                    assert!(d > h.now, "deadline left in the past");
                }
                h.transmit();
            }
            3 => h.poll(),
            4 => h.post_recv(u32::from(ctl) * 16),
            5 => h.post_send(ctl),
            _ => {}
        }
        assert!(h.polled_sends <= h.sends.len() && h.polled_recvs <= h.recvs.len());
    }
    h.poll();
});
