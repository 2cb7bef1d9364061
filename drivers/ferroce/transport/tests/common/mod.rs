//! Shared test fixtures: a `Vec`-backed [`Memory`], QP builders and a few
//! packet helpers. Included by each integration test with `mod common;`.
#![allow(dead_code)]

use ferroce_transport::engine::{NetHeader, Qp, QpConfig, RecvSlot, RxOutcome, SendSlot};
use ferroce_transport::memory::{Key, MemError, Memory};
use ferroce_transport::qp::{mask, Mtu, QpAttr, QpState, QpType};
use ferroce_transport::verbs::{access, FastReg, Payload, RecvWqe, SendWqe, Sge, WrOpcode, MAX_SGE};

pub type TestQp = Qp<Vec<SendSlot>, Vec<RecvSlot>>;

pub const PD: u32 = 7;

/// One registered region; lkey == rkey == its index + 0x100.
pub struct Region {
    pub pd: u32,
    pub base: u64,
    pub data: Vec<u8>,
    pub access: u32,
    pub valid: bool,
    /// Memory on demand whose pages are not present: every access that
    /// passes the checks answers `MemError::Fault` (and is counted).
    pub absent: bool,
}

/// A fast-registration region (`alloc_mr`): `data` is its pages; the key
/// is `(0x100 + handle) << 8 | consumer byte`, valid only once registered.
pub struct FastRegion {
    pub pd: u32,
    pub data: Vec<u8>,
    pub key: u32,
    pub access: u32,
    pub iova: u64,
    pub length: u64,
    pub valid: bool,
}

/// Registered memory over `Vec<u8>` regions.
#[derive(Default)]
pub struct VecMemory {
    pub regions: Vec<Region>,
    pub fast: Vec<FastRegion>,
    /// Accesses refused with `MemError::Fault`.
    pub faults: u32,
}

/// The key of fast region `handle` with consumer byte `byte`.
pub fn fast_key(handle: u32, byte: u8) -> u32 {
    ((0x100 + handle) << 8) | u32::from(byte)
}

impl VecMemory {
    /// Registers `len` bytes at virtual address `base`; returns the key.
    pub fn register(&mut self, pd: u32, base: u64, len: usize, access: u32) -> u32 {
        self.regions.push(Region { pd, base, data: vec![0; len], access, valid: true, absent: false });
        0x100 + self.regions.len() as u32 - 1
    }

    pub fn region(&self, key: u32) -> &Region {
        &self.regions[(key - 0x100) as usize]
    }

    pub fn region_mut(&mut self, key: u32) -> &mut Region {
        &mut self.regions[(key - 0x100) as usize]
    }

    /// Bytes `off..off + len` of region `key` (offsets from its base).
    pub fn bytes(&self, key: u32, off: usize, len: usize) -> &[u8] {
        &self.region(key).data[off..off + len]
    }

    /// Allocates a fast-registration region of `len` bytes of pages
    /// (invalid); returns its handle.
    pub fn alloc_fast(&mut self, pd: u32, len: usize) -> u32 {
        let h = self.fast.len() as u32;
        self.fast.push(FastRegion { pd, data: vec![0; len], key: fast_key(h, 0), access: 0, iova: 0, length: 0, valid: false });
        h
    }

