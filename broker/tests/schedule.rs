//! Delay-level messages end to end on one in-process broker (MemLog leader): held in
//! SCHEDULE_TOPIC_XXXX queue level-1 with the delivery time as tag code, delivered to the
//! real topic when due (DELAY removed), delay offsets advanced; nothing delivered while slave.

#![allow(clippy::unwrap_used)]

mod roles_common;

use std::time::Instant;

use broker::context::ServingRole;
use broker::message::keys;
use broker::message::topic::SCHEDULE_TOPIC;
use broker::store::commit_log::LedgerRole;
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
    // Held in the schedule topic, queue 0 (level 1), tag code = delivery time.
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
