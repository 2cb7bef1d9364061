// SPDX-License-Identifier: GPL-2.0

//! The driver-specific part of a verbs call (`ib_udata`): null for a
//! kernel consumer; for a process, what its provider sent after the core's
//! command and the room it left for the driver's answer.

use super::bindings as b;
use super::object::Object;
use super::vtable::Driver;
use core::marker::PhantomData;
use kernel::prelude::*;

/// ferroce's answer to a process's new context (its ABI version).
pub(crate) use super::bindings::ferroce_alloc_ucontext_resp as AllocUcontextResp;

/// ferroce's answer to a process's create AH (its table index, which the
/// provider names in its UD work requests).
pub(crate) use super::bindings::ferroce_create_ah_resp as CreateAhResp;

/// ferroce's answers to a process's create and resize CQ, create QP and
/// create SRQ: where their rings are in the context's mmap space.
pub(crate) use super::bindings::{
    ferroce_create_cq_resp as CreateCqResp, ferroce_create_qp_resp as CreateQpResp,
    ferroce_create_srq_resp as CreateSrqResp, ferroce_resize_cq_resp as ResizeCqResp,
};

/// ferroce's modify-SRQ command: where a resize writes the new ring's
/// place.
pub(crate) use super::bindings::ferroce_modify_srq_cmd as ModifySrqCmd;
/// Where a ring is in the context's mmap space.
pub(crate) use super::bindings::ferroce_ring_map as RingMap;

/// A driver command that may be read from a process as bytes.
///
/// # Safety
/// The type is a `#[repr(C)]` uapi structure of integers, valid for any
/// bytes.
pub(crate) unsafe trait Request: Sized {}

// SAFETY: one `__u64`.
unsafe impl Request for ModifySrqCmd {}
// SAFETY: a `__u64` and two `__u32`, no padding (bindgen's layout tests).
unsafe impl Response for RingMap {}

/// A driver answer that may be copied to a process as bytes.
///
/// # Safety
/// The type is a `#[repr(C)]` uapi structure of integers with no padding
/// (each of its bytes is initialised).
pub(crate) unsafe trait Response: Sized {}

// SAFETY: two `__u32`, no padding (the uapi header's layout, checked by
// bindgen's layout tests).
unsafe impl Response for CreateAhResp {}
// SAFETY: as above.
unsafe impl Response for AllocUcontextResp {}
// SAFETY: one or two `ferroce_ring_map`s (a `__u64` and two `__u32`) and,
// for the QP, two `__u32`: no padding (bindgen's layout tests).
unsafe impl Response for b::ferroce_create_cq_resp {}
// SAFETY: as above.
unsafe impl Response for b::ferroce_resize_cq_resp {}
// SAFETY: as above.
unsafe impl Response for b::ferroce_create_qp_resp {}
// SAFETY: as above.
unsafe impl Response for b::ferroce_create_srq_resp {}

/// The driver data of one verbs call of driver `T`.
///
/// # Invariants
/// `raw` is null or the call's udata, valid for `'a`; if `context_ready`,
/// the udata's user context (if any) is one of `T` whose `alloc_ucontext`
/// succeeded, alive for `'a`.
pub(crate) struct Udata<'a, T: Driver> {
    raw: *mut b::ib_udata,
    context_ready: bool,
    _p: PhantomData<(&'a mut b::ib_udata, &'a T::Ucontext)>,
}

