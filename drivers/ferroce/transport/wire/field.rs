//! Bounds-checked big-endian field access shared by the header views.
//!
//! The views check their buffer length once in `new_checked`, so these reads
//! never miss in practice; should the invariant ever break, a read yields 0
//! and a write is dropped instead of panicking in the kernel.

pub(super) fn read_u8(buf: &[u8], off: usize) -> u8 {
    buf.get(off).copied().unwrap_or(0)
}

pub(super) fn read<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    match buf.get(off..).and_then(|s| s.first_chunk::<N>()) {
        Some(bytes) => *bytes,
        None => [0; N],
    }
}

pub(super) fn read_be16(buf: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(read(buf, off))
}

/// The 24-bit big-endian field at `off..off + 3`.
pub(super) fn read_be24(buf: &[u8], off: usize) -> u32 {
    let [a, b, c] = read::<3>(buf, off);
    u32::from_be_bytes([0, a, b, c])
}

pub(super) fn read_be32(buf: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(read(buf, off))
}

pub(super) fn read_be64(buf: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(read(buf, off))
}

pub(super) fn write_u8(buf: &mut [u8], off: usize, value: u8) {
    if let Some(byte) = buf.get_mut(off) {
        *byte = value;
    }
}

pub(super) fn write<const N: usize>(buf: &mut [u8], off: usize, bytes: [u8; N]) {
    if let Some(dst) = buf.get_mut(off..).and_then(|s| s.first_chunk_mut::<N>()) {
        *dst = bytes;
    }
}

pub(super) fn write_be16(buf: &mut [u8], off: usize, value: u16) {
    write(buf, off, value.to_be_bytes());
}

/// Writes the low 24 bits of `value` big-endian at `off..off + 3`.
pub(super) fn write_be24(buf: &mut [u8], off: usize, value: u32) {
    let [_, a, b, c] = value.to_be_bytes();
    write(buf, off, [a, b, c]);
}

pub(super) fn write_be32(buf: &mut [u8], off: usize, value: u32) {
    write(buf, off, value.to_be_bytes());
}

pub(super) fn write_be64(buf: &mut [u8], off: usize, value: u64) {
    write(buf, off, value.to_be_bytes());
}

/// `Ok(())` when `buf` holds at least `len` bytes.
pub(super) fn check_len(buf: &[u8], len: usize) -> super::Result<()> {
    if buf.len() < len {
        Err(super::Error::Truncated)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_big_endian() {
        let mut buf = [0u8; 17];
        write_be16(&mut buf, 0, 0x0102);
        write_be24(&mut buf, 2, 0xAA03_0405);
        write_be32(&mut buf, 5, 0x0607_0809);
        write_be64(&mut buf, 9, 0x0A0B_0C0D_0E0F_1011);
        let expected: [u8; 17] = core::array::from_fn(|i| i as u8 + 1);
        assert_eq!(buf, expected);
        assert_eq!(read_be16(&buf, 0), 0x0102);
        assert_eq!(read_be24(&buf, 2), 0x03_0405);
        assert_eq!(read_be32(&buf, 5), 0x0607_0809);
        assert_eq!(read_be64(&buf, 9), 0x0A0B_0C0D_0E0F_1011);
        assert_eq!(read_u8(&buf, 16), 0x11);
    }

    #[test]
    fn out_of_range_access_is_inert() {
        let mut buf = [0xFFu8; 3];
        assert_eq!(read_be32(&buf, 0), 0);
        assert_eq!(read_u8(&buf, 3), 0);
        write_be32(&mut buf, 1, 0);
        write_u8(&mut buf, 9, 0);
        assert_eq!(buf, [0xFF; 3]);
        assert_eq!(check_len(&buf, 4), Err(super::super::Error::Truncated));
        assert_eq!(check_len(&buf, 3), Ok(()));
    }
}
