//! Request processors: the async trait servers (and clients, for server-initiated requests)
//! dispatch incoming requests to, and a registry that routes by request code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::code::RequestCode;
use crate::command::RemotingCommand;
use crate::connection::{ConnectionHandle, LocalKeyMap};

/// Future returned by a processor: `Some(response)` is sent back (unless the request was
/// oneway), `None` sends nothing.
pub type ProcessFuture<'a> = Pin<Box<dyn Future<Output = Option<RemotingCommand>> + Send + 'a>>;

/// Handles requests of one or more codes.
///
/// The response's opaque, response flag and serialization are filled in by the connection,
/// so a processor only builds code, remark, header and body. A panic inside a processor is
/// caught and answered with `SYSTEM_ERROR`.
///
/// The returned future is polled once on the connection's reader task (most processors
/// answer without waiting, which saves a task spawn per request); if it is not ready it moves
/// to its own task. So do not block before the first `.await`: move heavy or blocking work
/// to `spawn_blocking` or another task.
pub trait RequestProcessor: Send + Sync + 'static {
    /// Processes one request. `conn` can be cloned and stored (e.g. to send
    /// CHECK_TRANSACTION_STATE later).
    fn process<'a>(&'a self, conn: ConnectionHandle, request: RemotingCommand)
        -> ProcessFuture<'a>;

    /// [`RequestProcessor::process`] with a future that owns what it needs, so the
    /// connection can move it to its own task if it waits. The default wraps `process`
    /// (one more allocation); processors that can build an owning future directly override
    /// it.
    fn process_owned(
        self: Arc<Self>,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'static> {
        Box::pin(async move { self.process(conn, request).await })
    }
}

/// Adapter turning an async closure into a processor.
pub struct FnProcessor<F>(F);

impl<F, Fut> RequestProcessor for FnProcessor<F>
where
    F: Fn(ConnectionHandle, RemotingCommand) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<RemotingCommand>> + Send + 'static,
{
    fn process<'a>(
        &'a self,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        Box::pin((self.0)(conn, request))
    }

    fn process_owned(
        self: Arc<Self>,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'static> {
        // The closure's future owns its captures already.
        Box::pin((self.0)(conn, request))
    }
}

/// Wraps `f` (an async closure `(conn, request) -> Option<response>`) as a processor.
pub fn processor_fn<F, Fut>(f: F) -> Arc<dyn RequestProcessor>
where
    F: Fn(ConnectionHandle, RemotingCommand) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<RemotingCommand>> + Send + 'static,
{
    Arc::new(FnProcessor(f))
}

/// Routes requests by code; unknown codes go to the default processor, or get Java's
/// `REQUEST_CODE_NOT_SUPPORTED` answer (" request type N not supported") when there is none.
#[derive(Clone, Default)]
pub struct ProcessorRegistry {
    by_code: LocalKeyMap<i32, Arc<dyn RequestProcessor>>,
    default: Option<Arc<dyn RequestProcessor>>,
}

impl ProcessorRegistry {
    /// An empty registry (every request answered "not supported").
    pub fn new() -> Self {
        ProcessorRegistry::default()
    }

    /// Registers `processor` for `code` (replacing a previous one).
    pub fn register(
        &mut self,
        code: RequestCode,
        processor: Arc<dyn RequestProcessor>,
    ) -> &mut Self {
        self.by_code.insert(code.0, processor);
        self
    }

    /// Sets the processor for codes without their own.
    pub fn set_default(&mut self, processor: Arc<dyn RequestProcessor>) -> &mut Self {
        self.default = Some(processor);
        self
    }

    /// The processor a request with `code` goes to.
    pub fn lookup(&self, code: i32) -> Option<&Arc<dyn RequestProcessor>> {
        self.by_code.get(&code).or(self.default.as_ref())
    }
}

impl RequestProcessor for ProcessorRegistry {
    fn process<'a>(
        &'a self,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        match self.lookup(request.code()) {
            Some(p) => p.process(conn, request),
            None => not_supported(&conn, &request),
        }
    }

    fn process_owned(
        self: Arc<Self>,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'static> {
        match self.lookup(request.code()) {
            Some(p) => p.clone().process_owned(conn, request),
            None => not_supported(&conn, &request),
        }
    }
}

/// Java's answer to a request code nobody handles.
fn not_supported(conn: &ConnectionHandle, request: &RemotingCommand) -> ProcessFuture<'static> {
    tracing::debug!(code = request.code(), peer = %conn.remote_addr(), "request code not supported");
    let resp = RemotingCommand::request_code_not_supported(request);
    Box::pin(async move { Some(resp) })
}

/// Hooks for connection lifecycle events (the name server drops brokers whose connection
/// closes; the broker forgets client channels).
pub trait ConnectionListener: Send + Sync + 'static {
    /// A connection was accepted or established.
    fn on_connect(&self, _conn: &ConnectionHandle) {}
    /// A connection closed (for any reason). Called exactly once per connection.
    fn on_close(&self, _conn: &ConnectionHandle) {}
}
