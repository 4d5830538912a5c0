//! The requests one side of a connection sent and still waits for: `opaque -> waiter`, each
//! with its deadline, and one sweeper per connection that drops waiters whose deadline passed.
//!
//! Why a sweeper instead of a timer per call: registering and clearing a runtime timer for
//! every request showed up in profiles; here a deadline costs one comparison under the lock
//! the waiter is inserted with. The sweeper sleeps until the earliest deadline it knows of
//! (requests usually share one timeout, so later inserts never move it) and only then scans.
//!
//! Why no channel per request: the response is parked in the waiter's own map entry and the
//! caller's task woken, so a request costs no allocation here (the map keeps its capacity).
//!
//! Owns: the waiters, the in-flight cap and the sweeper's wake-up time. A caller whose waiter
//! is dropped (deadline passed, connection closed) is woken, finds no entry and tells the two
//! apart by the clock.

use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::command::RemotingCommand;
use crate::connection::LocalKeyMap;

/// Where one request stands.
enum Slot {
    /// No response yet; the task to wake when it comes (none before the first poll).
    Waiting(Option<Waker>),
    /// The response, until its caller takes it.
    Done(RemotingCommand),
}

struct Waiter {
    slot: Slot,
    deadline: Instant,
}

fn wake_all(wakers: Vec<Waker>) {
    for w in wakers {
        w.wake();
    }
}

#[derive(Default)]
struct State {
    by_opaque: LocalKeyMap<i32, Waiter>,
    /// The sweeper wakes no later than this (`None`: it waits to be told).
    sweep_at: Option<Instant>,
}

/// Outstanding requests of one connection.
pub(crate) struct Waiters {
    state: Mutex<State>,
    /// Tells the sweeper that `sweep_at` moved earlier.
    rearm: Notify,
}

