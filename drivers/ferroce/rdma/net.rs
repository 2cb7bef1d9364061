// SPDX-License-Identifier: GPL-2.0

//! Packets and the sockets they travel through: the socket buffer a driver
//! owns ([`Skb`]), the IP stack's send calls, the device's local queue and
//! work item, and one pair of UDP tunnel sockets (port 4791, IPv4 and IPv6)
//! per network namespace whose receive callback hands every datagram to
//! [`Driver::receive`].

use super::bindings as b;
use super::vtable::Driver;
use super::wr::NetNs;
use super::{Counter, Device, NetDev, Registered, DRIVER_ID};
use core::ffi::{c_int, c_uint};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// Errnos the kernel crate does not name (include/uapi/asm-generic/errno.h).
const EAFNOSUPPORT: i32 = 97;
const EADDRINUSE: i32 = 98;
const EHOSTUNREACH: i32 = 113;

/// Where a packet goes: the RoCE v2 address vector of an AH or a QP's path.
#[derive(Clone, Copy)]
pub(crate) struct Av {
    pub(crate) ipv6: bool,
    /// Source and destination addresses (IPv4 in the first 4 bytes).
    pub(crate) sip: [u8; 16],
    pub(crate) dip: [u8; 16],
    pub(crate) tclass: u8,
    pub(crate) hop_limit: u8,
    pub(crate) flow_label: u32,
    pub(crate) ifindex: i32,
    pub(crate) net: NetNs,
}

// ---------------------------------------------------------------------------
// Socket buffers

/// A socket buffer the driver owns. Dropping it frees it as a dropped
/// packet (`kfree_skb`); [`Skb::consume`] frees one whose packet was
/// delivered; [`Skb::send`] and [`Device::local_push`] hand it on.
///
/// # Invariants
/// `self.0` is a socket buffer no one else references.
pub(crate) struct Skb(NonNull<b::sk_buff>);

// SAFETY: a socket buffer no one else references may be used and freed on
// any CPU, in any context.
unsafe impl Send for Skb {}

impl Skb {
    /// A linear buffer of `len` bytes for a packet `dev` sends (GFP_ATOMIC,
    /// with its netdev's link-layer headroom); None when memory is short.
    pub(crate) fn alloc_tx<T: Driver>(dev: &Device<T>, len: usize) -> Option<Self> {
        let len = u32::try_from(len).ok()?;
        // SAFETY: the RDMA core holds the device's netdev while the device
        // exists (`Device` invariant); GFP_ATOMIC allocation.
        let skb = unsafe { b::ferroce_tx_alloc(dev.ndev, len) };
        // INVARIANT: a fresh buffer, referenced by nothing else.
        NonNull::new(skb).map(Self)
    }

    fn raw(&self) -> *mut b::sk_buff {
        self.0.as_ptr()
    }

    /// The buffer's data (linear: the driver's buffers are allocated so,
    /// received ones are linearised by [`Skb::network_packet`]).
    pub(crate) fn data(&self) -> &[u8] {
        // SAFETY: ours (invariant); `skb_len` bytes start at `data` in the
        // linear buffer, and stay there while `self` is borrowed.
        unsafe { core::slice::from_raw_parts(b::ferroce_skb_data(self.raw()), b::ferroce_skb_len(self.raw()) as usize) }
    }

