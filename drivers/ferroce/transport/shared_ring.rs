//! The index rules of the rings a process shares with the kernel.
//!
//! A ring has a power-of-two number of slots and two free-running 32-bit
//! indices in its header: the producer's and the consumer's. One side of
//! each is the process, which may write anything there at any time. These
//! functions decide, from a value read once, what the kernel may do; none
//! of them can be made to claim more than the ring holds, and an impossible
//! index reads as "nothing" (a queue the kernel takes from) or "full" (a
//! queue the kernel writes to), never as room to overwrite. The glue
//! (`rings.rs`, `state.rs`) reads the indices and moves the bytes.

/// Requests a process's producer index `prod` claims beyond the `taken`
/// the kernel has consumed, or None when the claim is impossible: with the
/// `in_engine` requests the kernel still holds, more outstanding than the
/// ring's `entries` (a scribbled index; the caller fails the QP).
pub fn claimed(prod: u32, taken: u32, in_engine: usize, entries: u32) -> Option<u32> {
    let new = prod.wrapping_sub(taken);
    let outstanding = u64::from(new).saturating_add(u64::try_from(in_engine).unwrap_or(u64::MAX));
    (outstanding <= u64::from(entries)).then_some(new)
}

/// The oldest entry of a shared receive queue is there to take: the
/// producer is ahead of `taken` by 1..=`entries`. A claim beyond the ring
/// reads as empty.
pub fn srq_has_entry(prod: u32, taken: u32, entries: u32) -> Option<u32> {
    let avail = prod.wrapping_sub(taken);
    (avail != 0 && avail <= entries).then_some(avail)
}

/// Entries of a ring the kernel produces into (a CQ) that the process has
/// not consumed yet, from the process's consumer index `cons`, bounded by
/// the ring.
pub fn unread(prod: u32, cons: u32, entries: u32) -> u32 {
    prod.wrapping_sub(cons).min(entries)
}

/// Whether the kernel may write one more entry into a ring it produces
/// into. A consumer index ahead of the producer (scribbled) reads as full:
/// the queue stops, nothing unread is overwritten.
pub fn has_room(prod: u32, cons: u32, entries: u32) -> bool {
    prod.wrapping_sub(cons) < entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_bounded_by_the_ring() {
        assert_eq!(claimed(5, 5, 0, 8), Some(0));
        assert_eq!(claimed(13, 5, 0, 8), Some(8), "a full ring");
        assert_eq!(claimed(13, 5, 1, 8), None, "one more than the ring holds, with one in the kernel");
        assert_eq!(claimed(14, 5, 0, 8), None);
        assert_eq!(claimed(4, 5, 0, 8), None, "a producer behind the consumer: 2^32 - 1 claimed");
        assert_eq!(claimed(2, u32::MAX - 1, 0, 8), Some(4), "across the wrap of the free-running index");
        assert_eq!(claimed(0, 0, usize::MAX, 8), None);
    }

    #[test]
    fn an_srq_claim_beyond_the_ring_is_empty() {
        assert_eq!(srq_has_entry(7, 7, 16), None);
        assert_eq!(srq_has_entry(8, 7, 16), Some(1));
        assert_eq!(srq_has_entry(23, 7, 16), Some(16));
        assert_eq!(srq_has_entry(24, 7, 16), None);
        assert_eq!(srq_has_entry(0xffff_fff0, 7, 16), None);
    }

    #[test]
    fn a_scribbled_consumer_never_makes_room() {
        // Normal: 3 unread of 4, room for one more.
        assert_eq!(unread(10, 7, 4), 3);
        assert!(has_room(10, 7, 4));
        assert!(!has_room(11, 7, 4), "full");
        // The process wrote a consumer index ahead of the producer.
        assert_eq!(unread(10, 11, 4), 4, "reads as full, not as 2^32 - 1");
        assert!(!has_room(10, 11, 4));
        assert!(!has_room(10, 0x8000_0000, 4));
        // Across the wrap.
        assert_eq!(unread(1, u32::MAX, 4), 2);
        assert!(has_room(1, u32::MAX, 4));
    }
}
