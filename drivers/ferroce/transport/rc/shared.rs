//! The congestion window one device shares among its RC QPs whose packets
//! go on the wire.
//!
//! Each RC QP has its own window (`completer`: halved on a loss, grown by
//! one per window acknowledged, never below [`MIN_CWND`](super::MIN_CWND)),
//! but a link is shared: 1024 QPs that each keep their smallest window
//! still put 8,192 packets in flight, and a path that holds 80 of them
//! drops the rest on every round, until the QPs exhaust their retries
//! (`IBV_WC_RETRY_EXC_ERR`). The device therefore also bounds the sum: a
//! QP's requests go out only while the packets all its wire QPs have in
//! flight (first unacknowledged PSN to next PSN) stay under this window.
//!
//! The window is TCP's (RFC 5681 in spirit, counted in packets): slow
//! start to `ssthresh`, then one more packet per window acknowledged; a
//! loss (sequence NAK, implied NAK) halves it once per window of packets
//! (the QPs that lose packets of the same burst share one cut), and a
//! local ACK timeout also sets it to [`SHARED_MIN`] (nothing came back:
//! start again slowly). It reacts and grows only while it is what limits
//! the device ([`SharedWindow::update`]).
//!
//! Fairness: a QP that finds no room waits in the device's FIFO of them;
//! room that frees goes to the oldest waiter first, at most [`GRANT`]
//! packets at a time, reserved for it until it sends (no QP can take it in
//! between), and while any QP waits, one that does not must queue too.
//! The FIFO is the driver's (threaded through its QP table); this type
//! holds the counts and the rules.

/// The window a device starts with, in packets.
pub const SHARED_INIT: u32 = 256;
/// The smallest window: after a local ACK timeout. Four QPs at their own
/// smallest window (`MIN_CWND`): below this, a link that loses packets at
/// random (not for want of room) would hold a few QPs to less than their
/// own windows allow (`tests/guest/rc_loss.sh`'s lossy run took 14 s
/// with a floor of 8, 8 s with 32).
pub const SHARED_MIN: u32 = 32;
/// The largest window: 32,768 packets (32 MiB at a 1 KiB MTU). Only a
/// path that loses nothing lets the window grow this far; what bounds it
/// in practice is the first loss.
pub const SHARED_MAX: u32 = 32768;
/// The most packets one wake of a waiting QP reserves for it.
pub const GRANT: u32 = 16;

/// Windows a device keeps: one per destination, by a hash of its address
/// ([`slot_of`]), so that a slow or lossy peer does not hold back the QPs
/// to the others (destinations whose hashes meet share a window).
pub const SHARED_SLOTS: usize = 16;

/// The window slot of destination address `dip` (IPv6, or IPv4 in its
/// first four bytes): FNV-1a of its bytes.
pub fn slot_of(dip: &[u8; 16]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in dip {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h as usize) % SHARED_SLOTS
}

/// What an RC requester saw since the device last asked
/// ([`Qp::take_cc`](crate::transport::engine::Qp::take_cc)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcEvents {
    /// Packets newly acknowledged.
    pub acked: u32,
    /// Losses it acted on (went back to resend).
    pub losses: u32,
    /// Local ACK timeouts.
    pub timeouts: u32,
}

impl CcEvents {
    /// Whether there is nothing to report.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The shared window and what is charged against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedWindow {
    /// Packets in flight, summed over the QPs' charges.
    inflight: u32,
    /// Packets reserved for woken waiters that have not sent yet.
    reserved: u32,
    /// The window, in packets.
    cwnd: u32,
    /// Slow start ends here.
    ssthresh: u32,
    /// Packets acknowledged towards the next additive step.
    acc: u32,
    /// Packets still to be acknowledged before a loss cuts the window
    /// again (0: not recovering).
    recover: u32,
    /// Window cuts so far (losses and timeouts that acted).
    cuts: u64,
}

impl Default for SharedWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedWindow {
    /// A device's window at creation.
    pub const fn new() -> Self {
        Self { inflight: 0, reserved: 0, cwnd: SHARED_INIT, ssthresh: SHARED_MAX, acc: 0, recover: 0, cuts: 0 }
    }

