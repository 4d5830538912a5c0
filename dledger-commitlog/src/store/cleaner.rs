//! Space reclamation (spec/dledger.md §2.6) with the caller's clock and disk usage passed in,
//! so the decision is testable: delete the oldest data files (and the index files below the
//! new first index) when they are expired at a `deleteWhen` hour, or earlier when the disk is
//! filling up; never past the caller's floor; set the definite disk-full flag.

use std::sync::atomic::Ordering;

use super::error::StoreError;
use super::segment::Kind;
use super::shared::store_opt;
use super::writer::Store;
use crate::config::LedgerConfig;
use crate::format::entry::{decode_header, HEADER_BYTES};
use crate::format::index::INDEX_ENTRY_BYTES;
use crate::types::Index;

/// Inputs of one cleaner pass.
#[derive(Debug, Clone, Copy)]
pub struct CleanInput {
    /// Wall clock, Unix ms (compared with file modification times).
    pub now_ms: u64,
    /// Local hour of day (0..=23), matched against `delete_when_hours`.
    pub local_hour: u8,
    /// Used fraction of the disk holding the store (0.0..=1.0).
    pub disk_usage_ratio: f64,
    /// Entries at or above this index are never deleted (e.g. the lowest index a live follower
    /// still needs, capped at committed + 1).
    pub keep_from: Index,
}

/// What a cleaner pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanReport {
    /// Data files deleted.
    pub deleted_data_files: Vec<String>,
    /// Index files deleted.
    pub deleted_index_files: usize,
    /// Appends are refused with `DiskFull` until usage drops.
    pub disk_full: bool,
    /// First index after the pass.
    pub begin_index: Option<Index>,
}

/// One candidate file: its modification time and the first index of the *next* file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) modified_ms: u64,
    pub(crate) next_first_index: Option<Index>,
}

/// Pure decision: how many of the oldest files (in order, the current file excluded by the
/// caller) to delete.
pub(crate) fn files_to_delete(
    cfg: &LedgerConfig,
    input: &CleanInput,
    files: &[Candidate],
) -> usize {
    let at_hour = cfg.delete_when_hours.contains(&input.local_hour);
    let filling = input.disk_usage_ratio > cfg.disk_ratio_check_expired;
    let force = cfg.disk_force_clean_enabled && input.disk_usage_ratio > cfg.force_clean_ratio();
    if !(at_hour || filling || force) {
        return 0;
    }
    let reserved_ms = cfg.file_reserved_hours.max(1) * 3_600_000;
    let mut n = 0;
    for f in files.iter().take(cfg.clean_max_files_per_pass) {
        let expired = f.modified_ms.saturating_add(reserved_ms) < input.now_ms;
        let below_floor = f.next_first_index.is_some_and(|i| i <= input.keep_from);
        if !((expired || force) && below_floor) {
            break;
        }
        n += 1;
    }
    n
}

impl Store {
    /// One cleaner pass (call every ~100 ms from the runtime with the current time and usage).
    pub fn clean(&mut self, input: CleanInput) -> Result<CleanReport, StoreError> {
        let cfg = &self.sh.cfg;
        let disk_full = input.disk_usage_ratio > cfg.disk_full_ratio();
        if disk_full != self.sh.disk_full.swap(disk_full, Ordering::AcqRel) {
            if disk_full {
                tracing::error!(
                    usage = input.disk_usage_ratio,
                    "disk full: refusing appends"
                );
            } else {
                tracing::info!(
                    usage = input.disk_usage_ratio,
                    "disk usage back below the limit: accepting appends"
                );
            }
        }
        let mut report = CleanReport {
            disk_full,
            ..CleanReport::default()
        };
        let segs = self.sh.data.read().clone();
        let listed = self
            .sh
            .dir
            .list(Kind::Data)
            .map_err(|e| StoreError::io("list", "data", e))?;
        let mtime = |name: &str| {
            listed
                .iter()
                .find(|l| name.ends_with(&l.name))
                .map_or(u64::MAX, |l| l.modified_ms)
        };
        // The file holding the write position and everything after it are never candidates.
        let live = segs
            .iter()
            .position(|s| s.end() > self.write_pos)
            .unwrap_or(segs.len().saturating_sub(1));
        let candidates: Vec<Candidate> = segs[..live]
            .iter()
            .enumerate()
            .map(|(i, s)| Candidate {
                modified_ms: mtime(&s.name()),
                next_first_index: segs.get(i + 1).and_then(|n| {
                    n.with_slice(0, HEADER_BYTES, decode_header)
                        .ok()
                        .and_then(|h| h.ok())
                        .map(|h| h.index)
                }),
            })
            .collect();
        let n = files_to_delete(cfg, &input, &candidates);
        if n == 0 {
            report.begin_index = self.begin;
            return Ok(report);
        }
        let new_begin = candidates[n - 1].next_first_index;
        let removed: Vec<_> = self.sh.data.write().drain(..n).collect();
        for s in &removed {
            self.sh
                .dir
                .remove_segment(Kind::Data, s.start())
                .map_err(|e| StoreError::io("remove", s.name(), e))?;
            tracing::info!(file = %s.name(), "deleted expired data file");
            report.deleted_data_files.push(s.name());
        }
        self.begin = new_begin;
        store_opt(&self.sh.begin_index, self.begin);
        if self
            .committed
            .is_some_and(|c| new_begin.is_some_and(|b| c < b))
        {
            tracing::warn!("committed index below the new first index after cleaning");
        }
        // Index files wholly below the new first index go too.
        let floor = new_begin.map_or(0, |b| b.0 * INDEX_ENTRY_BYTES as u64);
        let removed_index: Vec<_> = {
            let mut idx = self.sh.index.write();
            let k = idx.iter().take_while(|s| s.end() <= floor).count();
            idx.drain(..k).collect()
        };
        for s in &removed_index {
            self.sh
                .dir
                .remove_segment(Kind::Index, s.start())
                .map_err(|e| StoreError::io("remove", s.name(), e))?;
        }
        report.deleted_index_files = removed_index.len();
        report.begin_index = self.begin;
        Ok(report)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn input(now_ms: u64, hour: u8, usage: f64, keep_from: u64) -> CleanInput {
        CleanInput {
            now_ms,
            local_hour: hour,
            disk_usage_ratio: usage,
            keep_from: Index(keep_from),
        }
    }

    #[test]
    fn deletes_expired_files_only_at_the_hour_and_never_past_the_floor() {
        let cfg = LedgerConfig {
            file_reserved_hours: 1,
            ..LedgerConfig::default()
        };
        let hour = 3_600_000;
        let files = [
            Candidate {
                modified_ms: 0,
                next_first_index: Some(Index(10)),
            },
            Candidate {
                modified_ms: 0,
                next_first_index: Some(Index(20)),
            },
            Candidate {
                modified_ms: 5 * hour,
                next_first_index: Some(Index(30)),
            },
        ];
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 3, 0.1, 100), &files),
            0,
            "not the hour"
        );
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 4, 0.1, 100), &files),
            2,
            "two expired"
        );
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 4, 0.1, 15), &files),
            1,
            "floor"
        );
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 10, 0.75, 100), &files),
            2,
            "filling disk, any hour"
        );
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 10, 0.9, 100), &files),
            3,
            "force ignores age"
        );
        assert_eq!(
            files_to_delete(&cfg, &input(2 * hour, 10, 0.9, 25), &files),
            2,
            "force still keeps the floor"
        );
    }
}
