//! Startup recovery: rebuild begin/end from the files, verify every entry, repair what is safe
//! to repair and refuse what is not (spec/dledger.md §2.5, RELIABILITY.md R5, R6, CC-01..07, 12).
//!
//! * Data files must be contiguous and of the configured length; a short *last* file is
//!   zero-extended, anything else refuses to start naming the file.
//! * Every entry is checked: magic, size, `pos` equals its position, index continuity,
//!   non-decreasing terms, header CRC and body CRC, and agreement with its index entry.
//! * The first invalid entry ends the log. If it lies above the checkpointed commit index the
//!   tail is a torn write and is cut (zeroed); at or below it, or if the cut would drop more
//!   than the next file, recovery refuses.
//! * Index files are derived data: missing, short, non-contiguous or disagreeing index files are
//!   rebuilt from the data from the first disagreement on, with progress logged.

use std::sync::Arc;

use super::dir::Dir;
use super::error::StoreError;
use super::segment::{parse_segment_name, Kind, Segment};
use crate::config::LedgerConfig;
use crate::format::entry::{
    decode_blank, decode_header, peek_magic, verify_body, EntryHeader, HEADER_BYTES,
};
use crate::format::index::{IndexEntry, INDEX_ENTRY_BYTES};
use crate::types::{Index, Pos, Term};

const PAGE: u64 = 4096;
/// A run of this many zero bytes past the end means the stale tail is cleared.
const QUIET_RUN: u64 = 64 * 1024;
const PROGRESS_EVERY: u64 = 1 << 20;

/// What recovery found and did; the consensus layer reads `lost_committed` (CC-03).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Committed index from the checkpoint file (none if missing or unreadable).
    pub checkpoint_committed: Option<Index>,
    /// Set when the checkpoint names a committed index beyond the recovered end: committed
    /// data was lost on this member, which must not lead until it has re-replicated up to it.
    pub lost_committed: Option<Index>,
    /// Position where an invalid tail was cut, with the reason.
    pub truncated_tail: Option<(Pos, String)>,
    /// Index from which index entries were rebuilt from the data.
    pub index_rebuilt_from: Option<Index>,
    /// Entries verified.
    pub entries_scanned: u64,
    /// Bytes of entries verified.
    pub bytes_scanned: u64,
}

pub(crate) struct Recovered {
    pub(crate) data: Vec<Arc<Segment>>,
    pub(crate) index: Vec<Arc<Segment>>,
    pub(crate) begin: Option<Index>,
    pub(crate) end: Option<(Index, Term)>,
    pub(crate) write_pos: u64,
    pub(crate) report: RecoveryReport,
}

fn io_err(
    dir: &Dir,
    kind: Kind,
    name: &str,
    op: &'static str,
) -> impl Fn(std::io::Error) -> StoreError {
    let path = dir.display(kind, name);
    move |e| StoreError::io(op, path.clone(), e)
}

fn first_word_zero(seg: &Segment) -> bool {
    seg.with_slice(0, 4, |b| b.iter().all(|x| *x == 0))
        .unwrap_or(false)
}

/// True if a data file holds no entry (its first word is zero, or it is empty).
fn listed_is_empty(dir: &Dir, kind: Kind, start: u64, len: u64) -> bool {
    if len < 4 {
        return true;
    }
    dir.open_segment(kind, start, len)
        .map(|s| first_word_zero(&s))
        .unwrap_or(false)
}

