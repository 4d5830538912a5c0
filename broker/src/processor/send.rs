//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
//! CONSUMER_SEND_MSG_BACK (36) (remoting.md §11.2, §11.4; broker-roles.md §6-§7).
//!
//! A send is a batch when its header says `batch=true`, whatever the code (the C++ client
//! sends batches as 310). Checks in Java's order: role, topic name, system topic, topic
//! existence (auto-create from the default topic), write permission, queue id, then
//! properties and sizes; a batch is also refused for a retry topic, a body over
//! `maxMessageSize`, any transaction type in its `sysFlag` and a `DELAY` in its own
//! properties (Java's `CommitLog.putMessages`). Nothing is proposed unless every check passed
//! (rules and remarks: `broker/VALIDATION.md`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use remoting::custom_headers::{ConsumerSendMsgBackRequestHeader, SendMessageHeaderView};
use remoting::{ConnectionHandle, ExtFields, RemotingCommand};

use crate::context::{now_ms, BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::msg_id::{OffsetMsgId, UniqKey};
use crate::message::properties::{self, keys};
use crate::message::record::{
    encode_record, CrcCheck, MagicPolicy, MessageLimits, RecordFields, RecordView,
};
use crate::message::{
    decode_batch, offset_msg_id, sysflag, topic as names, MessageError, MessageProperties,
};
use crate::processor::{find_group, retry_queue_nums};
use crate::store::commit_log::physical_offset;
use crate::store::delay_offsets::SCHEDULE_ORIGIN_PROPERTY;
use crate::store::message_store::PutOne;
use crate::store::topics::perm;
use crate::store::TopicConfig;

/// Refuses writes unless this broker may append (broker-roles.md §2 step 7, §6).
pub fn check_writable(ctx: &BrokerContext) -> Result<(), BrokerError> {
    match ctx.role.role() {
        // Before the first role the ledger itself refuses (SYSTEM_BUSY), as in Java.
        ServingRole::Master | ServingRole::Unassigned => Ok(()),
        ServingRole::Slave => Err(BrokerError::ServiceNotAvailable(format!(
            "broker {} is not master (DLedger follower)",
            ctx.config.broker_addr()
        ))),
    }
}

/// What a send needs of its topic's config (read in place, not cloned per message).
#[derive(Debug, Clone, Copy)]
struct SendTopic {
    perm: i32,
    read_queue_nums: i32,
    write_queue_nums: i32,
    multi_tag: bool,
}

impl SendTopic {
    fn of(c: &TopicConfig) -> SendTopic {
        SendTopic {
            perm: c.perm,
            read_queue_nums: c.read_queue_nums,
            write_queue_nums: c.write_queue_nums,
            multi_tag: c.topic_filter_type == crate::store::topics::MULTI_TAG,
        }
    }
}

/// Topic checks for a send; returns what the send needs of the topic config (auto-creating
/// it if allowed), and the config of a topic it auto-created from the default topic, which
/// the send must put in the log before its message (`broker/METADATA_LOG.md`).
fn topic_for_send(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'_>,
) -> Result<(SendTopic, Option<TopicConfig>), BrokerError> {
    let mut created_from_default = None;
    names::validate_topic(h.topic)?;
    if names::is_not_allowed_send_topic(h.topic) {
        return Err(BrokerError::NoPermission(format!(
            "Sending message to topic[{}] is forbidden.",
            h.topic
        )));
    }
    let cfg = match ctx.topics.with(h.topic, SendTopic::of) {
        Some(c) => c,
        None => {
            let created = if let Some(group) = h.topic.strip_prefix(names::RETRY_GROUP_TOPIC_PREFIX)
            {
                let q = find_group(ctx, group)?
                    .and_then(|g| retry_queue_nums(ctx, &g))
                    .unwrap_or(1);
                Some((ctx.topics.create_retry_topic(group, q)?, true))
            } else {
                let queue_nums = auto_create_queue_nums(ctx, h)?;
                let (c, created) =
                    ctx.topics
                        .create_topic_in_send(h.topic, h.default_topic, queue_nums, 0)?;
                if created {
                    created_from_default.clone_from(&c);
                }
                c.map(|c| (c, created))
            };
            match created {
                Some((c, fresh)) => {
                    if fresh {
                        ctx.register_now.notify_one();
                    }
                    SendTopic::of(&c)
                }
                None => return Err(BrokerError::TopicNotExist(h.topic.to_owned())),
            }
        }
    };
    if !perm::is_writeable(cfg.perm) {
        return Err(BrokerError::NoPermission(format!(
            "the topic[{}] sending is forbidden",
            h.topic
        )));
    }
    let queues = cfg.read_queue_nums.max(cfg.write_queue_nums) as i64;
    if i64::from(h.queue_id) >= queues {
        return Err(BrokerError::InvalidParameter(format!(
            "request queueId[{}] is illegal, {:?} Producer: {}",
            h.queue_id, h.topic, h.producer_group
        )));
    }
    Ok((cfg, created_from_default))
}

/// The queue count asked for a topic auto-created from `h.default_topic`: the client's
/// `defaultTopicQueueNums` capped by `maxTopicQueueNums` (the store then takes at most the
/// template's write queues). Java creates a topic of zero queues when the client asks for
/// zero or less, and then refuses the send's queue id; such a topic is refused here before
/// anything is created.
fn auto_create_queue_nums(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'_>,
) -> Result<i32, BrokerError> {
    let wanted = h
        .default_topic_queue_nums
        .min(ctx.config.max_topic_queue_nums);
    let can_inherit = ctx
        .topics
        .with(h.default_topic, |t| perm::is_inherited(t.perm))
        .unwrap_or(false);
    if wanted <= 0 && can_inherit {
        return Err(BrokerError::InvalidParameter(format!(
            "defaultTopicQueueNums[{}] is illegal, a topic auto-created from {} needs at least one queue",
            h.default_topic_queue_nums, h.default_topic
        )));
    }
    Ok(wanted)
}

/// A record or properties string the encoder refused for its size: Java's store answers
/// MESSAGE_ILLEGAL with one remark for all of these (`PutIllegal`).
fn refused_record(limits: &MessageLimits, e: MessageError) -> BrokerError {
    match e {
        MessageError::TooLong { .. } => BrokerError::PutIllegal {
            cause: e.to_string(),
            max_body_bytes: limits.max_body_bytes,
        },
        other => other.into(),
    }
}

/// The delay level of a `DELAY` property value. Java parses it with `Integer.parseInt` and
/// answers SYSTEM_ERROR (the exception) when it is not a number; nothing is stored.
fn delay_level_of(value: Option<&str>) -> Result<i32, BrokerError> {
    match value {
        None => Ok(0),
        Some(v) => v.trim().parse::<i32>().map_err(|_| {
            BrokerError::System(format!(
                "the message property {}[{v}] is not a delay level (an integer)",
                keys::DELAY_TIME_LEVEL
            ))
        }),
    }
}

fn pick_queue(h: &SendMessageHeaderView<'_>, cfg: &SendTopic) -> i32 {
    if h.queue_id >= 0 {
        return h.queue_id;
    }
    let n = cfg.write_queue_nums.max(1) as u64;
    (now_ms().unsigned_abs() % n) as i32
}

/// Where a single message is really stored after broker-side rewriting (§5.2).
struct Target<'h> {
    /// The request's topic unless rewritten.
    topic: Cow<'h, str>,
    queue_id: i32,
    sys_flag: i32,
    take_offset: bool,
}

