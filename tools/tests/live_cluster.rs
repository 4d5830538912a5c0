//! Goal: every `mqadmin` / `mqbench` command against a live local DLedger group (real
//! `mqnamesrv` and three `mqbroker` processes), output parsed and checked; plus a
//! leadership transfer and a leader kill measured from the outside.
//! Method: processes on free 127.0.0.1 ports with stores in a temp dir; binaries from the
//! target dir of this test executable (built with `cargo build -p broker -p namesrv --bins`
//! if missing); readiness and state changes are polled with deadlines, never slept for.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tools::table::parse_rendered;
use tools::{ClientOptions, Message, MqClient, Producer, ProducerOptions, PullConsumer, TagFilter};

const CLUSTER: &str = "RaftCluster";
const GROUP: &str = "RaftNode00";

fn bin_dir() -> PathBuf {
    // target/<profile>/deps/<test exe> -> target/<profile>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn ensure_server_binaries() -> (PathBuf, PathBuf) {
    let dir = bin_dir();
    let ns = dir.join("mqnamesrv");
    let broker = dir.join("mqbroker");
    if !ns.exists() || !broker.exists() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut child = Command::new(env!("CARGO"))
            .args(["build", "-p", "broker", "-p", "namesrv", "--bins"])
            .current_dir(workspace)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(900);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("cargo build -p broker -p namesrv --bins did not finish in 15 min");
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert!(
            status.success(),
            "cargo build -p broker -p namesrv --bins failed"
        );
    }
    assert!(ns.exists(), "{} missing after build", ns.display());
    assert!(
        broker.exists(),
        "{} missing after build (does the broker crate have the mqbroker binary yet?)",
        broker.display()
    );
    (ns, broker)
}

fn port_free(port: u16) -> bool {
    port > 1024 && TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A listen port whose VIP (port-2) and HA (port+1) neighbours are free too.
fn free_broker_port(taken: &mut BTreeSet<u16>) -> u16 {
    loop {
        let p = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let all = [p.wrapping_sub(2), p, p.wrapping_add(1)];
        if all.iter().all(|q| !taken.contains(q) && port_free(*q)) {
            taken.extend(all);
            return p;
        }
    }
}

fn free_port(taken: &mut BTreeSet<u16>) -> u16 {
    loop {
        let p = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if taken.insert(p) {
            return p;
        }
    }
}

struct Node {
    id: String,
    conf: PathBuf,
    listen: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
}

struct Cluster {
    _dir: tempfile::TempDir,
    namesrv: SocketAddr,
    namesrv_child: Child,
    broker_bin: PathBuf,
    nodes: Vec<Node>,
    peers: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = &mut n.child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = self.namesrv_child.kill();
        let _ = self.namesrv_child.wait();
    }
}

