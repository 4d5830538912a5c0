//! One TCP connection, used by both server and client: a reader task, a writer task fed by a
//! bounded channel, and a cheap cloneable [`ConnectionHandle`].
//!
//! Owns: the socket, the `opaque -> waiter` map of requests *this side* sent, routing of every
//! incoming frame by the RESPONSE bit first (both peers send requests on one connection),
//! idle and partial-frame deadlines, and spawning processor tasks for incoming requests.
//! Must not: block the reader on a processor or on the writer (a held long-poll pull must not
//! delay other responses), or hold a std lock across `.await`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{BudgetHold, PartialFrameBudget};
use crate::code::ResponseCode;
use crate::command::{next_opaque, RemotingCommand, FLAG_ONEWAY, FLAG_RESPONSE};
use crate::error::{FrameError, RemotingError};
use crate::frame::{self, SerializeType, DEFAULT_MAX_FRAME_LEN};
use crate::processor::{ConnectionListener, RequestProcessor};

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
    /// Capacity (frames) of the writer's queue.
    pub write_queue_frames: usize,
    /// Requests this side may have outstanding on the connection.
    pub max_inflight_requests: usize,
    /// Incoming requests processed concurrently; beyond it the peer gets SYSTEM_BUSY.
    pub max_concurrent_requests: usize,
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
        }
    }
}

/// Java's remark when a request is rejected for overload.
pub const OVERLOAD_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";

