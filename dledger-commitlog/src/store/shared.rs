//! State shared by the writer, reader handles and the background threads, and the read path
//! they all use. Positions and indexes published here are the only thing readers trust.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::dir::Dir;
use super::error::StoreError;
use super::flusher::FlushState;
use super::preallocate::PreallocState;
use super::segment::{Kind, Segment};
use super::segment_list::SegmentList;
use crate::config::LedgerConfig;
use crate::format::entry::{decode_header, verify_body, EntryError, EntryHeader, HEADER_BYTES};
use crate::format::index::{IndexEntry, INDEX_ENTRY_BYTES};
use crate::types::{Index, Pos, Term};

/// An entry read back from the log, CRC-verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// Log index.
    pub index: Index,
    /// Term that created it.
    pub term: Term,
    /// Position of its header in the data address space.
    pub pos: Pos,
    /// Header CRC as stored (Java's chain-crc field; 0 = not computed).
    pub header_crc: u32,
    /// Body CRC as stored (0 = not computed).
    pub body_crc: u32,
    /// The body (one RocketMQ stored message).
    pub body: Bytes,
}

/// A committed entry borrowed in place from its data file ([`crate::store::StoreReader::with_committed`]):
/// nothing copied, nothing allocated. The body CRC is not checked again (see there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// Log index.
    pub index: Index,
    /// Position of its header in the data address space.
    pub pos: Pos,
    /// The body (one RocketMQ stored message), in place.
    pub body: &'a [u8],
}

impl EntryRef<'_> {
    /// Position just after the entry.
    pub fn end_pos(&self) -> Pos {
        Pos(self.pos.0 + (HEADER_BYTES + self.body.len()) as u64)
    }
}

impl StoredEntry {
    /// Total size on disk, header included.
    pub fn size(&self) -> u32 {
        (HEADER_BYTES + self.body.len()) as u32
    }

    /// Position just after the entry.
    pub fn end_pos(&self) -> Pos {
        Pos(self.pos.0 + u64::from(self.size()))
    }
}

pub(crate) fn load_opt(a: &AtomicI64) -> Option<Index> {
    Index::from_wire(a.load(Ordering::Acquire)).ok().flatten()
}

pub(crate) fn store_opt(a: &AtomicI64, v: Option<Index>) {
    a.store(Index::to_wire(v), Ordering::Release);
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: LedgerConfig,
    pub(crate) dir: Dir,
    pub(crate) data: SegmentList,
    pub(crate) index: SegmentList,
    pub(crate) begin_index: AtomicI64,
    pub(crate) end_index: AtomicI64,
    pub(crate) committed_index: AtomicI64,
    pub(crate) committed_end_pos: AtomicU64,
    pub(crate) poisoned: AtomicBool,
    pub(crate) poison_reason: Mutex<String>,
    pub(crate) disk_full: AtomicBool,
    pub(crate) flush: FlushState,
    pub(crate) prealloc: PreallocState,
    pub(crate) state_file_lock: Mutex<()>,
}

impl Shared {
    /// The files of one address space.
    pub(crate) fn list(&self, kind: Kind) -> &SegmentList {
        match kind {
            Kind::Data => &self.data,
            Kind::Index => &self.index,
        }
    }

    pub(crate) fn poison(&self, reason: String) {
        tracing::error!(%reason, "store poisoned: refusing writes until restart");
        if let Ok(mut r) = self.poison_reason.lock() {
            if r.is_empty() {
                *r = reason;
            }
        }
        self.poisoned.store(true, Ordering::Release);
        self.flush.publish_poisoned();
    }

    #[inline]
    pub(crate) fn check_writable(&self) -> Result<(), StoreError> {
        if !self.poisoned.load(Ordering::Acquire) && !self.disk_full.load(Ordering::Acquire) {
            return Ok(());
        }
        self.not_writable()
    }

    #[cold]
    fn not_writable(&self) -> Result<(), StoreError> {
        if self.poisoned.load(Ordering::Acquire) {
            let r = self
                .poison_reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default();
            return Err(StoreError::Poisoned(r));
        }
        if self.disk_full.load(Ordering::Acquire) {
            return Err(StoreError::DiskFull(
                "disk usage above the disk-full ratio".into(),
            ));
        }
        Ok(())
    }

