//! An incoming request on its way to a response: the reader polls its processor once inline;
//! one that waits goes to the connection's runner of waiting requests (pending.rs). The
//! response is stamped with the request's opaque and serialization and queued without the
//! reader ever waiting; a panic becomes SYSTEM_ERROR, an unencodable response too.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use futures_util::future::CatchUnwind;
use futures_util::FutureExt;
use tokio_util::task::TaskTracker;

use crate::code::ResponseCode;
use crate::command::{RemotingCommand, FLAG_RESPONSE};
use crate::error::FrameError;
use crate::frame::SerializeType;
use crate::outbox::{Push, PushError};
use crate::pending::PendingQueue;
use crate::processor::ProcessFuture;

use super::admission::{admit_request, RunningGuard};
use super::{ConnectionContext, ConnectionHandle};

/// Routes one incoming frame: responses complete a waiter; requests go to the processor.
///
/// `running` counts requests whose processor moved to its own task (the one polled inline
/// here is the reader itself); at `max_concurrent_requests` the peer gets SYSTEM_BUSY.
pub(super) fn dispatch(
    conn: &ConnectionHandle,
    cmd: RemotingCommand,
    ctx: &ConnectionContext,
    waiting: &Waiting,
) {
    let running = &waiting.running;
    if cmd.is_response() {
        conn.complete(cmd);
        return;
    }
    if !admit_request(conn, &cmd, running, ctx.config.max_concurrent_requests) {
        return;
    }
    let meta = RequestMeta {
        oneway: cmd.is_oneway(),
        opaque: cmd.opaque(),
        serialize_type: cmd.serialize_type(),
        code: cmd.code(),
    };
    // Poll once right here: most processors answer without waiting. Anything that waits (a
    // held long-poll pull, a store append) goes to the connection's runner of waiting
    // requests (`pending`), so the reader never waits for a processor. A panic while
    // building or polling the future is caught like one inside it.
    let processor = ctx.processor.clone();
    let task_conn = conn.clone();
    let polled = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let mut work = processor.process_owned(task_conn, cmd);
        match (&mut work).now_or_never() {
            Some(response) => Ok(response),
            None => Err(work),
        }
    }));
    match polled {
        Ok(Ok(response)) => {
            if let Some(response) = finish_response(conn, meta, Ok(response)) {
                queue_response(conn, &ctx.tasks, meta, response, false);
            }
        }
        Ok(Err(work)) => {
            running.fetch_add(1, Ordering::AcqRel);
            let request = WaitingRequest {
                work: AssertUnwindSafe(work).catch_unwind(),
                meta,
                _running: RunningGuard(running.clone()),
            };
            if waiting.pending.push(request) {
                let (pending, conn, tasks) =
                    (waiting.pending.clone(), conn.clone(), ctx.tasks.clone());
                ctx.tasks.spawn(async move {
                    pending
                        .run(|(meta, outcome)| {
                            if let Some(response) = finish_response(&conn, meta, outcome) {
                                queue_response(&conn, &tasks, meta, response, true);
                            }
                        })
                        .await;
                });
            }
        }
        Err(_) => {
            if let Some(response) = finish_response(conn, meta, Err(())) {
                queue_response(conn, &ctx.tasks, meta, response, false);
            }
        }
    }
}

/// Queues a response without waiting (`after_wait`: the answer of a request that waited,
/// see `Outbox::push_after_wait`): when the outbox is full, a task waits for room instead.
fn queue_response(
    conn: &ConnectionHandle,
    tasks: &TaskTracker,
    meta: RequestMeta,
    response: RemotingCommand,
    after_wait: bool,
) {
    match conn.shared.outbox.try_push_marked(&response, after_wait) {
        Push::Queued | Push::Closed => {}
        Push::Full => {
            let conn = conn.clone();
            tasks.spawn(async move { send_response(&conn, meta, response).await });
        }
        Push::Encode(e) => {
            let fallback = unencodable_response(conn, meta, &e);
            let _ = conn.shared.outbox.try_push_marked(&fallback, after_wait);
        }
    }
}

/// Sends a response, waiting for room in the outbox; one that cannot be encoded is replaced
/// by SYSTEM_ERROR.
async fn send_response(conn: &ConnectionHandle, meta: RequestMeta, response: RemotingCommand) {
    let r = match conn.shared.outbox.push_after_wait(&response, None).await {
        Err(PushError::Encode(e)) => {
            let fallback = unencodable_response(conn, meta, &e);
            conn.shared.outbox.push_after_wait(&fallback, None).await
        }
        other => other,
    };
    if let Err(e) = r {
        tracing::debug!(conn = %conn.id(), code = meta.code, error = ?e, "response not sent");
    }
}

