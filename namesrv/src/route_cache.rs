//! Encoded GET_ROUTEINFO_BY_TOPIC answers, reused until anything that shapes a route changes.
//!
//! Route queries outnumber registrations by orders of magnitude (every client polls every
//! route every 30 s), so the JSON of a route is built once per table generation and then
//! served as shared bytes. Every mutation of the route table, the KV store or the switches
//! bumps the generation; an entry is served only while its generation is current. The map is
//! cleared when the first entry of a newer generation is stored, so it never holds more than
//! one generation's topics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use bytes::Bytes;

/// Route JSON by topic for the current generation.
#[derive(Debug, Default)]
pub struct RouteCache {
    generation: AtomicU64,
    entries: RwLock<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    generation: u64,
    by_topic: HashMap<String, Bytes>,
}

impl RouteCache {
    /// The current generation; read it while holding the table lock the route is built under.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks every cached route stale. Call after a mutation, before releasing its lock.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Cached route JSON of `topic`, if it is from the current generation.
    pub fn get(&self, topic: &str) -> Option<Bytes> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        if entries.generation != self.generation() {
            return None;
        }
        entries.by_topic.get(topic).cloned()
    }

    /// Stores `json` for `topic` as built at `generation`; dropped if that is already stale.
    pub fn put(&self, topic: &str, generation: u64, json: Bytes) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if generation != self.generation() {
            return;
        }
        if entries.generation != generation {
            entries.by_topic.clear();
            entries.generation = generation;
        }
        entries.by_topic.insert(topic.to_owned(), json);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_until_invalidated() {
        let cache = RouteCache::default();
        let g = cache.generation();
        cache.put("T", g, Bytes::from_static(b"a"));
        assert_eq!(cache.get("T").as_deref(), Some(&b"a"[..]));
        assert_eq!(cache.get("U"), None);
        cache.invalidate();
        assert_eq!(cache.get("T"), None);
    }

    #[test]
    fn stale_puts_are_dropped_and_old_generations_cleared() {
        let cache = RouteCache::default();
        let old = cache.generation();
        cache.put("T", old, Bytes::from_static(b"a"));
        cache.invalidate();
        cache.put("U", old, Bytes::from_static(b"stale"));
        assert_eq!(cache.get("U"), None);
        let new = cache.generation();
        cache.put("U", new, Bytes::from_static(b"b"));
        assert_eq!(cache.get("U").as_deref(), Some(&b"b"[..]));
        assert_eq!(cache.get("T"), None);
        assert_eq!(cache.entries.read().unwrap().by_topic.len(), 1);
    }
}
