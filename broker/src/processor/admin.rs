//! Admin and broker-to-broker requests: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG
//! (21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
//! GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG
//! (26), DELETE_TOPIC_IN_BROKER (215) (remoting.md §11.7-§11.8).
//!
//! The two topic writers check as Java 5's `AdminBrokerProcessor` does, answering
//! SYSTEM_ERROR with Java's remarks: the name (`TopicValidator`), then system topics (when
//! `validateSystemTopicWhenUpdateTopic`, the default). Creation also checks what Java's admin
//! tool checks before sending (perm 0..=7, NO_PERMISSION) and what it does not: the filter
//! type (Java's header `checkFields`) and 1..=`maxTopicQueueNums` read and write queues.

use std::collections::BTreeMap;
use std::sync::Arc;

use remoting::custom_headers::{CreateTopicRequestHeader, DeleteTopicRequestHeader};
use remoting::{ConnectionHandle, RemotingCommand};

use crate::context::{now_ms, BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::topic as names;
use crate::message::MessageError;
use crate::store::commit_log::ReplicatedLog;
use crate::store::topics::{topic_config, MULTI_TAG, SINGLE_TAG};
use dledger_commitlog::types::Shown;

/// Largest legal topic perm: Java `PermName.isValid` (READ | WRITE | INHERIT, no PRIORITY).
const MAX_TOPIC_PERM: i32 = 7;

/// Java `TopicValidator.validateTopic` on an admin path: SYSTEM_ERROR with its remark.
fn validate_admin_topic(topic: &str) -> Result<(), BrokerError> {
    names::validate_topic(topic).map_err(|e| match e {
        MessageError::IllegalTopic { reason, .. } => BrokerError::System(reason.to_owned()),
        other => other.into(),
    })
}

/// Java's `TopicValidator.isSystemTopic` after `TopicConfigManager` added this broker's own
/// names: the static set, `rmq_sys_*`, the cluster name, the broker name, the trace topic
/// (when enabled) and `<cluster>_REPLY_TOPIC`.
pub fn is_system_topic_of(ctx: &BrokerContext, topic: &str) -> bool {
    let c = &ctx.config;
    names::is_system_topic(topic)
        || topic == c.broker_cluster_name
        || topic == c.broker_name
        || (c.trace_topic_enable && topic == c.msg_trace_topic_name)
        || topic
            .strip_prefix(c.broker_cluster_name.as_str())
            .and_then(|rest| rest.strip_prefix('_'))
            == Some(names::REPLY_TOPIC_POSTFIX)
}

/// UPDATE_AND_CREATE_TOPIC: persist, then re-register with the name servers at once.
pub async fn update_and_create_topic(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: CreateTopicRequestHeader = req.decode_header()?;
    validate_admin_topic(&h.topic)?;
    if ctx.config.validate_system_topic_when_update_topic && is_system_topic_of(&ctx, &h.topic) {
        return Err(BrokerError::SystemTopicConflict(h.topic.clone()));
    }
    // Java 4.9 refuses the cluster name whatever the setting above.
    if h.topic == ctx.config.broker_cluster_name {
        return Err(BrokerError::System(format!(
            "the topic[{}] is conflict with system reserved words.",
            h.topic
        )));
    }
    if h.topic_filter_type != SINGLE_TAG && h.topic_filter_type != MULTI_TAG {
        return Err(BrokerError::System(format!(
            "topicFilterType = [{}] value invalid",
            h.topic_filter_type
        )));
    }
    if !(0..=MAX_TOPIC_PERM).contains(&h.perm) {
        return Err(BrokerError::NoPermission(format!(
            "topicPermission value: {} is invalid.",
            h.perm
        )));
    }
    let max = ctx.config.max_topic_queue_nums;
    for (what, n) in [
        ("readQueueNums", h.read_queue_nums),
        ("writeQueueNums", h.write_queue_nums),
    ] {
        if !(1..=max).contains(&n) {
            return Err(BrokerError::InvalidParameter(format!(
                "{what}[{n}] is illegal, it must be 1..={max} (maxTopicQueueNums)"
            )));
        }
    }
    let mut cfg = topic_config(h.topic.clone(), h.write_queue_nums, h.perm);
    cfg.read_queue_nums = h.read_queue_nums;
    cfg.write_queue_nums = h.write_queue_nums;
    cfg.topic_filter_type = h.topic_filter_type.clone();
    cfg.topic_sys_flag = h.topic_sys_flag.unwrap_or(0);
    cfg.order = h.order;
    // Through the log: every member has it before the answer (broker/METADATA_LOG.md).
    crate::metadata::put_topic(&ctx, cfg).await?;
    ctx.register_now.notify_one();
    Ok(RemotingCommand::success())
}

/// DELETE_TOPIC_IN_BROKER (215), as Java: drop the topic config (persisted), its consume
/// queues and queue-offset counters, and every consumer offset on it; then re-register so
/// the name servers drop the route. Deleting an unknown topic succeeds. Refused as Java 5
/// refuses: a blank name, and a system topic (when `validateSystemTopicWhenUpdateTopic`);
/// also a name that breaks the naming rules (Java deletes any, but here the name becomes a
/// consume-queue directory path, so `../x` must never reach the store).
pub async fn delete_topic_in_broker(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: DeleteTopicRequestHeader = req.decode_header()?;
    validate_admin_topic(&h.topic)?;
    if ctx.config.validate_system_topic_when_update_topic && is_system_topic_of(&ctx, &h.topic) {
        return Err(BrokerError::SystemTopicConflict(h.topic.clone()));
    }
    let existed = ctx.topics.contains(&h.topic);
    // Through the log: every member drops the topic, its queues and its offsets.
    crate::metadata::delete_topic(&ctx, &h.topic).await?;
    tracing::info!(topic = h.topic, existed, "topic deleted");
    ctx.register_now.notify_one();
    Ok(RemotingCommand::success())
}

/// GET_ALL_TOPIC_CONFIG (whole table; paging fields are ignored, which 5.x requesters accept
/// because no `totalTopicNum` is returned).
pub async fn get_all_topic_config(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    Ok(RemotingCommand::success().with_body(ctx.topics.to_json()))
}

/// GET_ALL_CONSUMER_OFFSET.
pub async fn get_all_consumer_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    Ok(RemotingCommand::success().with_body(ctx.offsets.to_json()))
}

