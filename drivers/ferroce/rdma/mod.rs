// SPDX-License-Identifier: GPL-2.0

//! The boundary between ferroce and the kernel's RDMA core: module
//! registrations, the device structure, device and port queries and link
//! add/delete, with the C declarations ([`bindings`]) and the device lock
//! ([`sync`]), the objects the core allocates with the counted references
//! their destroys wait for ([`object`]), the trait the driver implements
//! and its C callbacks ([`vtable`]), the rings a process maps ([`mmap`]).
//! The other modules that face C are `net.rs` (sockets and packets),
//! `rings.rs` and the page copies of `state.rs`; `driver/`, `device.rs`,
//! `quota.rs` and the transport engine are safe Rust.

pub(crate) mod bindings;
pub(crate) mod cq;
pub(crate) mod mmap;
pub(crate) mod mr;
pub(crate) mod net;
pub(crate) mod object;
pub(crate) mod qp;
pub(crate) mod sync;
pub(crate) mod sys;
pub(crate) mod udata;
pub(crate) mod vtable;
pub(crate) mod wr;

use self::bindings as b;
use self::sync::BhLock;
use self::vtable::Driver;
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use kernel::error::{to_result, Error};
use kernel::prelude::*;

/// A C structure that the kernel links into one of its lists (the RDMA link
/// types, the netdev notifier chain) for as long as the module is loaded.
pub(crate) struct Registered<T>(pub(crate) UnsafeCell<T>);

// SAFETY: the wrapped structures are written only before registration (in
// `Registration::new`, single-threaded module init); afterwards only the
// kernel touches them, under its own locks.
unsafe impl<T> Sync for Registered<T> {}

impl<T> Registered<T> {
    pub(crate) const fn new(v: T) -> Self {
        Registered(UnsafeCell::new(v))
    }
    pub(crate) const fn as_ptr(&self) -> *mut T {
        self.0.get()
    }
}

/// The uverbs ABI version module and provider agree on (ferroce-abi.h).
pub(crate) const ABI_VERSION: u32 = b::FERROCE_UVERBS_ABI_VERSION;
/// ferroce's private `rdma_driver_id` (ferroce-abi.h).
pub(crate) const DRIVER_ID: u32 = b::FERROCE_DRIVER_ID;

static LINK_OPS: Registered<b::rdma_link_ops> = Registered(UnsafeCell::new({
    // SAFETY: all-zero is a valid `rdma_link_ops`: an unlinked list head and
    // null callbacks.
    let mut ops: b::rdma_link_ops = unsafe { core::mem::zeroed() };
    ops.type_ = b::FERROCE_LINK_TYPE.as_ptr().cast();
    ops.newlink = Some(newlink);
    ops.dellink = Some(dellink);
    ops
}));

static NETDEV_NOTIFIER: Registered<b::notifier_block> = Registered(UnsafeCell::new({
    // SAFETY: all-zero is a valid unregistered `notifier_block`.
    let mut nb: b::notifier_block = unsafe { core::mem::zeroed() };
    nb.notifier_call = Some(netdev_event);
    nb
}));

/// The module's registrations with the kernel; dropping it undoes them and
/// removes every ferroce device.
pub(crate) struct Registration(());

/// `rdma link add`'s work for the registered driver (`add_device::<T>`),
/// set by `Registration::new` before the link type is registered.
static NEWLINK: Registered<Option<AddDevice>> = Registered::new(None);

/// `add_device` for one driver.
type AddDevice = fn(&CStr, &NetDev) -> Result;

impl Registration {
    /// Registers driver `T`: the link type `ferroce`, the netdev notifier,
    /// the per-namespace sockets and the module's workqueue.
    pub(crate) fn new<T: Driver>() -> Result<Self> {
        // SAFETY: module init (single-threaded), before `rdma_link_register`
        // publishes `newlink`, its only reader; never written again.
        unsafe { *NEWLINK.as_ptr() = Some(add_device::<T>) };
        // SAFETY: creates the module's workqueue, destroyed in `drop`.
        to_result(unsafe { b::ferroce_wq_create() })?;
        if let Err(e) = net::register_pernet() {
            // SAFETY: created above, unused.
            unsafe { b::ferroce_wq_destroy() };
            return Err(e);
        }
        // SAFETY: the notifier block is static and stays valid until `drop`
        // unregisters it.
        if let Err(e) = to_result(unsafe { b::register_netdevice_notifier(NETDEV_NOTIFIER.as_ptr()) }) {
            net::unregister_pernet();
            // SAFETY: created above; nothing was queued.
            unsafe { b::ferroce_wq_destroy() };
            return Err(e);
        }
        // SAFETY: as above, for the link ops; `rdma_link_register` cannot fail.
        unsafe { b::rdma_link_register(LINK_OPS.as_ptr()) };
        Ok(Self(()))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: registered in `new`. After the link type is gone no new
        // device can appear; `ib_unregister_driver` then removes (and waits
        // for) all of ours, including queued unregistrations, before the
        // notifier that may queue them goes away.
        unsafe {
            b::rdma_link_unregister(LINK_OPS.as_ptr());
            b::ib_unregister_driver(DRIVER_ID);
            b::unregister_netdevice_notifier(NETDEV_NOTIFIER.as_ptr());
        }
        net::unregister_pernet();
        // SAFETY: every QP (and so every work item) is gone with the devices.
        unsafe { b::ferroce_wq_destroy() };
    }
}

// ---------------------------------------------------------------------------
// net_device

