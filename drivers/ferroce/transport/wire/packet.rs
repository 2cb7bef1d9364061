//! Whole transport packets: the BTH, its extension headers and the payload.
//!
//! The buffers here start at the BTH and end before the ICRC (RoCEv2 puts
//! the BTH right after the UDP header; [`super::icrc`] strips and checks the
//! ICRC). [`parse`] is the receive-side header validation of the IBTA that depends
//! only on the packet itself (opcode known, TVer 0, headers present, pad and
//! payload lengths consistent with the opcode and position); checks that
//! need QP state (P_Key, Q_Key, PSN, PMTU) are the caller's, with helpers
//! such as [`check_pmtu`].

use super::aeth::{Aeth, AethRepr};
use super::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEth, AtomicEthRepr};
use super::bth::{pad_count, Bth, BthRepr};
use super::deth::{Deth, DethRepr};
use super::feth::{Feth, FethRepr};
use super::ieth::{Ieth, IethRepr};
use super::immdt::{ImmDt, ImmDtRepr};
use super::opcode::{ExtHeader, ExtHeaders, OpcodeInfo, Position, Transport};
use super::psn::Psn;
use super::reth::{Reth, RethRepr};
use super::{Error, Result};

/// The BTH and extension headers of a packet, parsed.
///
/// Exactly the extension headers the opcode calls for are `Some` (for a
/// CNP, whose 16 reserved bytes have no fields, all are `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Headers {
    /// The BTH.
    pub bth: BthRepr,
    /// The DETH, when the opcode has one.
    pub deth: Option<DethRepr>,
    /// The FETH, when the opcode has one.
    pub feth: Option<FethRepr>,
    /// The RETH, when the opcode has one.
    pub reth: Option<RethRepr>,
    /// The AtomicETH, when the opcode has one.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// The AETH, when the opcode has one.
    pub aeth: Option<AethRepr>,
    /// The AtomicAckETH, when the opcode has one.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// The ImmDt header, when the opcode has one.
    pub immdt: Option<ImmDtRepr>,
    /// The IETH, when the opcode has one.
    pub ieth: Option<IethRepr>,
}

impl Headers {
    /// Headers made of `bth` alone; set the extension headers the opcode
    /// needs before emitting.
    pub const fn new(bth: BthRepr) -> Headers {
        Headers {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// The headers of a packet ferroce sends, before its extension
    /// headers are set: a BTH with `opcode`, `pkey`, `dest_qp` and `psn`,
    /// MigReq set (RoCE has no path migration: always "migrated"), SE,
    /// AckReq, FECN and BECN clear, pad count 0 (the emit functions compute
    /// it from the payload).
    pub const fn bth_only(opcode: super::Opcode, pkey: u16, dest_qp: u32, psn: Psn) -> Headers {
        Headers::new(BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: super::PKey(pkey),
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        })
    }

    /// The extension headers that are `Some`.
    pub const fn present(&self) -> ExtHeaders {
        let mut set = ExtHeaders::NONE;
        if self.deth.is_some() {
            set = set.with(ExtHeader::Deth);
        }
        if self.feth.is_some() {
            set = set.with(ExtHeader::Feth);
        }
        if self.reth.is_some() {
            set = set.with(ExtHeader::Reth);
        }
        if self.atomic_eth.is_some() {
            set = set.with(ExtHeader::AtomicEth);
        }
        if self.aeth.is_some() {
            set = set.with(ExtHeader::Aeth);
        }
        if self.atomic_ack_eth.is_some() {
            set = set.with(ExtHeader::AtomicAckEth);
        }
        if self.immdt.is_some() {
            set = set.with(ExtHeader::ImmDt);
        }
        if self.ieth.is_some() {
            set = set.with(ExtHeader::Ieth);
        }
        set
    }

    /// The opcode's table entry, once checked that the headers present are
    /// exactly the ones it calls for ([`Error::HeaderMismatch`] otherwise).
    pub fn info(&self) -> Result<OpcodeInfo> {
        let info = self.bth.opcode.info()?;
        let mut present = self.present();
        if matches!(info.transport, Transport::Cnp) {
            present = present.with(ExtHeader::CnpReserved);
        }
        if present != info.headers {
            return Err(Error::HeaderMismatch);
        }
        Ok(info)
    }

    /// Length of the BTH plus extension headers.
    pub fn header_len(&self) -> Result<usize> {
        Ok(self.info()?.header_len())
    }

    /// Writes the BTH and extension headers at the start of `buf`, BTH
    /// fields as given (pad count included), reserved bytes as zero, and
    /// returns the number of bytes written. The caller appends the payload
    /// and pad; [`emit`] does it all.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.info()?;
        let len = info.header_len();
        let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
        self.bth.emit(out)?;
        for h in info.headers.iter() {
            let at = info.headers.offset_of(h).ok_or(Error::HeaderMismatch)?;
            let dst = out.get_mut(at..).ok_or(Error::Truncated)?;
            let missing = Error::HeaderMismatch;
            match h {
                ExtHeader::Deth => self.deth.ok_or(missing)?.emit(dst)?,
                ExtHeader::Feth => self.feth.ok_or(missing)?.emit(dst)?,
                ExtHeader::Reth => self.reth.ok_or(missing)?.emit(dst)?,
                ExtHeader::AtomicEth => self.atomic_eth.ok_or(missing)?.emit(dst)?,
                ExtHeader::Aeth => self.aeth.ok_or(missing)?.emit(dst)?,
                ExtHeader::AtomicAckEth => self.atomic_ack_eth.ok_or(missing)?.emit(dst)?,
                ExtHeader::ImmDt => self.immdt.ok_or(missing)?.emit(dst)?,
                ExtHeader::Ieth => self.ieth.ok_or(missing)?.emit(dst)?,
                ExtHeader::CnpReserved => {
                    let reserved = dst.get_mut(..h.size()).ok_or(Error::Truncated)?;
                    reserved.fill(0);
                }
            }
        }
        Ok(len)
    }
}

