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
    /// The bytes are valid but not present now: memory on demand whose
    /// pages the implementation must fault in first, outside the
    /// datapath. Nothing was touched; the operation is retried later (a
    /// requester waits for [`super::qp::Qp::fault_resolved`], a responder
    /// answers RNR NAK, a response is dropped and asked for again).
    Fault,
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

    /// Memory window bind ([`super::verbs::WrOpcode::BindMw`]) from a QP
    /// of `pd`: the window `bind.mw_key` names takes the key, range and
    /// rights of `bind` over its region, after [`check_bind`]. The default
    /// refuses: there are no windows.
    fn bind_mw(&mut self, pd: u32, bind: &super::verbs::MwBind) -> Result<(), MemError> {
        let _ = (pd, bind);
        Err(MemError::InvalidKey)
    }

    /// ATOMIC WRITE: stores the 8 bytes `value` at `va` of the region
    /// `rkey` in one aligned store. Needs `REMOTE_WRITE` and 8-byte
    /// alignment. The default refuses.
    fn atomic_write(&mut self, pd: u32, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        let _ = (pd, rkey, va, value);
        Err(MemError::InvalidKey)
    }

    /// FLUSH: checks that `len` bytes at `va` of the region `rkey` (with
    /// `whole`, the whole region whatever `va` and `len`) may be flushed
    /// with the rights `need` (`FLUSH_GLOBAL`, `FLUSH_PERSISTENT`). The
    /// caller makes the writes visible. The default refuses.
    fn flush(&mut self, pd: u32, rkey: u32, va: u64, len: u64, need: u32, whole: bool) -> Result<(), MemError> {
        let _ = (pd, rkey, va, len, need, whole);
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

/// The rights a window may grant.
pub const MW_ACCESS: u32 = super::verbs::access::REMOTE_READ | super::verbs::access::REMOTE_WRITE | super::verbs::access::REMOTE_ATOMIC;

/// A memory window as its checks see it (IBTA 10.6.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Its current R_Key (index and consumer byte).
    pub key: u32,
    /// Its protection domain.
    pub pd: u32,
    /// Type 2B (bound by a work request to one QP, invalidated by
    /// LOCAL_INV or SEND with Invalidate), else type 1.
    pub type2: bool,
    /// Where it is bound, when it is.
    pub binding: Option<Binding>,
}

/// A bound window's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The region's key.
    pub mr_key: u32,
    /// The QP that bound it (a type 2B window is reachable through it only).
    pub qpn: u32,
    /// [`MW_ACCESS`] rights.
    pub access: u32,
    /// First address (in the region's address space) and length.
    pub addr: u64,
    pub length: u64,
}

/// The checks of a remote reference to `len` bytes at `va` through the
/// R_Key `key` of window `w`, from QP `qpn` of `pd`, needing the rights
/// `need`; the bound region's key. In order: a key that is not the
/// window's current one or a window not bound ([`MemError::InvalidKey`]);
/// another PD ([`MemError::PdMismatch`]); a type 2B window reached through
/// a QP other than the one that bound it ([`MemError::InvalidKey`]: its
/// R_Key is valid on that QP only); the rights; the bounds.
pub fn check_window(w: &Window, key: u32, pd: u32, qpn: u32, need: u32, va: u64, len: u64) -> Result<u32, MemError> {
    let b = match w.binding {
        Some(b) if w.key == key => b,
        _ => return Err(MemError::InvalidKey),
    };
    if w.pd != pd {
        return Err(MemError::PdMismatch);
    }
    if w.type2 && b.qpn != qpn {
        return Err(MemError::InvalidKey);
    }
    if b.access & need != need {
        return Err(MemError::AccessDenied);
    }
    let end = va.checked_add(len).ok_or(MemError::OutOfBounds)?;
    let w_end = b.addr.checked_add(b.length).ok_or(MemError::OutOfBounds)?;
    if va < b.addr || end > w_end {
        return Err(MemError::OutOfBounds);
    }
    Ok(b.mr_key)
}

