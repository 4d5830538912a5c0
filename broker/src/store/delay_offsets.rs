//! Delay (schedule) offsets: `config/delayOffset.json`, delay level (1-based) → consumed offset
//! in `SCHEDULE_TOPIC_XXXX` queue `level - 1`.
//!
//! Two sources of progress are kept per level, and the schedule service resumes from the
//! larger one ([`DelayOffsetTable::get`]):
//!
//! * the **service offset**: what the schedule service itself advanced on this broker, or
//!   what slave sync / the change-to-master pull copied from a master (Java's only source;
//!   up to one sync interval old after a failover);
//! * the **log-derived offset**: every delivered message carries
//!   [`SCHEDULE_ORIGIN_PROPERTY`] (level, schedule-queue offset and physical offset of the
//!   unit it came from); the dispatcher, which runs on every member over committed entries,
//!   records one past the highest origin offset it saw ([`DelayOffsetTable::note_delivered`]).
//!   So every replica knows exactly which deliveries are committed, and a new master never
//!   re-delivers them (MP-12: 0 duplicates instead of "≤ one sync interval").
//!
//! Invariants: log-derived offsets only grow (committed entries are never truncated, R6, and
//! updates are `max`); a snapshot (GET_ALL_DELAY_OFFSET, `delayOffset.json`) holds the larger
//! of both sources, so Java tools and slaves see the real progress. The log-derived table is
//! persisted with the log index it is complete through in `config/delayOffsetFromLog.json`;
//! after a restart the dispatcher re-reads committed entries from that index on (for the
//! markers only), so progress committed after the last persist is not forgotten. A missing
//! file means "complete through nothing": the whole local log is re-read once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::{config_dir, now_ms, DataVersion, StoreError};
use crate::atomic_json::{load_json, parse_json_lenient, write_json_atomic};
use dashmap::DashMap;
use serde::{Deserialize, Serialize};

/// File name under `<storePathRootDir>/config`.
pub const DELAY_OFFSET_FILE: &str = "delayOffset.json";
/// Log-derived progress (this implementation only; Java brokers never read it).
pub const DELAY_FROM_LOG_FILE: &str = "delayOffsetFromLog.json";

/// Property the schedule service puts on every message it delivers to the real topic:
/// `<level>:<schedule queue offset>:<physical offset of the schedule record>`. The name uses
/// a lower-case dotted form RocketMQ never uses for its own keys, so it cannot collide with
/// a Java property; consumers see it as one more (internal) user property, like `REAL_TOPIC`.
pub const SCHEDULE_ORIGIN_PROPERTY: &str = "rdlrs.scheduleOrigin";

/// Where a delivered delayed message came from in `SCHEDULE_TOPIC_XXXX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleOrigin {
    /// Delay level, 1-based (queue id = level - 1).
    pub level: i32,
    /// Offset of the unit in the level's schedule queue.
    pub queue_offset: i64,
    /// Physical offset of the schedule record (checked against the unit on dispatch, so a
    /// copied or forged value never moves progress).
    pub physical_offset: i64,
}

impl ScheduleOrigin {
    /// The property value.
    pub fn encode(&self) -> String {
        format!(
            "{}:{}:{}",
            self.level, self.queue_offset, self.physical_offset
        )
    }

    /// Parses a property value; `None` for anything malformed.
    pub fn parse(v: &[u8]) -> Option<ScheduleOrigin> {
        let s = std::str::from_utf8(v).ok()?;
        let mut it = s.split(':');
        let level = it.next()?.parse::<i32>().ok().filter(|l| *l >= 1)?;
        let queue_offset = it.next()?.parse::<i64>().ok().filter(|o| *o >= 0)?;
        let physical_offset = it.next()?.parse::<i64>().ok().filter(|p| *p >= 0)?;
        if it.next().is_some() {
            return None;
        }
        Some(ScheduleOrigin {
            level,
            queue_offset,
            physical_offset,
        })
    }
}

/// Body of GET_ALL_DELAY_OFFSET and the content of `delayOffset.json` (4.x files have no
/// `dataVersion`).
pub use remoting::body::DelayOffsetSerializeWrapper;

/// Content of [`DELAY_FROM_LOG_FILE`].
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FromLogFile {
    /// Log index the table is complete through (-1: nothing).
    through_index: i64,
    /// Level → one past the highest delivered schedule-queue offset.
    offset_table: std::collections::BTreeMap<i32, i64>,
}

