//! SIM-09 lagging follower + retention (RELIABILITY.md §6(a), rule R11; DLedger #87, #61).
//!
//! Schedule: at 1.5 s a follower `x` goes down (process crash); in one seed of three the leader
//! is cut off first, keeps accepting proposals it cannot commit (a divergent suffix), and is
//! crashed as `x` once the others have elected a new leader. Before going down `x` may delete
//! a prefix of its own log, so both sides can have `begin > 0`. While `x` is down the live
//! members run one to three retention rounds, each deleting below the target (at most up to
//! its own committed index, and never its last entry); the target is chosen so that the leader still holds `x`'s next entry, or has
//! deleted it, or (divergent `x`) has deleted it while `x`'s end is still at or above the
//! leader's begin. `x` comes back 2-5 s later with its log intact or, in one seed of three,
//! empty (store wiped; its currterm file kept, so it cannot vote twice in a term).
//!
//! Pass: the repair traffic to `x` is bounded (at most [`MAX_REPAIR_PUSHES_PER_S`]
//! COMPARE/TRUNCATE pushes per virtual second, and the same push at most
//! [`MAX_SAME_REPAIR_PUSH_PER_S`] times a second: a walk-back moves, a busy loop repeats),
//! and at the end of the run, at most [`DEADLINE_MS`] after the restart, `x` is caught up or
//! marked needs-reinstall by the leader, whichever is right (the generic R11 check of the
//! final checks: a mark is only right when the leader lacks `x`'s next entry).

use rand_core::RngCore;
use std::collections::BTreeMap;

use super::{SimLog, Violation, World};
use crate::core::Index;
use crate::types::Shown;
use crate::wire::messages::{PushType, Request};

/// When the scenario starts (a leader is normally elected by then).
const START_MS: u64 = 1_500;
/// COMPARE/TRUNCATE pushes to the lagging follower allowed in one virtual second. A divergent
/// suffix is walked back one COMPARE per entry (at most ~30 entries here), a busy loop on a
/// calm network would send one every round trip (2-12 ms: hundreds per second).
pub(super) const MAX_REPAIR_PUSHES_PER_S: usize = 40;
/// Times the same COMPARE/TRUNCATE (kind and index) may be sent in one virtual second.
pub(super) const MAX_SAME_REPAIR_PUSH_PER_S: usize = 3;
/// The catalogue's limit: caught up or marked needs-reinstall within 30 s of the restart.
pub(super) const DEADLINE_MS: u64 = 30_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Setup,
    /// The leader is cut off; it becomes `x` once a new leader is elected.
    Deposing,
    Down,
    Up,
}

/// State of the SIM-09 schedule (module docs).
#[derive(Debug, Default)]
pub(in crate::sim) struct RetentionScript {
    /// Whether a deposed `x`'s divergent suffix may start at or below a begin index: the
    /// leader's target may fall inside it, and `x` may delete every entry it committed.
    divergent_over_begin: bool,
    phase: Phase,
    /// The lagging follower.
    x: usize,
    /// `x` restarts with an empty log.
    wipe: bool,
    deposed_since: u64,
    /// Times of the retention rounds still to run (ascending).
    rounds: Vec<u64>,
    /// Index the live members delete below (chosen at the first round).
    target: Option<Index>,
    restart_at: u64,
    restarted_at: Option<u64>,
    /// COMPARE/TRUNCATE pushes to `x` per virtual second since its restart.
    per_second: BTreeMap<u64, usize>,
    /// The same, per (second, is COMPARE, index).
    same: BTreeMap<(u64, bool, Option<Index>), usize>,
    /// Most repair pushes `x` got in one virtual second.
    pub max_per_second: usize,
}

