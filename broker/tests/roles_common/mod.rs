//! Harness for the role-service tests (schedule, transaction, slave sync, role switch): a
//! broker over a `MemLog` with the real `BrokerRoleServices`, shortened timings.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use broker::broker::Broker;
use broker::config::BrokerConfig;
use broker::message::{decode_records, CrcCheck, StoredMessage};
use broker::services::{BrokerRoleServices, RoleServiceSettings};
use broker::store::mem_log::MemLog;
use bytes::Bytes;
use remoting::custom_headers::{PullMessageRequestHeader, SendMessageRequestHeaderV2};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub fn config(dir: &std::path::Path, port: u16, extra: &str) -> BrokerConfig {
    let text = format!(
        "brokerClusterName=TestCluster\nbrokerName=b0\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\nstorePathRootDir={}\nenableDLegerCommitLog=true\ndLegerGroup=b0\ndLegerSelfId=n0\ndLegerPeers=n0-127.0.0.1:1\nmaxMessageSize=65536\n{extra}",
        dir.display()
    );
    BrokerConfig::from_properties(&text).unwrap()
}

pub struct Node {
    pub dir: tempfile::TempDir,
    pub log: MemLog,
    pub broker: Option<Broker>,
    pub services: Arc<BrokerRoleServices>,
    pub addr: SocketAddr,
}

impl Node {
    /// `extra`: more properties lines (e.g. `transactionCheckInterval=100`).
    pub async fn start(log: MemLog, extra: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let cfg = config(dir.path(), port, extra);
        let settings = RoleServiceSettings::from_config(&cfg);
        let services = Arc::new(BrokerRoleServices::with_settings(settings));
        let broker = Broker::start_with_log(cfg, Arc::new(log.clone()), services.clone())
            .await
            .unwrap();
        Node {
            dir,
            log,
            broker: Some(broker),
            services,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        }
    }

    pub fn ctx(&self) -> &Arc<broker::context::BrokerContext> {
        self.broker.as_ref().unwrap().context()
    }

    pub async fn wait_role(&self, role: broker::context::ServingRole) {
        wait_for("role", || self.ctx().role.role() == role).await;
    }

    pub async fn shutdown(mut self) {
        if let Some(b) = self.broker.take() {
            b.shutdown().await;
        }
    }
}

/// Polls `cond` every 10 ms until it holds; panics after [`TIMEOUT`].
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn client() -> RemotingClient {
    RemotingClient::new(ClientConfig::default())
}

pub async fn call(c: &RemotingClient, addr: SocketAddr, req: RemotingCommand) -> RemotingCommand {
    c.invoke(addr, req, TIMEOUT).await.unwrap()
}

pub fn props(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(k);
        s.push('\u{1}');
        s.push_str(v);
        s.push('\u{2}');
    }
    s
}

pub fn send_v2(
    group: &str,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    properties: &str,
) -> RemotingCommand {
    let h = SendMessageRequestHeaderV2 {
        producer_group: group.into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: broker::context::now_ms(),
        flag: 0,
        properties: Some(properties.into()),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        max_reconsume_times: None,
        batch: Some(false),
        broker_name: None,
    };
    RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &h)
        .with_body(Bytes::copy_from_slice(body))
}

pub fn pull(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: 0x4,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request(RequestCode::PULL_MESSAGE, &h)
}

/// All messages of a queue from offset 0 (several pulls).
pub async fn pull_all(
    c: &RemotingClient,
    addr: SocketAddr,
    topic: &str,
    queue_id: i32,
) -> Vec<StoredMessage> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let resp = call(c, addr, pull("G", topic, queue_id, offset)).await;
        if resp.response_code() != ResponseCode::SUCCESS {
            return out;
        }
        let recs: Vec<StoredMessage> = decode_records(resp.body().clone(), CrcCheck::Verify)
            .map(|r| r.unwrap())
            .collect();
        if recs.is_empty() {
            return out;
        }
        offset = recs.last().unwrap().queue_offset + 1;
        out.extend(recs);
    }
}

/// Property of a stored message.
pub fn prop(m: &StoredMessage, key: &str) -> Option<String> {
    broker::message::find_property(&m.properties, key)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}
