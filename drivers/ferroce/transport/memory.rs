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
