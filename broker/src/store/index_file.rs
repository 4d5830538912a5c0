//! Key index for QUERY_MESSAGE: `KEYS` (each space-separated key) and `UNIQ_KEY` → physical
//! offsets, in Java's index-file layout (spec message-format.md §12) so the files are
//! recognizable, with configurable sizes (tests use small ones).
//!
//! File `<storePathRootDir>/index/<yyyyMMddHHmmssSSS>` (creation time, UTC):
//!
//! | offset | width | content |
//! | --- | --- | --- |
//! | 0 | 40 | header: begin ts, end ts, begin phys, end phys (i64), slot count, index count (i32) |
//! | 40 | 4 × slots | newest entry number per hash slot (0 = empty) |
//! | 40 + 4 × slots | 20 × entries | key hash i32, phys i64, seconds since begin ts i32, previous entry i32 |
//!
//! Entry numbers start at 1 (the header's index count starts at 1). A hash is
//! `abs(String.hashCode(topic + "#" + key))`; matches are candidates only — the caller reads the
//! record and compares its keys, and drops offsets at or beyond the commit log's end.
//!
//! The file is memory-mapped (as Java's `IndexFile`): a put is a few stores, no syscall; disk
//! blocks are reserved ahead of the writer (see `mapped_words`).
//!
//! Durability: entry, then slot, then header are written; `flush` msyncs, but pages reach the
//! disk in any order, so after a crash the header may lag the entries (those entries are then
//! invisible and re-indexed) or lead them (opening drops trailing entries that were never
//! written and lowers the end offset to the last one kept). The dispatcher resumes at most
//! just above [`KeyIndex::last_physical_offset`] (whatever the consume queues need) and feeds
//! the index only records above it, so the index is rebuilt exactly where it lags. Records
//! without keys still advance the header's end offset, so a run of them does not make the
//! index look behind at the next start.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::mapped_words::MappedWords;
use super::StoreError;
use crate::message::msg_id::civil_from_days;
use crate::message::tag::{extend_java_hash, extend_java_hash_ascii, java_string_hash};

/// Header bytes.
pub const INDEX_HEADER_LEN: u64 = 40;
/// Bytes per hash slot.
pub const HASH_SLOT_LEN: u64 = 4;
/// Bytes per index entry.
pub const INDEX_ENTRY_LEN: u64 = 20;

/// Sizes of one index file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexConfig {
    /// Java `maxHashSlotNum` (5,000,000).
    pub hash_slots: u32,
    /// Java `maxIndexNum` (20,000,000).
    pub max_entries: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            hash_slots: 5_000_000,
            max_entries: 20_000_000,
        }
    }
}

impl IndexConfig {
    fn file_len(&self) -> u64 {
        INDEX_HEADER_LEN
            + u64::from(self.hash_slots) * HASH_SLOT_LEN
            + u64::from(self.max_entries) * INDEX_ENTRY_LEN
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Header {
    begin_timestamp: i64,
    end_timestamp: i64,
    begin_phys: i64,
    end_phys: i64,
    hash_slot_count: i32,
    index_count: i32,
}

impl Header {
    fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.begin_phys.to_be_bytes());
        b[24..32].copy_from_slice(&self.end_phys.to_be_bytes());
        b[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }

    fn decode(b: &[u8; 40]) -> Self {
        let i64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            i64::from_be_bytes(a)
        };
        let i32_at = |i: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[i..i + 4]);
            i32::from_be_bytes(a)
        };
        Self {
            begin_timestamp: i64_at(0),
            end_timestamp: i64_at(8),
            begin_phys: i64_at(16),
            end_phys: i64_at(24),
            hash_slot_count: i32_at(32),
            index_count: i32_at(36),
        }
    }
}

/// Java's index key hash: `abs(String.hashCode(topic#key))`, 0 for `i32::MIN`.
pub fn index_key_hash(topic: &str, key: &str) -> i32 {
    // Folded over topic, '#', key: no concatenated string per key.
    abs_or_zero(extend_java_hash(topic_hash_state(topic), key))
}

/// [`index_key_hash`] of a key given as the record's bytes; `None` when they are not UTF-8
/// (such a key is not indexed). ASCII keys, the usual ones, are hashed without a UTF-8 pass.
pub fn index_key_hash_bytes(topic: &str, key: &[u8]) -> Option<i32> {
    if key.is_ascii() {
        return Some(abs_or_zero(extend_java_hash_ascii(
            topic_hash_state(topic),
            key,
        )));
    }
    std::str::from_utf8(key)
        .ok()
        .map(|key| index_key_hash(topic, key))
}

