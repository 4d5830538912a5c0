//! The RocketMQ commit-log view of a replicated log (message-format.md §10).
//!
//! [`ReplicatedLog`] is the narrow interface the broker needs from DLedger: propose one
//! record per entry, watch the role and the committed mark, and read committed entries by
//! index or a record by physical offset (= entry pos + 48). The DLedger `Ledger` implements it
//! in [`crate::store::ledger_log`]; [`crate::store::mem_log::MemLog`] is a single-member
//! in-memory log for fast processor tests.
//!
//! Ordering contract (R12): entries are appended in the order in which the futures returned
//! by [`ReplicatedLog::propose`] are *first polled*. The message store relies on it to assign
//! queue offsets under one lock: assign, patch the record, create and poll the proposal once,
//! release.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
pub use dledger_commitlog::runtime::{LedgerStatus, PeerStatus};
use dledger_commitlog::Index;
use tokio::sync::watch;

use crate::message::record::DLEDGER_ENTRY_HEADER_LEN;
pub use crate::role::LedgerRole;

/// Where a committed proposal landed: the ledger's own result type (log index, entry
/// position in the data address space).
pub use dledger_commitlog::core::Appended;

/// RocketMQ physical offset of the record held by the entry `a` (pos + 48): where the
/// broker turns a DLedger position into a RocketMQ number.
pub fn physical_offset(a: &Appended) -> i64 {
    a.pos.raw() + DLEDGER_ENTRY_HEADER_LEN
}

/// Why a proposal failed; [`ProposeFailure::is_indeterminate`] tells whether it may still
/// commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeFailure {
    /// Not the leader: nothing appended.
    NotLeader,
    /// Flow control (pending window full, leadership transfer): nothing appended.
    Busy(String),
    /// Disk full, storage failure, shutdown: nothing appended.
    Unavailable(String),
    /// Quorum acknowledgement timed out: may still commit.
    Timeout,
    /// Leadership lost before the quorum acknowledged: may still commit.
    TermChanged,
}

impl ProposeFailure {
    /// Whether the entry may exist in the log (R14).
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ProposeFailure::Timeout | ProposeFailure::TermChanged)
    }
}

/// The log member's role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRoleState {
    pub role: LedgerRole,
    pub term: i64,
    pub leader_id: Option<String>,
}

/// Committed water mark: index -1 when nothing is committed; `end_pos` = position just past
/// the last committed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitMark {
    pub index: i64,
    pub end_pos: i64,
}

impl CommitMark {
    /// The ledger's committed mark in the broker's numbers (DLedger's -1 for none).
    pub fn from_ledger(m: &dledger_commitlog::runtime::CommittedMark) -> CommitMark {
        CommitMark {
            index: Index::to_wire(m.index),
            end_pos: m.end_pos.raw(),
        }
    }
}

/// One committed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub index: i64,
    pub pos: i64,
    /// One stored message record.
    pub body: Bytes,
}

impl LogEntry {
    /// Position just past this entry.
    pub fn end_pos(&self) -> i64 {
        self.as_ref().end_pos()
    }

    /// The entry seen as borrowed.
    pub fn as_ref(&self) -> LogEntryRef<'_> {
        LogEntryRef {
            index: self.index,
            pos: self.pos,
            body: &self.body,
        }
    }
}

/// One committed entry borrowed from the log for the time of a call
/// ([`ReplicatedLog::with_committed_entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEntryRef<'a> {
    pub index: i64,
    pub pos: i64,
    /// One stored message record.
    pub body: &'a [u8],
}

impl LogEntryRef<'_> {
    /// Position just past this entry.
    pub fn end_pos(&self) -> i64 {
        self.pos + DLEDGER_ENTRY_HEADER_LEN + self.body.len() as i64
    }
}

/// Committed-mark changes for the dispatcher: the log's own watch where the log has one of
/// another type (the ledger's), so waking the dispatcher takes no forwarding task in between.
pub enum CommitWatch {
    /// A broker-typed watch (in-memory logs).
    Broker(watch::Receiver<CommitMark>),
    /// The DLedger runtime's watch, read directly.
    Ledger(watch::Receiver<dledger_commitlog::runtime::CommittedMark>),
}

