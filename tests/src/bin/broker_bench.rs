//! Producer throughput and latency through the broker against a 3-node DLedger group
//! (1 KiB bodies, 64 concurrent senders), with the raw `Ledger::propose` rate of an
//! in-process 3-node group measured in the same run as the baseline.
//!
//! usage: broker_bench [SECONDS]   (default 5 per phase)
//! Uses `it-mqbroker` / `it-mqnamesrv` next to this executable (`cargo build -p tests --bins`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{Ledger, LedgerOptions, LedgerRole};
use tests::client::{Client, Queue};
use tests::cluster::{free_port, Bins, Group, NameSrv};

const SENDERS: usize = 64;
const BODY: usize = 1024;

fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

async fn ledger_rate(secs: u64, dir: &std::path::Path) -> anyhow::Result<f64> {
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
        ledgers.push(Ledger::start(o).await?);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(l) = ledgers
            .iter()
            .find(|l| l.role().borrow().role == LedgerRole::Leader)
        {
            break l.clone();
        }
        anyhow::ensure!(Instant::now() < deadline, "no ledger leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let body = Bytes::from(vec![b'x'; BODY + 150]);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..SENDERS {
        let (l, b, d, s) = (leader.clone(), body.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if l.propose(b.clone()).await.is_ok() {
                    d.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let el = t0.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    for l in &ledgers {
        l.shutdown().await;
    }
    Ok(n as f64 / el)
}

async fn broker_rate(secs: u64, dir: &std::path::Path) -> anyhow::Result<(f64, Vec<u64>)> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().ok_or_else(|| anyhow::anyhow!("no exe dir"))?;
    let bins = Bins {
        broker: bin_dir.join("it-mqbroker"),
        namesrv: bin_dir.join("it-mqnamesrv"),
    };
    let ns = NameSrv::start(&bins, dir);
    let _g = Group::start(&bins, "BenchNode", ns.addr, dir, 3, "");
    let c = Client::new(ns.addr);
    let tbw = c.wait_masters("TBW102", 1, Duration::from_secs(60)).await;
    c.create_topic(tbw[0].addr, "BenchTopic", 8).await?;
    let queues: Arc<Vec<Queue>> = Arc::new(
        c.wait_masters("BenchTopic", 1, Duration::from_secs(60))
            .await,
    );
    let body = vec![b'x'; BODY];
    // Warm up connections and routes.
    c.send_retrying(
        &queues[0],
        Client::send_request("BenchTopic", queues[0].queue_id, &body, ""),
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..SENDERS {
        let (c, qs, s, b) = (c.clone(), queues.clone(), stop.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = w;
            while !s.load(Ordering::Relaxed) {
                let q = &qs[i % qs.len()];
                let req = Client::send_request("BenchTopic", q.queue_id, &b, "TAGS\u{1}bench\u{2}");
                let t = Instant::now();
                if let Ok(r) = c.call(q.addr, req).await {
                    if r.response_code() == remoting::ResponseCode::SUCCESS {
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                }
                i += SENDERS;
            }
            lat
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let el = t0.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    Ok((lat.len() as f64 / el, lat))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs: u64 = std::env::args().nth(1).map_or(Ok(5), |s| s.parse())?;
    let dir = tempfile::tempdir()?;
    let raw = ledger_rate(secs, dir.path()).await?;
    println!("raw ledger propose: {raw:.0} entries/s ({SENDERS} proposers, {} B bodies, 3 members in-process)", BODY + 150);
    let (rate, mut lat) = broker_rate(secs, dir.path()).await?;
    let (p50, p99, p999) = (
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99),
        percentile(&mut lat, 0.999),
    );
    println!(
        "broker send: {rate:.0} msg/s ({SENDERS} senders, {BODY} B bodies, 3 broker processes); latency p50 {p50} us, p99 {p99} us, p99.9 {p999} us"
    );
    println!("ratio broker/ledger = {:.2} (goal >= 0.70)", rate / raw);
    Ok(())
}
