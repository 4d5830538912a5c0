//! Slave synchronisation (broker-roles.md §4.3): a slave copies the master's metadata — topic
//! configs (GET_ALL_TOPIC_CONFIG 21 on the VIP port listenPort − 2), consumer offsets
//! (GET_ALL_CONSUMER_OFFSET 43), delay offsets (GET_ALL_DELAY_OFFSET 45) and subscription
//! groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201) — applies and persists them. Messages are not
//! synced here: they come through the replicated log.
//!
//! Topics and groups are copied only while the replicated log carries no metadata record yet
//! (a store written before metadata went through the log); consumer offsets only feed the
//! offset table's pending layer (`ConsumerOffsetTable::apply_snapshot`). The log is the source
//! of all three once it carries them (`broker/METADATA_LOG.md`).
//!
//! The master address is the one the name server returned to the last two-way registration
//! (`ctx.role.master_addr()`); without it, or when it is this broker, a run does nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remoting::{RemotingClient, RemotingCommand, RequestCode, ResponseCode};
use tokio_util::sync::CancellationToken;

use crate::context::BrokerContext;
use crate::error::BrokerError;
use crate::store::{ConsumerOffsetTable, DelayOffsetTable, SubscriptionGroupTable, TopicTable};

/// Java 4.9.x period.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Java: first run 3 s after becoming slave.
pub const DEFAULT_FIRST_DELAY: Duration = Duration::from_secs(3);
/// Timeout of each request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Which parts a run copied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// The topic table changed (the master's data version differed).
    pub topics_replaced: bool,
    pub consumer_offsets: bool,
    pub delay_offsets: bool,
    pub subscription_groups: bool,
}

/// The VIP address (port − 2) of a broker address; `None` when the port is too small.
pub fn vip_addr(addr: SocketAddr) -> Option<SocketAddr> {
    let port = addr.port().checked_sub(2).filter(|p| *p > 0)?;
    Some(SocketAddr::new(addr.ip(), port))
}

/// The master to sync from, if known and not this broker.
pub fn master_to_sync(ctx: &BrokerContext) -> Option<SocketAddr> {
    let m = ctx.role.master_addr()?;
    if m == ctx.config.broker_addr() {
        return None;
    }
    let addr: SocketAddr = m.parse().ok()?;
    if addr == ctx.store_host {
        return None;
    }
    Some(addr)
}

async fn fetch(
    client: &RemotingClient,
    addr: SocketAddr,
    code: RequestCode,
) -> Result<bytes::Bytes, BrokerError> {
    let resp = client
        .invoke(addr, RemotingCommand::request_empty(code), REQUEST_TIMEOUT)
        .await
        .map_err(|e| BrokerError::System(format!("{code:?} to {addr}: {e}")))?;
    if resp.response_code() != ResponseCode::SUCCESS {
        return Err(BrokerError::System(format!(
            "{code:?} to {addr}: code {} {}",
            resp.code(),
            resp.remark().unwrap_or_default()
        )));
    }
    Ok(resp.body().clone())
}

fn bad_body(what: &str, e: serde_json::Error) -> BrokerError {
    BrokerError::System(format!("bad {what} body: {e}"))
}

/// Topic configs: the VIP port first (as Java), the normal port if the VIP one is unreachable.
pub async fn sync_topics(
    ctx: &BrokerContext,
    client: &RemotingClient,
    master: SocketAddr,
) -> Result<bool, BrokerError> {
    let body = match vip_addr(master) {
        Some(vip) => match fetch(client, vip, RequestCode::GET_ALL_TOPIC_CONFIG).await {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "VIP channel failed; trying the main port");
                fetch(client, master, RequestCode::GET_ALL_TOPIC_CONFIG).await?
            }
        },
        None => fetch(client, master, RequestCode::GET_ALL_TOPIC_CONFIG).await?,
    };
    let w = TopicTable::parse_body(&body).map_err(|e| bad_body("topic config", e))?;
    Ok(ctx.topics.apply_snapshot(w)?)
}

