//! Subscription groups: `config/subscriptionGroup.json` (SubscriptionGroupWrapper) with
//! Java's defaults and auto-creation of unknown groups.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{config_dir, now_ms, DataVersion, StoreError};
use crate::atomic_json::{load_json, parse_json_lenient, write_json_atomic};
use dashmap::DashMap;

/// File name under `<storePathRootDir>/config`.
pub const SUBSCRIPTION_GROUP_FILE: &str = "subscriptionGroup.json";

/// Groups Java registers at start.
pub const SYSTEM_GROUPS: &[&str] = &[
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
];

pub use remoting::body::{SubscriptionGroupConfig, SubscriptionGroupWrapper};

/// `forbiddenTable`: group → topic → forbidden bits.
type ForbiddenTable = BTreeMap<String, BTreeMap<String, i32>>;

/// All subscription groups.
#[derive(Debug)]
pub struct SubscriptionGroupTable {
    path: PathBuf,
    groups: DashMap<String, SubscriptionGroupConfig>,
    forbidden: Mutex<ForbiddenTable>,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
    auto_create: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl SubscriptionGroupTable {
    /// Loads `<store_root>/config/subscriptionGroup.json` and registers the system groups the
    /// file lacks. `auto_create` = `autoCreateSubscriptionGroup`.
    pub fn open(store_root: &Path, auto_create: bool) -> Result<Self, StoreError> {
        let path = config_dir(store_root).join(SUBSCRIPTION_GROUP_FILE);
        let t = Self {
            path,
            groups: DashMap::new(),
            forbidden: Mutex::new(BTreeMap::new()),
            data_version: Mutex::new(DataVersion::new(now_ms())),
            persist_lock: Mutex::new(()),
            auto_create,
        };
        if let Some(w) = load_json::<SubscriptionGroupWrapper>(&t.path)? {
            *lock(&t.data_version) = w.data_version;
            *lock(&t.forbidden) = w.forbidden_table;
            for (k, v) in w.subscription_group_table {
                t.groups.insert(k, v);
            }
        }
        for g in SYSTEM_GROUPS {
            t.groups
                .entry((*g).to_owned())
                .or_insert_with(|| SubscriptionGroupConfig::new(*g));
        }
        Ok(t)
    }

    /// The group's config; an unknown group is created with defaults (and persisted) when
    /// auto-creation is on, else `None`.
    pub fn find_or_create(
        &self,
        group: &str,
    ) -> Result<Option<SubscriptionGroupConfig>, StoreError> {
        if let Some(c) = self.groups.get(group) {
            return Ok(Some(c.clone()));
        }
        if !self.auto_create {
            return Ok(None);
        }
        let created = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(|| SubscriptionGroupConfig::new(group))
            .clone();
        tracing::info!(group, "auto-created subscription group");
        lock(&self.data_version).next(now_ms());
        self.persist()?;
        Ok(Some(created))
    }

    /// The group's config without creating it.
    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.groups.get(group).map(|c| c.clone())
    }

    /// Creates or replaces a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP); persists.
    pub fn update(&self, cfg: SubscriptionGroupConfig) -> Result<(), StoreError> {
        if cfg.group_name.is_empty() {
            return Err(StoreError::Invalid("group name is empty".into()));
        }
        self.groups.insert(cfg.group_name.clone(), cfg);
        lock(&self.data_version).next(now_ms());
        self.persist()
    }

    /// Deletes a group; persists.
    pub fn remove(&self, group: &str) -> Result<Option<SubscriptionGroupConfig>, StoreError> {
        let old = self.groups.remove(group).map(|(_, c)| c);
        if old.is_some() {
            lock(&self.data_version).next(now_ms());
            self.persist()?;
        }
        Ok(old)
    }

    /// Current data version.
    pub fn data_version(&self) -> DataVersion {
        lock(&self.data_version).clone()
    }

    /// Snapshot for GET_ALL_SUBSCRIPTIONGROUP_CONFIG and persistence.
    pub fn snapshot(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            data_version: self.data_version(),
            forbidden_table: lock(&self.forbidden).clone(),
            subscription_group_table: self
                .groups
                .iter()
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect(),
        }
    }

    /// JSON body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot()).unwrap_or_default()
    }

    /// Parses a GET_ALL_SUBSCRIPTIONGROUP_CONFIG body.
    pub fn parse_body(body: &[u8]) -> Result<SubscriptionGroupWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Slave sync (Java `putAll` + version assignment); persists.
    pub fn apply_snapshot(&self, master: SubscriptionGroupWrapper) -> Result<(), StoreError> {
        for (k, v) in master.subscription_group_table {
            self.groups.insert(k, v);
        }
        lock(&self.forbidden).extend(master.forbidden_table);
        *lock(&self.data_version) = master.data_version;
        self.persist()
    }

    /// Writes `subscriptionGroup.json` atomically.
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }
}