    /// The window, in packets.
    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }

    /// Packets in flight on the wire.
    pub fn in_flight(&self) -> u32 {
        self.inflight
    }

    /// Packets reserved for woken waiters.
    pub fn reserved(&self) -> u32 {
        self.reserved
    }

    /// How many times a loss or timeout cut the window.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Packets the window has room for, beyond what is in flight and
    /// reserved.
    pub fn room(&self) -> u32 {
        self.cwnd.saturating_sub(self.inflight).saturating_sub(self.reserved)
    }

    /// What a QP may add to its packets in flight now: its reservation
    /// (`grant`) plus, when no QP waits (`waiters`), the free room.
    pub fn allowance(&self, grant: u32, waiters: bool) -> u32 {
        if waiters {
            grant
        } else {
            grant.saturating_add(self.room())
        }
    }

    /// Reserves room for a woken waiter: at most [`GRANT`] packets, 0 when
    /// there is no room.
    pub fn reserve(&mut self) -> u32 {
        let g = self.room().min(GRANT);
        self.reserved = self.reserved.saturating_add(g);
        g
    }

    /// Gives back a reservation (the QP sent, or went away).
    pub fn release(&mut self, grant: u32) {
        self.reserved = self.reserved.saturating_sub(grant);
    }

    /// A QP's packets in flight moved from `old` to `new` (its charge),
    /// after it saw `ev`.
    ///
    /// The window reacts only while it is what limits the device (at least
    /// half of it in flight): with less, the QPs' own windows bound them
    /// and react to their losses, and a loss says nothing of the shared
    /// path (a few QPs on a link that drops at random, or reorders); nor
    /// does a window that is not used grow (RFC 7661's rule for TCP), so
    /// it is never far above what the path was last seen to carry.
    pub fn update(&mut self, old: u32, new: u32, ev: CcEvents) {
        let before = self.inflight;
        let limiting = before.saturating_mul(2) >= self.cwnd;
        self.inflight = self.inflight.saturating_sub(old).saturating_add(new);
        if ev.acked > 0 {
            self.on_acked(ev.acked, limiting);
        }
        if limiting && ev.timeouts > 0 {
            self.cut(before);
            self.cwnd = SHARED_MIN;
            self.acc = 0;
        } else if limiting && ev.losses > 0 {
            self.cut(before);
        }
        // A recovery outlives no packet of it: with nothing in flight it is
        // over, and the next loss is a new one.
        self.recover = self.recover.min(self.inflight);
    }

    /// A loss while `in_flight` packets were out: the first one of a
    /// recovery halves the window.
    fn cut(&mut self, in_flight: u32) {
        if self.recover > 0 {
            return;
        }
        self.cuts = self.cuts.saturating_add(1);
        self.ssthresh = (self.cwnd / 2).max(SHARED_MIN);
        self.cwnd = self.ssthresh;
        self.acc = 0;
        self.recover = in_flight.max(1);
    }

    fn on_acked(&mut self, n: u32, limiting: bool) {
        if self.recover > 0 {
            self.recover = self.recover.saturating_sub(n);
            return;
        }
        if !limiting {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd = self.cwnd.saturating_add(n).min(self.ssthresh).min(SHARED_MAX);
            return;
        }
        self.acc = self.acc.saturating_add(n);
        if self.acc >= self.cwnd {
            self.acc = self.acc.saturating_sub(self.cwnd);
            self.cwnd = self.cwnd.saturating_add(1).min(SHARED_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(n: u32) -> CcEvents {
        CcEvents { acked: n, ..CcEvents::default() }
    }

    #[test]
    fn shared_window_charges_sum_and_room_shrinks() {
        let mut w = SharedWindow::new();
        w.update(0, 100, CcEvents::default());
        w.update(0, 100, CcEvents::default());
        assert_eq!(w.in_flight(), 200);
        assert_eq!(w.room(), SHARED_INIT - 200);
        w.update(100, 0, CcEvents::default());
        assert_eq!(w.in_flight(), 100);
        // A charge never goes below zero, whatever a caller reports.
        w.update(500, 0, CcEvents::default());
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn shared_window_waiters_get_reservations_others_wait() {
        let mut w = SharedWindow::new();
        w.update(0, SHARED_INIT - 20, CcEvents::default());
        assert_eq!(w.allowance(0, false), 20);
        assert_eq!(w.allowance(0, true), 0, "a QP that does not wait queues behind those that do");
        assert_eq!(w.reserve(), GRANT);
        assert_eq!(w.reserve(), 20 - GRANT);
        assert_eq!(w.reserve(), 0);
        assert_eq!(w.room(), 0);
        assert_eq!(w.allowance(GRANT, true), GRANT);
        // The woken QP sends its grant: the charge replaces the reservation.
        w.release(GRANT);
        w.update(0, GRANT, CcEvents::default());
        assert_eq!(w.room(), 0);
        w.release(20 - GRANT);
        assert_eq!(w.room(), 20 - GRANT);
    }

    #[test]
    fn shared_window_one_cut_per_burst_of_losses() {
        let mut w = SharedWindow::new();
        w.update(0, 200, CcEvents::default());
        let loss = CcEvents { losses: 1, ..CcEvents::default() };
        // Ten QPs lose packets of the same burst: one halving.
        for _ in 0..10 {
            w.update(20, 0, loss);
        }
        assert_eq!(w.cwnd(), SHARED_INIT / 2);
        assert_eq!(w.cuts(), 1);
        // A loss after the whole window was acknowledged cuts again.
        w.update(0, 100, CcEvents::default());
        w.update(100, 0, acked(200));
        w.update(0, 100, CcEvents::default());
        w.update(100, 0, loss);
        assert_eq!(w.cwnd(), SHARED_INIT / 4);
        assert_eq!(w.cuts(), 2);
    }

    #[test]
    fn shared_window_not_limiting_neither_cuts_nor_grows() {
        let mut w = SharedWindow::new();
        // A few QPs with little in flight: their losses are their own
        // windows' business, and acknowledgements do not grow this one.
        w.update(0, 20, CcEvents::default());
        w.update(20, 0, CcEvents { losses: 1, timeouts: 1, acked: 0 });
        assert_eq!((w.cwnd(), w.cuts()), (SHARED_INIT, 0));
        w.update(0, 20, CcEvents::default());
        w.update(20, 0, acked(100_000));
        assert_eq!(w.cwnd(), SHARED_INIT);
        // Half the window in flight: it is what limits, and it reacts.
        w.update(0, SHARED_INIT / 2, CcEvents::default());
        w.update(0, 0, CcEvents { losses: 1, ..CcEvents::default() });
        assert_eq!((w.cwnd(), w.cuts()), (SHARED_INIT / 2, 1));
    }

    #[test]
    fn shared_window_timeout_restarts_from_min_then_slow_start_then_additive() {
        let mut w = SharedWindow::new();
        w.update(0, 200, CcEvents::default());
        w.update(200, 0, CcEvents { timeouts: 1, losses: 1, ..CcEvents::default() });
        assert_eq!(w.cwnd(), SHARED_MIN);
        // Nothing in flight: the recovery is over; slow start doubles per
        // window up to ssthresh (half the window at the timeout).
        w.update(0, SHARED_MIN, CcEvents::default());
        w.update(SHARED_MIN, SHARED_MIN, acked(SHARED_MIN));
        assert_eq!(w.cwnd(), 2 * SHARED_MIN);
        w.update(SHARED_MIN, 100, acked(1000));
        assert_eq!(w.cwnd(), SHARED_INIT / 2);
        // Past ssthresh: one packet per window.
        w.update(100, 100, acked(SHARED_INIT / 2 - 1));
        assert_eq!(w.cwnd(), SHARED_INIT / 2);
        w.update(100, 100, acked(1));
        assert_eq!(w.cwnd(), SHARED_INIT / 2 + 1);
    }

    #[test]
    fn shared_window_slots_per_destination_are_stable_and_spread() {
        let ip4 = |d: u8| {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&[10, 66, 0, d]);
            a
        };
        assert_eq!(slot_of(&ip4(2)), slot_of(&ip4(2)));
        let mut used = [false; SHARED_SLOTS];
        for d in 1..=64 {
            let s = slot_of(&ip4(d));
            assert!(s < SHARED_SLOTS);
            used[s] = true;
        }
        assert!(used.iter().filter(|&&u| u).count() >= SHARED_SLOTS * 3 / 4, "64 neighbours use most slots");
    }

    #[test]
    fn shared_window_never_leaves_its_bounds() {
        let mut w = SharedWindow::new();
        w.update(0, SHARED_MAX, CcEvents::default());
        for _ in 0..100 {
            // Each loss after the last one's recovery ended.
            w.update(0, 0, acked(SHARED_MAX));
            w.update(0, 0, CcEvents { losses: 1, ..CcEvents::default() });
        }
        assert_eq!(w.cwnd(), SHARED_MIN);
        for _ in 0..100_000 {
            w.update(0, 0, acked(u32::MAX / 2));
        }
        assert_eq!(w.cwnd(), SHARED_MAX);
    }
}