/// A borrowed `net_device`, valid for the callback that received it.
pub(crate) struct NetDev(*mut b::net_device);

impl NetDev {
    /// # Safety
    /// `ptr` must point to a `net_device` the caller holds a reference on for
    /// the lifetime of the returned value.
    unsafe fn from_raw(ptr: *mut b::net_device) -> Self {
        Self(ptr)
    }

    pub(crate) fn name(&self) -> &str {
        // SAFETY: by the type invariant the device is alive; its name is a
        // NUL-terminated array inside it.
        let name = unsafe { CStr::from_ptr(b::ferroce_netdev_name(self.0)) };
        name.to_str().unwrap_or("?")
    }

    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: the device is alive (type invariant).
        unsafe { b::ferroce_netdev_mtu(self.0) }
    }

    pub(crate) fn is_up(&self) -> bool {
        // SAFETY: the device is alive (type invariant).
        unsafe { b::ferroce_netdev_is_up(self.0) }
    }

    pub(crate) fn port_active(&self) -> bool {
        // SAFETY: the device is alive (type invariant).
        unsafe { b::ferroce_port_state(self.0) == b::ib_port_state_IB_PORT_ACTIVE }
    }

    pub(crate) fn is_ethernet(&self) -> bool {
        // SAFETY: the device is alive (type invariant).
        unsafe { b::ferroce_netdev_is_ether(self.0) }
    }

    /// The netdev's MAC turned into an EUI-64, in network byte order.
    pub(crate) fn eui64(&self) -> u64 {
        let mut mac = [0u8; 6];
        let mut guid: u64 = 0;
        // SAFETY: the device is alive; `mac` has room for the 6 bytes asked
        // for and `guid` for the 8 written.
        unsafe {
            b::ferroce_netdev_hwaddr(self.0, mac.as_mut_ptr(), mac.len() as u32);
            b::ferroce_eui48_to_guid(core::ptr::from_mut(&mut guid).cast(), mac.as_ptr());
        }
        guid
    }

    pub(crate) fn has_ferroce_device(&self) -> bool {
        // SAFETY: the device is alive; a non-null result carries a reference
        // that is dropped at once.
        unsafe {
            let ibdev = b::ib_device_get_by_netdev(self.0, DRIVER_ID);
            if ibdev.is_null() {
                false
            } else {
                b::ib_device_put(ibdev);
                true
            }
        }
    }
}

/// A netdev reference taken from an `ib_device`'s port, dropped with the value.
struct NetDevRef(NetDev);

impl NetDevRef {
    fn of_port(ibdev: *mut b::ib_device, port: u32) -> Option<Self> {
        // SAFETY: `ibdev` is a live registered device (callers are RDMA core
        // callbacks); a non-null result carries a reference we own.
        let ndev = unsafe { b::ib_device_get_netdev(ibdev, port) };
        if ndev.is_null() {
            None
        } else {
            // SAFETY: we hold the reference until `drop`.
            Some(Self(unsafe { NetDev::from_raw(ndev) }))
        }
    }
}

impl Drop for NetDevRef {
    fn drop(&mut self) {
        // SAFETY: releases the reference taken in `of_port`.
        unsafe { b::ferroce_dev_put((self.0).0) };
    }
}

/// The IB MTU enum value for a payload size in bytes.
pub(crate) fn ib_mtu_from_bytes(bytes: u32) -> u32 {
    // SAFETY: a pure function of its argument.
    unsafe { b::ferroce_ib_mtu_int_to_enum(bytes.min(i32::MAX as u32) as i32) }
}

// ---------------------------------------------------------------------------
// Attributes as the device logic describes them, written into the core's
// structures here.

/// What `query_device` answers (`ib_device_attr`), as the driver decides.
pub(crate) struct DeviceAttrs {
    pub(crate) sys_image_guid: u64,
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
    pub(crate) hw_ver: u32,
    pub(crate) max_pkeys: u16,
    pub(crate) local_ca_ack_delay: u8,
    pub(crate) allow_user_unregister: bool,
    pub(crate) max_mr_size: u64,
    pub(crate) page_size_cap: u64,
    pub(crate) max_qp: u32,
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_sge_rd: u32,
    pub(crate) max_cq: u32,
    pub(crate) max_cqe: u32,
    pub(crate) max_mr: u32,
    /// Memory windows (they share the regions' table).
    pub(crate) max_mw: u32,
    pub(crate) max_pd: u32,
    pub(crate) max_ah: u32,
    pub(crate) max_srq: u32,
    pub(crate) max_srq_wr: u32,
    pub(crate) max_srq_sge: u32,
    pub(crate) max_qp_rd_atom: u32,
    pub(crate) max_res_rd_atom: u32,
    /// Atomics are atomic with respect to this device and the host CPU.
    pub(crate) atomic_hca: bool,
    /// `IB_DEVICE_*` capabilities ([`device_cap`]).
    pub(crate) device_cap_flags: u64,
    pub(crate) max_fast_reg_page_list_len: u32,
    /// Multicast groups, QPs per group, and attachments in all.
    pub(crate) max_mcast_grp: u32,
    pub(crate) max_mcast_qp_attach: u32,
    pub(crate) max_total_mcast_qp_attach: u32,
    /// Memory on demand: `IBK_ON_DEMAND_PAGING` and the `odp_caps` below.
    pub(crate) odp: Option<OdpCaps>,
}

