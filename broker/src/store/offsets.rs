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
///
/// Two layers (see `metadata_log`): `offsets`, exactly what the log's metadata records (and
/// slave sync) made it, the same on every member and what `consumerOffset.json` holds; and
/// `pending`, commits this member took that are not yet in the log (the master proposes them
/// in batches, then drops each once its record is applied). Reads see `pending` over `offsets`.
#[derive(Debug)]
pub struct ConsumerOffsetTable {
    path: PathBuf,
    offsets: DashMap<String, BTreeMap<i32, i64>>,
    pending: Mutex<Pending>,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
}

/// Commits not yet in the log: (table key, queue id) → (offset, sequence number of the commit).
#[derive(Debug, Default)]
struct Pending {
    commits: BTreeMap<(String, i32), (i64, u64)>,
    next_seq: u64,
}

/// Pending commits taken for one metadata record: the commits, and the sequence number through
/// which they were taken (see [`ConsumerOffsetTable::clear_pending_through`]).
#[derive(Debug, Default)]
pub struct PendingBatch {
    pub commits: Vec<super::metadata_log::OffsetCommit>,
    pub through_seq: u64,
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
            pending: Mutex::new(Pending::default()),
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

    /// Records a consumer's committed offset (UPDATE_CONSUMER_OFFSET, pull commit flag) as
    /// pending: it reaches the shared table through the log. Returns the commit's sequence
    /// number (see [`ConsumerOffsetTable::pending_seq`]).
    pub fn commit_offset(&self, group: &str, topic: &str, queue_id: i32, offset: i64) -> u64 {
        let mut p = lock(&self.pending);
        p.next_seq += 1;
        let seq = p.next_seq;
        p.commits
            .insert((offset_key(topic, group), queue_id), (offset, seq));
        seq
    }

    /// Sequence number of the newest pending commit (0: none ever).
    pub fn pending_seq(&self) -> u64 {
        lock(&self.pending).next_seq
    }

    /// Whether any commit waits for the log.
    pub fn has_pending(&self) -> bool {
        !lock(&self.pending).commits.is_empty()
    }

    /// The pending commits, to be proposed as one metadata record.
    pub fn pending_batch(&self) -> PendingBatch {
        let p = lock(&self.pending);
        let commits = p
            .commits
            .iter()
            .filter_map(|((key, queue_id), (offset, _))| {
                let (topic, group) = key.rsplit_once(TOPIC_GROUP_SEPARATOR)?;
                Some(super::metadata_log::OffsetCommit {
                    topic: topic.to_owned(),
                    group: group.to_owned(),
                    queue_id: *queue_id,
                    offset: *offset,
                })
            })
            .collect();
        PendingBatch {
            commits,
            through_seq: p.next_seq,
        }
    }

    /// Drops pending commits made at or before `seq` (their record is applied; a later commit
    /// of the same queue stays).
    pub fn clear_pending_through(&self, seq: u64) {
        lock(&self.pending).commits.retain(|_, (_, s)| *s > seq);
    }

    /// Drops every pending commit (this member's commits that never reached the log).
    pub fn clear_pending(&self) {
        lock(&self.pending).commits.clear();
    }

    /// Applies commits from a metadata record of the log.
    pub fn apply_logged(&self, commits: &[super::metadata_log::OffsetCommit]) {
        for c in commits {
            self.offsets
                .entry(offset_key(&c.topic, &c.group))
                .or_default()
                .insert(c.queue_id, c.offset);
        }
    }

