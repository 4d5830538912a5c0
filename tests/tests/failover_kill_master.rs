//! MP-01: kill -9 the master under continuous sends; a new master registers and sends
//! succeed again; the old master restarts, rejoins as a slave and catches up. Then the
//! MP checks (no acknowledged message lost or truncated, per-queue order, duplicates only
//! from indeterminate answers) on every member.
//!
//! Needs the binaries: `cargo build -p broker -p namesrv --bins && cargo test -p tests --test failover_kill_master`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp01_kill_master_under_sends_then_rejoin() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut p = SeqProducer::new(cl.namesrv, "FoMP01", 0);
    p.send_n(100, T).await;
    // The master that acknowledged the last send (leadership may move during startup).
    let m0 = p.current_master().unwrap().to_string();
    let old = cl.index_of(&m0).unwrap();

    let killed = Instant::now();
    cl.kill9(old);
    // Sends continue through the failover.
    let resumed = p.send_n(100, T).await;
    let (m1, _) = wait_master(&c, Some(&m0), T).await;
    eprintln!(
        "MP-01: kill -> first acknowledged send {:?}; new master {m1}",
        resumed.duration_since(killed)
    );

    cl.start_member(old);
    // Rejoins as a slave (non-zero id) ...
    poll("old master registered as slave", T, || async {
        let addrs = c.addrs("TBW102").await;
        addrs
            .iter()
            .any(|(id, a)| *id != 0 && *a == m0)
            .then_some(())
    })
    .await;
    p.send_n(50, T).await;
    // ... and catches up: every member holds the same queue.
    let master = m1.parse().unwrap();
    let reference = c.pull_all(master, "FoMP01", 0).await.unwrap();
    check_history(&p.history, &reference).unwrap();
    for (i, m) in cl.members.iter().enumerate() {
        let got = poll("member caught up", T, || async {
            let got = c.pull_all(m.addr(), "FoMP01", 0).await?;
            (got.len() == reference.len()).then_some(got)
        })
        .await;
        check_history(&p.history, &got)
            .unwrap_or_else(|e| panic!("member {i}: {e}\n{}", cl.log_tail(i)));
    }
    eprintln!(
        "MP-01: acked {}, indeterminate {}, refused attempts {}",
        p.history.acked.len(),
        p.history.indeterminate.len(),
        p.history.refused
    );
}