/// What memory on demand serves (`ib_odp_caps`), per transport:
/// `IB_ODP_SUPPORT_*` bits.
pub(crate) struct OdpCaps {
    pub(crate) rc: u32,
    pub(crate) uc: u32,
    pub(crate) ud: u32,
}

/// The `IB_ODP_SUPPORT_*` bits of one transport.
pub(crate) mod odp_cap {
    use super::b;
    pub(crate) const SEND: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND;
    pub(crate) const RECV: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV;
    pub(crate) const WRITE: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE;
    pub(crate) const READ: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ;
    pub(crate) const ATOMIC: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC;
    pub(crate) const SRQ_RECV: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
    pub(crate) const FLUSH: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_FLUSH;
    pub(crate) const ATOMIC_WRITE: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC_WRITE;
}

/// The `ib_device_cap_flags` a driver may claim in
/// [`DeviceAttrs::device_cap_flags`].
pub(crate) mod device_cap {
    use super::b;
    /// `sys_image_guid` is set.
    pub(crate) const SYS_IMAGE_GUID: u64 = b::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID;
    /// An RC responder without a receive WQE answers with an RNR NAK.
    pub(crate) const RC_RNR_NAK_GEN: u64 = b::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN;
    /// An address handle's port must be the QP's.
    pub(crate) const UD_AV_PORT_ENFORCE: u64 = b::ib_device_cap_flags_IB_DEVICE_UD_AV_PORT_ENFORCE;
    /// Fast registration (REG_MR, LOCAL_INV) and SEND with Invalidate.
    pub(crate) const MEM_MGT_EXTENSIONS: u64 = b::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS;
    /// An SRQ may be resized (`modify_srq` of `max_wr`).
    pub(crate) const SRQ_RESIZE: u64 = b::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE;
    /// Memory windows (`alloc_mw`, bind, remote access through them).
    pub(crate) const MEM_WINDOW: u64 = b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW;
    /// Type 2B windows (bound by a work request, invalidated by one).
    pub(crate) const MEM_WINDOW_TYPE_2B: u64 = b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B;
    /// FLUSH for global visibility (IBTA 1.5).
    pub(crate) const FLUSH_GLOBAL: u64 = b::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL;
    /// ATOMIC WRITE (IBTA 1.5).
    pub(crate) const ATOMIC_WRITE: u64 = b::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE;
}

pub(crate) struct PortAttrs {
    pub(crate) active: bool,
    pub(crate) up: bool,
    pub(crate) active_mtu: u32,
    pub(crate) gid_tbl_len: i32,
    pub(crate) pkey_tbl_len: u16,
    pub(crate) max_msg_sz: u32,
}

// ---------------------------------------------------------------------------
// The ferroce device as the RDMA core allocates it.

/// What the device counts (`rdma statistic show link NAME/1`): every packet
/// received or sent, and every reason one was dropped.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    RxPackets,
    RxAccepted,
    RxMalformed,
    RxBadIcrc,
    RxNoQp,
    RxDropped,
    RxNak,
    RxNoMem,
    TxPackets,
    TxNoRoute,
    TxNoAh,
    TxNoMem,
    TxMalformed,
    CqFull,
    MemBadKey,
    MemBadPd,
    MemNoAccess,
    MemOutOfBounds,
    TxLocal,
    TxRetransmit,
    /// A process's ring claimed more requests than it holds (a CQ ring:
    /// more unread completions, the CQ's error event).
    RingCorrupt,
    /// A request in a process's ring was malformed (its QP went to ERR).
    RingBadWqe,
    /// Doorbells (empty post_send calls of a QP with rings).
    RingDoorbell,
    /// An RC packet whose source or destination address is not its QP's
    /// path (a spoofed or misrouted packet).
    RxAddrMismatch,
    /// A packet to this device found its local queue full (dropped).
    TxLocalFull,
    /// An access to memory on demand found a page absent (nothing was
    /// touched; the access is retried after a fault).
    OdpAbsent,
    /// Faults the device ran for memory on demand (its work item).
    OdpFault,
    /// Faults that failed (the range is refused until one succeeds).
    OdpFaultFailed,
    /// A process's QP asked for doorbells: its sender found nothing new
    /// and did not linger (nothing taken since its last look, a long
    /// last request, or its lingers gave up).
    RingAskIdle,
    /// ...after a linger that found too little.
    RingAskLinger,
    /// ...because the device had no room for another lingering QP.
    RingAskFull,
    /// An RC QP waited for room in its destination's shared send window.
    TxWindowWait,
    /// A loss or ACK timeout cut a destination's shared send window.
    TxWindowCut,
    /// The destination window that moved last, in packets (a gauge).
    TxWindow,
    /// A datagram that arrived inside a bulk send of this CPU, handed to
    /// the device's receive work item on another CPU.
    RxDeferred,
    /// ...that found the hand-off queue full (dropped).
    RxDeferFull,
    /// `RxDropped` (the engine's drops, `rx_drop_transport`) by reason
    /// (`transport::engine::DropReason`): `rx_qp_*`, which sum to it.
    RxDropHeader,
    RxDropKey,
    RxDropState,
    RxDropSequence,
    RxDropNoWqe,
    RxDropLength,
    RxDropInvalid,
    RxDropBusy,
    RxDropMemory,
    /// Runs of QPs' send continuations at high priority...
    TxContHigh,
    /// ...and at normal priority (`transport::prio`).
    TxContNormal,
}

const NUM_COUNTERS: usize = 47;

