//! Ledger throughput and commit latency on loopback: a 3-member group next to a 1-member group
//! (the raw baseline: same code path without replication) measured in the same run.
//!
//! `cargo bench -p dledger-commitlog --bench ledger` (env `LEDGER_BENCH_SECS`, default 2,
//! seconds per point; `LEDGER_BENCH_POINTS=1024:256,128:1` runs only those points). Async
//! flush (DLedger default). Prints proposals/s and commit latency p50/p99/p999 for 128 B and
//! 1 KiB bodies with 1, 16 and 256 concurrent proposers, the process CPU time per proposal
//! (`cpu/op`, µs; steadier than rates on a shared machine) and its user-space part (`usr/op`:
//! leaves out the kernel's page-cache work, see `cpu_ticks_split`), the 3-member / 1-member
//! throughput ratio, and the data files created while measuring (1-member/3-member group).
//!
//! Each group first writes into its steady state (see [`warm_up_bytes`]): every figure then
//! includes the background work a long run pays (populating ahead of the writer, releasing
//! behind it, creating files), none is measured before it starts.
//!
//! `LEDGER_BENCH_DIAG=1` instead runs only the 3-member group at 1 KiB / 256 in flight (after
//! the same warm-up) and prints a 50 ms time series (commits, worst latency, CPU of the
//! preallocation, flush and worker threads, dirty/writeback memory, runnable tasks, files) to
//! find where stalls come from. `LEDGER_BENCH_SEGMENT_MIB` sets the data file size (default
//! 64 MiB; the product default is 1024); `LEDGER_BENCH_RELEASE_MIB` how far behind the
//! writer the page cache is kept (default 256; 0: never released, the product default; see
//! [`release_mib`]).

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{Index, Ledger, LedgerOptions, ProposeError, Role};

struct Point {
    rate: f64,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    busy: u64,
    /// Process CPU time (user + system, all threads) per committed proposal: a figure that
    /// depends less on what else the shared machine runs than the rate does.
    cpu_us: f64,
    /// User CPU time per committed proposal (see [`cpu_ticks_split`]).
    usr_us: f64,
    /// Data files created while measuring (all members of the group).
    files: usize,
}

/// `(user, system)` CPU time this process has used so far, in clock ticks. User time leaves
/// out the kernel's share (page-cache zero-fill of new files, which costs up to ~10x more on a
/// VM whose freed memory was handed back to the host: the most variable part here).
fn cpu_ticks_split() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (get(11), get(12))
}

/// Highest commit latency (µs) since the diagnostic sampler last looked.
static WINDOW_MAX_US: AtomicU64 = AtomicU64::new(0);

/// CPU ticks (user + system) of this process's threads, summed by thread name.
fn thread_ticks() -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return m;
    };
    for t in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, n)| n).to_owned();
        let f: Vec<&str> = rest.split_whitespace().collect();
        let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        *m.entry(name).or_insert(0) += get(11) + get(12);
    }
    m
}

