//! Base Transport Header (IBTA vol. 1 ch. 9), 12 bytes, first in every RoCEv2 packet.
//!
//! ```text
//!  byte 0   | 1                         | 2..3
//!  OpCode   | SE M PadCnt(2) TVer(4)    | P_Key
//!  byte 4                 | 5..7
//!  FECN BECN Resv6(6)     | DestQP (24)
//!  byte 8                 | 9..11
//!  AckReq Resv7(7)        | PSN (24)
//! ```
//!
//! FECN/BECN are the IBTA 1.2 congestion bits (reserved, `Resv8a`, in the
//! original layout); they and the two reserved fields are excluded from the
//! ICRC.

use super::field;
use super::opcode::Opcode;
use super::pkey::PKey;
use super::psn::Psn;
use super::{Error, Result};

/// Length of the BTH in bytes.
pub const BTH_LEN: usize = 12;

/// The only transport header version defined (BTH:TVer).
pub const TVER: u8 = 0;

/// Largest QP number (24 bits).
pub const QPN_MASK: u32 = 0x00FF_FFFF;

mod off {
    pub(super) const OPCODE: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const PKEY: usize = 2;
    pub(super) const BECN_FECN: usize = 4;
    pub(super) const DEST_QP: usize = 5;
    pub(super) const ACK_REQ: usize = 8;
    pub(super) const PSN: usize = 9;
}

const SE: u8 = 0x80;
const MIG_REQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0F;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const RESV6_MASK: u8 = 0x3F;
const ACK_REQ: u8 = 0x80;
const RESV7_MASK: u8 = 0x7F;

/// Pad bytes needed after a payload of `payload_len` bytes so that the
/// payload plus pad is a multiple of 4 (BTH:PadCnt, 0..=3).
pub const fn pad_count(payload_len: usize) -> u8 {
    // `& 3` keeps the value in 0..=3: the cast cannot truncate.
    (payload_len.wrapping_neg() & 3) as u8
}

/// A zero-copy view of a BTH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`BTH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Wraps `buffer`, which must hold at least [`BTH_LEN`] bytes (more is
    /// fine: the rest of the packet follows).
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), BTH_LEN)?;
        Ok(Bth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(field::read_u8(self.b(), off::OPCODE))
    }

    /// Solicited Event.
    pub fn solicited(&self) -> bool {
        field::read_u8(self.b(), off::FLAGS) & SE != 0
    }

    /// MigReq (path migration state).
    pub fn mig_req(&self) -> bool {
        field::read_u8(self.b(), off::FLAGS) & MIG_REQ != 0
    }

    /// Pad count, 0..=3.
    pub fn pad_count(&self) -> u8 {
        (field::read_u8(self.b(), off::FLAGS) & PAD_MASK) >> PAD_SHIFT
    }

    /// Transport header version, 0..=15.
    pub fn tver(&self) -> u8 {
        field::read_u8(self.b(), off::FLAGS) & TVER_MASK
    }

    /// The P_Key.
    pub fn pkey(&self) -> PKey {
        PKey(field::read_be16(self.b(), off::PKEY))
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        field::read_u8(self.b(), off::BECN_FECN) & FECN != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        field::read_u8(self.b(), off::BECN_FECN) & BECN != 0
    }

    /// The six reserved bits after FECN/BECN (Resv6a).
    pub fn resv6(&self) -> u8 {
        field::read_u8(self.b(), off::BECN_FECN) & RESV6_MASK
    }

    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        field::read_be24(self.b(), off::DEST_QP)
    }

    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        field::read_u8(self.b(), off::ACK_REQ) & ACK_REQ != 0
    }

    /// The seven reserved bits after AckReq (Resv7).
    pub fn resv7(&self) -> u8 {
        field::read_u8(self.b(), off::ACK_REQ) & RESV7_MASK
    }

    /// The PSN.
    pub fn psn(&self) -> Psn {
        Psn::new(field::read_be24(self.b(), off::PSN))
    }

    /// The bytes after the BTH.
    pub fn rest(&self) -> &[u8] {
        self.b().get(BTH_LEN..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn update(&mut self, offset: usize, mask: u8, bits: u8) {
        let old = field::read_u8(self.b(), offset);
        field::write_u8(self.bm(), offset, (old & !mask) | (bits & mask));
    }

    fn set_flag(&mut self, offset: usize, mask: u8, on: bool) {
        self.update(offset, mask, if on { mask } else { 0 });
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, opcode: Opcode) {
        field::write_u8(self.bm(), off::OPCODE, opcode.0);
    }

    /// Sets the Solicited Event (SE) bit.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_flag(off::FLAGS, SE, on);
    }

    /// Sets the MigReq bit.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_flag(off::FLAGS, MIG_REQ, on);
    }

    /// Sets the pad count; only the low two bits of `pad` are used.
    pub fn set_pad_count(&mut self, pad: u8) {
        self.update(off::FLAGS, PAD_MASK, pad << PAD_SHIFT);
    }

    /// Sets TVer; only the low four bits of `tver` are used.
    pub fn set_tver(&mut self, tver: u8) {
        self.update(off::FLAGS, TVER_MASK, tver);
    }

    /// Sets the P_Key.
    pub fn set_pkey(&mut self, pkey: PKey) {
        field::write_be16(self.bm(), off::PKEY, pkey.0);
    }

    /// Sets the FECN bit.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_flag(off::BECN_FECN, FECN, on);
    }

    /// Sets the BECN bit.
    pub fn set_becn(&mut self, on: bool) {
        self.set_flag(off::BECN_FECN, BECN, on);
    }

    /// Sets the six reserved bits after BECN.
    pub fn set_resv6(&mut self, bits: u8) {
        self.update(off::BECN_FECN, RESV6_MASK, bits);
    }

    /// Sets DestQP; only the low 24 bits of `qpn` are used.
    pub fn set_dest_qp(&mut self, qpn: u32) {
        field::write_be24(self.bm(), off::DEST_QP, qpn);
    }

    /// Sets the AckReq bit.
    pub fn set_ack_req(&mut self, on: bool) {
        self.set_flag(off::ACK_REQ, ACK_REQ, on);
    }

    /// Sets the seven reserved bits after AckReq.
    pub fn set_resv7(&mut self, bits: u8) {
        self.update(off::ACK_REQ, RESV7_MASK, bits);
    }

    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        field::write_be24(self.bm(), off::PSN, psn.value());
    }
}