/// A validated transport packet borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportPacket<'a> {
    /// The opcode's table entry.
    pub info: OpcodeInfo,
    /// The BTH and extension headers.
    pub headers: Headers,
    /// The data payload, pad removed (empty for opcodes without payload).
    pub payload: &'a [u8],
}

impl TransportPacket<'_> {
    /// The PSN.
    pub fn psn(&self) -> Psn {
        self.headers.bth.psn
    }

    /// The destination QP number.
    pub fn dest_qp(&self) -> u32 {
        self.headers.bth.dest_qp
    }

    /// Checks the payload length against the path MTU (see [`check_pmtu`]).
    pub fn check_pmtu(&self, pmtu: usize) -> Result<()> {
        check_pmtu(self.info.position, self.payload.len(), pmtu)
    }
}

/// The IBTA payload-length rules that do not depend on the PMTU: FIRST and
/// MIDDLE carry a non-empty payload that is a multiple of 4 (a whole PMTU,
/// so no pad), LAST carries at least one byte, ONLY anything; opcodes
/// without a payload carry none.
fn check_payload_len(info: &OpcodeInfo, payload_len: usize) -> Result<()> {
    check_no_payload(info, payload_len)?;
    let ok = !info.payload
        || match info.position {
            Position::First | Position::Middle => payload_len != 0 && payload_len.is_multiple_of(4),
            Position::Last => payload_len != 0,
            Position::Only => true,
        };
    if ok {
        Ok(())
    } else {
        Err(Error::BadLength)
    }
}

/// The IBTA PMTU rule for a packet at `position` carrying `payload_len`
/// bytes (as rdma_rxe's `check_length` applies it): FIRST and MIDDLE
/// exactly `pmtu`, LAST 1..=`pmtu`, ONLY 0..=`pmtu`. [`Error::PmtuViolation`]
/// otherwise. Apply it to payload-carrying opcodes (others are ONLY with an
/// empty payload, which always passes).
pub fn check_pmtu(position: Position, payload_len: usize, pmtu: usize) -> Result<()> {
    let ok = match position {
        Position::First | Position::Middle => payload_len == pmtu,
        Position::Last => payload_len != 0 && payload_len <= pmtu,
        Position::Only => payload_len <= pmtu,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::PmtuViolation)
    }
}

/// An opcode without a payload carries none (a layout rule: such a packet
/// is malformed whatever the QP, and is dropped).
fn check_no_payload(info: &OpcodeInfo, payload_len: usize) -> Result<()> {
    if info.payload || payload_len == 0 {
        Ok(())
    } else {
        Err(Error::BadLength)
    }
}

fn ext<'a>(buf: &'a [u8], info: &OpcodeInfo, header: ExtHeader) -> Result<&'a [u8]> {
    let at = info
        .headers
        .offset_of(header)
        .ok_or(Error::HeaderMismatch)?;
    buf.get(at..).ok_or(Error::Truncated)
}

