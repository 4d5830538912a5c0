//! The driver task: the single owner of the core [`Node`] and (through [`StoreLog`]) the store
//! writer. Feeds inputs to the core and executes its actions in order.
//!
//! Loop: `select! { biased; control, network inbox, proposals, flush progress, ticker }`;
//! each wake-up takes everything already queued on the network inbox and the proposal queue
//! (bounded) and feeds it to the core as one batch (one replication pump, so proposals of one
//! turn share a push), then ticks the core if the tick period (5 ms) has passed, so a busy
//! inbox never starves heartbeats or elections.
//! `PersistHardState` is executed (fsync) before any later action; if it fails the member
//! stops (it can no longer keep a vote promise) rather than continue. A store poisoned by a
//! failed flush stops the member the same way (crash-like: no final checkpoint), and its
//! role is published as candidate so the broker stops writing to it.
//! The driver never awaits another task: calls go to peer queues with `try_send`, and a full
//! queue is reported back to the core as a network failure.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::error::{ProposeError, TransferError};
use super::log_adapter::StoreLog;
use super::transport::{NetEvent, OutCall, PeerLiveness};
use super::types::{CommittedMark, LedgerStatus, PeerStatus, RoleState};
use crate::core::{
    Action, Appended, CallFailure, Input, Node, ProposalId, RaftLog, RequestId, Role,
};
use crate::store::FlushProgress;
use crate::types::Index;

/// Core tick period.
pub(crate) const TICK_MS: u64 = 5;
/// Most events handled per wake-up before the tick deadline is checked again.
const BATCH: usize = 256;
/// Status snapshot refresh period.
const STATUS_MS: u64 = 50;

/// A client append waiting for its outcome.
pub(crate) struct Proposal {
    pub body: Bytes,
    pub reply: oneshot::Sender<Result<Appended, ProposeError>>,
}

/// Requests from the [`super::Ledger`] handle other than proposals.
pub(crate) enum Control {
    /// Hand leadership to `to`; `reply` gets the outcome (refusal at once, else when done).
    Transfer { to: String, reply: TransferReply },
    /// Stop: graceful (final flush + checkpoint) or crash-like (neither).
    Stop { graceful: bool },
}

/// Where a leadership transfer's outcome goes.
pub(crate) type TransferReply = oneshot::Sender<Result<(), TransferError>>;

/// Receivers the driver loop selects on.
pub(crate) struct Inbox {
    pub ctl: mpsc::Receiver<Control>,
    pub net: mpsc::Receiver<NetEvent>,
    pub proposals: mpsc::Receiver<Proposal>,
    pub flush: watch::Receiver<FlushProgress>,
}

/// Where the driver publishes what it learns.
pub(crate) struct Outlets {
    pub role: watch::Sender<RoleState>,
    pub role_events: broadcast::Sender<RoleState>,
    pub committed: watch::Sender<CommittedMark>,
    pub status: Arc<Mutex<LedgerStatus>>,
}

/// One member as the driver knows it.
pub(crate) struct Peer {
    pub id: String,
    pub addr: std::net::SocketAddr,
    /// `None` for this member.
    pub tx: Option<mpsc::Sender<OutCall>>,
    pub liveness: Arc<PeerLiveness>,
}

pub(crate) struct Driver {
    pub node: Node<StoreLog>,
    pub epoch: Instant,
    pub peers: Vec<Peer>,
    pub out: Outlets,
    waiters: HashMap<ProposalId, oneshot::Sender<Result<Appended, ProposeError>>>,
    next_proposal: ProposalId,
    requests: HashMap<RequestId, oneshot::Sender<Response>>,
    next_request: RequestId,
    /// Inputs the shell generates itself (failed sends), handled after the current actions.
    local: VecDeque<Input>,
    /// The transfer request being fed to the core right now: a `TransferDone` emitted while
    /// it is handled is its (immediate) refusal.
    transfer_incoming: Option<TransferReply>,
    /// The transfer the core accepted; its `TransferDone` comes later (the core runs at most
    /// one at a time and refuses others at once).
    transfer_running: Option<TransferReply>,
    flushed_index: Option<Index>,
    next_tick_ms: u64,
    next_status_ms: u64,
    failed: Option<String>,
}

