//! `Store`: the single writer of one member's log (owned by the consensus driver task).
//!
//! Every mutating method takes `&mut self`; readers on other tasks use [`StoreReader`]
//! handles, which see only committed entries.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::data_log::{ensure_segment, place, Placement};
use super::dir::Dir;
use super::error::StoreError;
use super::fault::Faults;
use super::flusher::{self, FlushProgress, FlushState, Flusher, CHECKPOINT_FILE};
use super::header_crc::{write_header, HeaderCrc};
use super::mem_disk::MemDisk;
use super::preallocate::{PreallocState, Preallocator};
use super::reader::StoreReader;
use super::recovery::{recover, RecoveryReport};
use super::segment::{Kind, Segment};
use super::segment_list::SegmentList;
use super::shared::{store_opt, Shared, StoredEntry};
use crate::config::{FlushMode, LedgerConfig};
use crate::format::checkpoint::Checkpoint;
use crate::format::crc::masked_crc32;
use crate::format::entry::{encode_blank, verify_body_crc, BLANK_HEADER_BYTES, HEADER_BYTES};
use crate::format::index::{IndexEntry, INDEX_ENTRY_BYTES};
use crate::format::member_state::HardState;
use crate::types::{Index, Pos, Term};

const _: () = {
    const fn send<T: Send>() {}
    send::<Store>();
};

/// Name of the term/vote file.
pub const CURRTERM_FILE: &str = "currterm";

/// Result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Index of the new entry.
    pub index: Index,
    /// Position of its header (RocketMQ physical offset = `pos + 48`).
    pub pos: Pos,
    /// Position just after it (durable once the flushed position reaches it).
    pub end_pos: Pos,
}

/// An entry received from the leader for a follower append.
#[derive(Debug, Clone, Copy)]
pub struct FollowerEntry<'a> {
    /// Index the leader gave it.
    pub index: Index,
    /// Term the leader gave it.
    pub term: Term,
    /// Position the leader stored it at; the follower must store it at the same place.
    pub pos: Pos,
    /// Body CRC sent by the leader (0 = not computed).
    pub body_crc: u32,
    /// The body, exactly as the leader stored it.
    pub body: &'a [u8],
}

/// The writer side of one log.
pub struct Store {
    pub(crate) sh: Arc<Shared>,
    pub(crate) begin: Option<Index>,
    pub(crate) end: Option<(Index, Term)>,
    pub(crate) next_index: Index,
    pub(crate) write_pos: u64,
    pub(crate) data_base: u64,
    pub(crate) committed: Option<Index>,
    hard_state: HardState,
    report: RecoveryReport,
    cur_data: Option<Arc<Segment>>,
    cur_index: Option<Arc<Segment>>,
    flusher: Option<Flusher>,
    prealloc: Option<Preallocator>,
    header_crc: HeaderCrc,
    closed: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("begin", &self.begin)
            .field("end", &self.end)
            .field("write_pos", &self.write_pos)
            .field("committed", &self.committed)
            .finish()
    }
}

impl Store {
    /// Opens (recovering) or creates the log in `root` (`<storeBaseDir>/dledger-<selfId>`).
    pub fn open(root: &Path, cfg: &LedgerConfig) -> Result<Store, StoreError> {
        Self::open_with_faults(root, cfg, Arc::new(Faults::default()))
    }

    /// As [`Store::open`], with a fault plan consulted at each write step (tests).
    pub fn open_with_faults(
        root: &Path,
        cfg: &LedgerConfig,
        faults: Arc<Faults>,
    ) -> Result<Store, StoreError> {
        Self::open_dir(
            Dir::Fs {
                root: root.to_path_buf(),
                faults,
                large_folios: cfg.flush_mode == FlushMode::Async,
            },
            cfg,
        )
    }

    /// Opens the log on an in-memory disk (simulator). Background threads are never started:
    /// the caller flushes with [`Store::flush`] so runs stay deterministic.
    pub fn open_in_memory(disk: &MemDisk, cfg: &LedgerConfig) -> Result<Store, StoreError> {
        let cfg = LedgerConfig {
            background_threads: false,
            ..cfg.clone()
        };
        Self::open_dir(Dir::Mem(disk.clone()), &cfg)
    }