    fn find(&mut self, pd: u32, key: Key, va: u64, len: u64, need: u32) -> Result<(&mut [u8], usize), MemError> {
        let k = match key {
            Key::Local(k) | Key::Remote(k) => k,
        };
        if k >= 0x1_0000 {
            let h = ((k >> 8) - 0x100) as usize;
            let r = self.fast.get_mut(h).ok_or(MemError::InvalidKey)?;
            if !r.valid || r.key != k {
                return Err(MemError::InvalidKey);
            }
            if r.pd != pd {
                return Err(MemError::PdMismatch);
            }
            if r.access & need != need {
                return Err(MemError::AccessDenied);
            }
            let start = va.checked_sub(r.iova).ok_or(MemError::OutOfBounds)?;
            let end = start.checked_add(len).ok_or(MemError::OutOfBounds)?;
            if end > r.length {
                return Err(MemError::OutOfBounds);
            }
            return Ok((&mut r.data[..], start as usize));
        }
        let idx = k.checked_sub(0x100).ok_or(MemError::InvalidKey)? as usize;
        let r = self.regions.get_mut(idx).ok_or(MemError::InvalidKey)?;
        if !r.valid {
            return Err(MemError::InvalidKey);
        }
        if r.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if r.access & need != need {
            return Err(MemError::AccessDenied);
        }
        let start = va.checked_sub(r.base).ok_or(MemError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        if r.absent {
            self.faults += 1;
            return Err(MemError::Fault);
        }
        Ok((&mut r.data[..], start as usize))
    }
}

fn need(key: Key, write: bool) -> u32 {
    match (key, write) {
        (Key::Local(_), false) => 0,
        (Key::Local(_), true) => access::LOCAL_WRITE,
        (Key::Remote(_), false) => access::REMOTE_READ,
        (Key::Remote(_), true) => access::REMOTE_WRITE,
    }
}

impl Memory for VecMemory {
    fn read(&mut self, pd: u32, key: Key, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (d, s) = self.find(pd, key, va, dst.len() as u64, need(key, false))?;
        dst.copy_from_slice(&d[s..s + dst.len()]);
        Ok(())
    }

