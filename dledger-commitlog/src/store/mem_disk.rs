//! In-memory disk with a crash model, for the simulator and the conformance suite.
//!
//! Every file keeps two images: `data` (what a process reads: the page cache) and `durable`
//! (what survives power loss: updated only by flushes). [`MemDisk::crash`] returns the disk a
//! restarted node would find: with the page cache (process crash), with only flushed bytes
//! (power loss), or with each unflushed 4 KiB page independently kept or lost (torn writes).
//! Directory operations (create, delete, atomic state-file replace) are durable immediately,
//! as the real store fsyncs the directory after each.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::fault::{FaultPoint, Faults};

const PAGE: usize = 4096;

/// What a crash keeps of unflushed writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Process crash: the page cache survives, everything written is kept.
    KeepPageCache,
    /// Power loss: only flushed bytes survive.
    DropUnflushed,
    /// Power loss with torn writes: each unflushed page is kept or lost at random (seeded).
    TearUnflushed {
        /// Seed of the page choice.
        seed: u64,
    },
}

/// One in-memory file.
#[derive(Debug)]
pub(crate) struct MemFile {
    data: RwLock<Vec<u8>>,
    durable: Mutex<Vec<u8>>,
    modified_ms: AtomicU64,
    clock: Arc<AtomicU64>,
    len: u64,
}

impl MemFile {
    fn new(len: u64, data: Vec<u8>, clock: Arc<AtomicU64>) -> MemFile {
        let now = clock.load(Ordering::Relaxed);
        MemFile {
            durable: Mutex::new(data.clone()),
            data: RwLock::new(data),
            modified_ms: AtomicU64::new(now),
            clock,
            len,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn modified_ms(&self) -> u64 {
        self.modified_ms.load(Ordering::Relaxed)
    }

    fn range(&self, off: usize, len: usize) -> io::Result<usize> {
        match off.checked_add(len) {
            Some(end) if end as u64 <= self.len => Ok(end),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the segment",
            )),
        }
    }

    pub(crate) fn write_with<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> io::Result<R> {
        let end = self.range(off, len)?;
        let mut d = self
            .data
            .write()
            .map_err(|_| io::Error::other("poisoned lock"))?;
        if d.len() < end {
            d.resize(end, 0);
        }
        self.modified_ms
            .store(self.clock.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(f(&mut d[off..end]))
    }

    pub(crate) fn with_slice<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let end = self.range(off, len)?;
        let d = self
            .data
            .read()
            .map_err(|_| io::Error::other("poisoned lock"))?;
        if end <= d.len() {
            return Ok(f(&d[off..end]));
        }
        // Beyond the written extent the file reads as zeros.
        let mut tmp = vec![0u8; len];
        if off < d.len() {
            tmp[..d.len() - off].copy_from_slice(&d[off..]);
        }
        Ok(f(&tmp))
    }

    pub(crate) fn flush(&self, off: usize, len: usize) -> io::Result<()> {
        let end = self.range(off, len)?;
        let d = self
            .data
            .read()
            .map_err(|_| io::Error::other("poisoned lock"))?;
        let mut durable = self
            .durable
            .lock()
            .map_err(|_| io::Error::other("poisoned lock"))?;
        let end = end.min(d.len());
        if off >= end {
            return Ok(());
        }
        if durable.len() < end {
            durable.resize(end, 0);
        }
        durable[off..end].copy_from_slice(&d[off..end]);
        Ok(())
    }

    fn after_crash(&self, mode: CrashMode, rng: &mut u64, clock: Arc<AtomicU64>) -> MemFile {
        let data = self.data.read().map(|d| d.clone()).unwrap_or_default();
        let durable = self.durable.lock().map(|d| d.clone()).unwrap_or_default();
        let image = match mode {
            CrashMode::KeepPageCache => data,
            CrashMode::DropUnflushed => durable,
            CrashMode::TearUnflushed { .. } => {
                let mut out = durable;
                let n = data.len().max(out.len());
                out.resize(n, 0);
                let mut page = 0;
                while page < data.len() {
                    let end = (page + PAGE).min(data.len());
                    if out[page..end] != data[page..end] && next_bool(rng) {
                        out[page..end].copy_from_slice(&data[page..end]);
                    }
                    page = end;
                }
                out
            }
        };
        let f = MemFile::new(self.len, image, clock);
        f.modified_ms.store(self.modified_ms(), Ordering::Relaxed);
        f
    }
}

fn next_bool(state: &mut u64) -> bool {
    // splitmix64: enough for a seeded coin; no dependency, fully reproducible.
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) & 1 == 1
}

#[derive(Debug, Default)]
struct Files {
    segments: BTreeMap<String, Arc<MemFile>>,
    states: BTreeMap<String, Vec<u8>>,
}

