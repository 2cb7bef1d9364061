//! The ferroce transport engine: IBTA UD, UC and RC over RoCEv2, sans-IO.
//!
//! Pure state machines over bytes, time and an abstract memory. No I/O, no
//! locks, no allocation, no clock reads, no kernel types: the caller (the
//! kernel module, or the host simulator in `tests/`) supplies all of it.
//!
//! Rules for every file under this directory (it is compiled into the kernel):
//! - depend on `core` only; refer to sibling modules with `super::`, never `crate::`;
//! - no `unwrap`/`expect`/`panic!`/unchecked indexing/overflowing arithmetic
//!   outside `#[cfg(test)]`: every fallible step returns a value the caller handles;
//! - no `unsafe`.
//!
//! `make check` enforces the second rule with clippy (tools/check runs
//! `cargo clippy` on the host crate): the denials below cover every module
//! under this one, in the host crate and in the kernel crate's `CLIPPY=1`
//! build alike. Tests are exempt; a bounded instance that a rewrite would
//! only obscure carries its own `#[allow]` and the reason it cannot fail.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

pub mod engine;
pub mod error;
pub mod linger;
pub mod mcast;
pub mod prio;
pub mod memory;
pub mod qp;
pub mod rc;
pub mod ring;
pub mod sg;
pub mod shared_ring;
pub mod table;
pub mod uc;
pub mod ud;
pub mod verbs;

pub mod wire;
