// SPDX-License-Identifier: GPL-2.0

//! A ferroce RDMA device: one `ib_device` bound to one Ethernet netdev, with
//! one RoCE v2 port. This file holds what the device *is* and *answers*; the
//! callbacks that reach it from the RDMA core are in `rdma/mod.rs`.

// Safe Rust only: the compiler keeps it that way.
#![forbid(unsafe_code)]

use crate::driver::quota::Kind;
use crate::rdma::{device_cap, odp_cap, DeviceAttrs, NetDev, OdpCaps, PortAttrs};
use crate::driver::tables as state;
use kernel::prelude::*;

/// The longest region (`max_mr_size`): 1 TiB. A longer registration is
/// `EINVAL`.
pub(crate) const MAX_MR_SIZE: u64 = 1 << 40;

pub(crate) use crate::rdma::ABI_VERSION;

/// Bytes of RoCEv2 encapsulation inside the netdev MTU that an IB MTU must
/// leave room for: IPv6 (40, the larger IP header), UDP (8), BTH (12), the
/// largest extended header set that rides with payload (RETH 16 + ImmDt 4,
/// or DETH 8 + ImmDt 4) and the ICRC (4).
pub(crate) const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 20 + 4;

/// Size of the port's GID table (RoCE v1/v2 entries for each IPv4/IPv6
/// address of the netdev; the core fills it).
const GID_TABLE_LEN: i32 = 1024;
/// One P_Key, the default full-membership key.
const PKEY_TABLE_LEN: u16 = 1;
/// The IBTA's largest message: 2^31 bytes.
const MAX_MSG_SIZE: u32 = 1 << 31;

/// Device attributes, as `query_device` reports them: only what works is
/// advertised. The object limits are what one user may hold of each table
/// (its quota); the rest is for other users and the kernel's consumers.
pub(crate) fn device_attrs(node_guid: u64) -> DeviceAttrs {
    let sge = crate::transport::verbs::MAX_SGE as u32;
    let rd_atomic = u32::from(crate::transport::qp::MAX_RD_ATOMIC);
    DeviceAttrs {
        sys_image_guid: node_guid,
        // The IBTA's value for "no vendor" (an IEEE OUI is 24 bits), as
        // rdma_rxe reports.
        vendor_id: 0xff_ffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_pkeys: PKEY_TABLE_LEN,
        // 4.096 us * 2^15 = 134 ms: a software device's worst-case ACK turnaround.
        local_ca_ack_delay: 15,
        allow_user_unregister: true,
        max_mr_size: MAX_MR_SIZE,
        page_size_cap: state::PAGE_SIZE as u64,
        max_qp: Kind::Qp.quota(),
        max_qp_wr: state::MAX_QP_WR,
        max_sge: sge,
        // RDMA READ gathers into as many SGEs as any request (the core's
        // rdma_rw divides by this: 0 would be a division by zero).
        max_sge_rd: sge,
        max_cq: Kind::Cq.quota(),
        max_cqe: state::MAX_CQE,
        max_mr: Kind::Mr.quota(),
        max_mw: Kind::Mr.quota(),
        max_pd: Kind::Pd.quota(),
        max_ah: Kind::Ah.quota(),
        max_srq: Kind::Srq.quota(),
        max_srq_wr: state::MAX_QP_WR,
        max_srq_sge: sge,
        max_qp_rd_atom: rd_atomic,
        max_res_rd_atom: rd_atomic.saturating_mul(Kind::Qp.quota()),
        // Atomics run under the device lock with the CPU's own atomic
        // instructions: atomic with respect to this device and the host.
        atomic_hca: true,
        // Only what ferroce does: the system image GUID is set; an RC
        // responder with no receive WQE answers RNR NAK; an AH names port
        // 1, the only one (create_ah refuses another); fast registration
        // (alloc_mr, map_mr_sg, IB_WR_REG_MR, IB_WR_LOCAL_INV) and SEND
        // with Invalidate; SRQ resize; memory windows of type 1 and 2B
        // (a process's); FLUSH for global visibility and ATOMIC WRITE. Not
        // FLUSH for persistence (no persistent memory is registered), not
        // PORT_ACTIVE_EVENT (the port's events come from the core), XRC.
        device_cap_flags: device_cap::SYS_IMAGE_GUID
            | device_cap::RC_RNR_NAK_GEN
            | device_cap::UD_AV_PORT_ENFORCE
            | device_cap::MEM_MGT_EXTENSIONS
            | device_cap::SRQ_RESIZE
            | device_cap::MEM_WINDOW
            | device_cap::MEM_WINDOW_TYPE_2B
            | device_cap::FLUSH_GLOBAL
            | device_cap::ATOMIC_WRITE,
        max_fast_reg_page_list_len: state::MAX_FAST_PAGES,
        // A user's attachments (its quota) reach at most this many groups;
        // a group holds MAX_QP_ATTACH QPs.
        max_mcast_grp: Kind::Mcast.quota(),
        max_mcast_qp_attach: crate::transport::mcast::MAX_QP_ATTACH as u32,
        max_total_mcast_qp_attach: Kind::Mcast.quota(),
        // Memory on demand for every RC operation and receive (an SRQ's
        // too), and for UD and UC sends. A UD or UC message into absent
        // pages is dropped (neither can be NAKed), so their receives and
        // UC writes are not offered; nor implicit regions (the whole
        // address space).
        odp: Some(OdpCaps {
            rc: odp_cap::SEND
                | odp_cap::RECV
                | odp_cap::WRITE
                | odp_cap::READ
                | odp_cap::ATOMIC
                | odp_cap::SRQ_RECV
                | odp_cap::FLUSH
                | odp_cap::ATOMIC_WRITE,
            uc: odp_cap::SEND,
            ud: odp_cap::SEND,
        }),
    }
}

/// Port attributes of port 1, read live from the netdev.
pub(crate) fn port_attrs(ndev: &NetDev) -> PortAttrs {
    let mtu = ndev.mtu();
    let active = ndev.port_active();
    PortAttrs {
        active,
        up: ndev.is_up(),
        active_mtu: crate::rdma::ib_mtu_from_bytes(mtu.saturating_sub(ROCE_OVERHEAD)),
        gid_tbl_len: GID_TABLE_LEN,
        pkey_tbl_len: PKEY_TABLE_LEN,
        max_msg_sz: MAX_MSG_SIZE,
    }
}

/// `rdma link add NAME type ferroce netdev DEV`: checks the request; the
/// caller (`rdma::newlink`) then allocates and registers the device.
pub(crate) fn check_newlink(name: &CStr, ndev: &NetDev) -> Result {
    if !ndev.is_ethernet() {
        pr_err!(
            "cannot add {}: netdev {} is not an Ethernet device\n",
            name.to_str().unwrap_or("?"),
            ndev.name()
        );
        return Err(EINVAL);
    }
    if ndev.has_ferroce_device() {
        pr_err!(
            "cannot add {}: netdev {} already has a ferroce device (delete it first with `rdma link delete`)\n",
            name.to_str().unwrap_or("?"),
            ndev.name()
        );
        return Err(EEXIST);
    }
    Ok(())
}
