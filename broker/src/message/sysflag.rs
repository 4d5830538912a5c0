//! SYSFLAG bits of a stored message (spec message-format.md §3).

/// Body is compressed.
pub const COMPRESSED: i32 = 0x1;
/// Topic uses the MULTI_TAG filter type.
pub const MULTI_TAGS: i32 = 0x2;
/// Mask of the two transaction-type bits.
pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
/// Transaction type: plain message.
pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
/// Transaction type: half (prepared) message.
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
/// Transaction type: committed.
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
/// Transaction type: rolled back.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
/// BORNHOST is an IPv6 address (16 + 4 bytes).
pub const BORNHOST_V6: i32 = 0x10;
/// STOREHOSTADDRESS is an IPv6 address (16 + 4 bytes).
pub const STOREHOSTADDRESS_V6: i32 = 0x20;
/// 5.x server-side "inner batch" needs unwrapping.
pub const NEED_UNWRAP: i32 = 0x40;
/// 5.x: one record holds several messages.
pub const INNER_BATCH: i32 = 0x80;
/// Mask of the compression-type bits (8..10).
pub const COMPRESSION_TYPE_MASK: i32 = 0x700;

/// The transaction-type bits of `sys_flag`.
pub fn transaction_type(sys_flag: i32) -> i32 {
    sys_flag & TRANSACTION_TYPE_MASK
}

/// `sys_flag` with its transaction type replaced by `tx_type`.
pub fn with_transaction_type(sys_flag: i32, tx_type: i32) -> i32 {
    (sys_flag & !TRANSACTION_TYPE_MASK) | (tx_type & TRANSACTION_TYPE_MASK)
}

/// PREPARED and ROLLBACK records never go into a consume queue (§3).
pub fn is_dispatched_to_consume_queue(sys_flag: i32) -> bool {
    !matches!(
        transaction_type(sys_flag),
        TRANSACTION_PREPARED_TYPE | TRANSACTION_ROLLBACK_TYPE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_type_helpers() {
        assert_eq!(with_transaction_type(0x13, TRANSACTION_COMMIT_TYPE), 0x1B);
        assert!(is_dispatched_to_consume_queue(
            TRANSACTION_COMMIT_TYPE | COMPRESSED
        ));
        assert!(!is_dispatched_to_consume_queue(TRANSACTION_PREPARED_TYPE));
        assert!(!is_dispatched_to_consume_queue(
            TRANSACTION_ROLLBACK_TYPE | BORNHOST_V6
        ));
    }
}
