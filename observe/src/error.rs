//! The one error type this crate returns.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Failures of starting the metrics endpoint or installing logging.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("cannot bind the metrics endpoint to {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot open log file {path}: {source}")]
    LogFile { path: PathBuf, source: io::Error },
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}
