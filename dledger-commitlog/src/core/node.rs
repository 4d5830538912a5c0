//! Node: one DLedger member as a deterministic state machine.
//!
//! Owns: the member state, the log (through [`RaftLog`]), the election PRNG, outstanding calls,
//! per-peer dispatchers (leader) and the follower's push buffer. Inputs arrive through
//! [`Node::handle`] and [`Node::tick`], both given the current monotonic time in ms; outputs
//! are queued and drained with [`Node::poll_action`].
//!
//! **Execution contract for the shell**: execute actions in the order they are polled, and
//! finish an [`Action::PersistHardState`] (durably: fsync) before executing any later action.
//! That is how a vote grant or a term change is durable before the response that depends on it
//! leaves (R3). In `sync_flush` mode the core emits [`Action::FlushLog`] and waits for
//! [`Input::LogFlushed`] before acknowledging entries.
//! Must not: read a clock, sleep, do IO or use global randomness.

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::{BTreeMap, VecDeque};

use super::config::CoreConfig;
use super::dispatcher::{PeerDispatch, PushCtx};
use super::entry_handler::FollowerBuffer;
use super::log::{Index, Pos, RaftLog, Term};
use super::member_state::{HardState, MemberState, Role};
use super::quorum_ack::{PendingProposals, ProposalId};
/// Outbound calls as the wire layer names them: [`Action::Call`] carries a `CallId`, echoed
/// back in [`Input::Reply`] with the response or a `CallFailure`.
pub use crate::wire::messages::{CallFailure, CallId};
use crate::wire::messages::{
    Common, DLedgerCode, LeadershipTransferRequest, Request, Response, VoteResponse, VoteResult,
};

/// Shell-chosen id of an inbound request, echoed in [`Action::Respond`].
pub type RequestId = u64;

/// Everything that can happen to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A DLedger request from a peer (or an admin tool); answer with `Action::Respond{id}`.
    Request { id: RequestId, req: Request },
    /// The outcome of `Action::Call{call}`. Unknown or late calls are ignored.
    Reply {
        call: CallId,
        result: Result<Response, CallFailure>,
    },
    /// Client append (leader only).
    Propose { id: ProposalId, body: Bytes },
    /// Local admin request: hand leadership to `to`.
    TransferLeadership { to: String },
    /// The log is durable up to `index` (after `Action::FlushLog` or a periodic flush; none:
    /// nothing is durable yet).
    LogFlushed { index: Option<Index> },
}

/// Where a committed proposal landed: the one result type of an append, from the core
/// through the runtime (`Ledger::propose`) to the broker (`ReplicatedLog::propose`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Log index of the entry.
    pub index: Index,
    /// Data position of the entry's header (RocketMQ physical offset = `pos + 48`).
    pub pos: Pos,
}

/// Why a proposal failed; the one proposal error of the core and the runtime
/// (`Ledger::propose`). `Timeout` and `TermChanged` are indeterminate (the entry may still
/// commit, R14): the caller must not report a definite failure. The others are definite:
/// nothing was appended, retrying cannot duplicate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Not the leader; the known leader's id, if any.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<String> },
    /// A leadership transfer is running (LEADER_TRANSFERRING 506).
    #[error("leadership transfer in progress")]
    Transferring,
    /// `maxPendingRequestsNum` proposals already wait, or the runtime's proposal queue is
    /// full (LEADER_PENDING_FULL 503).
    #[error("pending window full (maxPendingRequestsNum)")]
    Busy,
    /// The log refused the append for lack of space (DISK_FULL 415).
    #[error("disk full")]
    DiskFull,
    /// The log refused the append (DISK_ERROR 414); the runtime also refuses empty and
    /// oversized bodies with this before they reach the core.
    #[error("storage: {0}")]
    Storage(String),
    /// Empty bodies are reserved for the election no-op (the runtime refuses them earlier,
    /// as `Storage`).
    #[error("empty bodies are reserved for the election no-op")]
    EmptyBody,
    /// Not committed within `maxWaitAckTimeMs` (WAIT_QUORUM_ACK_TIMEOUT 502): indeterminate.
    #[error("not committed in time (indeterminate)")]
    Timeout,
    /// Leadership lost before commit (TERM_CHANGED 501): indeterminate.
    #[error("leadership changed before commit (indeterminate)")]
    TermChanged,
    /// The runtime is shut down; the proposal never reached the core.
    #[error("ledger shut down")]
    Shutdown,
}

