//! Goal: CC-11 — a process appending with async flush, killed with SIGKILL at random moments,
//! never loses an acknowledged entry (the page cache survives a process crash).
//! Method: this test binary re-invokes itself; the child (`cc11_child`, ignored unless
//! `CC11_DIR` is set) appends and prints `ACK <index>` after each append returns; the parent
//! kills it after a random number of acks, reopens the store and checks every acked entry.
//! 20 rounds on the same directory, so each child also recovers what the previous one left.

#![allow(clippy::unwrap_used)]

mod store_common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use dledger_commitlog::store::Store;
use dledger_commitlog::{Index, LedgerConfig, Term};
use store_common::*;

fn cfg() -> LedgerConfig {
    LedgerConfig {
        data_segment_bytes: 64 * 1024,
        index_segment_bytes: 32 * 256,
        ..LedgerConfig::default()
    }
}

#[test]
#[ignore = "child process of cc11_kill_loop; does nothing unless CC11_DIR is set"]
fn cc11_child() {
    let Ok(dir) = std::env::var("CC11_DIR") else {
        return;
    };
    let mut s = Store::open(std::path::Path::new(&dir), &cfg()).unwrap();
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut i = s.next_index().0;
    loop {
        let a = s.append_leader(Term(1 + i / 10), &body(i)).unwrap();
        writeln!(out, "ACK {}", a.index.0).unwrap();
        out.flush().unwrap();
        i += 1;
    }
}

#[test]
fn cc11_kill_loop() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut state = seed(11);
    let mut max_acked: Option<u64> = None;
    for round in 0..20 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "cc11_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CC11_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let kill_after = 1 + rng(&mut state) % 400;
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("ACK ") {
                max_acked = Some(n.parse().unwrap());
                seen += 1;
                if seen == kill_after {
                    child.kill().unwrap(); // SIGKILL
                    break;
                }
            }
        }
        // Acks printed before the kill landed count too.
        for line in lines.map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("ACK ") {
                max_acked = Some(n.parse().unwrap());
            }
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: child was not killed");
        let s = Store::open(dir.path(), &cfg())
            .unwrap_or_else(|e| panic!("round {round}: recovery failed: {e}"));
        let acked = max_acked.expect("child acked something");
        assert!(
            s.end_index() >= Some(Index(acked)),
            "round {round}: end {:?} < acked {acked}",
            s.end_index()
        );
        check_all(&s, acked + 1);
        s.close().unwrap();
    }
}
