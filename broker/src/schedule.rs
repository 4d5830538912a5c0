//! Delay-level message service (master only; message-format.md §5.2, broker-roles.md §4).
//!
//! A send with `DELAY = n` is stored by the send path in `SCHEDULE_TOPIC_XXXX` queue `n - 1`
//! with `REAL_TOPIC` / `REAL_QID`; the dispatcher writes the delivery time
//! (store time + level delay) into the consume-queue tag code. This service walks each level's
//! queue from its delay offset, and for every due unit re-proposes the message through the
//! commit log under its real topic and queue (`DELAY` removed, `WAIT=false`, as Java's
//! `messageTimeup`), then advances the level's delay offset. Units of one level are in
//! delivery-time order (same delay, store-time order), so the walk stops at the first unit not
//! yet due.
//!
//! Failure handling: a refused or indeterminate re-proposal leaves the offset where it is and
//! the unit is retried on the next round (an indeterminate one may then exist twice: delayed
//! messages are at-least-once). Offsets are persisted by the context's periodic task and
//! copied to slaves by slave sync.
//!
//! Progress from the log: every delivered record carries
//! [`SCHEDULE_ORIGIN_PROPERTY`] (level, schedule-queue offset, physical offset of the unit).
//! The dispatcher on every member turns committed deliveries into the log-derived delay
//! offset, and each round starts at the larger of that and the service offset
//! ([`DelayOffsetTable::get`](crate::store::DelayOffsetTable::get)). So a new master resumes
//! exactly after the last committed delivery instead of the last synced offset (MP-12: no
//! duplicates from the failover), and an indeterminate delivery that did commit is not
//! repeated either.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio_util::sync::CancellationToken;

use crate::context::{now_ms, BrokerContext};
use crate::error::BrokerError;
use crate::message::properties::keys;
use crate::message::record::{encode_record, CrcCheck, MagicPolicy, MessageLimits, RecordView};
use crate::message::{topic as names, MessageProperties};
use crate::store::delay_offsets::{ScheduleOrigin, SCHEDULE_ORIGIN_PROPERTY};

/// Idle wait between rounds when nothing is due sooner.
pub const DEFAULT_POLL: Duration = Duration::from_millis(100);
/// Consume-queue units read per batch.
const UNITS_PER_READ: usize = 32;
/// Deliveries per level per round, so one busy level cannot starve the others.
const MAX_DELIVERIES_PER_ROUND: usize = 1024;

/// Java `correctDeliverTimestamp`: a delivery time further in the future than the level's
/// delay (clock stepped back, or a changed level table) is delivered now.
pub fn corrected_deliver_time(deliver_ms: i64, now_ms: i64, level_delay_ms: i64) -> i64 {
    if deliver_ms > now_ms.saturating_add(level_delay_ms) {
        now_ms
    } else {
        deliver_ms
    }
}

/// Queue id of a 1-based level in `SCHEDULE_TOPIC_XXXX`.
pub fn queue_id_of_level(level: i32) -> i32 {
    level - 1
}

/// A schedule-topic record turned back into a message of its real topic.
#[derive(Debug)]
pub struct Restored {
    pub topic: String,
    pub queue_id: i32,
    pub record: BytesMut,
}

/// Builds the real-topic record from a stored `SCHEDULE_TOPIC_XXXX` record, marked with its
/// `origin`. `Ok(None)` means the record must be dropped (no usable `REAL_TOPIC`/`REAL_QID`,
/// or a half-message topic, which Java discards as a bug).
pub fn restore_delayed(
    raw: &[u8],
    limits: &MessageLimits,
    now_ms: i64,
    origin: &ScheduleOrigin,
) -> Result<Option<Restored>, BrokerError> {
    let view = RecordView::parse(raw, CrcCheck::Skip)?;
    let mut props = MessageProperties::parse(view.properties)?;
    let Some(topic) = props.get(keys::REAL_TOPIC).map(str::to_owned) else {
        return Ok(None);
    };
    let Some(queue_id) = props
        .get(keys::REAL_QUEUE_ID)
        .and_then(|q| q.trim().parse::<i32>().ok())
        .filter(|q| *q >= 0)
    else {
        return Ok(None);
    };
    if topic == names::TRANS_HALF_TOPIC || topic == names::SCHEDULE_TOPIC {
        return Ok(None);
    }
    props.remove(keys::DELAY_TIME_LEVEL);
    props.insert(keys::WAIT_STORE_MSG_OK, "false");
    props.insert(SCHEDULE_ORIGIN_PROPERTY, origin.encode());
    let encoded = match props.encode() {
        Ok(e) => e,
        Err(e) => {
            // Properties at the size limit: deliver unmarked (progress then comes from the
            // service offset only) rather than drop the message.
            tracing::warn!(error = %e, "no room for the schedule-origin marker");
            props.remove(SCHEDULE_ORIGIN_PROPERTY);
            props.encode()?
        }
    };
    let mut fields = view.fields();
    fields.topic = &topic;
    fields.queue_id = queue_id;
    fields.queue_offset = 0;
    fields.physical_offset = 0;
    fields.store_timestamp = now_ms;
    fields.properties = &encoded;
    let mut record = BytesMut::new();
    encode_record(&fields, limits, MagicPolicy::Auto, &mut record)?;
    Ok(Some(Restored {
        topic,
        queue_id,
        record,
    }))
}

