//! Consumer offsets: `config/consumerOffset.json` (ConsumerOffsetSerializeWrapper), keyed
//! `"<topic>@<group>"` → {queueId: offset}, exactly as Java.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{config_dir, now_ms, DataVersion, StoreError};
use crate::atomic_json::{load_json, parse_json_lenient, write_json_atomic};
use dashmap::DashMap;

/// File name under `<storePathRootDir>/config`.
pub const CONSUMER_OFFSET_FILE: &str = "consumerOffset.json";
/// Separator between topic and group in the table key.
pub const TOPIC_GROUP_SEPARATOR: char = '@';

pub use remoting::body::ConsumerOffsetSerializeWrapper;

/// `"<topic>@<group>"`.
pub fn offset_key(topic: &str, group: &str) -> String {
    let mut k = String::with_capacity(topic.len() + group.len() + 1);
    k.push_str(topic);
    k.push(TOPIC_GROUP_SEPARATOR);
    k.push_str(group);
    k
}

/// Consumer offsets of all groups.
#[derive(Debug)]
pub struct ConsumerOffsetTable {
    path: PathBuf,
    offsets: DashMap<String, BTreeMap<i32, i64>>,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl ConsumerOffsetTable {
    /// Loads `<store_root>/config/consumerOffset.json` if present.
    pub fn open(store_root: &Path) -> Result<Self, StoreError> {
        let path = config_dir(store_root).join(CONSUMER_OFFSET_FILE);
        let loaded: Option<ConsumerOffsetSerializeWrapper> = load_json(&path)?;
        let t = Self {
            path,
            offsets: DashMap::new(),
            data_version: Mutex::new(DataVersion::new(now_ms())),
            persist_lock: Mutex::new(()),
        };
        if let Some(w) = loaded {
            if let Some(v) = w.data_version {
                *lock(&t.data_version) = v;
            }
            for (k, v) in w.offset_table {
                t.offsets.insert(k, v);
            }
        }
        Ok(t)
    }

    /// Records a consumer's committed offset (UPDATE_CONSUMER_OFFSET, pull commit flag).
    pub fn commit_offset(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.offsets
            .entry(offset_key(topic, group))
            .or_default()
            .insert(queue_id, offset);
    }

    /// The committed offset, if any (Java answers -1 / QUERY_NOT_FOUND otherwise).
    pub fn query_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.offsets
            .get(&offset_key(topic, group))
            .and_then(|m| m.get(&queue_id).copied())
    }

    /// All queue offsets of (topic, group).
    pub fn queue_offsets(&self, group: &str, topic: &str) -> BTreeMap<i32, i64> {
        self.offsets
            .get(&offset_key(topic, group))
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Topics that `group` has offsets for.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        self.offsets
            .iter()
            .filter_map(|e| {
                let (t, g) = e.key().rsplit_once(TOPIC_GROUP_SEPARATOR)?;
                (g == group).then(|| t.to_owned())
            })
            .collect()
    }

    /// Groups that have offsets on `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        self.offsets
            .iter()
            .filter_map(|e| {
                let (t, g) = e.key().rsplit_once(TOPIC_GROUP_SEPARATOR)?;
                (t == topic).then(|| g.to_owned())
            })
            .collect()
    }

    /// Drops every offset of `group`.
    pub fn remove_group(&self, group: &str) {
        self.offsets.retain(|k, _| {
            k.rsplit_once(TOPIC_GROUP_SEPARATOR)
                .is_none_or(|(_, g)| g != group)
        });
    }

    /// Drops every offset on `topic` (topic deleted).
    pub fn remove_topic(&self, topic: &str) {
        self.offsets.retain(|k, _| {
            k.rsplit_once(TOPIC_GROUP_SEPARATOR)
                .is_none_or(|(t, _)| t != topic)
        });
    }

    /// Current data version.
    pub fn data_version(&self) -> DataVersion {
        lock(&self.data_version).clone()
    }

    /// Snapshot for GET_ALL_CONSUMER_OFFSET and persistence.
    pub fn snapshot(&self) -> ConsumerOffsetSerializeWrapper {
        ConsumerOffsetSerializeWrapper {
            data_version: Some(self.data_version()),
            offset_table: self
                .offsets
                .iter()
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect(),
        }
    }

    /// JSON body of GET_ALL_CONSUMER_OFFSET.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot()).unwrap_or_default()
    }

    /// Parses a GET_ALL_CONSUMER_OFFSET body (accepts fastjson's bare integer keys).
    pub fn parse_body(body: &[u8]) -> Result<ConsumerOffsetSerializeWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Slave sync (Java `putAll`): the master's entries overwrite ours; persists.
    pub fn apply_snapshot(&self, master: ConsumerOffsetSerializeWrapper) -> Result<(), StoreError> {
        for (k, v) in master.offset_table {
            self.offsets.insert(k, v);
        }
        if let Some(v) = master.data_version {
            *lock(&self.data_version) = v;
        }
        self.persist()
    }

    /// Writes `consumerOffset.json` atomically (call periodically and at shutdown).
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }
}
