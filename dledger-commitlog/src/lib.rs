//! DLedger-compatible replicated commit log.
//!
//! Layers (each only uses the ones below it):
//!
//! ```text
//!   runtime/   tokio shell: Ledger handle, driver task (owns Node + Store), peer tasks, RPC
//!   core/      sans-IO Raft/DLedger state machine (no clock, no IO)
//!   wire/      DLedger RPC types and their JSON/base64 codec (imported by core and runtime)
//!   store/     files: data + index segments (mmap or in-memory), flush, clean, recovery
//!   format/    pure byte layouts: entry, index entry, checkpoint, currterm
//!   types.rs   Term / Index / Pos newtypes; -1 <-> None only here
//!   config.rs  LedgerConfig (DLedger defaults), validate()
//!   peers.rs   the dLegerPeers list parser (also the broker config's)
//! ```
//!
//! Storage invariants:
//! * files are byte-compatible with Java DLedger 0.3.1.2 (we additionally fill the two CRC
//!   fields it leaves 0; see `format::entry`);
//! * index `i` is at index-address `i * 32`; entries never span data files (blank rule);
//! * `committed <= end` always; readers see committed entries only; every read served verifies
//!   the body CRC;
//! * a failed flush poisons the store: writes are refused until restart;
//! * recovery never silently truncates at or below the checkpointed commit index, and the
//!   checkpoint only names data that was flushed before it was written.

pub mod config;
pub mod core;
pub mod format;
pub mod peers;
pub mod runtime;
pub mod sim;
pub mod store;
pub mod types;
pub mod wire;

pub use config::{FlushMode, LedgerConfig};
pub use store::{Store, StoreError, StoreReader};
pub use types::{Index, Pos, Term};
