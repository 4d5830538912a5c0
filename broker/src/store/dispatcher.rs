//! The dispatcher: tails the log's committed mark and writes every committed record into its
//! consume queue (20-byte unit) and the key index, in log order (R12). It never reads past
//! `committed`, so consumers only ever see replicated messages, on every member.
//!
//! Restart (crash consistency, R12/CC-09): the derived structures are flushed independently,
//! so after a crash any of them may lag the others. Consume queues are first truncated to the
//! committed log (units past it cannot be backed by data); dispatch then resumes at the lowest
//! point any structure needs:
//! * consume queues: the dispatch checkpoint ([`ConsumeQueueSet::dispatch_checkpoint`], the
//!   position through which every queue was durable at the last flush); without one, the
//!   smallest physical end of a non-empty queue still within the log;
//! * the key index: just above [`KeyIndex::last_physical_offset`];
//! * delayed-delivery progress, below.
//!
//! Re-dispatch is idempotent per structure: a queue skips a record below its last unit's end
//! (a lagging queue appends it at the queue offset stored in the record, never a new one), the
//! index skips records at or below its last offset. When nothing lags, nothing is re-read.
//!
//! No single record stops a queue (G7): a record's consume-queue unit always lands, at the
//! offset stored in the record when that is free (offsets between the queue's end and it
//! become holes), else at the queue's end ([`ConsumeQueue::append`] says which, the dispatcher
//! logs and counts it in [`super::consume_queue::QueueRepairs`]). Only a filesystem error holds
//! dispatch at a record, retried until the disk takes it. Consume queues written before this
//! rule (no [`super::consume_queue::GAP_SAFE_FILE`]) may have stopped at such a record while
//! the checkpoint moved on, so their store is re-checked once: every committed entry is
//! offered again to its queue without the shortcut by physical end (before the resume point
//! only to queues that exist, so deleted topics stay deleted), which writes what is missing;
//! the marker is written once the repaired queues are flushed. A crash in that pass repeats it, which can append a renumbered record twice (a
//! duplicate delivery, never a loss).
//!
//! Delayed delivery progress: a committed record carrying the schedule-origin marker
//! ([`SCHEDULE_ORIGIN_PROPERTY`]) whose level/offset/physical offset match a unit of the
//! schedule queue advances the log-derived delay offset of its level
//! ([`DelayOffsetTable::note_delivered`]). If that table is complete only through an earlier
//! index than the consume queues (it is persisted periodically), dispatch starts there and
//! the entries before the consume-queue resume point are read for the markers only; the
//! published mark starts at that earlier point, so the role machine waits for it (R13).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::commit_log::{first_index_at_or_after, LogEntryRef, ReplicatedLog};
use super::consume_queue::{AppendOutcome, ConsumeQueue, ConsumeQueueSet, CqUnit, QueueCache};
use super::delay_offsets::{DelayOffsetTable, ScheduleOrigin, SCHEDULE_ORIGIN_PROPERTY};
use super::index_file::KeyIndex;
use super::metadata_log::{MetadataChange, MetadataTables, METADATA_TOPIC};
use crate::message::properties::{find_properties, keys};
use crate::message::record::{CrcCheck, RecordView, DLEDGER_ENTRY_HEADER_LEN};
use crate::message::{sysflag, tag, topic};

/// How far dispatch got: last dispatched index (-1 none) and the position just past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatchMark {
    pub index: i64,
    pub end_pos: i64,
}

/// Writes committed entries into consume queues and the index.
pub struct Dispatcher {
    log: Arc<dyn ReplicatedLog>,
    cqs: Arc<ConsumeQueueSet>,
    index: Arc<KeyIndex>,
    delay_levels_ms: Vec<i64>,
    delay_offsets: Arc<DelayOffsetTable>,
    tx: watch::Sender<DispatchMark>,
    next_index: i64,
    /// Entries below this index are already in the consume queues and the index: they are
    /// re-read only for delayed-delivery markers.
    markers_only_below: i64,
    /// Physical offset of the newest record handed to the key index (the dispatcher is its
    /// only writer): records at or below it are not indexed again.
    indexed_through: i64,
    /// Queues that grew since progress was last published: their held pulls are woken then.
    grown: Vec<Arc<ConsumeQueue>>,
    /// The queues records went to lately (no hashed lookup per record).
    queue_cache: QueueCache,
    /// Entries through this index were committed before the restart: re-dispatching them is
    /// recovery, logged with progress.
    replay_until: i64,
    replayed: i64,
    replay_total: i64,
    /// The entry whose consume-queue write failed on the filesystem: dispatch retries it
    /// (logged once) instead of skipping a message consumers would never see.
    stalled_at: Option<i64>,
    /// Entries below this index are re-checked against the queues: the one pass over the log
    /// of a store whose queues predate gap-safe dispatch (see the module doc); below the
    /// consume-queue resume point only queues that exist are touched. At or below `begin`
    /// when there is nothing to re-check.
    recheck_below: i64,
    /// The tables the log's metadata records are applied to (`None` in store-only tests).
    metadata: Option<Arc<MetadataTables>>,
}

