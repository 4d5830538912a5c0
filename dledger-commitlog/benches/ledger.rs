//! Ledger throughput and commit latency on loopback: a 3-member group next to a 1-member group
//! (the raw baseline: same code path without replication) measured in the same run.
//!
//! `cargo bench -p dledger-commitlog --bench ledger` (env `LEDGER_BENCH_SECS`, default 2,
//! seconds per point; `LEDGER_BENCH_POINTS=1024:256,128:1` runs only those points). Async flush (DLedger default). Prints proposals/s and commit latency
//! p50/p99/p999 for 128 B and 1 KiB bodies with 1, 16 and 256 concurrent proposers, the
//! process CPU time per proposal (`cpu/op`, µs; steadier than rates on a shared machine), and
//! the 3-member / 1-member throughput ratio.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{Ledger, LedgerOptions, LedgerRole, ProposeError};

struct Point {
    rate: f64,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    busy: u64,
    /// Process CPU time (user + system, all threads) per committed proposal: a figure that
    /// depends less on what else the shared machine runs than the rate does.
    cpu_us: f64,
}

/// CPU time (user + system) this process has used so far, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// Clock ticks per second (USER_HZ); 100 on Linux.
const TICKS_PER_SEC: f64 = 100.0;

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
        o.store.data_segment_bytes = 64 << 20;
        o.store.index_segment_bytes = 4 << 20;
        nodes.push(Ledger::start(o).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = nodes
            .iter()
            .position(|l| l.role().borrow().role == LedgerRole::Leader)
        {
            return (nodes, i);
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn measure(leader: &Ledger, body_len: usize, proposers: usize, secs: f64) -> Point {
    let body = Bytes::from(vec![b'm'; body_len]);
    let stop = Arc::new(AtomicBool::new(false));
    let warmup = Duration::from_millis(300);
    let mut tasks = Vec::new();
    for _ in 0..proposers {
        let (l, b, stop) = (leader.clone(), body.clone(), stop.clone());
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
                            lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
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
    let cpu0 = cpu_ticks();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let cpu = (cpu_ticks() - cpu0) as f64 / TICKS_PER_SEC;
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
        p50: q(0.50),
        p99: q(0.99),
        p999: q(0.999),
        busy,
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
        let (one, l1) = start_group(dir1.path(), 1).await;
        let (three, l3) = start_group(dir3.path(), 3).await;
        if std::env::var("LEDGER_BENCH_DIAG").is_ok() {
            let l = three[l3].clone();
            let watcher = tokio::spawn(async move {
                for _ in 0..25 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let s = l.status();
                    let m: Vec<(i64, i64)> = s.peers.iter().map(|p| (p.match_index, p.lag)).collect();
                    println!("committed {} end {} pending {} peers {:?}", s.committed_index, s.end_index, s.pending_proposals, m);
                }
            });
            let p = measure(&three[l3], 1024, 256, 2.0).await;
            println!("diag: {:.0}/s p50 {:?} p99 {:?}", p.rate, p.p50, p.p99);
            watcher.await.unwrap();
            return;
        }
        println!("ledger bench: async flush, loopback, {secs} s per point (+0.3 s warm-up); loadavg {}", loadavg());
        println!(
            "{:>6} {:>5} | {:>10} {:>8} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>8} {:>7} | {:>6}",
            "body", "inflt", "1-node/s", "p50us", "p99us", "p999us", "cpu/op", "3-node/s", "p50us", "p99us", "p999us", "cpu/op", "ratio"
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
                let a = measure(&one[l1], body, c, secs).await;
                let b = measure(&three[l3], body, c, secs).await;
                println!(
                    "{:>6} {:>5} | {:>10.0} {:>8} {:>8} {:>8} {:>7.1} | {:>10.0} {:>8} {:>8} {:>8} {:>7.1} | {:>6.2}{}",
                    body,
                    c,
                    a.rate,
                    a.p50.as_micros(),
                    a.p99.as_micros(),
                    a.p999.as_micros(),
                    a.cpu_us,
                    b.rate,
                    b.p50.as_micros(),
                    b.p99.as_micros(),
                    b.p999.as_micros(),
                    b.cpu_us,
                    b.rate / a.rate.max(1.0),
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
