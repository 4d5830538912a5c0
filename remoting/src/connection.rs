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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use futures_util::future::CatchUnwind;
use futures_util::FutureExt;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{BudgetHold, PartialFrameBudget};
use crate::code::{version, ResponseCode};
use crate::command::{next_opaque, RemotingCommand, FLAG_ONEWAY, FLAG_RESPONSE};
use crate::error::{FrameError, RemotingError};
use crate::frame::{self, SerializeType, DEFAULT_MAX_FRAME_LEN};
use crate::outbox::{Outbox, Push, PushError, MAX_SCRATCH_CAPACITY};
use crate::pending::PendingQueue;
use crate::processor::{ConnectionListener, ProcessFuture, RequestProcessor};
use crate::waiters::Waiters;

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

/// Java's remark when a request is rejected for overload.
pub const OVERLOAD_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";

/// Java 5.x's remark of GO_AWAY, sent to newer clients while the server shuts down.
pub const GO_AWAY_REMARK: &str = "please go away";

/// Hasher for keys this process chooses itself (opaques are local counters, addresses come
/// from configuration and routes), so a multiplicative hash is enough: SipHash showed up on
/// every request.
#[derive(Default)]
pub(crate) struct LocalKeyHasher(u64);

impl LocalKeyHasher {
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for LocalKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.mix(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.mix(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
    fn write_i32(&mut self, v: i32) {
        self.mix(u64::from(v as u32));
    }
}

/// Map with [`LocalKeyHasher`].
pub(crate) type LocalKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<LocalKeyHasher>>;

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

/// What a connection needs from its owner (server or client).
#[derive(Clone)]
pub(crate) struct ConnectionContext {
    pub config: ConnectionConfig,
    pub processor: Arc<dyn RequestProcessor>,
    pub listener: Option<Arc<dyn ConnectionListener>>,
    /// Processor tasks, tracked so shutdown can drain them.
    pub tasks: TaskTracker,
    /// Reader and writer tasks.
    pub io: TaskTracker,
    /// Stop processing new requests (graceful shutdown, first phase).
    pub stop_reading: CancellationToken,
    /// Parent of every connection's close token (shutdown, last phase).
    pub close_all: CancellationToken,
    /// Bytes held in partial frames across the owner's connections.
    pub partial_budget: Arc<PartialFrameBudget>,
}

/// Starts reader and writer tasks for `stream` and returns its handle.
pub(crate) fn spawn_connection(
    stream: TcpStream,
    ctx: ConnectionContext,
) -> std::io::Result<ConnectionHandle> {
    let remote = stream.peer_addr()?;
    let local = stream.local_addr()?;
    stream.set_nodelay(true)?;
    let (read_half, write_half) = stream.into_split();
    let shared = Arc::new(Shared {
        id: ConnectionId(NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed)),
        remote,
        local,
        outbox: Outbox::new(ctx.config.write_queue_frames, ctx.config.max_frame_len),
        waiters: Waiters::new(),
        closed: ctx.close_all.child_token(),
        closed_flag: AtomicBool::new(false),
        config: ctx.config.clone(),
        epoch: Instant::now(),
        last_activity_ms: AtomicU64::new(0),
    });
    let handle = ConnectionHandle { shared };
    if let Some(l) = &ctx.listener {
        l.on_connect(&handle);
    }
    tracing::debug!(conn = %handle.id(), peer = %remote, "connection open");
    let writer_done = CancellationToken::new();
    let io = ctx.io.clone();
    let write_half = Arc::new(write_half);
    io.spawn(writer_loop(
        handle.clone(),
        write_half.clone(),
        writer_done.clone(),
    ));
    let sweeper = handle.clone();
    io.spawn(async move {
        tokio::select! {
            _ = sweeper.closed() => {}
            _ = sweeper.shared.waiters.sweep() => {}
        }
    });
    io.spawn(reader_loop(
        handle.clone(),
        read_half,
        write_half,
        ctx,
        writer_done,
    ));
    Ok(handle)
}

/// Capacity of a connection's read buffer until a frame needs more (not charged to the
/// partial-frame budget, budget.rs).
const INITIAL_READ_BUF: usize = 8 * 1024;

/// How long a closing connection may take to flush what was queued before it.
const CLOSE_FLUSH_GRACE: Duration = Duration::from_secs(2);

/// Writes all of `buf`, waiting for the socket when it is full. The write half is shared with
/// the reader, which writes inline between reads (only one of them writes at a time: the
/// outbox's `writing` state).
async fn write_all_shared(w: &OwnedWriteHalf, buf: &[u8]) -> std::io::Result<()> {
    let mut written = 0;
    while written < buf.len() {
        match w.try_write(&buf[written..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => w.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn writer_loop(
    conn: ConnectionHandle,
    write_half: Arc<OwnedWriteHalf>,
    done: CancellationToken,
) {
    let outbox = &conn.shared.outbox;
    let closed = conn.shared.closed.cancelled();
    tokio::pin!(closed);
    // Starts empty: the outbox and this buffer trade places on every batch, so both grow to
    // the connection's actual batch size (an idle connection holds no write buffer).
    let mut out = BytesMut::new();
    let mut failure: Option<std::io::Error> = None;
    loop {
        // Everything queued since the last write goes out in one syscall.
        let more = tokio::select! {
            biased;
            _ = &mut closed => break,
            more = outbox.take(&mut out) => more,
        };
        if !more {
            break;
        }
        let r = {
            let write = write_all_shared(&write_half, &out);
            tokio::pin!(write);
            tokio::select! {
                biased;
                r = &mut write => r,
                // A peer that stops reading must not pin this task once the connection is
                // closed.
                _ = &mut closed => match tokio::time::timeout(CLOSE_FLUSH_GRACE, &mut write).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "write not finished in time after close",
                    )),
                },
            }
        };
        if let Err(e) = r {
            failure = Some(e);
            break;
        }
        out.clear();
        if out.capacity() > MAX_SCRATCH_CAPACITY {
            out = BytesMut::new();
        }
        outbox.write_done();
        conn.shared.touch();
    }
    // No frame is accepted from here on.
    conn.close();
    if failure.is_none() {
        // Closing: write what was already queued (responses of drained processors), after
        // an inline write of the reader that may be under way.
        let drain = async {
            while outbox.take_remaining(&mut out).await {
                write_all_shared(&write_half, &out).await?;
                out.clear();
                outbox.write_done();
            }
            Ok::<(), std::io::Error>(())
        };
        if let Ok(Err(e)) = tokio::time::timeout(CLOSE_FLUSH_GRACE, drain).await {
            failure = Some(e);
        }
    }
    if let Some(e) = failure {
        tracing::debug!(conn = %conn.id(), peer = %conn.remote_addr(), error = %e, "write failed; closing");
    }
    // The FIN goes out when the last holder of the write half (this task or the reader,
    // which drops its own as soon as it stops reading) lets go of it.
    drop(write_half);
    done.cancel();
}

/// Why the reader stopped.
enum ReadEnd {
    Eof,
    Closed,
    Io(std::io::Error),
    Frame(FrameError),
    Idle,
    FrameDeadline,
    PartialBudget,
}

async fn reader_loop(
    conn: ConnectionHandle,
    mut read_half: OwnedReadHalf,
    write_half: Arc<OwnedWriteHalf>,
    ctx: ConnectionContext,
    writer_done: CancellationToken,
) {
    let waiting = Waiting {
        running: Arc::new(AtomicUsize::new(0)),
        pending: Arc::new(PendingQueue::new()),
    };
    let end = read_frames(&conn, &mut read_half, &write_half, &ctx, &waiting).await;
    drop(write_half);
    match &end {
        ReadEnd::Eof => {
            tracing::debug!(conn = %conn.id(), peer = %conn.remote_addr(), "peer closed")
        }
        ReadEnd::Closed => {
            tracing::debug!(conn = %conn.id(), peer = %conn.remote_addr(), "closed locally")
        }
        ReadEnd::Io(e) => {
            tracing::debug!(conn = %conn.id(), peer = %conn.remote_addr(), error = %e, "read failed")
        }
        ReadEnd::Frame(e) => {
            tracing::warn!(conn = %conn.id(), peer = %conn.remote_addr(), error = %e, "decode error; closing connection")
        }
        ReadEnd::Idle => {
            tracing::info!(conn = %conn.id(), peer = %conn.remote_addr(), "idle timeout; closing connection")
        }
        ReadEnd::FrameDeadline => {
            tracing::warn!(conn = %conn.id(), peer = %conn.remote_addr(), "partial frame not completed in time; closing connection")
        }
        ReadEnd::PartialBudget => {
            tracing::warn!(conn = %conn.id(), peer = %conn.remote_addr(), limit = ctx.partial_budget.limit(), "bytes held in partial frames over the budget; closing connection")
        }
    }
    if matches!(end, ReadEnd::Closed) && !conn.is_closed() {
        // Graceful shutdown: stop reading, let processors finish; the owner closes later.
        conn.closed().await;
    }
    conn.close();
    writer_done.cancelled().await;
    if let Some(l) = &ctx.listener {
        l.on_close(&conn);
    }
}

async fn read_frames(
    conn: &ConnectionHandle,
    read_half: &mut OwnedReadHalf,
    write_half: &OwnedWriteHalf,
    ctx: &ConnectionContext,
    waiting: &Waiting,
) -> ReadEnd {
    let cfg = &ctx.config;
    let outbox = &conn.shared.outbox;
    let mut buf = BytesMut::with_capacity(INITIAL_READ_BUF);
    // Scratch buffer of inline writes (trades places with the outbox's queue).
    let mut out = BytesMut::new();
    let mut partial_since: Option<Instant> = None;
    let mut hold = BudgetHold::new(ctx.partial_budget.clone());
    // Created once and polled again on every read: registering a fresh cancellation waiter
    // and timer per read showed up in profiles. The timer is moved only when it fires or
    // when an earlier deadline (a partial frame) appears; when it fires early the real
    // deadlines are checked and it is set again.
    let closed = conn.shared.closed.cancelled();
    let stop_reading = ctx.stop_reading.cancelled();
    let timer = tokio::time::sleep_until(conn.shared.last_activity() + cfg.idle_timeout);
    tokio::pin!(closed, stop_reading, timer);
    // Set once the owner shuts down gracefully: frames are still read (responses complete
    // their waiters, 5.x clients are told to go away) but no new request is processed.
    let mut shutting_down = false;
    // The last read returned data (see `ConnectionConfig::busy_poll`).
    let mut busy = false;
    loop {
        // Whether a frame completed in this batch: what is left then is a new frame.
        let mut decoded = false;
        loop {
            match frame::decode_frame(&mut buf, cfg.max_frame_len) {
                Ok(Some(raw)) => {
                    decoded = true;
                    match RemotingCommand::from_frame(raw) {
                        Ok(cmd) if shutting_down => refuse_while_shutting_down(conn, cmd),
                        Ok(cmd) => dispatch(conn, cmd, ctx, waiting),
                        Err(e) => return ReadEnd::Frame(e),
                    }
                }
                Ok(None) => break,
                Err(e) => return ReadEnd::Frame(e),
            }
        }
        // Responses of this batch (and anything else queued) go out right away, from here.
        outbox.flush_inline(&mut out, |b| write_half.try_write(b));
        // The deadline times each frame from its first bytes: a frame left over after
        // others completed started in the last read, not when an earlier frame did (a
        // pipelining peer's buffer may never be empty between reads).
        if buf.is_empty() {
            partial_since = None;
        } else if decoded || partial_since.is_none() {
            partial_since = Some(Instant::now());
        }
        // Read in chunks of at most `read_chunk` so memory follows the bytes actually
        // received.
        let chunk = cfg.read_chunk.max(4096);
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(chunk);
        }
        // What is left after decoding is a partial frame: its buffer, as the next read fills
        // it, is charged to the budget unless it is still the initial one (budget.rs).
        let charge = if buf.is_empty() || buf.capacity() <= INITIAL_READ_BUF {
            0
        } else {
            buf.capacity()
        };
        if !hold.set(buf.len(), charge) {
            return ReadEnd::PartialBudget;
        }
        if let Some(t) = partial_since {
            let frame_due = t + cfg.frame_deadline;
            if frame_due < timer.deadline() {
                timer.as_mut().reset(frame_due);
            }
        }
        if std::mem::take(&mut busy) && !cfg.busy_poll.is_zero() {
            let mut got = false;
            let until = Instant::now() + cfg.busy_poll;
            while Instant::now() < until {
                tokio::task::yield_now().await;
                if conn.shared.closed.is_cancelled() {
                    return ReadEnd::Closed;
                }
                match read_half.try_read_buf(&mut (&mut buf).limit(chunk)) {
                    Ok(0) => break, // the blocking read below sees the end of the stream
                    Ok(_) => {
                        got = true;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return ReadEnd::Io(e),
                }
            }
            if got {
                conn.shared.touch();
                outbox.defer_wakeups();
                busy = true;
                continue;
            }
        }
        let mut room = (&mut buf).limit(chunk);
        tokio::select! {
            biased;
            _ = &mut closed => return ReadEnd::Closed,
            _ = &mut stop_reading, if !shutting_down => shutting_down = true,
            r = read_half.read_buf(&mut room) => match r {
                // The owner closes the connection once running processors are drained.
                Ok(0) if shutting_down => return ReadEnd::Closed,
                Ok(0) => return ReadEnd::Eof,
                Ok(_) => {
                    conn.shared.touch();
                    outbox.defer_wakeups();
                    busy = true;
                }
                Err(e) => return ReadEnd::Io(e),
            },
            _ = &mut timer => {
                let now = Instant::now();
                if partial_since.is_some_and(|t| now >= t + cfg.frame_deadline) {
                    return ReadEnd::FrameDeadline;
                }
                let idle_at = conn.shared.last_activity() + cfg.idle_timeout;
                if now >= idle_at {
                    return ReadEnd::Idle;
                }
                let next = match partial_since {
                    Some(t) => idle_at.min(t + cfg.frame_deadline),
                    None => idle_at,
                };
                timer.as_mut().reset(next);
            }
        }
    }
}

/// Routes a frame read while the owner shuts down: a response still completes its waiter; a
/// request from a client newer than V5_3_1 is answered GO_AWAY "please go away" (spec §3, so
/// it retries elsewhere); any other request is dropped unanswered, as if never read.
fn refuse_while_shutting_down(conn: &ConnectionHandle, cmd: RemotingCommand) {
    if cmd.is_response() {
        conn.complete(cmd);
        return;
    }
    if cmd.is_oneway() || cmd.version() <= version::V5_3_1 {
        return;
    }
    let go_away = RemotingCommand::response_to(&cmd, ResponseCode::GO_AWAY, GO_AWAY_REMARK);
    // Never wait here: the reader must keep reading responses.
    let _ = conn.shared.outbox.try_push(&go_away);
}

/// Routes one incoming frame: responses complete a waiter; requests go to the processor.
///
/// `running` counts requests whose processor moved to its own task (the one polled inline
/// here is the reader itself); at `max_concurrent_requests` the peer gets SYSTEM_BUSY.
fn dispatch(
    conn: &ConnectionHandle,
    cmd: RemotingCommand,
    ctx: &ConnectionContext,
    waiting: &Waiting,
) {
    let running = &waiting.running;
    if cmd.is_response() {
        conn.complete(cmd);
        return;
    }
    if running.load(Ordering::Acquire) >= ctx.config.max_concurrent_requests.max(1) {
        if !cmd.is_oneway() {
            let busy =
                RemotingCommand::response_to(&cmd, ResponseCode::SYSTEM_BUSY, OVERLOAD_REMARK);
            // Never wait here: the reader must keep reading responses.
            let _ = conn.shared.outbox.try_push(&busy);
        }
        return;
    }
    let meta = RequestMeta {
        oneway: cmd.is_oneway(),
        opaque: cmd.opaque(),
        serialize_type: cmd.serialize_type(),
        code: cmd.code(),
    };
    // Poll once right here: most processors answer without waiting. Anything that waits (a
    // held long-poll pull, a store append) goes to the connection's runner of waiting
    // requests (`pending`), so the reader never waits for a processor. A panic while
    // building or polling the future is caught like one inside it.
    let processor = ctx.processor.clone();
    let task_conn = conn.clone();
    let polled = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let mut work = processor.process_owned(task_conn, cmd);
        match (&mut work).now_or_never() {
            Some(response) => Ok(response),
            None => Err(work),
        }
    }));
    match polled {
        Ok(Ok(response)) => {
            if let Some(response) = finish_response(conn, meta, Ok(response)) {
                queue_response(conn, &ctx.tasks, meta, response, false);
            }
        }
        Ok(Err(work)) => {
            running.fetch_add(1, Ordering::AcqRel);
            let request = WaitingRequest {
                work: AssertUnwindSafe(work).catch_unwind(),
                meta,
                _running: RunningGuard(running.clone()),
            };
            if waiting.pending.push(request) {
                let (pending, conn, tasks) =
                    (waiting.pending.clone(), conn.clone(), ctx.tasks.clone());
                ctx.tasks.spawn(async move {
                    pending
                        .run(|(meta, outcome)| {
                            if let Some(response) = finish_response(&conn, meta, outcome) {
                                queue_response(&conn, &tasks, meta, response, true);
                            }
                        })
                        .await;
                });
            }
        }
        Err(_) => {
            if let Some(response) = finish_response(conn, meta, Err(())) {
                queue_response(conn, &ctx.tasks, meta, response, false);
            }
        }
    }
}

