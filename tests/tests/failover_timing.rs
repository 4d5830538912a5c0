//! Failover timing (ignored; run by hand): kill -9 of the master → the new master's
//! registration as id 0 seen at the name server (polled every 5 ms), and → the first
//! successful send of a client that re-queries the route after each failure. Five kills on
//! one cluster; prints every run, the median and the max.
//!
//! `cargo build -p broker -p namesrv --bins && cargo test -p tests --test failover_timing -- --ignored --nocapture`

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);

fn stats(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing measurement: ~1 min, run by hand"]
async fn failover_timing() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    let mut p = SeqProducer::new(cl.namesrv, "FoTiming", 0);
    let mut to_register = Vec::new();
    let mut to_send = Vec::new();
    for run in 0..5 {
        wait_master(&c, None, T).await;
        p.send_n(20, T).await;
        let m0 = p.current_master().unwrap().to_string();
        let old = cl.index_of(&m0).unwrap();
        let killed = Instant::now();
        cl.kill9(old);
        let watcher = TestClient::new(cl.namesrv);
        let m0c = m0.clone();
        let reg = tokio::spawn(async move {
            loop {
                if let Some(m) = watcher.master("TBW102").await {
                    if m != m0c {
                        return (m, Instant::now());
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let sent = p.send_n(1, T).await;
        let (m1, registered) = tokio::time::timeout(T, reg).await.unwrap().unwrap();
        let r = registered.duration_since(killed);
        let s = sent.duration_since(killed);
        println!("run {run}: killed {m0}; new master {m1} registered after {r:?}; first send acked after {s:?}");
        to_register.push(r);
        to_send.push(s);
        cl.start_member(old);
        poll("old master back as slave", T, || async {
            let addrs = c.addrs("TBW102").await;
            addrs
                .iter()
                .any(|(id, a)| *id != 0 && *a == m0)
                .then_some(())
        })
        .await;
    }
    let log = c
        .pull_all(
            c.master("TBW102").await.unwrap().parse().unwrap(),
            "FoTiming",
            0,
        )
        .await
        .unwrap();
    check_history(&p.history, &log).unwrap();
    let (rm, rx) = stats(&mut to_register);
    let (sm, sx) = stats(&mut to_send);
    println!("kill -> registration: median {rm:?}, max {rx:?}");
    println!("kill -> first acknowledged send: median {sm:?}, max {sx:?}");
}
