//! In-process harness: a broker over a single-member in-memory log (`MemLog`) on a free
//! loopback port, plus request builders for the processors under test.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use broker::broker::Broker;
use broker::config::BrokerConfig;
use broker::controller::NoRoleServices;
use broker::message::batch::encode_batch_element;
use broker::message::{decode_records, CrcCheck, StoredMessage};
use broker::store::mem_log::MemLog;
use bytes::{Bytes, BytesMut};
use remoting::custom_headers::{PullMessageRequestHeader, SendMessageRequestHeaderV2};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode};

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub log: MemLog,
    pub broker: Option<Broker>,
    pub addr: SocketAddr,
    pub client: RemotingClient,
    pub port: u16,
}

pub fn config(dir: &std::path::Path, port: u16) -> BrokerConfig {
    let text = format!(
        "brokerClusterName=TestCluster\nbrokerName=b0\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\nstorePathRootDir={}\nenableDLegerCommitLog=true\ndLegerGroup=b0\ndLegerSelfId=n0\ndLegerPeers=n0-127.0.0.1:1\nmaxMessageSize=65536\n",
        dir.display()
    );
    BrokerConfig::from_properties(&text).unwrap()
}

impl Harness {
    pub async fn start() -> Harness {
        Harness::start_with(MemLog::new_leader(), |_| {}).await
    }

    pub async fn start_with(log: MemLog, tweak: impl FnOnce(&mut BrokerConfig)) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cfg = config(dir.path(), port);
        tweak(&mut cfg);
        let broker = Broker::start_with_log(cfg, Arc::new(log.clone()), Arc::new(NoRoleServices))
            .await
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Harness {
            dir,
            log,
            broker: Some(broker),
            addr,
            client: RemotingClient::new(ClientConfig::default()),
            port,
        }
    }

    /// Restarts the broker process state (same directory, same log).
    pub async fn restart(&mut self) {
        if let Some(b) = self.broker.take() {
            b.shutdown().await;
        }
        let cfg = config(self.dir.path(), self.port);
        let b = Broker::start_with_log(cfg, Arc::new(self.log.clone()), Arc::new(NoRoleServices))
            .await
            .unwrap();
        self.broker = Some(b);
        self.client.close_connection(self.addr);
    }

    pub fn ctx(&self) -> &Arc<broker::context::BrokerContext> {
        self.broker.as_ref().unwrap().context()
    }

    /// Waits until the controller applied the master role.
    pub async fn wait_master(&self) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while self.ctx().role.role() != broker::context::ServingRole::Master {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never became master"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn call(&self, req: RemotingCommand) -> RemotingCommand {
        self.client.invoke(self.addr, req, TIMEOUT).await.unwrap()
    }

    pub async fn shutdown(mut self) {
        if let Some(b) = self.broker.take() {
            b.shutdown().await;
        }
        self.client.shutdown().await;
    }
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

pub fn send_header(topic: &str, queue_id: i32, properties: &str) -> SendMessageRequestHeaderV2 {
    SendMessageRequestHeaderV2 {
        producer_group: "PG".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: Some(properties.into()),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        max_reconsume_times: None,
        batch: Some(false),
        broker_name: None,
    }
}

pub fn send_v2(topic: &str, queue_id: i32, body: &[u8], properties: &str) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::SEND_MESSAGE_V2,
        &send_header(topic, queue_id, properties),
    )
    .with_body(Bytes::copy_from_slice(body))
}

pub fn send_batch(
    code: RequestCode,
    topic: &str,
    queue_id: i32,
    msgs: &[(&[u8], String)],
) -> RemotingCommand {
    let mut h = send_header(topic, queue_id, "");
    h.batch = Some(true);
    let mut body = BytesMut::new();
    for (b, p) in msgs {
        encode_batch_element(&mut body, 0, b, p.as_bytes());
    }
    RemotingCommand::request(code, &h).with_body(body.freeze())
}

pub fn pull(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    suspend_ms: i64,
) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: if suspend_ms > 0 { 0x2 | 0x4 } else { 0x4 },
        commit_offset: 0,
        suspend_timeout_millis: suspend_ms,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request(RequestCode::PULL_MESSAGE, &h)
}

pub fn records(resp: &RemotingCommand) -> Vec<StoredMessage> {
    decode_records(resp.body().clone(), CrcCheck::Verify)
        .map(|r| r.unwrap())
        .collect()
}
