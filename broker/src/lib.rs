//! RocketMQ-compatible broker whose commit log is a DLedger replicated log.
//!
//! Layers (each depends only on the ones above it):
//!
//! ```text
//! message/      pure bytes: stored record codec, properties, tag code, batch bodies, msg ids
//!    │
//! store/        local state on disk
//!    ├─ commit_log     RocketMQ commit-log view over the DLedger Ledger (physical offset =
//!    │                 entry pos + 48), queue-offset assignment at append
//!    ├─ consume_queue  20-byte units per (topic, queueId), fixed-size files
//!    ├─ index_file     key / UNIQ_KEY index for QUERY_MESSAGE
//!    ├─ dispatcher     tails the committed position, feeds consume queues and the index
//!    └─ topics, offsets, subscriptions, delay_offsets   JSON metadata under config/
//!    │
//! processor/    request handlers (send, pull, offsets, admin, ...)
//!    │
//! controller / role   broker lifecycle: Slave / CatchingUp / Master driven by the ledger role
//! ```
//!
//! [`config`] (BrokerConfig from a RocketMQ properties file) is read by every layer.
//!
//! Invariants:
//! * Consume queues only hold units of committed records, written in commit-log order; they
//!   are truncated whenever the log below them is.
//! * A record's bytes are identical on every replica: the leader patches PHYSICALOFFSET and
//!   QUEUEOFFSET before the entry is replicated.
//! * Metadata files are replaced atomically (temp file, fsync, rename, fsync dir).
//! * Bytes from the network or disk never cause a panic or an allocation past a limit.

pub mod atomic_json;
pub mod broker;
pub mod cli;
pub mod clients;
pub mod config;
pub mod context;
pub mod controller;
pub mod error;
pub mod message;
pub mod metadata;
pub mod metrics;
pub mod namesrv_client;
pub mod processor;
pub mod role;
pub mod schedule;
pub mod services;
pub mod slave_sync;
pub mod store;
pub mod transaction;