impl Cluster {
    fn start() -> Cluster {
        let (ns_bin, broker_bin) = ensure_server_binaries();
        let dir = tempfile::tempdir().unwrap();
        let mut taken = BTreeSet::new();
        let ns_port = free_port(&mut taken);
        let namesrv: SocketAddr = format!("127.0.0.1:{ns_port}").parse().unwrap();
        let ns_log = std::fs::File::create(dir.path().join("namesrv.log")).unwrap();
        let namesrv_child = Command::new(ns_bin)
            .args(["--listen", &namesrv.to_string()])
            .stdout(ns_log.try_clone().unwrap())
            .stderr(ns_log)
            .spawn()
            .unwrap();
        let ids = ["n0", "n1", "n2"];
        let listen: Vec<u16> = ids.iter().map(|_| free_broker_port(&mut taken)).collect();
        let dledger: Vec<u16> = ids.iter().map(|_| free_port(&mut taken)).collect();
        let peers = ids
            .iter()
            .zip(&dledger)
            .map(|(id, p)| format!("{id}-127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(";");
        let mut nodes = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let store = dir.path().join(format!("node0{i}"));
            let conf = dir.path().join(format!("broker-{id}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "brokerClusterName = {CLUSTER}\nbrokerName={GROUP}\nlistenPort={}\nnamesrvAddr={namesrv}\n\
                     storePathRootDir={}\nstorePathCommitLog={}/commitlog\nenableDLegerCommitLog=true\n\
                     dLegerGroup={GROUP}\ndLegerPeers={peers}\ndLegerSelfId={id}\nsendMessageThreadPoolNums=4\n\
                     brokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nmappedFileSizeCommitLog=67108864\n",
                    listen[i],
                    store.display(),
                    store.display()
                ),
            )
            .unwrap();
            nodes.push(Node {
                id: id.to_string(),
                conf,
                listen: format!("127.0.0.1:{}", listen[i]).parse().unwrap(),
                log: dir.path().join(format!("broker-{id}.log")),
                child: None,
            });
        }
        let mut c = Cluster {
            _dir: dir,
            namesrv,
            namesrv_child,
            broker_bin,
            nodes,
            peers,
        };
        for i in 0..3 {
            c.start_node(i);
        }
        c
    }

    fn start_node(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .unwrap();
        n.child = Some(
            Command::new(&self.broker_bin)
                .arg("-c")
                .arg(&n.conf)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }

    fn kill_node(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let text = std::fs::read_to_string(&n.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {} ---\n", n.id));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn mqadmin(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_mqadmin"))
            .arg("-n")
            .arg(self.namesrv.to_string())
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.mqadmin(args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "mqadmin {args:?}: {}\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        out
    }

    /// Polls `clusterList` until `pred` holds for its rows; returns them.
    fn wait_cluster(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[Vec<String>]) -> bool,
    ) -> Vec<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let o = self.mqadmin(&["clusterList"]);
            if o.status.success() {
                let rows = parse_rendered(&String::from_utf8_lossy(&o.stdout));
                if rows.len() > 1 && pred(&rows[1..]) {
                    return rows[1..].to_vec();
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn master_addr(&self) -> String {
        let rows = self.wait_cluster("a master", Duration::from_secs(60), |r| {
            r.iter().any(|c| c[2] == "0")
        });
        rows.iter().find(|c| c[2] == "0").unwrap()[3].clone()
    }

    fn client(&self) -> MqClient {
        let mut o = ClientOptions::new(vec![self.namesrv]);
        o.route_refresh_min = Duration::from_millis(50);
        MqClient::new(o)
    }
}

fn field_after(line: &str, name: &str) -> f64 {
    let at = line
        .find(name)
        .unwrap_or_else(|| panic!("{name} missing in {line}"));
    line[at + name.len()..]
        .trim_start()
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | '(' | ',' | ')'))
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn live_group_every_command() {
    let c = Cluster::start();
    // All three members registered, exactly one master.
    let rows = c.wait_cluster("3 brokers with one master", Duration::from_secs(60), |r| {
        r.len() == 3 && r.iter().filter(|c| c[2] == "0").count() == 1
    });
    let listed: BTreeSet<String> = rows.iter().map(|r| r[3].clone()).collect();
    let expected: BTreeSet<String> = c.nodes.iter().map(|n| n.listen.to_string()).collect();
    assert_eq!(listed, expected);
    assert!(rows.iter().all(|r| r[0] == CLUSTER && r[1] == GROUP));
    let master = c.master_addr();

    // updateTopic on the master; the route lists it with 4 queues.
    let out = c.ok(&[
        "updateTopic",
        "-t",
        "LiveTopic",
        "-c",
        CLUSTER,
        "-r",
        "4",
        "-w",
        "4",
    ]);
    assert!(
        out.contains(&format!("create topic to {master} success.")),
        "{out}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let route = loop {
        let o = c.mqadmin(&["topicRoute", "-t", "LiveTopic"]);
        if o.status.success() {
            break serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "route of LiveTopic never appeared"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(route["queueDatas"][0]["writeQueueNums"], 4);
    assert!(c.ok(&["topicList"]).lines().any(|l| l == "LiveTopic"));

    // sendMessage -> consumeMessage / topicStatus / queryMsgByKey / queryMsgById.
    let out = c.ok(&[
        "sendMessage",
        "-t",
        "LiveTopic",
        "-p",
        "live",
        "-k",
        "live-key",
        "-c",
        "TagL",
        "--count",
        "4",
    ]);
    let sent = parse_rendered(&out);
    assert_eq!(sent.len(), 5, "{out}");
    assert!(sent[1..].iter().all(|r| r[3] == "SEND_OK"), "{out}");
    let out = c.ok(&[
        "consumeMessage",
        "-t",
        "LiveTopic",
        "-c",
        "4",
        "--wait-ms",
        "10000",
    ]);
    assert!(out.contains("consumed 4 message(s)"), "{out}");
    let rows = parse_rendered(&out);
    let bodies: BTreeSet<&str> = rows[1..5].iter().map(|r| r[6].as_str()).collect();
    assert_eq!(
        bodies,
        ["live-0", "live-1", "live-2", "live-3"]
            .into_iter()
            .collect()
    );
    let rows = parse_rendered(&c.ok(&["topicStatus", "-t", "LiveTopic"]));
    let total: i64 = rows[1..].iter().map(|r| r[3].parse::<i64>().unwrap()).sum();
    assert_eq!(total, 4);
    let rows = parse_rendered(&c.ok(&["queryMsgByKey", "-t", "LiveTopic", "-k", "live-key"]));
    assert_eq!(rows.len(), 5, "{rows:?}");

    // queryMsgById with an offset id from the library producer.
    let client = c.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sent = rt
        .block_on(
            Producer::new(client.clone(), ProducerOptions::default())
                .send(Message::new("LiveTopic", "by-id")),
        )
        .unwrap();
    let out = c.ok(&["queryMsgById", "-i", &sent.offset_msg_id]);
    assert!(out.contains("Message Body:        by-id"), "{out}");

    // consumerProgress after the group commits offsets.
    let consumer = PullConsumer::new(client.clone(), "LiveGroup");
    rt.block_on(async {
        for q in consumer.queues("LiveTopic").await.unwrap() {
            let r = consumer
                .pull(&q, 0, 32, &TagFilter::parse("*"), None, None)
                .await
                .unwrap();
            consumer
                .update_offset(&q, r.next_begin_offset, false)
                .await
                .unwrap();
        }
    });
    let out = c.ok(&["consumerProgress", "-g", "LiveGroup", "-t", "LiveTopic"]);
    assert!(out.contains("Diff Total: 0"), "{out}");
    assert_eq!(parse_rendered(&out).len(), 1 + 4 + 1, "{out}");

    // brokerStatus / getBrokerConfig / dledgerStatus.
    let out = c.ok(&["brokerStatus", "-b", &master]);
    assert!(
        out.lines().any(|l| l.starts_with("brokerVersionDesc")),
        "{out}"
    );
    let out = c.ok(&["getBrokerConfig", "-b", &master]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("brokerName") && l.ends_with(GROUP)),
        "{out}"
    );
    let out = c.ok(&["dledgerStatus", "--peers", &c.peers]);
    let rows = parse_rendered(&out);
    assert_eq!(
        rows.iter()
            .skip(1)
            .filter(|r| r.len() > 2 && r[0] == GROUP)
            .count(),
        3,
        "{out}"
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r.len() > 2 && r[2] == "LEADER")
            .count(),
        1,
        "{out}"
    );

    // mqbench producer / consumer.
    let bench = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_mqbench"))
            .args(args)
            .args(["-n", &c.namesrv.to_string(), "--no-progress"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "mqbench {args:?}: {}\n{out}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    let out = bench(&[
        "producer",
        "-t",
        "BenchLive",
        "-w",
        "4",
        "-c",
        "200",
        "-s",
        "100",
    ]);
    let summary = out
        .lines()
        .find(|l| l.starts_with("[producer summary]"))
        .unwrap();
    assert_eq!(field_after(summary, "OK:"), 200.0, "{out}");
    let out = bench(&[
        "consumer",
        "-t",
        "BenchLive",
        "--from-begin",
        "-c",
        "200",
        "-d",
        "30",
    ]);
    let summary = out
        .lines()
        .find(|l| l.starts_with("[consumer summary]"))
        .unwrap();
    assert_eq!(field_after(summary, "Consumed:"), 200.0, "{out}");

    // deleteTopic: the name server forgets the topic; the broker deletes it too, or (a
    // broker without DELETE_TOPIC_IN_BROKER) the command says so and exits non-zero.
    let o = c.mqadmin(&["deleteTopic", "-t", "LiveTopic", "-c", CLUSTER]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        out.contains("delete topic [LiveTopic] from NameServer success."),
        "{out}\n{err}"
    );
    if !o.status.success() {
        assert!(err.contains("request type 215 not supported"), "{err}");
        eprintln!("KNOWN BROKER GAP: DELETE_TOPIC_IN_BROKER (215) is not supported by mqbroker");
    }
    assert!(!c.ok(&["topicList"]).lines().any(|l| l == "LiveTopic"));
    rt.block_on(client.shutdown());
}

#[test]
fn live_group_leadership_transfer_and_leader_kill() {
    let mut c = Cluster::start();
    let master = c.master_addr();
    let leader_idx = c
        .nodes
        .iter()
        .position(|n| n.listen.to_string() == master)
        .unwrap();
    let target = c.nodes[(leader_idx + 1) % 3].id.clone();
    let target_addr = c.nodes[(leader_idx + 1) % 3].listen.to_string();

    // leadershipTransfer: the target becomes leader and registers as BID 0.
    let out = c.ok(&[
        "leadershipTransfer",
        "-b",
        GROUP,
        "--to",
        &target,
        "--peers",
        &c.peers,
    ]);
    assert!(out.contains(&format!("to {target}")), "{out}");
    c.wait_cluster("the transferee as master", Duration::from_secs(30), |r| {
        r.iter().any(|row| row[2] == "0" && row[3] == target_addr)
    });

    // Kill the leader; sends resume on the next leader within 30 s and no acked message
    // is lost.
    let client = c.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let producer = Producer::new(client.clone(), ProducerOptions::default());
    let mut acked = Vec::new();
    for i in 0..20 {
        acked.push(
            rt.block_on(producer.send(Message::new("FailoverTopic", format!("pre-{i}"))))
                .unwrap(),
        );
    }
    let killed = c
        .nodes
        .iter()
        .position(|n| n.listen.to_string() == target_addr)
        .unwrap();
    c.kill_node(killed);
    let t0 = Instant::now();
    let after = loop {
        match rt.block_on(producer.send(Message::new("FailoverTopic", "post"))) {
            Ok(r) => break r,
            Err(e) => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no new leader: {e}\n{}",
                c.logs()
            ),
        }
    };
    let outage = t0.elapsed();
    eprintln!("send outage after leader kill: {outage:?}");
    assert_ne!(after.broker_addr.to_string(), target_addr);
    acked.push(after);
    let consumer = PullConsumer::new(client.clone(), "FailoverCheck");
    let got: BTreeSet<String> = rt.block_on(async {
        let mut got = BTreeSet::new();
        for q in consumer.queues("FailoverTopic").await.unwrap() {
            let mut off = 0;
            loop {
                let r = consumer
                    .pull(&q, off, 32, &TagFilter::parse("*"), None, None)
                    .await
                    .unwrap();
                if r.messages.is_empty() {
                    break;
                }
                got.extend(r.messages.iter().map(|m| m.msg_id().to_owned()));
                off = r.next_begin_offset;
            }
        }
        got
    });
    for a in &acked {
        assert!(got.contains(&a.msg_id), "acked message {} lost", a.msg_id);
    }
    // The killed node restarts and rejoins as a follower.
    c.start_node(killed);
    c.wait_cluster("3 brokers again", Duration::from_secs(60), |r| r.len() == 3);
    rt.block_on(client.shutdown());
}

/// The numeric fields of an mqbench `[... summary]` line, by name.
struct BenchSummary {
    tps: f64,
    avg: f64,
    max: f64,
    p50: f64,
    p99: f64,
    p999: f64,
}

fn parse_bench_summary(line: &str) -> BenchSummary {
    let s = BenchSummary {
        tps: field_after(line, "TPS:"),
        avg: field_after(line, "Avg RT(ms):"),
        max: field_after(line, "Max RT(ms):"),
        p50: field_after(line, "p50:"),
        p99: field_after(line, "p99:"),
        p999: field_after(line, "p999:"),
    };
    assert!(s.tps > 0.0, "TPS not positive: {line}");
    assert!(
        s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max + 1e-9 && s.avg <= s.max + 1e-9,
        "percentiles out of order: {line}"
    );
    s
}

fn summary_line<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("[{label}]")))
        .unwrap_or_else(|| panic!("no [{label}] line in:\n{out}"))
}

