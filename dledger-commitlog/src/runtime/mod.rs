//! Tokio shell around the sans-IO core: the [`Ledger`] handle the broker uses.
//!
//! ```text
//!   Ledger (Clone) ── propose ──► bounded proposal queue ─┐   (full -> Busy)
//!        │  role()/committed() watches, status()          │
//!        ▼                                                ▼
//!   driver task: owns core::Node<StoreLog> (and so the Store writer)
//!        loop select!{ biased; control, network inbox, proposals, flush progress, ticker }
//!        executes actions in order: PersistHardState (fsync) before anything later
//!        │ Call                         ▲ Reply / Request(+oneshot)
//!        ▼                              │
//!   peer task per member (bounded queue, network IO only) ─► remoting client ─► peer
//!        (PUSH entry objects encoded once for all followers: push_cache)
//!   rpc server (remoting) ─ decodes DLedger bodies ─► network inbox ─► core ─► Respond
//! ```
//!
//! Numbers at this boundary are the crate's newtypes: [`Appended`], [`CommittedMark`],
//! [`RoleState`] and [`LedgerStatus`] carry [`Index`], [`Term`] and [`Pos`], with `Option`
//! where DLedger writes `-1` for none; only the wire and the files use DLedger's `-1`.
//!
//! Lifecycle: [`Ledger::start`] opens (recovers) the store and creates the next log files
//! off the async workers, binds the RPC listener on this member's address from the peers list
//! (tests pick free ports by binding `127.0.0.1:0` and releasing them before start), then
//! spawns the tasks. [`Ledger::shutdown`] hands leadership to the best follower first (when
//! leading), then answers pending proposals, flushes, checkpoints and unbinds;
//! [`Ledger::halt`] does the same without hand-over, flush or checkpoint (crash-like).
//! A failed term/vote write or a poisoned store stops the member on its own (role published
//! as candidate); restarting it recovers.
//!
//! Invariants of the shell:
//! * only the driver task touches the node and the store writer; everything else talks to it
//!   through bounded channels and reads through [`StoreReader`] (committed entries only);
//! * the driver never awaits another task: a full peer queue turns the call into a network
//!   failure fed back to the core, so a slow peer can never stall consensus;
//! * a proposal is answered exactly once; after it reached the core an unknown outcome is
//!   reported as indeterminate (`TermChanged`), never as a definite failure;
//! * role changes are published in order on a watch (latest state) and on a bounded broadcast
//!   (every change, lag reported to the subscriber).
//! * a leadership transfer request is answered exactly once with a definite outcome: a
//!   refusal during the core pass that handles it, otherwise the core's `TransferDone` for the
//!   one transfer it runs (success once this member sees the transferee lead).

mod driver;
mod error;
mod ledger;
pub(crate) mod log_adapter;
mod options;
mod push_cache;
mod transport;
mod types;

pub use crate::config::{FlushMode, LedgerConfig};
pub use crate::core::{Appended, CoreConfig, Role};
pub use crate::store::{EntryRef, StoreError, StoreReader, StoredEntry};
pub use crate::types::{Index, Pos, Term};
pub use crate::wire::messages::DLedgerCode;
pub use error::{LedgerError, OptionError, ProposeError, TransferError};
pub use ledger::Ledger;
pub use options::{parse_peers, AppendHook, LedgerOptions};
pub use types::{CommittedMark, LedgerStatus, PeerStatus, RoleState};