    /// The index entry of `index` (no range check beyond the files).
    pub(crate) fn index_entry(&self, index: Index) -> Result<IndexEntry, StoreError> {
        let addr = index.0 * INDEX_ENTRY_BYTES as u64;
        let decoded = self
            .index
            .with_slice(addr, INDEX_ENTRY_BYTES, IndexEntry::decode)
            .map_err(|e| StoreError::io("read index", format!("index entry {index}"), e))?;
        match decoded {
            Ok(e) if e.index == index => Ok(e),
            _ => Err(StoreError::IndexDataMismatch { index, pos: Pos(0) }),
        }
    }

    /// Reads and verifies the entry whose header starts at `pos`.
    pub(crate) fn entry_at(&self, pos: Pos) -> Result<StoredEntry, StoreError> {
        let seg = self
            .data
            .find(pos.0)
            .ok_or(StoreError::PosOutOfRange { pos })?;
        read_entry(&seg, pos)
    }

    /// Hands entry `index` to `f` borrowed from its data file, after the same index/header
    /// agreement checks as [`Shared::entry`]; the body CRC is not verified.
    pub(crate) fn with_entry<R>(
        &self,
        index: Index,
        f: impl FnOnce(EntryRef<'_>) -> R,
    ) -> Result<R, StoreError> {
        let (ie, seg, header) = self.locate(index)?;
        check_agrees(index, &ie, header.index, header.term, header.size)?;
        with_body(&seg, &header, f)
    }

    /// Hands entries `from..=last` to `f` in log order, borrowed from their data files, until
    /// `f` answers false; returns how many it was handed. The index is read where the walk
    /// starts and where it crosses into another data file; in between, each next header is
    /// the one right after the previous entry and must name the next index and its own
    /// position (as [`Shared::with_entry`] checks through the index). For a reader of long
    /// runs (the broker's dispatcher) this saves an index read, two data-file lookups and
    /// their reference counts per entry. The body CRC is not verified.
    pub(crate) fn with_entries(
        &self,
        from: Index,
        last: Index,
        mut f: impl FnMut(EntryRef<'_>) -> bool,
    ) -> Result<u64, StoreError> {
        let mut handed = 0;
        let mut index = from;
        while index <= last {
            let (ie, seg, mut header) = self.locate(index)?;
            check_agrees(index, &ie, header.index, header.term, header.size)?;
            loop {
                prefetch_next(&seg, &header);
                let more = with_body(&seg, &header, &mut f)?;
                handed += 1;
                index = index.next();
                if !more || index > last {
                    return Ok(handed);
                }
                // The next entry, if it follows in this file; anything else (the end of
                // the file, a blank, a header that does not fit) is located through the
                // index. No stale entry can sit there: a truncation zeroes everything past
                // its cut (and recovery past the last valid entry), and terms never go down.
                let next = Pos(header.pos.0 + u64::from(header.size));
                match checked_header(&seg, next) {
                    Ok(h) if h.index == index && h.term >= header.term => header = h,
                    _ => break,
                }
            }
        }
        Ok(handed)
    }

    /// Reads entry `index` through the index and checks that both agree.
    pub(crate) fn entry(&self, index: Index) -> Result<StoredEntry, StoreError> {
        let (ie, seg, header) = self.locate(index)?;
        let e = read_body(&seg, header)?;
        check_agrees(index, &ie, e.index, e.term, e.size())?;
        Ok(e)
    }

    /// Entry `index`'s index entry, data file and checked header; a position the data does
    /// not hold is an `IndexDataMismatch`.
    fn locate(&self, index: Index) -> Result<(IndexEntry, Arc<Segment>, EntryHeader), StoreError> {
        let ie = self.index_entry(index)?;
        let mismatch = StoreError::IndexDataMismatch { index, pos: ie.pos };
        let Some(seg) = self.data.find(ie.pos.0) else {
            return Err(mismatch);
        };
        let header = checked_header(&seg, ie.pos).map_err(|e| match e {
            StoreError::PosOutOfRange { .. } => mismatch,
            other => other,
        })?;
        Ok((ie, seg, header))
    }
}

/// Bytes [`prefetch_next`] loads at each end of the entry after the current one: its
/// header and the start of its body, and where its body's tail would be.
const PREFETCH_EDGE: usize = 256;

/// Starts loading the entry that follows `header` in `seg` while the caller works on this
/// one. Readers of a run look at both ends of each entry (a stored message keeps its
/// header first and its topic and properties last, around a body they skip), so each end is
/// a cache miss when the entry was written a moment ago on another core. The next entry's
/// size is not known before its header is read; entries of a run are usually alike, so its
/// tail is guessed at this entry's size. A wrong guess costs a few wasted loads.
fn prefetch_next(seg: &Segment, header: &EntryHeader) {
    let size = u64::from(header.size);
    let next = header.pos.0 + size - seg.start();
    seg.prefetch(next, PREFETCH_EDGE);
    let tail = (next + size).saturating_sub(PREFETCH_EDGE as u64);
    seg.prefetch(tail.max(next + PREFETCH_EDGE as u64), PREFETCH_EDGE);
}

/// Hands the entry of `seg` whose checked header (see [`checked_header`]) is `header` to `f`,
/// its body borrowed in place.
fn with_body<R>(
    seg: &Arc<Segment>,
    header: &EntryHeader,
    f: impl FnOnce(EntryRef<'_>) -> R,
) -> Result<R, StoreError> {
    let off = header.pos.0 - seg.start();
    seg.with_slice(off + HEADER_BYTES as u64, header.body_len(), |body| {
        f(EntryRef {
            index: header.index,
            pos: header.pos,
            body,
        })
    })
    .map_err(|e| StoreError::io("read", seg.name(), e))
}

/// `IndexDataMismatch` unless the entry found for `index` (its index, term and size) is the
/// one its index entry names.
fn check_agrees(
    index: Index,
    ie: &IndexEntry,
    found: Index,
    term: Term,
    size: u32,
) -> Result<(), StoreError> {
    if found != index || term != ie.term || size != ie.size {
        return Err(StoreError::IndexDataMismatch { index, pos: ie.pos });
    }
    Ok(())
}

/// Decodes the header of the entry of `seg` at absolute `pos` and checks that it names `pos`
/// and that the whole entry lies within the file.
fn checked_header(seg: &Arc<Segment>, pos: Pos) -> Result<EntryHeader, StoreError> {
    let off = pos.0 - seg.start();
    let corrupt = |source| StoreError::Corrupt {
        file: seg.name(),
        pos,
        source,
    };
    if off + HEADER_BYTES as u64 > seg.len() {
        return Err(corrupt(EntryError::Truncated {
            need: HEADER_BYTES as u64,
            have: seg.len() - off,
        }));
    }
    let header = seg
        .with_slice(off, HEADER_BYTES, decode_header)
        .map_err(|e| StoreError::io("read", seg.name(), e))?
        .map_err(corrupt)?;
    if header.pos != pos {
        return Err(StoreError::PosOutOfRange { pos });
    }
    if off + u64::from(header.size) > seg.len() {
        return Err(corrupt(EntryError::Truncated {
            need: u64::from(header.size),
            have: seg.len() - off,
        }));
    }
    Ok(header)
}

/// Reads and verifies one entry of `seg` at absolute `pos`.
pub(crate) fn read_entry(seg: &Arc<Segment>, pos: Pos) -> Result<StoredEntry, StoreError> {
    let header = checked_header(seg, pos)?;
    read_body(seg, header)
}

/// Copies and verifies the body of the entry whose checked header (see [`checked_header`])
/// is `header`.
fn read_body(seg: &Arc<Segment>, header: EntryHeader) -> Result<StoredEntry, StoreError> {
    let pos = header.pos;
    let off = pos.0 - seg.start();
    let corrupt = |source| StoreError::Corrupt {
        file: seg.name(),
        pos,
        source,
    };
    let body = seg
        .with_slice(off + HEADER_BYTES as u64, header.body_len(), |b| {
            verify_body(&header, b).map(|()| Bytes::copy_from_slice(b))
        })
        .map_err(|e| StoreError::io("read", seg.name(), e))?
        .map_err(corrupt)?;
    Ok(StoredEntry {
        index: header.index,
        term: header.term,
        pos,
        header_crc: header.header_crc,
        body_crc: header.body_crc,
        body,
    })
}
