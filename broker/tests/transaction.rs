//! Transactional messages end to end on one in-process broker (MemLog leader): half
//! messages, END_TRANSACTION commit/rollback, op records, the check service asking a live
//! producer over its own connection, and discarding after transactionCheckMax checks.

#![allow(clippy::unwrap_used)]

mod roles_common;

use std::sync::Arc;
use std::time::Duration;

use broker::context::ServingRole;
use broker::message::topic::{TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};
use broker::message::{decode_offset_msg_id, decode_records, keys, sysflag, CrcCheck};
use broker::store::commit_log::LedgerRole;
use broker::store::mem_log::MemLog;
use bytes::Bytes;
use remoting::custom_headers::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use remoting::{
    processor_fn, ClientConfig, ProcessorRegistry, RemotingClient, RemotingCommand, RequestCode,
    ResponseCode,
};
use roles_common::*;
use tokio::sync::mpsc;

fn half_props(group: &str) -> String {
    props(&[
        (keys::TRANSACTION_PREPARED, "true"),
        (keys::PRODUCER_GROUP, group),
        (keys::TAGS, "tx"),
    ])
}

/// Sends a half message; returns (queue offset, physical offset).
async fn send_half(c: &RemotingClient, node: &Node, topic: &str, body: &[u8]) -> (i64, i64) {
    let r = call(
        c,
        node.addr,
        send_v2("TPG", topic, 0, body, &half_props("TPG")),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    let qo: i64 = r.ext_field("queueOffset").unwrap().parse().unwrap();
    let (_, phys) = decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    (qo, phys)
}

fn end_req(qo: i64, phys: i64, tx_type: i32, group: &str, from_check: bool) -> RemotingCommand {
    let h = EndTransactionRequestHeader {
        producer_group: group.into(),
        tran_state_table_offset: qo,
        commit_log_offset: phys,
        commit_or_rollback: tx_type,
        from_transaction_check: Some(from_check),
        msg_id: "id".into(),
        transaction_id: None,
        topic: None,
        broker_name: None,
    };
    RemotingCommand::request(RequestCode::END_TRANSACTION, &h)
}

#[tokio::test]
async fn commit_and_rollback() {
    let node = Node::start(MemLog::new_leader(), "").await;
    node.wait_role(ServingRole::Master).await;
    let c = client();
    let (qo1, phys1) = send_half(&c, &node, "TxT", b"commit-me").await;
    let (qo2, phys2) = send_half(&c, &node, "TxT", b"roll-me-back").await;
    assert_eq!((qo1, qo2), (0, 1));
    // Half messages are invisible in the real topic.
    assert!(pull_all(&c, node.addr, "TxT", 0).await.is_empty());
    assert_eq!(pull_all(&c, node.addr, TRANS_HALF_TOPIC, 0).await.len(), 2);

    // Checks: wrong group, wrong queue offset.
    let r = call(
        &c,
        node.addr,
        end_req(qo1, phys1, sysflag::TRANSACTION_COMMIT_TYPE, "other", false),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SYSTEM_ERROR);
    let r = call(
        &c,
        node.addr,
        end_req(qo2, phys1, sysflag::TRANSACTION_COMMIT_TYPE, "TPG", false),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SYSTEM_ERROR);
    assert!(pull_all(&c, node.addr, "TxT", 0).await.is_empty());

    let r = call(
        &c,
        node.addr,
        end_req(qo1, phys1, sysflag::TRANSACTION_COMMIT_TYPE, "TPG", false),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    let r = call(
        &c,
        node.addr,
        end_req(qo2, phys2, sysflag::TRANSACTION_ROLLBACK_TYPE, "TPG", false),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());

    let got = pull_all(&c, node.addr, "TxT", 0).await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(&m.body[..], b"commit-me");
    assert_eq!(
        sysflag::transaction_type(m.sys_flag),
        sysflag::TRANSACTION_COMMIT_TYPE
    );
    assert_eq!(m.prepared_transaction_offset, phys1);
    assert_eq!(prop(m, keys::REAL_TOPIC), None);
    assert_eq!(prop(m, keys::TRANSACTION_PREPARED), None);
    assert_eq!(prop(m, keys::TAGS).as_deref(), Some("tx"));
    // One op record per decided half message, naming its queue offset.
    let ops = pull_all(&c, node.addr, TRANS_OP_HALF_TOPIC, 0).await;
    let named: Vec<&[u8]> = ops.iter().map(|o| &o.body[..]).collect();
    assert_eq!(named, vec![&b"0"[..], &b"1"[..]]);

    // A slave refuses.
    node.log.set_role(LedgerRole::Follower, 2);
    node.wait_role(ServingRole::Slave).await;
    let r = call(
        &c,
        node.addr,
        end_req(qo1, phys1, sysflag::TRANSACTION_COMMIT_TYPE, "TPG", false),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SLAVE_NOT_AVAILABLE);
    node.shutdown().await;
}

struct Check {
    header: CheckTransactionStateRequestHeader,
    body: Bytes,
}

/// A producer client that records CHECK_TRANSACTION_STATE requests.
fn checking_producer() -> (RemotingClient, mpsc::UnboundedReceiver<Check>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut reg = ProcessorRegistry::new();
    reg.register(
        RequestCode::CHECK_TRANSACTION_STATE,
        processor_fn(move |_conn, req: RemotingCommand| {
            let tx = tx.clone();
            async move {
                let header: CheckTransactionStateRequestHeader = req.decode_header().unwrap();
                let _ = tx.send(Check {
                    header,
                    body: req.body().clone(),
                });
                None
            }
        }),
    );
    (
        RemotingClient::with_processor(ClientConfig::default(), Arc::new(reg), None),
        rx,
    )
}

#[tokio::test]
async fn check_service_asks_the_producer_and_discards_after_max_checks() {
    let node = Node::start(
        MemLog::new_leader(),
        "transactionCheckInterval=100\ntransactionTimeOut=0\ntransactionCheckMax=3\n",
    )
    .await;
    node.wait_role(ServingRole::Master).await;
    let (producer, mut checks) = checking_producer();
    let hb = r#"{"clientID":"127.0.0.1@tx","producerDataSet":[{"groupName":"TPG"}],"consumerDataSet":[]}"#;
    let r = call(
        &producer,
        node.addr,
        RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(hb),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    send_half(&producer, &node, "TxC", b"answer").await;
    send_half(&producer, &node, "TxC", b"silent").await;

    let mut answered = 0;
    let mut silent_checks = 0;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let c = client();
    loop {
        let discarded = pull_all(&c, node.addr, TRANS_CHECK_MAX_TIME_TOPIC, 0).await;
        if !discarded.is_empty() && answered == 1 {
            assert_eq!(discarded.len(), 1);
            assert_eq!(&discarded[0].body[..], b"silent");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "checks incomplete: answered {answered}, silent {silent_checks}"
        );
        let Ok(Some(chk)) = tokio::time::timeout(Duration::from_millis(100), checks.recv()).await
        else {
            continue;
        };
        let msg = decode_records(chk.body.clone(), CrcCheck::Verify)
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(msg.topic(), "TxC", "check body carries the real topic");
        assert_eq!(msg.magic, broker::message::record::MAGIC_V1);
        assert_eq!(msg.physical_offset, chk.header.commit_log_offset);
        assert_eq!(msg.queue_offset, chk.header.tran_state_table_offset);
        assert_eq!(chk.header.topic.as_deref(), Some("TxC"));
        if &msg.body[..] == b"answer" {
            if answered == 0 {
                let r = call(
                    &producer,
                    node.addr,
                    end_req(
                        chk.header.tran_state_table_offset,
                        chk.header.commit_log_offset,
                        sysflag::TRANSACTION_COMMIT_TYPE,
                        "TPG",
                        true,
                    ),
                )
                .await;
                assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
            }
            answered += 1;
        } else {
            silent_checks += 1;
        }
    }
    assert_eq!(
        silent_checks, 3,
        "checked exactly transactionCheckMax times"
    );
    let got = pull_all(&c, node.addr, "TxC", 0).await;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].body[..], b"answer");
    // Progress is stored as consumer offsets of the system group (synced to slaves).
    let half_off =
        node.ctx()
            .offsets
            .query_offset(broker::transaction::SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0);
    assert!(half_off.unwrap_or(0) >= 2);
    node.shutdown().await;
}
