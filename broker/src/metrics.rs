//! Broker metrics wiring (the metric set itself is `observe::BrokerMetrics`).
//!
//! - Send and pull requests are timed at the processor boundary: an [`Observer`] is applied
//!   to the SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE, PULL_MESSAGE and LITE_PULL_MESSAGE
//!   processors when they are registered, so latency covers the whole answer (quorum wait,
//!   long-poll suspension).
//! - [`spawn_log_sampler`] follows the replicated log: every role change as it happens, and
//!   once a second term/water marks, the DLedger status when the log has one (flushed index,
//!   pending appends, per-peer lag and liveness), the consume-queue repairs dispatch made and
//!   the store root's disk usage. Role and
//!   term always come from the role watch, so a status snapshot taken a moment earlier
//!   never counts as a role change.
//! - [`start_endpoint`] serves `GET /metrics` on `metricsPort` (0 = off).
//!
//! Nothing here allocates per request; samplers stop on the broker's shutdown token.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dledger_commitlog::Index;
use observe::{
    BrokerMetrics, LogMarks, MetricsServer, PeerSample, QueueRepairs, Registry, ReplicationSample,
};
use remoting::{RemotingCommand, RequestCode, ResponseCode};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::BrokerError;
use crate::store::commit_log::ReplicatedLog;
use crate::store::consume_queue::ConsumeQueueSet;

/// How often gauges are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Which request family a wrapped processor serves.
#[derive(Clone, Copy, Debug)]
enum Traffic {
    Send,
    SendBatch,
    Pull,
}

/// Counts and times the answers of one request family. The processors' registration
/// applies it inside each request's own future (see `processor::register`), so observing
/// costs no boxed future of its own per request.
#[derive(Clone)]
pub struct Observer {
    metrics: Arc<BrokerMetrics>,
    traffic: Traffic,
}

/// What an [`Observer`] noted when a request arrived.
#[derive(Clone, Copy)]
pub struct Arrival {
    start: Instant,
    messages: u64,
}

impl Observer {
    /// The observer of `code`'s answers: sends (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE) and
    /// pulls (PULL_MESSAGE, LITE_PULL_MESSAGE); `None` for other codes.
    pub fn for_code(metrics: &Arc<BrokerMetrics>, code: RequestCode) -> Option<Observer> {
        let traffic = match code {
            RequestCode::SEND_MESSAGE | RequestCode::SEND_MESSAGE_V2 => Traffic::Send,
            RequestCode::SEND_BATCH_MESSAGE => Traffic::SendBatch,
            RequestCode::PULL_MESSAGE | RequestCode::LITE_PULL_MESSAGE => Traffic::Pull,
            _ => return None,
        };
        Some(Observer {
            metrics: Arc::clone(metrics),
            traffic,
        })
    }

    /// Notes a request's arrival: the time and the messages it carries (sends; pulls are
    /// counted from their answers).
    pub fn arrived(&self, request: &RemotingCommand) -> Arrival {
        let messages = match self.traffic {
            Traffic::Send => 1,
            Traffic::SendBatch => count_size_prefixed(request.body()),
            Traffic::Pull => 0,
        };
        Arrival {
            start: Instant::now(),
            messages,
        }
    }

    /// Counts and times the answer to a request that arrived at `a`.
    pub fn answered(&self, a: Arrival, response: &RemotingCommand) {
        let elapsed = a.start.elapsed();
        let code = response.response_code();
        match self.traffic {
            Traffic::Send | Traffic::SendBatch => {
                self.metrics.observe_send(code, elapsed, a.messages)
            }
            Traffic::Pull => {
                let pulled = if code == ResponseCode::SUCCESS {
                    count_size_prefixed(response.body())
                } else {
                    0
                };
                self.metrics.observe_pull(code, elapsed, pulled)
            }
        }
    }
}