/// The checks of a bind of window `w` posted on QP `qpn` of `pd`, with the
/// region `mr` its L_Key names (None: no such region); the new binding,
/// None for the unbind of a type 1 window (length 0). Each failure
/// completes the bind with a Memory Window Bind Error (IBTA 10.6.7.2):
/// - the window named by a key that is not its current one, or a new key
///   of another index (only the low byte is the consumer's);
/// - the window in another PD than the QP (C10-72);
/// - a type 2B window still bound (o10-37.2.30: it must be invalidated
///   first), or bound with no region or length 0 (o10-37.2.40);
/// - rights other than the remote ones (local write, which verbs programs
///   pass along, is ignored); zero-based windows are not offered;
/// - the region: its key, its PD (the QP's), not a kernel region,
///   registered with `MW_BIND` (C10-73), with local write when the window
///   grants remote write or atomics (C10-74), and the window's range inside
///   it (C10-75).
pub fn check_bind(w: &Window, mr: Option<&Region>, pd: u32, qpn: u32, bind: &super::verbs::MwBind) -> Result<Option<Binding>, MemError> {
    use super::verbs::access;
    if bind.mw_key != w.key || bind.new_key >> 8 != w.key >> 8 {
        return Err(MemError::InvalidKey);
    }
    if w.pd != pd {
        return Err(MemError::PdMismatch);
    }
    if w.type2 && (w.binding.is_some() || bind.length == 0) {
        return Err(MemError::InvalidKey);
    }
    if bind.access & !(MW_ACCESS | access::LOCAL_WRITE) != 0 {
        return Err(MemError::AccessDenied);
    }
    if !w.type2 && bind.length == 0 {
        return Ok(None);
    }
    let r = mr.ok_or(MemError::InvalidKey)?;
    if r.key != bind.mr_key || !r.valid {
        return Err(MemError::InvalidKey);
    }
    if r.pd != pd || r.kernel_only {
        return Err(MemError::PdMismatch);
    }
    if r.access & access::MW_BIND == 0 {
        return Err(MemError::AccessDenied);
    }
    if bind.access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0 && r.access & access::LOCAL_WRITE == 0 {
        return Err(MemError::AccessDenied);
    }
    let end = bind.addr.checked_add(bind.length).ok_or(MemError::OutOfBounds)?;
    let r_end = r.iova.checked_add(r.length).ok_or(MemError::OutOfBounds)?;
    if bind.addr < r.iova || end > r_end {
        return Err(MemError::OutOfBounds);
    }
    Ok(Some(Binding { mr_key: r.key, qpn, access: bind.access & MW_ACCESS, addr: bind.addr, length: bind.length }))
}

