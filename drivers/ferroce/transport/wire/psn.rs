//! Packet sequence numbers: 24-bit serial arithmetic (IBTA ch. 9).
//!
//! PSNs wrap at 2^24. Two PSNs are compared inside a half window of 2^23:
//! `b` is *ahead of* `a` when `(b - a) mod 2^24` lies in `1..2^23`, and
//! *behind* it when the difference lies in `2^23..2^24`. This is the rule the
//! responder uses to tell a duplicate request (behind the ePSN) from an
//! out-of-sequence one (ahead of the ePSN), and the requester uses to tell
//! a stale response from a future one. The exact half-way point (difference
//! 2^23) counts as *behind*, as in rdma_rxe's `psn_compare`.
//!
//! Serial comparison is not a total order, so `Psn` deliberately implements
//! neither `PartialOrd` nor `Ord`; use [`Psn::compare`].

use core::cmp::Ordering;

/// A 24-bit packet sequence number.
///
/// INVARIANT: the inner value is at most [`Psn::MASK`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// Largest PSN, and the mask of its 24 bits.
    pub const MASK: u32 = 0x00FF_FFFF;
    /// Size of the comparison half window, 2^23.
    pub const HALF_WINDOW: u32 = 0x0080_0000;
    /// PSN 0.
    pub const ZERO: Psn = Psn(0);
    /// PSN 0xFFFFFF.
    pub const MAX: Psn = Psn(Self::MASK);

    /// The PSN made of the low 24 bits of `value` (upper bits dropped).
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN `value`, or `None` when it does not fit in 24 bits.
    pub const fn try_new(value: u32) -> Option<Psn> {
        if value <= Self::MASK {
            Some(Psn(value))
        } else {
            None
        }
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn wrapping_add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n` modulo 2^24.
    pub const fn wrapping_sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The next PSN (`self + 1` modulo 2^24).
    pub const fn next(self) -> Psn {
        self.wrapping_add(1)
    }

    /// The previous PSN (`self - 1` modulo 2^24).
    pub const fn prev(self) -> Psn {
        self.wrapping_sub(1)
    }

    /// Forward distance from `self` to `to`: `(to - self) mod 2^24`, the
    /// number of `next` steps that lead from `self` to `to`.
    pub const fn distance_to(self, to: Psn) -> u32 {
        to.0.wrapping_sub(self.0) & Self::MASK
    }

    /// Signed serial difference `self - other` in `-2^23..2^23`: positive
    /// when `self` is ahead of `other`, negative when behind, 0 when equal.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back, so the
        // sign comes from bit 23 (the same trick as rdma_rxe's psn_compare).
        (((self.0.wrapping_sub(other.0)) << 8) as i32) >> 8
    }

    /// Serial comparison of `self` against `other` within the half window:
    /// `Greater` when `self` is ahead of `other`, `Less` when behind.
    pub const fn compare(self, other: Psn) -> Ordering {
        let d = self.diff(other);
        if d > 0 {
            Ordering::Greater
        } else if d < 0 {
            Ordering::Less
        } else {
            Ordering::Equal
        }
    }

    /// `self` is strictly ahead of `other` (in the half window after it).
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// `self` is strictly behind `other` (in the half window before it).
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// `self` lies in the `len` PSNs starting at `start` (wrapping):
    /// `start, start + 1, ..., start + len - 1`.
    pub const fn in_range(self, start: Psn, len: u32) -> bool {
        start.distance_to(self) < len
    }
}

impl From<Psn> for u32 {
    fn from(psn: Psn) -> u32 {
        psn.0
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_construction_keeps_24_bits() {
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
        assert_eq!(Psn::new(0xFFFF_FFFF), Psn::MAX);
        assert_eq!(Psn::try_new(0xFF_FFFF), Some(Psn::MAX));
        assert_eq!(Psn::try_new(0x100_0000), None);
        assert_eq!(u32::from(Psn::new(7)), 7);
    }

    #[test]
    fn psn_add_sub_wrap_at_24_bits() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.prev(), Psn::MAX);
        assert_eq!(Psn::new(0xFF_FFFE).wrapping_add(5), Psn::new(3));
        assert_eq!(Psn::new(3).wrapping_sub(5), Psn::new(0xFF_FFFE));
        assert_eq!(Psn::new(10).wrapping_add(u32::MAX), Psn::new(9));
        assert_eq!(Psn::new(10).wrapping_add(1 << 24), Psn::new(10));
        assert_eq!(Psn::new(10).wrapping_sub(1 << 24), Psn::new(10));
    }

    #[test]
    fn psn_distance_wraps() {
        assert_eq!(Psn::new(5).distance_to(Psn::new(5)), 0);
        assert_eq!(Psn::new(5).distance_to(Psn::new(9)), 4);
        assert_eq!(Psn::MAX.distance_to(Psn::ZERO), 1);
        assert_eq!(Psn::new(0xFF_FFF0).distance_to(Psn::new(0x10)), 0x20);
        assert_eq!(Psn::new(9).distance_to(Psn::new(5)), 0xFF_FFFC);
    }

    #[test]
    fn psn_half_window_comparison() {
        let e = Psn::new(100);
        assert_eq!(Psn::new(101).compare(e), Ordering::Greater);
        assert_eq!(Psn::new(99).compare(e), Ordering::Less);
        assert_eq!(e.compare(e), Ordering::Equal);
        // Last PSN ahead: e + 2^23 - 1; first PSN behind: e + 2^23 (== e - 2^23).
        let last_ahead = e.wrapping_add(Psn::HALF_WINDOW - 1);
        let first_behind = e.wrapping_add(Psn::HALF_WINDOW);
        assert!(last_ahead.is_after(e));
        assert_eq!(last_ahead.diff(e), 0x7F_FFFF);
        assert!(first_behind.is_before(e));
        assert_eq!(first_behind.diff(e), -0x80_0000);
        assert!(e.wrapping_sub(1).is_before(e));
    }

    #[test]
    fn psn_comparison_across_wraparound() {
        assert!(Psn::ZERO.is_after(Psn::MAX));
        assert!(Psn::MAX.is_before(Psn::ZERO));
        assert_eq!(Psn::new(2).diff(Psn::new(0xFF_FFFE)), 4);
        assert_eq!(Psn::new(0xFF_FFFE).diff(Psn::new(2)), -4);
        // 0x7FFFFF is exactly 2^23 after 0xFFFFFF: the midpoint counts as behind.
        assert!(Psn::new(0x7F_FFFF).is_before(Psn::MAX));
        assert!(Psn::new(0x7F_FFFE).is_after(Psn::MAX));
        assert!(Psn::new(0x80_0000).is_before(Psn::MAX));
        assert!(!Psn::MAX.is_after(Psn::MAX) && !Psn::MAX.is_before(Psn::MAX));
    }

    #[test]
    fn psn_comparison_is_antisymmetric_off_the_midpoint() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let a = Psn::new(x);
            let b = Psn::new(x.rotate_left(11));
            let d = a.diff(b);
            assert_eq!(b.wrapping_add(d as u32), a);
            if a.distance_to(b) != Psn::HALF_WINDOW {
                assert_eq!(a.compare(b), b.compare(a).reverse());
            }
        }
    }

    #[test]
    fn psn_in_range_wraps() {
        assert!(Psn::MAX.in_range(Psn::new(0xFF_FFFE), 4));
        assert!(Psn::new(1).in_range(Psn::new(0xFF_FFFE), 4));
        assert!(!Psn::new(2).in_range(Psn::new(0xFF_FFFE), 4));
        assert!(!Psn::new(5).in_range(Psn::new(5), 0));
        assert!(Psn::new(5).in_range(Psn::new(5), 1));
    }

    #[test]
    fn psn_displays_hex() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(Psn::new(0xAB).to_string(), "0x0000ab");
    }
}
