//! Harness of the request-level fuzz tests (RELIABILITY.md §6 FZ-04, FZ-05): a seeded PRNG,
//! a panic counter, an in-process 3-member DLedger broker group on free 127.0.0.1 ports
//! (each member with its own temp dir, client port and DLedger port), a raw frame client
//! (so malformed frames can be written), and the checks every case ends with: a control
//! send is acknowledged and pullable at its offset, and the consume queues of all members
//! agree.
//!
//! Nothing here sleeps for a fixed time to let something happen: states are polled with a
//! deadline; every network call has a timeout.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use broker::broker::Broker;
use broker::config::BrokerConfig;
use broker::context::{BrokerContext, ServingRole};
use broker::message::{decode_records, CrcCheck, StoredMessage};
use broker::store::commit_log::LedgerRole;
use broker::store::consume_queue::CqUnit;
use bytes::{Bytes, BytesMut};
use remoting::{RemotingCommand, RequestCode, ResponseCode, FLAG_RESPONSE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ----- seeded PRNG -----------------------------------------------------------------------

/// SplitMix64: tiny, seedable, good enough to drive a fuzzer; no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The generator of case `case` of a run with `seed`: every case can be replayed alone.
    pub fn for_case(seed: u64, case: u64) -> Rng {
        let mut r = Rng(seed ^ case.wrapping_add(1).wrapping_mul(0xA24B_AED4_963E_E407));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi as i128 - lo as i128) as u128;
        (lo as i128 + (self.next_u64() as u128 % span) as i128) as i64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// `lo + below(spread)` random bytes.
    pub fn some_bytes(&mut self, lo: usize, spread: u64) -> Vec<u8> {
        let n = lo + self.below(spread) as usize;
        self.bytes(n)
    }

    /// `lo + below(spread)` printable ASCII characters.
    pub fn some_text(&mut self, lo: usize, spread: u64) -> String {
        let n = lo + self.below(spread) as usize;
        self.text(n)
    }

    /// Printable ASCII.
    pub fn text(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b' ' + self.below(95) as u8))
            .collect()
    }
}

/// A `u64` from the environment (decimal or `0x` hex).
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `FUZZ_SEED` if set, else a fresh seed; printed either way so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = env_u64("FUZZ_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng::new(t ^ u64::from(std::process::id())).next_u64()
    });
    eprintln!("{test}: FUZZ_SEED={seed}");
    seed
}

// ----- panics and serialisation of the tests ----------------------------------------------

static PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();

/// Counts every panic in the process (broker tasks included: tokio catches them, the hook
/// still runs), then lets the previous hook print it.
pub fn install_panic_counter() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// Panics so far in this process.
pub fn panics() -> usize {
    PANICS.load(Ordering::SeqCst)
}

/// The fuzz tests of one binary run one at a time: three brokers each are enough for two
/// cores, and the panic counter must only see the running test.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ----- the in-process group -----------------------------------------------------------------

/// Answer deadline for a well-formed request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long followers may take to dispatch what the leader committed.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(15);

fn port_free(port: u16) -> bool {
    port > 1024 && TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn os_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// A free port not in `taken`; for a broker listen port also its VIP neighbour (port - 2),
/// which the broker binds too.
fn free_port(taken: &mut BTreeSet<u16>, with_vip: bool) -> u16 {
    loop {
        let p = os_port();
        let all: Vec<u16> = if with_vip {
            vec![p, p.wrapping_sub(2)]
        } else {
            vec![p]
        };
        if all.iter().all(|q| !taken.contains(q) && port_free(*q)) {
            taken.extend(all);
            return p;
        }
    }
}

/// One broker of the group.
pub struct Member {
    pub id: String,
    pub dir: tempfile::TempDir,
    /// Client-facing address (listenPort).
    pub addr: SocketAddr,
    /// DLedger RPC address.
    pub ledger_addr: SocketAddr,
    pub broker: Option<Broker>,
}

impl Member {
    pub fn ctx(&self) -> &Arc<BrokerContext> {
        self.broker.as_ref().expect("member is running").context()
    }

    /// The member's DLedger role as the broker sees it.
    pub fn ledger_role(&self) -> (LedgerRole, i64, Option<String>) {
        let r = self.ctx().store.log().role().borrow().clone();
        (r.role, r.term, r.leader_id)
    }

    /// The persisted term (`currTerm` of the `currterm` file), if the file exists.
    pub fn persisted_term(&self) -> Option<i64> {
        let path = find_file(self.dir.path(), "currterm")?;
        let text = std::fs::read_to_string(path).ok()?;
        text.lines()
            .find_map(|l| l.trim().strip_prefix("currTerm="))
            .and_then(|v| v.trim().parse().ok())
    }
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

/// Timings and sizes of a group.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// `heartBeatTimeIntervalMs` (the lease is three of them).
    pub heartbeat_ms: u64,
    /// `maxMessageSize`.
    pub max_message_size: usize,
    /// More properties lines.
    pub extra: String,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            heartbeat_ms: 2000,
            max_message_size: 65536,
            extra: String::new(),
        }
    }
}

