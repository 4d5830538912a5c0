//! The logs a simulated node can run on, with their crash models.
//!
//! * [`MemLog`]: the core's in-memory log (fast; power loss keeps the flushed prefix plus a
//!   random prefix of the unflushed tail).
//! * [`StoreSimLog`]: the real store ([`Store`]) on the storage layer's in-memory disk
//!   ([`MemDisk`]) behind the runtime's own store adapter (`runtime::log_adapter::StoreLog`,
//!   so the simulator runs the production adapter, not a copy); a crash takes
//!   `MemDisk::crash` (page cache kept, or unflushed 4 KiB pages torn at random) and the
//!   restart goes through the store's real recovery scan.

use bytes::Bytes;

use crate::config::LedgerConfig;
use crate::core::{Index, LogEntry, LogError, MemLog, Pos, RaftLog, Term};
use crate::runtime::log_adapter::StoreLog;
use crate::store::{CrashMode, MemDisk, Store};

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

/// The real store on an in-memory disk behind the runtime's own adapter
/// ([`StoreLog`], the one store-to-core adapter); see the module docs.
pub struct StoreSimLog {
    disk: MemDisk,
    log: StoreLog,
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
            log: StoreLog::new(store),
            flushed: None,
        };
        log.flushed = log.end_index();
        Ok(log)
    }
}

/// Every call goes to the runtime's adapter.
impl RaftLog for StoreSimLog {
    fn begin_index(&self) -> Index {
        self.log.begin_index()
    }
    fn end_index(&self) -> Option<Index> {
        self.log.end_index()
    }
    fn end_term(&self) -> Option<Term> {
        self.log.end_term()
    }
    fn term_at(&self, index: Index) -> Option<Term> {
        self.log.term_at(index)
    }
    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        self.log.entries(from, max_count, max_bytes)
    }
    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError> {
        self.log.append_leader(term, body)
    }
    fn append_follower(&mut self, e: &LogEntry) -> Result<(), LogError> {
        self.log.append_follower(e)
    }
    fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), LogError> {
        self.log.truncate_after(keep)?;
        self.flushed = self.flushed.min(keep);
        Ok(())
    }
    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        self.log.end_pos_of(index)
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
        let mut log = self.log;
        let disk = self.disk.crash(mode);
        if let Some(store) = log.take() {
            store.abandon();
        }
        StoreSimLog::open(disk)
    }
    fn flush(&mut self) -> Option<Index> {
        if let Ok(durable) = self.log.store_mut().flush() {
            self.flushed = self.end_index();
            // The adapter's not-yet-durable ring forgets what the flush covered.
            let _ = self.log.flushed_through(durable.0);
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
