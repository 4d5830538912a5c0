//! Metadata through the replicated log (G5, G5a): topic configs, subscription groups and
//! consumer offsets that the master acknowledges are first committed in the DLedger log, as
//! ordinary RocketMQ records of the reserved topic [`METADATA_TOPIC`], and every member applies
//! them to its tables in log order (the dispatcher calls [`MetadataTables::apply`]). A new
//! master therefore knows every change the old one acknowledged: nothing depends on the
//! 10-second slave sync any more.
//!
//! Record format (documented for operators in `broker/METADATA_LOG.md`): topic
//! `RMQ_SYS_DLEDGER_METADATA`, queue 0, a plain (non-transactional) record whose body is one
//! JSON object with a `kind`:
//! * `{"kind":"topicPut","topicConfig":{...TopicConfig as in topics.json...}}`
//! * `{"kind":"topicDelete","topic":"T"}`
//! * `{"kind":"groupPut","groupConfig":{...SubscriptionGroupConfig...}}`
//! * `{"kind":"groupDelete","group":"G","cleanOffset":false}`
//! * `{"kind":"offsets","offsets":[{"topic":"T","group":"G","queueId":0,"offset":42},...]}`
//!
//! Snapshot and replay: the JSON table files are the snapshot; `config/metadataLog.json`
//! records the log index they are complete through, written after them. At start the
//! dispatcher re-reads the records after that index (every change is a put or delete of one
//! key, so re-applying a suffix in log order over a table that already holds part of it ends
//! in the same state).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::offsets::ConsumerOffsetTable;
use super::subscriptions::{SubscriptionGroupConfig, SubscriptionGroupTable};
use super::topics::{TopicConfig, TopicTable};
use super::{config_dir, StoreError};
use crate::atomic_json::{load_json, write_json_atomic};

/// The reserved topic metadata records are stored under (a system topic: clients can neither
/// send to it nor create or delete it).
pub const METADATA_TOPIC: &str = "RMQ_SYS_DLEDGER_METADATA";

/// File under `<storePathRootDir>/config` naming the log index the tables are complete through.
pub const METADATA_APPLIED_FILE: &str = "metadataLog.json";

/// One consumer offset commit in an `offsets` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetCommit {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub offset: i64,
}

/// A metadata change as it is stored in the log (see the module doc for the JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum MetadataChange {
    #[serde(rename_all = "camelCase")]
    TopicPut {
        topic_config: TopicConfig,
    },
    TopicDelete {
        topic: String,
    },
    #[serde(rename_all = "camelCase")]
    GroupPut {
        group_config: SubscriptionGroupConfig,
    },
    #[serde(rename_all = "camelCase")]
    GroupDelete {
        group: String,
        /// Also drop the group's consumer offsets (Java 5's `cleanOffset`).
        #[serde(default)]
        clean_offset: bool,
    },
    Offsets {
        offsets: Vec<OffsetCommit>,
    },
}

