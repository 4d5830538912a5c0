//! MP-12: delay-level messages (level 1 = 1 s) across a master kill: every acknowledged
//! delayed message is delivered to its real topic at least once and at most twice (the new
//! master resumes from the last synced delay offset), none lost.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tests::failover::*;

const T: Duration = Duration::from_secs(30);

async fn send_delayed(c: &TestClient, master: SocketAddr, from: u64, n: u64) -> Vec<u64> {
    let props = "DELAY\u{1}1\u{2}";
    let mut acked = Vec::new();
    for seq in from..from + n {
        if let SendOutcome::Acked(_) = c
            .send(master, "FoMP12", 0, format!("seq-{seq}").as_bytes(), props)
            .await
        {
            acked.push(seq);
        }
    }
    acked
}

async fn delivered(c: &TestClient, addr: SocketAddr) -> Option<HashMap<u64, usize>> {
    let msgs = c.pull_all(addr, "FoMP12", 0).await?;
    let mut counts = HashMap::new();
    for m in &msgs {
        if let Some(s) = seq_of(m) {
            *counts.entry(s).or_insert(0) += 1;
        }
    }
    Some(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp12_delayed_messages_across_failover() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut warmup = SeqProducer::new(cl.namesrv, "FoMP12Warmup", 0);
    warmup.send_n(5, T).await;
    let master = warmup.current_master().unwrap();
    let m0 = master.to_string();
    let old = cl.index_of(&m0).unwrap();
    // A first batch delivered before the kill, a second one still pending at the kill.
    let mut acked = send_delayed(&c, master, 0, 10).await;
    poll("first batch delivered", T, || async {
        let d = delivered(&c, master).await?;
        acked.iter().all(|s| d.contains_key(s)).then_some(())
    })
    .await;
    acked.extend(send_delayed(&c, master, 10, 10).await);
    assert!(
        acked.len() >= 15,
        "too few delayed sends acknowledged: {}",
        acked.len()
    );
    cl.kill9(old);
    let (m1, _) = wait_master(&c, Some(&m0), T).await;
    let new_master: SocketAddr = m1.parse().unwrap();
    let d = poll(
        "all delayed messages delivered by the new master",
        T,
        || async {
            let d = delivered(&c, new_master).await?;
            acked.iter().all(|s| d.contains_key(s)).then_some(d)
        },
    )
    .await;
    for s in &acked {
        let n = d[s];
        assert!((1..=2).contains(&n), "seq {s} delivered {n} times");
    }
    let dups = acked.iter().filter(|s| d[*s] == 2).count();
    eprintln!(
        "MP-12: {} delayed messages delivered, {dups} twice",
        acked.len()
    );
}
