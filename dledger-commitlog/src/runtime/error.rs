//! Errors at the runtime boundary: proposal outcomes (definite vs indeterminate, R14),
//! leadership transfer outcomes, start-up failures and option parsing.

use crate::core;
use crate::store::StoreError;
use crate::wire::messages::DLedgerCode;

/// Why a proposal did not commit.
///
/// `Timeout` and `TermChanged` are indeterminate: the entry may still commit (R14) and the
/// caller must not report a definite failure. Every other variant is definite: nothing was
/// appended, retrying cannot duplicate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This member is not the leader; the known leader, if any.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<String> },
    /// `maxPendingRequestsNum` proposals already wait (or the proposal queue is full).
    #[error("pending window full (maxPendingRequestsNum)")]
    Busy,
    /// A leadership transfer is in progress.
    #[error("leadership transfer in progress")]
    Transferring,
    /// The log has no room (disk usage above the disk-full ratio).
    #[error("disk full")]
    DiskFull,
    /// The log refused the entry (disk error, empty or oversized body).
    #[error("storage: {0}")]
    Storage(String),
    /// Not committed within `maxWaitAckTimeMs`; may still commit.
    #[error("not committed in time (indeterminate)")]
    Timeout,
    /// Leadership was lost before the entry committed; may still commit.
    #[error("leadership changed before commit (indeterminate)")]
    TermChanged,
    /// The ledger is shut down; the proposal never reached the log.
    #[error("ledger shut down")]
    Shutdown,
}

impl ProposeError {
    /// True when the entry may still have been committed (R14): report "unknown", not failure.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ProposeError::Timeout | ProposeError::TermChanged)
    }
}

impl From<core::ProposeError> for ProposeError {
    fn from(e: core::ProposeError) -> Self {
        match e {
            core::ProposeError::NotLeader { leader } => ProposeError::NotLeader { leader },
            core::ProposeError::Transferring => ProposeError::Transferring,
            core::ProposeError::Busy => ProposeError::Busy,
            core::ProposeError::DiskFull => ProposeError::DiskFull,
            core::ProposeError::Storage(s) => ProposeError::Storage(s),
            core::ProposeError::EmptyBody => {
                ProposeError::Storage("empty bodies are reserved for the election no-op".into())
            }
            core::ProposeError::Timeout => ProposeError::Timeout,
            core::ProposeError::TermChanged => ProposeError::TermChanged,
        }
    }
}

/// Why [`super::Ledger::transfer_leadership`] did not hand leadership to the target.
///
/// `Refused` is definite and immediate for a refusal (unknown or self target, not the
/// leader, target too far behind, a transfer already running), and comes within the wait
/// timeout for a transfer that was tried and failed (the target answered with a failure code,
/// could not be reached, did not catch up within `leadershipTransferWaitTimeout`, or did not
/// take over). After any error this member is not working on the transfer any more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The DLedger code (spec §5: UNKNOWN_MEMBER, UNEXPECTED_MEMBER, NOT_LEADER,
    /// FALL_BEHIND_TOO_MUCH, LEADER_TRANSFERRING, TAKE_LEADERSHIP_FAILED, EXPIRED_TERM,
    /// INCONSISTENT_LEADER, ...) an admin LEADERSHIP_TRANSFER would be answered with.
    #[error("leadership transfer refused: {code:?}: {reason}")]
    Refused { code: DLedgerCode, reason: String },
    /// No outcome within the transfer wait (a safety net: the core reports every transfer).
    #[error("leadership transfer outcome unknown after the wait timeout")]
    Timeout,
    /// The ledger is shut down.
    #[error("ledger shut down")]
    Shutdown,
}

impl TransferError {
    /// The DLedger code for this error (TIMEOUT 300 / INTERNAL_ERROR 500 for the last two).
    pub fn code(&self) -> DLedgerCode {
        match self {
            TransferError::Refused { code, .. } => *code,
            TransferError::Timeout => DLedgerCode::TIMEOUT,
            TransferError::Shutdown => DLedgerCode::INTERNAL_ERROR,
        }
    }
}

impl From<core::TransferFailure> for TransferError {
    fn from(f: core::TransferFailure) -> Self {
        TransferError::Refused {
            code: f.code,
            reason: f.reason,
        }
    }
}

/// A DLedger-style option that could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("option {key}={value:?}: {reason}")]
pub struct OptionError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// Why [`super::Ledger::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The options do not make sense together.
    #[error("invalid ledger options: {0}")]
    Config(String),
    /// The store could not be opened or recovered.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The DLedger RPC listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: remoting::RemotingError,
    },
}
