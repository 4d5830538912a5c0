//! Deterministic simulator of whole DLedger groups over the sans-IO core (feature `sim`).
//!
//! One thread, virtual time in ms, one seeded ChaCha8 PRNG per run (`SIM_SEED` replays a run).
//! The network delays, drops, duplicates and reorders messages and applies partitions (halves,
//! isolated leader, one-way, ring, bridge); nodes crash and restart from their durable state
//! (persisted hard state + the log, which keeps its page cache on a process crash and loses
//! unflushed entries beyond a random surviving prefix on power loss; power loss is only
//! injected in sync-flush mode, where acks wait for flushes); disks can be slow. The log is the
//! core's [`crate::core::MemLog`], not the mmap store: restarts do not go through the store's
//! recovery code.
//!
//! Invariants are checked after every event ([`checker`]); after the fault phase everything is
//! healed and the group must converge (liveness). A failure carries the seed and the last trace
//! lines of a verbose replay.

#![cfg(feature = "sim")]

pub mod checker;
pub mod families;
pub mod network;
pub mod world;

pub use families::{bug_scenario, family, BUGS, FAMILIES};
pub use world::{run, Outcome, SimOptions, Violation};
