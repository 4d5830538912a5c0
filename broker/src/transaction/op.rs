//! Op records: the marker that a half message was committed or rolled back, and the
//! bookkeeping that turns op records into "already decided" half offsets.

use std::collections::HashSet;
use std::net::SocketAddr;

use bytes::BytesMut;

use super::REMOVE_TAG;
use crate::error::BrokerError;
use crate::message::properties::keys;
use crate::message::record::{encode_record, MagicPolicy, MessageLimits, RecordFields};
use crate::message::topic as names;
use crate::message::MessageProperties;

/// Encodes the op record for the half message at `half_queue_offset` of half queue
/// `queue_id` (Java 4.9: body = the offset in decimal, tag `d`).
pub fn encode_op_record(
    queue_id: i32,
    half_queue_offset: i64,
    store_host: SocketAddr,
    now_ms: i64,
    limits: &MessageLimits,
) -> Result<BytesMut, BrokerError> {
    let mut props = MessageProperties::new();
    props.insert(keys::TAGS, REMOVE_TAG);
    props.insert(keys::WAIT_STORE_MSG_OK, "false");
    let encoded = props.encode()?;
    let body = half_queue_offset.to_string();
    let fields = RecordFields {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: now_ms,
        born_host: store_host,
        store_timestamp: now_ms,
        store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: body.as_bytes(),
        topic: names::TRANS_OP_HALF_TOPIC,
        properties: &encoded,
    };
    let mut out = BytesMut::new();
    encode_record(&fields, limits, MagicPolicy::Auto, &mut out)?;
    Ok(out)
}

/// Half queue offsets named by an op record body (4.9: one offset; 5.x: `,`-separated).
/// Malformed items are skipped.
pub fn parse_op_body(body: &[u8]) -> Vec<i64> {
    String::from_utf8_lossy(body)
        .split(',')
        .filter_map(|s| s.trim().parse::<i64>().ok())
        .filter(|o| *o >= 0)
        .collect()
}

/// Op records read in one check round: `(op queue offset, half offsets it removes)`, in
/// op-queue order.
#[derive(Debug, Default)]
pub struct OpScan {
    pub ops: Vec<(i64, Vec<i64>)>,
}

impl OpScan {
    /// Half offsets at or above `half_offset` that are decided.
    pub fn removed_at_or_above(&self, half_offset: i64) -> HashSet<i64> {
        self.ops
            .iter()
            .flat_map(|(_, halves)| halves.iter().copied())
            .filter(|h| *h >= half_offset)
            .collect()
    }

    /// Where the op offset may advance once the half offset reached `new_half_offset`: over
    /// the contiguous prefix of op records whose half offsets are all below it (their halves
    /// will never be looked at again).
    pub fn next_op_offset(&self, op_offset: i64, new_half_offset: i64) -> i64 {
        let mut next = op_offset;
        for (off, halves) in &self.ops {
            if *off != next || halves.iter().any(|h| *h >= new_half_offset) {
                break;
            }
            next += 1;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::record::{CrcCheck, RecordView};

    #[test]
    fn op_record_layout() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let rec = encode_op_record(0, 42, host, 1000, &MessageLimits::default()).unwrap();
        let v = RecordView::parse(&rec, CrcCheck::Verify).unwrap();
        assert_eq!(v.topic, names::TRANS_OP_HALF_TOPIC);
        assert_eq!(v.queue_id, 0);
        assert_eq!(v.body, b"42");
        assert_eq!(v.property(keys::TAGS), Some(&b"d"[..]));
        assert_eq!(parse_op_body(v.body), vec![42]);
    }

    #[test]
    fn op_body_parsing_is_lenient() {
        assert_eq!(parse_op_body(b"1,2, 3"), vec![1, 2, 3]);
        assert_eq!(parse_op_body(b"x,-1,7"), vec![7]);
        assert!(parse_op_body(b"").is_empty());
        assert!(parse_op_body(&[0xff, 0xfe]).is_empty());
    }

    #[test]
    fn removed_set_and_op_offset_advance() {
        let scan = OpScan {
            ops: vec![(10, vec![3]), (11, vec![7]), (12, vec![4]), (13, vec![9])],
        };
        let removed = scan.removed_at_or_above(4);
        assert!(removed.contains(&4) && removed.contains(&7) && removed.contains(&9));
        assert!(!removed.contains(&3));
        // Half offset reached 5: ops 10 (half 3) is done; 11 (half 7) still needed.
        assert_eq!(scan.next_op_offset(10, 5), 11);
        // Half offset reached 8: 10, 11, 12 done; 13 (half 9) not.
        assert_eq!(scan.next_op_offset(10, 8), 13);
        assert_eq!(scan.next_op_offset(10, 100), 14);
        // A gap (op offset not where expected) stops the advance.
        assert_eq!(scan.next_op_offset(9, 100), 9);
        assert_eq!(OpScan::default().next_op_offset(5, 100), 5);
    }
}