impl ProposeError {
    /// True when the entry was certainly not appended (safe to retry without duplicates).
    pub fn is_definite(&self) -> bool {
        !self.is_indeterminate()
    }
    /// True when the entry may still have been committed (R14): report "unknown", not failure.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ProposeError::Timeout | ProposeError::TermChanged)
    }
    /// The DLedger code for this error.
    pub fn code(&self) -> DLedgerCode {
        match self {
            ProposeError::NotLeader { .. } => DLedgerCode::NOT_LEADER,
            ProposeError::Transferring => DLedgerCode::LEADER_TRANSFERRING,
            ProposeError::Busy => DLedgerCode::LEADER_PENDING_FULL,
            ProposeError::DiskFull => DLedgerCode::DISK_FULL,
            ProposeError::Storage(_) => DLedgerCode::DISK_ERROR,
            ProposeError::EmptyBody => DLedgerCode::UNEXPECTED_ARGUMENT,
            ProposeError::Timeout => DLedgerCode::WAIT_QUORUM_ACK_TIMEOUT,
            ProposeError::TermChanged => DLedgerCode::TERM_CHANGED,
            ProposeError::Shutdown => DLedgerCode::INTERNAL_ERROR,
        }
    }
}

/// Why a leadership transfer was refused or did not complete: the DLedger code (spec §5, §8)
/// the admin RPC answers with, and a reason for humans. Definite: when it is reported, this
/// member no longer works on the transfer (proposals are taken again if it still leads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferFailure {
    pub code: DLedgerCode,
    pub reason: String,
}

impl TransferFailure {
    pub(crate) fn new(code: DLedgerCode, reason: impl Into<String>) -> Self {
        TransferFailure {
            code,
            reason: reason.into(),
        }
    }
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Durably write term and vote (`currterm`) before executing any later action.
    PersistHardState(HardState),
    /// Send `req` to peer `to`; report the outcome as `Input::Reply{call}`.
    Call {
        to: String,
        call: CallId,
        req: Request,
    },
    /// Answer inbound request `id`.
    Respond { id: RequestId, resp: Response },
    /// Make the log durable up to `up_to` and report `Input::LogFlushed` (sync_flush only).
    FlushLog { up_to: Index },
    /// The committed index advanced; `pos` is committedPos (end of the committed entry, if
    /// the log holds it).
    CommitAdvanced { index: Index, pos: Option<Pos> },
    /// A proposal finished.
    ProposeDone {
        id: ProposalId,
        result: Result<Appended, ProposeError>,
    },
    /// Role, term or leader changed (DLedger role-change callback).
    RoleChanged {
        role: Role,
        term: Term,
        leader: Option<String>,
    },
    /// A transfer asked for with [`Input::TransferLeadership`] ended: `Ok` once this member
    /// sees `to` leading, else why it was refused or failed. Exactly one per such input, in the
    /// order of the inputs; at most one accepted transfer runs at a time.
    TransferDone {
        to: String,
        result: Result<(), TransferFailure>,
    },
}

/// What an outstanding call was for.
#[derive(Clone, Debug)]
pub(crate) enum CallCtx {
    Vote { term: Term, pre: bool },
    HeartBeat { term: Term, peer: usize },
    Push(PushCtx),
    Transfer { term: Term, seq: u64 },
}

/// An outstanding outbound call.
#[derive(Clone, Debug)]
pub(crate) struct Outstanding {
    pub deadline_ms: u64,
    pub ctx: CallCtx,
}

