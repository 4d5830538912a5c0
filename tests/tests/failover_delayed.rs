//! MP-12: delay-level messages (level 1 = 1 s) across a master kill: every acknowledged
//! delayed message is delivered to its real topic exactly once — none lost, and no
//! duplicates, because delivery progress is derived from the replicated log (each delivered
//! message carries its schedule origin; every member's dispatcher records it), not from the
//! 10-s slave sync of delay offsets, which RocketMQ (and G5) would allow to repeat.
//!
//! At the kill: a first batch is fully delivered (its synced delay offset is stale on the
//! slaves), a second batch, sent paced over ~1.5 s, is partly being delivered and partly still
//! pending. After the new master delivered everything, a sentinel delayed message is sent and
//! awaited: units of a level are delivered in order, so any re-delivery would show before it.
//! The restarted old master catches up to the same real-topic queue.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);
const TOPIC: &str = "FoMP12";
const DELAY_LEVEL_1: &str = "DELAY\u{1}1\u{2}";

async fn send_delayed(c: &TestClient, master: SocketAddr, seq: u64) -> bool {
    matches!(
        c.send(
            master,
            TOPIC,
            0,
            format!("seq-{seq}").as_bytes(),
            DELAY_LEVEL_1
        )
        .await,
        SendOutcome::Acked(_)
    )
}

async fn delivered(c: &TestClient, addr: SocketAddr) -> Option<HashMap<u64, usize>> {
    let msgs = c.pull_all(addr, TOPIC, 0).await?;
    let mut counts = HashMap::new();
    for m in &msgs {
        if let Some(s) = seq_of(m) {
            *counts.entry(s).or_insert(0) += 1;
        }
    }
    Some(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp12_delayed_messages_across_failover_exactly_once() {
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut warmup = SeqProducer::new(cl.namesrv, "FoMP12Warmup", 0);
    warmup.send_n(5, T).await;
    let master = warmup.current_master().unwrap();
    let m0 = master.to_string();
    let old = cl.index_of(&m0).unwrap();

    // Batch 1: delivered before the kill.
    let mut acked = Vec::new();
    for seq in 0..10 {
        if send_delayed(&c, master, seq).await {
            acked.push(seq);
        }
    }
    poll("first batch delivered", T, || async {
        let d = delivered(&c, master).await?;
        acked.iter().all(|s| d.contains_key(s)).then_some(())
    })
    .await;
    // Batch 2: paced over ~1.5 s, so at the kill the oldest are due (being delivered) and
    // the newest are pending.
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    for seq in 10..40 {
        tick.tick().await;
        if send_delayed(&c, master, seq).await {
            acked.push(seq);
        }
    }
    assert!(
        acked.len() >= 35,
        "too few delayed sends acknowledged: {}",
        acked.len()
    );
    let before = delivered(&c, master).await.unwrap();
    cl.kill9(old);
    let pending = acked.iter().filter(|s| !before.contains_key(s)).count();
    assert!(pending > 0, "nothing pending at the kill");

    let (m1, _) = wait_master(&c, Some(&m0), T).await;
    let new_master: SocketAddr = m1.parse().unwrap();
    poll(
        "all delayed messages delivered by the new master",
        T,
        || async {
            let d = delivered(&c, new_master).await?;
            acked.iter().all(|s| d.contains_key(s)).then_some(())
        },
    )
    .await;
    // Sentinel: delivered after every earlier unit of level 1, re-deliveries included.
    let sentinel = 1_000;
    poll("sentinel accepted", T, || async {
        send_delayed(&c, new_master, sentinel).await.then_some(())
    })
    .await;
    let d = poll("sentinel delivered", T, || async {
        let d = delivered(&c, new_master).await?;
        d.contains_key(&sentinel).then_some(d)
    })
    .await;
    let dups: Vec<(u64, usize)> = d
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(s, n)| (*s, *n))
        .collect();
    assert!(
        dups.is_empty(),
        "delivered more than once (seq, times): {dups:?}"
    );
    for s in &acked {
        assert_eq!(d.get(s), Some(&1), "seq {s}");
    }

    // The restarted old master holds the same real-topic queue.
    cl.start_member(old);
    let total = d.values().sum::<usize>();
    let restarted = cl.members[old].addr();
    let r = poll("restarted node caught up", T, || async {
        let r = delivered(&c, restarted).await?;
        (r.values().sum::<usize>() == total).then_some(r)
    })
    .await;
    assert_eq!(r, d);
    eprintln!(
        "MP-12: {} delayed messages ({} pending at the kill), each delivered once; \
         duplicates 0; wall {:?}",
        acked.len(),
        pending,
        started.elapsed()
    );
}
