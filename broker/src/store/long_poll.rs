//! Long polling (PULL_MESSAGE with the suspend flag): a held pull waits until its queue grows
//! ([`hold_for_queue`]: the queue's own notification, raised by the dispatcher once per step
//! in which that queue grew, so a step wakes only the pulls it concerns), the suspend timeout
//! passes, or the broker shuts down. A pull for a queue that does not exist yet waits on the
//! dispatcher's progress watch until it does. No per-request task or table:
//! the held request's own future does the waiting.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::consume_queue::ConsumeQueueSet;
use super::dispatcher::DispatchMark;

/// Why a held request stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// `ready` returned true.
    Ready,
    /// The hold time passed.
    Timeout,
    /// The broker is shutting down (or dispatch stopped).
    Shutdown,
}

/// Waits until `ready()` holds, checked whenever queue `topic`/`queue_id` grows (or, while
/// the queue does not exist, after each dispatch step), `hold` passes, or `stop` is cancelled.
pub async fn hold_for_queue(
    cqs: &ConsumeQueueSet,
    mut dispatched: watch::Receiver<DispatchMark>,
    topic: &str,
    queue_id: i32,
    hold: Duration,
    stop: &CancellationToken,
    mut ready: impl FnMut() -> bool,
) -> Wake {
    let deadline = tokio::time::Instant::now() + hold;
    dispatched.borrow_and_update();
    loop {
        let Some(q) = cqs.get(topic, queue_id) else {
            let progressed = async { dispatched.changed().await.is_ok() };
            if let Some(wake) = check_then_wait(&mut ready, stop, deadline, progressed).await {
                return wake;
            }
            continue;
        };
        // Registered before the check, so growth between the check and the wait still wakes.
        let grown = q.appended().notified();
        tokio::pin!(grown);
        grown.as_mut().enable();
        let grew = async {
            grown.await;
            true
        };
        if let Some(wake) = check_then_wait(&mut ready, stop, deadline, grew).await {
            return wake;
        }
    }
}

/// One round of a hold: `Some` when it ends (`ready()` holds, `deadline` passes, `stop` is
/// cancelled, or `woken` yields false: its source is gone), `None` once `woken` yields true.
async fn check_then_wait(
    ready: &mut impl FnMut() -> bool,
    stop: &CancellationToken,
    deadline: tokio::time::Instant,
    woken: impl std::future::Future<Output = bool>,
) -> Option<Wake> {
    if ready() {
        return Some(Wake::Ready);
    }
    tokio::select! {
        _ = stop.cancelled() => Some(Wake::Shutdown),
        _ = tokio::time::sleep_until(deadline) => Some(Wake::Timeout),
        alive = woken => (!alive).then_some(Wake::Shutdown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fixture = (
        tempfile::TempDir,
        std::sync::Arc<ConsumeQueueSet>,
        watch::Sender<DispatchMark>,
        watch::Receiver<DispatchMark>,
        CancellationToken,
    );

    /// An empty queue set in a temp dir, a dispatch progress watch and a stop token.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let cqs = std::sync::Arc::new(ConsumeQueueSet::open(dir.path(), 20 * 100).unwrap());
        let (tx, rx) = watch::channel(DispatchMark::default());
        (dir, cqs, tx, rx, CancellationToken::new())
    }

    /// A hold on a queue that does not exist waits on the dispatch progress watch.
    #[tokio::test]
    async fn wakes_on_progress_and_times_out() {
        let (_dir, cqs, tx, rx, stop) = fixture();
        let t0 = tokio::time::Instant::now();
        assert_eq!(
            hold_for_queue(
                &cqs,
                rx.clone(),
                "T",
                0,
                Duration::from_millis(50),
                &stop,
                || false
            )
            .await,
            Wake::Timeout
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let h = tokio::spawn({
            let (cqs, rx, stop) = (cqs.clone(), rx.clone(), stop.clone());
            async move {
                let r = rx.clone();
                hold_for_queue(
                    &cqs,
                    rx,
                    "T",
                    0,
                    Duration::from_secs(30),
                    &stop,
                    move || r.borrow().index >= 3,
                )
                .await
            }
        });
        tx.send_replace(DispatchMark {
            index: 3,
            end_pos: 10,
        });
        assert_eq!(h.await.unwrap(), Wake::Ready);
        stop.cancel();
        assert_eq!(
            hold_for_queue(&cqs, rx, "T", 0, Duration::from_secs(30), &stop, || false).await,
            Wake::Shutdown
        );
    }

    #[tokio::test]
    async fn a_queue_hold_wakes_on_that_queue_only_and_waits_for_a_missing_queue() {
        use crate::store::consume_queue::CqUnit;
        let (_dir, cqs, tx, rx, stop) = fixture();
        let unit = |n: i64| CqUnit {
            physical_offset: 48 + 100 * n,
            size: 100,
            tag_code: 0,
        };
        // The queue does not exist yet: the dispatch watch is polled until it does.
        let wakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = tokio::spawn({
            let (cqs, rx, stop, wakes) = (cqs.clone(), rx.clone(), stop.clone(), wakes.clone());
            async move {
                let c = cqs.clone();
                hold_for_queue(
                    &cqs,
                    rx,
                    "T",
                    0,
                    Duration::from_secs(30),
                    &stop,
                    move || {
                        wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        c.max_offset("T", 0) > 1
                    },
                )
                .await
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while wakes.load(std::sync::atomic::Ordering::SeqCst) < 1 {
            assert!(tokio::time::Instant::now() < deadline, "hold never checked");
            tokio::task::yield_now().await;
        }
        let q = cqs.get_or_create("T", 0).unwrap();
        q.append(0, unit(0)).unwrap();
        tx.send_replace(DispatchMark {
            index: 0,
            end_pos: 148,
        });
        // Growth of another queue, announced on its own notification, wakes nothing here.
        let other = cqs.get_or_create("T", 1).unwrap();
        while wakes.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no re-check after the queue appeared"
            );
            tokio::task::yield_now().await;
        }
        let seen = wakes.load(std::sync::atomic::Ordering::SeqCst);
        other.append(0, unit(1)).unwrap();
        other.wake_waiters();
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(wakes.load(std::sync::atomic::Ordering::SeqCst), seen);
        assert!(!h.is_finished());
        q.append(1, unit(2)).unwrap();
        q.wake_waiters();
        assert_eq!(h.await.unwrap(), Wake::Ready);
        assert_eq!(
            hold_for_queue(&cqs, rx, "T", 0, Duration::from_millis(20), &stop, || false).await,
            Wake::Timeout
        );
    }
}
