// SPDX-License-Identifier: GPL-2.0

//! Typed views of what the core passes with a verbs call: the address of
//! an AH or a QP's path (`rdma_ah_attr`).

use super::bindings as b;
use crate::state::Av;
use kernel::prelude::*;

/// A verbs address (`rdma_ah_attr`), valid for one call.
///
/// # Invariants
/// `raw`'s `grh.sgid_attr`, if set, is a live GID table entry for `'a`.
pub(crate) struct AhAttr<'a> {
    raw: &'a b::rdma_ah_attr,
}

impl<'a> AhAttr<'a> {
    /// # Safety
    /// `raw`'s `grh.sgid_attr` is null or a GID table entry the core holds
    /// for `'a` (it does for the call that passed the attribute).
    pub(crate) unsafe fn from_raw(raw: &'a b::rdma_ah_attr) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { raw }
    }

    /// The RoCE v2 address vector it names: `EINVAL` unless it is a RoCE
    /// address of port 1 with a GRH whose source GID is a RoCE v2 (UDP)
    /// entry, both GIDs of one family.
    pub(crate) fn roce_av(&self) -> Result<Av> {
        let attr = self.raw;
        if attr.type_ != b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE || attr.port_num != 1 {
            return Err(EINVAL);
        }
        if u32::from(attr.ah_flags) & b::ib_ah_flags_IB_AH_GRH == 0 {
            return Err(EINVAL);
        }
        let grh = &attr.grh;
        if grh.sgid_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-null; a live GID entry (the type invariant).
        let sattr = unsafe { &*grh.sgid_attr };
        if sattr.gid_type != b::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP {
            // RoCE v1 (raw Ethernet) is not spoken.
            return Err(EINVAL);
        }
        // SAFETY: `ib_gid` is a union of byte arrays and integers of 16
        // bytes, each valid for any bits.
        let (sgid, dgid) = unsafe { (sattr.gid.raw, grh.dgid.raw) };
        let v4 = is_v4_mapped(&sgid);
        if v4 != is_v4_mapped(&dgid) {
            return Err(EINVAL);
        }
        let mut av = Av {
            ipv6: !v4,
            sip: [0; 16],
            dip: [0; 16],
            tclass: grh.traffic_class,
            hop_limit: if grh.hop_limit == 0 { 64 } else { grh.hop_limit },
            flow_label: grh.flow_label & 0xf_ffff,
            // SAFETY: a live GID entry.
            ifindex: unsafe { b::ferroce_gid_attr_ifindex(sattr) },
            // SAFETY: as above.
            net: unsafe { b::ferroce_gid_attr_net(sattr) },
        };
        if v4 {
            av.sip[..4].copy_from_slice(&sgid[12..]);
            av.dip[..4].copy_from_slice(&dgid[12..]);
        } else {
            av.sip = sgid;
            av.dip = dgid;
        }
        Ok(av)
    }
}

fn is_v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&x| x == 0) && gid[10] == 0xff && gid[11] == 0xff
}
