//! MemberState: role, term, vote and known leader of this member (spec §4).
//!
//! Owns: the persisted pair (term, voted-for) as [`HardState`] and the volatile role/leader.
//! Rule: the term never decreases; `voted_for` is cleared whenever the term increases; both are
//! made durable (Action::PersistHardState, executed before any later action) before a vote or
//! anything in the new term leaves this member.

use super::log::Term;
/// What must survive a crash: the `currterm` file (`currTerm`, `voteLeader`), in the layout
/// the store persists.
pub use crate::format::member_state::HardState;

/// DLedger member roles (a member starts as CANDIDATE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Candidate,
    Follower,
    Leader,
}

impl Role {
    /// DLedger's name for the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Candidate => "CANDIDATE",
            Role::Follower => "FOLLOWER",
            Role::Leader => "LEADER",
        }
    }
}

/// Volatile and persisted member state together.
#[derive(Clone, Debug)]
pub struct MemberState {
    pub role: Role,
    pub term: Term,
    pub voted_for: Option<String>,
    /// Index (into the peer list) of the leader of `term`, if known.
    pub leader: Option<usize>,
    /// Last time (ms) this member heard from its leader (followers) or started waiting.
    pub last_leader_contact_ms: u64,
}

impl MemberState {
    /// State after a (re)start from `hard`.
    pub fn restore(hard: &HardState, now_ms: u64) -> Self {
        MemberState {
            role: Role::Candidate,
            term: hard.term,
            voted_for: hard.voted_for.clone(),
            leader: None,
            last_leader_contact_ms: now_ms,
        }
    }

    /// The persisted part.
    pub fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            voted_for: self.voted_for.clone(),
        }
    }

    /// Move to a higher term, forgetting the vote and the leader. Returns whether it changed.
    pub fn raise_term(&mut self, term: Term) -> bool {
        assert!(
            term >= self.term,
            "term must never decrease ({} -> {term})",
            self.term
        );
        if term == self.term {
            return false;
        }
        self.term = term;
        self.voted_for = None;
        self.leader = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_term_clears_vote_and_leader() {
        let mut m = MemberState::restore(
            &HardState {
                term: Term(3),
                voted_for: Some("n1".into()),
            },
            7,
        );
        assert_eq!(
            (m.role, m.term, m.last_leader_contact_ms),
            (Role::Candidate, Term(3), 7)
        );
        m.leader = Some(1);
        assert!(!m.raise_term(Term(3)));
        assert_eq!(m.voted_for.as_deref(), Some("n1"));
        assert!(m.raise_term(Term(5)));
        assert_eq!(
            m.hard_state(),
            HardState {
                term: Term(5),
                voted_for: None
            }
        );
        assert_eq!(m.leader, None);
    }
}
