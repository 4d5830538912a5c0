//! [`LedgerOptions`]: everything a member needs to start, plus DLedger-style `key=value`
//! parsing so the broker can pass its `dLeger*` and DLedger option keys straight through.
//!
//! Default timings (see `core::config`) target a dead leader being replaced in about 1 s
//! (at most 1.5 s) on a LAN: heartbeats every 200 ms, lease 3 heartbeats, vote rounds after a
//! random 300-600 ms (first round 0-300 ms), pre-vote on. Replication defaults differ from
//! DLedger's for throughput: batch pushes on, up to 256 KiB / 1024 entries per push, 32
//! pushes in flight per follower (see [`PUSH_WINDOW`]), of which only the first 2 may be
//! partial batches (`CoreConfig::partial_push_inflight_max`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::error::OptionError;
use crate::config::{FlushMode, LedgerConfig};
use crate::core::CoreConfig;
// The peer-list parser lives in peers.rs (shared with the broker's config).
pub use crate::peers::parse_peers;

/// Default pushes in flight per follower (DLedger `maxPendingSize` is 1000).
pub(crate) const PUSH_WINDOW: usize = 32;
/// Default body bytes per batch push (DLedger `maxBatchPushSize` is 4096).
pub(crate) const BATCH_PUSH_BYTES: usize = 256 * 1024;
/// Default entries per batch push.
pub(crate) const BATCH_PUSH_ENTRIES: usize = 1024;

/// Rewrites a leader's entry body in place once its data position is known, before the CRCs
/// are computed and before the entry is replicated, so every replica stores the same bytes.
/// RocketMQ's commit log uses it to write PHYSICALOFFSET = pos + 48 into the stored record.
/// Called with `(pos, body)` for every leader append, including the election no-op (empty
/// body), on the driver task: it must be cheap and must not block.
#[derive(Clone)]
pub struct AppendHook(pub Arc<AppendHookFn>);

/// The hook's function: `(entry pos, body)`.
pub type AppendHookFn = dyn Fn(i64, &mut [u8]) + Send + Sync;

impl fmt::Debug for AppendHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AppendHook(..)")
    }
}

/// Start-up options of one member. `core.group`, `core.self_id` and `core.peers` are
/// overwritten from `group`, `self_id` and `peers` at start; `core.sync_flush` follows
/// `store.flush_mode`.
#[derive(Clone, Debug)]
pub struct LedgerOptions {
    /// `dLegerGroup`.
    pub group: String,
    /// `dLegerSelfId`, e.g. `n0`.
    pub self_id: String,
    /// `dLegerPeers` parsed, self included; self's address is the RPC listen address.
    pub peers: Vec<(String, SocketAddr)>,
    /// `<storePathRootDir>/dledger-<selfId>` (the runtime appends nothing).
    pub store_root: PathBuf,
    /// Storage options (segment sizes, flush mode ...).
    pub store: LedgerConfig,
    /// Timing options (DLedger names on the fields).
    pub core: CoreConfig,
    /// Leader-side body rewrite at append time (none by default).
    pub append_hook: Option<AppendHook>,
    /// Busy polling of the peer connections after each read (`remoting`'s
    /// `ConnectionConfig::busy_poll`); property `dLedgerBusyPollMicros`, ours. Zero (the
    /// default) for members that share cores with other processes.
    pub busy_poll: Duration,
}

impl LedgerOptions {
    /// Defaults for member `self_id` of `peers`, storing under `store_root`. The election PRNG
    /// seed is taken from the clock (logged by the core at start so a run can be replayed).
    pub fn new(
        group: &str,
        self_id: &str,
        peers: Vec<(String, SocketAddr)>,
        store_root: PathBuf,
    ) -> Self {
        let ids: Vec<&str> = peers.iter().map(|(id, _)| id.as_str()).collect();
        let mut core = CoreConfig::new(group, self_id, &ids, 0);
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ self_id
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        core.seed = seed;
        // Replication pipeline: a small window of large batch pushes. The core sends a push
        // as soon as the window has room, so with a big window every entry travels alone;
        // a window of 32 lets entries that arrive during a round trip share the next push.
        core.push_inflight_max = PUSH_WINDOW;
        core.max_batch_push_bytes = BATCH_PUSH_BYTES;
        core.max_batch_push_entries = BATCH_PUSH_ENTRIES;
        LedgerOptions {
            group: group.to_owned(),
            self_id: self_id.to_owned(),
            core,
            peers,
            store_root,
            store: LedgerConfig::default(),
            append_hook: None,
            busy_poll: Duration::ZERO,
        }
    }

    /// RPC listen address of this member.
    pub fn self_addr(&self) -> Option<SocketAddr> {
        self.peers
            .iter()
            .find(|(id, _)| *id == self.self_id)
            .map(|(_, a)| *a)
    }

    /// The core configuration actually used: identity and peers from these options, sync
    /// flush from the store's flush mode.
    pub fn effective_core(&self) -> CoreConfig {
        let mut c = self.core.clone();
        c.group = self.group.clone();
        c.self_id = self.self_id.clone();
        c.peers = self.peers.iter().map(|(id, _)| id.clone()).collect();
        c.sync_flush = self.store.flush_mode == FlushMode::Sync;
        c
    }

