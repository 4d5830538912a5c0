//! Consumer offsets (QUERY_CONSUMER_OFFSET 14, UPDATE_CONSUMER_OFFSET 15) and queue offsets
//! (GET_MAX_OFFSET 30, GET_MIN_OFFSET 31, GET_EARLIEST_MSG_STORETIME 32,
//! SEARCH_OFFSET_BY_TIMESTAMP 29) (remoting.md §11.4).
//!
//! Only UPDATE_CONSUMER_OFFSET writes: it needs a group and a topic with legal names, a queue
//! id within the topic's queues (within `maxTopicQueueNums` for a topic this member does not
//! know yet) and an offset of zero or more (ours: Java 4.9 stores whatever it is sent). Java
//! 5 also refuses a group or topic missing from this member's tables; here those tables lag
//! the master's on a new master right after a failover (slave sync runs every 10 s), and the
//! consumers' commits must not be refused then. The queries answer an unknown or absurd
//! (topic, queue) as Java does, from an empty queue (max/min offset 0, store time -1, consumer
//! offset QUERY_NOT_FOUND), without creating anything.

use std::sync::Arc;

use remoting::custom_headers::{
    GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use remoting::{ConnectionHandle, RemotingCommand, ResponseCode};

use crate::context::BrokerContext;
use crate::error::BrokerError;
use crate::message::topic as names;
use crate::store::topics::queue_nums;

/// QUERY_CONSUMER_OFFSET: the stored offset; 0 for a queue whose first message is still
/// there (Java), else QUERY_NOT_FOUND so the client applies its consume-from policy.
pub async fn query_consumer_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: QueryConsumerOffsetRequestHeader = req.decode_header()?;
    if let Some(o) = ctx
        .offsets
        .query_offset(&h.consumer_group, &h.topic, h.queue_id)
    {
        return Ok(RemotingCommand::success()
            .with_header(&QueryConsumerOffsetResponseHeader { offset: o }));
    }
    ctx.store.catch_up_dispatch().await;
    let min = ctx.store.min_offset(&h.topic, h.queue_id);
    let has_data = ctx.store.max_offset(&h.topic, h.queue_id) > 0;
    if h.set_zero_if_not_found != Some(false) && min <= 0 && has_data {
        return Ok(RemotingCommand::success()
            .with_header(&QueryConsumerOffsetResponseHeader { offset: 0 }));
    }
    Ok(RemotingCommand::response(
        ResponseCode::QUERY_NOT_FOUND,
        "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
    ))
}

/// UPDATE_CONSUMER_OFFSET (usually oneway).
pub async fn update_consumer_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: UpdateConsumerOffsetRequestHeader = req.decode_header()?;
    // A group that could never be created (Java 5 `findSubscriptionGroupConfig`) gets no
    // offsets either; one already in the table keeps working.
    if names::validate_group(&h.consumer_group).is_err()
        && ctx.subscriptions.get(&h.consumer_group).is_none()
    {
        return Err(BrokerError::SubscriptionGroupNotExist(
            h.consumer_group.clone(),
        ));
    }
    let queues = match ctx.topics.with(&h.topic, queue_nums) {
        Some(n) => n,
        None => {
            names::validate_topic(&h.topic)?;
            ctx.config.max_topic_queue_nums
        }
    };
    if h.queue_id < 0 || h.queue_id >= queues {
        return Err(BrokerError::InvalidParameter(format!(
            "queueId[{}] is illegal, topic:[{}] has {queues} queues",
            h.queue_id, h.topic
        )));
    }
    if h.commit_offset < 0 {
        return Err(BrokerError::InvalidParameter(format!(
            "commitOffset[{}] is illegal, topic:[{}] queueId:[{}]: an offset is never negative",
            h.commit_offset, h.topic, h.queue_id
        )));
    }
    if req.is_oneway() {
        // Nobody waits for the answer: the commit reaches the log in the next window.
        ctx.offsets
            .commit_offset(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
    } else {
        // Answered once in the log, so the next master returns it (G5a).
        crate::metadata::commit_offset_replicated(
            &ctx,
            &h.consumer_group,
            &h.topic,
            h.queue_id,
            h.commit_offset,
        )
        .await?;
    }
    Ok(RemotingCommand::success())
}

/// GET_MAX_OFFSET.
pub async fn get_max_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: GetMaxOffsetRequestHeader = req.decode_header()?;
    ctx.store.catch_up_dispatch().await;
    let offset = ctx.store.max_offset(&h.topic, h.queue_id);
    Ok(RemotingCommand::success().with_header(&OffsetResponseHeader { offset }))
}

/// GET_MIN_OFFSET.
pub async fn get_min_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: GetMinOffsetRequestHeader = req.decode_header()?;
    ctx.store.catch_up_dispatch().await;
    let offset = ctx.store.min_offset(&h.topic, h.queue_id);
    Ok(RemotingCommand::success().with_header(&OffsetResponseHeader { offset }))
}

/// GET_EARLIEST_MSG_STORETIME.
pub async fn get_earliest_msg_storetime(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: GetEarliestMsgStoretimeRequestHeader = req.decode_header()?;
    ctx.store.catch_up_dispatch().await;
    let timestamp = ctx.store.earliest_store_time(&h.topic, h.queue_id);
    Ok(
        RemotingCommand::success()
            .with_header(&GetEarliestMsgStoretimeResponseHeader { timestamp }),
    )
}

/// SEARCH_OFFSET_BY_TIMESTAMP.
pub async fn search_offset_by_timestamp(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: SearchOffsetRequestHeader = req.decode_header()?;
    let upper = h
        .boundary_type
        .as_deref()
        .is_some_and(|b| b.eq_ignore_ascii_case("UPPER"));
    ctx.store.catch_up_dispatch().await;
    let offset = ctx
        .store
        .offset_by_time(&h.topic, h.queue_id, h.timestamp, upper);
    Ok(RemotingCommand::success().with_header(&OffsetResponseHeader { offset }))
}
