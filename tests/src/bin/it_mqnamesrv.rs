//! A name server process for the harness: `it-mqnamesrv PORT` runs `namesrv::NameServer` on
//! 127.0.0.1:PORT and prints the same boot line as `mqnamesrv`; SIGTERM stops it.

use namesrv::NameServer;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
