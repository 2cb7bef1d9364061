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
/// With more than this many other QPs lingering at the end of a linger,
/// one request found is enough to keep lingering: the linger work spins for
/// the others anyway, so this QP's linger costs no CPU of its own. (A
/// process posting bursts to many QPs, as `ib_write_bw -q 64` does, has
/// each linger find one request: the work takes a QP as soon as it sees a
/// post. Counted as useless, every QP gave up within four bursts and rang
/// a doorbell for most posts after.)
pub const SHARED: u32 = 4;
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
    /// A request was taken since the last idle moment.
    fresh: bool,
}

impl Linger {
    /// A new QP's: not lingering.
    pub const fn new() -> Self {
        Linger { armed: false, found: 0, useless: 0, idles: 0, last_len: 0, fresh: false }
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
        self.fresh = true;
        if self.armed {
            self.found = self.found.saturating_add(1);
        }
    }

    /// The sender found nothing to send; `sq_busy`: requests are still
    /// outstanding on the QP's send queue. Only a QP that took a request
    /// since its last idle moment lingers: lingering waits for a process's
    /// *next* request. (A responder whose process never posts, or a QP
    /// whose linger just found nothing, asks for the doorbell at once: with
    /// 64 QPs of an `ib_write_bw -q 64` server lingering on every ACK they
    /// sent, the device's list of lingering QPs could fill up: the client
    /// rang 30275 doorbells for 32768 requests before this rule, 2177
    /// after, the list's limit raised from 64 to 128 in the same step.)
    pub fn on_idle(&mut self, sq_busy: bool) -> Idle {
        if sq_busy || self.armed {
            return Idle::Stop;
        }
        if !core::mem::take(&mut self.fresh) {
            return Idle::AskDoorbell;
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

    /// The linger [`Linger::on_idle`] asked for is not queued (the device
    /// has no room for another lingering QP): the sender asks for the
    /// doorbell instead. Neither a useful nor a useless linger.
    pub fn cancel(&mut self) {
        self.armed = false;
    }

    /// The queued linger ended, `pending` requests in the ring not taken
    /// yet. Whether the doorbell is to be asked for (it found none). Two or
    /// more requests in one linger mean a stream: keep lingering; fewer
    /// count towards [`GIVE_UP`].
    pub fn done(&mut self, pending: u32) -> bool {
        self.done_among(pending, 0)
    }

    /// [`Linger::done`], with `others` other QPs still lingering: more
    /// than [`SHARED`] of them and one request is enough to keep
    /// lingering.
    pub fn done_among(&mut self, pending: u32, others: u32) -> bool {
        if !self.armed {
            return false;
        }
        self.armed = false;
        let found = self.found.saturating_add(pending);
        let enough = if others > SHARED { 1 } else { 2 };
        if found >= enough {
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
    fn a_cancelled_linger_counts_neither_way() {
        let mut l = Linger::new();
        // Cancelled lingers (no room) never make a QP give up...
        for _ in 0..GIVE_UP * 4 {
            l.took(8);
            assert_eq!(l.on_idle(false), Idle::Linger);
            l.cancel();
            assert!(!l.is_armed() && !l.waiting());
            assert!(!l.done(0), "a cancelled linger has nothing to end");
        }
        l.took(8);
        assert_eq!(l.on_idle(false), Idle::Linger);
        // ...nor reset the count of useless ones.
        for _ in 0..GIVE_UP - 1 {
            l.took(8);
            assert!(!l.done(0));
            assert_eq!(l.on_idle(false), Idle::Linger);
            l.cancel();
            l.took(8);
            assert_eq!(l.on_idle(false), Idle::Linger);
        }
        l.took(8);
        assert!(!l.done(0));
        l.took(8);
        assert_eq!(l.on_idle(false), Idle::AskDoorbell, "GIVE_UP useless lingers, the cancelled ones between not counted");
    }

    #[test]
    fn a_stream_keeps_lingering() {
        let mut l = Linger::new();
        l.took(64);
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
        l.took(8);
        for _ in 0..GIVE_UP {
            assert_eq!(l.on_idle(false), Idle::Linger);
            l.took(8);
            assert!(!l.done(0), "it found one: no doorbell needed yet");
        }
        let mut lingers = 0;
        for _ in 0..PROBE_EVERY * 3 {
            // Each request comes with a doorbell...
            match l.on_idle(false) {
                Idle::Linger => {
                    lingers += 1;
                    assert!(l.done(0), "found none: ask for the doorbell");
                }
                Idle::AskDoorbell => {}
                Idle::Stop => panic!("nothing is outstanding"),
            }
            l.took(8);
        }
        assert_eq!(lingers, 3, "one probe every {PROBE_EVERY} idle moments");
        // A probe that finds a stream brings lingering back.
        while l.on_idle(false) != Idle::Linger {
            l.took(8);
        }
        assert!(!l.done(5));
        l.took(8);
        assert_eq!(l.on_idle(false), Idle::Linger);
    }

    #[test]
    fn only_a_qp_that_took_a_request_lingers() {
        let mut l = Linger::new();
        // A responder's QP: idle after every ACK, never a request of its own.
        for _ in 0..PROBE_EVERY * 2 {
            assert_eq!(l.on_idle(false), Idle::AskDoorbell);
        }
        // A burst, then a linger that finds nothing: the doorbell, and no
        // more lingering until the next request.
        l.took(64);
        assert_eq!(l.on_idle(false), Idle::Linger);
        assert!(l.done(0), "found none: ask for the doorbell");
        assert_eq!(l.on_idle(false), Idle::AskDoorbell);
        assert_eq!(l.on_idle(false), Idle::AskDoorbell);
        l.took(64);
        assert_eq!(l.on_idle(false), Idle::Linger, "one useless linger does not make it give up");
    }

    #[test]
    fn outstanding_requests_and_large_messages_do_not_linger() {
        let mut l = Linger::new();
        l.took(64);
        assert_eq!(l.on_idle(true), Idle::Stop, "an ACK or a timer comes back");
        l.took(MAX_MSG + 1);
        assert_eq!(l.on_idle(false), Idle::AskDoorbell);
        l.took(MAX_MSG);
        assert_eq!(l.on_idle(false), Idle::Linger);
        assert!(!Linger::new().done(0), "no linger queued: nothing to decide");
    }

    #[test]
    fn one_request_a_linger_is_enough_among_many_lingering_qps() {
        // Alone (or nearly): one request a linger is a round trip at a
        // time; the QP gives up after GIVE_UP of them.
        let mut l = Linger::new();
        let mut gave_up = false;
        for _ in 0..2 * GIVE_UP {
            l.took(64);
            match l.on_idle(false) {
                Idle::Linger => {
                    l.took(64);
                    assert!(!l.done_among(0, SHARED));
                }
                _ => gave_up = true,
            }
        }
        assert!(gave_up, "one request a linger among few: it gives up");
        // Among many: it keeps lingering.
        let mut l = Linger::new();
        for _ in 0..4 * GIVE_UP {
            l.took(64);
            assert_eq!(l.on_idle(false), Idle::Linger, "among many, one request a linger keeps it lingering");
            l.took(64);
            assert!(!l.done_among(0, SHARED + 1));
        }
        // Finding none still asks for the doorbell.
        l.took(64);
        assert_eq!(l.on_idle(false), Idle::Linger);
        assert!(l.done_among(0, SHARED + 1), "found none: ask for the doorbell");
    }
}