use crate::wire::messages::{Request, Response};

impl Driver {
    pub(crate) fn new(
        node: Node<StoreLog>,
        epoch: Instant,
        peers: Vec<Peer>,
        out: Outlets,
    ) -> Self {
        let flushed_index = node.log().end_index();
        Driver {
            node,
            epoch,
            peers,
            out,
            waiters: HashMap::with_capacity(1024),
            next_proposal: 1,
            requests: HashMap::with_capacity(256),
            next_request: 1,
            local: VecDeque::new(),
            transfer_incoming: None,
            transfer_running: None,
            flushed_index,
            next_tick_ms: 0,
            next_status_ms: 0,
            failed: None,
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Runs until told to stop (or every handle is gone), then closes or abandons the store.
    pub(crate) async fn run(mut self, mut inbox: Inbox) {
        let mut ticker = tokio::time::interval(Duration::from_millis(TICK_MS));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut flush_open = true;
        let mut batch: Vec<Input> = Vec::with_capacity(2 * BATCH + 1);
        self.refresh_status();
        let graceful = loop {
            tokio::select! {
                biased;
                c = inbox.ctl.recv() => match c {
                    Some(Control::Stop { graceful }) => break graceful,
                    Some(Control::Transfer { to, reply }) => self.on_transfer(to, reply),
                    None => break true,
                },
                Some(ev) = inbox.net.recv() => {
                    self.on_net(ev, &mut batch);
                    self.take_ready(&mut inbox, &mut batch);
                    self.handle_batch(&mut batch);
                }
                Some(p) = inbox.proposals.recv() => {
                    self.on_propose(p, &mut batch);
                    self.take_ready(&mut inbox, &mut batch);
                    self.handle_batch(&mut batch);
                }
                r = inbox.flush.changed(), if flush_open => match r {
                    Ok(()) => {
                        let p = *inbox.flush.borrow_and_update();
                        self.on_flush_progress(p);
                    }
                    Err(_) => flush_open = false,
                },
                _ = ticker.tick() => {}
            }
            self.maybe_tick();
            if let Some(why) = &self.failed {
                tracing::error!(me = %self.node.config().self_id, reason = %why, "ledger member stopping after a fatal storage error");
                break false;
            }
        };
        self.stop(graceful, inbox);
    }

    fn handle(&mut self, input: Input) {
        let now = self.now_ms();
        self.node.handle(now, input);
        self.drain(now);
    }

    /// Adds whatever else is already queued (network events and proposals, at most
    /// [`BATCH`] of each) to `batch`, so one core pass covers them all.
    fn take_ready(&mut self, inbox: &mut Inbox, batch: &mut Vec<Input>) {
        for _ in 0..BATCH {
            match inbox.net.try_recv() {
                Ok(ev) => self.on_net(ev, batch),
                Err(_) => break,
            }
        }
        for _ in 0..BATCH {
            match inbox.proposals.try_recv() {
                Ok(p) => self.on_propose(p, batch),
                Err(_) => break,
            }
        }
    }

    /// Feeds `batch` to the core in one pass (one replication pump for all of it), then
    /// executes the resulting actions.
    fn handle_batch(&mut self, batch: &mut Vec<Input>) {
        if batch.is_empty() {
            return;
        }
        let now = self.now_ms();
        self.node.handle_batch(now, batch.drain(..));
        self.drain(now);
    }

    fn maybe_tick(&mut self) {
        let now = self.now_ms();
        if now >= self.next_tick_ms {
            self.next_tick_ms = now + TICK_MS;
            self.node.tick(now);
            self.drain(now);
        }
        if now >= self.next_status_ms {
            self.refresh_status();
            // Requests whose caller gave up (the server side times out after the RPC
            // timeout) are forgotten here, so nothing accumulates.
            if self.requests.len() > 64 {
                self.requests.retain(|_, tx| !tx.is_closed());
            }
        }
    }

    /// Executes every queued action in order, then the shell's own follow-up inputs.
    fn drain(&mut self, now: u64) {
        loop {
            while let Some(a) = self.node.poll_action() {
                if self.failed.is_some() {
                    return; // nothing after a failed hard-state write may leave
                }
                self.execute(a);
            }
            match self.local.pop_front() {
                Some(i) if self.failed.is_none() => self.node.handle(now, i),
                _ => break,
            }
        }
    }

    fn execute(&mut self, a: Action) {
        match a {
            Action::PersistHardState(hs) => {
                let res = self
                    .node
                    .log_mut()
                    .store_mut()
                    .save_hard_state(hs.term, hs.voted_for.as_deref());
                if let Err(e) = res {
                    self.failed = Some(format!("cannot persist term/vote: {e}"));
                }
            }
            Action::Call { to, call, req } => {
                let sent = match self
                    .peers
                    .iter()
                    .find(|p| p.id == to)
                    .and_then(|p| p.tx.as_ref())
                {
                    Some(tx) => tx.try_send(OutCall { call, req }).is_ok(),
                    None => false,
                };
                if !sent {
                    self.local.push_back(Input::Reply {
                        call,
                        result: Err(CallFailure::Network),
                    });
                }
            }
            Action::Respond { id, resp } => {
                if let Some(tx) = self.requests.remove(&id) {
                    let _ = tx.send(resp);
                }
            }
            // Sync mode: the store's flusher is woken by every append (group commit); its
            // progress comes back through the flush watch as `LogFlushed`.
            Action::FlushLog { .. } => {}
            Action::CommitAdvanced { index, .. } => {
                let store = self.node.log_mut().store_mut();
                store.advance_committed(index);
                let mark = CommittedMark {
                    index: store.committed_index(),
                    end_pos: store.committed_end_pos(),
                };
                self.out.committed.send_replace(mark);
            }
            Action::ProposeDone { id, result } => {
                if let Some(tx) = self.waiters.remove(&id) {
                    let _ = tx.send(result);
                }
            }
            Action::RoleChanged { role, term, leader } => {
                let rs = RoleState {
                    role,
                    term,
                    leader_id: leader,
                };
                tracing::info!(me = %self.node.config().self_id, role = ?rs.role, %term, leader = ?rs.leader_id, "ledger role changed");
                self.out.role.send_replace(rs.clone());
                let _ = self.out.role_events.send(rs);
                self.next_status_ms = 0;
            }
            Action::TransferDone { to, result } => {
                let waiter = self
                    .transfer_incoming
                    .take()
                    .or_else(|| self.transfer_running.take());
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(result.map_err(TransferError::from));
                    }
                    None => {
                        tracing::debug!(%to, ?result, "transfer outcome without a waiter")
                    }
                }
            }
        }
    }

