//! [`BrokerConfig`]: every broker setting this implementation reads, its RocketMQ default,
//! and the values derived from the settings (addresses, ports, directories, delay of a
//! level, encoder limits, topic defaults). Which key sets which field is keys.rs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::message::record::MessageLimits;
use crate::message::topic::TRACE_TOPIC;
use crate::store::topics::TopicDefaults;

use super::keys::parse_delay_levels;
use super::DLedgerPeer;

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

impl BrokerConfig {
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

pub(super) fn self_number(id: &str) -> Option<u32> {
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
}