/// What one pass over a level did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LevelRound {
    /// Messages re-proposed to their real topic.
    pub delivered: usize,
    /// Records dropped (unusable).
    pub dropped: usize,
    /// Delivery time of the first unit not yet due.
    pub next_due_ms: Option<i64>,
}

/// Delivers every due message of `level` (1-based). Stops at the first unit not yet due, or
/// at the first failed re-proposal (returned as the error; the offset stays before it).
pub async fn deliver_level(
    ctx: &BrokerContext,
    level: i32,
    now: i64,
) -> Result<LevelRound, BrokerError> {
    let mut round = LevelRound::default();
    let Some(delay_ms) = ctx.config.delay_ms_of_level(level) else {
        return Ok(round);
    };
    let Some(cq) = ctx
        .store
        .consume_queues()
        .get(names::SCHEDULE_TOPIC, queue_id_of_level(level))
    else {
        return Ok(round);
    };
    let limits = ctx.config.message_limits();
    let mut offset = ctx
        .delay_offsets
        .get(level)
        .unwrap_or(0)
        .max(cq.min_offset());
    while round.delivered + round.dropped < MAX_DELIVERIES_PER_ROUND {
        if offset >= cq.max_offset() {
            break;
        }
        let units = cq.read_units(offset, UNITS_PER_READ)?;
        if units.is_empty() {
            break;
        }
        for u in units {
            if u.is_blank() {
                // A hole in a repaired queue: no delayed message there.
                offset += 1;
                ctx.delay_offsets.update(level, offset);
                continue;
            }
            let due = corrected_deliver_time(u.tag_code, now, delay_ms);
            if due > now {
                round.next_due_ms = Some(due);
                ctx.delay_offsets.update(level, offset);
                return Ok(round);
            }
            let origin = ScheduleOrigin {
                level,
                queue_offset: offset,
                physical_offset: u.physical_offset,
            };
            let restored = match ctx.store.read_message(u.physical_offset) {
                Some(raw) => restore_delayed(&raw, &limits, now_ms(), &origin),
                None => Ok(None),
            };
            match restored {
                Ok(Some(r)) => {
                    ctx.ensure_topic(&r.topic, r.queue_id)?;
                    ctx.store
                        .put_records(&r.topic, r.queue_id, vec![r.record], true)
                        .await?;
                    round.delivered += 1;
                }
                Ok(None) => {
                    tracing::warn!(level, offset, "dropping unusable delayed message");
                    round.dropped += 1;
                }
                Err(e) => {
                    tracing::warn!(level, offset, error = %e, "dropping undecodable delayed message");
                    round.dropped += 1;
                }
            }
            offset += 1;
            ctx.delay_offsets.update(level, offset);
        }
    }
    Ok(round)
}

