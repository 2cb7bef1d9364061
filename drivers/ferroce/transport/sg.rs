//! Gather and scatter over a work request's scatter/gather list.

use super::memory::{Key, MemError, Memory};
use super::verbs::Sge;

/// Why a gather or scatter failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgError {
    /// The list is shorter than `offset + len` (local length error).
    Length,
    /// A key, PD, access or bounds check failed (local protection error).
    Mem(MemError),
}

/// Walks `sges` from byte `offset`, calling `f(sge, address, range)` for each
/// piece of `len` bytes; `range` indexes the caller's flat buffer.
fn walk(
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, core::ops::Range<usize>) -> Result<(), SgError>,
) -> Result<(), SgError> {
    let mut done: usize = 0;
    for sge in sges {
        if done >= len {
            break;
        }
        let sl = u64::from(sge.length);
        if offset >= sl {
            offset = offset.saturating_sub(sl);
            continue;
        }
        let avail = usize::try_from(sl.saturating_sub(offset)).unwrap_or(usize::MAX);
        let n = avail.min(len.saturating_sub(done));
        let addr = sge.addr.checked_add(offset).ok_or(SgError::Mem(MemError::OutOfBounds))?;
        let end = done.checked_add(n).ok_or(SgError::Length)?;
        f(sge, addr, done..end)?;
        done = end;
        offset = 0;
    }
    if done < len {
        return Err(SgError::Length);
    }
    Ok(())
}

/// Copies `dst.len()` bytes starting at message byte `offset` of the list
/// into `dst` (gather for transmission).
pub fn gather<M: Memory>(
    mem: &mut M,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    dst: &mut [u8],
) -> Result<(), SgError> {
    let len = dst.len();
    walk(sges, offset, len, |sge, addr, r| {
        let d = dst.get_mut(r).ok_or(SgError::Length)?;
        mem.read(pd, Key::Local(sge.lkey), addr, d).map_err(SgError::Mem)
    })
}

/// Copies `src` to message byte `offset` of the list (scatter on receive).
pub fn scatter<M: Memory>(
    mem: &mut M,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), SgError> {
    walk(sges, offset, src.len(), |sge, addr, r| {
        let s = src.get(r).ok_or(SgError::Length)?;
        mem.write(pd, Key::Local(sge.lkey), addr, s).map_err(SgError::Mem)
    })
}

/// Checks every entry of the list for reading (`write == false`) or local
/// writing without moving data.
pub fn check<M: Memory>(mem: &mut M, pd: u32, sges: &[Sge], write: bool) -> Result<(), MemError> {
    for sge in sges {
        if sge.length != 0 {
            mem.check(pd, Key::Local(sge.lkey), sge.addr, u64::from(sge.length), write)?;
        }
    }
    Ok(())
}

/// Copies `src` into `dst` when both have the same length (and reports
/// whether they had). Unlike `copy_from_slice`, it has no panic path: the
/// engine also runs in the kernel.
pub(super) fn copy_exact(dst: &mut [u8], src: &[u8]) -> bool {
    if dst.len() != src.len() {
        return false;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
    true
}
