//! BrokerConfig, read from a RocketMQ broker properties file (`mqbroker -c broker.conf`).
//!
//! Syntax is Java `Properties`: `key=value`, `key = value`, `key:value` or `key value`,
//! `#`/`!` comments, `\` line continuation, values trimmed. Keys are case-sensitive and named
//! as in Java (`dLegerGroup`, note "DLeger"). Unlike Java (which silently ignores a malformed
//! value), an invalid value stops start-up with an error naming the key; an unknown key is
//! logged with `tracing::warn!` and kept in [`BrokerConfig::extra`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::message::record::MessageLimits;
use crate::message::topic::TRACE_TOPIC;
use crate::store::topics::TopicDefaults;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A value does not parse or is out of range.
    #[error("invalid value {value:?} for config key {key}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// A key required by the chosen mode is missing.
    #[error("config key {key} is required: {reason}")]
    Missing { key: String, reason: String },
}

/// `brokerRole` (ignored in DLedger mode, where the ledger decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    AsyncMaster,
    SyncMaster,
    Slave,
}

/// `flushDiskType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// Acknowledge once in the page cache of a quorum (DLedger-compatible default).
    AsyncFlush,
    /// Every replica fsyncs before acknowledging.
    SyncFlush,
}

/// One member of the DLedger group: `id-host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DLedgerPeer {
    pub id: String,
    pub addr: String,
}

/// Default `messageDelayLevel`.
pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// Default `maxTopicQueueNums`: no topic gets more read or write queues than this.
pub const DEFAULT_MAX_TOPIC_QUEUE_NUMS: i32 = 1024;

