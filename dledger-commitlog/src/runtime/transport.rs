//! DLedger RPC over remoting (spec dledger.md §3): the server side hands decoded requests to
//! the driver and sends its answer back; one peer task per member sends the core's calls.
//!
//! Frames: request code = DLedger code, JSON header without extFields, JSON body; responses
//! always carry remoting code 200 with the status in the body's `code` member. METADATA
//! (50000) is answered here from the latest status snapshot; other codes get
//! REQUEST_CODE_NOT_SUPPORTED.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use remoting::{
    ConnectionHandle, ProcessFuture, RemotingClient, RemotingCommand, RemotingError, RequestCode,
    RequestProcessor, ResponseCode,
};
use tokio::sync::{mpsc, oneshot};

use super::push_cache::EntryJsonCache;
use super::types::LedgerStatus;
use crate::wire::messages::{CallFailure, CallId, Common, DLedgerCode, Request, Response};

/// Remoting request code of METADATA.
pub(crate) const REQUEST_CODE_METADATA: i32 = 50_000;

/// What the network side tells the driver.
pub(crate) enum NetEvent {
    /// An inbound DLedger request; the driver answers through `reply`.
    Request {
        req: Request,
        reply: oneshot::Sender<Response>,
    },
    /// Outcome of an outbound call.
    Reply {
        call: CallId,
        result: Result<Response, CallFailure>,
    },
}

/// One outbound call for a peer task.
pub(crate) struct OutCall {
    pub call: CallId,
    pub req: Request,
}

/// Liveness clock shared by a peer task and the status snapshot.
#[derive(Debug)]
pub(crate) struct PeerLiveness {
    epoch: Instant,
    /// ms since `epoch` of the last successful response + 1 (0 = never).
    last_ok_ms: AtomicU64,
}

impl PeerLiveness {
    pub(crate) fn new(epoch: Instant) -> Self {
        PeerLiveness {
            epoch,
            last_ok_ms: AtomicU64::new(0),
        }
    }

    /// Heard from the peer just now (a response to our call, or a request from it).
    pub(crate) fn mark(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64 + 1;
        self.last_ok_ms.store(ms, Ordering::Relaxed);
    }

    /// Answered within the last `window_ms`.
    pub(crate) fn alive_within(&self, window_ms: u64) -> bool {
        let last = self.last_ok_ms.load(Ordering::Relaxed);
        last != 0 && (self.epoch.elapsed().as_millis() as u64 + 1).saturating_sub(last) <= window_ms
    }
}

/// Server side: every request goes through here.
pub(crate) struct RpcService {
    pub net_tx: mpsc::Sender<NetEvent>,
    pub group: String,
    pub self_id: String,
    pub peers: Vec<(String, SocketAddr)>,
    pub status: Arc<Mutex<LedgerStatus>>,
    /// How long a request waits for the driver's answer (the caller's own timeout).
    pub answer_timeout: Duration,
    /// Memory PUSH entry bodies are decoded into: taken back for the next push once the
    /// driver has stored (and dropped) the previous one's entries, so a follower does not
    /// allocate and first-touch fresh memory for every push.
    pub decode_scratch: Mutex<BytesMut>,
}

fn response(body: Vec<u8>) -> RemotingCommand {
    RemotingCommand::success().with_body(body)
}

impl RpcService {
    async fn handle(&self, request: RemotingCommand) -> Option<RemotingCommand> {
        let code = request.code();
        if code == REQUEST_CODE_METADATA {
            return Some(response(self.metadata(&request)));
        }
        let decoded = {
            let mut scratch = self
                .decode_scratch
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let decoded = Request::decode_body_in(code, request.body(), &mut scratch);
            release_if_large(&mut scratch);
            decoded
        };
        let req = match decoded {
            Ok(Some(req)) => req,
            Ok(None) => return Some(RemotingCommand::request_code_not_supported(&request)),
            Err(e) => {
                tracing::warn!(error = %e, "undecodable DLedger request");
                let c = Common {
                    code: DLedgerCode::UNEXPECTED_ARGUMENT,
                    ..Common::default()
                };
                return Some(response(serde_json::to_vec(&c).unwrap_or_default()));
            }
        };
        let (tx, rx) = oneshot::channel();
        if self
            .net_tx
            .send(NetEvent::Request { req, reply: tx })
            .await
            .is_err()
        {
            return None; // shutting down: the caller times out, as with a dead member
        }
        // Unanswered requests (a sync-mode ack dropped on a term change) are given up after
        // the caller's timeout; the driver then forgets them.
        let resp = tokio::time::timeout(self.answer_timeout, rx)
            .await
            .ok()?
            .ok()?;
        Some(response(resp.encode_body()))
    }

