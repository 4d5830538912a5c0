//! MP-01 (CI count): kill -9 the master 3 times under load, each time restarting the killed
//! node 10 s after the kill, and check after each kill: a new master registers within the
//! goal, the first send succeeds soon after, the restarted node rejoins as a slave and
//! catches up (≤ 30 s). Workload: 4 producers at ~50 msg/s each over 8 queues (each producer
//! owns 2 queues and sends them in sequence order, retrying a sequence number until it is
//! acknowledged), one long-polling ("push") consumer and one plain pull consumer, both
//! following the master. At the end, on every member and for both consumers: 0 acknowledged
//! messages lost, per-queue order kept, duplicates only of indeterminate answers, and each
//! consumer saw exactly the final log.
//!
//! `cargo test -p tests --test failover_kill_master -- --nocapture` prints the figures.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);
const TOPIC: &str = "FoMP01";
const KILLS: usize = 3;
/// The catalogue's restart delay (the group runs on two members meanwhile).
const RESTART_AFTER: Duration = Duration::from_secs(10);
const PRODUCERS: i32 = 4;
/// Each producer sends one message to each of its two queues per tick: 50 msg/s.
const TICK: Duration = Duration::from_millis(40);
/// G6 (new master ≤ 10 s after the kill) and the MP-01 first-send goal (≤ 2 s after it).
const NEW_MASTER_GOAL: Duration = Duration::from_secs(10);
const FIRST_SEND_GOAL: Duration = Duration::from_secs(2);
const CATCH_UP_GOAL: Duration = Duration::from_secs(30);

/// The first acknowledgement by a master other than the killed one after `since`.
struct FirstAck {
    since: Instant,
    not_from: Option<SocketAddr>,
    first: Option<Instant>,
}

async fn produce(
    namesrv: SocketAddr,
    queues: [i32; 2],
    stop: Arc<AtomicBool>,
    first: Arc<Mutex<FirstAck>>,
) -> Vec<SeqProducer> {
    let mut ps: Vec<SeqProducer> = queues
        .iter()
        .map(|q| SeqProducer::new(namesrv, TOPIC, *q))
        .collect();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        for p in &mut ps {
            if p.step().await {
                let now = Instant::now();
                let mut f = first.lock().unwrap();
                if f.first.is_none() && now > f.since && p.current_master() != f.not_from {
                    f.first = Some(now);
                }
            }
        }
    }
    ps
}