/// Lists, validates and opens the data files.
fn load_data(dir: &Dir, seg_len: u64) -> Result<Vec<Arc<Segment>>, StoreError> {
    let mut files: Vec<(u64, super::dir::Listed)> = Vec::new();
    for f in dir
        .list(Kind::Data)
        .map_err(|e| StoreError::io("list", dir.display(Kind::Data, ""), e))?
    {
        match parse_segment_name(&f.name) {
            Some(start) => files.push((start, f)),
            None => {
                tracing::warn!(file = %dir.display(Kind::Data, &f.name), "ignoring a file that is not a data segment")
            }
        }
    }
    files.sort_by_key(|(s, _)| *s);
    // A file counts as last if every file after it was never written (preallocated).
    let empty: Vec<bool> = files
        .iter()
        .map(|(s, f)| listed_is_empty(dir, Kind::Data, *s, f.len))
        .collect();
    for (i, (_, f)) in files.iter().enumerate() {
        let last = empty[i + 1..].iter().all(|e| *e);
        if f.len > seg_len || (!last && f.len != seg_len) {
            return Err(StoreError::BadSegmentLength {
                file: dir.display(Kind::Data, &f.name),
                len: f.len,
                expected: seg_len,
            });
        }
        if last && f.len < seg_len {
            tracing::warn!(file = %dir.display(Kind::Data, &f.name), len = f.len, "last data file is short: zero-extending it");
        }
    }
    let mut segs: Vec<Arc<Segment>> = Vec::new();
    for (i, (start, f)) in files.iter().enumerate() {
        if let Some(prev) = segs.last() {
            if *start < prev.end() {
                return Err(StoreError::OverlappingSegment {
                    file: dir.display(Kind::Data, &f.name),
                });
            }
            if *start > prev.end() {
                // A gap is fatal unless everything after it is empty (never written).
                let mut rest = Vec::new();
                for (s, g) in &files[i..] {
                    let seg = dir.open_segment(Kind::Data, *s, seg_len).map_err(io_err(
                        dir,
                        Kind::Data,
                        &g.name,
                        "open",
                    ))?;
                    rest.push((seg, g.name.clone(), *s));
                }
                if rest.iter().all(|(s, _, _)| first_word_zero(s)) {
                    for (seg, name, s) in rest {
                        tracing::warn!(file = %dir.display(Kind::Data, &name), "removing an empty data file after a gap");
                        drop(seg);
                        dir.remove_segment(Kind::Data, s).map_err(io_err(
                            dir,
                            Kind::Data,
                            &name,
                            "remove",
                        ))?;
                    }
                    break;
                }
                return Err(StoreError::MissingSegment {
                    file: dir.display(Kind::Data, &super::segment::segment_name(prev.end())),
                    next: dir.display(Kind::Data, &f.name),
                });
            }
        }
        let seg = dir
            .open_segment(Kind::Data, *start, seg_len)
            .map_err(io_err(dir, Kind::Data, &f.name, "open"))?;
        segs.push(Arc::new(seg));
    }
    Ok(segs)
}

/// Lists and opens the index files. Files to delete (stale below the first entry, or all of
/// them when the set is inconsistent and must be rebuilt) are returned, not deleted, so a
/// refused start leaves the directory untouched.
fn load_index(
    dir: &Dir,
    seg_len: u64,
    begin: Option<Index>,
) -> Result<(Vec<Arc<Segment>>, Vec<u64>), StoreError> {
    let mut files: Vec<(u64, super::dir::Listed)> = dir
        .list(Kind::Index)
        .map_err(|e| StoreError::io("list", dir.display(Kind::Index, ""), e))?
        .into_iter()
        .filter_map(|f| parse_segment_name(&f.name).map(|s| (s, f)))
        .collect();
    files.sort_by_key(|(s, _)| *s);
    let begin_addr = begin.map_or(0, |b| b.0 * INDEX_ENTRY_BYTES as u64);
    // Files entirely before the first entry are stale (left by cleaning).
    let (stale, keep): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|(s, _)| s + seg_len <= begin_addr);
    let mut delete: Vec<u64> = stale.iter().map(|(s, _)| *s).collect();
    // A short file is acceptable if every later file is empty (preallocated, never written).
    let empty: Vec<bool> = keep
        .iter()
        .map(|(s, f)| listed_is_empty(dir, Kind::Index, *s, f.len))
        .collect();
    let valid = keep
        .first()
        .is_none_or(|(s, _)| *s <= begin_addr && s.is_multiple_of(seg_len))
        && keep.iter().enumerate().all(|(i, (s, f))| {
            let last = empty[i + 1..].iter().all(|e| *e);
            (f.len == seg_len || (last && f.len < seg_len))
                && (i == 0 || *s == keep[i - 1].0 + seg_len)
        });
    if !valid {
        tracing::warn!("index files are not contiguous or have wrong sizes: rebuilding the index from the data");
        delete.extend(keep.iter().map(|(s, _)| *s));
        return Ok((Vec::new(), delete));
    }
    let mut out = Vec::new();
    for (s, f) in keep {
        out.push(Arc::new(
            dir.open_segment(Kind::Index, s, seg_len).map_err(io_err(
                dir,
                Kind::Index,
                &f.name,
                "open",
            ))?,
        ));
    }
    Ok((out, delete))
}

