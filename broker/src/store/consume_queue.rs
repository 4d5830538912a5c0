//! Consume queues (spec message-format.md §11): per (topic, queueId), a sequence of 20-byte
//! units `physical offset i64 | size i32 | tag code i64` stored in fixed-size files
//! `<root>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>`. Logical offset `n`
//! lives at byte `n * 20` of the queue's address space.
//!
//! Concurrency: one writer (the dispatcher; appends and truncation also serialize on an
//! internal mutex) and many readers (pull). Files are memory-mapped and fully allocated when
//! opened (see `mapped_words`): an append is five word stores, no syscall. The writer
//! publishes the new end with a release store after the unit's words are written; readers
//! only read below the published end (acquire), so no lock is held while reading.
//!
//! Recovery: files are scanned from the last one backwards; the end is the first unit whose
//! size is not positive. Queues are flushed independently, so after a crash one queue can lag
//! another: [`ConsumeQueueSet::flush_all`] therefore records, after every queue is durable, the
//! log position through which the dispatcher had fed all of them (the dispatch checkpoint,
//! file `<cq_root>/.dispatched`); the dispatcher resumes there at most, so a lagging queue is
//! refilled from the log and no unit is skipped. Java's "pre-blank" units (`0, i32::MAX, 0`) fill a file before the
//! first real unit of a queue that starts at a non-zero offset; they count as written but lie
//! below the minimum offset.

use std::borrow::Borrow;
use std::fs::{self, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dashmap::DashMap;

use super::mapped_words::MappedWords;
use super::StoreError;
use crate::message::record::DLEDGER_ENTRY_HEADER_LEN;

/// Bytes per unit.
pub const CQ_UNIT_SIZE: usize = 20;
/// Default file size: 300000 units.
pub const DEFAULT_CQ_FILE_SIZE: u64 = 300_000 * CQ_UNIT_SIZE as u64;
/// Largest number of units one read returns.
pub const MAX_UNITS_PER_READ: usize = 64 * 1024;

/// One consume-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqUnit {
    /// Commit-log physical offset of the record (DLedger: entry pos + 48).
    pub physical_offset: i64,
    /// TOTALSIZE of the record.
    pub size: i32,
    /// Tag hash (§6) or, in `SCHEDULE_TOPIC_XXXX`, the delivery time.
    pub tag_code: i64,
}

const BLANK: CqUnit = CqUnit {
    physical_offset: 0,
    size: i32::MAX,
    tag_code: 0,
};

/// An unwritten unit.
const ZERO: CqUnit = CqUnit {
    physical_offset: 0,
    size: 0,
    tag_code: 0,
};

impl CqUnit {
    /// The 20 stored bytes.
    pub fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut b = [0u8; CQ_UNIT_SIZE];
        b[0..8].copy_from_slice(&self.physical_offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..20].copy_from_slice(&self.tag_code.to_be_bytes());
        b
    }

    /// Parses 20 stored bytes.
    pub fn decode(b: &[u8; CQ_UNIT_SIZE]) -> Self {
        let mut p = [0u8; 8];
        let mut s = [0u8; 4];
        let mut t = [0u8; 8];
        p.copy_from_slice(&b[0..8]);
        s.copy_from_slice(&b[8..12]);
        t.copy_from_slice(&b[12..20]);
        Self {
            physical_offset: i64::from_be_bytes(p),
            size: i32::from_be_bytes(s),
            tag_code: i64::from_be_bytes(t),
        }
    }

    /// A written unit (real or pre-blank); zeros/torn bytes are not.
    fn is_written(&self) -> bool {
        self.physical_offset >= 0 && self.size > 0
    }

    /// A pre-blank unit or a hole: the same bytes as Java's pre-blank (`0, i32::MAX, 0`), so
    /// a reader that looks the record up finds none and moves on.
    pub fn is_blank(&self) -> bool {
        *self == BLANK
    }

    /// End of the record in the commit log.
    pub fn physical_end(&self) -> i64 {
        self.physical_offset + i64::from(self.size)
    }
}

/// What [`ConsumeQueue::append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The unit was written at its offset and published.
    Appended,
    /// The same unit was already there (re-dispatch after restart); nothing changed.
    AlreadyPresent,
    /// The queue ended below the record's offset (offsets given to records that never
    /// reached the queue): that many holes were written before the unit, at its offset.
    AfterHoles { holes: i64 },
    /// The unit filled a hole at its offset (a queue that missed the record before).
    FilledHole,
    /// The record's own offset could not be used (taken by another record, negative, below the
    /// minimum, or too far ahead): the unit went to the queue's end, `at`.
    Renumbered { stored: i64, at: i64 },
}

impl AppendOutcome {
    /// Whether readers can see a new unit.
    pub fn grew(self) -> bool {
        !matches!(self, AppendOutcome::AlreadyPresent)
    }
}

/// Most holes one append writes to keep a record at its own offset. Offsets given to records
/// that never reach the queue come from proposals that failed in flight (bounded by the
/// store's in-flight window) or, in a store written before this rule, from skipped records;
/// a record whose offset is further ahead than this is taken to be damaged and renumbered.
pub const MAX_HOLE_FILL: i64 = 1 << 16;

/// Which side of a timestamp [`ConsumeQueue::offset_by_time`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBoundary {
    /// Smallest offset whose store time is ≥ the timestamp (max offset if none).
    Lower,
    /// Largest offset whose store time is ≤ the timestamp (min offset if none).
    Upper,
}