impl<'a, T: Driver> Udata<'a, T> {
    /// # Safety
    /// `raw` is null (a kernel consumer's call) or the core's udata of the
    /// call in progress, valid for `'a`, whose user context (if any) is a
    /// live one of `T` (every verb but `alloc_ucontext`).
    pub(crate) unsafe fn from_raw(raw: *mut b::ib_udata) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self { raw, context_ready: true, _p: PhantomData }
    }

    /// The udata of `alloc_ucontext`: its context is the one being made,
    /// not to be read ([`Self::context`] answers `None`).
    ///
    /// # Safety
    /// `raw` is the core's udata of the call in progress, valid for `'a`.
    pub(crate) unsafe fn for_new_context(raw: *mut b::ib_udata) -> Self {
        // INVARIANT: `context_ready` is false.
        Self { raw, context_ready: false, _p: PhantomData }
    }

    /// Whether a process made the call (a kernel consumer passes none).
    pub(crate) fn is_user(&self) -> bool {
        !self.raw.is_null()
    }

    /// Refuses driver input and output: for verbs whose ferroce command
    /// carries none, so that a provider of another ABI is told `EINVAL`.
    pub(crate) fn refuse_driver_data(&self) -> Result {
        // SAFETY: null or the call's udata (the constructor); the helpers
        // answer 0 for null.
        if unsafe { b::ferroce_udata_inlen(self.raw) != 0 || b::ferroce_udata_outlen(self.raw) != 0 } {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// The driver's data of the calling process's context (`None` for a
    /// kernel consumer, and in `alloc_ucontext`).
    pub(crate) fn context(&self) -> Option<&'a T::Ucontext> {
        let uctx = self.raw_context()?;
        // SAFETY: a live context of `T` (the type invariant).
        Some(unsafe { Object::<b::ib_ucontext, T::Ucontext>::data(uctx) })
    }

    /// Refuses driver input: for verbs whose ferroce command carries none
    /// but whose answer does.
    pub(crate) fn refuse_driver_input(&self) -> Result {
        // SAFETY: null or the call's udata (the constructor); the helper
        // answers 0 for null.
        if unsafe { b::ferroce_udata_inlen(self.raw) } != 0 {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// The core's user context of a process's call, in which rings are
    /// made (`None` for a kernel consumer and in `alloc_ucontext`).
    pub(super) fn raw_context(&self) -> Option<*mut b::ib_ucontext> {
        if self.raw.is_null() || !self.context_ready {
            return None;
        }
        // SAFETY: the call's udata (the type invariant).
        let uctx = unsafe { b::ferroce_udata_ucontext(self.raw) };
        (!uctx.is_null()).then_some(uctx)
    }

    /// The driver command the process sent, `None` when it sent none (a
    /// kernel consumer, a provider of an older ABI); `EINVAL` when it sent
    /// some of another size.
    pub(crate) fn request<R: Request>(&self) -> Result<Option<R>> {
        // SAFETY: null or the call's udata (the constructor); the helper
        // answers 0 for null.
        let len = unsafe { b::ferroce_udata_inlen(self.raw) };
        if len == 0 {
            return Ok(None);
        }
        if len != core::mem::size_of::<R>() {
            return Err(EINVAL);
        }
        let mut v = core::mem::MaybeUninit::<R>::uninit();
        // SAFETY: the call's udata, with `len` bytes of input; `v` has room
        // for them, and any bytes are an `R` (its `Request` contract).
        unsafe {
            if b::ferroce_copy_from_udata(v.as_mut_ptr().cast(), self.raw, len) != 0 {
                return Err(EFAULT);
            }
            Ok(Some(v.assume_init()))
        }
    }

    /// Copies `v` to the calling process's memory at `addr` (an address
    /// its provider named in a command that has no response).
    pub(crate) fn write_user<R: Response>(&self, addr: u64, v: &R) -> Result {
        if self.raw.is_null() {
            return Err(EINVAL);
        }
        let ptr = kernel::uaccess::UserPtr::from_addr(addr as usize);
        let mut w = kernel::uaccess::UserSlice::new(ptr, core::mem::size_of::<R>()).writer();
        // SAFETY: `R` is plain initialised bytes (its `Response` contract).
        let bytes = unsafe { core::slice::from_raw_parts(core::ptr::from_ref(v).cast::<u8>(), core::mem::size_of::<R>()) };
        w.write_slice(bytes)
    }

    /// Copies an answer to the process: as much of it as the process made
    /// room for (an older provider may ask for less). Nothing for a
    /// kernel consumer.
    pub(crate) fn respond<R: Response>(&mut self, resp: &R) -> Result {
        if self.raw.is_null() {
            return Ok(());
        }
        // SAFETY: the call's udata (the constructor); `R` is plain bytes
        // (its `Response` contract) and `len` is at most its size.
        unsafe {
            let len = b::ferroce_udata_outlen(self.raw).min(core::mem::size_of::<R>());
            if len > 0 && b::ferroce_copy_to_udata(self.raw, core::ptr::from_ref(resp).cast(), len) != 0 {
                return Err(EFAULT);
            }
        }
        Ok(())
    }
}