/// Counter names, in `Counter` order.
static COUNTER_DESCS: Registered<[b::rdma_stat_desc; NUM_COUNTERS]> = Registered(UnsafeCell::new({
    const fn d(name: &'static CStr) -> b::rdma_stat_desc {
        b::rdma_stat_desc { name: name.as_ptr(), flags: 0, priv_: core::ptr::null() }
    }
    [
        d(c"rx_packets"),
        d(c"rx_accepted"),
        d(c"rx_drop_malformed"),
        d(c"rx_drop_bad_icrc"),
        d(c"rx_drop_no_qp"),
        d(c"rx_drop_transport"),
        d(c"rx_seq_err_or_nak"),
        d(c"rx_drop_no_mem"),
        d(c"tx_packets"),
        d(c"tx_drop_no_route"),
        d(c"tx_drop_no_ah"),
        d(c"tx_drop_no_mem"),
        d(c"tx_drop_malformed"),
        d(c"cq_full"),
        d(c"mem_err_bad_key"),
        d(c"mem_err_pd_mismatch"),
        d(c"mem_err_no_access"),
        d(c"mem_err_out_of_bounds"),
        d(c"tx_local"),
        d(c"tx_retransmit"),
        d(c"ring_err_corrupt_index"),
        d(c"ring_err_bad_wqe"),
        d(c"ring_doorbell"),
        d(c"rx_drop_addr_mismatch"),
        d(c"tx_drop_local_full"),
        d(c"odp_absent"),
        d(c"odp_faults"),
        d(c"odp_fault_failed"),
        d(c"ring_db_ask_idle"),
        d(c"ring_db_ask_linger"),
        d(c"ring_db_ask_full"),
        d(c"tx_window_wait"),
        d(c"tx_window_cut"),
        d(c"tx_window"),
        d(c"rx_deferred"),
        d(c"rx_drop_deferred_full"),
        d(c"rx_qp_bad_header"),
        d(c"rx_qp_bad_key"),
        d(c"rx_qp_state"),
        d(c"rx_qp_sequence"),
        d(c"rx_qp_no_wqe"),
        d(c"rx_qp_length"),
        d(c"rx_qp_invalid"),
        d(c"rx_qp_busy"),
        d(c"rx_qp_memory"),
        d(c"tx_cont_high"),
        d(c"tx_cont_normal"),
    ]
}));

/// A device of driver `T`. The RDMA core allocates it (`_ib_alloc_device`
/// with our size, zeroed) and frees it; `ib_device` must come first.
///
/// # Invariants
/// `state` is initialised before registration and dropped in
/// `dealloc_driver`; `ndev` is the netdev the core holds for port 1;
/// `local_queue` and `local_work` are set up before registration;
/// `routes` is the device's route cache or null, freed in `dealloc_driver`.
#[repr(C)]
pub(crate) struct Device<T: Driver> {
    ib: b::ib_device,
    pub(crate) state: BhLock<T::State>,
    ndev: *mut b::net_device,
    counters: [AtomicU64; NUM_COUNTERS],
    ip_id: AtomicU16,
    /// 1 while a pass delivers the local queue (the driver's scheduler).
    pub(crate) local_depth: AtomicU32,
    /// Packets from the device to itself, waiting for delivery.
    local_queue: b::sk_buff_head,
    /// Continues a long local delivery in process context.
    local_work: b::work_struct,
    /// Faults in the pages of memory on demand that the datapath found
    /// absent ([`Driver::fault_work`]).
    fault_work: b::work_struct,
    /// Watches the send rings of the QPs that linger
    /// ([`Driver::linger_work`]).
    linger_work: b::work_struct,
    /// The routes the device's packets took last, per CPU and destination
    /// (`ferroce_routes_alloc`; null: every packet looks its route up).
    pub(crate) routes: *mut b::ferroce_routes,
    /// Datagrams handed to another CPU ([`net::Device::rx_defer`]), and
    /// the work item that receives them there.
    rx_queue: b::sk_buff_head,
    rx_work: b::work_struct,
    /// Handed-off datagrams not yet received (queued or being received):
    /// while there are any, every datagram takes the same way, in order.
    rx_pending: AtomicU32,
    /// The CPU the hand-off goes to.
    rx_cpu: core::sync::atomic::AtomicI32,
    /// Runs, after a softirq's receive pass, the send sides of the QPs
    /// that received in it ([`Driver::burst_work`]).
    burst_work: b::work_struct,
}

impl<T: Driver> Device<T> {
    const IB_FIRST: () = assert!(core::mem::offset_of!(Self, ib) == 0);

    /// # Safety
    /// `ibdev` must be a live device of driver `T` (registered, or being
    /// set up by `add_device`).
    pub(crate) unsafe fn from_ib<'a>(ibdev: *mut b::ib_device) -> &'a Self {
        let () = Self::IB_FIRST;
        // SAFETY: guaranteed by the caller; ib_device is at offset 0.
        unsafe { &*ibdev.cast::<Self>() }
    }

