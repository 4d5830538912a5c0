//! Topic configs: `config/topics.json` (TopicConfigSerializeWrapper) and the rules that create
//! topics (system topics at start, auto-create on send from `TBW102`, retry and DLQ topics).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dashmap::DashMap;
pub use remoting::body::{TopicConfig, TopicConfigSerializeWrapper};

use super::{config_dir, now_ms, DataVersion, StoreError};
use crate::atomic_json::{load_json, parse_json_lenient, write_json_atomic};
use crate::message::topic as names;

/// File name under `<storePathRootDir>/config`.
pub const TOPICS_FILE: &str = "topics.json";
/// Queues of `SCHEDULE_TOPIC_XXXX` (one per delay level).
pub const SCHEDULE_TOPIC_QUEUE_NUMS: i32 = 18;
/// Java `TopicConfig` default queue count (cluster-name topic etc.).
pub const DEFAULT_QUEUE_NUMS: i32 = 16;

/// Permission bits of a topic (`PermName`).
pub mod perm {
    pub const PRIORITY: i32 = 0x8;
    pub const READ: i32 = 0x4;
    pub const WRITE: i32 = 0x2;
    pub const INHERIT: i32 = 0x1;

    /// Readable by consumers.
    pub fn is_readable(perm: i32) -> bool {
        perm & READ != 0
    }
    /// Writable by producers.
    pub fn is_writeable(perm: i32) -> bool {
        perm & WRITE != 0
    }
    /// Usable as an auto-create template.
    pub fn is_inherited(perm: i32) -> bool {
        perm & INHERIT != 0
    }
}

/// `topicFilterType` of an ordinary topic.
pub const SINGLE_TAG: &str = "SINGLE_TAG";
/// `topicFilterType` of a topic whose messages carry several tags.
pub const MULTI_TAG: &str = "MULTI_TAG";

/// A topic with `queues` read and write queues and `perm`.
pub fn topic_config(name: impl Into<String>, queues: i32, perm: i32) -> TopicConfig {
    let mut c = TopicConfig::new(name, queues);
    c.perm = perm;
    c
}

/// max(read, write): queue ids at or above it are invalid.
pub fn queue_nums(cfg: &TopicConfig) -> i32 {
    cfg.read_queue_nums.max(cfg.write_queue_nums)
}

/// What the start-up registration of system topics depends on (from the broker config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDefaults {
    pub broker_cluster_name: String,
    pub broker_name: String,
    pub auto_create_topic_enable: bool,
    pub default_topic_queue_nums: i32,
    pub cluster_topic_enable: bool,
    pub broker_topic_enable: bool,
    /// `Some(name)` when message trace topics are enabled.
    pub trace_topic: Option<String>,
}

/// The topic table: concurrent map + data version, persisted to `topics.json`.
#[derive(Debug)]
pub struct TopicTable {
    path: PathBuf,
    topics: DashMap<String, TopicConfig>,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl TopicTable {
    /// Loads `<store_root>/config/topics.json` (if any) and registers the system topics that
    /// the file does not define (the file wins, as in Java).
    pub fn open(store_root: &Path, defaults: &TopicDefaults) -> Result<Self, StoreError> {
        let path = config_dir(store_root).join(TOPICS_FILE);
        let loaded: Option<TopicConfigSerializeWrapper> = load_json(&path)?;
        let table = Self {
            path,
            topics: DashMap::new(),
            data_version: Mutex::new(DataVersion::new(now_ms())),
            persist_lock: Mutex::new(()),
        };
        if let Some(w) = loaded {
            *lock(&table.data_version) = w.data_version.clone();
            for (name, mut cfg) in w.topic_config_table {
                if cfg.topic_name.is_empty() {
                    cfg.topic_name.clone_from(&name);
                }
                table.topics.insert(name, cfg);
            }
        }
        for cfg in system_topics(defaults) {
            table.topics.entry(cfg.topic_name.clone()).or_insert(cfg);
        }
        Ok(table)
    }

    /// The config of `topic`.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.topics.get(topic).map(|c| c.clone())
    }