    fn on_net(&mut self, ev: NetEvent, batch: &mut Vec<Input>) {
        match ev {
            NetEvent::Request { req, reply } => {
                self.note_sender(&req);
                let id = self.next_request;
                self.next_request += 1;
                self.requests.insert(id, reply);
                batch.push(Input::Request { id, req });
            }
            NetEvent::Reply { call, result } => batch.push(Input::Reply { call, result }),
        }
    }

    /// Requests count as signs of life of their sender (followers rarely call anyone).
    fn note_sender(&self, req: &Request) {
        let from = match req {
            Request::Vote(r) => r.local_id.as_deref(),
            Request::HeartBeat(r) => r.local_id.as_deref(),
            Request::Push(r) => r.local_id.as_deref(),
            Request::LeadershipTransfer(r) => r.local_id.as_deref(),
        };
        if let Some(p) = from.and_then(|id| self.peers.iter().find(|p| p.id == id)) {
            p.liveness.mark();
        }
    }

    fn on_propose(&mut self, p: Proposal, batch: &mut Vec<Input>) {
        if p.reply.is_closed() {
            return; // the caller went away before we got to it: nothing was appended
        }
        let id = self.next_proposal;
        self.next_proposal += 1;
        self.waiters.insert(id, p.reply);
        batch.push(Input::Propose { id, body: p.body });
    }