/// Records in a body made of records that each start with their own total size as a
/// big-endian i32 (stored messages in a pull answer, elements of a batch send). Stops at
/// the first size that cannot be a record, so any input is safe.
pub fn count_size_prefixed(body: &[u8]) -> u64 {
    let mut rest = body;
    let mut n = 0u64;
    while let Some(size) = rest.get(..4) {
        let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
        let Ok(size) = usize::try_from(size) else {
            break;
        };
        if size < 4 || size > rest.len() {
            break;
        }
        rest = &rest[size..];
        n += 1;
    }
    n
}

/// Follows `log`'s role (every change) and samples its marks and the disk usage under
/// `store_root` every [`SAMPLE_INTERVAL`] until `stop`.
pub fn spawn_log_sampler(
    log: Arc<dyn ReplicatedLog>,
    queues: Arc<ConsumeQueueSet>,
    store_root: PathBuf,
    metrics: Arc<BrokerMetrics>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut role = log.role();
        let mut role_open = true;
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let full = tokio::select! {
                _ = stop.cancelled() => break,
                changed = role.changed(), if role_open => {
                    role_open = changed.is_ok();
                    false
                }
                _ = tick.tick() => true,
            };
            let (r, term) = {
                let s = role.borrow_and_update();
                (s.role, s.term)
            };
            metrics.record_log(&LogMarks {
                role: r,
                term,
                begin_index: log.begin_index(),
                end_index: log.end_index(),
                committed_index: log.committed_mark().index,
            });
            if full {
                let r = queues.repairs();
                metrics.record_queue_repairs(&QueueRepairs {
                    holes: r.holes.load(Ordering::Relaxed),
                    filled: r.filled.load(Ordering::Relaxed),
                    renumbered: r.renumbered.load(Ordering::Relaxed),
                    dropped: r.dropped.load(Ordering::Relaxed),
                });
                if let Some(status) = log.status() {
                    let peers: Vec<PeerSample<'_>> = status
                        .peers
                        .iter()
                        .map(|p| PeerSample {
                            id: &p.id,
                            // The gauges keep DLedger's -1 for "unknown".
                            lag: p.lag.unwrap_or(-1),
                            alive: p.alive,
                        })
                        .collect();
                    metrics.record_replication(&ReplicationSample {
                        flushed_index: Index::to_wire(status.flushed_index),
                        pending_appends: status.pending_proposals,
                        peers: &peers,
                    });
                }
                let root = store_root.clone();
                let usage = tokio::task::spawn_blocking(move || {
                    observe::disk_usage::disk_usage_bytes(&root)
                });
                match usage.await {
                    Ok(Ok(bytes)) => metrics.set_disk_usage_bytes(bytes),
                    Ok(Err(e)) => tracing::debug!(error = %e, "disk usage not measured"),
                    Err(_) => {}
                }
            }
        }
    })
}

/// Serves `metrics` on `ip:port` (the broker's `bindAddress`); `None` when `port` is 0
/// (metrics off).
pub async fn start_endpoint(
    ip: IpAddr,
    port: u16,
    metrics: Arc<BrokerMetrics>,
    stop: CancellationToken,
) -> Result<Option<MetricsServer>, BrokerError> {
    let registry = Arc::new(Registry::new());
    registry.register(metrics);
    MetricsServer::start_on_port(ip, port, registry, stop)
        .await
        .map_err(|e| BrokerError::System(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_prefixed_records_are_counted_and_garbage_stops_the_walk() {
        let mut body = Vec::new();
        for len in [20u32, 4, 33] {
            body.extend_from_slice(&len.to_be_bytes());
            body.resize(body.len() + len as usize - 4, 0xAB);
        }
        assert_eq!(count_size_prefixed(&body), 3);
        assert_eq!(count_size_prefixed(&[]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0]), 0);
        assert_eq!(count_size_prefixed(&[0xFF, 0xFF, 0xFF, 0xFF, 1]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0, 9, 1, 2]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0, 0, 0, 0, 0, 0]), 0);
    }
}