    fn write(&mut self, pd: u32, key: Key, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (d, s) = self.find(pd, key, va, src.len() as u64, need(key, true))?;
        d[s..s + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn check(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> Result<(), MemError> {
        self.find(pd, key, va, len, need(key, write)).map(|_| ())
    }

    fn compare_swap(&mut self, pd: u32, rkey: u32, va: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (d, s) = self.find(pd, Key::Remote(rkey), va, 8, access::REMOTE_ATOMIC)?;
        let cell: &mut [u8; 8] = (&mut d[s..s + 8]).try_into().unwrap();
        let old = u64::from_ne_bytes(*cell);
        if old == compare {
            *cell = swap.to_ne_bytes();
        }
        Ok(old)
    }

    fn fetch_add(&mut self, pd: u32, rkey: u32, va: u64, add: u64) -> Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (d, s) = self.find(pd, Key::Remote(rkey), va, 8, access::REMOTE_ATOMIC)?;
        let cell: &mut [u8; 8] = (&mut d[s..s + 8]).try_into().unwrap();
        let old = u64::from_ne_bytes(*cell);
        *cell = old.wrapping_add(add).to_ne_bytes();
        Ok(old)
    }

    fn invalidate(&mut self, pd: u32, rkey: u32) -> Result<(), MemError> {
        if rkey >= 0x1_0000 {
            let r = self.fast.get_mut(((rkey >> 8) - 0x100) as usize).ok_or(MemError::InvalidKey)?;
            if r.key != rkey {
                return Err(MemError::InvalidKey);
            }
            if r.pd != pd {
                return Err(MemError::PdMismatch);
            }
            r.valid = false;
            return Ok(());
        }
        let idx = rkey.checked_sub(0x100).ok_or(MemError::InvalidKey)? as usize;
        let r = self.regions.get_mut(idx).ok_or(MemError::InvalidKey)?;
        if !r.valid {
            return Err(MemError::InvalidKey);
        }
        if r.pd != pd {
            return Err(MemError::PdMismatch);
        }
        r.valid = false;
        Ok(())
    }

    fn atomic_write(&mut self, pd: u32, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (d, s) = self.find(pd, Key::Remote(rkey), va, 8, access::REMOTE_WRITE)?;
        d[s..s + 8].copy_from_slice(&value);
        Ok(())
    }

    fn flush(&mut self, pd: u32, rkey: u32, va: u64, len: u64, need: u32, whole: bool) -> Result<(), MemError> {
        if whole {
            // The region's own first address, for a check of its rights only.
            let base = if rkey >= 0x1_0000 {
                self.fast.get(((rkey >> 8) - 0x100) as usize).map(|r| r.iova)
            } else {
                self.regions.get(rkey.checked_sub(0x100).ok_or(MemError::InvalidKey)? as usize).map(|r| r.base)
            };
            let base = base.ok_or(MemError::InvalidKey)?;
            return self.find(pd, Key::Remote(rkey), base, 0, need).map(|_| ());
        }
        self.find(pd, Key::Remote(rkey), va, len, need).map(|_| ())
    }

    fn fast_register(&mut self, pd: u32, reg: &FastReg) -> Result<(), MemError> {
        let r = self.fast.get_mut(reg.mr as usize).ok_or(MemError::InvalidKey)?;
        if r.valid || reg.key >> 8 != r.key >> 8 {
            return Err(MemError::InvalidKey);
        }
        if r.pd != pd {
            return Err(MemError::PdMismatch);
        }
        if reg.iova.checked_add(reg.length).is_none() || reg.length > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        r.key = reg.key;
        r.access = reg.access;
        r.iova = reg.iova;
        r.length = reg.length;
        r.valid = true;
        Ok(())
    }
}

pub fn new_qp(qpn: u32, ty: QpType, sq: usize, rq: usize) -> TestQp {
    let cfg = QpConfig { qpn, qp_type: ty, pd: PD, sq_sig_all: true };
    Qp::new(cfg, vec![SendSlot::default(); sq], vec![RecvSlot::default(); rq])
}

/// A UD QP in RTS with Q_Key `qkey`, PMTU `mtu`, start PSN `sq_psn`.
pub fn ud_qp(qpn: u32, qkey: u32, mtu: Mtu, sq_psn: u32) -> TestQp {
    let mut qp = new_qp(qpn, QpType::Ud, 16, 16);
    let mut a = QpAttr { qp_state: QpState::Init, qkey, port_num: 1, ..QpAttr::default() };
    qp.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY).unwrap();
    a.qp_state = QpState::Rtr;
    qp.modify(&a, mask::STATE).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    qp.modify(&a, mask::STATE | mask::SQ_PSN).unwrap();
    // The engine's MTU for UD comes from the port; tests set it via the
    // SQD->SQD-free path: RTS->RTS cannot carry PATH_MTU, so set it raw.
    set_ud_mtu(&mut qp, mtu);
    qp
}

/// UD has no PATH_MTU attribute in the transition table; the glue gives
/// the port's active MTU at creation. Tests use the public setter.
pub fn set_ud_mtu(qp: &mut TestQp, mtu: Mtu) {
    qp.set_path_mtu(mtu);
}

/// RC connection parameters.
#[derive(Clone, Copy)]
pub struct RcParams {
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: u32,
    pub sq: usize,
    pub rq: usize,
}

impl Default for RcParams {
    fn default() -> Self {
        Self {
            mtu: Mtu::Mtu1024,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
            sq: 64,
            rq: 64,
        }
    }
}

/// An RC QP `qpn` connected to `dest`, in RTS; requester PSN `sq_psn`,
/// responder ePSN `rq_psn`.
pub fn rc_qp(qpn: u32, dest: u32, p: RcParams, sq_psn: u32, rq_psn: u32) -> TestQp {
    let mut qp = new_qp(qpn, QpType::Rc, p.sq, p.rq);
    let mut a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: p.access, ..QpAttr::default() };
    qp.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = p.mtu;
    a.dest_qp_num = dest;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = p.max_rd_atomic;
    a.min_rnr_timer = p.min_rnr_timer;
    a.ah = dest;
    qp.modify(
        &a,
        mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN | mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER,
    )
    .unwrap();
    a.qp_state = QpState::Rts;
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = p.max_rd_atomic;
    qp.modify(&a, mask::STATE | mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::SQ_PSN | mask::MAX_QP_RD_ATOMIC)
        .unwrap();
    qp
}

/// A UC QP `qpn` connected to `dest`, in RTS: PMTU `mtu`, requester PSN
/// `sq_psn`, responder ePSN `rq_psn`, `access` its remote rights.
pub fn uc_qp(qpn: u32, dest: u32, mtu: Mtu, access: u32, sq_psn: u32, rq_psn: u32) -> TestQp {
    let mut qp = new_qp(qpn, QpType::Uc, 64, 64);
    let mut a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access, ..QpAttr::default() };
    qp.modify(&a, mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = dest;
    a.rq_psn = rq_psn;
    a.ah = dest;
    qp.modify(&a, mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    qp.modify(&a, mask::STATE | mask::SQ_PSN).unwrap();
    qp
}

pub fn sges(list: &[(u64, u32, u32)]) -> ([Sge; MAX_SGE], u8) {
    let mut s = [Sge::default(); MAX_SGE];
    for (i, &(addr, length, lkey)) in list.iter().enumerate() {
        s[i] = Sge { addr, length, lkey };
    }
    (s, list.len() as u8)
}

pub fn send_wr(wr_id: u64, opcode: WrOpcode, list: &[(u64, u32, u32)]) -> SendWqe {
    let (list, n) = sges(list);
    SendWqe { wr_id, opcode, data: Payload::Gather { list, n }, ..SendWqe::default() }
}

pub fn recv_wr(wr_id: u64, list: &[(u64, u32, u32)]) -> RecvWqe {
    let (sg_list, num_sge) = sges(list);
    RecvWqe { wr_id, sg_list, num_sge }
}

/// `poll_transmit`, checking `may_transmit` against it: a "no" must mean
/// no packet and no change of state.
pub fn poll_checked(qp: &mut TestQp, now: u64, mem: &mut VecMemory, buf: &mut [u8]) -> Option<ferroce_transport::engine::Transmit> {
    let may = qp.may_transmit(now);
    let (state, sq) = (qp.state(), qp.send_queue_len());
    let r = qp.poll_transmit(now, mem, buf);
    if !may {
        assert!(r.is_none(), "may_transmit said no, poll_transmit sent a packet");
        assert_eq!((qp.state(), qp.send_queue_len()), (state, sq), "may_transmit said no, poll_transmit changed the QP");
    }
    r
}

/// Every packet `qp` wants to send now.
pub fn drain_tx(qp: &mut TestQp, now: u64, mem: &mut VecMemory) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096 + 64];
    while let Some(t) = poll_checked(qp, now, mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
        assert!(out.len() < 100_000, "transmit loop");
    }
    out
}

