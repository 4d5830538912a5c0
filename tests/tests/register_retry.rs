//! A new master whose registration fails (the name server dropped the connection) registers
//! again within about a second, not one registration period later (MP-12 hardening: the
//! registration after a role change is what makes the new master reachable).

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::broker::Broker;
use broker::config::BrokerConfig;
use broker::context::ServingRole;
use broker::controller::NoRoleServices;
use broker::store::mem_log::MemLog;
use tests::failover::{poll, TestClient, GROUP};

/// The shortest registration period a broker accepts (`registerNameServerPeriod` is clamped).
const PERIOD: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_master_registration_is_retried_before_the_next_period() {
    let ns_port = tests::cluster::free_port();
    let ns_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ns_port));
    // Stand-in for a name server that fails every registration: accepts and hangs up.
    let refuser = TcpListener::bind(ns_addr).unwrap();
    refuser.set_nonblocking(true).unwrap();
    let attempts = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hang_up = {
        let (attempts, stop) = (Arc::clone(&attempts), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match refuser.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = s.read(&mut [0u8; 64]);
                        attempts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })
    };

    let dir = tempfile::tempdir().unwrap();
    let port = tests::cluster::free_listen_port();
    let cfg = BrokerConfig::from_properties(&format!(
        "brokerClusterName=FoCluster\nbrokerName={GROUP}\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\n\
         namesrvAddr={ns_addr}\nstorePathRootDir={}\nenableDLegerCommitLog=true\n\
         dLegerGroup={GROUP}\ndLegerSelfId=n0\ndLegerPeers=n0-127.0.0.1:1\n\
         registerNameServerPeriod={}\n",
        dir.path().display(),
        PERIOD.as_millis()
    ))
    .unwrap();
    let broker = Broker::start_with_log(
        cfg,
        Arc::new(MemLog::new_leader()),
        Arc::new(NoRoleServices),
    )
    .await
    .unwrap();
    poll("master role", PERIOD, || async {
        (broker.context().role.role() == ServingRole::Master).then_some(())
    })
    .await;
    poll("a failed registration", PERIOD, || async {
        (attempts.load(Ordering::Relaxed) > 0).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    hang_up.join().unwrap();

    // The real name server comes up on the same address.
    let ns = namesrv::NameServer::start(namesrv::NameServerConfig {
        listen_addr: ns_addr,
        ..Default::default()
    })
    .await
    .unwrap();
    let up = Instant::now();
    let c = TestClient::new(ns_addr);
    let master = poll("the master registered", PERIOD, || c.master("TBW102")).await;
    assert_eq!(master, format!("127.0.0.1:{port}"));
    let took = up.elapsed();
    assert!(
        took < PERIOD / 2,
        "registered {took:?} after the name server came up (period {PERIOD:?})"
    );
    eprintln!("master registered {took:?} after the name server came up");
    broker.shutdown().await;
    ns.shutdown().await;
}