/// Candidate bookkeeping.
#[derive(Clone, Debug, Default)]
pub(crate) struct Election {
    /// Round in progress: (term asked for, pre-vote?).
    pub round: Option<(Term, bool)>,
    /// Peers (indexes) that accepted in this round, self included.
    pub granted: Vec<usize>,
    /// When the next round starts.
    pub next_round_ms: u64,
}

/// Leader-only state.
#[derive(Debug)]
pub(crate) struct LeaderState {
    pub peers: Vec<PeerDispatch>,
    pub pending: PendingProposals,
    pub next_heartbeat_ms: u64,
    pub transfer: Option<Transfer>,
    pub next_preferred_check_ms: u64,
}

/// Who asked for a leadership transfer, and so where its outcome goes.
#[derive(Clone, Debug)]
pub(crate) enum TransferOrigin {
    /// [`Input::TransferLeadership`]: reported as [`Action::TransferDone`].
    Local,
    /// An admin LEADERSHIP_TRANSFER request: answered (this response, code set) at the end.
    Rpc { id: RequestId, resp: Common },
    /// The preferred-leader check: only logged.
    Preferred,
}

/// A leadership transfer in progress.
#[derive(Clone, Debug)]
pub(crate) struct Transfer {
    pub peer: usize,
    pub sent: bool,
    /// Distinguishes this transfer's LEADERSHIP_TRANSFER call from an earlier one's.
    pub seq: u64,
    /// The term it started in (this member's leadership term).
    pub term: Term,
    /// The transferee must hold our whole log by then (`leadershipTransferWaitTimeout`).
    pub catch_up_deadline_ms: u64,
    /// It must lead by then (plus one vote interval), else the transfer failed.
    pub deadline_ms: u64,
    pub origin: TransferOrigin,
}

/// One DLedger member; see the module docs.
pub struct Node<L: RaftLog> {
    pub(crate) cfg: CoreConfig,
    pub(crate) log: L,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) me: usize,
    pub(crate) now_ms: u64,
    pub(crate) ms: MemberState,
    pub(crate) committed: Option<Index>,
    pub(crate) flushed: Option<Index>,
    pub(crate) flush_requested: Option<Index>,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) next_call: CallId,
    pub(crate) calls: BTreeMap<CallId, Outstanding>,
    pub(crate) election: Election,
    pub(crate) leader: Option<LeaderState>,
    pub(crate) buffer: FollowerBuffer,
    /// A transfer whose transferee was asked to take over after which this member stopped
    /// leading: it ends when a leader of a later term is known, or at its deadline.
    pub(crate) handover: Option<Transfer>,
    pub(crate) next_transfer_seq: u64,
    /// Re-injected bug #282: request handling wedged for good.
    pub(crate) wedged: bool,
}

impl<L: RaftLog> Node<L> {
    /// Start a member from its durable state: `hard` (currterm), `log` (recovered), and the
    /// checkpointed committed index (clamped to the log end, R7).
    pub fn new(
        cfg: CoreConfig,
        hard: HardState,
        log: L,
        committed_hint: Option<Index>,
        now_ms: u64,
    ) -> Result<Self, String> {
        cfg.validate()?;
        let me = cfg
            .peers
            .iter()
            .position(|p| *p == cfg.self_id)
            .ok_or_else(|| format!("selfId {} not in peers", cfg.self_id))?;
        tracing::info!(self_id = %cfg.self_id, seed = cfg.seed, term = %hard.term, "dledger core starting");
        let committed = committed_hint
            .min(log.end_index())
            .max(log.begin_index().prev());
        let flushed = log.end_index();
        let mut node = Node {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            me,
            now_ms,
            ms: MemberState::restore(&hard, now_ms),
            committed,
            flushed,
            flush_requested: flushed,
            actions: VecDeque::new(),
            next_call: 1,
            calls: BTreeMap::new(),
            election: Election::default(),
            leader: None,
            buffer: FollowerBuffer::default(),
            handover: None,
            next_transfer_seq: 1,
            wedged: false,
            log,
            cfg,
        };
        node.election.next_round_ms = now_ms + node.first_round_delay();
        Ok(node)
    }

