//! Safety invariants, checked after every event (RELIABILITY.md I7-I9, I11):
//! election safety (one leader per term), leader completeness (a new leader holds every
//! committed entry), committed entries never change (the same index commits the same entry
//! everywhere, forever), monotonic commit per incarnation, `committed <= end`, an acknowledged
//! proposal is stored (and in sync-flush mode flushed) on a quorum when acknowledged, and log
//! matching between any two replicas.

use bytes::Bytes;
use std::collections::BTreeMap;

use super::sim_log::SimLog;
use crate::core::{Index, RaftLog, Term};

/// Global record the invariants are checked against.
#[derive(Default)]
pub struct Checker {
    leaders: BTreeMap<Term, usize>,
    committed: BTreeMap<Index, (Term, Bytes)>,
    node_committed: Vec<Index>,
    acked: Vec<(Index, Bytes)>,
    /// Elections seen (leaders of distinct terms).
    pub elections: usize,
}

fn entry_of(log: &impl RaftLog, index: Index) -> Option<(Term, Bytes)> {
    log.entry(index).ok().map(|e| (e.term, e.body))
}

impl Checker {
    /// A checker for `n` nodes.
    pub fn new(n: usize) -> Self {
        Checker {
            node_committed: vec![-1; n],
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
    pub fn on_restart(&mut self, node: usize, hint: Index) {
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
        if index <= prev {
            return Err(format!(
                "monotonic commit: n{node} moved committed from {prev} to {index}"
            ));
        }
        if index > log.end_index() {
            return Err(format!(
                "committed <= end: n{node} committed {index} past its end {}",
                log.end_index()
            ));
        }
        let from = (prev + 1).max(log.begin_index());
        for i in from..=index {
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
        self.node_committed[node] = index;
        Ok(())
    }

    /// After every step of a node: `committed <= end`, and its committed prefix is intact.
    pub fn check_node(
        &self,
        node: usize,
        committed: Index,
        log: &impl RaftLog,
    ) -> Result<(), String> {
        if committed > log.end_index() {
            return Err(format!(
                "committed <= end: n{node} committed {committed} > end {}",
                log.end_index()
            ));
        }
        if committed >= log.begin_index() && committed >= 0 {
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
        let holds = |l: &L| {
            entry_of(l, index).is_some_and(|(_, b)| b == *body)
                && (!sync_flush || l.flushed_index() >= index)
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
        self.acked.push((index, body.clone()));
        Ok(())
    }

    /// Every acknowledged entry is still in `log` (the final leader's).
    pub fn check_acked_in(&self, log: &impl RaftLog) -> Result<(), String> {
        for (i, b) in &self.acked {
            if *i >= log.begin_index() && entry_of(log, *i).map(|e| e.1).as_ref() != Some(b) {
                return Err(format!(
                    "acknowledged entry {i} lost from the final leader's log"
                ));
            }
        }
        Ok(())
    }

    /// Number of acknowledged proposals.
    pub fn acked(&self) -> usize {
        self.acked.len()
    }
}

/// Log matching: if two logs hold an entry with the same index and term, they are identical
/// up to it.
pub fn log_matching<L: RaftLog>(a: &L, b: &L) -> Result<(), String> {
    let lo = a.begin_index().max(b.begin_index());
    let hi = a.end_index().min(b.end_index());
    let mut i = hi;
    while i >= lo {
        if a.term_at(i) == b.term_at(i) {
            break;
        }
        i -= 1;
    }
    for j in lo..=i {
        if entry_of(a, j) != entry_of(b, j) {
            return Err(format!(
                "log matching: logs agree on the term at {i} but differ at {j}"
            ));
        }
    }
    Ok(())
}
