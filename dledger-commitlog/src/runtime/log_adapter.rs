//! `StoreLog`: the core's [`RaftLog`] over the real [`Store`], plus the bookkeeping that
//! turns the flusher's byte position into the flushed *index* the core wants.
//!
//! Converts DLedger's `i64` (`-1` = none) to the store's newtypes. Keeps `(index, end_pos)`
//! of entries appended but not yet known durable in a ring (no allocation once it has grown),
//! which also answers `end_pos_of` for recent entries without reading the data file.

use std::collections::VecDeque;

use bytes::Bytes;

use super::options::AppendHook;
use crate::core::{Index, LogEntry, LogError, Pos, RaftLog, Term};
use crate::store::{FollowerEntry, Store, StoreError, StoredEntry};
use crate::types;

/// The store as the core sees it. Owned by the driver (through the `Node`).
pub(crate) struct StoreLog {
    store: Option<Store>,
    /// Appended entries whose end position was not yet seen flushed, oldest first.
    unflushed: VecDeque<(Index, u64)>,
    /// Leader-side body rewrite, see [`AppendHook`].
    append_hook: Option<AppendHook>,
}

fn to_u64(v: i64) -> Option<u64> {
    u64::try_from(v).ok()
}

/// The core's view of a store error (also used by the simulator's store-backed log).
pub(crate) fn log_err(e: StoreError) -> LogError {
    match e {
        StoreError::DiskFull(_) => LogError::DiskFull,
        StoreError::IndexMismatch { expected, got } => LogError::NotNext {
            index: got.raw(),
            end: expected.raw() - 1,
        },
        StoreError::PosMismatch { expected, got } => LogError::PosMismatch {
            expected: got.raw(),
            actual: expected.raw(),
        },
        StoreError::IndexOutOfRange { index, begin, last } => LogError::OutOfRange {
            index: index.raw(),
            begin: types::Index::to_wire(begin),
            end: types::Index::to_wire(last),
        },
        other => LogError::Io(other.to_string()),
    }
}

/// A stored entry as the core sees it.
pub(crate) fn log_entry(e: StoredEntry) -> LogEntry {
    LogEntry {
        index: e.index.raw(),
        term: e.term.raw(),
        pos: e.pos.raw(),
        body: e.body,
    }
}

impl StoreLog {
    pub(crate) fn new(store: Store) -> Self {
        StoreLog {
            store: Some(store),
            unflushed: VecDeque::with_capacity(1024),
            append_hook: None,
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
}

impl RaftLog for StoreLog {
    fn begin_index(&self) -> Index {
        let s = self.store();
        s.begin_index()
            .map_or_else(|| s.next_index().raw(), types::Index::raw)
    }

    fn end_index(&self) -> Index {
        let s = self.store();
        s.end_index()
            .map_or_else(|| s.next_index().raw() - 1, types::Index::raw)
    }

    fn end_term(&self) -> Term {
        types::Term::to_wire(self.store().end_term())
    }

    fn term_at(&self, index: Index) -> Option<Term> {
        let i = to_u64(index)?;
        self.store()
            .term_at(types::Index(i))
            .ok()
            .map(types::Term::raw)
    }

    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        let Some(i) = to_u64(from) else {
            return Err(LogError::OutOfRange {
                index: from,
                begin: self.begin_index(),
                end: self.end_index(),
            });
        };
        let v = self
            .store()
            .get_range(types::Index(i), max_count, max_bytes as u64)
            .map_err(log_err)?;
        Ok(v.into_iter().map(log_entry).collect())
    }

    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError> {
        let t = to_u64(term).ok_or_else(|| LogError::Io(format!("negative term {term}")))?;
        let store = self
            .store
            .as_mut()
            .expect("store is present until the driver exits");
        let a = match &self.append_hook {
            Some(AppendHook(hook)) => {
                store.append_leader_with(types::Term(t), &body, |pos, b| hook(pos.raw(), b))
            }
            None => store.append_leader(types::Term(t), &body),
        }
        .map_err(log_err)?;
        self.note_append(a.index.raw(), a.end_pos.0);
        Ok((a.index.raw(), a.pos.raw()))
    }

    fn append_follower(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        let (Some(index), Some(term), Some(pos)) =
            (to_u64(entry.index), to_u64(entry.term), to_u64(entry.pos))
        else {
            return Err(LogError::Io(format!(
                "negative index/term/pos in entry {}",
                entry.index
            )));
        };
        let a = self
            .store_mut()
            .append_follower(FollowerEntry {
                index: types::Index(index),
                term: types::Term(term),
                pos: types::Pos(pos),
                body_crc: 0,
                body: &entry.body,
            })
            .map_err(log_err)?;
        self.note_append(a.index.raw(), a.end_pos.0);
        Ok(())
    }

    fn truncate_after(&mut self, index: Index) -> Result<(), LogError> {
        let keep = to_u64(index).map(types::Index);
        self.store_mut().truncate_after(keep).map_err(log_err)?;
        while self.unflushed.back().is_some_and(|&(i, _)| i > index) {
            self.unflushed.pop_back();
        }
        Ok(())
    }

    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        if index < 0 {
            return None;
        }
        if let Ok(k) = self.unflushed.binary_search_by_key(&index, |&(i, _)| i) {
            return self
                .unflushed
                .get(k)
                .and_then(|&(_, end)| i64::try_from(end).ok());
        }
        let s = self.store();
        if s.end_index().map(types::Index::raw) == Some(index) {
            return Some(s.end_pos().raw());
        }
        s.get(types::Index(to_u64(index)?))
            .ok()
            .map(|e| e.end_pos().raw())
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
        assert_eq!((l.begin_index(), l.end_index(), l.end_term()), (0, -1, -1));
        assert_eq!(l.term_at(0), None);
        assert_eq!(l.end_pos_of(0), None);
        assert!(matches!(
            l.entries(0, 1, 10),
            Err(LogError::OutOfRange { .. })
        ));
    }

    #[test]
    fn appends_truncation_and_flush_marks() {
        let mut l = log();
        assert_eq!(l.append_leader(1, Bytes::new()).unwrap(), (0, 0));
        let (i, p) = l.append_leader(1, Bytes::from_static(b"hello")).unwrap();
        assert_eq!((i, p), (1, 48));
        assert_eq!(l.end_pos_of(1), Some(48 + 48 + 5));
        let follower = LogEntry {
            index: 2,
            term: 2,
            pos: 101,
            body: Bytes::from_static(b"x"),
        };
        l.append_follower(&follower).unwrap();
        assert_eq!((l.end_index(), l.end_term(), l.term_at(1)), (2, 2, Some(1)));
        let bad = LogEntry {
            index: 5,
            term: 2,
            pos: 150,
            body: Bytes::from_static(b"y"),
        };
        assert!(matches!(
            l.append_follower(&bad),
            Err(LogError::NotNext { index: 5, end: 2 })
        ));
        let misplaced = LogEntry {
            index: 3,
            term: 2,
            pos: 7,
            body: Bytes::from_static(b"y"),
        };
        assert!(matches!(
            l.append_follower(&misplaced),
            Err(LogError::PosMismatch {
                expected: 7,
                actual: 150
            })
        ));
        let got = l.entries(1, 10, usize::MAX).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], follower);
        assert_eq!(l.flushed_through(96), Some(0));
        l.truncate_after(1).unwrap();
        assert_eq!(l.end_index(), 1);
        assert_eq!(l.flushed_through(10_000), Some(1));
        assert_eq!(l.flushed_through(10_000), None);
        assert_eq!(l.end_pos_of(0), Some(48));
    }
}
