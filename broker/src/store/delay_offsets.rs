//! Delay (schedule) offsets: `config/delayOffset.json`, delay level (1-based) → consumed offset
//! in `SCHEDULE_TOPIC_XXXX` queue `level - 1`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{config_dir, now_ms, DataVersion, StoreError};
use crate::atomic_json::{load_json, parse_json_lenient, write_json_atomic};
use dashmap::DashMap;

/// File name under `<storePathRootDir>/config`.
pub const DELAY_OFFSET_FILE: &str = "delayOffset.json";

/// Body of GET_ALL_DELAY_OFFSET and the content of `delayOffset.json` (4.x files have no
/// `dataVersion`).
pub use remoting::body::DelayOffsetSerializeWrapper;

/// The schedule service's progress per delay level.
#[derive(Debug)]
pub struct DelayOffsetTable {
    path: PathBuf,
    offsets: DashMap<i32, i64>,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl DelayOffsetTable {
    /// Loads `<store_root>/config/delayOffset.json` if present.
    pub fn open(store_root: &Path) -> Result<Self, StoreError> {
        let path = config_dir(store_root).join(DELAY_OFFSET_FILE);
        let t = Self {
            path,
            offsets: DashMap::new(),
            data_version: Mutex::new(DataVersion::new(now_ms())),
            persist_lock: Mutex::new(()),
        };
        if let Some(w) = load_json::<DelayOffsetSerializeWrapper>(&t.path)? {
            t.replace(w);
        }
        Ok(t)
    }

    fn replace(&self, w: DelayOffsetSerializeWrapper) {
        self.offsets.clear();
        for (k, v) in w.offset_table {
            self.offsets.insert(k, v);
        }
        if let Some(v) = w.data_version {
            *lock(&self.data_version) = v;
        }
    }

    /// Offset of `level` (1-based), if any.
    pub fn get(&self, level: i32) -> Option<i64> {
        self.offsets.get(&level).map(|v| *v)
    }

    /// Sets the offset of `level`.
    pub fn update(&self, level: i32, offset: i64) {
        self.offsets.insert(level, offset);
    }

    /// Snapshot for GET_ALL_DELAY_OFFSET and persistence.
    pub fn snapshot(&self) -> DelayOffsetSerializeWrapper {
        DelayOffsetSerializeWrapper {
            data_version: Some(lock(&self.data_version).clone()),
            offset_table: self
                .offsets
                .iter()
                .map(|e| (*e.key(), *e.value()))
                .collect(),
        }
    }

    /// JSON body of GET_ALL_DELAY_OFFSET.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot()).unwrap_or_default()
    }

    /// Parses a GET_ALL_DELAY_OFFSET body (accepts fastjson's bare integer keys).
    pub fn parse_body(body: &[u8]) -> Result<DelayOffsetSerializeWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Slave sync / changeToMaster reload: Java writes the master's body to the file and
    /// reloads it, i.e. replaces the table; persists.
    pub fn apply_snapshot(&self, master: DelayOffsetSerializeWrapper) -> Result<(), StoreError> {
        self.replace(master);
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }

    /// Writes `delayOffset.json` atomically.
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        write_json_atomic(&self.path, &self.snapshot())
    }
}
