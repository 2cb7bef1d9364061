// SPDX-License-Identifier: GPL-2.0

//! Typed views of what the core passes with a verbs call: the address of
//! an AH or a QP's path (`rdma_ah_attr`), a kernel consumer's receive work
//! requests ([`RecvWrs`]) and the work completions it polls ([`WcSink`]).

use super::bindings as b;
use super::net::Av;
use crate::transport::verbs::{wc_flags, Cqe, Sge, WcOpcode, WrOpcode, MAX_SGE};
use core::ffi::c_int;
use core::marker::PhantomData;
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
            net: NetNs(unsafe { b::ferroce_gid_attr_net(sattr) }),
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

// The engine's opcodes of kernel-only requests and their completions are
// the kernel's, which poll_cq and post_send pass through.
const _: () = {
    assert!(WcOpcode::RegMr as u32 == b::ib_wc_opcode_IB_WC_REG_MR);
    assert!(WcOpcode::LocalInv as u32 == b::ib_wc_opcode_IB_WC_LOCAL_INV);
    assert!(WcOpcode::Flush as u32 == b::ib_wc_opcode_IB_WC_FLUSH);
    assert!(WcOpcode::AtomicWrite as u32 == b::ib_wc_opcode_IB_WC_ATOMIC_WRITE);
    assert!(WrOpcode::RegMr as u32 == b::ib_wr_opcode_IB_WR_REG_MR);
    assert!(WrOpcode::LocalInv as u32 == b::ib_wr_opcode_IB_WR_LOCAL_INV);
};

/// A network namespace, as a GID entry names it: only passed back to the
/// networking stack.
#[derive(Clone, Copy)]
pub(crate) struct NetNs(*mut b::net);

// SAFETY: only passed back to the networking stack, which pins the
// namespace while the device (in it) exists.
unsafe impl Send for NetNs {}

impl NetNs {
    /// The namespace, for the networking stack's calls.
    pub(crate) fn as_ptr(self) -> *mut b::net {
        self.0
    }
}

/// Which QP a completion belongs to, as the core's `ib_wc.qp` names it: a
/// token the driver keeps with the completion and the layer writes into
/// the work completion, never dereferenced.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpToken(*mut b::ib_qp);

// SAFETY: never dereferenced; only copied into a work completion.
unsafe impl Send for QpToken {}

impl QpToken {
    /// No QP (an unused completion slot).
    pub(crate) const NONE: Self = Self(core::ptr::null_mut());

    /// The token of the core's QP `ibqp`.
    pub(crate) fn of(ibqp: *mut b::ib_qp) -> Self {
        Self(ibqp)
    }
}

/// The work completions a kernel consumer's `poll_cq` asked for (`ib_wc`
/// array of `cap` entries).
///
/// # Invariants
/// `wc` has room for `cap` entries, writable for `'a`; `n <= cap`.
pub(crate) struct WcSink<'a> {
    wc: *mut b::ib_wc,
    cap: usize,
    n: usize,
    _p: PhantomData<&'a mut b::ib_wc>,
}

impl<'a> WcSink<'a> {
    /// # Safety
    /// `wc` has room for `cap` entries, writable for `'a`.
    pub(crate) unsafe fn from_raw(wc: *mut b::ib_wc, cap: usize) -> Self {
        // INVARIANT: guaranteed by the caller; `n` is 0.
        Self { wc, cap, n: 0, _p: PhantomData }
    }

    /// Whether another completion fits.
    pub(crate) fn has_room(&self) -> bool {
        self.n < self.cap
    }

    /// How many were written.
    pub(crate) fn written(&self) -> usize {
        self.n
    }

