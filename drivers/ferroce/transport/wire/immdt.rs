//! Immediate Data extended header (IBTA vol. 1 ch. 9), 4 bytes, carried by the
//! SEND / RDMA WRITE ... WITH IMMEDIATE opcodes.
//!
//! The value is opaque to the transport: it is delivered to the receiver's
//! completion in network byte order (`ibv_wc.imm_data` is `__be32`), so the
//! accessors expose it as big-endian `u32` and the verbs layer converts.

use super::field;
use super::Result;

/// Length of the ImmDt header in bytes.
pub const IMMDT_LEN: usize = 4;

/// A zero-copy view of an ImmDt header at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`IMMDT_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImmDt<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), IMMDT_LEN)?;
        Ok(ImmDt { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The immediate value, read big-endian.
    pub fn imm(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate data.
    pub fn set_imm(&mut self, imm: u32) {
        field::write_be32(self.buffer.as_mut(), 0, imm);
    }
}

/// A parsed ImmDt header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImmDtRepr {
    /// The immediate value, read big-endian.
    pub imm: u32,
}

impl ImmDtRepr {
    /// Length on the wire.
    pub const LEN: usize = IMMDT_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(immdt: &ImmDt<T>) -> Result<ImmDtRepr> {
        Ok(ImmDtRepr { imm: immdt.imm() })
    }

    /// Writes the ImmDt header into the first [`IMMDT_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        ImmDt::new_checked(buf)?.set_imm(self.imm);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    #[test]
    fn immdt_round_trip_and_positions() {
        let bytes = [0xDE, 0xAD, 0xBE, 0xEF];
        let immdt = ImmDt::new_checked(&bytes[..]).unwrap();
        assert_eq!(immdt.imm(), 0xDEAD_BEEF);
        let mut buf = [0u8; 4];
        ImmDtRepr::parse(&immdt).unwrap().emit(&mut buf).unwrap();
        assert_eq!(buf, bytes);
    }

    #[test]
    fn immdt_rejects_short_buffers() {
        assert_eq!(
            ImmDt::new_checked(&[0u8; 3][..]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            ImmDtRepr { imm: 1 }.emit(&mut [0u8; 3]),
            Err(Error::Truncated)
        );
    }
}
