//! Process-level failover harness: one `mqnamesrv` and a 3-member DLedger group of `mqbroker`
//! processes on free loopback ports, with kill -9 / SIGSTOP / SIGCONT / restart, a minimal
//! client (route query, send, pull, max offset, consumer offsets), sequential producers, queue
//! consumers (long-polling "push" style and plain pull) that follow the master, and the
//! checkers shared by the MP-xx tests (RELIABILITY.md §6).
//!
//! Binaries: this package's `it-mqbroker` / `it-mqnamesrv` (the real programs), passed in
//! with [`failover_bins!`] from the test crates; the name server is started by
//! [`crate::cluster::NameSrv`], the brokers here (they need kill -9, SIGSTOP and restarts).
//!
//! Timings: DLedger heartbeat 300 ms × 3 missed beats, votes 100–300 ms (the "fast profile"
//! of MP-01), slave sync every 1 s. Small store files ([`SMALL_STORE_FILES`]).
//!
//! Diagnosis: [`Cluster::start`] returns only with every member booted; [`Cluster::kill9`]
//! first fails, naming the member, if one exited on its own. A test that fails keeps its temp
//! dir (name-server and broker logs, stores) and prints each member's state and log tail.
//! Environment: `FAILOVER_KEEP` keeps the temp dir of passing tests too; `FAILOVER_RUST_LOG`
//! sets the brokers' `RUST_LOG` (default info); `FAILOVER_BIN_DIR` takes `it-mqbroker` and
//! `it-mqnamesrv` from a directory (soak loops over a copied build: copy the test binary from
//! `target/debug/deps` too and run it in a shell loop).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use broker::message::{decode_records, CrcCheck, StoredMessage};
use bytes::Bytes;
use remoting::body::TopicRouteData;
use remoting::custom_headers::{
    ConsumerSendMsgBackRequestHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader,
    OffsetResponseHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeaderV2, UpdateConsumerOffsetRequestHeader,
};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

use crate::client::pull_request;

/// Broker name (= DLedger group) of the test group.
pub const GROUP: &str = "FoGroup";
/// Request timeout of the test client.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(3);
/// Queues of a topic auto-created by the test client's sends (TBW102 has 8 write queues).
pub const TOPIC_QUEUES: i32 = 8;

/// The programs under test, from this package's `it-*` binaries (or from `FAILOVER_BIN_DIR`,
/// see [`crate::cluster::Bins::or_from_env`]).
#[macro_export]
macro_rules! failover_bins {
    () => {
        $crate::cluster::Bins {
            broker: env!("CARGO_BIN_EXE_it-mqbroker").into(),
            namesrv: env!("CARGO_BIN_EXE_it-mqnamesrv").into(),
        }
        .or_from_env()
    };
}

/// Store file sizes of the test members: each member preallocates a data and an index file
/// ahead, which at the defaults (1 GiB data, 160 MiB index) would write gigabytes per run.
pub const SMALL_STORE_FILES: &str = "mappedFileSizeCommitLog=16777216\n\
     mappedFileSizeConsumeQueue=600000\nmappedFileSizeForEntryIndex=2097152\n";

/// A free loopback port whose port − 2 (VIP) is also free.
pub fn free_port_pair() -> u16 {
    crate::cluster::free_listen_port()
}

fn free_port() -> u16 {
    crate::cluster::free_port()
}

