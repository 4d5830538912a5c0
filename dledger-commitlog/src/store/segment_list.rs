//! The ordered, contiguous list of segments of one address space, shared between the writer,
//! readers and the background threads. Segments are `Arc`s: removing one from the list never
//! invalidates a reader that already holds it.

use std::io;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::segment::Segment;

#[derive(Debug)]
pub(crate) struct SegmentList {
    seg_len: u64,
    segs: RwLock<Vec<Arc<Segment>>>,
}

impl SegmentList {
    pub(crate) fn new(seg_len: u64, segs: Vec<Arc<Segment>>) -> SegmentList {
        SegmentList {
            seg_len,
            segs: RwLock::new(segs),
        }
    }

    pub(crate) fn seg_len(&self) -> u64 {
        self.seg_len
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Segment>>> {
        self.segs.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Vec<Arc<Segment>>> {
        self.segs.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The segment holding absolute position `pos`.
    pub(crate) fn find(&self, pos: u64) -> Option<Arc<Segment>> {
        let segs = self.read();
        let first = segs.first()?;
        if pos < first.start() {
            return None;
        }
        let i = usize::try_from((pos - first.start()) / self.seg_len).ok()?;
        segs.get(i)
            .filter(|s| s.start() <= pos && pos < s.end())
            .cloned()
    }

    /// Start of the first segment and end of the last (empty list: `None`).
    pub(crate) fn bounds(&self) -> Option<(u64, u64)> {
        let segs = self.read();
        Some((segs.first()?.start(), segs.last()?.end()))
    }

    /// Runs `f` on the bytes `[pos, pos+len)`, which must lie in one segment.
    pub(crate) fn with_slice<R>(
        &self,
        pos: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let seg = self.find(pos).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no segment holds position {pos}"),
            )
        })?;
        seg.with_slice(pos - seg.start(), len, f)
    }

    /// Flushes `[from, to)`, segment by segment.
    pub(crate) fn flush_range(&self, from: u64, to: u64) -> io::Result<()> {
        if to <= from {
            return Ok(());
        }
        let segs: Vec<Arc<Segment>> = self
            .read()
            .iter()
            .filter(|s| s.end() > from && s.start() < to)
            .cloned()
            .collect();
        for s in segs {
            let a = from.max(s.start());
            let b = to.min(s.end());
            s.flush(a - s.start(), b - a)?;
        }
        Ok(())
    }

    /// Zeroes `[from, to)` across segments (missing segments are skipped).
    pub(crate) fn zero_range(&self, from: u64, to: u64) -> io::Result<()> {
        if to <= from {
            return Ok(());
        }
        let segs: Vec<Arc<Segment>> = self
            .read()
            .iter()
            .filter(|s| s.end() > from && s.start() < to)
            .cloned()
            .collect();
        for s in segs {
            let a = from.max(s.start());
            let b = to.min(s.end());
            s.zero(a - s.start(), b - a)?;
        }
        Ok(())
    }
}