/// Entries between publications of dispatch progress (a power of two): held pulls of busy
/// queues wake at least this often while dispatch catches up.
const PUBLISH_EVERY: i64 = 256;

/// A pass that dispatched at least this many entries means commits are arriving faster than
/// dispatch wakes up for them: the dispatcher then rests [`BUSY_REST`] before the next one.
const BUSY_PASS: i64 = 32;

/// The rest after a busy pass. It bounds how much later than the commit a consumer can see
/// a message under load (Java's dispatcher polls every 1 ms); idle or lightly loaded, every
/// commit is dispatched at once.
const BUSY_REST: std::time::Duration = std::time::Duration::from_millis(1);

/// Entries between progress lines while re-dispatching after a restart.
const REPLAY_PROGRESS_EVERY: i64 = 100_000;

/// Where consume queues need dispatch to resume: the dispatch checkpoint when there is one
/// (every queue, even an empty one, was durable through it), else the smallest end of a
/// non-empty queue within the log (ends below `log_start` have nothing left to re-read).
fn queue_resume_pos(cqs: &ConsumeQueueSet, log_start: i64) -> i64 {
    if let Some(cp) = cqs.dispatch_checkpoint() {
        return cp;
    }
    let queues = cqs.queues();
    let ends = queues
        .iter()
        .map(|q| q.max_physical_end())
        .filter(|&e| e > 0);
    let in_log = ends.clone().filter(|&e| e >= log_start).min();
    match in_log {
        Some(e) => e,
        // Every queue ends before the log (or all are empty): all of the log is after them.
        None if ends.clone().next().is_some() => log_start,
        None => 0,
    }
}

/// Position just past entry `next_index - 1` (the log's start when that is not readable).
fn end_pos_before(log: &dyn ReplicatedLog, next_index: i64, begin: i64) -> i64 {
    if next_index <= begin {
        return match log.committed_entry(begin) {
            Ok(Some(e)) => e.pos,
            _ => 0,
        };
    }
    match log.committed_entry(next_index - 1) {
        Ok(Some(e)) => e.end_pos(),
        _ => 0,
    }
}