/// The `String.hashCode()` state after `topic#`.
fn topic_hash_state(topic: &str) -> i32 {
    java_string_hash(topic)
        .wrapping_mul(31)
        .wrapping_add(i32::from(b'#'))
}

/// Java's `Math.abs` of the hash, with `i32::MIN` (whose absolute value overflows) as 0.
fn abs_or_zero(h: i32) -> i32 {
    if h == i32::MIN {
        0
    } else {
        h.abs()
    }
}

/// `yyyyMMddHHmmssSSS` of a UTC instant.
pub fn index_file_name(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Bytes reserved on disk ahead of the entry being written (about 52k entries).
const RESERVE_AHEAD: u64 = 1 << 20;

#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    map: MappedWords,
    cfg: IndexConfig,
    header: Mutex<Header>,
    /// File bytes below this are known to be allocated (written only under `header`).
    reserved_to: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl IndexFile {
    fn create(path: PathBuf, cfg: IndexConfig) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(StoreError::io(&path))?;
        file.set_len(cfg.file_len())
            .map_err(StoreError::io(&path))?;
        let header = Header {
            hash_slot_count: 0,
            index_count: 1,
            ..Header::default()
        };
        let map = MappedWords::map(file, cfg.file_len()).map_err(StoreError::io(&path))?;
        let f = Self {
            path,
            map,
            cfg,
            header: Mutex::new(header),
            reserved_to: AtomicU64::new(0),
        };
        f.reserve_through(f.entry_pos(1) + INDEX_ENTRY_LEN)?;
        f.write_header(&header);
        Ok(f)
    }

    fn open(path: PathBuf, cfg: IndexConfig) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(StoreError::io(&path))?;
        let len = file.metadata().map_err(StoreError::io(&path))?.len();
        if len != cfg.file_len() {
            return Err(StoreError::Corrupt {
                path,
                reason: format!("index file is {len} bytes, expected {}", cfg.file_len()),
            });
        }
        let map = MappedWords::map(file, len).map_err(StoreError::io(&path))?;
        let mut b = [0u8; 40];
        map.read_into(0, &mut b);
        let mut header = Header::decode(&b);
        if header.index_count < 1 || header.index_count as u64 > u64::from(cfg.max_entries) {
            header.index_count = header.index_count.clamp(1, cfg.max_entries as i32);
        }
        // Nothing is assumed allocated (files written by `pwrite` are sparse): the first put
        // reserves the header, the slots and the entries up to it.
        let f = Self {
            path,
            map,
            cfg,
            header: Mutex::new(header),
            reserved_to: AtomicU64::new(0),
        };
        f.drop_unwritten_tail()?;
        Ok(f)
    }

    /// After a crash the header page may have reached the disk while the last entries did
    /// not (zeros): they are dropped, and the end offset becomes the last kept entry's, so the
    /// dropped records are indexed again.
    fn drop_unwritten_tail(&self) -> Result<(), StoreError> {
        let mut h = lock(&self.header);
        let before = h.index_count;
        while h.index_count > 1 {
            let at = self.entry_pos(h.index_count - 1) as usize;
            if self.map.load_i64(at + 4) > 0 {
                break;
            }
            h.index_count -= 1;
        }
        if h.index_count == before {
            return Ok(());
        }
        h.end_phys = if h.index_count > 1 {
            self.map
                .load_i64(self.entry_pos(h.index_count - 1) as usize + 4)
        } else {
            0
        };
        tracing::warn!(
            path = %self.path.display(),
            dropped = before - h.index_count,
            end_phys = h.end_phys,
            "index entries counted but never written; they are re-indexed"
        );
        self.reserve_through(self.entry_pos(h.index_count))?;
        self.repair_slots(h.index_count);
        self.write_header(&h);
        Ok(())
    }

    /// Points every slot that names a dropped entry (≥ `count`) at the newest kept entry of
    /// that slot (0 if none), so the older entries of its chain stay reachable. Call under
    /// `header`, with the slot table reserved.
    fn repair_slots(&self, count: i32) {
        let slots = self.cfg.hash_slots;
        let mut bad = std::collections::HashSet::new();
        for s in 0..slots {
            let at = (INDEX_HEADER_LEN + u64::from(s) * HASH_SLOT_LEN) as usize;
            if self.map.load_i32(at) >= count {
                bad.insert(s);
            }
        }
        let mut n = count - 1;
        while n >= 1 && !bad.is_empty() {
            let hash = self.map.load_i32(self.entry_pos(n) as usize);
            if bad.remove(&(hash as u32 % slots)) {
                self.map.store_i32(self.slot_pos(hash), n);
            }
            n -= 1;
        }
        for s in bad {
            let at = (INDEX_HEADER_LEN + u64::from(s) * HASH_SLOT_LEN) as usize;
            self.map.store_i32(at, 0);
        }
    }

    /// Makes sure the file is allocated through `end` (and the whole slot table), reserving
    /// [`RESERVE_AHEAD`] more so this is a syscall once per many entries. Call under `header`.
    fn reserve_through(&self, end: u64) -> Result<(), StoreError> {
        let have = self.reserved_to.load(Ordering::Relaxed);
        if end <= have {
            return Ok(());
        }
        let slots_end = self.entry_pos(0);
        let to = (end.max(slots_end) + RESERVE_AHEAD).min(self.cfg.file_len());
        self.map
            .reserve(have, to)
            .map_err(StoreError::io(&self.path))?;
        self.reserved_to.store(to, Ordering::Relaxed);
        Ok(())
    }

    fn write_header(&self, h: &Header) {
        self.map.write_from(0, &h.encode());
    }

    fn slot_pos(&self, hash: i32) -> usize {
        (INDEX_HEADER_LEN + (hash as u32 % self.cfg.hash_slots) as u64 * HASH_SLOT_LEN) as usize
    }

    fn entry_pos(&self, n: i32) -> u64 {
        INDEX_HEADER_LEN
            + u64::from(self.cfg.hash_slots) * HASH_SLOT_LEN
            + n as u64 * INDEX_ENTRY_LEN
    }

    fn is_full(&self) -> bool {
        lock(&self.header).index_count as u64 >= u64::from(self.cfg.max_entries)
    }

    /// Adds one key; `Ok(false)` when the file is full.
    fn put(&self, hash: i32, phys: i64, store_ts: i64) -> Result<bool, StoreError> {
        let mut h = lock(&self.header);
        if h.index_count as u64 >= u64::from(self.cfg.max_entries) {
            return Ok(false);
        }
        let n = h.index_count;
        let at = self.entry_pos(n);
        self.reserve_through(at + INDEX_ENTRY_LEN)?;
        let slot_pos = self.slot_pos(hash);
        let prev = self.chain_head(self.map.load_i32(slot_pos), h.index_count);
        let diff = if h.begin_timestamp <= 0 {
            0
        } else {
            ((store_ts - h.begin_timestamp) / 1000).clamp(0, i64::from(i32::MAX)) as i32
        };
        // Entry, then slot, then header (the header's count makes the entry visible).
        let at = at as usize;
        self.map.store_i32(at, hash);
        self.map.store_i64(at + 4, phys);
        self.map.store_i32(at + 12, diff);
        self.map.store_i32(at + 16, prev);
        self.map.store_i32(slot_pos, n);
        if h.index_count <= 1 {
            h.begin_phys = phys;
            h.begin_timestamp = store_ts;
        }
        if prev == 0 {
            h.hash_slot_count += 1;
        }
        h.index_count += 1;
        h.end_phys = phys;
        h.end_timestamp = store_ts;
        self.write_header(&h);
        Ok(true)
    }

    /// The newest visible entry of a slot's chain. A slot may name an entry at or past the
    /// count (written before a crash whose header update was lost, and about to be written
    /// again): its chain continues through that entry's link when the link points backwards.
    fn chain_head(&self, mut n: i32, count: i32) -> i32 {
        let mut steps = 0u32;
        while n >= count && steps < 64 {
            if n as u64 >= u64::from(self.cfg.max_entries) {
                return 0;
            }
            let prev = self.map.load_i32(self.entry_pos(n) as usize + 16);
            if prev >= n {
                return 0;
            }
            n = prev;
            steps += 1;
        }
        if n <= 0 || n >= count {
            0
        } else {
            n
        }
    }

    /// Records that every record up to `phys` was considered (those without keys add no
    /// entry): the end offset only moves forward.
    fn note_progress(&self, phys: i64) -> Result<(), StoreError> {
        let mut h = lock(&self.header);
        if phys <= h.end_phys {
            return Ok(());
        }
        self.reserve_through(INDEX_HEADER_LEN)?;
        h.end_phys = phys;
        self.write_header(&h);
        Ok(())
    }

    fn select(
        &self,
        hash: i32,
        max: usize,
        begin_ts: i64,
        end_ts: i64,
        out: &mut Vec<i64>,
    ) -> Result<(), StoreError> {
        let h = *lock(&self.header);
        if h.index_count <= 1 || h.end_timestamp < begin_ts || h.begin_timestamp > end_ts {
            return Ok(());
        }
        let mut n = self.map.load_i32(self.slot_pos(hash));
        let mut steps = 0u64;
        while n > 0
            && n < h.index_count
            && out.len() < max
            && steps < u64::from(self.cfg.max_entries)
        {
            steps += 1;
            let at = self.entry_pos(n) as usize;
            let key_hash = self.map.load_i32(at);
            let phys = self.map.load_i64(at + 4);
            let diff = self.map.load_i32(at + 12);
            let prev = self.map.load_i32(at + 16);
            let ts = h.begin_timestamp + i64::from(diff) * 1000;
            if key_hash == hash && ts >= begin_ts && ts <= end_ts {
                out.push(phys);
            }
            // Chains only point backwards; anything else is damage, stop.
            if prev <= 0 || prev >= n {
                break;
            }
            n = prev;
        }
        Ok(())
    }
}

