//! Plain values the [`super::Ledger`] hands out: proposal results, role and commit marks,
//! status snapshots. All numbers are DLedger `i64` (`-1` = none).

use std::net::SocketAddr;

use crate::core::Role;

/// Where a committed proposal landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Log index of the entry.
    pub index: i64,
    /// Data position of the entry's header (RocketMQ physical offset = `pos + 48`).
    pub pos: i64,
}

/// DLedger member role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LedgerRole {
    Follower,
    Candidate,
    Leader,
}

impl From<Role> for LedgerRole {
    fn from(r: Role) -> Self {
        match r {
            Role::Follower => LedgerRole::Follower,
            Role::Candidate => LedgerRole::Candidate,
            Role::Leader => LedgerRole::Leader,
        }
    }
}

/// Role, term and known leader of this member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleState {
    pub role: LedgerRole,
    pub term: i64,
    pub leader_id: Option<String>,
}

/// Committed water mark: consumers may read everything up to here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommittedMark {
    /// Committed index, -1 when nothing is committed.
    pub index: i64,
    /// Position just past the last committed entry (RocketMQ's max physical offset).
    pub end_pos: i64,
}

/// One member as seen from this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub id: String,
    pub addr: SocketAddr,
    /// Replication water mark (leader's view), -1 when unknown.
    pub match_index: i64,
    /// `end_index - match_index` on the leader, -1 when unknown.
    pub lag: i64,
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
    pub role: LedgerRole,
    pub term: i64,
    pub leader_id: Option<String>,
    pub begin_index: i64,
    pub end_index: i64,
    pub end_term: i64,
    pub committed_index: i64,
    pub committed_end_pos: i64,
    pub flushed_index: i64,
    pub pending_proposals: usize,
    pub peers: Vec<PeerStatus>,
}