impl Dispatcher {
    /// Prepares dispatch after a (re)start: trims consume queues past the log and finds the
    /// resume index. Returns the dispatcher and the receiver of its progress.
    pub fn recover(
        log: Arc<dyn ReplicatedLog>,
        cqs: Arc<ConsumeQueueSet>,
        index: Arc<KeyIndex>,
        delay_levels_ms: Vec<i64>,
        delay_offsets: Arc<DelayOffsetTable>,
        metadata: Option<Arc<MetadataTables>>,
    ) -> Result<(Dispatcher, watch::Receiver<DispatchMark>), super::StoreError> {
        let begin = log.begin_index().max(0);
        let committed = log.committed_mark();
        let (_, max_end) = cqs.physical_end_bounds();
        if max_end > 0 && committed.index >= 0 && committed.end_pos < max_end {
            // Units beyond the committed data of this member cannot be trusted yet: drop them;
            // they come back when the entries are committed again.
            tracing::warn!(
                queue_end = max_end,
                committed_end = committed.end_pos,
                "consume queues ahead of the committed log; trimming"
            );
            cqs.truncate_physical(committed.end_pos + DLEDGER_ENTRY_HEADER_LEN)?;
        }
        let log_start = match log.committed_entry(begin) {
            Ok(Some(e)) => e.pos,
            _ => 0,
        };
        // Never past this member's committed end: nothing beyond it was dispatched.
        let queues_from = match queue_resume_pos(&cqs, log_start) {
            q if committed.index >= 0 => q.min(committed.end_pos),
            q => q,
        };
        // The record at `last_physical_offset` is indexed; the next entry starts after it.
        let last_indexed = index.last_physical_offset();
        let index_from = if last_indexed > 0 {
            last_indexed - DLEDGER_ENTRY_HEADER_LEN + 1
        } else {
            0
        };
        let resume_pos = queues_from.min(index_from).max(0);
        let mut next_index = if committed.index < begin || resume_pos <= log_start {
            begin
        } else {
            first_index_at_or_after(log.as_ref(), resume_pos)
        };
        let markers_only_below = next_index;
        let delay_from = (delay_offsets.delivered_through() + 1).max(begin);
        if delay_from < next_index {
            // The log-derived delay offsets lag the consume queues: re-read from there.
            next_index = delay_from;
        }
        if let Some(m) = &metadata {
            let meta_from = (m.applied_through() + 1).max(begin);
            if meta_from < next_index {
                // The metadata tables' files lag: their records are applied again from there.
                next_index = meta_from;
            }
        }
        let mut recheck_below = begin;
        if !cqs.is_gap_safe() && committed.index >= begin {
            // Queues written before gap-safe dispatch may have stopped at a record that got an
            // offset the old dispatcher refused (and the checkpoint moved past everything
            // after it): every committed entry is checked once.
            recheck_below = committed.index + 1;
            next_index = begin;
            tracing::warn!(
                entries = recheck_below - begin,
                "consume queues predate gap-safe dispatch: re-checking them against the log once"
            );
        } else {
            cqs.mark_gap_safe()?;
        }
        let mark = DispatchMark {
            index: next_index - 1,
            end_pos: end_pos_before(log.as_ref(), next_index, begin),
        };
        let replay = (committed.index + 1 - next_index).max(0);
        if replay > 0 {
            tracing::info!(
                entries = replay,
                from_index = next_index,
                queues_from,
                index_from,
                delay_from,
                "re-dispatching {replay} entries from index {next_index}"
            );
        }
        tracing::info!(
            next_index,
            markers_only_below,
            resume_pos = mark.end_pos,
            "dispatcher recovered"
        );
        cqs.note_dispatched_through(mark.end_pos);
        let (tx, rx) = watch::channel(mark);
        let indexed_through = index.last_physical_offset();
        Ok((
            Dispatcher {
                log,
                cqs,
                index,
                delay_levels_ms,
                delay_offsets,
                tx,
                next_index,
                markers_only_below,
                indexed_through,
                grown: Vec::new(),
                queue_cache: QueueCache::default(),
                replay_until: committed.index,
                replayed: 0,
                replay_total: replay,
                stalled_at: None,
                recheck_below,
                metadata,
            },
            rx,
        ))
    }

