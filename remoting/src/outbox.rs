//! The outbound queue of one connection: frames are encoded by whoever sends them (an
//! invoking caller, the reader answering a request inline, a processor task) straight into
//! one shared byte buffer, which is swapped out and written in one go per batch: by the
//! reader itself right after a batch of frames it read (non-blocking writes, when nobody else
//! writes), else by the connection's writer task.
//!
//! Why not a channel of commands: a channel node, a wake-up and a hand-over of the command
//! per frame, then the encode on the writer's task, cost more than the frame itself. Here a
//! frame costs one short lock and the encode, and the writer is woken only when the buffer
//! goes from empty to non-empty while nobody writes and the reader is not about to flush.
//!
//! Owns: the buffer, its bounds (frames and bytes: the back-pressure of the connection), who
//! writes (one party at a time, so batches keep their order) and the closed state. Must not: hold its lock across `.await` (it is a std lock, held only to
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

/// A write buffer whose capacity grew past this is dropped after its batch (a huge frame
/// passed through; its buffer is not kept for the connection's life).
pub(crate) const MAX_SCRATCH_CAPACITY: usize = 1024 * 1024;

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
    /// Bytes taken out are being written (by the writer task or inline by the reader); only
    /// one party writes at a time, and it looks at the queue again when it is done.
    writing: bool,
    /// The reader is handling a batch of frames it read and flushes the queue itself at the
    /// end of it, so queueing a frame does not wake the writer task meanwhile.
    deferred: bool,
    /// The rest of an inline write the socket did not take at once; the writer task writes it
    /// before anything else (`writing` stays set until then).
    carry: Option<BytesMut>,
    /// A queued frame came from a task that had waited (see [`Outbox::push_after_wait`]):
    /// tasks that became ready with it may be about to queue theirs.
    coalesce: bool,
}

/// What [`Outbox::take_now`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Bytes moved into `out`: the caller writes them, then calls [`Outbox::write_done`].
    Bytes,
    /// Nothing queued.
    Empty,
    /// Someone else is writing; they look at the queue again (and wake the writer) after.
    Busy,
}

