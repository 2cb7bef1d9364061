//! Atomic Acknowledge Extended Transport Header (IBTA vol. 1 ch. 9), 8 bytes: the
//! original remote data returned by an ATOMIC ACKNOWLEDGE (after the AETH).

use super::field;
use super::Result;

/// Length of the AtomicAckETH in bytes.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// A zero-copy view of an AtomicAckETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`ATOMIC_ACK_ETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicAckEth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), ATOMIC_ACK_ETH_LEN)?;
        Ok(AtomicAckEth { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The value of the remote location before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        field::read_be64(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig_data(&mut self, value: u64) {
        field::write_be64(self.buffer.as_mut(), 0, value);
    }
}

/// A parsed AtomicAckETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The original remote data.
    pub orig_data: u64,
}

impl AtomicAckEthRepr {
    /// Length on the wire.
    pub const LEN: usize = ATOMIC_ACK_ETH_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(eth: &AtomicAckEth<T>) -> Result<AtomicAckEthRepr> {
        Ok(AtomicAckEthRepr {
            orig_data: eth.orig_data(),
        })
    }

    /// Writes the AtomicAckETH into the first [`ATOMIC_ACK_ETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        AtomicAckEth::new_checked(buf)?.set_orig_data(self.orig_data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    #[test]
    fn atomic_ack_eth_round_trip_and_positions() {
        let bytes = [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF];
        let eth = AtomicAckEth::new_checked(&bytes[..]).unwrap();
        assert_eq!(eth.orig_data(), 0x0123_4567_89AB_CDEF);
        let repr = AtomicAckEthRepr::parse(&eth).unwrap();
        let mut buf = [0u8; 8];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, bytes);
    }

    #[test]
    fn atomic_ack_eth_rejects_short_buffers() {
        assert_eq!(
            AtomicAckEth::new_checked(&[0u8; 7][..]).err(),
            Some(Error::Truncated)
        );
        let repr = AtomicAckEthRepr { orig_data: 0 };
        assert_eq!(repr.emit(&mut [0u8; 7]), Err(Error::Truncated));
    }
}
