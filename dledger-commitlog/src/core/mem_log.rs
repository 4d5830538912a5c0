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
    /// Index of `entries[0]` (or of the next append when empty).
    begin: Index,
    /// Position of `entries[0]` (or of the next append when empty).
    begin_pos: Pos,
    entries: VecDeque<LogEntry>,
    /// Last index known durable (none, or below begin, when nothing is).
    flushed: Option<Index>,
    /// Fail appends with DiskFull (simulated ENOSPC).
    pub disk_full: bool,
}

fn entry_size(body: &Bytes) -> u64 {
    body.len() as u64 + u64::from(ENTRY_HEADER_BYTES.unsigned_abs())
}

impl MemLog {
    /// An empty log starting at index 0, pos 0.
    pub fn new() -> Self {
        MemLog::default()
    }

    /// Position where the next entry will be written.
    pub fn next_pos(&self) -> Pos {
        self.entries
            .back()
            .map_or(self.begin_pos, |e| e.pos.plus(entry_size(&e.body)))
    }

    /// Last durable index.
    pub fn flushed_index(&self) -> Option<Index> {
        self.flushed
    }

    /// Mark everything up to `index` (clamped to the end) durable.
    pub fn flush_to(&mut self, index: Option<Index>) {
        self.flushed = self.flushed.max(index.min(self.end_index()));
    }

    /// The log as found after a power loss: the flushed prefix plus the first `extra` unflushed
    /// entries that happened to reach the disk.
    pub fn after_power_loss(&self, extra: usize) -> MemLog {
        let mut log = self.clone();
        let kept = Index::count_through(self.flushed).saturating_add(extra as u64);
        let keep = Index::last_of_count(kept).min(self.end_index());
        // Truncation cannot fail for an index inside [begin-1, end].
        let _ = log.truncate_after(keep.max(self.begin.prev()));
        log.flushed = log.end_index();
        log
    }

    /// Delete entries below `index` (retention), as the store's cleaner does.
    pub fn delete_before(&mut self, index: Index) {
        while self.begin < index && !self.entries.is_empty() {
            if let Some(e) = self.entries.pop_front() {
                self.begin_pos = e.pos.plus(entry_size(&e.body));
            }
            self.begin = self.begin.next();
        }
    }

    /// All retained entries (for checkers).
    pub fn iter(&self) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter()
    }

    fn slot(&self, index: Index) -> Option<usize> {
        let i = usize::try_from(index.0.checked_sub(self.begin.0)?).ok()?;
        (i < self.entries.len()).then_some(i)
    }
}

impl RaftLog for MemLog {
    fn begin_index(&self) -> Index {
        self.begin
    }
    fn end_index(&self) -> Option<Index> {
        match self.entries.back() {
            Some(e) => Some(e.index),
            None => self.begin.prev(),
        }
    }
    fn end_term(&self) -> Option<Term> {
        self.entries.back().map(|e| e.term)
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
            begin: Some(self.begin),
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
        let index = self.next_index();
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
        if entry.index != Index::after(end) {
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
    fn truncate_after(&mut self, keep: Option<Index>) -> Result<(), LogError> {
        let end = self.end_index();
        let kept = Index::count_through(keep).checked_sub(self.begin.0);
        let Some(kept) = kept.filter(|_| keep <= end) else {
            return Err(LogError::OutOfRange {
                index: keep.unwrap_or(Index::ZERO),
                begin: Some(self.begin),
                end,
            });
        };
        self.entries.truncate(usize::try_from(kept).unwrap_or(0));
        self.flushed = self.flushed.min(keep);
        Ok(())
    }
    fn end_pos_of(&self, index: Index) -> Option<Pos> {
        self.slot(index).map(|i| {
            let e = &self.entries[i];
            e.pos.plus(entry_size(&e.body))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_the_data_layout_and_followers_must_match_them() {
        let mut l = MemLog::new();
        assert_eq!(
            (l.begin_index(), l.end_index(), l.end_term()),
            (Index(0), None, None)
        );
        assert_eq!(
            l.append_leader(Term(1), Bytes::from_static(b"abc"))
                .unwrap(),
            (Index(0), Pos(0))
        );
        assert_eq!(
            l.append_leader(Term(1), Bytes::new()).unwrap(),
            (Index(1), Pos(51))
        );
        assert_eq!(l.end_pos_of(Index(1)), Some(Pos(99)));
        let mut f = MemLog::new();
        let e0 = l.entry(Index(0)).unwrap();
        let mut e1 = l.entry(Index(1)).unwrap();
        assert!(matches!(
            f.append_follower(&e1),
            Err(LogError::NotNext { .. })
        ));
        f.append_follower(&e0).unwrap();
        e1.pos = e1.pos.plus(1);
        assert!(matches!(
            f.append_follower(&e1),
            Err(LogError::PosMismatch { .. })
        ));
    }

    #[test]
    fn power_loss_keeps_flushed_prefix_plus_some_tail() {
        let mut l = MemLog::new();
        for t in 0..5 {
            l.append_leader(Term(1), Bytes::from(vec![t; 4])).unwrap();
        }
        l.flush_to(Some(Index(1)));
        assert_eq!(l.after_power_loss(0).end_index(), Some(Index(1)));
        assert_eq!(l.after_power_loss(2).end_index(), Some(Index(3)));
        assert_eq!(l.after_power_loss(99).end_index(), Some(Index(4)));
        l.truncate_after(Some(Index(0))).unwrap();
        assert_eq!(l.flushed_index(), Some(Index(0)));
        assert_eq!(l.entries(Index(0), 10, 0).unwrap().len(), 1);
        l.delete_before(Index(1));
        assert_eq!((l.begin_index(), l.end_index()), (Index(1), Some(Index(0))));
        assert_eq!(
            l.append_leader(Term(2), Bytes::new()).unwrap(),
            (Index(1), Pos(52))
        );
        // Emptied by retention: the end stays the entry before begin; truncating below that
        // is refused.
        l.delete_before(Index(2));
        assert_eq!((l.begin_index(), l.end_index()), (Index(2), Some(Index(1))));
        assert!(l.truncate_after(Some(Index(0))).is_err());
        assert!(l.truncate_after(Some(Index(1))).is_ok());
    }
}