/// GET_ALL_DELAY_OFFSET.
pub async fn get_all_delay_offset(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    Ok(RemotingCommand::success().with_body(ctx.delay_offsets.to_json()))
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG.
pub async fn get_all_subscription_group(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    Ok(RemotingCommand::success().with_body(ctx.subscriptions.to_json()))
}

/// GET_BROKER_RUNTIME_INFO: KVTable of string values.
pub async fn get_broker_runtime_info(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let st = &ctx.store;
    let marks = st.water_marks();
    let put = st
        .stats
        .put_messages
        .load(std::sync::atomic::Ordering::Relaxed);
    let got = st
        .stats
        .got_messages
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut t = BTreeMap::new();
    let mut put_kv = |k: &str, v: String| {
        t.insert(k.to_owned(), v);
    };
    put_kv("brokerVersionDesc", "V4_9_4".into());
    put_kv("brokerVersion", remoting::code::version::V4_9_4.to_string());
    put_kv(
        "brokerActive",
        (ctx.role.role() == ServingRole::Master).to_string(),
    );
    put_kv("brokerId", ctx.role.broker_id().to_string());
    put_kv("msgPutTotalTodayNow", put.to_string());
    put_kv("msgGetTotalTodayNow", got.to_string());
    put_kv("msgPutTotalYesterdayMorning", "0".into());
    put_kv("msgPutTotalTodayMorning", "0".into());
    put_kv("msgGetTotalYesterdayMorning", "0".into());
    put_kv("msgGetTotalTodayMorning", "0".into());
    put_kv("putTps", "0.0 0.0 0.0".into());
    put_kv("getTransferredTps", "0.0 0.0 0.0".into());
    put_kv("commitLogDiskRatio", "0.0".into());
    put_kv("earliestMessageTimeStamp", st.boot_ms.to_string());
    put_kv("pageCacheLockTimeMills", "0".into());
    put_kv("sendThreadPoolQueueSize", "0".into());
    put_kv("sendThreadPoolQueueHeadWaitTimeMills", "0".into());
    put_kv("pullThreadPoolQueueSize", "0".into());
    put_kv("pullThreadPoolQueueHeadWaitTimeMills", "0".into());
    put_kv("timerReadBehind", "0".into());
    put_kv("timerOffsetBehind", "0".into());
    put_kv("timerCongestNum", "0".into());
    put_kv("timerEnqueueTps", "0.0".into());
    put_kv("timerDequeueTps", "0.0".into());
    put_kv("commitLogMaxOffset", st.commit_log_max_offset().to_string());
    put_kv("commitLogMinOffset", st.commit_log_min_offset().to_string());
    put_kv(
        "dispatchBehindBytes",
        st.dispatch_behind_bytes().to_string(),
    );
    put_kv("bootTimestamp", st.boot_ms.to_string());
    put_kv("runtime", format!("[ {} ms ]", now_ms() - st.boot_ms));
    put_kv("putMessageTimesTotal", put.to_string());
    put_kv("dLedgerCommittedIndex", marks.committed_index.to_string());
    put_kv("dLedgerEndIndex", marks.ledger_end_index.to_string());
    for (k, v) in dledger_runtime_keys(st.log().as_ref()) {
        t.insert(k, v);
    }
    let body = serde_json::json!({ "table": t }).to_string();
    Ok(RemotingCommand::success().with_body(body))
}

/// The DLedger member keys of GET_BROKER_RUNTIME_INFO that `mqadmin dledgerStatus` reads:
/// role, term, leader, indexes, and on the leader `dledgerPeerWaterMark_<id>` /
/// `dledgerPeerLag_<id>` per peer. Taken from the ledger status when the log has one,
/// otherwise from the role watch and the log's own indexes (no peer keys).
pub fn dledger_runtime_keys(log: &dyn ReplicatedLog) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut kv = |k: &str, v: String| out.push((k.to_owned(), v));
    match log.status() {
        Some(s) => {
            kv("dledgerRole", s.role.as_str().into());
            kv("dledgerTerm", s.term.to_string());
            kv("dledgerLeaderId", s.leader_id.unwrap_or_default());
            // Shown: DLedger's -1 for none, as mqadmin expects.
            kv("dledgerBeginIndex", Shown(s.begin_index).to_string());
            kv("dledgerEndIndex", Shown(s.end_index).to_string());
            kv(
                "dledgerCommittedIndex",
                Shown(s.committed_index).to_string(),
            );
            for p in &s.peers {
                kv(
                    &format!("dledgerPeerWaterMark_{}", p.id),
                    Shown(p.match_index).to_string(),
                );
                kv(
                    &format!("dledgerPeerLag_{}", p.id),
                    Shown(p.lag).to_string(),
                );
                if p.needs_reinstall {
                    kv(
                        &format!("dledgerPeerNeedsReinstall_{}", p.id),
                        "true".into(),
                    );
                }
            }
        }
        None => {
            let r = log.role().borrow().clone();
            kv("dledgerRole", r.role.as_str().into());
            kv("dledgerTerm", r.term.to_string());
            kv("dledgerLeaderId", r.leader_id.unwrap_or_default());
            kv("dledgerBeginIndex", log.begin_index().to_string());
            kv("dledgerEndIndex", log.end_index().to_string());
            let committed = log.committed_mark().index;
            kv("dledgerCommittedIndex", committed.to_string());
        }
    }
    out
}