    /// Writes the next completion: the engine's `cqe` of QP `qp`, received
    /// in a packet of IP version `ip_version` (0: not a UD receive). False
    /// when full.
    pub(crate) fn push(&mut self, cqe: &Cqe, qp: QpToken, ip_version: u8) -> bool {
        if !self.has_room() {
            return false;
        }
        let mut w = zeroed_wc();
        w.__bindgen_anon_1.wr_id = cqe.wr_id;
        w.status = cqe.status as u32;
        w.opcode = cqe.opcode as u32;
        w.vendor_err = cqe.vendor_err;
        w.byte_len = cqe.byte_len;
        w.qp = qp.0;
        let f = cqe.wc_flags;
        let mut flags = 0u32;
        if f & wc_flags::GRH != 0 {
            flags |= b::ib_wc_flags_IB_WC_GRH;
        }
        if f & wc_flags::WITH_IMM != 0 {
            flags |= b::ib_wc_flags_IB_WC_WITH_IMM;
            w.ex.imm_data = cqe.imm_data.to_be();
        }
        if f & wc_flags::WITH_INV != 0 {
            flags |= b::ib_wc_flags_IB_WC_WITH_INVALIDATE;
            w.ex.invalidate_rkey = cqe.imm_data;
        }
        if ip_version != 0 {
            flags |= b::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE;
            w.network_hdr_type = if ip_version == 6 {
                b::rdma_network_type_RDMA_NETWORK_IPV6
            } else {
                b::rdma_network_type_RDMA_NETWORK_IPV4
            } as u8;
        }
        w.wc_flags = flags as c_int;
        w.src_qp = cqe.src_qp;
        w.pkey_index = cqe.pkey_index;
        w.port_num = 1;
        // SAFETY: `n < cap` entries of room (the type invariant).
        unsafe { self.wc.add(self.n).write(w) };
        // INVARIANT: `n` stays at most `cap` (checked above).
        self.n += 1;
        true
    }
}

/// An all-zero work completion.
fn zeroed_wc() -> b::ib_wc {
    // SAFETY: all-zero is a valid `ib_wc` (integers, a null QP pointer and
    // unions of those).
    unsafe { core::mem::zeroed() }
}

/// A kernel consumer's receive work request, for one call.
pub(crate) struct RecvWr<'a> {
    raw: &'a b::ib_recv_wr,
}

impl RecvWr<'_> {
    /// The consumer's cookie.
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: `wr_id` and `wr_cqe` share the union's 8 bytes; any bits
        // are a `u64`.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }

    /// Its scatter list, refused (`EINVAL`) when longer than `max`.
    pub(crate) fn sges(&self, max: u32) -> Result<([Sge; MAX_SGE], u8)> {
        // SAFETY: the core's request names `num_sge` valid entries.
        unsafe { sge_list(self.raw.sg_list, self.raw.num_sge, max) }
    }
}

/// A kernel consumer's list of receive work requests (`ib_recv_wr`
/// chained by `next`), and where posting stopped.
///
/// # Invariants
/// `cur` is null or a valid request of the core's list, whose `next`
/// chain is valid, for `'a`.
pub(crate) struct RecvWrs<'a> {
    cur: *const b::ib_recv_wr,
    _p: PhantomData<&'a b::ib_recv_wr>,
}

impl<'a> RecvWrs<'a> {
    /// # Safety
    /// `first` is null or the first of a valid chain, valid for `'a`.
    pub(crate) unsafe fn from_raw(first: *const b::ib_recv_wr) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { cur: first, _p: PhantomData }
    }

    /// Calls `post` on each request in order; stops at the first error,
    /// leaving the list at the request that failed ([`Self::failed`]).
    pub(crate) fn each(&mut self, mut post: impl FnMut(&RecvWr<'a>) -> Result) -> Result {
        while !self.cur.is_null() {
            // SAFETY: a valid request of the list (the type invariant).
            let raw: &'a b::ib_recv_wr = unsafe { &*self.cur };
            post(&RecvWr { raw })?;
            // INVARIANT: `next` is null or valid (the chain is).
            self.cur = raw.next;
        }
        Ok(())
    }

    /// Whether the list is empty (a process's doorbell).
    pub(crate) fn is_empty(&self) -> bool {
        self.cur.is_null()
    }

    /// The request posting stopped at (for the core's `bad_wr`).
    pub(crate) fn failed(&self) -> *const b::ib_recv_wr {
        self.cur
    }
}

/// Copies a gather/scatter list (`num` entries at `list`) after checking
/// its length against the limit `max`.
///
/// # Safety
/// `list` points to `num` valid `ib_sge`s when `num > 0`.
pub(crate) unsafe fn sge_list(list: *const b::ib_sge, num: c_int, max: u32) -> Result<([Sge; MAX_SGE], u8)> {
    let n = usize::try_from(num).map_err(|_| EINVAL)?;
    if n > max as usize || n > MAX_SGE {
        return Err(EINVAL);
    }
    let mut out = [Sge::default(); MAX_SGE];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: `i < num` entries exist (the caller).
        let s = unsafe { &*list.add(i) };
        *o = Sge { addr: s.addr, length: s.length, lkey: s.lkey };
    }
    Ok((out, n as u8))
}