    /// Sets up a new device's fields (all but the ops).
    ///
    /// # Safety
    /// `this` is a fresh, zeroed, unregistered device of
    /// `size_of::<Self>()` bytes that the caller exclusively owns.
    unsafe fn init(this: *mut Self, state: T::State, ndev: &NetDev, routes: *mut b::ferroce_routes) {
        // The lock and its value, initialised in place (the memory never
        // moves: the core frees it after `dealloc_driver`); a lock with a
        // lockdep class of its own. Initialising a lock cannot fail.
        let lock = BhLock::new(state, c"ferroce_device_state", kernel::static_lock_class!());
        // SAFETY: the field is ours, zeroed and not yet initialised.
        let _ = unsafe { lock.__pinned_init(core::ptr::addr_of_mut!((*this).state)) };
        // INVARIANT: the state, the local queue and work item and the
        // netdev are set up here, before the caller registers the device.
        // SAFETY: ours; set up once, before anything can reach them.
        unsafe {
            b::ferroce_skbq_init(core::ptr::addr_of_mut!((*this).local_queue));
            b::ferroce_work_init(core::ptr::addr_of_mut!((*this).local_work), Some(net::device_work::<T>));
            b::ferroce_work_init(core::ptr::addr_of_mut!((*this).fault_work), Some(fault_work::<T>));
            b::ferroce_work_init(core::ptr::addr_of_mut!((*this).linger_work), Some(linger_work::<T>));
            b::ferroce_skbq_init(core::ptr::addr_of_mut!((*this).rx_queue));
            b::ferroce_work_init(core::ptr::addr_of_mut!((*this).rx_work), Some(net::rx_work::<T>));
            b::ferroce_work_init(core::ptr::addr_of_mut!((*this).burst_work), Some(net::burst_work::<T>));
            (*this).ndev = ndev.0;
            (*this).routes = routes;
        }
        // SAFETY: ours and unregistered: no one else reads it yet.
        let ib = unsafe { &mut (*this).ib };
        ib.uverbs_cmd_mask |= (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND)
            | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_RECV)
            | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POLL_CQ)
            | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ)
            | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SRQ_RECV);
        ib.node_type = b::RDMA_NODE_IB_CA as u8;
        ib.phys_port_cnt = 1;
        ib.num_comp_vectors = c_int::try_from(cq::num_comp_vectors()).unwrap_or(c_int::MAX);
        ib.local_dma_lkey = 0;
        ib.node_guid = ndev.eui64();
        for (d, s) in ib.node_desc.iter_mut().zip(b"ferroce".iter()) {
            *d = *s as c_char;
        }
        // SAFETY: as above.
        unsafe { b::ferroce_mark_name_assigned_by_user(ib) };
    }

    pub(crate) fn ib_ptr(&self) -> *mut b::ib_device {
        core::ptr::addr_of!(self.ib).cast_mut()
    }

    /// The node GUID (set before registration, never changed).
    pub(crate) fn node_guid(&self) -> u64 {
        self.ib.node_guid
    }

    pub(crate) fn ndev_mtu(&self) -> u32 {
        // SAFETY: the core holds the netdev while the device exists.
        unsafe { b::ferroce_netdev_mtu(self.ndev) }
    }

    /// Joins (`join`) or leaves the IP multicast group of the multicast
    /// GID `gid` on the device's netdev, so that the group's datagrams
    /// reach the UDP sockets (the IP stack counts joins). Process context:
    /// it takes RTNL.
    pub(crate) fn mcast_join(&self, gid: &[u8; 16], join: bool) -> Result {
        // SAFETY: the core holds the netdev while the device exists; the
        // 16 bytes of `gid` are read during the call.
        kernel::error::to_result(unsafe { b::ferroce_mc_join(self.ndev, gid.as_ptr(), join) })
    }

    pub(crate) fn count(&self, c: Counter) {
        if let Some(x) = self.counters.get(c as usize) {
            x.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets gauge `c` (a value now, not a count) to `v`.
    pub(crate) fn set_gauge(&self, c: Counter, v: u64) {
        if let Some(x) = self.counters.get(c as usize) {
            x.store(v, Ordering::Relaxed);
        }
    }

    fn local_queue(&self) -> *mut b::sk_buff_head {
        core::ptr::addr_of!(self.local_queue).cast_mut()
    }

    fn local_work(&self) -> *mut b::work_struct {
        core::ptr::addr_of!(self.local_work).cast_mut()
    }

    /// # Safety
    /// `w` must be the `local_work` of a live device of driver `T`.
    pub(crate) unsafe fn from_local_work<'a>(w: *mut b::work_struct) -> &'a Self {
        // SAFETY: guaranteed by the caller (container_of).
        unsafe { &*w.byte_sub(core::mem::offset_of!(Self, local_work)).cast::<Self>() }
    }

    /// # Safety
    /// `w` must be the `rx_work` of a live device of driver `T`.
    pub(crate) unsafe fn from_rx_work<'a>(w: *mut b::work_struct) -> &'a Self {
        // SAFETY: guaranteed by the caller (container_of).
        unsafe { &*w.byte_sub(core::mem::offset_of!(Self, rx_work)).cast::<Self>() }
    }

    fn rx_queue(&self) -> *mut b::sk_buff_head {
        core::ptr::addr_of!(self.rx_queue).cast_mut()
    }

    fn rx_work(&self) -> *mut b::work_struct {
        core::ptr::addr_of!(self.rx_work).cast_mut()
    }

    /// # Safety
    /// `w` must be the `burst_work` of a live device of driver `T`.
    pub(crate) unsafe fn from_burst_work<'a>(w: *mut b::work_struct) -> &'a Self {
        // SAFETY: guaranteed by the caller (container_of).
        unsafe { &*w.byte_sub(core::mem::offset_of!(Self, burst_work)).cast::<Self>() }
    }

    fn burst_work(&self) -> *mut b::work_struct {
        core::ptr::addr_of!(self.burst_work).cast_mut()
    }

    /// Queues the device's fault work ([`Driver::fault_work`]); any
    /// context. A queued item that has not started runs once for all.
    pub(crate) fn queue_fault_work(&self) {
        // SAFETY: the work item is set up with the device and cancelled in
        // `dealloc_driver`, before the device's memory goes.
        unsafe { b::ferroce_work_queue(core::ptr::addr_of!(self.fault_work).cast_mut()) }
    }

    /// Queues the device's linger work ([`Driver::linger_work`]) on the
    /// QP workqueue (from a process's system call: on another CPU than
    /// the process's); any context.
    pub(crate) fn queue_linger_work(&self) {
        // SAFETY: the work item is set up with the device and cancelled in
        // `dealloc_driver`, before the device's memory goes.
        unsafe { b::ferroce_linger_work_queue(core::ptr::addr_of!(self.linger_work).cast_mut()) }
    }

    pub(crate) fn next_ip_id(&self) -> u16 {
        self.ip_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The device's fault work item.
///
/// # Safety
/// Only the kernel calls it, for the `fault_work` of a live device (it is
/// cancelled before the device is freed).
unsafe extern "C" fn fault_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: as above (container_of).
    let dev = unsafe { &*w.byte_sub(core::mem::offset_of!(Device<T>, fault_work)).cast::<Device<T>>() };
    T::fault_work(dev);
}

/// The device's linger work item.
///
/// # Safety
/// Only the kernel calls it, for the `linger_work` of a live device (it is
/// cancelled before the device is freed).
unsafe extern "C" fn linger_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: as above (container_of).
    let dev = unsafe { &*w.byte_sub(core::mem::offset_of!(Device<T>, linger_work)).cast::<Device<T>>() };
    T::linger_work(dev);
}

/// A random number from the kernel's generator (`get_random_u32`).
pub(crate) fn random_u32() -> u32 {
    // SAFETY: no arguments; callable in any context.
    unsafe { b::ferroce_random_u32() }
}

/// The module parameter a test sets: where the PD table's cursor starts.
pub(crate) fn test_pd_start() -> u32 {
    // SAFETY: reads a module parameter.
    unsafe { b::ferroce_test_pd_start() }
}

/// The `user_quota` module parameter (0: the default quotas).
pub(crate) fn user_quota() -> u32 {
    // SAFETY: reads a module parameter.
    unsafe { b::ferroce_user_quota() }
}

/// EOPNOTSUPP, which the kernel crate does not name.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-95)
}

