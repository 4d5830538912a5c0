//! `MessageStore`: the broker's store facade over the replicated log, the consume queues, the
//! key index and the dispatcher.
//!
//! Writes: [`MessageStore::put_records`] assigns queue offsets and proposes the records under
//! one async lock (R12): for each record, take the next offset of its queue, patch it into the
//! record, create the proposal and poll it once (the log orders entries by first poll), then
//! release the lock and wait for the quorum. A failure known at the first poll consumes no
//! offset; a later definite failure could leave a hole, so the counters are then resynced from
//! the consume queues once the log is caught up; an indeterminate failure keeps the offset
//! (the entry may commit; it is never reused).
//!
//! Invariant (G7, "no single record stops a queue"): an offset the store hands out to a record
//! is always dispatched to that record's consume queue. Records the dispatcher leaves out of
//! queues (transaction PREPARED/ROLLBACK) never take one, whatever the caller asked for
//! ([`takes_queue_offset`]). Where the queue and the log disagree anyway (a proposal that failed
//! after taking its offset, a store written before this rule, a bug, a disk fault) dispatch
//! repairs the queue instead of stopping at the record: offsets no record reached become holes
//! that pulls pass over, and a record whose own offset is taken is appended at the queue's end
//! (logged, counted in [`super::consume_queue::QueueRepairs`], exported as a metric). Pulls
//! answer every record with the offset it is read at. A store whose queues predate this rule
//! is re-checked against the log once at start (see the dispatcher).
//!
//! Reads: only committed and dispatched data ([`MessageStore::get_messages`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::commit_log::{min_physical_offset, Appended, ProposeFailure, ReplicatedLog};
use super::consume_queue::{ConsumeQueueSet, TimeBoundary};
use super::delay_offsets::DelayOffsetTable;
use super::dispatcher::{DispatchMark, Dispatcher};
use super::index_file::{IndexConfig, KeyIndex};
use super::inflight::{InflightPermit, InflightWindow, WindowError};
use super::metadata_log::MetadataTables;
use super::StoreError;
use super::{ConsumerOffsetTable, SubscriptionGroupTable, TopicTable};
use crate::config::BrokerConfig;
use crate::error::{AppendRefusal, BrokerError};
use crate::message::record::{
    patch_queue_offset, read_queue_offset, read_store_timestamp, read_sys_flag,
};
use crate::message::sysflag;
use crate::role::WaterMarks;

/// Proposals allowed in flight at once: below DLedger's pending window (10000) so the ledger
/// never answers Busy to a proposal that already holds a queue offset.
pub const MAX_INFLIGHT_PROPOSALS: usize = 4096;

/// Next queue offset by topic, then queueId.
type QueueOffsets = HashMap<String, HashMap<i32, i64>>;

/// Outcome of a successful single put ([`MessageStore::put_record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOne {
    /// Queue offset of the record (0 for a record that takes none).
    pub queue_offset: i64,
    /// Where it landed.
    pub position: Appended,
}

/// Outcome of a successful put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    /// Queue offset of the first record (0 for records that take none).
    pub first_queue_offset: i64,
    /// Where each record landed.
    pub positions: Vec<Appended>,
}

/// Store lookup status of a pull (Java `GetMessageStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    Found,
    NoMatchedMessage,
    MessageWasRemoving,
    OffsetFoundNull,
    OffsetOverflowBadly,
    OffsetOverflowOne,
    OffsetTooSmall,
    NoMatchedLogicQueue,
    NoMessageInQueue,
}

impl GetStatus {
    /// Java's enum name (sent as the pull response remark).
    pub fn name(self) -> &'static str {
        match self {
            GetStatus::Found => "FOUND",
            GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            GetStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
            GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
        }
    }
}

/// Result of a pull lookup.
#[derive(Debug)]
pub struct GetResult {
    pub status: GetStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    /// Concatenated stored records (message-format.md §4).
    pub body: BytesMut,
    pub message_count: usize,
}

/// Counters for GET_BROKER_RUNTIME_INFO.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub put_messages: AtomicU64,
    pub put_bytes: AtomicU64,
    pub got_messages: AtomicU64,
}

/// Longest a read waits for dispatch to reach the committed mark
/// ([`MessageStore::catch_up_dispatch`]).
pub const DISPATCH_CATCH_UP: Duration = Duration::from_millis(100);