fn find(segs: &[Arc<Segment>], pos: u64) -> Option<&Arc<Segment>> {
    let first = segs.first()?;
    let len = first.len();
    let i = usize::try_from(pos.checked_sub(first.start())? / len).ok()?;
    segs.get(i).filter(|s| s.start() <= pos && pos < s.end())
}

fn index_entry_at(segs: &[Arc<Segment>], index: Index) -> Option<IndexEntry> {
    let addr = index.0 * INDEX_ENTRY_BYTES as u64;
    let seg = find(segs, addr)?;
    seg.with_slice(addr - seg.start(), INDEX_ENTRY_BYTES, IndexEntry::decode)
        .ok()?
        .ok()
}

enum Step {
    Entry(EntryHeader),
    NextFile,
    End,
    Invalid(String),
}

/// Examines the record at segment offset `off`; `expect` is the index it must carry.
fn step(seg: &Segment, off: u64, expect: Option<Index>, last_term: Option<Term>) -> Step {
    let remaining = seg.len() - off;
    if remaining < 8 {
        return Step::NextFile;
    }
    let head = seg.with_slice(off, 8, |b| {
        (peek_magic(b), decode_blank(b), b.iter().all(|x| *x == 0))
    });
    let Ok((magic, blank, zero)) = head else {
        return Step::Invalid("unreadable".into());
    };
    if zero {
        return Step::End;
    }
    if let Some(len) = blank {
        return if i64::from(len) == remaining as i64 {
            Step::NextFile
        } else {
            Step::Invalid(format!(
                "blank record of {len} bytes with {remaining} left in the file"
            ))
        };
    }
    if remaining < HEADER_BYTES as u64 {
        return Step::Invalid(format!(
            "record (magic {magic:?}) with only {remaining} bytes left in the file"
        ));
    }
    let header = match seg.with_slice(off, HEADER_BYTES, decode_header) {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Step::Invalid(e.to_string()),
        Err(e) => return Step::Invalid(e.to_string()),
    };
    let pos = seg.start() + off;
    if header.pos.0 != pos {
        return Step::Invalid(format!("stored pos {} at position {pos}", header.pos));
    }
    if u64::from(header.size) > remaining {
        return Step::Invalid(format!("entry of {} bytes overruns the file", header.size));
    }
    if let Some(e) = expect {
        if header.index != e {
            return Step::Invalid(format!("index {} where {e} was expected", header.index));
        }
    }
    if let Some(t) = last_term {
        if header.term < t {
            return Step::Invalid(format!("term {} below the previous term {t}", header.term));
        }
    }
    match seg.with_slice(off + HEADER_BYTES as u64, header.body_len(), |b| {
        verify_body(&header, b)
    }) {
        Ok(Ok(())) => Step::Entry(header),
        Ok(Err(e)) => Step::Invalid(e.to_string()),
        Err(e) => Step::Invalid(e.to_string()),
    }
}