pub(crate) fn errno(r: Result) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

fn device_ops<T: Driver>() -> b::ib_device_ops {
    // SAFETY: all-zero is a valid `ib_device_ops`: no callbacks, no sizes.
    let mut ops: b::ib_device_ops = unsafe { core::mem::zeroed() };
    ops.owner = crate::THIS_MODULE.as_ptr().cast();
    ops.driver_id = DRIVER_ID;
    ops.uverbs_abi_ver = ABI_VERSION;
    ops.set_uverbs_robust_udata(1);
    ops.query_device = Some(query_device::<T>);
    ops.query_port = Some(query_port::<T>);
    ops.query_pkey = Some(query_pkey);
    ops.get_port_immutable = Some(get_port_immutable::<T>);
    ops.get_link_layer = Some(get_link_layer);
    // Rings a process maps (ferroce-abi.h): the memory belongs to the mmap
    // entry and is freed with its last reference.
    ops.mmap = Some(b::ferroce_mmap);
    ops.mmap_free = Some(b::ferroce_mmap_free);
    ops.dealloc_driver = Some(dealloc_driver::<T>);
    ops.alloc_hw_port_stats = Some(alloc_hw_port_stats);
    ops.get_hw_stats = Some(get_hw_stats::<T>);
    // The verbs: the Driver trait's callbacks.
    vtable::Adapter::<T>::fill(&mut ops);
    ops
}

/// `rdma_link_ops.newlink`: `rdma link add NAME type ferroce netdev DEV`.
///
/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn newlink(name: *const c_char, ndev: *mut b::net_device) -> c_int {
    // SAFETY: the core passes a NUL-terminated device name and a netdev it
    // holds a reference on for the duration of the call.
    let (name, ndev) = unsafe { (CStr::from_ptr(name), NetDev::from_raw(ndev)) };
    // SAFETY: written once before the link type was registered.
    let Some(add) = (unsafe { *NEWLINK.as_ptr() }) else { return ENODEV.to_errno() };
    errno(add(name, &ndev))
}