/// The store facade (cheap to share behind an `Arc`).
pub struct MessageStore {
    log: Arc<dyn ReplicatedLog>,
    cqs: Arc<ConsumeQueueSet>,
    index: Arc<KeyIndex>,
    delay_offsets: Arc<DelayOffsetTable>,
    metadata: Arc<MetadataTables>,
    /// Next queue offset per topic and queueId; a missing entry means "consume queue max".
    /// Keyed by topic first so a send looks its counter up without allocating a key.
    /// A std lock, held only for the assignment and the proposal's first poll (never across
    /// an await): a tokio mutex takes its waiter-list lock on every release, once more per
    /// send.
    queue_offsets: std::sync::Mutex<QueueOffsets>,
    /// Serializes resyncs, which wait and so cannot hold `queue_offsets`.
    resync_gate: tokio::sync::Mutex<()>,
    resync_needed: AtomicBool,
    inflight: InflightWindow,
    dispatched: watch::Receiver<DispatchMark>,
    stop: CancellationToken,
    /// Resolves once the dispatcher's thread has finished (see `Dispatcher::spawn_thread`).
    dispatcher_done: std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// `brokerIP1:listenPort` written into STOREHOSTADDRESS.
    pub store_host: SocketAddr,
    /// Whether the store has been shut down (writes refused).
    shut_down: AtomicBool,
    pub stats: StoreStats,
    /// Wall clock when the store started (bootTimestamp).
    pub boot_ms: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl MessageStore {
    /// Opens consume queues and the index under `storePathRootDir`, recovers dispatch and
    /// starts the dispatcher's thread.
    pub fn open(
        cfg: &BrokerConfig,
        log: Arc<dyn ReplicatedLog>,
        store_host: SocketAddr,
    ) -> Result<Arc<MessageStore>, StoreError> {
        let cqs = Arc::new(ConsumeQueueSet::open(
            &cfg.consume_queue_dir(),
            cfg.mapped_file_size_consume_queue,
        )?);
        let index = Arc::new(KeyIndex::open(&cfg.index_dir(), IndexConfig::default())?);
        // Opened here: the dispatcher derives delayed-delivery progress from the log into it.
        let delay_offsets = Arc::new(DelayOffsetTable::open(&cfg.store_path_root_dir)?);
        // Opened here too: the dispatcher applies the log's metadata records to them.
        let root = &cfg.store_path_root_dir;
        let metadata = Arc::new(MetadataTables::open(
            root,
            Arc::new(TopicTable::open(root, &cfg.topic_defaults())?),
            Arc::new(SubscriptionGroupTable::open(
                root,
                cfg.auto_create_subscription_group,
            )?),
            Arc::new(ConsumerOffsetTable::open(root)?),
        )?);
        let (dispatcher, dispatched) = Dispatcher::recover(
            Arc::clone(&log),
            Arc::clone(&cqs),
            Arc::clone(&index),
            cfg.message_delay_level_ms.clone(),
            Arc::clone(&delay_offsets),
            Some(Arc::clone(&metadata)),
        )?;
        let stop = CancellationToken::new();
        let done = dispatcher
            .spawn_thread(stop.clone())
            .map_err(StoreError::io(&cfg.consume_queue_dir()))?;
        Ok(Arc::new(MessageStore {
            log,
            cqs,
            index,
            delay_offsets,
            metadata,
            queue_offsets: std::sync::Mutex::new(HashMap::new()),
            resync_gate: tokio::sync::Mutex::new(()),
            resync_needed: AtomicBool::new(false),
            inflight: InflightWindow::new(MAX_INFLIGHT_PROPOSALS),
            dispatched,
            stop,
            dispatcher_done: std::sync::Mutex::new(Some(done)),
            store_host,
            shut_down: AtomicBool::new(false),
            stats: StoreStats::default(),
            boot_ms: now_ms(),
        }))
    }

    /// The replicated log.
    pub fn log(&self) -> &Arc<dyn ReplicatedLog> {
        &self.log
    }

    /// The metadata tables the log's metadata records are applied to (`BrokerContext`'s
    /// topic, subscription and offset tables are these).
    pub fn metadata(&self) -> &Arc<MetadataTables> {
        &self.metadata
    }

    /// The delay offsets (`BrokerContext::delay_offsets` is this table).
    pub fn delay_offsets(&self) -> &Arc<DelayOffsetTable> {
        &self.delay_offsets
    }

    /// The consume queues.
    pub fn consume_queues(&self) -> &Arc<ConsumeQueueSet> {
        &self.cqs
    }

    /// Progress of dispatch (long polling and the role machine watch it).
    pub fn dispatched(&self) -> watch::Receiver<DispatchMark> {
        self.dispatched.clone()
    }

    /// Waits until everything committed by now is in the consume queues and the key index,
    /// at most [`DISPATCH_CATCH_UP`]. The dispatcher runs on its own thread and trails the
    /// committed mark by a batch, so a read that comes right after an answered send (its
    /// queue's max offset, a pull at the offset it returned, a key lookup) would otherwise
    /// miss that send; Java answers such a read from wherever its ReputMessageService is. The
    /// bound keeps reads answering while dispatch replays a long log or stalls on a disk
    /// error. Returns at once when dispatch has caught up (the usual case).
    pub async fn catch_up_dispatch(&self) {
        let target = self.log.committed_mark().end_pos;
        let mut rx = self.dispatched.clone();
        if rx.borrow().end_pos >= target {
            return;
        }
        let caught_up = rx.wait_for(|m| m.end_pos >= target);
        let _ = tokio::time::timeout(DISPATCH_CATCH_UP, caught_up).await;
    }

    /// Ledger end/committed index, committed end position and dispatched position.
    pub fn water_marks(&self) -> WaterMarks {
        let committed = self.log.committed_mark();
        WaterMarks {
            ledger_end_index: self.log.end_index(),
            committed_index: committed.index,
            committed_pos: committed.end_pos,
            dispatched_pos: self.dispatched.borrow().end_pos,
        }
    }

    /// Java `recoverTopicQueueTable`: forget the in-memory counters so every queue continues
    /// at its consume queue's max offset, and correct min offsets against the log. Call only
    /// when dispatch has caught up with the log (the role machine guarantees it).
    pub async fn recover_topic_queue_table(&self) {
        let mut table = self.lock_offsets();
        table.clear();
        self.resync_needed.store(false, Ordering::Release);
        drop(table);
        let min = min_physical_offset(self.log.as_ref());
        if let Err(e) = self.cqs.correct_min_offsets(min) {
            tracing::warn!(error = %e, "correcting consume-queue min offsets failed");
        }
    }

    /// DELETE_TOPIC_IN_BROKER: forgets the topic's queue-offset counters and deletes its
    /// consume queues (files included), so a re-created topic starts at queue offset 0 as in
    /// Java. Records stay in the replicated log. Holds the offset-table lock so no send on
    /// the topic assigns offsets meanwhile.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), StoreError> {
        let mut table = self.lock_offsets();
        table.remove(topic);
        let r = self.cqs.remove_topic(topic);
        drop(table);
        r
    }

