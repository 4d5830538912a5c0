//! Pull consumer: PULL_MESSAGE (optionally long-polling), decoding of the raw records in the
//! pull body, client-side tag filtering, consumer-offset query/update and queue offsets.
//!
//! Reads go to the broker id the last pull response suggested, else the master (id 0), else
//! any member of the group: followers serve committed data, so consumption continues while
//! a DLedger group elects a new leader.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use remoting::custom_headers::{
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, UpdateConsumerOffsetRequestHeader, PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
};
use remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::body::{ConsumerData, HeartbeatData, SubscriptionData};
use crate::client::{expect_success, parse_addr, MqClient};
use crate::error::ClientError;
use crate::message::keys;
use crate::record::{decode_all, MessageExt};
use crate::route::{subscribe_queues, MessageQueue};

/// Outcome of one pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    /// Messages returned (possibly all filtered out client-side).
    Found,
    /// Nothing new (long-poll timed out).
    NoNewMsg,
    /// Units read but none matched the filter.
    NoMatchedMsg,
    /// The requested offset was illegal; continue at `next_begin_offset`.
    OffsetIllegal,
}

/// What one pull returned.
#[derive(Debug, Clone)]
pub struct PullResult {
    pub status: PullStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<MessageExt>,
    /// The address that answered.
    pub broker_addr: SocketAddr,
}

/// A parsed tag subscription (`*` or `TagA || TagB`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    expression: String,
    tags: Option<BTreeSet<String>>,
}

impl TagFilter {
    /// Parses an expression as Java does: empty or `*` means all.
    pub fn parse(expression: &str) -> TagFilter {
        let e = expression.trim();
        if e.is_empty() || e == "*" {
            return TagFilter {
                expression: "*".to_owned(),
                tags: None,
            };
        }
        let tags: BTreeSet<String> = e
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        TagFilter {
            expression: e.to_owned(),
            tags: Some(tags),
        }
    }

    /// The expression as sent to the broker.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether a message with `tag` passes.
    pub fn matches(&self, tag: Option<&str>) -> bool {
        match &self.tags {
            None => true,
            Some(set) => tag.is_some_and(|t| set.contains(t)),
        }
    }

    /// Java `String.hashCode` of each tag (the `codeSet` of a subscription).
    pub fn code_set(&self) -> Vec<i32> {
        self.tags
            .iter()
            .flatten()
            .map(|t| java_string_hash(t))
            .collect()
    }
}

/// Java's `String.hashCode` over UTF-16 code units.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

struct Inner {
    client: MqClient,
    group: String,
    /// Broker id suggested by the last pull of each queue.
    suggested: Mutex<HashMap<MessageQueue, i64>>,
}

/// Cheap to clone.
#[derive(Clone)]
pub struct PullConsumer {
    inner: Arc<Inner>,
}