#[test]
fn live_group_mqbench_producer_then_consumer_counts() {
    let c = Cluster::start();
    c.wait_cluster("3 brokers with one master", Duration::from_secs(60), |r| {
        r.len() == 3 && r.iter().filter(|c| c[2] == "0").count() == 1
    });
    let topic = "BenchFresh300";
    let out = c.ok(&[
        "updateTopic",
        "-t",
        topic,
        "-c",
        CLUSTER,
        "-r",
        "4",
        "-w",
        "4",
    ]);
    assert!(out.contains("success"), "{out}");
    let bench = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_mqbench"))
            .args(args)
            .args(["-n", &c.namesrv.to_string(), "--no-progress"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "mqbench {args:?}: {}\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr),
            c.logs()
        );
        out
    };

    let out = bench(&["producer", "-t", topic, "-c", "300", "-w", "4", "-s", "128"]);
    let header = out.lines().next().unwrap();
    assert!(
        header.starts_with(&format!("producer: topic={topic} threads=4 size=128 "))
            && header.contains("count=300"),
        "{out}"
    );
    let line = summary_line(&out, "producer summary");
    let s = parse_bench_summary(line);
    assert_eq!(field_after(line, "OK:"), 300.0, "{out}");
    assert_eq!(field_after(line, "Failed:"), 0.0, "{out}");
    assert_eq!(field_after(line, "definite"), 0.0, "{out}");
    assert_eq!(field_after(line, "indeterminate"), 0.0, "{out}");
    assert!(s.p50 > 0.0, "a send took no time: {line}");
    assert!(out.lines().any(|l| l == "outages: 0"), "{out}");

    // The broker's own count agrees with the producer's.
    let rows = parse_rendered(&c.ok(&["topicStatus", "-t", topic]));
    let stored: i64 = rows[1..].iter().map(|r| r[3].parse::<i64>().unwrap()).sum();
    assert_eq!(stored, 300);

    let out = bench(&[
        "consumer",
        "-t",
        topic,
        "--from-begin",
        "-g",
        "bench_fresh_consumer",
        "-c",
        "300",
        "-d",
        "25",
    ]);
    assert!(
        out.lines().next().unwrap().starts_with(&format!(
            "consumer: topic={topic} group=bench_fresh_consumer queues=4 start=min offset"
        )),
        "{out}"
    );
    let line = summary_line(&out, "consumer summary");
    parse_bench_summary(line);
    assert_eq!(field_after(line, "Consumed:"), 300.0, "{out}");
}
