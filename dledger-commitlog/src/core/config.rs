//! Configuration of the consensus core, with the DLedger option each field corresponds to.
//!
//! Defaults target fast failover on a LAN: a dead leader is replaced in about 1 s (at most
//! 1.5 s), without spurious elections on a busy 2-core machine:
//! * heartbeats every 200 ms and a lease of 3 missed heartbeats (600 ms): a follower gives up on
//!   its leader 600 ms after the last heartbeat; a scheduler stall must exceed ~400 ms (two
//!   heartbeats lost in a row plus one late) before anybody campaigns, which a loaded 2-core box
//!   does not produce in normal operation (typical stalls are well under 100 ms);
//! * the first (pre-)vote round starts after a random 0-300 ms (`maxVoteIntervalMs -
//!   minVoteIntervalMs`), later rounds every 150-450 ms (`minVoteIntervalMs`/
//!   `maxVoteIntervalMs`): a 300 ms spread is ~100x a LAN round trip, so split votes are rare;
//!   a split is broken at once (the elector: the first-listed candidate retries after 75-150
//!   ms, its rival waits >= 450 ms), so worst case 600 + 300 + 150 + RTTs ~ 1.1 s, plus one
//!   normal retry when a pre-vote round fails for another reason. A candidate that granted
//!   someone else's vote drops its own (stale) round, and a deposed leader with the better
//!   log campaigns at once instead of waiting a lease. Measured in the simulator (`failover`
//!   family, leader crashes on a calm network, 10 ms ticks): worst 1.37 s over seeds 0-3999
//!   (was 1.59 s over 0-1099 before those three rules: two splits in a row, or a stale
//!   pre-vote deposing the new leader, seed 1110);
//! * pre-vote (R10) keeps a rejoining node from bumping terms, so short lease times do not
//!   turn into disruptions.

/// Test-only switches that re-inject historical bugs (RELIABILITY.md SIM-17). All `false` in
/// production; only compiled with the `sim` feature.
#[cfg(feature = "sim")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BugInjection {
    /// DLedger 0.3.1.2: commit any entry a quorum holds, whatever its term, and append no no-op
    /// on election (Raft Figure 8).
    pub figure8_rule_off: bool,
    /// DLedger #52: vote requests advertise `ledgerEndTerm = currTerm`.
    pub ledger_end_term_is_curr_term: bool,
    /// Vote grants and term changes are not persisted before the response leaves.
    pub vote_not_persisted: bool,
    /// Leader acknowledges a proposal as soon as it is in its own log.
    pub ack_before_quorum: bool,
    /// DLedger #316: the follower's committed index is not clamped to its verified end.
    pub no_commit_clamp: bool,
    /// DLedger #282: a full push buffer wedges request handling (nothing is answered again).
    pub blocking_rpc_queue: bool,
    /// DLedger #61: once in APPEND, nothing (INCONSISTENT_STATE, resend limit, refusal) sends
    /// the dispatcher back to COMPARE.
    pub no_recompare: bool,
}

/// Core configuration. Field docs name the DLedger option (spec §10) where there is one.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// `group`.
    pub group: String,
    /// `selfId`; must be one of `peers`.
    pub self_id: String,
    /// Member ids of `peers`, in configuration order (same on every member).
    pub peers: Vec<String>,
    /// `heartBeatTimeIntervalMs` (DLedger 2000).
    pub heartbeat_interval_ms: u64,
    /// `maxHeartBeatLeak` (DLedger 3): lease = interval x leak.
    pub max_heartbeat_leak: u64,
    /// `minVoteIntervalMs` (DLedger 300).
    pub min_vote_interval_ms: u64,
    /// `maxVoteIntervalMs` (DLedger 1000).
    pub max_vote_interval_ms: u64,
    /// `maxPendingRequestsNum` (10000): proposals awaiting quorum; beyond -> Busy (503).
    pub max_pending_requests: usize,
    /// `maxWaitAckTimeMs` (2500): a proposal not committed in time fails as indeterminate.
    pub max_wait_ack_time_ms: u64,
    /// `maxPushTimeOutMs` (1000): resend the lowest unacknowledged push after this long;
    /// also how long a follower keeps a push that waits behind a gap.
    pub max_push_timeout_ms: u64,
    /// `enableBatchPush` (DLedger false; our default true).
    pub enable_batch_push: bool,
    /// `maxBatchPushSize` (4096 bytes of bodies per batch push).
    pub max_batch_push_bytes: usize,
    /// Most entries in one batch push.
    pub max_batch_push_entries: usize,
    /// DLedger `maxPendingSize` (1000): pushes in flight per follower.
    pub push_inflight_max: usize,
    /// With this many pushes in flight to a follower, a batch push leaves only when full
    /// (`max_batch_push_entries` or `max_batch_push_bytes`); partial batches wait for a
    /// response. Below it, whatever is there leaves at once (low latency when idle).
    pub partial_push_inflight_max: usize,
    /// Follower reorder buffer: APPEND pushes held while waiting for a gap to fill; beyond
    /// this the push is refused with PUSH_REQUEST_IS_FULL (421) instead of blocking (R9).
    pub follower_buffer_max: usize,
    /// Caller timeout of every DLedger RPC (3000 ms).
    pub rpc_timeout_ms: u64,
    /// `preferredLeaderIds`.
    pub preferred_leader_ids: Vec<String>,
    /// `maxLeadershipTransferWaitIndex` (1000).
    pub max_leadership_transfer_wait_index: i64,
    /// `leadershipTransferWaitTimeout` (1000 ms): transfer aborted after this plus one election.
    pub leadership_transfer_wait_timeout_ms: u64,
    /// Ask a pre-vote quorum before incrementing the term (R10).
    pub pre_vote: bool,
    /// SYNC_FLUSH: followers ack and the leader counts itself only up to the flushed index.
    pub sync_flush: bool,
    /// Seed of the election-timeout PRNG (logged at start so runs replay).
    pub seed: u64,
    /// Historical bugs to re-inject (simulator self-test only).
    #[cfg(feature = "sim")]
    pub bugs: BugInjection,
}

