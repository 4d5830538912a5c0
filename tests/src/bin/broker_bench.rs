//! Producer throughput and latency through the broker against a 3-node DLedger group
//! (1 KiB bodies, 64 concurrent senders), with the raw `Ledger::propose` rate measured in the
//! same run as the baseline, in two layouts: three `ledger_node` processes laid out like the
//! brokers (one process per member, the broker's runtime shape, the proposers in the leader's
//! process), and three members in this process (one runtime for all of them).
//!
//! Same shape on both sides: 3 members, the same flush mode (the defaults: ASYNC_FLUSH),
//! 64 concurrent writers, 64 MiB data segments, and ledger entries exactly as large as the
//! records the broker stores for the benchmark's messages (encoded with the broker's own
//! record encoder). Each baseline is measured before and after the broker phase (in mirrored
//! order) and its ratio uses the mean, so load from other processes on the machine affects
//! both sides alike. CPU time per message (from /proc) is printed for both sides: it does not
//! depend on how much of the machine the run got. The part of it spent pre-faulting the log's
//! pages is printed apart, and a CPU ratio without it: on this kind of VM first-touch page
//! clearing costs several times more when the memory was not used recently, so it can differ
//! between phases that write the same bytes per entry, and it moves the other ratios with it. So is each phase's steal time (CPU time the
//! hypervisor gave to other guests): a phase with much of it ran on less of the machine.
//!
//! The load generator encodes each sender's requests once and pipelines all senders over one
//! connection from one thread of its own (`tests::send_load`), so the client spends as little
//! CPU as it can on the cores it shares with the brokers.
//!
//! usage: broker_bench [SECONDS [ROUNDS]]   (default 5 s per phase, 1 round; with several
//! rounds, every round measures all five phases again and a table of the rounds' ratios
//! with their median closes the run; BROKER_BENCH_BUSY_POLL_US=N turns on
//! busy polling of every member's connections, and BROKER_BENCH_WORKERS=N sets every member
//! process's runtime worker threads, brokers and `ledger_node` baseline alike)
//!
//! BROKER_BENCH_OFFSETS=1 runs instead the cost of consumer offset commits through the log
//! (issue 26): one broker group, and each round measures its send phase without and with an
//! offset committer (one more connection to the master that every 100 ms commits each of
//! the 64 queues of a second topic, two-way UPDATE_CONSUMER_OFFSET, at an increasing
//! offset; all 64 in flight together, or one after another with
//! BROKER_BENCH_OFFSETS=sequential), in mirrored order every other round. It prints each
//! window's send rate, the committer's commits/s, answer latency and failures, the ratio
//! with/without per round and the rounds' median against the goal (>= 0.95). Every round
//! has a broker group of its own, whose log (about 3 x 1.2 KiB per message sent, in TMPDIR)
//! is removed after the round.
//! Uses `it-mqbroker`, `it-mqnamesrv` and `ledger_node` next to this executable
//! (`cargo build --release -p tests --bins`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{Ledger, LedgerOptions, Role};
use remoting::RemotingCommand;
use tests::client::{Client, Queue};
use tests::cluster::{free_port, Bins, Group, NameSrv};
use tests::send_load::run_pipelined_senders;

/// The broker's allocator (see `mqbroker`), for the in-process ledger group measured here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SENDERS: usize = 64;
const BODY: usize = 1024;
const TOPIC: &str = "BenchTopic";
/// The properties every benchmark message carries.
const PROPERTIES: &str = "TAGS\u{1}bench\u{2}";
/// Linux `USER_HZ` (the unit of utime/stime in /proc/<pid>/stat).
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// A ledger entry as large as the record the broker stores for one benchmark message: the
/// same body, topic and properties plus the properties the broker adds (UNIQ_KEY, CLUSTER).
fn stored_record_like_broker() -> anyhow::Result<Bytes> {
    use broker::message::record::{encode_record, MagicPolicy, MessageLimits, RecordFields};
    let host: SocketAddr = "127.0.0.1:10911".parse()?;
    let props = format!(
        "{PROPERTIES}UNIQ_KEY\u{1}{}\u{2}CLUSTER\u{1}RaftCluster\u{2}",
        "0".repeat(32)
    );
    let body = vec![b'x'; BODY];
    let f = RecordFields {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: 1,
        born_host: host,
        store_timestamp: 2,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &body,
        topic: TOPIC,
        properties: props.as_bytes(),
    };
    let mut b = bytes::BytesMut::new();
    encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut b)?;
    Ok(b.freeze())
}

/// utime + stime of a process, in seconds (0 if it cannot be read).
fn cpu_seconds(pid: u32) -> f64 {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_cpu_seconds(&stat),
        Err(_) => 0.0,
    }
}

/// utime + stime, in seconds, of a /proc `stat` line (process or thread; 0 if malformed).
fn stat_cpu_seconds(stat: &str) -> f64 {
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / CLOCK_TICKS_PER_SEC
}

