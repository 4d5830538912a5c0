//! MP-11: consumer offsets across failover. Offsets committed to the master reach the slaves
//! by slave sync; after kill -9 of the master the new master's offset is never ahead of the
//! last commit (no loss) and at most one sync interval behind (bounded duplicates); after
//! fail-back the restarted node follows the new master's offsets.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tests::failover::*;

const T: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp11_consumer_offsets_across_failover() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    wait_master(&c, None, T).await;
    let mut p = SeqProducer::new(cl.namesrv, "FoMP11", 0);
    p.send_n(30, T).await;
    let master = p.current_master().unwrap();
    let m0 = master.to_string();
    let old = cl.index_of(&m0).unwrap();
    assert!(c.commit_offset(master, "FoG", "FoMP11", 0, 10).await);
    // Slaves learn the master address from a registration answer (first periodic one after
    // ≤ 10 s), then sync every second.
    let slaves: Vec<SocketAddr> = (0..3)
        .filter(|i| *i != old)
        .map(|i| cl.members[i].addr())
        .collect();
    for s in &slaves {
        poll("offset synced to slave", T, || async {
            (c.query_offset(*s, "FoG", "FoMP11", 0).await == Some(10)).then_some(())
        })
        .await;
    }
    assert!(c.commit_offset(master, "FoG", "FoMP11", 0, 15).await);
    cl.kill9(old);
    let (m1, _) = wait_master(&c, Some(&m0), T).await;
    let new_master: SocketAddr = m1.parse().unwrap();
    let off = poll("offset on the new master", T, || {
        c.query_offset(new_master, "FoG", "FoMP11", 0)
    })
    .await;
    assert!(
        (10..=15).contains(&off),
        "new master offset {off} outside [10, 15]"
    );
    eprintln!("MP-11: new master {m1} resumes the group at offset {off} (last commit 15)");

    // Fail back: the restarted node becomes a slave and follows the new master's offsets.
    assert!(c.commit_offset(new_master, "FoG", "FoMP11", 0, 20).await);
    cl.start_member(old);
    let restarted = cl.members[old].addr();
    poll("restarted node synced", T, || async {
        (c.query_offset(restarted, "FoG", "FoMP11", 0).await == Some(20)).then_some(())
    })
    .await;
    p.send_n(10, T).await;
    let log = c.pull_all(new_master, "FoMP11", 0).await.unwrap();
    check_history(&p.history, &log).unwrap();
}