async fn max_offsets(c: &TestClient, addr: SocketAddr) -> Option<Vec<i64>> {
    let mut v = Vec::new();
    for q in 0..TOPIC_QUEUES {
        v.push(c.max_offset(addr, TOPIC, q).await?);
    }
    Some(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp01_kill_master_three_times_under_load() {
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;

    let stop = Arc::new(AtomicBool::new(false));
    let first = Arc::new(Mutex::new(FirstAck {
        since: Instant::now(),
        not_from: None,
        first: None,
    }));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            tokio::spawn(produce(
                cl.namesrv,
                [2 * p, 2 * p + 1],
                Arc::clone(&stop),
                Arc::clone(&first),
            ))
        })
        .collect();
    let (targets_tx, targets_rx) = tokio::sync::watch::channel(None);
    let push = spawn_consumer(
        cl.namesrv,
        "FoMP01Push",
        TOPIC,
        TOPIC_QUEUES,
        ConsumerStyle::LongPoll,
        targets_rx.clone(),
    );
    let pull = spawn_consumer(
        cl.namesrv,
        "FoMP01Pull",
        TOPIC,
        TOPIC_QUEUES,
        ConsumerStyle::PlainPull,
        targets_rx,
    );
    // Load on every queue before the first kill.
    let (m, _) = wait_master(&c, None, T).await;
    poll("every queue written", T, || async {
        let o = max_offsets(&c, m.parse().ok()?).await?;
        o.iter().all(|n| *n >= 10).then_some(())
    })
    .await;

    let mut figures = Vec::new();
    for kill in 0..KILLS {
        let (m0, _) = wait_master(&c, None, T).await;
        let old = cl.index_of(&m0).unwrap();
        let killed = Instant::now();
        *first.lock().unwrap() = FirstAck {
            since: killed,
            not_from: m0.parse().ok(),
            first: None,
        };
        cl.kill9(old);
        let (m1, registered) = wait_master(&c, Some(&m0), T).await;
        let sent = poll("first acknowledged send after the kill", T, || async {
            first.lock().unwrap().first
        })
        .await;
        let to_master = registered.duration_since(killed);
        let to_send = sent.saturating_duration_since(killed);
        assert!(
            to_master <= NEW_MASTER_GOAL,
            "kill {kill}: new master after {to_master:?}"
        );
        assert!(
            sent.saturating_duration_since(registered) <= FIRST_SEND_GOAL,
            "kill {kill}: first send {to_send:?} after the kill, master registered after {to_master:?}"
        );

        // The scenario's restart delay, then catch-up to what the master held at the restart.
        tokio::time::sleep_until((killed + RESTART_AFTER).into()).await;
        let master: SocketAddr = wait_master(&c, None, T).await.0.parse().unwrap();
        let want = poll("master offsets", T, || max_offsets(&c, master)).await;
        let restarted = Instant::now();
        cl.start_member(old);
        let addr = cl.members[old].addr();
        poll(
            "restarted node registered as slave and caught up",
            CATCH_UP_GOAL,
            || async {
                let slave = c
                    .addrs("TBW102")
                    .await
                    .iter()
                    .any(|(id, a)| *id != 0 && *a == m0);
                let have = max_offsets(&c, addr).await?;
                (slave && have.iter().zip(&want).all(|(h, w)| h >= w)).then_some(())
            },
        )
        .await;
        let caught_up = restarted.elapsed();
        eprintln!(
            "MP-01 kill {kill}: killed {m0}; new master {m1} registered after {to_master:?}; \
             first acknowledged send after {to_send:?}; restarted node caught up {caught_up:?} \
             after its restart (to the {} messages the master held then)",
            want.iter().sum::<i64>()
        );
        figures.push((to_master, to_send, caught_up));
    }

    stop.store(true, Ordering::Relaxed);
    let mut histories: BTreeMap<i32, History> = BTreeMap::new();
    for p in producers {
        for sp in p.await.unwrap() {
            histories.insert(sp.queue_id, sp.history);
        }
    }
    let master: SocketAddr = wait_master(&c, None, T).await.0.parse().unwrap();
    let mut logs = BTreeMap::new();
    for q in 0..TOPIC_QUEUES {
        logs.insert(q, c.pull_all(master, TOPIC, q).await.unwrap());
    }
    for (q, log) in &logs {
        check_history(&histories[q], log).unwrap_or_else(|e| panic!("master, queue {q}: {e}"));
    }
    for (i, m) in cl.members.iter().enumerate() {
        for (q, log) in &logs {
            let got = poll("member caught up", T, || async {
                let got = c.pull_all(m.addr(), TOPIC, *q).await?;
                (got.len() == log.len()).then_some(got)
            })
            .await;
            check_history(&histories[q], &got)
                .unwrap_or_else(|e| panic!("member {i}, queue {q}: {e}\n{}", cl.log_tail(i)));
        }
    }
    // Consumers drain to the end of every queue, then must have seen exactly the log.
    targets_tx
        .send(Some(logs.values().map(|l| l.len() as i64).collect()))
        .unwrap();
    for (name, handles) in [("push consumer", push), ("pull consumer", pull)] {
        let consumed = tokio::time::timeout(T, join_consumer(handles))
            .await
            .unwrap_or_else(|_| panic!("{name} did not drain the queues"));
        check_consumed(name, &consumed, &logs).unwrap();
        eprintln!(
            "MP-01 {name}: {} messages, {} failed pulls across the failovers",
            consumed.queues.values().map(Vec::len).sum::<usize>(),
            consumed.failed_pulls
        );
    }

    let acked: usize = histories.values().map(|h| h.acked.len()).sum();
    let indeterminate: usize = histories.values().map(|h| h.indeterminate.len()).sum();
    let refused: usize = histories.values().map(|h| h.refused).sum();
    let mut duplicates = 0;
    for log in logs.values() {
        let mut n: HashMap<u64, usize> = HashMap::new();
        for m in log {
            *n.entry(seq_of(m).unwrap()).or_default() += 1;
        }
        duplicates += n.values().filter(|c| **c > 1).map(|c| c - 1).sum::<usize>();
    }
    let max =
        |f: fn(&(Duration, Duration, Duration)) -> Duration| figures.iter().map(f).max().unwrap();
    eprintln!(
        "MP-01: {KILLS} kills; max kill->new master {:?}, max kill->first send {:?}, max catch-up {:?}; \
         acked {acked}, indeterminate {indeterminate}, refused attempts {refused}, duplicates {duplicates}; \
         wall {:?}",
        max(|f| f.0),
        max(|f| f.1),
        max(|f| f.2),
        started.elapsed()
    );
    let t = Instant::now();
    drop(cl);
    eprintln!("MP-01: processes stopped in {:?}", t.elapsed());
}
