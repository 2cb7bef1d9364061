//! Datagram Extended Transport Header (IBTA vol. 1 ch. 9), 8 bytes, in UD packets.
//!
//! ```text
//!  0..3    Q_Key
//!  4       reserved
//!  5..7    SrcQP (24 bits)
//! ```

use super::field;
use super::{Error, Result};

/// Length of the DETH in bytes.
pub const DETH_LEN: usize = 8;

/// Q_Key bit 31: a controlled Q_Key. In a work request it means "use the
/// QP's own Q_Key" (IBTA UD send rules); on the wire the responder simply
/// compares the full 32 bits.
pub const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// A zero-copy view of a DETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`DETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), DETH_LEN)?;
        Ok(Deth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Q_Key.
    pub fn q_key(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 0)
    }

    /// The reserved byte between Q_Key and SrcQP.
    pub fn resv8(&self) -> u8 {
        field::read_u8(self.buffer.as_ref(), 4)
    }

    /// Source QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        field::read_be24(self.buffer.as_ref(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the Q_Key.
    pub fn set_q_key(&mut self, q_key: u32) {
        field::write_be32(self.buffer.as_mut(), 0, q_key);
    }

    /// Sets the reserved byte.
    pub fn set_resv8(&mut self, value: u8) {
        field::write_u8(self.buffer.as_mut(), 4, value);
    }

    /// Sets SrcQP; only the low 24 bits of `qpn` are used.
    pub fn set_src_qp(&mut self, qpn: u32) {
        field::write_be24(self.buffer.as_mut(), 5, qpn);
    }
}

/// A parsed DETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// The Q_Key.
    pub q_key: u32,
    /// Source QP number, 24 bits.
    pub src_qp: u32,
}

impl DethRepr {
    /// Length on the wire.
    pub const LEN: usize = DETH_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(deth: &Deth<T>) -> Result<DethRepr> {
        Ok(DethRepr {
            q_key: deth.q_key(),
            src_qp: deth.src_qp(),
        })
    }

    /// Writes the DETH into the first [`DETH_LEN`] bytes of `buf`
    /// ([`Error::FieldRange`] if `src_qp` exceeds 24 bits).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.src_qp > super::bth::QPN_MASK {
            return Err(Error::FieldRange);
        }
        let mut deth = Deth::new_checked(buf)?;
        deth.set_q_key(self.q_key);
        deth.set_resv8(0);
        deth.set_src_qp(self.src_qp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 8] = [0x80, 0x01, 0x02, 0x03, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn deth_fields_at_ibta_positions() {
        let deth = Deth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(deth.q_key(), 0x8001_0203);
        assert_eq!(deth.q_key() & QKEY_CONTROLLED, QKEY_CONTROLLED);
        assert_eq!(deth.resv8(), 0);
        assert_eq!(deth.src_qp(), 1);
    }

    #[test]
    fn deth_round_trip() {
        let repr = DethRepr {
            q_key: 0x1122_3344,
            src_qp: 0xAB_CDEF,
        };
        let mut buf = [0xFFu8; 8];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, [0x11, 0x22, 0x33, 0x44, 0x00, 0xAB, 0xCD, 0xEF]);
        assert_eq!(
            DethRepr::parse(&Deth::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
        let mut deth = Deth::new_checked(&mut buf[..]).unwrap();
        deth.set_resv8(0x5A);
        assert_eq!(deth.resv8(), 0x5A);
        assert_eq!(DethRepr::parse(&deth), Ok(repr));
    }

    #[test]
    fn deth_rejects_short_buffers_and_wide_qpn() {
        assert_eq!(Deth::new_checked(&BYTES[..7]).err(), Some(Error::Truncated));
        let repr = DethRepr {
            q_key: 0,
            src_qp: 0x100_0000,
        };
        assert_eq!(repr.emit(&mut [0u8; 8]), Err(Error::FieldRange));
        let ok = DethRepr {
            q_key: 0,
            src_qp: 1,
        };
        assert_eq!(ok.emit(&mut [0u8; 7]), Err(Error::Truncated));
    }
}
