//! The slot policy of the driver's object tables (QPs, CQs, SRQs, MRs,
//! AHs, PDs): which free slot an allocation takes, and how many a process
//! may not take.
//!
//! A table is a slice of `Option<T>` (`None`: free). Slots are handed out
//! cyclically from a cursor, so that a freed number is not reused soon (a
//! stale handle or key then names nothing rather than a new object), and a
//! process's allocation never takes the last [`KERNEL_RESERVE`] free slots:
//! the kernel's own consumers (the MAD layer, the CM's AHs, kernel ULPs)
//! always find room, whatever processes hold.

/// Free slots of every table that a process's allocation never takes.
pub const KERNEL_RESERVE: usize = 4;

/// A free slot at or after the cursor `next` (cyclically over the indices
/// `first..t.len()`), and the cursor moved past it. For a process (`user`),
/// none unless more than [`KERNEL_RESERVE`] are free. One pass from the
/// cursor, which stops at the first free slot (a kernel consumer) or at the
/// `KERNEL_RESERVE + 1`-th (a process): where the cursor is, slots are
/// mostly free, so a table of many live objects costs no scan of them.
pub fn alloc_slot<T>(t: &[Option<T>], next: &mut usize, first: usize, user: bool) -> Option<usize> {
    let span = t.len().checked_sub(first).filter(|&s| s > 0)?;
    let start = next.checked_rem(span)?;
    let mut free = (start..span).chain(0..start).filter_map(|i| i.checked_add(first)).filter(|&idx| matches!(t.get(idx), Some(None)));
    let idx = free.next()?;
    // A process needs KERNEL_RESERVE more free slots besides this one.
    if user && free.take(KERNEL_RESERVE).count() < KERNEL_RESERVE {
        return None;
    }
    *next = idx.checked_sub(first)?.checked_add(1)?.checked_rem(span)?;
    Some(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_cyclically_from_the_cursor_skipping_the_first() {
        let mut t: [Option<u8>; 8] = [None; 8];
        let mut next = 0;
        let got: [usize; 7] = core::array::from_fn(|_| {
            let i = alloc_slot(&t, &mut next, 1, false).unwrap();
            t[i] = Some(1);
            i
        });
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 7], "index 0 is never handed out");
        assert_eq!(alloc_slot(&t, &mut next, 1, false), None, "full");
        // Freed slots are reused only when the cursor comes round to them.
        t[3] = None;
        t[6] = None;
        assert_eq!(alloc_slot(&t, &mut next, 1, false), Some(3));
        assert_eq!(alloc_slot(&t, &mut next, 1, false), Some(6), "the cursor moved past 3, free or not");
        assert_eq!(alloc_slot(&t, &mut next, 1, false), Some(3), "and comes round to it");
    }

    #[test]
    fn a_freed_number_waits_for_the_cursor_to_come_round() {
        let mut t: [Option<u8>; 6] = [None; 6];
        let mut next = 0;
        let a = alloc_slot(&t, &mut next, 0, false).unwrap();
        t[a] = Some(1);
        t[a] = None;
        let b = alloc_slot(&t, &mut next, 0, false).unwrap();
        assert_ne!(a, b, "a number freed and allocated again at once is a different one");
    }

    #[test]
    fn processes_leave_the_kernel_reserve() {
        let mut t: [Option<u8>; 12] = [None; 12];
        let mut next = 0;
        let mut user = 0;
        while let Some(i) = alloc_slot(&t, &mut next, 1, true) {
            t[i] = Some(1);
            user += 1;
        }
        assert_eq!(user, 11 - KERNEL_RESERVE, "a process stops with the reserve free");
        for _ in 0..KERNEL_RESERVE {
            let i = alloc_slot(&t, &mut next, 1, false).expect("the kernel takes the reserve");
            t[i] = Some(2);
        }
        assert_eq!(alloc_slot(&t, &mut next, 1, false), None);
    }

    #[test]
    fn degenerate_tables_hand_out_nothing() {
        let t: [Option<u8>; 2] = [None; 2];
        let mut next = usize::MAX;
        assert_eq!(alloc_slot(&t, &mut next, 2, false), None, "no index at or above first");
        assert_eq!(alloc_slot(&t, &mut next, 5, false), None);
        assert_eq!(alloc_slot(&t, &mut next, 1, false), Some(1), "a cursor out of range wraps");
        assert_eq!(alloc_slot::<u8>(&[], &mut next, 0, false), None);
    }

    #[test]
    fn the_reserve_counts_free_slots_on_both_sides_of_the_cursor() {
        // Free: 2 (behind the cursor) and 6, 7, 8, 9 (ahead of it).
        let mut t: [Option<u8>; 10] = [Some(1); 10];
        for i in [2, 6, 7, 8, 9] {
            t[i] = None;
        }
        let mut next = 5;
        assert_eq!(alloc_slot(&t, &mut next, 1, true), Some(6), "five free: a process takes the first after the cursor");
        t[6] = Some(1);
        assert_eq!(alloc_slot(&t, &mut next, 1, true), None, "four free: the reserve");
        assert_eq!(next, 6, "a refusal leaves the cursor");
        assert_eq!(alloc_slot(&t, &mut next, 1, false), Some(7));
    }
}
