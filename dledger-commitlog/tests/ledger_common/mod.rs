//! Shared harness of the loopback `Ledger` tests: free ports, member options with small
//! files, polling with a deadline (nothing sleeps for synchronisation), group start/stop.
//!
//! Ports: peer lists are fixed before start, so free ports are picked by binding
//! `127.0.0.1:0` (all at once, so they differ) and released just before the ledgers bind.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use dledger_commitlog::runtime::{Ledger, LedgerOptions, Role};

pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Members `n0`..`n{n-1}` of one group, on free loopback ports.
pub fn free_peers(n: usize) -> Vec<(String, SocketAddr)> {
    free_addrs(n)
        .into_iter()
        .enumerate()
        .map(|(i, a)| (format!("n{i}"), a))
        .collect()
}

/// Options of member `id` with its store under `dir`.
pub fn options(dir: &Path, id: &str, peers: &[(String, SocketAddr)]) -> LedgerOptions {
    let mut o = LedgerOptions::new(
        "RaftNode00",
        id,
        peers.to_vec(),
        dir.join(format!("dledger-{id}")),
    );
    // Small files keep the test's disk footprint and preallocation cheap.
    o.store.data_segment_bytes = 8 << 20;
    o.store.index_segment_bytes = 32 * 64 * 1024;
    o
}

/// Starts every member of `peers` under `dir`, each with [`options`] adjusted by `tune`.
pub async fn start_group(
    dir: &Path,
    peers: &[(String, SocketAddr)],
    tune: impl Fn(&mut LedgerOptions),
) -> Vec<Ledger> {
    let mut nodes = Vec::new();
    for (id, _) in peers {
        let mut o = options(dir, id, peers);
        tune(&mut o);
        nodes.push(Ledger::start(o).await.unwrap());
    }
    nodes
}

pub async fn shutdown_all(nodes: &[Ledger]) {
    for n in nodes {
        n.shutdown().await;
    }
}

/// Polls `f` every 2 ms until it yields a value; panics after `limit`.
pub async fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The single member of `nodes` that sees itself as leader, once exactly one does and all
/// others agree.
pub async fn wait_leader(nodes: &[Ledger], limit: Duration) -> usize {
    poll("a leader", limit, || {
        let leaders: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].role().borrow().role == Role::Leader)
            .collect();
        if leaders.len() != 1 {
            return None;
        }
        let id = nodes[leaders[0]].self_id().to_owned();
        let term = nodes[leaders[0]].role().borrow().term;
        let agreed = nodes.iter().all(|n| {
            let r = n.role().borrow().clone();
            r.term == term && r.leader_id.as_deref() == Some(id.as_str())
        });
        agreed.then_some(leaders[0])
    })
    .await
}
