//! In-memory [`RaftLog`] with a crash model, for unit tests and the simulator.
//!
//! Positions reproduce the data-file address space without segment padding: an entry of body
//! size n occupies 48 + n bytes right after the previous one. `flush_to` marks a prefix
//! durable; [`MemLog::after_power_loss`] keeps that prefix plus any prefix of the unflushed tail
//! (page write-back order), which is what a torn tail looks like after recovery truncated the
//! partial entry. A process crash keeps everything (page cache survives).

use bytes::Bytes;
use std::collections::VecDeque;

use super::log::{Index, LogEntry, LogError, Pos, RaftLog, Term};
use crate::wire::messages::ENTRY_HEADER_BYTES;

/// In-memory log; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct MemLog {
    /// Index of `entries[0]`.
    begin: Index,
    /// Position of `entries[0]` (or of the next append when empty).
    begin_pos: Pos,
    entries: VecDeque<LogEntry>,
    /// Last index known durable (-1 / begin-1 when none).
    flushed: Index,
    /// Fail appends with DiskFull (simulated ENOSPC).
    pub disk_full: bool,
}

fn entry_size(body: &Bytes) -> Pos {
    i64::try_from(body.len()).unwrap_or(i64::MAX / 2) + i64::from(ENTRY_HEADER_BYTES)
}

impl MemLog {
    /// An empty log starting at index 0, pos 0.
    pub fn new() -> Self {
        MemLog {
            flushed: -1,
            ..Default::default()
        }
    }

    /// Position where the next entry will be written.
    pub fn next_pos(&self) -> Pos {
        self.entries
            .back()
            .map_or(self.begin_pos, |e| e.pos + entry_size(&e.body))
    }

    /// Last durable index.
    pub fn flushed_index(&self) -> Index {
        self.flushed
    }

    /// Mark everything up to `index` (clamped to the end) durable.
    pub fn flush_to(&mut self, index: Index) {
        self.flushed = self.flushed.max(index.min(self.end_index()));
    }

    /// The log as found after a power loss: the flushed prefix plus the first `extra` unflushed
    /// entries that happened to reach the disk.
    pub fn after_power_loss(&self, extra: usize) -> MemLog {
        let mut log = self.clone();
        let keep = self
            .flushed
            .saturating_add(i64::try_from(extra).unwrap_or(i64::MAX / 2));
        let keep = keep.min(self.end_index());
        // Truncation cannot fail for an index inside [begin-1, end].
        let _ = log.truncate_after(keep.max(self.begin - 1));
        log.flushed = log.end_index();
        log
    }

    /// Delete entries below `index` (retention), as the store's cleaner does.
    pub fn delete_before(&mut self, index: Index) {
        while self.begin < index && !self.entries.is_empty() {
            if let Some(e) = self.entries.pop_front() {
                self.begin_pos = e.pos + entry_size(&e.body);
            }
            self.begin += 1;
        }
    }

    /// All retained entries (for checkers).
    pub fn iter(&self) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter()
    }

    fn slot(&self, index: Index) -> Option<usize> {
        if index < self.begin {
            return None;
        }
        let i = usize::try_from(index - self.begin).ok()?;
        (i < self.entries.len()).then_some(i)
    }
}

impl RaftLog for MemLog {
    fn begin_index(&self) -> Index {
        self.begin
    }
    fn end_index(&self) -> Index {
        self.begin + i64::try_from(self.entries.len()).unwrap_or(i64::MAX / 2) - 1
    }
    fn end_term(&self) -> Term {
        self.entries.back().map_or(-1, |e| e.term)
    }
    fn term_at(&self, index: Index) -> Option<Term> {
        self.slot(index).map(|i| self.entries[i].term)
    }
    fn entries(
        &self,
        from: Index,
        max_count: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        let start = self.slot(from).ok_or(LogError::OutOfRange {
            index: from,
            begin: self.begin,
            end: self.end_index(),
        })?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for e in self.entries.iter().skip(start).take(max_count) {
            if !out.is_empty() && bytes.saturating_add(e.body.len()) > max_bytes {
                break;
            }
            bytes = bytes.saturating_add(e.body.len());
            out.push(e.clone());
        }
        Ok(out)
    }
    fn append_leader(&mut self, term: Term, body: Bytes) -> Result<(Index, Pos), LogError> {
        if self.disk_full {
            return Err(LogError::DiskFull);
        }
        let index = self.end_index() + 1;
        let pos = self.next_pos();
        self.entries.push_back(LogEntry {
            index,
            term,
            pos,
            body,
        });
        Ok((index, pos))
    }
    fn append_follower(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        if self.disk_full {
            return Err(LogError::DiskFull);
        }
        let end = self.end_index();
        if entry.index != end + 1 {
            return Err(LogError::NotNext {
                index: entry.index,
                end,
            });
        }
        let pos = self.next_pos();
        if entry.pos != pos {
            return Err(LogError::PosMismatch {
                expected: entry.pos,
                actual: pos,
            });
        }
        self.entries.push_back(entry.clone());
        Ok(())
    }
    fn truncate_after(&mut self, index: Index) -> Result<(), LogError> {
        let end = self.end_index();
        if index < self.begin - 1 || index > end {
            return Err(LogError::OutOfRange {
                index,
                begin: self.begin,
                end,
            });
        }
        let keep = usize::try_from(index + 1 - self.begin).unwrap_or(0);
        self.entries.truncate(keep);
        self.flushed = self.flushed.min(index);
        Ok(())
    }
    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        self.slot(index).map(|i| {
            let e = &self.entries[i];
            e.pos + entry_size(&e.body)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_the_data_layout_and_followers_must_match_them() {
        let mut l = MemLog::new();
        assert_eq!((l.begin_index(), l.end_index(), l.end_term()), (0, -1, -1));
        assert_eq!(
            l.append_leader(1, Bytes::from_static(b"abc")).unwrap(),
            (0, 0)
        );
        assert_eq!(l.append_leader(1, Bytes::new()).unwrap(), (1, 51));
        assert_eq!(l.end_pos_of(1), Some(99));
        let mut f = MemLog::new();
        let e0 = l.entry(0).unwrap();
        let mut e1 = l.entry(1).unwrap();
        assert!(matches!(
            f.append_follower(&e1),
            Err(LogError::NotNext { .. })
        ));
        f.append_follower(&e0).unwrap();
        e1.pos += 1;
        assert!(matches!(
            f.append_follower(&e1),
            Err(LogError::PosMismatch { .. })
        ));
    }

    #[test]
    fn power_loss_keeps_flushed_prefix_plus_some_tail() {
        let mut l = MemLog::new();
        for t in 0..5 {
            l.append_leader(1, Bytes::from(vec![t; 4])).unwrap();
        }
        l.flush_to(1);
        assert_eq!(l.after_power_loss(0).end_index(), 1);
        assert_eq!(l.after_power_loss(2).end_index(), 3);
        assert_eq!(l.after_power_loss(99).end_index(), 4);
        l.truncate_after(0).unwrap();
        assert_eq!(l.flushed_index(), 0);
        assert_eq!(l.entries(0, 10, 0).unwrap().len(), 1);
        l.delete_before(1);
        assert_eq!((l.begin_index(), l.end_index()), (1, 0));
        assert_eq!(l.append_leader(2, Bytes::new()).unwrap(), (1, 52));
    }
}
