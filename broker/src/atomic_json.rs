//! Atomic JSON files for broker metadata (topics.json, consumerOffset.json, ...).
//!
//! Writes go to `<file>.tmp`, are fsynced, renamed over the target, and the directory is
//! fsynced, so a crash leaves either the old or the new file, never a torn one. Reads accept
//! what Java's fastjson writes (bare integer map keys like `{0:12}`) and fall back to Java's
//! `<file>.bak` when the main file is missing or unreadable.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::store::StoreError;

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir).map_err(io)?;
    let tmp = with_suffix(path, ".tmp");
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    fs::rename(&tmp, path).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(())
}

/// Serializes `value` (pretty, like Java's `toJson(true)`) and writes it atomically.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let text = serde_json::to_vec_pretty(value).map_err(|source| StoreError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_atomic(path, &text)
}

/// Parses JSON text as Java's fastjson writes it (bare integer object keys are accepted,
/// using the remoting crate's quoting pass).
pub fn parse_json_lenient<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_slice(&remoting::body::quote_bare_keys(text.as_bytes()))
}

/// Loads `path` (or Java's `<path>.bak` if the main file is missing, empty or unparsable).
/// `Ok(None)` when neither exists.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    let main = load_one::<T>(path);
    if let Ok(Some(v)) = main {
        return Ok(Some(v));
    }
    let bak = with_suffix(path, ".bak");
    match load_one::<T>(&bak) {
        Ok(Some(v)) => {
            tracing::warn!(path = %path.display(), "loaded metadata from the .bak file");
            Ok(Some(v))
        }
        _ => main,
    }
}

fn load_one<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse_json_lenient(&text)
        .map(Some)
        .map_err(|source| StoreError::Json {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn parses_fastjson_integer_keys() {
        let m: BTreeMap<i32, i64> = parse_json_lenient("{1:0,2:15}").unwrap();
        assert_eq!(m.get(&2), Some(&15));
        let nested: BTreeMap<String, BTreeMap<i32, i64>> =
            parse_json_lenient(r#"{"T@G":{0:12, 1 : 7}}"#).unwrap();
        assert_eq!(nested["T@G"].get(&1), Some(&7));
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config").join("x.json");
        write_json_atomic(&p, &BTreeMap::from([(1, 2)])).unwrap();
        write_json_atomic(&p, &BTreeMap::from([(3, 4)])).unwrap();
        let back: BTreeMap<i32, i32> = load_json(&p).unwrap().unwrap();
        assert_eq!(back, BTreeMap::from([(3, 4)]));
        assert!(!with_suffix(&p, ".tmp").exists());
    }

    #[test]
    fn falls_back_to_bak_and_reports_bad_json() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y.json");
        assert!(load_json::<BTreeMap<i32, i32>>(&p).unwrap().is_none());
        fs::write(&p, "{not json").unwrap();
        assert!(matches!(
            load_json::<BTreeMap<i32, i32>>(&p),
            Err(StoreError::Json { .. })
        ));
        fs::write(with_suffix(&p, ".bak"), "{5:6}").unwrap();
        let back: BTreeMap<i32, i32> = load_json(&p).unwrap().unwrap();
        assert_eq!(back.get(&5), Some(&6));
    }
}
