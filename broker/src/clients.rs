//! Producer and consumer channel tables (HEART_BEAT, UNREGISTER_CLIENT, connection close),
//! the lenient HeartbeatData parser (remoting.md §12.3, Q19), consumer-group membership
//! notifications, and the orderly-consumption queue locks (LOCK_BATCH_MQ).
//!
//! Membership changes are reported to the caller, which sends NOTIFY_CONSUMER_IDS_CHANGED on
//! the members' own connections. Maps are `DashMap`s; no lock is held across `.await`.

use std::collections::{BTreeMap, HashMap, HashSet};

use dashmap::DashMap;
use remoting::{ConnectionHandle, ConnectionId};
use serde_json::Value;

use crate::message::tag::java_string_hash;
use remoting::body::quote_bare_keys;

/// Consume type of a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeType {
    Actively,
    Passively,
    Pop,
}

/// Message model of a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageModel {
    Broadcasting,
    Clustering,
}

/// One subscription (topic + tag expression).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topic: String,
    pub sub_string: String,
    pub tags: Vec<String>,
    pub codes: HashSet<i32>,
    pub sub_version: i64,
    pub expression_type: String,
}

impl Subscription {
    /// Builds a TAG subscription from an expression (`*`, `A || B`).
    pub fn from_expression(topic: &str, expr: &str, sub_version: i64) -> Subscription {
        let expr = expr.trim();
        let mut s = Subscription {
            topic: topic.to_owned(),
            sub_string: if expr.is_empty() {
                "*".into()
            } else {
                expr.to_owned()
            },
            tags: Vec::new(),
            codes: HashSet::new(),
            sub_version,
            expression_type: "TAG".into(),
        };
        if !s.matches_all() {
            for t in expr.split("||").map(str::trim).filter(|t| !t.is_empty()) {
                s.codes.insert(java_string_hash(t));
                s.tags.push(t.to_owned());
            }
        }
        s
    }

    /// `*` or empty: every message.
    pub fn matches_all(&self) -> bool {
        let s = self.sub_string.trim();
        s.is_empty() || s == "*"
    }

    /// Consume-queue filter: tag code in the code set (SQL92 is not filtered broker-side).
    pub fn accepts_tag_code(&self, tag_code: i64) -> bool {
        if self.matches_all() || !self.expression_type.eq_ignore_ascii_case("TAG") {
            return true;
        }
        i32::try_from(tag_code).is_ok_and(|c| self.codes.contains(&c))
    }
}

/// One consumer group entry of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerData {
    pub group_name: String,
    pub consume_type: ConsumeType,
    pub message_model: MessageModel,
    pub consume_from_where: String,
    pub subscriptions: Vec<Subscription>,
    pub unit_mode: bool,
}

/// A decoded heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatData {
    pub client_id: String,
    pub producer_groups: Vec<String>,
    pub consumers: Vec<ConsumerData>,
}

/// Why a heartbeat body was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad heartbeat body: {0}")]
pub struct HeartbeatError(pub String);

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_bool(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n != 0),
        _ => false,
    }
}

fn as_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

const CONSUME_FROM_WHERE: [&str; 6] = [
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
];

fn enum_of<T: Copy>(v: Option<&Value>, names: &[(&str, T)], default: T) -> T {
    match v {
        Some(Value::String(s)) => names
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s.trim()))
            .map(|(_, t)| *t)
            .or_else(|| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| names.get(i).map(|(_, t)| *t))
            })
            .unwrap_or(default),
        Some(v) => as_i64(v)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| names.get(i).map(|(_, t)| *t))
            .unwrap_or(default),
        None => default,
    }
}

fn parse_subscription(v: &Value) -> Option<Subscription> {
    let topic = as_str(v.get("topic"))?;
    let sub_string = as_str(v.get("subString")).unwrap_or_else(|| "*".into());
    let sub_version = v.get("subVersion").and_then(as_i64).unwrap_or(0);
    let mut s = Subscription::from_expression(&topic, &sub_string, sub_version);
    if let Some(t) = as_str(v.get("expressionType")) {
        if !t.trim().is_empty() {
            s.expression_type = t;
        }
    }
    if let Some(Value::Array(codes)) = v.get("codeSet") {
        let set: HashSet<i32> = codes
            .iter()
            .filter_map(as_i64)
            .filter_map(|c| i32::try_from(c).ok())
            .collect();
        if !set.is_empty() {
            s.codes = set;
        }
    }
    Some(s)
}

