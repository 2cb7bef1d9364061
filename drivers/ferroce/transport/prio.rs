//! At which priority a QP's send continuation runs.
//!
//! A QP that has more to send than one pass may send leaves the rest to a
//! work item, its continuation. At the priority of the processes it takes
//! turns with them, and a process spinning on its CQ on the same CPU (as
//! perftest's client and server both do) halves it. At high priority it
//! runs first, but one that always has more to send then holds its CPU
//! against every process there. So, as a softirq that keeps finding work
//! gets a bounded time before the rest goes to `ksoftirqd`, a continuation
//! runs at high priority for `hi_ns`, then rests at normal priority for
//! `lo_ns`, then goes back to high. A QP whose continuation was not queued
//! for `lo_ns` has rested already and starts its next burst at high
//! priority. This is the decision, without the clock or the workqueues;
//! the glue reads both.

/// One QP's high-priority budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrioBudget {
    /// The current phase is the high-priority one.
    high: bool,
    /// When the current phase began.
    since: u64,
    /// When the continuation was last queued (`None`: never).
    last: Option<u64>,
}

impl PrioBudget {
    /// A QP whose continuation never ran: its first burst is high.
    pub const fn new() -> Self {
        Self { high: true, since: 0, last: None }
    }

    /// The continuation is queued at `now`: whether at high priority.
    /// `hi_ns == 0`: never; `lo_ns == 0`: always (no rest).
    pub fn high(&mut self, now: u64, hi_ns: u64, lo_ns: u64) -> bool {
        if hi_ns == 0 {
            return false;
        }
        if lo_ns == 0 {
            return true;
        }
        let rested = self.last.is_none_or(|t| now.saturating_sub(t) >= lo_ns);
        self.last = Some(now);
        let age = now.saturating_sub(self.since);
        if rested || (!self.high && age >= lo_ns) {
            self.high = true;
            self.since = now;
        } else if self.high && age >= hi_ns {
            self.high = false;
            self.since = now;
        }
        self.high
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const US: u64 = 1_000;
    const HI: u64 = 2_000 * US;
    const LO: u64 = 2_000 * US;

    /// Queued every `step` from `from` to `to` (exclusive): the times at
    /// which the phase changed and to what.
    fn run(b: &mut PrioBudget, from: u64, to: u64, step: u64) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        let mut prev = None;
        let mut t = from;
        while t < to {
            let h = b.high(t, HI, LO);
            if prev != Some(h) {
                out.push((t, h));
                prev = Some(h);
            }
            t += step;
        }
        out
    }

    #[test]
    fn a_continuous_stream_alternates_high_and_rest() {
        let mut b = PrioBudget::new();
        let t0 = 1_000_000 * US;
        let phases = run(&mut b, t0, t0 + 10_000 * US, 100 * US);
        assert_eq!(
            phases,
            vec![
                (t0, true),
                (t0 + 2_000 * US, false),
                (t0 + 4_000 * US, true),
                (t0 + 6_000 * US, false),
                (t0 + 8_000 * US, true),
            ]
        );
    }

    #[test]
    fn never_more_than_hi_ns_high_in_a_row() {
        // Irregular queueing times: every high phase still ends within one
        // step after hi_ns, and every rest lasts at least lo_ns or until a
        // gap of lo_ns.
        let mut b = PrioBudget::new();
        let mut t = 5 * LO;
        let mut high_since: Option<u64> = None;
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let step = (x >> 33) % (700 * US);
            t += step;
            let h = b.high(t, HI, LO);
            match (h, high_since) {
                (true, None) => high_since = Some(t),
                (true, Some(s)) => assert!(t - s < HI + 700 * US, "high from {s} to {t}"),
                (false, _) => high_since = None,
            }
        }
    }

    #[test]
    fn an_idle_qp_starts_its_next_burst_high() {
        let mut b = PrioBudget::new();
        let t0 = 10 * LO;
        // 2.5 ms of stream: the last half millisecond rests.
        assert!(!run(&mut b, t0, t0 + 2_500 * US, 100 * US).is_empty());
        assert!(!b.high(t0 + 2_500 * US, HI, LO));
        // Idle for less than lo_ns: still resting.
        assert!(!b.high(t0 + 3_000 * US, HI, LO));
        // Idle for lo_ns: rested, high again with a whole budget.
        let t1 = t0 + 3_000 * US + LO;
        assert!(b.high(t1, HI, LO));
        assert!(b.high(t1 + HI - US, HI, LO));
        assert!(!b.high(t1 + HI, HI, LO));
    }

    #[test]
    fn a_rest_that_waited_long_ends_at_its_next_queueing() {
        // A rest whose item waited lo_ns for its CPU (the processes ran):
        // the continuation it queues is high.
        let mut b = PrioBudget::new();
        let t0 = 10 * LO;
        assert!(b.high(t0, HI, LO));
        assert!(b.high(t0 + HI / 2, HI, LO));
        assert!(!b.high(t0 + HI, HI, LO));
        assert!(b.high(t0 + HI + LO, HI, LO));
    }

    #[test]
    fn zero_means_never_or_always() {
        let mut b = PrioBudget::new();
        for t in 0..100u64 {
            assert!(!b.high(t * 1_000 * US, 0, LO));
            assert!(b.high(t * 1_000 * US, HI, 0));
        }
    }
}
