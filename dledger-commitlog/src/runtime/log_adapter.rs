//! `StoreLog`: the core's [`RaftLog`] over the real [`Store`], plus the bookkeeping that
//! turns the flusher's byte position into the flushed *index* the core wants.
//!
//! The core and the store share the index/term/pos newtypes, so entries and errors pass
//! through unchanged ([`log_entry`], [`log_err`]). Keeps `(index, end_pos)`
//! of entries appended but not yet known durable in a ring (no allocation once it has grown),
//! which also answers `end_pos_of` for recent entries without reading the data file.
//!
//! Also keeps the most recent entries (a contiguous run ending at the log end, bounded by
//! [`RECENT_MAX_ENTRIES`] and [`RECENT_MAX_BYTES`]) with their bodies as shared `Bytes`: the
//! leader's pushes to every follower read them from here instead of reading, CRC-checking and
//! copying each entry out of the data file once per follower. Invariant: `recent` always
//! equals the stored entries it covers (leader appends extend it, truncation cuts it,
//! anything that would leave a gap clears it). Follower appends clear it: a follower sends
//! no pushes, and holding the bodies it received (slices of the buffer each PUSH was decoded
//! into) would keep every decode buffer alive for thousands of entries, so each push would
//! need fresh memory (a page fault per 4 KiB) instead of reusing the last one's. A follower
//! that becomes leader reads older entries from the data file until its own appends refill
//! the cache.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::options::AppendHook;
use crate::core::{Index, LogEntry, LogError, Pos, RaftLog, Term};
use crate::store::{FollowerEntry, Store, StoreError, StoredEntry};

/// Most entries kept in the recent-entries cache.
const RECENT_MAX_ENTRIES: usize = 8192;
/// Most body bytes kept in the recent-entries cache.
const RECENT_MAX_BYTES: usize = 32 << 20;
/// Size of the slabs rewritten bodies are copied into: below malloc's mmap threshold, so a
/// slab freed when its last entry leaves the cache is reused by the allocator rather than
/// unmapped (fresh mappings cost a page fault per 4 KiB).
const HOOK_SLAB_BYTES: usize = 64 << 10;

/// The store as the core sees it. Owned by the driver (through the `Node`).
pub(crate) struct StoreLog {
    store: Option<Store>,
    /// Appended entries whose end position was not yet seen flushed, oldest first.
    unflushed: VecDeque<(Index, u64)>,
    /// The latest entries, consecutive, the last one at the log end (module docs).
    recent: VecDeque<LogEntry>,
    /// Body bytes held by `recent`.
    recent_bytes: usize,
    /// Leader-side body rewrite, see [`AppendHook`].
    append_hook: Option<AppendHook>,
    /// Where rewritten bodies are copied for `recent` (see `append_leader`).
    hook_slab: BytesMut,
}

/// The core's view of a store error.
fn log_err(e: StoreError) -> LogError {
    match e {
        StoreError::DiskFull(_) => LogError::DiskFull,
        StoreError::IndexMismatch { expected, got } => LogError::NotNext {
            index: got,
            end: expected.prev(),
        },
        StoreError::PosMismatch { expected, got } => LogError::PosMismatch {
            expected: got,
            actual: expected,
        },
        StoreError::IndexOutOfRange { index, begin, last } => LogError::OutOfRange {
            index,
            begin,
            end: last,
        },
        other => LogError::Io(other.to_string()),
    }
}

/// A stored entry as the core sees it.
fn log_entry(e: StoredEntry) -> LogEntry {
    LogEntry {
        index: e.index,
        term: e.term,
        pos: e.pos,
        body: e.body,
    }
}

impl StoreLog {
    pub(crate) fn new(store: Store) -> Self {
        StoreLog {
            store: Some(store),
            unflushed: VecDeque::with_capacity(1024),
            recent: VecDeque::with_capacity(1024),
            recent_bytes: 0,
            append_hook: None,
            hook_slab: BytesMut::new(),
        }
    }

    /// Installs the leader-side append hook.
    pub(crate) fn with_append_hook(mut self, hook: Option<AppendHook>) -> Self {
        self.append_hook = hook;
        self
    }