    /// `f` of the config of `topic`, without copying it (the send path reads a few numbers
    /// per message).
    pub fn with<R>(&self, topic: &str, f: impl FnOnce(&TopicConfig) -> R) -> Option<R> {
        self.topics.get(topic).map(|c| f(&c))
    }

    /// Whether `topic` exists.
    pub fn contains(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Number of topics.
    pub fn len(&self) -> usize {
        self.topics.len()
    }

    /// Whether there are no topics.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// All topic names.
    pub fn names(&self) -> Vec<String> {
        self.topics.iter().map(|e| e.key().clone()).collect()
    }

    /// Current data version.
    pub fn data_version(&self) -> DataVersion {
        lock(&self.data_version).clone()
    }

    fn bump(&self) {
        lock(&self.data_version).next(now_ms());
    }

    /// Creates or replaces a topic (UPDATE_AND_CREATE_TOPIC), bumps the version, persists.
    pub fn update(&self, cfg: TopicConfig) -> Result<(), StoreError> {
        if cfg.topic_name.is_empty() {
            return Err(StoreError::Invalid("topic name is empty".into()));
        }
        self.topics.insert(cfg.topic_name.clone(), cfg);
        self.bump();
        self.persist()
    }

    /// Deletes a topic (DELETE_TOPIC_IN_BROKER), bumps the version, persists.
    pub fn remove(&self, topic: &str) -> Result<Option<TopicConfig>, StoreError> {
        let old = self.topics.remove(topic).map(|(_, c)| c);
        if old.is_some() {
            self.bump();
            self.persist()?;
        }
        Ok(old)
    }

    /// Auto-create on send: if `topic` is unknown and `default_topic` exists with the inherit
    /// bit, create it with min(`client_queue_nums`, template write queues) queues and the
    /// template's perm minus inherit. Returns the (existing or new) config, or `None` when
    /// the topic may not be created. The boolean is true when the topic was created (the
    /// caller then re-registers with the name server).
    pub fn create_topic_in_send(
        &self,
        topic: &str,
        default_topic: &str,
        client_queue_nums: i32,
        topic_sys_flag: i32,
    ) -> Result<(Option<TopicConfig>, bool), StoreError> {
        if let Some(c) = self.get(topic) {
            return Ok((Some(c), false));
        }
        let Some(template) = self.get(default_topic) else {
            return Ok((None, false));
        };
        if !perm::is_inherited(template.perm) {
            return Ok((None, false));
        }
        let queues = client_queue_nums.min(template.write_queue_nums).max(0);
        let mut cfg = topic_config(topic, queues, template.perm & !perm::INHERIT);
        cfg.topic_sys_flag = topic_sys_flag;
        cfg.topic_filter_type = template.topic_filter_type;
        self.insert_new(cfg)
    }

    /// Creates `%RETRY%<group>` (perm RW, `queue_nums` queues) unless it exists.
    pub fn create_retry_topic(
        &self,
        group: &str,
        queue_nums: i32,
    ) -> Result<TopicConfig, StoreError> {
        self.create_if_absent(
            &names::retry_topic(group),
            queue_nums,
            perm::READ | perm::WRITE,
        )
    }

    /// Creates `%DLQ%<group>` (one queue, perm RW) unless it exists.
    pub fn create_dlq_topic(&self, group: &str) -> Result<TopicConfig, StoreError> {
        self.create_if_absent(&names::dlq_topic(group), 1, perm::READ | perm::WRITE)
    }

    /// Creates `topic` with `queue_nums` queues and `perm` unless it exists (persisting when
    /// created). Used for system topics created lazily.
    pub fn create_if_absent(
        &self,
        topic: &str,
        queue_nums: i32,
        perm: i32,
    ) -> Result<TopicConfig, StoreError> {
        if let Some(c) = self.get(topic) {
            return Ok(c);
        }
        let (cfg, _) = self.insert_new(topic_config(topic, queue_nums, perm))?;
        cfg.ok_or_else(|| StoreError::Invalid(format!("topic {topic} vanished")))
    }

    fn insert_new(&self, cfg: TopicConfig) -> Result<(Option<TopicConfig>, bool), StoreError> {
        let created = {
            let entry = self.topics.entry(cfg.topic_name.clone());
            match entry {
                dashmap::Entry::Occupied(o) => return Ok((Some(o.get().clone()), false)),
                dashmap::Entry::Vacant(v) => v.insert(cfg).clone(),
            }
        };
        tracing::info!(topic = %created.topic_name, queues = created.write_queue_nums, "created topic");
        self.bump();
        self.persist()?;
        Ok((Some(created), true))
    }

    /// Snapshot of the whole table (GET_ALL_TOPIC_CONFIG, registration, persistence).
    pub fn snapshot(&self) -> TopicConfigSerializeWrapper {
        // Read the version first: a concurrent change then shows up as a newer version later.
        let data_version = self.data_version();
        TopicConfigSerializeWrapper {
            data_version,
            topic_config_table: self
                .topics
                .iter()
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect(),
            ..TopicConfigSerializeWrapper::default()
        }
    }

    /// JSON body of GET_ALL_TOPIC_CONFIG.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot()).unwrap_or_default()
    }

