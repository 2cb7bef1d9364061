//! Reliable Connected: requester, responder and completer, as the IBTA
//! describes the RC SQ Logic and RQ Logic and as rdma_rxe names them.
//!
//! - [`requester`] turns send WQEs into request packets (segmentation by
//!   PMTU, PSN assignment, ACK requests, read/atomic limits, go-back-N);
//! - [`responder`] executes incoming requests (ePSN, duplicates, NAKs,
//!   read/atomic resources, MSN) and queues the responses;
//! - [`completer`] consumes responses (ACK coalescing, implied NAK, NAK
//!   handling, retry and RNR counters, timers) and completes send WQEs.

pub mod completer;
pub mod requester;
pub mod responder;
pub mod shared;

/// Largest RC message (IBTA: 2^31 bytes).
pub const MAX_MESSAGE: u32 = 1 << 31;

/// Most PSNs the requester keeps unacknowledged before it waits: bounds
/// the go-back-N cost of one loss.
pub const WINDOW: u32 = 128;

/// The smallest congestion window (packets in flight) after losses.
pub const MIN_CWND: u32 = 8;

/// The requester sets AckReq on the last packet of every message and on
/// every `ACK_REQ_EVERY`-th packet within a long one, so the window keeps
/// moving.
pub const ACK_REQ_EVERY: u32 = 32;

/// Local ACK timeout for the 5-bit `timeout` attribute: 4.096 us * 2^t, or
/// `None` for 0 (infinite, IBTA 9.7.6.1.3).
pub fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        return None;
    }
    4096u64.checked_shl(u32::from(timeout.min(31)))
}

/// The RNR NAK timer code `code` in nanoseconds (IBTA table 45).
pub fn rnr_timer_ns(code: u8) -> u64 {
    let us = super::wire::aeth::rnr_timer_us(code).unwrap_or(655_360);
    u64::from(us).saturating_mul(1000)
}

/// `rnr_retry` value meaning "retry forever".
pub const RNR_RETRY_INFINITE: u8 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_ack_timeout_is_4096ns_times_2_pow_t_and_0_is_infinite() {
        assert_eq!(ack_timeout_ns(0), None);
        assert_eq!(ack_timeout_ns(1), Some(8192));
        assert_eq!(ack_timeout_ns(14), Some(4096 << 14));
        assert_eq!(ack_timeout_ns(31), Some(4096u64 << 31));
    }

    #[test]
    fn rc_rnr_timer_table() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }
}
