//! The master's side of metadata through the log (see `store::metadata_log`): a change is
//! proposed as a record of the reserved metadata topic, committed on a quorum and applied by
//! this member's dispatcher before the request that made it is answered, so every member (and
//! so every future master) has it. Consumer offsets, which are frequent, are gathered as
//! pending commits and proposed by [`run_offset_flusher`] in one record per flush window.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::context::{now_ms, BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::record::{encode_record, MagicPolicy, RecordFields};
use crate::message::topic as names;
use crate::store::metadata_log::{MetadataChange, OffsetCommit, METADATA_TOPIC};
use crate::store::offsets::TOPIC_GROUP_SEPARATOR;
use crate::store::subscriptions::SYSTEM_GROUPS;
use crate::store::topics::system_topics;
use crate::store::{SubscriptionGroupConfig, TopicConfig};

/// How long a change may take to commit and be applied here before the request fails.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default window in which consumer offset commits are gathered into one record.
pub const DEFAULT_OFFSET_FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Most offset commits in one record (a record stays far below `maxMessageSize`).
const OFFSETS_PER_RECORD: usize = 2048;

/// The stored record of `change`.
fn encode_change(ctx: &BrokerContext, change: &MetadataChange) -> Result<BytesMut, BrokerError> {
    let body = change.to_body();
    let now = now_ms();
    let fields = RecordFields {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: now,
        born_host: ctx.store_host,
        store_timestamp: now,
        store_host: ctx.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &body,
        topic: METADATA_TOPIC,
        properties: b"",
    };
    let mut limits = ctx.config.message_limits();
    limits.max_body_bytes = limits.max_body_bytes.max(body.len());
    let mut out = BytesMut::new();
    encode_record(&fields, &limits, MagicPolicy::Auto, &mut out)?;
    Ok(out)
}

/// Commits `change` through the log and waits until this member's tables have it. Only the
/// master may (the log refuses anyone else).
pub async fn commit_change(ctx: &BrokerContext, change: MetadataChange) -> Result<(), BrokerError> {
    if ctx.role.role() == ServingRole::Slave {
        return Err(BrokerError::ServiceNotAvailable(format!(
            "broker {} is not master (DLedger follower): metadata changes go to the master",
            ctx.config.broker_addr()
        )));
    }
    let record = encode_change(ctx, &change)?;
    let put = ctx
        .store
        .put_record(METADATA_TOPIC, 0, record, true)
        .await?;
    wait_applied(ctx, put.position.index.raw()).await
}

/// Waits until this member's dispatcher has passed log index `index` (so its metadata record,
/// if any, is in the tables).
async fn wait_applied(ctx: &BrokerContext, index: i64) -> Result<(), BrokerError> {
    let mut rx = ctx.store.dispatched();
    let waited = tokio::time::timeout(COMMIT_TIMEOUT, async {
        rx.wait_for(|m| m.index >= index).await.is_ok()
    })
    .await;
    match waited {
        Ok(true) => Ok(()),
        Ok(false) => Err(BrokerError::ServiceNotAvailable("store shut down".into())),
        Err(_) => Err(BrokerError::AppendIndeterminate(format!(
            "metadata record {index} committed but not applied within {COMMIT_TIMEOUT:?}"
        ))),
    }
}

/// Wakes and follows the offset flusher.
#[derive(Debug)]
pub struct OffsetFlushSignal {
    /// Asks for a flush now (a client waits for its commit).
    flush_now: Notify,
    /// Pending-commit sequence number through which commits are in the log and applied.
    flushed: watch::Sender<u64>,
    /// This process has checked (as master) that the log carries its tables.
    bootstrapped: AtomicBool,
}

impl Default for OffsetFlushSignal {
    fn default() -> Self {
        OffsetFlushSignal {
            flush_now: Notify::new(),
            flushed: watch::channel(0).0,
            bootstrapped: AtomicBool::new(false),
        }
    }
}

impl OffsetFlushSignal {
    /// Waits until the pending commit with sequence number `seq` is in the log (asking for a
    /// flush now). Errors when that does not happen within [`COMMIT_TIMEOUT`] (the member lost
    /// its leadership, the quorum is gone).
    pub async fn wait_flushed(&self, seq: u64) -> Result<(), BrokerError> {
        let mut rx = self.flushed.subscribe();
        self.flush_now.notify_one();
        let waited = tokio::time::timeout(COMMIT_TIMEOUT, async {
            rx.wait_for(|&s| s >= seq).await.is_ok()
        })
        .await;
        match waited {
            Ok(true) => Ok(()),
            Ok(false) => Err(BrokerError::ServiceNotAvailable(
                "broker shutting down".into(),
            )),
            Err(_) => Err(BrokerError::System(format!(
                "consumer offset not replicated within {COMMIT_TIMEOUT:?}"
            ))),
        }
    }
}

/// While this member is master: every `interval` (or at once when a client waits), proposes
/// the pending consumer offset commits as metadata records and, once applied, drops them
/// from the pending set. Runs until `stop`.
pub async fn run_offset_flusher(
    ctx: Arc<BrokerContext>,
    signal: Arc<OffsetFlushSignal>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
            _ = signal.flush_now.notified() => {}
        }
        if !signal.bootstrapped.load(Ordering::Acquire) && ctx.role.role() == ServingRole::Master {
            match bootstrap_unlogged_tables(&ctx).await {
                Ok(()) => signal.bootstrapped.store(true, Ordering::Release),
                Err(e) => {
                    tracing::warn!(error = %e, "logging the tables of an older store failed; retrying")
                }
            }
        }
        if let Err(e) = flush_offsets(&ctx, &signal).await {
            tracing::warn!(error = %e, "consumer offsets not flushed to the log; retrying");
        }
    }
}

