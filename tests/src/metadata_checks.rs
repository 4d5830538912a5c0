//! Helpers of the issue-26 tests (metadata through the replicated log, RELIABILITY G5a): the
//! admin requests that change topics, subscription groups and consumer offsets, the queries
//! that read those tables back from one member, the table files of a member's store, and
//! process steps the failover harness has no call for (finding the member that serves as
//! master without the name server, SIGTERM with a wait).
//!
//! Every function that reads the network answers `Err`/`None` for a missing or malformed
//! answer; nothing here unwraps data that came from a broker.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use remoting::custom_headers::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, DeleteTopicRequestHeader,
    QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use remoting::{RemotingCommand, RequestCode, ResponseCode};
use serde_json::{Map, Value};

use crate::failover::{poll, Cluster, Member, TestClient, GROUP, RPC_TIMEOUT};

/// A topic every member registers whatever its config (`TBW102`, which
/// [`crate::failover::wait_master`] looks at, is absent with `autoCreateTopicEnable=false`).
pub const ALWAYS_REGISTERED_TOPIC: &str = "SELF_TEST_TOPIC";

/// Broker config lines that turn the periodic slave sync off for the length of a test (first
/// run and period of ten minutes): what followers know then came through the log alone.
pub const NO_SLAVE_SYNC: &str = "slaveSyncIntervalMs=600000\nslaveSyncFirstDelayMs=600000\n";

/// One request on `addr`; `Err` names the request and why it got no answer, or the code and
/// remark of an answer other than SUCCESS.
pub async fn invoke_ok(
    c: &TestClient,
    addr: SocketAddr,
    what: &str,
    req: RemotingCommand,
) -> Result<RemotingCommand, String> {
    let r = c
        .client
        .invoke(addr, req, RPC_TIMEOUT)
        .await
        .map_err(|e| format!("{what} on {addr}: no answer ({e})"))?;
    if r.response_code() != ResponseCode::SUCCESS {
        return Err(format!(
            "{what} on {addr}: code {} ({})",
            r.code(),
            r.remark().unwrap_or("")
        ));
    }
    Ok(r)
}

/// UPDATE_AND_CREATE_TOPIC (17): `queues` read and write queues, perm read+write.
pub async fn create_topic(
    c: &TestClient,
    addr: SocketAddr,
    topic: &str,
    queues: i32,
) -> Result<(), String> {
    let h = CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm: 6,
        topic_filter_type: "SINGLE_TAG".into(),
        topic_sys_flag: Some(0),
        order: false,
        attributes: None,
        force: None,
    };
    let req = RemotingCommand::request(RequestCode::UPDATE_AND_CREATE_TOPIC, &h);
    invoke_ok(c, addr, &format!("UPDATE_AND_CREATE_TOPIC {topic}"), req)
        .await
        .map(drop)
}

/// DELETE_TOPIC_IN_BROKER (215).
pub async fn delete_topic(c: &TestClient, addr: SocketAddr, topic: &str) -> Result<(), String> {
    let h = DeleteTopicRequestHeader {
        topic: topic.into(),
        cluster_name: None,
    };
    let req = RemotingCommand::request(RequestCode::DELETE_TOPIC_IN_BROKER, &h);
    invoke_ok(c, addr, &format!("DELETE_TOPIC_IN_BROKER {topic}"), req)
        .await
        .map(drop)
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): a group with Java's defaults (body
/// SubscriptionGroupConfig JSON, remoting.md §11.8).
pub async fn create_group(c: &TestClient, addr: SocketAddr, group: &str) -> Result<(), String> {
    let cfg = remoting::body::SubscriptionGroupConfig::new(group);
    let body = remoting::body::to_json(&cfg).map_err(|e| e.to_string())?;
    let req = RemotingCommand::request_empty(RequestCode::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
        .with_body(body);
    invoke_ok(
        c,
        addr,
        &format!("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP {group}"),
        req,
    )
    .await
    .map(drop)
}

/// DELETE_SUBSCRIPTIONGROUP (207), offsets cleaned too.
pub async fn delete_group(c: &TestClient, addr: SocketAddr, group: &str) -> Result<(), String> {
    let h = DeleteSubscriptionGroupRequestHeader {
        group_name: group.into(),
        clean_offset: Some(true),
    };
    let req = RemotingCommand::request(RequestCode::DELETE_SUBSCRIPTIONGROUP, &h);
    invoke_ok(c, addr, &format!("DELETE_SUBSCRIPTIONGROUP {group}"), req)
        .await
        .map(drop)
}

/// Two-way UPDATE_CONSUMER_OFFSET (15), with the answer's code in the error.
pub async fn commit_offset(
    c: &TestClient,
    addr: SocketAddr,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> Result<(), String> {
    let h = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
        broker_name: None,
    };
    let req = RemotingCommand::request(RequestCode::UPDATE_CONSUMER_OFFSET, &h);
    let what = format!("UPDATE_CONSUMER_OFFSET {topic}@{group} q{queue_id}={offset}");
    invoke_ok(c, addr, &what, req).await.map(drop)
}

/// What QUERY_CONSUMER_OFFSET (14) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetAnswer {
    Offset(i64),
    /// QUERY_NOT_FOUND (22).
    NotFound,
    /// Another code, with its remark.
    Other(i32, String),
    /// No answer, or SUCCESS without a readable offset.
    Failed(String),
}

