//! The `mqbroker` command line: `mqbroker -c FILE [-n NAMESRV_ADDR]` runs one DLedger-mode
//! broker (a library function so test harnesses can ship the same program under their own
//! binary name).
//!
//! Prints `The broker[<brokerName>, <addr>] boot success. serializeType=JSON and name server
//! is <namesrv>` once serving (scripts wait for it). SIGTERM / Ctrl-C stop it cleanly.

use std::path::PathBuf;

use crate::broker::Broker;
use crate::config::BrokerConfig;

struct Args {
    config: Option<PathBuf>,
    namesrv: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        config: None,
        namesrv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-c" | "--configFile" => a.config = it.next().map(PathBuf::from),
            "-n" | "--namesrvAddr" => a.namesrv = it.next(),
            "-h" | "--help" => {
                println!("usage: mqbroker -c FILE [-n NAMESRV_ADDR]");
                std::process::exit(0);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (usage: mqbroker -c FILE [-n NAMESRV_ADDR])"
                ))
            }
        }
    }
    Ok(a)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the broker until SIGTERM / Ctrl-C; `Err` carries the message to print.
pub fn main() -> Result<(), String> {
    let args = parse_args()?;
    let load = || match &args.config {
        Some(p) => BrokerConfig::from_file(p).map_err(|e| format!("reading {}: {e}", p.display())),
        None => Ok(BrokerConfig::default()),
    };
    // Logs go to stderr and to storePathRootDir/logs/broker.log (RUST_LOG, default info). The
    // file is read once to find that directory and again once logging is up, so the warnings
    // it raises are logged too. The guard flushes the file when main returns.
    let log_dir = load()?.store_path_root_dir.join("logs");
    let _log = match observe::logging::init("broker", Some(&log_dir)) {
        Ok(guard) => Some(guard),
        Err(observe::ObserveError::AlreadyInstalled) => None,
        Err(e) => {
            eprintln!("mqbroker: {e}; logging to stderr only");
            observe::logging::init("broker", None).ok()
        }
    };
    let mut cfg = load()?;
    if let Some(n) = args.namesrv {
        cfg.namesrv_addr = Some(n);
    }
    if cfg.namesrv_addr.is_none() {
        cfg.namesrv_addr = std::env::var("NAMESRV_ADDR").ok();
    }
    cfg.validate()
        .map_err(|e| format!("invalid broker configuration: {e}"))?;
    if !cfg.enable_dleger_commit_log {
        return Err("only DLedger mode is supported: set enableDLegerCommitLog=true".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.worker_threads())
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async move {
        let name = cfg.broker_name.clone();
        let addr = cfg.broker_addr();
        let namesrv = cfg.namesrv_addr.clone().unwrap_or_default();
        let broker = Broker::start(cfg)
            .await
            .map_err(|e| format!("broker start failed: {e}"))?;
        println!(
            "The broker[{name}, {addr}] boot success. serializeType=JSON and name server is {namesrv}"
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        wait_for_signal().await;
        tracing::info!("shutdown signal received");
        broker.shutdown().await;
        Ok(())
    })
}
