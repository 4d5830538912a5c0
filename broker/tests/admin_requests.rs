//! Goal: the admin requests `mqadmin` relies on answer what it reads: the DLedger keys of
//! GET_BROKER_RUNTIME_INFO (role, term, indexes, per-peer water marks and lags), the DLedger
//! keys of GET_BROKER_CONFIG, and DELETE_TOPIC_IN_BROKER removing config, queues and
//! offsets; election no-op entries in the log do not disturb dispatch. Method: in-process
//! brokers over `MemLog` (optionally wrapped to report a canned ledger status), driven by
//! hand-built requests over loopback.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use broker::broker::Broker;
use broker::controller::NoRoleServices;
use broker::store::commit_log::{
    CommitMark, CommitWatch, LedgerStatus, LogEntry, LogRoleState, PeerStatus, ProposeFuture,
    ReplicatedLog,
};
use broker::store::mem_log::MemLog;
use bytes::Bytes;
use common::*;
use dledger_commitlog::runtime::Role as RtRole;
use dledger_commitlog::{Index, Pos, Term};
use remoting::custom_headers::*;
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};
use tokio::sync::watch;

fn code(r: &RemotingCommand) -> ResponseCode {
    r.response_code()
}

async fn runtime_info(h: &Harness) -> BTreeMap<String, String> {
    let r = h
        .call(RemotingCommand::request_empty(
            RequestCode::GET_BROKER_RUNTIME_INFO,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    v["table"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect()
}

/// A `MemLog` that also reports a fixed DLedger status, as a leader with two peers would.
struct StatusLog {
    inner: MemLog,
    status: LedgerStatus,
}

impl ReplicatedLog for StatusLog {
    fn propose(&self, body: Bytes) -> ProposeFuture {
        self.inner.propose(body)
    }
    fn role(&self) -> watch::Receiver<LogRoleState> {
        self.inner.role()
    }
    fn committed_mark(&self) -> CommitMark {
        self.inner.committed_mark()
    }
    fn commit_watch(&self) -> CommitWatch {
        self.inner.commit_watch()
    }
    fn committed_entry(&self, index: i64) -> Result<Option<LogEntry>, String> {
        self.inner.committed_entry(index)
    }
    fn read_message(&self, phys: i64) -> Option<Bytes> {
        self.inner.read_message(phys)
    }
    fn begin_index(&self) -> i64 {
        self.inner.begin_index()
    }
    fn end_index(&self) -> i64 {
        self.inner.end_index()
    }
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.inner.shutdown()
    }
    fn status(&self) -> Option<LedgerStatus> {
        Some(self.status.clone())
    }
}

fn peer(id: &str, port: u16, match_index: Option<u64>, lag: Option<i64>) -> PeerStatus {
    PeerStatus {
        id: id.into(),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        match_index: match_index.map(Index),
        lag,
        alive: true,
        needs_reinstall: false,
    }
}

#[tokio::test]
async fn runtime_info_reports_the_ledger_status_and_peer_water_marks() {
    let status = LedgerStatus {
        self_id: "n0".into(),
        role: RtRole::Leader,
        term: Term(7),
        leader_id: Some("n0".into()),
        begin_index: Some(Index(3)),
        end_index: Some(Index(41)),
        end_term: Some(Term(7)),
        committed_index: Some(Index(40)),
        committed_end_pos: Pos(4096),
        flushed_index: Some(Index(40)),
        pending_proposals: 0,
        peers: vec![
            peer("n1", 40912, Some(39), Some(2)),
            peer("n2", 40913, None, None),
        ],
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = StatusLog {
        inner: MemLog::new_leader(),
        status,
    };
    let broker = Broker::start_with_log(
        config(dir.path(), port),
        Arc::new(log),
        Arc::new(NoRoleServices),
    )
    .await
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    let r = client
        .invoke(
            addr,
            RemotingCommand::request_empty(RequestCode::GET_BROKER_RUNTIME_INFO),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    let t = &v["table"];
    for (k, want) in [
        ("dledgerRole", "LEADER"),
        ("dledgerTerm", "7"),
        ("dledgerLeaderId", "n0"),
        ("dledgerBeginIndex", "3"),
        ("dledgerEndIndex", "41"),
        ("dledgerCommittedIndex", "40"),
        ("dledgerPeerWaterMark_n1", "39"),
        ("dledgerPeerLag_n1", "2"),
        ("dledgerPeerWaterMark_n2", "-1"),
        ("dledgerPeerLag_n2", "-1"),
    ] {
        assert_eq!(t[k].as_str(), Some(want), "{k}");
    }
    // The keys mqadmin clusterList reads are still there.
    for k in [
        "brokerVersionDesc",
        "brokerActive",
        "putTps",
        "dLedgerEndIndex",
    ] {
        assert!(t[k].is_string(), "{k} missing");
    }
    broker.shutdown().await;
    client.shutdown().await;
}

#[tokio::test]
async fn runtime_info_without_ledger_status_uses_the_role_and_indexes() {
    let h = Harness::start().await;
    h.wait_master().await;
    let r = h.call(send_v2("TopicRt", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let t = runtime_info(&h).await;
    assert_eq!(t["dledgerRole"], "LEADER");
    assert_eq!(t["dledgerTerm"], "1");
    // Entry 0 is the auto-created topic's metadata record, entry 1 the message.
    assert_eq!(t["dledgerBeginIndex"], "0");
    assert_eq!(t["dledgerEndIndex"], "1");
    assert_eq!(t["dledgerCommittedIndex"], "1");
    assert!(
        !t.keys().any(|k| k.starts_with("dledgerPeer")),
        "no peer keys without a ledger status: {t:?}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn broker_config_carries_the_dledger_keys() {
    let h = Harness::start().await;
    let r = h
        .call(RemotingCommand::request_empty(
            RequestCode::GET_BROKER_CONFIG,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let text = std::str::from_utf8(r.body()).unwrap();
    let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(kv["enableDLegerCommitLog"], "true");
    assert_eq!(kv["dLegerGroup"], "b0");
    assert_eq!(kv["dLegerSelfId"], "n0");
    assert_eq!(kv["dLegerPeers"], "n0-127.0.0.1:1");
    h.shutdown().await;
}

fn queue_offset(r: &RemotingCommand) -> i64 {
    r.ext_field("queueOffset").unwrap().parse().unwrap()
}

#[tokio::test]
async fn delete_topic_drops_config_queues_and_offsets() {
    let h = Harness::start().await;
    h.wait_master().await;
    for i in 0..3 {
        let r = h.call(send_v2("TopicDel", 0, b"m", "")).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
        assert_eq!(queue_offset(&r), i);
    }
    let u = UpdateConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "TopicDel".into(),
        queue_id: 0,
        commit_offset: 2,
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::UPDATE_CONSUMER_OFFSET,
            &u,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let store = Arc::clone(&h.ctx().store);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.max_offset("TopicDel", 0) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "never dispatched");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let cq_dir = h.dir.path().join("consumequeue").join("TopicDel");
    assert!(cq_dir.exists(), "consume queue not on disk");

    let d = DeleteTopicRequestHeader {
        topic: "TopicDel".into(),
        cluster_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::DELETE_TOPIC_IN_BROKER,
            &d,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
    assert!(!h.ctx().topics.contains("TopicDel"));
    assert_eq!(store.max_offset("TopicDel", 0), 0);
    assert!(!cq_dir.exists(), "consume-queue files left behind");
    assert_eq!(h.ctx().offsets.query_offset("CG", "TopicDel", 0), None);
    let r = h
        .call(RemotingCommand::request_empty(
            RequestCode::GET_ALL_TOPIC_CONFIG,
        ))
        .await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert!(v["topicConfigTable"].get("TopicDel").is_none());
    // The persisted table no longer has it either.
    let persisted = std::fs::read_to_string(h.ctx().topics.path()).unwrap();
    assert!(!persisted.contains("TopicDel"));

    // Re-created by a send, the topic starts over at queue offset 0.
    let r = h.call(send_v2("TopicDel", 0, b"again", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(queue_offset(&r), 0);

    // Deleting an unknown topic succeeds; a blank name is refused.
    let d = DeleteTopicRequestHeader {
        topic: "NoSuchTopic".into(),
        cluster_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::DELETE_TOPIC_IN_BROKER,
            &d,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let d = DeleteTopicRequestHeader {
        topic: String::new(),
        cluster_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::DELETE_TOPIC_IN_BROKER,
            &d,
        ))
        .await;
    assert_ne!(code(&r), ResponseCode::SUCCESS);
    h.shutdown().await;
}

#[tokio::test]
async fn election_no_op_entries_are_skipped_by_dispatch() {
    let log = MemLog::new_leader();
    // The no-op a leader appends on election: an empty entry at index 0.
    log.propose(Bytes::new()).await.unwrap();
    let h = Harness::start_with(log, |_| {}).await;
    h.wait_master().await;
    let r = h.call(send_v2("TopicNoop", 0, b"after-noop", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(queue_offset(&r), 0);
    let store = Arc::clone(&h.ctx().store);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.max_offset("TopicNoop", 0) < 1 {
        assert!(tokio::time::Instant::now() < deadline, "never dispatched");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let r = h.call(pull("CG", "TopicNoop", 0, 0, 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let got = records(&r);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].body[..], b"after-noop");
    h.shutdown().await;
}
