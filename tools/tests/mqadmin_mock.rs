//! Goal: every `mqadmin` subcommand prints the right data (parsed from its output) and
//! fails with a non-zero exit and one `ERROR:` line.
//! Method: the real binary against an in-process name server and a mock broker group.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::net::SocketAddr;
use std::process::Output;

use common::{start_namesrv, MockBroker, CLUSTER};
use tools::table::parse_rendered;

async fn mqadmin(namesrv: SocketAddr, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_mqadmin"))
        .arg("-n")
        .arg(namesrv.to_string())
        .args(args)
        .output()
        .await
        .unwrap()
}

async fn ok(namesrv: SocketAddr, args: &[&str]) -> String {
    let o = mqadmin(namesrv, args).await;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "mqadmin {args:?} failed: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

async fn fails(namesrv: SocketAddr, args: &[&str]) -> String {
    let o = mqadmin(namesrv, args).await;
    assert!(!o.status.success(), "mqadmin {args:?} should fail");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ERROR:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_owned()
}

#[tokio::test]
async fn every_subcommand_against_a_mock_group() {
    let ns = start_namesrv().await;
    let n = ns.local_addr();
    let b = MockBroker::start(n, "RaftNode00").await;
    b.state().runtime_extra.extend(
        [
            ("dledgerRole", "LEADER"),
            ("dledgerTerm", "4"),
            ("dledgerLeaderId", "n0"),
            ("dledgerBeginIndex", "0"),
            ("dledgerEndIndex", "10"),
            ("dledgerCommittedIndex", "9"),
            ("dledgerPeerWaterMark_n1", "9"),
            ("dledgerPeerLag_n1", "1"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let addr = b.addr.to_string();

    // clusterList: one row, master id 0 at the mock's address, figures from runtime info.
    let out = ok(n, &["clusterList"]).await;
    let rows = parse_rendered(&out);
    assert_eq!(
        rows[0][..4],
        ["#Cluster Name", "#Broker Name", "#BID", "#Addr"]
    );
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(
        rows[1][..6],
        [CLUSTER, "RaftNode00", "0", addr.as_str(), "V4_9_4", "12.50"]
    );

    // updateTopic on the cluster's masters, then it shows in topicList / topicRoute.
    let out = ok(
        n,
        &[
            "updateTopic",
            "-t",
            "Orders",
            "-c",
            CLUSTER,
            "-r",
            "2",
            "-w",
            "2",
        ],
    )
    .await;
    assert!(
        out.contains(&format!("create topic to {addr} success.")),
        "{out}"
    );
    let list = ok(n, &["topicList"]).await;
    let topics: Vec<&str> = list.lines().collect();
    assert!(
        topics.contains(&"Orders") && topics.contains(&"T"),
        "{list}"
    );
    let route: serde_json::Value =
        serde_json::from_str(&ok(n, &["topicRoute", "-t", "Orders"]).await).unwrap();
    assert_eq!(route["queueDatas"][0]["writeQueueNums"], 2);
    assert_eq!(route["brokerDatas"][0]["brokerAddrs"]["0"], addr.as_str());

    // sendMessage / consumeMessage round trip with keys and tags.
    let out = ok(
        n,
        &[
            "sendMessage",
            "-t",
            "Orders",
            "-p",
            "hello",
            "-k",
            "order-1",
            "-c",
            "TagA",
            "--count",
            "3",
        ],
    )
    .await;
    let sent = parse_rendered(&out);
    assert_eq!(sent.len(), 4, "{out}");
    assert!(sent[1..].iter().all(|r| r[3] == "SEND_OK"));
    let out = ok(
        n,
        &[
            "consumeMessage",
            "-t",
            "Orders",
            "-c",
            "3",
            "--wait-ms",
            "2000",
        ],
    )
    .await;
    assert!(out.contains("consumed 3 message(s)"), "{out}");
    let rows = parse_rendered(&out);
    let bodies: std::collections::BTreeSet<&str> =
        rows[1..4].iter().map(|r| r[6].as_str()).collect();
    assert_eq!(
        bodies,
        ["hello-0", "hello-1", "hello-2"].into_iter().collect()
    );
    assert!(rows[1..4]
        .iter()
        .all(|r| r[4] == "TagA" && r[5] == "order-1"));

    // topicStatus: the two queues' max offsets add up to 3.
    let rows = parse_rendered(&ok(n, &["topicStatus", "-t", "Orders"]).await);
    assert_eq!(rows.len(), 3);
    let total: i64 = rows[1..].iter().map(|r| r[3].parse::<i64>().unwrap()).sum();
    assert_eq!(total, 3);

    // queryMsgByKey finds all three; queryMsgById shows the first one's fields.
    let rows = parse_rendered(&ok(n, &["queryMsgByKey", "-t", "Orders", "-k", "order-1"]).await);
    assert_eq!(rows.len(), 4);
    let first_offset_id = tools::msg_id::offset_msg_id(b.addr, 0);
    let out = ok(n, &["queryMsgById", "-i", &first_offset_id]).await;
    assert!(out.contains("Topic:               Orders"), "{out}");
    assert!(out.contains("Keys:                [order-1]"), "{out}");
    assert!(out.contains("Message Body:        hello-0"), "{out}");

    // consumerProgress from the broker's stored offsets.
    b.state()
        .offsets
        .entry("Orders@G1".to_owned())
        .or_default()
        .extend([(0, 1), (1, 0)]);
    let out = ok(n, &["consumerProgress", "-g", "G1"]).await;
    let rows = parse_rendered(&out);
    assert_eq!(
        rows[0],
        [
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff"
        ]
    );
    assert_eq!(rows.len(), 4, "{out}");
    assert!(out.contains("Diff Total: 2"), "{out}");

    // brokerStatus / getBrokerConfig.
    let out = ok(n, &["brokerStatus", "-b", &addr]).await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("brokerVersionDesc") && l.ends_with(": V4_9_4")),
        "{out}"
    );
    let out = ok(n, &["getBrokerConfig", "-b", &addr]).await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("brokerName") && l.ends_with("=  RaftNode00")),
        "{out}"
    );

    // dledgerStatus: runtime keys of the member; METADATA on the fake peer address fails.
    let out = ok(n, &["dledgerStatus"]).await;
    let rows = parse_rendered(&out);
    assert_eq!(
        rows[1][..8],
        ["RaftNode00", "n0", "LEADER", "4", "n0", "0", "10", "9"]
    );
    assert!(rows[1].contains(&"n1:9/1".to_owned()), "{out}");
    assert!(out.contains("note: RaftNode00/n0: METADATA"), "{out}");

    // deleteTopic removes it from the broker and the name server.
    let out = ok(n, &["deleteTopic", "-t", "Orders", "-c", CLUSTER]).await;
    assert!(out.contains("delete topic [Orders] from NameServer success."));
    assert!(!b.state().topics.contains_key("Orders"));

    // Failures: one ERROR line and a non-zero exit.
    let e = fails(n, &["topicRoute", "-t", "Missing"]).await;
    assert!(e.contains("Missing"), "{e}");
    let e = fails(n, &["clusterList", "-c", "NoCluster"]).await;
    assert!(e.contains("NoCluster"), "{e}");
    let e = fails(n, &["queryMsgById", "-i", "XYZ"]).await;
    assert!(e.contains("bad message id"), "{e}");
    let e = fails(n, &["leadershipTransfer", "-b", "RaftNode00", "--to", "n7"]).await;
    assert!(e.contains("n7 is not a member"), "{e}");
    let dead: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let e = fails(dead, &["clusterList"]).await;
    assert!(e.contains("127.0.0.1:1"), "{e}");

    b.stop().await;
    ns.shutdown().await;
}
