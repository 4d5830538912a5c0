//! Goal: the name server counts the requests it answers and serves them as Prometheus text,
//! both in-process and through `mqnamesrv --metrics-port`. Method: register a fake broker and
//! query routes over loopback, then scrape `GET /metrics` with a raw HTTP/1.1 request and
//! read the sample values back.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{route, start_namesrv, FakeBroker, TIMEOUT};
use observe::{HttpLimits, MetricsServer};
use remoting::{ClientConfig, RemotingClient, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

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
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    Some(body.to_owned())
}

/// The value of the sample line that starts with `series ` (name plus labels, exactly).
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn exercise(namesrv: SocketAddr) {
    let broker = FakeBroker::new(namesrv, common::GROUP, "127.0.0.1:10911");
    broker.register(0, &[("TopicA", 4)]).await;
    let client = RemotingClient::new(ClientConfig::default());
    assert!(route(&client, namesrv, "TopicA").await.is_ok());
    assert_eq!(
        route(&client, namesrv, "Missing").await.unwrap_err(),
        ResponseCode::TOPIC_NOT_EXIST
    );
    client.shutdown().await;
}

fn assert_counts(body: &str) {
    let v = |series: &str| value(body, series).unwrap_or_else(|| panic!("{series} in\n{body}"));
    assert_eq!(v("namesrv_requests_total{class=\"register\"}"), 1.0);
    assert_eq!(v("namesrv_requests_total{class=\"route_query\"}"), 2.0);
    assert_eq!(v("namesrv_route_queries_total{result=\"found\"}"), 1.0);
    assert_eq!(v("namesrv_route_queries_total{result=\"not_found\"}"), 1.0);
    assert_eq!(v("namesrv_broker_registrations_total"), 1.0);
    assert_eq!(v("namesrv_live_brokers"), 1.0);
    assert!(body.contains("# TYPE namesrv_requests_total counter\n"));
}

#[tokio::test]
async fn in_process_scrape_counts_requests() {
    let handle = start_namesrv(120_000, 1_000).await;
    exercise(handle.local_addr()).await;
    let stop = CancellationToken::new();
    let server = MetricsServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        handle.metrics_registry(),
        HttpLimits::default(),
        stop.clone(),
    )
    .await
    .unwrap();
    let body = scrape(server.local_addr()).await.unwrap();
    assert_counts(&body);
    stop.cancel();
    server.stopped().await;
    handle.shutdown().await;
}

#[tokio::test]
async fn mqnamesrv_serves_metrics_on_its_metrics_port() {
    // A free port for the metrics endpoint (the binary takes a fixed number).
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqnamesrv"))
        .args(["--listen", "127.0.0.1:0", "--metrics-port"])
        .arg(metrics_port.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    let line = tokio::time::timeout(TIMEOUT, line).await.unwrap().unwrap();
    let addr: SocketAddr = line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    exercise(addr).await;

    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let deadline = Instant::now() + TIMEOUT;
    let body = loop {
        if let Some(body) = scrape(metrics_addr).await {
            break body;
        }
        assert!(Instant::now() < deadline, "metrics endpoint never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_counts(&body);
}
