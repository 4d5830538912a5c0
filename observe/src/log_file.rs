//! Non-blocking append-only log file: events are formatted on the logging thread into a
//! per-event buffer, handed to one writer thread over a bounded queue, and written through a
//! `BufWriter` that is flushed whenever the queue runs empty. A full queue drops the line
//! (counted) instead of stalling the caller: logging must never block a hot path on disk.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Lines queued before new ones are dropped.
const QUEUE_LINES: usize = 8 * 1024;

enum Msg {
    Line(Vec<u8>),
    /// Flush and acknowledge (the guard on shutdown).
    Flush(SyncSender<()>),
}

/// The `MakeWriter` handed to tracing-subscriber.
#[derive(Clone)]
pub(crate) struct FileSink {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

/// Flushes the file when dropped (keep it alive for the life of the program).
pub struct FlushGuard {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

impl FlushGuard {
    /// Lines dropped because the writer thread fell behind.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits (up to `timeout`) until every line queued so far is written and flushed.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if self.tx.send(Msg::Flush(ack_tx)).is_err() {
            return false;
        }
        ack_rx.recv_timeout(timeout).is_ok()
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.flush(Duration::from_secs(2));
    }
}

impl std::fmt::Debug for FlushGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushGuard")
            .field("dropped_lines", &self.dropped_lines())
            .finish()
    }
}

/// Starts the writer thread for `file`.
pub(crate) fn spawn(file: File, thread_name: String) -> io::Result<(FileSink, FlushGuard)> {
    let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
    thread::Builder::new()
        .name(thread_name)
        .spawn(move || write_loop(rx, BufWriter::new(file)))?;
    let dropped = Arc::new(AtomicU64::new(0));
    Ok((
        FileSink {
            tx: tx.clone(),
            dropped: Arc::clone(&dropped),
        },
        FlushGuard { tx, dropped },
    ))
}

fn write_loop(rx: Receiver<Msg>, mut out: BufWriter<File>) {
    while let Ok(msg) = rx.recv() {
        let mut next = Some(msg);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Line(bytes) => {
                    // A failing disk must not take the process down; the console still logs.
                    let _ = out.write_all(&bytes);
                }
                Msg::Flush(ack) => {
                    let _ = out.flush();
                    let _ = ack.try_send(());
                }
            }
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

/// One event's bytes, sent to the writer thread when tracing drops it.
pub(crate) struct EventBuffer {
    buf: Vec<u8>,
    sink: FileSink,
}

impl Write for EventBuffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.buf);
        match self.sink.tx.try_send(Msg::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.sink.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for FileSink {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> EventBuffer {
        EventBuffer {
            buf: Vec::with_capacity(256),
            sink: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_file_in_order_after_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let file = File::create(&path).unwrap();
        let (sink, guard) = spawn(file, "log-test".into()).unwrap();
        for i in 0..100 {
            let mut w = sink.make_writer();
            writeln!(w, "line {i}").unwrap();
        }
        assert!(guard.flush(Duration::from_secs(5)));
        let text = std::fs::read_to_string(&path).unwrap();
        let want: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, want);
        assert_eq!(guard.dropped_lines(), 0);
    }
}
