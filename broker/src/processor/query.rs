//! VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12): raw stored records by physical offset or
//! by key (remoting.md §11.4).

use std::sync::Arc;

use bytes::BytesMut;
use remoting::headers::{
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
    match ctx.store.read_message(h.offset) {
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
    let max = usize::try_from(h.max_num).unwrap_or(0).clamp(1, 64);
    ctx.store.catch_up_dispatch().await;
    let (records, ts, phys) =
        ctx.store
            .query_by_key(&h.topic, &h.key, max, h.begin_timestamp, h.end_timestamp)?;
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
