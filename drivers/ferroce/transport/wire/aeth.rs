//! ACK Extended Transport Header (IBTA vol. 1 ch. 9), 4 bytes: carried
//! by ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and RDMA READ RESPONSE FIRST/LAST/ONLY.
//!
//! ```text
//!  byte 0: Syndrome    bit 7      reserved (0)
//!                      bits 6:5   00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//!                      bits 4:0   ACK: credit count; RNR NAK: timer code;
//!                                 NAK: NAK code
//!  bytes 1..3: MSN (24 bits)
//! ```

use super::field;
use super::{Error, Result};

/// Length of the AETH in bytes.
pub const AETH_LEN: usize = 4;

/// Largest MSN (24 bits).
pub const MSN_MASK: u32 = 0x00FF_FFFF;

/// ACK credit count meaning "no end-to-end credit limit" (IBTA end-to-end flow control:
/// the responder does not generate credits, e.g. it uses an SRQ).
pub const CREDITS_UNLIMITED: u8 = 0x1F;

const TYPE_SHIFT: u8 = 5;
const VALUE_MASK: u8 = 0x1F;
const TYPE_ACK: u8 = 0b00;
const TYPE_RNR_NAK: u8 = 0b01;
const TYPE_NAK: u8 = 0b11;

/// NAK codes (syndrome bits 4:0 when bits 6:5 are 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder saw a PSN ahead of its ePSN.
    PsnSequenceError,
    /// Invalid request (unsupported opcode, bad length, ...).
    InvalidRequest,
    /// Remote access error (R_Key, bounds, permissions).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
    /// Invalid RD request (RD only).
    InvalidRdRequest,
}

impl NakCode {
    /// The 5-bit code on the wire.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }

