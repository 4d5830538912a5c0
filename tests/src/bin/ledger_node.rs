//! One member of a ledger-only 3-process group: the baseline `broker_bench` measures on the
//! same process layout as the brokers (one process per member, each with the broker's
//! runtime shape), so the ratio it reports compares the broker with the replicated log it
//! sits on and not with a group whose members share one process and its worker threads.
//!
//! While this member leads, `PROPOSERS` tasks propose `ENTRY_BYTES`-byte entries back to
//! back (the load lives in the leader's process, as with the in-process baseline). Every
//! 10 ms it prints `done N` (proposals committed so far) on stdout for the bench to read.
//!
//! usage: ledger_node ID PEERS DIR PROPOSERS ENTRY_BYTES
//! (PEERS as dLegerPeers: `n0-127.0.0.1:40911;n1-...`; `LEDGER_NODE_BUSY_POLL_US=N` turns on
//! busy polling of the member's connections; `LEDGER_NODE_WORKERS=N` sets the runtime's
//! worker threads as the broker's `runtimeWorkerThreads` does)

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dledger_commitlog::runtime::{parse_peers, Ledger, LedgerOptions, Role};

struct Args {
    id: String,
    peers: String,
    dir: std::path::PathBuf,
    proposers: usize,
    entry_bytes: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(
        a.len() == 5,
        "usage: ledger_node ID PEERS DIR PROPOSERS ENTRY_BYTES"
    );
    Ok(Args {
        id: a[0].clone(),
        peers: a[1].clone(),
        dir: a[2].clone().into(),
        proposers: a[3].parse()?,
        entry_bytes: a[4].parse()?,
    })
}

/// Proposes back to back while this member leads; waits for the role otherwise.
async fn propose_loop(ledger: Ledger, body: Bytes, done: Arc<AtomicU64>) {
    let mut role = ledger.role();
    loop {
        if role.borrow_and_update().role != Role::Leader {
            if role.changed().await.is_err() {
                return;
            }
            continue;
        }
        if ledger.propose(body.clone()).await.is_ok() {
            done.fetch_add(1, Ordering::Relaxed);
        } else {
            // Refused (leadership moving): wait for the next role change or a moment.
            let _ = tokio::time::timeout(Duration::from_millis(10), role.changed()).await;
        }
    }
}

/// The broker's allocator (see `mqbroker`), so the baseline differs from the broker only in
/// what the broker adds.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    // The broker's runtime shape: LEDGER_NODE_WORKERS read as `runtimeWorkerThreads`, by the
    // broker's own rule for a DLedger group with these peers (0 or unset: one per core, at
    // least two, or the cores shared among the members when all of them are on loopback).
    let threads = broker::config::BrokerConfig {
        runtime_worker_threads: std::env::var("LEDGER_NODE_WORKERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        enable_dleger_commit_log: true,
        dleger_peers: broker::config::parse_dledger_peers(&args.peers)
            .map_err(anyhow::Error::msg)?,
        ..Default::default()
    }
    .worker_threads();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let peers = parse_peers(&args.peers).map_err(anyhow::Error::msg)?;
        let mut o = LedgerOptions::new("bench", &args.id, peers, args.dir.clone());
        o.store.data_segment_bytes = 64 << 20;
        o.busy_poll = Duration::from_micros(
            std::env::var("LEDGER_NODE_BUSY_POLL_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        );
        let ledger = Ledger::start(o).await?;
        let body = Bytes::from(vec![b'x'; args.entry_bytes]);
        let done = Arc::new(AtomicU64::new(0));
        for _ in 0..args.proposers {
            tokio::spawn(propose_loop(ledger.clone(), body.clone(), done.clone()));
        }
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut out = std::io::stdout();
        loop {
            tick.tick().await;
            // The bench closing its end of the pipe is the signal to stop.
            if writeln!(out, "done {}", done.load(Ordering::Relaxed))
                .and_then(|()| out.flush())
                .is_err()
            {
                break;
            }
        }
        ledger.shutdown().await;
        anyhow::Ok(())
    })
}
