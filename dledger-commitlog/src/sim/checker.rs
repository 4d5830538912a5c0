//! Safety invariants, checked after every event (RELIABILITY.md I7-I9, I11):
//! election safety (one leader per term), leader completeness (a new leader holds every
//! committed entry), committed entries never change (the same index commits the same entry
//! everywhere, forever), monotonic commit per incarnation, `committed <= end`, an acknowledged
//! proposal is stored (and in sync-flush mode flushed) on a quorum when acknowledged, and log
//! matching between any two replicas.
//!
//! Retention (SIM-09) deletes a log's prefix. Only committed entries may be deleted, and the
//! checker holds every committed entry, so a log with `begin > 0` is checked as the *virtual*
//! log "committed record below `begin`, its own entries from `begin`": log matching, prefix
//! checks and acknowledged-entry checks then cover the deleted range too instead of skipping
//! it (a stale entry kept below another member's `begin` is still caught).

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

use super::sim_log::SimLog;
use crate::core::{Index, LogEntry, RaftLog, Term};
use crate::types::Shown;

/// Global record the invariants are checked against.
#[derive(Default)]
pub struct Checker {
    leaders: BTreeMap<Term, usize>,
    committed: BTreeMap<Index, (Term, Bytes)>,
    node_committed: Vec<Option<Index>>,
    acked: Vec<(Index, Bytes)>,
    acked_set: BTreeSet<(Index, Bytes)>,
    /// Entries some replica removed by TRUNCATE.
    truncated: BTreeSet<(Index, Bytes)>,
    /// Elections seen (leaders of distinct terms).
    pub elections: usize,
}

fn entry_of(log: &impl RaftLog, index: Index) -> Option<(Term, Bytes)> {
    log.entry(index).ok().map(|e| (e.term, e.body))
}

/// The indexes `lo..=hi` (none when `hi` is none or below `lo`).
fn indexes(lo: Index, hi: Option<Index>) -> impl Iterator<Item = Index> {
    let hi = hi.map(|h| h.0 + 1).unwrap_or(0);
    (lo.0..hi.max(lo.0)).map(Index)
}

impl Checker {
    /// A checker for `n` nodes.
    pub fn new(n: usize) -> Self {
        Checker {
            node_committed: vec![None; n],
            ..Default::default()
        }
    }

    /// Node `node` became leader of `term` with `log`.
    pub fn on_leader(&mut self, node: usize, term: Term, log: &impl RaftLog) -> Result<(), String> {
        if let Some(other) = self.leaders.insert(term, node) {
            if other != node {
                return Err(format!(
                    "election safety: n{other} and n{node} both lead term {term}"
                ));
            }
        }
        self.elections += 1;
        for (i, (t, b)) in &self.committed {
            if *i < log.begin_index() {
                continue;
            }
            if entry_of(log, *i).as_ref() != Some(&(*t, b.clone())) {
                return Err(format!(
                    "leader completeness: n{node} leads term {term} without committed entry {i} (term {t})"
                ));
            }
        }
        Ok(())
    }

    /// Node restarted with committed index `hint`.
    pub fn on_restart(&mut self, node: usize, hint: Option<Index>) {
        self.node_committed[node] = hint;
    }

    /// Node's committed index advanced to `index`.
    pub fn on_commit(
        &mut self,
        node: usize,
        index: Index,
        log: &impl RaftLog,
    ) -> Result<(), String> {
        let prev = self.node_committed[node];
        if Some(index) <= prev {
            return Err(format!(
                "monotonic commit: n{node} moved committed from {} to {index}",
                Shown(prev)
            ));
        }
        if Some(index) > log.end_index() {
            return Err(format!(
                "committed <= end: n{node} committed {index} past its end {}",
                Shown(log.end_index())
            ));
        }
        let from = Index::after(prev).max(log.begin_index());
        for i in indexes(from, Some(index)) {
            let Some(e) = entry_of(log, i) else {
                return Err(format!("n{node} committed {i} which it does not hold"));
            };
            match self.committed.get(&i) {
                Some(c) if *c != e => {
                    return Err(format!(
                        "committed entry changed: index {i} committed with term {} before, n{node} commits term {}",
                        c.0, e.0
                    ))
                }
                Some(_) => {}
                None => {
                    self.committed.insert(i, e);
                }
            }
        }
        self.node_committed[node] = Some(index);
        Ok(())
    }

