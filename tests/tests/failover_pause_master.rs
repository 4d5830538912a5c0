//! MP-03: SIGSTOP the master (5 s instead of 20 s: the fast profile elects a new leader in
//! about 1-2 s, so 5 s is enough to force a failover and keep the test short), then SIGCONT:
//! a new master serves during the pause; the resumed node steps down and rejoins as a slave;
//! nothing acknowledged is missing from the final log.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);
const PAUSE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp03_pause_master() {
    let cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut p = SeqProducer::new(cl.namesrv, "FoMP03", 0);
    p.send_n(50, T).await;
    let m0 = p.current_master().unwrap().to_string();
    let old = cl.index_of(&m0).unwrap();

    cl.pause(old);
    let paused = Instant::now();
    let (m1, elected) = wait_master(&c, Some(&m0), T).await;
    p.send_n(50, T).await;
    let left = PAUSE.saturating_sub(paused.elapsed());
    tokio::time::sleep(left).await; // the pause length is the scenario, not a synchronisation
    cl.resume(old);
    eprintln!(
        "MP-03: new master {m1} registered {:?} after SIGSTOP",
        elected.duration_since(paused)
    );

    poll("resumed node registered as slave", T, || async {
        let addrs = c.addrs("TBW102").await;
        (addrs.get(&0) == Some(&m1) && addrs.iter().any(|(id, a)| *id != 0 && *a == m0))
            .then_some(())
    })
    .await;
    p.send_n(50, T).await;
    let reference = c.pull_all(m1.parse().unwrap(), "FoMP03", 0).await.unwrap();
    check_history(&p.history, &reference).unwrap();
    let got = poll("resumed node caught up", T, || async {
        let got = c.pull_all(cl.members[old].addr(), "FoMP03", 0).await?;
        (got.len() == reference.len()).then_some(got)
    })
    .await;
    check_history(&p.history, &got).unwrap_or_else(|e| panic!("{e}\n{}", cl.log_tail(old)));
}
