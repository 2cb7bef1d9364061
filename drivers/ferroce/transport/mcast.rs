//! A device's multicast groups: which UD QPs are attached to which
//! multicast GID (IBTA 11.3: Attach/Detach QP to Multicast Group).
//!
//! A UD datagram whose BTH names [`MULTICAST_QPN`] as its destination QP
//! goes to every QP attached to the group its destination GID (RoCEv2: its
//! destination IP address) names; a datagram to a group with no QP
//! attached is dropped. The table is sorted by GID, so that the receive
//! path finds a group by binary search, never by a scan of every group.
//!
//! Pure data and policy, no allocation: the caller provides the slots
//! (once, when the device is made) and takes the lock around every call.

/// The destination QP of every multicast packet (IBTA 9.2: QP 0xFFFFFF).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;
/// Groups one device holds at most.
pub const MAX_GROUPS: usize = 256;
/// QPs one group holds at most.
pub const MAX_QP_ATTACH: usize = 56;

/// One group: its GID and the QPs attached to it, each with the number of
/// its attachments (the RDMA core counts one per (GID, LID) pair, and a
/// process may attach a QP to one GID under several LIDs: each needs its
/// detach, or the core's count of the QP's users never reaches 0).
#[derive(Clone, Copy)]
pub struct Group {
    gid: [u8; 16],
    n: usize,
    qps: [u32; MAX_QP_ATTACH],
    refs: [u16; MAX_QP_ATTACH],
}

impl Group {
    /// A free slot.
    pub const EMPTY: Group = Group { gid: [0; 16], n: 0, qps: [0; MAX_QP_ATTACH], refs: [0; MAX_QP_ATTACH] };

    fn members(&self) -> &[u32] {
        self.qps.get(..self.n).unwrap_or(&[])
    }
}

/// Why an attach or detach was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McastError {
    /// Not a multicast GID (EINVAL).
    NotMulticast,
    /// Every group slot is in use (ENOMEM).
    NoGroup,
    /// The group has [`MAX_QP_ATTACH`] QPs already (ENOMEM).
    GroupFull,
    /// The QP is not attached to that group (EINVAL).
    NotAttached,
}

/// What an attach did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// The QP is the group's first: the caller joins the group on the
    /// network device.
    NewGroup,
    /// The QP joined a group that had members.
    Joined,
    /// The QP was attached already: it holds one more attachment (one
    /// more detach before it leaves), and receives each datagram once.
    Already,
}

/// Whether `gid` is a multicast GID: an IPv6 multicast address (ff00::/8)
/// or an IPv4-mapped IPv4 multicast address (::ffff:224.0.0.0/100).
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    let [b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, ..] = *gid;
    let v4_mapped = [b0, b1, b2, b3, b4, b5, b6, b7, b8, b9] == [0; 10] && b10 == 0xff && b11 == 0xff;
    b0 == 0xff || (v4_mapped && b12 & 0xf0 == 0xe0)
}

/// The destination GID of a packet whose destination IP address is `dst`
/// (4 bytes: IPv4, mapped; 16: IPv6).
pub fn gid_of_ip(dst: &[u8]) -> Option<[u8; 16]> {
    match *dst {
        [a, b, c, d] => Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]),
        _ => <[u8; 16]>::try_from(dst).ok(),
    }
}

/// The groups of one device, in slots `S` the caller allocated (at least
/// [`MAX_GROUPS`] of them are used).
pub struct Groups<S> {
    slots: S,
    len: usize,
}

impl<S: core::ops::DerefMut<Target = [Group]>> Groups<S> {
    /// A table with no group, over `slots` (each [`Group::EMPTY`] or not:
    /// none is read before it is written).
    pub fn new(slots: S) -> Self {
        Self { slots, len: 0 }
    }

    fn capacity(&self) -> usize {
        self.slots.len().min(MAX_GROUPS)
    }

    fn live(&self) -> &[Group] {
        self.slots.get(..self.len).unwrap_or(&[])
    }

    /// Where `gid` is (Ok) or would be inserted (Err).
    fn find(&self, gid: &[u8; 16]) -> Result<usize, usize> {
        self.live().binary_search_by(|g| g.gid.cmp(gid))
    }

