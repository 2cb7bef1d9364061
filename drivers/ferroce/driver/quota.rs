// SPDX-License-Identifier: GPL-2.0

//! Per-user quotas on the device's object tables.
//!
//! The tables grow (see `tables`) up to a largest size, so one user who
//! took every QP or PD would stop every other process, and the kernel's
//! own consumers (rdma_cm, NVMe) but for the few slots each table keeps for
//! them (`transport::table::KERNEL_RESERVE`). Every object a process
//! creates is charged to the user (effective UID) its context was opened
//! by: a user holds at most half of each table's largest size (or the
//! `user_quota` module parameter, if smaller), whatever number of contexts
//! (device files) it opens. Kernel consumers are not charged.
//!
//! An [`Account`] is shared by the contexts of one user on one device; a
//! [`Charge`] is one object's share of it, given back when dropped.

// Safe Rust only: the compiler keeps it that way.
#![forbid(unsafe_code)]

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Kuid;

/// The kinds of object a user is charged for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Pd = 0,
    Ah = 1,
    Cq = 2,
    Qp = 3,
    Srq = 4,
    Mr = 5,
    /// A UD QP's attachment to a multicast group.
    Mcast = 6,
}

const KINDS: usize = 7;

impl Kind {
    /// Slots of the kind's table when a device is created; the table
    /// doubles when full (`DevState::grow`), up to [`Kind::max_len`].
    pub(crate) const fn first_len(self) -> usize {
        match self {
            Kind::Pd => 4096,
            Kind::Ah => 4096,
            Kind::Cq => 2048,
            Kind::Qp => 2048,
            Kind::Srq => 2048,
            Kind::Mr => 8192,
            Kind::Mcast => crate::transport::mcast::MAX_GROUPS,
        }
    }

    /// Slots of the kind's table at its largest on one device.
    pub(crate) const fn max_len(self) -> usize {
        match self {
            Kind::Pd => 1 << 17,
            Kind::Ah => 1 << 17,
            Kind::Cq => 1 << 17,
            // A QPN has 24 bits.
            Kind::Qp => 1 << 17,
            Kind::Srq => 1 << 16,
            // A key is `index << 8 | key byte`: 29 bits.
            Kind::Mr => 1 << 21,
            // Attachments, as many as there are groups: a user's
            // attachments reach at most half of the groups.
            Kind::Mcast => crate::transport::mcast::MAX_GROUPS,
        }
    }

    /// What one user may hold: half of the largest table, or less when
    /// the `user_quota` module parameter says so. This is also what
    /// `query_device` reports as `max_*`.
    pub(crate) fn quota(self) -> u32 {
        let half = (self.max_len() / 2) as u32;
        match crate::rdma::user_quota() {
            0 => half,
            q => q.min(half),
        }
    }
}

/// What one user holds on one device.
pub(crate) struct Account {
    uid: Kuid,
    /// The user's open contexts on the device (changed under the device
    /// lock, in [`Accounts::open`] and [`Accounts::close`]).
    contexts: AtomicU32,
    held: [AtomicU32; KINDS],
    /// Pages of the user's regions on demand (see [`OdpCharge`]).
    odp_pages: AtomicUsize,
}

/// One object's share of its user's quota; dropping it gives it back.
pub(crate) struct Charge {
    account: Arc<Account>,
    kind: Kind,
}

impl Charge {
    /// Charges one object of `kind` to `account`: `ENOMEM` when the user
    /// holds its quota already (what the verbs return for a full table).
    pub(crate) fn take(account: &Arc<Account>, kind: Kind) -> Result<Self> {
        let held = account.held.get(kind as usize).ok_or(EINVAL)?;
        held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < kind.quota()).then_some(n + 1))
            .map_err(|_| ENOMEM)?;
        Ok(Self {
            account: account.clone(),
            kind,
        })
    }

    /// The account charged (objects made inside this one are charged to
    /// the same user: an AH to its PD's).
    pub(crate) fn account(&self) -> &Arc<Account> {
        &self.account
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(held) = self.account.held.get(self.kind as usize) {
            let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}

/// A region on demand's pages, charged to its user. The kernel keeps a
/// word or two per page of such a region (ferroce's page table and the
/// core's `ib_umem_odp` lists) whether or not the pages are ever touched,
/// and a process may register on demand far more than it has mapped: a
/// uverbs_fuzz registration of a terabyte had the guest's OOM killer
/// invoked. A user's regions on demand cover at most as many pages as the
/// machine has memory (their tables then take under 1% of it).
pub(crate) struct OdpCharge {
    account: Arc<Account>,
    pages: usize,
}

impl OdpCharge {
    /// Charges `pages` pages on demand to `account`: `ENOMEM` past the
    /// user's budget, `budget` pages (`rdma::sys::totalram_pages`).
    pub(crate) fn take(account: &Arc<Account>, pages: usize, budget: usize) -> Result<Self> {
        account
            .odp_pages
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                n.checked_add(pages).filter(|&t| t <= budget)
            })
            .map_err(|_| ENOMEM)?;
        Ok(Self { account: account.clone(), pages })
    }
}

impl Drop for OdpCharge {
    fn drop(&mut self) {
        let pages = self.pages;
        let _ = self.account.odp_pages.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(pages)));
    }
}

/// Charges one object of `kind` to a process's account; kernel consumers
/// (no account) are not charged.
pub(crate) fn charge(account: Option<&Arc<Account>>, kind: Kind) -> Result<Option<Charge>> {
    account.map(|a| Charge::take(a, kind)).transpose()
}

/// The accounts of the users that have a context open on a device (under
/// the device lock).
pub(crate) struct Accounts(KVec<Arc<Account>>);

impl Accounts {
    pub(crate) const fn new() -> Self {
        Self(KVec::new())
    }

    /// A new account for the current effective user, allocated before the
    /// device lock is taken (then given to [`Accounts::open`]).
    pub(crate) fn prepare() -> Result<Arc<Account>> {
        Ok(Arc::new(
            Account {
                uid: Kuid::current_euid(),
                contexts: AtomicU32::new(0),
                held: [const { AtomicU32::new(0) }; KINDS],
                odp_pages: AtomicUsize::new(0),
            },
            GFP_KERNEL_ACCOUNT,
        )?)
    }

    /// The account a new context of `fresh`'s user is charged to: the one
    /// its user's other contexts use, or `fresh`.
    pub(crate) fn open(&mut self, fresh: Arc<Account>) -> Result<Arc<Account>> {
        let acct = match self.0.iter().find(|a| a.uid == fresh.uid) {
            Some(a) => a.clone(),
            None => {
                self.0.push(fresh.clone(), GFP_ATOMIC)?;
                fresh
            }
        };
        acct.contexts.fetch_add(1, Ordering::Relaxed);
        Ok(acct)
    }

    /// A context of `acct`'s user is gone; the last one takes the account
    /// off the list (its objects were destroyed before their context).
    pub(crate) fn close(&mut self, acct: &Arc<Account>) {
        if acct.contexts.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.retain(|a| !Arc::ptr_eq(a, acct));
        }
    }
}