    // ----- public accessors -------------------------------------------------------------

    /// Current role.
    pub fn role(&self) -> Role {
        self.ms.role
    }
    /// Current term.
    pub fn term(&self) -> Term {
        self.ms.term
    }
    /// Known leader id.
    pub fn leader_id(&self) -> Option<&str> {
        self.ms.leader.map(|i| self.cfg.peers[i].as_str())
    }
    /// Committed index (none if nothing is committed).
    pub fn committed_index(&self) -> Option<Index> {
        self.committed
    }
    /// The persisted part of the member state.
    pub fn hard_state(&self) -> HardState {
        self.ms.hard_state()
    }
    /// The log.
    pub fn log(&self) -> &L {
        &self.log
    }
    /// Consume the node, keeping its log (shutdown, or a simulated crash).
    pub fn into_log(self) -> L {
        self.log
    }
    /// The log, mutably (for the shell's flush bookkeeping or retention; never for appends).
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }
    /// Configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }
    /// Proposals waiting for the quorum (leader).
    pub fn pending_proposals(&self) -> usize {
        self.leader.as_ref().map_or(0, |l| l.pending.len())
    }
    /// Replication water mark of `peer` as known by this leader: `None` when this member
    /// does not lead, `peer` is unknown, or nothing is known replicated on it.
    pub fn match_index(&self, peer: &str) -> Option<Index> {
        let i = self.peer_index(peer)?;
        let l = self.leader.as_ref()?;
        if i == self.me {
            self.self_mark()
        } else {
            l.peers[i].match_index
        }
    }

    /// Whether this leader found that `peer` needs entries it has deleted (see
    /// `PeerDispatch::needs_reinstall`).
    pub fn needs_reinstall(&self, peer: &str) -> bool {
        let Some(i) = self.peer_index(peer) else {
            return false;
        };
        self.leader
            .as_ref()
            .is_some_and(|l| i != self.me && l.peers[i].needs_reinstall)
    }

    /// Next queued action.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Feed one input at time `now_ms` (monotonic, never decreasing).
    pub fn handle(&mut self, now_ms: u64, input: Input) {
        self.advance_clock(now_ms);
        self.dispatch_input(input);
        self.after_input();
    }

    /// Feed several inputs that arrived together, as if one after the other at `now_ms`, but
    /// run the leader's commit check and replication pump once at the end: proposals taken in
    /// one turn then travel in one batch push per follower instead of one push each.
    pub fn handle_batch(&mut self, now_ms: u64, inputs: impl IntoIterator<Item = Input>) {
        self.advance_clock(now_ms);
        for input in inputs {
            self.dispatch_input(input);
        }
        self.after_input();
    }

    fn dispatch_input(&mut self, input: Input) {
        match input {
            Input::Request { id, req } => self.on_request(id, req),
            Input::Reply { call, result } => {
                if let Some(out) = self.calls.remove(&call) {
                    self.on_reply(out.ctx, result);
                }
            }
            Input::Propose { id, body } => self.propose(id, body),
            Input::TransferLeadership { to } => {
                if let Err(f) = self.start_transfer(&to, TransferOrigin::Local) {
                    tracing::info!(code = ?f.code, reason = %f.reason, to, "leadership transfer refused");
                    self.actions
                        .push_back(Action::TransferDone { to, result: Err(f) });
                }
            }
            Input::LogFlushed { index } => self.on_flushed(index),
        }
    }

    /// Advance time: expire calls, run the role's maintenance. Call every ~10 ms.
    pub fn tick(&mut self, now_ms: u64) {
        self.advance_clock(now_ms);
        let expired: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, o)| o.deadline_ms <= self.now_ms)
            .map(|(c, _)| *c)
            .collect();
        for c in expired {
            if let Some(out) = self.calls.remove(&c) {
                self.on_reply(out.ctx, Err(CallFailure::Timeout));
            }
        }
        match self.ms.role {
            Role::Follower => {
                if self.now_ms.saturating_sub(self.ms.last_leader_contact_ms) >= self.cfg.lease_ms()
                {
                    self.become_candidate();
                }
            }
            Role::Candidate => {
                if self.now_ms >= self.election.next_round_ms {
                    self.start_round(false);
                }
            }
            Role::Leader => self.leader_tick(),
        }
        self.expire_handover();
        self.expire_buffered();
        self.after_input();
    }

    // ----- plumbing shared by the other core files ---------------------------------------

    fn advance_clock(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    fn after_input(&mut self) {
        if self.ms.role == Role::Leader {
            self.advance_commit();
            self.pump_all();
        }
        if self.cfg.sync_flush {
            if let Some(end) = self
                .log
                .end_index()
                .filter(|e| Some(*e) > self.flush_requested)
            {
                self.flush_requested = Some(end);
                self.actions.push_back(Action::FlushLog { up_to: end });
            }
        }
    }

    fn on_flushed(&mut self, index: Option<Index>) {
        self.flushed = self.flushed.max(index.min(self.log.end_index()));
        self.release_deferred();
    }

    /// The leader's own water mark: its end, or in sync-flush mode its flushed end.
    pub(crate) fn self_mark(&self) -> Option<Index> {
        if self.cfg.sync_flush {
            self.flushed.min(self.log.end_index())
        } else {
            self.log.end_index()
        }
    }

    /// After a truncation the flushed mark cannot exceed the end.
    pub(crate) fn clamp_flushed(&mut self) {
        let end = self.log.end_index();
        self.flushed = self.flushed.min(end);
        self.flush_requested = self.flush_requested.min(end);
    }

    pub(crate) fn peer_index(&self, id: &str) -> Option<usize> {
        self.cfg.peers.iter().position(|p| p == id)
    }

    pub(crate) fn random_between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.rng.next_u64() % (hi - lo)
    }

    /// Delay before the first election round after losing the leader: uniform in
    /// [0, maxVoteIntervalMs - minVoteIntervalMs).
    pub(crate) fn first_round_delay(&mut self) -> u64 {
        let spread = self.cfg.max_vote_interval_ms - self.cfg.min_vote_interval_ms;
        self.random_between(0, spread)
    }

    /// Delay between rounds: uniform in [minVoteIntervalMs, maxVoteIntervalMs).
    pub(crate) fn round_delay(&mut self) -> u64 {
        let (lo, hi) = (self.cfg.min_vote_interval_ms, self.cfg.max_vote_interval_ms);
        self.random_between(lo, hi)
    }

    pub(crate) fn call(&mut self, peer: usize, ctx: CallCtx, req: Request) -> CallId {
        let call = self.next_call;
        self.next_call += 1;
        self.calls.insert(
            call,
            Outstanding {
                deadline_ms: self.now_ms + self.cfg.rpc_timeout_ms,
                ctx,
            },
        );
        self.actions.push_back(Action::Call {
            to: self.cfg.peers[peer].clone(),
            call,
            req,
        });
        call
    }

    pub(crate) fn respond(&mut self, id: RequestId, resp: Response) {
        self.actions.push_back(Action::Respond { id, resp });
    }

    pub(crate) fn persist(&mut self) {
        let hs = self.ms.hard_state();
        self.actions.push_back(Action::PersistHardState(hs));
    }

    pub(crate) fn common_to(&self, peer: usize) -> Common {
        Common::request_in(
            &self.cfg.group,
            &self.cfg.self_id,
            &self.cfg.peers[peer],
            Some(&self.cfg.self_id),
            self.ms.term,
        )
    }

    fn announce_role(&mut self) {
        let leader = self.ms.leader.map(|i| self.cfg.peers[i].clone());
        tracing::debug!(me = %self.cfg.self_id, role = self.ms.role.as_str(), term = %self.ms.term, ?leader, "role changed");
        self.actions.push_back(Action::RoleChanged {
            role: self.ms.role,
            term: self.ms.term,
            leader,
        });
    }

    /// Adopt a higher term (persisted) without changing role. Leadership belongs to one
    /// term: a caller that may be the leader steps down in the same step.
    pub(crate) fn adopt_term(&mut self, term: Term) {
        if term > self.ms.term {
            self.ms.raise_term(term);
            self.persist();
            self.on_term_changed();
        }
    }

    fn on_term_changed(&mut self) {
        self.clear_buffer();
        self.buffer.verified_end = None;
        self.drop_deferred();
    }

    /// Leave leadership: pending proposals become indeterminate (R14); a transfer whose
    /// transferee was asked waits for the next leader, any other transfer fails.
    fn end_leadership(&mut self) {
        if let Some(mut l) = self.leader.take() {
            for p in l.pending.take_all() {
                self.actions.push_back(Action::ProposeDone {
                    id: p.id,
                    result: Err(ProposeError::TermChanged),
                });
            }
            match l.transfer.take() {
                Some(t) if t.sent => self.handover = Some(t),
                Some(t) => {
                    let why = format!(
                        "leadership lost (term {}) before {} caught up",
                        self.ms.term, self.cfg.peers[t.peer]
                    );
                    self.finish_transfer(
                        t,
                        Err(TransferFailure::new(DLedgerCode::TERM_CHANGED, why)),
                    );
                }
                None => {}
            }
        }
    }

    /// Become follower of `leader` (if known) in `term` (>= current, persisted if higher).
    pub(crate) fn become_follower(&mut self, term: Term, leader: Option<usize>) {
        let changed_term = term > self.ms.term;
        self.adopt_term(term);
        let was = (self.ms.role, self.ms.leader);
        if self.ms.role == Role::Leader {
            self.end_leadership();
        }
        self.ms.role = Role::Follower;
        if leader.is_some() {
            self.ms.leader = leader;
        }
        self.ms.last_leader_contact_ms = self.now_ms;
        self.election.round = None;
        if changed_term || was != (self.ms.role, self.ms.leader) {
            self.announce_role();
        }
        self.resolve_handover();
    }

    /// Give up on the current leader (or leadership) and start campaigning after a random delay.
    pub(crate) fn become_candidate(&mut self) {
        self.end_leadership();
        self.ms.role = Role::Candidate;
        self.ms.leader = None;
        self.election.round = None;
        self.election.next_round_ms = self.now_ms + self.first_round_delay();
        self.announce_role();
    }

    /// Won the election in the current term.
    pub(crate) fn become_leader(&mut self) {
        self.ms.role = Role::Leader;
        self.ms.leader = Some(self.me);
        self.election.round = None;
        self.clear_buffer();
        if let Some(t) = self.handover.take() {
            let why = format!(
                "{} did not take over: this member was elected again in term {}",
                self.cfg.peers[t.peer], self.ms.term
            );
            self.finish_transfer(
                t,
                Err(TransferFailure::new(
                    DLedgerCode::TAKE_LEADERSHIP_FAILED,
                    why,
                )),
            );
        }
        let n = self.cfg.peers.len();
        let peers = (0..n).map(|_| PeerDispatch::new(self.now_ms)).collect();
        self.leader = Some(LeaderState {
            peers,
            pending: PendingProposals::default(),
            next_heartbeat_ms: self.now_ms,
            transfer: None,
            next_preferred_check_ms: self.now_ms + 1_000,
        });
        self.announce_role();
        if !bug!(self.cfg, figure8_rule_off) {
            // R1: an entry of the new term lets everything inherited commit at once.
            if let Err(e) = self.log.append_leader(self.ms.term, Bytes::new()) {
                tracing::warn!(error = %e, "no-op append failed; stepping down");
                self.become_candidate();
                return;
            }
        }
        self.send_heartbeats();
    }

    // ----- inbound requests ---------------------------------------------------------------

    fn on_request(&mut self, id: RequestId, req: Request) {
        if self.wedged {
            return; // bug #282: the handler threads are blocked for good
        }
        let (group, remote) = match &req {
            Request::Vote(r) => (r.group.as_deref(), r.remote_id.as_deref()),
            Request::HeartBeat(r) => (r.group.as_deref(), r.remote_id.as_deref()),
            Request::Push(r) => (r.group.as_deref(), r.remote_id.as_deref()),
            Request::LeadershipTransfer(r) => (r.group.as_deref(), r.remote_id.as_deref()),
        };
        let code = if remote != Some(self.cfg.self_id.as_str()) {
            Some(DLedgerCode::UNKNOWN_MEMBER)
        } else if group != Some(self.cfg.group.as_str()) {
            Some(DLedgerCode::UNKNOWN_GROUP)
        } else {
            None
        };
        if let Some(code) = code {
            let resp = self.error_response(&req, code);
            self.respond(id, resp);
            return;
        }
        match req {
            Request::Vote(r) => {
                let resp = self.on_vote_request(&r);
                self.respond(id, Response::Vote(resp));
            }
            Request::HeartBeat(r) => {
                let resp = self.on_heartbeat_request(&r);
                self.respond(id, Response::HeartBeat(resp));
            }
            Request::Push(r) => self.on_push_request(id, r),
            Request::LeadershipTransfer(r) => {
                // An admin request the leader accepted is answered when the transfer ends.
                if let Some(resp) = self.on_transfer_request(id, &r) {
                    self.respond(id, Response::LeadershipTransfer(resp));
                }
            }
        }
    }

    /// Error response copying the request's common members, with our leader (spec §3.1).
    pub(crate) fn error_response(&self, req: &Request, code: DLedgerCode) -> Response {
        let leader = self.leader_id().map(str::to_owned);
        let term = self.ms.term;
        match req {
            Request::Vote(r) => Response::Vote(VoteResponse::answer(
                r,
                code,
                leader,
                term,
                VoteResult::UNKNOWN,
            )),
            Request::HeartBeat(r) => Response::HeartBeat(
                Common {
                    code,
                    leader_id: leader,
                    ..r.clone()
                }
                .with_term(term),
            ),
            Request::LeadershipTransfer(r) => Response::LeadershipTransfer(
                Common {
                    code,
                    group: r.group.clone(),
                    leader_id: leader,
                    local_id: r.local_id.clone(),
                    remote_id: r.remote_id.clone(),
                    ..Common::default()
                }
                .with_term(term),
            ),
            Request::Push(r) => Response::Push(self.push_response(r, code)),
        }
    }

    // ----- outbound replies ---------------------------------------------------------------

    fn on_reply(&mut self, ctx: CallCtx, result: Result<Response, CallFailure>) {
        match ctx {
            CallCtx::Vote { term, pre } => {
                if let Ok(Response::Vote(v)) = result {
                    self.on_vote_response(term, pre, &v);
                }
            }
            CallCtx::HeartBeat { term, peer } => {
                let hb = match result {
                    Ok(Response::HeartBeat(h)) => Ok(h),
                    Ok(_) => Err(CallFailure::Network),
                    Err(e) => Err(e),
                };
                self.on_heartbeat_response(term, peer, hb);
            }
            CallCtx::Push(ctx) => {
                let p = match result {
                    Ok(Response::Push(p)) => Ok(p),
                    Ok(_) => Err(CallFailure::Network),
                    Err(e) => Err(e),
                };
                self.on_push_response(ctx, p);
            }
            CallCtx::Transfer { term, seq } => self.on_transfer_reply(term, seq, result),
        }
    }

    /// Build the leader -> transferee request.
    pub(crate) fn transfer_request(&self, peer: usize) -> LeadershipTransferRequest {
        LeadershipTransferRequest::new(
            &self.cfg.group,
            &self.cfg.self_id,
            &self.cfg.peers[peer],
            self.ms.term,
            self.log.end_index(),
        )
    }
}
