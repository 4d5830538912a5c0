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
//!
//! # Files
//!
//! ```text
//!  mod.rs         one queue: append (holes, renumbering), reads, flush, truncation, minimum
//!                 and expired files, lookup by store time
//!  unit.rs        the 20-byte unit: encode/decode, pre-blank and unwritten units
//!  segments.rs    the queue's mapped files: addressing, creation, recovery at open
//!  set.rs         ConsumeQueueSet (all queues by topic and queue id) and QueueCache
//!  checkpoint.rs  the dispatch checkpoint file `.dispatched`
//! ```

mod checkpoint;
mod segments;
mod set;
mod unit;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::StoreError;
use segments::Segment;
use unit::{BLANK, ZERO};

pub use checkpoint::DISPATCH_CHECKPOINT_FILE;
pub use segments::file_name_of;
pub use set::{ConsumeQueueSet, QueueCache, QueueRepairs, GAP_SAFE_FILE};
pub use unit::{CqUnit, CQ_UNIT_SIZE};

/// Default file size: 300000 units.
pub const DEFAULT_CQ_FILE_SIZE: u64 = 300_000 * CQ_UNIT_SIZE as u64;
/// Largest number of units one read returns.
pub const MAX_UNITS_PER_READ: usize = 64 * 1024;

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

#[cfg(test)]
mod tests;
