//! The DLedger RPC surface of a running `Ledger`, driven with a plain remoting client:
//! responses always carry remoting code 200 with the status in the JSON body; METADATA is
//! served; unknown codes get REQUEST_CODE_NOT_SUPPORTED; garbage never kills the member.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dledger_commitlog::runtime::{Index, Ledger, LedgerOptions, Role};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

async fn single_leader(dir: &std::path::Path) -> (Ledger, SocketAddr) {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut o = LedgerOptions::new(
        "RaftNode00",
        "n0",
        vec![("n0".into(), addr)],
        dir.join("dledger-n0"),
    );
    o.store.data_segment_bytes = 1 << 20;
    o.store.index_segment_bytes = 32 * 1024;
    let l = Ledger::start(o).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while l.role().borrow().role != Role::Leader {
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (l, addr)
}

fn json(cmd: &RemotingCommand) -> serde_json::Value {
    serde_json::from_slice(cmd.body()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_errors_and_garbage_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (l, addr) = single_leader(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default());
    let t = Duration::from_secs(3);
    let call = |code: i32, body: &'static str| {
        let (client, body) = (client.clone(), Bytes::from_static(body.as_bytes()));
        async move {
            client
                .invoke(
                    addr,
                    RemotingCommand::request_empty(RequestCode(code)).with_body(body),
                    t,
                )
                .await
                .unwrap()
        }
    };

    let meta = call(
        50_000,
        r#"{"group":"RaftNode00","localId":"admin","remoteId":"n0"}"#,
    )
    .await;
    assert_eq!(meta.response_code(), ResponseCode::SUCCESS);
    let m = json(&meta);
    assert_eq!(m["leaderId"], "n0");
    assert_eq!(m["peers"]["n0"], addr.to_string());
    assert_eq!(m["code"], 200);

    // A heartbeat for another member: remoting 200, DLedger UNKNOWN_MEMBER (401) inside.
    let hb = call(51_002, r#"{"code":200,"group":"RaftNode00","leaderId":"x","localId":"x","remoteId":"n9","term":1}"#).await;
    assert_eq!(hb.response_code(), ResponseCode::SUCCESS);
    assert_eq!(json(&hb)["code"], 401);

    // A vote for a stale term is answered with the current term.
    let vote = call(
        51_001,
        r#"{"code":200,"group":"RaftNode00","leaderId":"x","ledgerEndIndex":-1,"ledgerEndTerm":-1,"localId":"x","remoteId":"n0","term":0}"#,
    )
    .await;
    assert_eq!(vote.response_code(), ResponseCode::SUCCESS);
    let v = json(&vote);
    assert_eq!(v["code"], 200);
    assert_ne!(v["voteResult"], "ACCEPT");

    // Garbage body: answered with UNEXPECTED_ARGUMENT (411), the member keeps serving.
    let bad = call(51_004, "{not json").await;
    assert_eq!(bad.response_code(), ResponseCode::SUCCESS);
    assert_eq!(json(&bad)["code"], 411);

    // APPEND (50001) is not served: RocketMQ appends in-process.
    let append = call(50_001, "{}").await;
    assert_eq!(
        append.response_code(),
        ResponseCode::REQUEST_CODE_NOT_SUPPORTED
    );

    let c = l
        .propose(Bytes::from_static(b"still serving"))
        .await
        .unwrap();
    assert!(c.index >= Index(1));
    client.shutdown().await;
    l.shutdown().await;
}
