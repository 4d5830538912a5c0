//! `StoreError`: the one error type of the storage layer.

use std::io;

use crate::config::ConfigError;
use crate::format::entry::EntryError;
use crate::format::StateFileError;
use crate::types::{Index, Pos, Term};

/// Everything the store can refuse or fail with. Variants before `Io` are definite rejections
/// of a request (nothing was written); `Io`, `DiskFull` and `Poisoned` concern the disk; the
/// rest are found at startup and stop the node with a message naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Follower append: the entry's index is not the next index.
    #[error("entry index {got} is not the next index {expected}")]
    IndexMismatch {
        /// The next index of this log.
        expected: Index,
        /// The index offered.
        got: Index,
    },
    /// Follower append: the entry would land at another position than the leader's.
    #[error("entry position {got} differs from the local append position {expected}")]
    PosMismatch {
        /// Where this log would place the entry.
        expected: Pos,
        /// The leader's position.
        got: Pos,
    },
    /// An entry's term is below the last entry's term.
    #[error("term {got} below the last entry's term {last}")]
    TermRegression {
        /// Term of the last entry.
        last: Term,
        /// Term offered.
        got: Term,
    },
    /// Follower append: the body does not match the CRC sent by the leader.
    #[error("received entry {index} fails its crc: {source}")]
    ReceivedCorrupt {
        /// Entry index.
        index: Index,
        /// The CRC failure.
        source: EntryError,
    },
    /// The body cannot fit in one data file.
    #[error("body of {len} bytes exceeds the limit {max}")]
    BodyTooLarge {
        /// Body length.
        len: u64,
        /// Largest body that fits a data file.
        max: u64,
    },
    /// Read of an index outside `[begin, end]` (or above committed for readers).
    #[error("index {index} out of range (begin {begin:?}, last readable {last:?})")]
    IndexOutOfRange {
        /// Requested index.
        index: Index,
        /// First index in the log.
        begin: Option<Index>,
        /// Last index this caller may read.
        last: Option<Index>,
    },
    /// Read of a position that is not the start of a readable entry.
    #[error("no readable entry at position {pos}")]
    PosOutOfRange {
        /// Requested position.
        pos: Pos,
    },
    /// Truncation below the first index of the log.
    #[error("cannot truncate to {keep:?}: below the first index {begin:?}")]
    TruncateBelowBegin {
        /// Requested last kept index.
        keep: Option<Index>,
        /// First index of the log.
        begin: Option<Index>,
    },
    /// Stored bytes fail a check while being read.
    #[error("corrupt entry at {file} position {pos}: {source}")]
    Corrupt {
        /// File holding the entry.
        file: String,
        /// Entry position.
        pos: Pos,
        /// What failed.
        source: EntryError,
    },
    /// The index entry and the data entry disagree.
    #[error("index entry of {index} does not match the data at position {pos}")]
    IndexDataMismatch {
        /// Index.
        index: Index,
        /// Position named by the index.
        pos: Pos,
    },
    /// Disk usage is above the disk-full ratio, or the disk reported ENOSPC: nothing written.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// An earlier flush or write failed; the store refuses writes until it is reopened.
    #[error("store poisoned by an earlier disk failure ({0}); restart to recover")]
    Poisoned(String),
    /// An IO operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// File or directory.
        path: String,
        /// OS error.
        source: io::Error,
    },
    /// Startup: a file is missing between two others.
    #[error("refusing to start: data files not contiguous, {file} is missing (found {next} next)")]
    MissingSegment {
        /// Expected file.
        file: String,
        /// File found instead.
        next: String,
    },
    /// Startup: two files overlap.
    #[error("refusing to start: {file} overlaps the previous file")]
    OverlappingSegment {
        /// The overlapping file.
        file: String,
    },
    /// Startup: a non-last file has the wrong length (or a file is too long).
    #[error("refusing to start: {file} is {len} bytes, expected {expected}")]
    BadSegmentLength {
        /// The file.
        file: String,
        /// Its length.
        len: u64,
        /// The configured segment size.
        expected: u64,
    },
    /// Startup: damage at or below the checkpointed commit index.
    #[error(
        "refusing to start: committed entry {index} at {file} position {pos} is damaged ({reason}); \
         checkpointed commit index is {committed}. Restore this member from a healthy replica \
         (delete its data and index directories to re-fetch everything from the leader)"
    )]
    CorruptCommitted {
        /// File holding the damage.
        file: String,
        /// Position of the damaged entry.
        pos: Pos,
        /// Index that was expected there.
        index: Index,
        /// Checkpointed commit index.
        committed: Index,
        /// What failed.
        reason: String,
    },
    /// Startup: recovery would discard more than one data file.
    #[error(
        "refusing to start: recovery stops at position {pos} in {file} but later file {later} still \
         holds data; truncating would drop more than one file. Inspect the files; restore this \
         member from a healthy replica if they are damaged"
    )]
    TruncationTooLarge {
        /// File where the scan stopped.
        file: String,
        /// Stop position.
        pos: Pos,
        /// A later file with data.
        later: String,
    },
    /// Startup: `currterm` exists but cannot be read.
    #[error("refusing to start: {file} unreadable: {source}")]
    BadStateFile {
        /// The file.
        file: String,
        /// Parse failure.
        source: StateFileError,
    },
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl StoreError {
    /// Wraps an IO error, turning ENOSPC into a definite `DiskFull`.
    pub(crate) fn io(op: &'static str, path: impl Into<String>, source: io::Error) -> StoreError {
        let path = path.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return StoreError::DiskFull(format!("{op} {path}: {source}"));
        }
        StoreError::Io { op, path, source }
    }

    /// True for errors after which the store refuses every write until reopened.
    pub fn is_fatal(&self) -> bool {
        matches!(self, StoreError::Poisoned(_))
    }
}