#[derive(Debug)]
struct Segment {
    /// Queue byte offset of the file's first byte.
    start: u64,
    map: MappedWords,
    path: PathBuf,
}

impl Segment {
    /// Maps an open file of `file_size` bytes, allocating all of it.
    fn map(path: PathBuf, start: u64, file: fs::File, file_size: u64) -> Result<Self, StoreError> {
        let map = MappedWords::map(file, file_size).map_err(StoreError::io(&path))?;
        map.reserve(0, file_size).map_err(StoreError::io(&path))?;
        Ok(Segment { start, map, path })
    }

    fn read_unit(&self, in_file: u64) -> CqUnit {
        let at = in_file as usize;
        CqUnit {
            physical_offset: self.map.load_i64(at),
            size: self.map.load_i32(at + 8),
            tag_code: self.map.load_i64(at + 12),
        }
    }

    fn write_unit(&self, in_file: u64, u: &CqUnit) -> Result<(), StoreError> {
        let at = in_file as usize;
        let ok = self.map.store_i64(at, u.physical_offset)
            && self.map.store_i32(at + 8, u.size)
            && self.map.store_i64(at + 12, u.tag_code);
        if ok {
            Ok(())
        } else {
            Err(StoreError::Invalid(format!(
                "consume-queue unit at {in_file} outside {}",
                self.path.display()
            )))
        }
    }
}

/// One consume queue.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    dir: PathBuf,
    file_size: u64,
    segments: RwLock<Vec<Arc<Segment>>>,
    /// Logical end (next offset to be written), published with Release.
    max_offset: AtomicI64,
    min_offset: AtomicI64,
    /// physical_offset + size of the last unit (0 when empty).
    max_physical_end: AtomicI64,
    /// Logical offset up to which data has been fsynced.
    flushed_offset: AtomicI64,
    write_lock: Mutex<()>,
    /// Held pulls of this queue wait here; the dispatcher wakes them once per dispatch step
    /// in which the queue grew (not every held pull on every step).
    appended: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// 20-digit zero-padded file name of a start offset.
pub fn file_name_of(start: u64) -> String {
    format!("{start:020}")
}

impl ConsumeQueue {
    /// Opens (recovering) or creates the queue under `<cq_root>/<topic>/<queue_id>`.
    /// `file_size` is rounded up to a multiple of 20.
    pub fn open(
        cq_root: &Path,
        topic: &str,
        queue_id: i32,
        file_size: u64,
    ) -> Result<Self, StoreError> {
        let file_size = file_size
            .max(CQ_UNIT_SIZE as u64)
            .div_ceil(CQ_UNIT_SIZE as u64)
            * CQ_UNIT_SIZE as u64;
        let dir = cq_root.join(topic).join(queue_id.to_string());
        let q = Self {
            topic: topic.to_owned(),
            queue_id,
            dir,
            file_size,
            segments: RwLock::new(Vec::new()),
            max_offset: AtomicI64::new(0),
            min_offset: AtomicI64::new(0),
            max_physical_end: AtomicI64::new(0),
            flushed_offset: AtomicI64::new(0),
            write_lock: Mutex::new(()),
            appended: tokio::sync::Notify::new(),
        };
        q.recover()?;
        Ok(q)
    }

    fn unit_pos(offset: i64) -> u64 {
        offset as u64 * CQ_UNIT_SIZE as u64
    }

    fn recover(&self) -> Result<(), StoreError> {
        let mut segs = Vec::new();
        match fs::read_dir(&self.dir) {
            Ok(rd) => {
                for e in rd {
                    let e = e.map_err(StoreError::io(&self.dir))?;
                    let name = e.file_name();
                    let Some(start) = name
                        .to_str()
                        .and_then(|n| (n.len() == 20).then(|| n.parse::<u64>().ok()).flatten())
                    else {
                        continue;
                    };
                    let path = e.path();
                    if start % self.file_size != 0 {
                        return Err(StoreError::Corrupt {
                            path,
                            reason: format!(
                                "start offset is not a multiple of the file size {}",
                                self.file_size
                            ),
                        });
                    }
                    let file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .map_err(StoreError::io(&path))?;
                    let len = file.metadata().map_err(StoreError::io(&path))?.len();
                    if len != self.file_size {
                        // A file from a crash during creation: make it full size (zeros).
                        file.set_len(self.file_size)
                            .map_err(StoreError::io(&path))?;
                    }
                    segs.push(Arc::new(Segment::map(path, start, file, self.file_size)?));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&self.dir)(e)),
        }
        segs.sort_by_key(|s| s.start);
        for w in segs.windows(2) {
            if w[1].start != w[0].start + self.file_size {
                return Err(StoreError::Corrupt {
                    path: w[1].path.clone(),
                    reason: "gap between consume-queue files".into(),
                });
            }
        }
        // Find the end: the last file with a written unit; empty files after it are removed.
        let mut end_pos = None;
        while let Some(last) = segs.last() {
            let n = self.count_written_units(last)?;
            if n > 0 || segs.len() == 1 {
                end_pos = Some(last.start + n * CQ_UNIT_SIZE as u64);
                break;
            }
            if let Some(dead) = segs.pop() {
                fs::remove_file(&dead.path).map_err(StoreError::io(&dead.path))?;
            }
        }
        let Some(end_pos) = end_pos else {
            return Ok(());
        };
        let mut end = (end_pos / CQ_UNIT_SIZE as u64) as i64;
        // Minimum: first non-blank unit of the first file.
        let first_start = segs.first().map_or(0, |s| s.start);
        let mut min = (first_start / CQ_UNIT_SIZE as u64) as i64;
        *self
            .segments
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = segs;
        end = self.trim_trailing_blanks(min, end)?;
        self.max_offset.store(end, Ordering::Release);
        while min < end {
            match self.read_unit_raw(min)? {
                Some(u) if u.is_blank() => min += 1,
                _ => break,
            }
        }
        self.min_offset.store(min, Ordering::Release);
        self.flushed_offset.store(end, Ordering::Release);
        if end > min {
            if let Some(u) = self.read_unit_raw(end - 1)? {
                self.max_physical_end
                    .store(u.physical_end(), Ordering::Release);
            }
        }
        Ok(())
    }

