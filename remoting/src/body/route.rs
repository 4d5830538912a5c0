//! TopicRouteData, QueueData, BrokerData (spec §12.1). Written compact with quoted numeric
//! keys (Q7: the Go client splits the raw text); read with or without quotes (Q13).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::lenient;

/// Queue permission bit: inherit (template topic for auto-create).
pub const PERM_INHERIT: i32 = 1;
/// Queue permission bit: writable.
pub const PERM_WRITE: i32 = 2;
/// Queue permission bit: readable.
pub const PERM_READ: i32 = 4;
/// Queue permission bit: priority.
pub const PERM_PRIORITY: i32 = 8;

/// Broker id of the master in `brokerAddrs`.
pub const MASTER_ID: i64 = 0;

/// Route of one topic, answer of GET_ROUTEINFO_BY_TOPIC.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    pub broker_datas: Vec<BrokerData>,
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_topic_conf: Option<String>,
    pub queue_datas: Vec<QueueData>,
    /// 5.x static topics; kept opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_by_broker: Option<serde_json::Value>,
}

/// Queues of a topic on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueData {
    pub broker_name: String,
    #[serde(deserialize_with = "lenient::int32")]
    pub perm: i32,
    #[serde(deserialize_with = "lenient::int32")]
    pub read_queue_nums: i32,
    #[serde(deserialize_with = "lenient::int32")]
    pub topic_sys_flag: i32,
    #[serde(deserialize_with = "lenient::int32")]
    pub write_queue_nums: i32,
}

/// Addresses of one broker group: broker id -> `ip:port` (id 0 is the master).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    pub broker_addrs: BTreeMap<i64, String>,
    pub broker_name: String,
    pub cluster: String,
    #[serde(deserialize_with = "lenient::java_bool")]
    pub enable_acting_master: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
}

impl BrokerData {
    /// Address of the master (id 0), if any.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&MASTER_ID).map(String::as_str)
    }
}
