//! Goal: a DLedger broker group's route follows its role changes exactly as broker-roles.md §5
//! describes. Method: three fake brokers (one connection each) register over loopback with
//! ids -1, then 0 / selfId+1, then through a leader change (oneway registrations, as real
//! brokers send after a role change); the route and the `masterAddr` answers are checked after
//! every step.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

mod common;

use common::*;
use remoting::{ClientConfig, RemotingClient};

const N0: &str = "127.0.0.1:30911";
const N1: &str = "127.0.0.1:30921";
const N2: &str = "127.0.0.1:30931";
const TOPICS: &[(&str, i32)] = &[("TopicTest", 4), ("TBW102", 8)];

#[tokio::test]
async fn three_brokers_through_startup_and_leader_change() {
    let ns = start_namesrv(120_000, 5_000).await;
    let at = ns.local_addr();
    let client = RemotingClient::new(ClientConfig::default());
    let [b0, b1, b2] = [N0, N1, N2].map(|a| FakeBroker::new(at, GROUP, a));

    // Startup: no role yet, every member registers with id -1 (quirk Q12).
    let answer = b0.register(-1, TOPICS).await;
    assert_eq!(answer.master_addr, None);
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(-1, N0)])
    );
    b1.register(-1, TOPICS).await;
    b2.register(-1, TOPICS).await;
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(-1, N2)])
    );
    let r = route(&client, at, "TopicTest").await.unwrap();
    assert_eq!(r.queue_datas.len(), 1);
    assert_eq!(r.queue_datas[0].write_queue_nums, 4);

    // n1 wins the election: followers first (oneway after the role callback), then the leader.
    b0.register_oneway(1, TOPICS).await;
    eventually("n0 as id 1", || async {
        route_addrs(&client, at, "TopicTest").await == addrs(&[(-1, N2), (1, N0)])
    })
    .await;
    b2.register_oneway(3, TOPICS).await;
    eventually("n2 as id 3", || async {
        route_addrs(&client, at, "TopicTest").await == addrs(&[(1, N0), (3, N2)])
    })
    .await;
    b1.register_oneway(0, TOPICS).await;
    eventually("n1 as master", || async {
        route_addrs(&client, at, "TopicTest").await == addrs(&[(0, N1), (1, N0), (3, N2)])
    })
    .await;

    // The next periodic (two-way) registrations tell the slaves where the master is.
    let a0 = b0.register(1, TOPICS).await;
    assert_eq!(a0.master_addr.as_deref(), Some(N1));
    assert_eq!(a0.ha_server_addr, Some(format!("{N1}-ha")));
    let a2 = b2.register(3, TOPICS).await;
    assert_eq!(a2.master_addr.as_deref(), Some(N1));
    let a1 = b1.register(0, TOPICS).await;
    assert_eq!(a1.master_addr, None, "the master gets no master address");
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(0, N1), (1, N0), (3, N2)])
    );

    // Leader change: n1 dies (connection closes) -> its entry disappears at once.
    b1.client.shutdown().await;
    eventually("n1 removed on connection close", || async {
        route_addrs(&client, at, "TopicTest").await == addrs(&[(1, N0), (3, N2)])
    })
    .await;
    let a0 = b0.register(1, TOPICS).await;
    assert_eq!(a0.master_addr, None, "no live master during the election");

    // n2 becomes leader.
    b2.register_oneway(0, TOPICS).await;
    eventually("n2 as master", || async {
        route_addrs(&client, at, "TopicTest").await == addrs(&[(0, N2), (1, N0)])
    })
    .await;
    let a0 = b0.register(1, TOPICS).await;
    assert_eq!(a0.master_addr.as_deref(), Some(N2));

    // n1 restarts as a follower (new connection, id 2).
    let b1 = FakeBroker::new(at, GROUP, N1);
    let a1 = b1.register(2, TOPICS).await;
    assert_eq!(a1.master_addr.as_deref(), Some(N2));
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(0, N2), (1, N0), (2, N1)])
    );

    // Demotion while the old master's id-0 entry is still present: n2 steps down to id 3
    // before anyone else is leader; its id-0 entry must vanish with that registration.
    b2.register(3, TOPICS).await;
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(1, N0), (2, N1), (3, N2)])
    );
    // n0 takes over.
    b0.register(0, TOPICS).await;
    assert_eq!(
        route_addrs(&client, at, "TopicTest").await,
        addrs(&[(0, N0), (2, N1), (3, N2)])
    );
    let r = route(&client, at, "TBW102").await.unwrap();
    assert_eq!(r.queue_datas[0].write_queue_nums, 8);

    for b in [&b0, &b1, &b2] {
        b.client.shutdown().await;
    }
    eventually("group gone after every connection closed", || async {
        route(&client, at, "TopicTest").await.is_err()
    })
    .await;
    client.shutdown().await;
    ns.shutdown().await;
}
