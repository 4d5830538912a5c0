//! Encoded PUSH entry objects shared by one leader's peer tasks.
//!
//! Every follower is sent the same entries, and most of a PUSH body is those entries as JSON
//! objects (bodies in base64: the costly part of building it). The first peer task to send
//! an entry encodes its object and keeps it here; pushes of the same entry to the other
//! followers copy it. The wire bytes are unchanged: an entry's object depends only on the
//! entry.
//!
//! An entry is recognised by index, term, position and its body buffer (address and length):
//! a leader's cached entries share one `Bytes` with every push that carries them, and an
//! entry read again from the data file simply misses. Kept: a contiguous run of indexes,
//! bounded by [`MAX_ENTRIES`] and [`MAX_BYTES`] (oldest dropped first); an entry that does
//! not extend the run restarts it. The lock is held only to look up and to insert, never
//! while encoding.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};

use crate::wire::messages::{DLedgerEntry, PushEntryRequest};
use crate::wire::push_json::{encode_entry, encode_push_request_with, encoded_size_hint};

/// Most entry objects kept.
const MAX_ENTRIES: usize = 8192;
/// Most encoded bytes kept.
const MAX_BYTES: usize = 16 << 20;

/// What identifies an entry's encoding (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Key {
    index: i64,
    term: i64,
    pos: i64,
    body_addr: usize,
    body_len: usize,
}

impl Key {
    fn of(e: &DLedgerEntry) -> Self {
        Key {
            index: e.index,
            term: e.term,
            pos: e.pos,
            body_addr: e.body.as_ptr() as usize,
            body_len: e.body.len(),
        }
    }
}

/// An encoded entry object: a range of a buffer holding the objects of several entries
/// (those encoded together), so a push clones one reference per buffer, not per entry (the
/// peer tasks run on different threads: per-entry reference counts would bounce between
/// them).
#[derive(Clone)]
struct Object {
    buf: Bytes,
    start: usize,
    end: usize,
}

impl Object {
    fn len(&self) -> usize {
        self.end - self.start
    }
}

#[derive(Default)]
struct Run {
    /// Consecutive indexes, oldest first.
    items: VecDeque<(Key, Object)>,
    /// Bytes of the objects held (not of the buffers behind them).
    bytes: usize,
}

impl Run {
    fn get(&self, k: &Key) -> Option<&Object> {
        let first = self.items.front()?.0.index;
        let at = usize::try_from(k.index.checked_sub(first)?).ok()?;
        self.items
            .get(at)
            .filter(|(have, _)| have == k)
            .map(|(_, o)| o)
    }

