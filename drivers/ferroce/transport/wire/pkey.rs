//! Partition keys (IBTA partitioning).
//!
//! Bit 15 is the membership type (1 full, 0 limited); bits 14:0 are the
//! partition base. Two P_Keys match when their bases are equal and at least
//! one of them is a full member (two limited members cannot talk). The base
//! 0 (P_Keys 0x0000 and 0x8000) is invalid and matches nothing, itself
//! included. 0xFFFF is the default full-membership key.

/// A 16-bit partition key as carried in BTH:P_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PKey(pub u16);

impl PKey {
    /// Membership bit: set for full members.
    pub const FULL_MEMBER: u16 = 0x8000;
    /// Mask of the 15-bit partition base.
    pub const BASE_MASK: u16 = 0x7FFF;
    /// Default partition, full membership.
    pub const DEFAULT: PKey = PKey(0xFFFF);
    /// Default partition, limited membership.
    pub const DEFAULT_LIMITED: PKey = PKey(0x7FFF);

    /// The 15-bit partition base.
    pub const fn base(self) -> u16 {
        self.0 & Self::BASE_MASK
    }

    /// Full membership (bit 15 set).
    pub const fn is_full_member(self) -> bool {
        self.0 & Self::FULL_MEMBER != 0
    }

    /// Limited membership (bit 15 clear).
    pub const fn is_limited_member(self) -> bool {
        !self.is_full_member()
    }

    /// Valid: the base is not 0 (0x0000 and 0x8000 are invalid).
    pub const fn is_valid(self) -> bool {
        self.base() != 0
    }

    /// The IBTA matching rule between a packet's P_Key and a port's (or a
    /// QP's) P_Key: both valid, same base, not both limited members.
    pub const fn matches(self, other: PKey) -> bool {
        self.is_valid()
            && other.is_valid()
            && self.base() == other.base()
            && (self.is_full_member() || other.is_full_member())
    }
}

impl Default for PKey {
    fn default() -> PKey {
        PKey::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkey_membership_bit_15() {
        assert!(PKey(0x8001).is_full_member());
        assert!(PKey(0x0001).is_limited_member());
        assert_eq!(PKey(0xFFFF).base(), 0x7FFF);
        assert_eq!(PKey(0x1234).base(), 0x1234);
        assert_eq!(PKey::default(), PKey(0xFFFF));
    }

    #[test]
    fn pkey_invalid_keys_match_nothing() {
        assert!(!PKey(0x0000).is_valid());
        assert!(!PKey(0x8000).is_valid());
        for other in [0x0000, 0x8000, 0xFFFF, 0x7FFF, 0x0001] {
            assert!(!PKey(0x0000).matches(PKey(other)));
            assert!(!PKey(0x8000).matches(PKey(other)));
            assert!(!PKey(other).matches(PKey(0x8000)));
        }
    }

    #[test]
    fn pkey_matching_rule() {
        // Same base, at least one full member.
        assert!(PKey(0xFFFF).matches(PKey(0xFFFF)));
        assert!(PKey(0xFFFF).matches(PKey(0x7FFF)));
        assert!(PKey(0x7FFF).matches(PKey(0xFFFF)));
        assert!(PKey(0x9234).matches(PKey(0x1234)));
        // Both limited.
        assert!(!PKey(0x7FFF).matches(PKey(0x7FFF)));
        assert!(!PKey(0x1234).matches(PKey(0x1234)));
        // Different bases.
        assert!(!PKey(0xFFFF).matches(PKey(0xFFFE)));
        assert!(!PKey(0x9234).matches(PKey(0x9235)));
    }
}