    /// Holes and pre-blank units are written just before the real unit that needs them and
    /// published with it; after a crash between the two the blanks end the queue without
    /// their unit (whose end would read as `i32::MAX`). They are zeroed and the end moved
    /// back: dispatch writes them again with the unit.
    /// `first` is the logical offset of the first file's first unit.
    fn trim_trailing_blanks(&self, first: i64, end: i64) -> Result<i64, StoreError> {
        let mut new_end = end;
        while new_end > first
            && self
                .read_unit_raw(new_end - 1)?
                .is_some_and(|u| u.is_blank())
        {
            new_end -= 1;
        }
        if new_end < end {
            tracing::warn!(
                topic = self.topic,
                queue_id = self.queue_id,
                units = end - new_end,
                "consume queue ended with blank units (crash before their unit); trimmed"
            );
            for at in new_end..end {
                self.write_at(at, &ZERO)?;
            }
        }
        Ok(new_end)
    }

    /// Number of consecutive written units from the start of a file.
    fn count_written_units(&self, seg: &Segment) -> Result<u64, StoreError> {
        let mut pos = 0u64;
        while pos < self.file_size {
            if !seg.read_unit(pos).is_written() {
                break;
            }
            pos += CQ_UNIT_SIZE as u64;
        }
        Ok(pos / CQ_UNIT_SIZE as u64)
    }

    /// Topic of this queue.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Queue id.
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// Next logical offset to be written (= number of units incl. deleted ones).
    pub fn max_offset(&self) -> i64 {
        self.max_offset.load(Ordering::Acquire)
    }

    /// First logical offset still readable.
    pub fn min_offset(&self) -> i64 {
        self.min_offset.load(Ordering::Acquire)
    }

    /// Wakes the held pulls of this queue (the dispatcher calls it after a step that grew it).
    pub fn wake_waiters(&self) {
        self.appended.notify_waiters();
    }

    /// What held pulls wait on; see [`ConsumeQueue::wake_waiters`].
    pub fn appended(&self) -> &tokio::sync::Notify {
        &self.appended
    }

    /// End (offset + size) in the commit log of the last unit; 0 when empty.
    pub fn max_physical_end(&self) -> i64 {
        self.max_physical_end.load(Ordering::Acquire)
    }

    fn segment_for(&self, pos: u64) -> Option<Arc<Segment>> {
        let segs = self
            .segments
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = segs.first()?.start;
        if pos < first {
            return None;
        }
        let i = ((pos - first) / self.file_size) as usize;
        segs.get(i).cloned()
    }

    fn read_unit_raw(&self, offset: i64) -> Result<Option<CqUnit>, StoreError> {
        let pos = Self::unit_pos(offset);
        let Some(seg) = self.segment_for(pos) else {
            return Ok(None);
        };
        Ok(Some(seg.read_unit(pos - seg.start)))
    }

    /// The unit at `offset`, if it is in `[min, max)`.
    pub fn get(&self, offset: i64) -> Result<Option<CqUnit>, StoreError> {
        if offset < self.min_offset() || offset >= self.max_offset() {
            return Ok(None);
        }
        self.read_unit_raw(offset)
    }

    /// Reads up to `max_count` (≤ [`MAX_UNITS_PER_READ`]) units starting at `offset` into
    /// `out` (cleared first). Reads nothing outside `[min, max)`.
    pub fn read_units_into(
        &self,
        offset: i64,
        max_count: usize,
        out: &mut Vec<CqUnit>,
    ) -> Result<(), StoreError> {
        out.clear();
        let end = self.max_offset();
        if offset < self.min_offset() || offset >= end {
            return Ok(());
        }
        let want = (end - offset).min(max_count.min(MAX_UNITS_PER_READ) as i64) as usize;
        out.reserve(want);
        let mut cur = offset;
        while out.len() < want {
            let pos = Self::unit_pos(cur);
            let Some(seg) = self.segment_for(pos) else {
                break;
            };
            let mut in_file = pos - seg.start;
            while in_file < self.file_size && out.len() < want {
                let u = seg.read_unit(in_file);
                // A concurrent truncation may have zeroed the tail: stop at the first hole.
                if !u.is_written() {
                    return Ok(());
                }
                out.push(u);
                in_file += CQ_UNIT_SIZE as u64;
                cur += 1;
            }
        }
        Ok(())
    }

