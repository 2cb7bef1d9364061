//! The engine's view of one transport packet, and its bridge to `wire`.
//!
//! The engine reasons about plain header values ([`Hdrs`]); the wire layer
//! owns the byte layout. [`parse`] decodes a received BTH..payload+pad slice
//! with the wire views and the opcode table; [`emit_headers`] and
//! [`finish`] lay a packet out in a transmit buffer, leaving the payload
//! bytes to be gathered straight from registered memory in between (no
//! intermediate copy).

use super::wire::{
    pad_count, AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, Bth, BthRepr, DethRepr,
    ExtHeader, IethRepr, ImmDtRepr, Opcode, OpcodeInfo, PKey, Psn, RethRepr,
};

/// Largest BTH plus extension headers the engine emits (RC atomic: 12 + 28;
/// RC WRITE ONLY WITH IMMEDIATE: 12 + 16 + 4).
pub const MAX_HEADER_LEN: usize = 40;

/// Bytes a transmit buffer needs for path MTU `pmtu`: headers, payload and
/// up to 3 pad bytes (the caller adds IP/UDP and the 4-byte ICRC).
pub const fn tx_buffer_len(pmtu: usize) -> usize {
    MAX_HEADER_LEN.saturating_add(pmtu).saturating_add(3)
}

/// RDMA ETH values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// Atomic ETH values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicReq {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// Header values of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hdrs {
    pub opcode: Opcode,
    pub solicited: bool,
    pub ack_req: bool,
    pub pkey: u16,
    pub dest_qp: u32,
    pub psn: Psn,
    /// DETH: (Q_Key, source QPN).
    pub deth: Option<(u32, u32)>,
    pub reth: Option<Reth>,
    pub atomic: Option<AtomicReq>,
    /// AETH: (syndrome, MSN).
    pub aeth: Option<(AethSyndrome, u32)>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
}

impl Hdrs {
    /// Headers with only the BTH fields set.
    pub fn new(opcode: Opcode, pkey: u16, dest_qp: u32, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            ack_req: false,
            pkey,
            dest_qp,
            psn,
            deth: None,
            reth: None,
            atomic: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
        }
    }
}

/// A received packet: header values, opcode properties and payload.
#[derive(Clone, Copy, Debug)]
pub struct Rx<'a> {
    pub h: Hdrs,
    pub info: OpcodeInfo,
    pub payload: &'a [u8],
}

/// Decodes `buf` (BTH through payload and pad, ICRC removed). `None` for
/// anything the IBTA header checks drop silently: truncated, reserved or
/// unsupported opcode, bad TVer or pad.
pub fn parse(buf: &[u8]) -> Option<Rx<'_>> {
    let bth = BthRepr::parse(&Bth::new_checked(buf).ok()?).ok()?;
    let info = bth.opcode.info().ok()?;
    let hlen = info.header_len();
    if buf.len() < hlen || !buf.len().is_multiple_of(4) {
        return None;
    }
    let pad = usize::from(bth.pad_count);
    let end = buf.len().checked_sub(pad)?;
    if end < hlen || (!info.payload && end != hlen) {
        return None;
    }
    let payload = buf.get(hlen..end)?;
    let at = |h: ExtHeader| -> Option<&[u8]> {
        let off = info.headers.offset_of(h)?;
        buf.get(off..)
    };
    let mut hd = Hdrs::new(bth.opcode, bth.pkey.0, bth.dest_qp, bth.psn);
    hd.solicited = bth.solicited;
    hd.ack_req = bth.ack_req;
    if let Some(b) = at(ExtHeader::Deth) {
        let d = DethRepr::parse(&super::wire::Deth::new_checked(b).ok()?).ok()?;
        hd.deth = Some((d.q_key, d.src_qp));
    }
    if let Some(b) = at(ExtHeader::Reth) {
        let r = RethRepr::parse(&super::wire::Reth::new_checked(b).ok()?).ok()?;
        hd.reth = Some(Reth { va: r.va, rkey: r.r_key, len: r.dma_len });
    }
    if let Some(b) = at(ExtHeader::AtomicEth) {
        let a = AtomicEthRepr::parse(&super::wire::AtomicEth::new_checked(b).ok()?).ok()?;
        hd.atomic = Some(AtomicReq { va: a.va, rkey: a.r_key, swap_add: a.swap_add, compare: a.compare });
    }
    if let Some(b) = at(ExtHeader::Aeth) {
        let a = AethRepr::parse(&super::wire::Aeth::new_checked(b).ok()?).ok()?;
        hd.aeth = Some((a.syndrome, a.msn));
    }
    if let Some(b) = at(ExtHeader::AtomicAckEth) {
        let a = AtomicAckEthRepr::parse(&super::wire::AtomicAckEth::new_checked(b).ok()?).ok()?;
        hd.atomic_ack = Some(a.orig_data);
    }
    if let Some(b) = at(ExtHeader::ImmDt) {
        let a = ImmDtRepr::parse(&super::wire::ImmDt::new_checked(b).ok()?).ok()?;
        hd.imm = Some(a.imm);
    }
    if let Some(b) = at(ExtHeader::Ieth) {
        let a = IethRepr::parse(&super::wire::Ieth::new_checked(b).ok()?).ok()?;
        hd.ieth = Some(a.r_key);
    }
    Some(Rx { h: hd, info, payload })
}

