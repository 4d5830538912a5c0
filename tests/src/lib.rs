//! Cross-crate harness: real `mqnamesrv` / `mqbroker` processes on loopback (free ports, temp
//! dirs, killed on drop) and a small producer/consumer built on `remoting`.
//!
//! Binaries are passed in by the tests (`env!("CARGO_BIN_EXE_it-mqbroker")` etc.), which this
//! package builds from the real programs (`broker::cli`, `namesrv::NameServer`).

#![allow(clippy::unwrap_used)]

pub mod client;
pub mod cluster;
pub mod failover;
pub mod metadata_checks;
pub mod send_load;
