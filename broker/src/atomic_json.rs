//! Atomic JSON files for broker metadata (topics.json, consumerOffset.json, ...).
//!
//! Writes go to `<file>.tmp`, are fsynced, renamed over the target, and the directory is
//! fsynced, so a crash leaves either the old or the new file, never a torn one. Reads accept
//! what Java's fastjson writes (bare integer map keys like `{0:12}`) and fall back to Java's
//! `<file>.bak` when the main file is missing or unreadable.

use std::borrow::Cow;
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

/// Parses JSON text as Java's fastjson writes it (bare integer object keys are accepted).
pub fn parse_json_lenient<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(&quote_bare_keys(text))
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

/// Quotes bare object keys (`{0:12,-1:3}` → `{"0":12,"-1":3}`); strings are left untouched.
pub fn quote_bare_keys(text: &str) -> Cow<'_, str> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut in_string = false;
    // True right after '{' or ',' (skipping whitespace): a key may start here.
    let mut key_position = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                key_position = false;
            }
            b'{' | b',' => key_position = true,
            c if c.is_ascii_whitespace() => {}
            c if key_position && (c.is_ascii_alphanumeric() || c == b'-' || c == b'_') => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-' || b[i] == b'_')
                {
                    i += 1;
                }
                let mut j = i;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j < b.len() && b[j] == b':' {
                    let o = out.get_or_insert_with(|| String::with_capacity(text.len() + 16));
                    o.push_str(&text[copied..start]);
                    o.push('"');
                    o.push_str(&text[start..i]);
                    o.push('"');
                    copied = i;
                }
                key_position = false;
                continue;
            }
            _ => key_position = false,
        }
        i += 1;
    }
    match out {
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn quotes_fastjson_integer_keys_only_outside_strings() {
        let src = r#"{"offsetTable":{"T@G":{0:12,1:7}}, "s":"{0:1}", -1 : 2}"#;
        assert_eq!(
            quote_bare_keys(src),
            r#"{"offsetTable":{"T@G":{"0":12,"1":7}}, "s":"{0:1}", "-1" : 2}"#
        );
        assert!(matches!(
            quote_bare_keys(r#"{"a":[1,2,true]}"#),
            Cow::Borrowed(_)
        ));
        let m: BTreeMap<i32, i64> = parse_json_lenient("{1:0,2:15}").unwrap();
        assert_eq!(m.get(&2), Some(&15));
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
