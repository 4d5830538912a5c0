//! PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) with long polling (remoting.md §11.4).
//!
//! The lookup runs on committed, dispatched data only. When nothing is there and the suspend
//! bit is set, the request is held (see `store::long_poll`) until the queue grows or the
//! suspend timeout passes. Offsets are corrected only on the master.
//!
//! Checks in Java's order (`PullMessageProcessor`): the group (never auto-created under an
//! illegal name), its consume permission, the topic, its read permission, then the queue id
//! against the topic's *read* queues (SYSTEM_ERROR, Java's remark). A negative or too large
//! `queueOffset` is answered by the store like Java (PULL_OFFSET_MOVED to the queue's bounds);
//! `maxMsgNums` is clamped to 1..=1024 (Java stops at 32 per pull in memory anyway).

use std::sync::Arc;
use std::time::Duration;

use remoting::custom_headers::{
    PullMessageRequestHeader, PullMessageResponseHeader, PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
};
use remoting::{ConnectionHandle, RemotingCommand, ResponseCode};

use crate::clients::Subscription;
use crate::context::{BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::processor::find_group;
use crate::store::long_poll::hold_for_queue;
use crate::store::message_store::{GetResult, GetStatus};
use crate::store::topics::perm;

/// Largest hold a client may ask for.
const MAX_SUSPEND_MS: i64 = 60_000;

fn lookup(ctx: &BrokerContext, h: &PullMessageRequestHeader, sub: &Subscription) -> GetResult {
    let max_msgs = usize::try_from(h.max_msg_nums).unwrap_or(1).clamp(1, 1024);
    let max_bytes = h
        .max_msg_bytes
        .and_then(|b| usize::try_from(b).ok())
        .filter(|b| *b > 0)
        .unwrap_or(usize::MAX)
        .min((ctx.config.max_transfer_bytes_on_message_in_memory as usize).max(1 << 20));
    let is_master = ctx.role.role() == ServingRole::Master;
    ctx.store.get_messages(
        &h.topic,
        h.queue_id,
        h.queue_offset,
        max_msgs,
        max_bytes,
        is_master,
        &|code| sub.accepts_tag_code(code),
    )
}

fn response(h: &PullMessageRequestHeader, r: GetResult) -> RemotingCommand {
    let code = match r.status {
        GetStatus::Found => ResponseCode::SUCCESS,
        GetStatus::NoMatchedMessage | GetStatus::MessageWasRemoving => {
            ResponseCode::PULL_RETRY_IMMEDIATELY
        }
        GetStatus::NoMatchedLogicQueue | GetStatus::NoMessageInQueue => {
            if h.queue_offset != 0 {
                ResponseCode::PULL_OFFSET_MOVED
            } else {
                ResponseCode::PULL_NOT_FOUND
            }
        }
        GetStatus::OffsetFoundNull | GetStatus::OffsetOverflowOne => ResponseCode::PULL_NOT_FOUND,
        GetStatus::OffsetOverflowBadly | GetStatus::OffsetTooSmall => {
            ResponseCode::PULL_OFFSET_MOVED
        }
    };
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: r.next_begin_offset,
        min_offset: r.min_offset,
        max_offset: r.max_offset,
        ..Default::default()
    };
    let mut resp = RemotingCommand::response(code, r.status.name()).with_header(&header);
    if code == ResponseCode::SUCCESS {
        resp = resp.with_body(r.body.freeze());
    }
    resp
}

/// PULL_MESSAGE.
pub async fn pull(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: PullMessageRequestHeader = req.decode_header()?;
    let Some(group) = find_group(&ctx, &h.consumer_group)? else {
        return Err(BrokerError::SubscriptionGroupNotExist(
            h.consumer_group.clone(),
        ));
    };
    if !group.consume_enable {
        return Err(BrokerError::NoPermission(format!(
            "subscription group no permission, {}",
            h.consumer_group
        )));
    }
    let Some(topic) = ctx.topics.get(&h.topic) else {
        return Ok(RemotingCommand::response(
            ResponseCode::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please!", h.topic),
        ));
    };
    if !perm::is_readable(topic.perm) {
        return Err(BrokerError::NoPermission(format!(
            "the topic[{}] pulling message is forbidden",
            h.topic
        )));
    }
    if h.queue_id < 0 || h.queue_id >= topic.read_queue_nums {
        return Err(BrokerError::System(format!(
            "queueId[{}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}] consumer:[{}]",
            h.queue_id,
            h.topic,
            topic.read_queue_nums,
            _conn.remote_addr()
        )));
    }
    let sub = if h.sys_flag & PULL_FLAG_SUBSCRIPTION != 0 {
        let mut s = Subscription::from_expression(
            &h.topic,
            h.subscription.as_deref().unwrap_or("*"),
            h.sub_version,
        );
        if let Some(t) = &h.expression_type {
            s.expression_type = t.clone();
        }
        s
    } else {
        ctx.clients
            .subscription(&h.consumer_group, &h.topic)
            .unwrap_or_else(|| Subscription::from_expression(&h.topic, "*", 0))
    };

    // A pull reads everything committed before it came, even what is not yet in its queue.
    ctx.store.catch_up_dispatch().await;
    let mut r = lookup(&ctx, &h, &sub);
    let holdable = matches!(
        r.status,
        GetStatus::OffsetOverflowOne | GetStatus::OffsetFoundNull
    ) || (r.status == GetStatus::NoMessageInQueue && h.queue_offset == 0)
        || (r.status == GetStatus::NoMatchedLogicQueue && h.queue_offset == 0);
    if holdable && h.sys_flag & PULL_FLAG_SUSPEND != 0 {
        let hold_ms = if ctx.config.long_polling_enable {
            h.suspend_timeout_millis.clamp(0, MAX_SUSPEND_MS)
        } else {
            ctx.config.short_polling_time_mills as i64
        };
        let store = &ctx.store;
        let (qid, offset) = (h.queue_id, h.queue_offset);
        hold_for_queue(
            store.consume_queues(),
            store.dispatched(),
            &h.topic,
            qid,
            Duration::from_millis(hold_ms as u64),
            &ctx.shutdown,
            || store.max_offset(&h.topic, qid) > offset,
        )
        .await;
        r = lookup(&ctx, &h, &sub);
    }
    if h.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0 && h.commit_offset >= 0 {
        ctx.offsets
            .commit_offset(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
    }
    Ok(response(&h, r))
}
