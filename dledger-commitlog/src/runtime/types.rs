//! Plain values the [`super::Ledger`] hands out: role and commit marks, status snapshots
//! (a proposal's result is the core's [`crate::core::Appended`], its role the core's
//! [`Role`]). Indexes, terms and positions are the crate's newtypes ([`Index`], [`Term`],
//! [`Pos`]), `None` where DLedger says `-1`.

use std::net::SocketAddr;

use crate::core::Role;
use crate::types::{Index, Pos, Term};

/// Role, term and known leader of this member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleState {
    pub role: Role,
    pub term: Term,
    pub leader_id: Option<String>,
}

/// Committed water mark: consumers may read everything up to here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommittedMark {
    /// Committed index, none when nothing is committed.
    pub index: Option<Index>,
    /// Position just past the last committed entry (RocketMQ's max physical offset).
    pub end_pos: Pos,
}

/// One member as seen from this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub id: String,
    pub addr: SocketAddr,
    /// Replication water mark (leader's view), none when unknown.
    pub match_index: Option<Index>,
    /// Entries between `match_index` and `end_index` on the leader, none when unknown.
    pub lag: Option<i64>,
    /// This member (or the peer itself) answered a call within the last lease period.
    pub alive: bool,
    /// Leader's view: the peer needs entries the leader has deleted; reinstall it (R11).
    pub needs_reinstall: bool,
}

/// Snapshot for admin commands and metrics (refreshed by the driver every ~50 ms and on every
/// role change; committed fields are read live).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerStatus {
    pub self_id: String,
    pub role: Role,
    pub term: Term,
    pub leader_id: Option<String>,
    /// First retained index (none until the first snapshot).
    pub begin_index: Option<Index>,
    pub end_index: Option<Index>,
    pub end_term: Option<Term>,
    pub committed_index: Option<Index>,
    pub committed_end_pos: Pos,
    pub flushed_index: Option<Index>,
    pub pending_proposals: usize,
    pub peers: Vec<PeerStatus>,
}
