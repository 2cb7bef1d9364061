//! The engine's view of registered memory.
//!
//! The engine never touches memory itself: every key lookup, bounds check,
//! copy and atomic goes through [`Memory`], implemented by the kernel (MRs
//! over pinned pages, atomics under the MR's lock or with real atomic
//! instructions) and by the host simulator (a `Vec<u8>` per region).

/// Which key space a key belongs to and hence which access right a
/// reference needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// An L_Key named by a local work request's scatter/gather entry.
    Local(u32),
    /// An R_Key carried by a request packet (RETH, AtomicETH, IETH).
    Remote(u32),
}

/// Why a memory reference was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// No region (or window) has this key, or it was invalidated.
    InvalidKey,
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The region does not grant the access right the operation needs.
    AccessDenied,
    /// `[va, va + len)` is not inside the region.
    OutOfBounds,
    /// An atomic target that is not 8-byte aligned.
    Misaligned,
}

/// Registered memory as the transport engine sees it.
///
/// Rights: reading through a [`Key::Local`] needs none beyond a valid key in
/// the same PD; writing through one needs `LOCAL_WRITE`; a [`Key::Remote`]
/// read needs `REMOTE_READ`, a write `REMOTE_WRITE`, an atomic
/// `REMOTE_ATOMIC` (see [`super::verbs::access`]). Implementations check
/// key, PD, rights and bounds before touching a byte and report the first
/// failing check; a failed call must leave memory unchanged.
pub trait Memory {
    /// Copies `dst.len()` bytes at `va` of the region `key` into `dst`.
    fn read(&mut self, pd: u32, key: Key, va: u64, dst: &mut [u8]) -> Result<(), MemError>;

    /// Copies `src` to `va` of the region `key`.
    fn write(&mut self, pd: u32, key: Key, va: u64, src: &[u8]) -> Result<(), MemError>;

    /// Checks that `len` bytes at `va` of `key` could be written (or, with
    /// `write == false`, read) without moving data. Used to validate a whole
    /// RDMA request before its first packet lands.
    fn check(&mut self, pd: u32, key: Key, va: u64, len: u64, write: bool) -> Result<(), MemError>;

    /// Atomically: reads the 8-byte value at `va` (native byte order of the
    /// target, as verbs defines), stores `swap` if it equals `compare`, and
    /// returns the value read. Needs `REMOTE_ATOMIC` and 8-byte alignment.
    fn compare_swap(&mut self, pd: u32, rkey: u32, va: u64, compare: u64, swap: u64)
        -> Result<u64, MemError>;

    /// Atomically: reads the 8-byte value at `va`, stores it plus `add`
    /// (wrapping) and returns the value read.
    fn fetch_add(&mut self, pd: u32, rkey: u32, va: u64, add: u64) -> Result<u64, MemError>;

    /// Invalidates the R_Key `rkey` (SEND with Invalidate; Local Invalidate
    /// of the L_Key = R_Key of a fast-registered region). The default
    /// refuses: implementations without memory windows or fast-registered
    /// regions have nothing a remote peer may invalidate.
    fn invalidate(&mut self, pd: u32, rkey: u32) -> Result<(), MemError> {
        let _ = (pd, rkey);
        Err(MemError::InvalidKey)
    }

    /// Fast registration ([`super::verbs::WrOpcode::RegMr`]): region
    /// `reg.mr`, of protection domain `pd` and currently invalid (free),
    /// takes the key, access rights, `iova` and length of `reg` over the
    /// pages mapped to it, and becomes valid. The default refuses: nothing
    /// can be fast-registered.
    fn fast_register(&mut self, pd: u32, reg: &super::verbs::FastReg) -> Result<(), MemError> {
        let _ = (pd, reg);
        Err(MemError::InvalidKey)
    }
}

/// What the access check of a memory reference needs to know of the region
/// its key's index names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The region's whole key (index and consumer byte).
    pub key: u32,
    /// Its protection domain.
    pub pd: u32,
    /// Its access rights ([`super::verbs::access`]).
    pub access: u32,
    /// Its first address and length.
    pub iova: u64,
    pub length: u64,
    /// False for a fast-registration region that is invalid (free).
    pub valid: bool,
    /// A region of kernel virtual addresses (the DMA region, fast
    /// regions): never named by a process's QP, whatever its PD.
    pub kernel_only: bool,
}

/// The right a reference through `key` needs: none to read through an
/// L_Key, `LOCAL_WRITE` to write through one, `REMOTE_READ` or
/// `REMOTE_WRITE` through an R_Key, `REMOTE_ATOMIC` for an atomic.
pub fn needed_access(key: Key, write: bool, atomic: bool) -> u32 {
    use super::verbs::access;
    match (key, write) {
        _ if atomic => access::REMOTE_ATOMIC,
        (Key::Local(_), false) => 0,
        (Key::Local(_), true) => access::LOCAL_WRITE,
        (Key::Remote(_), false) => access::REMOTE_READ,
        (Key::Remote(_), true) => access::REMOTE_WRITE,
    }
}

