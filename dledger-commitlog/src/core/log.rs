//! The replicated log as the core sees it: a small synchronous trait.
//!
//! Owns: the operations consensus needs (the entry type, [`LogEntry`], lives in
//! [`crate::types`] so the wire layer can convert it without depending on the core). Indexes follow DLedger: the first
//! entry has index 0; an empty new log has no end (`end_index() == None`, `end_term() ==
//! None`). Implementations: [`super::mem_log::MemLog`] (tests, simulator) and, in the runtime,
//! an adapter over the mmap store. Must not: decide anything about consensus (the core checks
//! terms, leaders and commit rules before calling these).

use bytes::Bytes;
use std::fmt;

use crate::types::Shown;
pub use crate::types::{Index, LogEntry, Pos, Term};

/// Why a log operation failed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum LogError {
    /// Index outside `[begin_index, end_index]` (below begin: already deleted; none: the log
    /// holds no entry there).
    OutOfRange {
        index: Index,
        begin: Option<Index>,
        end: Option<Index>,
    },
    /// Follower append not right after `end_index`.
    NotNext { index: Index, end: Option<Index> },
    /// Follower append would land at a different byte position than the leader's.
    PosMismatch { expected: Pos, actual: Pos },
    /// No space left (DISK_FULL).
    DiskFull,
    /// Any other storage failure; the node should stop accepting writes.
    Io(String),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::OutOfRange { index, begin, end } => {
                write!(
                    f,
                    "index {index} outside [{}, {}]",
                    Shown(*begin),
                    Shown(*end)
                )
            }
            LogError::NotNext { index, end } => {
                write!(f, "append at {index} but end is {}", Shown(*end))
            }
            LogError::PosMismatch { expected, actual } => {
                write!(f, "entry pos {expected} but the log writes at {actual}")
            }
            LogError::DiskFull => f.write_str("disk full"),
            LogError::Io(e) => write!(f, "log io error: {e}"),
        }
    }
}

impl std::error::Error for LogError {}

/// What the consensus core needs from a log. All calls are synchronous and cheap
/// (page-cache writes); durability is reported separately (`Input::LogFlushed`).
pub trait RaftLog {
    /// Index of the first retained entry; when the log is empty, the index the next entry
    /// gets (0 for a new log).
    fn begin_index(&self) -> Index;
    /// Index of the last entry: `None` for a new log; for a log emptied by retention or
    /// truncation, the entry before `begin_index()`.
    fn end_index(&self) -> Option<Index>;
    /// Term of the last entry, `None` if none (R2: votes compare this, never the current term).
    fn end_term(&self) -> Option<Term>;
    /// Term of the entry at `index`, `None` outside `[begin, end]`.
    fn term_at(&self, index: Index) -> Option<Term>;
    /// Up to `max_count` consecutive entries from `from`, stopping before the total body
    /// size would exceed `max_bytes` (at least one entry is returned if `from` exists).
    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError>;
    /// Leader append right after `end_index()` with `term`; returns the new entry's index
    /// and pos.
    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError>;
    /// Follower append of the leader's entry, which must come right after `end_index()` and
    /// land at `entry.pos` (byte-identical replicas).
    fn append_follower(&mut self, entry: &LogEntry) -> Result<(), LogError>;
    /// Remove every entry after `keep` (keep `..= keep`). `keep` may be the index before
    /// `begin_index()` (`None` when that is 0) to empty the log.
    fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), LogError>;
    /// Position just past the entry at `index` (committedPos for RocketMQ), `None` if absent.
    fn end_pos_of(&self, index: Index) -> Option<Pos>;

    /// Index the next appended entry gets: right after `end_index()`.
    fn next_index(&self) -> Index {
        Index::after(self.end_index())
    }

    /// The entry at `index`, if retained.
    fn entry(&self, index: Index) -> Result<LogEntry, LogError> {
        let mut v = self.entries(index, 1, usize::MAX)?;
        v.pop().ok_or(LogError::OutOfRange {
            index,
            begin: Some(self.begin_index()),
            end: self.end_index(),
        })
    }
}