    /// Reads up to `max_count` units starting at `offset`.
    pub fn read_units(&self, offset: i64, max_count: usize) -> Result<Vec<CqUnit>, StoreError> {
        let mut v = Vec::new();
        self.read_units_into(offset, max_count, &mut v)?;
        Ok(v)
    }

    fn create_segment(&self, start: u64) -> Result<Arc<Segment>, StoreError> {
        fs::create_dir_all(&self.dir).map_err(StoreError::io(&self.dir))?;
        let path = self.dir.join(file_name_of(start));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(StoreError::io(&path))?;
        file.set_len(self.file_size)
            .map_err(StoreError::io(&path))?;
        Ok(Arc::new(Segment::map(path, start, file, self.file_size)?))
    }

    /// The segment holding `pos`, creating the next file if `pos` is just past the last one.
    fn segment_for_write(&self, pos: u64) -> Result<Arc<Segment>, StoreError> {
        if let Some(s) = self.segment_for(pos) {
            return Ok(s);
        }
        let start = pos - pos % self.file_size;
        let seg = self.create_segment(start)?;
        let mut segs = self
            .segments
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(last) = segs.last() {
            if last.start + self.file_size != start {
                return Err(StoreError::Corrupt {
                    path: seg.path.clone(),
                    reason: "consume-queue append would leave a gap between files".into(),
                });
            }
        }
        segs.push(Arc::clone(&seg));
        Ok(seg)
    }

    /// Appends `unit` of the record whose stored queue offset is `offset`, and never refuses a
    /// record for its offset (G7: no single record stops a queue; see the module doc):
    /// * `offset == max`: appended there;
    /// * the identical unit already at `offset`: nothing to do (re-dispatch after a restart);
    /// * `offset` past `max` by at most [`MAX_HOLE_FILL`]: the offsets between are written as
    ///   holes and the unit at `offset`, so the record stays readable at the offset its send
    ///   was answered with (an empty queue's first unit may start anywhere: earlier units of
    ///   its file are pre-blank filled);
    /// * a hole at `offset` (an older store whose queue missed records): the unit fills it;
    /// * anything else (the offset is taken by another record, negative, below the minimum or
    ///   absurdly far ahead): the unit is appended at `max`, so the record is still readable,
    ///   at another offset; pulls report the offset the record is read at.
    pub fn append(&self, offset: i64, unit: CqUnit) -> Result<AppendOutcome, StoreError> {
        if unit.size <= 0 || unit.physical_offset < 0 || unit.is_blank() {
            return Err(StoreError::Invalid(format!(
                "bad consume-queue unit {unit:?} at {offset}"
            )));
        }
        let _w = lock(&self.write_lock);
        let end = self.max_offset();
        let empty = self
            .segments
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty();
        if (0..self.min_offset()).contains(&offset)
            && unit.physical_end() <= self.max_physical_end()
        {
            // Below the minimum and older than the queue's last unit: dispatched before, and
            // cleaned away since.
            return Ok(AppendOutcome::AlreadyPresent);
        }
        if (0..end).contains(&offset) && offset >= self.min_offset() {
            return match self.read_unit_raw(offset)? {
                // The same record (its tag code may differ: a schedule unit's delivery time
                // follows the configured delay levels).
                Some(u) if u.physical_offset == unit.physical_offset && u.size == unit.size => {
                    Ok(AppendOutcome::AlreadyPresent)
                }
                Some(u) if u.is_blank() => {
                    self.write_at(offset, &unit)?;
                    self.max_physical_end
                        .fetch_max(unit.physical_end(), Ordering::AcqRel);
                    Ok(AppendOutcome::FilledHole)
                }
                _ => self.append_at_end(end, unit, offset),
            };
        }
        if offset > end && empty {
            self.fill_pre_blank(offset)?;
        } else if offset > end && offset - end <= MAX_HOLE_FILL {
            for hole in end..offset {
                self.write_at(hole, &BLANK)?;
            }
        } else if offset != end {
            return self.append_at_end(end, unit, offset);
        }
        self.write_at(offset, &unit)?;
        if empty {
            self.min_offset.store(offset, Ordering::Release);
            self.flushed_offset.store(offset, Ordering::Release);
        }
        self.publish_end(offset, unit);
        Ok(if offset > end && !empty {
            AppendOutcome::AfterHoles {
                holes: offset - end,
            }
        } else {
            AppendOutcome::Appended
        })
    }

    /// The unit of a record whose own offset cannot be used, appended at `end`.
    fn append_at_end(
        &self,
        end: i64,
        unit: CqUnit,
        stored_offset: i64,
    ) -> Result<AppendOutcome, StoreError> {
        self.write_at(end, &unit)?;
        self.publish_end(end, unit);
        Ok(AppendOutcome::Renumbered {
            stored: stored_offset,
            at: end,
        })
    }

    /// Writes `u` at logical `offset` (not yet visible to readers unless below the end).
    fn write_at(&self, offset: i64, u: &CqUnit) -> Result<(), StoreError> {
        let pos = Self::unit_pos(offset);
        let seg = self.segment_for_write(pos)?;
        seg.write_unit(pos - seg.start, u)
    }

    /// Publishes `unit`, just written at `offset`, as the queue's last unit.
    fn publish_end(&self, offset: i64, unit: CqUnit) {
        self.max_physical_end
            .fetch_max(unit.physical_end(), Ordering::AcqRel);
        self.max_offset.store(offset + 1, Ordering::Release);
    }

