//! MP-12: delayed and retry messages across a master kill. Every acknowledged delay-level-1
//! message (1 s) is delivered to its real topic exactly once, and every message a consumer
//! fails once (10 %: sequence numbers divisible by 10) comes back exactly once through
//! `%RETRY%<group>` after delay level 3 (10 s) — none lost, no duplicates: delivery progress
//! is derived from the replicated log (each delivered message carries its schedule origin,
//! every member's dispatcher records it), not only from the slave sync of delay offsets, which
//! RocketMQ (and G5) would allow to repeat up to one sync interval.
//!
//! At the kill: a first batch is delivered and consumed (its failures are pending in level 3),
//! a second batch, sent paced over ~1.5 s, is partly being delivered and partly pending in
//! level 1. After the kill the consumer continues on the new master (failing 10 % again).
//! Checks run once later units have been delivered — a level's units are delivered in order,
//! so a re-delivery would show before them: a level-1 sentinel, and the retries failed after
//! the kill for level 3. The restarted old master catches up to the same queues.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(40);
const TOPIC: &str = "FoMP12";
const GROUP: &str = "FoMP12G";
const RETRY: &str = "%RETRY%FoMP12G";
const DELAY_LEVEL_1: &str = "DELAY\u{1}1\u{2}";
/// The retry delay level a failing consumer asks for (10 s).
const RETRY_LEVEL: i32 = 3;

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

/// How often each sequence number is in `topic` queue 0 on `addr`.
async fn counts(c: &TestClient, addr: SocketAddr, topic: &str) -> Option<HashMap<u64, usize>> {
    let msgs = c.pull_all(addr, topic, 0).await?;
    let mut counts = HashMap::new();
    for m in &msgs {
        if let Some(s) = seq_of(m) {
            *counts.entry(s).or_insert(0) += 1;
        }
    }
    Some(counts)
}

/// A consumer of `TOPIC` queue 0 that fails every tenth sequence number once.
struct FailingConsumer {
    next: i64,
    failed: BTreeSet<u64>,
}

impl FailingConsumer {
    /// Consumes what `addr` has from `next` on; failed messages are sent back (retried until
    /// acknowledged by `addr`).
    async fn consume(&mut self, c: &TestClient, addr: SocketAddr) -> Vec<u64> {
        let msgs = c.pull_all(addr, TOPIC, 0).await.unwrap();
        let mut failed_now = Vec::new();
        let from = self.next;
        for m in msgs.iter().filter(|m| m.queue_offset >= from) {
            let seq = seq_of(m).unwrap();
            if seq.is_multiple_of(10) && !self.failed.contains(&seq) {
                poll("send-back acknowledged", T, || async {
                    c.send_back(addr, GROUP, m.physical_offset, RETRY_LEVEL, TOPIC)
                        .await
                        .then_some(())
                })
                .await;
                self.failed.insert(seq);
                failed_now.push(seq);
            }
            self.next = m.queue_offset + 1;
        }
        failed_now
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp12_delayed_and_retry_messages_across_failover_exactly_once() {
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut warmup = SeqProducer::new(cl.namesrv, "FoMP12Warmup", 0);
    warmup.send_n(5, T).await;
    let master = warmup.current_master().unwrap();
    let m0 = master.to_string();
    let old = cl.index_of(&m0).unwrap();
    let mut consumer = FailingConsumer {
        next: 0,
        failed: BTreeSet::new(),
    };

    // Batch 1: delivered and consumed before the kill.
    let mut acked = Vec::new();
    for seq in 0..10 {
        if send_delayed(&c, master, seq).await {
            acked.push(seq);
        }
    }
    poll("first batch delivered", T, || async {
        let d = counts(&c, master, TOPIC).await?;
        acked.iter().all(|s| d.contains_key(s)).then_some(())
    })
    .await;
    consumer.consume(&c, master).await;
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
    consumer.consume(&c, master).await;
    let failed_before_kill = consumer.failed.len();
    let before = counts(&c, master, TOPIC).await.unwrap();
    cl.kill9(old);
    let pending = acked.iter().filter(|s| !before.contains_key(s)).count();
    assert!(pending > 0, "nothing pending at the kill");
    assert!(failed_before_kill > 0, "no retry pending at the kill");

    let (m1, _) = wait_master(&c, Some(&m0), T).await;
    let new_master: SocketAddr = m1.parse().unwrap();
    poll(
        "all delayed messages delivered by the new master",
        T,
        || async {
            let d = counts(&c, new_master, TOPIC).await?;
            acked.iter().all(|s| d.contains_key(s)).then_some(())
        },
    )
    .await;
    let failed_after_kill = consumer.consume(&c, new_master).await;
    assert!(!failed_after_kill.is_empty(), "no failure after the kill");
    // Level-1 sentinel: delivered after every earlier level-1 unit, re-deliveries included.
    let sentinel = 1_000;
    poll("sentinel accepted", T, || async {
        send_delayed(&c, new_master, sentinel).await.then_some(())
    })
    .await;
    let d = poll("sentinel delivered", T, || async {
        let d = counts(&c, new_master, TOPIC).await?;
        d.contains_key(&sentinel).then_some(d)
    })
    .await;
    // Level 3: the retries failed after the kill come after those pending at the kill.
    let r = poll("every failed message retried", T, || async {
        let r = counts(&c, new_master, RETRY).await?;
        consumer
            .failed
            .iter()
            .all(|s| r.contains_key(s))
            .then_some(r)
    })
    .await;
    for (what, counts) in [("delivered", &d), ("retried", &r)] {
        let dups: Vec<(u64, usize)> = counts
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(s, n)| (*s, *n))
            .collect();
        assert!(
            dups.is_empty(),
            "{what} more than once (seq, times): {dups:?}"
        );
    }
    for s in &acked {
        assert_eq!(d.get(s), Some(&1), "seq {s}");
    }
    assert_eq!(
        r.keys().copied().collect::<BTreeSet<u64>>(),
        consumer.failed,
        "retry topic holds exactly the failed messages"
    );

    // The restarted old master holds the same queues.
    cl.start_member(old);
    let restarted = cl.members[old].addr();
    for (topic, want) in [(TOPIC, &d), (RETRY, &r)] {
        let total = want.values().sum::<usize>();
        let got = poll("restarted node caught up", T, || async {
            let got = counts(&c, restarted, topic).await?;
            (got.values().sum::<usize>() == total).then_some(got)
        })
        .await;
        assert_eq!(&got, want, "{topic} on the restarted node");
    }
    eprintln!(
        "MP-12: {} delayed messages ({} pending at the kill), each delivered once; {} failed \
         once and retried once ({} pending in level {RETRY_LEVEL} at the kill); duplicates 0; \
         wall {:?}",
        acked.len(),
        pending,
        consumer.failed.len(),
        failed_before_kill,
        started.elapsed()
    );
}