/// A master whose log carries no metadata record yet (a store written before metadata went
/// through the log, possibly with topics and groups a follower never synced) puts every topic
/// and group of its tables that the broker does not create by itself, and every consumer
/// offset, into the log once, so every member and every later master has them. Nothing to do on a log that carries
/// metadata.
async fn bootstrap_unlogged_tables(ctx: &BrokerContext) -> Result<(), BrokerError> {
    if ctx.store.metadata().applied_through() >= 0 {
        return Ok(());
    }
    let own: HashSet<String> = system_topics(&ctx.config.topic_defaults())
        .into_iter()
        .map(|t| t.topic_name)
        .collect();
    let topics: Vec<TopicConfig> = ctx
        .topics
        .snapshot()
        .topic_config_table
        .into_values()
        .filter(|t| {
            !own.contains(&t.topic_name)
                && !names::is_system_topic(&t.topic_name)
                && !t.topic_name.starts_with(names::RETRY_GROUP_TOPIC_PREFIX)
                && !t.topic_name.starts_with(names::DLQ_GROUP_TOPIC_PREFIX)
        })
        .collect();
    let groups: Vec<SubscriptionGroupConfig> = ctx
        .subscriptions
        .snapshot()
        .subscription_group_table
        .into_values()
        .filter(|g| !SYSTEM_GROUPS.contains(&g.group_name.as_str()))
        .collect();
    let offsets: Vec<OffsetCommit> = ctx
        .offsets
        .snapshot()
        .offset_table
        .into_iter()
        .filter_map(|(key, queues)| {
            let (topic, group) = key.rsplit_once(TOPIC_GROUP_SEPARATOR)?;
            let (topic, group) = (topic.to_owned(), group.to_owned());
            Some(
                queues
                    .into_iter()
                    .map(move |(queue_id, offset)| OffsetCommit {
                        topic: topic.clone(),
                        group: group.clone(),
                        queue_id,
                        offset,
                    }),
            )
        })
        .flatten()
        .collect();
    if topics.is_empty() && groups.is_empty() && offsets.is_empty() {
        return Ok(());
    }
    tracing::info!(
        topics = topics.len(),
        groups = groups.len(),
        offsets = offsets.len(),
        "the log carries no metadata yet: logging this master's tables once"
    );
    for t in topics {
        put_topic(ctx, t).await?;
    }
    for g in groups {
        put_group(ctx, g).await?;
    }
    for chunk in offsets.chunks(OFFSETS_PER_RECORD) {
        let offsets = chunk.to_vec();
        commit_change(ctx, MetadataChange::Offsets { offsets }).await?;
    }
    Ok(())
}

/// One flush: the pending commits as records, then the pending set trimmed.
pub async fn flush_offsets(
    ctx: &BrokerContext,
    signal: &OffsetFlushSignal,
) -> Result<(), BrokerError> {
    if ctx.role.role() != ServingRole::Master || !ctx.offsets.has_pending() {
        return Ok(());
    }
    let batch = ctx.offsets.pending_batch();
    for chunk in batch.commits.chunks(OFFSETS_PER_RECORD) {
        let offsets: Vec<OffsetCommit> = chunk.to_vec();
        commit_change(ctx, MetadataChange::Offsets { offsets }).await?;
    }
    ctx.offsets.clear_pending_through(batch.through_seq);
    signal.flushed.send_if_modified(|s| {
        let moved = batch.through_seq > *s;
        *s = (*s).max(batch.through_seq);
        moved
    });
    Ok(())
}

/// Creates or replaces a topic through the log (UPDATE_AND_CREATE_TOPIC, auto-creation on
/// send); returns once this member's table has it.
pub async fn put_topic(ctx: &BrokerContext, cfg: TopicConfig) -> Result<(), BrokerError> {
    commit_change(ctx, MetadataChange::TopicPut { topic_config: cfg }).await
}

/// Deletes a topic through the log (DELETE_TOPIC_IN_BROKER): the tables and consume queues of
/// every member, then this master's queue-offset counters (a re-created topic starts at 0).
pub async fn delete_topic(ctx: &BrokerContext, topic: &str) -> Result<(), BrokerError> {
    commit_change(
        ctx,
        MetadataChange::TopicDelete {
            topic: topic.to_owned(),
        },
    )
    .await?;
    ctx.store.delete_topic(topic).await?;
    Ok(())
}

/// Creates or replaces a subscription group through the log.
pub async fn put_group(
    ctx: &BrokerContext,
    cfg: SubscriptionGroupConfig,
) -> Result<(), BrokerError> {
    commit_change(ctx, MetadataChange::GroupPut { group_config: cfg }).await
}

/// Deletes a subscription group (and, with `clean_offset`, its offsets) through the log.
pub async fn delete_group(
    ctx: &BrokerContext,
    group: &str,
    clean_offset: bool,
) -> Result<(), BrokerError> {
    commit_change(
        ctx,
        MetadataChange::GroupDelete {
            group: group.to_owned(),
            clean_offset,
        },
    )
    .await
}

/// A consumer's two-way offset commit (UPDATE_CONSUMER_OFFSET): answered once it is in the
/// log. On a member that is not master the commit is only answered from here on (the log
/// takes changes from the master alone), as before.
pub async fn commit_offset_replicated(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> Result<(), BrokerError> {
    let seq = ctx.offsets.commit_offset(group, topic, queue_id, offset);
    if ctx.role.role() != ServingRole::Master {
        return Ok(());
    }
    ctx.offset_flush.wait_flushed(seq).await
}