    /// Groups in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no group is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Attaches QP `qpn` to the group `gid`, making the group if it is
    /// the first QP.
    pub fn attach(&mut self, gid: &[u8; 16], qpn: u32) -> Result<Attached, McastError> {
        if !is_multicast_gid(gid) {
            return Err(McastError::NotMulticast);
        }
        match self.find(gid) {
            Ok(i) => {
                let g = self.slots.get_mut(i).ok_or(McastError::NoGroup)?;
                if let Some(at) = g.members().iter().position(|&q| q == qpn) {
                    let r = g.refs.get_mut(at).ok_or(McastError::GroupFull)?;
                    *r = r.checked_add(1).ok_or(McastError::GroupFull)?;
                    return Ok(Attached::Already);
                }
                let n = g.n;
                let (Some(slot), Some(r)) = (g.qps.get_mut(n), g.refs.get_mut(n)) else {
                    return Err(McastError::GroupFull);
                };
                *slot = qpn;
                *r = 1;
                g.n = n.saturating_add(1);
                Ok(Attached::Joined)
            }
            Err(at) => {
                if self.len >= self.capacity() {
                    return Err(McastError::NoGroup);
                }
                let end = self.len.saturating_add(1);
                let span = self.slots.get_mut(at..end).ok_or(McastError::NoGroup)?;
                span.rotate_right(1);
                let g = span.first_mut().ok_or(McastError::NoGroup)?;
                *g = Group::EMPTY;
                g.gid = *gid;
                if let (Some(first), Some(r)) = (g.qps.first_mut(), g.refs.first_mut()) {
                    *first = qpn;
                    *r = 1;
                }
                g.n = 1;
                self.len = end;
                Ok(Attached::NewGroup)
            }
        }
    }

    /// Takes one of QP `qpn`'s attachments to group `gid` away; with its
    /// last, the QP leaves the group. True when the group is gone with it
    /// (the caller leaves the group on the network device).
    pub fn detach(&mut self, gid: &[u8; 16], qpn: u32) -> Result<bool, McastError> {
        let i = self.find(gid).map_err(|_| McastError::NotAttached)?;
        let g = self.slots.get_mut(i).ok_or(McastError::NotAttached)?;
        let at = g.members().iter().position(|&q| q == qpn).ok_or(McastError::NotAttached)?;
        let r = g.refs.get_mut(at).ok_or(McastError::NotAttached)?;
        *r = r.saturating_sub(1);
        if *r > 0 {
            return Ok(false);
        }
        if let Some(m) = g.qps.get_mut(at..g.n) {
            m.rotate_left(1);
        }
        if let Some(m) = g.refs.get_mut(at..g.n) {
            m.rotate_left(1);
        }
        g.n = g.n.saturating_sub(1);
        if g.n > 0 {
            return Ok(false);
        }
        if let Some(span) = self.slots.get_mut(i..self.len) {
            span.rotate_left(1);
        }
        self.len = self.len.saturating_sub(1);
        Ok(true)
    }

    /// The QPs attached to group `gid` (none when there is no such group).
    pub fn members(&self, gid: &[u8; 16]) -> &[u32] {
        match self.find(gid) {
            Ok(i) => self.live().get(i).map_or(&[], Group::members),
            Err(_) => &[],
        }
    }

