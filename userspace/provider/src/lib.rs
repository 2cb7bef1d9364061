//! libferroce: the rdma-core provider for ferroce devices.
//!
//! libibverbs loads this library for every `driver` line naming it in
//! `/etc/libibverbs.d/`; an ELF constructor registers the provider and does
//! nothing else. Devices are matched by ferroce's private driver id (with the
//! device name as a fallback), and a module speaking another uverbs ABI is
//! refused with a message saying what to do.
//!
//! All C declarations come from bindgen over rdma-core's `driver.h` and
//! `ferroce-abi.h` (`sys`). This file holds registration, the device and the
//! context; the verbs objects live in their own modules (`pd`, `mr`, `cq`,
//! `ah`, `qp` with `wr` for its `ibv_wr_*` calls, `srq`).
//!
//! Control operations (creating, modifying, querying, destroying objects,
//! arming a CQ) are system calls through the `ibv_cmd_*` helpers. The data
//! path is not: every CQ, SQ, RQ and SRQ is a ring the kernel shares with
//! the process (`ring`, ABI v2 of `ferroce-abi.h`). Posting a work request
//! writes a slot and publishes the producer index; polling reads
//! completions from the CQ's ring. A system call remains only where the
//! protocol asks for one: a send doorbell when the kernel has gone idle on
//! the SQ (`FERROCE_RING_NEED_DB`) or the QP is in error, a receive
//! doorbell in error, and a poll through the kernel when completions wait
//! there because the CQ ring was full (`FERROCE_RING_CQ_WAITING`).
//!
//! Objects: every provider object is a `#[repr(C)]` struct whose first field
//! is the libibverbs structure libibverbs hands back to us, allocated zeroed
//! with `calloc` (as libibverbs allocates the context) and released with
//! `free` only after the kernel has destroyed the object (and its rings
//! are unmapped). Fields that are not plain C data (the rings' locks) are
//! written in place right after the allocation and dropped before `free`.
//!
//! Errors: callbacks that return `int` return a positive errno (what the
//! `ibv_cmd_*` helpers return); callbacks that create an object set `errno`
//! and return NULL.

use core::ffi::{c_int, c_void};
use core::mem::{size_of, zeroed};
use core::ptr::null_mut;

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unnecessary_transmutes,
    clippy::all
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/verbs.rs"));
    include!(concat!(env!("OUT_DIR"), "/abi.rs"));
}

mod ah;
mod cq;
mod mr;
mod pd;
mod qp;
mod ring;
mod srq;
mod wr;

use sys::*;

extern "C" {
    /// libc's `calloc`, for the provider's objects.
    fn calloc(nmemb: usize, size: usize) -> *mut c_void;
    /// libc's `free`, for memory libibverbs or this provider allocated with
    /// `calloc`.
    fn free(ptr: *mut c_void);
    /// glibc's thread-local `errno`.
    fn __errno_location() -> *mut c_int;
}

/// Sets the calling thread's `errno` (what the `ibv_create_*`/`ibv_alloc_*`
/// API reports when a creation callback returns NULL).
fn set_errno(err: c_int) {
    // SAFETY: glibc returns a valid pointer to this thread's errno.
    unsafe { *__errno_location() = err };
}

/// The calling thread's `errno`.
fn errno() -> c_int {
    // SAFETY: glibc returns a valid pointer to this thread's errno.
    unsafe { *__errno_location() }
}

/// Locks one of the provider's ring locks. A poisoned lock cannot happen
/// (the library is built with `panic = "abort"`); its data is used as is.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A critical region that C enters and leaves in separate calls
/// (`ibv_wr_start` to `ibv_wr_complete`/`ibv_wr_abort`, `ibv_start_poll` to
/// `ibv_end_poll`), where a lock guard cannot be held: a flag that a second
/// caller waits on, yielding, until the first leaves.
struct Region(std::sync::atomic::AtomicBool);