    /// The core answers every transfer input with exactly one `TransferDone`: during this
    /// call for a refusal, later for an accepted transfer.
    fn on_transfer(&mut self, to: String, reply: TransferReply) {
        self.transfer_incoming = Some(reply);
        self.handle(Input::TransferLeadership { to });
        if let Some(accepted) = self.transfer_incoming.take() {
            if let Some(stale) = self.transfer_running.replace(accepted) {
                // Cannot happen (the core refuses a second transfer); never leave one hanging.
                let _ = stale.send(Err(TransferError::Timeout));
            }
        }
    }

    fn on_flush_progress(&mut self, p: FlushProgress) {
        if p.poisoned {
            // Nothing written from now on can become durable: this member can neither lead
            // nor follow. Stop (role reported as candidate); a restart recovers the store.
            self.failed = Some("store poisoned by a failed flush; restart to recover".into());
            return;
        }
        if let Some(i) = self.node.log_mut().flushed_through(p.flushed.0) {
            self.flushed_index = Some(i);
            self.handle(Input::LogFlushed { index: Some(i) });
        }
    }

    fn refresh_status(&mut self) {
        self.next_status_ms = self.now_ms() + STATUS_MS;
        let n = &self.node;
        let log = n.log();
        let store = log.store();
        let end = log.end_index();
        let leader = n.role() == Role::Leader;
        let lease = n.config().lease_ms();
        let me = n.config().self_id.as_str();
        let peers = self
            .peers
            .iter()
            .map(|p| {
                let m = if leader { n.match_index(&p.id) } else { None };
                PeerStatus {
                    id: p.id.clone(),
                    addr: p.addr,
                    match_index: m,
                    lag: leader.then(|| Index::distance(m, end)),
                    alive: p.id == me || p.liveness.alive_within(lease),
                    needs_reinstall: leader && n.needs_reinstall(&p.id),
                }
            })
            .collect();
        let st = LedgerStatus {
            self_id: me.to_owned(),
            role: n.role(),
            term: n.term(),
            leader_id: n.leader_id().map(str::to_owned),
            begin_index: Some(log.begin_index()),
            end_index: end,
            end_term: log.end_term(),
            committed_index: store.committed_index(),
            committed_end_pos: store.committed_end_pos(),
            flushed_index: self.flushed_index,
            pending_proposals: n.pending_proposals(),
            peers,
        };
        *self.out.status.lock().unwrap_or_else(|e| e.into_inner()) = st;
    }

    /// Answers everyone still waiting, stops the peer tasks, then closes (graceful) or
    /// abandons (crash-like) the store.
    fn stop(mut self, graceful: bool, mut inbox: Inbox) {
        // Proposals that reached the core may still commit elsewhere: indeterminate.
        for (_, w) in self.waiters.drain() {
            let _ = w.send(Err(ProposeError::TermChanged));
        }
        inbox.proposals.close();
        while let Ok(p) = inbox.proposals.try_recv() {
            let _ = p.reply.send(Err(ProposeError::Shutdown));
        }
        if let Some(w) = self.transfer_running.take() {
            let _ = w.send(Err(TransferError::Shutdown));
        }
        inbox.ctl.close();
        while let Ok(c) = inbox.ctl.try_recv() {
            if let Control::Transfer { reply, .. } = c {
                let _ = reply.send(Err(TransferError::Shutdown));
            }
        }
        inbox.net.close();
        self.requests.clear();
        for p in &mut self.peers {
            p.tx = None;
        }
        self.refresh_status();
        let last = RoleState {
            role: Role::Candidate,
            term: self.node.term(),
            leader_id: None,
        };
        if *self.out.role.borrow() != last {
            self.out.role.send_replace(last.clone());
            let _ = self.out.role_events.send(last);
        }
        {
            let mut st = self.out.status.lock().unwrap_or_else(|e| e.into_inner());
            st.role = Role::Candidate;
            st.leader_id = None;
        }
        let me = self.node.config().self_id.clone();
        match self.node.log_mut().take() {
            Some(store) if graceful => match store.close() {
                Ok(()) => tracing::info!(%me, "ledger stopped: final flush and checkpoint written"),
                Err(e) => {
                    tracing::error!(%me, error = %e, "ledger stopped: final flush/checkpoint failed")
                }
            },
            Some(store) => {
                store.abandon();
                tracing::info!(%me, "ledger halted without final flush or checkpoint");
            }
            None => {}
        }
    }
}
