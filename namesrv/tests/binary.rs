//! Goal: the `mqnamesrv` binary boots, prints Java's boot line with its address, serves
//! requests and exits cleanly on SIGTERM. Method: spawn it on 127.0.0.1 port 0, read stdout
//! until the boot line, query it over loopback, send SIGTERM and wait for exit status 0.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TIMEOUT;
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

const BOOT_LINE: &str = "The Name Server boot success. serializeType=JSON, address ";

#[tokio::test]
async fn boots_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqnamesrv"))
        .args([
            "--listen",
            "127.0.0.1:9",
            "-p",
            "0",
            "--scan-interval-ms",
            "1000",
        ])
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
    let addr = line
        .trim_end()
        .strip_prefix(BOOT_LINE)
        .unwrap_or_else(|| panic!("unexpected boot line {line:?}"));
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    assert_ne!(addr.port(), 0);

    let client = RemotingClient::new(ClientConfig::default());
    let resp = client
        .invoke(
            addr,
            RemotingCommand::request_empty(RequestCode::GET_BROKER_CLUSTER_INFO),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    assert_eq!(
        resp.body().as_ref(),
        br#"{"brokerAddrTable":{},"clusterAddrTable":{}}"#
    );
    client.shutdown().await;

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + TIMEOUT;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "mqnamesrv did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");
}

#[test]
fn rejects_bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqnamesrv"))
        .args(["--listen", "not-an-address"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
