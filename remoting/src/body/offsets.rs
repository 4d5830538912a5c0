//! Consumer offsets, delay offsets and subscription groups (spec §12.5); Java writes the
//! integer keys of `offsetTable` unquoted (Q13) — parse through [`super::from_json`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{lenient, DataVersion};

/// GET_ALL_CONSUMER_OFFSET response / `config/consumerOffset.json`:
/// `"<topic>@<group>" -> queueId -> offset`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerOffsetSerializeWrapper {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<DataVersion>,
    pub offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// GET_ALL_DELAY_OFFSET response / `config/delayOffset.json`: delay level -> offset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DelayOffsetSerializeWrapper {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<DataVersion>,
    pub offset_table: BTreeMap<i32, i64>,
}

fn yes() -> bool {
    true
}
fn one() -> i32 {
    1
}
fn one_long() -> i64 {
    1
}
fn sixteen() -> i32 {
    16
}
fn fifteen() -> i64 {
    15
}

/// Configuration of one consumer group (defaults as Java's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupConfig {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "lenient::int64")]
    pub broker_id: i64,
    #[serde(default = "yes", deserialize_with = "lenient::java_bool")]
    pub consume_broadcast_enable: bool,
    #[serde(default = "yes", deserialize_with = "lenient::java_bool")]
    pub consume_enable: bool,
    #[serde(default = "yes", deserialize_with = "lenient::java_bool")]
    pub consume_from_min_enable: bool,
    #[serde(default, deserialize_with = "lenient::java_bool")]
    pub consume_message_orderly: bool,
    #[serde(default = "fifteen", deserialize_with = "lenient::int64")]
    pub consume_timeout_minute: i64,
    #[serde(default)]
    pub group_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_retry_policy: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient::int32")]
    pub group_sys_flag: i32,
    #[serde(default = "yes", deserialize_with = "lenient::java_bool")]
    pub notify_consumer_ids_changed_enable: bool,
    #[serde(default = "sixteen", deserialize_with = "lenient::int32")]
    pub retry_max_times: i32,
    #[serde(default = "one", deserialize_with = "lenient::int32")]
    pub retry_queue_nums: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_data_set: Option<serde_json::Value>,
    #[serde(default = "one_long", deserialize_with = "lenient::int64")]
    pub which_broker_when_consume_slowly: i64,
}

impl Default for SubscriptionGroupConfig {
    fn default() -> Self {
        SubscriptionGroupConfig {
            attributes: BTreeMap::new(),
            broker_id: 0,
            consume_broadcast_enable: true,
            consume_enable: true,
            consume_from_min_enable: true,
            consume_message_orderly: false,
            consume_timeout_minute: 15,
            group_name: String::new(),
            group_retry_policy: None,
            group_sys_flag: 0,
            notify_consumer_ids_changed_enable: true,
            retry_max_times: 16,
            retry_queue_nums: 1,
            subscription_data_set: None,
            which_broker_when_consume_slowly: 1,
        }
    }
}

impl SubscriptionGroupConfig {
    /// Defaults for `group` (what auto-creation makes).
    pub fn new(group: impl Into<String>) -> Self {
        SubscriptionGroupConfig {
            group_name: group.into(),
            ..SubscriptionGroupConfig::default()
        }
    }
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG response / `config/subscriptionGroup.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupWrapper {
    pub data_version: DataVersion,
    pub forbidden_table: BTreeMap<String, BTreeMap<String, i32>>,
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
}
