//! [`ConsumeQueueSet`]: every consume queue of the broker keyed by (topic, queueId), found
//! on disk at open, created on first use; operations over all queues (truncation, minimum
//! correction, flush with the dispatch checkpoint, topic removal), the gap-safe marker and
//! the dispatcher's [`QueueCache`].

use std::borrow::Borrow;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use super::checkpoint::DispatchCheckpoint;
use super::{ConsumeQueue, StoreError};
use crate::message::record::DLEDGER_ENTRY_HEADER_LEN;

/// Owned key of a queue in [`ConsumeQueueSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct QueueKey {
    topic: String,
    queue_id: i32,
}

/// A (topic, queueId) seen through borrowed or owned text, so lookups (every dispatch step,
/// every pull) do not build an owned key.
trait QueueKeyView {
    fn topic(&self) -> &str;
    fn queue_id(&self) -> i32;
}

impl QueueKeyView for QueueKey {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn queue_id(&self) -> i32 {
        self.queue_id
    }
}

impl QueueKeyView for (&str, i32) {
    fn topic(&self) -> &str {
        self.0
    }
    fn queue_id(&self) -> i32 {
        self.1
    }
}

impl<'a> Borrow<dyn QueueKeyView + 'a> for QueueKey {
    fn borrow(&self) -> &(dyn QueueKeyView + 'a) {
        self
    }
}

// Owned and borrowed keys hash and compare alike (the `Borrow` contract).
impl Hash for dyn QueueKeyView + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.topic().hash(h);
        self.queue_id().hash(h);
    }
}

impl PartialEq for dyn QueueKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.queue_id() == other.queue_id() && self.topic() == other.topic()
    }
}

impl Eq for dyn QueueKeyView + '_ {}

impl Hash for QueueKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self as &dyn QueueKeyView).hash(h);
    }
}

/// Present under the consume-queue root once its queues were written by a dispatcher that keeps
/// every record at its own offset (holes for offsets nothing was dispatched to): a store
/// without it is re-checked against the whole log once (see the dispatcher).
pub const GAP_SAFE_FILE: &str = ".gapSafe";

/// Counts of what dispatch had to repair (see [`ConsumeQueue::append`]); each is also a log
/// line. Nonzero means a record reached a queue other than by plain appending.
#[derive(Debug, Default)]
pub struct QueueRepairs {
    /// Holes written for offsets no record was dispatched to.
    pub holes: AtomicU64,
    /// Records that filled an earlier hole at their own offset.
    pub filled: AtomicU64,
    /// Records appended at another offset than their own.
    pub renumbered: AtomicU64,
    /// Records that could not be put in any queue (bad topic or queue id in the log).
    pub dropped: AtomicU64,
}

/// All consume queues of the broker, keyed by (topic, queueId).
#[derive(Debug)]
pub struct ConsumeQueueSet {
    root: PathBuf,
    file_size: u64,
    queues: DashMap<QueueKey, Arc<ConsumeQueue>>,
    /// The dispatcher's progress and the dispatch checkpoint (checkpoint.rs).
    checkpoint: DispatchCheckpoint,
    /// Bumped after every removal of queues, so a holder of cached queue handles (the
    /// dispatcher's [`QueueCache`]) knows to drop them.
    removals: AtomicU64,
    /// What dispatch repaired.
    repairs: QueueRepairs,
}

/// Most queues a [`QueueCache`] holds.
const QUEUE_CACHE_LEN: usize = 64;

/// The queues one writer (the dispatcher) used last, found by a short scan instead of a
/// hashed map lookup per record; emptied whenever the set has removed queues since.
#[derive(Default)]
pub struct QueueCache {
    queues: Vec<Arc<ConsumeQueue>>,
    /// The set's removal count the cached handles are valid for.
    removals: u64,
    /// Next slot replaced once the cache is full.
    victim: usize,
}

impl QueueCache {
    /// The queue, created if missing ([`ConsumeQueueSet::get_or_create`]).
    pub fn get_or_create(
        &mut self,
        set: &ConsumeQueueSet,
        topic: &str,
        queue_id: i32,
    ) -> Result<Arc<ConsumeQueue>, StoreError> {
        let removals = set.removals.load(Ordering::Acquire);
        if removals != self.removals {
            self.queues.clear();
            self.removals = removals;
        }
        if let Some(q) = self
            .queues
            .iter()
            .find(|q| q.queue_id() == queue_id && q.topic() == topic)
        {
            return Ok(Arc::clone(q));
        }
        let q = set.get_or_create(topic, queue_id)?;
        if self.queues.len() < QUEUE_CACHE_LEN {
            self.queues.push(Arc::clone(&q));
        } else {
            self.queues[self.victim] = Arc::clone(&q);
            self.victim = (self.victim + 1) % QUEUE_CACHE_LEN;
        }
        Ok(q)
    }
}

impl ConsumeQueueSet {
    /// Opens every queue found under `cq_root` (`<storePathRootDir>/consumequeue`).
    pub fn open(cq_root: &Path, file_size: u64) -> Result<Self, StoreError> {
        let set = Self {
            root: cq_root.to_path_buf(),
            file_size,
            queues: DashMap::new(),
            checkpoint: DispatchCheckpoint::open(cq_root)?,
            removals: AtomicU64::new(0),
            repairs: QueueRepairs::default(),
        };
        let topics = match fs::read_dir(cq_root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(set),
            Err(e) => return Err(StoreError::io(cq_root)(e)),
        };
        for t in topics {
            let t = t.map_err(StoreError::io(cq_root))?;
            let Some(topic) = t.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let tdir = t.path();
            if !tdir.is_dir() {
                continue;
            }
            for q in fs::read_dir(&tdir).map_err(StoreError::io(&tdir))? {
                let q = q.map_err(StoreError::io(&tdir))?;
                let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                let cq = ConsumeQueue::open(cq_root, &topic, qid, file_size)?;
                let key = QueueKey {
                    topic: topic.clone(),
                    queue_id: qid,
                };
                set.queues.insert(key, Arc::new(cq));
            }
        }
        Ok(set)
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        let key: &dyn QueueKeyView = &(topic, queue_id);
        self.queues.get(key).map(|q| Arc::clone(&q))
    }