impl Waiters {
    pub(crate) fn new() -> Waiters {
        Waiters {
            state: Mutex::new(State::default()),
            rearm: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned map only means a panic elsewhere while holding it; the map is still valid.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter for `opaque` unless `max` are outstanding already (then false).
    /// Its response is awaited with [`Waiters::wait`] or [`Waiters::poll_wait`].
    #[cfg(test)]
    pub(crate) fn register(&self, opaque: i32, deadline: Instant, max: usize) -> bool {
        self.register_waker(opaque, deadline, max, None)
    }

    /// [`Waiters::register`] with the task to wake already known, so the caller's first poll
    /// after sending may return `Pending` without looking at the map again.
    pub(crate) fn register_waker(
        &self,
        opaque: i32,
        deadline: Instant,
        max: usize,
        waker: Option<Waker>,
    ) -> bool {
        let mut st = self.lock();
        if st.by_opaque.len() >= max {
            return false;
        }
        st.by_opaque.insert(
            opaque,
            Waiter {
                slot: Slot::Waiting(waker),
                deadline,
            },
        );
        let rearm = match st.sweep_at {
            Some(at) => deadline < at,
            None => true,
        };
        if rearm {
            st.sweep_at = Some(deadline);
        }
        drop(st);
        if rearm {
            self.rearm.notify_one();
        }
        true
    }

    /// The response to the registered `opaque`; `None` if its waiter was dropped (deadline
    /// passed, connection closed) or never registered.
    #[cfg(test)]
    pub(crate) async fn wait(&self, opaque: i32) -> Option<RemotingCommand> {
        std::future::poll_fn(|cx| self.poll_wait(opaque, cx)).await
    }

    /// One poll of [`Waiters::wait`].
    pub(crate) fn poll_wait(
        &self,
        opaque: i32,
        cx: &mut Context<'_>,
    ) -> Poll<Option<RemotingCommand>> {
        let mut st = self.lock();
        let Some(w) = st.by_opaque.get_mut(&opaque) else {
            return Poll::Ready(None);
        };
        match &mut w.slot {
            Slot::Waiting(waker) => {
                match waker {
                    Some(k) if k.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Slot::Done(_) => match st.by_opaque.remove(&opaque).map(|w| w.slot) {
                Some(Slot::Done(response)) => Poll::Ready(Some(response)),
                _ => Poll::Ready(None),
            },
        }
    }

    /// Hands `response` to its waiter; gives it back if none waits for its opaque (or it was
    /// answered already).
    pub(crate) fn complete(&self, response: RemotingCommand) -> Option<RemotingCommand> {
        let mut st = self.lock();
        let Some(w) = st.by_opaque.get_mut(&response.opaque()) else {
            return Some(response);
        };
        let Slot::Waiting(waker) = &mut w.slot else {
            return Some(response);
        };
        let waker = waker.take();
        w.slot = Slot::Done(response);
        drop(st);
        if let Some(k) = waker {
            k.wake();
        }
        None
    }

    /// Forgets the waiter of `opaque` (its caller gave up).
    pub(crate) fn remove(&self, opaque: i32) {
        self.lock().by_opaque.remove(&opaque);
    }

    /// Drops every waiter (the connection closed) and wakes their callers.
    pub(crate) fn clear(&self) {
        let wakers: Vec<Waker> = self
            .lock()
            .by_opaque
            .drain()
            .filter_map(|(_, w)| match w.slot {
                Slot::Waiting(k) => k,
                Slot::Done(_) => None,
            })
            .collect();
        wake_all(wakers);
    }

    /// Requests still waiting.
    pub(crate) fn len(&self) -> usize {
        self.lock().by_opaque.len()
    }

    /// Drops waiters whose deadline passed, as long as the returned future runs (the
    /// connection's sweeper task runs it until the connection closes).
    pub(crate) async fn sweep(&self) {
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        loop {
            let rearm = self.rearm.notified();
            tokio::pin!(rearm);
            rearm.as_mut().enable();
            let sweep_at = self.lock().sweep_at;
            match sweep_at {
                Some(at) => {
                    if at != timer.deadline() {
                        timer.as_mut().reset(at);
                    }
                    tokio::select! {
                        _ = &mut rearm => continue,
                        _ = &mut timer => {}
                    }
                }
                None => {
                    rearm.await;
                    continue;
                }
            }
            let now = Instant::now();
            let mut wakers = Vec::new();
            let mut st = self.lock();
            // Answered ones stay until their caller takes the response.
            st.by_opaque.retain(|_, w| match &mut w.slot {
                Slot::Waiting(k) if w.deadline <= now => {
                    wakers.extend(k.take());
                    false
                }
                _ => true,
            });
            st.sweep_at = st
                .by_opaque
                .values()
                .filter(|w| matches!(w.slot, Slot::Waiting(_)))
                .map(|w| w.deadline)
                .min();
            drop(st);
            wake_all(wakers);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::code::ResponseCode;

    #[tokio::test]
    async fn cap_completion_and_deadlines() {
        let waiters = Arc::new(Waiters::new());
        let sweeper = {
            let w = waiters.clone();
            tokio::spawn(async move { w.sweep().await })
        };
        let far = Instant::now() + Duration::from_secs(60);
        assert!(waiters.register(1, far, 2));
        assert!(waiters.register(2, Instant::now() + Duration::from_millis(30), 2));
        assert!(!waiters.register(3, far, 2), "cap of 2");
        let response = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(1);
        assert!(waiters.complete(response).is_none());
        let again = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(1);
        assert!(waiters.complete(again).is_some(), "answered once");
        assert_eq!(waiters.wait(1).await.unwrap().opaque(), 1);
        let started = Instant::now();
        assert!(waiters.wait(2).await.is_none(), "dropped at its deadline");
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert_eq!(waiters.len(), 0);
        let stray = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(9);
        assert!(waiters.complete(stray).is_some(), "nobody waits for 9");
        sweeper.abort();
    }

    #[tokio::test]
    async fn a_waiting_caller_is_woken_by_its_response_or_by_clear() {
        let waiters = Arc::new(Waiters::new());
        let far = Instant::now() + Duration::from_secs(60);
        assert!(waiters.register(5, far, 8));
        assert!(waiters.register(6, far, 8));
        let answered = tokio::spawn({
            let w = waiters.clone();
            async move { w.wait(5).await }
        });
        let cleared = tokio::spawn({
            let w = waiters.clone();
            async move { w.wait(6).await }
        });
        tokio::task::yield_now().await;
        let response = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(5);
        assert!(waiters.complete(response).is_none());
        assert_eq!(answered.await.unwrap().unwrap().opaque(), 5);
        waiters.clear();
        assert!(cleared.await.unwrap().is_none());
        assert_eq!(waiters.len(), 0);
    }
}