    /// Writes pre-blank units from the start of the file holding `offset` up to `offset`.
    fn fill_pre_blank(&self, offset: i64) -> Result<(), StoreError> {
        let pos = Self::unit_pos(offset);
        let seg = self.segment_for_write(pos)?;
        let mut at = 0u64;
        let until = pos - seg.start;
        while at < until {
            seg.write_unit(at, &BLANK)?;
            at += CQ_UNIT_SIZE as u64;
        }
        let first = (seg.start / CQ_UNIT_SIZE as u64) as i64;
        self.max_offset.store(first.max(0), Ordering::Release);
        Ok(())
    }

    /// fsyncs everything written since the last flush.
    pub fn flush(&self) -> Result<(), StoreError> {
        let end = self.max_offset();
        let from = self.flushed_offset.load(Ordering::Acquire);
        if from >= end {
            return Ok(());
        }
        let segs: Vec<Arc<Segment>> = {
            let g = self
                .segments
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let lo = Self::unit_pos(from);
            let hi = Self::unit_pos(end);
            g.iter()
                .filter(|s| s.start + self.file_size > lo && s.start < hi)
                .cloned()
                .collect()
        };
        for s in segs {
            s.map.flush().map_err(StoreError::io(&s.path))?;
        }
        self.flushed_offset.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// First logical offset in `[lo, hi)` whose unit satisfies `pred` (monotone: false…true);
    /// `hi` if none. A hole answers as the first real unit after it (the record it was written
    /// for), or true when none follows within the range.
    fn partition_point(
        &self,
        mut lo: i64,
        mut hi: i64,
        mut pred: impl FnMut(&CqUnit) -> bool,
    ) -> Result<i64, StoreError> {
        let end = hi;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut probe = mid;
            let mut u = self.read_unit_raw(probe)?;
            while u.is_some_and(|u| u.is_blank()) && probe + 1 < end {
                probe += 1;
                u = self.read_unit_raw(probe)?;
            }
            let holds = match u {
                Some(u) if u.is_blank() => true,
                Some(u) => pred(&u),
                None => false,
            };
            if holds {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// Removes every unit whose physical offset is ≥ `physical_offset` (the commit log was
    /// truncated there). Readers stop seeing them before the bytes are zeroed.
    pub fn truncate_physical(&self, physical_offset: i64) -> Result<(), StoreError> {
        let _w = lock(&self.write_lock);
        let (min, end) = (self.min_offset(), self.max_offset());
        let new_end = self
            .partition_point(min, end, |u| u.physical_offset >= physical_offset)?
            .max(min);
        if new_end >= end {
            return Ok(());
        }
        self.max_offset.store(new_end, Ordering::Release);
        self.flushed_offset.fetch_min(new_end, Ordering::AcqRel);
        let pos = Self::unit_pos(new_end);
        let mut segs = self
            .segments
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while segs.len() > 1 && segs.last().is_some_and(|s| s.start > pos) {
            if let Some(s) = segs.pop() {
                fs::remove_file(&s.path).map_err(StoreError::io(&s.path))?;
            }
        }
        if let Some(s) = segs
            .iter()
            .find(|s| s.start <= pos && pos < s.start + self.file_size)
        {
            let mut at = pos - s.start;
            while at < self.file_size {
                s.write_unit(at, &ZERO)?;
                at += CQ_UNIT_SIZE as u64;
            }
            s.map.flush().map_err(StoreError::io(&s.path))?;
        }
        drop(segs);
        let last_end = if new_end > min {
            self.read_unit_raw(new_end - 1)?
                .map_or(0, |u| u.physical_end())
        } else {
            0
        };
        self.max_physical_end.store(last_end, Ordering::Release);
        Ok(())
    }

    /// Moves the minimum offset to the first unit whose record is still in the commit log
    /// (physical offset ≥ `commit_log_min_offset`).
    pub fn correct_min_offset(&self, commit_log_min_offset: i64) -> Result<i64, StoreError> {
        let _w = lock(&self.write_lock);
        let (min, end) = (self.min_offset(), self.max_offset());
        let new_min = self.partition_point(min, end, |u| {
            !u.is_blank() && u.physical_offset >= commit_log_min_offset
        })?;
        self.min_offset.store(new_min, Ordering::Release);
        Ok(new_min)
    }

    /// Deletes whole files (never the last one) all of whose units point below
    /// `commit_log_min_offset`, then corrects the minimum. Returns the number of files removed.
    pub fn delete_expired_files(&self, commit_log_min_offset: i64) -> Result<usize, StoreError> {
        let mut removed = 0;
        loop {
            let first = {
                let g = self
                    .segments
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if g.len() <= 1 {
                    break;
                }
                Arc::clone(&g[0])
            };
            let last_unit_offset =
                ((first.start + self.file_size) / CQ_UNIT_SIZE as u64) as i64 - 1;
            let first_unit_offset = (first.start / CQ_UNIT_SIZE as u64) as i64;
            let mut live = false;
            for at in (first_unit_offset..=last_unit_offset).rev() {
                match self.read_unit_raw(at)? {
                    Some(u) if u.is_blank() => continue,
                    Some(u) => live = u.physical_end() > commit_log_min_offset,
                    None => live = true,
                }
                break;
            }
            if live {
                break;
            }
            {
                let _w = lock(&self.write_lock);
                let mut g = self
                    .segments
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if g.first().is_some_and(|s| s.start == first.start) && g.len() > 1 {
                    g.remove(0);
                }
                let next_first = (g.first().map_or(0, |s| s.start) / CQ_UNIT_SIZE as u64) as i64;
                self.min_offset.fetch_max(next_first, Ordering::AcqRel);
            }
            fs::remove_file(&first.path).map_err(StoreError::io(&first.path))?;
            removed += 1;
        }
        self.correct_min_offset(commit_log_min_offset)?;
        Ok(removed)
    }

    /// Logical offset for a timestamp, by binary search over `[min, max)`. `store_time_of`
    /// returns the store timestamp of the record at (physical offset, size), or `None` when it
    /// cannot be read (treated as older than everything). Store times are assumed
    /// non-decreasing along the queue.
    pub fn offset_by_time(
        &self,
        timestamp: i64,
        boundary: TimeBoundary,
        mut store_time_of: impl FnMut(i64, i32) -> Option<i64>,
    ) -> Result<i64, StoreError> {
        let (min, end) = (self.min_offset(), self.max_offset());
        if min >= end {
            return Ok(end);
        }
        let mut time = |u: &CqUnit| store_time_of(u.physical_offset, u.size).unwrap_or(i64::MIN);
        match boundary {
            TimeBoundary::Lower => self.partition_point(min, end, |u| time(u) >= timestamp),
            TimeBoundary::Upper => {
                let first_after = self.partition_point(min, end, |u| time(u) > timestamp)?;
                Ok((first_after - 1).max(min))
            }
        }
    }

    /// Removes the queue's files (topic deleted).
    pub fn destroy(&self) -> Result<(), StoreError> {
        let _w = lock(&self.write_lock);
        let mut g = self
            .segments
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.clear();
        self.max_offset.store(0, Ordering::Release);
        self.min_offset.store(0, Ordering::Release);
        self.max_physical_end.store(0, Ordering::Release);
        match fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&self.dir)(e)),
        }
    }
}