/// Zeroes non-zero pages from `from` until a quiet run of zeros or the end of the list.
fn zero_stale(segs: &[Arc<Segment>], from: u64) -> Result<u64, StoreError> {
    let mut pos = from;
    let mut quiet = 0;
    let mut zeroed_to = from;
    while quiet < QUIET_RUN {
        let Some(seg) = find(segs, pos) else { break };
        let off = pos - seg.start();
        let n = (PAGE - pos % PAGE).min(seg.end() - pos);
        let is_zero = seg
            .with_slice(off, n as usize, |b| b.iter().all(|x| *x == 0))
            .map_err(|e| StoreError::io("read", seg.name(), e))?;
        if is_zero {
            quiet += n;
        } else {
            seg.zero(off, n)
                .map_err(|e| StoreError::io("zero", seg.name(), e))?;
            quiet = 0;
            zeroed_to = pos + n;
        }
        pos += n;
    }
    Ok(zeroed_to)
}

/// Runs recovery over `dir`.
pub(crate) fn recover(
    dir: &Dir,
    cfg: &LedgerConfig,
    checkpoint: Option<Index>,
) -> Result<Recovered, StoreError> {
    let data = load_data(dir, cfg.data_segment_bytes)?;
    let mut report = RecoveryReport {
        checkpoint_committed: checkpoint,
        ..RecoveryReport::default()
    };
    // The first entry of the first file gives the begin index (needed to place the index).
    let first_begin = data.first().and_then(|s| match step(s, 0, None, None) {
        Step::Entry(h) => Some(h.index),
        _ => None,
    });
    let (mut index, index_delete) = load_index(dir, cfg.index_segment_bytes, first_begin)?;

    let mut begin = None;
    let mut end: Option<(Index, Term)> = None;
    let mut mismatch: Option<(Index, u64)> = None;
    let mut stop: Option<(u64, String)> = None;
    let mut write_pos = data.first().map_or(0, |s| s.start());
    'files: for seg in &data {
        let mut off = write_pos.saturating_sub(seg.start());
        if write_pos < seg.start() {
            write_pos = seg.start();
            off = 0;
        }
        loop {
            let expect = end.map(|(i, _)| i.next());
            match step(seg, off, expect, end.map(|(_, t)| t)) {
                Step::Entry(h) => {
                    if begin.is_none() {
                        begin = Some(h.index);
                    }
                    if mismatch.is_none() {
                        let want = IndexEntry {
                            pos: h.pos,
                            size: h.size,
                            index: h.index,
                            term: h.term,
                        };
                        if index_entry_at(&index, h.index) != Some(want) {
                            mismatch = Some((h.index, h.pos.0));
                        }
                    }
                    end = Some((h.index, h.term));
                    off += u64::from(h.size);
                    write_pos = seg.start() + off;
                    report.entries_scanned += 1;
                    report.bytes_scanned += u64::from(h.size);
                    if report.entries_scanned.is_multiple_of(PROGRESS_EVERY) {
                        tracing::info!(
                            entries = report.entries_scanned,
                            pos = write_pos,
                            "recovery scan progress"
                        );
                    }
                }
                Step::NextFile => {
                    write_pos = seg.end();
                    continue 'files;
                }
                Step::End => break 'files,
                Step::Invalid(reason) => {
                    stop = Some((seg.start() + off, reason));
                    break 'files;
                }
            }
        }
    }
    // A blank-terminated last file leaves the write position at the end of the list.

    if let Some((pos, reason)) = &stop {
        let expected = end.map_or(begin.unwrap_or(Index(0)), |(i, _)| i.next());
        let file = find(&data, *pos).map_or_else(|| format!("data position {pos}"), |s| s.name());
        if let Some(c) = checkpoint {
            if expected <= c {
                return Err(StoreError::CorruptCommitted {
                    file,
                    pos: Pos(*pos),
                    index: expected,
                    committed: c,
                    reason: reason.clone(),
                });
            }
        }
        let seg_start = find(&data, *pos).map_or(*pos, |s| s.start());
        let later = data
            .iter()
            .filter(|s| s.start() > seg_start + cfg.data_segment_bytes)
            .find(|s| !first_word_zero(s));
        if let Some(later) = later {
            return Err(StoreError::TruncationTooLarge {
                file,
                pos: Pos(*pos),
                later: later.name(),
            });
        }
        tracing::warn!(%file, pos, %reason, "cutting an invalid tail above the checkpointed commit index");
        report.truncated_tail = Some((Pos(*pos), reason.clone()));
    }
    // Past this point recovery repairs: the start is not refused any more.
    for s in index_delete {
        tracing::info!(file = %dir.display(Kind::Index, &super::segment::segment_name(s)), "removing an index file");
        dir.remove_segment(Kind::Index, s).map_err(|e| {
            StoreError::io(
                "remove",
                dir.display(Kind::Index, &super::segment::segment_name(s)),
                e,
            )
        })?;
    }
    // Clear whatever stale bytes follow the last valid entry (torn tail, old garbage).
    zero_stale(&data, write_pos)?;
    if let Some(c) = checkpoint {
        if end.is_none_or(|(e, _)| e < c) {
            tracing::error!(
                checkpoint_committed = %c,
                recovered_end = ?end.map(|(i, _)| i),
                "checkpoint names committed entries that are missing: committed data was lost on this member; \
                 it must re-replicate up to the checkpointed index before it may lead"
            );
            report.lost_committed = Some(c);
        }
    }

    // Index: cut stale entries past the end, rebuild from the first disagreement.
    let next_index = end.map_or(begin.unwrap_or(Index(0)), |(i, _)| i.next());
    zero_stale(&index, next_index.0 * INDEX_ENTRY_BYTES as u64)?;
    if let Some((from, pos)) = mismatch {
        tracing::warn!(%from, "index disagrees with the data: rebuilding the index from here");
        report.index_rebuilt_from = Some(from);
        rebuild_index(dir, cfg, &data, &mut index, from, pos, next_index)?;
    }
    Ok(Recovered {
        data,
        index,
        begin,
        end,
        write_pos,
        report,
    })
}

