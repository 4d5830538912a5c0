//! SIM-11 truncation (RELIABILITY.md §6(a), rule R7; DLedger #316), and the TRUNCATE checks
//! every family runs.
//!
//! Schedule: from 1.5 s, rounds of: cut the leader off with a random minority (itself, or
//! with one more member of five), hand it a burst of 1-40 proposals it cannot commit (plus the
//! regular ones until a new leader is elected), keep the partition 1.5-3 s so the majority
//! elects a leader and appends over the same indexes, heal, wait 0.5-2 s. The cut-off members
//! then hold divergent suffixes of random lengths from old terms, which later leaders find by
//! COMPARE and cut by TRUNCATE; later rounds stack suffixes of several terms.
//!
//! Checks on every TRUNCATE a member handles (all families): the entries it removed that the
//! sending leader does not hold (conflicting ones) were never committed nor acknowledged, and
//! are never acknowledged later; after a successful TRUNCATE the member's log is a prefix of
//! the sender's (virtual logs, so entries below either begin count too). `committed <= end`
//! is checked after every step anyway.

use rand_core::RngCore;

use super::{SimLog, Violation, World};
use crate::core::{Index, LogEntry, Role, Term};
use crate::wire::messages::DLedgerCode;

const FIRST_ROUND_MS: u64 = 1_500;
const MAX_BURST: u64 = 40;

/// State of the SIM-11 schedule (module docs).
#[derive(Debug, Default)]
pub(in crate::sim) struct TruncationScript {
    next_round_at: u64,
    /// Partition rounds run.
    pub rounds: usize,
}

impl TruncationScript {
    /// Start a round when the last one is over (called every tick).
    pub(super) fn tick<L: SimLog>(&mut self, w: &mut World<L>) -> Result<(), Violation> {
        let now = w.now;
        if w.healed
            || w.partition_until != 0
            || now < FIRST_ROUND_MS.max(self.next_round_at)
            || now + 3_000 > w.opts.fault_ms
        {
            return Ok(());
        }
        let Some(l) = w.current_leader() else {
            return Ok(());
        };
        let n = w.opts.nodes;
        let size = 1 + (w.rng.next_u64() % ((n as u64 - 1) / 2)) as usize;
        let mut minority = vec![false; n];
        minority[l] = true;
        while minority.iter().filter(|m| **m).count() < size {
            minority[(w.rng.next_u64() % n as u64) as usize] = true;
        }
        for a in 0..n {
            for b in 0..n {
                if minority[a] != minority[b] {
                    w.links.set(a, b, true);
                }
            }
        }
        w.partition_until = now + 1_500 + w.rng.next_u64() % 1_500;
        let burst = 1 + w.rng.next_u64() % MAX_BURST;
        let until = w.partition_until;
        w.note(|| {
            format!("SIM-11 PARTITION minority {minority:?} (leader n{l}) until {until}, burst of {burst} proposals to n{l}")
        });
        for _ in 0..burst {
            w.propose_to(l)?;
        }
        self.next_round_at = until + 500 + w.rng.next_u64() % 1_500;
        self.rounds += 1;
        Ok(())
    }
}

/// A TRUNCATE push a member just handled.
pub(super) struct TruncateSeen {
    pub follower: usize,
    pub leader: usize,
    pub leader_inc: u32,
    pub first: Index,
    pub term: Term,
    /// The follower's entries from `first` before it handled the push.
    pub before: Vec<LogEntry>,
    /// Its answer, if it answered at once.
    pub code: Option<DLedgerCode>,
}

impl<L: SimLog> World<L> {
    /// Checks after a TRUNCATE (module docs). Skipped when the sender is no longer the leader
    /// of the push's term (its log may have changed since it sent the push).
    pub(super) fn after_truncate(&mut self, t: TruncateSeen) -> Result<(), Violation> {
        let Some(f) = self.slots[t.follower].node.as_ref() else {
            return Ok(());
        };
        let sender = &self.slots[t.leader];
        let Some(leader) = sender.node.as_ref().filter(|l| {
            sender.inc == t.leader_inc && l.role() == Role::Leader && l.term() == t.term
        }) else {
            return Ok(());
        };
        let conflicting: Vec<LogEntry> = t
            .before
            .into_iter()
            .filter(|e| f.log().entry(e.index).ok().as_ref() != Some(e))
            .filter(|e| {
                self.checker.virtual_entry(leader.log(), e.index) != Some((e.term, e.body.clone()))
            })
            .collect();
        if t.code == Some(DLedgerCode::SUCCESS) {
            if let Err(e) = self.checker.check_prefix(f.log(), leader.log()) {
                return Err(self.fail(format!(
                    "n{} after TRUNCATE at {} from leader n{} (term {}): {e}",
                    t.follower, t.first, t.leader, t.term
                )));
            }
        }
        if !conflicting.is_empty() {
            let (first, last) = (
                conflicting[0].index,
                conflicting[conflicting.len() - 1].index,
            );
            let follower = t.follower;
            self.note(|| format!("n{follower} TRUNCATED conflicting entries {first}..={last}"));
        }
        self.truncated_entries += conflicting.len();
        self.checker
            .on_truncated(t.follower, &conflicting)
            .map_err(|e| self.fail(e))
    }
}
