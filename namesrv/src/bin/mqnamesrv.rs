//! `mqnamesrv`: runs a name server until SIGTERM or Ctrl-C.
//!
//! Prints `The Name Server boot success. serializeType=JSON, address <addr>` on stdout once
//! the socket listens (as Java does; scripts and tests wait for that line). Logs go to stderr,
//! filtered by `RUST_LOG` (default `info`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use namesrv::{NameServer, NameServerConfig, Switches, DEFAULT_PORT};
use observe::MetricsServer;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// RocketMQ-compatible name server.
#[derive(Debug, Parser)]
#[command(name = "mqnamesrv", version)]
struct Args {
    /// Address to listen on (RocketMQ listens on every interface).
    #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)))]
    listen: SocketAddr,
    /// Port to listen on; overrides the port of --listen.
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Remove a broker that has not registered for this long.
    #[arg(long, default_value_t = 120_000)]
    broker_timeout_ms: u64,
    /// How often to look for expired brokers.
    #[arg(long, default_value_t = 5_000)]
    scan_interval_ms: u64,
    /// Persist KV configs to this file (Java: ~/namesrv/kvConfig.json). In memory if unset.
    #[arg(long)]
    kv_config_path: Option<PathBuf>,
    /// After start, answer route queries "name server not ready" for this long, so clients
    /// keep their routes until brokers have re-registered (0 = serve at once).
    #[arg(long, default_value_t = 0)]
    wait_for_service_ms: u64,
    /// Fill `orderTopicConf` of routes from the ORDER_TOPIC_CONFIG namespace.
    #[arg(long)]
    order_message_enable: bool,
    /// Forget topics a broker no longer lists in its registration.
    #[arg(long)]
    delete_topic_with_broker_registration: bool,
    /// Serve Prometheus metrics at http://<listen ip>:<port>/metrics (0 = off).
    #[arg(long, default_value_t = 0)]
    metrics_port: u16,
}

impl Args {
    fn into_config(self) -> NameServerConfig {
        let mut listen_addr = self.listen;
        if let Some(port) = self.port {
            listen_addr.set_port(port);
        }
        NameServerConfig {
            listen_addr,
            scan_interval_ms: self.scan_interval_ms,
            broker_timeout_ms: self.broker_timeout_ms,
            kv_config_path: self.kv_config_path,
            wait_for_service_ms: Some(self.wait_for_service_ms).filter(|&ms| ms > 0),
            switches: Switches {
                order_message_enable: self.order_message_enable,
                delete_topic_with_broker_registration: self.delete_topic_with_broker_registration,
                ..Switches::default()
            },
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();

    let (metrics_ip, metrics_port) = (args.listen.ip(), args.metrics_port);
    let handle = NameServer::start(args.into_config())
        .await
        .context("name server failed to start")?;
    let metrics_stop = CancellationToken::new();
    let metrics = MetricsServer::start_on_port(
        metrics_ip,
        metrics_port,
        handle.metrics_registry(),
        metrics_stop.clone(),
    )
    .await
    .context("metrics endpoint failed to start")?;
    println!(
        "The Name Server boot success. serializeType=JSON, address {}",
        handle.local_addr()
    );

    wait_for_stop_signal().await?;
    tracing::info!("stop signal received, shutting down");
    metrics_stop.cancel();
    if let Some(metrics) = metrics {
        metrics.stopped().await;
    }
    handle.shutdown().await;
    Ok(())
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM.
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("cannot watch Ctrl-C")?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("cannot watch Ctrl-C")?;
    Ok(())
}