/// Parses a HeartbeatData body as leniently as fastjson: unquoted keys, enums by name or
/// ordinal, numbers as strings, missing optional members.
pub fn parse_heartbeat(body: &[u8]) -> Result<HeartbeatData, HeartbeatError> {
    let text = std::str::from_utf8(body).map_err(|_| HeartbeatError("not UTF-8".into()))?;
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let v: Value = serde_json::from_slice(&quote_bare_keys(text.as_bytes()))
        .map_err(|e| HeartbeatError(e.to_string()))?;
    if !v.is_object() {
        return Err(HeartbeatError("not a JSON object".into()));
    }
    let client_id =
        as_str(v.get("clientID")).ok_or_else(|| HeartbeatError("clientID missing".into()))?;
    let producer_groups = match v.get("producerDataSet") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|p| as_str(p.get("groupName")))
            .collect(),
        _ => Vec::new(),
    };
    let mut consumers = Vec::new();
    if let Some(Value::Array(a)) = v.get("consumerDataSet") {
        for c in a {
            let Some(group_name) = as_str(c.get("groupName")) else {
                continue;
            };
            let consume_type = enum_of(
                c.get("consumeType"),
                &[
                    ("CONSUME_ACTIVELY", ConsumeType::Actively),
                    ("CONSUME_PASSIVELY", ConsumeType::Passively),
                    ("CONSUME_POP", ConsumeType::Pop),
                ],
                ConsumeType::Passively,
            );
            let message_model = enum_of(
                c.get("messageModel"),
                &[
                    ("BROADCASTING", MessageModel::Broadcasting),
                    ("CLUSTERING", MessageModel::Clustering),
                ],
                MessageModel::Clustering,
            );
            let cfw_names: Vec<(&str, &str)> =
                CONSUME_FROM_WHERE.iter().map(|n| (*n, *n)).collect();
            let consume_from_where =
                enum_of(c.get("consumeFromWhere"), &cfw_names, CONSUME_FROM_WHERE[0]).to_owned();
            let subscriptions = match c.get("subscriptionDataSet") {
                Some(Value::Array(s)) => s.iter().filter_map(parse_subscription).collect(),
                _ => Vec::new(),
            };
            consumers.push(ConsumerData {
                group_name,
                consume_type,
                message_model,
                consume_from_where,
                subscriptions,
                unit_mode: as_bool(c.get("unitMode")),
            });
        }
    }
    Ok(HeartbeatData {
        client_id,
        producer_groups,
        consumers,
    })
}

struct ClientChannel {
    conn: ConnectionHandle,
    last_update_ms: i64,
}

struct ConsumerGroup {
    clients: HashMap<String, ClientChannel>,
    subscriptions: HashMap<String, Subscription>,
    consume_type: ConsumeType,
    message_model: MessageModel,
}

/// Producer and consumer registrations.
#[derive(Default)]
pub struct ClientRegistry {
    producers: DashMap<String, HashMap<String, ClientChannel>>,
    consumers: DashMap<String, ConsumerGroup>,
}

/// A member of a group whose membership changed, to be notified.
pub type Notify = (String, Vec<ConnectionHandle>);

