//! Host build of the ferroce transport engine.
//!
//! The same files are compiled into the kernel module as `crate::transport`
//! (see `../ferroce.rs`); this root only supplies the crate-level attributes
//! of a standalone `no_std` library so the engine can be unit-tested,
//! property-tested, fuzzed and simulated on the host.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

#[path = "mod.rs"]
mod transport;
pub use transport::*;
