// Goal: logging::init writes events to <dir>/<component>.log and refuses a second install.
// Method: one process-wide install in this test binary (its own process), an event, a flush,
// then read the file.

#![allow(clippy::unwrap_used)]

#[test]
fn events_reach_the_component_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let guard = observe::logging::init("unit", Some(&logs)).unwrap();
    let path = logs.join("unit.log");
    assert_eq!(guard.file.as_deref(), Some(path.as_path()));
    tracing::info!(peer = "n1", lag = 7, "replication lag sampled");
    tracing::debug!("below the default level");
    assert!(guard.flush());
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("replication lag sampled"))
        .unwrap_or_else(|| panic!("event missing from {text:?}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("peer=\"n1\"") && line.contains("lag=7"),
        "{line}"
    );
    assert!(!line.contains('\u{1b}'), "ANSI escapes in file: {line}");
    assert!(!text.contains("below the default level"));
    assert!(matches!(
        observe::logging::init("unit", None),
        Err(observe::ObserveError::AlreadyInstalled)
    ));
}