/// Queues a response without waiting (`after_wait`: the answer of a request that waited,
/// see `Outbox::push_after_wait`): when the outbox is full, a task waits for room instead.
fn queue_response(
    conn: &ConnectionHandle,
    tasks: &TaskTracker,
    meta: RequestMeta,
    response: RemotingCommand,
    after_wait: bool,
) {
    match conn.shared.outbox.try_push_marked(&response, after_wait) {
        Push::Queued | Push::Closed => {}
        Push::Full => {
            let conn = conn.clone();
            tasks.spawn(async move { send_response(&conn, meta, response).await });
        }
        Push::Encode(e) => {
            let fallback = unencodable_response(conn, meta, &e);
            let _ = conn.shared.outbox.try_push_marked(&fallback, after_wait);
        }
    }
}

/// Sends a response, waiting for room in the outbox; one that cannot be encoded is replaced
/// by SYSTEM_ERROR.
async fn send_response(conn: &ConnectionHandle, meta: RequestMeta, response: RemotingCommand) {
    let r = match conn.shared.outbox.push_after_wait(&response, None).await {
        Err(PushError::Encode(e)) => {
            let fallback = unencodable_response(conn, meta, &e);
            conn.shared.outbox.push_after_wait(&fallback, None).await
        }
        other => other,
    };
    if let Err(e) = r {
        tracing::debug!(conn = %conn.id(), code = meta.code, error = ?e, "response not sent");
    }
}

