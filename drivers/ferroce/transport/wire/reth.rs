//! RDMA Extended Transport Header (IBTA vol. 1 ch. 9), 16 bytes: the remote
//! buffer of an RDMA WRITE (FIRST/ONLY) or RDMA READ request.
//!
//! ```text
//!  0..7    Virtual Address
//!  8..11   R_Key
//!  12..15  DMA Length
//! ```

use super::field;
use super::Result;

/// Length of the RETH in bytes.
pub const RETH_LEN: usize = 16;

/// A zero-copy view of a RETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`RETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Reth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), RETH_LEN)?;
        Ok(Reth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The virtual address.
    pub fn va(&self) -> u64 {
        field::read_be64(self.buffer.as_ref(), 0)
    }

    /// The R_Key.
    pub fn r_key(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 8)
    }

    /// Length in bytes of the whole RDMA operation (not of this packet).
    pub fn dma_len(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, va: u64) {
        field::write_be64(self.buffer.as_mut(), 0, va);
    }

    /// Sets the R_Key.
    pub fn set_r_key(&mut self, r_key: u32) {
        field::write_be32(self.buffer.as_mut(), 8, r_key);
    }

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, len: u32) {
        field::write_be32(self.buffer.as_mut(), 12, len);
    }
}

/// A parsed RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// The virtual address.
    pub va: u64,
    /// The R_Key.
    pub r_key: u32,
    /// The DMA length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Length on the wire.
    pub const LEN: usize = RETH_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(reth: &Reth<T>) -> Result<RethRepr> {
        Ok(RethRepr {
            va: reth.va(),
            r_key: reth.r_key(),
            dma_len: reth.dma_len(),
        })
    }

    /// Writes the RETH into the first [`RETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut reth = Reth::new_checked(buf)?;
        reth.set_va(self.va);
        reth.set_r_key(self.r_key);
        reth.set_dma_len(self.dma_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x7F, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, // VA
        0x12, 0x34, 0x56, 0x78, // R_Key
        0x00, 0x01, 0x00, 0x00, // DMA length 65536
    ];

    #[test]
    fn reth_fields_at_ibta_positions() {
        let reth = Reth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(reth.va(), 0x0000_7FAA_BBCC_DDEE);
        assert_eq!(reth.r_key(), 0x1234_5678);
        assert_eq!(reth.dma_len(), 65536);
    }

    #[test]
    fn reth_round_trip() {
        let repr = RethRepr::parse(&Reth::new_checked(&BYTES[..]).unwrap()).unwrap();
        let mut buf = [0u8; 16];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn reth_rejects_short_buffers() {
        assert_eq!(
            Reth::new_checked(&BYTES[..15]).err(),
            Some(Error::Truncated)
        );
        let repr = RethRepr {
            va: 0,
            r_key: 0,
            dma_len: 0,
        };
        assert_eq!(repr.emit(&mut [0u8; 15]), Err(Error::Truncated));
    }
}
