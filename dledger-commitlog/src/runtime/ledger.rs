//! [`Ledger`]: the handle the broker holds — start, propose, watch, transfer, shut down.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use remoting::{ClientConfig, RemotingClient, RemotingServer, ServerConfig};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::driver::{Control, Driver, Inbox, Outlets, Peer, Proposal};
use super::error::{LedgerError, ProposeError, TransferError};
use super::log_adapter::StoreLog;
use super::options::LedgerOptions;
use super::push_cache::EntryJsonCache;
use super::transport::{peer_task, PeerLiveness, RpcService};
use super::types::{CommittedMark, LedgerStatus, RoleState};
use crate::core::{Appended, HardState, Node, Role};
use crate::store::{Store, StoreError, StoreReader};

/// Capacity of the network inbox (requests and replies from every peer).
const NET_INBOX: usize = 4096;
/// Role events kept for slow subscribers before they are told they lagged.
const ROLE_EVENTS: usize = 1024;

struct Inner {
    self_id: String,
    local_addr: SocketAddr,
    proposals: mpsc::Sender<Proposal>,
    ctl: mpsc::Sender<Control>,
    role: watch::Receiver<RoleState>,
    role_events: broadcast::Sender<RoleState>,
    committed: watch::Receiver<CommittedMark>,
    reader: StoreReader,
    status: Arc<Mutex<LedgerStatus>>,
    server: RemotingServer,
    client: RemotingClient,
    driver: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    max_body: u64,
    transfer_wait: Duration,
    hand_over_wait: Duration,
}

/// One running DLedger member. Cheap to clone (`Send + Sync`); all clones are the same member.
/// Dropping the last clone stops the member as [`Ledger::shutdown`] would, but without
/// waiting; call `shutdown` to know when the final flush is done.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("self_id", &self.inner.self_id)
            .field("addr", &self.inner.local_addr)
            .finish()
    }
}