    /// The committed offset, if any (Java answers -1 / QUERY_NOT_FOUND otherwise).
    pub fn query_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let key = offset_key(topic, group);
        if let Some((o, _)) = lock(&self.pending).commits.get(&(key.clone(), queue_id)) {
            return Some(*o);
        }
        self.offsets
            .get(&key)
            .and_then(|m| m.get(&queue_id).copied())
    }

    /// All queue offsets of (topic, group).
    pub fn queue_offsets(&self, group: &str, topic: &str) -> BTreeMap<i32, i64> {
        let key = offset_key(topic, group);
        let mut m = self
            .offsets
            .get(&key)
            .map(|m| m.clone())
            .unwrap_or_default();
        for ((k, q), (o, _)) in lock(&self.pending).commits.iter() {
            if *k == key {
                m.insert(*q, *o);
            }
        }
        m
    }

    /// Every table key (`topic@group`) with an offset, pending ones included.
    fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.offsets.iter().map(|e| e.key().clone()).collect();
        keys.extend(lock(&self.pending).commits.keys().map(|(k, _)| k.clone()));
        keys.sort();
        keys.dedup();
        keys
    }

    /// Topics that `group` has offsets for.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        self.keys()
            .into_iter()
            .filter_map(|k| {
                let (t, g) = k.rsplit_once(TOPIC_GROUP_SEPARATOR)?;
                (g == group).then(|| t.to_owned())
            })
            .collect()
    }

    /// Groups that have offsets on `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        self.keys()
            .into_iter()
            .filter_map(|k| {
                let (t, g) = k.rsplit_once(TOPIC_GROUP_SEPARATOR)?;
                (t == topic).then(|| g.to_owned())
            })
            .collect()
    }

    /// Drops every offset of `group`.
    pub fn remove_group(&self, group: &str) {
        let other_group = |k: &String| {
            k.rsplit_once(TOPIC_GROUP_SEPARATOR)
                .is_none_or(|(_, g)| g != group)
        };
        self.offsets.retain(|k, _| other_group(k));
        lock(&self.pending)
            .commits
            .retain(|(k, _), _| other_group(k));
    }

    /// Drops every offset on `topic` (topic deleted).
    pub fn remove_topic(&self, topic: &str) {
        let other_topic = |k: &String| {
            k.rsplit_once(TOPIC_GROUP_SEPARATOR)
                .is_none_or(|(t, _)| t != topic)
        };
        self.offsets.retain(|k, _| other_topic(k));
        lock(&self.pending)
            .commits
            .retain(|(k, _), _| other_topic(k));
    }

    /// Current data version.
    pub fn data_version(&self) -> DataVersion {
        lock(&self.data_version).clone()
    }

    /// The shared table as the log made it (persistence: `consumerOffset.json` is the
    /// snapshot the log's later records are applied to).
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

    /// JSON body of GET_ALL_CONSUMER_OFFSET: every offset this member answers, pending ones
    /// included.
    pub fn to_json(&self) -> String {
        let mut w = self.snapshot();
        for ((k, q), (o, _)) in lock(&self.pending).commits.iter() {
            w.offset_table.entry(k.clone()).or_default().insert(*q, *o);
        }
        serde_json::to_string(&w).unwrap_or_default()
    }

    /// Parses a GET_ALL_CONSUMER_OFFSET body (accepts fastjson's bare integer keys).
    pub fn parse_body(body: &[u8]) -> Result<ConsumerOffsetSerializeWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Slave sync (Java `putAll`): the master's entries are answered from now on. They go to
    /// the pending layer where they differ from the log's table, not into it: the table stays
    /// what the log made it, the same on every member, and a member that becomes master
    /// proposes them (R13's pull from the previous master).
    pub fn apply_snapshot(&self, master: ConsumerOffsetSerializeWrapper) -> Result<(), StoreError> {
        let mut p = lock(&self.pending);
        for (k, queues) in master.offset_table {
            let logged = self.offsets.get(&k).map(|m| m.clone()).unwrap_or_default();
            for (q, o) in queues {
                if logged.get(&q) != Some(&o) {
                    p.next_seq += 1;
                    let seq = p.next_seq;
                    p.commits.insert((k.clone(), q), (o, seq));
                }
            }
        }
        Ok(())
    }

    /// Writes `consumerOffset.json` atomically (call periodically and at shutdown).
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }
}
