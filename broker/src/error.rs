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
    /// What Java's store refuses as `MESSAGE_ILLEGAL` / `PROPERTIES_SIZE_EXCEEDED` (body over
    /// `maxMessageSize`, properties over 32767 bytes, a transactional or delayed batch):
    /// answered with Java's one remark for all of them, followed by the cause.
    #[error("message illegal ({cause}), body limit {max_body_bytes} bytes")]
    PutIllegal {
        cause: String,
        max_body_bytes: usize,
    },
    /// UPDATE_AND_CREATE_TOPIC / DELETE_TOPIC_IN_BROKER naming a system topic.
    #[error("The topic[{0}] is conflict with system topic.")]
    SystemTopicConflict(String),
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
            // Java 5 answers a bad topic name on the send path with INVALID_PARAMETER and
            // TopicValidator's remark (the admin paths map it to SYSTEM_ERROR themselves).
            MessageError::IllegalTopic { reason, .. } => {
                BrokerError::InvalidParameter(reason.to_owned())
            }
            _ => BrokerError::MessageIllegal(e.to_string()),
        }
    }
}

/// Remark Java uses for flow-control refusals.
pub const BUSY_REMARK: &str = "[PC_SYNCHRONIZED]broker busy, start flow control for a while";

/// Java 5's remark for every store-level MESSAGE_ILLEGAL (`SendMessageProcessor`
/// `handlePutMessageResult`) for a `maxMessageSize` of `max_body_bytes`.
pub fn put_illegal_remark(max_body_bytes: usize) -> String {
    format!(
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit {max_body_bytes}B, msg properties length limit 32KB."
    )
}

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
        BrokerError::PutIllegal {
            cause,
            max_body_bytes,
        } => (
            ResponseCode::MESSAGE_ILLEGAL,
            format!("{} ({cause})", put_illegal_remark(*max_body_bytes)),
        ),
        BrokerError::SystemTopicConflict(_) => (ResponseCode::SYSTEM_ERROR, err.to_string()),
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

    #[test]
    fn validation_errors_carry_java_codes_and_remarks() {
        let (code, remark) = to_response(&BrokerError::PutIllegal {
            cause: "batch message does not support transaction".into(),
            max_body_bytes: 4096,
        });
        assert_eq!(code, ResponseCode::MESSAGE_ILLEGAL);
        assert!(remark.starts_with(&put_illegal_remark(4096)), "{remark}");
        assert!(remark.contains("msg body length limit 4096B"), "{remark}");
        assert!(remark.ends_with("(batch message does not support transaction)"));
        let (code, remark) = to_response(&BrokerError::SystemTopicConflict("TBW102".into()));
        assert_eq!(code, ResponseCode::SYSTEM_ERROR);
        assert_eq!(remark, "The topic[TBW102] is conflict with system topic.");
        let e: BrokerError = crate::message::topic::validate_topic("a b")
            .unwrap_err()
            .into();
        assert_eq!(
            to_response(&e),
            (
                ResponseCode::INVALID_PARAMETER,
                crate::message::topic::TOPIC_ILLEGAL_CHARS_REMARK.to_owned()
            )
        );
    }
}
