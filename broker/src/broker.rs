//! One broker process: config → ledger → store → processors → remoting servers (listenPort
//! and the VIP port listenPort − 2) → controller and registration; and the reverse on
//! shutdown: stop accepting, drain, stop dispatch and the ledger (final flush + checkpoint),
//! unregister from the name servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dledger_commitlog::runtime::{AppendHook, Ledger, LedgerOptions};
use remoting::{ClientConfig, RemotingClient, RemotingServer, ServerConfig};
use tokio::task::JoinHandle;

use crate::config::BrokerConfig;
use crate::context::BrokerContext;
use crate::controller::{BrokerController, RoleServices};
use crate::error::BrokerError;
use crate::namesrv_client::{resolve_namesrv_addrs, NamesrvClient};
use crate::processor::{self, client::ClientConnectionListener};
use crate::store::commit_log::ReplicatedLog;
use crate::store::ledger_log::LedgerLog;
use crate::store::message_store::MessageStore;

/// Interval of the metadata persistence / consume-queue flush task.
const PERSIST_INTERVAL: Duration = Duration::from_secs(1);
/// Client channels not refreshed for this long are dropped (Java: 120 s).
const CHANNEL_EXPIRE_MS: i64 = 120_000;

/// A running broker.
pub struct Broker {
    ctx: Arc<BrokerContext>,
    server: RemotingServer,
    vip_server: Option<RemotingServer>,
    namesrv: Option<Arc<NamesrvClient>>,
    client: RemotingClient,
    tasks: Vec<JoinHandle<()>>,
}

/// Builds the DLedger options from the broker config (dLeger* keys, DLedger keys in `extra`).
pub fn ledger_options(cfg: &BrokerConfig) -> Result<LedgerOptions, BrokerError> {
    let group = cfg
        .dleger_group
        .clone()
        .unwrap_or_else(|| cfg.broker_name.clone());
    let self_id = cfg
        .dleger_self_id
        .clone()
        .ok_or_else(|| BrokerError::System("dLegerSelfId is required".into()))?;
    let mut peers = Vec::new();
    for p in cfg.dledger_peers() {
        let addr: SocketAddr = p
            .addr
            .parse()
            .map_err(|_| BrokerError::System(format!("bad dLegerPeers address {}", p.addr)))?;
        peers.push((p.id.clone(), addr));
    }
    let mut opts = LedgerOptions::new(&group, &self_id, peers, cfg.dledger_base_dir());
    opts.store.data_segment_bytes = cfg.mapped_file_size_commit_log;
    // Java's DLedgerCommitLog append hook: the stored record carries its own physical offset
    // (entry pos + 48), written before the CRCs and before replication.
    opts.append_hook = Some(AppendHook(Arc::new(
        crate::message::record::stamp_physical_offset,
    )));
    for (k, v) in &cfg.extra {
        match opts.apply_property(k, v) {
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "ignoring DLedger option"),
        }
    }
    if cfg.preferred_leader_id.is_some() {
        if let Some(p) = &cfg.preferred_leader_id {
            let _ = opts.apply_property("preferredLeaderId", p);
        }
    }
    let flush = match cfg.flush_disk_type {
        crate::config::FlushDiskType::SyncFlush => "SYNC_FLUSH",
        crate::config::FlushDiskType::AsyncFlush => "ASYNC_FLUSH",
    };
    let _ = opts.apply_property("flushDiskType", flush);
    opts.validate().map_err(BrokerError::System)?;
    Ok(opts)
}

impl Broker {
    /// Starts a DLedger-mode broker from its config.
    pub async fn start(cfg: BrokerConfig) -> Result<Broker, BrokerError> {
        let opts = ledger_options(&cfg)?;
        let ledger = Ledger::start(opts)
            .await
            .map_err(|e| BrokerError::System(format!("ledger start failed: {e}")))?;
        let log: Arc<dyn ReplicatedLog> = Arc::new(LedgerLog::new(ledger));
        Broker::start_with_log(
            cfg,
            log,
            Arc::new(crate::services::BrokerRoleServices::new()),
        )
        .await
    }

