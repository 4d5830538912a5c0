//! Goal: `bin/dledger/fast-try.sh start|status|stop` works end to end: the group of
//! conf/dledger comes up with one master (BID 0) and two slaves of RaftNode00, the sample
//! messages are sent and consumed back, and `stop` leaves no process behind.
//! Method: the script with `--data <temp dir>` and FAST_TRY_BIN_DIR set to the target dir of
//! this test executable (no `cargo build` inside `cargo test`); its output is parsed. The
//! conf files use fixed ports, so a busy port fails the test at once with the port named.
//! A drop guard always runs `stop`, so processes never leak when an assertion fails.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tools::table::parse_rendered;

/// Name server, broker listen ports, their VIP ports (listen - 2) and the DLedger ports.
const FIXED_PORTS: [u16; 10] = [
    9876, 30911, 30921, 30931, 30909, 30919, 30929, 40911, 40912, 40913,
];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn bin_dir() -> PathBuf {
    // target/<profile>/deps/<test exe> -> target/<profile>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// mqadmin and mqbench are built for this test; mqnamesrv and mqbroker may need a build.
fn ensure_binaries(dir: &Path) {
    let missing = |d: &Path| {
        ["mqnamesrv", "mqbroker", "mqadmin", "mqbench"]
            .iter()
            .any(|b| !d.join(b).exists())
    };
    if missing(dir) {
        let status = Command::new(env!("CARGO"))
            .args([
                "build", "-p", "broker", "-p", "namesrv", "-p", "tools", "--bins",
            ])
            .current_dir(workspace())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cargo build of the server binaries failed"
        );
    }
    assert!(!missing(dir), "binaries missing in {}", dir.display());
}

/// Runs the script with a deadline; returns (success, stdout, stderr).
fn script(data: &Path, cmd: &str, timeout: Duration) -> (bool, String, String) {
    let out_path = data.join(format!("script-{cmd}.out"));
    let err_path = data.join(format!("script-{cmd}.err"));
    let mut child = Command::new("bash")
        .arg(workspace().join("bin/dledger/fast-try.sh"))
        .args([cmd, "--data"])
        .arg(data)
        .env("FAST_TRY_BIN_DIR", bin_dir())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "fast-try.sh {cmd} did not finish in {timeout:?}\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (
        status.success(),
        std::fs::read_to_string(&out_path).unwrap(),
        std::fs::read_to_string(&err_path).unwrap(),
    )
}

/// Owns the data dir; `stop`s the group on drop, before the dir is removed.
struct Group {
    data: tempfile::TempDir,
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = script(self.data.path(), "stop", Duration::from_secs(60));
    }
}

/// The rows of the table that follows the `== <title>` line of the script's output.
fn section(out: &str, title: &str) -> Vec<Vec<String>> {
    let start = out
        .find(&format!("== {title}\n"))
        .unwrap_or_else(|| panic!("no '== {title}' section in:\n{out}"));
    let body = &out[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let end = body.find("\n==").unwrap_or(body.len());
    let table: String = body[..end]
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    parse_rendered(&table)
}

fn pids(run: &Path) -> Vec<(String, u32)> {
    let mut v = Vec::new();
    for name in ["namesrv", "broker-n0", "broker-n1", "broker-n2"] {
        let text = std::fs::read_to_string(run.join(format!("{name}.pid")))
            .unwrap_or_else(|e| panic!("{name}.pid: {e}"));
        v.push((name.to_string(), text.trim().parse().unwrap()));
    }
    v
}

/// A pid is gone when /proc has no entry for it or only a zombie awaiting its reaper.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn fast_try_start_status_stop() {
    let busy: Vec<u16> = FIXED_PORTS
        .iter()
        .copied()
        .filter(|p| TcpListener::bind(("127.0.0.1", *p)).is_err())
        .collect();
    assert!(
        busy.is_empty(),
        "fast-try needs the fixed ports of conf/dledger, but 127.0.0.1 port(s) {busy:?} are in use \
         (another RocketMQ or a leftover fast-try run? try: bin/dledger/fast-try.sh stop, or: ss -ltnp)"
    );
    let dir = bin_dir();
    ensure_binaries(&dir);
    let group = Group {
        data: tempfile::tempdir().unwrap(),
    };
    let data = group.data.path().to_path_buf();

    let (ok, out, err) = script(&data, "start", Duration::from_secs(120));
    assert!(ok, "fast-try.sh start failed\n{out}\n{err}");
    assert!(
        out.contains("(FAST_TRY_BIN_DIR; no build)"),
        "the script built instead of using FAST_TRY_BIN_DIR:\n{out}"
    );
    // Three sample messages sent with SEND_OK and consumed back with their bodies.
    let sent = section(&out, "sending 3 sample messages to FastTryTopic");
    assert_eq!(sent.len(), 4, "{out}");
    assert!(
        sent[1..]
            .iter()
            .all(|r| r[0] == "RaftNode00" && r[3] == "SEND_OK"),
        "{out}"
    );
    let consumed = section(&out, "consuming them back");
    assert_eq!(consumed.len(), 5, "{out}"); // header, 3 messages, "consumed 3 message(s)"
    let mut bodies: Vec<&str> = consumed[1..4].iter().map(|r| r[6].as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(
        bodies,
        ["Hello DLedger-0", "Hello DLedger-1", "Hello DLedger-2"],
        "{out}"
    );
    assert!(out.contains("consumed 3 message(s)"), "{out}");
    let started = pids(&data.join("run"));

    // `status` until all three members registered: one BID 0 master, two slaves.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (rows, status) = loop {
        let (ok, out, err) = script(&data, "status", Duration::from_secs(30));
        assert!(ok, "fast-try.sh status failed\n{out}\n{err}");
        let rows = section(&out, "mqadmin clusterList");
        if rows.len() == 4 {
            break (rows, out);
        }
        assert!(
            Instant::now() < deadline,
            "cluster list never showed 3 members:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let members = &rows[1..];
    assert!(
        members
            .iter()
            .all(|r| r[0] == "RaftCluster" && r[1] == "RaftNode00"),
        "{status}"
    );
    assert_eq!(
        members.iter().filter(|r| r[2] == "0").count(),
        1,
        "{status}"
    );
    assert_eq!(
        members.iter().filter(|r| r[2] != "0").count(),
        2,
        "{status}"
    );
    let mut addrs: Vec<&str> = members.iter().map(|r| r[3].as_str()).collect();
    addrs.sort_unstable();
    assert_eq!(
        addrs,
        ["127.0.0.1:30911", "127.0.0.1:30921", "127.0.0.1:30931"],
        "{status}"
    );
    let dledger = section(&status, "mqadmin dledgerStatus");
    assert_eq!(
        dledger[1..].iter().filter(|r| r[2] == "LEADER").count(),
        1,
        "{status}"
    );

    // `stop`: every started pid goes away and the pid files are removed.
    let (ok, out, err) = script(&data, "stop", Duration::from_secs(60));
    assert!(ok, "fast-try.sh stop failed\n{out}\n{err}");
    for (name, _) in &started {
        assert!(out.contains(&format!("stopped {name} (pid")), "{out}");
        assert!(
            !data.join("run").join(format!("{name}.pid")).exists(),
            "{name}.pid left behind"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some((name, pid)) = started.iter().find(|(_, p)| !gone(*p)) {
        assert!(
            Instant::now() < deadline,
            "{name} (pid {pid}) still running after stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(group);
}
