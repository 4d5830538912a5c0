//! JSON bodies the client reads (remoting.md §12): routes, cluster info, KV tables, topic
//! lists, consumer offsets. Readers are lenient: fastjson's unquoted integer map keys are
//! quoted before parsing (quirk Q13), unknown members are ignored.

use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ClientError;

/// Permission bit: readable.
pub const PERM_READ: i32 = 4;
/// Permission bit: writable.
pub const PERM_WRITE: i32 = 2;
/// Permission bit: inherit (template topics).
pub const PERM_INHERIT: i32 = 1;

/// A queue set of one broker group in a route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueData {
    pub broker_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub topic_sys_flag: i32,
}

/// Addresses of one broker group: id -> `ip:port`, id 0 is the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    pub cluster: String,
    pub broker_name: String,
    pub broker_addrs: BTreeMap<i64, String>,
}

impl BrokerData {
    /// The master's address (id 0), if registered.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&0).map(String::as_str)
    }
}

/// GET_ROUTEINFO_BY_TOPIC body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    pub order_topic_conf: Option<String>,
    pub queue_datas: Vec<QueueData>,
    pub broker_datas: Vec<BrokerData>,
}

impl TopicRouteData {
    /// The broker group named `name`.
    pub fn broker(&self, name: &str) -> Option<&BrokerData> {
        self.broker_datas.iter().find(|b| b.broker_name == name)
    }
}

/// GET_BROKER_CLUSTER_INFO body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

/// `{"table":{...}}` (GET_BROKER_RUNTIME_INFO, REGISTER_BROKER response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct KvTable {
    pub table: BTreeMap<String, String>,
}

/// `{"topicList":[...]}` (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    pub topic_list: Vec<String>,
}

/// GET_ALL_CONSUMER_OFFSET body: `topic@group` -> queue id -> offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerOffsetWrapper {
    pub offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// HEART_BEAT body (only the members this client sends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub producer_data_set: Vec<GroupName>,
    pub consumer_data_set: Vec<ConsumerData>,
}

/// `{"groupName":...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GroupName {
    pub group_name: String,
}

/// A pull consumer's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerData {
    pub group_name: String,
    pub consume_type: String,
    pub message_model: String,
    pub consume_from_where: String,
    pub subscription_data_set: Vec<SubscriptionData>,
    pub unit_mode: bool,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionData {
    pub topic: String,
    pub sub_string: String,
    pub tags_set: Vec<String>,
    pub code_set: Vec<i32>,
    pub sub_version: i64,
    pub expression_type: String,
    pub class_filter_mode: bool,
}

/// Rewrites `{12:` / `,12:` (unquoted integer keys, outside strings) as `{"12":`.
pub fn quote_numeric_keys(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'{' | b',' => {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                let key_start = j;
                if j < bytes.len() && bytes[j] == b'-' {
                    j += 1;
                }
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                let key_end = j;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if key_end > key_start
                    && bytes[key_end - 1].is_ascii_digit()
                    && j < bytes.len()
                    && bytes[j] == b':'
                {
                    out.push_str(&text[last..key_start]);
                    out.push('"');
                    out.push_str(&text[key_start..key_end]);
                    out.push('"');
                    last = key_end;
                    i = key_end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&text[last..]);
    out
}

/// Parses a JSON body leniently.
pub fn parse_body<T: DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T, ClientError> {
    let text = String::from_utf8_lossy(body);
    serde_json::from_str(&quote_numeric_keys(&text)).map_err(|e| ClientError::BadBody {
        what,
        reason: e.to_string(),
    })
}

/// Parses a Java properties text (`key=value` lines, `#` comments) as returned by
/// GET_BROKER_CONFIG.
pub fn parse_properties_text(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = match line.find(['=', ':']) {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, ""),
        };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    out
}

/// A lookup of `HashMap`s by string key for JSON objects of unknown shape.
pub type JsonObject = HashMap<String, serde_json::Value>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_keys_are_quoted_outside_strings_only() {
        let s = r#"{"offsetTable":{"T@G":{0:12, 1 :7,-1:3}},"s":"{5:x,6:y}"}"#;
        let q = quote_numeric_keys(s);
        assert_eq!(
            q,
            r#"{"offsetTable":{"T@G":{"0":12, "1" :7,"-1":3}},"s":"{5:x,6:y}"}"#
        );
        let w: ConsumerOffsetWrapper = parse_body("t", s.as_bytes()).unwrap();
        assert_eq!(w.offset_table["T@G"][&1], 7);
        // Values that are numbers are untouched.
        assert_eq!(quote_numeric_keys("[1,2,3]"), "[1,2,3]");
    }

    #[test]
    fn route_parses_spec_example() {
        let body = br#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:30911","2":"10.0.0.2:30921"},"brokerName":"RaftNode00","cluster":"RaftCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"RaftNode00","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;
        let r: TopicRouteData = parse_body("route", body).unwrap();
        assert_eq!(
            r.broker("RaftNode00").unwrap().master_addr(),
            Some("10.0.0.1:30911")
        );
        assert_eq!(r.queue_datas[0].write_queue_nums, 4);
    }

    #[test]
    fn properties_text() {
        let p = parse_properties_text("# c\nbrokerName=RaftNode00\nlistenPort = 30911\nempty=\n");
        assert_eq!(p["brokerName"], "RaftNode00");
        assert_eq!(p["listenPort"], "30911");
        assert_eq!(p["empty"], "");
    }
}
