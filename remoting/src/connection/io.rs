//! The socket of one connection: spawning it, the writer task (writes what the outbox holds,
//! flushes it on close) and the reader task (decodes frames, hands them to dispatch.rs or,
//! while the owner shuts down, go_away.rs, writes the responses of each batch inline, and
//! closes the connection on EOF, a bad frame, the idle timeout, a partial frame's deadline or
//! the partial-frame budget).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{BudgetHold, PartialFrameBudget};
use crate::command::RemotingCommand;
use crate::error::FrameError;
use crate::frame;
use crate::outbox::{Outbox, MAX_SCRATCH_CAPACITY};
use crate::processor::{ConnectionListener, RequestProcessor};
use crate::waiters::Waiters;

use super::admission::{charge_partial_frame, INITIAL_READ_BUF};
use super::busy_poll::{read_while_busy, BusyRead};
use super::dispatch::{dispatch, Waiting};
use super::go_away::refuse_while_shutting_down;
use super::{ConnectionConfig, ConnectionHandle, ConnectionId, Shared, NEXT_CONNECTION_ID};

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
    let waiting = Waiting::new();
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
        if !charge_partial_frame(&mut hold, &buf) {
            return ReadEnd::PartialBudget;
        }
        if let Some(t) = partial_since {
            let frame_due = t + cfg.frame_deadline;
            if frame_due < timer.deadline() {
                timer.as_mut().reset(frame_due);
            }
        }
        if std::mem::take(&mut busy) && !cfg.busy_poll.is_zero() {
            let closed = &conn.shared.closed;
            match read_while_busy(closed, read_half, &mut buf, chunk, cfg.busy_poll).await {
                BusyRead::Data => {
                    conn.shared.touch();
                    outbox.defer_wakeups();
                    busy = true;
                    continue;
                }
                BusyRead::Nothing => {}
                BusyRead::Closed => return ReadEnd::Closed,
                BusyRead::Io(e) => return ReadEnd::Io(e),
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
