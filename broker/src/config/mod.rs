//! BrokerConfig, read from a RocketMQ broker properties file (`mqbroker -c broker.conf`).
//!
//! Syntax is Java `Properties`: `key=value`, `key = value`, `key:value` or `key value`,
//! `#`/`!` comments, `\` line continuation, values trimmed. Keys are case-sensitive and named
//! as in Java (`dLegerGroup`, note "DLeger"). Unlike Java (which silently ignores a malformed
//! value), an invalid value stops start-up with an error naming the key; an unknown key is
//! logged with `tracing::warn!` and kept in [`BrokerConfig::extra`].
//!
//! # Files
//!
//! ```text
//!  mod.rs         ConfigError and the public paths (`broker::config::...`)
//!  properties.rs  the Java properties lexer: text -> (key, value) pairs
//!  schema.rs      BrokerConfig: its fields, RocketMQ defaults and the values derived from
//!                 them (addresses, ports, directories, delay levels)
//!  keys.rs        key names -> fields: loading a file, value syntax and ranges, cross-key
//!                 validation
//!  cpu.rs         the runtime's worker-thread policy
//! ```
//!
//! `dLegerPeers` is parsed by the ledger's own parser (`dledger_commitlog::peers`), so the
//! broker and its DLedger member accept the same peer lists.

mod cpu;
mod keys;
mod properties;
mod schema;

use std::path::PathBuf;

pub use dledger_commitlog::peers::{parse_dledger_peers, DLedgerPeer};
pub use keys::{parse_delay_levels, ROLE_SERVICE_KEYS};
pub use properties::parse_properties;
pub use schema::{
    BrokerConfig, BrokerRole, FlushDiskType, DEFAULT_MAX_TOPIC_QUEUE_NUMS,
    DEFAULT_MESSAGE_DELAY_LEVEL,
};

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A value does not parse or is out of range.
    #[error("invalid value {value:?} for config key {key}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// A key required by the chosen mode is missing.
    #[error("config key {key} is required: {reason}")]
    Missing { key: String, reason: String },
}