impl Region {
    const fn new() -> Region {
        Region(std::sync::atomic::AtomicBool::new(false))
    }

    fn enter(&self) {
        use std::sync::atomic::Ordering;
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn leave(&self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// A zeroed, `calloc`ed `T`, or NULL (with `errno` ENOMEM) when memory is
/// short.
///
/// # Safety
/// `T` must be a `#[repr(C)]` structure for which all-zero bytes are a valid
/// value (the libibverbs structures and the provider's wrappers of them).
unsafe fn calloc_obj<T>() -> *mut T {
    // SAFETY: calloc may be called with any sizes; the result is checked.
    let p = unsafe { calloc(1, size_of::<T>()) }.cast::<T>();
    if p.is_null() {
        set_errno(libc_errno::ENOMEM);
    }
    p
}

/// Frees an object from `calloc_obj`.
///
/// # Safety
/// `p` came from `calloc_obj` (or is NULL) and is not used afterwards.
unsafe fn free_obj<T>(p: *mut T) {
    // SAFETY: guaranteed by the caller.
    unsafe { free(p.cast()) };
}

/// The errno values the provider reports itself (Linux values).
mod libc_errno {
    use core::ffi::c_int;
    pub const ENOENT: c_int = 2;
    pub const EIO: c_int = 5;
    pub const ENOMEM: c_int = 12;
    pub const EINVAL: c_int = 22;
    pub const EOPNOTSUPP: c_int = 95;
}

/// A zeroed C command or response structure.
///
/// # Safety
/// `T` must be a plain C structure (integers, arrays, unions of those) for
/// which all-zero bytes are a valid value.
unsafe fn zeroed_c<T>() -> T {
    // SAFETY: guaranteed by the caller.
    unsafe { zeroed() }
}

/// A static that holds raw pointers (C tables libibverbs reads).
#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: the wrapped tables are immutable after construction; libibverbs
// only reads them.
unsafe impl<T> Sync for Shared<T> {}

/// ferroce's per-device state in libibverbs (`verbs_device` first).
#[repr(C)]
struct FerroceDevice {
    vdev: verbs_device,
    abi_version: u32,
}

/// ferroce's user context (`verbs_context` first, as libibverbs allocates it).
#[repr(C)]
struct FerroceContext {
    vctx: verbs_context,
}

/// The response of the get-context command: the core part, then ferroce's.
#[repr(C)]
struct GetContextResp {
    core: ib_uverbs_get_context_resp,
    drv: ferroce_alloc_ucontext_resp,
}

static MATCH_TABLE: Shared<[verbs_match_ent; 3]> = Shared([
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent__bindgen_ty_1 {
            driver_id: FERROCE_DRIVER_ID as u64,
        },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_DRIVER_ID as _,
    },
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent__bindgen_ty_1 {
            modalias: c"rdma_device:*Nferroce*".as_ptr(),
        },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_MODALIAS as _,
    },
    verbs_match_ent {
        driver_data: null_mut(),
        u: verbs_match_ent__bindgen_ty_1 { driver_id: 0 },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL as _,
    },
]);

static DEVICE_OPS: Shared<verbs_device_ops> = Shared(verbs_device_ops {
    name: c"ferroce".as_ptr(),
    // Every ABI version reaches alloc_device, which refuses a mismatch with
    // a clear message (libibverbs' own check only warns in its debug log).
    match_min_abi_version: 0,
    match_max_abi_version: u32::MAX,
    match_table: MATCH_TABLE.0.as_ptr(),
    static_providers: null_mut(),
    match_device: None,
    alloc_context: Some(alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// Registers the provider when libibverbs loads the library.
#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;

extern "C" fn register() {
    // SAFETY: DEVICE_OPS is a static that outlives the library's use.
    unsafe { verbs_register_driver_abi(&DEVICE_OPS.0) };
}

/// `verbs_register_driver_<PABI>`, named after the provider ABI of the
/// rdma-core this was built against (bindgen sees the versioned name).
unsafe fn verbs_register_driver_abi(ops: *const verbs_device_ops) {
    // SAFETY: forwarded; `ops` is valid for the process lifetime.
    unsafe { register_fn()(ops) }
}

fn register_fn() -> unsafe extern "C" fn(*const verbs_device_ops) {
    include!(concat!(env!("OUT_DIR"), "/register.rs"))
}

fn report(msg: core::fmt::Arguments<'_>) {
    eprintln!("libferroce: {msg}");
}

unsafe extern "C" fn alloc_device(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: libibverbs passes a valid sysfs device description.
    let (abi, name) = unsafe {
        let d = &*sysfs_dev;
        (
            d.abi_ver,
            core::ffi::CStr::from_ptr(d.ibdev_name.as_ptr())
                .to_string_lossy()
                .into_owned(),
        )
    };
    if abi != PROVIDER_ABI_VERSION {
        report(format_args!(
            "device {name}: the ferroce kernel module speaks uverbs ABI version {abi}, this provider speaks version {PROVIDER_ABI_VERSION}; \
             install the provider built with the loaded module (same ferroce version), or load the matching module"
        ));
        return null_mut();
    }
    // SAFETY: an all-zero verbs_device is what libibverbs expects to fill in.
    let dev = Box::new(FerroceDevice {
        vdev: unsafe { zeroed() },
        abi_version: abi,
    });
    Box::into_raw(dev).cast()
}

unsafe extern "C" fn uninit_device(vdev: *mut verbs_device) {
    // SAFETY: `vdev` came from `alloc_device`'s Box (verbs_device first).
    drop(unsafe { Box::from_raw(vdev.cast::<FerroceDevice>()) });
}

static CONTEXT_OPS: Shared<verbs_context_ops> = Shared({
    // SAFETY: all-None is a valid ops table; libibverbs fills the gaps with
    // its defaults, which answer EOPNOTSUPP.
    let mut ops: verbs_context_ops = unsafe { zeroed() };
    ops.query_device_ex = Some(query_device_ex);
    ops.query_port = Some(query_port);
    ops.free_context = Some(free_context);
    ops.alloc_pd = Some(pd::alloc_pd);
    ops.dealloc_pd = Some(pd::dealloc_pd);
    ops.reg_mr = Some(mr::reg_mr);
    ops.dereg_mr = Some(mr::dereg_mr);
    ops.advise_mr = Some(mr::advise_mr);
    ops.alloc_mw = Some(mr::alloc_mw);
    ops.dealloc_mw = Some(mr::dealloc_mw);
    ops.bind_mw = Some(mr::bind_mw);
    ops.create_cq = Some(cq::create_cq);
    ops.create_cq_ex = Some(cq::create_cq_ex);
    ops.poll_cq = Some(cq::poll_cq);
    ops.req_notify_cq = Some(cq::req_notify_cq);
    ops.resize_cq = Some(cq::resize_cq);
    ops.destroy_cq = Some(cq::destroy_cq);
    ops.create_ah = Some(ah::create_ah);
    ops.destroy_ah = Some(ah::destroy_ah);
    ops.create_qp = Some(qp::create_qp);
    ops.create_qp_ex = Some(qp::create_qp_ex);
    ops.query_qp = Some(qp::query_qp);
    ops.modify_qp = Some(qp::modify_qp);
    ops.destroy_qp = Some(qp::destroy_qp);
    ops.post_send = Some(qp::post_send);
    ops.post_recv = Some(qp::post_recv);
    ops.create_srq = Some(srq::create_srq);
    ops.modify_srq = Some(srq::modify_srq);
    ops.query_srq = Some(srq::query_srq);
    ops.destroy_srq = Some(srq::destroy_srq);
    ops.post_srq_recv = Some(srq::post_srq_recv);
    ops.attach_mcast = Some(attach_mcast);
    ops.detach_mcast = Some(detach_mcast);
    ops
});

unsafe extern "C" fn alloc_context(
    ibdev: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    // SAFETY: allocates and initialises a zeroed FerroceContext whose
    // verbs_context is at offset 0 (the "offset" argument is that offset
    // expressed as a pointer, as the C macro does).
    let ctx = unsafe {
        _verbs_init_and_alloc_context(
            ibdev,
            cmd_fd,
            size_of::<FerroceContext>(),
            null_mut(),
            FERROCE_DRIVER_ID,
        )
    }
    .cast::<FerroceContext>();
    if ctx.is_null() {
        return null_mut();
    }
    // SAFETY: plain C command/response structures.
    let (mut cmd, mut resp): (ibv_get_context, GetContextResp) = unsafe { (zeroed_c(), zeroed_c()) };
    // SAFETY: `ctx` is the fresh context; cmd and resp are sized buffers.
    let ret = unsafe {
        ibv_cmd_get_context(
            &mut (*ctx).vctx,
            &mut cmd,
            size_of::<ibv_get_context>(),
            null_mut(),
            &mut resp.core,
            size_of::<GetContextResp>(),
        )
    };
    if ret == 0 && resp.drv.abi_version != PROVIDER_ABI_VERSION {
        report(format_args!(
            "the ferroce module answered uverbs ABI version {} on context creation, this provider speaks {}; refusing",
            resp.drv.abi_version, PROVIDER_ABI_VERSION
        ));
    }
    if ret != 0 || resp.drv.abi_version != PROVIDER_ABI_VERSION {
        // SAFETY: undoes _verbs_init_and_alloc_context.
        unsafe {
            verbs_uninit_context(&mut (*ctx).vctx);
            free(ctx.cast());
        }
        return null_mut();
    }
    // SAFETY: `ctx` is initialised; CONTEXT_OPS is static.
    unsafe { verbs_set_ops(&mut (*ctx).vctx, &CONTEXT_OPS.0) };
    // SAFETY: valid pointer to the embedded verbs_context.
    unsafe { &mut (*ctx).vctx }
}

unsafe extern "C" fn free_context(ibctx: *mut ibv_context) {
    // `ibv_context` is the *last* member of `verbs_context` (libibverbs'
    // container_of), and our `verbs_context` is first in FerroceContext.
    let offset = core::mem::offset_of!(verbs_context, context);
    // SAFETY: `ibctx` is the context of a FerroceContext from
    // `alloc_context`, which libibverbs allocated with calloc.
    unsafe {
        let ctx = ibctx.byte_sub(offset).cast::<FerroceContext>();
        verbs_uninit_context(&mut (*ctx).vctx);
        free(ctx.cast());
    }
}

unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: a plain C response structure.
    let mut resp: ib_uverbs_ex_query_device_resp = unsafe { zeroed_c() };
    let mut resp_size = size_of::<ib_uverbs_ex_query_device_resp>();
    // SAFETY: arguments forwarded from libibverbs; resp is a sized buffer.
    unsafe { ibv_cmd_query_device_any(context, input, attr, attr_size, &mut resp, &mut resp_size) }
}

/// `ibv_attach_mcast`: the kernel keeps the group table (a system call;
/// attaching is a control-path verb).
unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: arguments forwarded from libibverbs.
    unsafe { ibv_cmd_attach_mcast(qp, gid, lid) }
}

/// `ibv_detach_mcast`.
unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: arguments forwarded from libibverbs.
    unsafe { ibv_cmd_detach_mcast(qp, gid, lid) }
}

unsafe extern "C" fn query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    // SAFETY: a plain C command structure.
    let mut cmd: ibv_query_port = unsafe { zeroed_c() };
    // SAFETY: arguments forwarded from libibverbs; cmd is a sized buffer.
    unsafe { ibv_cmd_query_port(context, port, attr, &mut cmd, size_of::<ibv_query_port>()) }
}
