//! RegisterBrokerBody, TopicConfigSerializeWrapper, TopicConfig, DataVersion (spec §12.4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::lenient;

/// Version stamp of a broker's tables; equality = all fields equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataVersion {
    #[serde(deserialize_with = "lenient::int64")]
    pub counter: i64,
    /// 5.x only; 0 in DLedger mode.
    #[serde(deserialize_with = "lenient::int64")]
    pub state_version: i64,
    #[serde(deserialize_with = "lenient::int64")]
    pub timestamp: i64,
}

impl DataVersion {
    /// A fresh version at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        DataVersion {
            counter: 0,
            state_version: 0,
            timestamp: now_ms,
        }
    }

    /// Java `nextVersion`: counter + 1, timestamp = now.
    pub fn next(&mut self, now_ms: i64) {
        self.counter += 1;
        self.timestamp = now_ms;
    }
}

fn default_queue_nums() -> i32 {
    16
}
fn default_perm() -> i32 {
    6
}
fn default_filter_type() -> String {
    "SINGLE_TAG".to_owned()
}

/// Configuration of one topic on a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    /// 5.x attributes, e.g. `message.type`.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "lenient::java_bool")]
    pub order: bool,
    #[serde(default = "default_perm", deserialize_with = "lenient::int32")]
    pub perm: i32,
    #[serde(default = "default_queue_nums", deserialize_with = "lenient::int32")]
    pub read_queue_nums: i32,
    /// `SINGLE_TAG` / `MULTI_TAG`.
    #[serde(default = "default_filter_type")]
    pub topic_filter_type: String,
    #[serde(default)]
    pub topic_name: String,
    #[serde(default, deserialize_with = "lenient::int32")]
    pub topic_sys_flag: i32,
    #[serde(default = "default_queue_nums", deserialize_with = "lenient::int32")]
    pub write_queue_nums: i32,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            attributes: BTreeMap::new(),
            order: false,
            perm: default_perm(),
            read_queue_nums: default_queue_nums(),
            topic_filter_type: default_filter_type(),
            topic_name: String::new(),
            topic_sys_flag: 0,
            write_queue_nums: default_queue_nums(),
        }
    }
}

impl TopicConfig {
    /// A topic with `queues` read and write queues and perm read+write.
    pub fn new(name: impl Into<String>, queues: i32) -> Self {
        TopicConfig {
            topic_name: name.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            ..TopicConfig::default()
        }
    }
}

/// Topic table plus its version (GET_ALL_TOPIC_CONFIG response, register body part).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfigSerializeWrapper {
    pub data_version: DataVersion,
    /// 5.x static topics; kept opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping_data_version: Option<DataVersion>,
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_detail_map: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_info_map: Option<serde_json::Value>,
}

/// Body of REGISTER_BROKER (uncompressed form).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterBrokerBody {
    pub filter_server_list: Vec<String>,
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
}