/// Node `i` deletes its entries below `below`, clamped to its committed index + 1 and, like
/// the store's cleaner (which never deletes the file being written), keeping its last entry.
fn retain<L: SimLog>(w: &mut World<L>, i: usize, below: Index) -> Result<(), Violation> {
    let Some(node) = w.slots[i].node.as_ref() else {
        return Ok(());
    };
    let committed = node.committed_index();
    let Some(end) = node.log().end_index() else {
        return Ok(()); // nothing to delete
    };
    let below = below.min(Index::after(committed)).min(end);
    if below <= node.log().begin_index() {
        return Ok(());
    }
    w.checker
        .on_retention(i, below, committed, node.log())
        .map_err(|e| w.fail(e))?;
    if let Some(node) = w.slots[i].node.as_mut() {
        if !node.log_mut().delete_before(below) {
            return Err(w.fail("SIM-09 needs a log with retention (MemLog)".into()));
        }
    }
    w.note(|| format!("n{i} RETENTION deletes below {below}"));
    Ok(())
}

impl RetentionScript {
    /// A schedule; `divergent_over_begin` as in [`super::Scenario::LaggingRetention`].
    pub(super) fn new(divergent_over_begin: bool) -> Self {
        RetentionScript {
            divergent_over_begin,
            ..Default::default()
        }
    }

