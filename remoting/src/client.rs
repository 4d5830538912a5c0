//! Client: one connection per remote address, shared by every caller, created on first use
//! and re-created (with exponential backoff after failures) when it closes.
//!
//! Each connection owns its socket (reader and writer tasks) and its `opaque -> waiter` map;
//! requests the server sends on it (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED, ...)
//! go to the client's processor.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::PartialFrameBudget;
use crate::command::RemotingCommand;
use crate::connection::{
    spawn_connection, ConnectionConfig, ConnectionContext, ConnectionHandle, LocalKeyMap,
};
use crate::error::RemotingError;
use crate::processor::{ConnectionListener, ProcessorRegistry, RequestProcessor};

/// Client limits and timings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Per-connection limits (in-flight cap, idle 120 s, frame limit).
    pub connection: ConnectionConfig,
    /// Time allowed for the TCP connect.
    pub connect_timeout: Duration,
    /// First wait after a failed connect before trying again.
    pub reconnect_backoff_min: Duration,
    /// Longest wait between connect attempts.
    pub reconnect_backoff_max: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connection: ConnectionConfig::default(),
            connect_timeout: Duration::from_secs(3),
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
        }
    }
}

/// The wait after the `failures`-th failure in a row (1 and up): `first`, doubled per further
/// failure (at most 2^16 times), never above `cap`. Reconnects use it, and so does the
/// broker's re-registration with its name servers.
pub fn backoff_delay(first: Duration, cap: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    first.saturating_mul(factor).min(cap)
}

#[derive(Default)]
struct SlotState {
    conn: Option<ConnectionHandle>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// Per-address state: the live connection and the backoff after failures.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Serializes connect attempts to one address (held across the connect only).
    connecting: tokio::sync::Mutex<()>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live(&self) -> Option<ConnectionHandle> {
        self.lock().conn.clone().filter(|c| !c.is_closed())
    }
}

struct Inner {
    config: ClientConfig,
    ctx: ConnectionContext,
    slots: Mutex<LocalKeyMap<SocketAddr, Arc<Slot>>>,
}

/// Async RPC client. Cheap to clone; all clones share connections.
#[derive(Clone)]
pub struct RemotingClient {
    inner: Arc<Inner>,
}

impl RemotingClient {
    /// A client that answers server-initiated requests with REQUEST_CODE_NOT_SUPPORTED.
    pub fn new(config: ClientConfig) -> RemotingClient {
        RemotingClient::with_processor(config, Arc::new(ProcessorRegistry::new()), None)
    }

    /// A client whose connections hand server-initiated requests to `processor`.
    pub fn with_processor(
        config: ClientConfig,
        processor: Arc<dyn RequestProcessor>,
        listener: Option<Arc<dyn ConnectionListener>>,
    ) -> RemotingClient {
        let ctx = ConnectionContext {
            config: config.connection.clone(),
            processor,
            listener,
            tasks: TaskTracker::new(),
            io: TaskTracker::new(),
            stop_reading: CancellationToken::new(),
            close_all: CancellationToken::new(),
            // A client reads only from servers it chose; the frame limit bounds each.
            partial_budget: PartialFrameBudget::new(usize::MAX),
        };
        RemotingClient {
            inner: Arc::new(Inner {
                config,
                ctx,
                slots: Mutex::new(LocalKeyMap::default()),
            }),
        }
    }

    fn slot(&self, addr: SocketAddr) -> Arc<Slot> {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(&addr) {
            return slot.clone();
        }
        slots.entry(addr).or_default().clone()
    }

    /// The live connection to `addr`, if any (no slot is created).
    fn live(&self, addr: SocketAddr) -> Option<ConnectionHandle> {
        let slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.get(&addr)?.live()
    }

    /// The connection to `addr`, connecting if needed.
    pub async fn connection(&self, addr: SocketAddr) -> Result<ConnectionHandle, RemotingError> {
        if self.inner.ctx.close_all.is_cancelled() {
            return Err(RemotingError::Shutdown);
        }
        let slot = self.slot(addr);
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let _connecting = slot.connecting.lock().await;
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let retry_at = slot.lock().retry_at;
        if let Some(at) = retry_at {
            if Instant::now() < at {
                return Err(RemotingError::ConnectFailed {
                    addr,
                    reason: "backing off after a failed connect".to_owned(),
                });
            }
        }
        let cfg = &self.inner.config;
        let result = match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(addr)).await
        {
            Ok(Ok(stream)) => {
                spawn_connection(stream, self.inner.ctx.clone()).map_err(|e| e.to_string())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("timed out after {:?}", cfg.connect_timeout)),
        };
        let mut st = slot.lock();
        match result {
            Ok(conn) => {
                st.conn = Some(conn.clone());
                st.failures = 0;
                st.retry_at = None;
                tracing::debug!(%addr, conn = %conn.id(), "connected");
                Ok(conn)
            }
            Err(reason) => {
                st.conn = None;
                st.failures = st.failures.saturating_add(1);
                let wait = backoff_delay(
                    cfg.reconnect_backoff_min,
                    cfg.reconnect_backoff_max,
                    st.failures,
                );
                st.retry_at = Some(Instant::now() + wait);
                tracing::debug!(%addr, %reason, ?wait, "connect failed");
                Err(RemotingError::ConnectFailed { addr, reason })
            }
        }
    }

    /// Sends `request` to `addr` and waits for the response, all within `timeout`.
    pub async fn invoke(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let deadline = Instant::now() + timeout;
        // A live connection (the usual case) needs neither the connect lock nor a timer.
        let conn = match self.live(addr) {
            Some(c) => c,
            None => match tokio::time::timeout_at(deadline, self.connection(addr)).await {
                Ok(c) => c?,
                Err(_) => return Err(RemotingError::Timeout { addr, timeout }),
            },
        };
        conn.invoke_until(request, deadline, timeout).await
    }

    /// Sends a oneway request to `addr`.
    pub async fn invoke_oneway(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), RemotingError> {
        let deadline = Instant::now() + timeout;
        let conn = match tokio::time::timeout_at(deadline, self.connection(addr)).await {
            Ok(c) => c?,
            Err(_) => return Err(RemotingError::Timeout { addr, timeout }),
        };
        conn.invoke_oneway(request, deadline.saturating_duration_since(Instant::now()))
            .await
    }

    /// Fire-and-callback: sends `request` in the background and calls `callback` with the
    /// outcome (response, timeout, connection error).
    pub fn invoke_with_callback<F>(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
        timeout: Duration,
        callback: F,
    ) where
        F: FnOnce(Result<RemotingCommand, RemotingError>) + Send + 'static,
    {
        let client = self.clone();
        self.inner.ctx.tasks.spawn(async move {
            callback(client.invoke(addr, request, timeout).await);
        });
    }

    /// Closes the connection to `addr` (the next call reconnects).
    pub fn close_connection(&self, addr: SocketAddr) {
        let slot = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&addr)
            .cloned();
        if let Some(slot) = slot {
            if let Some(c) = slot.lock().conn.take() {
                c.close();
            }
        }
    }

    /// Closes every connection; later calls fail with `Shutdown`.
    pub async fn shutdown(&self) {
        self.inner.ctx.close_all.cancel();
        self.inner.ctx.tasks.close();
        self.inner.ctx.io.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.inner.ctx.io.wait()).await;
    }
}
