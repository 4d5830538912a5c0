//! Deterministic simulator of whole DLedger groups over the sans-IO core (feature `sim`).
//!
//! One thread, virtual time in ms, one seeded ChaCha8 PRNG per run (`SIM_SEED` replays a run).
//! The network delays, drops, duplicates and reorders messages and applies partitions (halves,
//! isolated leader, one-way, ring, bridge); nodes crash and restart from their durable state
//! (persisted hard state + the log). Two logs are available ([`sim_log`]): the core's
//! [`crate::core::MemLog`] (process crash keeps everything; power loss keeps the flushed prefix
//! plus a random prefix of the unflushed tail) and, with `real_store`, the real [`crate::store::Store`]
//! on the storage layer's in-memory disk, where a crash keeps the page cache or tears unflushed
//! 4 KiB pages and the restart runs the store's recovery scan. Power loss is only injected in
//! sync-flush mode, where acks wait for flushes. Disks can be slow or full.
//!
//! Some catalogue entries need a scripted schedule rather than random faults
//! ([`world::Scenario`]): SIM-09 a lagging follower while the others run retention, SIM-10
//! delayed/dropped PUSH responses, SIM-11 divergent suffixes cut by TRUNCATE.
//!
//! Invariants are checked after every event ([`checker`]); after the fault phase everything is
//! healed and the group must converge (liveness): every live follower holds the leader's log and
//! the leader's match index for it is its end, or (only when the leader has deleted the
//! follower's next entry) the leader marks it needs-reinstall. A failure carries the seed and
//! the last trace lines of a verbose replay.

#![cfg(feature = "sim")]

pub mod checker;
pub mod families;
pub mod network;
pub mod sim_log;
pub mod world;

pub use families::{bug_scenario, family, BUGS, FAMILIES};
pub use world::{run, Outcome, Scenario, SimOptions, Violation};