    fn insert(&mut self, k: Key, o: Object) {
        match self.items.back() {
            Some((last, _)) if last.index + 1 == k.index => {}
            Some((last, _)) if k.index <= last.index => {
                let first = self.items.front().map_or(k.index, |(f, _)| f.index);
                if k.index < first {
                    return; // older than the run: not worth keeping
                }
                let at = usize::try_from(k.index - first).unwrap_or(0);
                if self.items.get(at).is_some_and(|(have, _)| *have == k) {
                    return; // another peer task encoded it meanwhile
                }
                // Same index, other entry (a new term's entry, or a re-read body): the run
                // from here on is stale.
                while self.items.len() > at {
                    if let Some((_, old)) = self.items.pop_back() {
                        self.bytes -= old.len();
                    }
                }
            }
            Some(_) => {
                self.items.clear();
                self.bytes = 0;
            }
            None => {}
        }
        self.bytes += o.len();
        self.items.push_back((k, o));
        while self.items.len() > MAX_ENTRIES || self.bytes > MAX_BYTES {
            match self.items.pop_front() {
                Some((_, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }
}

/// Entry objects already encoded for one member's pushes (module docs). Shared by its peer
/// tasks.
#[derive(Default)]
pub(crate) struct EntryJsonCache {
    run: Mutex<Run>,
}

impl EntryJsonCache {
    fn lock(&self) -> MutexGuard<'_, Run> {
        self.run.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The JSON body of `r`, byte-identical to `encode_push_request(r)`, with the batch
    /// entries' objects taken from (or added to) the cache. Tests only: peer tasks append to
    /// a reused buffer with [`EntryJsonCache::encode_push_into`].
    #[cfg(test)]
    pub(crate) fn encode_push(&self, r: &PushEntryRequest) -> Vec<u8> {
        let mut out = BytesMut::new();
        self.encode_push_into(r, &mut out);
        out.to_vec()
    }

    /// Appends the JSON body of `r` (byte-identical to `encode_push_request(r)`) to `out`,
    /// with the batch entries' objects taken from (or added to) the cache.
    pub(crate) fn encode_push_into(&self, r: &PushEntryRequest, out: &mut BytesMut) {
        out.reserve(encoded_size_hint(r));
        if r.batch_entry.is_empty() {
            encode_push_request_with(out, r, encode_entry);
            return;
        }
        let keys: Vec<Key> = r.batch_entry.iter().map(Key::of).collect();
        // Buffers the objects of this push live in (each cloned once), and per entry the
        // buffer and range of its object.
        let mut bufs: Vec<Bytes> = Vec::new();
        let mut found: Vec<Option<(usize, usize, usize)>> = Vec::with_capacity(keys.len());
        {
            let run = self.lock();
            for k in &keys {
                found.push(run.get(k).map(|o| {
                    let same = bufs
                        .last()
                        .is_some_and(|b| b.as_ptr() == o.buf.as_ptr() && b.len() == o.buf.len());
                    if !same {
                        bufs.push(o.buf.clone());
                    }
                    (bufs.len() - 1, o.start, o.end)
                }));
            }
        }
        let missing: Vec<usize> = (0..found.len()).filter(|&i| found[i].is_none()).collect();
        if !missing.is_empty() {
            let sized: usize = missing
                .iter()
                .map(|&i| r.batch_entry[i].body.len() / 3 * 4 + 200)
                .sum();
            let mut fresh = Vec::with_capacity(sized);
            let mut ranges = Vec::with_capacity(missing.len());
            for &i in &missing {
                let start = fresh.len();
                encode_entry(&mut fresh, &r.batch_entry[i]);
                ranges.push((start, fresh.len()));
            }
            let fresh = Bytes::from(fresh);
            let id = bufs.len();
            bufs.push(fresh.clone());
            let mut run = self.lock();
            for (&i, &(start, end)) in missing.iter().zip(&ranges) {
                found[i] = Some((id, start, end));
                let buf = fresh.clone();
                run.insert(keys[i], Object { buf, start, end });
            }
        }
        let mut objects = found.into_iter();
        encode_push_request_with(out, r, |out, e| match objects.next().flatten() {
            Some((id, start, end)) => out.extend_from_slice(&bufs[id][start..end]),
            None => encode_entry(out, e),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Index, LogEntry, Pos, Term};
    use crate::wire::messages::{DLedgerCode, PushType};
    use crate::wire::push_json::encode_push_request;

    fn push(entries: &[LogEntry], remote: &str) -> PushEntryRequest {
        PushEntryRequest {
            batch_entry: entries.iter().map(DLedgerEntry::from).collect(),
            code: DLedgerCode::SUCCESS,
            commit_index: 3,
            entry: None,
            group: Some("g".into()),
            leader_id: Some("n0".into()),
            local_id: Some("n0".into()),
            remote_id: Some(remote.into()),
            term: 2,
            push_type: PushType::APPEND,
        }
    }

    /// Whatever mix of hits, misses, overlaps, gaps and replaced entries, the cached encoding
    /// is byte-identical to encoding afresh.
    #[test]
    fn cached_pushes_match_fresh_encoding() {
        let seed: u64 = std::env::var("PUSH_CACHE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0xcac4e);
        println!("push cache seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let cache = EntryJsonCache::default();
        let mut log: Vec<LogEntry> = Vec::new();
        let mut term = Term(1);
        for step in 0..2_000u32 {
            match next() % 8 {
                // A new leader term rewrites the tail (same indexes, other entries).
                0 if !log.is_empty() => {
                    let keep = log.len() - (next() % log.len().min(5) as u64) as usize;
                    log.truncate(keep);
                    term = Term(term.0 + 1);
                }
                _ => {
                    for _ in 0..(1 + next() % 4) {
                        let len = (next() % 200) as usize;
                        log.push(LogEntry {
                            index: Index(log.len() as u64),
                            term,
                            pos: Pos(log.len() as u64 * 300),
                            body: Bytes::from(vec![step as u8; len]),
                        });
                    }
                }
            }
            if log.is_empty() {
                continue;
            }
            let from = (next() % log.len() as u64) as usize;
            let to = (from + 1 + (next() % 6) as usize).min(log.len());
            // Sometimes a re-read copy of the same entries (other body buffers).
            let mut slice: Vec<LogEntry> = log[from..to].to_vec();
            if next() % 5 == 0 {
                for e in &mut slice {
                    e.body = Bytes::copy_from_slice(&e.body);
                }
            }
            for remote in ["n1", "n2"] {
                let r = push(&slice, remote);
                assert_eq!(
                    cache.encode_push(&r),
                    encode_push_request(&r),
                    "step {step}"
                );
            }
        }
        let run = cache.lock();
        assert!(!run.items.is_empty() && run.items.len() <= MAX_ENTRIES);
        assert_eq!(
            run.bytes,
            run.items.iter().map(|(_, j)| j.len()).sum::<usize>()
        );
    }

    #[test]
    fn second_follower_hits_and_the_run_stays_bounded() {
        let cache = EntryJsonCache::default();
        let entries: Vec<LogEntry> = (0..MAX_ENTRIES as u64 + 10)
            .map(|i| LogEntry {
                index: Index(i),
                term: Term(1),
                pos: Pos(i * 100),
                body: Bytes::from_static(b"abc"),
            })
            .collect();
        for chunk in entries.chunks(500) {
            let _ = cache.encode_push(&push(chunk, "n1"));
        }
        let run = cache.lock();
        assert_eq!(run.items.len(), MAX_ENTRIES);
        let last = DLedgerEntry::from(&entries[entries.len() - 1]);
        let hit = run
            .get(&Key::of(&last))
            .map(|o| o.buf.slice(o.start..o.end));
        let mut direct = Vec::new();
        encode_entry(&mut direct, &last);
        assert_eq!(hit.as_deref(), Some(&direct[..]));
        let first = DLedgerEntry::from(&entries[0]);
        assert!(run.get(&Key::of(&first)).is_none(), "oldest dropped");
    }
}
