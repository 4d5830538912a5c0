//! Processes: a name server and DLedger broker groups, started from RocketMQ-style property
//! files on free loopback ports, each in its own temp directory. Every process is killed when
//! its handle drops; `stop` sends SIGTERM and waits for a clean exit.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Paths of the programs under test.
#[derive(Debug, Clone)]
pub struct Bins {
    pub broker: PathBuf,
    pub namesrv: PathBuf,
}

/// A free loopback port (bound and released; races are unlikely on a test machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A port `p` with `p` and `p - 2` (the VIP port) free.
pub fn free_listen_port() -> u16 {
    loop {
        let p = free_port();
        if p > 1026 && std::net::TcpListener::bind(("127.0.0.1", p - 2)).is_ok() {
            return p;
        }
    }
}

/// A child process killed on drop.
pub struct Proc {
    child: Option<Child>,
    pub name: String,
}

impl Proc {
    /// Starts `cmd` and waits until a stdout line contains `ready`.
    pub fn spawn(name: &str, mut cmd: Command, ready: &str, log: &Path) -> Proc {
        let err = std::fs::File::create(log).unwrap();
        cmd.stdout(Stdio::piped()).stderr(Stdio::from(err));
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let needle = ready.to_owned();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if !sent && line.contains(&needle) {
                    let _ = tx.send(line);
                    sent = true;
                }
            }
        });
        let mut p = Proc {
            child: Some(child),
            name: name.to_owned(),
        };
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            p.kill();
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = tail
                .chars()
                .rev()
                .take(3000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            panic!("{name} did not print {ready:?}; log tail:\n{tail}");
        }
        p
    }

    /// SIGTERM, then wait (SIGKILL after 20 s). Returns whether it exited cleanly.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = c.try_wait() {
                return s.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running name server.
pub struct NameSrv {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl NameSrv {
    pub fn start(bins: &Bins, dir: &Path) -> NameSrv {
        let port = free_port();
        let mut cmd = Command::new(&bins.namesrv);
        cmd.arg(port.to_string());
        let proc = Proc::spawn("namesrv", cmd, "boot success", &dir.join("namesrv.log"));
        NameSrv {
            proc,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }
}

/// One member of a DLedger group.
pub struct Node {
    pub proc: Option<Proc>,
    pub conf: PathBuf,
    pub addr: SocketAddr,
    pub log: PathBuf,
    pub self_id: String,
}

/// A DLedger broker group (one brokerName).
pub struct Group {
    pub name: String,
    pub nodes: Vec<Node>,
    bins: Bins,
}

/// Small files so a test group does not preallocate gigabytes.
pub const SMALL_FILES: &str =
    "mappedFileSizeCommitLog=67108864\nmappedFileSizeConsumeQueue=600000\n";

impl Group {
    /// Writes `n` property files (like conf/dledger) and starts the members.
    pub fn start(
        bins: &Bins,
        name: &str,
        namesrv: SocketAddr,
        root: &Path,
        n: usize,
        extra: &str,
    ) -> Group {
        let ledger_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let peers: Vec<String> = ledger_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("n{i}-127.0.0.1:{p}"))
            .collect();
        let mut nodes = Vec::new();
        for i in 0..n {
            let port = free_listen_port();
            let dir = root.join(format!("{name}-n{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("broker.conf");
            let text = format!(
                "brokerClusterName = RaftCluster\nbrokerName={name}\nlistenPort={port}\nnamesrvAddr={namesrv}\nstorePathRootDir={}\nstorePathCommitLog={}/commitlog\nenableDLegerCommitLog=true\ndLegerGroup={name}\ndLegerPeers={}\n## must be unique\ndLegerSelfId=n{i}\nsendMessageThreadPoolNums=16\nbrokerIP1=127.0.0.1\nregisterNameServerPeriod=1000\n{SMALL_FILES}{extra}\n",
                dir.display(),
                dir.display(),
                peers.join(";")
            );
            std::fs::write(&conf, text).unwrap();
            nodes.push(Node {
                proc: None,
                conf,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                log: dir.join("broker.log"),
                self_id: format!("n{i}"),
            });
        }
        let mut g = Group {
            name: name.to_owned(),
            nodes,
            bins: bins.clone(),
        };
        for i in 0..n {
            g.start_node(i);
        }
        g
    }

    /// (Re)starts member `i`.
    pub fn start_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let mut cmd = Command::new(&self.bins.broker);
        cmd.arg("-c").arg(&node.conf);
        cmd.env("RUST_LOG", "info");
        let log = node.log.with_extension(format!("{}.log", now_tag()));
        node.proc = Some(Proc::spawn(
            &format!("{}-{}", self.name, node.self_id),
            cmd,
            "boot success",
            &log,
        ));
    }

    /// Stops member `i` with SIGTERM; true on a clean exit.
    pub fn stop_node(&mut self, i: usize) -> bool {
        self.nodes[i].proc.take().is_some_and(|mut p| p.stop())
    }
}

fn now_tag() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
