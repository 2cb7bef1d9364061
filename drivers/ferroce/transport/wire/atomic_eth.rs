//! Atomic Extended Transport Header (IBTA vol. 1 ch. 9), 28 bytes: the operands
//! of a CmpSwap or FetchAdd request.
//!
//! ```text
//!  0..7    Virtual Address (8-byte aligned)
//!  8..11   R_Key
//!  12..19  Swap (CmpSwap) or Add (FetchAdd) data
//!  20..27  Compare data (CmpSwap; ignored by FetchAdd)
//! ```

use super::field;
use super::Result;

/// Length of the AtomicETH in bytes.
pub const ATOMIC_ETH_LEN: usize = 28;

/// A zero-copy view of an AtomicETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`ATOMIC_ETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicEth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), ATOMIC_ETH_LEN)?;
        Ok(AtomicEth { buffer })
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

    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        field::read_be64(self.buffer.as_ref(), 12)
    }

    /// Compare data (CmpSwap).
    pub fn compare(&self) -> u64 {
        field::read_be64(self.buffer.as_ref(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, va: u64) {
        field::write_be64(self.buffer.as_mut(), 0, va);
    }

    /// Sets the R_Key.
    pub fn set_r_key(&mut self, r_key: u32) {
        field::write_be32(self.buffer.as_mut(), 8, r_key);
    }

    /// Sets the swap (CmpSwap) or add (FetchAdd) data.
    pub fn set_swap_add(&mut self, value: u64) {
        field::write_be64(self.buffer.as_mut(), 12, value);
    }

    /// Sets the compare data (CmpSwap).
    pub fn set_compare(&mut self, value: u64) {
        field::write_be64(self.buffer.as_mut(), 20, value);
    }
}

/// A parsed AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// The virtual address.
    pub va: u64,
    /// The R_Key.
    pub r_key: u32,
    /// The swap (CmpSwap) or add (FetchAdd) data.
    pub swap_add: u64,
    /// The compare data (CmpSwap).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Length on the wire.
    pub const LEN: usize = ATOMIC_ETH_LEN;

    /// Decodes the header; cannot fail once the view exists.
    pub fn parse<T: AsRef<[u8]>>(eth: &AtomicEth<T>) -> Result<AtomicEthRepr> {
        Ok(AtomicEthRepr {
            va: eth.va(),
            r_key: eth.r_key(),
            swap_add: eth.swap_add(),
            compare: eth.compare(),
        })
    }

    /// Writes the AtomicETH into the first [`ATOMIC_ETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut eth = AtomicEth::new_checked(buf)?;
        eth.set_va(self.va);
        eth.set_r_key(self.r_key);
        eth.set_swap_add(self.swap_add);
        eth.set_compare(self.compare);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    const BYTES: [u8; 28] = [
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x10, 0x08, // VA
        0xCA, 0xFE, 0xF0, 0x0D, // R_Key
        0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22, // swap/add
        0x33, 0x33, 0x33, 0x33, 0x44, 0x44, 0x44, 0x44, // compare
    ];

    #[test]
    fn atomic_eth_fields_at_ibta_positions() {
        let eth = AtomicEth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(eth.va(), 0x0000_0001_0000_1008);
        assert_eq!(eth.r_key(), 0xCAFE_F00D);
        assert_eq!(eth.swap_add(), 0x1111_1111_2222_2222);
        assert_eq!(eth.compare(), 0x3333_3333_4444_4444);
    }

    #[test]
    fn atomic_eth_round_trip() {
        let repr = AtomicEthRepr::parse(&AtomicEth::new_checked(&BYTES[..]).unwrap()).unwrap();
        let mut buf = [0u8; 28];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn atomic_eth_rejects_short_buffers() {
        assert_eq!(
            AtomicEth::new_checked(&BYTES[..27]).err(),
            Some(Error::Truncated)
        );
        let repr = AtomicEthRepr {
            va: 0,
            r_key: 0,
            swap_add: 0,
            compare: 0,
        };
        assert_eq!(repr.emit(&mut [0u8; 27]), Err(Error::Truncated));
    }
}