impl Ledger {
    /// Recovers the store in `opts.store_root`, binds the DLedger RPC listener on this
    /// member's address from `opts.peers`, and starts the driver and peer tasks. The member
    /// starts as a candidate; the first election round begins within
    /// `maxVoteIntervalMs - minVoteIntervalMs`.
    pub async fn start(opts: LedgerOptions) -> Result<Ledger, LedgerError> {
        opts.validate().map_err(LedgerError::Config)?;
        let cfg = opts.effective_core();
        let addr = opts
            .self_addr()
            .ok_or_else(|| LedgerError::Config("selfId not in peers".into()))?;
        let (root, store_cfg) = (opts.store_root.clone(), opts.store.clone());
        // Recovery and the creation (pre-touch) of the first files are slow blocking IO: run
        // them off the async workers, before the driver exists, so no election waits on them.
        let store = tokio::task::spawn_blocking(move || {
            let mut store = Store::open(&root, &store_cfg)?;
            if let Err(e) = store.prepare_next_append() {
                tracing::warn!(error = %e, "could not prepare the next log file at start");
            }
            Ok::<Store, StoreError>(store)
        })
        .await
        .map_err(|e| LedgerError::Config(format!("store open task failed: {e}")))??;
        let reader = store.reader();
        let flush = store.subscribe_flush();
        let hard: HardState = store.hard_state().clone();
        let committed_hint = store.committed_index();
        let transfer_wait = Duration::from_millis(
            cfg.leadership_transfer_wait_timeout_ms + cfg.lease_ms() + 2 * cfg.max_vote_interval_ms,
        );
        let rpc_timeout = Duration::from_millis(cfg.rpc_timeout_ms);
        let hand_over_wait = Duration::from_millis(cfg.lease_ms());
        let peer_queue = cfg.push_inflight_max + 256;
        let backoff_max = Duration::from_millis(cfg.heartbeat_interval_ms.max(50));
        let epoch = Instant::now();
        let node = Node::new(
            cfg,
            hard.clone(),
            StoreLog::new(store).with_append_hook(opts.append_hook.clone()),
            committed_hint,
            0,
        )
        .map_err(LedgerError::Config)?;

        let initial_role = RoleState {
            role: Role::Candidate,
            term: node.term(),
            leader_id: None,
        };
        let (role_tx, role_rx) = watch::channel(initial_role);
        let (role_events, _) = broadcast::channel(ROLE_EVENTS);
        let initial_mark = CommittedMark {
            index: reader.committed_index(),
            end_pos: reader.committed_end_pos(),
        };
        let (committed_tx, committed_rx) = watch::channel(initial_mark);
        let status = Arc::new(Mutex::new(LedgerStatus {
            self_id: opts.self_id.clone(),
            role: Role::Candidate,
            term: node.term(),
            leader_id: None,
            begin_index: None,
            end_index: None,
            end_term: None,
            committed_index: initial_mark.index,
            committed_end_pos: initial_mark.end_pos,
            flushed_index: None,
            pending_proposals: 0,
            peers: Vec::new(),
        }));

        let (net_tx, net_rx) = mpsc::channel(NET_INBOX);
        let (prop_tx, prop_rx) = mpsc::channel(opts.core.max_pending_requests.max(1));
        let (ctl_tx, ctl_rx) = mpsc::channel(16);

        let service = RpcService {
            net_tx: net_tx.clone(),
            group: opts.group.clone(),
            self_id: opts.self_id.clone(),
            peers: opts.peers.clone(),
            status: status.clone(),
            answer_timeout: rpc_timeout,
            decode_scratch: Mutex::new(bytes::BytesMut::new()),
        };
        let mut server_config = ServerConfig::default();
        server_config.connection.busy_poll = opts.busy_poll;
        let server = RemotingServer::builder(server_config)
            .processor(Arc::new(service))
            .bind(addr)
            .await
            .map_err(|source| LedgerError::Bind { addr, source })?;
        let mut client_config = ClientConfig {
            connect_timeout: Duration::from_secs(1),
            reconnect_backoff_min: Duration::from_millis(20),
            reconnect_backoff_max: backoff_max,
            ..ClientConfig::default()
        };
        client_config.connection.busy_poll = opts.busy_poll;
        let client = RemotingClient::new(client_config);

        let mut peers = Vec::with_capacity(opts.peers.len());
        let pushes = Arc::new(EntryJsonCache::default());
        for (id, paddr) in &opts.peers {
            let liveness = Arc::new(PeerLiveness::new(epoch));
            let tx = if *id == opts.self_id {
                None
            } else {
                let (tx, rx) = mpsc::channel(peer_queue);
                tokio::spawn(peer_task(
                    *paddr,
                    client.clone(),
                    rx,
                    net_tx.clone(),
                    rpc_timeout,
                    liveness.clone(),
                    pushes.clone(),
                ));
                Some(tx)
            };
            peers.push(Peer {
                id: id.clone(),
                addr: *paddr,
                tx,
                liveness,
            });
        }
        drop(net_tx);

        let outlets = Outlets {
            role: role_tx,
            role_events: role_events.clone(),
            committed: committed_tx,
            status: status.clone(),
        };
        let driver = Driver::new(node, epoch, peers, outlets);
        let inbox = Inbox {
            ctl: ctl_rx,
            net: net_rx,
            proposals: prop_rx,
            flush,
        };
        let handle = tokio::spawn(driver.run(inbox));
        tracing::info!(self_id = %opts.self_id, group = %opts.group, %addr, "ledger started");
        Ok(Ledger {
            inner: Arc::new(Inner {
                self_id: opts.self_id.clone(),
                local_addr: server.local_addr(),
                proposals: prop_tx,
                ctl: ctl_tx,
                role: role_rx,
                role_events,
                committed: committed_rx,
                reader,
                status,
                server,
                client,
                driver: tokio::sync::Mutex::new(Some(handle)),
                max_body: opts.store.max_body_bytes(),
                transfer_wait,
                hand_over_wait,
            }),
        })
    }

    /// Appends `body` as one log entry; resolves when committed by a quorum (and flushed, in
    /// sync mode). `NotLeader`, `Busy`, `Transferring`, `DiskFull`, `Storage` and `Shutdown`
    /// are definite; `Timeout` and `TermChanged` are indeterminate (the entry may commit).
    pub async fn propose(&self, body: Bytes) -> Result<Appended, ProposeError> {
        if body.is_empty() {
            return Err(ProposeError::Storage(
                "empty bodies are reserved for the election no-op".into(),
            ));
        }
        if body.len() as u64 > self.inner.max_body {
            return Err(ProposeError::Storage(format!(
                "body of {} bytes exceeds the limit {}",
                body.len(),
                self.inner.max_body
            )));
        }
        {
            let r = self.inner.role.borrow();
            if r.role != Role::Leader {
                return Err(ProposeError::NotLeader {
                    leader: r.leader_id.clone(),
                });
            }
        }
        let (tx, rx) = oneshot::channel();
        match self.inner.proposals.try_send(Proposal { body, reply: tx }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(ProposeError::Busy),
            Err(TrySendError::Closed(_)) => return Err(ProposeError::Shutdown),
        }
        // The driver answers every proposal it takes; a lost answer means it died with the
        // proposal possibly appended: report it as indeterminate.
        rx.await.unwrap_or(Err(ProposeError::TermChanged))
    }