/// Owned key of a queue in [`ConsumeQueueSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct QueueKey {
    topic: String,
    queue_id: i32,
}

/// A (topic, queueId) seen through borrowed or owned text, so lookups (every dispatch step,
/// every pull) do not build an owned key.
trait QueueKeyView {
    fn topic(&self) -> &str;
    fn queue_id(&self) -> i32;
}

impl QueueKeyView for QueueKey {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn queue_id(&self) -> i32 {
        self.queue_id
    }
}

impl QueueKeyView for (&str, i32) {
    fn topic(&self) -> &str {
        self.0
    }
    fn queue_id(&self) -> i32 {
        self.1
    }
}

impl<'a> Borrow<dyn QueueKeyView + 'a> for QueueKey {
    fn borrow(&self) -> &(dyn QueueKeyView + 'a) {
        self
    }
}

// Owned and borrowed keys hash and compare alike (the `Borrow` contract).
impl Hash for dyn QueueKeyView + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.topic().hash(h);
        self.queue_id().hash(h);
    }
}

impl PartialEq for dyn QueueKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.queue_id() == other.queue_id() && self.topic() == other.topic()
    }
}

impl Eq for dyn QueueKeyView + '_ {}

impl Hash for QueueKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self as &dyn QueueKeyView).hash(h);
    }
}

/// Name of the dispatch checkpoint file under the consume-queue root (not a topic: a file).
pub const DISPATCH_CHECKPOINT_FILE: &str = ".dispatched";

/// Present under the consume-queue root once its queues were written by a dispatcher that keeps
/// every record at its own offset (holes for offsets nothing was dispatched to): a store
/// without it is re-checked against the whole log once (see the dispatcher).
pub const GAP_SAFE_FILE: &str = ".gapSafe";

/// Counts of what dispatch had to repair (see [`ConsumeQueue::append`]); each is also a log
/// line. Nonzero means a record reached a queue other than by plain appending.
#[derive(Debug, Default)]
pub struct QueueRepairs {
    /// Holes written for offsets no record was dispatched to.
    pub holes: AtomicU64,
    /// Records that filled an earlier hole at their own offset.
    pub filled: AtomicU64,
    /// Records appended at another offset than their own.
    pub renumbered: AtomicU64,
    /// Records that could not be put in any queue (bad topic or queue id in the log).
    pub dropped: AtomicU64,
}

/// Checkpoint bytes: the position (i64 BE) and its CRC32 (u32 BE).
const CHECKPOINT_LEN: usize = 12;

/// All consume queues of the broker, keyed by (topic, queueId).
#[derive(Debug)]
pub struct ConsumeQueueSet {
    root: PathBuf,
    file_size: u64,
    queues: DashMap<QueueKey, Arc<ConsumeQueue>>,
    /// Log position below which the dispatcher has handed every record to its queue (-1
    /// until the dispatcher says).
    dispatched_end: AtomicI64,
    /// The checkpoint on disk (`None`: no valid file); written under this lock.
    checkpoint: Mutex<Option<i64>>,
    /// Bumped after every removal of queues, so a holder of cached queue handles (the
    /// dispatcher's [`QueueCache`]) knows to drop them.
    removals: AtomicU64,
    /// What dispatch repaired.
    repairs: QueueRepairs,
}

