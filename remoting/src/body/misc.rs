//! Small bodies: consumer id list, KV table, topic list.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// GET_CONSUMER_LIST_BY_GROUP response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerListBody {
    pub consumer_id_list: Vec<String>,
}

/// `{"table":{"k":"v"}}`: GET_BROKER_RUNTIME_INFO, REGISTER_BROKER response, KV lists.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KvTable {
    pub table: BTreeMap<String, String>,
}

/// GET_ALL_TOPIC_LIST_FROM_NAMESERVER and similar: `{"topicList":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_addr: Option<String>,
    pub topic_list: BTreeSet<String>,
}
