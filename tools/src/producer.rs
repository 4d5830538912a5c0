//! Producer: sync, async (callback), oneway and batch sends with SEND_MESSAGE_V2 /
//! SEND_BATCH_MESSAGE, round robin over the writable queues, retries on another queue
//! (another broker group when there is one) after busy / not-available answers and
//! connection errors, and an honest account of whether a failure is definite.
//!
//! A failure is *definite* when no attempt can have stored the message: every attempt was
//! refused before the broker appended (connect failed, SYSTEM_BUSY, SERVICE_NOT_AVAILABLE,
//! MESSAGE_ILLEGAL, ...). Timeouts, a connection that closed after the request was written,
//! and SYSTEM_ERROR (DLedger quorum timeout / term change) are *indeterminate*
//! (RELIABILITY.md R14).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use broker::message::msg_id::UniqKeyGenerator;
use bytes::Bytes;
use remoting::custom_headers::{SendMessageRequestHeaderV2, SendMessageResponseHeader};
use remoting::{RemotingCommand, RemotingError, RequestCode, ResponseCode};

use crate::client::{parse_addr, MqClient, AUTO_CREATE_TOPIC};
use crate::error::ClientError;
use crate::message::{encode_properties, keys, Message};
use crate::record::encode_batch;
use crate::route::{publish_queues, MessageQueue};

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// Producer group.
    pub group: String,
    /// Extra attempts after the first (Java: 2).
    pub retry_times: u32,
    /// Also retry after indeterminate failures (may duplicate; Java does).
    pub retry_indeterminate: bool,
    /// Timeout of one send attempt.
    pub send_timeout: Duration,
    /// Queue count asked for an auto-created topic.
    pub default_topic_queue_nums: i32,
    /// Pause before retrying after the broker could not be reached at all (no master in
    /// the route, connection refused): during an election an immediate retry only spins.
    pub unreachable_retry_backoff: Duration,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            group: "DEFAULT_PRODUCER".to_owned(),
            retry_times: 2,
            retry_indeterminate: true,
            send_timeout: Duration::from_secs(3),
            default_topic_queue_nums: 4,
            unreachable_retry_backoff: Duration::from_millis(10),
        }
    }
}

/// Send outcome reported by the broker (codes 0, 10, 11, 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    SendOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
}

/// A successful send.
#[derive(Debug, Clone)]
pub struct SendResult {
    pub status: SendStatus,
    /// `UNIQ_KEY` of the message (comma-joined for a batch).
    pub msg_id: String,
    /// Offset message id(s) from the broker (empty for oneway).
    pub offset_msg_id: String,
    pub queue: MessageQueue,
    /// Queue offset of the (first) message; -1 for oneway.
    pub queue_offset: i64,
    pub broker_addr: SocketAddr,
    /// Number of attempts made (1 = no retry).
    pub attempts: u32,
}

/// A failed send.
#[derive(Debug, thiserror::Error)]
#[error("send failed after {attempts} attempt(s) ({}): {last}", if *.definite { "definite: not stored" } else { "indeterminate: may be stored" })]
pub struct SendError {
    /// True when no attempt can have stored the message.
    pub definite: bool,
    pub attempts: u32,
    /// The last attempt's error.
    pub last: ClientError,
}

/// What one attempt's failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Not stored; worth another queue/broker.
    RetryDefinite,
    /// Maybe stored; retry only if allowed.
    RetryIndeterminate,
    /// Not stored; retrying will not help.
    FailDefinite,
}

fn classify_code(code: ResponseCode) -> Verdict {
    match code {
        ResponseCode::SYSTEM_BUSY
        | ResponseCode::SERVICE_NOT_AVAILABLE
        | ResponseCode::TOPIC_NOT_EXIST
        | ResponseCode::NO_PERMISSION
        | ResponseCode(204)
        | ResponseCode(205)
        | ResponseCode(1500) => Verdict::RetryDefinite,
        ResponseCode::SYSTEM_ERROR => Verdict::RetryIndeterminate,
        _ => Verdict::FailDefinite,
    }
}

