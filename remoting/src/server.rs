//! The accept loop: one reader task and one writer task for every accepted connection (plus a
//! task for each request whose processor waits), with a connection cap and graceful shutdown.
//!
//! Shutdown order: stop accepting and processing new requests, let running processors finish
//! (bounded by `shutdown_grace`), flush their responses, close every connection. While
//! draining, connections still read: responses complete their waiters, requests from clients
//! newer than V5_3_1 are answered GO_AWAY (Java 5.x), other requests are dropped unanswered.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::PartialFrameBudget;
use crate::code::RequestCode;
use crate::connection::{spawn_connection, ConnectionConfig, ConnectionContext, ConnectionHandle};
use crate::error::RemotingError;
use crate::processor::{ConnectionListener, ProcessorRegistry, RequestProcessor};

/// Server limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Per-connection limits and timings (idle 120 s, partial frame 30 s, 16 MiB frames).
    pub connection: ConnectionConfig,
    /// Connections open at once; more are accepted and closed immediately.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_ip: usize,
    /// How long shutdown waits for running processors, then for writers to flush.
    pub shutdown_grace: Duration,
    /// Bytes of read buffer all connections together may have allocated for partial (not
    /// yet complete) frames, beyond each connection's initial 8 KiB buffer; the connection
    /// whose buffer would go past it is closed (slow-drip protection, RELIABILITY §4.1;
    /// budget.rs).
    pub max_partial_frame_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            connection: ConnectionConfig::default(),
            max_connections: 10_000,
            max_connections_per_ip: 10_000,
            shutdown_grace: Duration::from_secs(5),
            max_partial_frame_bytes: 128 * 1024 * 1024,
        }
    }
}

/// Collects processors and hooks, then binds.
pub struct ServerBuilder {
    config: ServerConfig,
    registry: ProcessorRegistry,
    custom: Option<Arc<dyn RequestProcessor>>,
    listener: Option<Arc<dyn ConnectionListener>>,
}

impl ServerBuilder {
    /// Registers the processor of one request code.
    pub fn register(mut self, code: RequestCode, processor: Arc<dyn RequestProcessor>) -> Self {
        self.registry.register(code, processor);
        self
    }

    /// Processor for codes without their own (otherwise REQUEST_CODE_NOT_SUPPORTED).
    pub fn default_processor(mut self, processor: Arc<dyn RequestProcessor>) -> Self {
        self.registry.set_default(processor);
        self
    }

    /// Uses a prepared registry (replaces earlier `register` calls).
    pub fn registry(mut self, registry: ProcessorRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Routes every request to one processor of your own (bypasses the registry).
    pub fn processor(mut self, processor: Arc<dyn RequestProcessor>) -> Self {
        self.custom = Some(processor);
        self
    }

    /// Connection open/close hooks.
    pub fn listener(mut self, listener: Arc<dyn ConnectionListener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Binds `addr` (port 0 picks a free port) and starts accepting.
    pub async fn bind(self, addr: SocketAddr) -> Result<RemotingServer, RemotingError> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let processor = self
            .custom
            .unwrap_or_else(|| Arc::new(self.registry) as Arc<dyn RequestProcessor>);
        let counts = Arc::new(ConnectionCounts::default());
        let ctx = ConnectionContext {
            config: self.config.connection.clone(),
            processor,
            listener: Some(Arc::new(CountingListener {
                counts: counts.clone(),
                user: self.listener,
            })),
            tasks: TaskTracker::new(),
            io: TaskTracker::new(),
            stop_reading: CancellationToken::new(),
            close_all: CancellationToken::new(),
            partial_budget: PartialFrameBudget::new(self.config.max_partial_frame_bytes),
        };
        let stop_accept = CancellationToken::new();
        let accept = tokio::spawn(accept_loop(
            listener,
            ctx.clone(),
            counts.clone(),
            self.config.clone(),
            stop_accept.clone(),
        ));
        tracing::info!(%local_addr, "remoting server listening");
        Ok(RemotingServer {
            local_addr,
            config: self.config,
            ctx,
            counts,
            stop_accept,
            accept: Mutex::new(Some(accept)),
        })
    }
}

#[derive(Default)]
struct ConnectionCounts {
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

impl ConnectionCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.by_ip.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves a slot for `ip` if both caps allow it.
    fn try_admit(&self, ip: IpAddr, max_total: usize, max_per_ip: usize) -> bool {
        let mut m = self.lock();
        let total: usize = m.values().sum();
        let per_ip = m.get(&ip).copied().unwrap_or(0);
        if total >= max_total || per_ip >= max_per_ip {
            return false;
        }
        *m.entry(ip).or_insert(0) += 1;
        true
    }

