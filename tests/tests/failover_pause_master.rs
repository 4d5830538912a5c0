//! MP-03: SIGSTOP the master for 20 s under sends, then SIGCONT. Checks: a new master
//! registers ≤ 10 s after the pause; the resumed node steps down ≤ 2 s after SIGCONT (it no
//! longer reports itself active — its writes are refused from then on — and then registers as
//! a slave); nothing it acknowledged before, during or after the pause is missing from the
//! final log; the usual MP checks on every member.
//!
//! Two writers: a sequential producer that follows the route (queue 0), and a prober that
//! keeps sending to the paused node itself (queue 1), one fresh sequence number per attempt,
//! so every answer the old master gives during and after the pause is recorded.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);
const TOPIC: &str = "FoMP03";
const PAUSE: Duration = Duration::from_secs(20);
const NEW_MASTER_GOAL: Duration = Duration::from_secs(10);
const STEP_DOWN_GOAL: Duration = Duration::from_secs(2);

/// Sends to `target` only, a new sequence number per attempt, until `stop`.
async fn probe(namesrv: SocketAddr, target: SocketAddr, stop: Arc<AtomicBool>) -> History {
    let c = TestClient::new(namesrv);
    let mut h = History::default();
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        let body = format!("seq-{seq}");
        match c.send(target, TOPIC, 1, body.as_bytes(), "").await {
            SendOutcome::Acked(off) => {
                h.acked.insert(seq, off);
            }
            SendOutcome::Indeterminate => {
                h.indeterminate.insert(seq);
            }
            SendOutcome::Refused(_) => h.refused += 1,
        }
        seq += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp03_pause_master_20s() {
    let started = Instant::now();
    let cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut p = SeqProducer::new(cl.namesrv, TOPIC, 0);
    p.send_n(50, T).await;
    let m0 = p.current_master().unwrap().to_string();
    let old = cl.index_of(&m0).unwrap();
    let old_addr = cl.members[old].addr();

    let stop = Arc::new(AtomicBool::new(false));
    let prober = tokio::spawn(probe(cl.namesrv, old_addr, Arc::clone(&stop)));
    // The prober's writes are being acknowledged by the master before the pause.
    poll("prober acknowledged", T, || async {
        (c.max_offset(old_addr, TOPIC, 1).await? >= 5).then_some(())
    })
    .await;

    cl.pause(old);
    let paused = Instant::now();
    let (m1, elected) = wait_master(&c, Some(&m0), T).await;
    let to_master = elected.duration_since(paused);
    assert!(
        to_master <= NEW_MASTER_GOAL,
        "new master after {to_master:?}"
    );
    // Sends continue on the new master during the pause.
    p.send_n(50, T).await;
    tokio::time::sleep_until((paused + PAUSE).into()).await; // the pause is the scenario
    cl.resume(old);
    let resumed = Instant::now();

    let watcher = TestClient::new(cl.namesrv);
    let stepped_down = poll("resumed node steps down", T, || async {
        (!watcher
            .is_master(old_addr, Duration::from_millis(500))
            .await?)
            .then(Instant::now)
    })
    .await;
    // The route keeps the new master as id 0 while the resumed node re-registers as a slave
    // (a stale "id 0" registration from the resumed node would replace it, then vanish).
    let missing = std::sync::atomic::AtomicUsize::new(0);
    let registered = poll("resumed node registered as slave", T, || async {
        let addrs = c.addrs("TBW102").await;
        if addrs.get(&0) != Some(&m1) {
            missing.fetch_add(1, Ordering::Relaxed);
        }
        (addrs.get(&0) == Some(&m1) && addrs.iter().any(|(id, a)| *id != 0 && *a == m0))
            .then(Instant::now)
    })
    .await;
    let step_down = stepped_down.duration_since(resumed);
    let to_registered = registered.duration_since(resumed);
    let master_missing = missing.load(Ordering::Relaxed);
    assert!(
        step_down <= STEP_DOWN_GOAL,
        "resumed node stepped down only {step_down:?} after SIGCONT"
    );
    assert!(
        to_registered <= STEP_DOWN_GOAL && master_missing == 0,
        "resumed node registered as slave {to_registered:?} after SIGCONT; \
         {master_missing} route reads without the new master meanwhile"
    );

    // Writes after the step-down: the prober keeps trying the old node (now refused).
    p.send_n(50, T).await;
    stop.store(true, Ordering::Relaxed);
    let probe = prober.await.unwrap();
    let master: SocketAddr = m1.parse().unwrap();
    let q0 = c.pull_all(master, TOPIC, 0).await.unwrap();
    let q1 = c.pull_all(master, TOPIC, 1).await.unwrap();
    check_history(&p.history, &q0).unwrap();
    // Every write the old master acknowledged (before, during or after the pause) is there.
    check_history(&probe, &q1).unwrap();
    for (i, m) in cl.members.iter().enumerate() {
        for (q, log, h) in [(0, &q0, &p.history), (1, &q1, &probe)] {
            let got = poll("member caught up", T, || async {
                let got = c.pull_all(m.addr(), TOPIC, q).await?;
                (got.len() == log.len()).then_some(got)
            })
            .await;
            check_history(h, &got)
                .unwrap_or_else(|e| panic!("member {i}, queue {q}: {e}\n{}", cl.log_tail(i)));
        }
    }
    eprintln!(
        "MP-03: paused {m0} for {PAUSE:?}; new master {m1} registered {to_master:?} after SIGSTOP; \
         resumed node stepped down {step_down:?} and registered as slave {to_registered:?} after SIGCONT; \
         prober (old master only): {} acked, {} indeterminate, {} refused; producer: acked {}, \
         indeterminate {}; wall {:?}",
        probe.acked.len(),
        probe.indeterminate.len(),
        probe.refused,
        p.history.acked.len(),
        p.history.indeterminate.len(),
        started.elapsed()
    );
}