fn add_device<T: Driver>(name: &CStr, ndev: &NetDev) -> Result {
    T::check_newlink(name, ndev)?;
    net::ensure_sockets::<T>(ndev)?;
    let state = T::new_state()?;
    // SAFETY: a per-CPU allocation (GFP_KERNEL: `newlink` may sleep),
    // handed to the device below or freed here.
    let routes = unsafe { b::ferroce_routes_alloc() };
    if routes.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: allocates a zeroed device of our size in the initial network
    // namespace; checked for null below.
    let ibdev = unsafe { b::_ib_alloc_device(core::mem::size_of::<Device<T>>(), b::ferroce_init_net()) };
    if ibdev.is_null() {
        // SAFETY: ours, never used.
        unsafe { b::ferroce_routes_free(routes) };
        return Err(ENOMEM);
    }
    // SAFETY: fresh, zeroed, unregistered, ours; `routes` is the device's
    // from here (`dealloc_driver` frees it).
    unsafe { Device::<T>::init(ibdev.cast(), state, ndev, routes) };
    let ops = device_ops::<T>();
    // SAFETY: `ibdev` is ours and set up. From the ops on, `dealloc_driver`
    // drops the state: on a failed registration through our
    // `ib_dealloc_device` call, after a successful one through the core's.
    // The device is not touched after a failure.
    let ret = unsafe {
        b::ib_set_device_ops(ibdev, &ops);
        let mut ret = b::ib_device_set_netdev(ibdev, ndev.0, 1);
        if ret == 0 {
            ret = b::ib_register_device(ibdev, name.as_ptr(), core::ptr::null_mut());
        }
        if ret != 0 {
            b::ib_dealloc_device(ibdev);
        }
        ret
    };
    match ret {
        0 => {
            pr_info!(
                "{}: created on {} (RoCE v2, MTU {})\n",
                name.to_str().unwrap_or("?"),
                ndev.name(),
                ndev.mtu()
            );
            Ok(())
        }
        // The core's name check answers ENFILE; say what it means.
        e if e == ENFILE.to_errno() => {
            pr_err!(
                "cannot add {}: an RDMA device of that name already exists\n",
                name.to_str().unwrap_or("?")
            );
            Err(EEXIST)
        }
        e => {
            pr_err!("cannot add {}: registration failed ({})\n", name.to_str().unwrap_or("?"), e);
            Err(Error::from_errno(e))
        }
    }
}

/// `rdma_link_ops.dellink`: nothing to release before the core unregisters
/// the device itself (it must not be unregistered here).
///
/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn dellink(_ibdev: *mut b::ib_device) -> c_int {
    0
}

