//! Goal: a real third-party client (PyPI `rocketmq` 0.4.4, bundling the C++ client core)
//! produces to and consumes from a 3-node DLedger group. This catches what our own client
//! hides: numbers inside extFields, JSON headers ending in a newline, batches as code 310,
//! ignored response serialization byte, heartbeats with enum ordinals.
//! Method: real name server + brokers; `tests/python/interop.py` sends 1,000 messages with
//! keys and tags (sync) and its push consumer (subscription `*`) must receive every one.
//!
//! The interpreter comes from env `RMQ_PYTHON`, else `<workspace>/.ci/venv/bin/python`. If
//! neither exists the test fails (run the install step of `.ci/run`).

use std::path::PathBuf;
use std::process::Command;

use tests::client::Client;
use tests::cluster::{Bins, Group, NameSrv};

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("RMQ_PYTHON") {
        let p = PathBuf::from(p);
        assert!(p.exists(), "RMQ_PYTHON={} does not exist", p.display());
        return p;
    }
    let ws = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = ws.join(".ci/venv/bin/python");
    assert!(
        p.exists(),
        "no Python with the `rocketmq` package: set RMQ_PYTHON or run the install step of .ci/run \
         (creates {})",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_client_core_sends_and_push_consumes_1000_messages() {
    let py = python();
    let bins = Bins {
        broker: env!("CARGO_BIN_EXE_it-mqbroker").into(),
        namesrv: env!("CARGO_BIN_EXE_it-mqnamesrv").into(),
    };
    let dir = tempfile::tempdir().unwrap();
    let ns = NameSrv::start(&bins, dir.path());
    let _g = Group::start(&bins, "RaftNode00", ns.addr, dir.path(), 3, "");
    // Producers of unknown topics auto-create them through TBW102: wait for its master route.
    Client::new(ns.addr)
        .wait_masters("TBW102", 1, std::time::Duration::from_secs(60))
        .await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/interop.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(script)
            .arg(ns.addr.to_string())
            .arg("PyInteropTopic")
            .arg("PyInteropGroup")
            .arg("1000")
            .arg("90")
            .current_dir(dir.path())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "interop script failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("SENT 1000"), "{stdout}");
    assert!(stdout.contains("RECEIVED 1000"), "{stdout}");
}
