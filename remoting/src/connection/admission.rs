//! What one connection may take from its owner: at most `max_concurrent_requests` requests
//! whose processor waits (beyond it the peer gets SYSTEM_BUSY), and its read buffer's charge
//! to the owner's partial-frame budget (budget.rs) while it holds a partial frame.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;

use crate::budget::BudgetHold;
use crate::code::ResponseCode;
use crate::command::RemotingCommand;

use super::ConnectionHandle;

/// Java's remark when a request is rejected for overload.
pub const OVERLOAD_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";

/// Capacity of a connection's read buffer until a frame needs more (not charged to the
/// partial-frame budget, budget.rs).
pub(super) const INITIAL_READ_BUF: usize = 8 * 1024;

/// Admits an incoming request under the cap of `max` running requests (`running` counts those
/// whose processor waits on its own task). At the cap the peer gets SYSTEM_BUSY (a oneway
/// request: nothing) and false is returned: the request is dropped.
pub(super) fn admit_request(
    conn: &ConnectionHandle,
    cmd: &RemotingCommand,
    running: &AtomicUsize,
    max: usize,
) -> bool {
    if running.load(Ordering::Acquire) < max.max(1) {
        return true;
    }
    if !cmd.is_oneway() {
        let busy = RemotingCommand::response_to(cmd, ResponseCode::SYSTEM_BUSY, OVERLOAD_REMARK);
        // Never wait here: the reader must keep reading responses.
        let _ = conn.shared.outbox.try_push(&busy);
    }
    false
}

/// Gives back a slot of the concurrent-request count when the waiting request ends.
pub(super) struct RunningGuard(pub(super) Arc<AtomicUsize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Charges the read buffer to the budget for the next read: what is left in `buf` after
/// decoding is a partial frame, and its buffer, as the next read fills it, counts unless it
/// is still the initial one (budget.rs). False when that takes the owner past its budget (the
/// connection must close).
pub(super) fn charge_partial_frame(hold: &mut BudgetHold, buf: &BytesMut) -> bool {
    let charge = if buf.is_empty() || buf.capacity() <= INITIAL_READ_BUF {
        0
    } else {
        buf.capacity()
    };
    hold.set(buf.len(), charge)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{
        processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
        ResponseCode, ServerConfig,
    };

    #[tokio::test]
    async fn requests_over_the_concurrency_cap_get_system_busy() {
        let release = std::sync::Arc::new(tokio::sync::Notify::new());
        let held = release.clone();
        let config = ServerConfig {
            connection: crate::ConnectionConfig {
                max_concurrent_requests: 1,
                ..crate::ConnectionConfig::default()
            },
            ..ServerConfig::default()
        };
        let server = RemotingServer::builder(config)
            .register(
                RequestCode(1),
                processor_fn(move |_c, _r| {
                    let held = held.clone();
                    async move {
                        held.notified().await;
                        Some(RemotingCommand::success())
                    }
                }),
            )
            .default_processor(processor_fn(|_c, _r| async move {
                Some(RemotingCommand::success())
            }))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = RemotingClient::new(ClientConfig::default());
        let addr = server.local_addr();
        let t = Duration::from_secs(5);
        let first = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), t)
                    .await
            })
        };
        // Until the held request occupies the only slot, others may still pass.
        let busy = loop {
            let r = client
                .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), t)
                .await
                .unwrap();
            if r.response_code() == ResponseCode::SYSTEM_BUSY {
                break r;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(busy.remark(), Some(super::OVERLOAD_REMARK));
        release.notify_one();
        let r = first.await.unwrap().unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS);
        // The slot is free again once the held processor's task ended.
        let deadline = tokio::time::Instant::now() + t;
        loop {
            let r = client
                .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), t)
                .await
                .unwrap();
            if r.response_code() == ResponseCode::SUCCESS {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "slot never freed");
            tokio::task::yield_now().await;
        }
        client.shutdown().await;
        server.shutdown().await;
    }
}