/// The netdev notifier: a ferroce device goes away with its netdev.
///
/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn netdev_event(
    _nb: *mut b::notifier_block,
    event: c_ulong,
    ptr: *mut c_void,
) -> c_int {
    if event != c_ulong::from(b::netdev_cmd_NETDEV_UNREGISTER) {
        return b::NOTIFY_DONE as c_int;
    }
    // SAFETY: netdev notifier chains pass a `netdev_notifier_info`; the
    // netdev is alive for the duration of the call. A non-null device comes
    // with a reference, released below.
    unsafe {
        let ndev = b::ferroce_notifier_info_to_dev(ptr);
        let ibdev = b::ib_device_get_by_netdev(ndev, DRIVER_ID);
        if !ibdev.is_null() {
            b::ib_unregister_device_queued(ibdev);
            b::ib_device_put(ibdev);
        }
    }
    b::NOTIFY_DONE as c_int
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn dealloc_driver<T: Driver>(ibdev: *mut b::ib_device) {
    let fdev = ibdev.cast::<Device<T>>();
    // SAFETY: the core calls this once, after unregistration, when no verbs
    // call or packet can reach the device; it frees the memory afterwards.
    // The work items may still be queued: wait for them first.
    unsafe {
        b::ferroce_work_cancel_sync(core::ptr::addr_of_mut!((*fdev).local_work));
        b::ferroce_work_cancel_sync(core::ptr::addr_of_mut!((*fdev).fault_work));
        b::ferroce_work_cancel_sync(core::ptr::addr_of_mut!((*fdev).linger_work));
        b::ferroce_work_cancel_sync(core::ptr::addr_of_mut!((*fdev).rx_work));
        b::ferroce_work_cancel_sync(core::ptr::addr_of_mut!((*fdev).burst_work));
        b::ferroce_skbq_purge(core::ptr::addr_of_mut!((*fdev).rx_queue));
        // An asynchronous prefetch (`ibv_advise_mr`) holds its region's
        // umem, whose release needs the device: let them finish first.
        b::ferroce_wq_flush();
        b::ferroce_skbq_purge(core::ptr::addr_of_mut!((*fdev).local_queue));
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*fdev).state));
    }
    // SAFETY: as above; nothing sends any more: the routes (and the
    // references they hold) go, once.
    unsafe {
        b::ferroce_routes_free((*fdev).routes);
        (*fdev).routes = core::ptr::null_mut();
    }
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn alloc_hw_port_stats(_ibdev: *mut b::ib_device, _port: u32) -> *mut b::rdma_hw_stats {
    // SAFETY: the descriptor table is static.
    unsafe {
        b::rdma_alloc_hw_stats_struct(
            COUNTER_DESCS.as_ptr().cast(),
            NUM_COUNTERS as c_int,
            core::ffi::c_ulong::from(b::RDMA_HW_STATS_DEFAULT_LIFESPAN),
        )
    }
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn get_hw_stats<T: Driver>(
    ibdev: *mut b::ib_device,
    stats: *mut b::rdma_hw_stats,
    _port: u32,
    _index: c_int,
) -> c_int {
    // SAFETY: `stats` was allocated by `alloc_hw_port_stats` with
    // NUM_COUNTERS values; `ibdev` is our live device.
    unsafe {
        let dev = Device::<T>::from_ib(ibdev);
        let values = (*stats).value.as_mut_slice(NUM_COUNTERS);
        for (v, c) in values.iter_mut().zip(dev.counters.iter()) {
            *v = c.load(Ordering::Relaxed);
        }
    }
    NUM_COUNTERS as c_int
}

/// A count for a C `int` field (saturating).
fn int(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn query_device<T: Driver>(
    ibdev: *mut b::ib_device,
    attr: *mut b::ib_device_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: the core passes its udata (or null) for the call.
    if unsafe { b::ferroce_udata_inlen(udata) != 0 || b::ferroce_udata_outlen(udata) != 0 } {
        return EINVAL.to_errno();
    }
    // SAFETY: `ibdev` is a live device of driver `T`; `attr` points to a
    // zeroed attribute structure the core owns for the call.
    let (dev, out) = unsafe { (Device::<T>::from_ib(ibdev), &mut *attr) };
    let a = T::device_attrs(dev);
    out.sys_image_guid = a.sys_image_guid;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.max_pkeys = a.max_pkeys;
    out.local_ca_ack_delay = a.local_ca_ack_delay;
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.max_qp = int(a.max_qp);
    out.max_qp_wr = int(a.max_qp_wr);
    out.max_send_sge = int(a.max_sge);
    out.max_recv_sge = int(a.max_sge);
    out.max_sge_rd = int(a.max_sge_rd);
    out.max_cq = int(a.max_cq);
    out.max_cqe = int(a.max_cqe);
    out.max_mr = int(a.max_mr);
    out.max_mw = int(a.max_mw);
    out.max_pd = int(a.max_pd);
    out.max_ah = int(a.max_ah);
    out.max_srq = int(a.max_srq);
    out.max_srq_wr = int(a.max_srq_wr);
    out.max_srq_sge = int(a.max_srq_sge);
    out.max_qp_rd_atom = int(a.max_qp_rd_atom);
    out.max_qp_init_rd_atom = int(a.max_qp_rd_atom);
    out.max_res_rd_atom = int(a.max_res_rd_atom);
    if a.atomic_hca {
        out.atomic_cap = b::ib_atomic_cap_IB_ATOMIC_HCA;
    }
    out.device_cap_flags = a.device_cap_flags;
    out.max_fast_reg_page_list_len = a.max_fast_reg_page_list_len;
    out.max_mcast_grp = int(a.max_mcast_grp);
    out.max_mcast_qp_attach = int(a.max_mcast_qp_attach);
    out.max_total_mcast_qp_attach = int(a.max_total_mcast_qp_attach);
    if a.allow_user_unregister {
        out.kernel_cap_flags |= u64::from(b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG);
    }
    if let Some(o) = &a.odp {
        out.kernel_cap_flags |= u64::from(b::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING);
        out.odp_caps.general_caps = u64::from(b::ib_odp_general_cap_bits_IB_ODP_SUPPORT);
        out.odp_caps.per_transport_caps.rc_odp_caps = o.rc;
        out.odp_caps.per_transport_caps.uc_odp_caps = o.uc;
        out.odp_caps.per_transport_caps.ud_odp_caps = o.ud;
    }
    0
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn query_port<T: Driver>(
    ibdev: *mut b::ib_device,
    port: u32,
    attr: *mut b::ib_port_attr,
) -> c_int {
    if port != 1 {
        return EINVAL.to_errno();
    }
    let Some(ndev) = NetDevRef::of_port(ibdev, port) else {
        return ENODEV.to_errno();
    };
    let p = T::port_attrs(&ndev.0);
    // SAFETY: `attr` points to a zeroed port attribute structure the core
    // owns for the call.
    let out = unsafe { &mut *attr };
    out.state = if p.active {
        b::ib_port_state_IB_PORT_ACTIVE
    } else {
        b::ib_port_state_IB_PORT_DOWN
    };
    out.phys_state = if p.active {
        b::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP
    } else if p.up {
        b::ib_port_phys_state_IB_PORT_PHYS_STATE_POLLING
    } else {
        b::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED
    } as u8;
    out.max_mtu = b::ib_mtu_IB_MTU_4096;
    out.active_mtu = p.active_mtu;
    out.gid_tbl_len = p.gid_tbl_len;
    out.port_cap_flags = b::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
    out.max_msg_sz = p.max_msg_sz;
    out.pkey_tbl_len = p.pkey_tbl_len;
    out.max_vl_num = 1;
    // Speed and width of the netdev, as the core derives them for RoCE.
    let mut speed: u16 = 0;
    let mut width: u8 = 0;
    // SAFETY: our live device; the outputs are ours.
    if unsafe { b::ib_get_eth_speed(ibdev, port, &mut speed, &mut width) } == 0 {
        out.active_speed = speed;
        out.active_width = width;
    }
    0
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn query_pkey(
    _ibdev: *mut b::ib_device,
    port: u32,
    index: u16,
    pkey: *mut u16,
) -> c_int {
    if port != 1 || index != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: `pkey` points to a u16 the core owns for the call.
    unsafe { *pkey = 0xffff };
    0
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn get_port_immutable<T: Driver>(
    ibdev: *mut b::ib_device,
    port: u32,
    imm: *mut b::ib_port_immutable,
) -> c_int {
    if port != 1 {
        return EINVAL.to_errno();
    }
    let Some(ndev) = NetDevRef::of_port(ibdev, port) else {
        return ENODEV.to_errno();
    };
    let p = T::port_attrs(&ndev.0);
    // SAFETY: `imm` points to a structure the core owns for the call.
    unsafe {
        let out = &mut *imm;
        out.core_cap_flags = b::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
        out.pkey_tbl_len = p.pkey_tbl_len.into();
        out.gid_tbl_len = p.gid_tbl_len;
        out.max_mad_size = b::IB_MGMT_MAD_SIZE;
    }
    0
}

/// # Safety
/// Only the kernel calls it, through the operations structure or
/// registration that names it, with the arguments its contract names.
unsafe extern "C" fn get_link_layer(_ibdev: *mut b::ib_device, _port: u32) -> b::rdma_link_layer {
    b::rdma_link_layer_IB_LINK_LAYER_ETHERNET
}
