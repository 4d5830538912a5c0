//! Name server settings (Java `NamesrvConfig` equivalents that matter to clients), plus the
//! properties-text form GET_NAMESRV_CONFIG / UPDATE_NAMESRV_CONFIG exchange.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// RocketMQ's name server port.
pub const DEFAULT_PORT: u16 = 9876;

/// Everything [`crate::NameServer::start`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameServerConfig {
    /// Address to bind; port 0 picks a free port (tests).
    pub listen_addr: SocketAddr,
    /// How often brokers are checked for expiry.
    pub scan_interval_ms: u64,
    /// A broker that has not registered for this long is removed (unless it sent its own
    /// `heartbeatTimeoutMillis`).
    pub broker_timeout_ms: u64,
    /// KV-config file (`kvConfig.json`); `None` keeps KV settings in memory only.
    pub kv_config_path: Option<PathBuf>,
    /// Answer route queries with SYSTEM_ERROR "name server not ready" for this long after
    /// start, so that after a restart clients keep their cached routes until brokers have
    /// re-registered instead of seeing TOPIC_NOT_EXIST (Java `needWaitForService`,
    /// `waitSecondsForService`). `None` (Java's default) serves at once.
    pub wait_for_service_ms: Option<u64>,
    /// Runtime-adjustable switches.
    pub switches: Switches,
}

/// Switches UPDATE_NAMESRV_CONFIG may change while running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// Fill `orderTopicConf` of routes from the `ORDER_TOPIC_CONFIG` KV namespace.
    pub order_message_enable: bool,
    /// Answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER.
    pub enable_all_topic_list: bool,
    /// Answer GET_TOPICS_BY_CLUSTER and the unit-topic lists.
    pub enable_topic_list: bool,
    /// Forget a broker's topics that its latest registration no longer lists.
    pub delete_topic_with_broker_registration: bool,
}

impl Default for Switches {
    fn default() -> Self {
        Switches {
            order_message_enable: false,
            enable_all_topic_list: true,
            enable_topic_list: true,
            delete_topic_with_broker_registration: false,
        }
    }
}

impl Default for NameServerConfig {
    fn default() -> Self {
        NameServerConfig {
            listen_addr: SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT)),
            scan_interval_ms: 5_000,
            broker_timeout_ms: 120_000,
            kv_config_path: None,
            wait_for_service_ms: None,
            switches: Switches::default(),
        }
    }
}

/// Keys UPDATE_NAMESRV_CONFIG refuses, as Java does (they name files or are fixed at start).
pub const UPDATE_BLACKLIST: [&str; 4] = [
    "configStorePath",
    "kvConfigPath",
    "rocketmqHome",
    "listenPort",
];

/// Why an UPDATE_NAMESRV_CONFIG body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigUpdateError {
    /// A key that cannot change at runtime.
    #[error("Can not update config in black list.")]
    Blacklisted,
    /// The body is not UTF-8 text.
    #[error("config body is not UTF-8")]
    NotUtf8,
}

impl NameServerConfig {
    /// Java-properties text of the settings (GET_NAMESRV_CONFIG), keys sorted.
    pub fn to_properties(&self, switches: &Switches) -> String {
        let kv_path = self
            .kv_config_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut lines = [
            "clusterTest=false".to_owned(),
            format!(
                "deleteTopicWithBrokerRegistration={}",
                switches.delete_topic_with_broker_registration
            ),
            format!("enableAllTopicList={}", switches.enable_all_topic_list),
            format!("enableTopicList={}", switches.enable_topic_list),
            format!("kvConfigPath={kv_path}"),
            format!("listenPort={}", self.listen_addr.port()),
            format!("orderMessageEnable={}", switches.order_message_enable),
            format!("scanNotActiveBrokerInterval={}", self.scan_interval_ms),
        ];
        lines.sort();
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

/// Applies a properties body to `switches`. Unknown keys are ignored (as Java's reflection
/// does); values parse like `Boolean.parseBoolean`.
pub fn apply_properties(body: &[u8], switches: &mut Switches) -> Result<(), ConfigUpdateError> {
    let text = std::str::from_utf8(body).map_err(|_| ConfigUpdateError::NotUtf8)?;
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let cut = l.find(['=', ':'])?;
            Some((l[..cut].trim(), l[cut + 1..].trim()))
        })
        .collect();
    if pairs.iter().any(|(k, _)| UPDATE_BLACKLIST.contains(k)) {
        return Err(ConfigUpdateError::Blacklisted);
    }
    let mut next = *switches;
    for (key, value) in pairs {
        let on = value.eq_ignore_ascii_case("true");
        match key {
            "orderMessageEnable" => next.order_message_enable = on,
            "enableAllTopicList" => next.enable_all_topic_list = on,
            "enableTopicList" => next.enable_topic_list = on,
            "deleteTopicWithBrokerRegistration" => next.delete_topic_with_broker_registration = on,
            _ => {}
        }
    }
    *switches = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_through_update() {
        let cfg = NameServerConfig::default();
        let mut sw = Switches::default();
        let text = cfg.to_properties(&sw);
        assert!(text.contains("orderMessageEnable=false\n"));
        assert!(text.contains("listenPort=9876\n"));
        apply_properties(b"# c\norderMessageEnable = true\nunknownKey=1\n", &mut sw).unwrap();
        assert!(sw.order_message_enable);
        assert!(cfg.to_properties(&sw).contains("orderMessageEnable=true\n"));
    }

    #[test]
    fn blacklisted_keys_change_nothing() {
        let mut sw = Switches::default();
        let err = apply_properties(b"enableTopicList=false\nkvConfigPath=/x", &mut sw);
        assert_eq!(err, Err(ConfigUpdateError::Blacklisted));
        assert!(sw.enable_topic_list);
        assert_eq!(
            apply_properties(&[0xff, 0xfe], &mut sw),
            Err(ConfigUpdateError::NotUtf8)
        );
    }
}
