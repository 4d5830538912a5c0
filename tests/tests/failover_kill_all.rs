//! MP-07: kill -9 all three brokers at once, restart them: a master is elected again, every
//! acknowledged message is still there in order (consume queues rebuilt), sends resume.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::failover::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp07_kill_all_and_restart() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    let (m0, _) = wait_master(&c, None, T).await;
    let mut p = SeqProducer::new(cl.namesrv, "FoMP07", 0);
    p.send_n(100, T).await;
    for i in 0..3 {
        cl.kill9(i);
    }
    let restarted = Instant::now();
    for i in 0..3 {
        cl.start_member(i);
    }
    let first = p.send_n(50, T).await;
    let (m1, _) = wait_master(&c, None, T).await;
    eprintln!(
        "MP-07: sends resumed {:?} after restart (master before {m0}, after {m1})",
        first.duration_since(restarted)
    );
    let reference = c.pull_all(m1.parse().unwrap(), "FoMP07", 0).await.unwrap();
    check_history(&p.history, &reference).unwrap();
    for (i, m) in cl.members.iter().enumerate() {
        let got = poll("member caught up", T, || async {
            let got = c.pull_all(m.addr(), "FoMP07", 0).await?;
            (got.len() == reference.len()).then_some(got)
        })
        .await;
        check_history(&p.history, &got)
            .unwrap_or_else(|e| panic!("member {i}: {e}\n{}", cl.log_tail(i)));
    }
}