/// Every broker setting this implementation reads (broker-roles.md §8), with RocketMQ
/// defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    pub broker_cluster_name: String,
    pub broker_name: String,
    /// Ignored/overwritten in DLedger mode (0 for the master, self number + 1 otherwise).
    pub broker_id: i64,
    /// Advertised address for clients and msg ids. Default 127.0.0.1 (Java picks the first
    /// non-loopback address; set it explicitly on real hosts).
    pub broker_ip1: String,
    /// `bindAddress` (RocketMQ 5's NettyServerConfig): the address the client, VIP and
    /// metrics ports listen on. Default 0.0.0.0, every interface, as in Java; a group that
    /// only talks over loopback (tests, the conf/dledger sample) binds 127.0.0.1.
    pub bind_address: std::net::IpAddr,
    pub broker_ip2: String,
    pub listen_port: u16,
    /// `host:port;host:port`; default from the `NAMESRV_ADDR` environment variable.
    pub namesrv_addr: Option<String>,
    pub store_path_root_dir: PathBuf,
    pub store_path_commit_log: PathBuf,
    pub store_path_dledger_commit_log: Option<String>,
    pub read_only_commit_log_store_paths: Option<String>,
    pub enable_dleger_commit_log: bool,
    pub dleger_group: Option<String>,
    pub dleger_peers: Vec<DLedgerPeer>,
    pub dleger_self_id: Option<String>,
    pub preferred_leader_id: Option<String>,
    pub enable_batch_push: bool,
    pub mapped_file_size_commit_log: u64,
    /// Rounded up to a multiple of 20 (one consume-queue unit).
    pub mapped_file_size_consume_queue: u64,
    pub delete_when: String,
    pub file_reserved_time_hours: u32,
    pub disk_max_used_space_ratio: u32,
    pub clean_file_forcibly_enable: bool,
    /// Largest accepted message body.
    pub max_message_size: usize,
    pub enable_controller_mode: bool,
    pub broker_role: BrokerRole,
    pub flush_disk_type: FlushDiskType,
    pub send_message_thread_pool_nums: usize,
    pub pull_message_thread_pool_nums: usize,
    /// Clamped to 10000..=60000 like Java.
    pub register_name_server_period_ms: u64,
    pub force_register: bool,
    pub auto_create_topic_enable: bool,
    pub auto_create_subscription_group: bool,
    pub default_topic_queue_nums: i32,
    /// `maxTopicQueueNums` (ours; Java has no bound): the most read or write queues a topic
    /// may have, checked on UPDATE_AND_CREATE_TOPIC and on auto-creation by a send (which
    /// takes min(client's `defaultTopicQueueNums`, template's write queues, this)).
    pub max_topic_queue_nums: i32,
    /// Java 5 `validateSystemTopicWhenUpdateTopic`: UPDATE_AND_CREATE_TOPIC and
    /// DELETE_TOPIC_IN_BROKER refuse system topics.
    pub validate_system_topic_when_update_topic: bool,
    pub cluster_topic_enable: bool,
    pub broker_topic_enable: bool,
    pub trace_topic_enable: bool,
    pub msg_trace_topic_name: String,
    pub slave_read_enable: bool,
    pub isolate_log_enable: bool,
    /// Delay of each level (1-based level `n` is index `n - 1`), in ms.
    pub message_delay_level_ms: Vec<i64>,
    pub message_delay_level: String,
    pub transaction_check_interval_ms: u64,
    pub transaction_check_max: u32,
    pub transaction_timeout_ms: u64,
    pub long_polling_enable: bool,
    pub short_polling_time_mills: u64,
    pub max_transfer_count_on_message_in_memory: u32,
    pub max_transfer_bytes_on_message_in_memory: u32,
    /// Broker-wide permission bits (6 = read + write).
    pub broker_permission: i32,
    pub region_id: String,
    pub trace_on: bool,
    /// Java `notifyConsumerIdsChangedEnable`: tell consumers when their group changes.
    pub notify_consumer_ids_changed_enable: bool,
    /// Java `rejectTransactionMessage`.
    pub reject_transaction_message: bool,
    /// Java `waitTimeMillsInSendQueue`: a send waiting longer than this gets SYSTEM_BUSY.
    pub wait_time_mills_in_send_queue: u64,
    /// Java `sendThreadPoolQueueCapacity`: bound of the send queue.
    pub send_thread_pool_queue_capacity: usize,
    /// Java `pullThreadPoolQueueCapacity`: bound of the pull queue.
    pub pull_thread_pool_queue_capacity: usize,
    /// Java `flushConsumerOffsetInterval` (ms): consumerOffset.json persistence period.
    pub flush_consumer_offset_interval_ms: u64,
    /// Java `flushDelayOffsetInterval` (ms): delayOffset.json persistence period.
    pub flush_delay_offset_interval_ms: u64,
    /// Java `flushIntervalConsumeQueue` (ms): consume-queue fsync period.
    pub flush_interval_consume_queue_ms: u64,
    pub max_transfer_count_on_message_in_disk: u32,
    pub max_transfer_bytes_on_message_in_disk: u32,
    /// Other `dLeger*` / `dLedger*` keys (timings, file sizes...), handed unchanged to the
    /// ledger's option parser; not warned about.
    pub dledger_options: BTreeMap<String, String>,
    /// Unknown keys (warned about at load), kept for other components.
    pub extra: BTreeMap<String, String>,
    /// `metricsPort`: Prometheus `GET /metrics` endpoint port (0 = off).
    pub metrics_port: u16,
    /// `remotingBusyPollMicros` (ours): busy polling of client connections after each read,
    /// in microseconds (remoting's `ConnectionConfig::busy_poll`). 0 (the default) suits a
    /// broker sharing its cores with other processes; a broker with cores to itself can trade
    /// idle CPU for fewer thread wake-ups. The DLedger peers have `dLedgerBusyPollMicros`.
    pub remoting_busy_poll_micros: u64,
    /// `runtimeWorkerThreads` (ours): worker threads of the broker's async runtime, which
    /// runs the client connections, the processors and the DLedger member. 0 (the default):
    /// one per core, at least two; for a DLedger group whose members all listen on loopback
    /// (the whole group on this host) each member takes its share of the cores instead, at
    /// least one. Several brokers sharing a host's cores each do better with fewer (every
    /// extra thread is another one to park and wake on cores that are taken).
    pub runtime_worker_threads: usize,
}

