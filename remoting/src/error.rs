//! Error types of the crate boundary.
//!
//! Byte layers (`frame`, `header`) return small enums carrying the numbers that matter;
//! the network layers wrap them in [`RemotingError`]. Header decode errors of a *custom*
//! header are a separate [`HeaderError`] because a server answers them with a response code
//! instead of closing the connection.

use std::net::SocketAddr;
use std::time::Duration;

use crate::code::ResponseCode;
use crate::command::RemotingCommand;

/// A framing problem: the byte stream cannot be split into frames. The connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The 4-byte length word is negative.
    #[error("negative frame length {len}")]
    NegativeLength { len: i32 },
    /// The length word exceeds the configured maximum.
    #[error("frame length {len} exceeds the maximum {max}")]
    TooLong { len: usize, max: usize },
    /// The frame is too short to hold the header-length word.
    #[error("frame length {len} leaves no room for the header-length word")]
    TooShort { len: usize },
    /// The 24-bit header length does not fit in the frame.
    #[error("header length {header_len} exceeds frame payload {available}")]
    BadHeaderLength { header_len: usize, available: usize },
    /// The high byte of the header-length word is neither JSON (0) nor ROCKETMQ (1).
    #[error("unknown serialize type {found}")]
    UnknownSerializeType { found: u8 },
    /// The header bytes could not be parsed.
    #[error("bad header: {0}")]
    Header(#[from] WireHeaderError),
    /// A command cannot be encoded (e.g. header larger than 24 bits or frame too long).
    #[error("cannot encode: {0}")]
    Encode(&'static str),
}

/// A command header (the RemotingCommand fields themselves) could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireHeaderError {
    /// The JSON header is not valid or has wrong types.
    #[error("invalid JSON header: {0}")]
    Json(String),
    /// The ROCKETMQ header ended before a field.
    #[error("ROCKETMQ header truncated at {at} (need {need} more bytes, {have} left)")]
    Truncated { at: usize, need: usize, have: usize },
    /// A length inside the ROCKETMQ header is negative or runs past the header.
    #[error("ROCKETMQ header length field {what}={len} out of bounds (remaining {remaining})")]
    BadLength {
        what: &'static str,
        len: i64,
        remaining: usize,
    },
    /// A string in the ROCKETMQ header is not UTF-8.
    #[error("ROCKETMQ header {what} is not UTF-8")]
    NotUtf8 { what: &'static str },
}

/// A typed custom header (extFields) could not be built from a request or response.
///
/// Servers map this to a response (`SYSTEM_ERROR` with a remark, like Java's
/// `RemotingCommandException`) and keep the connection open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// A required (`@CFNotNull`) field is absent.
    #[error("the custom field <{field}> is null")]
    MissingField { field: &'static str },
    /// A field is present but not parsable as its type.
    #[error("the custom field <{field}> has an invalid value {value:?} (expected {expected})")]
    InvalidField {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl HeaderError {
    /// Response code and remark a server sends back for this error (Java answers
    /// `SYSTEM_ERROR` with the exception summary).
    pub fn to_response_parts(&self) -> (ResponseCode, String) {
        (
            ResponseCode::SYSTEM_ERROR,
            format!("org.apache.rocketmq.remoting.exception.RemotingCommandException: {self}"),
        )
    }

    /// The response a server sends for this error (`SYSTEM_ERROR` + remark).
    pub fn to_response(&self) -> RemotingCommand {
        let (code, remark) = self.to_response_parts();
        RemotingCommand::response(code, remark)
    }
}

/// Errors of the network layers (server, client, codec).
#[derive(Debug, thiserror::Error)]
pub enum RemotingError {
    /// No response arrived in time.
    #[error("request to {addr} timed out after {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    /// A TCP connection could not be established.
    #[error("connect to {addr} failed: {reason}")]
    ConnectFailed { addr: SocketAddr, reason: String },
    /// The connection closed before the response arrived (or was already closed).
    #[error("connection to {addr} closed")]
    ConnectionClosed { addr: SocketAddr },
    /// Too many requests are already waiting for responses on this connection.
    #[error("too many requests in flight to {addr} (max {max})")]
    TooManyInflight { addr: SocketAddr, max: usize },
    /// The peer sent bytes that break the protocol; the connection is closed.
    #[error("protocol error: {0}")]
    Protocol(#[from] FrameError),
    /// A typed header could not be decoded.
    #[error("header error: {0}")]
    Header(#[from] HeaderError),
    /// A JSON body could not be decoded.
    #[error("body error: {0}")]
    Body(String),
    /// An I/O error (bind, accept, read, write).
    #[error("io error: {0}")]
    Io(#[from] std::io::Error),
    /// The component is shutting down.
    #[error("shutting down")]
    Shutdown,
}