/// Applies retry/DLQ, transaction half and delay rewriting to `props`.
fn rewrite<'h>(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'h>,
    queue_id: i32,
    props: &mut MessageProperties,
) -> Result<Target<'h>, BrokerError> {
    let mut t = Target {
        topic: Cow::Borrowed(h.topic),
        queue_id,
        sys_flag: h.sys_flag,
        take_offset: true,
    };
    // Retry topic whose message exhausted its retries goes to the DLQ.
    if let Some(group) = h.topic.strip_prefix(names::RETRY_GROUP_TOPIC_PREFIX) {
        let max = h.max_reconsume_times.unwrap_or_else(|| {
            ctx.subscriptions
                .get(group)
                .map_or(16, |g| g.retry_max_times)
        });
        if h.reconsume_times.unwrap_or(0) > max {
            let dlq = ctx.topics.create_dlq_topic(group)?;
            t.topic = Cow::Owned(dlq.topic_name);
            t.queue_id = 0;
        }
    }
    let tx_type = sysflag::transaction_type(t.sys_flag);
    if props
        .get(keys::TRANSACTION_PREPARED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        && !h.topic.starts_with(names::RETRY_GROUP_TOPIC_PREFIX)
    {
        props.insert(keys::REAL_TOPIC, t.topic.clone().into_owned());
        props.insert(keys::REAL_QUEUE_ID, t.queue_id.to_string());
        t.topic = Cow::Borrowed(names::TRANS_HALF_TOPIC);
        t.queue_id = 0;
        t.sys_flag = sysflag::with_transaction_type(t.sys_flag, sysflag::TRANSACTION_NOT_TYPE);
        ctx.topics
            .create_if_absent(names::TRANS_HALF_TOPIC, 1, perm::READ | perm::WRITE)?;
        return Ok(t);
    }
    if tx_type == sysflag::TRANSACTION_PREPARED_TYPE
        || tx_type == sysflag::TRANSACTION_ROLLBACK_TYPE
    {
        t.take_offset = false;
    }
    let level = delay_level_of(props.get(keys::DELAY_TIME_LEVEL))?;
    if level > 0
        && (tx_type == sysflag::TRANSACTION_NOT_TYPE || tx_type == sysflag::TRANSACTION_COMMIT_TYPE)
    {
        let max_level = ctx.config.message_delay_level_ms.len().max(1) as i32;
        let level = level.min(max_level);
        props.insert(keys::DELAY_TIME_LEVEL, level.to_string());
        props.insert(keys::REAL_TOPIC, t.topic.clone().into_owned());
        props.insert(keys::REAL_QUEUE_ID, t.queue_id.to_string());
        t.topic = Cow::Borrowed(names::SCHEDULE_TOPIC);
        t.queue_id = level - 1;
    }
    Ok(t)
}

