//! Transaction check service (Java `TransactionalMessageCheckService`; master only).
//!
//! Every `transactionCheckInterval` one round runs over each half queue:
//! 1. read the op records from the op offset → the half offsets already decided;
//! 2. walk the half queue from the half offset: decided → skip; checked
//!    `transactionCheckMax` times → discard to `TRANS_CHECK_MAX_TIME_TOPIC`; stored after the
//!    round started or younger than the immunity time (`transactionTimeOut`, or
//!    `CHECK_IMMUNITY_TIME_IN_SECONDS` before the first check) → stop; otherwise put the
//!    half message back with `TRANSACTION_CHECK_TIMES + 1` and send CHECK_TRANSACTION_STATE
//!    (oneway) for the new copy to one live producer connection of its group;
//! 3. store the new half/op offsets as consumer offsets of [`super::SYS_TRANS_GROUP`].
//!
//! Put-back comes before the check request, so the producer's answer names a copy whose
//! op record will be found later; the old copy is behind the half offset.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use remoting::custom_headers::CheckTransactionStateRequestHeader;
use remoting::{RemotingCommand, RequestCode};
use tokio_util::sync::CancellationToken;

use super::op::{parse_op_body, OpScan};
use super::SYS_TRANS_GROUP;
use crate::context::{now_ms, BrokerContext};
use crate::error::BrokerError;
use crate::message::properties::keys;
use crate::message::record::{encode_record, CrcCheck, MagicPolicy, RecordView};
use crate::message::{offset_msg_id, topic as names, MessageProperties};
use crate::store::commit_log::physical_offset;
use crate::store::topics::perm;

/// Op records read per round and queue (bounds memory).
const MAX_OPS_PER_ROUND: usize = 8192;
/// Half messages examined per round and queue.
const MAX_HALVES_PER_ROUND: usize = 4096;
/// A round stops starting new work after this long (Java: 60 s).
const MAX_ROUND_TIME: Duration = Duration::from_secs(60);

/// Check settings from the broker config.
#[derive(Debug, Clone, Copy)]
pub struct CheckSettings {
    /// `transactionCheckInterval`.
    pub interval: Duration,
    /// `transactionTimeOut`: minimum age before the first check.
    pub timeout_ms: i64,
    /// `transactionCheckMax`.
    pub check_max: i32,
}

impl CheckSettings {
    /// From `transactionCheckInterval`, `transactionTimeOut`, `transactionCheckMax`.
    pub fn from_config(cfg: &crate::config::BrokerConfig) -> Self {
        CheckSettings {
            interval: Duration::from_millis(cfg.transaction_check_interval_ms.max(10)),
            timeout_ms: cfg.transaction_timeout_ms as i64,
            check_max: i32::try_from(cfg.transaction_check_max).unwrap_or(i32::MAX),
        }
    }
}

/// What to do with one half message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfDecision {
    /// An op record exists: skip it.
    Decided,
    /// Checked too often: discard.
    Discard,
    /// Too young (or stored during this round): stop the walk here.
    NotYet,
    /// Put back and ask the producer.
    Check,
}

/// Facts about one half message.
#[derive(Debug, Clone, Copy)]
pub struct HalfFacts {
    pub decided: bool,
    pub check_times: i32,
    pub born_ms: i64,
    pub store_ms: i64,
    /// `CHECK_IMMUNITY_TIME_IN_SECONDS` × 1000, when set.
    pub immunity_ms: Option<i64>,
}

/// Candidate selection (pure): Java's order of tests.
pub fn decide(f: &HalfFacts, s: &CheckSettings, round_start_ms: i64, now_ms: i64) -> HalfDecision {
    if f.decided {
        return HalfDecision::Decided;
    }
    if f.check_times >= s.check_max {
        return HalfDecision::Discard;
    }
    if f.store_ms >= round_start_ms {
        return HalfDecision::NotYet;
    }
    let immunity = match f.immunity_ms {
        Some(ms) if f.check_times == 0 => ms,
        _ => s.timeout_ms,
    };
    let age = now_ms - f.born_ms;
    if age >= 0 && age < immunity {
        return HalfDecision::NotYet;
    }
    HalfDecision::Check
}