/// Writes the BTH and extension headers of `h` for a payload of
/// `payload_len` bytes; returns the header length (the payload goes right
/// after). `None` if the buffer is too small or `h` does not match the
/// opcode's layout.
pub fn emit_headers(h: &Hdrs, payload_len: usize, buf: &mut [u8]) -> Option<usize> {
    let info = h.opcode.info().ok()?;
    let hlen = info.header_len();
    let total = hlen.checked_add(payload_len)?.checked_add(usize::from(pad_count(payload_len)))?;
    if buf.len() < total {
        return None;
    }
    let present = |x: ExtHeader, have: bool| info.headers.contains(x) == have;
    if !(present(ExtHeader::Deth, h.deth.is_some())
        && present(ExtHeader::Reth, h.reth.is_some())
        && present(ExtHeader::AtomicEth, h.atomic.is_some())
        && present(ExtHeader::Aeth, h.aeth.is_some())
        && present(ExtHeader::AtomicAckEth, h.atomic_ack.is_some())
        && present(ExtHeader::ImmDt, h.imm.is_some())
        && present(ExtHeader::Ieth, h.ieth.is_some()))
    {
        return None;
    }
    BthRepr {
        opcode: h.opcode,
        solicited: h.solicited,
        mig_req: true,
        pad_count: pad_count(payload_len),
        pkey: PKey(h.pkey),
        fecn: false,
        becn: false,
        dest_qp: h.dest_qp,
        ack_req: h.ack_req,
        psn: h.psn,
    }
    .emit(buf)
    .ok()?;
    fn at<'a>(buf: &'a mut [u8], info: &OpcodeInfo, x: ExtHeader) -> Option<&'a mut [u8]> {
        let off = info.headers.offset_of(x)?;
        buf.get_mut(off..)
    }
    if let Some((q_key, src_qp)) = h.deth {
        DethRepr { q_key, src_qp }.emit(at(buf, &info, ExtHeader::Deth)?).ok()?;
    }
    if let Some(r) = h.reth {
        RethRepr { va: r.va, r_key: r.rkey, dma_len: r.len }.emit(at(buf, &info, ExtHeader::Reth)?).ok()?;
    }
    if let Some(a) = h.atomic {
        AtomicEthRepr { va: a.va, r_key: a.rkey, swap_add: a.swap_add, compare: a.compare }
            .emit(at(buf, &info, ExtHeader::AtomicEth)?)
            .ok()?;
    }
    if let Some((syndrome, msn)) = h.aeth {
        AethRepr { syndrome, msn }.emit(at(buf, &info, ExtHeader::Aeth)?).ok()?;
    }
    if let Some(orig_data) = h.atomic_ack {
        AtomicAckEthRepr { orig_data }.emit(at(buf, &info, ExtHeader::AtomicAckEth)?).ok()?;
    }
    if let Some(imm) = h.imm {
        ImmDtRepr { imm }.emit(at(buf, &info, ExtHeader::ImmDt)?).ok()?;
    }
    if let Some(r_key) = h.ieth {
        IethRepr { r_key }.emit(at(buf, &info, ExtHeader::Ieth)?).ok()?;
    }
    Some(hlen)
}

/// Zeroes the pad after a payload of `payload_len` bytes placed at `hlen`
/// and returns the packet length (headers, payload, pad).
pub fn finish(buf: &mut [u8], hlen: usize, payload_len: usize) -> Option<usize> {
    let end = hlen.checked_add(payload_len)?;
    let total = end.checked_add(usize::from(pad_count(payload_len)))?;
    buf.get_mut(end..total)?.fill(0);
    Some(total)
}