/// The checks of an invalidation (LOCAL_INV, or SEND with Invalidate
/// received) of the R_Key `key` of window `w` from QP `qpn` of `pd`: only
/// a bound type 2B window, by its current key, in the QP's PD, bound by
/// that QP (IBTA 10.6.7.2.3); a type 1 window is never invalidated.
pub fn check_invalidate(w: &Window, key: u32, pd: u32, qpn: u32) -> Result<(), MemError> {
    let b = match w.binding {
        Some(b) if w.key == key && w.type2 => b,
        _ => return Err(MemError::InvalidKey),
    };
    if w.pd != pd {
        return Err(MemError::PdMismatch);
    }
    if b.qpn != qpn {
        return Err(MemError::InvalidKey);
    }
    Ok(())
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

    fn mwr() -> Region {
        Region { access: access::LOCAL_WRITE | access::REMOTE_READ | access::MW_BIND, ..R }
    }

    const W2: Window = Window { key: 0x0000_2a11, pd: 7, type2: true, binding: None };

    fn bind(len: u64, acc: u32) -> super::super::verbs::MwBind {
        super::super::verbs::MwBind { mw_key: W2.key, new_key: 0x0000_2a12, mr_key: R.key, access: acc, addr: 0x1010, length: len }
    }

    #[test]
    fn a_bind_checks_window_region_rights_and_range_in_order() {
        let r = mwr();
        let ok = check_bind(&W2, Some(&r), 7, 5, &bind(0x20, access::REMOTE_READ));
        assert_eq!(ok, Ok(Some(Binding { mr_key: R.key, qpn: 5, access: access::REMOTE_READ, addr: 0x1010, length: 0x20 })));
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &super::super::verbs::MwBind { mw_key: 0x2a10, ..bind(1, 0) }), Err(MemError::InvalidKey), "a stale key names no window");
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &super::super::verbs::MwBind { new_key: 0x2b12, ..bind(1, 0) }), Err(MemError::InvalidKey), "the index is not the consumer's");
        assert_eq!(check_bind(&W2, Some(&r), 8, 5, &bind(1, 0)), Err(MemError::PdMismatch), "C10-72");
        let bound = Window { binding: ok.unwrap(), ..W2 };
        assert_eq!(check_bind(&bound, Some(&r), 7, 5, &bind(1, 0)), Err(MemError::InvalidKey), "a bound type 2B window");
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &bind(1, access::ZERO_BASED)), Err(MemError::AccessDenied));
        let lw = check_bind(&W2, Some(&r), 7, 5, &bind(1, access::LOCAL_WRITE | access::REMOTE_READ));
        assert_eq!(lw.map(|b| b.map(|b| b.access)), Ok(Some(access::REMOTE_READ)), "local write is ignored");
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &bind(1, access::MW_BIND)), Err(MemError::AccessDenied));
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &bind(0, 0)), Err(MemError::InvalidKey), "o10-37.2.40: length 0");
        assert_eq!(check_bind(&W2, None, 7, 5, &bind(1, 0)), Err(MemError::InvalidKey));
        assert_eq!(check_bind(&W2, Some(&Region { key: R.key ^ 1, ..r }), 7, 5, &bind(1, 0)), Err(MemError::InvalidKey));
        assert_eq!(check_bind(&W2, Some(&Region { pd: 8, ..r }), 7, 5, &bind(1, 0)), Err(MemError::PdMismatch));
        assert_eq!(check_bind(&W2, Some(&Region { kernel_only: true, ..r }), 7, 5, &bind(1, 0)), Err(MemError::PdMismatch));
        assert_eq!(check_bind(&W2, Some(&R), 7, 5, &bind(1, 0)), Err(MemError::AccessDenied), "no MW_BIND");
        let ro = Region { access: access::REMOTE_READ | access::MW_BIND, ..R };
        assert_eq!(check_bind(&W2, Some(&ro), 7, 5, &bind(1, access::REMOTE_WRITE)), Err(MemError::AccessDenied), "C10-74");
        assert_eq!(check_bind(&W2, Some(&ro), 7, 5, &bind(1, access::REMOTE_ATOMIC)), Err(MemError::AccessDenied), "C10-74");
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &bind(0xf1, 0)), Err(MemError::OutOfBounds), "C10-75");
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &super::super::verbs::MwBind { addr: 0xfff, ..bind(1, 0) }), Err(MemError::OutOfBounds));
        assert_eq!(check_bind(&W2, Some(&r), 7, 5, &super::super::verbs::MwBind { addr: u64::MAX, ..bind(2, 0) }), Err(MemError::OutOfBounds));
        assert!(check_bind(&W2, Some(&r), 7, 5, &bind(0xf0, 0)).is_ok(), "to the region's end");
    }

    #[test]
    fn a_type_1_window_rebinds_and_unbinds_with_length_0() {
        let w1 = Window { type2: false, ..W2 };
        let b = check_bind(&w1, Some(&mwr()), 7, 5, &bind(8, access::REMOTE_READ)).unwrap().unwrap();
        let bound = Window { binding: Some(b), ..w1 };
        assert!(check_bind(&bound, Some(&mwr()), 7, 5, &bind(16, access::REMOTE_READ)).is_ok());
        assert_eq!(check_bind(&bound, None, 7, 5, &bind(0, 0)), Ok(None));
    }

    #[test]
    fn a_window_reference_checks_key_pd_qp_rights_and_range() {
        let b = Binding { mr_key: R.key, qpn: 5, access: access::REMOTE_READ | access::REMOTE_WRITE, addr: 0x1010, length: 0x20 };
        let w = Window { binding: Some(b), ..W2 };
        let rd = access::REMOTE_READ;
        assert_eq!(check_window(&w, w.key, 7, 5, rd, 0x1010, 0x20), Ok(R.key));
        assert_eq!(check_window(&W2, W2.key, 7, 5, rd, 0x1010, 1), Err(MemError::InvalidKey), "unbound");
        assert_eq!(check_window(&w, w.key ^ 1, 7, 5, rd, 0x1010, 1), Err(MemError::InvalidKey));
        assert_eq!(check_window(&w, w.key, 8, 5, rd, 0x1010, 1), Err(MemError::PdMismatch));
        assert_eq!(check_window(&w, w.key, 7, 6, rd, 0x1010, 1), Err(MemError::InvalidKey), "type 2B: another QP");
        assert_eq!(check_window(&Window { type2: false, ..w }, w.key, 7, 6, rd, 0x1010, 1), Ok(R.key), "type 1: any QP of the PD");
        assert_eq!(check_window(&w, w.key, 7, 5, access::REMOTE_ATOMIC, 0x1010, 8), Err(MemError::AccessDenied));
        assert_eq!(check_window(&w, w.key, 7, 5, rd, 0x100f, 1), Err(MemError::OutOfBounds), "the region, not the window");
        assert_eq!(check_window(&w, w.key, 7, 5, rd, 0x1020, 0x11), Err(MemError::OutOfBounds));
    }

    #[test]
    fn only_a_bound_type_2b_window_is_invalidated_by_its_qp() {
        let b = Binding { mr_key: R.key, qpn: 5, access: access::REMOTE_READ, addr: 0x1010, length: 0x20 };
        let w = Window { binding: Some(b), ..W2 };
        assert_eq!(check_invalidate(&w, w.key, 7, 5), Ok(()));
        assert_eq!(check_invalidate(&W2, W2.key, 7, 5), Err(MemError::InvalidKey), "free");
        assert_eq!(check_invalidate(&Window { type2: false, ..w }, w.key, 7, 5), Err(MemError::InvalidKey), "type 1");
        assert_eq!(check_invalidate(&w, w.key ^ 1, 7, 5), Err(MemError::InvalidKey));
        assert_eq!(check_invalidate(&w, w.key, 8, 5), Err(MemError::PdMismatch));
        assert_eq!(check_invalidate(&w, w.key, 7, 6), Err(MemError::InvalidKey));
    }
}
