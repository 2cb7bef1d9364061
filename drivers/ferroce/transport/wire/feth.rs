//! FLUSH Extended Transport Header (IBTA vol. 1, 1.5 memory placement
//! extensions), 4 bytes, carried by RC FLUSH before its RETH: the placement
//! type (bits 3..0: global visibility, persistence) and the selectivity
//! level (bits 5..4: a memory range, or the whole region); the other bits
//! are reserved.

use super::field;
use super::Result;

/// Length of the FETH in bytes.
pub const FETH_LEN: usize = 4;

/// Placement type bit: make the data globally visible.
pub const PLT_GLOBAL: u8 = 1 << 0;
/// Placement type bit: make the data persistent.
pub const PLT_PERSISTENT: u8 = 1 << 1;
/// Selectivity level: the range the RETH names.
pub const SEL_RANGE: u8 = 0;
/// Selectivity level: the whole region the RETH's R_Key names.
pub const SEL_MR: u8 = 1;

/// A zero-copy view of a FETH at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`FETH_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Feth<T> {
    /// Wraps `buffer`; [`Error::Truncated`](super::Error::Truncated) if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), FETH_LEN)?;
        Ok(Feth { buffer })
    }

    fn bits(&self) -> u32 {
        field::read_be32(self.buffer.as_ref(), 0)
    }

    /// The placement type (4 bits).
    pub fn placement(&self) -> u8 {
        (self.bits() & 0xf) as u8
    }

    /// The selectivity level (2 bits).
    pub fn selectivity(&self) -> u8 {
        ((self.bits() >> 4) & 0x3) as u8
    }

    /// The reserved bits (31..6), which a sender leaves zero.
    pub fn reserved(&self) -> u32 {
        self.bits() >> 6
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets the placement type and selectivity level, reserved bits zero.
    pub fn set(&mut self, placement: u8, selectivity: u8) {
        let bits = (u32::from(selectivity & 0x3) << 4) | u32::from(placement & 0xf);
        field::write_be32(self.buffer.as_mut(), 0, bits);
    }
}

/// A parsed FETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// Placement type bits ([`PLT_GLOBAL`], [`PLT_PERSISTENT`]).
    pub placement: u8,
    /// Selectivity level ([`SEL_RANGE`], [`SEL_MR`]).
    pub selectivity: u8,
}

impl FethRepr {
    /// Length on the wire.
    pub const LEN: usize = FETH_LEN;

    /// Decodes the header (reserved bits ignored, as the IBTA asks of a
    /// receiver); the responder judges the values.
    pub fn parse<T: AsRef<[u8]>>(feth: &Feth<T>) -> Result<FethRepr> {
        Ok(FethRepr { placement: feth.placement(), selectivity: feth.selectivity() })
    }

    /// Writes the FETH into the first [`FETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Feth::new_checked(buf)?.set(self.placement, self.selectivity);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    #[test]
    fn feth_fields_at_ibta_positions() {
        // Selectivity MR (01 in bits 5..4), placement global (bit 0).
        let bytes = [0x00, 0x00, 0x00, 0x11];
        let f = Feth::new_checked(&bytes[..]).unwrap();
        assert_eq!((f.placement(), f.selectivity(), f.reserved()), (PLT_GLOBAL, SEL_MR, 0));
        let mut buf = [0xffu8; 4];
        FethRepr::parse(&f).unwrap().emit(&mut buf).unwrap();
        assert_eq!(buf, bytes, "reserved bits written as zero");
        let f = Feth::new_checked(&[0xff, 0xff, 0xff, 0xc2][..]).unwrap();
        assert_eq!((f.placement(), f.selectivity()), (PLT_PERSISTENT, 0), "reserved bits ignored");
        assert_ne!(f.reserved(), 0);
    }

    #[test]
    fn feth_rejects_short_buffers() {
        assert_eq!(Feth::new_checked(&[0u8; 3][..]).unwrap_err(), Error::Truncated);
    }
}
