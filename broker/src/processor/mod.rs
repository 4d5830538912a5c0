//! Request processors: one async function per request code, registered by [`registry`].
//! Each returns `Result<RemotingCommand, BrokerError>`; errors become responses through the
//! single mapping in [`crate::error::to_response`]. END_TRANSACTION (37) is
//! registered by [`transaction::register`]; codes registered nowhere
//! get REQUEST_CODE_NOT_SUPPORTED from the registry.
//!
//! Every processor checks its request's fields before it touches a table or the log, with
//! the code and remark Java answers; the rules are listed in `broker/VALIDATION.md`.

pub mod admin;
pub mod client;
pub mod group_admin;
pub mod offset;
pub mod pull;
pub mod query;
pub mod send;
pub mod transaction;

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt;

use remoting::{processor_fn, ConnectionHandle, ProcessorRegistry, RemotingCommand, RequestCode};

use crate::context::BrokerContext;
use crate::error::{error_response, BrokerError};
use crate::message::topic as names;
use crate::metrics::Observer;
use crate::store::subscriptions::SubscriptionGroupConfig;
use observe::BrokerMetrics;

/// Java 5 `SubscriptionGroupManager.findSubscriptionGroupConfig`: the group's config, created
/// when auto-creation is on, except that a group whose name breaks the naming rules
/// ([`names::validate_group`]) is never created (a group already in the table, e.g. loaded
/// from `subscriptionGroup.json`, is still found). Callers answer `None` as Java answers null.
pub(crate) fn find_group(
    ctx: &BrokerContext,
    group: &str,
) -> Result<Option<SubscriptionGroupConfig>, BrokerError> {
    if names::validate_group(group).is_err() {
        return Ok(ctx.subscriptions.get(group));
    }
    Ok(ctx.subscriptions.find_or_create(group)?)
}

/// Queues of a group's `%RETRY%` topic: its `retryQueueNums`, at most `maxTopicQueueNums`
/// (a group config may carry any number; Java has no bound). `None` for zero or less: Java
/// stores no send-back then, and no retry topic is created for it here.
pub(crate) fn retry_queue_nums(
    ctx: &BrokerContext,
    group: &SubscriptionGroupConfig,
) -> Option<i32> {
    (group.retry_queue_nums > 0)
        .then(|| group.retry_queue_nums.min(ctx.config.max_topic_queue_nums))
}

/// The registry being built, with the metrics that send and pull answers go to.
pub struct Registrar {
    registry: ProcessorRegistry,
    metrics: Arc<BrokerMetrics>,
}

fn register<F, Fut>(r: &mut Registrar, code: RequestCode, ctx: &Arc<BrokerContext>, f: F)
where
    F: Fn(Arc<BrokerContext>, ConnectionHandle, RemotingCommand) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<RemotingCommand, BrokerError>> + Send + 'static,
{
    let ctx = Arc::clone(ctx);
    let observer = Observer::for_code(&r.metrics, code);
    r.registry.register(
        code,
        processor_fn(move |conn, req| {
            let code = req.code();
            let observed = observer.as_ref().map(|o| (o.clone(), o.arrived(&req)));
            // A combinator, not an async block: a block awaiting `fut` holds it twice (the
            // capture and the awaited copy), which doubled the send future to ~1.4 KiB, past
            // glibc's per-thread cache, so each boxed request took the allocator's slow path.
            // The answer is observed in the same step (no wrapping processor, no second box).
            f(Arc::clone(&ctx), conn, req).map(move |r| {
                let response = r.unwrap_or_else(|e| {
                    tracing::debug!(code, error = %e, "request failed");
                    error_response(&e)
                });
                if let Some((o, arrival)) = observed {
                    o.answered(arrival, &response);
                }
                Some(response)
            })
        }),
    );
}

