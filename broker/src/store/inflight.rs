//! The window of proposals in flight ([`InflightWindow`]): how many records the store may have
//! proposed and not yet seen committed or failed.
//!
//! Why not a `tokio::sync::Semaphore`: every send takes and gives back a permit, and the
//! semaphore's release always takes its waiter-list lock, even when nobody waits. Here taking
//! and giving back are one atomic operation each; the lock (a `Notify`) is only touched when
//! some send waits for room, which only a full window makes happen.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Why a permit was not handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowError {
    /// The window stayed full for the whole wait.
    Full,
    /// The window was closed (the store shuts down).
    Closed,
}

/// A counting window shared by the store's sends.
#[derive(Debug)]
pub struct InflightWindow {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    capacity: usize,
    used: AtomicUsize,
    /// Sends waiting for room (a release notifies only when this is non-zero).
    waiting: AtomicUsize,
    room: Notify,
    closed: AtomicBool,
}

/// `n` slots of the window, given back on drop.
#[derive(Debug)]
pub struct InflightPermit {
    shared: Arc<Shared>,
    n: usize,
}

impl Drop for InflightPermit {
    fn drop(&mut self) {
        self.shared.used.fetch_sub(self.n, Ordering::AcqRel);
        if self.shared.waiting.load(Ordering::Acquire) > 0 {
            self.shared.room.notify_waiters();
        }
    }
}

impl InflightWindow {
    /// A window of `capacity` slots.
    pub fn new(capacity: usize) -> InflightWindow {
        InflightWindow {
            shared: Arc::new(Shared {
                capacity,
                used: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                room: Notify::new(),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Slots not taken.
    pub fn available(&self) -> usize {
        self.shared
            .capacity
            .saturating_sub(self.shared.used.load(Ordering::Acquire))
    }

    /// `n` slots now, if there is room (`n` larger than the window never fits).
    pub fn try_take(&self, n: usize) -> Result<InflightPermit, WindowError> {
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(WindowError::Closed);
        }
        let mut used = s.used.load(Ordering::Acquire);
        loop {
            if used + n > s.capacity {
                return Err(WindowError::Full);
            }
            match s
                .used
                .compare_exchange_weak(used, used + n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(InflightPermit {
                        shared: Arc::clone(s),
                        n,
                    })
                }
                Err(now) => used = now,
            }
        }
    }

    /// `n` slots, waiting at most `timeout` for room.
    pub async fn take(&self, n: usize, timeout: Duration) -> Result<InflightPermit, WindowError> {
        match self.try_take(n) {
            Err(WindowError::Full) => {}
            other => return other,
        }
        let s = &self.shared;
        s.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = WaitingGuard(s);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a release between the check and the wait is
            // not missed.
            let notified = s.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_take(n) {
                Err(WindowError::Full) => {}
                other => return other,
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(WindowError::Full);
            }
        }
    }

    /// Refuses every later take and wakes the waiting ones (which then fail).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.room.notify_waiters();
    }
}

/// Counts a waiting send for as long as it waits.
struct WaitingGuard<'a>(&'a Shared);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_capacity_and_gives_back_on_drop() {
        let w = InflightWindow::new(3);
        let a = w.try_take(2).expect("room");
        assert_eq!(w.available(), 1);
        assert_eq!(w.try_take(2).unwrap_err(), WindowError::Full);
        let b = w.try_take(1).expect("room");
        assert_eq!(w.available(), 0);
        drop(a);
        assert_eq!(w.available(), 2);
        drop(b);
        assert_eq!(w.available(), 3);
        assert_eq!(w.try_take(4).unwrap_err(), WindowError::Full);
    }

    #[tokio::test]
    async fn a_waiting_take_gets_room_when_a_permit_is_dropped() {
        let w = Arc::new(InflightWindow::new(1));
        let held = w.try_take(1).expect("room");
        let w2 = Arc::clone(&w);
        let waiter =
            tokio::spawn(async move { w2.take(1, Duration::from_secs(10)).await.map(drop) });
        // The waiter registers itself before it waits.
        while w.shared.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(waiter.await.expect("task"), Ok(()));
        assert_eq!(w.available(), 1);
    }

    #[tokio::test]
    async fn a_full_window_times_out_and_a_closed_one_refuses() {
        let w = Arc::new(InflightWindow::new(1));
        let _held = w.try_take(1).expect("room");
        assert_eq!(
            w.take(1, Duration::from_millis(20)).await.unwrap_err(),
            WindowError::Full
        );
        let w2 = Arc::clone(&w);
        let waiter =
            tokio::spawn(async move { w2.take(1, Duration::from_secs(10)).await.map(drop) });
        while w.shared.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        w.close();
        assert_eq!(waiter.await.expect("task"), Err(WindowError::Closed));
        assert_eq!(w.try_take(1).unwrap_err(), WindowError::Closed);
    }
}