/// A parsed BTH. Reserved fields are not kept: they are ignored on receive
/// and sent as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// The opcode.
    pub opcode: Opcode,
    /// The Solicited Event (SE) bit.
    pub solicited: bool,
    /// The MigReq bit.
    pub mig_req: bool,
    /// Pad count, 0..=3. [`super::packet::emit`] computes it from the
    /// payload; [`BthRepr::emit`] writes it as given.
    pub pad_count: u8,
    /// The P_Key.
    pub pkey: PKey,
    /// The FECN bit.
    pub fecn: bool,
    /// The BECN bit.
    pub becn: bool,
    /// Destination QP number, 24 bits.
    pub dest_qp: u32,
    /// The AckReq bit.
    pub ack_req: bool,
    /// The PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// Length on the wire.
    pub const LEN: usize = BTH_LEN;

    /// Decodes a BTH, rejecting a TVer other than 0 ([`Error::BadTver`]).
    /// The opcode is not validated here; [`super::packet::parse`] does it.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        let tver = bth.tver();
        if tver != TVER {
            return Err(Error::BadTver(tver));
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Writes the BTH into the first [`BTH_LEN`] bytes of `buf`.
    ///
    /// Fails with [`Error::Truncated`] on a short buffer and with
    /// [`Error::FieldRange`] when `pad_count > 3` or `dest_qp` exceeds 24 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.pad_count > 3 || self.dest_qp > QPN_MASK {
            return Err(Error::FieldRange);
        }
        let mut bth = Bth::new_checked(buf)?;
        bth.set_opcode(self.opcode);
        let flags = (if self.solicited { SE } else { 0 })
            | (if self.mig_req { MIG_REQ } else { 0 })
            | (self.pad_count << PAD_SHIFT)
            | TVER;
        field::write_u8(bth.bm(), off::FLAGS, flags);
        bth.set_pkey(self.pkey);
        let cn = (if self.fecn { FECN } else { 0 }) | (if self.becn { BECN } else { 0 });
        field::write_u8(bth.bm(), off::BECN_FECN, cn);
        bth.set_dest_qp(self.dest_qp);
        field::write_u8(
            bth.bm(),
            off::ACK_REQ,
            if self.ack_req { ACK_REQ } else { 0 },
        );
        bth.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RC SEND ONLY, SE, MigReq, pad 2, P_Key 0xFFFF, BECN, DestQP
    /// 0x123456, AckReq, PSN 0xABCDEF: every field from a hand-built layout.
    const BYTES: [u8; 12] = [
        0x04, 0xE0, 0xFF, 0xFF, 0x40, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            pkey: PKey(0xFFFF),
            fecn: false,
            becn: true,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: Psn::new(0xAB_CDEF),
        }
    }

    #[test]
    fn bth_fields_at_ibta_bit_positions() {
        let bth = Bth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(bth.opcode(), Opcode::RC_SEND_ONLY);
        assert!(bth.solicited());
        assert!(bth.mig_req());
        assert_eq!(bth.pad_count(), 2);
        assert_eq!(bth.tver(), 0);
        assert_eq!(bth.pkey(), PKey(0xFFFF));
        assert!(!bth.fecn());
        assert!(bth.becn());
        assert_eq!(bth.resv6(), 0);
        assert_eq!(bth.dest_qp(), 0x12_3456);
        assert!(bth.ack_req());
        assert_eq!(bth.resv7(), 0);
        assert_eq!(bth.psn(), Psn::new(0xAB_CDEF));
        assert_eq!(BthRepr::parse(&bth), Ok(repr()));
    }

    #[test]
    fn bth_single_bits() {
        let mut buf = [0u8; 12];
        let mut bth = Bth::new_checked(&mut buf[..]).unwrap();
        bth.set_tver(0xF);
        assert_eq!(bth.into_inner()[1], 0x0F);
        type Setter = fn(&mut Bth<&mut [u8]>);
        let cases: [(Setter, usize, u8); 8] = [
            (|b| b.set_solicited(true), 1, 0x80),
            (|b| b.set_mig_req(true), 1, 0x40),
            (|b| b.set_pad_count(3), 1, 0x30),
            (|b| b.set_fecn(true), 4, 0x80),
            (|b| b.set_becn(true), 4, 0x40),
            (|b| b.set_resv6(0xFF), 4, 0x3F),
            (|b| b.set_ack_req(true), 8, 0x80),
            (|b| b.set_resv7(0xFF), 8, 0x7F),
        ];
        for (set, at, expected) in cases {
            let mut buf = [0u8; 12];
            set(&mut Bth::new_checked(&mut buf[..]).unwrap());
            let mut want = [0u8; 12];
            want[at] = expected;
            assert_eq!(buf, want);
        }
    }

    #[test]
    fn bth_setters_round_trip_and_keep_neighbours() {
        let mut buf = [0xFFu8; 13];
        let mut bth = Bth::new_checked(&mut buf[..]).unwrap();
        bth.set_pad_count(1);
        bth.set_solicited(false);
        bth.set_dest_qp(0xFFAB_CDEF);
        bth.set_psn(Psn::new(1));
        assert_eq!(bth.pad_count(), 1);
        assert!(!bth.solicited());
        assert!(bth.mig_req());
        assert_eq!(bth.tver(), 0xF);
        assert_eq!(bth.dest_qp(), 0xAB_CDEF);
        assert_eq!(bth.psn(), Psn::new(1));
        assert!(bth.fecn() && bth.becn());
        assert_eq!(bth.rest(), &[0xFF]);
        assert_eq!(
            buf[..12],
            [0xFF, 0x5F, 0xFF, 0xFF, 0xFF, 0xAB, 0xCD, 0xEF, 0xFF, 0, 0, 1]
        );
    }

    #[test]
    fn bth_repr_round_trip() {
        let mut buf = [0xEEu8; 12];
        repr().emit(&mut buf).unwrap();
        assert_eq!(buf, BYTES);
        let parsed = BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(parsed, repr());
    }

    #[test]
    fn bth_ignores_reserved_bits_on_parse() {
        let mut buf = BYTES;
        buf[4] |= 0x3F;
        buf[8] |= 0x7F;
        let parsed = BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(parsed, repr());
    }

    #[test]
    fn bth_rejects_short_buffers_and_bad_tver() {
        assert_eq!(Bth::new_checked(&BYTES[..11]).err(), Some(Error::Truncated));
        assert_eq!(Bth::new_checked(&[][..]).err(), Some(Error::Truncated));
        let mut buf = BYTES;
        buf[1] |= 0x01;
        let bth = Bth::new_checked(&buf[..]).unwrap();
        assert_eq!(BthRepr::parse(&bth), Err(Error::BadTver(1)));
        assert_eq!(repr().emit(&mut [0u8; 11]), Err(Error::Truncated));
    }

    #[test]
    fn bth_emit_rejects_out_of_range_fields() {
        let mut buf = [0u8; 12];
        let bad_pad = BthRepr {
            pad_count: 4,
            ..repr()
        };
        assert_eq!(bad_pad.emit(&mut buf), Err(Error::FieldRange));
        let bad_qp = BthRepr {
            dest_qp: 0x100_0000,
            ..repr()
        };
        assert_eq!(bad_qp.emit(&mut buf), Err(Error::FieldRange));
    }

    #[test]
    fn pad_count_aligns_payload_to_four_bytes() {
        let expected = [0u8, 3, 2, 1, 0, 3, 2, 1, 0];
        for (len, pad) in expected.iter().enumerate() {
            assert_eq!(pad_count(len), *pad, "len {len}");
            assert_eq!((len + usize::from(*pad)) % 4, 0);
        }
        assert_eq!(pad_count(usize::MAX), 1);
        assert_eq!(pad_count(4096), 0);
        assert_eq!(pad_count(4097), 3);
    }
}
