//! The logs a simulated node can run on, with their crash models.
//!
//! * [`MemLog`]: the core's in-memory log (fast; power loss keeps the flushed prefix plus a
//!   random prefix of the unflushed tail).
//! * [`StoreSimLog`]: the real store ([`Store`]) on the storage layer's in-memory disk
//!   ([`MemDisk`]); a crash takes `MemDisk::crash` (page cache kept, or unflushed 4 KiB pages
//!   torn at random) and the restart goes through the store's real recovery scan.

use bytes::Bytes;

use crate::config::LedgerConfig;
use crate::core::{Index, LogEntry, LogError, MemLog, Pos, RaftLog, Term};
use crate::runtime::log_adapter::{log_entry, log_err};
use crate::store::{CrashMode, FollowerEntry, MemDisk, Store};

/// A log with a crash model, as the simulator needs it.
pub trait SimLog: RaftLog + Sized {
    /// An empty log for a new node.
    fn fresh() -> Result<Self, String>;
    /// The log a restarted node finds: process crash (`power_loss == false`) or power loss.
    fn crash(self, power_loss: bool, seed: u64) -> Result<Self, String>;
    /// Make everything written durable; returns the durable end index.
    fn flush(&mut self) -> Option<Index>;
    /// Last durable index.
    fn flushed_index(&self) -> Option<Index>;
    /// Refuse (or accept again) appends for lack of space; false if unsupported.
    fn set_disk_full(&mut self, on: bool) -> bool;
    /// Delete the entries below `index` as retention does; false if unsupported.
    fn delete_before(&mut self, index: Index) -> bool;
    /// Every retained entry (for final checks).
    fn all_entries(&self) -> Vec<LogEntry> {
        self.entries_from(self.begin_index())
    }
    /// The retained entries from `from` (clamped to `begin`) through the end.
    fn entries_from(&self, from: Index) -> Vec<LogEntry> {
        let from = from.max(self.begin_index());
        if self.end_index() < Some(from) {
            return Vec::new();
        }
        self.entries(from, usize::MAX, usize::MAX)
            .unwrap_or_default()
    }
}

impl SimLog for MemLog {
    fn fresh() -> Result<Self, String> {
        Ok(MemLog::new())
    }
    fn crash(self, power_loss: bool, seed: u64) -> Result<Self, String> {
        let mut log = if power_loss {
            self.after_power_loss((seed % 4) as usize)
        } else {
            self
        };
        log.disk_full = false; // the fault is transient
        Ok(log)
    }
    fn flush(&mut self) -> Option<Index> {
        let end = self.end_index();
        self.flush_to(end);
        end
    }
    fn flushed_index(&self) -> Option<Index> {
        MemLog::flushed_index(self)
    }
    fn set_disk_full(&mut self, on: bool) -> bool {
        self.disk_full = on;
        true
    }
    fn delete_before(&mut self, index: Index) -> bool {
        MemLog::delete_before(self, index);
        true
    }
}

/// The real store on an in-memory disk; see the module docs.
pub struct StoreSimLog {
    disk: MemDisk,
    store: Store,
    flushed: Option<Index>,
}

fn sim_ledger_config() -> LedgerConfig {
    LedgerConfig {
        // Small files so runs roll segments (blank padding, several index files).
        data_segment_bytes: 64 * 1024,
        index_segment_bytes: 32 * 1024,
        background_threads: false,
        ..LedgerConfig::default()
    }
}

impl StoreSimLog {
    fn open(disk: MemDisk) -> Result<Self, String> {
        let store = Store::open_in_memory(&disk, &sim_ledger_config())
            .map_err(|e| format!("store recovery failed: {e}"))?;
        let mut log = StoreSimLog {
            disk,
            store,
            flushed: None,
        };
        log.flushed = log.end_index();
        Ok(log)
    }
}

impl RaftLog for StoreSimLog {
    fn begin_index(&self) -> Index {
        self.store
            .begin_index()
            .unwrap_or_else(|| self.store.next_index())
    }
    fn end_index(&self) -> Option<Index> {
        self.store
            .end_index()
            .or_else(|| self.store.next_index().prev())
    }
    fn end_term(&self) -> Option<Term> {
        self.store.end_term()
    }
    fn term_at(&self, index: Index) -> Option<Term> {
        self.store.term_at(index).ok()
    }
    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        let max_bytes = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        let v = self
            .store
            .get_range(from, max_count, max_bytes)
            .map_err(log_err)?;
        Ok(v.into_iter().map(log_entry).collect())
    }
    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError> {
        let a = self.store.append_leader(term, &body).map_err(log_err)?;
        Ok((a.index, a.pos))
    }
    fn append_follower(&mut self, e: &LogEntry) -> Result<(), LogError> {
        let entry = FollowerEntry {
            index: e.index,
            term: e.term,
            pos: e.pos,
            body_crc: 0,
            body: &e.body,
        };
        self.store.append_follower(entry).map_err(log_err)?;
        Ok(())
    }
    fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), LogError> {
        self.store.truncate_after(keep).map_err(log_err)?;
        self.flushed = self.flushed.min(keep);
        Ok(())
    }
    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        let e = self.entry(index).ok()?;
        Some(e.pos.plus(48 + e.body.len() as u64))
    }
}

impl SimLog for StoreSimLog {
    fn fresh() -> Result<Self, String> {
        StoreSimLog::open(MemDisk::new())
    }
    fn crash(self, power_loss: bool, seed: u64) -> Result<Self, String> {
        let mode = if power_loss {
            CrashMode::TearUnflushed { seed }
        } else {
            CrashMode::KeepPageCache
        };
        let disk = self.disk.crash(mode);
        self.store.abandon();
        StoreSimLog::open(disk)
    }
    fn flush(&mut self) -> Option<Index> {
        if self.store.flush().is_ok() {
            self.flushed = self.end_index();
        }
        self.flushed
    }
    fn flushed_index(&self) -> Option<Index> {
        self.flushed.min(self.end_index())
    }
    fn set_disk_full(&mut self, _on: bool) -> bool {
        false
    }
    fn delete_before(&mut self, _index: Index) -> bool {
        false
    }
}
