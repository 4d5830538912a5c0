//! A name server process for the harness: `it-mqnamesrv PORT` runs `namesrv::NameServer` on
//! 127.0.0.1:PORT and prints the same boot line as `mqnamesrv`; SIGTERM stops it. Logs go to
//! stderr (`RUST_LOG`, default info: registrations and broker removals, which a failover test
//! that timed out waiting for a master needs).

use namesrv::NameServer;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let port: u16 = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: it-mqnamesrv PORT"))?
        .parse()?;
    let cfg = namesrv::NameServerConfig {
        listen_addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        ..Default::default()
    };
    let h = NameServer::start(cfg).await?;
    println!(
        "The Name Server boot success. serializeType=JSON, address {}",
        h.local_addr()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    h.shutdown().await;
    Ok(())
}