/// Runs rounds over all levels until `stop` is cancelled. Sleeps until the earliest next
/// delivery time, at most `poll`.
pub async fn run(ctx: Arc<BrokerContext>, stop: CancellationToken, poll: Duration) {
    let levels = ctx.config.message_delay_level_ms.len() as i32;
    let resume: Vec<(i32, i64, i64)> = (1..=levels)
        .filter_map(|l| {
            let from_log = ctx.delay_offsets.delivered(l);
            let service = ctx.delay_offsets.service_offset(l);
            (from_log.is_some() || service.is_some())
                .then(|| (l, service.unwrap_or(-1), from_log.unwrap_or(-1)))
        })
        .collect();
    tracing::info!(
        levels,
        ?resume,
        "schedule message service started (level, service offset, log-derived offset)"
    );
    let mut backoff = false;
    loop {
        if stop.is_cancelled() {
            break;
        }
        let now = now_ms();
        let mut wait = poll;
        for level in 1..=levels {
            if stop.is_cancelled() {
                break;
            }
            match deliver_level(&ctx, level, now).await {
                Ok(r) => {
                    if r.delivered > 0 {
                        tracing::debug!(
                            level,
                            delivered = r.delivered,
                            "delayed messages delivered"
                        );
                    }
                    if let Some(due) = r.next_due_ms {
                        let ms = (due - now_ms()).clamp(1, poll.as_millis() as i64) as u64;
                        wait = wait.min(Duration::from_millis(ms));
                    }
                    backoff = false;
                }
                Err(e) => {
                    if !backoff {
                        tracing::warn!(level, error = %e, "delivering delayed messages failed; will retry");
                    }
                    backoff = true;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    tracing::info!("schedule message service stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::record::RecordFields;
    use std::net::SocketAddr;

    #[test]
    fn deliver_time_correction_matches_java() {
        assert_eq!(corrected_deliver_time(1_500, 1_000, 1_000), 1_500);
        assert_eq!(corrected_deliver_time(2_000, 1_000, 1_000), 2_000);
        assert_eq!(corrected_deliver_time(2_001, 1_000, 1_000), 1_000);
        assert_eq!(corrected_deliver_time(500, 1_000, 1_000), 500);
    }

    #[test]
    fn default_levels_and_queue_ids() {
        let levels =
            crate::config::parse_delay_levels(crate::config::DEFAULT_MESSAGE_DELAY_LEVEL).unwrap();
        assert_eq!(levels.len(), 18);
        assert_eq!(levels[0], 1_000);
        assert_eq!(levels[2], 10_000);
        assert_eq!(levels[4], 60_000);
        assert_eq!(levels[17], 7_200_000);
        assert_eq!(queue_id_of_level(1), 0);
        assert_eq!(queue_id_of_level(18), 17);
    }

    const ORIGIN: ScheduleOrigin = ScheduleOrigin {
        level: 3,
        queue_offset: 17,
        physical_offset: 1234,
    };

    fn schedule_record(props: &MessageProperties) -> BytesMut {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let encoded = props.encode().unwrap();
        let f = RecordFields {
            queue_id: 2,
            flag: 7,
            queue_offset: 5,
            physical_offset: 1234,
            sys_flag: 0,
            born_timestamp: 111,
            born_host: host,
            store_timestamp: 222,
            store_host: host,
            reconsume_times: 1,
            prepared_transaction_offset: 0,
            body: b"payload",
            topic: names::SCHEDULE_TOPIC,
            properties: &encoded,
        };
        let mut out = BytesMut::new();
        encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut out).unwrap();
        out
    }

    #[test]
    fn restore_moves_to_real_topic_and_drops_delay() {
        let mut p = MessageProperties::new();
        p.insert(keys::DELAY_TIME_LEVEL, "3");
        p.insert(keys::REAL_TOPIC, "Orders");
        p.insert(keys::REAL_QUEUE_ID, "5");
        p.insert(keys::TAGS, "tagA");
        p.insert(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "U1");
        let raw = schedule_record(&p);
        let r = restore_delayed(&raw, &MessageLimits::default(), 999, &ORIGIN)
            .unwrap()
            .unwrap();
        assert_eq!(r.topic, "Orders");
        assert_eq!(r.queue_id, 5);
        let v = RecordView::parse(&r.record, CrcCheck::Verify).unwrap();
        assert_eq!(v.topic, "Orders");
        assert_eq!(v.queue_id, 5);
        assert_eq!(v.body, b"payload");
        assert_eq!(v.flag, 7);
        assert_eq!(v.born_timestamp, 111);
        assert_eq!(v.store_timestamp, 999);
        assert_eq!(v.reconsume_times, 1);
        let props = MessageProperties::parse(v.properties).unwrap();
        assert_eq!(props.get(keys::DELAY_TIME_LEVEL), None);
        assert_eq!(props.get(keys::TAGS), Some("tagA"));
        assert_eq!(props.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX), Some("U1"));
        assert_eq!(props.get(keys::WAIT_STORE_MSG_OK), Some("false"));
        assert_eq!(props.get(SCHEDULE_ORIGIN_PROPERTY), Some("3:17:1234"));
    }

    #[test]
    fn restore_drops_records_without_a_usable_target() {
        let mut p = MessageProperties::new();
        p.insert(keys::DELAY_TIME_LEVEL, "1");
        let raw = schedule_record(&p);
        assert!(restore_delayed(&raw, &MessageLimits::default(), 1, &ORIGIN)
            .unwrap()
            .is_none());
        p.insert(keys::REAL_TOPIC, "T");
        p.insert(keys::REAL_QUEUE_ID, "x");
        let raw = schedule_record(&p);
        assert!(restore_delayed(&raw, &MessageLimits::default(), 1, &ORIGIN)
            .unwrap()
            .is_none());
        p.insert(keys::REAL_TOPIC, names::TRANS_HALF_TOPIC);
        p.insert(keys::REAL_QUEUE_ID, "0");
        let raw = schedule_record(&p);
        assert!(restore_delayed(&raw, &MessageLimits::default(), 1, &ORIGIN)
            .unwrap()
            .is_none());
        assert!(restore_delayed(b"garbage", &MessageLimits::default(), 1, &ORIGIN).is_err());
    }
}
