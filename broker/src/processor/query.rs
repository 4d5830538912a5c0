//! VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12): raw stored records by physical offset or
//! by key (remoting.md §11.4).
//!
//! As Java: a negative offset finds nothing (SYSTEM_ERROR, Java's remark) and is never read;
//! `maxNum` of zero or less finds nothing (QUERY_NOT_FOUND), more than 64 is cut to 64; a
//! negative begin timestamp means 0.

use std::sync::Arc;

use bytes::BytesMut;
use remoting::custom_headers::{
    QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader,
};
use remoting::{ConnectionHandle, RemotingCommand, ResponseCode};

use crate::context::BrokerContext;
use crate::error::BrokerError;

/// VIEW_MESSAGE_BY_ID: the record at the physical offset from an offset msgId.
pub async fn view_message_by_id(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: ViewMessageRequestHeader = req.decode_header()?;
    let found = if h.offset < 0 {
        None
    } else {
        ctx.store.read_message(h.offset)
    };
    match found {
        Some(rec) => Ok(RemotingCommand::success().with_body(rec)),
        None => Err(BrokerError::System(format!(
            "can not find message by the offset, {}",
            h.offset
        ))),
    }
}

/// QUERY_MESSAGE: records whose KEYS (or UNIQ_KEY) contain the key.
pub async fn query_message(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: QueryMessageRequestHeader = req.decode_header()?;
    // Java's index lookup stops as soon as it holds `maxNum` offsets: zero or less finds none.
    let max = usize::try_from(h.max_num).unwrap_or(0).min(64);
    ctx.store.catch_up_dispatch().await;
    // Store times are never negative: an earlier begin means the same as 0 (and the index
    // widens the begin by a second, which must not overflow).
    let begin = h.begin_timestamp.max(0);
    let (mut records, ts, phys) =
        ctx.store
            .query_by_key(&h.topic, &h.key, max.max(1), begin, h.end_timestamp)?;
    if max == 0 {
        // Only the index's update marks are answered.
        records.clear();
    }
    let header = QueryMessageResponseHeader {
        index_last_update_timestamp: ts,
        index_last_update_phyoffset: phys,
    };
    if records.is_empty() {
        return Ok(RemotingCommand::response(
            ResponseCode::QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
        )
        .with_header(&header));
    }
    let mut body = BytesMut::new();
    for r in records {
        body.extend_from_slice(&r);
    }
    Ok(RemotingCommand::success()
        .with_header(&header)
        .with_body(body.freeze()))
}
