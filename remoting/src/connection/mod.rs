//! One TCP connection, used by both server and client: a reader task, a writer task fed by a
//! bounded outbox (outbox.rs), and a cheap cloneable [`ConnectionHandle`].
//!
//! Owns: the socket, the `opaque -> waiter` map of requests *this side* sent, routing of every
//! incoming frame by the RESPONSE bit first (both peers send requests on one connection),
//! idle and partial-frame deadlines, and running processors for incoming requests (polled
//! once inline on the reader; only those that wait go to the connection's one runner of
//! waiting requests, pending.rs).
//! Senders encode their frames straight into the outbox from their own task (an invoking
//! caller, the reader answering inline, the runner of waiting requests). After each batch of
//! frames it read, the reader writes the outbox out itself with non-blocking writes when no
//! write is under way (no wake-up of, and hop to, the writer task per batch); the writer task
//! writes what is queued at other times and whatever the socket did not take at once.
//! Must not: block the reader on a processor or on the writer (a held long-poll pull must not
//! delay other responses; the reader only ever *tries* to queue), or hold a std lock across
//! `.await`.
//!
//! # Files
//!
//! ```text
//!  mod.rs        ConnectionId, ConnectionConfig, the state both tasks share, and the
//!                ConnectionHandle senders use (invoke, oneway, send, close)
//!  io.rs         the socket: spawning a connection, the writer task, the reader task and
//!                its idle / partial-frame deadlines
//!  dispatch.rs   an incoming request -> its processor (inline, or the runner of waiting
//!                requests) -> its response, SYSTEM_ERROR for a panic
//!  admission.rs  what a connection may take: the concurrent-request cap (SYSTEM_BUSY) and
//!                its charge to the owner's partial-frame budget
//!  go_away.rs    frames read while the owner shuts down (GO_AWAY by client version)
//!  busy_poll.rs  the reader's spinning non-blocking reads after a read returned data
//!  hasher.rs     the cheap hasher of maps keyed by values this process chooses itself
//! ```

mod admission;
mod busy_poll;
mod dispatch;
mod go_away;
mod hasher;
mod io;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::command::{next_opaque, RemotingCommand, FLAG_ONEWAY, FLAG_RESPONSE};
use crate::error::RemotingError;
use crate::frame::DEFAULT_MAX_FRAME_LEN;
use crate::outbox::{Outbox, Push, PushError};
use crate::waiters::Waiters;

pub use admission::OVERLOAD_REMARK;
pub use go_away::GO_AWAY_REMARK;
pub(crate) use hasher::LocalKeyMap;
pub(crate) use io::{spawn_connection, ConnectionContext};

/// Process-unique id of a connection (stable key for maps of client channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn-{}", self.0)
    }
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// Limits and timings of one connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Close after this long with no read and no write (Java: 120 s).
    pub idle_timeout: Duration,
    /// A started frame must be complete within this time (slow-drip protection).
    pub frame_deadline: Duration,
    /// Largest accepted total-length word.
    pub max_frame_len: usize,
    /// Frames the outbox holds before senders wait (it also holds at most 16 MiB, but always
    /// admits one frame when empty).
    pub write_queue_frames: usize,
    /// Requests this side may have outstanding on the connection.
    pub max_inflight_requests: usize,
    /// Incoming requests processed concurrently; beyond it the peer gets SYSTEM_BUSY.
    pub max_concurrent_requests: usize,
    /// Most bytes one read takes from the socket. Smaller reads let the reader answer a
    /// pipelined burst in several pieces, so the peer gets responses while it still sends.
    pub read_chunk: usize,
    /// After a read that returned data, the reader keeps yielding to the runtime for up to
    /// this long, trying a non-blocking read after each yield, before it waits for
    /// readiness: on a busy connection the next bytes are usually microseconds away, and
    /// parking the worker thread and waking it again (an idle vCPU, on a VM) costs more
    /// than that. Other tasks of the runtime run during the yields, but the thread stays
    /// busy, so it suits a host whose cores this process has to itself; several processes
    /// sharing few cores lose more to each other's polling than they gain. Zero (the
    /// default): never.
    pub busy_poll: Duration,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            idle_timeout: Duration::from_secs(120),
            frame_deadline: Duration::from_secs(30),
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            write_queue_frames: 4096,
            max_inflight_requests: 65_536,
            max_concurrent_requests: 65_536,
            read_chunk: 64 * 1024,
            busy_poll: Duration::ZERO,
        }
    }
}

struct Shared {
    id: ConnectionId,
    remote: SocketAddr,
    local: SocketAddr,
    outbox: Outbox,
    waiters: Waiters,
    closed: CancellationToken,
    /// Mirror of `closed` readable without the token's lock (checked on every send).
    closed_flag: AtomicBool,
    config: ConnectionConfig,
    epoch: Instant,
    last_activity_ms: AtomicU64,
}

impl Shared {
    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    fn last_activity(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_activity_ms.load(Ordering::Relaxed))
    }
}

/// A cloneable handle to a live (or closed) connection. Processors receive one; the broker may
/// store it to send requests to the client later.
#[derive(Clone)]
pub struct ConnectionHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionHandle")
            .field("id", &self.shared.id)
            .field("remote", &self.shared.remote)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Removes a waiter from the pending map when the invoking future ends early (timeout or drop).
struct PendingGuard<'a> {
    shared: &'a Shared,
    opaque: i32,
    /// False once the response arrived (the reader removed the waiter already).
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.waiters.remove(self.opaque);
        }
    }
}

impl ConnectionHandle {
    /// Process-unique connection id.
    pub fn id(&self) -> ConnectionId {
        self.shared.id
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.shared.remote
    }

