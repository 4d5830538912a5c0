//! The waiting requests of one connection, polled together by one task.
//!
//! A processor that waits (a send for its replicated append, a held pull) used to get a
//! spawned task of its own: per request an aligned allocation (glibc's slow path), the
//! runtime's task-list locks and a schedule per wake-up. A commit completes many sends of a
//! connection at once; here that wakes one task, which polls every ready request in one go,
//! so their answers also reach the outbox together. The task ends whenever nothing is left
//! (so a graceful shutdown, which waits for processors, sees it end) and the next waiting
//! request starts another.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_util::stream::{FuturesUnordered, StreamExt};

/// Requests handed over by the reader, and the runner's waker.
#[derive(Debug)]
pub(crate) struct PendingQueue<F> {
    inner: Mutex<Inner<F>>,
}

#[derive(Debug)]
struct Inner<F> {
    queued: Vec<F>,
    waker: Option<Waker>,
    /// A runner is running (or about to be started by the pusher that set this).
    started: bool,
}

impl<F: Future + Unpin> PendingQueue<F> {
    pub(crate) fn new() -> PendingQueue<F> {
        PendingQueue {
            inner: Mutex::new(Inner {
                queued: Vec::new(),
                waker: None,
                started: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<F>> {
        // Poisoning only means a panic elsewhere while holding it; the state stays coherent
        // (every update is a single field write or a Vec push/drain).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `work` to the runner. True when the caller must start the runner ([`Self::run`])
    /// because none is running yet.
    pub(crate) fn push(&self, work: F) -> bool {
        let mut st = self.lock();
        st.queued.push(work);
        let start = !std::mem::replace(&mut st.started, true);
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        start
    }

    /// Polls every handed-over request to completion, passing each output to `done`, until
    /// none is left; the pusher that gets true from [`Self::push`] next runs it again.
    pub(crate) async fn run(&self, mut done: impl FnMut(F::Output)) {
        let mut running = FuturesUnordered::new();
        std::future::poll_fn(|cx| self.poll_run(cx, &mut running, &mut done)).await
    }

    fn poll_run(
        &self,
        cx: &mut Context<'_>,
        running: &mut FuturesUnordered<F>,
        done: &mut impl FnMut(F::Output),
    ) -> Poll<()> {
        loop {
            {
                let mut st = self.lock();
                running.extend(st.queued.drain(..));
                if running.is_empty() {
                    // Under the lock, so a push now starts a new runner.
                    st.started = false;
                    st.waker = None;
                    return Poll::Ready(());
                }
                match &st.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => st.waker = Some(cx.waker().clone()),
                }
            }
            // Every ready request before the lock is taken again: a commit completes many.
            loop {
                match running.poll_next_unpin(cx) {
                    Poll::Ready(Some(out)) => done(out),
                    Poll::Ready(None) => break,
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;

    type Work = std::pin::Pin<Box<dyn Future<Output = u32> + Send>>;

    fn gated(i: u32) -> (oneshot::Sender<()>, Work) {
        let (tx, rx) = oneshot::channel::<()>();
        (
            tx,
            Box::pin(async move {
                let _ = rx.await;
                i
            }),
        )
    }

    fn spawn_runner(
        q: &Arc<PendingQueue<Work>>,
        outputs: &Arc<Mutex<Vec<u32>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (q, outputs) = (q.clone(), outputs.clone());
        tokio::spawn(async move {
            q.run(|o| outputs.lock().unwrap().push(o)).await;
        })
    }

    #[tokio::test]
    async fn runs_every_request_handed_over_including_those_pushed_while_it_waits() {
        let q: Arc<PendingQueue<Work>> = Arc::new(PendingQueue::new());
        let outputs = Arc::new(Mutex::new(Vec::new()));
        let mut gates = Vec::new();
        let mut starts = 0;
        for i in 0..10u32 {
            let (tx, work) = gated(i);
            gates.push(tx);
            starts += usize::from(q.push(work));
        }
        assert_eq!(starts, 1, "only the first push starts a runner");
        let runner = spawn_runner(&q, &outputs);
        tokio::task::yield_now().await;
        let (late_gate, late) = gated(99);
        assert!(!q.push(late), "a runner is running: no second one");
        for tx in gates.into_iter().rev() {
            let _ = tx.send(());
        }
        let _ = late_gate.send(());
        runner.await.unwrap();
        let mut got = outputs.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, (0..10).chain([99]).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn the_runner_ends_when_idle_and_the_next_push_asks_for_a_new_one() {
        let q: Arc<PendingQueue<Work>> = Arc::new(PendingQueue::new());
        let outputs = Arc::new(Mutex::new(Vec::new()));
        let (gate, work) = gated(1);
        assert!(q.push(work));
        let runner = spawn_runner(&q, &outputs);
        tokio::task::yield_now().await;
        assert!(
            !runner.is_finished(),
            "a request is waiting: the runner waits too"
        );
        let _ = gate.send(());
        runner.await.unwrap();
        assert_eq!(*outputs.lock().unwrap(), vec![1]);
        let (gate, work) = gated(2);
        assert!(q.push(work), "idle queue: the push starts a runner again");
        let _ = gate.send(());
        spawn_runner(&q, &outputs).await.unwrap();
        assert_eq!(*outputs.lock().unwrap(), vec![1, 2]);
    }
}