/// QUERY_CONSUMER_OFFSET with `setZeroIfNotFound=false`, every outcome told apart.
pub async fn query_offset(
    c: &TestClient,
    addr: SocketAddr,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> OffsetAnswer {
    let h = QueryConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        set_zero_if_not_found: Some(false),
        broker_name: None,
    };
    let req = RemotingCommand::request(RequestCode::QUERY_CONSUMER_OFFSET, &h);
    let r = match c.client.invoke(addr, req, RPC_TIMEOUT).await {
        Ok(r) => r,
        Err(e) => return OffsetAnswer::Failed(e.to_string()),
    };
    match r.response_code() {
        ResponseCode::SUCCESS => match r.ext_field("offset").and_then(|v| v.parse().ok()) {
            Some(o) => OffsetAnswer::Offset(o),
            None => OffsetAnswer::Failed("SUCCESS without an offset".into()),
        },
        ResponseCode::QUERY_NOT_FOUND => OffsetAnswer::NotFound,
        _ => OffsetAnswer::Other(r.code(), r.remark().unwrap_or("").to_owned()),
    }
}

/// Parses a JSON body or file (fastjson's bare numeric keys accepted) and takes the object
/// under `key` (e.g. `topicConfigTable`).
pub fn table_of(bytes: &[u8], key: &str) -> Result<Map<String, Value>, String> {
    let v: Value = remoting::body::from_json(bytes).map_err(|e| e.to_string())?;
    match v.get(key) {
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(format!("{key} is not an object: {other}")),
        None => Err(format!("no {key}")),
    }
}

async fn table(
    c: &TestClient,
    addr: SocketAddr,
    code: RequestCode,
    key: &str,
) -> Result<Map<String, Value>, String> {
    let what = format!("{code:?}");
    let r = invoke_ok(c, addr, &what, RemotingCommand::request_empty(code)).await?;
    table_of(r.body(), key).map_err(|e| format!("{what} on {addr}: {e}"))
}

/// GET_ALL_TOPIC_CONFIG (21): topic name → TopicConfig JSON.
pub async fn topic_table(c: &TestClient, addr: SocketAddr) -> Result<Map<String, Value>, String> {
    table(
        c,
        addr,
        RequestCode::GET_ALL_TOPIC_CONFIG,
        "topicConfigTable",
    )
    .await
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): group name → SubscriptionGroupConfig JSON.
pub async fn group_table(c: &TestClient, addr: SocketAddr) -> Result<Map<String, Value>, String> {
    table(
        c,
        addr,
        RequestCode::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        "subscriptionGroupTable",
    )
    .await
}

/// GET_ALL_CONSUMER_OFFSET (43): `topic@group` → {queue id: offset}.
pub async fn offset_table(c: &TestClient, addr: SocketAddr) -> Result<Map<String, Value>, String> {
    table(c, addr, RequestCode::GET_ALL_CONSUMER_OFFSET, "offsetTable").await
}

/// Read and write queue counts of `topic` in a topic table.
pub fn queue_counts(topics: &Map<String, Value>, topic: &str) -> Option<(i64, i64)> {
    let t = topics.get(topic)?;
    Some((
        t.get("readQueueNums")?.as_i64()?,
        t.get("writeQueueNums")?.as_i64()?,
    ))
}

/// GET_BROKER_RUNTIME_INFO (28) as a map; `None` without an answer within `timeout`.
pub async fn runtime_info(
    c: &TestClient,
    addr: SocketAddr,
    timeout: Duration,
) -> Option<BTreeMap<String, String>> {
    let req = RemotingCommand::request_empty(RequestCode::GET_BROKER_RUNTIME_INFO);
    let r = c.client.invoke(addr, req, timeout).await.ok()?;
    if r.response_code() != ResponseCode::SUCCESS {
        return None;
    }
    let v: Value = serde_json::from_slice(r.body()).ok()?;
    let t = v.get("table")?.as_object()?;
    Some(
        t.iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
    )
}

/// Waits until one of the running members other than `not` answers that it serves as master
/// (`brokerActive`, set once its store caught up with the log, R13); returns its index.
/// Asks the members directly, so this does not wait for the name server's route.
pub async fn wait_serving_master(
    cl: &Cluster,
    c: &TestClient,
    not: Option<usize>,
    timeout: Duration,
) -> usize {
    let candidates: Vec<(usize, SocketAddr)> = cl
        .members
        .iter()
        .enumerate()
        .filter(|(i, m)| Some(*i) != not && m.child.is_some())
        .map(|(i, m)| (i, m.addr()))
        .collect();
    poll("a member serving as master", timeout, || async {
        for (i, addr) in &candidates {
            if c.is_master(*addr, Duration::from_millis(500)).await == Some(true) {
                return Some(*i);
            }
        }
        None
    })
    .await
}