/// Result of a key lookup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyQueryResult {
    /// Candidate physical offsets, newest first.
    pub physical_offsets: Vec<i64>,
    /// QUERY_MESSAGE response header `indexLastUpdateTimestamp`.
    pub last_update_timestamp: i64,
    /// QUERY_MESSAGE response header `indexLastUpdatePhyoffset`.
    pub last_update_phys_offset: i64,
}

/// All index files of the broker.
#[derive(Debug)]
pub struct KeyIndex {
    dir: PathBuf,
    cfg: IndexConfig,
    files: RwLock<Vec<Arc<IndexFile>>>,
    write_lock: Mutex<()>,
}

impl KeyIndex {
    /// Opens every index file in `dir` (`<storePathRootDir>/index`).
    pub fn open(dir: &Path, cfg: IndexConfig) -> Result<Self, StoreError> {
        if cfg.hash_slots == 0 || cfg.max_entries < 2 {
            return Err(StoreError::Invalid(format!("bad index config {cfg:?}")));
        }
        let mut files = Vec::new();
        match fs::read_dir(dir) {
            Ok(rd) => {
                let mut names: Vec<PathBuf> = Vec::new();
                for e in rd {
                    let e = e.map_err(StoreError::io(dir))?;
                    let ok = e
                        .file_name()
                        .to_str()
                        .is_some_and(|n| n.len() == 17 && n.bytes().all(|b| b.is_ascii_digit()));
                    if ok {
                        names.push(e.path());
                    }
                }
                names.sort();
                for p in names {
                    files.push(Arc::new(IndexFile::open(p, cfg)?));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(dir)(e)),
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            cfg,
            files: RwLock::new(files),
            write_lock: Mutex::new(()),
        })
    }