/// Thread names (as /proc shows them, cut to 15 bytes) of the log's page pre-faulting: the
/// data files' preallocation and population threads of dledger-commitlog's store.
const PREFAULT_THREADS: [&str; 2] = ["dledger-prealloc", "dledger-populate"];

/// CPU seconds (utime + stime) of the threads of `pid` that pre-fault the log's pages (see
/// [`PREFAULT_THREADS`]); 0 if none can be read.
fn prefault_cpu_seconds(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut total = 0.0;
    for t in tasks.flatten() {
        let dir = t.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim_end();
        if comm.is_empty() || !PREFAULT_THREADS.iter().any(|n| n.starts_with(comm)) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        total += stat_cpu_seconds(&stat);
    }
    total
}

/// Children of this process whose command is `it-mqbroker`.
fn broker_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let comm = stat.find('(').map_or("", |i| &stat[i + 1..close]);
        let ppid = stat[close + 2..].split_whitespace().nth(1).unwrap_or("");
        if ppid == me && comm.starts_with("it-mqbroker") {
            out.push(pid);
        }
    }
    out
}

/// Result of one measured phase.
struct Phase {
    rate: f64,
    /// CPU seconds per message of the serving side (ledger members, or broker processes).
    cpu_per_msg: f64,
    /// CPU seconds per message of the load generator (broker phase only).
    client_cpu_per_msg: f64,
    /// The part of `cpu_per_msg` spent pre-faulting the log's pages ([`PREFAULT_THREADS`]):
    /// first-touch page clearing, whose cost per page varies several times over with how
    /// recently the VM's memory was used, so it is shown apart.
    prefault_per_msg: f64,
    /// Share of the machine's CPU time the hypervisor gave to others while measuring: a phase
    /// with much of it ran on less machine than the others (its rate, not its CPU per
    /// message, suffers).
    steal: f64,
}

/// The machine's steal and total CPU time so far (`/proc/stat`, in ticks; zeros if unreadable).
fn cpu_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    (f.get(7).copied().unwrap_or(0), f.iter().sum())
}

/// Steal share between two [`cpu_ticks`] readings.
fn steal_between(a: (u64, u64), b: (u64, u64)) -> f64 {
    let total = b.1.saturating_sub(a.1);
    if total == 0 {
        return 0.0;
    }
    b.0.saturating_sub(a.0) as f64 / total as f64
}

/// Prints one baseline phase: `layout` is the group's, `when` before or after the broker's.
fn report_baseline(layout: &str, when: &str, p: &Phase) {
    println!(
        "raw ledger propose, {layout} ({when}): {:.0} entries/s; CPU {:.1} us/entry (of which {:.1} pre-faulting log pages); steal {:.0}%",
        p.rate,
        p.cpu_per_msg * 1e6,
        p.prefault_per_msg * 1e6,
        p.steal * 100.0
    );
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn current_leader(ledgers: &[Ledger]) -> Option<Ledger> {
    ledgers
        .iter()
        .find(|l| l.role().borrow().role == Role::Leader)
        .cloned()
}

/// `BROKER_BENCH_BUSY_POLL_US` (default 0): busy polling of the members' connections, the
/// same on both sides (brokers: `remotingBusyPollMicros` and `dLedgerBusyPollMicros`; the
/// in-process ledger: `LedgerOptions::busy_poll`).
fn busy_poll() -> Duration {
    let us = std::env::var("BROKER_BENCH_BUSY_POLL_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Duration::from_micros(us)
}

/// `BROKER_BENCH_WORKERS` (default 0: the product default, which for these all-loopback
/// groups shares the cores among the 3 members, at least one each): runtime worker
/// threads of every member process, the same on both sides (brokers: `runtimeWorkerThreads`;
/// the `ledger_node` processes: `LEDGER_NODE_WORKERS`). The in-process group keeps the
/// bench's own runtime.
fn worker_threads() -> usize {
    std::env::var("BROKER_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn ledger_rate(secs: u64, dir: &std::path::Path) -> anyhow::Result<Phase> {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers: Vec<(String, SocketAddr)> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("n{i}"), SocketAddr::from(([127, 0, 0, 1], *p))))
        .collect();
    let mut ledgers = Vec::new();
    for i in 0..3 {
        let mut o = LedgerOptions::new(
            "bench",
            &format!("n{i}"),
            peers.clone(),
            dir.join(format!("ledger-n{i}")),
        );
        o.store.data_segment_bytes = 64 << 20;
        o.busy_poll = busy_poll();
        ledgers.push(Ledger::start(o).await?);
    }
    let ledgers = Arc::new(ledgers);
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(l) = current_leader(&ledgers) {
            break l;
        }
        anyhow::ensure!(Instant::now() < deadline, "no ledger leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let body = stored_record_like_broker()?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..SENDERS {
        let (mut l, b, d, s) = (leader.clone(), body.clone(), done.clone(), stop.clone());
        let all = Arc::clone(&ledgers);
        tasks.push(tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if l.propose(b.clone()).await.is_ok() {
                    d.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Refused at once (leadership moved on a loaded machine): pause instead
                    // of spinning without yielding, and follow the new leader.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if let Some(n) = current_leader(&all) {
                        l = n;
                    }
                }
            }
        }));
    }
    // Same warm-up as the broker phase.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n0 = done.load(Ordering::Relaxed);
    let me = std::process::id();
    let (cpu0, pre0) = (cpu_seconds(me), prefault_cpu_seconds(me));
    let ticks0 = cpu_ticks();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let n = done.load(Ordering::Relaxed) - n0;
    let cpu = cpu_seconds(me) - cpu0;
    let prefault = prefault_cpu_seconds(me) - pre0;
    let el = t0.elapsed().as_secs_f64();
    let steal = steal_between(ticks0, cpu_ticks());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    for l in ledgers.iter() {
        l.shutdown().await;
    }
    Ok(Phase {
        rate: n as f64 / el,
        cpu_per_msg: cpu / (n.max(1) as f64),
        client_cpu_per_msg: 0.0,
        prefault_per_msg: prefault / (n.max(1) as f64),
        steal,
    })
}

