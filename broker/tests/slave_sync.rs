//! Slave sync between two in-process brokers: the slave copies the master's topic configs,
//! consumer offsets, delay offsets and subscription groups, applies and persists them.

#![allow(clippy::unwrap_used)]

mod roles_common;

use broker::context::ServingRole;
use broker::store::commit_log::LedgerRole;
use broker::store::mem_log::MemLog;
use broker::store::topics::{perm, topic_config};
use roles_common::*;

fn follower() -> MemLog {
    let log = MemLog::new_follower();
    log.set_role(LedgerRole::Follower, 1);
    log
}

#[tokio::test]
async fn slave_copies_master_metadata_and_persists_it() {
    let master = Node::start(MemLog::new_leader(), "").await;
    master.wait_role(ServingRole::Master).await;
    let slave = Node::start(
        follower(),
        "slaveSyncIntervalMs=50\nslaveSyncFirstDelayMs=0\n",
    )
    .await;
    slave.wait_role(ServingRole::Slave).await;
    assert_eq!(slave.services.running(), (false, false, true));

    let m = master.ctx();
    m.topics
        .update(topic_config("SyncT", 6, perm::READ | perm::WRITE))
        .unwrap();
    m.offsets.commit_offset("SyncG", "SyncT", 2, 41);
    m.delay_offsets.update(3, 17);
    m.subscriptions.find_or_create("SyncG").unwrap().unwrap();

    // Nothing happens until the master address is known (from the name server in production).
    let s = slave.ctx();
    assert!(s.topics.get("SyncT").is_none());
    s.role.set_master_addr(Some(master.addr.to_string()));
    wait_for("topic synced", || {
        s.topics
            .get("SyncT")
            .is_some_and(|t| t.write_queue_nums == 6)
    })
    .await;
    wait_for("offset synced", || {
        s.offsets.query_offset("SyncG", "SyncT", 2) == Some(41)
    })
    .await;
    wait_for("delay offset synced", || s.delay_offsets.get(3) == Some(17)).await;
    wait_for("group synced", || s.subscriptions.get("SyncG").is_some()).await;
    assert_eq!(s.topics.data_version(), m.topics.data_version());

    // Later master changes follow; the files on disk hold them, except consumer offsets:
    // `consumerOffset.json` is what the replicated log made the table (the same on every
    // member), and synced offsets are only answered on top of it.
    m.offsets.commit_offset("SyncG", "SyncT", 2, 99);
    wait_for("offset update synced", || {
        s.offsets.query_offset("SyncG", "SyncT", 2) == Some(99)
    })
    .await;
    let cfg_dir = slave.dir.path().join("config");
    wait_for("files persisted", || {
        let read = |f: &str| std::fs::read_to_string(cfg_dir.join(f)).unwrap_or_default();
        read("topics.json").contains("SyncT")
            && read("delayOffset.json").contains("17")
            && read("subscriptionGroup.json").contains("SyncG")
    })
    .await;
    slave.shutdown().await;
    master.shutdown().await;
}

#[tokio::test]
async fn slave_sync_ignores_its_own_address() {
    let slave = Node::start(
        follower(),
        "slaveSyncIntervalMs=20\nslaveSyncFirstDelayMs=0\n",
    )
    .await;
    slave.wait_role(ServingRole::Slave).await;
    slave
        .ctx()
        .role
        .set_master_addr(Some(slave.addr.to_string()));
    assert!(broker::slave_sync::master_to_sync(slave.ctx()).is_none());
    slave.shutdown().await;
}
