//! A small test producer and consumer on `remoting`: route lookup through the name server,
//! sends (sync, async, oneway, batch) to the masters, pulls per queue, offset commits.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use remoting::body::TopicRouteData;
use remoting::custom_headers::*;
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

/// Call timeout.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A PULL_MESSAGE request for up to 32 messages of `topic`/`queue_id` from `offset`, tag
/// subscription `*`. A non-zero `suspend` makes it a push consumer's long poll: SUSPEND and
/// COMMIT_OFFSET set, committing `offset`.
pub fn pull_request(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    suspend: Duration,
) -> RemotingCommand {
    let long = !suspend.is_zero();
    let h = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        // SUBSCRIPTION, plus SUSPEND and COMMIT_OFFSET for the long-polling consumer.
        sys_flag: if long { 0x4 | 0x2 | 0x1 } else { 0x4 },
        commit_offset: if long { offset } else { 0 },
        suspend_timeout_millis: suspend.as_millis() as i64,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request(RequestCode::PULL_MESSAGE, &h)
}

/// One writable/readable queue: broker name, master address, queue id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Queue {
    pub broker: String,
    pub addr: SocketAddr,
    pub queue_id: i32,
}

/// The properties string (`k\x01v\x02`...).
pub fn props(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(k);
        s.push('\u{1}');
        s.push_str(v);
        s.push('\u{2}');
    }
    s
}

/// A client bound to one name server.
#[derive(Clone)]
pub struct Client {
    pub rc: RemotingClient,
    pub namesrv: SocketAddr,
}

impl Client {
    pub fn new(namesrv: SocketAddr) -> Client {
        Client {
            rc: RemotingClient::new(ClientConfig::default()),
            namesrv,
        }
    }

    pub async fn call(
        &self,
        addr: SocketAddr,
        req: RemotingCommand,
    ) -> anyhow::Result<RemotingCommand> {
        Ok(self.rc.invoke(addr, req, TIMEOUT).await?)
    }

    /// The topic route, if the name server knows it.
    pub async fn route(&self, topic: &str) -> anyhow::Result<Option<TopicRouteData>> {
        let req = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &GetRouteInfoRequestHeader {
                topic: topic.into(),
                ..Default::default()
            },
        );
        let r = self.call(self.namesrv, req).await?;
        if r.response_code() != ResponseCode::SUCCESS {
            return Ok(None);
        }
        Ok(Some(remoting::body::from_json(r.body())?))
    }

    /// Master queues of a route (brokers with an id-0 address).
    pub fn master_queues(route: &TopicRouteData) -> Vec<Queue> {
        let mut out = Vec::new();
        for qd in &route.queue_datas {
            let Some(bd) = route
                .broker_datas
                .iter()
                .find(|b| b.broker_name == qd.broker_name)
            else {
                continue;
            };
            let Some(addr) = bd.broker_addrs.get(&0) else {
                continue;
            };
            let addr: SocketAddr = addr.parse().unwrap();
            for q in 0..qd.write_queue_nums {
                out.push(Queue {
                    broker: qd.broker_name.clone(),
                    addr,
                    queue_id: q,
                });
            }
        }
        out.sort();
        out
    }

    /// Waits until the route of `topic` has a master for each of `brokers` broker names.
    pub async fn wait_masters(&self, topic: &str, brokers: usize, timeout: Duration) -> Vec<Queue> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(r)) = self.route(topic).await {
                let qs = Self::master_queues(&r);
                let names: std::collections::BTreeSet<_> =
                    qs.iter().map(|q| q.broker.clone()).collect();
                if names.len() >= brokers {
                    return qs;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no master route for {topic} in time"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// UPDATE_AND_CREATE_TOPIC on `addr`.
    pub async fn create_topic(
        &self,
        addr: SocketAddr,
        topic: &str,
        queues: i32,
    ) -> anyhow::Result<()> {
        let h = CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            order: false,
            ..Default::default()
        };
        let r = self
            .call(
                addr,
                RemotingCommand::request(RequestCode::UPDATE_AND_CREATE_TOPIC, &h),
            )
            .await?;
        anyhow::ensure!(
            r.response_code() == ResponseCode::SUCCESS,
            "create topic: {:?}",
            r.remark()
        );
        Ok(())
    }

    /// A SEND_MESSAGE_V2 request.
    pub fn send_request(
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: &str,
    ) -> RemotingCommand {
        let h = SendMessageRequestHeaderV2 {
            producer_group: "TestPG".into(),
            topic: topic.into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            flag: 0,
            properties: Some(properties.into()),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(false),
            broker_name: None,
        };
        RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &h)
            .with_body(Bytes::copy_from_slice(body))
    }

    /// A SEND_BATCH_MESSAGE request of `(body, properties)` elements.
    pub fn batch_request(
        topic: &str,
        queue_id: i32,
        msgs: &[(Vec<u8>, String)],
    ) -> RemotingCommand {
        let mut req = Self::send_request(topic, queue_id, b"", "");
        req.set_code(RequestCode::SEND_BATCH_MESSAGE.0);
        req.ext_fields_mut().insert("m".into(), "true".into());
        let mut body = BytesMut::new();
        for (b, p) in msgs {
            broker::message::batch::encode_batch_element(&mut body, 0, b, p.as_bytes());
        }
        req.with_body(body.freeze())
    }

    /// Sends and retries on the codes Java producers retry (1, 2, 14, 17).
    pub async fn send_retrying(
        &self,
        q: &Queue,
        req: RemotingCommand,
    ) -> anyhow::Result<RemotingCommand> {
        let mut last = None;
        for _ in 0..50 {
            match self.call(q.addr, req.clone()).await {
                Ok(r) if r.response_code() == ResponseCode::SUCCESS => return Ok(r),
                Ok(r) => last = Some(format!("code {} {:?}", r.code(), r.remark())),
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("send failed: {last:?}")
    }

    /// One pull (no suspension, subscription `*`).
    pub async fn pull(
        &self,
        addr: SocketAddr,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> anyhow::Result<RemotingCommand> {
        let req = pull_request(group, topic, queue_id, offset, Duration::ZERO);
        self.call(addr, req).await
    }

    /// Pulls `queue` from `from` until `max_offset`, returning the records in order.
    pub async fn drain(
        &self,
        group: &str,
        topic: &str,
        q: &Queue,
        from: i64,
    ) -> anyhow::Result<Vec<broker::message::StoredMessage>> {
        let mut out = Vec::new();
        let mut off = from;
        loop {
            let r = self.pull(q.addr, group, topic, q.queue_id, off).await?;
            if r.response_code() != ResponseCode::SUCCESS {
                return Ok(out);
            }
            let h: PullMessageResponseHeader = r.decode_header()?;
            for m in
                broker::message::decode_records(r.body().clone(), broker::message::CrcCheck::Verify)
            {
                out.push(m?);
            }
            off = h.next_begin_offset;
            if off >= h.max_offset {
                return Ok(out);
            }
        }
    }
}