fn default_root() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join("store")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn default_broker_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "DEFAULT_BROKER".to_owned())
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let root = default_root();
        Self {
            broker_cluster_name: "DefaultCluster".into(),
            broker_name: default_broker_name(),
            broker_id: 0,
            broker_ip1: "127.0.0.1".into(),
            bind_address: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            broker_ip2: "127.0.0.1".into(),
            listen_port: 10911,
            namesrv_addr: std::env::var("NAMESRV_ADDR").ok().filter(|s| !s.is_empty()),
            store_path_commit_log: root.join("commitlog"),
            store_path_root_dir: root,
            store_path_dledger_commit_log: None,
            read_only_commit_log_store_paths: None,
            enable_dleger_commit_log: false,
            dleger_group: None,
            dleger_peers: Vec::new(),
            dleger_self_id: None,
            preferred_leader_id: None,
            enable_batch_push: false,
            mapped_file_size_commit_log: 1024 * 1024 * 1024,
            mapped_file_size_consume_queue: 300_000 * 20,
            delete_when: "04".into(),
            file_reserved_time_hours: 72,
            disk_max_used_space_ratio: 75,
            clean_file_forcibly_enable: true,
            max_message_size: 4 * 1024 * 1024,
            enable_controller_mode: false,
            broker_role: BrokerRole::AsyncMaster,
            flush_disk_type: FlushDiskType::AsyncFlush,
            send_message_thread_pool_nums: cpus().min(4),
            pull_message_thread_pool_nums: 16 + cpus() * 2,
            register_name_server_period_ms: 30_000,
            force_register: true,
            auto_create_topic_enable: true,
            auto_create_subscription_group: true,
            default_topic_queue_nums: 8,
            max_topic_queue_nums: DEFAULT_MAX_TOPIC_QUEUE_NUMS,
            validate_system_topic_when_update_topic: true,
            cluster_topic_enable: true,
            broker_topic_enable: true,
            trace_topic_enable: false,
            msg_trace_topic_name: TRACE_TOPIC.into(),
            slave_read_enable: false,
            isolate_log_enable: false,
            message_delay_level_ms: parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
                .unwrap_or_default(),
            message_delay_level: DEFAULT_MESSAGE_DELAY_LEVEL.into(),
            transaction_check_interval_ms: 60_000,
            transaction_check_max: 15,
            transaction_timeout_ms: 6_000,
            long_polling_enable: true,
            short_polling_time_mills: 1_000,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            broker_permission: 6,
            region_id: "DefaultRegion".into(),
            trace_on: true,
            notify_consumer_ids_changed_enable: true,
            reject_transaction_message: false,
            wait_time_mills_in_send_queue: 200,
            send_thread_pool_queue_capacity: 10_000,
            pull_thread_pool_queue_capacity: 100_000,
            flush_consumer_offset_interval_ms: 5_000,
            flush_delay_offset_interval_ms: 10_000,
            flush_interval_consume_queue_ms: 1_000,
            max_transfer_count_on_message_in_disk: 8,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            dledger_options: BTreeMap::new(),
            extra: BTreeMap::new(),
            metrics_port: 0,
            remoting_busy_poll_micros: 0,
            runtime_worker_threads: 0,
        }
    }
}

/// Splits Java properties text into (key, value) pairs in file order.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if logical.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', '!'])) {
            continue;
        }
        // A line ending in an odd number of backslashes continues on the next line.
        let trailing = trimmed.chars().rev().take_while(|&c| c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&trimmed[..trimmed.len() - 1]);
            continue;
        }
        logical.push_str(trimmed);
        if let Some(kv) = split_key_value(&logical) {
            out.push(kv);
        }
        logical.clear();
    }
    if !logical.is_empty() {
        if let Some(kv) = split_key_value(&logical) {
            out.push(kv);
        }
    }
    out
}

fn split_key_value(line: &str) -> Option<(String, String)> {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    key.push(unescape(n));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                // Whitespace ends the key; an '=' or ':' may still follow.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&c| c == '=' || c == ':') {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    if key.is_empty() {
        return None;
    }
    let mut value = String::new();
    let rest: String = chars.collect();
    let mut it = rest.trim().chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                value.push(unescape(n));
            }
        } else {
            value.push(c);
        }
    }
    Some((key, value))
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

/// Parses `messageDelayLevel` ("1s 5s ... 2h", units s/m/h/d) into ms per level.
pub fn parse_delay_levels(text: &str) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for item in text.split_whitespace() {
        let (num, unit) = item.split_at(item.len().saturating_sub(1));
        let mult: i64 = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("level {item:?} lacks a unit s/m/h/d")),
        };
        let n: i64 = num
            .parse()
            .map_err(|_| format!("level {item:?} is not a number"))?;
        if n <= 0 {
            return Err(format!("level {item:?} must be positive"));
        }
        out.push(n.saturating_mul(mult));
    }
    if out.is_empty() {
        return Err("no levels".into());
    }
    Ok(out)
}

