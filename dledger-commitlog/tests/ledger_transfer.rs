//! Leadership transfer outcomes of a running 3-member `Ledger` group over loopback sockets
//! (issue 4): refusals come at once with a typed DLedger code, a transfer to a member that
//! cannot take over fails definitely within the wait timeout (no hang), the admin
//! LEADERSHIP_TRANSFER RPC carries the real code, and a transfer to a caught-up member works.
//!
//! Ports: picked by binding `127.0.0.1:0` and releasing them just before the ledgers bind.
//! Every wait polls a condition with a deadline; nothing sleeps for synchronisation.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{DLedgerCode, Ledger, LedgerOptions, LedgerRole, TransferError};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode};

/// `leadershipTransferWaitTimeout` for these tests (the default is 1000 ms).
const WAIT_MS: u64 = 400;
/// LEADERSHIP_TRANSFER request code (spec §3.7).
const LEADERSHIP_TRANSFER: i32 = 51005;

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn options(dir: &Path, id: &str, peers: &[(String, SocketAddr)]) -> LedgerOptions {
    let mut o = LedgerOptions::new(
        "RaftNode00",
        id,
        peers.to_vec(),
        dir.join(format!("dledger-{id}")),
    );
    o.store.data_segment_bytes = 8 << 20;
    o.store.index_segment_bytes = 32 * 64 * 1024;
    o.core.leadership_transfer_wait_timeout_ms = WAIT_MS;
    o
}

async fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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

/// The member every running member agrees leads.
async fn wait_leader(nodes: &[&Ledger], limit: Duration) -> String {
    poll("an agreed leader", limit, || {
        let leaders: Vec<&&Ledger> = nodes
            .iter()
            .filter(|n| n.role().borrow().role == LedgerRole::Leader)
            .collect();
        let [l] = leaders.as_slice() else {
            return None;
        };
        let (id, term) = (l.self_id().to_owned(), l.role().borrow().term);
        nodes
            .iter()
            .all(|n| {
                let r = n.role().borrow().clone();
                r.term == term && r.leader_id.as_deref() == Some(id.as_str())
            })
            .then_some(id)
    })
    .await
}

fn code_of(r: Result<(), TransferError>) -> DLedgerCode {
    match r {
        Err(TransferError::Refused { code, reason }) => {
            println!("refused: {code:?}: {reason}");
            code
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
}

/// Sends an admin LEADERSHIP_TRANSFER to `leader` and returns the `code` in the answer body.
async fn admin_transfer(
    client: &RemotingClient,
    leader: &Ledger,
    to: &str,
    term: i64,
) -> (i64, Duration) {
    let body = serde_json::json!({
        "code": 200,
        "group": "RaftNode00",
        "localId": "admin",
        "remoteId": leader.self_id(),
        "takeLeadershipLedgerIndex": -1,
        "term": term,
        "transferId": leader.self_id(),
        "transfereeId": to,
    });
    let cmd = RemotingCommand::request_empty(RequestCode(LEADERSHIP_TRANSFER))
        .with_body(Bytes::from(serde_json::to_vec(&body).unwrap()));
    let t = Instant::now();
    let resp = client
        .invoke(leader.local_addr(), cmd, Duration::from_secs(3))
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap();
    (v["code"].as_i64().unwrap(), t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_failures_are_typed_and_definite_and_success_still_works() {
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
    let all: Vec<&Ledger> = nodes.iter().collect();
    let leader_id = wait_leader(&all, Duration::from_secs(5)).await;
    let li: usize = leader_id[1..].parse().unwrap();
    let leader = &nodes[li];
    let (fa, fb) = ((li + 1) % 3, (li + 2) % 3);
    let term = leader.role().borrow().term;
    // Refusals: at once, typed.
    let quick = Duration::from_millis(WAIT_MS);
    for (to, code) in [
        ("n9", DLedgerCode::UNKNOWN_MEMBER),
        (leader_id.as_str(), DLedgerCode::UNEXPECTED_MEMBER),
    ] {
        let t = Instant::now();
        assert_eq!(code_of(leader.transfer_leadership(to).await), code);
        assert!(t.elapsed() < quick, "refusal took {:?}", t.elapsed());
    }
    let t = Instant::now();
    let other = nodes[fb].self_id().to_owned();
    assert_eq!(
        code_of(nodes[fa].transfer_leadership(&other).await),
        DLedgerCode::NOT_LEADER
    );
    assert!(t.elapsed() < quick);

    // The admin RPC carries the same codes on the wire.
    let client = RemotingClient::new(ClientConfig::default());
    let (code, took) = admin_transfer(&client, leader, "n9", term).await;
    assert_eq!(code, i64::from(DLedgerCode::UNKNOWN_MEMBER.0));
    assert!(took < quick);

    // A stopped member misses new entries: the transfer to it fails once it has not caught
    // up within leadershipTransferWaitTimeout, with a definite code, and the leader goes on.
    let stopped = nodes[fa].self_id().to_owned();
    nodes[fa].halt().await;
    for i in 0..5 {
        leader
            .propose(Bytes::from(format!("while {stopped} is down #{i}")))
            .await
            .unwrap();
    }
    let t = Instant::now();
    let code = code_of(leader.transfer_leadership(&stopped).await);
    let took = t.elapsed();
    println!("transfer to stopped {stopped} failed after {took:?}");
    assert_eq!(code, DLedgerCode::TAKE_LEADERSHIP_FAILED);
    assert!(
        took >= Duration::from_millis(WAIT_MS - 50)
            && took < Duration::from_millis(WAIT_MS + 1_000),
        "failed after {took:?}"
    );
    assert_eq!(leader.role().borrow().role, LedgerRole::Leader);
    leader
        .propose(Bytes::from_static(b"after the failed transfer"))
        .await
        .unwrap();
    // Same over the admin RPC: answered with the real code within the wait, not a timeout.
    let term = leader.role().borrow().term;
    let (code, took) = admin_transfer(&client, leader, &stopped, term).await;
    println!("admin transfer to stopped {stopped}: code {code} after {took:?}");
    assert_eq!(code, i64::from(DLedgerCode::TAKE_LEADERSHIP_FAILED.0));
    assert!(took < Duration::from_millis(WAIT_MS + 1_000));

    // A caught-up live member takes over.
    let live = nodes[fb].self_id().to_owned();
    let t = Instant::now();
    leader.transfer_leadership(&live).await.unwrap();
    println!("leadership transferred to {live} in {:?}", t.elapsed());
    assert_eq!(
        leader.role().borrow().leader_id.as_deref(),
        Some(live.as_str())
    );
    let running = [&nodes[li], &nodes[fb]];
    assert_eq!(wait_leader(&running, Duration::from_secs(5)).await, live);
    client.shutdown().await;
    for n in &nodes {
        n.shutdown().await;
    }
}