/// How an inline write by the reader ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Nothing left for now (or someone else is writing it).
    Done,
    /// The socket took only part: the rest went to the writer task.
    HandedOver,
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
                writing: false,
                deferred: false,
                carry: None,
                coalesce: false,
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
        self.try_push_marked(cmd, false)
    }

    /// [`Outbox::try_push`]; `coalesce` for the answer of a request that waited (see
    /// [`Outbox::push_after_wait`]).
    pub(crate) fn try_push_marked(&self, cmd: &RemotingCommand, coalesce: bool) -> Push {
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
        st.coalesce |= coalesce;
        // The writer takes everything at once, so only the first frame needs a wake-up; none
        // while someone writes (they look again when done) or the reader flushes after its
        // batch.
        let wake = st.frames == 1 && !st.writing && !st.deferred;
        drop(st);
        if wake {
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
        self.push_marked(cmd, deadline, false).await
    }

    /// [`Outbox::push`] for the answer of a task that waited for something (a processor
    /// that waited for a replicated append, say): one event usually makes many such tasks
    /// ready at once, and each queues its frame in turn. A writer woken by the first one
    /// then lets them run before it takes the queue, instead of running between them (as a
    /// task woken by a running one, it runs next) and writing one frame per syscall: 64
    /// concurrent sends to a broker cost its leader ~0.85 sendto per answer that way.
    pub(crate) async fn push_after_wait(
        &self,
        cmd: &RemotingCommand,
        deadline: Option<Instant>,
    ) -> Result<(), PushError> {
        self.push_marked(cmd, deadline, true).await
    }

    async fn push_marked(
        &self,
        cmd: &RemotingCommand,
        deadline: Option<Instant>,
        coalesce: bool,
    ) -> Result<(), PushError> {
        loop {
            // Registered before the attempt, so room made right after it is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_push_marked(cmd, coalesce) {
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
    /// there is some and nobody else writes. Returns false once the outbox is closed, empty
    /// and nobody writes. After writing `out`, call [`Outbox::write_done`].
    pub(crate) async fn take(&self, out: &mut BytesMut) -> bool {
        self.take_when(out, |o| o.lock().closed).await
    }

    /// Closing writer: like [`Outbox::take`], but false as soon as nothing is queued and
    /// nobody else writes (an inline write under way is waited for).
    pub(crate) async fn take_remaining(&self, out: &mut BytesMut) -> bool {
        self.take_when(out, |_| true).await
    }

    /// Takes the queued bytes into `out` once nobody else writes; with nothing queued, gives
    /// up (false) if `give_up_when_empty` says so, else waits for the next frame.
    async fn take_when(&self, out: &mut BytesMut, give_up_when_empty: fn(&Outbox) -> bool) -> bool {
        loop {
            let wake = self.has_bytes.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            match self.take_now(out) {
                Take::Bytes => return true,
                Take::Empty if give_up_when_empty(self) => return false,
                Take::Empty | Take::Busy => {}
            }
            wake.await;
            if self.lock().coalesce {
                // Woken by an answer of a task that waited: the others made ready with it
                // queue theirs first (see `push_after_wait`).
                tokio::task::yield_now().await;
            }
        }
    }

    /// Moves every queued byte (or the rest of an unfinished inline write) into `out`, which
    /// must be empty, unless someone else is writing.
    pub(crate) fn take_now(&self, out: &mut BytesMut) -> Take {
        let mut st = self.lock();
        if let Some(mut carry) = st.carry.take() {
            // `writing` stays set: the unfinished write now belongs to the caller.
            std::mem::swap(&mut carry, out);
            return Take::Bytes;
        }
        if st.writing {
            return Take::Busy;
        }
        if st.buf.is_empty() {
            return Take::Empty;
        }
        self.take_locked(st, out);
        Take::Bytes
    }

    fn take_locked(&self, mut st: MutexGuard<'_, State>, out: &mut BytesMut) {
        std::mem::swap(&mut st.buf, out);
        st.frames = 0;
        st.writing = true;
        st.coalesce = false;
        let wake_senders = std::mem::take(&mut st.full_seen);
        drop(st);
        if wake_senders {
            self.room.notify_waiters();
        }
    }

    /// The bytes taken last are written: someone else may write now.
    pub(crate) fn write_done(&self) {
        self.lock().writing = false;
    }

    /// Reader side, before handling a batch of frames: frames queued until
    /// [`Outbox::flush_inline`] do not wake the writer task.
    pub(crate) fn defer_wakeups(&self) {
        self.lock().deferred = true;
    }

    /// Reader side, after a batch: writes what is queued straight to the socket with
    /// non-blocking writes when nobody else is writing (saves waking the writer task and a
    /// hop to it per batch). Whatever the socket does not take at once, or cannot take (an
    /// error: the writer meets it again and closes), goes to the writer task. `out` is an
    /// empty scratch buffer that trades places with the queue.
    pub(crate) fn flush_inline(
        &self,
        out: &mut BytesMut,
        mut write: impl FnMut(&[u8]) -> std::io::Result<usize>,
    ) -> Flush {
        // A few passes at most: frames queued during one write go out with the next.
        for _ in 0..4 {
            let mut st = self.lock();
            st.deferred = false;
            if st.writing || st.closed || st.buf.is_empty() {
                return Flush::Done;
            }
            self.take_locked(st, out);
            let mut written = 0;
            while written < out.len() {
                match write(&out[written..]) {
                    Ok(0) => break,
                    Ok(n) => written += n,
                    Err(_) => break,
                }
            }
            if written < out.len() {
                bytes::Buf::advance(out, written);
                let rest = std::mem::take(out);
                self.lock().carry = Some(rest);
                self.has_bytes.notify_one();
                return Flush::HandedOver;
            }
            out.clear();
            if out.capacity() > MAX_SCRATCH_CAPACITY {
                *out = BytesMut::new();
            }
            let mut st = self.lock();
            st.writing = false;
            if st.closed {
                // The writer task may be waiting to drain: it is its turn.
                drop(st);
                self.has_bytes.notify_one();
                return Flush::Done;
            }
        }
        // Still more: the writer task takes it from here.
        let st = self.lock();
        let more = !st.buf.is_empty();
        drop(st);
        if more {
            self.has_bytes.notify_one();
        }
        Flush::Done
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
    use std::sync::Arc;

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
        assert_eq!(outbox.take_now(&mut out), Take::Bytes);
        let one = cmd().encode_to_bytes().unwrap();
        assert_eq!(out.len(), 2 * one.len());
        assert_eq!(&out[..one.len()], &one[..]);
        out.clear();
        assert!(
            matches!(outbox.try_push(&cmd()), Push::Queued),
            "room again"
        );
        assert_eq!(outbox.take_now(&mut out), Take::Busy, "still writing");
        outbox.write_done();
        assert_eq!(outbox.take_now(&mut out), Take::Bytes);
        outbox.write_done();
        out.clear();
        assert_eq!(outbox.take_now(&mut out), Take::Empty, "nothing left");
    }

    /// Frames the writer's first take gets when `senders` tasks, all made ready by one event,
    /// each queue one frame (through `push_after_wait` or plain `push`), on a runtime with
    /// one worker (so the order tokio runs woken tasks in is the only variable).
    fn first_take_frames(senders: usize, after_wait: bool) -> usize {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        rt.block_on(async move {
            let outbox = Arc::new(Outbox::new(1024, DEFAULT_MAX_FRAME_LEN));
            let event = Arc::new(tokio::sync::Semaphore::new(0));
            let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let o = Arc::clone(&outbox);
            let writer = tokio::spawn(async move {
                let mut out = BytesMut::new();
                assert!(o.take(&mut out).await);
                o.write_done();
                out.len()
            });
            for _ in 0..senders {
                let (o, e, w) = (
                    Arc::clone(&outbox),
                    Arc::clone(&event),
                    Arc::clone(&waiting),
                );
                tokio::spawn(async move {
                    let acquire = e.acquire();
                    w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _permit = acquire.await;
                    let pushed = if after_wait {
                        o.push_after_wait(&cmd(), None).await
                    } else {
                        o.push(&cmd(), None).await
                    };
                    assert!(pushed.is_ok());
                });
            }
            while waiting.load(std::sync::atomic::Ordering::SeqCst) < senders {
                tokio::task::yield_now().await;
            }
            // Let every sender reach its wait, then release them all from a task of the
            // runtime (as a replicated commit completing many proposals does).
            tokio::task::yield_now().await;
            let e = Arc::clone(&event);
            tokio::spawn(async move { e.add_permits(senders) })
                .await
                .unwrap();
            let bytes = writer.await.unwrap();
            bytes / cmd().encode_to_bytes().unwrap().len()
        })
    }

    #[test]
    fn answers_made_ready_together_are_written_together() {
        assert_eq!(
            first_take_frames(16, true),
            16,
            "the woken writer lets the other answers queue first"
        );
        // Without the mark, the writer (woken by a running task, so run next) takes the first
        // answer alone: the one-frame-per-syscall pattern `push_after_wait` exists for.
        assert!(first_take_frames(16, false) < 16);
    }

    /// Socket stand-in for inline flushes: takes at most `room` bytes, then would block.
    fn socket(room: &mut usize) -> impl FnMut(&[u8]) -> std::io::Result<usize> + '_ {
        move |b: &[u8]| {
            if *room == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(*room);
            *room -= n;
            Ok(n)
        }
    }

    #[test]
    fn an_inline_flush_writes_everything_or_hands_the_rest_to_the_writer() {
        let outbox = Outbox::new(8, DEFAULT_MAX_FRAME_LEN);
        let one = cmd().encode_to_bytes().unwrap();
        let mut scratch = BytesMut::new();
        // Everything fits: written inline, nothing left for the writer task.
        outbox.defer_wakeups();
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        let mut written = Vec::new();
        let flush = outbox.flush_inline(&mut scratch, |b| {
            written.extend_from_slice(b);
            Ok(b.len())
        });
        assert_eq!(flush, Flush::Done);
        assert_eq!(written, [&one[..], &one[..]].concat());
        let mut out = BytesMut::new();
        assert_eq!(outbox.take_now(&mut out), Take::Empty);
        // The socket takes 10 bytes: the rest goes to the writer, which writes it first, and
        // nobody else writes meanwhile.
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        let mut room = 10;
        let flush = outbox.flush_inline(&mut scratch, socket(&mut room));
        assert_eq!(flush, Flush::HandedOver);
        assert!(matches!(outbox.try_push(&cmd()), Push::Queued));
        let mut room = usize::MAX;
        let flush = outbox.flush_inline(&mut scratch, socket(&mut room));
        assert_eq!(flush, Flush::Done, "the writer owns the write");
        assert_eq!(outbox.take_now(&mut out), Take::Bytes);
        assert_eq!(&out[..], &one[10..]);
        out.clear();
        outbox.write_done();
        assert_eq!(
            outbox.take_now(&mut out),
            Take::Bytes,
            "the frame queued meanwhile"
        );
        assert_eq!(&out[..], &one[..]);
    }

    #[test]
    fn an_unencodable_frame_leaves_the_queue_unchanged() {
        let outbox = Outbox::new(8, 64);
        let big = cmd().with_body(vec![0u8; 100]);
        assert!(matches!(outbox.try_push(&big), Push::Encode(_)));
        let mut out = BytesMut::new();
        assert_eq!(outbox.take_now(&mut out), Take::Empty);
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
        outbox.write_done();
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
        outbox.write_done();
        out.clear();
        assert!(!outbox.take(&mut out).await, "closed and empty");
    }
}