    /// Runs [`Dispatcher::run`] on a thread of its own (Java's ReputMessageService), so that
    /// on the leader the reading back, parsing and queue writes of every committed record do
    /// not share the thread that serves sends and drives the ledger: with one worker thread
    /// per member (a group on one host) that thread is the group's bottleneck. It wakes once
    /// per commit-mark change, not per record. The returned receiver resolves when the run
    /// has ended (flushes included); a panic in it drops the sender instead.
    pub fn spawn_thread(
        self,
        stop: CancellationToken,
    ) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let (built_tx, built_rx) = std::sync::mpsc::channel();
        // The runtime is built (and dropped) on its own thread: a runtime must not be dropped
        // inside another one's context, as it would be here if the spawn failed.
        std::thread::Builder::new()
            .name("dispatcher".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return;
                    }
                };
                let _ = built_tx.send(Ok(()));
                rt.block_on(self.run(stop));
                let _ = done_tx.send(());
            })?;
        built_rx
            .recv()
            .map_err(|_| std::io::Error::other("dispatcher thread ended at start"))??;
        Ok(done_rx)
    }

    /// Runs until `stop` is cancelled.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut committed = self.log.commit_watch();
        let log = Arc::clone(&self.log);
        loop {
            let target = committed.borrow_and_update().index;
            let before = self.next_index;
            let mut progressed = None;
            while self.next_index <= target {
                // Runs end at each multiple of PUBLISH_EVERY, where progress is published.
                let last = target.min(self.next_index | (PUBLISH_EVERY - 1));
                if !self.dispatch_run(&*log, last, &mut progressed) {
                    break;
                }
                // Publish in chunks so long polls wake early under heavy load.
                if self.next_index % PUBLISH_EVERY == 0 {
                    if let Some(m) = progressed.take() {
                        self.publish(m);
                    }
                    tokio::task::yield_now().await;
                }
            }
            if let Some(m) = progressed {
                self.publish(m);
            }
            // Under load, rest a moment so the next pass finds a batch of commits instead of
            // waking on each one: a wake-up (another thread's futex call, then two context
            // switches) costs more than dispatching dozens of records.
            if self.next_index - before >= BUSY_PASS {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(BUSY_REST) => {}
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                r = committed.changed() => if r.is_err() { break },
                // A read failure above retries after a short pause.
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)), if self.next_index <= target => {}
            }
        }
        if let Err(e) = self.cqs.flush_all() {
            tracing::error!(error = %e, "flushing consume queues at shutdown failed");
        }
        if let Err(e) = self.index.flush() {
            tracing::error!(error = %e, "flushing index at shutdown failed");
        }
    }

    /// Dispatches the committed entries from `next_index` through `last` as one run over the
    /// log's files (no index lookup per entry); false (logged) when it stopped short: at a
    /// record whose consume-queue write failed, or at an entry it could not read. Either is
    /// retried (below, every 200 ms).
    fn dispatch_run(
        &mut self,
        log: &dyn ReplicatedLog,
        last: i64,
        progressed: &mut Option<DispatchMark>,
    ) -> bool {
        let mut failed = None;
        let read =
            log.with_committed_entries(self.next_index, last, &mut |e| match self.dispatch(e) {
                Ok(()) => {
                    *progressed = Some(self.dispatched(e.index, e.end_pos()));
                    true
                }
                Err(err) => {
                    failed = Some((e.index, err));
                    false
                }
            });
        if let Some((index, err)) = failed {
            self.stall(index, &err);
            return false;
        }
        if self.next_index > last {
            return true;
        }
        match read {
            Ok(()) => tracing::warn!(
                index = self.next_index,
                "committed entry not readable; retrying"
            ),
            Err(e) => {
                tracing::error!(index = self.next_index, error = %e, "reading committed entry failed")
            }
        }
        false
    }

    /// Bookkeeping after entry `index` (ending at `end_pos`) was dispatched; its mark.
    fn dispatched(&mut self, index: i64, end_pos: i64) -> DispatchMark {
        if self.stalled_at.take().is_some() {
            tracing::info!(index, "consume-queue dispatch resumed");
        }
        self.delay_offsets.mark_dispatched_through(index);
        self.cqs.note_dispatched_through(end_pos);
        if index <= self.replay_until {
            self.note_replayed(index);
        }
        self.next_index += 1;
        if self.next_index == self.recheck_below {
            self.recheck_done();
        }
        DispatchMark { index, end_pos }
    }

    /// The one re-check of an older store's queues reached the resume point: once the repaired
    /// queues are durable the store is marked gap-safe (until then a restart re-checks).
    fn recheck_done(&mut self) {
        let r = self.cqs.repairs();
        tracing::info!(
            holes = r.holes.load(Ordering::Relaxed),
            filled = r.filled.load(Ordering::Relaxed),
            renumbered = r.renumbered.load(Ordering::Relaxed),
            "re-check of the consume queues against the log done"
        );
        match self.cqs.flush_all().and_then(|()| self.cqs.mark_gap_safe()) {
            Ok(()) => {}
            Err(e) => {
                tracing::error!(error = %e, "marking the consume queues gap-safe failed; the next start re-checks them");
            }
        }
    }

    /// A record whose consume-queue write failed on the filesystem: not skipped (consumers
    /// would never see the message) but retried, every 200 ms, until the disk accepts it.
    fn stall(&mut self, index: i64, err: &super::StoreError) {
        if self.stalled_at != Some(index) {
            self.stalled_at = Some(index);
            tracing::error!(index, error = %err, "consume-queue dispatch failed; dispatch stalls here and retries");
        }
    }

    /// Progress of the re-dispatch after a restart.
    fn note_replayed(&mut self, index: i64) {
        self.replayed += 1;
        if index == self.replay_until {
            tracing::info!(entries = self.replayed, "re-dispatch after restart done");
        } else if self.replayed % REPLAY_PROGRESS_EVERY == 0 {
            tracing::info!(
                done = self.replayed,
                total = self.replay_total,
                index,
                "re-dispatching after restart"
            );
        }
    }

    /// Number of committed entries this dispatcher re-reads because some structure lagged
    /// at recovery (0 when nothing lagged).
    pub fn replay_len(&self) -> i64 {
        self.replay_total
    }

    /// Publishes progress and wakes the held pulls of the queues that grew.
    fn publish(&mut self, m: DispatchMark) {
        self.tx.send_replace(m);
        for q in self.grown.drain(..) {
            q.wake_waiters();
        }
    }

    /// Errors only for a consume-queue write that failed on the filesystem (retryable: the
    /// record must not be skipped); logical errors are logged and the record skipped.
    fn dispatch(&mut self, e: LogEntryRef<'_>) -> Result<(), super::StoreError> {
        // Empty entries are the leader's election no-ops (one per elected term), not
        // messages: skipped without a warning. Only non-empty bodies that do not decode are
        // reported below.
        if e.body.is_empty() {
            tracing::trace!(index = e.index, "election no-op entry skipped");
            return Ok(());
        }
        let view = match RecordView::parse(e.body, CrcCheck::Skip) {
            Ok(v) => v,
            Err(err) => {
                tracing::error!(index = e.index, pos = e.pos, error = %err, "undecodable record in committed entry; skipped");
                return Ok(());
            }
        };
        // One pass over the properties for every value dispatch needs.
        let [origin, delay_level, tags, key_list, uniq_key] = find_properties(
            view.properties,
            [
                SCHEDULE_ORIGIN_PROPERTY,
                keys::DELAY_TIME_LEVEL,
                keys::TAGS,
                keys::KEYS,
                keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
            ],
        );
        if let Some(v) = origin {
            self.note_delivery(v);
        }
        let phys = e.pos + DLEDGER_ENTRY_HEADER_LEN;
        if view.topic == METADATA_TOPIC {
            self.apply_metadata(e.index, view.body, e.index >= self.markers_only_below);
        }
        if e.index < self.markers_only_below {
            if e.index < self.recheck_below {
                self.recheck(&view, e.index, phys, [delay_level, tags])?;
            }
            return Ok(());
        }
        if sysflag::is_dispatched_to_consume_queue(view.sys_flag) {
            let unit = self.unit_of(&view, phys, delay_level, tags);
            // A queue holds its records in log order: one whose last unit ends above this
            // record already has it (re-dispatch after a restart); a lagging one appends it
            // at the queue offset stored in the record.
            let res = self
                .queue_cache
                .get_or_create(&self.cqs, view.topic, view.queue_id)
                .and_then(|q| {
                    if phys < q.max_physical_end() && e.index >= self.recheck_below {
                        return Ok((q, AppendOutcome::AlreadyPresent));
                    }
                    q.append(view.queue_offset, unit).map(|o| (q, o))
                });
            self.note_append(&view, e.index, res)?;
        }
        if phys > self.indexed_through {
            match self.index.index_message(
                view.topic,
                key_list,
                uniq_key,
                phys,
                view.store_timestamp,
            ) {
                Ok(()) => self.indexed_through = phys,
                Err(err) => {
                    tracing::warn!(error = %err, "key index write failed");
                    self.indexed_through = self.index.last_physical_offset();
                }
            }
        }
        Ok(())
    }

    /// Applies the metadata record at `index` to the tables (see `metadata_log`). A topic
    /// deleted by a record dispatched for the first time (`live`) also loses its consume
    /// queues; when the record is re-read after a restart the queues are as the dispatch
    /// checkpoint left them, which already reflects it (and a topic created again later must
    /// keep its new queues).
    fn apply_metadata(&mut self, index: i64, body: &[u8], live: bool) {
        let Some(meta) = &self.metadata else {
            return;
        };
        if let Some(MetadataChange::TopicDelete { topic }) = meta.apply(index, body) {
            if live {
                if let Err(e) = self.cqs.remove_topic(&topic) {
                    tracing::warn!(topic, error = %e, "removing the consume queues of a deleted topic failed");
                }
            }
        }
    }

    /// The consume-queue unit of a record at `phys`.
    fn unit_of(
        &self,
        view: &RecordView<'_>,
        phys: i64,
        delay_level: Option<&[u8]>,
        tags: Option<&[u8]>,
    ) -> CqUnit {
        let tag_code = if view.topic == topic::SCHEDULE_TOPIC {
            let level = delay_level
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(1)
                .clamp(1, self.delay_levels_ms.len().max(1));
            let delay = self.delay_levels_ms.get(level - 1).copied().unwrap_or(1000);
            view.store_timestamp + delay
        } else {
            tags.map_or(0, tag::tag_code_of_bytes)
        };
        CqUnit {
            physical_offset: phys,
            size: view.total_size,
            tag_code,
        }
    }

    /// The re-check of an older store: a record of a queue that exists must be in it, at its
    /// own offset when that is free (or a hole), else at the end (see [`ConsumeQueue::append`]).
    /// Queues that no longer exist (deleted topics) are not brought back.
    fn recheck(
        &mut self,
        view: &RecordView<'_>,
        index: i64,
        phys: i64,
        [delay_level, tags]: [Option<&[u8]>; 2],
    ) -> Result<(), super::StoreError> {
        if !sysflag::is_dispatched_to_consume_queue(view.sys_flag) {
            return Ok(());
        }
        let Some(q) = self.cqs.get(view.topic, view.queue_id) else {
            return Ok(());
        };
        let unit = self.unit_of(view, phys, delay_level, tags);
        let res = q.append(view.queue_offset, unit).map(|o| (q, o));
        self.note_append(view, index, res)
    }

    /// Logs and counts what an append of entry `index` did; a filesystem error is returned
    /// (dispatch retries the record), any other error is logged and counted, and the record
    /// skipped.
    fn note_append(
        &mut self,
        view: &RecordView<'_>,
        index: i64,
        res: Result<(Arc<ConsumeQueue>, AppendOutcome), super::StoreError>,
    ) -> Result<(), super::StoreError> {
        let repairs = self.cqs.repairs();
        let (q, outcome) = match res {
            Ok(r) => r,
            Err(err @ super::StoreError::Io { .. }) => return Err(err),
            Err(err) => {
                repairs.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::error!(topic = view.topic, queue_id = view.queue_id, queue_offset = view.queue_offset, index, error = %err, "record fits no consume queue; skipped");
                return Ok(());
            }
        };
        match outcome {
            AppendOutcome::Appended | AppendOutcome::AlreadyPresent => {}
            AppendOutcome::AfterHoles { holes } => {
                repairs.holes.fetch_add(holes as u64, Ordering::Relaxed);
                tracing::warn!(
                    topic = view.topic,
                    queue_id = view.queue_id,
                    queue_offset = view.queue_offset,
                    holes,
                    "consume queue ended below the record's offset; holes written before it"
                );
            }
            AppendOutcome::FilledHole => {
                repairs.filled.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    topic = view.topic,
                    queue_id = view.queue_id,
                    queue_offset = view.queue_offset,
                    "record filled a hole at its offset"
                );
            }
            AppendOutcome::Renumbered { stored, at } => {
                repairs.renumbered.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    topic = view.topic,
                    queue_id = view.queue_id,
                    stored_offset = stored,
                    queue_offset = at,
                    "record's queue offset is taken or invalid; appended at the queue's end"
                );
            }
        }
        // A step touches few queues: a short scan keeps each once.
        if outcome.grew() && !self.grown.iter().any(|g| Arc::ptr_eq(g, &q)) {
            self.grown.push(q);
        }
        Ok(())
    }

    /// A delivered delayed message: advances the level's log-derived offset when the marker
    /// names a real schedule unit (same physical offset), so a copied or forged property
    /// cannot move progress.
    fn note_delivery(&self, value: &[u8]) {
        let Some(o) = ScheduleOrigin::parse(value) else {
            tracing::debug!("malformed schedule-origin marker ignored");
            return;
        };
        let unit = self
            .cqs
            .get(topic::SCHEDULE_TOPIC, o.level - 1)
            .and_then(|q| q.get(o.queue_offset).ok().flatten());
        match unit {
            Some(u) if u.physical_offset == o.physical_offset => {
                self.delay_offsets.note_delivered(&o);
            }
            _ => tracing::debug!(?o, "schedule-origin marker without a matching unit ignored"),
        }
    }
}

#[cfg(test)]
mod tests;