fn rebuild_index(
    dir: &Dir,
    cfg: &LedgerConfig,
    data: &[Arc<Segment>],
    index: &mut Vec<Arc<Segment>>,
    from: Index,
    from_pos: u64,
    stop_before: Index,
) -> Result<(), StoreError> {
    let len = cfg.index_segment_bytes;
    let mut pos = from_pos;
    let mut i = from;
    while i < stop_before {
        let Some(seg) = find(data, pos) else { break };
        let off = pos - seg.start();
        let h = match step(seg, off, Some(i), None) {
            Step::Entry(h) => h,
            Step::NextFile => {
                pos = seg.end();
                continue;
            }
            _ => break,
        };
        let addr = i.0 * INDEX_ENTRY_BYTES as u64;
        if find(index, addr).is_none() {
            let start = match index.last() {
                Some(l) => l.end(),
                None => addr - addr % len,
            };
            let seg = dir
                .create_segment(Kind::Index, start, len, true)
                .map_err(|e| {
                    StoreError::io(
                        "create",
                        dir.display(Kind::Index, &super::segment::segment_name(start)),
                        e,
                    )
                })?;
            index.push(Arc::new(seg));
            continue;
        }
        let Some(iseg) = find(index, addr) else { break };
        let mut buf = [0u8; INDEX_ENTRY_BYTES];
        IndexEntry {
            pos: h.pos,
            size: h.size,
            index: h.index,
            term: h.term,
        }
        .encode(&mut buf);
        iseg.write(addr - iseg.start(), &buf)
            .map_err(|e| StoreError::io("write", iseg.name(), e))?;
        if (i.0 - from.0) % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
            tracing::info!(index = %i, "index rebuild progress");
        }
        pos += u64::from(h.size);
        i = i.next();
    }
    tracing::info!(from = %from, to = %i, "index rebuilt");
    Ok(())
}
