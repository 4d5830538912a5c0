//! The route table: which broker groups exist, their addresses by broker id, which topics they
//! serve, and when each broker last registered.
//!
//! Pure, synchronous, in-memory. Time comes in as `now_ms` arguments (any monotonic
//! millisecond clock), so every rule is testable without sleeping. The server wraps one
//! table in a lock; no method here blocks or does IO.
//!
//! Invariants kept by every mutation:
//! - every broker name in `clusters` has an entry in `brokers`, and its `brokerAddrs` is
//!   non-empty (a group whose last address is removed disappears from both);
//! - within one broker group an address appears under at most one broker id (a registration
//!   first removes other ids pointing at its address: broker-roles.md §5);
//! - every topic in `topic_queues` has at least one queue entry.

mod admin;
mod liveness;
mod query;
mod register;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::body::{BrokerData, DataVersion, QueueData, TopicConfigSerializeWrapper};

pub use admin::{UnknownBroker, WritePermChange};
pub use liveness::ExpiredBroker;
pub use query::UnitTopicFilter;

/// Id the server gives to one TCP connection, so a closed connection can be mapped back to
/// the brokers that registered through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

/// Liveness entries are keyed by cluster and address (one broker process per address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BrokerAddrKey {
    pub cluster: String,
    pub addr: String,
}

/// What the name server remembers about a broker process between registrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLiveInfo {
    pub last_update_ms: u64,
    pub timeout_ms: u64,
    pub data_version: DataVersion,
    pub connection: Option<ConnectionId>,
    pub ha_server_addr: String,
}

/// One REGISTER_BROKER request, already decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerRegistration {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    /// 0 = master; DLedger followers use selfId + 1; -1 before the first role (quirk Q12).
    pub broker_id: i64,
    pub ha_server_addr: String,
    pub zone_name: Option<String>,
    /// Per-broker liveness timeout (5.x header `heartbeatTimeoutMillis`); `None` = default.
    pub timeout_ms: Option<u64>,
    /// `None` when the broker did not send the header (4.x brokers).
    pub enable_acting_master: Option<bool>,
    pub topics: TopicConfigSerializeWrapper,
    pub filter_servers: Vec<String>,
    pub connection: Option<ConnectionId>,
}

/// Answer to a registration: the group master's address, for slaves (broker-roles.md §4.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterOutcome {
    pub master_addr: Option<String>,
    pub ha_server_addr: Option<String>,
}

/// One UNREGISTER_BROKER request (also built internally when a broker dies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUnregistration {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    pub broker_id: i64,
}

/// Behaviour switches of the table (Java `NamesrvConfig` equivalents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTableOptions {
    /// Liveness timeout for brokers that do not send their own.
    pub default_broker_timeout_ms: u64,
    /// Drop a broker's queue data for topics missing from its latest registration.
    pub delete_topic_with_broker_registration: bool,
}

impl Default for RouteTableOptions {
    fn default() -> Self {
        RouteTableOptions {
            default_broker_timeout_ms: 120_000,
            delete_topic_with_broker_registration: false,
        }
    }
}

/// All routing state of one name server.
#[derive(Debug, Default)]
pub struct RouteTable {
    options: RouteTableOptions,
    /// topic -> broker name -> queue layout
    topic_queues: HashMap<String, BTreeMap<String, QueueData>>,
    /// broker name -> group addresses
    brokers: BTreeMap<String, BrokerData>,
    /// cluster -> broker names
    clusters: BTreeMap<String, BTreeSet<String>>,
    live: HashMap<BrokerAddrKey, BrokerLiveInfo>,
    filter_servers: HashMap<BrokerAddrKey, Vec<String>>,
}

impl RouteTable {
    /// An empty table.
    pub fn new(options: RouteTableOptions) -> Self {
        RouteTable {
            options,
            ..RouteTable::default()
        }
    }

    /// The switches the table was built with.
    pub fn options(&self) -> &RouteTableOptions {
        &self.options
    }

    /// Changes the switches at runtime (UPDATE_NAMESRV_CONFIG).
    pub fn set_options(&mut self, options: RouteTableOptions) {
        self.options = options;
    }

    /// Liveness record of the broker at `addr` in `cluster`.
    pub fn live_info(&self, cluster: &str, addr: &str) -> Option<&BrokerLiveInfo> {
        self.live.get(&BrokerAddrKey {
            cluster: cluster.to_owned(),
            addr: addr.to_owned(),
        })
    }

    /// Removes `broker_name`'s queue data from every topic; drops topics left without queues.
    fn remove_topics_of_broker(&mut self, broker_name: &str) {
        self.topic_queues.retain(|_, queues| {
            queues.remove(broker_name);
            !queues.is_empty()
        });
    }

    /// Debug check of the invariants listed in the module docs.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        for (cluster, names) in &self.clusters {
            assert!(!names.is_empty(), "cluster {cluster} without brokers");
            for name in names {
                let data = self
                    .brokers
                    .get(name)
                    .expect("cluster names a known broker");
                assert!(
                    !data.broker_addrs.is_empty(),
                    "broker {name} without addresses"
                );
            }
        }
        for data in self.brokers.values() {
            let addrs: BTreeSet<&String> = data.broker_addrs.values().collect();
            assert_eq!(
                addrs.len(),
                data.broker_addrs.len(),
                "address under two ids"
            );
        }
        for (topic, queues) in &self.topic_queues {
            assert!(!queues.is_empty(), "topic {topic} without queues");
        }
    }
}

#[cfg(test)]
mod tests;
