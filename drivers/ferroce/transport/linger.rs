//! When the kernel lingers on a process's send queue instead of asking for
//! a doorbell.
//!
//! A process posts into a ring it shares with the kernel; the kernel takes
//! the requests when a doorbell (a system call) wakes it, or while it is
//! still looking. When a QP's sender runs out of requests it can either ask
//! for a doorbell at once (the process's next post then makes a system
//! call) or linger: its work item waits a little (`net::linger_wait` in the
//! glue) and looks at the ring again. Lingering pays off for a process that
//! streams requests over a path that completes them at once (the loopback:
//! it keeps posting without system calls) and costs a CPU for a process
//! that posts one request per round trip (a latency test: the doorbell
//! wakes the kernel sooner than a sleeping linger notices). This is the
//! decision, without the ring or the clock; the glue does the waiting, the
//! ring flag and the barrier.

/// Lingers in a row that found fewer than two requests after which a QP
/// stops lingering.
pub const GIVE_UP: u32 = 4;
/// A QP that gave up lingering tries again every this many idle moments.
pub const PROBE_EVERY: u32 = 64;
/// A QP whose last request was longer than this does not linger: such a
/// request keeps the kernel busy long enough in the poster's own doorbell
/// call, and a lingering work item then only takes a CPU from the
/// processes (on the loopback, `ib_send_bw -s 65536` ran at 203 MiB/s with
/// lingering and 331 MiB/s without, while the 64-byte message rate of
/// `ib_write_bw -q 4` fell from 0.137 to 0.074 Mpps without it).
pub const MAX_MSG: u32 = 16384;

/// What a sender that found nothing to send does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Queue the QP's work item to linger.
    Linger,
    /// Ask for a doorbell (then look at the ring once more).
    AskDoorbell,
    /// Nothing: requests are outstanding (an ACK or a timer comes back), or
    /// a queued linger will decide.
    Stop,
}

/// One QP's linger state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Linger {
    /// A linger is queued.
    armed: bool,
    /// Requests taken since it was queued.
    found: u32,
    /// Lingers in a row that found fewer than two.
    useless: u32,
    /// Idle moments so far (for the probe).
    idles: u32,
    /// Length of the last request taken.
    last_len: u32,
}

impl Linger {
    /// A new QP's: not lingering.
    pub const fn new() -> Self {
        Linger { armed: false, found: 0, useless: 0, idles: 0, last_len: 0 }
    }

    /// A linger is queued.
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// The queued linger has found nothing yet (the glue's work item keeps
    /// waiting while this holds and the ring has nothing new).
    pub fn waiting(&self) -> bool {
        self.armed && self.found == 0
    }

    /// The sender took a request of `len` bytes from the ring.
    pub fn took(&mut self, len: u32) {
        self.last_len = len;
        if self.armed {
            self.found = self.found.saturating_add(1);
        }
    }

    /// The sender found nothing to send; `sq_busy`: requests are still
    /// outstanding on the QP's send queue.
    pub fn on_idle(&mut self, sq_busy: bool) -> Idle {
        if sq_busy || self.armed {
            return Idle::Stop;
        }
        self.idles = self.idles.wrapping_add(1);
        if self.last_len > MAX_MSG {
            return Idle::AskDoorbell;
        }
        if self.useless < GIVE_UP || self.idles.is_multiple_of(PROBE_EVERY) {
            self.armed = true;
            self.found = 0;
            return Idle::Linger;
        }
        Idle::AskDoorbell
    }

    /// The queued linger ended, `pending` requests in the ring not taken
    /// yet. Whether the doorbell is to be asked for (it found none). Two or
    /// more requests in one linger mean a stream: keep lingering; fewer
    /// count towards [`GIVE_UP`].
    pub fn done(&mut self, pending: u32) -> bool {
        if !self.armed {
            return false;
        }
        self.armed = false;
        let found = self.found.saturating_add(pending);
        if found >= 2 {
            self.useless = 0;
        } else {
            self.useless = self.useless.saturating_add(1);
        }
        found == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_keeps_lingering() {
        let mut l = Linger::new();
        for _ in 0..1000 {
            assert_eq!(l.on_idle(false), Idle::Linger);
            assert!(l.waiting());
            assert_eq!(l.on_idle(false), Idle::Stop, "the queued linger decides");
            l.took(64);
            l.took(64);
            assert!(!l.waiting());
            assert!(!l.done(3));
        }
    }

    #[test]
    fn a_ping_pong_gives_up_then_probes() {
        let mut l = Linger::new();
        // One request per linger: useless, GIVE_UP times.
        for _ in 0..GIVE_UP {
            assert_eq!(l.on_idle(false), Idle::Linger);
            l.took(8);
            assert!(!l.done(0), "it found one: no doorbell needed yet");
        }
        let mut lingers = 0;
        for _ in 0..PROBE_EVERY * 3 {
            match l.on_idle(false) {
                Idle::Linger => {
                    lingers += 1;
                    assert!(l.done(0), "found none: ask for the doorbell");
                }
                Idle::AskDoorbell => {}
                Idle::Stop => panic!("nothing is outstanding"),
            }
        }
        assert_eq!(lingers, 3, "one probe every {PROBE_EVERY} idle moments");
        // A probe that finds a stream brings lingering back.
        while l.on_idle(false) != Idle::Linger {}
        assert!(!l.done(5));
        assert_eq!(l.on_idle(false), Idle::Linger);
    }

    #[test]
    fn outstanding_requests_and_large_messages_do_not_linger() {
        let mut l = Linger::new();
        assert_eq!(l.on_idle(true), Idle::Stop, "an ACK or a timer comes back");
        l.took(MAX_MSG + 1);
        assert_eq!(l.on_idle(false), Idle::AskDoorbell);
        l.took(MAX_MSG);
        assert_eq!(l.on_idle(false), Idle::Linger);
        assert!(!Linger::new().done(0), "no linger queued: nothing to decide");
    }
}