/// One broker member.
pub struct Member {
    pub self_id: String,
    pub port: u16,
    pub conf: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl Member {
    /// `127.0.0.1:listenPort`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// How often [`Cluster::start`] tries new ports when a member could not bind its own.
pub const START_ATTEMPTS: usize = 3;
/// How long a member may take to boot.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// What a booted broker prints (stdout, into its log).
const BOOT_LINE: &str = "boot success";
/// What a broker logs when a port it should bind is taken (EADDRINUSE).
const PORT_TAKEN: &str = "Address already in use";

/// Name server + three brokers.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub namesrv: SocketAddr,
    namesrv_proc: Option<crate::cluster::NameSrv>,
    broker_bin: PathBuf,
    pub members: Vec<Member>,
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let err = out.try_clone().unwrap();
    cmd.stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .env(
            "RUST_LOG",
            std::env::var("FAILOVER_RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {} failed", child.id());
}

impl Cluster {
    /// Starts the name server and three brokers; `extra` adds broker config lines. Returns
    /// once every member has booted (listens on its ports). A member that could not bind a
    /// port (taken by another process since it was chosen) makes the whole cluster start
    /// again on new ports, at most [`START_ATTEMPTS`] times; any other early exit fails.
    pub fn start(bins: &crate::cluster::Bins, extra: &str) -> Cluster {
        for attempt in 1..=START_ATTEMPTS {
            let mut c = Self::start_once(bins, extra);
            match c.wait_booted(BOOT_TIMEOUT) {
                Ok(()) => return c,
                Err(e) if attempt < START_ATTEMPTS && e.contains(PORT_TAKEN) => {
                    eprintln!("cluster start attempt {attempt} failed, retrying on new ports: {e}");
                }
                Err(e) => panic!("cluster did not start: {e}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Waits until every running member printed its boot line; the first member that exited
    /// or did not boot within `timeout` is an error carrying its log tail.
    fn wait_booted(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.members.len() {
            loop {
                if let Some(status) = self.exited(i) {
                    return Err(format!(
                        "member {} exited ({status}) before booting; log tail:\n{}",
                        self.members[i].self_id,
                        self.log_tail(i)
                    ));
                }
                let log = std::fs::read_to_string(&self.members[i].log).unwrap_or_default();
                if log.contains(BOOT_LINE) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "member {} did not boot within {timeout:?}; log tail:\n{}",
                        self.members[i].self_id,
                        self.log_tail(i)
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// The exit status of member `i` if its process ended although the test did not stop it
    /// (reaped by this call; `child` stays set, so the member keeps counting as exited on its
    /// own rather than stopped by the test).
    fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.members[i].child.as_mut()?.try_wait().ok().flatten()
    }

    /// Panics, naming the member and its log tail, when a member the test did not stop has
    /// exited: a group that lost a member on its own cannot survive the next kill, and the
    /// test would otherwise fail later as a timeout waiting for a master.
    pub fn assert_members_running(&mut self, before: &str) {
        for i in 0..self.members.len() {
            if let Some(status) = self.exited(i) {
                panic!(
                    "member {} exited on its own ({status}) before {before}; log tail:\n{}",
                    self.members[i].self_id,
                    self.log_tail(i)
                );
            }
        }
    }

    fn start_once(bins: &crate::cluster::Bins, extra: &str) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let ns = crate::cluster::NameSrv::start(bins, dir.path());
        let namesrv = ns.addr;
        let ledger_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peers: Vec<String> = ledger_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("n{i}-127.0.0.1:{p}"))
            .collect();
        let peers = peers.join(";");
        let mut members = Vec::new();
        for i in 0..3 {
            let port = free_port_pair();
            let root = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&root).unwrap();
            let conf = dir.path().join(format!("broker-n{i}.conf"));
            let text = format!(
                "brokerClusterName=FoCluster\nbrokerName={GROUP}\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\n\
                 namesrvAddr={namesrv}\nstorePathRootDir={}\nenableDLegerCommitLog=true\n\
                 dLegerGroup={GROUP}\ndLegerPeers={peers}\ndLegerSelfId=n{i}\n\
                 dLedgerHeartBeatTimeIntervalMs=300\ndLedgerMaxHeartBeatLeak=3\n\
                 dLedgerMinVoteIntervalMs=100\ndLedgerMaxVoteIntervalMs=300\n\
                 {small}\
                 registerNameServerPeriod=10000\nslaveSyncIntervalMs=1000\nslaveSyncFirstDelayMs=500\n{extra}\n",
                root.display(),
                small = SMALL_STORE_FILES,
            );
            std::fs::write(&conf, text).unwrap();
            members.push(Member {
                self_id: format!("n{i}"),
                port,
                conf,
                log: dir.path().join(format!("broker-n{i}.log")),
                child: None,
            });
        }
        let mut c = Cluster {
            dir,
            namesrv,
            namesrv_proc: Some(ns),
            broker_bin: bins.broker.clone(),
            members,
        };
        for i in 0..3 {
            c.start_member(i);
        }
        c
    }

    /// (Re)starts member `i`.
    pub fn start_member(&mut self, i: usize) {
        let m = &mut self.members[i];
        assert!(m.child.is_none(), "member {i} already running");
        let child = spawn_logged(
            Command::new(&self.broker_bin).arg("-c").arg(&m.conf),
            &m.log,
        );
        m.child = Some(child);
    }

    /// kill -9 member `i` and reap it. First checks that every member the test did not stop
    /// is still running ([`Cluster::assert_members_running`]).
    pub fn kill9(&mut self, i: usize) {
        let what = format!("the test killed {}", self.members[i].self_id);
        self.assert_members_running(&what);
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP member `i`.
    pub fn pause(&self, i: usize) {
        signal(self.members[i].child.as_ref().expect("running"), "STOP");
    }

    /// SIGCONT member `i`.
    pub fn resume(&self, i: usize) {
        signal(self.members[i].child.as_ref().expect("running"), "CONT");
    }

    /// Member index listening on `addr`.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.addr().to_string() == addr)
    }

    /// Tail of a member's log (for failure messages).
    pub fn log_tail(&self, i: usize) -> String {
        let t = std::fs::read_to_string(&self.members[i].log).unwrap_or_default();
        let mut start = t.len().saturating_sub(3000);
        while !t.is_char_boundary(start) {
            start += 1;
        }
        t[start..].to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test keeps its logs (a flake seen once in CI cannot be re-run to ask).
        let failed = std::thread::panicking();
        let states = failed.then(|| self.member_states());
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(c.id().to_string())
                    .status();
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        drop(self.namesrv_proc.take());
        if failed || std::env::var_os("FAILOVER_KEEP").is_some() {
            let p = self.dir.path().to_path_buf();
            if let Some(states) = states {
                self.print_log_tails(&states);
            }
            eprintln!(
                "keeping {} (name server and broker logs, stores)",
                p.display()
            );
            if let Ok(empty) = tempfile::tempdir() {
                std::mem::forget(std::mem::replace(&mut self.dir, empty));
            }
        }
    }
}

/// Lines of each log printed when a test fails.
const FAILURE_LOG_LINES: usize = 60;

impl Cluster {
    /// Per member: running, stopped by the test, or exited on its own (with its status).
    fn member_states(&mut self) -> Vec<String> {
        (0..self.members.len())
            .map(
                |i| match (self.members[i].child.is_some(), self.exited(i)) {
                    (false, _) => "stopped by the test".to_owned(),
                    (true, None) => "running".to_owned(),
                    (true, Some(status)) => format!("EXITED ON ITS OWN ({status})"),
                },
            )
            .collect()
    }

    /// The last lines of the name server's and every member's log, on stderr (CI keeps the
    /// test output even when it drops the temp dir).
    fn print_log_tails(&self, states: &[String]) {
        let mut logs = vec![("namesrv".to_owned(), self.dir.path().join("namesrv.log"))];
        for (m, state) in self.members.iter().zip(states) {
            logs.push((format!("broker {} ({state})", m.self_id), m.log.clone()));
        }
        for (name, path) in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(FAILURE_LOG_LINES);
            eprintln!(
                "---- {name}: last {} lines of {}",
                lines.len() - from,
                path.display()
            );
            for l in &lines[from..] {
                eprintln!("{l}");
            }
        }
    }
}

/// What a send's answer says about the message (R14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Acknowledged at this queue offset.
    Acked(i64),
    /// Definitely not stored (e.g. 14 SERVICE_NOT_AVAILABLE, 2 SYSTEM_BUSY).
    Refused(i32),
    /// May or may not be stored (timeout, connection loss, SYSTEM_ERROR).
    Indeterminate,
}

/// Minimal RocketMQ client over `remoting`.
pub struct TestClient {
    pub client: RemotingClient,
    pub namesrv: SocketAddr,
}

impl TestClient {
    pub fn new(namesrv: SocketAddr) -> Self {
        TestClient {
            client: RemotingClient::new(ClientConfig::default()),
            namesrv,
        }
    }

    /// The route of `topic`, if the name server has one.
    pub async fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let h = GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: Some(true),
        };
        let req = RemotingCommand::request(RequestCode::GET_ROUTEINFO_BY_TOPIC, &h);
        let resp = self
            .client
            .invoke(self.namesrv, req, RPC_TIMEOUT)
            .await
            .ok()?;
        if resp.response_code() != ResponseCode::SUCCESS {
            return None;
        }
        remoting::body::from_json::<TopicRouteData>(resp.body()).ok()
    }

    /// Master address (id 0) of the test group in `topic`'s route.
    pub async fn master(&self, topic: &str) -> Option<String> {
        let r = self.route(topic).await?;
        r.broker_datas
            .iter()
            .find(|b| b.broker_name == GROUP)
            .and_then(|b| b.master_addr().map(str::to_owned))
    }

    /// All registered addresses (id → addr) of the test group.
    pub async fn addrs(&self, topic: &str) -> BTreeMap<i64, String> {
        match self.route(topic).await {
            Some(r) => r
                .broker_datas
                .into_iter()
                .find(|b| b.broker_name == GROUP)
                .map(|b| b.broker_addrs)
                .unwrap_or_default(),
            None => BTreeMap::new(),
        }
    }

    /// One send attempt to `addr`.
    pub async fn send(
        &self,
        addr: SocketAddr,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        props: &str,
    ) -> SendOutcome {
        let h = SendMessageRequestHeaderV2 {
            producer_group: "FoProducer".into(),
            topic: topic.into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: TOPIC_QUEUES,
            queue_id,
            sys_flag: 0,
            born_timestamp: broker::context::now_ms(),
            flag: 0,
            properties: Some(props.into()),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(false),
            broker_name: None,
        };
        let req = RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &h)
            .with_body(Bytes::copy_from_slice(body));
        match self.client.invoke(addr, req, RPC_TIMEOUT).await {
            Ok(r) if r.response_code() == ResponseCode::SUCCESS => SendOutcome::Acked(
                r.ext_field("queueOffset")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(-1),
            ),
            Ok(r) if r.code() == 1 => SendOutcome::Indeterminate,
            Ok(r) => SendOutcome::Refused(r.code()),
            Err(remoting::RemotingError::ConnectFailed { .. }) => SendOutcome::Refused(-1),
            Err(_) => SendOutcome::Indeterminate,
        }
    }