impl CoreConfig {
    /// Defaults (module docs) for member `self_id` of `peers`.
    pub fn new(group: &str, self_id: &str, peers: &[&str], seed: u64) -> Self {
        CoreConfig {
            group: group.to_owned(),
            self_id: self_id.to_owned(),
            peers: peers.iter().map(|p| (*p).to_owned()).collect(),
            heartbeat_interval_ms: 200,
            max_heartbeat_leak: 3,
            min_vote_interval_ms: 150,
            max_vote_interval_ms: 450,
            max_pending_requests: 10_000,
            max_wait_ack_time_ms: 2_500,
            max_push_timeout_ms: 1_000,
            enable_batch_push: true,
            max_batch_push_bytes: 4096,
            max_batch_push_entries: 256,
            push_inflight_max: 1_000,
            partial_push_inflight_max: 2,
            follower_buffer_max: 1_024,
            rpc_timeout_ms: 3_000,
            preferred_leader_ids: Vec::new(),
            max_leadership_transfer_wait_index: 1_000,
            leadership_transfer_wait_timeout_ms: 1_000,
            pre_vote: true,
            sync_flush: false,
            seed,
            #[cfg(feature = "sim")]
            bugs: BugInjection::default(),
        }
    }

    /// Leader lease / follower patience: `heartBeatTimeIntervalMs x maxHeartBeatLeak`.
    pub fn lease_ms(&self) -> u64 {
        self.heartbeat_interval_ms
            .saturating_mul(self.max_heartbeat_leak)
    }

    /// Check the values make sense together; the error says which one does not.
    pub fn validate(&self) -> Result<(), String> {
        if !self.peers.contains(&self.self_id) {
            return Err(format!(
                "selfId {} is not in peers {:?}",
                self.self_id, self.peers
            ));
        }
        let mut sorted = self.peers.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != self.peers.len() {
            return Err(format!("duplicate peer ids in {:?}", self.peers));
        }
        if self.heartbeat_interval_ms == 0 || self.max_heartbeat_leak == 0 {
            return Err("heartBeatTimeIntervalMs and maxHeartBeatLeak must be > 0".into());
        }
        if self.min_vote_interval_ms == 0 || self.max_vote_interval_ms <= self.min_vote_interval_ms
        {
            return Err("need 0 < minVoteIntervalMs < maxVoteIntervalMs".into());
        }
        if self.push_inflight_max == 0
            || self.partial_push_inflight_max == 0
            || self.follower_buffer_max == 0
            || self.max_pending_requests == 0
        {
            return Err(
                "push_inflight_max, partial_push_inflight_max, follower_buffer_max, \
                 maxPendingRequestsNum must be > 0"
                    .into(),
            );
        }
        if self.max_batch_push_entries == 0 {
            return Err("max_batch_push_entries must be > 0".into());
        }
        Ok(())
    }

    /// Number of votes / acks that form a quorum: floor(n/2) + 1.
    pub fn quorum(&self) -> usize {
        self.peers.len() / 2 + 1
    }

    /// Max follower lag (entries) for a leadership transfer.
    pub fn transfer_max_lag(&self) -> i64 {
        self.max_leadership_transfer_wait_index
    }
}
