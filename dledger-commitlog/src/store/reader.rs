//! `StoreReader`: a cheap, cloneable, read-only view for other tasks (broker dispatcher, pull
//! processor). It sees committed entries only, so it never races the writer or a truncation,
//! and every read that copies an entry out verifies the body CRC (the borrowing
//! [`StoreReader::with_committed`] is for the dispatcher; see there).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use super::error::StoreError;
use super::flusher::FlushProgress;
use super::shared::{load_opt, EntryRef, Shared, StoredEntry};
use crate::format::entry::HEADER_BYTES;
use crate::types::{Index, Pos};

/// Read-only handle (`Clone + Send + Sync`).
#[derive(Debug, Clone)]
pub struct StoreReader {
    sh: Arc<Shared>,
}

const _: () = {
    const fn shareable<T: Clone + Send + Sync>() {}
    shareable::<StoreReader>();
};

impl StoreReader {
    pub(crate) fn new(sh: Arc<Shared>) -> StoreReader {
        StoreReader { sh }
    }

    /// First index in the log.
    pub fn begin_index(&self) -> Option<Index> {
        load_opt(&self.sh.begin_index)
    }

    /// Last index in the log (informational: entries above committed are not readable here).
    pub fn end_index(&self) -> Option<Index> {
        load_opt(&self.sh.end_index)
    }

    /// Committed index.
    pub fn committed_index(&self) -> Option<Index> {
        load_opt(&self.sh.committed_index)
    }

    /// Position just after the committed entry (RocketMQ's max commit-log offset).
    pub fn committed_end_pos(&self) -> Pos {
        Pos(self.sh.committed_end_pos.load(Ordering::Acquire))
    }

    /// Committed entry `index`, CRC-verified.
    pub fn get(&self, index: Index) -> Result<StoredEntry, StoreError> {
        self.check_committed(index)?;
        self.sh.entry(index)
    }

    /// Committed entry `index` handed to `f` in place: no copy, no allocation (same range
    /// and index/header checks as [`StoreReader::get`]). For a reader that goes through each
    /// entry once, moments after its commit (the broker's dispatcher): the body CRC is not
    /// computed again, as it was checked when the entry entered this member's log (the
    /// leader computes it over the bytes it writes, a follower verifies it before writing,
    /// recovery verifies every entry at startup), like RocketMQ's dispatch, which reads the
    /// commit log without CRC checks. Everything else reads through `get`/`read_at`.
    pub fn with_committed<R>(
        &self,
        index: Index,
        f: impl FnOnce(EntryRef<'_>) -> R,
    ) -> Result<R, StoreError> {
        self.check_committed(index)?;
        self.sh.with_entry(index, f)
    }

    /// [`StoreReader::with_committed`] for the run of committed entries `from..=last`, in
    /// order, walking the data files instead of looking each entry up through the index;
    /// stops early when `f` answers false and returns how many entries `f` was handed. The
    /// whole run must be committed (`IndexOutOfRange` otherwise, before any entry).
    pub fn with_committed_run(
        &self,
        from: Index,
        last: Index,
        f: impl FnMut(EntryRef<'_>) -> bool,
    ) -> Result<u64, StoreError> {
        if last < from {
            return Ok(0);
        }
        self.check_committed(from)?;
        self.check_committed(last)?;
        self.sh.with_entries(from, last, f)
    }

    /// `IndexOutOfRange` unless `index` is in the log and committed.
    fn check_committed(&self, index: Index) -> Result<(), StoreError> {
        let committed = self.committed_index();
        let begin = self.begin_index();
        if !(begin.is_some_and(|b| b <= index) && committed.is_some_and(|c| index <= c)) {
            return Err(StoreError::IndexOutOfRange {
                index,
                begin,
                last: committed,
            });
        }
        Ok(())
    }

    /// The committed entry whose header starts at `pos`, CRC-verified.
    pub fn read_at(&self, pos: Pos) -> Result<StoredEntry, StoreError> {
        let limit = self.committed_end_pos().0;
        if pos.0 + HEADER_BYTES as u64 > limit {
            return Err(StoreError::PosOutOfRange { pos });
        }
        let e = self.sh.entry_at(pos)?;
        if e.end_pos().0 > limit {
            return Err(StoreError::PosOutOfRange { pos });
        }
        Ok(e)
    }

    /// The message stored at RocketMQ physical offset `phys` (= entry pos + 48): the body of
    /// that committed entry, CRC-verified.
    pub fn read_message(&self, phys: u64) -> Result<Bytes, StoreError> {
        let pos = phys
            .checked_sub(HEADER_BYTES as u64)
            .ok_or(StoreError::PosOutOfRange { pos: Pos(phys) })?;
        Ok(self.read_at(Pos(pos))?.body)
    }

    /// Current durability progress.
    pub fn flush_progress(&self) -> FlushProgress {
        self.sh.flush.progress()
    }

    /// Watch of the flushed position.
    pub fn subscribe_flush(&self) -> watch::Receiver<FlushProgress> {
        self.sh.flush.subscribe()
    }

    /// Waits until data below `end_pos` is durable (sync mode acknowledgement). Fails if the
    /// store was poisoned first.
    pub async fn wait_flushed(&self, end_pos: Pos) -> Result<(), StoreError> {
        let mut rx = self.sh.flush.subscribe();
        let res = rx
            .wait_for(|p| p.flushed >= end_pos || p.poisoned)
            .await
            .map(|p| *p);
        match res {
            Ok(p) if p.flushed >= end_pos => Ok(()),
            _ => Err(StoreError::Poisoned(
                "flush failed before the position became durable".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LedgerConfig;
    use crate::store::Store;
    use crate::types::Term;

    /// The borrowing read sees exactly what `get` returns (index, position, body), across
    /// file boundaries, and only committed entries.
    #[test]
    fn with_committed_borrows_what_get_copies_and_only_committed_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LedgerConfig {
            data_segment_bytes: 1 << 20,
            index_segment_bytes: 64 << 10,
            background_threads: false,
            ..LedgerConfig::default()
        };
        let mut st = Store::open(dir.path(), &cfg).unwrap();
        let body = |i: u64| vec![(i % 251) as u8; 700 + (i as usize * 37) % 3000];
        for i in 0..1200u64 {
            st.append_leader(Term(1), &body(i)).unwrap();
        }
        let reader = st.reader();
        assert!(matches!(
            reader.with_committed(Index(0), |_| ()),
            Err(StoreError::IndexOutOfRange { .. })
        ));
        st.advance_committed(Index(999));
        let mut files = std::collections::BTreeSet::new();
        for i in 0..1000u64 {
            let copied = reader.get(Index(i)).unwrap();
            let (index, pos, end, same) = reader
                .with_committed(Index(i), |e| {
                    (e.index, e.pos, e.end_pos(), e.body == copied.body.as_ref())
                })
                .unwrap();
            assert_eq!(
                (index, pos, end),
                (copied.index, copied.pos, copied.end_pos())
            );
            assert!(same, "body of {i}");
            files.insert(pos.0 >> 20);
        }
        assert!(files.len() > 1, "entries span several files");
        for i in [1000u64, 1199, 5000] {
            assert!(
                matches!(
                    reader.with_committed(Index(i), |_| ()),
                    Err(StoreError::IndexOutOfRange { .. })
                ),
                "uncommitted {i}"
            );
        }
    }
}
