//! Shared harness of the storage tests: one backend enum (real files + mmap, or the in-memory
//! disk) so every scenario runs against both, small segment sizes, deterministic bodies.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use dledger_commitlog::store::{MemDisk, Store, StoreError};
use dledger_commitlog::{Index, LedgerConfig, Term};

/// Where a test's store lives.
pub enum Backend {
    Fs(tempfile::TempDir),
    Mem(MemDisk),
}

impl Backend {
    pub fn fs() -> Backend {
        Backend::Fs(tempfile::tempdir().unwrap())
    }

    pub fn mem() -> Backend {
        Backend::Mem(MemDisk::new())
    }

    /// Both backends, for conformance loops.
    pub fn both() -> Vec<(&'static str, Backend)> {
        vec![("mmap", Backend::fs()), ("memory", Backend::mem())]
    }

    pub fn root(&self) -> Option<&Path> {
        match self {
            Backend::Fs(d) => Some(d.path()),
            Backend::Mem(_) => None,
        }
    }

    pub fn open(&self, cfg: &LedgerConfig) -> Result<Store, StoreError> {
        match self {
            Backend::Fs(d) => Store::open(d.path(), cfg),
            Backend::Mem(m) => Store::open_in_memory(m, cfg),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        match self {
            Backend::Fs(d) => d.path().join(name),
            Backend::Mem(_) => PathBuf::from(name),
        }
    }

    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        match self {
            Backend::Fs(_) => std::fs::read(self.path(name)).ok(),
            Backend::Mem(m) => m.read_file(name),
        }
    }

    pub fn write(&self, name: &str, bytes: Vec<u8>) {
        match self {
            Backend::Fs(_) => std::fs::write(self.path(name), bytes).unwrap(),
            Backend::Mem(m) => m.write_file(name, bytes),
        }
    }

    pub fn remove(&self, name: &str) {
        match self {
            Backend::Fs(_) => std::fs::remove_file(self.path(name)).unwrap(),
            Backend::Mem(m) => m.remove_file(name),
        }
    }

    /// Segment and state file names (`data/…`, `index/…`, `checkpoint`, `currterm`), sorted.
    pub fn names(&self) -> Vec<String> {
        match self {
            Backend::Fs(d) => {
                let mut v = Vec::new();
                for sub in ["data", "index"] {
                    if let Ok(rd) = std::fs::read_dir(d.path().join(sub)) {
                        for e in rd {
                            v.push(format!(
                                "{sub}/{}",
                                e.unwrap().file_name().to_string_lossy()
                            ));
                        }
                    }
                }
                for f in ["checkpoint", "currterm"] {
                    if d.path().join(f).exists() {
                        v.push(f.to_string());
                    }
                }
                v.sort();
                v
            }
            Backend::Mem(m) => m.file_names(),
        }
    }

    pub fn data_files(&self) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| n.starts_with("data/"))
            .collect()
    }

    pub fn index_files(&self) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| n.starts_with("index/"))
            .collect()
    }

    /// Hash of every file name and content (to prove a refused start changed nothing).
    pub fn digest(&self) -> u64 {
        let mut h = DefaultHasher::new();
        for n in self.names() {
            n.hash(&mut h);
            self.read(&n).hash(&mut h);
        }
        h.finish()
    }

    /// A fresh in-memory backend holding a copy of every file of this one.
    pub fn copy_to_mem(&self) -> Backend {
        let m = MemDisk::new();
        for n in self.names() {
            m.write_file(&n, self.read(&n).unwrap());
        }
        Backend::Mem(m)
    }
}

/// Small files so tests roll segments often: 4 KiB data files, 64 entries per index file.
pub fn small_cfg() -> LedgerConfig {
    LedgerConfig {
        data_segment_bytes: 4096,
        index_segment_bytes: 64 * 32,
        flush_interval_ms: 5,
        ..LedgerConfig::default()
    }
}

/// Deterministic body of entry `i`: 1..=300 bytes.
pub fn body(i: u64) -> Vec<u8> {
    let len = 1 + (i * 37 % 300) as usize;
    (0..len).map(|k| (i as usize * 31 + k * 7) as u8).collect()
}

/// Appends entries `0..n` as leader (term grows every 10 entries).
pub fn fill(store: &mut Store, n: u64) {
    for i in store.next_index().0..n {
        let a = store.append_leader(Term(1 + i / 10), &body(i)).unwrap();
        assert_eq!(a.index, Index(i));
    }
}

/// Asserts entries `0..n` read back exactly.
pub fn check_all(store: &Store, n: u64) {
    for i in 0..n {
        let e = store
            .get(Index(i))
            .unwrap_or_else(|e| panic!("get({i}): {e}"));
        assert_eq!(e.body.as_ref(), body(i).as_slice(), "body of {i}");
        assert_eq!(e.term, Term(1 + i / 10));
    }
}

/// Seed from `STORE_TEST_SEED` or the given default, printed for replay.
pub fn seed(default: u64) -> u64 {
    let s = std::env::var("STORE_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    println!("seed = {s} (set STORE_TEST_SEED to replay)");
    s
}

/// splitmix64 step.
pub fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