    /// This side's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// True once the connection is closed (no more frames in either direction).
    pub fn is_closed(&self) -> bool {
        // Only the flag: `CancellationToken::is_cancelled` takes a lock, and this is checked
        // on every send. A cancellation from the owner's parent token (shutdown) reaches the
        // flag as soon as the reader or writer task sees it and calls `close`.
        self.shared.closed_flag.load(Ordering::Acquire)
    }

    /// Resolves when the connection closes.
    pub async fn closed(&self) {
        self.shared.closed.cancelled().await
    }

    /// Closes the connection; pending invokes fail with `ConnectionClosed`.
    pub fn close(&self) {
        self.shared.closed_flag.store(true, Ordering::Release);
        self.shared.closed.cancel();
        self.shared.outbox.close();
        self.shared.waiters.clear();
    }

    /// Requests this side sent that still wait for a response.
    pub fn inflight(&self) -> usize {
        self.shared.waiters.len()
    }

    fn closed_error(&self) -> RemotingError {
        RemotingError::ConnectionClosed {
            addr: self.shared.remote,
        }
    }

    fn timeout_error(&self, timeout: Duration) -> RemotingError {
        RemotingError::Timeout {
            addr: self.shared.remote,
            timeout,
        }
    }

    /// Encodes `cmd` into the outbox, waiting for room until `deadline` (forever if `None`).
    /// `timeout` is what a timeout error reports.
    async fn push(
        &self,
        cmd: &RemotingCommand,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> Result<(), RemotingError> {
        // Room in the queue is the usual case: no timer, no waiting.
        if self.try_queue(cmd)? {
            return Ok(());
        }
        self.queue_when_room(cmd, deadline, timeout).await
    }

    /// Encodes `cmd` into the outbox if there is room now: true when queued, false when the
    /// outbox is full (nothing written).
    fn try_queue(&self, cmd: &RemotingCommand) -> Result<bool, RemotingError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        match self.shared.outbox.try_push(cmd) {
            Push::Queued => Ok(true),
            Push::Full => Ok(false),
            Push::Closed => Err(self.closed_error()),
            Push::Encode(e) => Err(e.into()),
        }
    }

    /// The waiting half of [`ConnectionHandle::push`]: queues `cmd` once there is room.
    async fn queue_when_room(
        &self,
        cmd: &RemotingCommand,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> Result<(), RemotingError> {
        self.shared
            .outbox
            .push(cmd, deadline)
            .await
            .map_err(|e| match e {
                PushError::Closed => self.closed_error(),
                PushError::Timeout => self.timeout_error(timeout),
                PushError::Encode(e) => e.into(),
            })
    }

    /// Sends a request and waits for its response. A fresh opaque is assigned; the response
    /// bit and oneway bit are cleared.
    pub async fn invoke(
        &self,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.invoke_until(request, Instant::now() + timeout, timeout)
            .await
    }

    /// [`ConnectionHandle::invoke`] with the deadline already computed; `timeout` is what a
    /// timeout error reports.
    pub(crate) async fn invoke_until(
        &self,
        mut request: RemotingCommand,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let opaque = next_opaque();
        request.set_opaque(opaque);
        request.set_flag(request.flag() & !(FLAG_RESPONSE | FLAG_ONEWAY));
        let max = self.shared.config.max_inflight_requests;
        // The waiter holds this task's waker from the start: when the frame is queued without
        // waiting (the usual case), this same poll then ends without a second look at the map.
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        if !self
            .shared
            .waiters
            .register_waker(opaque, deadline, max, Some(waker))
        {
            return Err(RemotingError::TooManyInflight {
                addr: self.shared.remote,
                max,
            });
        }
        let mut guard = PendingGuard {
            shared: &self.shared,
            opaque,
            armed: true,
        };
        // Encoded right here, from the caller's task, into the connection's outbox. Closing
        // is checked after inserting: `close` cancels before clearing the map.
        let mut same_poll = self.try_queue(&request)?;
        if !same_poll {
            self.queue_when_room(&request, Some(deadline), timeout)
                .await?;
        }
        drop(request);
        // No timer here: the connection's sweeper drops the waiter at its deadline. A
        // response that came meanwhile woke the registered waker, so this task is polled
        // again and then finds it.
        let waiters = &self.shared.waiters;
        let outcome = std::future::poll_fn(|cx| {
            if std::mem::take(&mut same_poll) {
                return Poll::Pending;
            }
            waiters.poll_wait(opaque, cx)
        })
        .await;
        match outcome {
            Some(resp) => {
                guard.armed = false;
                Ok(resp)
            }
            None if Instant::now() >= deadline => Err(self.timeout_error(timeout)),
            None => Err(self.closed_error()),
        }
    }

    /// Sends a oneway request (no response expected). Waits at most `timeout` for room in the
    /// outbox.
    pub async fn invoke_oneway(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), RemotingError> {
        request.set_opaque(next_opaque());
        request.set_flag((request.flag() & !FLAG_RESPONSE) | FLAG_ONEWAY);
        self.push(&request, Some(Instant::now() + timeout), timeout)
            .await
    }

    /// Writes a command as is (e.g. a response built by hand). Waits for room in the queue.
    pub async fn send(&self, cmd: &RemotingCommand) -> Result<(), RemotingError> {
        self.push(cmd, None, Duration::ZERO).await
    }

    /// Like [`ConnectionHandle::send`], taking the command by value.
    pub async fn send_command(&self, cmd: RemotingCommand) -> Result<(), RemotingError> {
        self.send(&cmd).await
    }

    fn complete(&self, response: RemotingCommand) {
        if let Some(response) = self.shared.waiters.complete(response) {
            tracing::debug!(
                conn = %self.shared.id,
                peer = %self.shared.remote,
                opaque = response.opaque(),
                code = response.code(),
                "response matches no outstanding request; dropped"
            );
        }
    }
}