    /// Appends one record and waits for the quorum: [`MessageStore::put_records`] with one
    /// record (same offsets, same outcomes), without the per-batch vectors.
    pub async fn put_record(
        &self,
        topic: &str,
        queue_id: i32,
        record: BytesMut,
        take_offset: bool,
    ) -> Result<PutOne, BrokerError> {
        let _permit = self.admit(1).await?;
        if self.resync_needed.load(Ordering::Acquire) {
            Box::pin(self.resync()).await?;
        }
        let mut record = Some(record);
        let (queue_offset, proposal) = std::future::poll_fn(|cx| {
            let record = record.take().unwrap_or_default();
            Poll::Ready(self.assign_and_propose(cx, topic, queue_id, record, take_offset))
        })
        .await?;
        match proposal.wait().await {
            Ok(position) => {
                self.stats.put_messages.fetch_add(1, Ordering::Relaxed);
                Ok(PutOne {
                    queue_offset,
                    position,
                })
            }
            Err(e) => {
                self.note_late_failure(topic, queue_id, &e);
                Err(propose_error(e))
            }
        }
    }

    /// Appends records (all of one topic and queue) as consecutive entries and waits for the
    /// quorum. `take_offsets` is false for records that get no queue offset (transaction
    /// prepared/rollback).
    pub async fn put_records(
        &self,
        topic: &str,
        queue_id: i32,
        mut records: Vec<BytesMut>,
        take_offsets: bool,
    ) -> Result<PutResult, BrokerError> {
        let n = records.len();
        let _permit = self.admit(n).await?;
        let mut pending = Vec::with_capacity(n);
        if self.resync_needed.load(Ordering::Acquire) {
            Box::pin(self.resync()).await?;
        }
        let (first_queue_offset, failure) = std::future::poll_fn(|cx| {
            Poll::Ready(self.assign_and_propose_all(
                cx,
                topic,
                queue_id,
                &mut records,
                take_offsets,
                &mut pending,
            ))
        })
        .await?;
        if let Some(e) = failure {
            let accepted = pending.len();
            if accepted == 0 {
                return Err(propose_error(e));
            }
            // Part of a batch is in the log: wait for it, then report the batch as
            // indeterminate.
            for p in pending {
                let _ = p.wait().await;
            }
            return Err(BrokerError::AppendIndeterminate(format!(
                "batch partially appended ({accepted} of {n}): {e:?}"
            )));
        }

        let mut positions = Vec::with_capacity(n);
        let mut first_err: Option<ProposeFailure> = None;
        for p in pending {
            match p.wait().await {
                Ok(pos) => positions.push(pos),
                Err(e) => {
                    self.note_late_failure(topic, queue_id, &e);
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(if positions.is_empty() {
                propose_error(e)
            } else {
                BrokerError::AppendIndeterminate(format!("batch partially committed: {e:?}"))
            });
        }
        self.stats
            .put_messages
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(PutResult {
            first_queue_offset,
            positions,
        })
    }

    /// Checks the store is open and takes `n` in-flight permits. Permits are nearly always
    /// free: only a full window pays for the timed wait (boxed, so the common path's future
    /// stays small).
    async fn admit(&self, n: usize) -> Result<InflightPermit, BrokerError> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(BrokerError::ServiceNotAvailable("store shut down".into()));
        }
        let n = n.max(1);
        let taken = match self.inflight.try_take(n) {
            Err(WindowError::Full) => Box::pin(self.inflight.take(n, Duration::from_secs(3))).await,
            other => other,
        };
        taken.map_err(|e| match e {
            WindowError::Full => BrokerError::AppendRefused(AppendRefusal::Busy(
                "too many proposals in flight".into(),
            )),
            WindowError::Closed => BrokerError::ServiceNotAvailable("store shut down".into()),
        })
    }

