//! SIM-10 push bookkeeping (RELIABILITY.md §6(a); DLedger #331, #251).
//!
//! During the fault phase, windows of 0.5-3 s (0-1 s apart) hit the PUSH responses of a random
//! set of members: delayed past `maxPushTimeOutMs` (1-3.5 s, so the leader resends, and some
//! arrive after the 3 s call timeout), dropped (30-100 %) while the pushes themselves keep
//! arriving, or both. In half the windows the pushes to those members are also reordered
//! (10-50 % get up to 0.05-1.5 s extra) and duplicated (0-10 %), so followers buffer pushes
//! behind gaps and see resends and copies of buffered pushes (REPEATED_PUSH). Heartbeats are
//! untouched, so the leader keeps its lease; half the seeds batch pushes, half do not.
//!
//! Pass: every live follower's match index (the leader's view) reaches the leader's end at
//! most [`CATCH_UP_LIMIT_MS`] after the faults stop (and equals it at the end of the run), and
//! no member answers REPEATED_PUSH later than [`LATE_REPEATED_PUSH_MS`] after the faults stop
//! (no permanent REPEATED_PUSH loop).

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;

use super::{SimLog, World};

/// The catalogue's limit from the heal to every match index at the leader's end.
pub(super) const CATCH_UP_LIMIT_MS: u64 = 10_000;
/// REPEATED_PUSH answers this long after the heal mean the bookkeeping never recovered.
pub(super) const LATE_REPEATED_PUSH_MS: u64 = 5_000;
/// `maxPushTimeOutMs` of the simulated members (CoreConfig default).
const PUSH_TIMEOUT_MS: u64 = 1_000;
const START_MS: u64 = 1_500;

/// One fault window.
#[derive(Debug)]
struct Window {
    until: u64,
    /// Extra delay range of a response that is not dropped.
    delay: Option<(u64, u64)>,
    drop_permille: u64,
    /// Per-mille of pushes to the hit members delayed by up to `reorder_max_ms`.
    reorder_permille: u64,
    reorder_max_ms: u64,
    /// Per-mille of pushes to the hit members delivered twice.
    dup_permille: u64,
    /// Whose PUSH responses (and requests) are hit.
    responders: Vec<bool>,
}

/// State of the SIM-10 schedule (module docs).
#[derive(Debug, Default)]
pub(in crate::sim) struct PushFaultScript {
    window: Option<Window>,
    next_at: u64,
    /// Responses dropped or delayed so far.
    pub faulted: usize,
}

impl PushFaultScript {
    /// Open and close fault windows (called every tick).
    pub(super) fn tick<L: SimLog>(&mut self, w: &mut World<L>) {
        if w.healed {
            self.window = None;
            return;
        }
        if self.window.as_ref().is_some_and(|x| w.now >= x.until) {
            self.window = None;
            self.next_at = w.now + w.rng.next_u64() % 1_000;
            w.note(|| "SIM-10 push response faults end".to_string());
        }
        if self.window.is_some() || w.now < START_MS.max(self.next_at) {
            return;
        }
        let n = w.opts.nodes;
        let mut responders: Vec<bool> = (0..n).map(|_| w.rng.next_u64() & 1 == 0).collect();
        if !responders.contains(&true) {
            responders[(w.rng.next_u64() % n as u64) as usize] = true;
        }
        let kind = w.rng.next_u64() % 3;
        let delay = (kind != 1).then(|| {
            let lo = PUSH_TIMEOUT_MS + w.rng.next_u64() % 500;
            (lo, lo + w.rng.next_u64() % 2_000)
        });
        let drop_permille = if kind == 0 {
            0
        } else {
            300 + w.rng.next_u64() % 701
        };
        let (reorder_permille, reorder_max_ms, dup_permille) = if w.rng.next_u64() & 1 == 0 {
            (
                100 + w.rng.next_u64() % 401,
                50 + w.rng.next_u64() % 1_451,
                w.rng.next_u64() % 101,
            )
        } else {
            (0, 0, 0)
        };
        let until = w.now + 500 + w.rng.next_u64() % 2_500;
        w.note(|| {
            format!(
                "SIM-10 push responses from {responders:?}: delay {delay:?}, drop {drop_permille}/1000; requests reordered {reorder_permille}/1000 up to {reorder_max_ms} ms, duplicated {dup_permille}/1000; until {until}"
            )
        });
        self.window = Some(Window {
            until,
            delay,
            drop_permille,
            reorder_permille,
            reorder_max_ms,
            dup_permille,
            responders,
        });
    }

    /// The extra delays of the copies of a PUSH response sent by `from` (empty: dropped).
    pub(super) fn response_fates(&mut self, from: usize, rng: &mut ChaCha8Rng) -> Vec<u64> {
        let Some(win) = self.window.as_ref().filter(|w| w.responders[from]) else {
            return vec![0];
        };
        self.faulted += 1;
        if rng.next_u64() % 1_000 < win.drop_permille {
            return Vec::new();
        }
        vec![win
            .delay
            .map_or(0, |(lo, hi)| lo + rng.next_u64() % (hi - lo + 1))]
    }

    /// The extra delays of the copies of a PUSH request sent to `to` (never dropped).
    pub(super) fn request_fates(&mut self, to: usize, rng: &mut ChaCha8Rng) -> Vec<u64> {
        let Some(win) = self.window.as_ref().filter(|w| w.responders[to]) else {
            return vec![0];
        };
        let delay = |rng: &mut ChaCha8Rng| {
            if rng.next_u64() % 1_000 < win.reorder_permille {
                rng.next_u64() % (win.reorder_max_ms + 1)
            } else {
                0
            }
        };
        let mut copies = vec![delay(rng)];
        if win.dup_permille > 0 && rng.next_u64() % 1_000 < win.dup_permille {
            copies.push(delay(rng));
        }
        if copies.iter().any(|d| *d > 0) || copies.len() > 1 {
            self.faulted += 1;
        }
        copies
    }

    /// Node `node` answered REPEATED_PUSH at `now`.
    pub(super) fn on_repeated_push(
        &self,
        now: u64,
        fault_ms: u64,
        node: usize,
    ) -> Result<(), String> {
        if now >= fault_ms + LATE_REPEATED_PUSH_MS {
            return Err(format!(
                "SIM-10 permanent REPEATED_PUSH: n{node} still answers REPEATED_PUSH {} ms after the faults stopped",
                now - fault_ms
            ));
        }
        Ok(())
    }
}
