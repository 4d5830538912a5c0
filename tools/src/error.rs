//! The one error type of the client library.

use std::net::SocketAddr;

use remoting::{RemotingError, ResponseCode};

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Transport failure (connect, timeout, closed connection, protocol).
    #[error(transparent)]
    Remoting(#[from] RemotingError),
    /// The server answered with a non-success code.
    #[error("{addr} answered {code}: {remark}")]
    Response {
        addr: SocketAddr,
        code: ResponseCode,
        remark: String,
    },
    /// The name server has no route for the topic.
    #[error("no route for topic {topic}")]
    NoRoute { topic: String },
    /// The route has no writable queue with a master (id 0) address.
    #[error("no writable queue with a master for topic {topic}")]
    NoWritableQueue { topic: String },
    /// An address string could not be parsed.
    #[error("bad address {0:?}")]
    BadAddress(String),
    /// A message id string could not be decoded.
    #[error("bad message id {0:?}")]
    BadMsgId(String),
    /// A response body could not be decoded.
    #[error("bad body from {what}: {reason}")]
    BadBody { what: &'static str, reason: String },
    /// A stored record could not be decoded.
    #[error("bad stored record: {0}")]
    Decode(#[from] broker::message::MessageError),
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// The response code if the server answered.
    pub fn response_code(&self) -> Option<ResponseCode> {
        match self {
            ClientError::Response { code, .. } => Some(*code),
            _ => None,
        }
    }
}