    fn release(&self, ip: IpAddr) {
        let mut m = self.lock();
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
    }

    fn total(&self) -> usize {
        self.lock().values().sum()
    }
}

struct CountingListener {
    counts: Arc<ConnectionCounts>,
    user: Option<Arc<dyn ConnectionListener>>,
}

impl ConnectionListener for CountingListener {
    fn on_connect(&self, conn: &ConnectionHandle) {
        if let Some(u) = &self.user {
            u.on_connect(conn);
        }
    }

    fn on_close(&self, conn: &ConnectionHandle) {
        self.counts.release(conn.remote_addr().ip());
        if let Some(u) = &self.user {
            u.on_close(conn);
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    ctx: ConnectionContext,
    counts: Arc<ConnectionCounts>,
    config: ServerConfig,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                if !counts.try_admit(
                    peer.ip(),
                    config.max_connections,
                    config.max_connections_per_ip,
                ) {
                    tracing::warn!(%peer, "connection cap reached; closing new connection");
                    drop(stream);
                    continue;
                }
                if let Err(e) = spawn_connection(stream, ctx.clone()) {
                    counts.release(peer.ip());
                    tracing::debug!(%peer, error = %e, "could not set up accepted connection");
                }
            }
            Err(e) => {
                // Usually fd exhaustion; back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

/// A running server. Dropping it closes everything abruptly; prefer [`RemotingServer::shutdown`].
pub struct RemotingServer {
    local_addr: SocketAddr,
    config: ServerConfig,
    ctx: ConnectionContext,
    counts: Arc<ConnectionCounts>,
    stop_accept: CancellationToken,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl RemotingServer {
    /// Starts building a server.
    pub fn builder(config: ServerConfig) -> ServerBuilder {
        ServerBuilder {
            config,
            registry: ProcessorRegistry::new(),
            custom: None,
            listener: None,
        }
    }

    /// Binds with a ready registry and no hooks.
    pub async fn bind(
        addr: SocketAddr,
        config: ServerConfig,
        registry: ProcessorRegistry,
    ) -> Result<RemotingServer, RemotingError> {
        RemotingServer::builder(config)
            .registry(registry)
            .bind(addr)
            .await
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connections currently open.
    pub fn connection_count(&self) -> usize {
        self.counts.total()
    }

    /// Bytes all connections hold in partial frames.
    pub fn partial_frame_bytes(&self) -> usize {
        self.ctx.partial_budget.used()
    }

    /// Bytes of read buffer charged for partial frames (what `max_partial_frame_bytes`
    /// limits).
    pub fn partial_frame_buffer_bytes(&self) -> usize {
        self.ctx.partial_budget.charged()
    }

    /// Graceful shutdown: stop accepting and processing new requests (GO_AWAY to clients newer
    /// than V5_3_1), drain processors, flush, close.
    pub async fn shutdown(&self) {
        self.stop_accept.cancel();
        self.ctx.stop_reading.cancel();
        self.ctx.tasks.close();
        let grace = self.config.shutdown_grace;
        if tokio::time::timeout(grace, self.ctx.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("processors still running after the shutdown grace period");
        }
        self.ctx.close_all.cancel();
        self.ctx.io.close();
        if tokio::time::timeout(grace, self.ctx.io.wait())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the shutdown grace period");
        }
        let accept = self.accept.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(a) = accept {
            let _ = a.await;
        }
        tracing::info!(local_addr = %self.local_addr, "remoting server stopped");
    }
}

impl Drop for RemotingServer {
    fn drop(&mut self) {
        self.stop_accept.cancel();
        self.ctx.stop_reading.cancel();
        self.ctx.close_all.cancel();
    }
}