/// The `ledger_node` members of a 3-process group; killed when dropped.
struct LedgerProcesses {
    children: Vec<std::process::Child>,
    /// Each member's last reported count of committed proposals.
    done: Vec<Arc<AtomicU64>>,
}

impl LedgerProcesses {
    fn start(dir: &std::path::Path, entry_bytes: usize) -> anyhow::Result<LedgerProcesses> {
        use std::io::BufRead;
        let exe = std::env::current_exe()?;
        let node = exe
            .parent()
            .ok_or_else(|| anyhow::anyhow!("no exe dir"))?
            .join("ledger_node");
        let peers = (0..3)
            .map(|i| format!("n{i}-127.0.0.1:{}", free_port()))
            .collect::<Vec<_>>()
            .join(";");
        let mut group = LedgerProcesses {
            children: Vec::new(),
            done: Vec::new(),
        };
        for i in 0..3 {
            let mut child = std::process::Command::new(&node)
                .args([
                    format!("n{i}"),
                    peers.clone(),
                    dir.join(format!("n{i}")).display().to_string(),
                    SENDERS.to_string(),
                    entry_bytes.to_string(),
                ])
                .env(
                    "LEDGER_NODE_BUSY_POLL_US",
                    busy_poll().as_micros().to_string(),
                )
                .env("LEDGER_NODE_WORKERS", worker_threads().to_string())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", node.display()))?;
            let out = child
                .stdout
                .take()
                .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
            let done = Arc::new(AtomicU64::new(0));
            let d = done.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if let Some(n) = line.strip_prefix("done ").and_then(|n| n.parse().ok()) {
                        d.store(n, Ordering::Relaxed);
                    }
                }
            });
            group.children.push(child);
            group.done.push(done);
        }
        Ok(group)
    }

    fn committed(&self) -> u64 {
        self.done.iter().map(|d| d.load(Ordering::Relaxed)).sum()
    }

    fn cpu_seconds(&self) -> f64 {
        self.children.iter().map(|c| cpu_seconds(c.id())).sum()
    }

    fn prefault_cpu_seconds(&self) -> f64 {
        self.children
            .iter()
            .map(|c| prefault_cpu_seconds(c.id()))
            .sum()
    }
}