    /// Every message of a queue on `addr` (committed data, any role).
    pub async fn pull_all(
        &self,
        addr: SocketAddr,
        topic: &str,
        queue_id: i32,
    ) -> Option<Vec<StoredMessage>> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let req = pull_request("FoChecker", topic, queue_id, offset, Duration::ZERO);
            let resp = self.client.invoke(addr, req, RPC_TIMEOUT).await.ok()?;
            match resp.response_code() {
                ResponseCode::SUCCESS => {}
                ResponseCode::PULL_NOT_FOUND | ResponseCode::PULL_OFFSET_MOVED => return Some(out),
                _ => return None,
            }
            let recs: Vec<StoredMessage> = decode_records(resp.body().clone(), CrcCheck::Verify)
                .map(|r| r.expect("record decodes"))
                .collect();
            let Some(last) = recs.last() else {
                return Some(out);
            };
            offset = last.queue_offset + 1;
            out.extend(recs);
        }
    }

    /// GET_MAX_OFFSET of a queue on `addr` (its consume queue: committed, dispatched data).
    pub async fn max_offset(&self, addr: SocketAddr, topic: &str, queue_id: i32) -> Option<i64> {
        let h = GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: Some(true),
            broker_name: None,
        };
        let req = RemotingCommand::request(RequestCode::GET_MAX_OFFSET, &h);
        let r = self.client.invoke(addr, req, RPC_TIMEOUT).await.ok()?;
        if r.response_code() != ResponseCode::SUCCESS {
            return None;
        }
        r.decode_header::<OffsetResponseHeader>()
            .ok()
            .map(|h| h.offset)
    }

    /// CONSUMER_SEND_MSG_BACK: a consumer of `group` failed the message at physical offset
    /// `phys` (of `origin_topic`); the broker re-stores it into `%RETRY%<group>` after
    /// `delay_level`. True when acknowledged.
    pub async fn send_back(
        &self,
        addr: SocketAddr,
        group: &str,
        phys: i64,
        delay_level: i32,
        origin_topic: &str,
    ) -> bool {
        let h = ConsumerSendMsgBackRequestHeader {
            offset: phys,
            group: group.into(),
            delay_level,
            origin_msg_id: None,
            origin_topic: Some(origin_topic.into()),
            unit_mode: Some(false),
            max_reconsume_times: Some(16),
            broker_name: None,
        };
        let req = RemotingCommand::request(RequestCode::CONSUMER_SEND_MSG_BACK, &h);
        matches!(self.client.invoke(addr, req, RPC_TIMEOUT).await, Ok(r) if r.response_code() == ResponseCode::SUCCESS)
    }

    /// Whether the broker at `addr` serves as master (`brokerActive` of
    /// GET_BROKER_RUNTIME_INFO); `None` when it does not answer within `timeout`.
    pub async fn is_master(&self, addr: SocketAddr, timeout: Duration) -> Option<bool> {
        let req = RemotingCommand::request_empty(RequestCode::GET_BROKER_RUNTIME_INFO);
        let r = self.client.invoke(addr, req, timeout).await.ok()?;
        if r.response_code() != ResponseCode::SUCCESS {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(r.body()).ok()?;
        v["table"]["brokerActive"].as_str().map(|s| s == "true")
    }

    /// One pull of `queue_id` at `offset` for `group`; `suspend` > 0 long-polls (and commits
    /// `offset` like a push consumer).
    pub async fn pull_once(
        &self,
        addr: SocketAddr,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        suspend: Duration,
    ) -> PullOutcome {
        let req = pull_request(group, topic, queue_id, offset, suspend);
        let resp = match self.client.invoke(addr, req, RPC_TIMEOUT + suspend).await {
            Ok(r) => r,
            Err(_) => return PullOutcome::Failed,
        };
        match resp.response_code() {
            ResponseCode::SUCCESS => {
                let recs: Result<Vec<StoredMessage>, _> =
                    decode_records(resp.body().clone(), CrcCheck::Verify).collect();
                match recs {
                    Ok(r) => PullOutcome::Found(r),
                    Err(_) => PullOutcome::Failed,
                }
            }
            ResponseCode::PULL_NOT_FOUND | ResponseCode::PULL_RETRY_IMMEDIATELY => {
                PullOutcome::NoNew
            }
            _ => {
                let next = resp
                    .decode_header::<PullMessageResponseHeader>()
                    .ok()
                    .map(|h| h.next_begin_offset);
                PullOutcome::Other(resp.code(), next)
            }
        }
    }

    /// UPDATE_CONSUMER_OFFSET on `addr`.
    pub async fn commit_offset(
        &self,
        addr: SocketAddr,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> bool {
        let h = UpdateConsumerOffsetRequestHeader {
            consumer_group: group.into(),
            topic: topic.into(),
            queue_id,
            commit_offset: offset,
            broker_name: None,
        };
        let req = RemotingCommand::request(RequestCode::UPDATE_CONSUMER_OFFSET, &h);
        matches!(self.client.invoke(addr, req, RPC_TIMEOUT).await, Ok(r) if r.response_code() == ResponseCode::SUCCESS)
    }

    /// QUERY_CONSUMER_OFFSET on `addr` (None when not found or unreachable).
    pub async fn query_offset(
        &self,
        addr: SocketAddr,
        group: &str,
        topic: &str,
        queue_id: i32,
    ) -> Option<i64> {
        let h = QueryConsumerOffsetRequestHeader {
            consumer_group: group.into(),
            topic: topic.into(),
            queue_id,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        };
        let req = RemotingCommand::request(RequestCode::QUERY_CONSUMER_OFFSET, &h);
        let r = self.client.invoke(addr, req, RPC_TIMEOUT).await.ok()?;
        if r.response_code() != ResponseCode::SUCCESS {
            return None;
        }
        r.ext_field("offset").and_then(|v| v.parse().ok())
    }
}

/// Polls `f` every 20 ms until it yields `Some`, or panics after `timeout`.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for a master of the group in `TBW102`'s route (registered brokers always carry it),
/// optionally different from `not`; returns its address and when it was seen.
pub async fn wait_master(
    c: &TestClient,
    not: Option<&str>,
    timeout: Duration,
) -> (String, Instant) {
    poll("a registered master", timeout, || async {
        let m = c.master("TBW102").await?;
        if Some(m.as_str()) == not {
            return None;
        }
        Some((m, Instant::now()))
    })
    .await
}

/// Sequence number carried in the body (`seq-<n>`).
pub fn seq_of(m: &StoredMessage) -> Option<u64> {
    std::str::from_utf8(&m.body)
        .ok()?
        .strip_prefix("seq-")?
        .parse()
        .ok()
}

/// The producer side of a run: which sequence numbers were acknowledged (and where) and
/// which had an indeterminate attempt.
#[derive(Debug, Default)]
pub struct History {
    pub acked: BTreeMap<u64, i64>,
    pub indeterminate: HashSet<u64>,
    pub refused: usize,
}

/// A sequential producer on one queue: each sequence number is retried (re-querying the route
/// after a failure) until acknowledged, so per-queue order is the sequence order.
pub struct SeqProducer {
    pub client: TestClient,
    pub topic: String,
    pub queue_id: i32,
    pub next: u64,
    pub history: History,
    master: Option<SocketAddr>,
}

impl SeqProducer {
    pub fn new(namesrv: SocketAddr, topic: &str, queue_id: i32) -> Self {
        SeqProducer {
            client: TestClient::new(namesrv),
            topic: topic.into(),
            queue_id,
            next: 0,
            history: History::default(),
            master: None,
        }
    }

    /// The master that acknowledged the last send (None after a failed attempt).
    pub fn current_master(&self) -> Option<SocketAddr> {
        self.master
    }

    /// Sends the next sequence number once (one attempt). Returns true when acknowledged.
    pub async fn step(&mut self) -> bool {
        let master = match self.master {
            Some(m) => m,
            None => {
                let m = match self.client.master(&self.topic).await {
                    Some(m) => Some(m),
                    None => self.client.master("TBW102").await,
                };
                match m.and_then(|m| m.parse().ok()) {
                    Some(m) => {
                        self.master = Some(m);
                        m
                    }
                    None => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        return false;
                    }
                }
            }
        };
        let seq = self.next;
        let body = format!("seq-{seq}");
        match self
            .client
            .send(master, &self.topic, self.queue_id, body.as_bytes(), "")
            .await
        {
            SendOutcome::Acked(off) => {
                self.history.acked.insert(seq, off);
                self.next += 1;
                true
            }
            SendOutcome::Indeterminate => {
                self.history.indeterminate.insert(seq);
                self.master = None;
                false
            }
            SendOutcome::Refused(_) => {
                self.history.refused += 1;
                self.master = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
                false
            }
        }
    }

    /// Steps until `n` more messages are acknowledged (or `timeout`); returns the time of the
    /// first acknowledgement.
    pub async fn send_n(&mut self, n: u64, timeout: Duration) -> Instant {
        let target = self.next + n;
        let deadline = Instant::now() + timeout;
        let mut first = None;
        while self.next < target {
            assert!(
                Instant::now() < deadline,
                "sends did not resume within {timeout:?} (acked {} of {n})",
                n - (target - self.next)
            );
            if self.step().await && first.is_none() {
                first = Some(Instant::now());
            }
        }
        first.unwrap_or_else(Instant::now)
    }
}