/// `(nr_dirty, nr_writeback)` pages from /proc/vmstat, and runnable tasks from /proc/stat.
fn vm_snapshot() -> (u64, u64, u64) {
    let vm = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    let get = |k: &str| {
        vm.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let running = stat
        .lines()
        .find_map(|l| l.strip_prefix("procs_running ")?.parse::<u64>().ok())
        .unwrap_or(0);
    (get("nr_dirty"), get("nr_writeback"), running)
}

/// Files under `dir` (segment creations show as steps).
fn count_files(dir: &std::path::Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// Clock ticks per second (USER_HZ); 100 on Linux.
const TICKS_PER_SEC: f64 = 100.0;

/// Data file size in MiB (`LEDGER_BENCH_SEGMENT_MIB`, default 64).
fn segment_mib() -> u64 {
    std::env::var("LEDGER_BENCH_SEGMENT_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

/// How far behind the writer each member keeps its page cache (`LEDGER_BENCH_RELEASE_MIB`,
/// default 256; 0 leaves it to the kernel, the product default). The bench stands for a
/// long-running host whose memory is full of page cache, where the kernel hands out reclaimed
/// pages for new writes. A fresh process on this VM instead takes memory the host has taken
/// back (free page reporting), which costs ~10x more kernel time per page; releasing behind
/// the writer gives it recycled pages, as on that host, without filling 24 GB first.
fn release_mib() -> u64 {
    std::env::var("LEDGER_BENCH_RELEASE_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Data bytes each member writes before a group's first measurement: past the release-behind
/// distance ([`release_mib`]; the populate-ahead window is 128 MiB), into its steady state,
/// where the memory of pages it released is handed out again, and, with a data file larger than that, to 128 MiB before the end of the first file,
/// so that the measurement crosses a file boundary (the `files` column counts data files
/// created while measuring, all members).
fn warm_up_bytes() -> u64 {
    ((release_mib() + 128) << 20).max((segment_mib() << 20).saturating_sub(128 << 20))
}

/// Data files of a group (all members).
fn data_files(root: &std::path::Path) -> usize {
    let Ok(rd) = std::fs::read_dir(root) else {
        return 0;
    };
    rd.flatten()
        .map(|m| count_files(&m.path().join("data")))
        .sum()
}

/// Proposes 1 KiB bodies from 256 proposers until the leader has committed `bytes` of log.
async fn warm_up(leader: &Ledger, bytes: u64) {
    let target = Index::last_of_count(bytes / (1024 + 48));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..256 {
        let (l, b) = (leader.clone(), Bytes::from(vec![b'w'; 1024]));
        tasks.push(tokio::spawn(async move {
            while l.status().committed_index < target {
                if l.propose(b.clone()).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "  (warm-up: {} MiB per member in {:.1} s)",
        bytes >> 20,
        t0.elapsed().as_secs_f64()
    );
}

async fn start_group(dir: &std::path::Path, n: usize) -> (Vec<Ledger>, usize) {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let peers: Vec<(String, SocketAddr)> = ls
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("n{i}"), l.local_addr().unwrap()))
        .collect();
    drop(ls);
    let mut nodes = Vec::new();
    for (id, _) in &peers {
        let mut o = LedgerOptions::new(
            "bench",
            id,
            peers.clone(),
            dir.join(format!("dledger-{id}")),
        );
        o.store.data_segment_bytes = segment_mib() << 20;
        o.store.index_segment_bytes = 4 << 20;
        o.store.release_cache_behind_bytes = Some(release_mib() << 20).filter(|&b| b > 0);
        nodes.push(Ledger::start(o).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = nodes
            .iter()
            .position(|l| l.role().borrow().role == Role::Leader)
        {
            return (nodes, i);
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn measure(
    leader: &Ledger,
    root: &std::path::Path,
    body_len: usize,
    proposers: usize,
    secs: f64,
) -> Point {
    let body = vec![b'm'; body_len];
    let stop = Arc::new(AtomicBool::new(false));
    let warmup = Duration::from_millis(300);
    let mut tasks = Vec::new();
    for _ in 0..proposers {
        // Each proposer has its own buffer: clones of one shared `Bytes` in every proposal
        // would make all threads contend on one reference count (real messages have their
        // own buffers).
        let (l, b, stop) = (leader.clone(), Bytes::from(body.clone()), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut busy = 0u64;
            let mut errors = 0u64;
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match l.propose(b.clone()).await {
                    Ok(_) => {
                        if t.duration_since(start) >= warmup {
                            let us = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
                            lat.push(us);
                            if u64::from(us) > WINDOW_MAX_US.load(Ordering::Relaxed) {
                                WINDOW_MAX_US.fetch_max(u64::from(us), Ordering::Relaxed);
                            }
                        }
                    }
                    Err(ProposeError::Busy) => {
                        busy += 1;
                        tokio::task::yield_now().await;
                    }
                    Err(e) => {
                        // A leadership change under load: count it, wait for a leader again.
                        errors += 1;
                        if errors == 1 {
                            eprintln!("proposal failed: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            (lat, busy + errors)
        }));
    }
    tokio::time::sleep(warmup).await;
    let (u0, s0) = cpu_ticks_split();
    let f0 = data_files(root);
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (u1, s1) = cpu_ticks_split();
    let files = data_files(root).saturating_sub(f0);
    let cpu = (u1 + s1 - u0 - s0) as f64 / TICKS_PER_SEC;
    let usr = (u1 - u0) as f64 / TICKS_PER_SEC;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut busy = 0;
    for t in tasks {
        let (l, b) = t.await.unwrap();
        all.extend(l);
        busy += b;
    }
    all.sort_unstable();
    let q = |p: f64| {
        Duration::from_micros(
            all.get(((all.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or(0) as u64,
        )
    };
    Point {
        rate: all.len() as f64 / secs,
        cpu_us: cpu * 1e6 / (all.len() as f64).max(1.0),
        usr_us: usr * 1e6 / (all.len() as f64).max(1.0),
        p50: q(0.50),
        p99: q(0.99),
        p999: q(0.999),
        busy,
        files,
    }
}

/// The machine's load average (the box is shared: figures depend on it).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn main() {
    let secs: f64 = std::env::var("LEDGER_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir1 = tempfile::tempdir().unwrap();
        let dir3 = tempfile::tempdir().unwrap();
        let diag = std::env::var("LEDGER_BENCH_DIAG").is_ok();
        let (one, l1) = if diag {
            (Vec::new(), 0)
        } else {
            start_group(dir1.path(), 1).await
        };
        let (three, l3) = start_group(dir3.path(), 3).await;
        if diag {
            warm_up(&three[l3], warm_up_bytes()).await;
            // Time series of the 3-member group at 1 KiB / 256 in flight, one line per 50 ms:
            // where do the slow commits come from? Thread CPU in ms per window (prealloc,
            // flush, tokio workers), dirty/writeback MiB, runnable tasks on the machine,
            // files in the group's directories.
            let l = three[l3].clone();
            let root = dir3.path().to_owned();
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = stop.clone();
            let watcher = tokio::task::spawn_blocking(move || {
                println!("{:>6} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>4} {:>5}", "t_ms", "commits", "max_ms", "prealo", "flush", "worker", "dirtyM", "wbackM", "run", "files");
                let t0 = Instant::now();
                let mut last_ticks = thread_ticks();
                let mut last_commit = l.status().committed_index;
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    let ticks = thread_ticks();
                    let d = |k: &str| {
                        let now: u64 = ticks.iter().filter(|(n, _)| n.starts_with(k)).map(|(_, v)| v).sum();
                        let then: u64 = last_ticks.iter().filter(|(n, _)| n.starts_with(k)).map(|(_, v)| v).sum();
                        now.saturating_sub(then) * 10
                    };
                    let (dirty, wb, run) = vm_snapshot();
                    let c = l.status().committed_index;
                    println!(
                        "{:>6} {:>8} {:>8.1} {:>7} {:>7} {:>7} {:>7} {:>7} {:>4} {:>5}",
                        t0.elapsed().as_millis(),
                        Index::distance(last_commit, c),
                        WINDOW_MAX_US.swap(0, Ordering::Relaxed) as f64 / 1000.0,
                        d("dledger-preall") + d("dledger-popul"),
                        d("dledger-flush"),
                        d("tokio-rt-worker"),
                        dirty * 4 / 1024,
                        wb * 4 / 1024,
                        run,
                        count_files(&root)
                    );
                    last_ticks = ticks;
                    last_commit = c;
                }
            });
            let p = measure(&three[l3], dir3.path(), 1024, 256, secs).await;
            stop.store(true, Ordering::Relaxed);
            watcher.await.unwrap();
            println!(
                "diag: {:.0}/s p50 {:?} p99 {:?} p999 {:?} cpu/op {:.1} us (user {:.1} us), {} data files created",
                p.rate, p.p50, p.p99, p.p999, p.cpu_us, p.usr_us, p.files
            );
            // Stop the members before the directories go: a running preallocation thread
            // would recreate files while they are removed (the removal fails and leaves
            // gigabytes behind).
            for l in &three {
                l.shutdown().await;
            }
            return;
        }
        println!("ledger bench: async flush, loopback, {} MiB data files, page cache released {} MiB behind the writer (0: never), {secs} s per point (+0.3 s warm-up); loadavg {}", segment_mib(), release_mib(), loadavg());
        warm_up(&one[l1], warm_up_bytes()).await;
        warm_up(&three[l3], warm_up_bytes()).await;
        println!(
            "{:>6} {:>5} | {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} | {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} | {:>6} {:>5}",
            "body", "inflt", "1-node/s", "p50us", "p99us", "p999us", "cpu/op", "usr/op", "3-node/s", "p50us", "p99us", "p999us", "cpu/op", "usr/op", "ratio", "files"
        );
        // `LEDGER_BENCH_POINTS=1024:256,128:1` limits the run to those body:in-flight points.
        let only: Option<Vec<(usize, usize)>> = std::env::var("LEDGER_BENCH_POINTS").ok().map(|v| {
            v.split(',')
                .filter_map(|p| p.split_once(':'))
                .filter_map(|(b, c)| Some((b.trim().parse().ok()?, c.trim().parse().ok()?)))
                .collect()
        });
        for body in [128usize, 1024] {
            for c in [1usize, 16, 256] {
                if only.as_ref().is_some_and(|o| !o.contains(&(body, c))) {
                    continue;
                }
                let a = measure(&one[l1], dir1.path(), body, c, secs).await;
                let b = measure(&three[l3], dir3.path(), body, c, secs).await;
                println!(
                    "{:>6} {:>5} | {:>10.0} {:>8} {:>8} {:>8} {:>7.1} {:>6.1} | {:>10.0} {:>8} {:>8} {:>8} {:>7.1} {:>6.1} | {:>6.2} {:>2}/{:<2}{}",
                    body,
                    c,
                    a.rate,
                    a.p50.as_micros(),
                    a.p99.as_micros(),
                    a.p999.as_micros(),
                    a.cpu_us,
                    a.usr_us,
                    b.rate,
                    b.p50.as_micros(),
                    b.p99.as_micros(),
                    b.p999.as_micros(),
                    b.cpu_us,
                    b.usr_us,
                    b.rate / a.rate.max(1.0),
                    a.files,
                    b.files,
                    if a.busy + b.busy > 0 { format!("  (busy/failed proposals: {} / {})", a.busy, b.busy) } else { String::new() }
                );
            }
        }
        println!("loadavg at the end: {}", loadavg());
        for l in one.iter().chain(three.iter()) {
            l.shutdown().await;
        }
    });
}