impl Drop for LedgerProcesses {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The raw propose rate of a ledger-only group laid out like the brokers: three
/// `ledger_node` processes, the proposers in the leader's.
async fn ledger_processes_rate(secs: u64, dir: &std::path::Path) -> anyhow::Result<Phase> {
    let entry = stored_record_like_broker()?.len();
    let group = LedgerProcesses::start(dir, entry)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while group.committed() == 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the ledger processes commit nothing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Same warm-up as the other phases.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (n0, cpu0, pre0) = (
        group.committed(),
        group.cpu_seconds(),
        group.prefault_cpu_seconds(),
    );
    let ticks0 = cpu_ticks();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (n1, cpu1, pre1) = (
        group.committed(),
        group.cpu_seconds(),
        group.prefault_cpu_seconds(),
    );
    let el = t0.elapsed().as_secs_f64();
    let steal = steal_between(ticks0, cpu_ticks());
    drop(group);
    let n = n1.saturating_sub(n0);
    Ok(Phase {
        rate: n as f64 / el,
        cpu_per_msg: (cpu1 - cpu0) / (n.max(1) as f64),
        client_cpu_per_msg: 0.0,
        prefault_per_msg: (pre1 - pre0) / (n.max(1) as f64),
        steal,
    })
}

/// The requests of each of the [`SENDERS`] senders, all to the one master of the benchmark's
/// group: sender `w` cycles over the queues starting at queue `w`, so every queue gets the
/// same share. The load generator encodes each request once (see `tests::send_load`).
fn sender_requests(queues: &[Queue]) -> anyhow::Result<(SocketAddr, Vec<Vec<RemotingCommand>>)> {
    let addr = queues
        .first()
        .ok_or_else(|| anyhow::anyhow!("no queues"))?
        .addr;
    anyhow::ensure!(
        queues.iter().all(|q| q.addr == addr),
        "the benchmark's queues span several masters"
    );
    let body = vec![b'x'; BODY];
    let requests = (0..SENDERS)
        .map(|w| {
            (0..queues.len())
                .map(|k| {
                    let q = &queues[(w + k * SENDERS) % queues.len()];
                    Client::send_request(TOPIC, q.queue_id, &body, PROPERTIES)
                })
                .collect()
        })
        .collect();
    Ok((addr, requests))
}

/// The benchmark's broker group, started and warmed up: 3 broker processes under a name
/// server, the bench topic created and its route resolved. Killed when dropped.
struct BrokerGroup {
    // Dropped in this order: the brokers before their name server.
    _group: Group,
    _ns: NameSrv,
    /// The name server's address.
    namesrv: SocketAddr,
    /// The bench topic's queues, all on one master.
    queues: Vec<Queue>,
    /// Pids of the broker processes.
    brokers: Vec<u32>,
}

async fn start_brokers(dir: &std::path::Path) -> anyhow::Result<BrokerGroup> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().ok_or_else(|| anyhow::anyhow!("no exe dir"))?;
    let bins = Bins {
        broker: bin_dir.join("it-mqbroker"),
        namesrv: bin_dir.join("it-mqnamesrv"),
    };
    let ns = NameSrv::start(&bins, dir);
    let us = busy_poll().as_micros();
    let mut extra = if us > 0 {
        format!("remotingBusyPollMicros={us}\ndLedgerBusyPollMicros={us}\n")
    } else {
        String::new()
    };
    let workers = worker_threads();
    if workers > 0 {
        extra.push_str(&format!("runtimeWorkerThreads={workers}\n"));
    }
    let group = Group::start(&bins, "BenchNode", ns.addr, dir, 3, &extra);
    let c = Client::new(ns.addr);
    let body = vec![b'x'; BODY];
    // Create the topic and warm up connections and routes. On a loaded machine the first
    // leader may lose its term meanwhile: then the route is resolved again.
    let deadline = Instant::now() + Duration::from_secs(120);
    let queues = loop {
        let tbw = c.wait_masters("TBW102", 1, Duration::from_secs(60)).await;
        let warm_up = async {
            c.create_topic(tbw[0].addr, TOPIC, 8).await?;
            let qs = c.wait_masters(TOPIC, 1, Duration::from_secs(60)).await;
            c.send_retrying(
                &qs[0],
                Client::send_request(TOPIC, qs[0].queue_id, &body, ""),
            )
            .await?;
            anyhow::Ok(qs)
        };
        match warm_up.await {
            Ok(qs) => break qs,
            Err(e) if Instant::now() < deadline => {
                eprintln!("warm-up failed ({e}); resolving the master again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    };
    Ok(BrokerGroup {
        _group: group,
        namesrv: ns.addr,
        _ns: ns,
        queues,
        brokers: broker_children(),
    })
}

async fn broker_rate(secs: u64, dir: &std::path::Path) -> anyhow::Result<(Phase, Vec<u64>)> {
    let g = start_brokers(dir).await?;
    let w = measure_sends(secs, &g, &Arc::new(AtomicBool::new(false))).await?;
    Ok((w.phase, w.latencies_us))
}

/// One measured window of the broker send phase.
struct SendWindow {
    phase: Phase,
    /// Latency of every successful send measured.
    latencies_us: Vec<u64>,
    /// How long it was measured.
    elapsed: Duration,
}

/// Runs the [`SENDERS`] senders against the group's master, lets them get going, then
/// measures for `secs` with `measuring` set (others may watch it to measure the same window).
async fn measure_sends(
    secs: u64,
    g: &BrokerGroup,
    measuring: &Arc<AtomicBool>,
) -> anyhow::Result<SendWindow> {
    let brokers = &g.brokers;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let senders = {
        let (addr, requests) = sender_requests(&g.queues)?;
        let (s, m, st) = (stop.clone(), measuring.clone(), started.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("bench-senders".into())
            .spawn(move || {
                let _ = tx.send(run_pipelined_senders(addr, requests, &s, &m, &st));
            })?;
        rx
    };
    // Every sender has had an answer before the warm-up below starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.load(Ordering::Relaxed) < SENDERS {
        anyhow::ensure!(Instant::now() < deadline, "senders did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let every sender get going before measuring.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu = || -> (f64, f64, f64) {
        (
            brokers.iter().map(|p| cpu_seconds(*p)).sum(),
            cpu_seconds(std::process::id()),
            brokers.iter().map(|p| prefault_cpu_seconds(*p)).sum(),
        )
    };
    measuring.store(true, Ordering::Relaxed);
    let (b0, c0, p0) = cpu();
    let ticks0 = cpu_ticks();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let (b1, c1, p1) = cpu();
    let elapsed = t0.elapsed();
    let el = elapsed.as_secs_f64();
    let steal = steal_between(ticks0, cpu_ticks());
    stop.store(true, Ordering::Relaxed);
    let outcome = senders.await??;
    if outcome.failed > 0 {
        eprintln!(
            "{} sends were not answered SUCCESS (not counted)",
            outcome.failed
        );
    }
    let lat = outcome.latencies_us;
    let n = lat.len().max(1) as f64;
    Ok(SendWindow {
        elapsed,
        phase: Phase {
            rate: lat.len() as f64 / el,
            cpu_per_msg: (b1 - b0) / n,
            client_cpu_per_msg: (c1 - c0) / n,
            prefault_per_msg: (p1 - p0) / n,
            steal,
        },
        latencies_us: lat,
    })
}

/// Prints the broker phase: rate, latency percentiles of `lat`, CPU and steal.
fn report_broker(b: &Phase, lat: &mut [u64]) {
    let (p50, p99, p999) = (
        percentile(lat, 0.5),
        percentile(lat, 0.99),
        percentile(lat, 0.999),
    );
    println!(
        "broker send: {:.0} msg/s ({SENDERS} senders, {BODY} B bodies, 3 broker processes); latency p50 {p50} us, p99 {p99} us, p99.9 {p999} us; CPU {:.1} us/msg in the brokers (of which {:.1} pre-faulting log pages; +{:.1} us/msg in the load generator); steal {:.0}%",
        b.rate,
        b.cpu_per_msg * 1e6,
        b.prefault_per_msg * 1e6,
        b.client_cpu_per_msg * 1e6,
        b.steal * 100.0
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs: u64 = std::env::args().nth(1).map_or(Ok(5), |s| s.parse())?;
    let rounds: usize = std::env::args().nth(2).map_or(Ok(1), |s| s.parse())?;
    anyhow::ensure!(rounds >= 1, "ROUNDS must be at least 1");
    let dir = tempfile::tempdir()?;
    let entry = stored_record_like_broker()?.len();
    let phase_dir = |name: &str| -> anyhow::Result<std::path::PathBuf> {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    if let Some(mode) = offsets_mode()? {
        anyhow::ensure!(
            std::env::var_os("BROKER_BENCH_ONLY").is_none(),
            "BROKER_BENCH_OFFSETS runs the broker phase alone: leave BROKER_BENCH_ONLY unset"
        );
        return offsets_run(secs, rounds, mode, &phase_dir).await;
    }
    // For profiling one side at a time: a single phase, so no ratio either.
    match std::env::var("BROKER_BENCH_ONLY").as_deref() {
        Ok("broker") => {
            let (b, mut lat) = broker_rate(secs, &phase_dir("broker")?).await?;
            report_broker(&b, &mut lat);
            return Ok(());
        }
        Ok("ledger-processes") => {
            let p = ledger_processes_rate(secs, &phase_dir("procs")?).await?;
            report_baseline("3 member processes", "only", &p);
            return Ok(());
        }
        Ok(other) => anyhow::bail!("BROKER_BENCH_ONLY: unknown phase {other:?}"),
        Err(_) => {}
    }
    println!("baseline entries: {SENDERS} proposers, {entry} B each");
    let mut rounds_seen = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        if rounds > 1 {
            println!("-- round {round} of {rounds}");
        }
        rounds_seen.push(measure_round(secs, &phase_dir).await?);
    }
    if rounds > 1 {
        report_rounds(&rounds_seen);
    }
    Ok(())
}

/// Throughput ratios of one round: broker over the 3-process baseline, and over the
/// in-process one.
#[derive(Debug, Clone, Copy)]
struct RoundRatios {
    processes: f64,
    in_process: f64,
}

/// One round: both baselines before the broker phase and again after it, in mirrored order;
/// prints every phase and the round's ratios.
async fn measure_round(
    secs: u64,
    phase_dir: &impl Fn(&str) -> anyhow::Result<std::path::PathBuf>,
) -> anyhow::Result<RoundRatios> {
    // Each phase's files are removed once it is measured, so every phase takes its page cache
    // from memory the one before it just gave back (on this kind of VM memory the host has
    // taken back costs several times more to touch than memory freed a moment ago), instead
    // of the later phases paying for ever more fresh memory.
    // The baselines run before and after the broker phase, in mirrored order, and each ratio
    // uses the mean of its two runs, so load from other processes on the machine affects
    // both sides alike.
    let d = phase_dir("inproc-before")?;
    let inproc_before = ledger_rate(secs, &d).await?;
    std::fs::remove_dir_all(&d)?;
    report_baseline("3 members in one process", "before", &inproc_before);
    let d = phase_dir("procs-before")?;
    let procs_before = ledger_processes_rate(secs, &d).await?;
    std::fs::remove_dir_all(&d)?;
    report_baseline("3 member processes", "before", &procs_before);
    let d = phase_dir("broker")?;
    let (b, mut lat) = broker_rate(secs, &d).await?;
    std::fs::remove_dir_all(&d)?;
    report_broker(&b, &mut lat);
    let d = phase_dir("procs-after")?;
    let procs_after = ledger_processes_rate(secs, &d).await?;
    std::fs::remove_dir_all(&d)?;
    report_baseline("3 member processes", "after", &procs_after);
    let d = phase_dir("inproc-after")?;
    let inproc_after = ledger_rate(secs, &d).await?;
    std::fs::remove_dir_all(&d)?;
    report_baseline("3 members in one process", "after", &inproc_after);
    Ok(RoundRatios {
        processes: report_ratio(
            "3 member processes (same layout as the brokers)",
            &b,
            &procs_before,
            &procs_after,
        ),
        in_process: report_ratio(
            "3 members in one process",
            &b,
            &inproc_before,
            &inproc_after,
        ),
    })
}

/// Prints the broker's ratios to one baseline (the mean of its runs before and after the
/// broker phase) and returns the throughput ratio.
fn report_ratio(name: &str, b: &Phase, before: &Phase, after: &Phase) -> f64 {
    let raw = (before.rate + after.rate) / 2.0;
    let raw_cpu = (before.cpu_per_msg + after.cpu_per_msg) / 2.0;
    let raw_prefault = (before.prefault_per_msg + after.prefault_per_msg) / 2.0;
    // The broker side with its load generator, which the ledger side has no need of.
    let broker_cpu = b.cpu_per_msg + b.client_cpu_per_msg;
    let ratio = b.rate / raw.max(f64::MIN_POSITIVE);
    println!(
        "ratio broker/ledger vs {name}: {ratio:.2} (goal >= 0.70; mean ledger rate {raw:.0}/s); CPU per message ledger/broker = {:.2}, with the load generator {:.2}, and without pre-faulting log pages {:.2}",
        raw_cpu / b.cpu_per_msg.max(f64::MIN_POSITIVE),
        raw_cpu / broker_cpu.max(f64::MIN_POSITIVE),
        (raw_cpu - raw_prefault) / (broker_cpu - b.prefault_per_msg).max(f64::MIN_POSITIVE)
    );
    ratio
}

/// The rounds' throughput ratios side by side, with their median and range: one round
/// moves by up to 0.1 with the VM's steal and page-clearing cost, so a claim rests on
/// several.
fn report_rounds(rounds: &[RoundRatios]) {
    println!("-- {} rounds", rounds.len());
    println!(
        "{:>5}  {:>12}  {:>10}",
        "round", "vs processes", "vs 1 process"
    );
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "{:>5}  {:>12.2}  {:>10.2}",
            i + 1,
            r.processes,
            r.in_process
        );
    }
    let processes = Spread::of(rounds.iter().map(|r| r.processes));
    let in_process = Spread::of(rounds.iter().map(|r| r.in_process));
    println!(
        "ratio broker/ledger over {} rounds: vs 3 member processes median {:.2} (min {:.2}, max {:.2}); vs 3 members in one process median {:.2} (min {:.2}, max {:.2}); goal >= 0.70",
        rounds.len(),
        processes.median,
        processes.min,
        processes.max,
        in_process.median,
        in_process.min,
        in_process.max
    );
}

/// Median, minimum and maximum of some ratios.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl Iterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Topic of the offset committer's queues (`BROKER_BENCH_OFFSETS`), created on the master.
const OFFSET_TOPIC: &str = "BenchOffsetTopic";
/// Queues of [`OFFSET_TOPIC`]: the committer commits every one of them each interval.
const OFFSET_QUEUES: i32 = 64;
const OFFSET_GROUP: &str = "BenchOffsetGroup";
/// How often the committer commits all its queues.
const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
/// The goal for the send rate with the committer over the rate without it.
const OFFSETS_GOAL: f64 = 0.95;

/// How the committer sends its [`OFFSET_QUEUES`] two-way commits each interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommitMode {
    /// All in flight together on the one connection (`BROKER_BENCH_OFFSETS=1`).
    Concurrent,
    /// One after another, each after the previous one's answer
    /// (`BROKER_BENCH_OFFSETS=sequential`).
    Sequential,
}

/// `BROKER_BENCH_OFFSETS`: unset, empty or `0` for the usual run.
fn offsets_mode() -> anyhow::Result<Option<CommitMode>> {
    match std::env::var("BROKER_BENCH_OFFSETS").as_deref() {
        Err(_) | Ok("") | Ok("0") => Ok(None),
        Ok("1") | Ok("concurrent") => Ok(Some(CommitMode::Concurrent)),
        Ok("sequential") => Ok(Some(CommitMode::Sequential)),
        Ok(other) => anyhow::bail!(
            "BROKER_BENCH_OFFSETS: {other:?} is none of 0, 1 (= concurrent), sequential"
        ),
    }
}

/// What the committer saw while the send window was measured.
#[derive(Debug, Default)]
struct CommitStats {
    /// Answer latency of every SUCCESS commit of an interval that began while measuring.
    latencies_us: Vec<u64>,
    /// Commits of those intervals not answered SUCCESS (or not answered at all).
    failed: u64,
    /// The failures by kind (`code N: remark` or the client's error).
    failures: std::collections::BTreeMap<String, u64>,
    /// Measured intervals, and those whose commits took longer than [`COMMIT_INTERVAL`].
    intervals: u64,
    late_intervals: u64,
}

/// One two-way UPDATE_CONSUMER_OFFSET of [`OFFSET_TOPIC`]'s `queue_id`: its answer code and
/// remark (or the client's error), and how long the answer took.
async fn commit_once(
    c: &Client,
    addr: SocketAddr,
    queue_id: i32,
    offset: i64,
) -> (Result<(), String>, Duration) {
    use remoting::custom_headers::UpdateConsumerOffsetRequestHeader;
    use remoting::{RequestCode, ResponseCode};
    let h = UpdateConsumerOffsetRequestHeader {
        consumer_group: OFFSET_GROUP.into(),
        topic: OFFSET_TOPIC.into(),
        queue_id,
        commit_offset: offset,
        broker_name: None,
    };
    let req = RemotingCommand::request(RequestCode::UPDATE_CONSUMER_OFFSET, &h);
    let t0 = Instant::now();
    let answer = c.call(addr, req).await;
    let took = t0.elapsed();
    let result = match answer {
        Ok(r) if r.response_code() == ResponseCode::SUCCESS => Ok(()),
        Ok(r) => Err(format!("code {}: {}", r.code(), r.remark().unwrap_or(""))),
        Err(e) => Err(format!("no answer: {e}")),
    };
    (result, took)
}

/// One interval's commits: every queue of [`OFFSET_TOPIC`] at `offset`, as `mode` says.
async fn commit_all(
    c: &Client,
    addr: SocketAddr,
    mode: CommitMode,
    offset: i64,
) -> Vec<(Result<(), String>, Duration)> {
    match mode {
        CommitMode::Sequential => {
            let mut out = Vec::with_capacity(OFFSET_QUEUES as usize);
            for q in 0..OFFSET_QUEUES {
                out.push(commit_once(c, addr, q, offset).await);
            }
            out
        }
        CommitMode::Concurrent => {
            let mut set = tokio::task::JoinSet::new();
            for q in 0..OFFSET_QUEUES {
                let c = c.clone();
                set.spawn(async move { commit_once(&c, addr, q, offset).await });
            }
            let mut out = Vec::with_capacity(OFFSET_QUEUES as usize);
            while let Some(r) = set.join_next().await {
                out.push(r.unwrap_or_else(|e| (Err(format!("task failed: {e}")), Duration::ZERO)));
            }
            out
        }
    }
}

/// The committer: every [`COMMIT_INTERVAL`] (or at once after an interval whose commits took
/// longer), commits every queue of [`OFFSET_TOPIC`] at the next offset of `offset`, until
/// `stop`; the intervals that begin while `measuring` is set are counted.
async fn run_committer(
    c: Client,
    addr: SocketAddr,
    mode: CommitMode,
    offset: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
) -> CommitStats {
    let mut stats = CommitStats::default();
    let mut tick = tokio::time::interval(COMMIT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let measured = measuring.load(Ordering::Relaxed);
        let o = offset.fetch_add(1, Ordering::Relaxed) as i64;
        let t0 = Instant::now();
        let answers = commit_all(&c, addr, mode, o).await;
        if !measured {
            continue;
        }
        stats.intervals += 1;
        if t0.elapsed() > COMMIT_INTERVAL {
            stats.late_intervals += 1;
        }
        for (result, took) in answers {
            match result {
                Ok(()) => stats.latencies_us.push(took.as_micros() as u64),
                Err(kind) => {
                    stats.failed += 1;
                    *stats.failures.entry(kind).or_default() += 1;
                }
            }
        }
    }
    stats
}

/// One round of the offsets run: the send rate without and with the committer.
#[derive(Debug, Clone, Copy)]
struct OffsetsRound {
    without: f64,
    with: f64,
    commits_per_sec: f64,
}

/// `BROKER_BENCH_OFFSETS`: the cost of a consumer committing offsets through the log. Each
/// round starts a broker group and measures its send phase without and with the committer
/// (one more connection to the master committing [`OFFSET_QUEUES`] queues every
/// [`COMMIT_INTERVAL`], two-way), in mirrored order every other round so that the log's
/// growth and a drift of the machine's speed weigh on both sides alike; its files are
/// removed after the round, so the run holds at most one round's log.
async fn offsets_run(
    secs: u64,
    rounds: usize,
    mode: CommitMode,
    phase_dir: &impl Fn(&str) -> anyhow::Result<std::path::PathBuf>,
) -> anyhow::Result<()> {
    println!(
        "offset committer: {OFFSET_QUEUES} queues of {OFFSET_TOPIC} every {} ms, two-way, {}; send phase {secs} s per window, a new broker group every round",
        COMMIT_INTERVAL.as_millis(),
        match mode {
            CommitMode::Concurrent => "all in flight together",
            CommitMode::Sequential => "one after another",
        }
    );
    let mut seen = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        println!("-- round {round} of {rounds}");
        let d = phase_dir(&format!("offsets-{round}"))?;
        seen.push(offsets_round(secs, round, mode, &d).await?);
        std::fs::remove_dir_all(&d)?;
    }
    report_offsets_rounds(&seen);
    Ok(())
}

/// One round of [`offsets_run`] on a broker group of its own under `dir`.
async fn offsets_round(
    secs: u64,
    round: usize,
    mode: CommitMode,
    dir: &std::path::Path,
) -> anyhow::Result<OffsetsRound> {
    let g = start_brokers(dir).await?;
    let master = g.queues[0].addr;
    // One more client: its own connection to the master.
    let committer = Client::new(g.namesrv);
    committer
        .create_topic(master, OFFSET_TOPIC, OFFSET_QUEUES)
        .await?;
    let offset = Arc::new(AtomicU64::new(1));
    // The committer's warm-up: one interval's commits all answered SUCCESS.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = offset.fetch_add(1, Ordering::Relaxed) as i64;
        let answers = commit_all(&committer, master, mode, o).await;
        let Some(e) = answers.into_iter().find_map(|(r, _)| r.err()) else {
            break;
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "the committer's warm-up fails: {e}"
        );
        eprintln!("committer warm-up failed ({e}); again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let order = if round % 2 == 1 {
        [false, true]
    } else {
        [true, false]
    };
    let (mut without, mut with, mut commits_per_sec) = (0.0, 0.0, 0.0);
    for committing in order {
        let measuring = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let task = committing.then(|| {
            tokio::spawn(run_committer(
                committer.clone(),
                master,
                mode,
                offset.clone(),
                stop.clone(),
                measuring.clone(),
            ))
        });
        let w = measure_sends(secs, &g, &measuring).await?;
        stop.store(true, Ordering::Relaxed);
        let mut lat = w.latencies_us;
        print!(
            "{} committer: ",
            if committing { "with" } else { "without" }
        );
        report_broker(&w.phase, &mut lat);
        let Some(task) = task else {
            without = w.phase.rate;
            continue;
        };
        with = w.phase.rate;
        let mut stats = task.await?;
        commits_per_sec = report_commits(&mut stats, w.elapsed);
    }
    let ratio = with / without.max(f64::MIN_POSITIVE);
    println!(
        "ratio with/without committer: {ratio:.3} (goal >= {OFFSETS_GOAL}: {})",
        if ratio >= OFFSETS_GOAL {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(OffsetsRound {
        without,
        with,
        commits_per_sec,
    })
}

/// Prints the committer's rate, answer latency and failures over the send window measured
/// (`window` long) and returns its rate of SUCCESS commits.
fn report_commits(s: &mut CommitStats, window: Duration) -> f64 {
    let target = OFFSET_QUEUES as f64 / COMMIT_INTERVAL.as_secs_f64();
    let ok = s.latencies_us.len();
    let rate = ok as f64 / window.as_secs_f64().max(f64::MIN_POSITIVE);
    println!(
        "committer: {rate:.0} commits/s answered SUCCESS ({target:.0}/s asked; {ok} in {} intervals begun in the {:.1} s window), {} failed; answer latency p50 {} us, p99 {} us; {} intervals took longer than {} ms",
        s.intervals,
        window.as_secs_f64(),
        s.failed,
        percentile(&mut s.latencies_us, 0.5),
        percentile(&mut s.latencies_us, 0.99),
        s.late_intervals,
        COMMIT_INTERVAL.as_millis()
    );
    for (kind, n) in &s.failures {
        println!("committer failure x{n}: {kind}");
    }
    rate
}

/// The rounds' send rates without and with the committer, their ratios and the median one.
fn report_offsets_rounds(rounds: &[OffsetsRound]) {
    println!("-- {} rounds", rounds.len());
    println!(
        "{:>5}  {:>15}  {:>12}  {:>6}  {:>9}",
        "round", "without msg/s", "with msg/s", "ratio", "commits/s"
    );
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "{:>5}  {:>15.0}  {:>12.0}  {:>6.3}  {:>9.0}",
            i + 1,
            r.without,
            r.with,
            r.with / r.without.max(f64::MIN_POSITIVE),
            r.commits_per_sec
        );
    }
    let ratio = Spread::of(
        rounds
            .iter()
            .map(|r| r.with / r.without.max(f64::MIN_POSITIVE)),
    );
    println!(
        "ratio send rate with/without offset committer over {} rounds: median {:.3} (min {:.3}, max {:.3}); goal >= {OFFSETS_GOAL}: {}",
        rounds.len(),
        ratio.median,
        ratio.min,
        ratio.max,
        if ratio.median >= OFFSETS_GOAL {
            "met"
        } else {
            "NOT met"
        }
    );
}