    /// The queue, created (empty, no files yet) if missing.
    pub fn get_or_create(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Result<Arc<ConsumeQueue>, StoreError> {
        if let Some(q) = self.get(topic, queue_id) {
            return Ok(q);
        }
        let entry = self.queues.entry(QueueKey {
            topic: topic.to_owned(),
            queue_id,
        });
        match entry {
            dashmap::Entry::Occupied(o) => Ok(Arc::clone(o.get())),
            dashmap::Entry::Vacant(v) => {
                let q = Arc::new(ConsumeQueue::open(
                    &self.root,
                    topic,
                    queue_id,
                    self.file_size,
                )?);
                v.insert(Arc::clone(&q));
                Ok(q)
            }
        }
    }

    /// Max offset of a queue (0 if it does not exist).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.get(topic, queue_id).map_or(0, |q| q.max_offset())
    }

    /// Min offset of a queue (0 if it does not exist).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.get(topic, queue_id).map_or(0, |q| q.min_offset())
    }

    /// All queues.
    pub fn queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues.iter().map(|e| Arc::clone(e.value())).collect()
    }

    /// Queues of one topic.
    pub fn queues_of_topic(&self, topic: &str) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .iter()
            .filter(|e| e.key().topic == topic)
            .map(|e| Arc::clone(e.value()))
            .collect()
    }

    /// (min, max) over non-empty queues of the physical end of their last unit: re-dispatch
    /// from the min is always safe (appends are idempotent); (0, 0) when all are empty.
    pub fn physical_end_bounds(&self) -> (i64, i64) {
        let ends: Vec<i64> = self
            .queues
            .iter()
            .map(|e| e.value().max_physical_end())
            .filter(|&e| e > 0)
            .collect();
        match (ends.iter().min(), ends.iter().max()) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => (0, 0),
        }
    }

    /// Truncates every queue at `physical_offset` (the log was truncated).
    pub fn truncate_physical(&self, physical_offset: i64) -> Result<(), StoreError> {
        for q in self.queues() {
            q.truncate_physical(physical_offset)?;
        }
        // No queue holds the entries from here on any more: neither the dispatch progress nor
        // the checkpoint may claim them, or a restart resumes past the cut and leaves a hole.
        let cut_end = (physical_offset - DLEDGER_ENTRY_HEADER_LEN).max(0);
        self.checkpoint.cut(cut_end)
    }

    /// Corrects every queue's minimum after commit-log head deletion.
    pub fn correct_min_offsets(&self, commit_log_min_offset: i64) -> Result<(), StoreError> {
        for q in self.queues() {
            q.correct_min_offset(commit_log_min_offset)?;
        }
        Ok(())
    }

    /// fsyncs every queue, then records the dispatch checkpoint: the position the dispatcher
    /// had reached before the flush began is durable in every queue.
    pub fn flush_all(&self) -> Result<(), StoreError> {
        // Read first: every unit below it was stored before this load (release/acquire),
        // so the flushes below cover it.
        let dispatched = self.checkpoint.dispatched();
        for q in self.queues() {
            q.flush()?;
        }
        self.checkpoint.record(dispatched)
    }

    /// The dispatcher has handed every record below log position `end_pos` to its queue.
    /// The next [`ConsumeQueueSet::flush_all`] makes it the checkpoint (it may move down
    /// after the log was truncated).
    pub fn note_dispatched_through(&self, end_pos: i64) {
        self.checkpoint.note_dispatched_through(end_pos);
    }

    /// The log position below which every queue was durable at the last checkpoint (`None`
    /// for a store without one: queues written by an older version, or never flushed).
    pub fn dispatch_checkpoint(&self) -> Option<i64> {
        self.checkpoint.on_disk()
    }

    /// What dispatch repaired since start.
    pub fn repairs(&self) -> &QueueRepairs {
        &self.repairs
    }

    /// Whether these queues were written by a gap-safe dispatcher ([`GAP_SAFE_FILE`]); a store
    /// without queues is, trivially.
    pub fn is_gap_safe(&self) -> bool {
        self.queues.is_empty() || self.root.join(GAP_SAFE_FILE).exists()
    }

    /// Records that every queue is gap-safe from now on (after a store's one re-check).
    pub fn mark_gap_safe(&self) -> Result<(), StoreError> {
        fs::create_dir_all(&self.root).map_err(StoreError::io(&self.root))?;
        let path = self.root.join(GAP_SAFE_FILE);
        let f = fs::File::create(&path).map_err(StoreError::io(&path))?;
        f.sync_all().map_err(StoreError::io(&path))?;
        let dir = fs::File::open(&self.root).map_err(StoreError::io(&self.root))?;
        dir.sync_all().map_err(StoreError::io(&self.root))
    }

    /// Deletes all queues of a topic and their files.
    pub fn remove_topic(&self, topic: &str) -> Result<(), StoreError> {
        let qs = self.queues_of_topic(topic);
        for q in &qs {
            let key: &dyn QueueKeyView = &(topic, q.queue_id());
            self.queues.remove(key);
            // After the removal: a cache that sees the new count and looks the queue up
            // again cannot find the removed one.
            self.removals.fetch_add(1, Ordering::Release);
            q.destroy()?;
        }
        let dir = self.root.join(topic);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&dir)(e)),
        }
    }
}