    fn lock_offsets(&self) -> std::sync::MutexGuard<'_, QueueOffsets> {
        // A panic while holding it cannot leave a counter half-written (single map writes).
        self.queue_offsets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Under the offsets lock: gives `record` the queue's next offset (if it takes one),
    /// proposes it and polls the proposal once with the send's own context `cx` (the log
    /// orders entries by first poll, so offsets follow log order, R12).
    fn assign_and_propose(
        &self,
        cx: &mut Context<'_>,
        topic: &str,
        queue_id: i32,
        mut record: BytesMut,
        take_offset: bool,
    ) -> Result<(i64, Proposal), BrokerError> {
        let mut table = self.lock_offsets();
        if !take_offset || !takes_queue_offset(&record) {
            let proposal = self.propose_polled(cx, record).map_err(propose_error)?;
            return Ok((0, proposal));
        }
        // A queue that already has its counter (the usual case): one lookup reads it and,
        // once the proposal is accepted, moves it on.
        let known = table.get_mut(topic).and_then(|q| q.get_mut(&queue_id));
        let base = match known.as_deref() {
            Some(&next) => next,
            None => self.cqs.max_offset(topic, queue_id),
        };
        patch_queue_offset(&mut record, base)?;
        let proposal = self.propose_polled(cx, record).map_err(propose_error)?;
        match known {
            Some(next) => *next = base + 1,
            None => advance_queue_offset(&mut table, topic, queue_id, base + 1),
        }
        Ok((base, proposal))
    }

