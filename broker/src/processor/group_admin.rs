//! Subscription-group administration: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
//! DELETE_SUBSCRIPTIONGROUP (207). Changes go through
//! the replicated log (`broker/METADATA_LOG.md`) and are answered once applied here, so the
//! next master has them.

use std::sync::Arc;

use remoting::custom_headers::DeleteSubscriptionGroupRequestHeader;
use remoting::{ConnectionHandle, RemotingCommand};

use crate::context::BrokerContext;
use crate::error::BrokerError;
use crate::message::topic as names;
use crate::metadata;
use crate::store::SubscriptionGroupConfig;

/// A group name a client may create or delete (Java's group rules; the name becomes a key of
/// the offset table and of retry topic names).
fn validate_client_group(group: &str) -> Result<(), BrokerError> {
    names::validate_group(group).map_err(BrokerError::InvalidParameter)
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body is a `SubscriptionGroupConfig` (JSON).
pub async fn update_and_create_subscription_group(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let cfg: SubscriptionGroupConfig = crate::atomic_json::parse_json_lenient(
        std::str::from_utf8(req.body())
            .map_err(|_| BrokerError::InvalidParameter("group config is not UTF-8".into()))?,
    )
    .map_err(|e| BrokerError::InvalidParameter(format!("bad subscription group config: {e}")))?;
    validate_client_group(&cfg.group_name)?;
    if cfg.retry_queue_nums < 0 || cfg.retry_max_times < -1 {
        return Err(BrokerError::InvalidParameter(format!(
            "retryQueueNums {} / retryMaxTimes {} out of range",
            cfg.retry_queue_nums, cfg.retry_max_times
        )));
    }
    let name = cfg.group_name.clone();
    metadata::put_group(&ctx, cfg).await?;
    tracing::info!(group = name, "subscription group created or updated");
    Ok(RemotingCommand::success())
}

/// DELETE_SUBSCRIPTIONGROUP: deleting an unknown group succeeds (Java); `cleanOffset` also
/// drops the group's consumer offsets.
pub async fn delete_subscription_group(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: DeleteSubscriptionGroupRequestHeader = req.decode_header()?;
    validate_client_group(&h.group_name)?;
    let clean = h.clean_offset.unwrap_or(false);
    metadata::delete_group(&ctx, &h.group_name, clean).await?;
    tracing::info!(group = h.group_name, clean, "subscription group deleted");
    Ok(RemotingCommand::success())
}