/// Most queues a [`QueueCache`] holds.
const QUEUE_CACHE_LEN: usize = 64;

/// The queues one writer (the dispatcher) used last, found by a short scan instead of a
/// hashed map lookup per record; emptied whenever the set has removed queues since.
#[derive(Default)]
pub struct QueueCache {
    queues: Vec<Arc<ConsumeQueue>>,
    /// The set's removal count the cached handles are valid for.
    removals: u64,
    /// Next slot replaced once the cache is full.
    victim: usize,
}

impl QueueCache {
    /// The queue, created if missing ([`ConsumeQueueSet::get_or_create`]).
    pub fn get_or_create(
        &mut self,
        set: &ConsumeQueueSet,
        topic: &str,
        queue_id: i32,
    ) -> Result<Arc<ConsumeQueue>, StoreError> {
        let removals = set.removals.load(Ordering::Acquire);
        if removals != self.removals {
            self.queues.clear();
            self.removals = removals;
        }
        if let Some(q) = self
            .queues
            .iter()
            .find(|q| q.queue_id() == queue_id && q.topic() == topic)
        {
            return Ok(Arc::clone(q));
        }
        let q = set.get_or_create(topic, queue_id)?;
        if self.queues.len() < QUEUE_CACHE_LEN {
            self.queues.push(Arc::clone(&q));
        } else {
            self.queues[self.victim] = Arc::clone(&q);
            self.victim = (self.victim + 1) % QUEUE_CACHE_LEN;
        }
        Ok(q)
    }
}

fn read_checkpoint(path: &Path) -> Result<Option<i64>, StoreError> {
    let b = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path)(e)),
    };
    let Some(b) = b.get(..CHECKPOINT_LEN) else {
        tracing::warn!(path = %path.display(), "short dispatch checkpoint ignored");
        return Ok(None);
    };
    let mut v = [0u8; 8];
    let mut c = [0u8; 4];
    v.copy_from_slice(&b[0..8]);
    c.copy_from_slice(&b[8..12]);
    if crc32fast::hash(&v) != u32::from_be_bytes(c) {
        tracing::warn!(path = %path.display(), "damaged dispatch checkpoint ignored");
        return Ok(None);
    }
    let pos = i64::from_be_bytes(v);
    Ok((pos >= 0).then_some(pos))
}

/// Writes the checkpoint through a temporary file and a rename, so a crash leaves the old or
/// the new value.
fn write_checkpoint(root: &Path, pos: i64) -> Result<(), StoreError> {
    fs::create_dir_all(root).map_err(StoreError::io(root))?;
    let tmp = root.join(".dispatched.tmp");
    let mut b = [0u8; CHECKPOINT_LEN];
    b[0..8].copy_from_slice(&pos.to_be_bytes());
    let crc = crc32fast::hash(&b[0..8]);
    b[8..12].copy_from_slice(&crc.to_be_bytes());
    let mut f = fs::File::create(&tmp).map_err(StoreError::io(&tmp))?;
    f.write_all(&b).map_err(StoreError::io(&tmp))?;
    f.sync_all().map_err(StoreError::io(&tmp))?;
    let path = root.join(DISPATCH_CHECKPOINT_FILE);
    fs::rename(&tmp, &path).map_err(StoreError::io(&path))?;
    Ok(())
}

impl ConsumeQueueSet {
    /// Opens every queue found under `cq_root` (`<storePathRootDir>/consumequeue`).
    pub fn open(cq_root: &Path, file_size: u64) -> Result<Self, StoreError> {
        let set = Self {
            root: cq_root.to_path_buf(),
            file_size,
            queues: DashMap::new(),
            dispatched_end: AtomicI64::new(-1),
            checkpoint: Mutex::new(read_checkpoint(&cq_root.join(DISPATCH_CHECKPOINT_FILE))?),
            removals: AtomicU64::new(0),
            repairs: QueueRepairs::default(),
        };
        let topics = match fs::read_dir(cq_root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(set),
            Err(e) => return Err(StoreError::io(cq_root)(e)),
        };
        for t in topics {
            let t = t.map_err(StoreError::io(cq_root))?;
            let Some(topic) = t.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let tdir = t.path();
            if !tdir.is_dir() {
                continue;
            }
            for q in fs::read_dir(&tdir).map_err(StoreError::io(&tdir))? {
                let q = q.map_err(StoreError::io(&tdir))?;
                let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                let cq = ConsumeQueue::open(cq_root, &topic, qid, file_size)?;
                let key = QueueKey {
                    topic: topic.clone(),
                    queue_id: qid,
                };
                set.queues.insert(key, Arc::new(cq));
            }
        }
        Ok(set)
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        let key: &dyn QueueKeyView = &(topic, queue_id);
        self.queues.get(key).map(|q| Arc::clone(&q))
    }

    /// The queue, created (empty, no files yet) if missing.
    pub fn get_or_create(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Result<Arc<ConsumeQueue>, StoreError> {
        if let Some(q) = self.get(topic, queue_id) {
            return Ok(q);
        }
        let entry = self.queues.entry(QueueKey {
            topic: topic.to_owned(),
            queue_id,
        });
        match entry {
            dashmap::Entry::Occupied(o) => Ok(Arc::clone(o.get())),
            dashmap::Entry::Vacant(v) => {
                let q = Arc::new(ConsumeQueue::open(
                    &self.root,
                    topic,
                    queue_id,
                    self.file_size,
                )?);
                v.insert(Arc::clone(&q));
                Ok(q)
            }
        }
    }

    /// Max offset of a queue (0 if it does not exist).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.get(topic, queue_id).map_or(0, |q| q.max_offset())
    }