/// Waiters of the requests this side sent, by opaque.
type PendingMap = LocalKeyMap<i32, oneshot::Sender<RemotingCommand>>;

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
    tx: mpsc::Sender<RemotingCommand>,
    pending: Mutex<PendingMap>,
    closed: CancellationToken,
    /// Mirror of `closed` readable without the token's lock (checked on every send).
    closed_flag: AtomicBool,
    config: ConnectionConfig,
    epoch: Instant,
    last_activity_ms: AtomicU64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, PendingMap> {
        // A poisoned map only means a panic elsewhere while holding it; the map is still valid.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

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
            self.shared.pending().remove(&self.opaque);
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
        self.shared.pending().clear();
    }

    /// Requests this side sent that still wait for a response.
    pub fn inflight(&self) -> usize {
        self.shared.pending().len()
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

    /// Makes sure the writer will be able to encode `cmd` (frames are encoded by the writer,
    /// straight into its output buffer). A cheap upper bound settles almost every case.
    fn check_encodable(&self, cmd: &RemotingCommand) -> Result<(), RemotingError> {
        let max = self.shared.config.max_frame_len;
        if encoded_len_upper_bound(cmd) <= max.min(frame::MAX_HEADER_LEN) {
            return Ok(());
        }
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf, max)?;
        Ok(())
    }

    async fn enqueue(
        &self,
        frame: RemotingCommand,
        deadline: Instant,
    ) -> Result<(), RemotingError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        // Room in the queue is the usual case: no timer, no async send.
        let frame = match self.shared.tx.try_send(frame) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.closed_error()),
            Err(mpsc::error::TrySendError::Full(frame)) => frame,
        };
        match tokio::time::timeout_at(deadline, self.shared.tx.send(frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => Err(self.timeout_error(deadline.saturating_duration_since(Instant::now()))),
        }
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
        self.check_encodable(&request)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.shared.pending();
            if pending.len() >= self.shared.config.max_inflight_requests {
                return Err(RemotingError::TooManyInflight {
                    addr: self.shared.remote,
                    max: self.shared.config.max_inflight_requests,
                });
            }
            pending.insert(opaque, tx);
        }
        let mut guard = PendingGuard {
            shared: &self.shared,
            opaque,
            armed: true,
        };
        // Checked after inserting: `close` cancels before clearing the map.
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.enqueue(request, deadline).await.map_err(|e| match e {
            RemotingError::Timeout { .. } => self.timeout_error(timeout),
            other => other,
        })?;
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(resp)) => {
                guard.armed = false;
                Ok(resp)
            }
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => Err(self.timeout_error(timeout)),
        }
    }

    /// Sends a oneway request (no response expected). Waits at most `timeout` for room in the
    /// write queue.
    pub async fn invoke_oneway(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), RemotingError> {
        request.set_opaque(next_opaque());
        request.set_flag((request.flag() & !FLAG_RESPONSE) | FLAG_ONEWAY);
        self.check_encodable(&request)?;
        self.enqueue(request, Instant::now() + timeout)
            .await
            .map_err(|e| match e {
                RemotingError::Timeout { .. } => self.timeout_error(timeout),
                other => other,
            })
    }

    /// Writes a command as is (e.g. a response built by hand). Waits for room in the queue.
    pub async fn send(&self, cmd: &RemotingCommand) -> Result<(), RemotingError> {
        self.send_command(cmd.clone()).await
    }

    /// Like [`ConnectionHandle::send`], taking the command by value (no clone).
    pub async fn send_command(&self, cmd: RemotingCommand) -> Result<(), RemotingError> {
        self.check_encodable(&cmd)?;
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.shared
            .tx
            .send(cmd)
            .await
            .map_err(|_| self.closed_error())
    }

    fn complete(&self, response: RemotingCommand) {
        let waiter = self.shared.pending().remove(&response.opaque());
        match waiter {
            Some(w) => {
                // The waiter may have timed out meanwhile; nothing to do then.
                let _ = w.send(response);
            }
            None => tracing::debug!(
                conn = %self.shared.id,
                peer = %self.shared.remote,
                opaque = response.opaque(),
                code = response.code(),
                "response matches no outstanding request; dropped"
            ),
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
    /// Stop reading new frames (graceful shutdown, first phase).
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
    let (tx, rx) = mpsc::channel(ctx.config.write_queue_frames.max(1));
    let shared = Arc::new(Shared {
        id: ConnectionId(NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed)),
        remote,
        local,
        tx,
        pending: Mutex::new(PendingMap::default()),
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
    io.spawn(writer_loop(
        handle.clone(),
        write_half,
        rx,
        writer_done.clone(),
    ));
    io.spawn(reader_loop(handle.clone(), read_half, ctx, writer_done));
    Ok(handle)
}

/// Output buffer size that triggers a write; also the capacity kept between writes.
const WRITE_CHUNK: usize = 64 * 1024;

async fn writer_loop(
    conn: ConnectionHandle,
    mut write_half: OwnedWriteHalf,
    mut rx: mpsc::Receiver<RemotingCommand>,
    done: CancellationToken,
) {
    let max = conn.shared.config.max_frame_len;
    let mut out = BytesMut::with_capacity(WRITE_CHUNK);
    let closed = conn.shared.closed.clone();
    let mut interrupted = false;
    let mut failure: Option<std::io::Error> = None;
    loop {
        let first = tokio::select! {
            biased;
            f = rx.recv() => f,
            _ = closed.cancelled() => None,
        };
        let Some(first) = first else { break };
        encode_into(&conn, &first, &mut out, max);
        // Encode whatever is queued into the same buffer: one syscall for a burst. When the
        // queue runs dry, yield once so producers woken by the same event (a burst of
        // responses, pipelined requests) can add their frames.
        let mut yielded = false;
        while out.len() < WRITE_CHUNK {
            match rx.try_recv() {
                Ok(cmd) => encode_into(&conn, &cmd, &mut out, max),
                Err(_) if !yielded => {
                    yielded = true;
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
        // A peer that stops reading must not pin this task once the connection is closed.
        let r = tokio::select! {
            biased;
            r = write_half.write_all(&out) => r,
            _ = closed.cancelled() => {
                interrupted = true;
                break;
            }
        };
        if let Err(e) = r {
            failure = Some(e);
            break;
        }
        out.clear();
        if out.capacity() > 16 * WRITE_CHUNK {
            // A huge frame passed through; do not keep its buffer for the connection's life.
            out = BytesMut::with_capacity(WRITE_CHUNK);
        }
        conn.shared.touch();
    }
    if failure.is_none() && !interrupted {
        // Closing: write what was already queued (responses of drained processors), then FIN.
        let drain = async {
            while let Ok(cmd) = rx.try_recv() {
                encode_into(&conn, &cmd, &mut out, max);
            }
            write_half.write_all(&out).await?;
            write_half.shutdown().await
        };
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(2), drain).await {
            failure = Some(e);
        }
    }
    if let Some(e) = failure {
        tracing::debug!(conn = %conn.id(), peer = %conn.remote_addr(), error = %e, "write failed; closing");
    }
    conn.close();
    done.cancel();
}

/// Encodes one queued command. Senders checked encodability already; should it still fail,
/// the frame is dropped and a request's waiter is failed rather than left to time out.
fn encode_into(conn: &ConnectionHandle, cmd: &RemotingCommand, out: &mut BytesMut, max: usize) {
    if let Err(e) = cmd.encode(out, max) {
        tracing::error!(conn = %conn.id(), code = cmd.code(), error = %e, "frame dropped: cannot encode");
        if !cmd.is_response() {
            conn.shared.pending().remove(&cmd.opaque());
        }
    }
}

/// An upper bound of the encoded frame size (JSON escapes at most 6 bytes per byte).
fn encoded_len_upper_bound(cmd: &RemotingCommand) -> usize {
    let ext = cmd.ext_fields();
    let ext = 6 * ext.text_len() + 8 * ext.len();
    let remark = cmd.remark().map_or(0, |r| 6 * r.len() + 12);
    160 + ext + remark + cmd.body().len()
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
    ctx: ConnectionContext,
    writer_done: CancellationToken,
) {
    let semaphore = Arc::new(Semaphore::new(ctx.config.max_concurrent_requests.max(1)));
    let end = read_frames(&conn, &mut read_half, &ctx, &semaphore).await;
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
    ctx: &ConnectionContext,
    semaphore: &Arc<Semaphore>,
) -> ReadEnd {
    let cfg = &ctx.config;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut partial_since: Option<Instant> = None;
    let mut hold = BudgetHold::new(ctx.partial_budget.clone());
    loop {
        loop {
            match frame::decode_frame(&mut buf, cfg.max_frame_len) {
                Ok(Some(raw)) => match RemotingCommand::from_frame(raw) {
                    Ok(cmd) => dispatch(conn, cmd, ctx, semaphore),
                    Err(e) => return ReadEnd::Frame(e),
                },
                Ok(None) => break,
                Err(e) => return ReadEnd::Frame(e),
            }
        }
        if buf.is_empty() {
            partial_since = None;
        } else if partial_since.is_none() {
            partial_since = Some(Instant::now());
        }
        // What is left after decoding is a partial frame.
        if !hold.set(buf.len()) {
            return ReadEnd::PartialBudget;
        }
        // Read in chunks of at most 64 KiB so memory follows the bytes actually received.
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        let idle_at = conn.shared.last_activity() + cfg.idle_timeout;
        let deadline = match partial_since {
            Some(t) => idle_at.min(t + cfg.frame_deadline),
            None => idle_at,
        };
        tokio::select! {
            biased;
            _ = conn.shared.closed.cancelled() => return ReadEnd::Closed,
            _ = ctx.stop_reading.cancelled() => return ReadEnd::Closed,
            r = read_half.read_buf(&mut buf) => match r {
                Ok(0) => return ReadEnd::Eof,
                Ok(_) => conn.shared.touch(),
                Err(e) => return ReadEnd::Io(e),
            },
            _ = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if partial_since.is_some_and(|t| now >= t + cfg.frame_deadline) {
                    return ReadEnd::FrameDeadline;
                }
                if now >= conn.shared.last_activity() + cfg.idle_timeout {
                    return ReadEnd::Idle;
                }
            }
        }
    }
}

/// Routes one incoming frame: responses complete a waiter; requests go to a processor task.
fn dispatch(
    conn: &ConnectionHandle,
    cmd: RemotingCommand,
    ctx: &ConnectionContext,
    semaphore: &Arc<Semaphore>,
) {
    if cmd.is_response() {
        conn.complete(cmd);
        return;
    }
    // A borrowed permit (no Arc clone) while the processor is polled inline; it becomes a
    // `PermitReturn` only if the request moves to its own task.
    let permit = match semaphore.try_acquire() {
        Ok(p) => p,
        Err(_) => {
            if !cmd.is_oneway() {
                let busy =
                    RemotingCommand::response_to(&cmd, ResponseCode::SYSTEM_BUSY, OVERLOAD_REMARK);
                // Never wait here: the reader must keep reading responses.
                let _ = conn.shared.tx.try_send(busy);
            }
            return;
        }
    };
    let meta = RequestMeta {
        oneway: cmd.is_oneway(),
        opaque: cmd.opaque(),
        serialize_type: cmd.serialize_type(),
        code: cmd.code(),
    };
    let processor = ctx.processor.clone();
    let task_conn = conn.clone();
    let mut work: Pin<Box<dyn Future<Output = Option<RemotingCommand>> + Send>> =
        Box::pin(async move { processor.process(task_conn, cmd).await });
    // Poll once right here: most processors answer without waiting, and that saves a task
    // spawn per request. Anything that waits (a held long-poll pull, a store append) moves to
    // its own task, so the reader never waits for a processor.
    match std::panic::catch_unwind(AssertUnwindSafe(|| (&mut work).now_or_never())) {
        Ok(Some(response)) => {
            drop(permit);
            if let Some(response) = finish_response(conn, meta, Ok(response)) {
                if let Err(mpsc::error::TrySendError::Full(response)) =
                    conn.shared.tx.try_send(response)
                {
                    let conn = conn.clone();
                    ctx.tasks.spawn(async move {
                        if let Err(e) = conn.send_command(response).await {
                            tracing::debug!(conn = %conn.id(), error = %e, "response not sent");
                        }
                    });
                }
            }
        }
        Ok(None) => {
            permit.forget();
            let permit = PermitReturn(semaphore.clone());
            let conn = conn.clone();
            ctx.tasks.spawn(async move {
                let _permit = permit;
                let outcome = AssertUnwindSafe(work).catch_unwind().await.map_err(|_| ());
                if let Some(response) = finish_response(&conn, meta, outcome) {
                    if let Err(e) = conn.send_command(response).await {
                        tracing::debug!(conn = %conn.id(), code = meta.code, error = %e, "response not sent");
                    }
                }
            });
        }
        Err(_) => {
            drop(permit);
            if let Some(response) = finish_response(conn, meta, Err(())) {
                let _ = conn.shared.tx.try_send(response);
            }
        }
    }
}

/// One permit of the concurrent-request semaphore, given back when the processor task ends.
struct PermitReturn(Arc<Semaphore>);

impl Drop for PermitReturn {
    fn drop(&mut self) {
        self.0.add_permits(1);
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

/// Turns a processor outcome into the frame to send, if any: nothing for oneway requests or
/// `None`; SYSTEM_ERROR for a panic or a response that cannot be encoded.
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
    if let Err(e) = conn.check_encodable(&response) {
        tracing::warn!(conn = %conn.id(), code = meta.code, error = %e, "response cannot be encoded");
        response = RemotingCommand::response(
            ResponseCode::SYSTEM_ERROR,
            format!("response cannot be encoded: {e}"),
        );
    }
    response.set_opaque(meta.opaque);
    response.set_flag(response.flag() | FLAG_RESPONSE);
    response.set_serialize_type(meta.serialize_type);
    Some(response)
}
