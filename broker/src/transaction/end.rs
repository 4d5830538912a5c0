//! END_TRANSACTION (37): commit or roll back a half message (Java `EndTransactionProcessor`).
//!
//! Both paths first check the half message named by the header (physical offset, queue
//! offset and producer group must match). Commit re-proposes the message under its real
//! topic with transaction type COMMIT and then writes the op record; rollback writes only the
//! op record. Refused on a slave with SLAVE_NOT_AVAILABLE.

use std::sync::Arc;

use bytes::BytesMut;
use remoting::custom_headers::EndTransactionRequestHeader;
use remoting::{RemotingCommand, ResponseCode};

use super::op::encode_op_record;
use crate::context::{now_ms, BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::properties::keys;
use crate::message::record::{encode_record, CrcCheck, MagicPolicy, MessageLimits, RecordView};
use crate::message::{sysflag, topic as names, MessageProperties};
use crate::store::topics::perm;

/// Why a named half message cannot be ended (answered as SYSTEM_ERROR with Java's remarks).
pub fn check_half(
    view: &RecordView<'_>,
    h: &EndTransactionRequestHeader,
) -> Result<(), BrokerError> {
    if view.topic != names::TRANS_HALF_TOPIC {
        return Err(BrokerError::System(
            "Find prepared transaction message failed".into(),
        ));
    }
    let pgroup = view
        .property(keys::PRODUCER_GROUP)
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    if pgroup != h.producer_group {
        return Err(BrokerError::System("The producer group wrong".into()));
    }
    if view.queue_offset != h.tran_state_table_offset {
        return Err(BrokerError::System(
            "The transaction state table offset wrong".into(),
        ));
    }
    if view.physical_offset != h.commit_log_offset {
        return Err(BrokerError::System("The commit log offset wrong".into()));
    }
    Ok(())
}

/// The committed message: real topic/queue restored, `REAL_TOPIC`/`REAL_QID`/`TRAN_MSG`
/// removed, transaction type `tx_type`, prepared offset = the half's physical offset, store
/// time of the half message (Java `endMessageTransaction`).
pub fn build_commit_record(
    view: &RecordView<'_>,
    tx_type: i32,
    limits: &MessageLimits,
) -> Result<(String, i32, BytesMut), BrokerError> {
    let mut props = MessageProperties::parse(view.properties)?;
    let topic = props
        .remove(keys::REAL_TOPIC)
        .ok_or_else(|| BrokerError::System("half message without REAL_TOPIC".into()))?;
    let queue_id = props
        .remove(keys::REAL_QUEUE_ID)
        .and_then(|q| q.trim().parse::<i32>().ok())
        .filter(|q| *q >= 0)
        .ok_or_else(|| BrokerError::System("half message without REAL_QID".into()))?;
    props.remove(keys::TRANSACTION_PREPARED);
    props.insert(keys::WAIT_STORE_MSG_OK, "false");
    let encoded = props.encode()?;
    let mut f = view.fields();
    f.topic = &topic;
    f.queue_id = queue_id;
    f.queue_offset = 0;
    f.physical_offset = 0;
    f.sys_flag = sysflag::with_transaction_type(view.sys_flag, tx_type);
    f.prepared_transaction_offset = view.physical_offset;
    f.properties = &encoded;
    let mut out = BytesMut::new();
    encode_record(&f, limits, MagicPolicy::Auto, &mut out)?;
    Ok((topic, queue_id, out))
}

/// Writes the op record marking the half message at `half_queue_offset` decided.
pub async fn write_op(
    ctx: &BrokerContext,
    half_queue_id: i32,
    half_queue_offset: i64,
) -> Result<(), BrokerError> {
    ctx.topics
        .create_if_absent(names::TRANS_OP_HALF_TOPIC, 1, perm::READ | perm::WRITE)?;
    let rec = encode_op_record(
        half_queue_id,
        half_queue_offset,
        ctx.store_host,
        now_ms(),
        &ctx.config.message_limits(),
    )?;
    ctx.store
        .put_records(names::TRANS_OP_HALF_TOPIC, half_queue_id, vec![rec], true)
        .await?;
    Ok(())
}

/// Handles one END_TRANSACTION request.
pub async fn end_transaction(
    ctx: &Arc<BrokerContext>,
    h: &EndTransactionRequestHeader,
) -> Result<RemotingCommand, BrokerError> {
    if ctx.role.role() != ServingRole::Master {
        return Ok(RemotingCommand::response(
            ResponseCode::SLAVE_NOT_AVAILABLE,
            "Can't process transaction in slave.",
        ));
    }
    let tx_type = h.commit_or_rollback;
    if tx_type != sysflag::TRANSACTION_COMMIT_TYPE && tx_type != sysflag::TRANSACTION_ROLLBACK_TYPE
    {
        tracing::debug!(
            group = %h.producer_group,
            msg_id = %h.msg_id,
            from_check = h.from_transaction_check.unwrap_or(false),
            "END_TRANSACTION with unknown state: half message left for the check service"
        );
        return Ok(RemotingCommand::success());
    }
    let Some(raw) = ctx.store.read_message(h.commit_log_offset) else {
        return Err(BrokerError::System(
            "Find prepared transaction message failed".into(),
        ));
    };
    let view = RecordView::parse(&raw, CrcCheck::Skip)?;
    check_half(&view, h)?;
    if tx_type == sysflag::TRANSACTION_COMMIT_TYPE {
        let (topic, queue_id, rec) =
            build_commit_record(&view, tx_type, &ctx.config.message_limits())?;
        ctx.ensure_topic(&topic, queue_id)?;
        ctx.store
            .put_records(&topic, queue_id, vec![rec], true)
            .await?;
    }
    write_op(ctx, view.queue_id, view.queue_offset).await?;
    Ok(RemotingCommand::success())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::record::RecordFields;
    use std::net::SocketAddr;

    fn half(pgroup: &str) -> BytesMut {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let mut p = MessageProperties::new();
        p.insert(keys::TRANSACTION_PREPARED, "true");
        p.insert(keys::PRODUCER_GROUP, pgroup);
        p.insert(keys::REAL_TOPIC, "Pay");
        p.insert(keys::REAL_QUEUE_ID, "3");
        p.insert(keys::TAGS, "t");
        let encoded = p.encode().unwrap();
        let f = RecordFields {
            queue_id: 0,
            flag: 1,
            queue_offset: 9,
            physical_offset: 4800,
            sys_flag: 0,
            born_timestamp: 5,
            born_host: host,
            store_timestamp: 6,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"b",
            topic: names::TRANS_HALF_TOPIC,
            properties: &encoded,
        };
        let mut out = BytesMut::new();
        encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut out).unwrap();
        out
    }

    fn header(group: &str, queue_offset: i64, phys: i64) -> EndTransactionRequestHeader {
        EndTransactionRequestHeader {
            producer_group: group.into(),
            tran_state_table_offset: queue_offset,
            commit_log_offset: phys,
            commit_or_rollback: sysflag::TRANSACTION_COMMIT_TYPE,
            from_transaction_check: None,
            msg_id: "m".into(),
            transaction_id: None,
            topic: None,
            broker_name: None,
        }
    }

    #[test]
    fn half_checks_follow_java() {
        let raw = half("PG");
        let v = RecordView::parse(&raw, CrcCheck::Verify).unwrap();
        assert!(check_half(&v, &header("PG", 9, 4800)).is_ok());
        let e = check_half(&v, &header("other", 9, 4800)).unwrap_err();
        assert!(e.to_string().contains("producer group wrong"));
        let e = check_half(&v, &header("PG", 8, 4800)).unwrap_err();
        assert!(e.to_string().contains("state table offset wrong"));
        let e = check_half(&v, &header("PG", 9, 4801)).unwrap_err();
        assert!(e.to_string().contains("commit log offset wrong"));
    }

    #[test]
    fn commit_record_restores_the_real_topic() {
        let raw = half("PG");
        let v = RecordView::parse(&raw, CrcCheck::Verify).unwrap();
        let (topic, q, rec) = build_commit_record(
            &v,
            sysflag::TRANSACTION_COMMIT_TYPE,
            &MessageLimits::default(),
        )
        .unwrap();
        assert_eq!((topic.as_str(), q), ("Pay", 3));
        let c = RecordView::parse(&rec, CrcCheck::Verify).unwrap();
        assert_eq!(c.topic, "Pay");
        assert_eq!(c.queue_id, 3);
        assert_eq!(
            sysflag::transaction_type(c.sys_flag),
            sysflag::TRANSACTION_COMMIT_TYPE
        );
        assert_eq!(c.prepared_transaction_offset, 4800);
        assert_eq!(c.store_timestamp, 6);
        assert_eq!(c.property(keys::REAL_TOPIC), None);
        assert_eq!(c.property(keys::TRANSACTION_PREPARED), None);
        assert_eq!(c.property(keys::PRODUCER_GROUP), Some(&b"PG"[..]));
        assert_eq!(c.body, b"b");
    }
}
