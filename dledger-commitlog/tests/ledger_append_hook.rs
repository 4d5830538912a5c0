//! The leader's append hook (RocketMQ's PHYSICALOFFSET rewrite) runs before the entry is
//! stored and replicated: a 3-member group on loopback, a hook writing the entry's pos into
//! the body, and every member must hold byte-identical, CRC-valid bodies carrying that pos.
//! Waits poll a condition with a deadline; nothing sleeps for synchronisation.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{AppendHook, Index, Ledger, LedgerOptions, LedgerRole};

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Writes `pos` big-endian into the first 8 bytes of bodies long enough to hold it.
fn pos_hook() -> AppendHook {
    AppendHook(Arc::new(|pos, body| {
        if let Some(head) = body.get_mut(..8) {
            head.copy_from_slice(&pos.to_be_bytes());
        }
    }))
}

fn options(dir: &Path, id: &str, peers: &[(String, SocketAddr)]) -> LedgerOptions {
    let mut o = LedgerOptions::new(
        "RaftNode00",
        id,
        peers.to_vec(),
        dir.join(format!("dledger-{id}")),
    );
    o.store.data_segment_bytes = 1 << 20;
    o.store.index_segment_bytes = 32 * 1024;
    o.append_hook = Some(pos_hook());
    o
}

async fn poll(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_rewrites_bodies_before_storage_and_replication() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let peers: Vec<(String, SocketAddr)> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("n{i}"), *a))
        .collect();
    let mut nodes = Vec::new();
    for (id, _) in &peers {
        nodes.push(
            Ledger::start(options(dir.path(), id, &peers))
                .await
                .unwrap(),
        );
    }
    poll("a leader", Duration::from_secs(10), || {
        nodes
            .iter()
            .filter(|n| n.role().borrow().role == LedgerRole::Leader)
            .count()
            == 1
    })
    .await;
    let leader = nodes
        .iter()
        .find(|n| n.role().borrow().role == LedgerRole::Leader)
        .unwrap()
        .clone();

    let mut committed = Vec::new();
    for i in 0..50u8 {
        // The first 8 bytes are a placeholder the hook overwrites.
        let mut body = vec![0u8; 8];
        body.extend(std::iter::repeat_n(i, 20 + usize::from(i)));
        let c = leader.propose(Bytes::from(body.clone())).await.unwrap();
        body[..8].copy_from_slice(&c.pos.to_be_bytes());
        committed.push((c.index, body));
    }
    let last = committed.last().unwrap().0;
    for n in &nodes {
        poll("every member to commit", Duration::from_secs(10), || {
            n.committed().borrow().index >= last
        })
        .await;
        let reader = n.reader();
        for (index, expected) in &committed {
            let e = reader.get(Index(*index as u64)).unwrap();
            assert_eq!(
                e.pos.raw(),
                i64::from_be_bytes(expected[..8].try_into().unwrap())
            );
            assert_eq!(
                &e.body[..],
                &expected[..],
                "member {} index {index}",
                n.self_id()
            );
        }
    }
    for n in &nodes {
        n.shutdown().await;
    }
}
