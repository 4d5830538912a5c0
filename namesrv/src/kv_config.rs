//! Namespaced key/value settings (PUT/GET/DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE).
//!
//! Clients read e.g. the `ORDER_TOPIC_CONFIG` namespace (order-topic layouts). The store is
//! in memory; when a file path is configured every change is written to it atomically
//! (temp file + rename) in Java's `kvConfig.json` layout `{"configTable":{ns:{k:v}}}`, and the
//! file is loaded at start.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::body::KvTable;
use crate::error::NamesrvError;

/// Namespace whose entries are `topic -> "brokerName:queueNum;..."` order configurations.
pub const NAMESPACE_ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// On-disk form.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct KvConfigFile {
    config_table: BTreeMap<String, BTreeMap<String, String>>,
}

/// The KV-config store of one name server.
#[derive(Debug, Default)]
pub struct KvConfig {
    table: BTreeMap<String, BTreeMap<String, String>>,
    path: Option<PathBuf>,
}

impl KvConfig {
    /// An in-memory store; with `path`, loads it (if it exists) and persists every change.
    pub fn open(path: Option<PathBuf>) -> Result<Self, NamesrvError> {
        let mut table = BTreeMap::new();
        if let Some(p) = &path {
            match fs::read(p) {
                Ok(bytes) => {
                    let file: KvConfigFile = crate::body::from_json(&bytes).map_err(|e| {
                        NamesrvError::KvConfig(format!("cannot parse {}: {e}", p.display()))
                    })?;
                    table = file.config_table;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(NamesrvError::KvConfig(format!(
                        "cannot read {}: {e}",
                        p.display()
                    )))
                }
            }
        }
        Ok(KvConfig { table, path })
    }

    /// Sets `namespace.key = value`.
    pub fn put(&mut self, namespace: &str, key: &str, value: &str) -> Result<(), NamesrvError> {
        self.table
            .entry(namespace.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        self.persist()
    }

    /// Removes `namespace.key`; removing a missing key is not an error.
    pub fn delete(&mut self, namespace: &str, key: &str) -> Result<(), NamesrvError> {
        let Some(ns) = self.table.get_mut(namespace) else {
            return Ok(());
        };
        if ns.remove(key).is_none() {
            return Ok(());
        }
        if ns.is_empty() {
            self.table.remove(namespace);
        }
        self.persist()
    }

    /// Value of `namespace.key`.
    pub fn get(&self, namespace: &str, key: &str) -> Option<&str> {
        self.table.get(namespace)?.get(key).map(String::as_str)
    }

    /// Every entry of `namespace`, or `None` when it has none.
    pub fn namespace(&self, namespace: &str) -> Option<KvTable> {
        self.table
            .get(namespace)
            .map(|t| KvTable { table: t.clone() })
    }

    fn persist(&self) -> Result<(), NamesrvError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let file = KvConfigFile {
            config_table: self.table.clone(),
        };
        let bytes = crate::body::to_json(&file)
            .map_err(|e| NamesrvError::KvConfig(format!("cannot encode: {e}")))?;
        write_atomically(path, &bytes)
            .map_err(|e| NamesrvError::KvConfig(format!("cannot write {}: {e}", path.display())))
    }
}

/// Writes `bytes` to a temp file beside `path`, syncs it, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            fs::create_dir_all(dir)?;
        }
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_in_memory() {
        let mut kv = KvConfig::open(None).unwrap();
        kv.put("ns", "k", "v").unwrap();
        assert_eq!(kv.get("ns", "k"), Some("v"));
        assert_eq!(kv.namespace("ns").unwrap().table["k"], "v");
        kv.delete("ns", "k").unwrap();
        kv.delete("ns", "k").unwrap();
        assert_eq!(kv.get("ns", "k"), None);
        assert!(kv.namespace("ns").is_none());
    }

    #[test]
    fn persists_and_reloads() {
        let dir = std::env::temp_dir().join(format!("namesrv-kv-{}", std::process::id()));
        let path = dir.join("kvConfig.json");
        let _ = fs::remove_file(&path);
        let mut kv = KvConfig::open(Some(path.clone())).unwrap();
        kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "b:4").unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            r#"{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"b:4"}}}"#
        );
        let again = KvConfig::open(Some(path.clone())).unwrap();
        assert_eq!(again.get(NAMESPACE_ORDER_TOPIC_CONFIG, "T"), Some("b:4"));
        fs::write(&path, b"{broken").unwrap();
        assert!(KvConfig::open(Some(path.clone())).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
