//! QuorumAckChecker: replication water marks -> committed index, and the proposals waiting
//! for it.
//!
//! Owns: the quorum arithmetic (pure functions) and the bounded queue of pending proposals.
//! Rules: commit only through an entry of the leader's current term (R1, Raft Figure 8; the
//! no-op appended on election makes that possible at once); proposals complete with their
//! `{index, pos}` when committed, fail as indeterminate on timeout or step-down (R14), and are
//! refused up front (definite) when `maxPendingRequestsNum` are already waiting.

use bytes::Bytes;
use std::collections::VecDeque;

use super::log::{Index, LogError, Pos, RaftLog, Term};
use super::member_state::Role;
use super::node::{Action, Appended, Node, ProposeError};

/// The highest index stored on a majority: water marks sorted descending, element at
/// `n / 2` (spec §9.2). `marks` includes the leader's own; none where nothing is stored.
pub fn quorum_index(marks: &[Option<Index>]) -> Option<Index> {
    if marks.is_empty() {
        return None;
    }
    let mut v = marks.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v[marks.len() / 2]
}

/// The new committed index, if `quorum` may be committed now: it must be above `committed`
/// and (unless the Figure-8 rule is switched off) hold an entry of `current_term`.
pub fn next_commit(
    committed: Option<Index>,
    quorum: Option<Index>,
    current_term: Term,
    term_of_quorum_entry: Option<Term>,
    figure8_rule_off: bool,
) -> Option<Index> {
    let quorum = quorum.filter(|q| Some(*q) > committed)?;
    if !figure8_rule_off && term_of_quorum_entry != Some(current_term) {
        return None;
    }
    Some(quorum)
}

/// Caller-chosen id of a proposal, echoed in `Action::ProposeDone`.
pub type ProposalId = u64;

/// A proposal appended to the leader's log and waiting for the quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub id: ProposalId,
    pub index: Index,
    pub pos: Pos,
    pub deadline_ms: u64,
}

/// Pending proposals of the current term, in index order, bounded.
#[derive(Debug, Default)]
pub struct PendingProposals {
    queue: VecDeque<Pending>,
}

impl PendingProposals {
    /// Number waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }
    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    /// Add one (indexes are increasing because the leader appends in order).
    pub fn push(&mut self, p: Pending) {
        self.queue.push_back(p);
    }
    /// Remove and return those with `index <= committed`.
    pub fn take_committed(&mut self, committed: Index) -> Vec<Pending> {
        let n = self
            .queue
            .iter()
            .take_while(|p| p.index <= committed)
            .count();
        self.queue.drain(..n).collect()
    }
    /// Remove and return those whose deadline has passed.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<Pending> {
        let mut out = Vec::new();
        self.queue.retain(|p| {
            if p.deadline_ms <= now_ms {
                out.push(*p);
                false
            } else {
                true
            }
        });
        out
    }
    /// Remove and return all (step-down).
    pub fn take_all(&mut self) -> Vec<Pending> {
        self.queue.drain(..).collect()
    }
}

impl<L: RaftLog> Node<L> {
    /// Client append (spec §9.1): definite refusals first, then append and wait for the quorum.
    pub(crate) fn propose(&mut self, id: ProposalId, body: Bytes) {
        let result = self.try_append(id, body);
        if let Err(e) = result {
            self.actions
                .push_back(Action::ProposeDone { id, result: Err(e) });
        }
    }

    fn try_append(&mut self, id: ProposalId, body: Bytes) -> Result<(), ProposeError> {
        if self.ms.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader_id().map(str::to_owned),
            });
        }
        if body.is_empty() {
            return Err(ProposeError::EmptyBody);
        }
        if self.transferring() {
            return Err(ProposeError::Transferring);
        }
        if self.pending_proposals() >= self.cfg.max_pending_requests {
            return Err(ProposeError::Busy);
        }
        let (index, pos) = self
            .log
            .append_leader(self.ms.term, body)
            .map_err(|e| match e {
                LogError::DiskFull => ProposeError::DiskFull,
                other => ProposeError::Storage(other.to_string()),
            })?;
        if bug!(self.cfg, ack_before_quorum) {
            let result = Ok(Appended { index, pos });
            self.actions.push_back(Action::ProposeDone { id, result });
            return Ok(());
        }
        let deadline_ms = self.now_ms + self.cfg.max_wait_ack_time_ms;
        if let Some(l) = self.leader.as_mut() {
            l.pending.push(Pending {
                id,
                index,
                pos,
                deadline_ms,
            });
        }
        Ok(())
    }

    /// Recompute the quorum index and commit through it if the rules allow.
    pub(crate) fn advance_commit(&mut self) {
        let Some(l) = self.leader.as_ref() else {
            return;
        };
        let me = self.me;
        let own = self.self_mark();
        let marks: Vec<Option<Index>> = l
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| if i == me { own } else { p.match_index })
            .collect();
        let quorum = quorum_index(&marks).min(self.log.end_index());
        let term_there = quorum.and_then(|q| self.log.term_at(q));
        let off = bug!(self.cfg, figure8_rule_off);
        let Some(c) = next_commit(self.committed, quorum, self.ms.term, term_there, off) else {
            return;
        };
        self.committed = Some(c);
        let pos = self.log.end_pos_of(c);
        self.actions
            .push_back(Action::CommitAdvanced { index: c, pos });
        let done = self
            .leader
            .as_mut()
            .map(|l| l.pending.take_committed(c))
            .unwrap_or_default();
        for p in done {
            let result = Ok(Appended {
                index: p.index,
                pos: p.pos,
            });
            self.actions
                .push_back(Action::ProposeDone { id: p.id, result });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_index_is_the_majority_water_mark() {
        let i = |v: u64| Some(Index(v));
        assert_eq!(quorum_index(&[i(5), None, i(3)]), i(3));
        assert_eq!(quorum_index(&[i(5), i(9), i(3), i(1), i(7)]), i(5));
        assert_eq!(quorum_index(&[i(2)]), i(2));
        assert_eq!(quorum_index(&[i(4), i(4), None, None]), None);
        assert_eq!(quorum_index(&[]), None);
    }

    #[test]
    fn figure8_rule_commits_only_through_current_term_entries() {
        let next = |committed: u64, quorum: u64, term_there: u64, off: bool| {
            next_commit(
                Some(Index(committed)),
                Some(Index(quorum)),
                Term(5),
                Some(Term(term_there)),
                off,
            )
        };
        assert_eq!(next(1, 3, 4, false), None);
        assert_eq!(next(1, 3, 4, true), Some(Index(3)));
        assert_eq!(next(1, 3, 5, false), Some(Index(3)));
        assert_eq!(next(3, 3, 5, false), None);
        assert_eq!(next(3, 2, 5, true), None);
        assert_eq!(next_commit(None, None, Term(5), None, true), None);
        assert_eq!(
            next_commit(None, Some(Index(0)), Term(5), Some(Term(5)), false),
            Some(Index(0))
        );
    }

    #[test]
    fn pending_proposals_complete_in_order_and_expire() {
        let mut p = PendingProposals::default();
        for i in 0..4u64 {
            p.push(Pending {
                id: i,
                index: Index(i),
                pos: Pos(i * 10),
                deadline_ms: 100 + i,
            });
        }
        assert_eq!(
            p.take_committed(Index(1))
                .iter()
                .map(|x| x.id)
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(
            p.take_expired(102).iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p.take_all().len(), 1);
        assert!(p.is_empty());
    }
}
