//! Leadership transfer outcomes of a running 3-member `Ledger` group over loopback sockets
//! (issue 4): refusals come at once with a typed DLedger code, a transfer to a member that
//! cannot take over fails definitely within the wait timeout (no hang), the admin
//! LEADERSHIP_TRANSFER RPC carries the real code, and a transfer to a caught-up member works.
//!
//! Harness (free ports, polling waits): `ledger_common`.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod ledger_common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{DLedgerCode, Ledger, Role, Term, TransferError};
use ledger_common::{free_peers, shutdown_all, start_group, wait_leader};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode};

/// `leadershipTransferWaitTimeout` for these tests (the default is 1000 ms).
const WAIT_MS: u64 = 400;
/// LEADERSHIP_TRANSFER request code (spec §3.7).
const LEADERSHIP_TRANSFER: i32 = 51005;

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
    term: Term,
) -> (i64, Duration) {
    let body = serde_json::json!({
        "code": 200,
        "group": "RaftNode00",
        "localId": "admin",
        "remoteId": leader.self_id(),
        "takeLeadershipLedgerIndex": -1,
        "term": term.raw(),
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
    let peers = free_peers(3);
    let nodes = start_group(dir.path(), &peers, |o| {
        o.core.leadership_transfer_wait_timeout_ms = WAIT_MS;
    })
    .await;
    let li = wait_leader(&nodes, Duration::from_secs(5)).await;
    let leader = &nodes[li];
    let leader_id = leader.self_id().to_owned();
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
    assert_eq!(leader.role().borrow().role, Role::Leader);
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
    let running = [nodes[li].clone(), nodes[fb].clone()];
    let new_leader = wait_leader(&running, Duration::from_secs(5)).await;
    assert_eq!(running[new_leader].self_id(), live);
    client.shutdown().await;
    shutdown_all(&nodes).await;
}