impl MetadataChange {
    /// The record body.
    pub fn to_body(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a record body.
    pub fn from_body(body: &[u8]) -> Result<MetadataChange, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

/// Content of [`METADATA_APPLIED_FILE`].
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppliedFile {
    /// Log index through which the table files hold every metadata record (-1: none).
    applied_index: i64,
}

/// The tables the log's metadata records are applied to, and how far they are applied.
#[derive(Debug)]
pub struct MetadataTables {
    pub topics: Arc<TopicTable>,
    pub subscriptions: Arc<SubscriptionGroupTable>,
    pub offsets: Arc<ConsumerOffsetTable>,
    /// Highest log index applied (-1: none); published after the change is in the tables.
    applied: AtomicI64,
    /// Index the files on disk are complete through.
    persisted: AtomicI64,
    path: PathBuf,
    persist_lock: Mutex<()>,
}

impl MetadataTables {
    /// The tables opened from `store_root`, with the index their files are complete through.
    pub fn open(
        store_root: &Path,
        topics: Arc<TopicTable>,
        subscriptions: Arc<SubscriptionGroupTable>,
        offsets: Arc<ConsumerOffsetTable>,
    ) -> Result<MetadataTables, StoreError> {
        let path = config_dir(store_root).join(METADATA_APPLIED_FILE);
        let applied = load_json::<AppliedFile>(&path)?.map_or(-1, |f| f.applied_index);
        Ok(MetadataTables {
            topics,
            subscriptions,
            offsets,
            applied: AtomicI64::new(applied),
            persisted: AtomicI64::new(applied),
            path,
            persist_lock: Mutex::new(()),
        })
    }

    /// Highest log index whose metadata record is in the tables (-1: none).
    pub fn applied_through(&self) -> i64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Applies the record at log `index` (records at or below the applied index are already
    /// in; a record that does not parse is logged and passed over). Returns the change applied.
    pub fn apply(&self, index: i64, body: &[u8]) -> Option<MetadataChange> {
        if index <= self.applied_through() {
            return None;
        }
        let change = match MetadataChange::from_body(body) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(index, error = %e, "undecodable metadata record; passed over");
                self.applied.store(index, Ordering::Release);
                return None;
            }
        };
        let r = match &change {
            MetadataChange::TopicPut { topic_config } => self.topics.update(topic_config.clone()),
            MetadataChange::TopicDelete { topic } => {
                self.offsets.remove_topic(topic);
                self.topics.remove(topic).map(|_| ())
            }
            MetadataChange::GroupPut { group_config } => {
                self.subscriptions.update(group_config.clone())
            }
            MetadataChange::GroupDelete {
                group,
                clean_offset,
            } => {
                if *clean_offset {
                    self.offsets.remove_group(group);
                }
                self.subscriptions.remove(group).map(|_| ())
            }
            MetadataChange::Offsets { offsets } => {
                self.offsets.apply_logged(offsets);
                Ok(())
            }
        };
        if let Err(e) = r {
            // The change is in memory; only its file write failed (retried by the next persist).
            tracing::warn!(index, error = %e, "persisting a metadata change failed");
        }
        self.applied.store(index, Ordering::Release);
        Some(change)
    }

    /// Writes the tables, then the index they are complete through (a crash in between leaves
    /// the older index: the records after it are applied again, which is harmless).
    /// Nothing is written when no record was applied since the last call: the log's records
    /// are what change these tables' files (the broker calls this every second).
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = self.persist_lock.lock().unwrap_or_else(|p| p.into_inner());
        let through = self.applied_through();
        if through == self.persisted.load(Ordering::Acquire) {
            return Ok(());
        }
        self.topics.persist()?;
        self.subscriptions.persist()?;
        self.offsets.persist()?;
        write_json_atomic(
            &self.path,
            &AppliedFile {
                applied_index: through,
            },
        )?;
        self.persisted.store(through, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_have_the_documented_json() {
        let c = MetadataChange::Offsets {
            offsets: vec![OffsetCommit {
                topic: "T".into(),
                group: "G".into(),
                queue_id: 1,
                offset: 42,
            }],
        };
        let text = String::from_utf8(c.to_body()).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"offsets","offsets":[{"topic":"T","group":"G","queueId":1,"offset":42}]}"#
        );
        assert_eq!(MetadataChange::from_body(text.as_bytes()).unwrap(), c);
        let d = MetadataChange::TopicDelete { topic: "T".into() };
        assert_eq!(
            String::from_utf8(d.to_body()).unwrap(),
            r#"{"kind":"topicDelete","topic":"T"}"#
        );
        let p = MetadataChange::TopicPut {
            topic_config: TopicConfig::new("T", 4),
        };
        let text = String::from_utf8(p.to_body()).unwrap();
        assert!(
            text.starts_with(r#"{"kind":"topicPut","topicConfig":{"#),
            "{text}"
        );
        assert_eq!(MetadataChange::from_body(text.as_bytes()).unwrap(), p);
    }
}
