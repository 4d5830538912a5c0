//! Sans-IO DLedger consensus core: no tokio, no clock, no filesystem, no global RNG.
//!
//! ```text
//!   shell (runtime / simulator)
//!     │ Node::handle(now_ms, Input)  Node::tick(now_ms)        ▲ Node::poll_action() -> Action
//!     ▼                                                         │
//!   node ── elector (votes, heartbeats, lease, transfer)        │ PersistHardState, Call, Respond,
//!        ├─ dispatcher (leader: COMPARE/TRUNCATE/APPEND/COMMIT per follower)
//!        ├─ quorum_ack (water marks -> committed; pending proposals)
//!        ├─ entry_handler (follower: ordered apply, reorder buffer)
//!        └─ member_state (role, term, vote)                     FlushLog, CommitAdvanced, ...
//!   log: RaftLog trait (MemLog here; the mmap store behind an adapter in the runtime)
//! ```
//!
//! Invariants the core maintains (checked by the simulator after every event):
//! at most one leader per term; a vote or term change is persisted before anything depending
//! on it leaves (actions run in order); entries commit only through an entry of the current
//! term (R1) and an election appends a no-op (empty body) entry; the vote check compares the
//! last entry's term (R2); `committed <= end` and committed never decreases (R7); nothing at or
//! below committed is truncated; a proposal is acknowledged only once committed.

/// `bug!(cfg, name)`: whether a re-injected historical bug is on (always false without `sim`).
macro_rules! bug {
    ($cfg:expr, $name:ident) => {{
        #[cfg(feature = "sim")]
        let on = $cfg.bugs.$name;
        #[cfg(not(feature = "sim"))]
        let on = false;
        on
    }};
}

pub mod config;
pub mod dispatcher;
pub mod elector;
pub mod entry_handler;
pub mod log;
pub mod mem_log;
pub mod member_state;
pub mod node;
pub mod quorum_ack;

#[cfg(test)]
mod tests;

#[cfg(feature = "sim")]
pub use config::BugInjection;
pub use config::CoreConfig;
pub use log::{Index, LogEntry, LogError, Pos, RaftLog, Term};
pub use mem_log::MemLog;
pub use member_state::{HardState, Role};
pub use node::{
    Action, Appended, CallFailure, CallId, Input, Node, ProposeError, RequestId, TransferFailure,
};
pub use quorum_ack::ProposalId;
