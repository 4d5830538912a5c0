//! Goal: `mqbench producer|consumer` send/consume the requested counts, print stats lines
//! with percentiles, and report outage windows with their failed sends.
//! Method: the real binary against an in-process name server and a mock broker whose next
//! sends are made to fail.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::net::SocketAddr;

use common::{start_namesrv, MockBroker};
use remoting::ResponseCode;

async fn mqbench(namesrv: SocketAddr, args: &[&str]) -> (bool, String, String) {
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_mqbench"))
        .args(args)
        .arg("-n")
        .arg(namesrv.to_string())
        .arg("--no-progress")
        .output()
        .await
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn field(line: &str, name: &str) -> f64 {
    let at = line
        .find(name)
        .unwrap_or_else(|| panic!("{name} missing in {line}"));
    line[at + name.len()..]
        .trim_start()
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | '(' | ',' | ')'))
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn producer_counts_outages_and_consumer_reads_everything() {
    let ns = start_namesrv().await;
    let n = ns.local_addr();
    let b = MockBroker::start(n, "b0").await;

    // 2 sends x 3 attempts fail before the first success: one outage with 2 failed sends.
    for _ in 0..6 {
        b.state()
            .fail_next_sends
            .push_back(ResponseCode::SERVICE_NOT_AVAILABLE);
    }
    let (ok, out, err) = mqbench(
        n,
        &["producer", "-t", "T", "-w", "1", "-c", "20", "-s", "64"],
    )
    .await;
    assert!(ok, "{out}\n{err}");
    let outage = out
        .lines()
        .find(|l| l.starts_with("OUTAGE #1:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(outage.contains("(2 failed sends;"), "{outage}");
    assert!(outage.contains("SERVICE_NOT_AVAILABLE"), "{outage}");
    let summary = out
        .lines()
        .find(|l| l.starts_with("[producer summary]"))
        .unwrap();
    assert_eq!(field(summary, "OK:"), 18.0, "{summary}");
    assert_eq!(field(summary, "definite"), 2.0, "{summary}");
    assert!(field(summary, "p99:") >= field(summary, "p50:"));
    assert!(out.contains("outages: 1"), "{out}");

    // Async batches: 40 messages in batches of 4.
    let (ok, out, err) = mqbench(
        n,
        &[
            "producer", "-t", "T", "-w", "2", "-c", "40", "-b", "4", "-a",
        ],
    )
    .await;
    assert!(ok, "{out}\n{err}");
    let summary = out
        .lines()
        .find(|l| l.starts_with("[producer summary]"))
        .unwrap();
    assert_eq!(field(summary, "OK:"), 40.0, "{summary}");
    let stored: usize = b.state().queues.values().map(Vec::len).sum();
    assert_eq!(stored, 58);

    // The consumer reads every stored message from the beginning.
    let (ok, out, err) = mqbench(
        n,
        &[
            "consumer",
            "-t",
            "T",
            "--from-begin",
            "-c",
            "58",
            "-d",
            "20",
        ],
    )
    .await;
    assert!(ok, "{out}\n{err}");
    let summary = out
        .lines()
        .find(|l| l.starts_with("[consumer summary]"))
        .unwrap();
    assert_eq!(field(summary, "Consumed:"), 58.0, "{summary}");

    // No route at all: non-zero exit, one error line.
    let (ok, _, err) = mqbench(n, &["consumer", "-t", "Missing", "-c", "1"]).await;
    assert!(!ok);
    assert!(
        err.lines()
            .any(|l| l.starts_with("ERROR:") && l.contains("Missing")),
        "{err}"
    );
    b.stop().await;
    ns.shutdown().await;
}