/// The MP checks on one queue's final content: every acknowledged message present at its
/// acknowledged queue offset (nothing acknowledged lost or truncated), sequence numbers in
/// non-decreasing order (per-queue order), duplicates only of indeterminate attempts.
pub fn check_history(h: &History, log: &[StoredMessage]) -> Result<(), String> {
    let seqs: Vec<u64> = log.iter().filter_map(seq_of).collect();
    for (seq, off) in &h.acked {
        let at = log.iter().find(|m| m.queue_offset == *off);
        match at.and_then(seq_of) {
            Some(s) if s == *seq => {}
            other => {
                return Err(format!(
                    "acked seq {seq} at queue offset {off}: found {other:?}"
                ))
            }
        }
    }
    for w in seqs.windows(2) {
        if w[1] < w[0] {
            return Err(format!("order broken: {} after {}", w[1], w[0]));
        }
    }
    let mut seen = HashSet::new();
    for s in &seqs {
        if !seen.insert(*s) && !h.indeterminate.contains(s) {
            return Err(format!(
                "seq {s} duplicated without an indeterminate answer"
            ));
        }
    }
    for (i, m) in log.iter().enumerate() {
        if m.queue_offset != i as i64 {
            return Err(format!(
                "queue offsets not dense at {i}: {}",
                m.queue_offset
            ));
        }
    }
    Ok(())
}