    /// Slave sync: unless the master's version and table equal ours (Java compares only the
    /// version; two tables changed in the same millisecond can share one), replace the whole
    /// table with the master's and persist. Returns whether anything changed.
    pub fn apply_snapshot(&self, master: TopicConfigSerializeWrapper) -> Result<bool, StoreError> {
        if self.data_version() == master.data_version {
            let same = self.topics.len() == master.topic_config_table.len()
                && master
                    .topic_config_table
                    .iter()
                    .all(|(k, v)| self.topics.get(k).is_some_and(|c| *c == *v));
            if same {
                return Ok(false);
            }
        }
        self.topics
            .retain(|name, _| master.topic_config_table.contains_key(name));
        for (name, cfg) in master.topic_config_table {
            self.topics.insert(name, cfg);
        }
        *lock(&self.data_version) = master.data_version;
        self.persist()?;
        Ok(true)
    }

    /// Parses a GET_ALL_TOPIC_CONFIG body (accepts fastjson's output).
    pub fn parse_body(body: &[u8]) -> Result<TopicConfigSerializeWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Writes `topics.json` atomically.
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }

    /// Path of `topics.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The topics Java's TopicConfigManager registers at construction.
pub fn system_topics(d: &TopicDefaults) -> Vec<TopicConfig> {
    let rw = perm::READ | perm::WRITE;
    let mut v = vec![topic_config(names::SELF_TEST_TOPIC, 1, rw)];
    if d.auto_create_topic_enable {
        v.push(topic_config(
            names::AUTO_CREATE_TOPIC_KEY_TOPIC,
            d.default_topic_queue_nums,
            perm::INHERIT | rw,
        ));
    }
    let mut cluster = topic_config(
        d.broker_cluster_name.clone(),
        DEFAULT_QUEUE_NUMS,
        perm::INHERIT,
    );
    if d.cluster_topic_enable {
        cluster.perm |= rw;
    }
    v.push(cluster);
    let mut broker = topic_config(d.broker_name.clone(), 1, perm::INHERIT);
    if d.broker_topic_enable {
        broker.perm |= rw;
    }
    v.push(broker);
    v.push(topic_config(names::OFFSET_MOVED_EVENT, 1, rw));
    v.push(topic_config(
        names::SCHEDULE_TOPIC,
        SCHEDULE_TOPIC_QUEUE_NUMS,
        rw,
    ));
    v.push(topic_config(names::TRANS_HALF_TOPIC, 1, rw));
    v.push(topic_config(names::TRANS_OP_HALF_TOPIC, 1, rw));
    if let Some(t) = &d.trace_topic {
        v.push(topic_config(t.clone(), 1, rw));
    }
    v
}
