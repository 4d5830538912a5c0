//! The outbound queue of one connection: frames are encoded by whoever sends them (an
//! invoking caller, the reader answering a request inline, a processor task) straight into
//! one shared byte buffer, and the connection's writer task swaps that buffer out and writes
//! it with one `write_all` per batch.
//!
//! Why not a channel of commands: a channel node, a wake-up and a hand-over of the command
//! per frame, then the encode on the writer's task, cost more than the frame itself. Here a
//! frame costs one short lock and the encode, and the writer is woken only when the buffer
//! goes from empty to non-empty.
//!
//! Owns: the buffer, its bounds (frames and bytes: the back-pressure of the connection), and
//! the closed state. Must not: hold its lock across `.await` (it is a std lock, held only to
//! append or swap), or let a full queue block the reader (callers use [`Outbox::try_push`]).

use std::sync::{Mutex, MutexGuard};

use bytes::BytesMut;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::command::RemotingCommand;
use crate::error::FrameError;

/// Bytes queued beyond which senders wait (a single frame is always admitted into an empty
/// queue, whatever its size).
pub(crate) const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// Outcome of one attempt to queue a frame.
#[derive(Debug)]
pub(crate) enum Push {
    /// Encoded into the queue.
    Queued,
    /// The queue is at its bound; nothing was written.
    Full,
    /// The connection is closed; nothing was written.
    Closed,
    /// The command cannot be encoded (too long); nothing was written.
    Encode(FrameError),
}

/// Why a waiting push gave up.
#[derive(Debug)]
pub(crate) enum PushError {
    /// The connection closed.
    Closed,
    /// No room before the deadline.
    Timeout,
    /// The command cannot be encoded.
    Encode(FrameError),
}

struct State {
    buf: BytesMut,
    /// Frames in `buf`.
    frames: usize,
    /// No more frames are accepted.
    closed: bool,
    /// A sender saw the queue full and may be waiting for room.
    full_seen: bool,
}

/// One connection's outbound frames, encoded and waiting for the writer.
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer when the buffer becomes non-empty or the outbox closes.
    has_bytes: Notify,
    /// Wakes senders waiting for room.
    room: Notify,
    max_frames: usize,
    max_bytes: usize,
    max_frame_len: usize,
}

impl Outbox {
    /// An empty outbox holding at most `max_frames` frames (and [`MAX_QUEUED_BYTES`]).
    pub(crate) fn new(max_frames: usize, max_frame_len: usize) -> Outbox {
        Outbox {
            state: Mutex::new(State {
                buf: BytesMut::new(),
                frames: 0,
                closed: false,
                full_seen: false,
            }),
            has_bytes: Notify::new(),
            room: Notify::new(),
            max_frames: max_frames.max(1),
            max_bytes: MAX_QUEUED_BYTES,
            max_frame_len,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the buffer holds
        // whole frames only (an encode that fails leaves it unchanged).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes `cmd` at the end of the queue if there is room; never waits.
    pub(crate) fn try_push(&self, cmd: &RemotingCommand) -> Push {
        let mut st = self.lock();
        if st.closed {
            return Push::Closed;
        }
        if st.frames >= self.max_frames || st.buf.len() >= self.max_bytes {
            st.full_seen = true;
            return Push::Full;
        }
        if let Err(e) = cmd.encode(&mut st.buf, self.max_frame_len) {
            return Push::Encode(e);
        }
        st.frames += 1;
        let first = st.frames == 1;
        drop(st);
        if first {
            // The writer takes everything at once, so only the first frame needs a wake-up.
            self.has_bytes.notify_one();
        }
        Push::Queued
    }

    /// Encodes `cmd` at the end of the queue, waiting for room until `deadline` (forever
    /// when `None`).
    pub(crate) async fn push(
        &self,
        cmd: &RemotingCommand,
        deadline: Option<Instant>,
    ) -> Result<(), PushError> {
        loop {
            // Registered before the attempt, so room made right after it is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_push(cmd) {
                Push::Queued => return Ok(()),
                Push::Closed => return Err(PushError::Closed),
                Push::Encode(e) => return Err(PushError::Encode(e)),
                Push::Full => {}
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, room).await.is_err() {
                        return Err(PushError::Timeout);
                    }
                }
                None => room.await,
            }
        }
    }

    /// Writer side: moves every queued byte into `out` (which must be empty), waiting until
    /// there is some. Returns false once the outbox is closed and empty.
    pub(crate) async fn take(&self, out: &mut BytesMut) -> bool {
        loop {
            let wake = self.has_bytes.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            if self.take_now(out) {
                return true;
            }
            if self.lock().closed {
                return false;
            }
            wake.await;
        }
    }

    /// Moves every queued byte into `out` (which must be empty); false if there were none.
    pub(crate) fn take_now(&self, out: &mut BytesMut) -> bool {
        let mut st = self.lock();
        if st.buf.is_empty() {
            return false;
        }
        std::mem::swap(&mut st.buf, out);
        st.frames = 0;
        let wake_senders = std::mem::take(&mut st.full_seen);
        drop(st);
        if wake_senders {
            self.room.notify_waiters();
        }
        true
    }

    /// Refuses further frames and wakes everyone waiting (frames already queued stay for the
    /// writer's final flush).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
        self.has_bytes.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;
    use crate::frame::DEFAULT_MAX_FRAME_LEN;

    fn cmd() -> RemotingCommand {
        RemotingCommand::request_empty(RequestCode(7))
            .with_opaque(5)
            .with_body(&b"abc"[..])
    }

    #[test]
    fn frames_are_bounded_and_taken_in_one_batch() {
        let outbox = Outbox::new(2, DEFAULT_MAX_FRAME_LEN);
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        assert!(matches!(outbox.try_push(&cmd()), Push::Full));
        let mut out = BytesMut::new();
        assert!(outbox.take_now(&mut out));
        let one = cmd().encode_to_bytes().unwrap();
        assert_eq!(out.len(), 2 * one.len());
        assert_eq!(&out[..one.len()], &one[..]);
        out.clear();
        assert!(!outbox.take_now(&mut out), "nothing left");
        assert!(
            matches!(outbox.try_push(&cmd()), Push::Queued),
            "room again"
        );
    }

    #[test]
    fn an_unencodable_frame_leaves_the_queue_unchanged() {
        let outbox = Outbox::new(8, 64);
        let big = cmd().with_body(vec![0u8; 100]);
        assert!(matches!(outbox.try_push(&big), Push::Encode(_)));
        let mut out = BytesMut::new();
        assert!(!outbox.take_now(&mut out));
    }

    #[tokio::test]
    async fn a_waiting_sender_gets_room_or_times_out_and_close_wakes_it() {
        let outbox = std::sync::Arc::new(Outbox::new(1, DEFAULT_MAX_FRAME_LEN));
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        let soon = Instant::now() + std::time::Duration::from_millis(20);
        assert!(matches!(
            outbox.push(&cmd(), Some(soon)).await,
            Err(PushError::Timeout)
        ));
        let waiter = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.push(&cmd(), None).await })
        };
        let mut out = BytesMut::new();
        assert!(outbox.take(&mut out).await);
        assert!(waiter.await.unwrap().is_ok(), "room made by the writer");
        let waiter = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.push(&cmd(), None).await })
        };
        outbox.close();
        assert!(matches!(waiter.await.unwrap(), Err(PushError::Closed)));
        out.clear();
        assert!(
            outbox.take(&mut out).await,
            "queued frames stay for the flush"
        );
        out.clear();
        assert!(!outbox.take(&mut out).await, "closed and empty");
    }
}