/// Validates a transport packet (BTH onward, ICRC excluded) and returns its
/// headers and payload.
///
/// Errors, in the order they are checked: [`Error::Truncated`] (shorter
/// than the BTH or than the opcode's headers), [`Error::ReservedOpcode`] /
/// [`Error::UnsupportedOpcode`], [`Error::BadTver`], [`Error::BadPad`]
/// (length not a multiple of 4, or pad count above the bytes after the
/// headers), [`Error::BadLength`] (see the payload rules above).
pub fn parse(buf: &[u8]) -> Result<TransportPacket<'_>> {
    let p = parse_headers(buf)?;
    check_payload_len(&p.info, p.payload.len())?;
    Ok(p)
}

/// [`parse`] without the payload rules of FIRST, MIDDLE and LAST: what the
/// engine receives with. An RC responder answers a payload of the wrong
/// length with a NAK (Invalid Request), a UD one drops it, so those
/// length checks belong to the QP, not to the parser. An opcode without a
/// payload that carries one is still refused ([`Error::BadLength`]).
pub fn parse_headers(buf: &[u8]) -> Result<TransportPacket<'_>> {
    let bth = Bth::new_checked(buf)?;
    let info = bth.opcode().info()?;
    let bth_repr = BthRepr::parse(&bth)?;
    let data = buf.get(info.header_len()..).ok_or(Error::Truncated)?;
    if !buf.len().is_multiple_of(4) {
        return Err(Error::BadPad);
    }
    let payload_len = data
        .len()
        .checked_sub(usize::from(bth_repr.pad_count))
        .ok_or(Error::BadPad)?;
    let (payload, _pad) = data.split_at_checked(payload_len).ok_or(Error::BadPad)?;
    check_no_payload(&info, payload_len)?;

    let mut headers = Headers::new(bth_repr);
    for h in info.headers.iter() {
        let at = ext(buf, &info, h)?;
        match h {
            ExtHeader::Deth => headers.deth = Some(DethRepr::parse(&Deth::new_checked(at)?)?),
            ExtHeader::Feth => headers.feth = Some(FethRepr::parse(&Feth::new_checked(at)?)?),
            ExtHeader::Reth => headers.reth = Some(RethRepr::parse(&Reth::new_checked(at)?)?),
            ExtHeader::AtomicEth => {
                headers.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_checked(at)?)?)
            }
            ExtHeader::Aeth => headers.aeth = Some(AethRepr::parse(&Aeth::new_checked(at)?)?),
            ExtHeader::AtomicAckEth => {
                headers.atomic_ack_eth =
                    Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(at)?)?)
            }
            ExtHeader::ImmDt => headers.immdt = Some(ImmDtRepr::parse(&ImmDt::new_checked(at)?)?),
            ExtHeader::Ieth => headers.ieth = Some(IethRepr::parse(&Ieth::new_checked(at)?)?),
            ExtHeader::CnpReserved => {}
        }
    }
    Ok(TransportPacket {
        info,
        headers,
        payload,
    })
}

/// Bytes [`emit`] writes for `headers` and a payload of `payload_len`
/// bytes: headers, payload and pad (the ICRC not included).
pub fn emit_len(headers: &Headers, payload_len: usize) -> Result<usize> {
    headers
        .header_len()?
        .checked_add(payload_len)
        .and_then(|n| n.checked_add(usize::from(pad_count(payload_len))))
        .ok_or(Error::FieldRange)
}

/// Writes a whole transport packet into `buf`: headers (with BTH:PadCnt
/// computed from the payload, whatever `headers.bth.pad_count` says),
/// payload, zeroed pad. Returns the length written; the caller appends the
/// ICRC. Enforces the same opcode/length rules as [`parse`], so what is
/// emitted parses back.
pub fn emit(headers: &Headers, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
    let info = headers.info()?;
    check_payload_len(&info, payload.len())?;
    let total = emit_len(headers, payload.len())?;
    let out = buf.get_mut(..total).ok_or(Error::Truncated)?;
    let mut h = *headers;
    h.bth.pad_count = pad_count(payload.len());
    let header_len = h.emit(out)?;
    let (_, rest) = out
        .split_at_mut_checked(header_len)
        .ok_or(Error::Truncated)?;
    let (data, pad) = rest
        .split_at_mut_checked(payload.len())
        .ok_or(Error::Truncated)?;
    // (zip, not copy_from_slice: no length-mismatch panic path in the kernel)
    for (d, s) in data.iter_mut().zip(payload) {
        *d = *s;
    }
    pad.fill(0);
    Ok(total)
}