    /// Advance the schedule (called every tick).
    pub(super) fn tick<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        match self.phase {
            Phase::Setup => self.setup(w),
            Phase::Deposing => {
                let replaced = w.current_leader().is_some_and(|l| l != self.x);
                if replaced || w.now >= self.deposed_since + 5_000 {
                    w.links.heal();
                    w.note(|| "partition healed".to_string());
                    self.go_down(w)?;
                }
                Ok(())
            }
            Phase::Down => self.down(w),
            Phase::Up => Ok(()),
        }
    }

    fn setup<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        if w.now < START_MS {
            return Ok(());
        }
        let Some(l) = w.current_leader() else {
            return Ok(());
        };
        let n = w.opts.nodes;
        self.wipe = w.rng.next_u64().is_multiple_of(3);
        if w.rng.next_u64().is_multiple_of(3) {
            self.x = l;
            for o in 0..n {
                if o != l {
                    w.links.set(l, o, true);
                    w.links.set(o, l, true);
                }
            }
            self.deposed_since = w.now;
            self.phase = Phase::Deposing;
            w.note(|| format!("SIM-09 ISOLATE leader n{l}: it keeps a divergent suffix"));
            return Ok(());
        }
        self.x = (l + 1 + (w.rng.next_u64() % (n as u64 - 1)) as usize) % n;
        self.go_down(w)
    }

    fn go_down<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        let x = self.x;
        let committed = w.slots[x].node.as_ref().and_then(|n| n.committed_index());
        if let Some(c) = committed {
            if w.rng.next_u64() & 1 == 0 {
                // Up to everything committed; without `divergent_over_begin`, keep the last
                // committed entry, so a divergent suffix never starts at `x`'s own begin.
                let span = if self.divergent_over_begin {
                    Index::count_through(Some(c))
                } else {
                    c.0
                };
                if span >= 1 {
                    let below = Index(1).plus(w.rng.next_u64() % span);
                    retain(w, x, below)?;
                }
            }
        }
        w.crash(x, u64::MAX)?;
        if self.wipe {
            let empty = L::fresh().map_err(|e| w.fail(e))?;
            w.slots[x].down_log = Some(empty);
            w.slots[x].last_committed = None;
        }
        let down_ms = 2_000 + w.rng.next_u64() % 3_000;
        self.restart_at = w.now + down_ms;
        let k = 1 + w.rng.next_u64() % 3;
        self.rounds = (0..k)
            .map(|_| w.now + 300 + w.rng.next_u64() % (down_ms - 400))
            .collect();
        self.rounds.sort_unstable();
        self.phase = Phase::Down;
        let wipe = self.wipe;
        w.note(|| format!("SIM-09 n{x} DOWN for {down_ms} ms, restarts empty: {wipe}"));
        Ok(())
    }

    fn down<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        while self.rounds.first().is_some_and(|t| *t <= w.now) {
            self.rounds.remove(0);
            self.retention_round(w)?;
        }
        if w.now >= self.restart_at {
            w.start(self.x)?;
            self.restarted_at = Some(w.now);
            self.phase = Phase::Up;
        }
        Ok(())
    }

    fn retention_round<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        let Some(l) = w.current_leader() else {
            return Ok(());
        };
        if self.target.is_none() {
            self.target = self.choose_target(w, l);
            let (x, t) = (self.x, self.target);
            w.note(|| format!("SIM-09 retention target {t:?} (n{x} is down)"));
        }
        let Some(target) = self.target else {
            return Ok(());
        };
        for i in 0..w.opts.nodes {
            if i != self.x {
                retain(w, i, target)?;
            }
        }
        Ok(())
    }

    /// The index the live members delete below: one of the cases of the module docs, each
    /// drawn when it is possible, within what every live member has committed.
    fn choose_target<L: SimLog>(&self, w: &mut World<L>, l: usize) -> Option<Index> {
        let leader = w.slots[l].node.as_ref()?;
        let xlog = w.slots[self.x].down_log.as_ref()?;
        let need = w.checker.next_needed(xlog, leader.log());
        let after_xend = xlog.next_index();
        // Highest index every live member may delete below (none: no member holds an entry).
        let hi = (0..w.opts.nodes)
            .filter(|i| *i != self.x)
            .filter_map(|i| w.slots[i].node.as_ref())
            .map(|n| Some(Index::after(n.committed_index())).min(n.log().end_index()))
            .min()?;
        let one = Index(1);
        let inside = if self.divergent_over_begin {
            (need.next(), Some(after_xend).min(hi))
        } else {
            (one, Some(Index::ZERO))
        };
        let ranges: Vec<(Index, Index)> = [
            (one, Some(need).min(hi)),         // the leader keeps x's next entry
            inside,                            // deleted, x's (divergent) end reaches the begin
            (need.max(after_xend).next(), hi), // deleted, x entirely below the begin
        ]
        .into_iter()
        .filter_map(|(a, b)| b.filter(|b| a <= *b).map(|b| (a, b)))
        .collect();
        if ranges.is_empty() {
            return Some(hi.unwrap_or(Index::ZERO).max(one));
        }
        let (a, b) = ranges[(w.rng.next_u64() % ranges.len() as u64) as usize];
        Some(a.plus(w.rng.next_u64() % (b.0 - a.0 + 1)))
    }

    /// A call leaves for node `to`: count repair pushes to `x` after its restart.
    pub(super) fn on_call(&mut self, now: u64, to: usize, req: &Request) -> Result<(), String> {
        let Some(up) = self.restarted_at else {
            return Ok(());
        };
        let Request::Push(p) = req else {
            return Ok(());
        };
        let compare = p.push_type == PushType::COMPARE;
        if to != self.x || !(compare || p.push_type == PushType::TRUNCATE) {
            return Ok(());
        }
        let sec = (now - up) / 1_000;
        let n = self.per_second.entry(sec).or_default();
        *n += 1;
        let n = *n;
        self.max_per_second = self.max_per_second.max(n);
        if n > MAX_REPAIR_PUSHES_PER_S {
            return Err(format!(
                "SIM-09 busy loop: {n} COMPARE/TRUNCATE pushes to n{} in virtual second {sec} after its restart (limit {MAX_REPAIR_PUSHES_PER_S})",
                self.x
            ));
        }
        let same = self
            .same
            .entry((sec, compare, p.first_index()))
            .or_default();
        *same += 1;
        if *same > MAX_SAME_REPAIR_PUSH_PER_S {
            return Err(format!(
                "SIM-09 busy loop: {:?} at index {} sent to n{} {} times in virtual second {sec} after its restart",
                p.push_type,
                Shown(p.first_index()),
                self.x,
                *same
            ));
        }
        Ok(())
    }

    /// The scenario ran, and the end-of-run convergence check falls within the deadline.
    pub(super) fn final_check(&self, now: u64) -> Result<(), String> {
        let Some(up) = self.restarted_at else {
            return Err("SIM-09: the lagging follower never restarted".into());
        };
        if self.target.is_none() {
            return Err("SIM-09: no retention round ran".into());
        }
        if now - up > DEADLINE_MS {
            return Err(format!(
                "sim: SIM-09 checks {} ms after the restart, past the {DEADLINE_MS} ms limit",
                now - up
            ));
        }
        Ok(())
    }
}
