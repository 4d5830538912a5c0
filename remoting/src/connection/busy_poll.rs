//! Busy polling (`ConnectionConfig::busy_poll`): after a read that returned data, the reader
//! yields to the runtime and retries a non-blocking read for a short while before it parks
//! on readiness.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::net::tcp::OwnedReadHalf;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a spell of busy polling ended.
pub(super) enum BusyRead {
    /// A read returned data.
    Data,
    /// Nothing arrived within the window, or the stream ended (which the reader's blocking
    /// read then sees): wait for readiness.
    Nothing,
    /// The connection was closed meanwhile.
    Closed,
    /// A read failed.
    Io(std::io::Error),
}

/// Yields and tries a non-blocking read of at most `chunk` bytes into `buf`, again and again
/// for up to `window`, until one returns something.
pub(super) async fn read_while_busy(
    closed: &CancellationToken,
    read_half: &OwnedReadHalf,
    buf: &mut BytesMut,
    chunk: usize,
    window: Duration,
) -> BusyRead {
    let until = Instant::now() + window;
    while Instant::now() < until {
        tokio::task::yield_now().await;
        if closed.is_cancelled() {
            return BusyRead::Closed;
        }
        match read_half.try_read_buf(&mut (&mut *buf).limit(chunk)) {
            Ok(0) => break, // the reader's blocking read sees the end of the stream
            Ok(_) => return BusyRead::Data,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return BusyRead::Io(e),
        }
    }
    BusyRead::Nothing
}