/// The answer to a single send: offset msgId, queue, queue offset and `UNIQ_KEY`.
fn single_response(
    ctx: &BrokerContext,
    queue_id: i32,
    r: &PutOne,
    uniq: Option<&str>,
) -> RemotingCommand {
    let id = OffsetMsgId::new(ctx.store_host, physical_offset(&r.position));
    success_response(ctx, id.as_str(), queue_id, r.queue_offset, uniq)
}

/// The answer to a send whose msgId text is `msg_id` (a batch: the ids joined with `,`).
/// The fields are given in key order (upper case sorts first), numbers formatted on the
/// stack, so the map is built in one pass.
fn success_response(
    ctx: &BrokerContext,
    msg_id: &str,
    queue_id: i32,
    queue_offset: i64,
    uniq: Option<&str>,
) -> RemotingCommand {
    let trace = if ctx.config.trace_on { "true" } else { "false" };
    let mut queue_id_text = itoa::Buffer::new();
    let mut queue_offset_text = itoa::Buffer::new();
    let fields = [
        (keys::MSG_REGION, ctx.config.region_id.as_str()),
        (keys::TRACE_SWITCH, trace),
        ("msgId", msg_id),
        ("queueId", queue_id_text.format(queue_id)),
        ("queueOffset", queue_offset_text.format(queue_offset)),
        ("transactionId", uniq.unwrap_or_default()),
    ];
    let n = if uniq.is_some() { 6 } else { 5 };
    let mut resp = RemotingCommand::success();
    *resp.ext_fields_mut() = ExtFields::from_sorted_pairs(&fields[..n]);
    resp
}

/// Properties of a plain single send (no retry topic, no transaction flag, no delay, no
/// half message, no CLUSTER from the client, canonical encoding): the client's bytes with
/// `UNIQ_KEY` (when missing) and `CLUSTER` appended, and the message's `UNIQ_KEY`. These are
/// exactly the bytes the general path (parse, [`rewrite`], insert, encode) would produce, without
/// its per-pair allocations. `None` means: take the general path.
fn plain_send_properties(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'_>,
    now: i64,
) -> Option<(BytesMut, UniqKey)> {
    let client = h.properties.unwrap_or_default().as_bytes();
    let cluster = ctx.config.broker_cluster_name.as_str();
    if h.topic.starts_with(names::RETRY_GROUP_TOPIC_PREFIX)
        || sysflag::transaction_type(h.sys_flag) != sysflag::TRANSACTION_NOT_TYPE
        || cluster.is_empty()
        || !properties::is_canonical(client)
    {
        return None;
    }
    // One pass over the client's properties for every key that matters here.
    let [delay, prepared, client_cluster, origin, client_uniq] = properties::find_properties(
        client,
        [
            keys::DELAY_TIME_LEVEL,
            keys::TRANSACTION_PREPARED,
            keys::CLUSTER,
            SCHEDULE_ORIGIN_PROPERTY,
            keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        ],
    );
    if delay.is_some() || prepared.is_some() || client_cluster.is_some() || origin.is_some() {
        return None;
    }
    let mut out = BytesMut::with_capacity(client.len() + 64 + cluster.len());
    out.extend_from_slice(client);
    let uniq = match client_uniq {
        // Canonical strings are valid UTF-8.
        Some(v) => UniqKey::new(std::str::from_utf8(v).ok()?),
        None => {
            let id = ctx.uniq_keys.next_id(now);
            properties::append_property(&mut out, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, &id).ok()?;
            id
        }
    };
    properties::append_property(&mut out, keys::CLUSTER, cluster).ok()?;
    Some((out, uniq))
}

/// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE.
///
/// The header is read as views into the request (it lives in this future), a single send
/// is stored through [`crate::store::MessageStore::put_record`], and the batch path runs in
/// its own boxed future: this future is boxed per request, and kept small it comes from the
/// allocator's per-thread cache instead of its slow path.
pub async fn send(
    ctx: Arc<BrokerContext>,
    conn: ConnectionHandle,
    mut req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let body = req.take_body();
    let h = SendMessageHeaderView::read(&req)?;
    check_writable(&ctx)?;
    let (cfg, created_topic) = topic_for_send(&ctx, &h)?;
    let queue_id = pick_queue(&h, &cfg);
    let limits = ctx.config.message_limits();
    if body.len() > limits.max_body_bytes {
        // A batch's whole body is held to the same limit (Java `checkMessages`).
        let what = if h.is_batch() { "batch body" } else { "body" };
        return Err(BrokerError::PutIllegal {
            cause: format!(
                "message {what} size exceeded, {} > {}",
                body.len(),
                limits.max_body_bytes
            ),
            max_body_bytes: limits.max_body_bytes,
        });
    }
    let now = now_ms();
    let mut sys_flag_extra = 0;
    if cfg.multi_tag {
        sys_flag_extra |= sysflag::MULTI_TAGS;
    }
    let born_host = conn.remote_addr();
    drop(conn);
    if h.is_batch() {
        let batch = Batch {
            queue_id,
            sys_flag_extra,
            now,
            born_host,
            created_topic,
        };
        return Box::pin(send_batch(&ctx, &h, body, batch)).await;
    }
    let (t, record, uniq) =
        encode_single(&ctx, &h, queue_id, &body, now, born_host, sys_flag_extra)?;
    drop(body);
    if let Some(topic) = created_topic {
        log_created_topic(&ctx, topic).await?;
    }
    let r = ctx
        .store
        .put_record(&t.topic, t.queue_id, record, t.take_offset)
        .await?;
    Ok(single_response(&ctx, queue_id, &r, uniq.as_deref()))
}

/// What a batch send needs besides its header and body.
struct Batch {
    queue_id: i32,
    sys_flag_extra: i32,
    now: i64,
    born_host: SocketAddr,
    /// A topic this send auto-created (see [`log_created_topic`]).
    created_topic: Option<TopicConfig>,
}

/// Puts a topic the send auto-created from the default topic into the log, once every check
/// of the send passed and before its message, so the next master serves it (a refused send
/// writes nothing to the log). Boxed: only a topic's first send takes this path.
async fn log_created_topic(ctx: &BrokerContext, topic: TopicConfig) -> Result<(), BrokerError> {
    Box::pin(crate::metadata::put_topic(ctx, topic)).await
}

