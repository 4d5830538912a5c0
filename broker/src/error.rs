//! `BrokerError`: every reason a request can fail, and the single mapping
//! [`to_response`] from an error to the `(ResponseCode, remark)` a Java broker sends in the
//! same situation (remoting.md §10, broker-roles.md §7).
//!
//! Definite versus indeterminate (RELIABILITY R14): [`BrokerError::AppendIndeterminate`]
//! means the message may still be committed; every other send error means nothing was
//! appended.

use remoting::{HeaderError, ResponseCode};

use crate::message::MessageError;
use crate::store::StoreError;

/// Why the ledger did not (or may not have) accepted an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendRefusal {
    /// Not the leader (or not yet: before the first role, while catching up).
    NotLeader,
    /// Pending window full, leadership transfer, disk full: flow control.
    Busy(String),
    /// Storage failed or the ledger is shutting down.
    Unavailable(String),
}

/// Errors of the broker boundary.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A custom header is missing a field or has a bad value.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The broker is a slave (follower/candidate) or shutting down: writes refused.
    #[error("service not available now: {0}")]
    ServiceNotAvailable(String),
    /// The ledger refused the append synchronously (nothing appended).
    #[error("append refused: {0:?}")]
    AppendRefused(AppendRefusal),
    /// The append may or may not commit (quorum timeout, term change).
    #[error("append outcome unknown: {0}")]
    AppendIndeterminate(String),
    /// Body/properties/topic too long, bad batch, malformed properties.
    #[error("message illegal: {0}")]
    MessageIllegal(String),
    /// The topic does not exist and may not be auto-created.
    #[error("topic[{0}] not exist, apply first please!")]
    TopicNotExist(String),
    /// Sending to a system topic, a read-only topic, or a forbidden group.
    #[error("no permission: {0}")]
    NoPermission(String),
    /// Bad topic name, queue id out of range, ...
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// Unknown subscription group with auto-creation off.
    #[error("subscription group not exist: {0}")]
    SubscriptionGroupNotExist(String),
    /// Local store failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A lookup found nothing (QUERY_NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// Anything else; the remark is sent as is.
    #[error("{0}")]
    System(String),
}

impl From<MessageError> for BrokerError {
    fn from(e: MessageError) -> Self {
        match e {
            MessageError::IllegalTopic { .. } => BrokerError::InvalidParameter(e.to_string()),
            _ => BrokerError::MessageIllegal(e.to_string()),
        }
    }
}

/// Remark Java uses for flow-control refusals.
pub const BUSY_REMARK: &str = "[PC_SYNCHRONIZED]broker busy, start flow control for a while";

/// The response code and remark for `err` (the only place this mapping lives).
pub fn to_response(err: &BrokerError) -> (ResponseCode, String) {
    match err {
        BrokerError::Header(h) => h.to_response_parts(),
        BrokerError::ServiceNotAvailable(why) => (
            ResponseCode::SERVICE_NOT_AVAILABLE,
            format!("service not available now. {why}"),
        ),
        BrokerError::AppendRefused(AppendRefusal::NotLeader | AppendRefusal::Busy(_)) => {
            (ResponseCode::SYSTEM_BUSY, BUSY_REMARK.to_owned())
        }
        BrokerError::AppendRefused(AppendRefusal::Unavailable(why)) => (
            ResponseCode::SERVICE_NOT_AVAILABLE,
            format!("service not available now. {why}"),
        ),
        // 5.x: quorum timeout -> IN_SYNC_REPLICAS_NOT_ENOUGH, term change -> UNKNOWN_ERROR;
        // both SYSTEM_ERROR on the wire. The message may exist (R14).
        BrokerError::AppendIndeterminate(why) => (ResponseCode::SYSTEM_ERROR, why.clone()),
        BrokerError::MessageIllegal(why) => (ResponseCode::MESSAGE_ILLEGAL, why.clone()),
        BrokerError::TopicNotExist(_) => (ResponseCode::TOPIC_NOT_EXIST, err.to_string()),
        BrokerError::NoPermission(why) => (ResponseCode::NO_PERMISSION, why.clone()),
        BrokerError::InvalidParameter(why) => (ResponseCode::INVALID_PARAMETER, why.clone()),
        BrokerError::SubscriptionGroupNotExist(g) => (
            ResponseCode::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group not exist, {g}"),
        ),
        BrokerError::Store(e) => (ResponseCode::SYSTEM_ERROR, e.to_string()),
        BrokerError::NotFound(why) => (ResponseCode::QUERY_NOT_FOUND, why.clone()),
        BrokerError::System(why) => (ResponseCode::SYSTEM_ERROR, why.clone()),
    }
}

/// The response command for `err`.
pub fn error_response(err: &BrokerError) -> remoting::RemotingCommand {
    let (code, remark) = to_response(err);
    remoting::RemotingCommand::response(code, remark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_outcomes_map_per_broker_roles_section_7() {
        let code = |e: BrokerError| to_response(&e).0;
        assert_eq!(
            code(BrokerError::ServiceNotAvailable("slave".into())),
            ResponseCode::SERVICE_NOT_AVAILABLE
        );
        assert_eq!(
            code(BrokerError::AppendRefused(AppendRefusal::NotLeader)),
            ResponseCode::SYSTEM_BUSY
        );
        assert_eq!(
            code(BrokerError::AppendRefused(AppendRefusal::Busy(
                "full".into()
            ))),
            ResponseCode::SYSTEM_BUSY
        );
        assert_eq!(
            code(BrokerError::AppendIndeterminate(
                "in-sync replicas not enough".into()
            )),
            ResponseCode::SYSTEM_ERROR
        );
        assert_eq!(
            code(BrokerError::MessageIllegal("x".into())),
            ResponseCode::MESSAGE_ILLEGAL
        );
        assert_eq!(
            to_response(&BrokerError::AppendRefused(AppendRefusal::NotLeader)).1,
            BUSY_REMARK
        );
    }
}
