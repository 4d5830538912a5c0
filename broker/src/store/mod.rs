//! Local broker state on disk: consume queues, the key index and the JSON metadata tables.
//!
//! Owns files under `storePathRootDir` except the DLedger directories. Must not talk to the
//! network or the ledger: the dispatcher and processors (other modules) drive these types.

pub mod commit_log;
pub mod consume_queue;
pub mod data_version;
pub mod delay_offsets;
pub mod dispatcher;
pub mod index_file;
pub mod inflight;
pub mod ledger_log;
pub mod long_poll;
mod mapped_words;
pub mod mem_log;
pub mod message_store;
pub mod metadata_log;
pub mod offsets;
pub mod subscriptions;
#[cfg(test)]
pub(crate) mod test_support;
pub mod topics;

use std::path::{Path, PathBuf};

pub use consume_queue::{ConsumeQueue, ConsumeQueueSet, CqUnit};
pub use data_version::DataVersion;
pub use delay_offsets::DelayOffsetTable;
pub use index_file::KeyIndex;
pub use offsets::ConsumerOffsetTable;
pub use subscriptions::{SubscriptionGroupConfig, SubscriptionGroupTable};
pub use topics::{TopicConfig, TopicTable};

/// Errors of the local store (one enum for the store boundary).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A filesystem operation failed.
    #[error("io error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A metadata file is not valid JSON of the expected shape.
    #[error("bad json in {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A store file is damaged in a way recovery cannot repair.
    #[error("corrupt store file {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// An argument outside what the store accepts.
    #[error("invalid argument: {0}")]
    Invalid(String),
}

impl StoreError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
        move |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `<storePathRootDir>/config`, where the metadata JSON files live.
pub fn config_dir(store_root: &Path) -> PathBuf {
    store_root.join("config")
}

/// Wall clock in ms (metadata timestamps only; never used for protocol decisions).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