/// Answer to one consumer pull.
#[derive(Debug)]
pub enum PullOutcome {
    /// Records from the requested offset on.
    Found(Vec<StoredMessage>),
    /// Nothing new (PULL_NOT_FOUND, or PULL_RETRY_IMMEDIATELY).
    NoNew,
    /// Another code (e.g. PULL_OFFSET_MOVED) with the broker's nextBeginOffset if any.
    Other(i32, Option<i64>),
    /// No answer (connection lost, timeout) or undecodable records.
    Failed,
}

/// How a test consumer waits for new messages: a push consumer long-polls each queue (one
/// task per queue, suspended in the broker until messages arrive); a pull consumer loops over
/// the queues and pauses briefly when a round found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerStyle {
    LongPoll,
    PlainPull,
}

/// What one consumer saw: per queue, (queue offset, sequence number) in the order received;
/// anything irregular (a record not at the expected offset, a moved offset) in `errors`.
#[derive(Debug, Default)]
pub struct Consumed {
    pub queues: BTreeMap<i32, Vec<(i64, u64)>>,
    pub errors: Vec<String>,
    /// Pull answers other than records / nothing new (failovers, stale routes).
    pub failed_pulls: u64,
}

/// Ends a consumer run: `Some(max offsets per queue)` once the producers stopped; each
/// consumer returns when it has read every queue up to its target.
pub type DrainTargets = tokio::sync::watch::Receiver<Option<Vec<i64>>>;