/// Waits until the name server's route of `topic` names a master of the test group other
/// than `not`; returns its address and when it was seen.
pub async fn wait_master_in_route(
    c: &TestClient,
    topic: &str,
    not: Option<&str>,
    timeout: Duration,
) -> (String, Instant) {
    poll(&format!("a master in {topic}'s route"), timeout, || async {
        let m = c.master(topic).await?;
        (Some(m.as_str()) != not).then(|| (m, Instant::now()))
    })
    .await
}

/// Waits until restarted member `i` answers requests again.
pub async fn wait_answering(cl: &Cluster, c: &TestClient, i: usize, timeout: Duration) {
    let addr = cl.members[i].addr();
    let what = format!("member {} answering after its start", cl.members[i].self_id);
    poll(&what, timeout, || async {
        c.is_master(addr, Duration::from_millis(500))
            .await
            .map(drop)
    })
    .await;
}

/// SIGTERM to member `i`, then waits for it to exit (kill -9 after `timeout`). Returns its
/// exit status, or an error when it had to be killed or could not be signalled.
pub fn stop_member(cl: &mut Cluster, i: usize, timeout: Duration) -> Result<ExitStatus, String> {
    let what = format!("the test stopped {}", cl.members[i].self_id);
    cl.assert_members_running(&what);
    let Some(mut child) = cl.members[i].child.take() else {
        return Err(format!("member {i} is not running"));
    };
    let signalled = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .is_ok_and(|s| s.success());
    let deadline = Instant::now() + timeout;
    while signalled && Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for member {i}: {e}")),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(if signalled {
        format!("member {i} did not exit within {timeout:?} of SIGTERM (killed)")
    } else {
        format!("member {i} could not be sent SIGTERM (killed)")
    })
}

/// `storePathRootDir` of a member, from its config file.
pub fn store_root(m: &Member) -> Option<PathBuf> {
    let text = std::fs::read_to_string(&m.conf).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("storePathRootDir="))
        .map(|v| PathBuf::from(v.trim()))
}

/// The three metadata tables as a member's store holds them in `config/` (the `dataVersion`
/// of each file left out).
#[derive(Debug, Clone, PartialEq)]
pub struct TableFiles {
    /// `topics.json` `topicConfigTable`.
    pub topics: Map<String, Value>,
    /// `subscriptionGroup.json` `subscriptionGroupTable`.
    pub groups: Map<String, Value>,
    /// `consumerOffset.json` `offsetTable`.
    pub offsets: Map<String, Value>,
}

/// The metadata table files under `<store_root>/config`; a missing file is an empty table.
pub fn read_table_files(store_root: &Path) -> Result<TableFiles, String> {
    let dir = store_root.join("config");
    let read = |file: &str, key: &str| -> Result<Map<String, Value>, String> {
        let path = dir.join(file);
        match std::fs::read(&path) {
            Ok(bytes) => table_of(&bytes, key).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    };
    Ok(TableFiles {
        topics: read("topics.json", "topicConfigTable")?,
        groups: read("subscriptionGroup.json", "subscriptionGroupTable")?,
        offsets: read("consumerOffset.json", "offsetTable")?,
    })
}

/// The keys of two tables that differ (missing on one side or with different values), for
/// failure messages.
pub fn table_diff(a: &Map<String, Value>, b: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, va) in a {
        match b.get(k) {
            None => out.push(format!("{k}: only in the first ({va})")),
            Some(vb) if vb != va => out.push(format!("{k}: {va} vs {vb}")),
            Some(_) => {}
        }
    }
    for (k, vb) in b {
        if !a.contains_key(k) {
            out.push(format!("{k}: only in the second ({vb})"));
        }
    }
    out
}

/// The offset of queue `queue_id` under `topic@group` in an offset table.
pub fn offset_in(
    offsets: &Map<String, Value>,
    topic: &str,
    group: &str,
    queue_id: i32,
) -> Option<i64> {
    offsets
        .get(&format!("{topic}@{group}"))?
        .get(queue_id.to_string())?
        .as_i64()
}

/// Where a test's logs are, for failure messages (the harness keeps its temp dir when a test
/// fails and prints the path and the logs' tails as it drops).
pub fn log_paths(cl: &Cluster) -> String {
    let mut s = format!("namesrv {}", cl.dir.path().join("namesrv.log").display());
    for m in &cl.members {
        s.push_str(&format!("; {} {}", m.self_id, m.log.display()));
    }
    s
}

/// Lines of member `i`'s log that mention metadata, the role or errors (the tail the harness
/// prints may have scrolled past them).
pub fn log_lines_about(cl: &Cluster, i: usize, needles: &[&str], max: usize) -> String {
    let text = std::fs::read_to_string(&cl.members[i].log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("unknown broker config key"))
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .collect();
    let start = lines.len().saturating_sub(max);
    lines[start..].join("\n")
}

/// Whether the group's route on the name server lists `topic` for the test group with
/// `queues` write queues (its `queueDatas`).
pub async fn route_lists(c: &TestClient, topic: &str, queues: i32) -> bool {
    c.route(topic).await.is_some_and(|r| {
        r.queue_datas
            .iter()
            .any(|q| q.broker_name == GROUP && q.write_queue_nums == queues)
    })
}