/// The stored record of a single send, where it goes, and its `UNIQ_KEY`.
#[allow(clippy::too_many_arguments)]
fn encode_single<'h>(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'h>,
    queue_id: i32,
    body: &[u8],
    now: i64,
    born_host: SocketAddr,
    sys_flag_extra: i32,
) -> Result<(Target<'h>, BytesMut, Option<UniqKey>), BrokerError> {
    let (t, encoded, uniq) = match plain_send_properties(ctx, h, now) {
        Some((encoded, uniq)) => (
            Target {
                topic: Cow::Borrowed(h.topic),
                queue_id,
                sys_flag: h.sys_flag,
                take_offset: true,
            },
            encoded,
            Some(uniq),
        ),
        None => {
            let mut props = MessageProperties::parse(h.properties.unwrap_or_default().as_bytes())?;
            // Only the schedule service may write the delivery marker (see delay_offsets).
            props.remove(SCHEDULE_ORIGIN_PROPERTY);
            let t = rewrite(ctx, h, queue_id, &mut props)?;
            if props.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).is_none() {
                props.insert(
                    keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                    ctx.uniq_keys.next_id(now).to_string(),
                );
            }
            props.insert(keys::CLUSTER, ctx.config.broker_cluster_name.clone());
            let uniq = props
                .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                .map(UniqKey::new);
            let encoded = props
                .encode()
                .map_err(|e| refused_record(&ctx.config.message_limits(), e))?;
            (t, encoded, uniq)
        }
    };
    let fields = RecordFields {
        queue_id: t.queue_id,
        flag: h.flag,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: t.sys_flag | sys_flag_extra,
        born_timestamp: h.born_timestamp,
        born_host,
        store_timestamp: now,
        store_host: ctx.store_host,
        reconsume_times: h.reconsume_times.unwrap_or(0),
        prepared_transaction_offset: 0,
        body,
        topic: &t.topic,
        properties: &encoded,
    };
    let buf = encode_stored(ctx, &fields)?;
    Ok((t, buf, uniq))
}

/// Size of the slabs stored records are encoded into (a record larger than this gets a
/// buffer of its own size).
const RECORD_SLAB_BYTES: usize = 64 << 10;

thread_local! {
    /// This worker thread's slab for encoding stored records.
    static RECORD_SLAB: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// One stored record within the broker's message limits, split off this thread's slab: a
/// record is ~1 KiB or more, and glibc serves each allocation of that size from its slow path
/// (consolidating its fast bins first), so records share 64 KiB slabs instead, one allocation
/// per ~50 records of 1 KiB. A slab's memory is freed when its last record is dropped (once
/// the ledger has written it).
fn encode_stored(ctx: &BrokerContext, fields: &RecordFields<'_>) -> Result<BytesMut, BrokerError> {
    let limits = ctx.config.message_limits();
    RECORD_SLAB.with(|slab| {
        encode_in_slab(&mut slab.borrow_mut(), fields, &limits)
            .map_err(|e| refused_record(&limits, e))
    })
}

/// Encodes one record at the end of `slab` and splits it off.
fn encode_in_slab(
    slab: &mut BytesMut,
    fields: &RecordFields<'_>,
    limits: &MessageLimits,
) -> Result<BytesMut, MessageError> {
    if slab.capacity() == 0 {
        // A fresh slab; once split, `reserve` refills with slabs of this size.
        *slab = BytesMut::with_capacity(RECORD_SLAB_BYTES);
    }
    let encoded = encode_record(fields, limits, MagicPolicy::Auto, slab);
    let record = slab.split();
    encoded?;
    Ok(record)
}

/// SEND_BATCH_MESSAGE (or a send with the batch flag): every element stored as its own
/// record, consecutive in the log and in the queue.
async fn send_batch(
    ctx: &BrokerContext,
    h: &SendMessageHeaderView<'_>,
    body: Bytes,
    b: Batch,
) -> Result<RemotingCommand, BrokerError> {
    let limits = ctx.config.message_limits();
    let queue_id = b.queue_id;
    let store_host = ctx.store_host;
    if h.topic.starts_with(names::RETRY_GROUP_TOPIC_PREFIX) {
        return Err(BrokerError::MessageIllegal(format!(
            "batch request does not support retry group {}",
            h.topic
        )));
    }
    // Java's CommitLog.putMessages refuses a batch of any transaction type (PREPARED, COMMIT
    // and ROLLBACK alike): PREPARED and ROLLBACK records are never dispatched, so a batch of
    // them would take queue offsets no consume-queue unit ever fills.
    let tx_type = sysflag::transaction_type(h.sys_flag);
    if tx_type != sysflag::TRANSACTION_NOT_TYPE {
        return Err(BrokerError::PutIllegal {
            cause: format!(
                "batch message does not support transaction, sysFlag {}",
                h.sys_flag
            ),
            max_body_bytes: limits.max_body_bytes,
        });
    }
    // ... and a batch whose own properties carry a delay level.
    let header_props = h.properties.unwrap_or_default().as_bytes();
    let header_delay = properties::find_property(header_props, keys::DELAY_TIME_LEVEL)
        .map(|v| String::from_utf8_lossy(v).into_owned());
    if delay_level_of(header_delay.as_deref())? > 0 {
        return Err(BrokerError::PutIllegal {
            cause: "batch message does not support delay level".into(),
            max_body_bytes: limits.max_body_bytes,
        });
    }
    let mut records = Vec::new();
    let mut uniqs = Vec::new();
    let mut buf = BytesMut::new();
    for el in decode_batch(body, limits.max_body_bytes) {
        let el = el.map_err(|e| BrokerError::MessageIllegal(format!("bad batch body: {e}")))?;
        let mut props = MessageProperties::parse(&el.properties)?;
        if delay_level_of(props.get(keys::DELAY_TIME_LEVEL))? > 0 {
            return Err(BrokerError::MessageIllegal(
                "batch message with delay level is not supported".into(),
            ));
        }
        if props
            .get(keys::TRANSACTION_PREPARED)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Err(BrokerError::MessageIllegal(
                "batch transactional message is not supported".into(),
            ));
        }
        // Only the schedule service may write the delivery marker (see delay_offsets).
        props.remove(SCHEDULE_ORIGIN_PROPERTY);
        if props.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).is_none() {
            props.insert(
                keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                ctx.uniq_keys.next_id(b.now).to_string(),
            );
        }
        props.insert(keys::CLUSTER, ctx.config.broker_cluster_name.clone());
        uniqs.push(
            props
                .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                .unwrap_or_default()
                .to_owned(),
        );
        let encoded = props.encode().map_err(|e| refused_record(&limits, e))?;
        let fields = RecordFields {
            queue_id,
            flag: el.flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: h.sys_flag | b.sys_flag_extra,
            born_timestamp: h.born_timestamp,
            born_host: b.born_host,
            store_timestamp: b.now,
            store_host,
            reconsume_times: h.reconsume_times.unwrap_or(0),
            prepared_transaction_offset: 0,
            body: &el.body,
            topic: h.topic,
            properties: &encoded,
        };
        encode_record(&fields, &limits, MagicPolicy::Auto, &mut buf)
            .map_err(|e| refused_record(&limits, e))?;
        records.push(buf.split());
    }
    if records.is_empty() {
        return Err(BrokerError::MessageIllegal("empty batch".into()));
    }
    if let Some(topic) = b.created_topic {
        log_created_topic(ctx, topic).await?;
    }
    let r = ctx
        .store
        .put_records(h.topic, queue_id, records, true)
        .await?;
    let ids: Vec<String> = r
        .positions
        .iter()
        .map(|p| offset_msg_id(store_host, physical_offset(p)))
        .collect();
    let uniq = uniqs.join(",");
    Ok(success_response(
        ctx,
        &ids.join(","),
        queue_id,
        r.first_queue_offset,
        Some(&uniq),
    ))
}