    /// MetadataResponse = common + `peers` (id -> address) + `leaderId`.
    fn metadata(&self, request: &RemotingCommand) -> Vec<u8> {
        let (leader, term) = {
            let s = self.status.lock().unwrap_or_else(|e| e.into_inner());
            (s.leader_id.clone(), s.term)
        };
        let asked: serde_json::Value = serde_json::from_slice(request.body()).unwrap_or_default();
        let peers: serde_json::Map<String, serde_json::Value> = self
            .peers
            .iter()
            .map(|(id, a)| (id.clone(), a.to_string().into()))
            .collect();
        let mut m = serde_json::Map::new();
        m.insert("code".into(), 200.into());
        m.insert("group".into(), self.group.clone().into());
        if let Some(l) = leader {
            m.insert("leaderId".into(), l.into());
        }
        if let Some(local) = asked.get("localId").filter(|v| v.is_string()) {
            m.insert("localId".into(), local.clone());
        }
        m.insert("peers".into(), peers.into());
        m.insert("remoteId".into(), self.self_id.clone().into());
        m.insert("term".into(), term.raw().into());
        serde_json::to_vec(&m).unwrap_or_default()
    }
}

impl RequestProcessor for RpcService {
    fn process<'a>(
        &'a self,
        _conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        Box::pin(self.handle(request))
    }
}

/// Most memory a reused encode/decode buffer keeps between messages (a few default-sized
/// batch pushes); after an unusually large push it is let go.
const SCRATCH_KEEP_BYTES: usize = 2 << 20;

/// Drops `scratch`'s memory (what others still hold of it stays theirs) if it grew past
/// [`SCRATCH_KEEP_BYTES`].
fn release_if_large(scratch: &mut BytesMut) {
    if scratch.capacity() > SCRATCH_KEEP_BYTES {
        *scratch = BytesMut::new();
    }
}

/// The remoting body of `req`. PUSH bodies are appended to `scratch` and split off it: the
/// remoting client copies a body into its connection's outbox and drops it before the peer
/// task encodes the next one, so `scratch` takes its memory back (`reserve` reclaims a
/// buffer nobody else holds) instead of allocating and first-touching up to a few hundred
/// KiB per push.
fn encode_call(req: &Request, pushes: &EntryJsonCache, scratch: &mut BytesMut) -> Bytes {
    match req {
        Request::Push(r) => {
            pushes.encode_push_into(r, scratch);
            let body = scratch.split().freeze();
            release_if_large(scratch);
            body
        }
        other => Bytes::from(other.encode_body()),
    }
}

/// Sends one call and maps the outcome for the core.
async fn call_once(
    client: RemotingClient,
    addr: SocketAddr,
    call: CallId,
    code: i32,
    body: Bytes,
    timeout: Duration,
) -> (CallId, Result<Response, CallFailure>) {
    let cmd = RemotingCommand::request_empty(RequestCode(code)).with_body(body);
    let result = match client.invoke(addr, cmd, timeout).await {
        Ok(resp) if resp.response_code() == ResponseCode::SUCCESS => {
            Response::decode_body(code, resp.body()).map_err(|e| {
                tracing::warn!(%addr, error = %e, "undecodable DLedger response");
                CallFailure::Network
            })
        }
        Ok(resp) => {
            tracing::debug!(%addr, code = resp.code(), "DLedger call refused by remoting");
            Err(CallFailure::Network)
        }
        Err(RemotingError::Timeout { .. }) => Err(CallFailure::Timeout),
        Err(e) => {
            tracing::trace!(%addr, error = %e, "DLedger call failed");
            Err(CallFailure::Network)
        }
    };
    (call, result)
}

type CallFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = (CallId, Result<Response, CallFailure>)> + Send>,
>;

/// Network IO for one peer: takes calls from its bounded queue, encodes their bodies (into
/// one reused buffer, see [`encode_call`]), keeps them in flight concurrently (the core
/// bounds the window), and feeds outcomes to the driver. `pushes` is shared by the member's
/// peer tasks (entries are encoded once for all followers). Completed calls are polled
/// first, so a new call's future gets polled (and its body copied out and dropped) before
/// the next body is encoded.
pub(crate) async fn peer_task(
    addr: SocketAddr,
    client: RemotingClient,
    mut calls: mpsc::Receiver<OutCall>,
    net_tx: mpsc::Sender<NetEvent>,
    timeout: Duration,
    liveness: Arc<PeerLiveness>,
    pushes: Arc<EntryJsonCache>,
) {
    let mut inflight: FuturesUnordered<CallFuture> = FuturesUnordered::new();
    let mut scratch = BytesMut::new();
    loop {
        tokio::select! {
            biased;
            Some((call, result)) = inflight.next(), if !inflight.is_empty() => {
                if result.is_ok() {
                    liveness.mark();
                }
                if net_tx.send(NetEvent::Reply { call, result }).await.is_err() {
                    return;
                }
            }
            next = calls.recv() => match next {
                Some(out) => {
                    let code = out.req.request_code();
                    let body = encode_call(&out.req, &pushes, &mut scratch);
                    drop(out.req); // the entries' bodies are no longer needed here
                    let call = call_once(client.clone(), addr, out.call, code, body, timeout);
                    inflight.push(Box::pin(call) as CallFuture);
                }
                None => return,
            },
        }
    }
}