/// Largest BTH plus extension headers ferroce emits (RC atomic: 12 + 28;
/// RC WRITE ONLY WITH IMMEDIATE: 12 + 16 + 4).
pub const MAX_HEADER_LEN: usize = 40;

/// Bytes a transmit buffer needs for path MTU `pmtu`: headers, payload and
/// up to 3 pad bytes (the caller adds IP/UDP and the 4-byte ICRC).
pub const fn tx_buffer_len(pmtu: usize) -> usize {
    MAX_HEADER_LEN.saturating_add(pmtu).saturating_add(3)
}

/// Writes the headers of a packet with a payload of `payload_len` bytes
/// (BTH:PadCnt computed from it) at the start of `buf`, checking that
/// `buf` has room for the whole packet; returns the header length. The
/// caller gathers the payload right after (straight from registered
/// memory: no intermediate copy), then calls [`finish`].
pub fn emit_headers(headers: &Headers, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
    let total = emit_len(headers, payload_len)?;
    if buf.len() < total {
        return Err(Error::Truncated);
    }
    let mut h = *headers;
    h.bth.pad_count = pad_count(payload_len);
    h.emit(buf)
}

/// Zeroes the pad after a payload of `payload_len` bytes placed at
/// `header_len` and returns the packet's length (headers, payload, pad).
pub fn finish(buf: &mut [u8], header_len: usize, payload_len: usize) -> Result<usize> {
    let end = header_len.checked_add(payload_len).ok_or(Error::FieldRange)?;
    let total = end.checked_add(usize::from(pad_count(payload_len))).ok_or(Error::FieldRange)?;
    buf.get_mut(end..total).ok_or(Error::Truncated)?.fill(0);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::super::aeth::AethSyndrome;
    use super::super::opcode::Opcode;
    use super::super::pkey::PKey;
    use super::*;

    fn bth(opcode: Opcode) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: false,
            psn: Psn::new(0x10),
        }
    }

    #[test]
    fn packet_ud_send_only_hand_built() {
        // UD SEND ONLY, P_Key 0xFFFF, DestQP 1, PSN 0, Q_Key 0x11111111,
        // SrcQP 0x12, payload "abc" plus one pad byte.
        let bytes = [
            0x64, 0x10, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, // BTH
            0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x12, // DETH
            b'a', b'b', b'c', 0x00, // payload + pad
        ];
        let pkt = parse(&bytes).unwrap();
        assert_eq!(pkt.info.transport, Transport::Ud);
        assert_eq!(pkt.headers.bth.pad_count, 1);
        assert_eq!(pkt.dest_qp(), 1);
        assert_eq!(pkt.psn(), Psn::ZERO);
        assert_eq!(
            pkt.headers.deth,
            Some(DethRepr {
                q_key: 0x1111_1111,
                src_qp: 0x12
            })
        );
        assert_eq!(pkt.payload, b"abc");
        let mut out = [0xAAu8; 32];
        let n = emit(&pkt.headers, pkt.payload, &mut out).unwrap();
        assert_eq!(&out[..n], &bytes[..]);
        assert_eq!(emit_len(&pkt.headers, 3), Ok(24));
    }

    #[test]
    fn packet_rejects_reserved_unsupported_and_truncated() {
        let mut bytes = [0u8; 16];
        bytes[0] = 0x15;
        assert_eq!(parse(&bytes), Err(Error::ReservedOpcode(0x15)));
        bytes[0] = 0x40;
        assert_eq!(parse(&bytes), Err(Error::UnsupportedOpcode(0x40)));
        bytes[0] = 0x64; // needs a DETH: 20 bytes
        assert_eq!(parse(&bytes), Err(Error::Truncated));
        assert_eq!(parse(&bytes[..11]), Err(Error::Truncated));
        bytes[0] = 0x04;
        bytes[1] = 0x02; // TVer 2
        assert_eq!(parse(&bytes), Err(Error::BadTver(2)));
    }

    #[test]
    fn packet_pad_rules() {
        let mut buf = [0u8; 64];
        let n = emit(&Headers::new(bth(Opcode::RC_SEND_ONLY)), &[], &mut buf).unwrap();
        assert_eq!(n, 12);
        // Pad count larger than what follows the headers.
        buf[1] = 0x10;
        assert_eq!(parse(&buf[..12]), Err(Error::BadPad));
        // Not a whole number of words.
        buf[1] = 0;
        assert_eq!(parse(&buf[..14]), Err(Error::BadPad));
        // Pad exactly consumes the data: empty payload.
        buf[1] = 0x30;
        assert_eq!(parse(&buf[..16]).unwrap().payload, &[0u8][..]);
    }

    #[test]
    fn packet_position_length_rules() {
        let mut buf = [0u8; 64];
        let first = Headers::new(bth(Opcode::RC_SEND_FIRST));
        assert_eq!(emit(&first, &[], &mut buf), Err(Error::BadLength));
        assert_eq!(emit(&first, &[1, 2, 3], &mut buf), Err(Error::BadLength));
        assert_eq!(emit(&first, &[1, 2, 3, 4], &mut buf), Ok(16));
        let last = Headers::new(bth(Opcode::RC_SEND_LAST));
        assert_eq!(emit(&last, &[], &mut buf), Err(Error::BadLength));
        assert_eq!(emit(&last, &[9], &mut buf), Ok(16));
        assert_eq!(parse(&buf[..16]).unwrap().payload, &[9]);
        // A MIDDLE with a pad is rejected on receive.
        buf[0] = Opcode::RC_SEND_MIDDLE.0;
        assert_eq!(parse(&buf[..16]), Err(Error::BadLength));
        // An ACK cannot carry data.
        let mut ack = Headers::new(bth(Opcode::RC_ACKNOWLEDGE));
        ack.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 1 },
            msn: 5,
        });
        assert_eq!(emit(&ack, &[1], &mut buf), Err(Error::BadLength));
        assert_eq!(emit(&ack, &[], &mut buf), Ok(16));
        assert!(parse(&buf[..16]).is_ok());
        let mut long = [0u8; 20];
        long[..16].copy_from_slice(&buf[..16]);
        assert_eq!(parse(&long), Err(Error::BadLength));
    }

    #[test]
    fn packet_emit_checks_headers_match_opcode() {
        let mut buf = [0u8; 64];
        let mut h = Headers::new(bth(Opcode::UD_SEND_ONLY));
        assert_eq!(emit(&h, &[], &mut buf), Err(Error::HeaderMismatch));
        h.deth = Some(DethRepr {
            q_key: 1,
            src_qp: 2,
        });
        h.immdt = Some(ImmDtRepr { imm: 3 });
        assert_eq!(emit(&h, &[], &mut buf), Err(Error::HeaderMismatch));
        h.bth.opcode = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE;
        assert_eq!(emit(&h, &[], &mut buf), Ok(24));
        assert_eq!(emit(&h, &[], &mut buf[..23]), Err(Error::Truncated));
        let pkt = parse(&buf[..24]).unwrap();
        assert_eq!(pkt.headers, h);
        assert!(pkt.info.immediate);
    }

    #[test]
    fn packet_cnp() {
        let mut buf = [0xFFu8; 28];
        let h = Headers::new(bth(Opcode::CNP));
        assert_eq!(h.header_len(), Ok(28));
        assert_eq!(emit(&h, &[], &mut buf), Ok(28));
        assert_eq!(&buf[12..], &[0u8; 16]);
        let pkt = parse(&buf).unwrap();
        assert_eq!(pkt.info.transport, Transport::Cnp);
        assert!(pkt.payload.is_empty());
        assert_eq!(parse(&buf[..24]), Err(Error::Truncated));
    }

    #[test]
    fn packet_pmtu_rule() {
        use Position::*;
        assert_eq!(check_pmtu(First, 1024, 1024), Ok(()));
        assert_eq!(check_pmtu(Middle, 1020, 1024), Err(Error::PmtuViolation));
        assert_eq!(check_pmtu(Last, 0, 1024), Err(Error::PmtuViolation));
        assert_eq!(check_pmtu(Last, 1024, 1024), Ok(()));
        assert_eq!(check_pmtu(Last, 1025, 1024), Err(Error::PmtuViolation));
        assert_eq!(check_pmtu(Only, 0, 256), Ok(()));
        assert_eq!(check_pmtu(Only, 257, 256), Err(Error::PmtuViolation));
        let mut buf = [0u8; 16];
        emit(
            &Headers::new(bth(Opcode::RC_SEND_ONLY)),
            &[1, 2, 3, 4],
            &mut buf,
        )
        .unwrap();
        let pkt = parse(&buf).unwrap();
        assert_eq!(pkt.check_pmtu(256), Ok(()));
        assert_eq!(pkt.check_pmtu(3), Err(Error::PmtuViolation));
    }
}