/// The SYSTEM_ERROR answer sent instead of a response that cannot be encoded.
fn unencodable_response(
    conn: &ConnectionHandle,
    meta: RequestMeta,
    error: &FrameError,
) -> RemotingCommand {
    tracing::warn!(conn = %conn.id(), code = meta.code, error = %error, "response cannot be encoded");
    let mut response = RemotingCommand::response(
        ResponseCode::SYSTEM_ERROR,
        format!("response cannot be encoded: {error}"),
    );
    stamp_response(&mut response, meta);
    response
}

/// Gives back a slot of the concurrent-request count when the waiting request ends.
struct RunningGuard(Arc<AtomicUsize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the reader shares with the runner of its connection's waiting requests.
struct Waiting {
    /// Requests whose processor waits (for `max_concurrent_requests`).
    running: Arc<AtomicUsize>,
    pending: Arc<PendingQueue<WaitingRequest>>,
}

/// A request whose processor waited when first polled: yields its outcome (`Err` for a
/// panic) and releases its `running` count once done.
struct WaitingRequest {
    work: CatchUnwind<AssertUnwindSafe<ProcessFuture<'static>>>,
    meta: RequestMeta,
    _running: RunningGuard,
}

impl Future for WaitingRequest {
    type Output = (RequestMeta, Result<Option<RemotingCommand>, ()>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Self::Output> {
        let meta = self.meta;
        self.work.poll_unpin(cx).map(|r| (meta, r.map_err(|_| ())))
    }
}

/// What the response to a request needs from it once the request itself has been consumed.
#[derive(Clone, Copy)]
struct RequestMeta {
    oneway: bool,
    opaque: i32,
    serialize_type: SerializeType,
    code: i32,
}

/// Marks `response` as the answer to the request `meta` describes.
fn stamp_response(response: &mut RemotingCommand, meta: RequestMeta) {
    response.set_opaque(meta.opaque);
    response.set_flag(response.flag() | FLAG_RESPONSE);
    response.set_serialize_type(meta.serialize_type);
}

/// Turns a processor outcome into the frame to send, if any: nothing for oneway requests or
/// `None`; SYSTEM_ERROR for a panic.
fn finish_response(
    conn: &ConnectionHandle,
    meta: RequestMeta,
    outcome: Result<Option<RemotingCommand>, ()>,
) -> Option<RemotingCommand> {
    let response = match outcome {
        Ok(r) => r,
        Err(()) => {
            tracing::error!(conn = %conn.id(), code = meta.code, "processor panicked");
            Some(RemotingCommand::response(
                ResponseCode::SYSTEM_ERROR,
                "processor panicked while handling the request",
            ))
        }
    };
    if meta.oneway {
        return None;
    }
    let mut response = response?;
    stamp_response(&mut response, meta);
    Some(response)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{
        processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
        ResponseCode, ServerConfig,
    };

    #[tokio::test]
    async fn a_panicking_processor_is_answered_with_system_error() {
        let server = RemotingServer::builder(ServerConfig::default())
            .register(
                RequestCode(1),
                processor_fn(|_c, _r| -> std::future::Ready<Option<RemotingCommand>> {
                    panic!("while building the future")
                }),
            )
            .register(
                RequestCode(2),
                processor_fn(|_c, _r| async move { panic!("inside the future") }),
            )
            .register(
                RequestCode(3),
                processor_fn(|_c, _r| async move {
                    tokio::task::yield_now().await;
                    panic!("after waiting, on its own task")
                }),
            )
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = RemotingClient::new(ClientConfig::default());
        for code in [1, 2, 3] {
            let r = client
                .invoke(
                    server.local_addr(),
                    RemotingCommand::request_empty(RequestCode(code)),
                    Duration::from_secs(5),
                )
                .await
                .unwrap();
            assert_eq!(r.response_code(), ResponseCode::SYSTEM_ERROR, "code {code}");
        }
        client.shutdown().await;
        server.shutdown().await;
    }

    #[tokio::test]
    async fn requests_over_the_concurrency_cap_get_system_busy() {
        let release = std::sync::Arc::new(tokio::sync::Notify::new());
        let held = release.clone();
        let config = ServerConfig {
            connection: crate::ConnectionConfig {
                max_concurrent_requests: 1,
                ..crate::ConnectionConfig::default()
            },
            ..ServerConfig::default()
        };
        let server = RemotingServer::builder(config)
            .register(
                RequestCode(1),
                processor_fn(move |_c, _r| {
                    let held = held.clone();
                    async move {
                        held.notified().await;
                        Some(RemotingCommand::success())
                    }
                }),
            )
            .default_processor(processor_fn(|_c, _r| async move {
                Some(RemotingCommand::success())
            }))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = RemotingClient::new(ClientConfig::default());
        let addr = server.local_addr();
        let t = Duration::from_secs(5);
        let first = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), t)
                    .await
            })
        };
        // Until the held request occupies the only slot, others may still pass.
        let busy = loop {
            let r = client
                .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), t)
                .await
                .unwrap();
            if r.response_code() == ResponseCode::SYSTEM_BUSY {
                break r;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(busy.remark(), Some(super::OVERLOAD_REMARK));
        release.notify_one();
        let r = first.await.unwrap().unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS);
        // The slot is free again once the held processor's task ended.
        let deadline = tokio::time::Instant::now() + t;
        loop {
            let r = client
                .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), t)
                .await
                .unwrap();
            if r.response_code() == ResponseCode::SUCCESS {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "slot never freed");
            tokio::task::yield_now().await;
        }
        client.shutdown().await;
        server.shutdown().await;
    }
}
