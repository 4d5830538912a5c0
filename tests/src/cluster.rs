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

impl Bins {
    /// With `FAILOVER_BIN_DIR` set, `it-mqbroker` and `it-mqnamesrv` from that directory
    /// instead: a soak loop keeps testing one copied build while the workspace is rebuilt.
    pub fn or_from_env(self) -> Bins {
        match std::env::var_os("FAILOVER_BIN_DIR") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                Bins {
                    broker: dir.join("it-mqbroker"),
                    namesrv: dir.join("it-mqnamesrv"),
                }
            }
            None => self,
        }
    }
}

/// Lowest port the harness hands out.
const HARNESS_PORT_MIN: u16 = 10_000;

/// The first port of the kernel's ephemeral range (`ip_local_port_range`, 32768 when unknown):
/// outgoing connections take their local port from that range.
fn ephemeral_port_min() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Ports handed out by this process (never handed out twice).
static HANDED_OUT: std::sync::Mutex<Option<std::collections::HashSet<u16>>> =
    std::sync::Mutex::new(None);

/// Whether `p` is free and not handed out yet; if so it is handed out now.
fn take_if_free(p: u16) -> bool {
    let mut handed = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let handed = handed.get_or_insert_with(Default::default);
    // Loopback, where every member listens (`bindAddress=127.0.0.1`); a wildcard listener
    // elsewhere on the port makes this fail too.
    if handed.contains(&p) || std::net::TcpListener::bind(("127.0.0.1", p)).is_err() {
        return false;
    }
    handed.insert(p);
    true
}

/// A pseudo-random number (splitmix64 over a per-process seed): spreads the ports of test
/// processes running at the same time.
fn next_random() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    if STATE.load(Ordering::Relaxed) == 0 {
        let seed = (now_tag() as u64 ^ (u64::from(std::process::id()) << 32)) | 1;
        let _ = STATE.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    let mut z = STATE
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A free loopback port for a server process to bind later, never handed out twice by this
/// process. Taken from below the kernel's ephemeral range: a port from that range (what
/// binding port 0 returns) can be taken meanwhile as the local port of any outgoing
/// connection — the brokers connect to each other and to the name server while later members
/// are still starting, and a member that then cannot bind its port exits (a 3-member group
/// silently running on 2 cannot survive a kill). Falls back to port 0 when the range below
/// is too small.
pub fn free_port() -> u16 {
    free_port_where(|_| true)
}

fn free_port_where(also_free: impl Fn(u16) -> bool) -> u16 {
    let top = ephemeral_port_min();
    if top > HARNESS_PORT_MIN + 1_000 {
        let span = u64::from(top - HARNESS_PORT_MIN);
        for _ in 0..1_000 {
            let p = HARNESS_PORT_MIN + (next_random() % span) as u16;
            if also_free(p) && take_if_free(p) {
                return p;
            }
        }
    }
    loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if also_free(p) && take_if_free(p) {
            return p;
        }
    }
}

/// A port `p` with `p` and `p - 2` (the VIP port) free, both handed out.
pub fn free_listen_port() -> u16 {
    free_port_where(|p| p > 1026 && take_if_free(p - 2))
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
                "brokerClusterName = RaftCluster\nbrokerName={name}\nlistenPort={port}\nnamesrvAddr={namesrv}\nstorePathRootDir={}\nstorePathCommitLog={}/commitlog\nenableDLegerCommitLog=true\ndLegerGroup={name}\ndLegerPeers={}\n## must be unique\ndLegerSelfId=n{i}\nsendMessageThreadPoolNums=16\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\nregisterNameServerPeriod=1000\n{SMALL_FILES}{extra}\n",
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The MP-12 flake: a port chosen for one member was handed out again (bound and released
    /// each time, so the kernel could return it twice), the second member could not bind it
    /// and exited, and the group ran on two members until the test killed one.
    #[test]
    fn ports_are_never_handed_out_twice() {
        let mut seen = HashSet::new();
        for _ in 0..300 {
            let p = free_listen_port();
            assert!(seen.insert(p), "listen port {p} handed out twice");
            assert!(seen.insert(p - 2), "VIP port {} handed out twice", p - 2);
            let q = free_port();
            assert!(seen.insert(q), "port {q} handed out twice");
        }
    }

    #[test]
    fn ports_avoid_the_ephemeral_range() {
        let top = ephemeral_port_min();
        if top <= HARNESS_PORT_MIN + 1_000 {
            return; // no room below it on this machine: port 0 is the fallback
        }
        for _ in 0..50 {
            let p = free_listen_port();
            assert!((HARNESS_PORT_MIN..top).contains(&p), "port {p}");
        }
    }
}