    /// A group QP `qpn` is attached to (a destroyed QP is detached from
    /// each in turn).
    pub fn group_of(&self, qpn: u32) -> Option<[u8; 16]> {
        self.live().iter().find(|g| g.members().contains(&qpn)).map(|g| g.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> [u8; 16] {
        gid_of_ip(&[a, b, c, d]).unwrap()
    }

    fn table(n: usize) -> Groups<Vec<Group>> {
        Groups::new(vec![Group::EMPTY; n])
    }

    #[test]
    fn multicast_gids_are_ipv6_ff_and_mapped_ipv4_class_d() {
        assert!(is_multicast_gid(&v4(224, 0, 0, 1)));
        assert!(is_multicast_gid(&v4(239, 255, 1, 2)));
        assert!(!is_multicast_gid(&v4(192, 168, 1, 2)));
        assert!(!is_multicast_gid(&v4(240, 0, 0, 1)), "class E is not multicast");
        let mut v6 = [0u8; 16];
        v6[0] = 0xff;
        v6[1] = 0x0e;
        v6[15] = 1;
        assert!(is_multicast_gid(&v6));
        v6[0] = 0xfe;
        assert!(!is_multicast_gid(&v6), "link-local unicast");
        // 224.x.y.z not in the mapped form (an IPv4-compatible address) is
        // not multicast.
        let mut compat = [0u8; 16];
        compat[12] = 224;
        assert!(!is_multicast_gid(&compat));
        assert_eq!(gid_of_ip(&[1, 2, 3]), None);
    }

    #[test]
    fn attach_makes_the_group_once_and_detach_of_the_last_removes_it() {
        let mut t = table(MAX_GROUPS);
        let g = v4(239, 1, 2, 3);
        assert_eq!(t.attach(&g, 17), Ok(Attached::NewGroup));
        assert_eq!(t.attach(&g, 18), Ok(Attached::Joined));
        assert_eq!(t.attach(&g, 17), Ok(Attached::Already), "a second attach: one member, two attachments");
        assert_eq!(t.members(&g), &[17, 18]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.detach(&g, 17), Ok(false));
        assert_eq!(t.members(&g), &[17, 18], "17 holds one attachment still");
        assert_eq!(t.detach(&g, 17), Ok(false));
        assert_eq!(t.members(&g), &[18]);
        assert_eq!(t.detach(&g, 17), Err(McastError::NotAttached), "detached twice");
        assert_eq!(t.detach(&g, 18), Ok(true), "the last QP takes the group with it");
        assert!(t.is_empty());
        assert_eq!(t.members(&g), &[] as &[u32]);
        assert_eq!(t.detach(&g, 18), Err(McastError::NotAttached), "no such group");
    }

    #[test]
    fn unicast_gids_are_refused() {
        let mut t = table(4);
        assert_eq!(t.attach(&v4(10, 0, 0, 1), 5), Err(McastError::NotMulticast));
        assert!(t.is_empty());
    }

    #[test]
    fn limits_per_group_and_per_device() {
        let mut t = table(MAX_GROUPS + 10);
        let g = v4(239, 0, 0, 1);
        for q in 0..MAX_QP_ATTACH as u32 {
            assert!(t.attach(&g, 100 + q).is_ok());
        }
        assert_eq!(t.attach(&g, 1), Err(McastError::GroupFull));
        assert_eq!(t.members(&g).len(), MAX_QP_ATTACH);
        // Slots beyond MAX_GROUPS are not used.
        for i in 1..MAX_GROUPS {
            let gid = v4(239, 1, (i >> 8) as u8, i as u8);
            assert_eq!(t.attach(&gid, 7), Ok(Attached::NewGroup), "group {i}");
        }
        assert_eq!(t.attach(&v4(239, 9, 9, 9), 7), Err(McastError::NoGroup));
        assert_eq!(t.len(), MAX_GROUPS);
        // A freed group makes room.
        assert_eq!(t.detach(&v4(239, 1, 0, 5), 7), Ok(true));
        assert_eq!(t.attach(&v4(239, 9, 9, 9), 7), Ok(Attached::NewGroup));
    }

    #[test]
    fn lookups_stay_right_through_inserts_and_removals_in_any_order() {
        // A model (a plain list) against the sorted table, for a seeded
        // sequence of attaches and detaches over a few groups and QPs.
        let mut t = table(8);
        // Each group with its members, each member with its count of
        // attachments.
        type Model = Vec<([u8; 16], Vec<(u32, u32)>)>;
        let mut model: Model = Vec::new();
        let mut x: u32 = 0x1234_5678;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let gid = v4(239, 0, 0, (x % 11) as u8);
            let qpn = (x >> 8) % 6;
            let attach = x & 0x10000 != 0;
            let m = model.iter().position(|(g, _)| *g == gid);
            if attach {
                let got = t.attach(&gid, qpn);
                match m {
                    Some(i) if model[i].1.iter().any(|&(q, _)| q == qpn) => {
                        assert_eq!(got, Ok(Attached::Already));
                        model[i].1.iter_mut().filter(|(q, _)| *q == qpn).for_each(|(_, r)| *r += 1);
                    }
                    Some(i) => {
                        assert_eq!(got, Ok(Attached::Joined));
                        model[i].1.push((qpn, 1));
                    }
                    None if model.len() == 8 => assert_eq!(got, Err(McastError::NoGroup)),
                    None => {
                        assert_eq!(got, Ok(Attached::NewGroup));
                        model.push((gid, vec![(qpn, 1)]));
                    }
                }
            } else {
                let got = t.detach(&gid, qpn);
                match m.filter(|&i| model[i].1.iter().any(|&(q, _)| q == qpn)) {
                    None => assert_eq!(got, Err(McastError::NotAttached)),
                    Some(i) => {
                        model[i].1.iter_mut().filter(|(q, _)| *q == qpn).for_each(|(_, r)| *r -= 1);
                        model[i].1.retain(|&(_, r)| r > 0);
                        let gone = model[i].1.is_empty();
                        if gone {
                            model.remove(i);
                        }
                        assert_eq!(got, Ok(gone));
                    }
                }
            }
            assert_eq!(t.len(), model.len());
            for (g, qps) in &model {
                let q: Vec<u32> = qps.iter().map(|&(q, _)| q).collect();
                assert_eq!(t.members(g), q.as_slice());
            }
            for q in 0..6 {
                let any = model.iter().any(|(_, qps)| qps.iter().any(|&(x, _)| x == q));
                assert_eq!(t.group_of(q).is_some(), any);
            }
        }
    }
}