/// Parses `dLegerPeers` (`n0-127.0.0.1:40911;n1-...`).
pub fn parse_dledger_peers(text: &str) -> Result<Vec<DLedgerPeer>, String> {
    let mut peers: Vec<DLedgerPeer> = Vec::new();
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('-')
            .ok_or_else(|| format!("peer {item:?} is not id-host:port"))?;
        let (id, addr) = (id.trim(), addr.trim());
        if id.is_empty() {
            return Err(format!("peer {item:?} has an empty id"));
        }
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("peer {item:?} lacks a port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("peer {item:?} has a bad address"));
        }
        if peers.iter().any(|p| p.id == id) {
            return Err(format!("peer id {id:?} appears twice"));
        }
        peers.push(DLedgerPeer {
            id: id.to_owned(),
            addr: addr.to_owned(),
        });
    }
    if peers.is_empty() {
        return Err("no peers".into());
    }
    Ok(peers)
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ConfigError> {
    v.parse()
        .map_err(|_| invalid(key, v, format!("expected a {}", std::any::type_name::<T>())))
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(
    key: &str,
    v: &str,
) -> Result<T, ConfigError> {
    let n: T = parse_num(key, v)?;
    if n <= T::default() {
        return Err(invalid(key, v, "must be positive"));
    }
    Ok(n)
}

fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, v, "expected true or false")),
    }
}

fn opt(v: &str) -> Option<String> {
    (!v.is_empty()).then(|| v.to_owned())
}

/// Tuning keys of our own (not Java's) read from [`BrokerConfig::extra`] by the role
/// services (`services.rs`): known, so not warned about.
pub const ROLE_SERVICE_KEYS: &[&str] = &[
    "slaveSyncIntervalMs",
    "slaveSyncFirstDelayMs",
    "schedulePollMs",
    "masterOffsetPullTimeoutMs",
];

impl BrokerConfig {
    /// Worker threads the broker's runtime gets: `runtimeWorkerThreads`, or when it is 0
    /// one per core (at least two), or, for a DLedger group all on this host, the cores
    /// divided among its members (at least one each).
    pub fn worker_threads(&self) -> usize {
        if self.runtime_worker_threads > 0 {
            return self.runtime_worker_threads;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        match self.co_located_members() {
            Some(members) => (cores / members).max(1),
            None => cores.max(2),
        }
    }

    /// The number of members of this broker's DLedger group when all of them listen on a
    /// loopback address, so all run on this host and share its cores (three brokers with
    /// two workers each on two cores spent 34-38 us of CPU per message in broker_bench
    /// against 25 us with one each).
    fn co_located_members(&self) -> Option<usize> {
        let peers = &self.dleger_peers;
        let on_loopback = |addr: &str| {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        };
        (self.enable_dleger_commit_log
            && peers.len() > 1
            && peers.iter().all(|p| on_loopback(&p.addr)))
        .then_some(peers.len())
    }

    /// Reads and validates a properties file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_properties(&text)
    }

    /// Parses and validates properties text on top of the defaults.
    pub fn from_properties(text: &str) -> Result<Self, ConfigError> {
        Self::from_pairs(parse_properties(text))
    }