    /// After every step of a node: `committed <= end`, and its committed prefix is intact.
    pub fn check_node(
        &self,
        node: usize,
        committed: Option<Index>,
        log: &impl RaftLog,
    ) -> Result<(), String> {
        if committed > log.end_index() {
            return Err(format!(
                "committed <= end: n{node} committed {} > end {}",
                Shown(committed),
                Shown(log.end_index())
            ));
        }
        if let Some(committed) = committed.filter(|c| *c >= log.begin_index()) {
            if let Some(c) = self.committed.get(&committed) {
                if entry_of(log, committed).as_ref() != Some(c) {
                    return Err(format!("n{node} overwrote its committed entry {committed}"));
                }
            }
        }
        Ok(())
    }

    /// A proposal with `body` was acknowledged at `index`: it must be on a quorum.
    pub fn on_ack<L: SimLog>(
        &mut self,
        index: Index,
        body: &Bytes,
        logs: &[Option<&L>],
        sync_flush: bool,
    ) -> Result<(), String> {
        let committed_here = self.committed.get(&index).is_some_and(|(_, b)| b == body);
        let holds = |l: &L| {
            if index < l.begin_index() {
                // Deleted by retention: only committed entries may be, so it is held iff the
                // committed entry at `index` is this body.
                return committed_here;
            }
            entry_of(l, index).is_some_and(|(_, b)| b == *body)
                && (!sync_flush || l.flushed_index() >= Some(index))
        };
        let holders: Vec<usize> = logs
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some_and(holds))
            .map(|(i, _)| i)
            .collect();
        let quorum = logs.len() / 2 + 1;
        if holders.len() < quorum {
            return Err(format!(
                "acked entry {index} is held only by {holders:?} (quorum {quorum}); terms there: {:?}",
                logs.iter().map(|l| l.and_then(|l| l.term_at(index))).collect::<Vec<_>>()
            ));
        }
        if self.truncated.contains(&(index, body.clone())) {
            return Err(format!(
                "acked entry {index} was truncated from a replica before it was acknowledged"
            ));
        }
        self.acked_set.insert((index, body.clone()));
        self.acked.push((index, body.clone()));
        Ok(())
    }

    /// Every acknowledged entry is still in `log` (the final leader's), or was deleted by
    /// retention as the committed entry at its index.
    pub fn check_acked_in(&self, log: &impl RaftLog) -> Result<(), String> {
        for (i, b) in &self.acked {
            if self.virtual_entry(log, *i).map(|e| e.1).as_ref() != Some(b) {
                let how = if *i < log.begin_index() {
                    "deleted by retention without being the committed entry"
                } else {
                    "lost from the final leader's log"
                };
                return Err(format!("acknowledged entry {i} {how}"));
            }
        }
        Ok(())
    }

    /// The entry of `log`'s virtual log at `index` (module docs): the committed record below
    /// `begin`, the log's own entry from `begin`.
    pub fn virtual_entry(&self, log: &impl RaftLog, index: Index) -> Option<(Term, Bytes)> {
        if index < log.begin_index() {
            self.committed.get(&index).cloned()
        } else {
            entry_of(log, index)
        }
    }

    /// Node `node` is about to delete its entries below `below` (retention): only entries it
    /// has committed may go, and the checker must know each of them.
    pub fn on_retention(
        &self,
        node: usize,
        below: Index,
        committed: Option<Index>,
        log: &impl RaftLog,
    ) -> Result<(), String> {
        if below > Index::after(committed) {
            return Err(format!(
                "sim: n{node} would delete below {below} past its committed {}",
                Shown(committed)
            ));
        }
        for i in indexes(log.begin_index(), below.min(log.next_index()).prev()) {
            if self.committed.get(&i) != entry_of(log, i).as_ref() {
                return Err(format!(
                    "sim: n{node} would delete entry {i}, which is not the committed one"
                ));
            }
        }
        Ok(())
    }

    /// TRUNCATE removed `removed` from node `node`: none of them may be committed or acked
    /// (RELIABILITY R7/SIM-11), and none may be acknowledged later.
    pub fn on_truncated(&mut self, node: usize, removed: &[LogEntry]) -> Result<(), String> {
        for e in removed {
            if self.committed.get(&e.index) == Some(&(e.term, e.body.clone())) {
                return Err(format!(
                    "n{node} truncated its committed entry {} (term {})",
                    e.index, e.term
                ));
            }
            let key = (e.index, e.body.clone());
            if self.acked_set.contains(&key) {
                return Err(format!(
                    "n{node} truncated the acknowledged entry {} (term {})",
                    e.index, e.term
                ));
            }
            self.truncated.insert(key);
        }
        Ok(())
    }

    /// `follower`'s virtual log is a prefix of `leader`'s (after a TRUNCATE; SIM-11).
    pub fn check_prefix<L: RaftLog>(&self, follower: &L, leader: &L) -> Result<(), String> {
        let (fe, le) = (follower.end_index(), leader.end_index());
        if fe > le {
            return Err(format!(
                "after TRUNCATE the follower's end {} is past the leader's end {}",
                Shown(fe),
                Shown(le)
            ));
        }
        let from = follower.begin_index().min(leader.begin_index());
        if let Some((i, tf, tl)) = self.first_difference(follower, leader, from, fe) {
            return Err(format!(
                "after TRUNCATE the follower's entry {i} (term {tf}) differs from the leader's (term {tl}); follower [{}, {}], leader [{}, {}]",
                follower.begin_index(),
                Shown(fe),
                leader.begin_index(),
                Shown(le)
            ));
        }
        Ok(())
    }

    /// The first index in `lo..=hi` at which `a` and `b` both hold a virtual entry and the
    /// two differ, with their terms.
    fn first_difference<L: RaftLog>(
        &self,
        a: &L,
        b: &L,
        lo: Index,
        hi: Option<Index>,
    ) -> Option<(Index, Term, Term)> {
        indexes(lo, hi).find_map(
            |i| match (self.virtual_entry(a, i), self.virtual_entry(b, i)) {
                (Some(ea), Some(eb)) if ea != eb => Some((i, ea.0, eb.0)),
                _ => None,
            },
        )
    }

    /// The first index at which `follower` needs an entry from `leader`: its first entry that
    /// differs from the leader's virtual log, else its end + 1 (SIM-09's "next entry").
    pub fn next_needed<L: RaftLog>(&self, follower: &L, leader: &L) -> Index {
        for i in indexes(follower.begin_index(), follower.end_index()) {
            if entry_of(follower, i) != self.virtual_entry(leader, i) {
                return i;
            }
        }
        follower.next_index()
    }

    /// Log matching (module docs: virtual logs): if two logs hold an entry with the same
    /// index and term, they are identical up to it.
    pub fn log_matching<L: RaftLog>(&self, a: &L, b: &L) -> Result<(), String> {
        let lo = a.begin_index().min(b.begin_index());
        let hi = a.end_index().min(b.end_index());
        // Walk down from `hi` to the highest index (>= lo) where both hold the same term; `i`
        // ends there, or just below `lo` when there is none.
        let mut i = hi;
        while let Some(x) = i.filter(|x| *x >= lo) {
            let (ta, tb) = (self.virtual_term(a, x), self.virtual_term(b, x));
            if ta.is_some() && ta == tb {
                break;
            }
            i = x.prev();
        }
        if let Some((j, ta, tb)) = self.first_difference(a, b, lo, i) {
            return Err(format!(
                "log matching: logs agree on the term at {} but differ at {j} (terms {ta} / {tb}; ranges [{}, {}] / [{}, {}])",
                Shown(i),
                a.begin_index(),
                Shown(a.end_index()),
                b.begin_index(),
                Shown(b.end_index())
            ));
        }
        Ok(())
    }

    fn virtual_term(&self, log: &impl RaftLog, index: Index) -> Option<Term> {
        if index < log.begin_index() {
            self.committed.get(&index).map(|e| e.0)
        } else {
            log.term_at(index)
        }
    }

    /// Number of acknowledged proposals.
    pub fn acked(&self) -> usize {
        self.acked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::MemLog;

    fn log(bodies: &[&'static [u8]]) -> MemLog {
        let mut l = MemLog::new();
        for b in bodies {
            l.append_leader(Term(1), Bytes::from_static(b)).unwrap();
        }
        l
    }

    /// A stale entry kept below another log's begin is still a log-matching violation: the
    /// deleted prefix is compared through the committed record.
    #[test]
    fn log_matching_compares_deleted_prefixes_through_the_committed_record() {
        let mut c = Checker::new(2);
        let mut a = log(&[b"a", b"b", b"c", b"d", b"e"]);
        c.on_commit(0, Index(4), &a).unwrap();
        a.delete_before(Index(3));
        let b = log(&[b"a", b"b", b"X", b"d", b"e"]);
        let err = c.log_matching(&a, &b).unwrap_err();
        assert!(err.contains("differ at 2"), "{err}");
        let same = log(&[b"a", b"b", b"c", b"d", b"e"]);
        c.log_matching(&a, &same).unwrap();
        // The follower that only has the prefix (lagging) matches too.
        c.log_matching(&a, &log(&[b"a"])).unwrap();
    }

    #[test]
    fn deleted_entries_are_held_and_acked_only_as_the_committed_entry() {
        let mut c = Checker::new(3);
        let mut a = log(&[b"a", b"b", b"c"]);
        c.on_commit(0, Index(2), &a).unwrap();
        a.delete_before(Index(2));
        let b = log(&[b"a", b"b", b"c"]);
        let logs = [Some(&a), Some(&b), None];
        c.on_ack(Index(1), &Bytes::from_static(b"b"), &logs, false)
            .unwrap();
        assert!(c
            .on_ack(Index(1), &Bytes::from_static(b"Z"), &logs, false)
            .is_err());
        c.check_acked_in(&a).unwrap();
        let mut other = log(&[b"a", b"Q", b"c"]);
        other.delete_before(Index(1));
        assert!(c.check_acked_in(&other).is_err(), "acked entry replaced");
    }

    #[test]
    fn truncating_committed_or_acked_entries_is_refused_and_never_acked_later() {
        let mut c = Checker::new(3);
        let a = log(&[b"a", b"b", b"c", b"d"]);
        c.on_commit(0, Index(1), &a).unwrap();
        let entries = a.entries(Index(0), 4, usize::MAX).unwrap();
        assert!(c.on_truncated(1, &entries[1..2]).is_err(), "committed");
        let logs = [Some(&a), Some(&a), None];
        c.on_ack(Index(2), &Bytes::from_static(b"c"), &logs, false)
            .unwrap();
        assert!(c.on_truncated(1, &entries[2..3]).is_err(), "acked");
        c.on_truncated(1, &entries[3..4]).unwrap();
        assert!(c
            .on_ack(Index(3), &Bytes::from_static(b"d"), &logs, false)
            .is_err());
    }

    #[test]
    fn next_needed_and_prefix_use_the_leaders_virtual_log() {
        let mut c = Checker::new(2);
        let mut leader = log(&[b"a", b"b", b"c", b"d"]);
        c.on_commit(0, Index(3), &leader).unwrap();
        leader.delete_before(Index(3));
        let diverged = log(&[b"a", b"X", b"Y"]);
        assert_eq!(c.next_needed(&diverged, &leader), Index(1));
        assert!(c.check_prefix(&diverged, &leader).is_err());
        let behind = log(&[b"a", b"b"]);
        assert_eq!(c.next_needed(&behind, &leader), Index(2));
        c.check_prefix(&behind, &leader).unwrap();
        assert_eq!(c.next_needed(&MemLog::new(), &leader), Index(0));
    }
}