/// GET_BROKER_CONFIG: the effective configuration as a properties text.
pub async fn get_broker_config(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    _req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let c = &ctx.config;
    let mut lines = vec![
        format!("brokerClusterName={}", c.broker_cluster_name),
        format!("brokerName={}", c.broker_name),
        format!("brokerId={}", ctx.role.broker_id()),
        format!("brokerIP1={}", c.broker_ip1),
        format!("brokerIP2={}", c.broker_ip2),
        format!("listenPort={}", c.listen_port),
        format!("bindAddress={}", c.bind_address),
        format!("runtimeWorkerThreads={}", c.worker_threads()),
        format!("storePathRootDir={}", c.store_path_root_dir.display()),
        format!("enableDLegerCommitLog={}", c.enable_dleger_commit_log),
        format!("autoCreateTopicEnable={}", c.auto_create_topic_enable),
        format!("defaultTopicQueueNums={}", c.default_topic_queue_nums),
        format!("maxTopicQueueNums={}", c.max_topic_queue_nums),
        format!(
            "validateSystemTopicWhenUpdateTopic={}",
            c.validate_system_topic_when_update_topic
        ),
        format!("maxMessageSize={}", c.max_message_size),
        format!(
            "registerNameServerPeriod={}",
            c.register_name_server_period_ms
        ),
    ];
    if let Some(n) = &c.namesrv_addr {
        lines.push(format!("namesrvAddr={n}"));
    }
    if let Some(g) = &c.dleger_group {
        lines.push(format!("dLegerGroup={g}"));
    }
    if let Some(s) = &c.dleger_self_id {
        lines.push(format!("dLegerSelfId={s}"));
    }
    if !c.dleger_peers.is_empty() {
        let peers: Vec<String> = c
            .dleger_peers
            .iter()
            .map(|p| format!("{}-{}", p.id, p.addr))
            .collect();
        lines.push(format!("dLegerPeers={}", peers.join(";")));
    }
    let text = lines.join("\n") + "\n";
    let dv = serde_json::json!({"counter": 1, "stateVersion": 0, "timestamp": ctx.store.boot_ms})
        .to_string();
    Ok(RemotingCommand::success()
        .with_body(text)
        .with_ext_field("version", dv))
}
