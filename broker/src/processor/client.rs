//! Client registration: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP
//! (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), and NOTIFY_CONSUMER_IDS_CHANGED (40) sent to
//! a group's members when its membership changes (remoting.md §11.3-§11.5).
//!
//! A malformed heartbeat is answered with an error for that request only (Q19).

use std::sync::Arc;
use std::time::Duration;

use remoting::custom_headers::{
    GetConsumerListByGroupRequestHeader, NotifyConsumerIdsChangedRequestHeader,
    UnregisterClientRequestHeader,
};
use remoting::{ConnectionHandle, ConnectionListener, RemotingCommand, RequestCode};
use serde::Deserialize;
use serde_json::Value;

use crate::clients::{parse_heartbeat, MessageQueue};
use crate::context::{now_ms, BrokerContext};
use crate::error::BrokerError;
use crate::processor::{find_group, retry_queue_nums};
use remoting::body::quote_bare_keys;

/// Lock lifetime without renewal (Java `rebalance.lockMaxLiveTime`).
const LOCK_EXPIRE_MS: i64 = 60_000;

/// Sends NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member of `group`, if the group
/// wants it. Runs in the background: a slow client never delays the request that caused it.
pub fn notify_group_changed(ctx: &BrokerContext, group: &str) {
    let enabled = ctx
        .subscriptions
        .get(group)
        .is_none_or(|g| g.notify_consumer_ids_changed_enable);
    if !enabled {
        return;
    }
    let conns = ctx.clients.consumer_connections(group);
    if conns.is_empty() {
        return;
    }
    let header = NotifyConsumerIdsChangedRequestHeader {
        consumer_group: group.to_owned(),
    };
    let cmd = RemotingCommand::request(RequestCode::NOTIFY_CONSUMER_IDS_CHANGED, &header);
    tokio::spawn(async move {
        for c in conns {
            if let Err(e) = c.invoke_oneway(cmd.clone(), Duration::from_secs(3)).await {
                tracing::debug!(peer = %c.remote_addr(), error = %e, "notify consumer ids changed failed");
            }
        }
    });
}

/// HEART_BEAT.
pub async fn heartbeat(
    ctx: Arc<BrokerContext>,
    conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let hb = parse_heartbeat(req.body()).map_err(|e| BrokerError::System(e.to_string()))?;
    let now = now_ms();
    for c in &hb.consumers {
        // Java 5 creates no group under an illegal name and then skips its retry topic; its
        // consumers are not registered here either.
        let Some(group) = find_group(&ctx, &c.group_name)? else {
            continue;
        };
        if let Some(queues) = retry_queue_nums(&ctx, &group) {
            ctx.topics.create_retry_topic(&c.group_name, queues)?;
        }
        if ctx.clients.register_consumer(c, &hb.client_id, &conn, now) {
            tracing::info!(group = %c.group_name, client = %hb.client_id, "consumer joined");
            notify_group_changed(&ctx, &c.group_name);
        }
    }
    for g in &hb.producer_groups {
        ctx.clients.register_producer(g, &hb.client_id, &conn, now);
    }
    Ok(RemotingCommand::success())
}

/// UNREGISTER_CLIENT.
pub async fn unregister_client(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: UnregisterClientRequestHeader = req.decode_header()?;
    if let Some(g) = h.producer_group.as_deref().filter(|g| !g.is_empty()) {
        ctx.clients.unregister_producer(g, &h.client_id);
    }
    if let Some(g) = h.consumer_group.as_deref().filter(|g| !g.is_empty()) {
        if ctx.clients.unregister_consumer(g, &h.client_id) {
            notify_group_changed(&ctx, g);
        }
    }
    Ok(RemotingCommand::success())
}

/// GET_CONSUMER_LIST_BY_GROUP.
pub async fn get_consumer_list(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: GetConsumerListByGroupRequestHeader = req.decode_header()?;
    let ids = ctx.clients.consumer_ids(&h.consumer_group);
    if ids.is_empty() {
        return Err(BrokerError::System(format!(
            "no consumer for this group, {}",
            h.consumer_group
        )));
    }
    let body = serde_json::json!({ "consumerIdList": ids }).to_string();
    Ok(RemotingCommand::success().with_body(body))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LockBody {
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    consumer_group: String,
    #[serde(default)]
    mq_set: Vec<Value>,
}

fn parse_lock_body(body: &[u8]) -> Result<(LockBody, Vec<MessageQueue>), BrokerError> {
    let b: LockBody = serde_json::from_slice(&quote_bare_keys(body))
        .map_err(|e| BrokerError::System(format!("bad lock body: {e}")))?;
    let mqs = b
        .mq_set
        .iter()
        .filter_map(|v| {
            Some(MessageQueue {
                broker_name: v.get("brokerName")?.as_str()?.to_owned(),
                queue_id: match v.get("queueId")? {
                    Value::Number(n) => i32::try_from(n.as_i64()?).ok()?,
                    Value::String(s) => s.parse().ok()?,
                    _ => return None,
                },
                topic: v.get("topic")?.as_str()?.to_owned(),
            })
        })
        .collect();
    Ok((b, mqs))
}

/// LOCK_BATCH_MQ.
pub async fn lock_batch(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let (b, mqs) = parse_lock_body(req.body())?;
    let ok = ctx.queue_locks.lock(
        &b.consumer_group,
        &b.client_id,
        &mqs,
        now_ms(),
        LOCK_EXPIRE_MS,
    );
    let body = serde_json::json!({ "lockOKMQSet": ok }).to_string();
    Ok(RemotingCommand::success().with_body(body))
}

/// UNLOCK_BATCH_MQ.
pub async fn unlock_batch(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let (b, mqs) = parse_lock_body(req.body())?;
    ctx.queue_locks
        .unlock(&b.consumer_group, &b.client_id, &mqs);
    Ok(RemotingCommand::success())
}

/// Forgets a closed connection's registrations and notifies the affected groups.
pub struct ClientConnectionListener(pub Arc<BrokerContext>);

impl ConnectionListener for ClientConnectionListener {
    fn on_close(&self, conn: &ConnectionHandle) {
        for g in self.0.clients.connection_closed(conn.id()) {
            tracing::info!(group = %g, peer = %conn.remote_addr(), "consumer left (connection closed)");
            notify_group_changed(&self.0, &g);
        }
    }
}
