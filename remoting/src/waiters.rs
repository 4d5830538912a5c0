//! The requests one side of a connection sent and still waits for: `opaque -> waiter`, each
//! with its deadline, and one sweeper per connection that drops waiters whose deadline passed.
//!
//! Why a sweeper instead of a timer per call: registering and clearing a runtime timer for
//! every request showed up in profiles; here a deadline costs one comparison under the lock
//! the waiter is inserted with. The sweeper sleeps until the earliest deadline it knows of
//! (requests usually share one timeout, so later inserts never move it) and only then scans.
//!
//! Owns: the waiters, the in-flight cap and the sweeper's wake-up time. A caller whose waiter
//! is dropped (deadline passed, connection closed) sees its receiver fail and tells the two
//! apart by the clock.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::command::RemotingCommand;
use crate::connection::LocalKeyMap;

struct Waiter {
    tx: oneshot::Sender<RemotingCommand>,
    deadline: Instant,
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

    /// Registers a waiter for `opaque` unless `max` are outstanding already (then `None`).
    pub(crate) fn register(
        &self,
        opaque: i32,
        deadline: Instant,
        max: usize,
    ) -> Option<oneshot::Receiver<RemotingCommand>> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        if st.by_opaque.len() >= max {
            return None;
        }
        st.by_opaque.insert(opaque, Waiter { tx, deadline });
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
        Some(rx)
    }

    /// Hands `response` to its waiter; gives it back if none waits for its opaque.
    pub(crate) fn complete(&self, response: RemotingCommand) -> Option<RemotingCommand> {
        let waiter = self.lock().by_opaque.remove(&response.opaque());
        match waiter {
            // The caller may have gone meanwhile; nothing to do then.
            Some(w) => {
                let _ = w.tx.send(response);
                None
            }
            None => Some(response),
        }
    }

    /// Forgets the waiter of `opaque` (its caller gave up).
    pub(crate) fn remove(&self, opaque: i32) {
        self.lock().by_opaque.remove(&opaque);
    }

    /// Drops every waiter (the connection closed).
    pub(crate) fn clear(&self) {
        self.lock().by_opaque.clear();
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
            let mut st = self.lock();
            st.by_opaque.retain(|_, w| w.deadline > now);
            st.sweep_at = st.by_opaque.values().map(|w| w.deadline).min();
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
        let answered = waiters.register(1, far, 2).unwrap();
        let near = waiters
            .register(2, Instant::now() + Duration::from_millis(30), 2)
            .unwrap();
        assert!(waiters.register(3, far, 2).is_none(), "cap of 2");
        let response = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(1);
        assert!(waiters.complete(response).is_none());
        assert_eq!(answered.await.unwrap().opaque(), 1);
        let started = Instant::now();
        assert!(near.await.is_err(), "dropped at its deadline");
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert_eq!(waiters.len(), 0);
        let stray = RemotingCommand::response(ResponseCode::SUCCESS, "").with_opaque(9);
        assert!(waiters.complete(stray).is_some(), "nobody waits for 9");
        sweeper.abort();
    }
}
