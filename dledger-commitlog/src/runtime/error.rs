//! Errors at the runtime boundary: proposal outcomes (the core's [`ProposeError`], definite
//! vs indeterminate, R14), leadership transfer outcomes, start-up failures and option
//! parsing.

use crate::core;
use crate::store::StoreError;
use crate::wire::messages::DLedgerCode;

/// Why a proposal did not commit: the core's error, also the runtime's (see
/// [`core::ProposeError`]; `Shutdown` is the runtime's own).
pub use crate::core::ProposeError;

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