    fn files(&self) -> Vec<Arc<IndexFile>> {
        self.files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn last_file(&self) -> Option<Arc<IndexFile>> {
        self.files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last()
            .cloned()
    }

    /// Physical offset of the newest indexed record (0 if none): the dispatcher skips records
    /// at or below it after a restart.
    pub fn last_physical_offset(&self) -> i64 {
        let files = self
            .files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        files.last().map_or(0, |f| lock(&f.header).end_phys)
    }

    fn writable_file(&self, now_ms: i64) -> Result<Arc<IndexFile>, StoreError> {
        if let Some(f) = self.last_file() {
            if !f.is_full() {
                return Ok(f);
            }
            // Only the newest file is flushed periodically and only its end offset tells the
            // dispatcher where to resume: the full one must be durable before it stops being
            // the newest.
            f.map.flush().map_err(StoreError::io(&f.path))?;
        }
        fs::create_dir_all(&self.dir).map_err(StoreError::io(&self.dir))?;
        let mut ms = now_ms;
        let mut path = self.dir.join(index_file_name(ms));
        while path.exists() {
            ms += 1;
            path = self.dir.join(index_file_name(ms));
        }
        let f = Arc::new(IndexFile::create(path, self.cfg)?);
        self.files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::clone(&f));
        Ok(f)
    }

