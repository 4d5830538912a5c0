//! The running name server: a remoting server whose every request goes to
//! [`NameServerState`], a connection hook that drops brokers whose connection closes, and a
//! periodic scan that expires silent brokers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLockReadGuard};
use std::time::Duration;

use observe::{NamesrvMetrics, Registry};
use remoting::connection::ConnectionHandle;
use remoting::processor::ConnectionListener;
use remoting::server::{RemotingServer, ServerConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::NameServerConfig;
use crate::error::NamesrvError;
use crate::kv_config::KvConfig;
use crate::processor::{NameServerState, NamesrvProcessor};
use crate::route::{ConnectionId, RouteTable};

/// Entry point of the library API.
pub struct NameServer;

impl NameServer {
    /// Binds `config.listen_addr`, starts serving and returns once the socket listens.
    pub async fn start(config: NameServerConfig) -> Result<NameServerHandle, NamesrvError> {
        let kv = KvConfig::open(config.kv_config_path.clone())?;
        let listen_addr = config.listen_addr;
        let scan_every = Duration::from_millis(config.scan_interval_ms.max(1));
        let state = Arc::new(NameServerState::new(config, kv));
        let connections = Arc::new(BrokerConnections {
            state: state.clone(),
            open: Mutex::new(HashMap::new()),
        });
        let metrics = Arc::new(NamesrvMetrics::new());
        let server = RemotingServer::builder(ServerConfig::default())
            .processor(Arc::new(NamesrvProcessor {
                state: state.clone(),
                metrics: metrics.clone(),
            }))
            .listener(connections.clone())
            .bind(listen_addr)
            .await
            .map_err(|e| NamesrvError::Bind {
                addr: listen_addr,
                reason: e.to_string(),
            })?;
        let stop = CancellationToken::new();
        let scan = tokio::spawn(scan_loop(connections, scan_every, stop.clone()));
        info!(addr = %server.local_addr(), "name server started");
        Ok(NameServerHandle {
            server,
            state,
            stop,
            scan,
            metrics,
        })
    }
}

/// A running name server. Dropping it stops accepting connections; call
/// [`NameServerHandle::shutdown`] for an orderly stop.
pub struct NameServerHandle {
    server: RemotingServer,
    state: Arc<NameServerState>,
    stop: CancellationToken,
    scan: JoinHandle<()>,
    metrics: Arc<NamesrvMetrics>,
}

impl NameServerHandle {
    /// The bound address (with the real port when started on port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// A read view of the route table (for tests and diagnostics; do not hold it long).
    pub fn route_table(&self) -> RwLockReadGuard<'_, RouteTable> {
        self.state.table()
    }

    /// A registry with this server's metrics; the live-broker gauge is refreshed from the
    /// route table on every scrape. Serve it with [`observe::MetricsServer`].
    pub fn metrics_registry(&self) -> Arc<Registry> {
        let registry = Arc::new(Registry::new());
        registry.register(self.metrics.clone());
        let state = Arc::clone(&self.state);
        let metrics = Arc::clone(&self.metrics);
        registry.on_scrape(move || {
            let live = state
                .table()
                .cluster_info()
                .broker_addr_table
                .values()
                .map(|b| b.broker_addrs.len())
                .sum();
            metrics.set_live_brokers(live);
        });
        registry
    }

    /// Stops the expiry scan, drains running requests and closes every connection.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.scan.await;
        self.server.shutdown().await;
        info!("name server stopped");
    }
}

/// Tracks open connections so expired brokers' connections can be closed, and drops the
/// brokers of a connection as soon as it closes.
struct BrokerConnections {
    state: Arc<NameServerState>,
    open: Mutex<HashMap<u64, ConnectionHandle>>,
}

impl BrokerConnections {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ConnectionHandle>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ConnectionListener for BrokerConnections {
    fn on_connect(&self, conn: &ConnectionHandle) {
        self.open().insert(conn.id().0, conn.clone());
    }

    fn on_close(&self, conn: &ConnectionHandle) {
        self.open().remove(&conn.id().0);
        let id = ConnectionId(conn.id().0);
        // Most connections are clients: check under the read lock, so their closing does not
        // invalidate cached routes.
        if !self.state.table().has_connection(id) {
            return;
        }
        let removed = self.state.table_mut().connection_closed(id);
        if !removed.is_empty() {
            info!(peer = %conn.remote_addr(), brokers = removed.len(), "brokers removed: connection closed");
        }
    }
}

/// Every `every`, removes brokers past their timeout and closes their connections.
async fn scan_loop(connections: Arc<BrokerConnections>, every: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = connections.state.now_ms();
        if !connections.state.table().any_expired(now) {
            continue;
        }
        let expired = connections.state.table_mut().expire_brokers(now);
        for broker in expired {
            let Some(id) = broker.connection else {
                continue;
            };
            let conn = connections.open().get(&id.0).cloned();
            if let Some(conn) = conn {
                conn.close();
            }
        }
    }
}