    /// The buffer's data, to write.
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` makes the view exclusive.
        unsafe { core::slice::from_raw_parts_mut(b::ferroce_skb_data(self.raw()), b::ferroce_skb_len(self.raw()) as usize) }
    }

    /// Keeps the `len` bytes of data at `start` (`skb_pull`, `skb_trim`);
    /// false, and nothing changed, when they are not all there.
    pub(crate) fn narrow(&mut self, start: usize, len: usize) -> bool {
        match start.checked_add(len) {
            Some(end) if end <= self.data().len() => {}
            _ => return false,
        }
        // SAFETY: ours; `start + len <= skb_len`, so both calls stay
        // inside the data (the casts are exact: skb_len is a u32).
        unsafe {
            b::ferroce_skb_pull(self.raw(), start as u32);
            b::ferroce_skb_trim(self.raw(), len as u32);
        }
        true
    }

    /// A received datagram made linear; its bytes from the IP header on.
    /// None when linearising failed (memory).
    fn network_packet(&mut self) -> Option<&[u8]> {
        let mut ip = core::ptr::null_mut();
        let mut len = 0u32;
        // SAFETY: ours; the outputs are ours to write.
        if unsafe { b::ferroce_rx_linear(self.raw(), &mut ip, &mut len) } != 0 {
            return None;
        }
        // SAFETY: the buffer is linear: `len` bytes from its network header
        // to its tail, valid while `self` is borrowed.
        Some(unsafe { core::slice::from_raw_parts(ip, len as usize) })
    }

    /// Frees a buffer whose packet was delivered (`consume_skb`: not a drop).
    pub(crate) fn consume(self) {
        // SAFETY: ours, handed back once (`into_raw` forgets `self`).
        unsafe { b::ferroce_consume_skb(self.into_raw()) }
    }

    fn into_raw(self) -> *mut b::sk_buff {
        let p = self.raw();
        core::mem::forget(self);
        p
    }

    /// Hands the buffer (its data: an IP packet from the IP header on,
    /// headers written) to the IP stack for `av`'s destination, through
    /// `dev`'s route cache. Err (EHOSTUNREACH) when there is no route; the
    /// buffer is gone either way.
    pub(crate) fn send<T: Driver>(self, dev: &Device<T>, av: &Av) -> Result {
        let routes = dev.routes;
        let skb = self.into_raw();
        let ret = if av.ipv6 {
            // SAFETY: the stack takes the buffer (ours) in the call; the
            // addresses are 16 bytes each, read during the call; the
            // namespace is held while the device in it exists; `routes`
            // is the device's cache (or null) until `dealloc_driver`,
            // after which nothing sends.
            unsafe {
                b::ferroce_tx_send6(
                    skb,
                    routes,
                    av.net.as_ptr(),
                    av.ifindex,
                    av.sip.as_ptr().cast(),
                    av.dip.as_ptr().cast(),
                    av.flow_label.to_be(),
                )
            }
        } else {
            let s = u32::from_ne_bytes([av.sip[0], av.sip[1], av.sip[2], av.sip[3]]);
            let d = u32::from_ne_bytes([av.dip[0], av.dip[1], av.dip[2], av.dip[3]]);
            // SAFETY: as above.
            unsafe { b::ferroce_tx_send4(skb, routes, av.net.as_ptr(), av.ifindex, s, d, av.tclass) }
        };
        if ret == -EHOSTUNREACH {
            Err(Error::from_errno(ret))
        } else {
            Ok(())
        }
    }
}

impl Drop for Skb {
    fn drop(&mut self) {
        // SAFETY: ours (invariant), freed once.
        unsafe { b::ferroce_kfree_skb(self.raw()) }
    }
}

// ---------------------------------------------------------------------------
// The device's local queue and work item

impl<T: Driver> Device<T> {
    /// Packets waiting in the local queue.
    pub(crate) fn local_len(&self) -> u32 {
        // SAFETY: the queue is initialised with the device (`add_device`).
        unsafe { b::ferroce_skbq_len(self.local_queue()) }
    }

    /// Whether the local queue is empty (a lockless look).
    pub(crate) fn local_is_empty(&self) -> bool {
        // SAFETY: as in `local_len`.
        unsafe { b::ferroce_skbq_empty(self.local_queue()) }
    }

    /// Queues a packet (its data: the IP packet) for delivery to this
    /// device.
    pub(crate) fn local_push(&self, skb: Skb) {
        // SAFETY: the queue is initialised with the device; the buffer is
        // ours to hand over (it is purged with the queue if never taken).
        unsafe { b::ferroce_skbq_tail(self.local_queue(), skb.into_raw()) }
    }

    /// The oldest queued packet.
    pub(crate) fn local_pop(&self) -> Option<Skb> {
        // SAFETY: the queue is initialised with the device (`add_device`).
        unsafe { skbq_pop(self.local_queue()) }
    }

    /// Queues the device's work item, which runs [`Driver::device_work`].
    pub(crate) fn queue_work(&self) {
        // SAFETY: the work item is set up with the device and cancelled in
        // `dealloc_driver`, before the device's memory goes.
        unsafe { b::ferroce_work_queue(self.local_work()) }
    }
}

/// The oldest buffer of a device's queue.
///
/// # Safety
/// `q` is one of a live device's queues, initialised with it.
unsafe fn skbq_pop(q: *mut b::sk_buff_head) -> Option<Skb> {
    // SAFETY: guaranteed by the caller; a dequeued buffer is referenced by
    // nothing else.
    let skb = unsafe { b::ferroce_skbq_dequeue(q) };
    // INVARIANT: see above.
    NonNull::new(skb).map(Skb)
}

/// The device's work item.
///
/// # Safety
/// Only the kernel calls it, through the registration that names it,
/// with the arguments that registration's contract names.
pub(super) unsafe extern "C" fn device_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: the kernel runs only the `local_work` of a live device here
    // (it is cancelled before the device is freed).
    let dev = unsafe { Device::<T>::from_local_work(w) };
    T::device_work(dev);
}

// ---------------------------------------------------------------------------
// Bulk sends and the receive hand-off

/// Handed-off datagrams a device holds at most (queued or being received);
/// more are dropped (`rx_drop_deferred_full`), as a full receive backlog
/// would drop them.
const RX_DEFER_MAX: u32 = 1024;

/// Datagrams the receive work item takes in one run before it queues
/// itself again (and lets the CPU's other work in).
const RX_WORK_BUDGET: u32 = 64;

/// A send of several packets in a row from this CPU (`ferroce_bulk_begin`):
/// while it lasts, a datagram that arrives here (a veth or the loopback
/// delivers on the sending CPU) is received on another CPU
/// ([`Device::rx_defer`]). Preemption is off for its life, so the mark
/// stays with the CPU.
pub(crate) struct BulkSend(());

impl BulkSend {
    pub(crate) fn enter() -> Self {
        // SAFETY: no precondition; undone by `drop`.
        unsafe { b::ferroce_bulk_begin() };
        Self(())
    }
}

impl Drop for BulkSend {
    fn drop(&mut self) {
        // SAFETY: pairs with `enter`, on the same CPU (preemption is off).
        unsafe { b::ferroce_bulk_end() }
    }
}

/// Bottom halves off on this CPU while the value lives: what a send hands
/// a veth or the loopback is received when it drops, as one burst.
pub(crate) struct BhOff(());

impl BhOff {
    pub(crate) fn enter() -> Self {
        // SAFETY: no precondition; undone by `drop`.
        unsafe { b::ferroce_bh_disable() };
        Self(())
    }
}

impl Drop for BhOff {
    fn drop(&mut self) {
        // SAFETY: pairs with `enter` (bottom halves off keep the CPU).
        unsafe { b::ferroce_bh_enable() }
    }
}

impl<T: Driver> Device<T> {
    /// Queues the device's burst work item ([`Driver::burst_work`]) on this
    /// CPU's bottom-half workqueue: it runs after the softirq's receive
    /// pass. Already queued: it runs once for all.
    pub(crate) fn queue_burst_work(&self) {
        // SAFETY: the work item is set up with the device and cancelled in
        // `dealloc_driver`, before the device's memory goes.
        // (-1: this CPU, in the same softirq round.)
        unsafe { b::ferroce_rx_work_queue_on(self.burst_work(), -1) }
    }

    /// Hands a received datagram to the device's receive work item when it
    /// arrived inside a bulk send of this CPU, or when earlier ones are
    /// still handed off (every datagram of the device then goes the same
    /// way, in order); gives it back to be received here otherwise.
    fn rx_defer(&self, skb: Skb) -> core::result::Result<(), Skb> {
        let pending = self.rx_pending.load(Ordering::Acquire);
        let cpu = if pending > 0 {
            self.rx_cpu.load(Ordering::Relaxed)
        } else {
            // SAFETY: no precondition (softirq context: the CPU stays).
            match unsafe { b::ferroce_rx_defer_cpu() } {
                c if c >= 0 => c,
                _ => return Err(skb),
            }
        };
        if pending >= RX_DEFER_MAX {
            self.count(Counter::RxDeferFull);
            drop(skb);
            return Ok(());
        }
        self.count(Counter::RxDeferred);
        self.rx_cpu.store(cpu, Ordering::Relaxed);
        self.rx_pending.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the queue and work item are set up with the device and
        // purged / cancelled in `dealloc_driver`; the buffer is ours to
        // hand over.
        unsafe {
            b::ferroce_skbq_tail(self.rx_queue(), skb.into_raw());
            b::ferroce_rx_work_queue_on(self.rx_work(), cpu);
        }
        Ok(())
    }
}

/// The device's receive work item (a bottom-half one: it runs in the
/// softirq of the CPU it was queued on): the datagrams
/// [`Device::rx_defer`] handed over, in order, each with bottom halves off
/// (as the UDP tunnel's softirq would receive it).
///
/// # Safety
/// Only the kernel calls it, through the registration that names it,
/// with the arguments that registration's contract names.
pub(super) unsafe extern "C" fn rx_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: the kernel runs only the `rx_work` of a live device here (it
    // is cancelled before the device is freed).
    let dev = unsafe { Device::<T>::from_rx_work(w) };
    // A batch handed over: answered once, after this run.
    let _ = super::sys::burst_mark();
    for _ in 0..RX_WORK_BUDGET {
        // SAFETY: the queue is set up with the device.
        let Some(skb) = (unsafe { skbq_pop(dev.rx_queue()) }) else {
            return;
        };
        {
            let _bh = BhOff::enter();
            receive_skb(dev, skb);
        }
        // Received: a datagram that comes now may be received in place.
        dev.rx_pending.fetch_sub(1, Ordering::AcqRel);
    }
    // More than a run's budget: the rest in the next run, on this CPU.
    // SAFETY: as in `rx_defer`.
    unsafe {
        if !b::ferroce_skbq_empty(dev.rx_queue()) {
            b::ferroce_rx_work_queue_on(dev.rx_work(), dev.rx_cpu.load(Ordering::Relaxed));
        }
    }
}

/// The device's burst work item.
///
/// # Safety
/// Only the kernel calls it, through the registration that names it,
/// with the arguments that registration's contract names.
pub(super) unsafe extern "C" fn burst_work<T: Driver>(w: *mut b::work_struct) {
    // SAFETY: the kernel runs only the `burst_work` of a live device here
    // (it is cancelled before the device is freed).
    let dev = unsafe { Device::<T>::from_burst_work(w) };
    T::burst_work(dev);
}

// ---------------------------------------------------------------------------
// Per-namespace sockets

/// The sockets of one network namespace (`net_generic` storage, zeroed by
/// the kernel when the namespace is set up).
#[repr(C)]
struct NetSocks {
    s4: *mut b::socket,
    s6: *mut b::socket,
}

static NET_ID: Registered<c_uint> = Registered::new(0);

static PERNET: Registered<b::pernet_operations> = Registered::new({
    // SAFETY: all-zero is a valid, unregistered pernet_operations.
    let mut ops: b::pernet_operations = unsafe { core::mem::zeroed() };
    ops.id = NET_ID.as_ptr();
    ops.size = core::mem::size_of::<NetSocks>();
    ops.exit = Some(pernet_exit);
    ops
});

/// Registered as a device's operations, not a subsystem's: a namespace
/// being dismantled closes the sockets before its devices unregister. A
/// socket holds the route of the last multicast datagram early demux gave
/// it (`sk_rx_dst`), and a multicast input route holds the namespace's
/// loopback device: closed after the devices, the sockets would hold `lo`
/// and its unregistration would wait forever.
pub(super) fn register_pernet() -> Result {
    // SAFETY: PERNET is static; it is unregistered in `unregister_pernet`.
    kernel::error::to_result(unsafe { b::register_pernet_device(PERNET.as_ptr()) })
}

pub(super) fn unregister_pernet() {
    // SAFETY: registered in `register_pernet`. The exit callback closes
    // every namespace's sockets; then no receive callback runs any more.
    unsafe {
        b::unregister_pernet_device(PERNET.as_ptr());
        b::ferroce_synchronize_net();
    }
}

/// # Safety
/// Only the kernel calls it, through the registration that names it,
/// with the arguments that registration's contract names.
unsafe extern "C" fn pernet_exit(net: *mut b::net) {
    // SAFETY: the kernel calls us with a namespace being dismantled, whose
    // generic storage holds our NetSocks.
    unsafe {
        let socks = b::ferroce_net_generic(net, *NET_ID.as_ptr()).cast::<NetSocks>();
        for s in [&mut (*socks).s4, &mut (*socks).s6] {
            if !s.is_null() {
                b::ferroce_udp_tunnel_close(*s);
                *s = core::ptr::null_mut();
            }
        }
    }
}

/// Opens the sockets of `ndev`'s namespace if this is its first ferroce
/// device; their datagrams go to `T::receive`.
pub(super) fn ensure_sockets<T: Driver>(ndev: &NetDev) -> Result {
    let _guard = NetMutex::lock();
    // SAFETY: the netdev is alive for the call.
    let net = unsafe { b::ferroce_dev_net(ndev.0) };
    // SAFETY: the netdev, and so its namespace `net`, is alive for the
    // call; the storage is ours, and the mutex serialises its writers.
    let socks = unsafe { &mut *b::ferroce_net_generic(net, *NET_ID.as_ptr()).cast::<NetSocks>() };
    for (ipv6, s) in [(false, &mut socks.s4), (true, &mut socks.s6)] {
        if !s.is_null() {
            continue;
        }
        // SAFETY: as above; the callback is ours for as long as the socket.
        let sock = unsafe { b::ferroce_udp_tunnel_open(net, ipv6, Some(encap_rcv::<T>)) };
        match kernel::error::from_err_ptr(sock) {
            Ok(sock) => *s = sock,
            // IPv6 disabled: IPv4 only.
            Err(e) if ipv6 && e.to_errno() == -EAFNOSUPPORT => {}
            Err(e) => {
                if e.to_errno() == -EADDRINUSE {
                    pr_err!(
                        "UDP port {} is already in use in this network namespace (rdma_rxe with a device here?); delete that device or unload rdma_rxe\n",
                        crate::transport::wire::ip::ROCE_PORT
                    );
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The global mutex that serialises socket creation, and the multicast
/// attaches and detaches of every device (a group's first attach and its
/// join on the netdev, or its last detach and the leave, are one step),
/// held while the value lives. Process context only.
pub(crate) struct NetMutex(());

impl NetMutex {
    pub(crate) fn lock() -> Self {
        // SAFETY: a static mutex, taken in process context (link add).
        unsafe { b::ferroce_net_lock() };
        Self(())
    }
}

impl Drop for NetMutex {
    fn drop(&mut self) {
        // SAFETY: taken in `lock`.
        unsafe { b::ferroce_net_unlock() }
    }
}

/// The ferroce device a received datagram is addressed to, held by a
/// reference (`ib_device_get_by_netdev`) until dropped.
///
/// # Invariants
/// `self.0` is a registered ferroce device we hold a reference on.
struct DeviceRef<T: Driver>(NonNull<b::ib_device>, core::marker::PhantomData<T>);

impl<T: Driver> DeviceRef<T> {
    fn of_skb(skb: &Skb) -> Option<Self> {
        // SAFETY: a received buffer of ours with its netdev set; a non-null
        // netdev comes with a reference, dropped at once (the device
        // lookup takes its own).
        let ib = unsafe {
            let ndev = b::ferroce_rx_netdev(skb.raw());
            if ndev.is_null() {
                return None;
            }
            let ib = b::ib_device_get_by_netdev(ndev, DRIVER_ID);
            b::ferroce_dev_put(ndev);
            ib
        };
        // INVARIANT: looked up by ferroce's driver id, with a reference.
        NonNull::new(ib).map(|p| Self(p, core::marker::PhantomData))
    }
}

impl<T: Driver> core::ops::Deref for DeviceRef<T> {
    type Target = Device<T>;
    fn deref(&self) -> &Device<T> {
        // SAFETY: a live ferroce device (invariant), whose driver is `T`
        // (the only one registered under ferroce's driver id).
        unsafe { Device::<T>::from_ib(self.0.as_ptr()) }
    }
}

impl<T: Driver> Drop for DeviceRef<T> {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `of_skb`.
        unsafe { b::ib_device_put(self.0.as_ptr()) }
    }
}

/// The UDP tunnel's receive callback: every datagram to port 4791.
///
/// # Safety
/// Only the kernel calls it, through the registration that names it,
/// with the arguments that registration's contract names.
unsafe extern "C" fn encap_rcv<T: Driver>(_sk: *mut b::sock, skb: *mut b::sk_buff) -> c_int {
    let Some(skb) = NonNull::new(skb) else { return 0 };
    // INVARIANT: the UDP layer hands the datagram over: it is ours now.
    let skb = Skb(skb);
    let Some(dev) = DeviceRef::<T>::of_skb(&skb) else { return 0 };
    if let Err(skb) = dev.rx_defer(skb) {
        receive_skb(&dev, skb);
    }
    0
}

/// Receives a datagram for `dev` (linearised first), here and now.
fn receive_skb<T: Driver>(dev: &Device<T>, mut skb: Skb) {
    match skb.network_packet() {
        Some(packet) => {
            T::receive(dev, packet);
            skb.consume();
        }
        None => dev.count(Counter::RxNoMem),
    }
}
