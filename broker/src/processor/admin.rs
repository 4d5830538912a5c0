//! Admin and broker-to-broker requests: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG
//! (21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
//! GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG
//! (26) (remoting.md §11.7-§11.8).

use std::collections::BTreeMap;
use std::sync::Arc;

use remoting::headers::CreateTopicRequestHeader;
use remoting::{ConnectionHandle, RemotingCommand};

use crate::context::{now_ms, BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::topic as names;
use crate::store::topics::topic_config;

/// UPDATE_AND_CREATE_TOPIC: persist, then re-register with the name servers at once.
pub async fn update_and_create_topic(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: CreateTopicRequestHeader = req.decode_header()?;
    names::validate_topic(&h.topic)?;
    if h.topic == ctx.config.broker_cluster_name {
        return Err(BrokerError::InvalidParameter(format!(
            "The topic[{}] is conflict with system topic.",
            h.topic
        )));
    }
    if h.read_queue_nums <= 0 || h.write_queue_nums <= 0 {
        return Err(BrokerError::InvalidParameter(
            "readQueueNums and writeQueueNums must be positive".into(),
        ));
    }
    let mut cfg = topic_config(h.topic.clone(), h.write_queue_nums, h.perm);
    cfg.read_queue_nums = h.read_queue_nums;
    cfg.write_queue_nums = h.write_queue_nums;
    cfg.topic_filter_type = h.topic_filter_type.clone();
    cfg.topic_sys_flag = h.topic_sys_flag.unwrap_or(0);
    cfg.order = h.order;
    ctx.topics.update(cfg)?;
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
    let body = serde_json::json!({ "table": t }).to_string();
    Ok(RemotingCommand::success().with_body(body))
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
        format!("storePathRootDir={}", c.store_path_root_dir.display()),
        format!("enableDLegerCommitLog={}", c.enable_dleger_commit_log),
        format!("autoCreateTopicEnable={}", c.auto_create_topic_enable),
        format!("defaultTopicQueueNums={}", c.default_topic_queue_nums),
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
    let text = lines.join("\n") + "\n";
    let dv = serde_json::json!({"counter": 1, "stateVersion": 0, "timestamp": ctx.store.boot_ms})
        .to_string();
    Ok(RemotingCommand::success()
        .with_body(text)
        .with_ext_field("version", dv))
}
