//! `StoreReader`: a cheap, cloneable, read-only view for other tasks (broker dispatcher, pull
//! processor). It sees committed entries only, so it never races the writer or a truncation,
//! and every read verifies the body CRC.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use super::error::StoreError;
use super::flusher::FlushProgress;
use super::shared::{load_opt, Shared, StoredEntry};
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
        let committed = self.committed_index();
        let begin = self.begin_index();
        if !(begin.is_some_and(|b| b <= index) && committed.is_some_and(|c| index <= c)) {
            return Err(StoreError::IndexOutOfRange {
                index,
                begin,
                last: committed,
            });
        }
        self.sh.entry(index)
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
