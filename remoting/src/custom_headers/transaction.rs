//! Transaction headers: END_TRANSACTION (client -> broker) and CHECK_TRANSACTION_STATE
//! (broker -> producer, oneway).

use super::command_header;

/// `commitOrRollback` value: not a transaction / unknown.
pub const TRANSACTION_NOT_TYPE: i32 = 0;
/// `commitOrRollback` value: commit.
pub const TRANSACTION_COMMIT_TYPE: i32 = 8;
/// `commitOrRollback` value: rollback.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 12;

command_header! {
    /// END_TRANSACTION (37) request.
    pub struct EndTransactionRequestHeader {
        producer_group: String => req "producerGroup",
        /// Queue offset of the half message.
        tran_state_table_offset: i64 => req "tranStateTableOffset",
        /// Physical offset of the half message.
        commit_log_offset: i64 => req "commitLogOffset",
        commit_or_rollback: i32 => req "commitOrRollback",
        from_transaction_check: Option<bool> => opt "fromTransactionCheck",
        msg_id: String => req "msgId",
        transaction_id: Option<String> => opt "transactionId",
        topic: Option<String> => opt "topic",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// CHECK_TRANSACTION_STATE (39) request, broker -> producer.
    pub struct CheckTransactionStateRequestHeader {
        tran_state_table_offset: i64 => req "tranStateTableOffset",
        commit_log_offset: i64 => req "commitLogOffset",
        msg_id: Option<String> => opt "msgId",
        transaction_id: Option<String> => opt "transactionId",
        offset_msg_id: Option<String> => opt "offsetMsgId",
        topic: Option<String> => opt "topic",
        broker_name: Option<String> => opt "bname",
    }
}