    /// Min offset of a queue (0 if it does not exist).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.get(topic, queue_id).map_or(0, |q| q.min_offset())
    }

    /// All queues.
    pub fn queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues.iter().map(|e| Arc::clone(e.value())).collect()
    }

    /// Queues of one topic.
    pub fn queues_of_topic(&self, topic: &str) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .iter()
            .filter(|e| e.key().topic == topic)
            .map(|e| Arc::clone(e.value()))
            .collect()
    }

    /// (min, max) over non-empty queues of the physical end of their last unit: re-dispatch
    /// from the min is always safe (appends are idempotent); (0, 0) when all are empty.
    pub fn physical_end_bounds(&self) -> (i64, i64) {
        let ends: Vec<i64> = self
            .queues
            .iter()
            .map(|e| e.value().max_physical_end())
            .filter(|&e| e > 0)
            .collect();
        match (ends.iter().min(), ends.iter().max()) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => (0, 0),
        }
    }

    /// Truncates every queue at `physical_offset` (the log was truncated).
    pub fn truncate_physical(&self, physical_offset: i64) -> Result<(), StoreError> {
        for q in self.queues() {
            q.truncate_physical(physical_offset)?;
        }
        // No queue holds the entries from here on any more: neither the dispatch progress nor
        // the checkpoint may claim them, or a restart resumes past the cut and leaves a hole.
        let cut_end = (physical_offset - DLEDGER_ENTRY_HEADER_LEN).max(0);
        self.dispatched_end.fetch_min(cut_end, Ordering::AcqRel);
        let mut cp = lock(&self.checkpoint);
        if cp.is_some_and(|c| c > cut_end) {
            write_checkpoint(&self.root, cut_end)?;
            *cp = Some(cut_end);
        }
        Ok(())
    }

    /// Corrects every queue's minimum after commit-log head deletion.
    pub fn correct_min_offsets(&self, commit_log_min_offset: i64) -> Result<(), StoreError> {
        for q in self.queues() {
            q.correct_min_offset(commit_log_min_offset)?;
        }
        Ok(())
    }

    /// fsyncs every queue, then records the dispatch checkpoint: the position the dispatcher
    /// had reached before the flush began is durable in every queue.
    pub fn flush_all(&self) -> Result<(), StoreError> {
        // Read first: every unit below it was stored before this load (release/acquire),
        // so the flushes below cover it.
        let dispatched = self.dispatched_end.load(Ordering::Acquire);
        for q in self.queues() {
            q.flush()?;
        }
        if dispatched >= 0 {
            let mut cp = lock(&self.checkpoint);
            if *cp != Some(dispatched) {
                write_checkpoint(&self.root, dispatched)?;
                *cp = Some(dispatched);
            }
        }
        Ok(())
    }

    /// The dispatcher has handed every record below log position `end_pos` to its queue.
    /// The next [`ConsumeQueueSet::flush_all`] makes it the checkpoint (it may move down
    /// after the log was truncated).
    pub fn note_dispatched_through(&self, end_pos: i64) {
        self.dispatched_end.store(end_pos, Ordering::Release);
    }

    /// The log position below which every queue was durable at the last checkpoint (`None`
    /// for a store without one: queues written by an older version, or never flushed).
    pub fn dispatch_checkpoint(&self) -> Option<i64> {
        *lock(&self.checkpoint)
    }

    /// What dispatch repaired since start.
    pub fn repairs(&self) -> &QueueRepairs {
        &self.repairs
    }

    /// Whether these queues were written by a gap-safe dispatcher ([`GAP_SAFE_FILE`]); a store
    /// without queues is, trivially.
    pub fn is_gap_safe(&self) -> bool {
        self.queues.is_empty() || self.root.join(GAP_SAFE_FILE).exists()
    }

    /// Records that every queue is gap-safe from now on (after a store's one re-check).
    pub fn mark_gap_safe(&self) -> Result<(), StoreError> {
        fs::create_dir_all(&self.root).map_err(StoreError::io(&self.root))?;
        let path = self.root.join(GAP_SAFE_FILE);
        let f = fs::File::create(&path).map_err(StoreError::io(&path))?;
        f.sync_all().map_err(StoreError::io(&path))?;
        let dir = fs::File::open(&self.root).map_err(StoreError::io(&self.root))?;
        dir.sync_all().map_err(StoreError::io(&self.root))
    }

    /// Deletes all queues of a topic and their files.
    pub fn remove_topic(&self, topic: &str) -> Result<(), StoreError> {
        let qs = self.queues_of_topic(topic);
        for q in &qs {
            let key: &dyn QueueKeyView = &(topic, q.queue_id());
            self.queues.remove(key);
            // After the removal: a cache that sees the new count and looks the queue up
            // again cannot find the removed one.
            self.removals.fetch_add(1, Ordering::Release);
            q.destroy()?;
        }
        let dir = self.root.join(topic);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&dir)(e)),
        }
    }
}

#[cfg(test)]
mod tests;
