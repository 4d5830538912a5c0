//! Role hooks: which services run in which role across repeated transitions, and R13 — a
//! new master pulls consumer and delay offsets from a still-reachable previous master before
//! it accepts writes.

#![allow(clippy::unwrap_used)]

mod roles_common;

use broker::context::ServingRole;
use broker::store::commit_log::LedgerRole;
use broker::store::mem_log::MemLog;
use roles_common::*;

#[tokio::test]
async fn services_follow_the_role() {
    let log = MemLog::new_leader();
    let node = Node::start(log.clone(), "").await;
    node.wait_role(ServingRole::Master).await;
    assert_eq!(node.services.running(), (true, true, false));
    for round in 0..3 {
        let term = 2 + round * 3;
        log.set_role(LedgerRole::Follower, term);
        node.wait_role(ServingRole::Slave).await;
        assert_eq!(node.services.running(), (false, false, true));
        // Repeated callbacks keep the single slave-sync task.
        log.set_role(LedgerRole::Candidate, term + 1);
        log.set_role(LedgerRole::Follower, term + 1);
        assert_eq!(node.services.running(), (false, false, true));
        log.set_role(LedgerRole::Leader, term + 2);
        node.wait_role(ServingRole::Master).await;
        assert_eq!(node.services.running(), (true, true, false));
    }
    node.shutdown().await;
}

#[tokio::test]
async fn new_master_pulls_offsets_from_the_previous_master_before_serving() {
    let old = Node::start(MemLog::new_leader(), "").await;
    old.wait_role(ServingRole::Master).await;
    let log = MemLog::new_follower();
    log.set_role(LedgerRole::Follower, 1);
    // Periodic sync effectively off: only the change-to-master pull can copy the offsets.
    let new = Node::start(log.clone(), "slaveSyncFirstDelayMs=600000\n").await;
    new.wait_role(ServingRole::Slave).await;
    new.ctx().role.set_master_addr(Some(old.addr.to_string()));
    old.ctx().offsets.commit_offset("G", "T", 0, 1234);
    old.ctx().delay_offsets.update(1, 77);

    log.set_role(LedgerRole::Leader, 2);
    new.wait_role(ServingRole::Master).await;
    // Checked right when the role flipped: the pull happened inside the transition.
    assert_eq!(new.ctx().offsets.query_offset("G", "T", 0), Some(1234));
    assert_eq!(new.ctx().delay_offsets.get(1), Some(77));
    new.shutdown().await;
    old.shutdown().await;
}

#[tokio::test]
async fn unreachable_previous_master_does_not_block_the_transition() {
    let log = MemLog::new_follower();
    log.set_role(LedgerRole::Follower, 1);
    let node = Node::start(log.clone(), "masterOffsetPullTimeoutMs=300\n").await;
    node.wait_role(ServingRole::Slave).await;
    let dead = free_port();
    node.ctx()
        .role
        .set_master_addr(Some(format!("127.0.0.1:{dead}")));
    let t = std::time::Instant::now();
    log.set_role(LedgerRole::Leader, 2);
    node.wait_role(ServingRole::Master).await;
    assert!(t.elapsed() < std::time::Duration::from_secs(3));
    node.shutdown().await;
}
