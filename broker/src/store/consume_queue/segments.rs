//! The files of one queue: each a fixed-size memory-mapped segment
//! `<topic>/<queueId>/<20-digit start byte offset>`, logical offset `n` at byte `n * 20` of
//! the queue's address space; finding the segment of an offset, creating the next one, and
//! recovery at open (the end is the first unit not written, blanks a crash left without their
//! unit are trimmed, the minimum is the first unit that is not pre-blank).

use std::fs::{self, OpenOptions};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::unit::ZERO;
use super::{ConsumeQueue, CqUnit, StoreError, CQ_UNIT_SIZE};
use crate::store::mapped_words::MappedWords;

/// One file of a queue, memory-mapped and fully allocated.
#[derive(Debug)]
pub(super) struct Segment {
    /// Queue byte offset of the file's first byte.
    pub(super) start: u64,
    pub(super) map: MappedWords,
    pub(super) path: PathBuf,
}

impl Segment {
    /// Maps an open file of `file_size` bytes, allocating all of it.
    fn map(path: PathBuf, start: u64, file: fs::File, file_size: u64) -> Result<Self, StoreError> {
        let map = MappedWords::map(file, file_size).map_err(StoreError::io(&path))?;
        map.reserve(0, file_size).map_err(StoreError::io(&path))?;
        Ok(Segment { start, map, path })
    }

    pub(super) fn read_unit(&self, in_file: u64) -> CqUnit {
        let at = in_file as usize;
        CqUnit {
            physical_offset: self.map.load_i64(at),
            size: self.map.load_i32(at + 8),
            tag_code: self.map.load_i64(at + 12),
        }
    }

    pub(super) fn write_unit(&self, in_file: u64, u: &CqUnit) -> Result<(), StoreError> {
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

/// 20-digit zero-padded file name of a start offset.
pub fn file_name_of(start: u64) -> String {
    format!("{start:020}")
}

impl ConsumeQueue {
    pub(super) fn unit_pos(offset: i64) -> u64 {
        offset as u64 * CQ_UNIT_SIZE as u64
    }

    pub(super) fn recover(&self) -> Result<(), StoreError> {
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

    pub(super) fn segment_for(&self, pos: u64) -> Option<Arc<Segment>> {
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
    pub(super) fn segment_for_write(&self, pos: u64) -> Result<Arc<Segment>, StoreError> {
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
}
