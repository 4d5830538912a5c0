//! JSON bodies the name server reads and writes (spec remoting.md §12.1, §12.4, §11.6).
//!
//! Fields are declared in alphabetical order so that `serde_json` writes keys the way Java's
//! fastjson does (sorted, compact). Readers are lenient: unknown keys are ignored, missing or
//! `null` members take their Java defaults, and unquoted numeric keys are accepted
//! (see [`crate::lenient_json`]). Writers always emit standard JSON with quoted keys (quirk Q7).

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::lenient_json::quote_numeric_keys;

/// Permission bit: the queue may be written (spec §12.1 `perm`).
pub const PERM_WRITE: i32 = 2;
/// Permission bit: the queue may be read.
pub const PERM_READ: i32 = 4;
/// `topicSysFlag` bit 0: unit topic.
pub const TOPIC_SYS_FLAG_UNIT: i32 = 1;
/// `topicSysFlag` bit 1: topic has a unit subscription.
pub const TOPIC_SYS_FLAG_UNIT_SUB: i32 = 2;

/// Reads `null` as the type's default (fastjson writers may emit explicit nulls).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Parses a JSON body leniently (unquoted numeric keys accepted).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(&quote_numeric_keys(bytes))
}

/// Writes a body as compact standard JSON.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain data types into a Vec cannot fail: every map key is a string or
    // an integer and there are no custom serializers.
    serde_json::to_vec(value).unwrap_or_default()
}

/// A broker's topic-config version; equality of all three fields means "unchanged".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataVersion {
    #[serde(deserialize_with = "null_as_default")]
    pub counter: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub state_version: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub timestamp: i64,
}

/// One topic as a broker registers it (spec §12.4 TopicConfig).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfig {
    #[serde(deserialize_with = "null_as_default")]
    pub attributes: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_as_default")]
    pub order: bool,
    pub perm: i32,
    pub read_queue_nums: i32,
    pub topic_filter_type: String,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_sys_flag: i32,
    pub write_queue_nums: i32,
}

impl Default for TopicConfig {
    /// Java's `TopicConfig` defaults: 16 read and write queues, read+write permission.
    fn default() -> Self {
        TopicConfig {
            attributes: BTreeMap::new(),
            order: false,
            perm: PERM_READ | PERM_WRITE,
            read_queue_nums: 16,
            topic_filter_type: "SINGLE_TAG".to_owned(),
            topic_name: String::new(),
            topic_sys_flag: 0,
            write_queue_nums: 16,
        }
    }
}

/// All topic configs of a broker plus their version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfigSerializeWrapper {
    #[serde(deserialize_with = "null_as_default")]
    pub data_version: DataVersion,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// 5.x static-topic mapping info, kept opaque (static topics are not routed here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_info_map: Option<serde_json::Value>,
}

/// Body of REGISTER_BROKER (spec §12.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterBrokerBody {
    #[serde(deserialize_with = "null_as_default")]
    pub filter_server_list: Vec<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
}

/// Per-broker queue layout of one topic (spec §12.1 QueueData).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueData {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub perm: i32,
    #[serde(deserialize_with = "null_as_default")]
    pub read_queue_nums: i32,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_sys_flag: i32,
    #[serde(deserialize_with = "null_as_default")]
    pub write_queue_nums: i32,
}

/// Addresses of one broker group by broker id (spec §12.1 BrokerData); id 0 is the master.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_addrs: BTreeMap<i64, String>,
    #[serde(deserialize_with = "null_as_default")]
    pub broker_name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub cluster: String,
    #[serde(deserialize_with = "null_as_default")]
    pub enable_acting_master: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
}

/// Answer of GET_ROUTEINFO_BY_TOPIC (spec §12.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_datas: Vec<BrokerData>,
    #[serde(deserialize_with = "null_as_default")]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_topic_conf: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub queue_datas: Vec<QueueData>,
}

/// Answer of GET_BROKER_CLUSTER_INFO (spec §11.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    #[serde(deserialize_with = "null_as_default")]
    pub cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
}

/// A list of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_addr: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_list: Vec<String>,
}

/// A string table (`{"table":{...}}`), used for KV-config namespaces and order-topic configs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KvTable {
    #[serde(deserialize_with = "null_as_default")]
    pub table: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_data_is_compact_sorted_and_quoted() {
        let route = TopicRouteData {
            broker_datas: vec![BrokerData {
                broker_addrs: BTreeMap::from([
                    (0, "10.0.0.1:30911".to_owned()),
                    (2, "10.0.0.2:30921".to_owned()),
                ]),
                broker_name: "RaftNode00".to_owned(),
                cluster: "RaftCluster".to_owned(),
                enable_acting_master: false,
                zone_name: None,
            }],
            filter_server_table: BTreeMap::new(),
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: "RaftNode00".to_owned(),
                perm: 6,
                read_queue_nums: 4,
                topic_sys_flag: 0,
                write_queue_nums: 4,
            }],
        };
        let text = String::from_utf8(encode(&route)).unwrap();
        assert_eq!(
            text,
            r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:30911","2":"10.0.0.2:30921"},"brokerName":"RaftNode00","cluster":"RaftCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"RaftNode00","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
        );
        let back: TopicRouteData = decode(text.as_bytes()).unwrap();
        assert_eq!(back, route);
    }

    #[test]
    fn register_body_from_spec_example_parses() {
        let text = br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}},"topicQueueMappingInfoMap":{}}}"#;
        let body: RegisterBrokerBody = decode(text).unwrap();
        let wrapper = &body.topic_config_serialize_wrapper;
        assert_eq!(wrapper.data_version.counter, 3);
        assert_eq!(wrapper.data_version.timestamp, 1_700_000_000_000);
        let topic = &wrapper.topic_config_table["TopicTest"];
        assert_eq!(
            (topic.read_queue_nums, topic.write_queue_nums, topic.perm),
            (4, 4, 6)
        );
    }

    #[test]
    fn missing_and_null_members_take_java_defaults() {
        let body: RegisterBrokerBody = decode(
            br#"{"filterServerList":null,"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T","attributes":null}}},"extra":1}"#,
        )
        .unwrap();
        let topic = &body.topic_config_serialize_wrapper.topic_config_table["T"];
        assert_eq!(topic.read_queue_nums, 16);
        assert_eq!(topic.perm, 6);
        assert!(body.filter_server_list.is_empty());
        assert_eq!(
            body.topic_config_serialize_wrapper.data_version,
            DataVersion::default()
        );
    }

    #[test]
    fn fastjson_unquoted_broker_ids_parse() {
        let cluster: ClusterInfo = decode(
            br#"{"brokerAddrTable":{"b":{"brokerAddrs":{0:"a:1",-1:"a:2"},"brokerName":"b","cluster":"c"}},"clusterAddrTable":{"c":["b"]}}"#,
        )
        .unwrap();
        assert_eq!(cluster.broker_addr_table["b"].broker_addrs[&-1], "a:2");
    }

    #[test]
    fn wrong_types_are_rejected() {
        assert!(decode::<RegisterBrokerBody>(br#"{"topicConfigSerializeWrapper":[1]}"#).is_err());
        assert!(decode::<RegisterBrokerBody>(b"not json").is_err());
    }
}