    /// The store; present until [`StoreLog::take`] at the very end of the driver.
    pub(crate) fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("store is present until the driver exits")
    }

    pub(crate) fn store_mut(&mut self) -> &mut Store {
        self.store
            .as_mut()
            .expect("store is present until the driver exits")
    }

    /// Removes the store (driver exit: close or abandon it). No other call may follow.
    pub(crate) fn take(&mut self) -> Option<Store> {
        self.store.take()
    }

    /// Data below `flushed` is durable: forget those entries and return the highest index
    /// that became durable, if any did.
    pub(crate) fn flushed_through(&mut self, flushed: u64) -> Option<Index> {
        let mut last = None;
        while let Some(&(i, end)) = self.unflushed.front() {
            if end > flushed {
                break;
            }
            last = Some(i);
            self.unflushed.pop_front();
        }
        last
    }

    fn note_append(&mut self, index: Index, end_pos: u64) {
        self.unflushed.push_back((index, end_pos));
    }

    /// Remembers the entry just appended at the log end.
    fn remember(&mut self, e: LogEntry) {
        if self
            .recent
            .back()
            .is_some_and(|b| b.index.next() != e.index)
        {
            self.recent.clear();
            self.recent_bytes = 0;
        }
        self.recent_bytes += e.body.len();
        self.recent.push_back(e);
        while self.recent.len() > RECENT_MAX_ENTRIES || self.recent_bytes > RECENT_MAX_BYTES {
            match self.recent.pop_front() {
                Some(old) => self.recent_bytes -= old.body.len(),
                None => break,
            }
        }
    }

    /// Empties the recent-entries cache.
    fn forget_recent(&mut self) {
        if !self.recent.is_empty() {
            self.recent.clear();
            self.recent_bytes = 0;
        }
    }

    /// The cached entry `index`, if it is in the recent run and still retained.
    fn cached(&self, index: Index) -> Option<&LogEntry> {
        let first = self.recent.front()?.index;
        if index < first || index < self.begin_index() {
            return None;
        }
        self.recent
            .get(usize::try_from(Index::distance(Some(first), Some(index))).ok()?)
    }
}

/// Bytes an entry occupies in the data file.
fn entry_bytes(e: &LogEntry) -> u64 {
    e.body.len() as u64 + crate::wire::messages::ENTRY_HEADER_BYTES as u64
}

impl RaftLog for StoreLog {
    fn begin_index(&self) -> Index {
        let s = self.store();
        s.begin_index().unwrap_or_else(|| s.next_index())
    }

    fn end_index(&self) -> Option<Index> {
        let s = self.store();
        s.end_index().or_else(|| s.next_index().prev())
    }

    fn end_term(&self) -> Option<Term> {
        self.store().end_term()
    }