    /// [`MessageStore::assign_and_propose`] for consecutive records of one queue: the
    /// proposals go to `pending`; stops at the first definite refusal, which it returns with
    /// the first queue offset (the queue advances by the records accepted).
    fn assign_and_propose_all(
        &self,
        cx: &mut Context<'_>,
        topic: &str,
        queue_id: i32,
        records: &mut [BytesMut],
        take_offsets: bool,
        pending: &mut Vec<Proposal>,
    ) -> Result<(i64, Option<ProposeFailure>), BrokerError> {
        let mut table = self.lock_offsets();
        // The batch takes offsets only if every record will be dispatched (a batch is of one
        // kind; a mixed one gets none rather than offsets the queue would never show).
        let take_offsets = take_offsets && records.iter().all(|r| takes_queue_offset(r));
        let base = next_queue_offset(&table, &self.cqs, topic, queue_id, take_offsets);
        let mut accepted = 0i64;
        let mut failure = None;
        for rec in records.iter_mut() {
            if take_offsets {
                patch_queue_offset(rec, base + accepted)?;
            }
            match self.propose_polled(cx, rec.split()) {
                Ok(p) => pending.push(p),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            accepted += 1;
        }
        if take_offsets && accepted > 0 {
            advance_queue_offset(&mut table, topic, queue_id, base + accepted);
        }
        Ok((base, failure))
    }

    /// Creates the proposal of `record` and polls it once with `cx`. `Err` is a definite
    /// refusal: nothing was appended.
    fn propose_polled(
        &self,
        cx: &mut Context<'_>,
        record: BytesMut,
    ) -> Result<Proposal, ProposeFailure> {
        let mut fut = self.log.propose(record.freeze());
        match fut.as_mut().poll(cx) {
            // Only a definite refusal means nothing was appended.
            Poll::Ready(Err(e)) if !e.is_indeterminate() => Err(e),
            Poll::Ready(r) => Ok(Proposal::Done(r)),
            Poll::Pending => Ok(Proposal::Waiting(fut)),
        }
    }

    /// A proposal failed after its first poll. A definite failure there means its offset
    /// was handed out but nothing was appended: a later record of the queue may already
    /// hold the next offset, so the counters are resynced before reuse.
    fn note_late_failure(&self, topic: &str, queue_id: i32, e: &ProposeFailure) {
        if !e.is_indeterminate() {
            tracing::error!(topic, queue_id, error = ?e, "late definite append failure; queue offsets will be resynced");
            self.resync_needed.store(true, Ordering::Release);
        }
    }

    /// Waits (bounded) for in-flight proposals to settle and dispatch to catch up, then
    /// restarts every counter from its consume queue.
    async fn resync(&self) -> Result<(), BrokerError> {
        let _gate = self.resync_gate.lock().await;
        if !self.resync_needed.load(Ordering::Acquire) {
            return Ok(()); // another send resynced while this one waited
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut rx = self.dispatched.clone();
        loop {
            // This request holds its own permits; everything else must be back.
            let others_idle = self.inflight.available() + 1 >= MAX_INFLIGHT_PROPOSALS;
            if others_idle && self.water_marks().caught_up() {
                self.lock_offsets().clear();
                self.resync_needed.store(false, Ordering::Release);
                tracing::info!("queue offsets resynced from consume queues");
                return Ok(());
            }
            let wait = tokio::time::timeout_at(deadline, rx.changed());
            match wait.await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(BrokerError::ServiceNotAvailable("store shut down".into()))
                }
                Err(_) => {
                    return Err(BrokerError::AppendRefused(AppendRefusal::Busy(
                        "queue offsets are being resynced".into(),
                    )))
                }
            }
        }
    }

    /// The committed record at physical offset `phys`, as stored: its PHYSICALOFFSET was
    /// written by the log's append hook ([`crate::message::record::stamp_physical_offset`]),
    /// so no read path rewrites it.
    pub fn read_message(&self, phys: i64) -> Option<Bytes> {
        self.log.read_message(phys)
    }

