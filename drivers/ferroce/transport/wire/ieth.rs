//! Invalidate Extended Transport Header (IBTA vol. 1 ch. 9), 4 bytes, carried by
//! SEND LAST/ONLY WITH INVALIDATE: the R_Key the responder invalidates.

use super::field;
use super::Result;

/// Length of the IETH in bytes.
pub const IETH_LEN: usize = 4;

/// A zero-copy view of an IETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`IETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ieth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), IETH_LEN)?;
        Ok(Ieth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The R_Key.
    pub fn r_key(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key.
    pub fn set_r_key(&mut self, r_key: u32) {
        field::write_be32(self.buffer.as_mut(), 0, r_key);
    }
}

/// A parsed IETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub r_key: u32,
}

impl IethRepr {
    /// Length on the wire.
    pub const LEN: usize = IETH_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(ieth: &Ieth<T>) -> Result<IethRepr> {
        Ok(IethRepr {
            r_key: ieth.r_key(),
        })
    }

    /// Writes the IETH into the first [`IETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Ieth::new_checked(buf)?.set_r_key(self.r_key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    #[test]
    fn ieth_round_trip_and_positions() {
        let bytes = [0x00, 0x12, 0x34, 0x56];
        let ieth = Ieth::new_checked(&bytes[..]).unwrap();
        assert_eq!(ieth.r_key(), 0x0012_3456);
        let mut buf = [0u8; 4];
        IethRepr::parse(&ieth).unwrap().emit(&mut buf).unwrap();
        assert_eq!(buf, bytes);
    }

    #[test]
    fn ieth_rejects_short_buffers() {
        assert_eq!(
            Ieth::new_checked(&[0u8; 3][..]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            IethRepr { r_key: 1 }.emit(&mut [0u8; 3]),
            Err(Error::Truncated)
        );
    }
}
