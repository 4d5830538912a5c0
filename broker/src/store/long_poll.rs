//! Long polling (PULL_MESSAGE with the suspend flag): a held pull waits on the dispatcher's
//! progress watch and re-runs its lookup after every dispatch step, until it finds data, the
//! suspend timeout passes, or the broker shuts down. No per-request task or table: the held
//! request's own future does the waiting.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

/// Waits until `ready()` holds (checked after each dispatch progress), `hold` passes, or
/// `stop` is cancelled.
pub async fn hold_until(
    mut dispatched: watch::Receiver<DispatchMark>,
    hold: Duration,
    stop: &CancellationToken,
    mut ready: impl FnMut() -> bool,
) -> Wake {
    let deadline = tokio::time::Instant::now() + hold;
    dispatched.borrow_and_update();
    loop {
        if ready() {
            return Wake::Ready;
        }
        tokio::select! {
            _ = stop.cancelled() => return Wake::Shutdown,
            _ = tokio::time::sleep_until(deadline) => return Wake::Timeout,
            r = dispatched.changed() => if r.is_err() { return Wake::Shutdown },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_on_progress_and_times_out() {
        let (tx, rx) = watch::channel(DispatchMark::default());
        let stop = CancellationToken::new();
        let t0 = tokio::time::Instant::now();
        assert_eq!(
            hold_until(rx.clone(), Duration::from_millis(50), &stop, || false).await,
            Wake::Timeout
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let h = tokio::spawn({
            let rx = rx.clone();
            let stop = stop.clone();
            async move {
                let r = rx.clone();
                hold_until(rx, Duration::from_secs(30), &stop, move || {
                    r.borrow().index >= 3
                })
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
            hold_until(rx, Duration::from_secs(30), &stop, || false).await,
            Wake::Shutdown
        );
    }
}