    /// Latest role, term and leader. Changes are published in order; a slow reader sees the
    /// newest state (use [`Ledger::role_events`] to see every change).
    pub fn role(&self) -> watch::Receiver<RoleState> {
        self.inner.role.clone()
    }

    /// Every role/term/leader change from now on, in order. A subscriber more than 1024
    /// changes behind gets `RecvError::Lagged` (and can resync from [`Ledger::role`]).
    pub fn role_events(&self) -> broadcast::Receiver<RoleState> {
        self.inner.role_events.subscribe()
    }

    /// Committed water mark (index and end position), updated on every advance.
    pub fn committed(&self) -> watch::Receiver<CommittedMark> {
        self.inner.committed.clone()
    }

    /// Read-only view of committed entries (by index or position), CRC-checked.
    pub fn reader(&self) -> StoreReader {
        self.inner.reader.clone()
    }

    /// Snapshot for admin and metrics (refreshed every ~50 ms; committed fields are live).
    pub fn status(&self) -> LedgerStatus {
        let mut s = self
            .inner
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let r = &self.inner.reader;
        s.committed_index = r.committed_index();
        s.committed_end_pos = r.committed_end_pos();
        s.end_index = s.end_index.max(r.end_index());
        s
    }

    /// This member's id.
    pub fn self_id(&self) -> &str {
        &self.inner.self_id
    }

    /// Address the DLedger RPC listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Hands leadership to member `to` (this member must be the leader) and waits until this
    /// member sees `to` as leader (the role watch shows it by then). A refusal comes at once
    /// as [`TransferError::Refused`] with its DLedger code (UNKNOWN_MEMBER, UNEXPECTED_MEMBER
    /// for this member itself, NOT_LEADER, FALL_BEHIND_TOO_MUCH, LEADER_TRANSFERRING); a
    /// transfer that was tried and failed comes with the transferee's code or
    /// TAKE_LEADERSHIP_FAILED within `leadershipTransferWaitTimeout` plus one vote interval.
    pub async fn transfer_leadership(&self, to: &str) -> Result<(), TransferError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .ctl
            .send(Control::Transfer {
                to: to.to_owned(),
                reply: tx,
            })
            .await
            .map_err(|_| TransferError::Shutdown)?;
        match tokio::time::timeout(self.inner.transfer_wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(TransferError::Shutdown),
            Err(_) => Err(TransferError::Timeout),
        }
    }

    /// A leader that stops on purpose first hands leadership to its most up-to-date live
    /// follower, so a planned restart costs milliseconds instead of an election timeout.
    /// Best effort, bounded by one lease; the stop goes on whatever happens.
    async fn hand_over_before_stop(&self) {
        let st = self.status();
        if st.role != Role::Leader {
            return;
        }
        let best = st
            .peers
            .iter()
            .filter(|p| p.id != st.self_id && p.alive && p.match_index.is_some())
            .max_by_key(|p| p.match_index)
            .map(|p| p.id.clone());
        let Some(to) = best else { return };
        match tokio::time::timeout(self.inner.hand_over_wait, self.transfer_leadership(&to)).await {
            Ok(Ok(())) => {
                tracing::info!(self_id = %self.inner.self_id, %to, "leadership handed over before stopping")
            }
            Ok(Err(e)) => {
                tracing::info!(self_id = %self.inner.self_id, %to, error = %e, "hand-over before stopping failed")
            }
            Err(_) => {
                tracing::info!(self_id = %self.inner.self_id, %to, "hand-over before stopping timed out")
            }
        }
    }

    /// Graceful stop: a leader first hands leadership to its best follower (bounded by one
    /// lease); pending proposals are answered (indeterminate if they reached the log),
    /// the store is flushed and checkpointed, tasks stop, the listener is unbound. Idempotent.
    pub async fn shutdown(&self) {
        self.stop(true).await;
    }

    /// Crash-like stop for tests and fatal paths: like [`Ledger::shutdown`] but without the
    /// final flush and checkpoint (the next start recovers from whatever is on disk).
    pub async fn halt(&self) {
        self.stop(false).await;
    }

    async fn stop(&self, graceful: bool) {
        let mut guard = self.inner.driver.lock().await;
        let Some(handle) = guard.take() else { return };
        if graceful {
            self.hand_over_before_stop().await;
        }
        let _ = self.inner.ctl.send(Control::Stop { graceful }).await;
        if let Err(e) = handle.await {
            tracing::error!(self_id = %self.inner.self_id, error = %e, "ledger driver task failed");
        }
        self.inner.server.shutdown().await;
        self.inner.client.shutdown().await;
    }
}
