//! MP-11: consumer offsets across failover. Offsets go through the replicated log (G5, G5a,
//! issue 26): a two-way UPDATE_CONSUMER_OFFSET is answered only once the record carrying it
//! committed, so after kill -9 of the master the new master's offset is exactly the last
//! acknowledged commit (no loss, and no re-delivery beyond what was consumed and not
//! committed); after fail-back the restarted node follows the new master's offsets.

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
    // The slaves apply the commit from the log (slave sync, every second here, no longer
    // carries it to the next master: a new master keeps only the log's offsets).
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
    // The commit of 15 was acknowledged, so it is in the log: exactly 15, not an older one.
    assert_eq!(
        off, 15,
        "new master offset {off}, the last acknowledged commit was 15"
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