/// CONSUMER_SEND_MSG_BACK: re-store a consumed message into `%RETRY%<group>` (through the
/// schedule topic for the delay level) or `%DLQ%<group>` once retries are exhausted.
pub async fn consumer_send_back(
    ctx: Arc<BrokerContext>,
    conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: ConsumerSendMsgBackRequestHeader = req.decode_header()?;
    if ctx.role.role() != ServingRole::Master {
        return Err(BrokerError::System(format!(
            "no master available along with {}",
            ctx.config.broker_ip1
        )));
    }
    let Some(group_cfg) = find_group(&ctx, &h.group)? else {
        return Err(BrokerError::SubscriptionGroupNotExist(h.group.clone()));
    };
    // Java: a group with no retry queues gets its send-backs answered and dropped.
    let Some(retry_queues) = retry_queue_nums(&ctx, &group_cfg) else {
        return Ok(RemotingCommand::success());
    };
    // No physical offset is negative; Java's lookup finds nothing there either.
    let found = if h.offset < 0 {
        None
    } else {
        ctx.store.read_message(h.offset)
    };
    let Some(raw) = found else {
        return Err(BrokerError::System(format!(
            "look message by offset failed, {}",
            h.offset
        )));
    };
    let view = RecordView::parse(&raw, CrcCheck::Skip)?;
    let mut props = MessageProperties::parse(view.properties)?;
    if props.get(keys::RETRY_TOPIC).is_none() {
        props.insert(keys::RETRY_TOPIC, view.topic.to_owned());
    }
    props.insert(keys::WAIT_STORE_MSG_OK, "false");
    let max = h.max_reconsume_times.unwrap_or(group_cfg.retry_max_times);
    let reconsume = view.reconsume_times;
    let mut delay_level = h.delay_level;
    let (topic, queue_id) = if reconsume >= max || delay_level < 0 {
        let dlq = ctx.topics.create_dlq_topic(&h.group)?;
        if !perm::is_writeable(dlq.perm) {
            return Err(BrokerError::NoPermission(format!(
                "the topic[{}] sending message is forbidden",
                dlq.topic_name
            )));
        }
        delay_level = 0;
        (dlq.topic_name, 0)
    } else {
        let retry = ctx.topics.create_retry_topic(&h.group, retry_queues)?;
        if delay_level == 0 {
            // The record's count is whatever a client sent: never overflow on it.
            delay_level = reconsume.saturating_add(3);
        }
        let n = retry.write_queue_nums.max(1) as i64;
        (retry.topic_name, (now_ms().rem_euclid(n)) as i32)
    };
    if let Some(orig) = &h.origin_msg_id {
        if props.get(keys::ORIGIN_MESSAGE_ID).is_none() {
            props.insert(keys::ORIGIN_MESSAGE_ID, orig.clone());
        }
    }
    let (mut store_topic, mut store_queue) = (topic.clone(), queue_id);
    if delay_level > 0 {
        let max_level = ctx.config.message_delay_level_ms.len().max(1) as i32;
        let level = delay_level.min(max_level);
        props.insert(keys::DELAY_TIME_LEVEL, level.to_string());
        props.insert(keys::REAL_TOPIC, topic.clone());
        props.insert(keys::REAL_QUEUE_ID, queue_id.to_string());
        store_topic = names::SCHEDULE_TOPIC.to_owned();
        store_queue = level - 1;
    }
    let encoded = props
        .encode()
        .map_err(|e| refused_record(&ctx.config.message_limits(), e))?;
    let now = now_ms();
    let fields = RecordFields {
        queue_id: store_queue,
        flag: view.flag,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: view.sys_flag,
        born_timestamp: view.born_timestamp,
        born_host: conn.remote_addr(),
        store_timestamp: now,
        store_host: ctx.store_host,
        reconsume_times: reconsume.saturating_add(1),
        prepared_transaction_offset: 0,
        body: view.body,
        topic: &store_topic,
        properties: &encoded,
    };
    let buf = encode_stored(&ctx, &fields)?;
    ctx.store
        .put_records(&store_topic, store_queue, vec![buf], true)
        .await?;
    Ok(RemotingCommand::success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(body: &'a [u8], queue_offset: i64) -> RecordFields<'a> {
        RecordFields {
            queue_id: 3,
            queue_offset,
            ..crate::store::test_support::record_fields("T", body, b"TAGS\x01a\x02")
        }
    }

    /// Records split off a slab are exactly what a buffer of their own would hold, stay
    /// intact while later records fill (and outgrow) the slab, including records larger
    /// than a slab, and a refused record leaves nothing behind.
    #[test]
    fn slab_records_equal_own_buffer_records() {
        let limits = MessageLimits::default();
        let mut slab = BytesMut::new();
        let bodies: Vec<Vec<u8>> = (0..200usize)
            .map(|i| {
                vec![
                    i as u8;
                    if i % 50 == 7 {
                        3 * RECORD_SLAB_BYTES
                    } else {
                        1000 + i
                    }
                ]
            })
            .collect();
        let mut kept = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            let mut r = encode_in_slab(&mut slab, &fields(b, 0), &limits).unwrap();
            crate::message::record::patch_queue_offset(&mut r, i as i64).unwrap();
            kept.push(r.freeze());
        }
        for (i, (b, r)) in bodies.iter().zip(&kept).enumerate() {
            let mut own = BytesMut::new();
            encode_record(&fields(b, i as i64), &limits, MagicPolicy::Auto, &mut own).unwrap();
            assert_eq!(&own[..], &r[..], "record {i}");
        }
        let too_big = vec![0u8; limits.max_body_bytes + 1];
        assert!(encode_in_slab(&mut slab, &fields(&too_big, 0), &limits).is_err());
        let next = encode_in_slab(&mut slab, &fields(b"x", 0), &limits).unwrap();
        let mut own = BytesMut::new();
        encode_record(&fields(b"x", 0), &limits, MagicPolicy::Auto, &mut own).unwrap();
        assert_eq!(&own[..], &next[..]);
    }
}