    /// Max logical offset of a queue.
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.cqs.max_offset(topic, queue_id)
    }

    /// Min logical offset of a queue.
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.cqs.min_offset(topic, queue_id)
    }

    /// Store time of the record at `phys` with `size`.
    pub fn store_time_of(&self, phys: i64) -> Option<i64> {
        let rec = self.log.read_message(phys)?;
        read_store_timestamp(&rec).ok()
    }

    /// Store time of the first message of a queue (GET_EARLIEST_MSG_STORETIME); -1 if none.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> i64 {
        let Some(q) = self.cqs.get(topic, queue_id) else {
            return -1;
        };
        // The first real unit (a hole left by a repaired queue has no record).
        let units = q.read_units(q.min_offset(), 64).unwrap_or_default();
        match units.iter().find(|u| !u.is_blank()) {
            Some(u) => self.store_time_of(u.physical_offset).unwrap_or(-1),
            None => -1,
        }
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP.
    pub fn offset_by_time(&self, topic: &str, queue_id: i32, ts: i64, upper: bool) -> i64 {
        let Some(q) = self.cqs.get(topic, queue_id) else {
            return 0;
        };
        let boundary = if upper {
            TimeBoundary::Upper
        } else {
            TimeBoundary::Lower
        };
        q.offset_by_time(ts, boundary, |phys, _| self.store_time_of(phys))
            .unwrap_or_else(|_| q.max_offset())
    }

    /// QUERY_MESSAGE: records of `topic` whose KEYS/UNIQ_KEY contains `key`.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ts: i64,
        end_ts: i64,
    ) -> Result<(Vec<Bytes>, i64, i64), StoreError> {
        let r = self
            .index
            .query(topic, key, max_num.min(64), begin_ts, end_ts)?;
        let mut out = Vec::new();
        for phys in r.physical_offsets {
            if let Some(rec) = self.read_message(phys) {
                out.push(rec);
            }
        }
        Ok((out, r.last_update_timestamp, r.last_update_phys_offset))
    }

    /// Pull lookup (Java `getMessage`). `accept` filters by consume-queue tag code.
    /// `correct_offsets` is false on a slave (offsets are not corrected there).
    #[allow(clippy::too_many_arguments)]
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        max_bytes: usize,
        correct_offsets: bool,
        accept: &dyn Fn(i64) -> bool,
    ) -> GetResult {
        let correction = |old: i64, new: i64| if correct_offsets { new } else { old };
        let mut r = GetResult {
            status: GetStatus::NoMatchedLogicQueue,
            next_begin_offset: correction(offset, 0),
            min_offset: 0,
            max_offset: 0,
            body: BytesMut::new(),
            message_count: 0,
        };
        let Some(q) = self.cqs.get(topic, queue_id) else {
            return r;
        };
        let (min, max) = (q.min_offset(), q.max_offset());
        r.min_offset = min;
        r.max_offset = max;
        if max == 0 {
            r.status = GetStatus::NoMessageInQueue;
            r.next_begin_offset = correction(offset, 0);
            return r;
        }
        if offset < min {
            r.status = GetStatus::OffsetTooSmall;
            r.next_begin_offset = correction(offset, min);
            return r;
        }
        if offset == max {
            r.status = GetStatus::OffsetOverflowOne;
            r.next_begin_offset = offset;
            return r;
        }
        if offset > max {
            r.status = GetStatus::OffsetOverflowBadly;
            r.next_begin_offset = correction(offset, max);
            return r;
        }
        let units = match q.read_units(offset, max_msgs.clamp(1, 1024).max(max_msgs.min(1024))) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, topic, queue_id, "reading consume queue failed");
                Vec::new()
            }
        };
        if units.is_empty() {
            r.status = GetStatus::OffsetFoundNull;
            r.next_begin_offset = offset;
            return r;
        }
        let mut status = GetStatus::NoMatchedMessage;
        let mut next = offset;
        let limit = max_msgs.max(1);
        for u in units {
            // Holes (offsets no record reached, see ConsumeQueue::append) are passed over.
            let hole = u.is_blank();
            if r.message_count >= limit
                || (!hole && r.message_count > 0 && r.body.len() + u.size as usize > max_bytes)
            {
                break;
            }
            let at = next;
            next += 1;
            if hole || !accept(u.tag_code) {
                continue;
            }
            match self.log.read_message(u.physical_offset) {
                Some(rec) => {
                    let start = r.body.len();
                    r.body.extend_from_slice(&rec);
                    // A record the dispatcher had to put at another offset than its own is
                    // answered with the offset it is read at, so consumers commit past it.
                    if read_queue_offset(&rec).ok() != Some(at) {
                        let _ = patch_queue_offset(&mut r.body[start..], at);
                    }
                    r.message_count += 1;
                }
                None => {
                    if r.message_count == 0 {
                        status = GetStatus::MessageWasRemoving;
                    }
                }
            }
        }
        if r.message_count > 0 {
            status = GetStatus::Found;
            self.stats
                .got_messages
                .fetch_add(r.message_count as u64, Ordering::Relaxed);
        }
        r.status = status;
        r.next_begin_offset = next;
        r
    }

    /// Commit-log max offset (the committed end, as a physical offset bound).
    pub fn commit_log_max_offset(&self) -> i64 {
        self.log.committed_mark().end_pos
    }

    /// Commit-log min offset.
    pub fn commit_log_min_offset(&self) -> i64 {
        min_physical_offset(self.log.as_ref())
    }

    /// Bytes committed but not yet dispatched.
    pub fn dispatch_behind_bytes(&self) -> i64 {
        let m = self.water_marks();
        (m.committed_pos - m.dispatched_pos).max(0)
    }

    /// Flushes consume queues and the index (periodic and at shutdown).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.cqs.flush_all()?;
        self.index.flush()
    }

    /// Refuses new writes, stops the dispatcher (which flushes), then shuts the log down.
    pub async fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inflight.close();
        self.stop.cancel();
        let done = self
            .dispatcher_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(d) = done {
            let _ = d.await;
        }
        self.log.shutdown().await;
    }
}