    /// The NAK code for `code`, or `None` for the reserved codes 5..=31.
    pub const fn from_code(code: u8) -> Option<NakCode> {
        match code {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// Positive acknowledgement.
    Ack {
        /// The 5-bit credit count code (see [`credits`];
        /// [`CREDITS_UNLIMITED`] means no limit).
        credits: u8,
    },
    /// Receiver not ready.
    RnrNak {
        /// The 5-bit minimum RNR NAK timer code (see [`rnr_timer_us`]).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome the IBTA reserves: type 10, bit 7 set, or a NAK code
    /// above 4. Kept raw; the completer treats it as a protocol error.
    Reserved(u8),
}

impl AethSyndrome {
    /// Decodes a syndrome byte.
    pub const fn from_byte(byte: u8) -> AethSyndrome {
        if byte & 0x80 != 0 {
            return AethSyndrome::Reserved(byte);
        }
        let value = byte & VALUE_MASK;
        match byte >> TYPE_SHIFT {
            TYPE_ACK => AethSyndrome::Ack { credits: value },
            TYPE_RNR_NAK => AethSyndrome::RnrNak { timer: value },
            TYPE_NAK => match NakCode::from_code(value) {
                Some(code) => AethSyndrome::Nak(code),
                None => AethSyndrome::Reserved(byte),
            },
            _ => AethSyndrome::Reserved(byte),
        }
    }

    /// Encodes the syndrome byte ([`Error::FieldRange`] if a credit or
    /// timer code exceeds 5 bits).
    pub const fn to_byte(self) -> Result<u8> {
        match self {
            AethSyndrome::Ack { credits } if credits <= VALUE_MASK => {
                Ok((TYPE_ACK << TYPE_SHIFT) | credits)
            }
            AethSyndrome::RnrNak { timer } if timer <= VALUE_MASK => {
                Ok((TYPE_RNR_NAK << TYPE_SHIFT) | timer)
            }
            AethSyndrome::Nak(code) => Ok((TYPE_NAK << TYPE_SHIFT) | code.code()),
            AethSyndrome::Reserved(byte) => Ok(byte),
            _ => Err(Error::FieldRange),
        }
    }

    /// A positive acknowledgement.
    pub const fn is_ack(self) -> bool {
        matches!(self, AethSyndrome::Ack { .. })
    }

    /// NAK or RNR NAK.
    pub const fn is_nak(self) -> bool {
        matches!(self, AethSyndrome::Nak(_) | AethSyndrome::RnrNak { .. })
    }
}

/// RNR NAK timer codes in microseconds (the IBTA RNR NAK timer encoding): code 0
/// is the longest, 655.36 ms; codes 1..=31 grow roughly geometrically from
/// 0.01 ms to 491.52 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// End-to-end credit counts (the IBTA AETH credit count encoding) for codes 0..=30.
const CREDITS: [u16; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1_024, 1_536,
    2_048, 3_072, 4_096, 6_144, 8_192, 12_288, 16_384, 24_576, 32_768,
];

/// The minimum RNR delay in microseconds for a 5-bit timer code, or `None`
/// for codes above 31.
pub fn rnr_timer_us(code: u8) -> Option<u32> {
    RNR_TIMER_US.get(usize::from(code)).copied()
}

/// The smallest timer code whose delay is at least `us` microseconds
/// (saturating at the longest, code 0).
pub fn rnr_timer_code_at_least(us: u32) -> u8 {
    // Codes 1..=31 are increasing, and code 0 is above all of them.
    let mut code = 1u8;
    while code <= VALUE_MASK {
        if rnr_timer_us(code).is_some_and(|t| t >= us) {
            return code;
        }
        code = code.saturating_add(1);
    }
    0
}

/// The number of receive WQEs a credit code advertises, or `None` for
/// [`CREDITS_UNLIMITED`] (and codes above 31).
pub fn credits(code: u8) -> Option<u16> {
    CREDITS.get(usize::from(code)).copied()
}

/// The largest credit code advertising at most `available` WQEs.
pub fn credit_code_at_most(available: u32) -> u8 {
    let mut best = 0u8;
    for (code, count) in (0u8..).zip(CREDITS) {
        if u32::from(count) <= available {
            best = code;
        }
    }
    best
}

/// A zero-copy view of an AETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`AETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), AETH_LEN)?;
        Ok(Aeth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw syndrome byte.
    pub fn syndrome_byte(&self) -> u8 {
        field::read_u8(self.buffer.as_ref(), 0)
    }

    /// The syndrome.
    pub fn syndrome(&self) -> AethSyndrome {
        AethSyndrome::from_byte(self.syndrome_byte())
    }

    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        field::read_be24(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome_byte(&mut self, byte: u8) {
        field::write_u8(self.buffer.as_mut(), 0, byte);
    }

    /// Sets the MSN; only the low 24 bits of `msn` are used.
    pub fn set_msn(&mut self, msn: u32) {
        field::write_be24(self.buffer.as_mut(), 1, msn);
    }
}

/// A parsed AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// The syndrome.
    pub syndrome: AethSyndrome,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Length on the wire.
    pub const LEN: usize = AETH_LEN;

    /// Decodes an AETH. Reserved syndromes are returned as
    /// [`AethSyndrome::Reserved`], not as an error.
    pub fn parse<T: AsRef<[u8]>>(aeth: &Aeth<T>) -> Result<AethRepr> {
        Ok(AethRepr {
            syndrome: aeth.syndrome(),
            msn: aeth.msn(),
        })
    }

    /// Writes the AETH into the first [`AETH_LEN`] bytes of `buf`
    /// ([`Error::FieldRange`] for an MSN above 24 bits or a 5-bit code out
    /// of range).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.msn > MSN_MASK {
            return Err(Error::FieldRange);
        }
        let byte = self.syndrome.to_byte()?;
        let mut aeth = Aeth::new_checked(buf)?;
        aeth.set_syndrome_byte(byte);
        aeth.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeth_syndrome_encodings() {
        // (byte, decoded) from the IBTA syndrome layout, built by hand.
        let cases = [
            (0x00, AethSyndrome::Ack { credits: 0 }),
            (
                0x1F,
                AethSyndrome::Ack {
                    credits: CREDITS_UNLIMITED,
                },
            ),
            (0x0A, AethSyndrome::Ack { credits: 10 }),
            (0x20, AethSyndrome::RnrNak { timer: 0 }),
            (0x32, AethSyndrome::RnrNak { timer: 0x12 }),
            (0x3F, AethSyndrome::RnrNak { timer: 31 }),
            (0x60, AethSyndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, AethSyndrome::Nak(NakCode::InvalidRequest)),
            (0x62, AethSyndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, AethSyndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, AethSyndrome::Nak(NakCode::InvalidRdRequest)),
        ];
        for (byte, syndrome) in cases {
            assert_eq!(AethSyndrome::from_byte(byte), syndrome, "{byte:#x}");
            assert_eq!(syndrome.to_byte(), Ok(byte));
        }
        assert!(AethSyndrome::Ack { credits: 0 }.is_ack());
        assert!(AethSyndrome::RnrNak { timer: 1 }.is_nak());
        assert!(AethSyndrome::Nak(NakCode::InvalidRequest).is_nak());
        assert!(!AethSyndrome::Reserved(0x40).is_nak());
    }

    #[test]
    fn aeth_reserved_syndromes() {
        for byte in (0x40..=0x5F).chain(0x65..=0x7F).chain(0x80..=0xFF) {
            assert_eq!(AethSyndrome::from_byte(byte), AethSyndrome::Reserved(byte));
        }
        assert_eq!(
            AethSyndrome::Ack { credits: 32 }.to_byte(),
            Err(Error::FieldRange)
        );
        assert_eq!(
            AethSyndrome::RnrNak { timer: 32 }.to_byte(),
            Err(Error::FieldRange)
        );
    }

    #[test]
    fn aeth_every_byte_round_trips() {
        for byte in 0..=u8::MAX {
            assert_eq!(AethSyndrome::from_byte(byte).to_byte(), Ok(byte));
        }
    }

    #[test]
    fn aeth_round_trip_and_positions() {
        let bytes = [0x61, 0xAB, 0xCD, 0xEF];
        let aeth = Aeth::new_checked(&bytes[..]).unwrap();
        assert_eq!(aeth.syndrome_byte(), 0x61);
        assert_eq!(aeth.msn(), 0xAB_CDEF);
        let repr = AethRepr::parse(&aeth).unwrap();
        assert_eq!(
            repr,
            AethRepr {
                syndrome: AethSyndrome::Nak(NakCode::InvalidRequest),
                msn: 0xAB_CDEF
            }
        );
        let mut buf = [0u8; 4];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, bytes);
    }

    #[test]
    fn aeth_rejects_short_buffers_and_wide_msn() {
        assert_eq!(
            Aeth::new_checked(&[0u8; 3][..]).err(),
            Some(Error::Truncated)
        );
        let repr = AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0 },
            msn: 0,
        };
        assert_eq!(repr.emit(&mut [0u8; 3]), Err(Error::Truncated));
        let wide = AethRepr {
            msn: 0x100_0000,
            ..repr
        };
        assert_eq!(wide.emit(&mut [0u8; 4]), Err(Error::FieldRange));
    }

    #[test]
    fn aeth_rnr_timer_table() {
        assert_eq!(rnr_timer_us(0), Some(655_360));
        assert_eq!(rnr_timer_us(1), Some(10));
        assert_eq!(rnr_timer_us(14), Some(1_280));
        assert_eq!(rnr_timer_us(31), Some(491_520));
        assert_eq!(rnr_timer_us(32), None);
        for code in 2..=31u8 {
            assert!(rnr_timer_us(code) > rnr_timer_us(code - 1));
        }
        assert_eq!(rnr_timer_code_at_least(0), 1);
        assert_eq!(rnr_timer_code_at_least(10), 1);
        assert_eq!(rnr_timer_code_at_least(11), 2);
        assert_eq!(rnr_timer_code_at_least(1_000), 14);
        assert_eq!(rnr_timer_code_at_least(491_520), 31);
        assert_eq!(rnr_timer_code_at_least(491_521), 0);
    }

    #[test]
    fn aeth_credit_table() {
        assert_eq!(credits(0), Some(0));
        assert_eq!(credits(5), Some(6));
        assert_eq!(credits(30), Some(32_768));
        assert_eq!(credits(CREDITS_UNLIMITED), None);
        assert_eq!(credit_code_at_most(0), 0);
        assert_eq!(credit_code_at_most(5), 4);
        assert_eq!(credit_code_at_most(6), 5);
        assert_eq!(credit_code_at_most(u32::MAX), 30);
    }
}