/// The checks of a reference to `len` bytes at `va` through `key` from a
/// QP of `pd` (`user_qp`: a process's), needing the rights `need`, against
/// the region `r` that the key's index names. In order, each failure the
/// IBTA error it is: the whole key (consumer byte included) and an invalid
/// fast region ([`MemError::InvalidKey`]); the PD, and a kernel-only region
/// from a process's QP ([`MemError::PdMismatch`]); the rights
/// ([`MemError::AccessDenied`]); the bounds, an overflowing end included
/// ([`MemError::OutOfBounds`]). Returns the offset of `va` in the region.
pub fn check_region(r: &Region, key: u32, pd: u32, user_qp: bool, need: u32, va: u64, len: u64) -> Result<u64, MemError> {
    if r.key != key || !r.valid {
        return Err(MemError::InvalidKey);
    }
    if r.pd != pd || (user_qp && r.kernel_only) {
        return Err(MemError::PdMismatch);
    }
    if r.access & need != need {
        return Err(MemError::AccessDenied);
    }
    let end = va.checked_add(len).ok_or(MemError::OutOfBounds)?;
    let r_end = r.iova.checked_add(r.length).ok_or(MemError::OutOfBounds)?;
    if va < r.iova || end > r_end {
        return Err(MemError::OutOfBounds);
    }
    va.checked_sub(r.iova).ok_or(MemError::OutOfBounds)
}

#[cfg(test)]
mod tests {
    use super::super::verbs::access;
    use super::*;

    const R: Region = Region {
        key: 0x1234_56ab,
        pd: 7,
        access: access::LOCAL_WRITE | access::REMOTE_READ,
        iova: 0x1000,
        length: 0x100,
        valid: true,
        kernel_only: false,
    };

    fn chk(r: &Region, key: u32, pd: u32, user: bool, need: u32, va: u64, len: u64) -> Result<u64, MemError> {
        check_region(r, key, pd, user, need, va, len)
    }

    #[test]
    fn rights_by_key_space_and_operation() {
        assert_eq!(needed_access(Key::Local(1), false, false), 0);
        assert_eq!(needed_access(Key::Local(1), true, false), access::LOCAL_WRITE);
        assert_eq!(needed_access(Key::Remote(1), false, false), access::REMOTE_READ);
        assert_eq!(needed_access(Key::Remote(1), true, false), access::REMOTE_WRITE);
        assert_eq!(needed_access(Key::Remote(1), true, true), access::REMOTE_ATOMIC);
    }

    #[test]
    fn each_check_gives_its_error_in_order() {
        let k = R.key;
        assert_eq!(chk(&R, k, 7, true, access::REMOTE_READ, 0x1010, 0x10), Ok(0x10));
        assert_eq!(chk(&R, k ^ 1, 7, true, 0, 0x1000, 1), Err(MemError::InvalidKey), "consumer byte");
        assert_eq!(chk(&Region { valid: false, ..R }, k, 7, false, 0, 0x1000, 1), Err(MemError::InvalidKey));
        assert_eq!(chk(&R, k ^ 1, 8, true, access::REMOTE_WRITE, 0, u64::MAX), Err(MemError::InvalidKey), "the key first");
        assert_eq!(chk(&R, k, 8, false, 0, 0x1000, 1), Err(MemError::PdMismatch));
        assert_eq!(chk(&R, k, 8, false, access::REMOTE_WRITE, 0, u64::MAX), Err(MemError::PdMismatch), "the PD before the rest");
        assert_eq!(chk(&R, k, 7, true, access::REMOTE_WRITE, 0x1000, 1), Err(MemError::AccessDenied));
        assert_eq!(chk(&R, k, 7, true, access::REMOTE_WRITE, 0, u64::MAX), Err(MemError::AccessDenied), "rights before bounds");
        assert_eq!(chk(&R, k, 7, true, 0, 0xfff, 1), Err(MemError::OutOfBounds));
        assert_eq!(chk(&R, k, 7, true, 0, 0x1000, 0x101), Err(MemError::OutOfBounds));
        assert_eq!(chk(&R, k, 7, true, 0, 0x1000, 0x100), Ok(0), "the whole region");
        assert_eq!(chk(&R, k, 7, true, 0, 0x1100, 0), Ok(0x100), "an empty reference at its end");
        assert_eq!(chk(&R, k, 7, true, 0, u64::MAX, 2), Err(MemError::OutOfBounds), "an end that overflows");
    }

    #[test]
    fn no_process_qp_reaches_a_kernel_region() {
        let dma = Region { kernel_only: true, access: access::LOCAL_WRITE, iova: 0, length: u64::MAX, ..R };
        assert_eq!(chk(&dma, R.key, 7, false, 0, 0xffff_8000_0000_0000, 64), Ok(0xffff_8000_0000_0000));
        assert_eq!(chk(&dma, R.key, 7, true, 0, 0xffff_8000_0000_0000, 64), Err(MemError::PdMismatch), "same PD, a process's QP");
    }
}

