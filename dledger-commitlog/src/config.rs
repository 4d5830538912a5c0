//! `LedgerConfig`: every limit and timing of the replicated log, with DLedger 0.3.1.2 defaults.
//!
//! A plain struct with public fields and `Default`; `validate()` rejects combinations that
//! would break the on-disk format. Storage options come first; consensus options may follow.

use std::time::Duration;

/// When an append counts as durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// DLedger behaviour: a background flush every `flush_interval_ms`; appends never wait.
    Async,
    /// Group commit: the flusher runs as soon as there is unflushed data, and one msync covers
    /// everything appended so far; callers await durability of their position.
    Sync,
}

/// Configuration of one replicated log (one DLedger member).
#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// Size of every data file (`mappedFileSizeForEntryData`). Must be equal on all members.
    pub data_segment_bytes: u64,
    /// Size of every index file (`mappedFileSizeForEntryIndex`), a multiple of 32.
    pub index_segment_bytes: u64,
    /// Durability mode of appends.
    pub flush_mode: FlushMode,
    /// Async mode: period of the background flush (`flushFileInterval`).
    pub flush_interval_ms: u64,
    /// Period of the checkpoint write (`checkPointInterval`).
    pub checkpoint_interval_ms: u64,
    /// Hours of the day (0..=23, local time) at which expired files are deleted (`deleteWhen`).
    pub delete_when_hours: Vec<u8>,
    /// Files younger than this are kept unless the disk is nearly full (`fileReservedHours`).
    pub file_reserved_hours: u64,
    /// Above this disk usage ratio expired files are deleted at any hour.
    pub disk_ratio_check_expired: f64,
    /// Above this ratio files are deleted regardless of age (if enabled); floor 0.50.
    pub disk_ratio_force_clean: f64,
    /// Whether deletion may ignore file age above `disk_ratio_force_clean`.
    pub disk_force_clean_enabled: bool,
    /// At most this many data files are deleted per cleaner pass.
    pub clean_max_files_per_pass: usize,
    /// Run the flusher and the next-file preallocator on background threads. The simulator
    /// turns this off and calls `Store::flush` itself, so runs are deterministic.
    pub background_threads: bool,
    /// Release the page cache of durable data more than this many bytes behind the writer
    /// (the index: an eighth of it), so new pages reuse just-freed memory. `None` (default)
    /// leaves the page cache to the kernel, as RocketMQ does: consumers a few GiB behind
    /// still read from memory, and once a long-running host's memory is full the kernel
    /// hands out reclaimed pages anyway. Worth setting on a VM that returns free memory to
    /// its host (free page reporting: first-touching such memory cost ~2.5 ms of CPU per
    /// MiB here, against ~0.3 for recycled memory) while it still has lots of it free.
    /// Property `dLedgerReleaseCacheBehindBytes` (0: never).
    pub release_cache_behind_bytes: Option<u64>,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            data_segment_bytes: 1 << 30,
            index_segment_bytes: 32 * 5 * 1024 * 1024,
            flush_mode: FlushMode::Async,
            flush_interval_ms: 10,
            checkpoint_interval_ms: 3000,
            delete_when_hours: vec![4],
            file_reserved_hours: 72,
            disk_ratio_check_expired: 0.70,
            disk_ratio_force_clean: 0.85,
            disk_force_clean_enabled: true,
            clean_max_files_per_pass: 10,
            background_threads: true,
            release_cache_behind_bytes: None,
        }
    }
}

/// A configuration value that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid ledger config: {0}")]
pub struct ConfigError(pub String);

/// Smallest data segment: room for a header, a one-byte body and a blank record.
pub const MIN_DATA_SEGMENT_BYTES: u64 = 64;

impl LedgerConfig {
    /// Checks the limits the store relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.data_segment_bytes < MIN_DATA_SEGMENT_BYTES
            || self.data_segment_bytes > i32::MAX as u64 + 1
        {
            return Err(ConfigError(format!(
                "data_segment_bytes {} outside {MIN_DATA_SEGMENT_BYTES}..=2^31",
                self.data_segment_bytes
            )));
        }
        if self.index_segment_bytes < 32 || !self.index_segment_bytes.is_multiple_of(32) {
            return Err(ConfigError(format!(
                "index_segment_bytes {} must be a positive multiple of 32",
                self.index_segment_bytes
            )));
        }
        if self.flush_interval_ms == 0 || self.checkpoint_interval_ms == 0 {
            return Err(ConfigError(
                "flush and checkpoint intervals must be > 0 ms".into(),
            ));
        }
        if let Some(h) = self.delete_when_hours.iter().find(|h| **h > 23) {
            return Err(ConfigError(format!("delete_when hour {h} > 23")));
        }
        let ratio_ok = |r: f64| (0.0..=1.0).contains(&r);
        if !ratio_ok(self.disk_ratio_check_expired) || !ratio_ok(self.disk_ratio_force_clean) {
            return Err(ConfigError("disk ratios must lie in 0.0..=1.0".into()));
        }
        Ok(())
    }

    /// Largest body an entry may carry: header plus body plus a trailing blank must fit a file.
    pub fn max_body_bytes(&self) -> u64 {
        self.data_segment_bytes - crate::format::entry::HEADER_BYTES as u64 - 8
    }

    /// The force-clean ratio with DLedger's floor of 0.50 applied.
    pub fn force_clean_ratio(&self) -> f64 {
        self.disk_ratio_force_clean.max(0.50)
    }

    /// Usage above which appends fail with a definite "disk full": min(force + 0.05, 0.95).
    pub fn disk_full_ratio(&self) -> f64 {
        (self.force_clean_ratio() + 0.05).min(0.95)
    }

    /// Background flush period.
    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_ms)
    }

    /// Checkpoint period.
    pub fn checkpoint_interval(&self) -> Duration {
        Duration::from_millis(self.checkpoint_interval_ms)
    }
}