/// Consumer offsets: master entries overwrite local ones; persisted.
pub async fn sync_consumer_offsets(
    ctx: &BrokerContext,
    client: &RemotingClient,
    master: SocketAddr,
) -> Result<(), BrokerError> {
    let body = fetch(client, master, RequestCode::GET_ALL_CONSUMER_OFFSET).await?;
    let w = ConsumerOffsetTable::parse_body(&body).map_err(|e| bad_body("consumer offset", e))?;
    ctx.offsets.apply_snapshot(w)?;
    Ok(())
}

/// Delay offsets: the master's table replaces the local one; persisted.
pub async fn sync_delay_offsets(
    ctx: &BrokerContext,
    client: &RemotingClient,
    master: SocketAddr,
) -> Result<(), BrokerError> {
    let body = fetch(client, master, RequestCode::GET_ALL_DELAY_OFFSET).await?;
    let w = DelayOffsetTable::parse_body(&body).map_err(|e| bad_body("delay offset", e))?;
    ctx.delay_offsets.apply_snapshot(w)?;
    Ok(())
}

/// Subscription groups: replaced when the master's data version differs; persisted.
pub async fn sync_subscription_groups(
    ctx: &BrokerContext,
    client: &RemotingClient,
    master: SocketAddr,
) -> Result<(), BrokerError> {
    let body = fetch(
        client,
        master,
        RequestCode::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    )
    .await?;
    let w =
        SubscriptionGroupTable::parse_body(&body).map_err(|e| bad_body("subscription group", e))?;
    ctx.subscriptions.apply_snapshot(w)?;
    Ok(())
}

/// One full run against `master`. Each part is independent: a failed part is logged and the
/// others still run.
pub async fn sync_all(
    ctx: &BrokerContext,
    client: &RemotingClient,
    master: SocketAddr,
) -> SyncReport {
    let mut r = SyncReport::default();
    // Once the log carries metadata (broker/METADATA_LOG.md) it alone changes topics and groups
    // here: a snapshot from a stale or lagging master would undo records already applied.
    let log_carries_metadata = ctx.store.metadata().applied_through() >= 0;
    if !log_carries_metadata {
        match sync_topics(ctx, client, master).await {
            Ok(changed) => r.topics_replaced = changed,
            Err(e) => tracing::warn!(%master, error = %e, "slave sync: topic config failed"),
        }
    }
    match sync_consumer_offsets(ctx, client, master).await {
        Ok(()) => r.consumer_offsets = true,
        Err(e) => tracing::warn!(%master, error = %e, "slave sync: consumer offsets failed"),
    }
    match sync_delay_offsets(ctx, client, master).await {
        Ok(()) => r.delay_offsets = true,
        Err(e) => tracing::warn!(%master, error = %e, "slave sync: delay offsets failed"),
    }
    if !log_carries_metadata {
        match sync_subscription_groups(ctx, client, master).await {
            Ok(()) => r.subscription_groups = true,
            Err(e) => tracing::warn!(%master, error = %e, "slave sync: subscription groups failed"),
        }
    }
    r
}

/// Periodic sync until `stop` is cancelled: first after `first_delay`, then every `interval`.
pub async fn run(
    ctx: Arc<BrokerContext>,
    client: RemotingClient,
    stop: CancellationToken,
    first_delay: Duration,
    interval: Duration,
) {
    tracing::info!(
        interval_ms = interval.as_millis() as u64,
        "slave sync started"
    );
    let mut wait = first_delay;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = interval;
        let Some(master) = master_to_sync(&ctx) else {
            tracing::debug!("slave sync: master address unknown");
            continue;
        };
        let t = Instant::now();
        let r = tokio::select! {
            _ = stop.cancelled() => break,
            r = sync_all(&ctx, &client, master) => r,
        };
        tracing::debug!(%master, ?r, elapsed_ms = t.elapsed().as_millis() as u64, "slave sync run");
    }
    tracing::info!("slave sync stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_is_port_minus_two() {
        let a: SocketAddr = "10.0.0.1:30911".parse().unwrap();
        assert_eq!(vip_addr(a), Some("10.0.0.1:30909".parse().unwrap()));
        assert_eq!(vip_addr("10.0.0.1:2".parse().unwrap()), None);
        assert_eq!(vip_addr("10.0.0.1:1".parse().unwrap()), None);
    }
}