/// Every request code the broker serves; send and pull answers are counted and timed in
/// `metrics`.
pub fn registry(ctx: &Arc<BrokerContext>, metrics: &Arc<BrokerMetrics>) -> ProcessorRegistry {
    let mut r = Registrar {
        registry: ProcessorRegistry::new(),
        metrics: Arc::clone(metrics),
    };
    register(&mut r, RequestCode::SEND_MESSAGE, ctx, send::send);
    register(&mut r, RequestCode::SEND_MESSAGE_V2, ctx, send::send);
    register(&mut r, RequestCode::SEND_BATCH_MESSAGE, ctx, send::send);
    register(
        &mut r,
        RequestCode::CONSUMER_SEND_MSG_BACK,
        ctx,
        send::consumer_send_back,
    );
    register(&mut r, RequestCode::PULL_MESSAGE, ctx, pull::pull);
    register(&mut r, RequestCode::LITE_PULL_MESSAGE, ctx, pull::pull);
    register(
        &mut r,
        RequestCode::QUERY_CONSUMER_OFFSET,
        ctx,
        offset::query_consumer_offset,
    );
    register(
        &mut r,
        RequestCode::UPDATE_CONSUMER_OFFSET,
        ctx,
        offset::update_consumer_offset,
    );
    register(
        &mut r,
        RequestCode::GET_MAX_OFFSET,
        ctx,
        offset::get_max_offset,
    );
    register(
        &mut r,
        RequestCode::GET_MIN_OFFSET,
        ctx,
        offset::get_min_offset,
    );
    register(
        &mut r,
        RequestCode::GET_EARLIEST_MSG_STORETIME,
        ctx,
        offset::get_earliest_msg_storetime,
    );
    register(
        &mut r,
        RequestCode::SEARCH_OFFSET_BY_TIMESTAMP,
        ctx,
        offset::search_offset_by_timestamp,
    );
    register(
        &mut r,
        RequestCode::VIEW_MESSAGE_BY_ID,
        ctx,
        query::view_message_by_id,
    );
    register(
        &mut r,
        RequestCode::QUERY_MESSAGE,
        ctx,
        query::query_message,
    );
    register(&mut r, RequestCode::HEART_BEAT, ctx, client::heartbeat);
    register(
        &mut r,
        RequestCode::UNREGISTER_CLIENT,
        ctx,
        client::unregister_client,
    );
    register(
        &mut r,
        RequestCode::GET_CONSUMER_LIST_BY_GROUP,
        ctx,
        client::get_consumer_list,
    );
    register(&mut r, RequestCode::LOCK_BATCH_MQ, ctx, client::lock_batch);
    register(
        &mut r,
        RequestCode::UNLOCK_BATCH_MQ,
        ctx,
        client::unlock_batch,
    );
    register(
        &mut r,
        RequestCode::UPDATE_AND_CREATE_TOPIC,
        ctx,
        admin::update_and_create_topic,
    );
    register(
        &mut r,
        RequestCode::DELETE_TOPIC_IN_BROKER,
        ctx,
        admin::delete_topic_in_broker,
    );
    register(
        &mut r,
        RequestCode::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        ctx,
        group_admin::update_and_create_subscription_group,
    );
    register(
        &mut r,
        RequestCode::DELETE_SUBSCRIPTIONGROUP,
        ctx,
        group_admin::delete_subscription_group,
    );
    register(
        &mut r,
        RequestCode::GET_ALL_TOPIC_CONFIG,
        ctx,
        admin::get_all_topic_config,
    );
    register(
        &mut r,
        RequestCode::GET_ALL_CONSUMER_OFFSET,
        ctx,
        admin::get_all_consumer_offset,
    );
    register(
        &mut r,
        RequestCode::GET_ALL_DELAY_OFFSET,
        ctx,
        admin::get_all_delay_offset,
    );
    register(
        &mut r,
        RequestCode::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        ctx,
        admin::get_all_subscription_group,
    );
    register(
        &mut r,
        RequestCode::GET_BROKER_RUNTIME_INFO,
        ctx,
        admin::get_broker_runtime_info,
    );
    register(
        &mut r,
        RequestCode::GET_BROKER_CONFIG,
        ctx,
        admin::get_broker_config,
    );
    transaction::register(&mut r, ctx);
    r.registry
}