    /// Starts a broker over any replicated log (tests use `MemLog`).
    pub async fn start_with_log(
        mut cfg: BrokerConfig,
        log: Arc<dyn ReplicatedLog>,
        services: Arc<dyn RoleServices>,
    ) -> Result<Broker, BrokerError> {
        // broker-roles.md §2 step 1: the file's brokerId is ignored in DLedger mode.
        cfg.broker_id = -1;
        let store_host: SocketAddr = cfg.broker_addr().parse().map_err(|_| {
            BrokerError::System(format!("bad brokerIP1:listenPort {}", cfg.broker_addr()))
        })?;
        let sampled_log = Arc::clone(&log);
        let store = MessageStore::open(&cfg, log, store_host)?;
        let ctx = BrokerContext::open(cfg, store)?;
        let peer_ids: Vec<&str> = ctx
            .config
            .dledger_peers()
            .iter()
            .map(|p| p.id.as_str())
            .collect();
        let metrics = Arc::new(observe::BrokerMetrics::new(&peer_ids));
        let registry = processor::registry(&ctx, &metrics);
        let listener = Arc::new(ClientConnectionListener(Arc::clone(&ctx)));
        let bind_ip = ctx.config.bind_address;
        let addr = SocketAddr::new(bind_ip, ctx.config.listen_port);
        let mut server_config = ServerConfig::default();
        server_config.connection.busy_poll =
            Duration::from_micros(ctx.config.remoting_busy_poll_micros);
        let server = RemotingServer::builder(server_config.clone())
            .registry(registry.clone())
            .listener(listener.clone())
            .bind(addr)
            .await
            .map_err(|e| BrokerError::System(format!("cannot listen on {addr}: {e}")))?;
        let vip_port = ctx.config.vip_listen_port();
        let vip_server = if ctx.config.listen_port > 2 {
            let vip = SocketAddr::new(bind_ip, vip_port);
            match RemotingServer::builder(server_config)
                .registry(registry)
                .listener(listener)
                .bind(vip)
                .await
            {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(%vip, error = %e, "VIP channel not started");
                    None
                }
            }
        } else {
            None
        };

        let metrics_endpoint = crate::metrics::start_endpoint(
            bind_ip,
            ctx.config.metrics_port,
            Arc::clone(&metrics),
            ctx.shutdown.child_token(),
        )
        .await?;
        let client = RemotingClient::new(ClientConfig::default());
        let mut tasks = Vec::new();
        if let Some(endpoint) = metrics_endpoint {
            tasks.push(tokio::spawn(endpoint.stopped()));
        }
        tasks.push(crate::metrics::spawn_log_sampler(
            sampled_log,
            Arc::clone(ctx.store.consume_queues()),
            ctx.config.store_path_root_dir.clone(),
            metrics,
            ctx.shutdown.clone(),
        ));
        tasks.push(tokio::spawn(
            BrokerController::new(Arc::clone(&ctx), services).run(),
        ));
        let flush_interval = ctx
            .config
            .extra
            .get("metadataOffsetFlushIntervalMs")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(crate::metadata::DEFAULT_OFFSET_FLUSH_INTERVAL, |ms| {
                Duration::from_millis(ms.max(1))
            });
        tasks.push(tokio::spawn(crate::metadata::run_offset_flusher(
            Arc::clone(&ctx),
            Arc::clone(&ctx.offset_flush),
            flush_interval,
            ctx.shutdown.clone(),
        )));
        let namesrv = match ctx.config.namesrv_addr.as_deref() {
            Some(list) if !list.trim().is_empty() => {
                let addrs = resolve_namesrv_addrs(list).await;
                let n = Arc::new(NamesrvClient::new(Arc::clone(&ctx), client.clone(), addrs));
                let period = Duration::from_millis(ctx.config.register_name_server_period_ms);
                tasks.push(tokio::spawn(Arc::clone(&n).run(period)));
                Some(n)
            }
            _ => None,
        };
        {
            let ctx = Arc::clone(&ctx);
            tasks.push(tokio::spawn(async move {
                let mut t = tokio::time::interval(PERSIST_INTERVAL);
                loop {
                    tokio::select! {
                        _ = ctx.shutdown.cancelled() => break,
                        _ = t.tick() => {
                            let c = Arc::clone(&ctx);
                            let _ = tokio::task::spawn_blocking(move || c.persist()).await;
                            for g in ctx.clients.scan_expired(crate::context::now_ms(), CHANNEL_EXPIRE_MS) {
                                processor::client::notify_group_changed(&ctx, &g);
                            }
                        }
                    }
                }
            }));
        }
        Ok(Broker {
            ctx,
            server,
            vip_server,
            namesrv,
            client,
            tasks,
        })
    }

    /// The shared context.
    pub fn context(&self) -> &Arc<BrokerContext> {
        &self.ctx
    }

    /// The client-facing listen address.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Registers with the name servers now (tests, tools).
    pub async fn register_now(&self) -> usize {
        match &self.namesrv {
            Some(n) => n.register_all().await,
            None => 0,
        }
    }

    /// Clean stop: stop accepting and drain requests, stop background tasks, stop the store
    /// and ledger (final flush + checkpoint), persist metadata, unregister.
    pub async fn shutdown(self) {
        self.ctx.shutdown.cancel();
        self.server.shutdown().await;
        if let Some(v) = &self.vip_server {
            v.shutdown().await;
        }
        for t in self.tasks {
            let _ = t.await;
        }
        // The last window of consumer offsets, while the log still runs.
        let last_flush = crate::metadata::flush_offsets(&self.ctx, &self.ctx.offset_flush);
        match tokio::time::timeout(Duration::from_secs(2), last_flush).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "last consumer offsets not flushed"),
            Err(_) => tracing::warn!("last consumer offsets not flushed in time"),
        }
        self.ctx.store.shutdown().await;
        self.ctx.persist();
        if let Some(n) = &self.namesrv {
            n.unregister_all().await;
        }
        self.client.shutdown().await;
        tracing::info!("broker shut down");
    }
}
