//! Key names -> [`BrokerConfig`] fields: reading a properties file or pairs on top of the
//! defaults, each key's value syntax and range, and the cross-key checks of the chosen mode.

use std::path::{Path, PathBuf};

use super::properties::parse_properties;
use super::schema::self_number;
use super::{parse_dledger_peers, BrokerConfig, BrokerRole, ConfigError, FlushDiskType};

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_MAX_TOPIC_QUEUE_NUMS;

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