/// The schedule service's progress per delay level.
#[derive(Debug)]
pub struct DelayOffsetTable {
    path: PathBuf,
    from_log_path: PathBuf,
    offsets: DashMap<i32, i64>,
    from_log: DashMap<i32, i64>,
    from_log_through: AtomicI64,
    data_version: Mutex<DataVersion>,
    persist_lock: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl DelayOffsetTable {
    /// Loads `<store_root>/config/delayOffset.json` and the log-derived table if present.
    pub fn open(store_root: &Path) -> Result<Self, StoreError> {
        let dir = config_dir(store_root);
        let t = Self {
            path: dir.join(DELAY_OFFSET_FILE),
            from_log_path: dir.join(DELAY_FROM_LOG_FILE),
            offsets: DashMap::new(),
            from_log: DashMap::new(),
            from_log_through: AtomicI64::new(-1),
            data_version: Mutex::new(DataVersion::new(now_ms())),
            persist_lock: Mutex::new(()),
        };
        if let Some(w) = load_json::<DelayOffsetSerializeWrapper>(&t.path)? {
            t.replace(w);
        }
        if let Some(f) = load_json::<FromLogFile>(&t.from_log_path)? {
            for (k, v) in f.offset_table {
                t.from_log.insert(k, v);
            }
            t.from_log_through
                .store(f.through_index.max(-1), Ordering::Release);
        }
        Ok(t)
    }

    fn replace(&self, w: DelayOffsetSerializeWrapper) {
        self.offsets.clear();
        for (k, v) in w.offset_table {
            self.offsets.insert(k, v);
        }
        if let Some(v) = w.data_version {
            *lock(&self.data_version) = v;
        }
    }

    /// Where the schedule service resumes `level` (1-based): the larger of the service
    /// offset and the log-derived offset, if any.
    pub fn get(&self, level: i32) -> Option<i64> {
        let a = self.offsets.get(&level).map(|v| *v);
        let b = self.delivered(level);
        a.max(b)
    }

    /// The service offset of `level` alone (this broker's own progress or the synced one).
    pub fn service_offset(&self, level: i32) -> Option<i64> {
        self.offsets.get(&level).map(|v| *v)
    }

    /// The log-derived offset of `level`: one past the highest schedule-queue offset whose
    /// delivery this member has seen committed.
    pub fn delivered(&self, level: i32) -> Option<i64> {
        self.from_log.get(&level).map(|v| *v)
    }

    /// Sets the service offset of `level`.
    pub fn update(&self, level: i32, offset: i64) {
        self.offsets.insert(level, offset);
    }

    /// Dispatcher: a committed delivery of `origin` was seen (never moves backwards).
    pub fn note_delivered(&self, origin: &ScheduleOrigin) {
        let next = origin.queue_offset.saturating_add(1);
        let mut e = self.from_log.entry(origin.level).or_insert(next);
        if *e < next {
            *e = next;
        }
    }

    /// Dispatcher: every committed entry up to `index` has been looked at.
    pub fn mark_dispatched_through(&self, index: i64) {
        self.from_log_through.fetch_max(index, Ordering::AcqRel);
    }

    /// Log index the log-derived table is known complete through (-1: nothing); the
    /// dispatcher re-reads from the next one after a restart.
    pub fn delivered_through(&self) -> i64 {
        self.from_log_through.load(Ordering::Acquire)
    }

    /// Snapshot for GET_ALL_DELAY_OFFSET and persistence: per level the larger of both
    /// sources.
    pub fn snapshot(&self) -> DelayOffsetSerializeWrapper {
        let mut table: std::collections::HashMap<i32, i64> = self
            .offsets
            .iter()
            .map(|e| (*e.key(), *e.value()))
            .collect();
        for e in self.from_log.iter() {
            let v = table.entry(*e.key()).or_insert(*e.value());
            *v = (*v).max(*e.value());
        }
        DelayOffsetSerializeWrapper {
            data_version: Some(lock(&self.data_version).clone()),
            offset_table: table.into_iter().collect(),
        }
    }

    /// JSON body of GET_ALL_DELAY_OFFSET.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot()).unwrap_or_default()
    }

    /// Parses a GET_ALL_DELAY_OFFSET body (accepts fastjson's bare integer keys).
    pub fn parse_body(body: &[u8]) -> Result<DelayOffsetSerializeWrapper, serde_json::Error> {
        parse_json_lenient(&String::from_utf8_lossy(body))
    }

    /// Slave sync / changeToMaster reload: Java writes the master's body to the file and
    /// reloads it, i.e. replaces the service offsets; the log-derived ones stay. Persists.
    pub fn apply_snapshot(&self, master: DelayOffsetSerializeWrapper) -> Result<(), StoreError> {
        self.replace(master);
        self.persist()
    }

    /// Writes `delayOffset.json` and the log-derived table atomically.
    pub fn persist(&self) -> Result<(), StoreError> {
        let _g = lock(&self.persist_lock);
        // The mark first, then the table: the table then holds at least everything up to
        // the mark (later updates only add).
        let through = self.delivered_through();
        let from_log = FromLogFile {
            through_index: through,
            offset_table: self
                .from_log
                .iter()
                .map(|e| (*e.key(), *e.value()))
                .collect(),
        };
        write_json_atomic(&self.path, &self.snapshot())?;
        write_json_atomic(&self.from_log_path, &from_log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(level: i32, queue_offset: i64) -> ScheduleOrigin {
        ScheduleOrigin {
            level,
            queue_offset,
            physical_offset: 100,
        }
    }

    #[test]
    fn origin_round_trips_and_rejects_garbage() {
        let o = origin(3, 41);
        assert_eq!(ScheduleOrigin::parse(o.encode().as_bytes()), Some(o));
        for bad in [
            "", "1", "1:2", "0:1:2", "1:-1:2", "1:2:3:4", "a:b:c", "1:2:-3",
        ] {
            assert_eq!(ScheduleOrigin::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn log_derived_progress_wins_never_regresses_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let t = DelayOffsetTable::open(dir.path()).unwrap();
        assert_eq!(t.delivered_through(), -1);
        t.update(1, 2);
        t.note_delivered(&origin(1, 4));
        t.note_delivered(&origin(1, 1));
        t.mark_dispatched_through(9);
        t.mark_dispatched_through(3);
        assert_eq!(
            (t.get(1), t.delivered(1), t.delivered_through()),
            (Some(5), Some(5), 9)
        );
        // A stale master snapshot replaces the service offset only.
        let stale = DelayOffsetTable::parse_body(br#"{"offsetTable":{1:0,2:7}}"#).unwrap();
        t.apply_snapshot(stale).unwrap();
        assert_eq!(
            (t.get(1), t.service_offset(1), t.get(2)),
            (Some(5), Some(0), Some(7))
        );
        assert_eq!(t.snapshot().offset_table.get(&1), Some(&5));
        let t2 = DelayOffsetTable::open(dir.path()).unwrap();
        assert_eq!(
            (t2.get(1), t2.delivered(1), t2.delivered_through()),
            (Some(5), Some(5), 9)
        );
    }
}