pub const CLUSTER: &str = "FuzzCluster";
pub const GROUP: &str = "FuzzGroup";

/// Three brokers forming one DLedger group in this process.
pub struct Group {
    pub members: Vec<Member>,
    pub opts: GroupOptions,
}

impl Group {
    /// Starts the three members and waits for one of them to serve as master.
    pub async fn start(opts: GroupOptions) -> Group {
        let mut taken = BTreeSet::new();
        let ids = ["n0", "n1", "n2"];
        let listen: Vec<u16> = ids.iter().map(|_| free_port(&mut taken, true)).collect();
        let ledger: Vec<u16> = ids.iter().map(|_| free_port(&mut taken, false)).collect();
        let peers = ids
            .iter()
            .zip(&ledger)
            .map(|(id, p)| format!("{id}-127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(";");
        let mut starts = Vec::new();
        let mut members = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let dir = tempfile::tempdir().expect("temp dir");
            let text = format!(
                "brokerClusterName={CLUSTER}\nbrokerName={GROUP}\nbrokerIP1=127.0.0.1\n\
                 bindAddress=127.0.0.1\nlistenPort={}\nstorePathRootDir={}\n\
                 enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerSelfId={id}\n\
                 dLegerPeers={peers}\nmaxMessageSize={}\nmappedFileSizeCommitLog=33554432\n\
                 mappedFileSizeConsumeQueue=120000\nheartBeatTimeIntervalMs={}\n\
                 maxHeartBeatLeak=3\n{}",
                listen[i],
                dir.path().display(),
                opts.max_message_size,
                opts.heartbeat_ms,
                opts.extra
            );
            let cfg = BrokerConfig::from_properties(&text).expect("broker config");
            starts.push(Broker::start(cfg));
            members.push(Member {
                id: id.to_string(),
                dir,
                addr: SocketAddr::from(([127, 0, 0, 1], listen[i])),
                ledger_addr: SocketAddr::from(([127, 0, 0, 1], ledger[i])),
                broker: None,
            });
        }
        let started = futures_util::future::join_all(starts).await;
        for (m, b) in members.iter_mut().zip(started) {
            m.broker = Some(b.expect("broker start"));
        }
        let g = Group { members, opts };
        g.wait_stable_leader(Duration::from_secs(30))
            .await
            .expect("initial leader");
        g
    }

    pub async fn shutdown(mut self) {
        let stops: Vec<_> = self
            .members
            .iter_mut()
            .filter_map(|m| m.broker.take())
            .map(|b| b.shutdown())
            .collect();
        futures_util::future::join_all(stops).await;
    }

    /// The member whose broker serves as master and whose ledger leads, if exactly one does
    /// and the others follow it in the same term.
    pub fn stable_leader(&self) -> Option<usize> {
        let roles: Vec<_> = self.members.iter().map(Member::ledger_role).collect();
        let leaders: Vec<usize> = (0..roles.len())
            .filter(|&i| roles[i].0 == LedgerRole::Leader)
            .collect();
        let [l] = leaders[..] else {
            return None;
        };
        let (_, term, _) = &roles[l];
        let agreed = roles.iter().enumerate().all(|(i, (role, t, leader))| {
            i == l
                || (*role == LedgerRole::Follower
                    && t == term
                    && leader.as_deref() == Some(self.members[l].id.as_str()))
        });
        let serving = self.members[l].ctx().role.role() == ServingRole::Master;
        (agreed && serving).then_some(l)
    }

    /// Polls [`Group::stable_leader`].
    pub async fn wait_stable_leader(&self, within: Duration) -> Result<usize, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.stable_leader() {
                return Ok(l);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no stable leader within {within:?}: {}",
                    self.describe_roles()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn describe_roles(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let (role, term, leader) = m.ledger_role();
                format!(
                    "{}: {role:?} term {term} leader {leader:?} serving {:?} persisted term {:?}",
                    m.id,
                    m.ctx().role.role(),
                    m.persisted_term()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Waits until every member has dispatched everything `leader` had committed when
    /// called (the log layout is the same on every member, so positions compare).
    pub async fn wait_dispatched(&self, leader: usize) -> Result<(), String> {
        let target = self.members[leader].ctx().store.water_marks().committed_pos;
        let deadline = Instant::now() + CATCH_UP_TIMEOUT;
        loop {
            let behind: Vec<String> = self
                .members
                .iter()
                .filter_map(|m| {
                    let w = m.ctx().store.water_marks();
                    (w.dispatched_pos < target).then(|| {
                        format!(
                            "{} dispatched {} committed {} (target {target})",
                            m.id, w.dispatched_pos, w.committed_pos
                        )
                    })
                })
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "members did not dispatch the leader's committed log within {CATCH_UP_TIMEOUT:?}: {}",
                    behind.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

// ----- raw frames ---------------------------------------------------------------------------

/// What came back for a request.
#[derive(Debug)]
pub enum Reply {
    /// The response with the awaited opaque.
    Answered(RemotingCommand),
    /// The server closed the connection first.
    Closed,
    /// Nothing within the wait.
    Silent,
    /// Bytes the client could not decode as a frame.
    Garbage(String),
}

/// One plain TCP connection speaking frames, so that any bytes can be written.
pub struct RawConn {
    stream: TcpStream,
    buf: BytesMut,
    /// Responses read while waiting for another opaque: (opaque, code).
    pub strays: Vec<(i32, i32)>,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> Result<RawConn, String> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connect to {addr} timed out"))?
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(RawConn {
            stream,
            buf: BytesMut::new(),
            strays: Vec::new(),
        })
    }

    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        tokio::time::timeout(REQUEST_TIMEOUT, self.stream.write_all(bytes))
            .await
            .map_err(|_| "write timed out".to_string())?
            .map_err(|e| format!("write: {e}"))
    }

    /// The next frame, `Ok(None)` on a clean close; `Err` on a timeout (`"timeout"`) or on
    /// undecodable bytes.
    async fn next_frame(&mut self, deadline: Instant) -> Result<Option<RemotingCommand>, String> {
        loop {
            if self.buf.len() >= 4 {
                let len = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if !(4..=16_777_212).contains(&len) {
                    return Err(format!("bad frame length {len} from the server"));
                }
                let total = 4 + len as usize;
                if self.buf.len() >= total {
                    let frame = self.buf.split_to(total);
                    return match RemotingCommand::decode_frame_bytes(&frame) {
                        Ok(Some(c)) => Ok(Some(c)),
                        Ok(None) => Err("incomplete frame after a full length".into()),
                        Err(e) => Err(format!("undecodable frame from the server: {e}")),
                    };
                }
            }
            let read =
                tokio::time::timeout_at(deadline.into(), self.stream.read_buf(&mut self.buf));
            match read.await {
                Err(_) => return Err("timeout".into()),
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => {}
                // A reset counts as a close.
                Ok(Err(_)) => return Ok(None),
            }
        }
    }

    /// Reads until the response to `opaque` (server-initiated requests such as
    /// NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE are skipped, other responses
    /// are kept in `strays`).
    pub async fn wait_response(&mut self, opaque: i32, within: Duration) -> Reply {
        let deadline = Instant::now() + within;
        loop {
            match self.next_frame(deadline).await {
                Ok(Some(c)) if c.flag() & FLAG_RESPONSE != 0 => {
                    if c.opaque() == opaque {
                        return Reply::Answered(c);
                    }
                    self.strays.push((c.opaque(), c.code()));
                }
                Ok(Some(_request)) => {}
                Ok(None) => return Reply::Closed,
                Err(e) if e == "timeout" => return Reply::Silent,
                Err(e) => return Reply::Garbage(e),
            }
        }
    }

    /// Sends `cmd` and waits for its response.
    pub async fn call(&mut self, cmd: &RemotingCommand, within: Duration) -> Result<Reply, String> {
        let bytes = cmd.encode_to_bytes().map_err(|e| format!("encode: {e}"))?;
        self.write(&bytes).await?;
        Ok(self.wait_response(cmd.opaque(), within).await)
    }
}

static OPAQUE: AtomicUsize = AtomicUsize::new(1_000_000);

/// A fresh opaque for requests this test sends.
pub fn opaque() -> i32 {
    (OPAQUE.fetch_add(1, Ordering::Relaxed) % (i32::MAX as usize)) as i32
}

/// One request on a fresh connection: the answer, or why there is none.
pub async fn call_once(addr: SocketAddr, cmd: RemotingCommand) -> Result<RemotingCommand, String> {
    let cmd = cmd.with_opaque(opaque());
    let mut c = RawConn::connect(addr).await?;
    match c.call(&cmd, REQUEST_TIMEOUT).await? {
        Reply::Answered(r) => Ok(r),
        other => Err(format!(
            "no answer to {:?} from {addr}: {other:?}",
            cmd.request_code()
        )),
    }
}

// ----- control sends and checks -------------------------------------------------------------

/// A message the test got acknowledged.
#[derive(Debug, Clone)]
pub struct Acked {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub body: Bytes,
    pub phys: i64,
}

/// Properties of control messages.
fn control_props(tag: &str) -> String {
    format!("TAGS\u{1}{tag}\u{2}WAIT\u{1}true\u{2}")
}

/// A well-formed SEND_MESSAGE_V2 of `body` to `topic`/`queue_id`.
pub fn send_v2(topic: &str, queue_id: i32, body: &[u8], props: &str) -> RemotingCommand {
    let h = remoting::custom_headers::SendMessageRequestHeaderV2 {
        producer_group: "FzControlPG".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 8,
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
    RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &h)
        .with_body(Bytes::copy_from_slice(body))
}

/// UPDATE_AND_CREATE_TOPIC with 8 read/write queues, read+write.
pub fn create_topic(topic: &str) -> RemotingCommand {
    let h = remoting::custom_headers::CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 8,
        write_queue_nums: 8,
        perm: 6,
        topic_filter_type: "SINGLE_TAG".into(),
        topic_sys_flag: Some(0),
        order: false,
        attributes: None,
        force: None,
    };
    RemotingCommand::request(RequestCode::UPDATE_AND_CREATE_TOPIC, &h)
}

/// PULL_MESSAGE of at most `max` messages at `offset`, no suspension, subscription `*`.
pub fn pull(topic: &str, queue_id: i32, offset: i64, max: i32) -> RemotingCommand {
    let h = remoting::custom_headers::PullMessageRequestHeader {
        consumer_group: "FzControlCG".into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: max,
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

/// Sends a control message to the current leader: `Err` unless it is acknowledged.
/// `retry_roles`: leadership may move (FZ-05), so refusals for role reasons are retried on
/// the new leader until `within`.
pub async fn control_send(
    g: &Group,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    retry_roles: bool,
    within: Duration,
) -> Result<Acked, String> {
    let deadline = Instant::now() + within;
    loop {
        let leader = g.wait_stable_leader(within).await?;
        let addr = g.members[leader].addr;
        let resp = call_once(addr, send_v2(topic, queue_id, body, &control_props("ctl"))).await;
        let retryable = match &resp {
            Ok(r) if r.response_code() == ResponseCode::SUCCESS => {
                let offset: i64 = r
                    .ext_field("queueOffset")
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("send answer without queueOffset: {r:?}"))?;
                let (_, phys) = r
                    .ext_field("msgId")
                    .ok_or_else(|| format!("send answer without msgId: {r:?}"))
                    .and_then(|id| {
                        broker::message::decode_offset_msg_id(id).map_err(|e| e.to_string())
                    })?;
                return Ok(Acked {
                    topic: topic.into(),
                    queue_id,
                    queue_offset: offset,
                    body: Bytes::copy_from_slice(body),
                    phys,
                });
            }
            Ok(r) => {
                retry_roles
                    && [
                        ResponseCode::SERVICE_NOT_AVAILABLE,
                        ResponseCode::SYSTEM_BUSY,
                        ResponseCode::SYSTEM_ERROR,
                    ]
                    .contains(&r.response_code())
            }
            Err(_) => retry_roles,
        };
        if !retryable || Instant::now() > deadline {
            return Err(format!(
                "control send to {topic}/{queue_id} via {} not acknowledged: {}; roles: {}",
                g.members[leader].id,
                match resp {
                    Ok(r) => format!("code {} remark {:?}", r.code(), r.remark()),
                    Err(e) => e,
                },
                g.describe_roles()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The message at `a`'s queue offset, pulled from `addr` over the wire; polled until found
/// (dispatch may trail the answer by a moment) or `within` passed.
pub async fn pull_acked(addr: SocketAddr, a: &Acked, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let resp = call_once(addr, pull(&a.topic, a.queue_id, a.queue_offset, 1)).await?;
        if resp.response_code() == ResponseCode::SUCCESS {
            let recs: Vec<StoredMessage> = decode_records(resp.body().clone(), CrcCheck::Verify)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("pull answer with a bad record: {e}"))?;
            let first = recs
                .first()
                .ok_or_else(|| "pull SUCCESS without records".to_string())?;
            if first.queue_offset != a.queue_offset || first.body != a.body {
                return Err(format!(
                    "pull of {}/{} at {} from {addr} found queue offset {} body {:?}, expected {:?}",
                    a.topic,
                    a.queue_id,
                    a.queue_offset,
                    first.queue_offset,
                    String::from_utf8_lossy(&first.body),
                    String::from_utf8_lossy(&a.body)
                ));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "acknowledged message {}/{} at queue offset {} (phys {}) not pullable from {addr} \
                 within {within:?}: last answer code {} remark {:?} {:?}",
                a.topic,
                a.queue_id,
                a.queue_offset,
                a.phys,
                resp.code(),
                resp.remark(),
                resp.ext_fields()
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The message at `a`'s queue offset, read from `m`'s store (no offset correction, as on a
/// slave): same queue offset, same body, same physical offset.
pub fn read_acked(m: &Member, a: &Acked) -> Result<(), String> {
    let r = m.ctx().store.get_messages(
        &a.topic,
        a.queue_id,
        a.queue_offset,
        1,
        usize::MAX,
        false,
        &|_| true,
    );
    let recs: Vec<StoredMessage> = decode_records(r.body.freeze(), CrcCheck::Verify)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: bad record in the store: {e}", m.id))?;
    match recs.first() {
        Some(s) if s.queue_offset == a.queue_offset && s.body == a.body && s.physical_offset == a.phys => {
            Ok(())
        }
        Some(s) => Err(format!(
            "{}: {}/{} at {} holds queue offset {} phys {} body {:?}; acknowledged phys {} body {:?}",
            m.id,
            a.topic,
            a.queue_id,
            a.queue_offset,
            s.queue_offset,
            s.physical_offset,
            String::from_utf8_lossy(&s.body),
            a.phys,
            String::from_utf8_lossy(&a.body)
        )),
        None => Err(format!(
            "{}: acknowledged {}/{} at queue offset {} is not readable ({:?}, queue max {})",
            m.id,
            a.topic,
            a.queue_id,
            a.queue_offset,
            r.status.name(),
            m.ctx().store.max_offset(&a.topic, a.queue_id)
        )),
    }
}

/// Every unit of every consume queue of `m` (topic/queue -> (min offset, units from min)).
pub fn queue_snapshot(m: &Member) -> BTreeMap<(String, i32), (i64, Vec<CqUnit>)> {
    let mut out = BTreeMap::new();
    for q in m.ctx().store.consume_queues().queues() {
        let (min, max) = (q.min_offset(), q.max_offset());
        let mut units = Vec::new();
        let mut at = min;
        while at < max {
            match q.read_units(at, 4096) {
                Ok(u) if !u.is_empty() => {
                    at += u.len() as i64;
                    units.extend(u);
                }
                _ => break,
            }
        }
        out.insert((q.topic().to_owned(), q.queue_id()), (min, units));
    }
    out
}

/// The consume queues of all members agree with the leader's: after every member dispatched
/// what the leader had committed, every leader queue exists on each follower with the same
/// units (a follower may hold more at the end, written since), a follower holds no queue the
/// leader lacks, and the records the units of `queues` point at are byte-identical. Only
/// `queues` are compared when given, else all.
pub async fn check_queues_agree(
    g: &Group,
    leader: usize,
    queues: Option<&BTreeSet<(String, i32)>>,
) -> Result<(), String> {
    g.wait_dispatched(leader).await?;
    let lead = queue_snapshot(&g.members[leader]);
    let wanted = |k: &(String, i32)| queues.is_none_or(|q| q.contains(k));
    for (i, m) in g.members.iter().enumerate() {
        if i == leader {
            continue;
        }
        let mine = queue_snapshot(m);
        for (k, (lmin, lunits)) in lead.iter().filter(|(k, _)| wanted(k)) {
            let Some((fmin, funits)) = mine.get(k) else {
                if lunits.is_empty() {
                    continue;
                }
                return Err(format!(
                    "queue {}/{} has {} units on leader {} and does not exist on {}",
                    k.0,
                    k.1,
                    lunits.len(),
                    g.members[leader].id,
                    m.id
                ));
            };
            let lmax = lmin + lunits.len() as i64;
            let fmax = fmin + funits.len() as i64;
            if fmax < lmax {
                return Err(format!(
                    "queue {}/{}: max offset {lmax} on leader {}, {fmax} on {}",
                    k.0, k.1, g.members[leader].id, m.id
                ));
            }
            let from = (*lmin).max(*fmin);
            for off in from..lmax {
                let lu = lunits[(off - lmin) as usize];
                let fu = funits[(off - fmin) as usize];
                if lu != fu {
                    return Err(format!(
                        "queue {}/{} offset {off}: leader {} has {lu:?}, {} has {fu:?}",
                        k.0, k.1, g.members[leader].id, m.id
                    ));
                }
                if queues.is_some() && !lu.is_blank() {
                    let a = g.members[leader]
                        .ctx()
                        .store
                        .read_message(lu.physical_offset);
                    let b = m.ctx().store.read_message(fu.physical_offset);
                    if a != b {
                        return Err(format!(
                            "queue {}/{} offset {off}: record bytes at phys {} differ between {} and {}",
                            k.0, k.1, lu.physical_offset, g.members[leader].id, m.id
                        ));
                    }
                }
            }
        }
        if queues.is_none() {
            for (k, (_, units)) in &mine {
                if !units.is_empty() && !lead.contains_key(k) {
                    return Err(format!(
                        "queue {}/{} has {} units on {} and does not exist on leader {}",
                        k.0,
                        k.1,
                        units.len(),
                        m.id,
                        g.members[leader].id
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Every acknowledged message is readable at its queue offset on every member.
pub async fn check_acked_everywhere(
    g: &Group,
    leader: usize,
    acked: &[Acked],
) -> Result<(), String> {
    g.wait_dispatched(leader).await?;
    for a in acked {
        for m in &g.members {
            read_acked(m, a)?;
        }
    }
    Ok(())
}

/// Topic and consumer-offset metadata agree on all members (G5a: it goes through the log):
/// once the leader's pending offset commits are logged and every member dispatched the log,
/// each of `topics` has the same config (or is absent) everywhere, and the offsets of
/// `groups` on `topics` are the same on every member that holds no commits of its own
/// waiting for the log (a follower keeps commits sent to it locally, as a Java slave does).
pub async fn check_metadata_agrees(
    g: &Group,
    leader: usize,
    topics: &[&str],
    groups: &[&str],
) -> Result<(), String> {
    let lead = &g.members[leader];
    let deadline = Instant::now() + CATCH_UP_TIMEOUT;
    while lead.ctx().offsets.has_pending() {
        if Instant::now() > deadline {
            return Err(format!(
                "leader {} kept offset commits out of the log for {CATCH_UP_TIMEOUT:?}",
                lead.id
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    g.wait_dispatched(leader).await?;
    let shape = |m: &Member, t: &str| {
        m.ctx().topics.get(t).map(|c| {
            (
                c.read_queue_nums,
                c.write_queue_nums,
                c.perm,
                c.topic_filter_type.clone(),
                c.topic_sys_flag,
                c.order,
            )
        })
    };
    for m in g.members.iter().filter(|m| m.id != lead.id) {
        for t in topics {
            let (a, b) = (shape(lead, t), shape(m, t));
            if a != b {
                return Err(format!(
                    "topic {t}: leader {} has {a:?}, {} has {b:?}",
                    lead.id, m.id
                ));
            }
        }
        if m.ctx().offsets.has_pending() {
            continue;
        }
        for grp in groups {
            for t in topics {
                let a = lead.ctx().offsets.queue_offsets(grp, t);
                let b = m.ctx().offsets.queue_offsets(grp, t);
                if a != b {
                    return Err(format!(
                        "offsets of {grp} on {t}: leader {} has {a:?}, {} has {b:?}",
                        lead.id, m.id
                    ));
                }
            }
        }
    }
    Ok(())
}