    fn open_dir(dir: Dir, cfg: &LedgerConfig) -> Result<Store, StoreError> {
        cfg.validate()?;
        dir.prepare()
            .map_err(|e| StoreError::io("create directories", dir.display(Kind::Data, ""), e))?;
        let hard_state = match dir
            .read_state(CURRTERM_FILE)
            .map_err(|e| StoreError::io("read", CURRTERM_FILE, e))?
        {
            None => HardState::default(),
            Some(b) => HardState::parse(&b).map_err(|source| StoreError::BadStateFile {
                file: CURRTERM_FILE.into(),
                source,
            })?,
        };
        let checkpoint = match dir.read_state(CHECKPOINT_FILE) {
            Ok(Some(b)) => Checkpoint::parse(&b).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "checkpoint unreadable: committed index will be relearned");
                Checkpoint::default()
            }),
            Ok(None) => Checkpoint::default(),
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint unreadable: committed index will be relearned");
                Checkpoint::default()
            }
        };
        let rec = recover(&dir, cfg, checkpoint.committed_index)?;
        let data_base = rec.data.first().map_or(0, |s| s.start());
        let next_index = rec
            .end
            .map_or(rec.begin.unwrap_or(Index(0)), |(i, _)| i.next());
        let write_pos = rec.write_pos;
        let index_written = next_index.0 * INDEX_ENTRY_BYTES as u64;
        let data_dirty_from = rec
            .data
            .iter()
            .rev()
            .find(|s| s.start() <= write_pos)
            .map_or(write_pos, |s| s.start());
        let data_list_end = rec
            .data
            .last()
            .map_or(write_pos, |s| s.end())
            .max(write_pos);
        let index_bounds = (
            rec.index.first().map_or(0, |s| s.start()),
            rec.index.last().map_or(0, |s| s.end()),
        );
        let sh = Arc::new(Shared {
            cfg: cfg.clone(),
            dir,
            data: SegmentList::new(cfg.data_segment_bytes, rec.data),
            index: SegmentList::new(cfg.index_segment_bytes, rec.index),
            begin_index: AtomicI64::new(Index::to_wire(rec.begin)),
            end_index: AtomicI64::new(Index::to_wire(rec.end.map(|(i, _)| i))),
            committed_index: AtomicI64::new(-1),
            committed_end_pos: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(String::new()),
            disk_full: AtomicBool::new(false),
            flush: FlushState::new(cfg.flush_mode, write_pos, index_written),
            prealloc: PreallocState::default(),
            state_file_lock: Mutex::new(()),
        });
        // Make the recovered state (zeroed tail, rebuilt index) durable before serving.
        sh.flush
            .note_dirty((data_dirty_from, data_list_end), index_bounds);
        flusher::flush_now(&sh)?;
        let mut store = Store {
            sh,
            begin: rec.begin,
            end: rec.end,
            next_index,
            write_pos,
            data_base,
            committed: None,
            hard_state,
            report: rec.report,
            cur_data: None,
            cur_index: None,
            flusher: None,
            prealloc: None,
            header_crc: HeaderCrc::default(),
            closed: false,
        };
        if let Some(c) = checkpoint.committed_index {
            store.advance_committed(c);
        }
        if cfg.background_threads {
            store.flusher = Some(
                Flusher::start(store.sh.clone())
                    .map_err(|e| StoreError::io("spawn", "flush thread", e))?,
            );
            store.prealloc = Some(
                Preallocator::start(store.sh.clone())
                    .map_err(|e| StoreError::io("spawn", "preallocation thread", e))?,
            );
            for (kind, list) in [(Kind::Data, &store.sh.data), (Kind::Index, &store.sh.index)] {
                if let Some((_, end)) = list.bounds() {
                    store.sh.prealloc.request(kind, end);
                }
            }
        }
        tracing::info!(begin = ?store.begin, end = ?store.end, committed = ?store.committed, write_pos, "store opened");
        Ok(store)
    }

    /// A cheap, cloneable read-only handle for other tasks (committed entries only).
    pub fn reader(&self) -> StoreReader {
        StoreReader::new(self.sh.clone())
    }

    /// What recovery found at open.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Term and vote loaded at open or last saved.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// First index in the log (none if empty).
    pub fn begin_index(&self) -> Option<Index> {
        self.begin
    }

    /// Last index in the log (none if empty).
    pub fn end_index(&self) -> Option<Index> {
        self.end.map(|(i, _)| i)
    }

    /// Term of the last entry (none if empty).
    pub fn end_term(&self) -> Option<Term> {
        self.end.map(|(_, t)| t)
    }

    /// Index the next append gets.
    pub fn next_index(&self) -> Index {
        self.next_index
    }

    /// Data position after the last entry.
    pub fn end_pos(&self) -> Pos {
        Pos(self.write_pos)
    }

    /// Committed index (always `<= end_index`).
    pub fn committed_index(&self) -> Option<Index> {
        self.committed
    }

    /// Position just after the committed entry: the consume-visible end of the log.
    pub fn committed_end_pos(&self) -> Pos {
        Pos(self.sh.committed_end_pos.load(Ordering::Acquire))
    }

    /// True after a disk failure: writes are refused until the store is reopened.
    pub fn is_poisoned(&self) -> bool {
        self.sh.poisoned.load(Ordering::Acquire)
    }

    /// Leader append of `body` in `term` at index `end + 1`.
    pub fn append_leader(&mut self, term: Term, body: &[u8]) -> Result<Appended, StoreError> {
        self.append_leader_with(term, body, |_, _| {})
    }

    /// Leader append with an append hook: `patch` sees the final position and may rewrite the
    /// body in place (RocketMQ writes PHYSICALOFFSET = pos + 48) before the CRCs are computed.
    pub fn append_leader_with(
        &mut self,
        term: Term,
        body: &[u8],
        patch: impl FnOnce(Pos, &mut [u8]),
    ) -> Result<Appended, StoreError> {
        self.write_entry(self.next_index, term, None, body, patch, None)
    }

    /// Follower append: the entry must be the next index and land at the leader's position;
    /// its body CRC (if sent) is verified before anything is written.
    pub fn append_follower(&mut self, e: FollowerEntry<'_>) -> Result<Appended, StoreError> {
        if e.index != self.next_index {
            return Err(StoreError::IndexMismatch {
                expected: self.next_index,
                got: e.index,
            });
        }
        verify_body_crc(e.body_crc, e.body).map_err(|source| StoreError::ReceivedCorrupt {
            index: e.index,
            source,
        })?;
        self.write_entry(
            e.index,
            e.term,
            Some(e.pos),
            e.body,
            |_, _| {},
            Some(e.body_crc),
        )
    }

    /// Makes `cur_data` the segment holding `pos` (the cached one on the fast path).
    fn ensure_data(&mut self, pos: u64) -> Result<(), StoreError> {
        if let Some(s) = &self.cur_data {
            if s.start() <= pos && pos < s.end() {
                return Ok(());
            }
        }
        let first = if self.sh.data.bounds().is_none() {
            pos - (pos - self.data_base.min(pos)) % self.sh.cfg.data_segment_bytes
        } else {
            0
        };
        let seg = ensure_segment(&self.sh, Kind::Data, pos, first)?;
        if self.flusher.is_some()
            && self
                .sh
                .data
                .bounds()
                .is_some_and(|(_, end)| end == seg.end())
        {
            self.sh.prealloc.request(Kind::Data, seg.end());
        }
        self.cur_data = Some(seg);
        Ok(())
    }

    /// Makes `cur_index` the segment holding the index entry of `index`.
    fn ensure_index(&mut self, index: Index) -> Result<(), StoreError> {
        let addr = index.0 * INDEX_ENTRY_BYTES as u64;
        if let Some(s) = &self.cur_index {
            if s.start() <= addr && addr < s.end() {
                return Ok(());
            }
        }
        let first = addr - addr % self.sh.cfg.index_segment_bytes;
        let seg = ensure_segment(&self.sh, Kind::Index, addr, first)?;
        if self.flusher.is_some()
            && self
                .sh
                .index
                .bounds()
                .is_some_and(|(_, end)| end == seg.end())
        {
            self.sh.prealloc.request(Kind::Index, seg.end());
        }
        self.cur_index = Some(seg);
        Ok(())
    }

    fn write_entry(
        &mut self,
        index: Index,
        term: Term,
        want_pos: Option<Pos>,
        body: &[u8],
        patch: impl FnOnce(Pos, &mut [u8]),
        given_crc: Option<u32>,
    ) -> Result<Appended, StoreError> {
        self.sh.check_writable()?;
        let max = self.sh.cfg.max_body_bytes();
        if body.len() as u64 > max {
            return Err(StoreError::BodyTooLarge {
                len: body.len() as u64,
                max,
            });
        }
        if let Some((_, last)) = self.end {
            if term < last {
                return Err(StoreError::TermRegression { last, got: term });
            }
        }
        let size = (HEADER_BYTES + body.len()) as u64;
        let placement = match &self.cur_data {
            // Fast path: fits in the current file with room for a blank after it (the same
            // answer as `place`, without its division).
            Some(cur)
                if cur.start() <= self.write_pos
                    && self.write_pos + size + BLANK_HEADER_BYTES as u64 <= cur.end() =>
            {
                Placement {
                    blank: None,
                    pos: self.write_pos,
                }
            }
            // Any file start works as the base: starts only change by whole files.
            _ => place(
                self.data_base,
                self.sh.cfg.data_segment_bytes,
                self.write_pos,
                size,
            ),
        };
        let pos = placement.pos;
        if let Some(w) = want_pos {
            if w.0 != pos {
                return Err(StoreError::PosMismatch {
                    expected: Pos(pos),
                    got: w,
                });
            }
        }
        // Every fallible allocation first, so a failure leaves nothing half-written.
        let blank_seg = match placement.blank {
            Some((bpos, _)) => {
                self.ensure_data(bpos)?;
                self.cur_data.clone()
            }
            None => None,
        };
        self.ensure_data(pos)?;
        self.ensure_index(index)?;
        let (Some(dseg), Some(iseg)) = (self.cur_data.as_deref(), self.cur_index.as_deref()) else {
            return Err(StoreError::PosOutOfRange { pos: Pos(pos) });
        };
        let io = |e| StoreError::io("write", dseg.name(), e);
        if let (Some((bpos, blen)), Some(bseg)) = (placement.blank, blank_seg) {
            let mut b = [0u8; BLANK_HEADER_BYTES];
            encode_blank(&mut b, blen as u32);
            bseg.write(bpos - bseg.start(), &b)
                .map_err(|e| StoreError::io("write", bseg.name(), e))?;
        }
        let off = pos - dseg.start();
        let header_crc = &mut self.header_crc;
        // Body first (patched, then checksummed in place), header last, in one mapped write.
        dseg.write_with(off, size as usize, |dst| {
            let (head, tail) = dst.split_at_mut(HEADER_BYTES);
            tail.copy_from_slice(body);
            patch(Pos(pos), tail);
            let body_crc = match given_crc {
                Some(c) if c != 0 => c,
                _ => masked_crc32(tail),
            };
            let (index, term, pos) = (index.raw(), term.raw(), Pos(pos).raw());
            let crc = header_crc.crc(size as u32, index, term, pos);
            if let Ok(head) = <&mut [u8; HEADER_BYTES]>::try_from(head) {
                write_header(head, size as u32, index, term, pos, crc, body_crc);
            }
        })
        .map_err(io)?;
        let iaddr = index.0 * INDEX_ENTRY_BYTES as u64;
        let ie = IndexEntry {
            pos: Pos(pos),
            size: size as u32,
            index,
            term,
        };
        let written = iseg.write_with(iaddr - iseg.start(), INDEX_ENTRY_BYTES, |dst| {
            if let Ok(dst) = <&mut [u8; INDEX_ENTRY_BYTES]>::try_from(dst) {
                ie.encode(dst);
            }
        });
        if let Err(e) = written {
            // Undo the header so the half-appended entry is not found at recovery.
            let _ = dseg.zero(off, HEADER_BYTES as u64);
            return Err(StoreError::io("write", iseg.name(), e));
        }
        self.write_pos = pos + size;
        self.end = Some((index, term));
        self.next_index = index.next();
        if self.begin.is_none() {
            self.begin = Some(index);
            store_opt(&self.sh.begin_index, self.begin);
        }
        store_opt(&self.sh.end_index, Some(index));
        let index_end = iaddr + INDEX_ENTRY_BYTES as u64;
        self.sh.flush.note_written(self.write_pos, index_end);
        self.sh.prealloc.note_written(self.write_pos, index_end);
        Ok(Appended {
            index,
            pos: Pos(pos),
            end_pos: Pos(self.write_pos),
        })
    }

    fn check_range(&self, index: Index) -> Result<(), StoreError> {
        let ok =
            self.begin.is_some_and(|b| b <= index) && self.end.is_some_and(|(e, _)| index <= e);
        if ok {
            Ok(())
        } else {
            Err(StoreError::IndexOutOfRange {
                index,
                begin: self.begin,
                last: self.end_index(),
            })
        }
    }

    /// Entry `index` (`begin <= index <= end`), CRC-verified.
    pub fn get(&self, index: Index) -> Result<StoredEntry, StoreError> {
        self.check_range(index)?;
        self.sh.entry(index)
    }

    /// Entries from `from` for a batch push: at most `max_count`, and at most `max_bytes` of
    /// entry bytes (but always at least one entry if `from` exists).
    pub fn get_range(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: u64,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        self.check_range(from)?;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        let mut i = from;
        while out.len() < max_count && self.end.is_some_and(|(e, _)| i <= e) {
            let e = self.sh.entry(i)?;
            bytes += u64::from(e.size());
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(e);
            i = i.next();
        }
        Ok(out)
    }

    /// Term of entry `index`.
    pub fn term_at(&self, index: Index) -> Result<Term, StoreError> {
        self.check_range(index)?;
        Ok(self.sh.index_entry(index)?.term)
    }

    /// Position of entry `index`.
    pub fn pos_of(&self, index: Index) -> Result<Pos, StoreError> {
        self.check_range(index)?;
        Ok(self.sh.index_entry(index)?.pos)
    }

    /// Removes every entry after `keep` (`None`: all entries); data, index, files and
    /// pointers. The committed index is clamped to the new end (a cut below it is logged as
    /// an error: it means a consensus bug or lost data).
    pub fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), StoreError> {
        self.sh.check_writable().or_else(|e| {
            if matches!(e, StoreError::DiskFull(_)) {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        let new_next = keep.map_or(Index(0), Index::next);
        if let Some(b) = self.begin {
            if new_next < b {
                return Err(StoreError::TruncateBelowBegin {
                    keep,
                    begin: self.begin,
                });
            }
        }
        if new_next >= self.next_index {
            return Ok(());
        }
        // Cut right after the kept entry (a blank that followed it goes too).
        let (cut, new_end) = match keep {
            Some(k) if self.begin.is_some_and(|b| k >= b) => {
                let ie = self.sh.index_entry(k)?;
                (ie.pos.0 + u64::from(ie.size), Some((k, ie.term)))
            }
            _ => (self.sh.index_entry(new_next)?.pos.0, None),
        };
        let old_write = self.write_pos;
        let old_index_end = self.next_index.0 * INDEX_ENTRY_BYTES as u64;
        let index_cut = new_next.0 * INDEX_ENTRY_BYTES as u64;
        // Clamp committed first, so readers stop reading what is about to be zeroed (a cut
        // below committed only happens after a consensus bug or lost data; R7).
        if self.committed.is_some_and(|c| c >= new_next) {
            tracing::error!(committed = ?self.committed, ?keep, "truncating committed entries: clamping the committed index");
            self.committed = new_end.map(|(i, _)| i);
            store_opt(&self.sh.committed_index, self.committed);
            self.sh.committed_end_pos.store(cut, Ordering::Release);
        }
        let zero_err = |e| StoreError::io("truncate", "data/index files", e);
        self.sh.data.zero_range(cut, old_write).map_err(zero_err)?;
        self.sh
            .index
            .zero_range(index_cut, old_index_end)
            .map_err(zero_err)?;
        self.cur_data = None;
        self.cur_index = None;
        // Files wholly after the cut are removed (the next one is preallocated again).
        self.remove_after(Kind::Data, cut)?;
        self.remove_after(Kind::Index, index_cut)?;
        self.end = new_end;
        self.next_index = new_next;
        self.write_pos = cut;
        if new_end.is_none() {
            self.begin = None;
            store_opt(&self.sh.begin_index, None);
        }
        store_opt(&self.sh.end_index, self.end_index());
        self.sh.flush.note_truncated(cut, index_cut);
        self.sh
            .flush
            .note_dirty((cut, old_write), (index_cut, old_index_end));
        Ok(())
    }

    fn remove_after(&mut self, kind: Kind, cut: u64) -> Result<(), StoreError> {
        let list = match kind {
            Kind::Data => &self.sh.data,
            Kind::Index => &self.sh.index,
        };
        let removed: Vec<Arc<Segment>> = {
            let mut segs = list.write();
            let keep = segs
                .iter()
                .position(|s| s.end() > cut)
                .map_or(segs.len(), |i| i + 1);
            let at = keep.min(segs.len());
            segs.split_off(at)
        };
        for s in removed.iter().rev() {
            self.sh
                .dir
                .remove_segment(kind, s.start())
                .map_err(|e| StoreError::io("remove", s.name(), e))?;
        }
        Ok(())
    }

    /// Raises the committed index (capped at the end; ignored if it would not increase or is
    /// below the first index). Returns the committed index afterwards.
    pub fn advance_committed(&mut self, index: Index) -> Option<Index> {
        let Some((end, _)) = self.end else {
            return self.committed;
        };
        let target = index.min(end);
        if self.begin.is_some_and(|b| target < b) || self.committed.is_some_and(|c| target <= c) {
            return self.committed;
        }
        match self.sh.index_entry(target) {
            Ok(ie) => {
                self.sh
                    .committed_end_pos
                    .store(ie.pos.0 + u64::from(ie.size), Ordering::Release);
                self.committed = Some(target);
                store_opt(&self.sh.committed_index, self.committed);
            }
            Err(e) => {
                tracing::error!(error = %e, %target, "cannot read the index entry of the new committed index")
            }
        }
        self.committed
    }

    /// Durably stores term and vote (tmp + fsync + rename + dir fsync). Call before answering
    /// a vote or acting in a new term.
    pub fn save_hard_state(
        &mut self,
        term: Term,
        voted_for: Option<&str>,
    ) -> Result<(), StoreError> {
        let hs = HardState {
            term,
            voted_for: voted_for.map(str::to_string),
        };
        {
            let _guard = self
                .sh
                .state_file_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.sh
                .dir
                .write_state(CURRTERM_FILE, hs.encode().as_bytes())
                .map_err(|e| StoreError::io("write", CURRTERM_FILE, e))?;
        }
        self.hard_state = hs;
        Ok(())
    }

    /// Creates the files the next append writes to (and pre-touches their first pages), so
    /// that append does not do it on the caller's thread. The runtime calls it at start, off
    /// the async workers, so the first append after an election does not stall the driver.
    pub fn prepare_next_append(&mut self) -> Result<(), StoreError> {
        self.sh.check_writable()?;
        self.ensure_data(self.write_pos)?;
        self.ensure_index(self.next_index)
    }

    /// Flushes everything written so far now (simulator, shutdown, tests); returns the
    /// flushed position. A failure poisons the store.
    pub fn flush(&mut self) -> Result<Pos, StoreError> {
        flusher::flush_now(&self.sh)
    }

    /// Flushes, then writes the checkpoint (committed index sampled before the flush).
    pub fn write_checkpoint(&mut self) -> Result<(), StoreError> {
        flusher::flush_and_checkpoint(&self.sh)
    }

    /// Current durability progress.
    pub fn flush_progress(&self) -> FlushProgress {
        self.sh.flush.progress()
    }

    /// Watch of the flushed position: sync-mode callers await `flushed >= end_pos` of their
    /// append (group commit releases all of them together).
    pub fn subscribe_flush(&self) -> watch::Receiver<FlushProgress> {
        self.sh.flush.subscribe()
    }

    /// Stops the background threads, flushes and writes the checkpoint.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }

    /// Drops the store as a crash would: threads stopped, no final flush or checkpoint.
    /// (Simulator: take `MemDisk::crash` first, then abandon the old store.)
    pub fn abandon(mut self) {
        self.closed = true;
        if let Some(mut f) = self.flusher.take() {
            f.stop();
        }
        if let Some(mut p) = self.prealloc.take() {
            p.stop();
        }
    }

    fn shutdown(&mut self) -> Result<(), StoreError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if let Some(mut f) = self.flusher.take() {
            f.stop();
        }
        if let Some(mut p) = self.prealloc.take() {
            p.stop();
        }
        if self.is_poisoned() {
            return Ok(());
        }
        flusher::flush_and_checkpoint(&self.sh)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "final flush/checkpoint failed");
        }
    }
}
