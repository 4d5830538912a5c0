//! Errors at the crate boundary.

use std::net::SocketAddr;

/// What can make the name server fail to start or persist its state. Request-level problems
/// never surface here: they become error responses.
#[derive(Debug, thiserror::Error)]
pub enum NamesrvError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
    /// The KV-config file could not be read, parsed or written.
    #[error("kv config: {0}")]
    KvConfig(String),
    /// The remoting layer failed.
    #[error("remoting: {0}")]
    Remoting(#[from] remoting::error::RemotingError),
}