    /// Applies `(key, value)` pairs on top of the defaults, then validates.
    pub fn from_pairs(
        pairs: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        let mut commit_log_set = false;
        for (key, value) in pairs {
            let value = value.trim();
            commit_log_set |= key == "storePathCommitLog";
            if !cfg.set(&key, value)? {
                if !ROLE_SERVICE_KEYS.contains(&key.as_str()) {
                    tracing::warn!(key = %key, "unknown broker config key (kept, not used)");
                }
                cfg.extra.insert(key, value.to_owned());
            }
        }
        if !commit_log_set {
            cfg.store_path_commit_log = cfg.store_path_root_dir.join("commitlog");
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets one key; `Ok(false)` if the key is unknown.
    pub fn set(&mut self, key: &str, v: &str) -> Result<bool, ConfigError> {
        match key {
            "brokerClusterName" => self.broker_cluster_name = v.to_owned(),
            "brokerName" => self.broker_name = v.to_owned(),
            "brokerId" => self.broker_id = parse_num(key, v)?,
            "brokerIP1" => self.broker_ip1 = v.to_owned(),
            "bindAddress" => {
                self.bind_address = v
                    .parse()
                    .map_err(|_| invalid(key, v, "expected an IP address"))?
            }
            "brokerIP2" => self.broker_ip2 = v.to_owned(),
            "listenPort" => self.listen_port = parse_num(key, v)?,
            "metricsPort" => self.metrics_port = parse_num(key, v)?,
            "remotingBusyPollMicros" => self.remoting_busy_poll_micros = parse_num(key, v)?,
            "runtimeWorkerThreads" => self.runtime_worker_threads = parse_num(key, v)?,
            "namesrvAddr" => self.namesrv_addr = opt(v),
            "storePathRootDir" => self.store_path_root_dir = PathBuf::from(v),
            "storePathCommitLog" => self.store_path_commit_log = PathBuf::from(v),
            "storePathDLedgerCommitLog" => self.store_path_dledger_commit_log = opt(v),
            "readOnlyCommitLogStorePaths" => self.read_only_commit_log_store_paths = opt(v),
            "enableDLegerCommitLog" => self.enable_dleger_commit_log = parse_bool(key, v)?,
            "dLegerGroup" => self.dleger_group = opt(v),
            "dLegerPeers" => {
                self.dleger_peers = parse_dledger_peers(v).map_err(|r| invalid(key, v, r))?
            }
            "dLegerSelfId" => self.dleger_self_id = opt(v),
            "preferredLeaderId" => self.preferred_leader_id = opt(v),
            "enableBatchPush" => self.enable_batch_push = parse_bool(key, v)?,
            "mappedFileSizeCommitLog" => {
                self.mapped_file_size_commit_log = parse_num(key, v)?;
                if self.mapped_file_size_commit_log < 4096 {
                    return Err(invalid(key, v, "must be at least 4096"));
                }
            }
            "mappedFileSizeConsumeQueue" => {
                let n: u64 = parse_num(key, v)?;
                if n < 20 {
                    return Err(invalid(key, v, "must hold at least one 20-byte unit"));
                }
                self.mapped_file_size_consume_queue = n.div_ceil(20) * 20;
            }
            "deleteWhen" => self.delete_when = v.to_owned(),
            "fileReservedTime" => self.file_reserved_time_hours = parse_num(key, v)?,
            "diskMaxUsedSpaceRatio" => {
                self.disk_max_used_space_ratio = parse_num(key, v)?;
                if !(1..=100).contains(&self.disk_max_used_space_ratio) {
                    return Err(invalid(key, v, "must be 1..=100"));
                }
            }
            "cleanFileForciblyEnable" => self.clean_file_forcibly_enable = parse_bool(key, v)?,
            "maxMessageSize" => {
                self.max_message_size = parse_num(key, v)?;
                if self.max_message_size == 0 || self.max_message_size > i32::MAX as usize / 2 {
                    return Err(invalid(key, v, "must be 1..=1073741823"));
                }
            }
            "enableControllerMode" => self.enable_controller_mode = parse_bool(key, v)?,
            "brokerRole" => {
                self.broker_role = match v {
                    "ASYNC_MASTER" => BrokerRole::AsyncMaster,
                    "SYNC_MASTER" => BrokerRole::SyncMaster,
                    "SLAVE" => BrokerRole::Slave,
                    _ => {
                        return Err(invalid(
                            key,
                            v,
                            "expected ASYNC_MASTER, SYNC_MASTER or SLAVE",
                        ))
                    }
                }
            }
            "flushDiskType" => {
                self.flush_disk_type = match v {
                    "ASYNC_FLUSH" => FlushDiskType::AsyncFlush,
                    "SYNC_FLUSH" => FlushDiskType::SyncFlush,
                    _ => return Err(invalid(key, v, "expected ASYNC_FLUSH or SYNC_FLUSH")),
                }
            }
            "sendMessageThreadPoolNums" => {
                self.send_message_thread_pool_nums = parse_num(key, v)?;
                if self.send_message_thread_pool_nums == 0 {
                    return Err(invalid(key, v, "must be positive"));
                }
            }
            "pullMessageThreadPoolNums" => {
                self.pull_message_thread_pool_nums = parse_num(key, v)?;
                if self.pull_message_thread_pool_nums == 0 {
                    return Err(invalid(key, v, "must be positive"));
                }
            }
            "registerNameServerPeriod" => {
                let ms: u64 = parse_num(key, v)?;
                self.register_name_server_period_ms = ms.clamp(10_000, 60_000);
            }
            "forceRegister" => self.force_register = parse_bool(key, v)?,
            "autoCreateTopicEnable" => self.auto_create_topic_enable = parse_bool(key, v)?,
            "autoCreateSubscriptionGroup" => {
                self.auto_create_subscription_group = parse_bool(key, v)?
            }
            "defaultTopicQueueNums" => {
                self.default_topic_queue_nums = parse_num(key, v)?;
                if self.default_topic_queue_nums <= 0 {
                    return Err(invalid(key, v, "must be positive"));
                }
            }
            "maxTopicQueueNums" => {
                self.max_topic_queue_nums = parse_num(key, v)?;
                if self.max_topic_queue_nums <= 0 {
                    return Err(invalid(key, v, "must be positive"));
                }
            }
            "validateSystemTopicWhenUpdateTopic" => {
                self.validate_system_topic_when_update_topic = parse_bool(key, v)?
            }
            "clusterTopicEnable" => self.cluster_topic_enable = parse_bool(key, v)?,
            "brokerTopicEnable" => self.broker_topic_enable = parse_bool(key, v)?,
            "traceTopicEnable" => self.trace_topic_enable = parse_bool(key, v)?,
            "msgTraceTopicName" => self.msg_trace_topic_name = v.to_owned(),
            "slaveReadEnable" => self.slave_read_enable = parse_bool(key, v)?,
            "isolateLogEnable" => self.isolate_log_enable = parse_bool(key, v)?,
            "messageDelayLevel" => {
                self.message_delay_level_ms =
                    parse_delay_levels(v).map_err(|r| invalid(key, v, r))?;
                self.message_delay_level = v.to_owned();
            }
            "transactionCheckInterval" => self.transaction_check_interval_ms = parse_num(key, v)?,
            "transactionCheckMax" => self.transaction_check_max = parse_num(key, v)?,
            "transactionTimeOut" => self.transaction_timeout_ms = parse_num(key, v)?,
            "longPollingEnable" => self.long_polling_enable = parse_bool(key, v)?,
            "shortPollingTimeMills" => self.short_polling_time_mills = parse_num(key, v)?,
            "maxTransferCountOnMessageInMemory" => {
                self.max_transfer_count_on_message_in_memory = parse_num(key, v)?
            }
            "maxTransferBytesOnMessageInMemory" => {
                self.max_transfer_bytes_on_message_in_memory = parse_num(key, v)?
            }
            "brokerPermission" => {
                self.broker_permission = parse_num(key, v)?;
                if !(0..=15).contains(&self.broker_permission) {
                    return Err(invalid(key, v, "must be 0..=15"));
                }
            }
            "regionId" => self.region_id = v.to_owned(),
            "traceOn" => self.trace_on = parse_bool(key, v)?,
            "notifyConsumerIdsChangedEnable" => {
                self.notify_consumer_ids_changed_enable = parse_bool(key, v)?
            }
            "rejectTransactionMessage" => self.reject_transaction_message = parse_bool(key, v)?,
            "waitTimeMillsInSendQueue" => self.wait_time_mills_in_send_queue = parse_num(key, v)?,
            "sendThreadPoolQueueCapacity" => {
                self.send_thread_pool_queue_capacity = positive(key, v)?
            }
            "pullThreadPoolQueueCapacity" => {
                self.pull_thread_pool_queue_capacity = positive(key, v)?
            }
            "flushConsumerOffsetInterval" => {
                self.flush_consumer_offset_interval_ms = positive(key, v)?
            }
            "flushDelayOffsetInterval" => self.flush_delay_offset_interval_ms = positive(key, v)?,
            "flushIntervalConsumeQueue" => self.flush_interval_consume_queue_ms = positive(key, v)?,
            "maxTransferCountOnMessageInDisk" => {
                self.max_transfer_count_on_message_in_disk = parse_num(key, v)?
            }
            "maxTransferBytesOnMessageInDisk" => {
                self.max_transfer_bytes_on_message_in_disk = parse_num(key, v)?
            }
            k if k.starts_with("dLeger") || k.starts_with("dLedger") => {
                tracing::debug!(key = k, "DLedger option passed to the ledger");
                self.dledger_options.insert(k.to_owned(), v.to_owned());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Cross-key checks for the chosen mode.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.broker_name.is_empty() {
            return Err(ConfigError::Missing {
                key: "brokerName".into(),
                reason: "must not be empty".into(),
            });
        }
        if !self.enable_dleger_commit_log {
            return Ok(());
        }
        if self.enable_controller_mode {
            return Err(invalid(
                "enableControllerMode",
                "true",
                "must be false with enableDLegerCommitLog=true",
            ));
        }
        let missing = |key: &str| ConfigError::Missing {
            key: key.into(),
            reason: "needed when enableDLegerCommitLog=true".into(),
        };
        if self.dleger_group.is_none() {
            return Err(missing("dLegerGroup"));
        }
        if self.dleger_peers.is_empty() {
            return Err(missing("dLegerPeers"));
        }
        let self_id = self
            .dleger_self_id
            .as_deref()
            .ok_or_else(|| missing("dLegerSelfId"))?;
        if self_number(self_id).is_none() {
            return Err(invalid(
                "dLegerSelfId",
                self_id,
                "must be letters followed by a number, like n0",
            ));
        }
        if !self.dleger_peers.iter().any(|p| p.id == self_id) {
            return Err(invalid(
                "dLegerSelfId",
                self_id,
                "is not one of the ids in dLegerPeers",
            ));
        }
        Ok(())
    }

    /// The number in `dLegerSelfId` (`n2` → 2).
    pub fn dledger_self_number(&self) -> Option<u32> {
        self.dleger_self_id.as_deref().and_then(self_number)
    }

    /// brokerId this node registers with while it is a follower: self number + 1.
    pub fn slave_broker_id(&self) -> Option<i64> {
        self.dledger_self_number().map(|n| i64::from(n) + 1)
    }

    /// `brokerIP1:listenPort`, the address clients use and msg ids encode.
    pub fn broker_addr(&self) -> String {
        format!("{}:{}", self.broker_ip1, self.listen_port)
    }

    /// HA port (listenPort + 1).
    pub fn ha_listen_port(&self) -> u16 {
        self.listen_port.wrapping_add(1)
    }

    /// VIP channel port (listenPort − 2).
    pub fn vip_listen_port(&self) -> u16 {
        self.listen_port.wrapping_sub(2)
    }

    /// The DLedger group members.
    pub fn dledger_peers(&self) -> &[DLedgerPeer] {
        &self.dleger_peers
    }

    /// This member's DLedger address.
    pub fn dledger_self_addr(&self) -> Option<&str> {
        let id = self.dleger_self_id.as_deref()?;
        self.dleger_peers
            .iter()
            .find(|p| p.id == id)
            .map(|p| p.addr.as_str())
    }

    /// `<storePathRootDir>/dledger-<selfId>`: DLedger's base directory (currterm, checkpoint).
    pub fn dledger_base_dir(&self) -> PathBuf {
        let id = self.dleger_self_id.as_deref().unwrap_or("n0");
        self.store_path_root_dir.join(format!("dledger-{id}"))
    }

    /// DLedger data directories (`storePathDLedgerCommitLog`, comma-separated, or
    /// `<base>/data`).
    pub fn dledger_data_dirs(&self) -> Vec<PathBuf> {
        match &self.store_path_dledger_commit_log {
            Some(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect(),
            None => vec![self.dledger_base_dir().join("data")],
        }
    }

    /// `<storePathRootDir>/consumequeue`.
    pub fn consume_queue_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("consumequeue")
    }

    /// `<storePathRootDir>/index`.
    pub fn index_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("index")
    }

    /// `<storePathRootDir>/config`.
    pub fn config_dir(&self) -> PathBuf {
        crate::store::config_dir(&self.store_path_root_dir)
    }

    /// Delay of a 1-based level, in ms (levels above the max are capped, like Java).
    pub fn delay_ms_of_level(&self, level: i32) -> Option<i64> {
        if level <= 0 {
            return None;
        }
        let i = (level as usize).min(self.message_delay_level_ms.len());
        self.message_delay_level_ms.get(i.checked_sub(1)?).copied()
    }

    /// Encoder limits implied by `maxMessageSize`.
    pub fn message_limits(&self) -> MessageLimits {
        MessageLimits {
            max_body_bytes: self.max_message_size,
            ..MessageLimits::default()
        }
    }

    /// Inputs of the system-topic registration.
    pub fn topic_defaults(&self) -> TopicDefaults {
        TopicDefaults {
            broker_cluster_name: self.broker_cluster_name.clone(),
            broker_name: self.broker_name.clone(),
            auto_create_topic_enable: self.auto_create_topic_enable,
            default_topic_queue_nums: self.default_topic_queue_nums,
            cluster_topic_enable: self.cluster_topic_enable,
            broker_topic_enable: self.broker_topic_enable,
            trace_topic: self
                .trace_topic_enable
                .then(|| self.msg_trace_topic_name.clone()),
        }
    }
}

fn self_number(id: &str) -> Option<u32> {
    let digits_at = id.find(|c: char| c.is_ascii_digit())?;
    if digits_at == 0 || !id[..digits_at].chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    id[digits_at..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_syntax() {
        let pairs = parse_properties(
            "# comment\n! also\n  a = 1 \nb:2\nc 3\nd=multi\\\n  line\ne\\=x=y\n\nf=\n",
        );
        let expect: Vec<(String, String)> = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", "multiline"),
            ("e=x", "y"),
            ("f", ""),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(pairs, expect);
    }

    #[test]
    fn delay_levels_and_self_number() {
        let d = BrokerConfig::default();
        assert_eq!(d.message_delay_level_ms.len(), 18);
        assert_eq!(d.delay_ms_of_level(1), Some(1_000));
        assert_eq!(d.delay_ms_of_level(18), Some(7_200_000));
        assert_eq!(d.delay_ms_of_level(99), Some(7_200_000));
        assert_eq!(d.delay_ms_of_level(0), None);
        assert!(parse_delay_levels("1x").is_err());
        assert_eq!(self_number("n12"), Some(12));
        assert_eq!(self_number("12"), None);
        assert_eq!(self_number("n"), None);
    }

    #[test]
    fn busy_polling_is_off_unless_configured() {
        assert_eq!(BrokerConfig::default().remoting_busy_poll_micros, 0);
        let c = BrokerConfig::from_properties("remotingBusyPollMicros=50\n").unwrap();
        assert_eq!(c.remoting_busy_poll_micros, 50);
        assert!(c.extra.is_empty(), "a known key");
        let e = BrokerConfig::from_properties("remotingBusyPollMicros=-5\n").unwrap_err();
        assert!(e.to_string().contains("remotingBusyPollMicros"), "{e}");
    }

    #[test]
    fn topic_validation_keys() {
        let d = BrokerConfig::default();
        assert_eq!(d.max_topic_queue_nums, DEFAULT_MAX_TOPIC_QUEUE_NUMS);
        assert!(d.validate_system_topic_when_update_topic);
        let c = BrokerConfig::from_properties(
            "maxTopicQueueNums=64\nvalidateSystemTopicWhenUpdateTopic=false\n",
        )
        .unwrap();
        assert_eq!(c.max_topic_queue_nums, 64);
        assert!(!c.validate_system_topic_when_update_topic);
        assert!(c.extra.is_empty(), "known keys");
        for bad in ["0", "-1", "x"] {
            let e =
                BrokerConfig::from_properties(&format!("maxTopicQueueNums={bad}\n")).unwrap_err();
            assert!(e.to_string().contains("maxTopicQueueNums"), "{e}");
        }
    }

    #[test]
    fn runtime_worker_threads_default_to_one_per_core() {
        let d = BrokerConfig::default();
        assert_eq!(d.runtime_worker_threads, 0);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(d.worker_threads(), cores.max(2));
        let c = BrokerConfig::from_properties("runtimeWorkerThreads=1\n").unwrap();
        assert_eq!(c.worker_threads(), 1);
        assert!(c.extra.is_empty(), "a known key");
        let e = BrokerConfig::from_properties("runtimeWorkerThreads=-1\n").unwrap_err();
        assert!(e.to_string().contains("runtimeWorkerThreads"), "{e}");
    }

    #[test]
    fn a_group_on_one_host_shares_its_cores() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let group = |peers: &str| {
            let mut c = BrokerConfig {
                enable_dleger_commit_log: true,
                ..Default::default()
            };
            c.dleger_peers = parse_dledger_peers(peers).unwrap();
            c
        };
        let local = group("n0-127.0.0.1:40911;n1-127.0.0.2:40912;n2-localhost:40913");
        assert_eq!(local.worker_threads(), (cores / 3).max(1));
        let v6 = group("n0-[::1]:40911;n1-[::1]:40912");
        assert_eq!(v6.worker_threads(), (cores / 2).max(1));
        // One member elsewhere: the members have hosts of their own.
        let spread = group("n0-127.0.0.1:40911;n1-10.0.0.2:40912;n2-127.0.0.1:40913");
        assert_eq!(spread.worker_threads(), cores.max(2));
        // A one-member group, or DLedger off: one per core.
        assert_eq!(group("n0-127.0.0.1:40911").worker_threads(), cores.max(2));
        let mut off = group("n0-127.0.0.1:40911;n1-127.0.0.1:40912");
        off.enable_dleger_commit_log = false;
        assert_eq!(off.worker_threads(), cores.max(2));
        // An explicit count always wins.
        let mut set = local.clone();
        set.runtime_worker_threads = 3;
        assert_eq!(set.worker_threads(), 3);
    }

    #[test]
    fn bind_address_defaults_to_every_interface() {
        assert_eq!(
            BrokerConfig::default().bind_address.to_string(),
            "0.0.0.0",
            "as Java's NettyServerConfig"
        );
        let c = BrokerConfig::from_properties("bindAddress=127.0.0.1\n").unwrap();
        assert_eq!(c.bind_address.to_string(), "127.0.0.1");
        let e = BrokerConfig::from_properties("bindAddress=localhost:1\n").unwrap_err();
        assert!(e.to_string().contains("bindAddress"), "{e}");
    }
}