impl PullConsumer {
    /// A consumer of `group`.
    pub fn new(client: MqClient, group: impl Into<String>) -> PullConsumer {
        PullConsumer {
            inner: Arc::new(Inner {
                client,
                group: group.into(),
                suggested: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The client this consumer uses.
    pub fn client(&self) -> &MqClient {
        &self.inner.client
    }

    /// Every readable queue of `topic`.
    pub async fn queues(&self, topic: &str) -> Result<Vec<MessageQueue>, ClientError> {
        let lookup = self.inner.client.route(topic, false).await?;
        Ok(subscribe_queues(topic, &lookup.route))
    }

    /// Candidate addresses for reading `mq`, best first.
    async fn read_addrs(&self, mq: &MessageQueue) -> Result<Vec<SocketAddr>, ClientError> {
        let lookup = self.inner.client.route(&mq.topic, false).await?;
        let broker = lookup
            .route
            .broker(&mq.broker_name)
            .ok_or_else(|| ClientError::NoRoute {
                topic: mq.topic.clone(),
            })?;
        let suggested = self
            .inner
            .suggested
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(mq)
            .copied()
            .unwrap_or(0);
        let mut ids: Vec<i64> = vec![suggested];
        if suggested != 0 {
            ids.push(0);
        }
        for id in broker.broker_addrs.keys() {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        let mut out = Vec::new();
        for id in ids {
            if let Some(a) = broker.broker_addrs.get(&id) {
                out.push(parse_addr(a)?);
            }
        }
        if out.is_empty() {
            return Err(ClientError::NoRoute {
                topic: mq.topic.clone(),
            });
        }
        Ok(out)
    }

    /// Tries `make_request` on each candidate address of `mq` until one answers.
    async fn invoke_read(
        &self,
        mq: &MessageQueue,
        request: RemotingCommand,
        timeout: Duration,
        master_only: bool,
    ) -> Result<(SocketAddr, RemotingCommand), ClientError> {
        let addrs = self.read_addrs(mq).await?;
        let mut last = None;
        let n = if master_only { 1 } else { addrs.len() };
        for addr in addrs.into_iter().take(n) {
            match self
                .inner
                .client
                .invoke(addr, request.clone(), timeout)
                .await
            {
                Ok(r) => return Ok((addr, r)),
                Err(e) => {
                    self.inner.client.invalidate_route(&mq.topic);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(ClientError::NoRoute {
            topic: mq.topic.clone(),
        }))
    }

    /// Pulls up to `max_nums` messages of `mq` from `offset`. With `suspend`, the broker may
    /// hold the request that long when nothing is available. `commit_offset`, when given,
    /// is stored by the broker for the group.
    pub async fn pull(
        &self,
        mq: &MessageQueue,
        offset: i64,
        max_nums: i32,
        filter: &TagFilter,
        suspend: Option<Duration>,
        commit_offset: Option<i64>,
    ) -> Result<PullResult, ClientError> {
        let mut sys_flag = PULL_FLAG_SUBSCRIPTION;
        if suspend.is_some() {
            sys_flag |= PULL_FLAG_SUSPEND;
        }
        if commit_offset.is_some() {
            sys_flag |= PULL_FLAG_COMMIT_OFFSET;
        }
        let suspend_ms = suspend.map_or(0, |d| d.as_millis() as i64);
        let header = PullMessageRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: mq.topic.clone(),
            queue_id: mq.queue_id,
            queue_offset: offset,
            max_msg_nums: max_nums,
            sys_flag,
            commit_offset: commit_offset.unwrap_or(0),
            suspend_timeout_millis: suspend_ms,
            subscription: Some(filter.expression().to_owned()),
            sub_version: 0,
            expression_type: Some("TAG".to_owned()),
            broker_name: Some(mq.broker_name.clone()),
            ..Default::default()
        };
        let request = RemotingCommand::request(RequestCode::PULL_MESSAGE, &header);
        let timeout = self.inner.client.options().rpc_timeout + suspend.unwrap_or_default();
        let (addr, response) = self.invoke_read(mq, request, timeout, false).await?;
        let status = match response.response_code() {
            ResponseCode::SUCCESS => PullStatus::Found,
            ResponseCode::PULL_NOT_FOUND => PullStatus::NoNewMsg,
            ResponseCode::PULL_RETRY_IMMEDIATELY => PullStatus::NoMatchedMsg,
            ResponseCode::PULL_OFFSET_MOVED => PullStatus::OffsetIllegal,
            code => {
                return Err(ClientError::Response {
                    addr,
                    code,
                    remark: response.remark().unwrap_or_default().to_owned(),
                })
            }
        };
        let h: PullMessageResponseHeader = response
            .decode_header()
            .map_err(|e| ClientError::Remoting(remoting::RemotingError::Header(e)))?;
        self.inner
            .suggested
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(mq.clone(), h.suggest_which_broker_id);
        let mut messages = Vec::new();
        if status == PullStatus::Found {
            let (decoded, err) = decode_all(response.body());
            if let Some(e) = err {
                tracing::warn!(%addr, queue = %mq, error = %e, "undecodable record in pull body");
                if decoded.is_empty() {
                    return Err(e.into());
                }
            }
            for mut m in decoded {
                if filter.matches(m.tags()) {
                    m.properties
                        .insert(keys::MIN_OFFSET.to_owned(), h.min_offset.to_string());
                    m.properties
                        .insert(keys::MAX_OFFSET.to_owned(), h.max_offset.to_string());
                    messages.push(m);
                }
            }
        }
        Ok(PullResult {
            status,
            next_begin_offset: h.next_begin_offset,
            min_offset: h.min_offset,
            max_offset: h.max_offset,
            messages,
            broker_addr: addr,
        })
    }

    /// The group's stored offset of `mq`; `None` when the broker has none (code 22).
    pub async fn query_offset(&self, mq: &MessageQueue) -> Result<Option<i64>, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: self.inner.group.clone(),
                topic: mq.topic.clone(),
                queue_id: mq.queue_id,
                set_zero_if_not_found: Some(false),
                broker_name: Some(mq.broker_name.clone()),
            },
        );
        let timeout = self.inner.client.options().rpc_timeout;
        let (addr, response) = self.invoke_read(mq, request, timeout, true).await?;
        if response.response_code() == ResponseCode::QUERY_NOT_FOUND {
            return Ok(None);
        }
        let response = expect_success(addr, response)?;
        let h: QueryConsumerOffsetResponseHeader = response
            .decode_header()
            .map_err(|e| ClientError::Remoting(e.into()))?;
        Ok(Some(h.offset))
    }

    /// Stores the group's offset of `mq` on the master (oneway like Java when `oneway`).
    pub async fn update_offset(
        &self,
        mq: &MessageQueue,
        offset: i64,
        oneway: bool,
    ) -> Result<(), ClientError> {
        let request = RemotingCommand::request(
            RequestCode::UPDATE_CONSUMER_OFFSET,
            &UpdateConsumerOffsetRequestHeader {
                consumer_group: self.inner.group.clone(),
                topic: mq.topic.clone(),
                queue_id: mq.queue_id,
                commit_offset: offset,
                broker_name: Some(mq.broker_name.clone()),
            },
        );
        let addr = self.read_addrs(mq).await?[0];
        if oneway {
            return self.inner.client.invoke_oneway(addr, request).await;
        }
        self.inner.client.invoke_ok(addr, request).await.map(|_| ())
    }

    /// The queue's max offset (the offset the next message gets).
    pub async fn max_offset(&self, mq: &MessageQueue) -> Result<i64, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::GET_MAX_OFFSET,
            &GetMaxOffsetRequestHeader {
                topic: mq.topic.clone(),
                queue_id: mq.queue_id,
                committed: None,
                broker_name: Some(mq.broker_name.clone()),
            },
        );
        self.offset_call(mq, request).await
    }

    /// The queue's min offset.
    pub async fn min_offset(&self, mq: &MessageQueue) -> Result<i64, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::GET_MIN_OFFSET,
            &GetMinOffsetRequestHeader {
                topic: mq.topic.clone(),
                queue_id: mq.queue_id,
                broker_name: Some(mq.broker_name.clone()),
            },
        );
        self.offset_call(mq, request).await
    }

    async fn offset_call(
        &self,
        mq: &MessageQueue,
        request: RemotingCommand,
    ) -> Result<i64, ClientError> {
        let timeout = self.inner.client.options().rpc_timeout;
        let (addr, response) = self.invoke_read(mq, request, timeout, false).await?;
        let response = expect_success(addr, response)?;
        let h: OffsetResponseHeader = response
            .decode_header()
            .map_err(|e| ClientError::Remoting(e.into()))?;
        Ok(h.offset)
    }

    /// Registers the group (pull consumer, clustering) with every broker of `topic`, so
    /// that admin views such as consumerProgress know it.
    pub async fn heartbeat(&self, topic: &str, filter: &TagFilter) -> Result<(), ClientError> {
        let lookup = self.inner.client.route(topic, false).await?;
        let data = HeartbeatData {
            client_id: self.inner.client.options().client_id.clone(),
            producer_data_set: Vec::new(),
            consumer_data_set: vec![ConsumerData {
                group_name: self.inner.group.clone(),
                consume_type: "CONSUME_ACTIVELY".to_owned(),
                message_model: "CLUSTERING".to_owned(),
                consume_from_where: "CONSUME_FROM_FIRST_OFFSET".to_owned(),
                subscription_data_set: vec![SubscriptionData {
                    topic: topic.to_owned(),
                    sub_string: filter.expression().to_owned(),
                    tags_set: filter.tags.iter().flatten().cloned().collect(),
                    code_set: filter.code_set(),
                    sub_version: crate::producer::now_ms(),
                    expression_type: "TAG".to_owned(),
                    class_filter_mode: false,
                }],
                unit_mode: false,
            }],
        };
        let body = serde_json::to_vec(&data).map_err(|e| ClientError::BadBody {
            what: "heartbeat",
            reason: e.to_string(),
        })?;
        let mut last = Ok(());
        for b in &lookup.route.broker_datas {
            for a in b.broker_addrs.values() {
                let addr = parse_addr(a)?;
                let request =
                    RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(body.clone());
                if let Err(e) = self.inner.client.invoke_ok(addr, request).await {
                    last = Err(e);
                }
            }
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_filters_follow_java_parsing() {
        let all = TagFilter::parse(" * ");
        assert!(all.matches(None));
        assert_eq!(all.expression(), "*");
        let f = TagFilter::parse("TagA || TagB ||");
        assert!(f.matches(Some("TagA")));
        assert!(!f.matches(Some("TagC")));
        assert!(!f.matches(None));
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("ZZZZZZZZ"), -1_127_396_096);
        assert_eq!(f.code_set(), vec![2_598_919, java_string_hash("TagB")]);
    }
}