/// What one round did (tests and logs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RoundStats {
    pub checked: usize,
    pub discarded: usize,
    pub skipped_decided: usize,
    /// Check requests actually sent (a producer connection existed).
    pub requests_sent: usize,
}

fn facts(view: &RecordView<'_>, decided: bool) -> HalfFacts {
    let num = |k: &str| {
        view.property(k)
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    HalfFacts {
        decided,
        check_times: num(keys::TRANSACTION_CHECK_TIMES)
            .map_or(0, |v| v.clamp(0, i32::MAX as i64) as i32),
        born_ms: view.born_timestamp,
        store_ms: view.store_timestamp,
        immunity_ms: num(keys::CHECK_IMMUNITY_TIME_IN_SECONDS).map(|s| s.saturating_mul(1000)),
    }
}

fn scan_ops(ctx: &BrokerContext, queue_id: i32, from: i64) -> Result<OpScan, BrokerError> {
    let mut scan = OpScan::default();
    let Some(cq) = ctx
        .store
        .consume_queues()
        .get(names::TRANS_OP_HALF_TOPIC, queue_id)
    else {
        return Ok(scan);
    };
    let mut off = from.max(cq.min_offset());
    while off < cq.max_offset() && scan.ops.len() < MAX_OPS_PER_ROUND {
        let units = cq.read_units(off, 64)?;
        if units.is_empty() {
            break;
        }
        for u in units {
            let halves = match ctx.store.read_message(u.physical_offset) {
                Some(raw) => match RecordView::parse(&raw, CrcCheck::Skip) {
                    Ok(v) => parse_op_body(v.body),
                    Err(_) => Vec::new(),
                },
                None => Vec::new(),
            };
            scan.ops.push((off, halves));
            off += 1;
        }
    }
    Ok(scan)
}

/// Re-appends a half message with its check count raised; returns the new copy's
/// (queue offset, physical offset).
async fn put_back(
    ctx: &BrokerContext,
    view: &RecordView<'_>,
    check_times: i32,
) -> Result<(i64, i64, BytesMut), BrokerError> {
    let mut props = MessageProperties::parse(view.properties)?;
    props.insert(keys::TRANSACTION_CHECK_TIMES, check_times.to_string());
    let encoded = props.encode()?;
    let mut f = view.fields();
    f.queue_offset = 0;
    f.physical_offset = 0;
    f.store_timestamp = now_ms();
    f.properties = &encoded;
    let mut rec = BytesMut::new();
    encode_record(
        &f,
        &ctx.config.message_limits(),
        MagicPolicy::Auto,
        &mut rec,
    )?;
    let copy = rec.clone();
    let r = ctx
        .store
        .put_records(view.topic, view.queue_id, vec![rec], true)
        .await?;
    let phys = r.positions.first().map_or(0, physical_offset);
    Ok((r.first_queue_offset, phys, copy))
}

/// Builds the CHECK_TRANSACTION_STATE request for a put-back copy (body: the message under
/// its real topic, magic v1).
pub fn check_request(
    copy: &[u8],
    queue_offset: i64,
    phys: i64,
    store_host: std::net::SocketAddr,
    limits: &crate::message::record::MessageLimits,
) -> Result<RemotingCommand, BrokerError> {
    let view = RecordView::parse(copy, CrcCheck::Skip)?;
    let props = MessageProperties::parse(view.properties)?;
    let real_topic = props.get(keys::REAL_TOPIC).unwrap_or(view.topic).to_owned();
    let real_qid = props
        .get(keys::REAL_QUEUE_ID)
        .and_then(|q| q.trim().parse::<i32>().ok())
        .unwrap_or(view.queue_id);
    let uniq = props
        .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .map(str::to_owned);
    let mut f = view.fields();
    f.topic = &real_topic;
    f.queue_id = real_qid;
    f.queue_offset = queue_offset;
    f.physical_offset = phys;
    let mut body = BytesMut::new();
    encode_record(&f, limits, MagicPolicy::V1Only, &mut body)?;
    let h = CheckTransactionStateRequestHeader {
        tran_state_table_offset: queue_offset,
        commit_log_offset: phys,
        msg_id: uniq.clone(),
        transaction_id: props
            .get(keys::TRANSACTION_ID)
            .map(str::to_owned)
            .or_else(|| uniq.clone()),
        offset_msg_id: Some(offset_msg_id(store_host, phys)),
        topic: Some(real_topic.clone()),
        broker_name: None,
    };
    Ok(
        RemotingCommand::request(RequestCode::CHECK_TRANSACTION_STATE, &h)
            .with_oneway()
            .with_body(body.freeze()),
    )
}

async fn send_check(ctx: &BrokerContext, group: &str, req: RemotingCommand) -> bool {
    for conn in ctx.clients.producer_connections(group) {
        match conn
            .invoke_oneway(req.clone(), Duration::from_secs(3))
            .await
        {
            Ok(()) => return true,
            Err(e) => tracing::debug!(group, error = %e, "check request not sent on this channel"),
        }
    }
    tracing::debug!(group, "no live producer for a transaction check");
    false
}

async fn discard(ctx: &BrokerContext, view: &RecordView<'_>) -> Result<(), BrokerError> {
    ctx.topics.create_if_absent(
        names::TRANS_CHECK_MAX_TIME_TOPIC,
        1,
        perm::READ | perm::WRITE,
    )?;
    let mut f = view.fields();
    f.topic = names::TRANS_CHECK_MAX_TIME_TOPIC;
    f.queue_id = 0;
    f.queue_offset = 0;
    f.physical_offset = 0;
    f.store_timestamp = now_ms();
    let mut rec = BytesMut::new();
    encode_record(
        &f,
        &ctx.config.message_limits(),
        MagicPolicy::Auto,
        &mut rec,
    )?;
    ctx.store
        .put_records(names::TRANS_CHECK_MAX_TIME_TOPIC, 0, vec![rec], true)
        .await?;
    Ok(())
}

/// One check round over every half queue.
pub async fn check_round(
    ctx: &BrokerContext,
    s: &CheckSettings,
) -> Result<RoundStats, BrokerError> {
    let mut stats = RoundStats::default();
    let started = Instant::now();
    let round_start = now_ms();
    for cq in ctx
        .store
        .consume_queues()
        .queues_of_topic(names::TRANS_HALF_TOPIC)
    {
        let q = cq.queue_id();
        let mut half_off = ctx
            .offsets
            .query_offset(SYS_TRANS_GROUP, names::TRANS_HALF_TOPIC, q)
            .unwrap_or(0)
            .max(cq.min_offset());
        let op_off = ctx
            .offsets
            .query_offset(SYS_TRANS_GROUP, names::TRANS_OP_HALF_TOPIC, q)
            .unwrap_or(0);
        let ops = scan_ops(ctx, q, op_off)?;
        let removed = ops.removed_at_or_above(half_off);
        // The walk ends at the max offset seen now: put-back copies are for later rounds.
        let end = cq.max_offset();
        let mut examined = 0;
        let mut result = Ok(());
        'walk: while half_off < end
            && examined < MAX_HALVES_PER_ROUND
            && started.elapsed() < MAX_ROUND_TIME
        {
            let units = cq.read_units(half_off, 32)?;
            if units.is_empty() {
                break;
            }
            for u in units {
                if half_off >= end {
                    break 'walk;
                }
                examined += 1;
                if removed.contains(&half_off) {
                    stats.skipped_decided += 1;
                    half_off += 1;
                    continue;
                }
                let Some(raw) = ctx.store.read_message(u.physical_offset) else {
                    half_off += 1;
                    continue;
                };
                let Ok(view) = RecordView::parse(&raw, CrcCheck::Skip) else {
                    half_off += 1;
                    continue;
                };
                let f = facts(&view, false);
                match decide(&f, s, round_start, now_ms()) {
                    HalfDecision::Decided => {}
                    HalfDecision::NotYet => break 'walk,
                    HalfDecision::Discard => {
                        if let Err(e) = discard(ctx, &view).await {
                            result = Err(e);
                            break 'walk;
                        }
                        tracing::info!(
                            queue_offset = half_off,
                            "half message checked too often: discarded"
                        );
                        stats.discarded += 1;
                    }
                    HalfDecision::Check => {
                        let group = view
                            .property(keys::PRODUCER_GROUP)
                            .map(|g| String::from_utf8_lossy(g).into_owned())
                            .unwrap_or_default();
                        let (qo, phys, copy) = match put_back(ctx, &view, f.check_times + 1).await {
                            Ok(v) => v,
                            Err(e) => {
                                result = Err(e);
                                break 'walk;
                            }
                        };
                        stats.checked += 1;
                        let req = check_request(
                            &copy,
                            qo,
                            phys,
                            ctx.store_host,
                            &ctx.config.message_limits(),
                        )?;
                        if send_check(ctx, &group, req).await {
                            stats.requests_sent += 1;
                        }
                    }
                }
                half_off += 1;
            }
        }
        ctx.offsets
            .commit_offset(SYS_TRANS_GROUP, names::TRANS_HALF_TOPIC, q, half_off);
        ctx.offsets.commit_offset(
            SYS_TRANS_GROUP,
            names::TRANS_OP_HALF_TOPIC,
            q,
            ops.next_op_offset(ops.ops.first().map_or(op_off, |o| o.0), half_off),
        );
        result?;
    }
    Ok(stats)
}

/// Runs check rounds every `interval` until `stop` is cancelled.
pub async fn run(ctx: Arc<BrokerContext>, stop: CancellationToken, s: CheckSettings) {
    tracing::info!(
        interval_ms = s.interval.as_millis() as u64,
        timeout_ms = s.timeout_ms,
        check_max = s.check_max,
        "transaction check service started"
    );
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(s.interval) => {}
        }
        match check_round(&ctx, &s).await {
            Ok(st) if st.checked + st.discarded > 0 => {
                tracing::info!(?st, "transaction check round");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "transaction check round failed; retried next interval")
            }
        }
    }
    tracing::info!("transaction check service stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CheckSettings {
        CheckSettings {
            interval: Duration::from_millis(100),
            timeout_ms: 6_000,
            check_max: 15,
        }
    }

    fn half(check_times: i32, born: i64, store: i64) -> HalfFacts {
        HalfFacts {
            decided: false,
            check_times,
            born_ms: born,
            store_ms: store,
            immunity_ms: None,
        }
    }

    #[test]
    fn candidate_selection() {
        let s = settings();
        let now = 100_000;
        // Decided wins over everything.
        let mut f = half(99, 0, 0);
        f.decided = true;
        assert_eq!(decide(&f, &s, now, now), HalfDecision::Decided);
        // Checked too often.
        assert_eq!(decide(&half(15, 0, 0), &s, now, now), HalfDecision::Discard);
        assert_eq!(decide(&half(14, 0, 0), &s, now, now), HalfDecision::Check);
        // Too young.
        assert_eq!(
            decide(&half(0, now - 5_999, 0), &s, now, now),
            HalfDecision::NotYet
        );
        assert_eq!(
            decide(&half(0, now - 6_000, 0), &s, now, now),
            HalfDecision::Check
        );
        // Stored during the round (a put-back copy): not this round.
        assert_eq!(decide(&half(1, 0, now), &s, now, now), HalfDecision::NotYet);
        // Born in the future (producer clock ahead): checked, like Java.
        assert_eq!(
            decide(&half(0, now + 10, 0), &s, now, now),
            HalfDecision::Check
        );
    }

    #[test]
    fn immunity_property_only_before_the_first_check() {
        let s = settings();
        let now = 100_000;
        let mut f = half(0, now - 7_000, 0);
        f.immunity_ms = Some(10_000);
        assert_eq!(decide(&f, &s, now, now), HalfDecision::NotYet);
        f.check_times = 1;
        assert_eq!(decide(&f, &s, now, now), HalfDecision::Check);
    }
}