    /// Checks identity, peers, storage and timing options together.
    pub fn validate(&self) -> Result<(), String> {
        if self.group.is_empty() {
            return Err("group (dLegerGroup) is empty".into());
        }
        if self.self_addr().is_none() {
            return Err(format!("selfId {} is not in peers", self.self_id));
        }
        self.store.validate().map_err(|e| e.to_string())?;
        self.effective_core().validate()
    }

    /// Applies one DLedger option by name (`dLegerGroup`, `dLegerSelfId`, `dLegerPeers`,
    /// `heartBeatTimeIntervalMs`, `maxHeartBeatLeak`, `minVoteIntervalMs`, `maxVoteIntervalMs`,
    /// `maxPendingRequestsNum`, `maxWaitAckTimeMs`, `maxPushTimeOutMs`, `enableBatchPush`,
    /// `maxBatchPushSize`, `preferredLeaderId(s)`, `maxLeadershipTransferWaitIndex`,
    /// `leadershipTransferWaitTimeout`, `mappedFileSizeForEntryData`,
    /// `mappedFileSizeForEntryIndex`, `flushFileInterval`, `checkPointInterval`, `deleteWhen`,
    /// `fileReservedHours`, `diskSpaceRatioToCheckExpired`, `diskSpaceRatioToForceClean`,
    /// `enableDiskForceClean`, `flushDiskType`). A `dLeger`/`dLedger` prefix is accepted on
    /// every key. Returns `Ok(false)` for keys that are not DLedger options (the caller keeps
    /// them), `Ok(true)` when applied or known to have no effect here (`storeType`,
    /// `enableLeaderElector`, `peerPushThrottlePoint`, `peerPushQuota`,
    /// `enablePushToFollower`, `minTakeLeadershipVoteIntervalMs`,
    /// `maxTakeLeadershipVoteIntervalMs`), and an error for a known key with a bad value.
    pub fn apply_property(&mut self, key: &str, value: &str) -> Result<bool, OptionError> {
        let name = normalize(key);
        let v = value.trim();
        let err = |reason: &str| OptionError {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        let num = || {
            v.parse::<u64>()
                .map_err(|_| err("not a non-negative integer"))
        };
        let ratio = || {
            v.parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| err("not a ratio in 0.0..=1.0"))
        };
        let flag = || match v.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(err("not true/false")),
        };
        let c = &mut self.core;
        let s = &mut self.store;
        match name.as_str() {
            "group" => {
                if v.is_empty() {
                    return Err(err("empty group"));
                }
                self.group = v.to_owned();
            }
            "selfId" => {
                if v.is_empty() {
                    return Err(err("empty selfId"));
                }
                self.self_id = v.to_owned();
            }
            "peers" => self.peers = parse_peers(v).map_err(|r| err(&r))?,
            "heartBeatTimeIntervalMs" => c.heartbeat_interval_ms = num()?,
            "maxHeartBeatLeak" => c.max_heartbeat_leak = num()?,
            "minVoteIntervalMs" => c.min_vote_interval_ms = num()?,
            "maxVoteIntervalMs" => c.max_vote_interval_ms = num()?,
            "maxPendingRequestsNum" => {
                c.max_pending_requests = usize::try_from(num()?).map_err(|_| err("too large"))?
            }
            "maxWaitAckTimeMs" => c.max_wait_ack_time_ms = num()?,
            "maxPushTimeOutMs" => c.max_push_timeout_ms = num()?,
            "enableBatchPush" => c.enable_batch_push = flag()?,
            "maxBatchPushSize" => {
                c.max_batch_push_bytes = usize::try_from(num()?).map_err(|_| err("too large"))?
            }
            "preferredLeaderId" | "preferredLeaderIds" => {
                c.preferred_leader_ids = v
                    .split([',', ';'])
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            "maxLeadershipTransferWaitIndex" => {
                c.max_leadership_transfer_wait_index =
                    i64::try_from(num()?).map_err(|_| err("too large"))?;
            }
            "leadershipTransferWaitTimeout" => c.leadership_transfer_wait_timeout_ms = num()?,
            "mappedFileSizeForEntryData" => s.data_segment_bytes = num()?,
            "mappedFileSizeForEntryIndex" => s.index_segment_bytes = num()?,
            "flushFileInterval" => s.flush_interval_ms = num()?,
            "checkPointInterval" => s.checkpoint_interval_ms = num()?,
            "deleteWhen" => {
                let mut hours = Vec::new();
                for h in v.split(';').map(str::trim).filter(|h| !h.is_empty()) {
                    let h: u8 = h
                        .parse()
                        .map_err(|_| err("hours must be 00..23 separated by ';'"))?;
                    if h > 23 {
                        return Err(err("hours must be 00..23 separated by ';'"));
                    }
                    hours.push(h);
                }
                s.delete_when_hours = hours;
            }
            "fileReservedHours" => s.file_reserved_hours = num()?,
            // Ours, not DLedger's (`LedgerConfig::release_cache_behind_bytes`); 0: never.
            "releaseCacheBehindBytes" => {
                s.release_cache_behind_bytes = Some(num()?).filter(|&b| b > 0)
            }
            // Ours, not DLedger's (`LedgerOptions::busy_poll`); 0: never.
            "busyPollMicros" => self.busy_poll = Duration::from_micros(num()?),
            "diskSpaceRatioToCheckExpired" => s.disk_ratio_check_expired = ratio()?,
            "diskSpaceRatioToForceClean" => s.disk_ratio_force_clean = ratio()?,
            "enableDiskForceClean" => s.disk_force_clean_enabled = flag()?,
            "flushDiskType" => {
                s.flush_mode = match v {
                    "SYNC_FLUSH" => FlushMode::Sync,
                    "ASYNC_FLUSH" => FlushMode::Async,
                    _ => return Err(err("expected SYNC_FLUSH or ASYNC_FLUSH")),
                }
            }
            "storeType"
            | "enableLeaderElector"
            | "peerPushThrottlePoint"
            | "peerPushQuota"
            | "enablePushToFollower"
            | "minTakeLeadershipVoteIntervalMs"
            | "maxTakeLeadershipVoteIntervalMs" => {
                tracing::info!(
                    key,
                    value,
                    "DLedger option accepted; it has no effect in this implementation"
                );
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `dLegerSelfId` -> `selfId`, `dLedgerPeers` -> `peers`, other keys unchanged.
fn normalize(key: &str) -> String {
    let k = key.trim();
    let rest = k
        .strip_prefix("dLeger")
        .or_else(|| k.strip_prefix("dLedger"));
    match rest {
        Some(r) if !r.is_empty() => {
            let mut chars = r.chars();
            let first = chars
                .next()
                .map(|c| c.to_ascii_lowercase())
                .unwrap_or_default();
            std::iter::once(first).chain(chars).collect()
        }
        _ => k.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> LedgerOptions {
        let peers =
            parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913").unwrap();
        LedgerOptions::new("g", "n0", peers, PathBuf::from("/tmp/x"))
    }

    #[test]
    fn dledger_keys_apply_and_unknown_keys_pass_through() {
        let mut o = opts();
        assert_eq!(o.apply_property("dLegerGroup", "RaftNode00"), Ok(true));
        assert_eq!(o.apply_property("dLegerSelfId", "n1"), Ok(true));
        assert_eq!(o.apply_property("heartBeatTimeIntervalMs", "100"), Ok(true));
        assert_eq!(o.apply_property("enableBatchPush", "false"), Ok(true));
        assert_eq!(o.apply_property("preferredLeaderId", "n2"), Ok(true));
        assert_eq!(
            o.apply_property("dLedgerReleaseCacheBehindBytes", "268435456"),
            Ok(true)
        );
        assert_eq!(o.store.release_cache_behind_bytes, Some(256 << 20));
        assert_eq!(
            o.apply_property("dLegerReleaseCacheBehindBytes", "0"),
            Ok(true)
        );
        assert_eq!(o.store.release_cache_behind_bytes, None);
        assert_eq!(o.busy_poll, Duration::ZERO, "off by default");
        assert_eq!(o.apply_property("dLedgerBusyPollMicros", "50"), Ok(true));
        assert_eq!(o.busy_poll, Duration::from_micros(50));
        assert!(o.apply_property("dLedgerBusyPollMicros", "-1").is_err());
        assert_eq!(o.apply_property("flushDiskType", "SYNC_FLUSH"), Ok(true));
        assert_eq!(o.apply_property("deleteWhen", "04;05"), Ok(true));
        assert_eq!(o.apply_property("brokerName", "b"), Ok(false));
        assert!(o.apply_property("maxHeartBeatLeak", "x").is_err());
        assert!(o
            .apply_property("diskSpaceRatioToForceClean", "1.5")
            .is_err());
        assert_eq!(o.group, "RaftNode00");
        assert_eq!(o.self_id, "n1");
        assert_eq!(o.core.heartbeat_interval_ms, 100);
        assert!(!o.core.enable_batch_push);
        assert_eq!(o.core.preferred_leader_ids, vec!["n2".to_owned()]);
        assert_eq!(o.store.delete_when_hours, vec![4, 5]);
        let c = o.effective_core();
        assert_eq!(
            (c.self_id.as_str(), c.peers.len(), c.sync_flush),
            ("n1", 3, true)
        );
        assert!(o.validate().is_ok());
        o.self_id = "n9".into();
        assert!(o.validate().is_err());
    }

    #[test]
    fn default_timings_meet_the_failover_goal() {
        let c = opts().effective_core();
        // lease + worst first-round delay + one more round on a split vote stays under 1.5 s.
        let worst = c.lease_ms()
            + (c.max_vote_interval_ms - c.min_vote_interval_ms)
            + c.max_vote_interval_ms / 2;
        assert!(worst <= 1_500, "worst-case failover {worst} ms");
        assert!(
            c.heartbeat_interval_ms * 2 < c.lease_ms(),
            "a single lost heartbeat must not trigger elections"
        );
    }
}
