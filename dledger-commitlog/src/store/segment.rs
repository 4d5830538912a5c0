//! One fixed-size file of the data or index address space, on mmap or in memory.
//!
//! An enum rather than a trait object so that closures (`write_with`, `with_slice`) stay
//! generic and the hot path has no dynamic dispatch. Both variants pass the same conformance
//! suite (tests/store_conformance.rs).

use std::io;
use std::sync::Arc;

use super::fault::{FaultPoint, Faults};
use super::mem_disk::MemFile;
use super::mmap_segment::MmapSegment;

/// Which address space a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Data,
    Index,
}

impl Kind {
    pub(crate) fn dir_name(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::Index => "index",
        }
    }

    pub(crate) fn create_point(self) -> FaultPoint {
        match self {
            Kind::Data => FaultPoint::CreateDataSegment,
            Kind::Index => FaultPoint::CreateIndexSegment,
        }
    }

    fn write_point(self) -> FaultPoint {
        match self {
            Kind::Data => FaultPoint::DataWrite,
            Kind::Index => FaultPoint::IndexWrite,
        }
    }
}

fn clamp(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// File name of a segment: its absolute start offset, 20-digit zero-padded.
pub(crate) fn segment_name(start: u64) -> String {
    format!("{start:020}")
}

/// Parses a segment file name; `None` unless it is exactly 20 decimal digits.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

#[derive(Debug)]
enum Backing {
    Mmap(MmapSegment),
    Mem(Arc<MemFile>),
}

/// A segment: `[start, start + len)` of one address space.
#[derive(Debug)]
pub(crate) struct Segment {
    start: u64,
    len: u64,
    kind: Kind,
    faults: Arc<Faults>,
    backing: Backing,
}

impl Segment {
    pub(crate) fn mmap(
        kind: Kind,
        start: u64,
        seg: MmapSegment,
        len: u64,
        faults: Arc<Faults>,
    ) -> Segment {
        Segment {
            start,
            len,
            kind,
            faults,
            backing: Backing::Mmap(seg),
        }
    }

    pub(crate) fn mem(kind: Kind, start: u64, file: Arc<MemFile>, faults: Arc<Faults>) -> Segment {
        Segment {
            start,
            len: file.len(),
            kind,
            faults,
            backing: Backing::Mem(file),
        }
    }

    #[inline]
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    #[inline]
    pub(crate) fn end(&self) -> u64 {
        self.start + self.len
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Relative path as used in errors and by `MemDisk` (`data/000…`).
    pub(crate) fn name(&self) -> String {
        match &self.backing {
            Backing::Mmap(m) => m.path().display().to_string(),
            Backing::Mem(_) => format!("{}/{}", self.kind.dir_name(), segment_name(self.start)),
        }
    }

    /// Writer-only mutable access to `[off, off+len)` (segment-relative).
    #[inline]
    pub(crate) fn write_with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> io::Result<R> {
        self.faults.check(self.kind.write_point())?;
        let off = usize::try_from(off).map_err(|_| io::Error::other("offset overflow"))?;
        match &self.backing {
            Backing::Mmap(m) => m.write_with(off, len, f),
            Backing::Mem(m) => m.write_with(off, len, f),
        }
    }

    /// Copies `bytes` to segment offset `off`.
    pub(crate) fn write(&self, off: u64, bytes: &[u8]) -> io::Result<()> {
        self.write_with(off, bytes.len(), |dst| dst.copy_from_slice(bytes))
    }

    /// Zeroes `[off, off+len)`.
    pub(crate) fn zero(&self, off: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("length overflow"))?;
        self.write_with(off, len, |dst| dst.fill(0))
    }

    /// Read access to `[off, off+len)` (segment-relative).
    pub(crate) fn with_slice<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let off = usize::try_from(off).map_err(|_| io::Error::other("offset overflow"))?;
        match &self.backing {
            Backing::Mmap(m) => m.with_slice(off, len, f),
            Backing::Mem(m) => m.with_slice(off, len, f),
        }
    }

    /// A hint to load `[off, off+len)` (segment-relative) into the CPU cache before it is
    /// read (mmap only; clipped to the file; no effect on correctness).
    pub(crate) fn prefetch(&self, off: u64, len: usize) {
        if let Backing::Mmap(m) = &self.backing {
            m.prefetch(clamp(off), len);
        }
    }

    /// Pre-faults `[off, off+len)` of a new, unpublished segment (mmap only; memory segments
    /// have no page tables).
    pub(crate) fn populate(&self, off: u64, len: u64) {
        if let Backing::Mmap(m) = &self.backing {
            m.populate(clamp(off), clamp(len));
        }
    }

    /// Pre-faults `[off, off+len)` without changing any byte, so it may run while the writer
    /// uses the segment; an error means it is unsupported (see `MmapSegment::populate_bulk`).
    pub(crate) fn populate_bulk(&self, off: u64, len: u64) -> io::Result<()> {
        match &self.backing {
            Backing::Mmap(m) => m.populate_bulk(clamp(off), clamp(len)),
            Backing::Mem(_) => Ok(()),
        }
    }

    /// Releases the cached pages of `[off, off+len)` without changing any byte (mmap only;
    /// see `MmapSegment::release`).
    pub(crate) fn release(&self, off: u64, len: u64) -> io::Result<()> {
        match &self.backing {
            Backing::Mmap(m) => m.release(clamp(off), clamp(len)),
            Backing::Mem(_) => Ok(()),
        }
    }

    /// Makes `[off, off+len)` durable (and the file's name, the first time).
    pub(crate) fn flush(&self, off: u64, len: u64) -> io::Result<()> {
        self.faults.check(FaultPoint::Flush)?;
        let off = usize::try_from(off).map_err(|_| io::Error::other("offset overflow"))?;
        let len = usize::try_from(len).map_err(|_| io::Error::other("length overflow"))?;
        match &self.backing {
            Backing::Mmap(m) => m.flush(off, len),
            Backing::Mem(m) => m.flush(off, len),
        }
    }
}