impl ClientRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a producer.
    pub fn register_producer(
        &self,
        group: &str,
        client_id: &str,
        conn: &ConnectionHandle,
        now_ms: i64,
    ) {
        self.producers.entry(group.to_owned()).or_default().insert(
            client_id.to_owned(),
            ClientChannel {
                conn: conn.clone(),
                last_update_ms: now_ms,
            },
        );
    }

    /// Registers a consumer; returns true when the group's membership changed.
    pub fn register_consumer(
        &self,
        data: &ConsumerData,
        client_id: &str,
        conn: &ConnectionHandle,
        now_ms: i64,
    ) -> bool {
        let mut g = self
            .consumers
            .entry(data.group_name.clone())
            .or_insert_with(|| ConsumerGroup {
                clients: HashMap::new(),
                subscriptions: HashMap::new(),
                consume_type: data.consume_type,
                message_model: data.message_model,
            });
        g.consume_type = data.consume_type;
        g.message_model = data.message_model;
        for s in &data.subscriptions {
            let replace = g.subscriptions.get(&s.topic).is_none_or(|old| {
                old.sub_version <= s.sub_version || old.sub_string != s.sub_string
            });
            if replace {
                g.subscriptions.insert(s.topic.clone(), s.clone());
            }
        }
        let changed = match g.clients.get_mut(client_id) {
            Some(c) if c.conn.id() == conn.id() => {
                c.last_update_ms = now_ms;
                false
            }
            _ => {
                g.clients.insert(
                    client_id.to_owned(),
                    ClientChannel {
                        conn: conn.clone(),
                        last_update_ms: now_ms,
                    },
                );
                true
            }
        };
        changed
    }

    /// Open connections of a producer group's members (transaction checks are sent on them).
    pub fn producer_connections(&self, group: &str) -> Vec<ConnectionHandle> {
        self.producers.get(group).map_or_else(Vec::new, |g| {
            g.values()
                .filter(|c| !c.conn.is_closed())
                .map(|c| c.conn.clone())
                .collect()
        })
    }

    /// Removes a producer.
    pub fn unregister_producer(&self, group: &str, client_id: &str) {
        if let Some(mut g) = self.producers.get_mut(group) {
            g.remove(client_id);
        }
        self.producers.remove_if(group, |_, g| g.is_empty());
    }

    /// Removes a consumer; returns true when it was a member.
    pub fn unregister_consumer(&self, group: &str, client_id: &str) -> bool {
        let removed = self
            .consumers
            .get_mut(group)
            .is_some_and(|mut g| g.clients.remove(client_id).is_some());
        self.consumers.remove_if(group, |_, g| g.clients.is_empty());
        removed
    }

    /// Forgets every registration made on a closed connection; returns the consumer groups
    /// whose membership changed.
    pub fn connection_closed(&self, id: ConnectionId) -> Vec<String> {
        for mut g in self.producers.iter_mut() {
            g.retain(|_, c| c.conn.id() != id);
        }
        self.producers.retain(|_, g| !g.is_empty());
        let mut changed = Vec::new();
        for mut g in self.consumers.iter_mut() {
            let before = g.clients.len();
            g.clients.retain(|_, c| c.conn.id() != id);
            if g.clients.len() != before {
                changed.push(g.key().clone());
            }
        }
        self.consumers.retain(|_, g| !g.clients.is_empty());
        changed
    }

    /// Client ids of a consumer group, sorted.
    pub fn consumer_ids(&self, group: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .consumers
            .get(group)
            .map(|g| g.clients.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Connections of a consumer group's members.
    pub fn consumer_connections(&self, group: &str) -> Vec<ConnectionHandle> {
        self.consumers
            .get(group)
            .map(|g| g.clients.values().map(|c| c.conn.clone()).collect())
            .unwrap_or_default()
    }

    /// The registered subscription of `group` to `topic`.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<Subscription> {
        self.consumers
            .get(group)
            .and_then(|g| g.subscriptions.get(topic).cloned())
    }

    /// Whether the group consumes in broadcasting mode.
    pub fn is_broadcasting(&self, group: &str) -> bool {
        self.consumers
            .get(group)
            .is_some_and(|g| g.message_model == MessageModel::Broadcasting)
    }

    /// Number of producer and consumer groups.
    pub fn group_counts(&self) -> (usize, usize) {
        (self.producers.len(), self.consumers.len())
    }

    /// Drops channels not refreshed for `expire_ms` (Java: 120 s); returns changed groups.
    pub fn scan_expired(&self, now_ms: i64, expire_ms: i64) -> Vec<String> {
        for mut g in self.producers.iter_mut() {
            g.retain(|_, c| now_ms - c.last_update_ms < expire_ms);
        }
        self.producers.retain(|_, g| !g.is_empty());
        let mut changed = Vec::new();
        for mut g in self.consumers.iter_mut() {
            let before = g.clients.len();
            g.clients
                .retain(|_, c| now_ms - c.last_update_ms < expire_ms);
            if g.clients.len() != before {
                changed.push(g.key().clone());
            }
        }
        self.consumers.retain(|_, g| !g.clients.is_empty());
        changed
    }

    /// Whether consumers of `group` use the given consume type (for diagnostics).
    pub fn consume_type(&self, group: &str) -> Option<ConsumeType> {
        self.consumers.get(group).map(|g| g.consume_type)
    }
}

/// A message queue as clients name it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    pub broker_name: String,
    pub queue_id: i32,
    pub topic: String,
}

/// Broker-side locks for orderly consumption: a queue belongs to one client of a group until
/// the lock is not renewed for `expire_ms` (Java: 60 s).
#[derive(Default)]
pub struct QueueLocks {
    locks: DashMap<String, BTreeMap<MessageQueue, (String, i64)>>,
}

