//! libFuzzer target for the wire layer: `cargo +nightly fuzz run parse_packet`
//! from `drivers/ferroce/transport`.
//!
//! The input is tried both as a transport packet (BTH onward) and as a
//! complete RoCEv2 IP packet (ICRC split, check and fill). Nothing may
//! panic, and whatever parses must re-emit to a packet that parses to the
//! same value. `tests/wire_fuzz.rs` runs the same properties on stable.
#![no_main]

use ferroce_transport::wire::{icrc, packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(pkt) = packet::parse(data) {
        let mut out = vec![0u8; data.len()];
        let n = packet::emit(&pkt.headers, pkt.payload, &mut out).expect("re-emit");
        assert_eq!(n, data.len());
        assert_eq!(packet::parse(&out[..n]).expect("re-parse"), pkt);
    }

    let _ = icrc::check(data);
    if let Ok(parts) = icrc::split(data) {
        let _ = parts.check_icrc();
        let _ = packet::parse(parts.transport);
    }
    let mut copy = data.to_vec();
    if icrc::fill(&mut copy).is_ok() {
        assert!(icrc::check(&copy).is_ok());
    }
});