/// A cloneable handle to one simulated disk (the directory of one DLedger member).
///
/// File names are the same relative paths the real store uses (`data/000…0`, `index/…`,
/// `checkpoint`, `currterm`), so tests can damage files the same way on both backends.
#[derive(Debug, Clone, Default)]
pub struct MemDisk {
    files: Arc<Mutex<Files>>,
    clock: Arc<AtomicU64>,
    faults: Arc<Faults>,
}

impl MemDisk {
    /// An empty disk.
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// The fault plan consulted by every write step on this disk.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Sets the time stamped on files written from now on (simulated clock, Unix ms).
    pub fn set_now_ms(&self, now_ms: u64) {
        self.clock.store(now_ms, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The disk a restarted node finds after a crash of the given kind. Drop the old store
    /// first; the returned disk shares nothing with this one.
    pub fn crash(&self, mode: CrashMode) -> MemDisk {
        let mut rng = match mode {
            CrashMode::TearUnflushed { seed } => seed,
            _ => 0,
        };
        let clock = Arc::new(AtomicU64::new(self.clock.load(Ordering::Relaxed)));
        let files = self.lock();
        let segments = files
            .segments
            .iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    Arc::new(f.after_crash(mode, &mut rng, clock.clone())),
                )
            })
            .collect();
        MemDisk {
            files: Arc::new(Mutex::new(Files {
                segments,
                states: files.states.clone(),
            })),
            clock,
            faults: Arc::new(Faults::default()),
        }
    }

    /// Names of all files (segments and state files), sorted.
    pub fn file_names(&self) -> Vec<String> {
        let f = self.lock();
        let mut v: Vec<String> = f.segments.keys().chain(f.states.keys()).cloned().collect();
        v.sort();
        v
    }

    /// Current (page cache) content of a file, zero-padded to its length for segments.
    pub fn read_file(&self, name: &str) -> Option<Vec<u8>> {
        let f = self.lock();
        if let Some(s) = f.segments.get(name) {
            let mut d = s.data.read().map(|d| d.clone()).unwrap_or_default();
            d.resize(s.len as usize, 0);
            return Some(d);
        }
        f.states.get(name).cloned()
    }

    /// Replaces a file's content (both images), as a test damaging the disk would. A segment's
    /// length becomes the new content's length.
    pub fn write_file(&self, name: &str, bytes: Vec<u8>) {
        let mut f = self.lock();
        if name.starts_with("data/") || name.starts_with("index/") {
            let file = MemFile::new(bytes.len() as u64, bytes, self.clock.clone());
            f.segments.insert(name.to_string(), Arc::new(file));
        } else {
            f.states.insert(name.to_string(), bytes);
        }
    }

    /// Deletes a file.
    pub fn remove_file(&self, name: &str) {
        let mut f = self.lock();
        f.segments.remove(name);
        f.states.remove(name);
    }

    pub(crate) fn list(&self, sub: &str) -> Vec<(String, u64, u64)> {
        let prefix = format!("{sub}/");
        self.lock()
            .segments
            .iter()
            .filter_map(|(k, f)| {
                k.strip_prefix(&prefix)
                    .map(|n| (n.to_string(), f.len, f.modified_ms()))
            })
            .collect()
    }

    pub(crate) fn open_segment(&self, name: &str, len: u64) -> io::Result<Arc<MemFile>> {
        let mut f = self.lock();
        let old = f
            .segments
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if old.len == len {
            return Ok(old);
        }
        // Zero-extend (or cut) a short file: keep both images, change only the length.
        let file = MemFile::new(len, Vec::new(), self.clock.clone());
        if let (Ok(d), Ok(mut nd)) = (old.data.read(), file.data.write()) {
            *nd = d.iter().copied().take(len as usize).collect();
        }
        if let (Ok(d), Ok(mut nd)) = (old.durable.lock(), file.durable.lock()) {
            *nd = d.iter().copied().take(len as usize).collect();
        }
        let file = Arc::new(file);
        f.segments.insert(name.to_string(), file.clone());
        Ok(file)
    }

    pub(crate) fn create_segment(
        &self,
        name: &str,
        len: u64,
        point: FaultPoint,
    ) -> io::Result<Arc<MemFile>> {
        self.faults.check(point)?;
        let file = Arc::new(MemFile::new(len, Vec::new(), self.clock.clone()));
        self.lock().segments.insert(name.to_string(), file.clone());
        Ok(file)
    }

    pub(crate) fn remove_segment(&self, name: &str) {
        self.lock().segments.remove(name);
    }

    pub(crate) fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        self.lock().states.get(name).cloned()
    }

    pub(crate) fn write_state(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.faults.check(FaultPoint::StateFileWrite)?;
        self.lock().states.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }
}
