//! Delay-level messages end to end on one in-process broker (MemLog leader): held in
//! SCHEDULE_TOPIC_XXXX queue level-1 with the delivery time as tag code, delivered to the
//! real topic when due (DELAY removed), delay offsets advanced; nothing delivered while slave;
//! delivery progress derived from the log (schedule-origin markers) across role switches and
//! restarts.

#![allow(clippy::unwrap_used)]

mod roles_common;

use std::sync::Arc;
use std::time::Instant;

use broker::broker::Broker;
use broker::context::ServingRole;
use broker::message::keys;
use broker::message::topic::SCHEDULE_TOPIC;
use broker::services::{BrokerRoleServices, RoleServiceSettings};
use broker::store::commit_log::LedgerRole;
use broker::store::delay_offsets::{
    DelayOffsetTable, DELAY_FROM_LOG_FILE, SCHEDULE_ORIGIN_PROPERTY,
};
use broker::store::mem_log::MemLog;
use remoting::ResponseCode;
use roles_common::*;

#[tokio::test]
async fn delayed_message_is_held_then_delivered_in_order() {
    let node = Node::start(MemLog::new_leader(), "schedulePollMs=20\n").await;
    node.wait_role(ServingRole::Master).await;
    let c = client();
    let sent_at = Instant::now();
    for i in 0..3 {
        let p = props(&[
            (keys::DELAY_TIME_LEVEL, "1"),
            (keys::TAGS, "tg"),
            ("seq", &i.to_string()),
        ]);
        let r = call(
            &c,
            node.addr,
            send_v2("PG", "DelayT", 1, format!("m{i}").as_bytes(), &p),
        )
        .await;
        assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    }
    // Held in the schedule topic, queue 0 (level 1), tag code = delivery time. Read from
    // the store directly, so wait for dispatch (its own thread) to create the queue.
    let store = &node.ctx().store;
    wait_for("schedule queue", || {
        store.consume_queues().get(SCHEDULE_TOPIC, 0).is_some()
    })
    .await;
    let cq = node
        .ctx()
        .store
        .consume_queues()
        .get(SCHEDULE_TOPIC, 0)
        .expect("schedule queue");
    wait_for("schedule units", || cq.max_offset() == 3).await;
    let u = cq.get(0).unwrap().unwrap();
    let stored = node.ctx().store.store_time_of(u.physical_offset).unwrap();
    assert_eq!(u.tag_code, stored + 1000);

    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < 3 {
        assert!(Instant::now() < deadline, "delayed messages not delivered");
        got = pull_all(&c, node.addr, "DelayT", 1).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(sent_at.elapsed().as_millis() >= 900, "delivered too early");
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.topic(), "DelayT");
        assert_eq!(m.queue_id, 1);
        assert_eq!(&m.body[..], format!("m{i}").as_bytes());
        assert_eq!(prop(m, keys::DELAY_TIME_LEVEL), None);
        assert_eq!(prop(m, keys::REAL_TOPIC).as_deref(), Some("DelayT"));
        assert_eq!(prop(m, "seq"), Some(i.to_string()));
        assert!(m.store_timestamp >= stored + 1000);
    }
    wait_for("delay offset", || {
        node.ctx().delay_offsets.get(1) == Some(3)
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn schedule_service_only_runs_on_the_master_and_resumes_from_offsets() {
    let log = MemLog::new_leader();
    let node = Node::start(log.clone(), "schedulePollMs=20\n").await;
    node.wait_role(ServingRole::Master).await;
    let c = client();
    let p = props(&[(keys::DELAY_TIME_LEVEL, "1")]);
    let r = call(&c, node.addr, send_v2("PG", "DelayR", 0, b"x", &p)).await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    // Step down before it is due: the service stops, nothing is delivered.
    log.set_role(LedgerRole::Follower, 2);
    node.wait_role(ServingRole::Slave).await;
    assert_eq!(node.services.running(), (false, false, true));
    let due = Instant::now() + std::time::Duration::from_millis(1300);
    while Instant::now() < due {
        assert!(
            pull_all(&c, node.addr, "DelayR", 0).await.is_empty(),
            "delivered while slave"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Leader again: delivered once, from the stored delay offset.
    log.set_role(LedgerRole::Leader, 3);
    node.wait_role(ServingRole::Master).await;
    assert_eq!(node.services.running(), (true, true, false));
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let got = pull_all(&c, node.addr, "DelayR", 0).await;
        if got.len() == 1 {
            break;
        }
        assert!(got.len() < 2, "duplicated delivery");
        assert!(Instant::now() < deadline, "not delivered after re-election");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    wait_for("delay offset", || {
        node.ctx().delay_offsets.get(1) == Some(1)
    })
    .await;
    node.shutdown().await;
}

/// Delayed messages of level 1 sent to `topic` queue 0, bodies `<prefix><i>`.
async fn send_delayed(
    c: &remoting::RemotingClient,
    addr: std::net::SocketAddr,
    topic: &str,
    prefix: &str,
    n: usize,
) {
    let p = props(&[(keys::DELAY_TIME_LEVEL, "1")]);
    for i in 0..n {
        let body = format!("{prefix}{i}");
        let r = call(c, addr, send_v2("PG", topic, 0, body.as_bytes(), &p)).await;
        assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    }
}

/// Polls until `topic` queue 0 holds at least `n` messages; returns their bodies.
async fn wait_delivered(
    c: &remoting::RemotingClient,
    addr: std::net::SocketAddr,
    topic: &str,
    n: usize,
) -> Vec<String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let got = pull_all(c, addr, topic, 0).await;
        if got.len() >= n {
            return got
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned())
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "{n} messages not delivered to {topic}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// MP-12 at unit scale: the dispatcher turns committed deliveries (their schedule-origin
/// marker) into the log-derived delay offset, so a master whose synced delay offset is stale
/// does not deliver again; a forged marker moves nothing.
#[tokio::test]
async fn log_derived_delay_progress_prevents_redelivery_after_a_stale_sync() {
    let log = MemLog::new_leader();
    let node = Node::start(log.clone(), "schedulePollMs=20\n").await;
    node.wait_role(ServingRole::Master).await;
    let c = client();
    let offsets = Arc::clone(&node.ctx().delay_offsets);

    // A forged marker naming a real schedule unit (level 2, due in 5 s) with the wrong
    // physical offset is ignored by the dispatcher.
    let p2 = props(&[(keys::DELAY_TIME_LEVEL, "2")]);
    let r = call(&c, node.addr, send_v2("PG", "DelayF", 0, b"later", &p2)).await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    let cq2 = node.ctx().store.consume_queues().clone();
    wait_for("level-2 unit", || {
        cq2.get(SCHEDULE_TOPIC, 1)
            .is_some_and(|q| q.max_offset() == 1)
    })
    .await;
    let phys = cq2
        .get(SCHEDULE_TOPIC, 1)
        .unwrap()
        .get(0)
        .unwrap()
        .unwrap()
        .physical_offset;
    let forged = format!("2:0:{}", phys + 1);
    let pf = props(&[(SCHEDULE_ORIGIN_PROPERTY, &forged)]);
    let r = call(&c, node.addr, send_v2("PG", "Forged", 0, b"f", &pf)).await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    wait_delivered(&c, node.addr, "Forged", 1).await;
    assert_eq!(offsets.delivered(2), None, "forged marker moved progress");

    send_delayed(&c, node.addr, "DelayL", "m", 3).await;
    let got = wait_delivered(&c, node.addr, "DelayL", 3).await;
    assert_eq!(got, ["m0", "m1", "m2"]);
    let first = &pull_all(&c, node.addr, "DelayL", 0).await[0];
    let marker = prop(first, SCHEDULE_ORIGIN_PROPERTY).unwrap();
    assert!(marker.starts_with("1:0:"), "{marker}");
    wait_for("log-derived offset", || offsets.delivered(1) == Some(3)).await;

    // Slave, and a stale synced offset (as from a master that had not synced since).
    log.set_role(LedgerRole::Follower, 2);
    node.wait_role(ServingRole::Slave).await;
    let stale = DelayOffsetTable::parse_body(br#"{"offsetTable":{1:0}}"#).unwrap();
    offsets.apply_snapshot(stale).unwrap();
    assert_eq!(offsets.service_offset(1), Some(0));
    assert_eq!(offsets.get(1), Some(3));

    // Master again: resumes after the last committed delivery, not from 0.
    log.set_role(LedgerRole::Leader, 3);
    node.wait_role(ServingRole::Master).await;
    send_delayed(&c, node.addr, "DelayL", "n", 1).await;
    wait_delivered(&c, node.addr, "DelayL", 4).await;
    wait_for("log-derived offset", || offsets.delivered(1) == Some(4)).await;
    let got = wait_delivered(&c, node.addr, "DelayL", 4).await;
    assert_eq!(
        got,
        ["m0", "m1", "m2", "n0"],
        "redelivered after the switch"
    );
    node.shutdown().await;
}

/// The log-derived progress survives a restart that lost both offset files (kill -9 before
/// the periodic persist): the dispatcher re-reads the log for the markers.
#[tokio::test]
async fn log_derived_delay_progress_survives_a_restart_without_offset_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = MemLog::new_leader();
    let start = |port: u16| {
        let cfg = config(dir.path(), port, "schedulePollMs=20\n");
        let services = Arc::new(BrokerRoleServices::with_settings(
            RoleServiceSettings::from_config(&cfg),
        ));
        Broker::start_with_log(cfg, Arc::new(log.clone()), services)
    };
    let c = client();
    let port = free_port();
    let b = start(port).await.unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for("master", || b.context().role.role() == ServingRole::Master).await;
    send_delayed(&c, addr, "DelayS", "m", 2).await;
    wait_delivered(&c, addr, "DelayS", 2).await;
    wait_for("log-derived offset", || {
        b.context().delay_offsets.delivered(1) == Some(2)
    })
    .await;
    b.shutdown().await;
    // As if killed before any persist: a stale service offset, no log-derived file.
    let cfg_dir = dir.path().join("config");
    std::fs::write(cfg_dir.join("delayOffset.json"), r#"{"offsetTable":{1:0}}"#).unwrap();
    std::fs::remove_file(cfg_dir.join(DELAY_FROM_LOG_FILE)).unwrap();

    let port = free_port();
    let b = start(port).await.unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for("master", || b.context().role.role() == ServingRole::Master).await;
    assert_eq!(b.context().delay_offsets.get(1), Some(2));
    send_delayed(&c, addr, "DelayS", "n", 1).await;
    let got = wait_delivered(&c, addr, "DelayS", 3).await;
    wait_for("log-derived offset", || {
        b.context().delay_offsets.delivered(1) == Some(3)
    })
    .await;
    let got2 = wait_delivered(&c, addr, "DelayS", 3).await;
    assert_eq!(got, ["m0", "m1", "n0"]);
    assert_eq!(got2, got, "redelivered after the restart");
    b.shutdown().await;
}
