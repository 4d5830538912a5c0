//! Goal: a broker started with `metricsPort` serves its send/pull counters, latency
//! histograms, log gauges and disk usage over HTTP. Method: the in-process harness (a broker
//! over a single-member in-memory log), one send and one pull over loopback, then scrape
//! `GET /metrics` until the sampled gauges appear.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use broker::store::mem_log::MemLog;
use common::{free_port, pull, records, send_v2, Harness, TIMEOUT};
use remoting::ResponseCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET /metrics`: the body of a 200 answer, or `None` when nothing answers yet.
async fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(TIMEOUT, s.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    Some(body.to_owned())
}

/// The value of the sample line that starts with `series ` (name plus labels, exactly).
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn broker_serves_send_pull_and_log_metrics() {
    let metrics_port = free_port();
    let h = Harness::start_with(MemLog::new_leader(), |cfg| cfg.metrics_port = metrics_port).await;
    h.wait_master().await;
    let sent = h.call(send_v2("TopicM", 0, b"hello", "")).await;
    assert_eq!(
        sent.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        sent.remark()
    );
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let got = h.call(pull("G", "TopicM", 0, 0, 0)).await;
        if got.response_code() == ResponseCode::SUCCESS {
            assert_eq!(records(&got).len(), 1);
            break;
        }
        assert!(Instant::now() < deadline, "message never became pullable");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let addr = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let deadline = Instant::now() + TIMEOUT;
    let body = loop {
        if let Some(body) = scrape(addr).await {
            let sampled = value(&body, "broker_store_disk_usage_bytes").unwrap_or(0.0) > 0.0
                && value(&body, "dledger_committed_index").unwrap_or(-1.0) >= 0.0;
            if sampled {
                break body;
            }
        }
        assert!(Instant::now() < deadline, "metrics never sampled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let v = |series: &str| value(&body, series).unwrap_or_else(|| panic!("{series} in\n{body}"));
    assert_eq!(v("broker_send_requests_total{result=\"ok\"}"), 1.0);
    assert_eq!(v("broker_messages_sent_total"), 1.0);
    assert_eq!(v("broker_send_latency_seconds_count"), 1.0);
    assert!(v("broker_pull_requests_total{result=\"found\"}") >= 1.0);
    assert_eq!(v("broker_messages_pulled_total"), 1.0);
    assert_eq!(v("dledger_role"), 2.0);
    assert_eq!(v("dledger_role_active{role=\"leader\"}"), 1.0);
    assert!(v("dledger_ledger_end_index") >= v("dledger_committed_index"));
    assert!(body.contains("# TYPE broker_pull_latency_seconds histogram\n"));
    h.shutdown().await;
    // The endpoint stops with the broker.
    let stopped = Instant::now() + TIMEOUT;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < stopped,
            "metrics endpoint outlived the broker"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn metrics_port_defaults_to_off() {
    let h = Harness::start().await;
    assert_eq!(h.ctx().config.metrics_port, 0);
    h.shutdown().await;
}

/// A one-member DLedger group through `Broker::start`: the DLedger status sampler fills the
/// per-peer and replication gauges.
#[tokio::test]
async fn real_ledger_status_reaches_the_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let (port, ledger_port, metrics_port) = (free_port(), free_port(), free_port());
    let text = format!(
        "brokerClusterName=TestCluster\nbrokerName=b0\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\n\
         storePathRootDir={}\nenableDLegerCommitLog=true\ndLegerGroup=b0\ndLegerSelfId=n0\n\
         dLegerPeers=n0-127.0.0.1:{ledger_port}\nmetricsPort={metrics_port}\n",
        dir.path().display()
    );
    let cfg = broker::config::BrokerConfig::from_properties(&text).unwrap();
    assert_eq!(cfg.metrics_port, metrics_port);
    let b = broker::broker::Broker::start(cfg).await.unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let deadline = Instant::now() + TIMEOUT;
    let body = loop {
        if let Some(body) = scrape(addr).await {
            if value(&body, "dledger_role") == Some(2.0)
                && value(&body, "dledger_term").unwrap_or(0.0) >= 1.0
                && body.contains("dledger_peer_alive{peer=\"n0\"}")
                && value(&body, "broker_store_disk_usage_bytes").unwrap_or(0.0) > 0.0
            {
                break body;
            }
        }
        assert!(Instant::now() < deadline, "ledger gauges never sampled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(value(&body, "dledger_pending_appends").is_some());
    assert!(value(&body, "dledger_role_changes_total").is_some());
    b.shutdown().await;
}
