//! Wire formats of the IBTA transport headers carried by RoCEv2.
//!
//! Every header is a zero-copy typed view over a byte buffer (`Bth<T>`,
//! `Deth<T>`, ...) built with `new_checked`, with field getters (and setters
//! when the buffer is mutable), plus a parsed value type (`BthRepr`, ...)
//! that can `parse` a view and `emit` itself into a caller's buffer. This is
//! the smoltcp `wire` pattern; nothing here allocates or panics.
//!
//! [`packet::parse`] validates a whole transport packet (BTH up to, not
//! including, the ICRC) against the opcode table of [`opcode`] and returns
//! every header plus the payload with its pad removed; [`packet::emit`] is the
//! reverse. [`icrc`] computes and checks the RoCEv2 invariant CRC over a
//! complete IP packet. [`psn`] and [`pkey`] hold the IBTA arithmetic on
//! packet sequence numbers and partition keys.
//!
//! All multi-byte fields are big-endian (network order) except the ICRC,
//! which is transmitted least significant byte first (see [`icrc`]).

// The rules of `super` (the engine root) are enforced here by lint, so a
// stray index or overflow fails `cargo clippy` instead of a code review.
pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
mod field;
pub mod icrc;
pub mod feth;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod opcode;
pub mod packet;
pub mod pkey;
pub mod psn;
pub mod reth;

pub use aeth::{Aeth, AethRepr, AethSyndrome, NakCode};
pub use atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEth, AtomicEthRepr};
pub use bth::{pad_count, Bth, BthRepr};
pub use deth::{Deth, DethRepr};
pub use feth::{Feth, FethRepr};
pub use ieth::{Ieth, IethRepr};
pub use immdt::{ImmDt, ImmDtRepr};
pub use ip::{IpHeader, IpUdpRepr, UdpHeader};
pub use opcode::{ExtHeader, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{Headers, TransportPacket};
pub use pkey::PKey;
pub use psn::Psn;
pub use reth::{Reth, RethRepr};

/// Why a buffer was rejected by the wire layer.
///
/// Every variant is a reason to silently drop a received packet (IBTA
/// header validation); the caller decides which counter to bump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header (or headers) it must hold.
    Truncated,
    /// The opcode is reserved (undefined) in the IBTA opcode table.
    ReservedOpcode(u8),
    /// The opcode is defined by the IBTA but not implemented here (RD,
    /// RESYNC, FLUSH, ATOMIC WRITE, manufacturer specific).
    UnsupportedOpcode(u8),
    /// BTH:TVer is not 0, the only transport header version defined.
    BadTver(u8),
    /// BTH:PadCnt exceeds the bytes that follow the headers, or the packet
    /// (headers, payload and pad) is not a whole number of 4-byte words.
    BadPad,
    /// The payload length is not allowed for this opcode and position
    /// (payload on an opcode without one, empty FIRST/MIDDLE/LAST, pad on a
    /// FIRST/MIDDLE, wrong CNP length).
    BadLength,
    /// The payload exceeds the path MTU or violates the PMTU rule for the
    /// packet's position (see [`packet::check_pmtu`]).
    PmtuViolation,
    /// The headers given to an emit function do not match the opcode's
    /// layout (a header missing or one too many).
    HeaderMismatch,
    /// A field value cannot be represented (PSN or QPN above 24 bits, pad
    /// count above 3, RNR timer above 31, ...).
    FieldRange,
    /// The IP or UDP framing around a RoCEv2 packet is malformed.
    BadIp,
    /// The ICRC carried by the packet does not match the computed one.
    BadIcrc,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("buffer too short"),
            Error::ReservedOpcode(op) => write!(f, "reserved opcode {op:#04x}"),
            Error::UnsupportedOpcode(op) => write!(f, "unsupported opcode {op:#04x}"),
            Error::BadTver(v) => write!(f, "bad transport header version {v}"),
            Error::BadPad => f.write_str("bad pad count"),
            Error::BadLength => f.write_str("payload length not allowed for opcode"),
            Error::PmtuViolation => f.write_str("payload violates path MTU"),
            Error::HeaderMismatch => f.write_str("headers do not match opcode"),
            Error::FieldRange => f.write_str("field value out of range"),
            Error::BadIp => f.write_str("malformed IP/UDP framing"),
            Error::BadIcrc => f.write_str("ICRC mismatch"),
        }
    }
}

/// Result of a wire-layer operation.
pub type Result<T> = core::result::Result<T, Error>;