impl Drop for MessageStore {
    /// A store dropped without [`MessageStore::shutdown`] (tests, a failed start) still ends
    /// its dispatcher thread, which holds the log and the queues.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Whether the dispatcher will put `record` into its consume queue, so that it may take a
/// queue offset (invariant of the store, see the module doc): a transaction PREPARED or
/// ROLLBACK record never gets one, whatever its caller asked for.
fn takes_queue_offset(record: &[u8]) -> bool {
    read_sys_flag(record).is_ok_and(sysflag::is_dispatched_to_consume_queue)
}

/// The queue's next offset under the offsets lock (0 for records that take none); a queue
/// without a counter continues at its consume queue's max offset.
fn next_queue_offset(
    table: &QueueOffsets,
    cqs: &ConsumeQueueSet,
    topic: &str,
    queue_id: i32,
    take_offsets: bool,
) -> i64 {
    if !take_offsets {
        return 0;
    }
    match table.get(topic).and_then(|q| q.get(&queue_id)) {
        Some(v) => *v,
        None => cqs.max_offset(topic, queue_id),
    }
}

/// Sets the queue's next offset (the topic key is allocated only for a topic's first queue).
fn advance_queue_offset(table: &mut QueueOffsets, topic: &str, queue_id: i32, next: i64) {
    match table.get_mut(topic) {
        Some(q) => {
            q.insert(queue_id, next);
        }
        None => {
            table.insert(topic.to_owned(), HashMap::from([(queue_id, next)]));
        }
    }
}

enum Proposal {
    Done(Result<Appended, ProposeFailure>),
    Waiting(super::commit_log::ProposeFuture),
}

impl Proposal {
    async fn wait(self) -> Result<Appended, ProposeFailure> {
        match self {
            Proposal::Done(r) => r,
            Proposal::Waiting(f) => f.await,
        }
    }
}

/// Maps a ledger failure to the broker error (broker-roles.md §7).
pub fn propose_error(e: ProposeFailure) -> BrokerError {
    match e {
        ProposeFailure::NotLeader => BrokerError::AppendRefused(AppendRefusal::NotLeader),
        ProposeFailure::Busy(why) => BrokerError::AppendRefused(AppendRefusal::Busy(why)),
        ProposeFailure::Unavailable(why) => {
            BrokerError::AppendRefused(AppendRefusal::Unavailable(why))
        }
        ProposeFailure::Timeout => {
            BrokerError::AppendIndeterminate("in-sync replicas not enough".into())
        }
        ProposeFailure::TermChanged => BrokerError::AppendIndeterminate("UNKNOWN_ERROR".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::commit_log::LedgerRole;
    use crate::store::mem_log::MemLog;
    use crate::store::test_support::{encode, record_fields, ProbedLog};

    fn record(topic: &str) -> BytesMut {
        encode(&record_fields(topic, b"x", b""))
    }

    fn cfg(dir: &std::path::Path) -> BrokerConfig {
        BrokerConfig {
            store_path_root_dir: dir.to_path_buf(),
            ..BrokerConfig::default()
        }
    }

    #[tokio::test]
    async fn a_refused_append_consumes_no_queue_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = MemLog::new_follower();
        let host = "127.0.0.1:10911".parse().unwrap();
        let store = MessageStore::open(&cfg(dir.path()), Arc::new(log.clone()), host).unwrap();
        let e = store
            .put_records("T", 0, vec![record("T")], true)
            .await
            .unwrap_err();
        assert!(matches!(
            e,
            BrokerError::AppendRefused(AppendRefusal::NotLeader)
        ));
        log.set_role(LedgerRole::Leader, 1);
        let r = store
            .put_records("T", 0, vec![record("T")], true)
            .await
            .unwrap();
        assert_eq!(r.first_queue_offset, 0);
        store.shutdown().await;
    }

    #[tokio::test]
    async fn an_indeterminate_append_keeps_its_offset_and_it_is_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let log = ProbedLog::timeout_at(MemLog::new_leader(), 1);
        let host = "127.0.0.1:10911".parse().unwrap();
        let store = MessageStore::open(&cfg(dir.path()), Arc::new(log), host).unwrap();
        assert_eq!(
            store
                .put_records("T", 0, vec![record("T")], true)
                .await
                .unwrap()
                .first_queue_offset,
            0
        );
        let e = store
            .put_records("T", 0, vec![record("T")], true)
            .await
            .unwrap_err();
        assert!(matches!(e, BrokerError::AppendIndeterminate(_)), "{e:?}");
        // The timed-out entry committed with offset 1; the next message gets 2.
        assert_eq!(
            store
                .put_records("T", 0, vec![record("T")], true)
                .await
                .unwrap()
                .first_queue_offset,
            2
        );
        let mut rx = store.dispatched();
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|m| m.index >= 2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(store.max_offset("T", 0), 3);
        let r = store.get_messages("T", 0, 0, 32, 1 << 20, true, &|_| true);
        assert_eq!(r.message_count, 3);
        store.shutdown().await;
    }

    fn record_with(topic: &str, queue_offset: i64, sys_flag: i32) -> BytesMut {
        encode(&crate::message::record::RecordFields {
            queue_offset,
            sys_flag,
            ..record_fields(topic, b"x", b"")
        })
    }

    /// The store's invariant: records the dispatcher leaves out of queues (transaction
    /// PREPARED/ROLLBACK) never take a queue offset, whatever the caller asked for, so the
    /// queue has no offset it would never show (issue 25's ROLLBACK batch).
    #[tokio::test]
    async fn records_left_out_of_queues_take_no_offset() {
        let dir = tempfile::tempdir().unwrap();
        let host = "127.0.0.1:10911".parse().unwrap();
        let log = MemLog::new_leader();
        let store = MessageStore::open(&cfg(dir.path()), Arc::new(log), host).unwrap();
        let put = |recs: Vec<BytesMut>| store.put_records("T", 0, recs, true);
        assert_eq!(put(vec![record("T")]).await.unwrap().first_queue_offset, 0);
        let rollback = sysflag::TRANSACTION_ROLLBACK_TYPE;
        let prepared = sysflag::TRANSACTION_PREPARED_TYPE;
        assert_eq!(
            put(vec![record_with("T", 0, rollback)])
                .await
                .unwrap()
                .first_queue_offset,
            0
        );
        let one = store
            .put_record("T", 0, record_with("T", 0, prepared), true)
            .await
            .unwrap();
        assert_eq!(one.queue_offset, 0);
        assert_eq!(put(vec![record("T")]).await.unwrap().first_queue_offset, 1);
        let mut rx = store.dispatched();
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|m| m.index >= 3))
            .await
            .unwrap()
            .unwrap();
        let r = store.get_messages("T", 0, 1, 32, 1 << 20, true, &|_| true);
        assert_eq!((r.status, r.message_count), (GetStatus::Found, 1));
        assert_eq!(store.max_offset("T", 0), 2);
        store.shutdown().await;
    }

    /// Pulls pass over holes and answer a record put at another offset than its own with the
    /// offset it is read at, so a consumer commits past it and never loops.
    #[tokio::test]
    async fn pulls_pass_over_holes_and_report_the_offset_read_at() {
        let dir = tempfile::tempdir().unwrap();
        let host = "127.0.0.1:10911".parse().unwrap();
        let log = MemLog::new_leader();
        // As a log with a gap at 1 and a record claiming taken offset 0 would hold.
        for (i, off) in [0i64, 2, 0].into_iter().enumerate() {
            let p = log
                .propose(record_with("T", off, 0).freeze())
                .await
                .unwrap();
            assert_eq!(p.index, dledger_commitlog::Index(i as u64));
        }
        let store = MessageStore::open(&cfg(dir.path()), Arc::new(log), host).unwrap();
        let mut rx = store.dispatched();
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|m| m.index >= 2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(store.max_offset("T", 0), 4);
        let hole = store.get_messages("T", 0, 1, 1, 1 << 20, true, &|_| true);
        assert_eq!(
            (hole.status, hole.message_count, hole.next_begin_offset),
            (GetStatus::NoMatchedMessage, 0, 2)
        );
        let r = store.get_messages("T", 0, 0, 32, 1 << 20, true, &|_| true);
        assert_eq!(
            (r.status, r.message_count, r.next_begin_offset),
            (GetStatus::Found, 3, 4)
        );
        let offsets: Vec<i64> =
            crate::message::decode_records(r.body.clone().freeze(), crate::message::CrcCheck::Skip)
                .map(|m| m.unwrap().queue_offset)
                .collect();
        assert_eq!(offsets, [0, 2, 3]);
        store.shutdown().await;
    }
}