fn classify_transport(e: &RemotingError) -> Verdict {
    match e {
        RemotingError::ConnectFailed { .. }
        | RemotingError::TooManyInflight { .. }
        | RemotingError::Shutdown => Verdict::RetryDefinite,
        _ => Verdict::RetryIndeterminate,
    }
}

struct Inner {
    client: MqClient,
    options: ProducerOptions,
    next_queue: AtomicUsize,
    uniq: UniqKeyGenerator,
}

/// Cheap to clone.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

enum Payload<'a> {
    One(&'a Message),
    Batch(&'a [Message]),
}

impl Producer {
    /// A producer on `client`.
    pub fn new(client: MqClient, options: ProducerOptions) -> Producer {
        Producer {
            inner: Arc::new(Inner {
                client,
                options,
                next_queue: AtomicUsize::new(0),
                uniq: new_uniq_generator(),
            }),
        }
    }

    /// The client this producer uses.
    pub fn client(&self) -> &MqClient {
        &self.inner.client
    }

    /// Assigns `UNIQ_KEY` if the message has none; returns it.
    pub fn assign_uniq_key(&self, msg: &mut Message) -> String {
        if let Some(k) = msg.uniq_key() {
            return k.to_owned();
        }
        let id = self.inner.uniq.next_id(now_ms()).to_string();
        msg.properties.insert(keys::UNIQ_KEY.to_owned(), id.clone());
        id
    }

    /// Sends one message and waits for the broker's answer.
    pub async fn send(&self, mut msg: Message) -> Result<SendResult, SendError> {
        let id = self.assign_uniq_key(&mut msg);
        self.send_payload(Payload::One(&msg), id, false).await
    }

    /// Sends without waiting for an answer; only transport errors are reported.
    pub async fn send_oneway(&self, mut msg: Message) -> Result<SendResult, SendError> {
        let id = self.assign_uniq_key(&mut msg);
        self.send_payload(Payload::One(&msg), id, true).await
    }

    /// Sends in the background and calls `callback` with the outcome.
    pub fn send_async<F>(&self, msg: Message, callback: F)
    where
        F: FnOnce(Result<SendResult, SendError>) + Send + 'static,
    {
        let me = self.clone();
        tokio::spawn(async move {
            callback(me.send(msg).await);
        });
    }

    /// Sends messages of one topic as one SEND_BATCH_MESSAGE (all to one queue).
    pub async fn send_batch(&self, mut msgs: Vec<Message>) -> Result<SendResult, SendError> {
        let invalid = |reason: &str| SendError {
            definite: true,
            attempts: 0,
            last: ClientError::InvalidArgument(reason.to_owned()),
        };
        let first = msgs.first().ok_or_else(|| invalid("empty batch"))?;
        let topic = first.topic.clone();
        if msgs.iter().any(|m| m.topic != topic) {
            return Err(invalid("a batch must have one topic"));
        }
        let ids: Vec<String> = msgs.iter_mut().map(|m| self.assign_uniq_key(m)).collect();
        self.send_payload(Payload::Batch(&msgs), ids.join(","), false)
            .await
    }

    fn pick_queue(&self, queues: &[MessageQueue], avoid: Option<&str>) -> Option<MessageQueue> {
        if queues.is_empty() {
            return None;
        }
        let start = self.inner.next_queue.fetch_add(1, Ordering::Relaxed);
        if let Some(avoid) = avoid {
            for i in 0..queues.len() {
                let q = &queues[(start + i) % queues.len()];
                if q.broker_name != avoid {
                    return Some(q.clone());
                }
            }
        }
        Some(queues[start % queues.len()].clone())
    }

    async fn send_payload(
        &self,
        payload: Payload<'_>,
        msg_id: String,
        oneway: bool,
    ) -> Result<SendResult, SendError> {
        let (topic, flag, properties, body, batch) = match payload {
            Payload::One(m) => (
                m.topic.as_str(),
                m.flag,
                Some(encode_properties(&m.properties)),
                m.body.clone(),
                false,
            ),
            Payload::Batch(ms) => (ms[0].topic.as_str(), 0, None, encode_batch(ms), true),
        };
        let opts = &self.inner.options;
        let client = &self.inner.client;
        let mut all_definite = true;
        let mut attempts = 0;
        let mut avoid: Option<String> = None;
        let mut last: Option<ClientError> = None;
        while attempts <= opts.retry_times {
            attempts += 1;
            let verdict = match self
                .attempt(
                    topic,
                    flag,
                    &properties,
                    &body,
                    batch,
                    oneway,
                    avoid.as_deref(),
                )
                .await
            {
                Ok((status, header, queue, addr)) => {
                    return Ok(SendResult {
                        status,
                        msg_id,
                        offset_msg_id: header
                            .as_ref()
                            .map(|h| h.msg_id.clone())
                            .unwrap_or_default(),
                        queue_offset: header.as_ref().map_or(-1, |h| h.queue_offset),
                        queue,
                        broker_addr: addr,
                        attempts,
                    })
                }
                Err((err, broker)) => {
                    let verdict = match &err {
                        ClientError::Response { code, .. } => classify_code(*code),
                        ClientError::Remoting(e) => classify_transport(e),
                        ClientError::NoRoute { .. } | ClientError::NoWritableQueue { .. } => {
                            Verdict::RetryDefinite
                        }
                        _ => Verdict::FailDefinite,
                    };
                    tracing::debug!(attempt = attempts, %err, ?verdict, "send attempt failed");
                    let unreachable = matches!(
                        &err,
                        ClientError::NoRoute { .. }
                            | ClientError::NoWritableQueue { .. }
                            | ClientError::Remoting(RemotingError::ConnectFailed { .. })
                    );
                    if unreachable && attempts <= opts.retry_times {
                        tokio::time::sleep(opts.unreachable_retry_backoff).await;
                    }
                    client.invalidate_route(topic);
                    avoid = broker;
                    last = Some(err);
                    verdict
                }
            };
            match verdict {
                Verdict::RetryDefinite => {}
                Verdict::RetryIndeterminate => {
                    all_definite = false;
                    if !opts.retry_indeterminate {
                        break;
                    }
                }
                Verdict::FailDefinite => break,
            }
        }
        Err(SendError {
            definite: all_definite,
            attempts,
            last: last.unwrap_or(ClientError::NoWritableQueue {
                topic: topic.to_owned(),
            }),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        topic: &str,
        flag: i32,
        properties: &Option<String>,
        body: &Bytes,
        batch: bool,
        oneway: bool,
        avoid: Option<&str>,
    ) -> Result<
        (
            SendStatus,
            Option<SendMessageResponseHeader>,
            MessageQueue,
            SocketAddr,
        ),
        (ClientError, Option<String>),
    > {
        let client = &self.inner.client;
        let opts = &self.inner.options;
        let lookup = client.route(topic, true).await.map_err(|e| (e, None))?;
        let cap = lookup
            .from_template
            .then_some(opts.default_topic_queue_nums);
        let queues = publish_queues(topic, &lookup.route, cap);
        let queue = self.pick_queue(&queues, avoid).ok_or_else(|| {
            (
                ClientError::NoWritableQueue {
                    topic: topic.to_owned(),
                },
                None,
            )
        })?;
        let fail = |e: ClientError| (e, Some(queue.broker_name.clone()));
        let addr_text = lookup
            .route
            .broker(&queue.broker_name)
            .and_then(|b| b.master_addr())
            .ok_or_else(|| {
                fail(ClientError::NoWritableQueue {
                    topic: topic.to_owned(),
                })
            })?;
        let addr = parse_addr(addr_text).map_err(fail)?;
        let header = SendMessageRequestHeaderV2 {
            producer_group: opts.group.clone(),
            topic: topic.to_owned(),
            default_topic: AUTO_CREATE_TOPIC.to_owned(),
            default_topic_queue_nums: opts.default_topic_queue_nums,
            queue_id: queue.queue_id,
            sys_flag: 0,
            born_timestamp: now_ms(),
            flag,
            properties: properties.clone(),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(batch),
            broker_name: Some(queue.broker_name.clone()),
        };
        let code = if batch {
            RequestCode::SEND_BATCH_MESSAGE
        } else {
            RequestCode::SEND_MESSAGE_V2
        };
        let request = RemotingCommand::request(code, &header).with_body(body.clone());
        if oneway {
            client.invoke_oneway(addr, request).await.map_err(fail)?;
            return Ok((SendStatus::SendOk, None, queue, addr));
        }
        let response = client
            .invoke(addr, request, opts.send_timeout)
            .await
            .map_err(fail)?;
        let status = match response.response_code() {
            ResponseCode::SUCCESS => SendStatus::SendOk,
            ResponseCode::FLUSH_DISK_TIMEOUT => SendStatus::FlushDiskTimeout,
            ResponseCode::FLUSH_SLAVE_TIMEOUT => SendStatus::FlushSlaveTimeout,
            ResponseCode::SLAVE_NOT_AVAILABLE => SendStatus::SlaveNotAvailable,
            code => {
                return Err(fail(ClientError::Response {
                    addr,
                    code,
                    remark: response.remark().unwrap_or_default().to_owned(),
                }))
            }
        };
        let header: SendMessageResponseHeader = response
            .decode_header()
            .map_err(|e| fail(ClientError::Remoting(e.into())))?;
        let queue = MessageQueue {
            queue_id: header.queue_id,
            ..queue
        };
        Ok((status, Some(header), queue, addr))
    }
}

/// The `UNIQ_KEY` generator of one producer: loopback address, pid and a per-process random
/// word (Java: the class loader hash) mixed from the clock and the pid.
fn new_uniq_generator() -> UniqKeyGenerator {
    let pid = std::process::id();
    let salt = (now_ms() as u32 ^ pid.rotate_left(16)).wrapping_mul(0x9E37_79B9);
    UniqKeyGenerator::new(IpAddr::V4(Ipv4Addr::LOCALHOST), pid, salt as i32)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniq_keys_are_distinct_and_well_formed() {
        let g = new_uniq_generator();
        let ids: std::collections::BTreeSet<String> =
            (0..1000).map(|_| g.next_id(now_ms()).to_string()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 32);
            assert!(id.starts_with("7F000001"));
            assert!(id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        }
    }

    #[test]
    fn definite_codes_match_reliability_rules() {
        assert_eq!(
            classify_code(ResponseCode::SYSTEM_BUSY),
            Verdict::RetryDefinite
        );
        assert_eq!(
            classify_code(ResponseCode::SERVICE_NOT_AVAILABLE),
            Verdict::RetryDefinite
        );
        assert_eq!(
            classify_code(ResponseCode::SYSTEM_ERROR),
            Verdict::RetryIndeterminate
        );
        assert_eq!(
            classify_code(ResponseCode::MESSAGE_ILLEGAL),
            Verdict::FailDefinite
        );
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(
            classify_transport(&RemotingError::ConnectFailed {
                addr,
                reason: String::new()
            }),
            Verdict::RetryDefinite
        );
        assert_eq!(
            classify_transport(&RemotingError::Timeout {
                addr,
                timeout: Duration::from_secs(1)
            }),
            Verdict::RetryIndeterminate
        );
        assert_eq!(
            classify_transport(&RemotingError::ConnectionClosed { addr }),
            Verdict::RetryIndeterminate
        );
    }
}
