//! Process-wide log setup: `tracing` events filtered by `RUST_LOG` (default `info`) go to
//! stderr, and, when a directory is given, also to `<dir>/<component>.log` (appended, no
//! colours, with target, thread and fields: one event per line, so it greps and parses).

use std::fs::{self, OpenOptions};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::error::ObserveError;
pub use crate::log_file::FlushGuard;

/// What `init` installed; keep it alive until the process exits so the file is flushed.
#[derive(Debug)]
pub struct LogGuard {
    /// The log file, when one was requested.
    pub file: Option<PathBuf>,
    flush: Option<FlushGuard>,
}

impl LogGuard {
    /// Waits until everything logged so far is on disk (tests, shutdown).
    pub fn flush(&self) -> bool {
        self.flush
            .as_ref()
            .map_or(true, |f| f.flush(std::time::Duration::from_secs(5)))
    }
}

/// The log file of `component` under `dir`.
pub fn log_file_path(dir: &Path, component: &str) -> PathBuf {
    dir.join(format!("{component}.log"))
}

/// Installs the global subscriber for `component` (e.g. `"namesrv"`, `"broker"`). Fails if
/// the log directory or file cannot be created or a subscriber is already installed.
pub fn init(component: &str, log_dir: Option<&Path>) -> Result<LogGuard, ObserveError> {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let console = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);

    let (file_layer, file, flush) = match log_dir {
        None => (None, None, None),
        Some(dir) => {
            let path = log_file_path(dir, component);
            let open = fs::create_dir_all(dir)
                .and_then(|()| OpenOptions::new().create(true).append(true).open(&path));
            let handle = open.map_err(|source| ObserveError::LogFile {
                path: path.clone(),
                source,
            })?;
            let (sink, guard) = crate::log_file::spawn(handle, format!("{component}-log"))
                .map_err(|source| ObserveError::LogFile {
                    path: path.clone(),
                    source,
                })?;
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_target(true)
                .with_thread_names(true)
                .with_writer(sink);
            (Some(layer), Some(path), Some(guard))
        }
    };

    tracing_subscriber::registry()
        .with(filter)
        .with(console)
        .with(file_layer)
        .try_init()
        .map_err(|_| ObserveError::AlreadyInstalled)?;
    tracing::info!(component, log_file = ?file, "logging initialised");
    Ok(LogGuard { file, flush })
}