async fn current_master(c: &TestClient, topic: &str) -> Option<SocketAddr> {
    let m = match c.master(topic).await {
        Some(m) => Some(m),
        None => c.master("TBW102").await,
    };
    m.and_then(|m| m.parse().ok())
}

/// Reads queues `queues` of `topic` from 0, always from the current master (re-queried after a
/// failed pull), never going back: the consumer's offset only moves past records it received.
async fn consume_queues(
    namesrv: SocketAddr,
    group: String,
    topic: String,
    queues: Vec<i32>,
    suspend: Duration,
    targets: DrainTargets,
) -> Consumed {
    let c = TestClient::new(namesrv);
    let mut out = Consumed::default();
    let mut next: BTreeMap<i32, i64> = queues.iter().map(|q| (*q, 0)).collect();
    let mut master: Option<SocketAddr> = None;
    loop {
        if let Some(t) = targets.borrow().as_ref() {
            if next.iter().all(|(q, n)| *n >= t[*q as usize]) {
                return out;
            }
        }
        let m = match master {
            Some(m) => m,
            None => match current_master(&c, &topic).await {
                Some(m) => {
                    master = Some(m);
                    m
                }
                None => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let mut found = false;
        for q in &queues {
            let at = next[q];
            match c.pull_once(m, &group, &topic, *q, at, suspend).await {
                PullOutcome::Found(recs) => {
                    found |= !recs.is_empty();
                    let seen = out.queues.entry(*q).or_default();
                    let mut expect = at;
                    for r in recs {
                        if r.queue_offset != expect {
                            out.errors.push(format!(
                                "queue {q}: record at offset {} where {expect} was expected",
                                r.queue_offset
                            ));
                        }
                        seen.push((r.queue_offset, seq_of(&r).unwrap_or(u64::MAX)));
                        expect = r.queue_offset + 1;
                    }
                    next.insert(*q, expect.max(at));
                }
                PullOutcome::NoNew => {}
                PullOutcome::Other(code, nbo) => {
                    // On the master this would mean the offset is outside the queue: the
                    // consumer saw data the master no longer has.
                    out.failed_pulls += 1;
                    if code == ResponseCode::PULL_OFFSET_MOVED.0 {
                        out.errors.push(format!(
                            "queue {q}: offset {at} moved (next {nbo:?}) on {m}"
                        ));
                    }
                    master = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    break;
                }
                PullOutcome::Failed => {
                    out.failed_pulls += 1;
                    master = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    break;
                }
            }
        }
        if !found && suspend.is_zero() && master.is_some() {
            // Plain pull consumer: pause between empty rounds.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Starts a consumer of queues `0..queues` in `style`; join the handles for its results.
pub fn spawn_consumer(
    namesrv: SocketAddr,
    group: &str,
    topic: &str,
    queues: i32,
    style: ConsumerStyle,
    targets: DrainTargets,
) -> Vec<tokio::task::JoinHandle<Consumed>> {
    match style {
        ConsumerStyle::LongPoll => (0..queues)
            .map(|q| {
                tokio::spawn(consume_queues(
                    namesrv,
                    group.into(),
                    topic.into(),
                    vec![q],
                    Duration::from_millis(1000),
                    targets.clone(),
                ))
            })
            .collect(),
        ConsumerStyle::PlainPull => vec![tokio::spawn(consume_queues(
            namesrv,
            group.into(),
            topic.into(),
            (0..queues).collect(),
            Duration::ZERO,
            targets,
        ))],
    }
}

/// Joins a consumer's tasks into one result.
pub async fn join_consumer(handles: Vec<tokio::task::JoinHandle<Consumed>>) -> Consumed {
    let mut all = Consumed::default();
    for h in handles {
        let c = h.await.expect("consumer task");
        all.queues.extend(c.queues);
        all.errors.extend(c.errors);
        all.failed_pulls += c.failed_pulls;
    }
    all
}

/// A consumer's view against the final log of each queue: it received every message exactly
/// once, in queue order, each the same message the log holds at that offset (nothing a
/// consumer saw was truncated or replaced).
pub fn check_consumed(
    name: &str,
    consumed: &Consumed,
    logs: &BTreeMap<i32, Vec<StoredMessage>>,
) -> Result<(), String> {
    if let Some(e) = consumed.errors.first() {
        return Err(format!(
            "{name}: {e} ({} irregularities)",
            consumed.errors.len()
        ));
    }
    for (q, log) in logs {
        let seen = consumed.queues.get(q).map(Vec::as_slice).unwrap_or(&[]);
        if seen.len() != log.len() {
            return Err(format!(
                "{name}: queue {q}: consumed {} messages, the log holds {}",
                seen.len(),
                log.len()
            ));
        }
        for ((off, seq), m) in seen.iter().zip(log) {
            if *off != m.queue_offset || Some(*seq) != seq_of(m) {
                return Err(format!(
                    "{name}: queue {q}: consumed seq {seq} at {off}, the log has {:?} at {}",
                    seq_of(m),
                    m.queue_offset
                ));
            }
        }
    }
    Ok(())
}