/// The SYSTEM_ERROR answer sent instead of a response that cannot be encoded.
fn unencodable_response(
    conn: &ConnectionHandle,
    meta: RequestMeta,
    error: &FrameError,
) -> RemotingCommand {
    tracing::warn!(conn = %conn.id(), code = meta.code, error = %error, "response cannot be encoded");
    let mut response = RemotingCommand::response(
        ResponseCode::SYSTEM_ERROR,
        format!("response cannot be encoded: {error}"),
    );
    stamp_response(&mut response, meta);
    response
}

/// What the reader shares with the runner of its connection's waiting requests.
pub(super) struct Waiting {
    /// Requests whose processor waits (for `max_concurrent_requests`).
    running: Arc<AtomicUsize>,
    pending: Arc<PendingQueue<WaitingRequest>>,
}

impl Waiting {
    /// Nothing running yet, no waiting request.
    pub(super) fn new() -> Waiting {
        Waiting {
            running: Arc::new(AtomicUsize::new(0)),
            pending: Arc::new(PendingQueue::new()),
        }
    }
}

/// A request whose processor waited when first polled: yields its outcome (`Err` for a
/// panic) and releases its `running` count once done.
struct WaitingRequest {
    work: CatchUnwind<AssertUnwindSafe<ProcessFuture<'static>>>,
    meta: RequestMeta,
    _running: RunningGuard,
}

impl Future for WaitingRequest {
    type Output = (RequestMeta, Result<Option<RemotingCommand>, ()>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Self::Output> {
        let meta = self.meta;
        self.work.poll_unpin(cx).map(|r| (meta, r.map_err(|_| ())))
    }
}

/// What the response to a request needs from it once the request itself has been consumed.
#[derive(Clone, Copy)]
struct RequestMeta {
    oneway: bool,
    opaque: i32,
    serialize_type: SerializeType,
    code: i32,
}

/// Marks `response` as the answer to the request `meta` describes.
fn stamp_response(response: &mut RemotingCommand, meta: RequestMeta) {
    response.set_opaque(meta.opaque);
    response.set_flag(response.flag() | FLAG_RESPONSE);
    response.set_serialize_type(meta.serialize_type);
}

/// Turns a processor outcome into the frame to send, if any: nothing for oneway requests or
/// `None`; SYSTEM_ERROR for a panic.
fn finish_response(
    conn: &ConnectionHandle,
    meta: RequestMeta,
    outcome: Result<Option<RemotingCommand>, ()>,
) -> Option<RemotingCommand> {
    let response = match outcome {
        Ok(r) => r,
        Err(()) => {
            tracing::error!(conn = %conn.id(), code = meta.code, "processor panicked");
            Some(RemotingCommand::response(
                ResponseCode::SYSTEM_ERROR,
                "processor panicked while handling the request",
            ))
        }
    };
    if meta.oneway {
        return None;
    }
    let mut response = response?;
    stamp_response(&mut response, meta);
    Some(response)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{
        processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
        ResponseCode, ServerConfig,
    };

    #[tokio::test]
    async fn a_panicking_processor_is_answered_with_system_error() {
        let server = RemotingServer::builder(ServerConfig::default())
            .register(
                RequestCode(1),
                processor_fn(|_c, _r| -> std::future::Ready<Option<RemotingCommand>> {
                    panic!("while building the future")
                }),
            )
            .register(
                RequestCode(2),
                processor_fn(|_c, _r| async move { panic!("inside the future") }),
            )
            .register(
                RequestCode(3),
                processor_fn(|_c, _r| async move {
                    tokio::task::yield_now().await;
                    panic!("after waiting, on its own task")
                }),
            )
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = RemotingClient::new(ClientConfig::default());
        for code in [1, 2, 3] {
            let r = client
                .invoke(
                    server.local_addr(),
                    RemotingCommand::request_empty(RequestCode(code)),
                    Duration::from_secs(5),
                )
                .await
                .unwrap();
            assert_eq!(r.response_code(), ResponseCode::SYSTEM_ERROR, "code {code}");
        }
        client.shutdown().await;
        server.shutdown().await;
    }
}
