//! Consumer offsets (QUERY_CONSUMER_OFFSET 14, UPDATE_CONSUMER_OFFSET 15) and queue offsets
//! (GET_MAX_OFFSET 30, GET_MIN_OFFSET 31, GET_EARLIEST_MSG_STORETIME 32,
//! SEARCH_OFFSET_BY_TIMESTAMP 29) (remoting.md §11.4).
//!
//! Only UPDATE_CONSUMER_OFFSET writes: it needs a group that exists or may be created under a
//! legal name, an existing topic (Java 5), a queue id within the topic's queues and an offset
//! of zero or more (ours: Java stores whatever it is sent). The queries answer an unknown or
//! absurd (topic, queue) as Java does, from an empty queue (max/min offset 0, store time -1,
//! consumer offset QUERY_NOT_FOUND), without creating anything.

use std::sync::Arc;

use remoting::headers::{
    GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use remoting::{ConnectionHandle, RemotingCommand, ResponseCode};

use crate::context::BrokerContext;
use crate::error::BrokerError;
use crate::processor::find_group;
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
    if find_group(&ctx, &h.consumer_group)?.is_none() {
        return Err(BrokerError::SubscriptionGroupNotExist(
            h.consumer_group.clone(),
        ));
    }
    let Some(queues) = ctx.topics.with(&h.topic, queue_nums) else {
        return Err(BrokerError::TopicNotExist(h.topic.clone()));
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
    ctx.offsets
        .commit_offset(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
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