impl CommitWatch {
    /// The current mark, marked as seen.
    pub fn borrow_and_update(&mut self) -> CommitMark {
        match self {
            CommitWatch::Broker(rx) => *rx.borrow_and_update(),
            CommitWatch::Ledger(rx) => CommitMark::from_ledger(&rx.borrow_and_update()),
        }
    }

    /// Waits for a mark not yet seen; `Err` when the log is gone.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        match self {
            CommitWatch::Broker(rx) => rx.changed().await,
            CommitWatch::Ledger(rx) => rx.changed().await,
        }
    }
}

/// Future of a proposal.
pub type ProposeFuture = Pin<Box<dyn Future<Output = Result<Appended, ProposeFailure>> + Send>>;

/// The replicated log as the broker sees it.
pub trait ReplicatedLog: Send + Sync + 'static {
    /// Appends `body` as one entry; resolves once committed. See the ordering contract above.
    fn propose(&self, body: Bytes) -> ProposeFuture;
    /// Role changes, in order.
    fn role(&self) -> watch::Receiver<LogRoleState>;
    /// The committed mark now.
    fn committed_mark(&self) -> CommitMark;
    /// Committed mark changes, as directly as the log can give them (no forwarding task
    /// between a commit and the dispatcher or the role controller).
    fn commit_watch(&self) -> CommitWatch;
    /// The committed entry `index`; `Ok(None)` when it is not (or no longer) readable.
    fn committed_entry(&self, index: i64) -> Result<Option<LogEntry>, String>;
    /// Hands the committed entry `index` to `f`, borrowed where the log can (no copy, no
    /// allocation: the dispatcher reads every entry once, right after its commit); `Ok(false)`
    /// when it is not (or no longer) readable. The default reads it through
    /// [`ReplicatedLog::committed_entry`].
    fn with_committed_entry(
        &self,
        index: i64,
        f: &mut dyn FnMut(LogEntryRef<'_>),
    ) -> Result<bool, String> {
        match self.committed_entry(index)? {
            Some(e) => {
                f(e.as_ref());
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// [`ReplicatedLog::with_committed_entry`] for each committed entry `from..=last` in
    /// order, until `f` answers false or an entry cannot be read: `Ok` when the next one is
    /// not (or no longer) readable, the error text when reading it failed. Logs that store
    /// entries one after another override it to walk their files instead of looking each
    /// entry up.
    fn with_committed_entries(
        &self,
        from: i64,
        last: i64,
        f: &mut dyn FnMut(LogEntryRef<'_>) -> bool,
    ) -> Result<(), String> {
        for index in from..=last {
            let mut more = true;
            if !self.with_committed_entry(index, &mut |e| more = f(e))? || !more {
                break;
            }
        }
        Ok(())
    }
    /// The record at physical offset `phys` if it is committed.
    fn read_message(&self, phys: i64) -> Option<Bytes>;
    /// First index in the log (-1 when empty).
    fn begin_index(&self) -> i64;
    /// Last index in the local log, committed or not (-1 when empty).
    fn end_index(&self) -> i64;
    /// Stops the member (final flush + checkpoint). Idempotent.
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// The DLedger member snapshot (role, indexes, per-peer water marks) for
    /// GET_BROKER_RUNTIME_INFO; `None` for logs that are not DLedger members (tests' `MemLog`).
    fn status(&self) -> Option<LedgerStatus> {
        None
    }
}

/// The smallest readable physical offset (RocketMQ "commit log min offset"): the first
/// entry's record, or 0 for an empty log.
pub fn min_physical_offset(log: &dyn ReplicatedLog) -> i64 {
    let begin = log.begin_index();
    if begin < 0 {
        return 0;
    }
    match log.committed_entry(begin) {
        Ok(Some(e)) => e.pos + DLEDGER_ENTRY_HEADER_LEN,
        _ => 0,
    }
}

/// Index of the first committed entry whose position is ≥ `pos` (binary search over
/// committed indexes; positions grow with the index). Returns `committed + 1` when none.
pub fn first_index_at_or_after(log: &dyn ReplicatedLog, pos: i64) -> i64 {
    let begin = log.begin_index().max(0);
    let committed = log.committed_mark().index;
    let (mut lo, mut hi) = (begin, committed + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match log.committed_entry(mid) {
            Ok(Some(e)) if e.pos < pos => lo = mid + 1,
            Ok(Some(_)) => hi = mid,
            // Unreadable (cleaned below begin): move up.
            _ => lo = mid + 1,
        }
    }
    lo
}