    /// Indexes one key of a record.
    pub fn put_key(
        &self,
        topic: &str,
        key: &str,
        physical_offset: i64,
        store_timestamp: i64,
    ) -> Result<(), StoreError> {
        if key.is_empty() {
            return Ok(());
        }
        let _w = lock(&self.write_lock);
        let hash = index_key_hash(topic, key);
        self.put_locked(&mut None, hash, physical_offset, store_timestamp)
    }

    /// Adds one hash to `file` (the writable file, looked up once per record), rolling to a
    /// new file when it is full. Caller holds `write_lock`.
    fn put_locked(
        &self,
        file: &mut Option<Arc<IndexFile>>,
        hash: i32,
        physical_offset: i64,
        store_timestamp: i64,
    ) -> Result<(), StoreError> {
        for _ in 0..2 {
            let f = match file {
                Some(f) => f,
                None => file.insert(self.writable_file(store_timestamp)?),
            };
            if f.put(hash, physical_offset, store_timestamp)? {
                return Ok(());
            }
            *file = None;
        }
        Err(StoreError::Invalid(
            "index file full right after creation".into(),
        ))
    }

    /// Indexes a record: every space-separated `KEYS` value and the `UNIQ_KEY`.
    /// `keys` and `uniq_key` are the raw property values (a value that is not UTF-8 is not
    /// indexed).
    pub fn index_message(
        &self,
        topic: &str,
        keys: Option<&[u8]>,
        uniq_key: Option<&[u8]>,
        physical_offset: i64,
        store_timestamp: i64,
    ) -> Result<(), StoreError> {
        let _w = lock(&self.write_lock);
        let mut file = None;
        // A key list that is not UTF-8 is skipped whole, as a lossy decoding would not find
        // the keys a client asks for either.
        let keys = keys.filter(|k| k.is_ascii() || std::str::from_utf8(k).is_ok());
        let all = uniq_key
            .into_iter()
            .chain(keys.into_iter().flat_map(|k| k.split(|&b| b == b' ')));
        for k in all.filter(|k| !k.is_empty()) {
            let Some(hash) = index_key_hash_bytes(topic, k) else {
                continue;
            };
            self.put_locked(&mut file, hash, physical_offset, store_timestamp)?;
        }
        if file.is_none() {
            // No keys: nothing to add, but the record was seen.
            self.writable_file(store_timestamp)?
                .note_progress(physical_offset)?;
        }
        Ok(())
    }

    /// Candidate offsets of records of `topic` with `key`, stored within
    /// `[begin_ts, end_ts]` (ms), newest first. Entry times have whole-second precision, so
    /// records stored up to 1 s before `begin_ts` may be included: callers check the record's
    /// key and store timestamp, as Java's QUERY_MESSAGE does.
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ts: i64,
        end_ts: i64,
    ) -> Result<KeyQueryResult, StoreError> {
        let hash = index_key_hash(topic, key);
        let files = self.files();
        let mut r = KeyQueryResult::default();
        if let Some(last) = files.last() {
            let h = *lock(&last.header);
            r.last_update_timestamp = h.end_timestamp;
            r.last_update_phys_offset = h.end_phys;
        }
        // Entry times are stored in whole seconds after the file's begin; widen by 1 s.
        for f in files.iter().rev() {
            if r.physical_offsets.len() >= max_num {
                break;
            }
            f.select(
                hash,
                max_num,
                begin_ts - 1000,
                end_ts,
                &mut r.physical_offsets,
            )?;
        }
        Ok(r)
    }

    /// Deletes files (never the newest) whose last record is below `commit_log_min_offset`.
    pub fn delete_expired(&self, commit_log_min_offset: i64) -> Result<usize, StoreError> {
        let _w = lock(&self.write_lock);
        let mut files = self
            .files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut removed = 0;
        while files.len() > 1 && lock(&files[0].header).end_phys < commit_log_min_offset {
            let f = files.remove(0);
            fs::remove_file(&f.path).map_err(StoreError::io(&f.path))?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Writes the newest file back to disk and waits.
    pub fn flush(&self) -> Result<(), StoreError> {
        if let Some(f) = self.last_file() {
            f.map.flush().map_err(StoreError::io(&f.path))?;
        }
        Ok(())
    }

    /// Number of index files.
    pub fn file_count(&self) -> usize {
        self.files().len()
    }
}

#[cfg(test)]
mod tests;