    fn term_at(&self, index: Index) -> Option<Term> {
        if let Some(e) = self.cached(index) {
            return Some(e.term);
        }
        self.store().term_at(index).ok()
    }

    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        if let (Some(_), Some(first)) = (self.cached(from), self.recent.front()) {
            // Same selection rule as the store's `get_range`: stop before the entry bytes
            // would exceed `max_bytes`, but always return at least one entry.
            let mut out = Vec::with_capacity(max_count.min(self.recent.len()).min(1024));
            let mut bytes = 0u64;
            let start =
                usize::try_from(Index::distance(Some(first.index), Some(from))).unwrap_or(0);
            for e in self.recent.iter().skip(start).take(max_count) {
                bytes += entry_bytes(e);
                if !out.is_empty() && bytes > max_bytes as u64 {
                    break;
                }
                out.push(e.clone());
            }
            return Ok(out);
        }
        let v = self
            .store()
            .get_range(from, max_count, max_bytes as u64)
            .map_err(log_err)?;
        Ok(v.into_iter().map(log_entry).collect())
    }

    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError> {
        let store = self
            .store
            .as_mut()
            .expect("store is present until the driver exits");
        let (a, stored_body) = match &self.append_hook {
            Some(AppendHook(hook)) => {
                // The hook rewrites the stored copy: cache exactly what was stored, copied out
                // right after the rewrite into a slab shared by many entries (no read-back,
                // CRC check and allocation per entry).
                let slab = &mut self.hook_slab;
                if slab.capacity() - slab.len() < body.len() {
                    slab.reserve(body.len().max(HOOK_SLAB_BYTES));
                }
                let res = store.append_leader_with(term, &body, |pos, b| {
                    hook(pos.raw(), b);
                    slab.extend_from_slice(b);
                });
                match res {
                    Ok(a) => (a, Some(slab.split().freeze())),
                    Err(e) => {
                        slab.clear(); // whatever was copied belongs to no stored entry
                        return Err(log_err(e));
                    }
                }
            }
            None => {
                let a = store.append_leader(term, &body).map_err(log_err)?;
                (a, Some(body))
            }
        };
        self.note_append(a.index, a.end_pos.0);
        let (index, pos) = (a.index, a.pos);
        match stored_body {
            Some(body) => self.remember(LogEntry {
                index,
                term,
                pos,
                body,
            }),
            None => {
                self.recent.clear();
                self.recent_bytes = 0;
            }
        }
        Ok((index, pos))
    }

    fn append_follower(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        let a = self
            .store_mut()
            .append_follower(FollowerEntry {
                index: entry.index,
                term: entry.term,
                pos: entry.pos,
                body_crc: 0,
                body: &entry.body,
            })
            .map_err(log_err)?;
        self.note_append(a.index, a.end_pos.0);
        // Followers keep no bodies (module docs): the run would no longer end at the log end.
        self.forget_recent();
        Ok(())
    }

    fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), LogError> {
        if let Err(e) = self.store_mut().truncate_after(keep) {
            // Whatever the store kept, the cache must not claim more: start it afresh.
            self.recent.clear();
            self.recent_bytes = 0;
            return Err(log_err(e));
        }
        while self.unflushed.back().is_some_and(|&(i, _)| Some(i) > keep) {
            self.unflushed.pop_back();
        }
        while self.recent.back().is_some_and(|e| Some(e.index) > keep) {
            if let Some(e) = self.recent.pop_back() {
                self.recent_bytes -= e.body.len();
            }
        }
        Ok(())
    }

    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        if let Some(e) = self.cached(index) {
            return Some(e.pos.plus(entry_bytes(e)));
        }
        if let Ok(k) = self.unflushed.binary_search_by_key(&index, |&(i, _)| i) {
            return self.unflushed.get(k).map(|&(_, end)| Pos(end));
        }
        let s = self.store();
        if s.end_index() == Some(index) {
            return Some(s.end_pos());
        }
        s.get(index).ok().map(|e| e.end_pos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LedgerConfig;
    use crate::store::MemDisk;

    fn log() -> StoreLog {
        let cfg = LedgerConfig {
            data_segment_bytes: 4096,
            index_segment_bytes: 32 * 64,
            ..LedgerConfig::default()
        };
        StoreLog::new(Store::open_in_memory(&MemDisk::default(), &cfg).unwrap())
    }

    #[test]
    fn empty_log_follows_the_core_conventions() {
        let l = log();
        assert_eq!(
            (l.begin_index(), l.end_index(), l.end_term()),
            (Index(0), None, None)
        );
        assert_eq!(l.term_at(Index(0)), None);
        assert_eq!(l.end_pos_of(Index(0)), None);
        assert!(matches!(
            l.entries(Index(0), 1, 10),
            Err(LogError::OutOfRange { .. })
        ));
    }

    #[test]
    fn appends_truncation_and_flush_marks() {
        let mut l = log();
        assert_eq!(
            l.append_leader(Term(1), Bytes::new()).unwrap(),
            (Index(0), Pos(0))
        );
        let (i, p) = l
            .append_leader(Term(1), Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!((i, p), (Index(1), Pos(48)));
        assert_eq!(l.end_pos_of(Index(1)), Some(Pos(48 + 48 + 5)));
        let follower = LogEntry {
            index: Index(2),
            term: Term(2),
            pos: Pos(101),
            body: Bytes::from_static(b"x"),
        };
        l.append_follower(&follower).unwrap();
        assert_eq!(
            (l.end_index(), l.end_term(), l.term_at(Index(1))),
            (Some(Index(2)), Some(Term(2)), Some(Term(1)))
        );
        let bad = LogEntry {
            index: Index(5),
            term: Term(2),
            pos: Pos(150),
            body: Bytes::from_static(b"y"),
        };
        assert_eq!(
            l.append_follower(&bad),
            Err(LogError::NotNext {
                index: Index(5),
                end: Some(Index(2))
            })
        );
        let misplaced = LogEntry {
            index: Index(3),
            term: Term(2),
            pos: Pos(7),
            body: Bytes::from_static(b"y"),
        };
        assert_eq!(
            l.append_follower(&misplaced),
            Err(LogError::PosMismatch {
                expected: Pos(7),
                actual: Pos(150)
            })
        );
        let got = l.entries(Index(1), 10, usize::MAX).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], follower);
        assert_eq!(l.flushed_through(96), Some(Index(0)));
        l.truncate_after(Some(Index(1))).unwrap();
        assert_eq!(l.end_index(), Some(Index(1)));
        assert_eq!(l.flushed_through(10_000), Some(Index(1)));
        assert_eq!(l.flushed_through(10_000), None);
        assert_eq!(l.end_pos_of(Index(0)), Some(Pos(48)));
    }

    /// The recent-entries cache answers exactly what the store holds, through appends (with
    /// and without an append hook), follower appends, truncations and cache eviction.
    #[test]
    fn cached_reads_match_the_store() {
        let seed: u64 = std::env::var("STORE_LOG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x10c);
        println!("store log seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let cfg = LedgerConfig {
            data_segment_bytes: 1 << 20,
            index_segment_bytes: 32 * 4096,
            ..LedgerConfig::default()
        };
        for hooked in [false, true] {
            let store = Store::open_in_memory(&MemDisk::default(), &cfg).unwrap();
            let hook = hooked.then(|| {
                AppendHook(std::sync::Arc::new(|pos: i64, b: &mut [u8]| {
                    if let Some(first) = b.first_mut() {
                        *first = pos as u8;
                    }
                }))
            });
            let mut l = StoreLog::new(store).with_append_hook(hook);
            let mut term = Term(1);
            for step in 0..3_000u32 {
                match next() % 10 {
                    0 if l.end_index() > Some(Index(0)) => {
                        let count = Index::count_through(l.end_index());
                        let keep = Index::last_of_count(count.saturating_sub(next() % 5));
                        l.truncate_after(keep).unwrap();
                        term = Term(term.0 + 1);
                    }
                    1 => {
                        let end = l.end_index();
                        let e = LogEntry {
                            index: l.next_index(),
                            term,
                            pos: end.and_then(|i| l.end_pos_of(i)).unwrap_or(Pos(0)),
                            body: Bytes::from(vec![step as u8; (next() % 300) as usize]),
                        };
                        l.append_follower(&e).unwrap();
                    }
                    _ => {
                        let body = Bytes::from(vec![step as u8; 1 + (next() % 300) as usize]);
                        l.append_leader(term, body).unwrap();
                    }
                }
                if step % 7 == 0 {
                    // Make old entries fall out of the cache sometimes.
                    while l.recent.len() > 50 {
                        let e = l.recent.pop_front().unwrap();
                        l.recent_bytes -= e.body.len();
                    }
                }
                let (begin, end) = (l.begin_index(), l.end_index());
                let Some(end) = end.filter(|e| *e >= begin) else {
                    continue;
                };
                let from = begin.plus(next() % (end.0 - begin.0 + 1));
                let (count, bytes) = (1 + (next() % 40) as usize, (next() % 5_000) as usize);
                let got = l.entries(from, count, bytes).unwrap();
                let want: Vec<LogEntry> = l
                    .store()
                    .get_range(from, count, bytes as u64)
                    .unwrap()
                    .into_iter()
                    .map(log_entry)
                    .collect();
                assert_eq!(got, want, "step {step} from {from}");
                for e in &want {
                    assert_eq!(l.term_at(e.index), Some(e.term));
                    let stored = l.store().get(e.index).unwrap();
                    assert_eq!(l.end_pos_of(e.index), Some(stored.end_pos()));
                }
            }
        }
    }
}