impl QueueLocks {
    /// Locks (or renews) every queue not held by another live client; returns the queues
    /// now held by `client_id`.
    pub fn lock(
        &self,
        group: &str,
        client_id: &str,
        mqs: &[MessageQueue],
        now_ms: i64,
        expire_ms: i64,
    ) -> Vec<MessageQueue> {
        let mut g = self.locks.entry(group.to_owned()).or_default();
        let mut ok = Vec::new();
        for mq in mqs {
            let free = match g.get(mq) {
                Some((owner, at)) => owner == client_id || now_ms - at > expire_ms,
                None => true,
            };
            if free {
                g.insert(mq.clone(), (client_id.to_owned(), now_ms));
                ok.push(mq.clone());
            }
        }
        ok
    }

    /// Releases the queues `client_id` holds among `mqs`.
    pub fn unlock(&self, group: &str, client_id: &str, mqs: &[MessageQueue]) {
        if let Some(mut g) = self.locks.get_mut(group) {
            for mq in mqs {
                if g.get(mq).is_some_and(|(owner, _)| owner == client_id) {
                    g.remove(mq);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_from_java_client() {
        let body = br#"{"clientID":"10.0.0.9@12345","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"CG","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"TopicTest"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}"#;
        let h = parse_heartbeat(body).unwrap();
        assert_eq!(h.client_id, "10.0.0.9@12345");
        assert_eq!(h.producer_groups, vec!["CLIENT_INNER_PRODUCER"]);
        let c = &h.consumers[0];
        assert_eq!(c.consume_type, ConsumeType::Passively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        let s = &c.subscriptions[0];
        assert!(s.accepts_tag_code(2_598_919));
        assert!(!s.accepts_tag_code(1));
        assert_eq!(s.sub_version, 1_700_000_000_000);
    }

    #[test]
    fn heartbeat_from_cpp_client_with_ordinals_and_string_numbers() {
        let body = br#"{"clientID":"127.0.0.1@9","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"G","messageModel":0,"subscriptionDataSet":[{"subString":"A || B","subVersion":"1700000000001","topic":"T"}],"unitMode":"0"}],"producerDataSet":[]}
"#;
        let h = parse_heartbeat(body).unwrap();
        let c = &h.consumers[0];
        assert_eq!(c.consume_type, ConsumeType::Passively);
        assert_eq!(c.message_model, MessageModel::Broadcasting);
        assert_eq!(c.consume_from_where, "CONSUME_FROM_FIRST_OFFSET");
        assert!(!c.unit_mode);
        let s = &c.subscriptions[0];
        assert_eq!(s.sub_version, 1_700_000_000_001);
        assert!(s.accepts_tag_code(i64::from(java_string_hash("B"))));
        assert!(!s.accepts_tag_code(i64::from(java_string_hash("C"))));
    }

    #[test]
    fn malformed_heartbeats_are_errors_not_panics() {
        for body in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"consumerDataSet\":[]}",
            b"\xff\xfe",
            b"{\"clientID\":\"x\",\"consumerDataSet\":[{\"groupName\":5,\"subscriptionDataSet\":7}]}",
        ] {
            let _ = parse_heartbeat(body);
        }
        assert!(parse_heartbeat(b"{").is_err());
        // Missing members are defaulted, unknown ones ignored.
        let h = parse_heartbeat(
            b"{\"clientID\":\"c\",\"x\":{1:2},\"consumerDataSet\":[{\"groupName\":\"g\"}]}",
        )
        .unwrap();
        assert_eq!(h.consumers[0].group_name, "g");
        assert_eq!(h.consumers[0].consume_type, ConsumeType::Passively);
    }

    #[test]
    fn queue_locks_expire_and_belong_to_one_client() {
        let l = QueueLocks::default();
        let mq = MessageQueue {
            broker_name: "b".into(),
            queue_id: 0,
            topic: "t".into(),
        };
        assert_eq!(
            l.lock("g", "c1", std::slice::from_ref(&mq), 0, 60_000)
                .len(),
            1
        );
        assert!(l
            .lock("g", "c2", std::slice::from_ref(&mq), 1_000, 60_000)
            .is_empty());
        assert_eq!(
            l.lock("g", "c2", std::slice::from_ref(&mq), 61_001, 60_000)
                .len(),
            1
        );
        l.unlock("g", "c2", std::slice::from_ref(&mq));
        assert_eq!(l.lock("g", "c1", &[mq], 61_002, 60_000).len(), 1);
    }
}