pub const IPV4: [u8; 20] = [0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];

pub fn deliver(qp: &mut TestQp, now: u64, mem: &mut VecMemory, pkt: &[u8]) -> RxOutcome {
    qp.receive(now, mem, pkt, NetHeader::Ipv4(&IPV4))
}

/// Moves packets both ways until neither side has anything to send.
pub fn exchange(a: &mut TestQp, ma: &mut VecMemory, b: &mut TestQp, mb: &mut VecMemory, now: u64) {
    for _ in 0..10_000 {
        let pa = drain_tx(a, now, ma);
        let pb = drain_tx(b, now, mb);
        if pa.is_empty() && pb.is_empty() {
            return;
        }
        for p in &pa {
            deliver(b, now, mb, p);
        }
        for p in &pb {
            deliver(a, now, ma, p);
        }
    }
    panic!("exchange did not settle");
}

pub fn all_cqes(qp: &mut TestQp) -> (Vec<ferroce_transport::verbs::Cqe>, Vec<ferroce_transport::verbs::Cqe>) {
    let mut s = Vec::new();
    while let Some(c) = qp.poll_send_cq() {
        s.push(c);
    }
    let mut r = Vec::new();
    while let Some(c) = qp.poll_recv_cq() {
        r.push(c);
    }
    (s, r)
}

/// A transport packet of headers `h` and `payload`, finished by
/// `packet::finish`.
pub fn craft(h: &ferroce_transport::wire::packet::Headers, payload: &[u8]) -> Vec<u8> {
    use ferroce_transport::wire::packet;
    let mut buf = vec![0u8; payload.len() + 256];
    let hl = packet::emit_headers(h, payload.len(), &mut buf).unwrap();
    buf[hl..hl + payload.len()].copy_from_slice(payload);
    let n = packet::finish(&mut buf, hl, payload.len()).unwrap();
    buf.truncate(n);
    buf
}
