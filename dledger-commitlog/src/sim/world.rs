//! The simulated world: nodes, network, disks, clients, fault schedule, event loop.

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;

mod push_faults;
mod retention;
mod truncation;

use super::checker::Checker;
use super::network::{Chaos, Links, PartitionKind};
use super::sim_log::{SimLog, StoreSimLog};
use crate::core::{
    Action, BugInjection, CallId, CoreConfig, HardState, Index, Input, LogEntry, MemLog, Node,
    RequestId, Role,
};
use crate::types::Shown;
use crate::wire::messages::{DLedgerCode, PushType, Request, Response};
use push_faults::PushFaultScript;
use retention::RetentionScript;
use truncation::TruncationScript;

/// Scripted fault schedules of catalogue entries that need a particular sequence of events
/// rather than random faults (RELIABILITY.md §6(a)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scenario {
    /// Random faults as the other options select.
    #[default]
    Random,
    /// SIM-09: a follower is down while the others delete old entries (retention); it comes
    /// back with its log intact (sometimes a deposed leader's divergent log) or empty.
    /// `divergent_over_begin`: whether a deposed follower's divergent suffix may start at or
    /// below a begin index, the leader's after its retention or the follower's own (the cases
    /// that found the R11 bugs named in tests/sim.rs; `false` narrows a sweep to the others).
    LaggingRetention { divergent_over_begin: bool },
    /// SIM-10: push responses delayed past `maxPushTimeOutMs` or dropped while pushes keep
    /// arriving.
    PushBookkeeping,
    /// SIM-11: leaders partitioned into a minority keep accepting proposals they cannot
    /// commit, leaving divergent suffixes of random lengths that later leaders truncate.
    Truncation,
}

/// What a run exercises. `Default` is a calm 3-node group.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub nodes: usize,
    /// Length of the fault phase (virtual ms).
    pub fault_ms: u64,
    /// Length of the healed phase in which the group must converge.
    pub heal_ms: u64,
    /// A client proposal every this many ms.
    pub propose_interval_ms: u64,
    /// Random drop/duplicate/delay/reorder (SIM-02).
    pub chaos: bool,
    /// Partitions (SIM-03).
    pub partitions: bool,
    /// Process crashes, page cache kept (SIM-04).
    pub crashes: bool,
    /// Power loss: unflushed tail lost; runs in sync-flush mode (SIM-05).
    pub power_loss: bool,
    /// One node's flushes take 0-2 s (SIM-13; with power_loss / sync flush).
    pub slow_disk: bool,
    /// Random leadership transfers (SIM-15).
    pub transfers: bool,
    /// A node's disk refuses writes (ENOSPC) for a while (SIM-14; MemLog only).
    pub disk_full: bool,
    /// Run nodes on the real store (in-memory disk) and restart through its recovery.
    pub real_store: bool,
    /// Each node's clock runs 20 % slow to 20 % fast (SIM-12; monotonic clocks never step).
    pub clock_drift: bool,
    /// Isolate one follower for most of the fault phase, then heal (SIM-08).
    pub isolate_follower: bool,
    /// Crashes always hit the leader and never take down a majority (failover timing).
    pub kill_leader_only: bool,
    /// A scripted schedule instead of random faults.
    pub scenario: Scenario,
    /// Historical bugs to re-inject (SIM-17).
    pub bugs: BugInjection,
    /// Keep a readable trace (used when replaying a failure).
    pub verbose: bool,
    /// How many trailing trace lines a verbose run keeps.
    pub trace_lines: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            nodes: 3,
            fault_ms: 20_000,
            heal_ms: 15_000,
            propose_interval_ms: 25,
            chaos: false,
            partitions: false,
            crashes: false,
            power_loss: false,
            slow_disk: false,
            transfers: false,
            disk_full: false,
            real_store: false,
            clock_drift: false,
            isolate_follower: false,
            kill_leader_only: false,
            scenario: Scenario::Random,
            bugs: BugInjection::default(),
            verbose: false,
            trace_lines: 400,
        }
    }
}

/// Summary of a passing run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub seed: u64,
    /// Hash of every event: equal seeds give equal digests.
    pub digest: u64,
    pub acked: usize,
    pub elections: usize,
    /// Elections after the first second (startup races excluded).
    pub elections_after_startup: usize,
    /// Elections during the healed phase.
    pub elections_after_heal: usize,
    /// Longest time without a leader during the run (ms).
    pub longest_leaderless_ms: u64,
    pub events: u64,
    /// Conflicting entries removed from replicas by TRUNCATE.
    pub truncated_entries: usize,
    /// Followers the final leader marks as needing a reinstall (their next entry is deleted).
    pub reinstall_followers: usize,
    /// Time from the heal until every live follower's match index (the leader's view) first
    /// reached the leader's end, if it did.
    pub catch_up_after_heal_ms: Option<u64>,
    /// SIM-09: most COMPARE/TRUNCATE pushes the lagging follower got in one virtual second.
    pub max_repair_pushes_per_s: usize,
    /// REPEATED_PUSH answers during the run.
    pub repeated_pushes: usize,
    /// SIM-10: PUSH responses dropped or delayed by the fault windows.
    pub faulted_push_responses: usize,
    /// Last trace lines (verbose runs only).
    pub trace: Vec<String>,
}

/// A broken invariant, with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub at_ms: u64,
    pub what: String,
    /// Last trace lines of a verbose replay.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {} at t={}ms: {}", self.seed, self.at_ms, self.what)?;
        writeln!(
            f,
            "replay: SIM_SEED={} (last {} trace lines follow)",
            self.seed,
            self.trace.len()
        )?;
        for l in &self.trace {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

enum Msg {
    Req {
        from: usize,
        from_inc: u32,
        call: CallId,
        req: Request,
    },
    Rep {
        call: CallId,
        resp: Response,
    },
}

enum Ev {
    Deliver { to: usize, inc: u32, msg: Box<Msg> },
    FlushDone { node: usize, inc: u32, up_to: Index },
}

struct Slot<L: SimLog> {
    node: Option<Node<L>>,
    inc: u32,
    hard: HardState,
    /// Durable log while down.
    down_log: Option<L>,
    restart_at_ms: u64,
    last_committed: Option<Index>,
    slow_disk: bool,
    disk_full_until: u64,
    /// This node's monotonic clock runs at this rate (1000 = true time; SIM-12 drift).
    clock_rate_permille: u64,
}

struct World<L: SimLog> {
    opts: SimOptions,
    seed: u64,
    rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    slots: Vec<Slot<L>>,
    links: Links,
    chaos: Chaos,
    requests: BTreeMap<RequestId, (usize, u32, CallId)>,
    next_request: RequestId,
    proposals: BTreeMap<u64, (Bytes, usize, u32)>,
    next_proposal: u64,
    checker: Checker,
    digest: u64,
    trace: VecDeque<String>,
    event_count: u64,
    partition_until: u64,
    batch_push: bool,
    leaderless_since: Option<u64>,
    longest_leaderless_ms: u64,
    healed: bool,
    /// Bodies of proposals refused definitely: they must never appear in a log.
    refused: Vec<Bytes>,
    elections_at_heal: usize,
    elections_at_startup: Option<usize>,
    retention: Option<RetentionScript>,
    push_faults: Option<PushFaultScript>,
    truncation: Option<TruncationScript>,
    truncated_entries: usize,
    repeated_pushes: usize,
    catch_up_after_heal_ms: Option<u64>,
    /// The push request being handled and the code it was answered with (TRUNCATE checks).
    watched_request: Option<(RequestId, Option<DLedgerCode>)>,
}

const TICK_MS: u64 = 10;

fn fnv(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x0000_0100_0000_01b3)
}

impl<L: SimLog> World<L> {
    fn new(seed: u64, opts: SimOptions) -> Result<Self, Violation> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let chaos = if opts.chaos {
            Chaos::random(&mut rng)
        } else {
            Chaos::calm()
        };
        let mut batch_push = rng.next_u64() & 1 == 0;
        if opts.scenario == Scenario::PushBookkeeping {
            batch_push = seed.is_multiple_of(2); // SIM-10: exactly half the seeds batch
        }
        let n = opts.nodes;
        let slow = if opts.slow_disk {
            Some((rng.next_u64() % n as u64) as usize)
        } else {
            None
        };
        let mut w = World {
            seed,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            slots: Vec::new(),
            links: Links::open(n),
            chaos,
            requests: BTreeMap::new(),
            next_request: 1,
            proposals: BTreeMap::new(),
            next_proposal: 1,
            checker: Checker::new(n),
            digest: 0xcbf2_9ce4_8422_2325,
            trace: VecDeque::new(),
            event_count: 0,
            partition_until: 0,
            batch_push,
            leaderless_since: Some(0),
            longest_leaderless_ms: 0,
            healed: false,
            refused: Vec::new(),
            elections_at_heal: 0,
            elections_at_startup: None,
            retention: match opts.scenario {
                Scenario::LaggingRetention {
                    divergent_over_begin,
                } => Some(RetentionScript::new(divergent_over_begin)),
                _ => None,
            },
            push_faults: (opts.scenario == Scenario::PushBookkeeping)
                .then(PushFaultScript::default),
            truncation: (opts.scenario == Scenario::Truncation).then(TruncationScript::default),
            truncated_entries: 0,
            repeated_pushes: 0,
            catch_up_after_heal_ms: None,
            watched_request: None,
            opts,
        };
        for i in 0..n {
            w.slots.push(Slot {
                node: None,
                inc: 0,
                hard: HardState::default(),
                down_log: None,
                restart_at_ms: 0,
                last_committed: None,
                slow_disk: slow == Some(i),
                disk_full_until: 0,
                clock_rate_permille: 1000,
            });
            if w.opts.clock_drift {
                w.slots[i].clock_rate_permille = 800 + w.rng.next_u64() % 401;
            }
            w.start(i)?;
        }
        Ok(w)
    }

    fn config(&mut self, i: usize) -> CoreConfig {
        let peers: Vec<String> = (0..self.opts.nodes).map(|p| format!("n{p}")).collect();
        let refs: Vec<&str> = peers.iter().map(String::as_str).collect();
        let node_seed = self.rng.next_u64();
        let mut c = CoreConfig::new("sim", &peers[i], &refs, node_seed);
        c.enable_batch_push = self.batch_push;
        c.sync_flush = self.opts.power_loss;
        c.bugs = self.opts.bugs.clone();
        // Small windows so gaps, refusals and resends happen often.
        c.push_inflight_max = 64;
        c.follower_buffer_max = 32;
        c.max_batch_push_entries = 16;
        // One seed in three holds partial batches as the runtime does (few large pushes); the
        // others send every entry at once (many small pushes in flight: more reordering and
        // gaps, which the re-injected bug scenarios need to show up quickly).
        if !self.seed.is_multiple_of(3) {
            c.partial_push_inflight_max = c.push_inflight_max;
        }
        c
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.opts.verbose {
            let l = format!("t={} {}", self.now, line());
            if self.trace.len() >= self.opts.trace_lines {
                self.trace.pop_front();
            }
            self.trace.push_back(l);
        }
    }

    fn fail(&self, what: String) -> Violation {
        Violation {
            seed: self.seed,
            at_ms: self.now,
            what,
            trace: self.trace.iter().cloned().collect(),
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// The node's own monotonic clock (drifts when `clock_drift` is on).
    fn local_time(&self, i: usize) -> u64 {
        self.now * self.slots[i].clock_rate_permille / 1000
    }

    fn start(&mut self, i: usize) -> Result<(), Violation> {
        let cfg = self.config(i);
        let log = match self.slots[i].down_log.take() {
            Some(l) => l,
            None => L::fresh().map_err(|e| self.fail(e))?,
        };
        let s = &mut self.slots[i];
        s.disk_full_until = 0;
        let hint = s.last_committed.min(log.end_index());
        s.inc += 1;
        let local = self.now * s.clock_rate_permille / 1000;
        match Node::new(cfg, s.hard.clone(), log, hint, local) {
            Ok(n) => s.node = Some(n),
            Err(e) => panic!("sim config rejected: {e}"),
        }
        self.checker.on_restart(i, hint);
        let inc = self.slots[i].inc;
        self.note(|| format!("n{i} start inc={inc} committed_hint={}", Shown(hint)));
        Ok(())
    }

    fn crash(&mut self, i: usize, restart_after_ms: u64) -> Result<(), Violation> {
        let power = self.opts.power_loss;
        let crash_seed = self.rng.next_u64();
        let Some(node) = self.slots[i].node.take() else {
            return Ok(());
        };
        // The checkpoint a restart finds names only flushed data (the store's rule); after a
        // process crash the page cache keeps everything.
        let committed = node.committed_index();
        self.slots[i].last_committed = if power {
            committed.min(node.log().flushed_index())
        } else {
            committed
        };
        // Recovery must always succeed (SIM-04).
        let restarted = node
            .into_log()
            .crash(power, crash_seed)
            .map_err(|e| self.fail(e))?;
        let s = &mut self.slots[i];
        s.down_log = Some(restarted);
        s.restart_at_ms = self.now.saturating_add(restart_after_ms);
        let kept = s.down_log.as_ref().and_then(|l| l.end_index());
        self.note(|| {
            format!(
                "n{i} CRASH power={power} kept_end={} restart_in={restart_after_ms}ms",
                Shown(kept)
            )
        });
        Ok(())
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        if !self.links.allows(from, to) {
            return;
        }
        // SIM-10: extra delay of each copy of a PUSH request or response (none: dropped).
        let copies = match (&msg, self.push_faults.as_mut()) {
            (
                Msg::Rep {
                    resp: Response::Push(_),
                    ..
                },
                Some(s),
            ) => s.response_fates(from, &mut self.rng),
            (
                Msg::Req {
                    req: Request::Push(_),
                    ..
                },
                Some(s),
            ) => s.request_fates(to, &mut self.rng),
            _ => vec![0],
        };
        if copies.is_empty() {
            self.note(|| format!("n{from} -> n{to} push reply DROPPED"));
            return;
        }
        let inc = self.slots[to].inc;
        let delays: Vec<u64> = copies
            .iter()
            .flat_map(|extra| {
                let base = self.chaos.deliveries(&mut self.rng);
                base.into_iter().map(move |d| d + extra)
            })
            .collect();
        for d in delays {
            let msg2 = match &msg {
                Msg::Req {
                    from,
                    from_inc,
                    call,
                    req,
                } => Msg::Req {
                    from: *from,
                    from_inc: *from_inc,
                    call: *call,
                    req: req.clone(),
                },
                Msg::Rep { call, resp } => Msg::Rep {
                    call: *call,
                    resp: resp.clone(),
                },
            };
            self.schedule(
                self.now + d,
                Ev::Deliver {
                    to,
                    inc,
                    msg: Box::new(msg2),
                },
            );
        }
    }

    /// Run one node interaction, then execute its actions and check invariants.
    fn step(&mut self, i: usize, f: impl FnOnce(&mut Node<L>, u64)) -> Result<(), Violation> {
        let now = self.local_time(i);
        let Some(node) = self.slots[i].node.as_mut() else {
            return Ok(());
        };
        f(node, now);
        while let Some(a) = self.slots[i].node.as_mut().and_then(|n| n.poll_action()) {
            self.execute(i, a)?;
        }
        if let Some(node) = self.slots[i].node.as_ref() {
            self.checker
                .check_node(i, node.committed_index(), node.log())
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn execute(&mut self, i: usize, a: Action) -> Result<(), Violation> {
        self.digest = fnv(self.digest, self.now);
        match a {
            Action::PersistHardState(hs) => {
                self.digest = fnv(self.digest, hs.term.0);
                self.slots[i].hard = hs;
            }
            Action::Call { to, call, req } => {
                let Some(to) = to.strip_prefix('n').and_then(|x| x.parse::<usize>().ok()) else {
                    return Err(self.fail(format!("n{i} called unknown peer {to}")));
                };
                self.digest = fnv(self.digest, (to as u64) << 32 | call);
                self.note(|| format!("n{i} -> n{to} call#{call} {}", short_req(&req)));
                let now = self.now;
                let counted = self
                    .retention
                    .as_mut()
                    .map_or(Ok(()), |s| s.on_call(now, to, &req));
                counted.map_err(|e| self.fail(e))?;
                let from_inc = self.slots[i].inc;
                self.send(
                    i,
                    to,
                    Msg::Req {
                        from: i,
                        from_inc,
                        call,
                        req,
                    },
                );
            }
            Action::Respond { id, resp } => {
                if let Response::Push(p) = &resp {
                    if let Some((watched, code)) = self.watched_request.as_mut() {
                        if *watched == id {
                            *code = Some(p.code);
                        }
                    }
                    if p.code == DLedgerCode::REPEATED_PUSH {
                        self.repeated_pushes += 1;
                        let now = self.now;
                        let late = self
                            .push_faults
                            .as_mut()
                            .map_or(Ok(()), |s| s.on_repeated_push(now, self.opts.fault_ms, i));
                        late.map_err(|e| self.fail(e))?;
                    }
                }
                if let Some((to, to_inc, call)) = self.requests.remove(&id) {
                    self.note(|| format!("n{i} => n{to} reply#{call} {}", short_resp(&resp)));
                    if self.slots[to].inc == to_inc {
                        self.send(i, to, Msg::Rep { call, resp });
                    }
                }
            }
            Action::FlushLog { up_to } => {
                let delay = if self.slots[i].slow_disk && !self.healed {
                    self.rng.next_u64() % 2_000
                } else {
                    1 + self.rng.next_u64() % 5
                };
                let inc = self.slots[i].inc;
                self.schedule(
                    self.now + delay,
                    Ev::FlushDone {
                        node: i,
                        inc,
                        up_to,
                    },
                );
            }
            Action::CommitAdvanced { index, .. } => {
                self.digest = fnv(self.digest, index.0);
                self.note(|| format!("n{i} commit {index}"));
                let Some(node) = self.slots[i].node.as_ref() else {
                    return Ok(());
                };
                self.checker
                    .on_commit(i, index, node.log())
                    .map_err(|e| self.fail(e))?;
            }
            Action::ProposeDone { id, result } => {
                let Some((body, _, _)) = self.proposals.remove(&id) else {
                    return Ok(());
                };
                self.note(|| format!("n{i} propose#{id} done {result:?}"));
                if let Err(e) = &result {
                    if e.is_definite() {
                        self.refused.push(body.clone());
                    }
                }
                if let Ok(app) = result {
                    let logs: Vec<Option<&L>> = self
                        .slots
                        .iter()
                        .map(|s| s.node.as_ref().map(|n| n.log()).or(s.down_log.as_ref()))
                        .collect();
                    let sync = self.opts.power_loss;
                    let r = self.checker.on_ack(app.index, &body, &logs, sync);
                    r.map_err(|e| self.fail(e))?;
                }
            }
            Action::RoleChanged { role, term, leader } => {
                self.digest = fnv(self.digest, term.0 ^ (i as u64) << 40);
                self.note(|| format!("n{i} role {} term {term} leader {leader:?}", role.as_str()));
                if role == Role::Leader {
                    let Some(node) = self.slots[i].node.as_ref() else {
                        return Ok(());
                    };
                    self.checker
                        .on_leader(i, term, node.log())
                        .map_err(|e| self.fail(e))?;
                }
            }
            Action::TransferDone { to, result } => {
                self.note(|| format!("n{i} transfer to {to} done {result:?}"));
            }
        }
        Ok(())
    }

    fn current_leader(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.node
                    .as_ref()
                    .filter(|n| n.role() == Role::Leader)
                    .map(|n| (n.term(), i))
            })
            .max()
            .map(|(_, i)| i)
    }

    fn deliver(&mut self, to: usize, inc: u32, msg: Msg) -> Result<(), Violation> {
        if self.slots[to].inc != inc || self.slots[to].node.is_none() {
            return Ok(());
        }
        match msg {
            Msg::Req {
                from,
                from_inc,
                call,
                req,
            } => {
                if !self.links.allows(from, to) {
                    return Ok(());
                }
                let id = self.next_request;
                self.next_request += 1;
                self.requests.insert(id, (from, from_inc, call));
                let truncate = match &req {
                    Request::Push(p) if p.push_type == PushType::TRUNCATE => {
                        p.first_index().zip(p.term())
                    }
                    _ => None,
                };
                let Some((first, term)) = truncate else {
                    return self.step(to, |n, now| n.handle(now, Input::Request { id, req }));
                };
                let before: Vec<LogEntry> = self.slots[to]
                    .node
                    .as_ref()
                    .map(|n| n.log().entries_from(first))
                    .unwrap_or_default();
                self.watched_request = Some((id, None));
                self.step(to, |n, now| n.handle(now, Input::Request { id, req }))?;
                let code = self.watched_request.take().and_then(|w| w.1);
                self.after_truncate(truncation::TruncateSeen {
                    follower: to,
                    leader: from,
                    leader_inc: from_inc,
                    first,
                    term,
                    before,
                    code,
                })
            }
            Msg::Rep { call, resp } => self.step(to, |n, now| {
                n.handle(
                    now,
                    Input::Reply {
                        call,
                        result: Ok(resp),
                    },
                )
            }),
        }
    }

    fn propose(&mut self) -> Result<(), Violation> {
        let target = match self.current_leader() {
            Some(l) => l,
            None => (self.rng.next_u64() % self.opts.nodes as u64) as usize,
        };
        self.propose_to(target)
    }

    /// One client proposal sent to node `target`.
    fn propose_to(&mut self, target: usize) -> Result<(), Violation> {
        let id = self.next_proposal;
        self.next_proposal += 1;
        let pad = (self.rng.next_u64() % 64) as usize;
        let mut body = id.to_be_bytes().to_vec();
        body.resize(8 + pad, 0xab);
        let body = Bytes::from(body);
        let inc = self.slots[target].inc;
        self.proposals.insert(id, (body.clone(), target, inc));
        self.step(target, |n, now| n.handle(now, Input::Propose { id, body }))
    }

    fn inject_fault(&mut self) -> Result<(), Violation> {
        let mut kinds = Vec::new();
        if self.opts.partitions {
            kinds.push(0);
        }
        if self.opts.crashes || self.opts.power_loss {
            kinds.push(1);
        }
        if self.opts.transfers {
            kinds.push(2);
        }
        if self.opts.disk_full {
            kinds.push(3);
        }
        if kinds.is_empty() {
            return Ok(());
        }
        let k = kinds[(self.rng.next_u64() % kinds.len() as u64) as usize];
        let n = self.opts.nodes;
        match k {
            0 => {
                let kind = PartitionKind::ALL[(self.rng.next_u64() % 5) as usize];
                let leader = self.current_leader();
                self.links.apply(kind, leader, &mut self.rng);
                self.partition_until = self.now + 1_000 + self.rng.next_u64() % 7_000;
                let until = self.partition_until;
                self.note(|| format!("PARTITION {kind:?} until {until}"));
            }
            1 => {
                let down = self.slots.iter().filter(|s| s.node.is_none()).count();
                let only_leader = self.opts.kill_leader_only;
                let extra_ok = !only_leader && self.rng.next_u64() & 7 == 0;
                if down < (n - 1) / 2 || extra_ok {
                    let victim = match self.current_leader() {
                        Some(l) if only_leader || self.rng.next_u64() & 1 == 0 => l,
                        _ if only_leader => return Ok(()),
                        _ => (self.rng.next_u64() % n as u64) as usize,
                    };
                    let after = self.rng.next_u64() % 5_000;
                    self.crash(victim, after)?;
                }
            }
            3 => {
                let victim = (self.rng.next_u64() % n as u64) as usize;
                let until = self.now + 500 + self.rng.next_u64() % 2_500;
                let full = self.slots[victim]
                    .node
                    .as_mut()
                    .map(|nd| nd.log_mut().set_disk_full(true));
                if full == Some(true) {
                    self.slots[victim].disk_full_until = until;
                    self.note(|| format!("DISK FULL n{victim} until {until}"));
                }
            }
            _ => {
                if let Some(l) = self.current_leader() {
                    let to = format!(
                        "n{}",
                        (l + 1 + (self.rng.next_u64() % (n as u64 - 1)) as usize) % n
                    );
                    self.note(|| format!("TRANSFER n{l} -> {to}"));
                    self.step(l, |node, now| {
                        node.handle(now, Input::TransferLeadership { to })
                    })?;
                }
            }
        }
        Ok(())
    }

    fn heal(&mut self) -> Result<(), Violation> {
        self.healed = true;
        self.links.heal();
        self.chaos = Chaos::calm();
        self.partition_until = 0;
        for i in 0..self.opts.nodes {
            if self.slots[i].node.is_none() {
                self.start(i)?;
            }
        }
        self.elections_at_heal = self.checker.elections;
        self.note(|| "HEAL all faults".to_string());
        Ok(())
    }

    fn run(&mut self) -> Result<Outcome, Violation> {
        let end = self.opts.fault_ms + self.opts.heal_ms;
        let stop_proposals = end.saturating_sub(5_000);
        let mut next_tick = 0;
        let mut next_propose = 500;
        let mut next_fault = 2_000 + self.rng.next_u64() % 2_000;
        let mut next_check = 1_000;
        let n = self.opts.nodes;
        let mut isolation_applied = !self.opts.isolate_follower;
        while self.now < end {
            let next_ev = self.queue.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
            let t = next_ev
                .min(next_tick)
                .min(next_propose)
                .min(next_fault)
                .min(next_check)
                .min(end);
            self.now = t;
            if !self.healed && t >= self.opts.fault_ms {
                self.heal()?;
            }
            if next_ev == t {
                let Some(Reverse((_, seq))) = self.queue.pop() else {
                    continue;
                };
                let Some(ev) = self.events.remove(&seq) else {
                    continue;
                };
                self.event_count += 1;
                match ev {
                    Ev::Deliver { to, inc, msg } => self.deliver(to, inc, *msg)?,
                    Ev::FlushDone { node, inc, up_to } => {
                        if self.slots[node].inc == inc {
                            let _ = up_to; // the disk flushes everything written so far
                            self.step(node, |nd, now| {
                                let index = nd.log_mut().flush();
                                nd.handle(now, Input::LogFlushed { index })
                            })?;
                        }
                    }
                }
                continue;
            }
            if t == next_tick {
                next_tick += TICK_MS;
                if t >= 1_000 && self.elections_at_startup.is_none() {
                    self.elections_at_startup = Some(self.checker.elections);
                }
                if !self.healed && self.partition_until != 0 && t >= self.partition_until {
                    self.links.heal();
                    self.partition_until = 0;
                    self.note(|| "partition healed".to_string());
                }
                self.script_tick()?;
                if !isolation_applied && !self.healed && t >= 1_000 {
                    isolation_applied = true;
                    let leader = self.current_leader().unwrap_or(0);
                    let x = (leader + 1 + (self.rng.next_u64() % (n as u64 - 1)) as usize) % n;
                    {
                        for o in 0..n {
                            if o != x {
                                self.links.set(x, o, true);
                                self.links.set(o, x, true);
                            }
                        }
                        self.note(|| format!("ISOLATE n{x}"));
                    }
                }
                for i in 0..n {
                    let full_until = self.slots[i].disk_full_until;
                    if full_until != 0 && (t >= full_until || self.healed) {
                        self.slots[i].disk_full_until = 0;
                        if let Some(nd) = self.slots[i].node.as_mut() {
                            nd.log_mut().set_disk_full(false);
                        }
                    }
                    if self.slots[i].node.is_none()
                        && !self.healed
                        && t >= self.slots[i].restart_at_ms
                    {
                        self.start(i)?;
                    }
                    if !self.opts.power_loss {
                        if let Some(nd) = self.slots[i].node.as_mut() {
                            nd.log_mut().flush(); // async flush every tick
                        }
                    }
                    self.step(i, |nd, now| nd.tick(now))?;
                }
                self.track_leaderless();
                self.track_catch_up();
                continue;
            }
            if t == next_propose {
                next_propose += self.opts.propose_interval_ms;
                if t < stop_proposals {
                    self.propose()?;
                }
                continue;
            }
            if t == next_fault {
                next_fault += 500 + self.rng.next_u64() % 2_500;
                let random = self.opts.scenario == Scenario::Random;
                if !self.healed && !self.opts.isolate_follower && random {
                    self.inject_fault()?;
                }
                continue;
            }
            if t == next_check {
                next_check += 1_000;
                self.check_logs()?;
            }
        }
        self.final_checks()
    }

    fn track_leaderless(&mut self) {
        let has = self.current_leader().is_some();
        match (has, self.leaderless_since) {
            (true, Some(since)) => {
                self.longest_leaderless_ms = self.longest_leaderless_ms.max(self.now - since);
                self.leaderless_since = None;
            }
            (false, None) => self.leaderless_since = Some(self.now),
            _ => {}
        }
    }

    /// Run the scripted scenario's schedule for this tick.
    fn script_tick(&mut self) -> Result<(), Violation> {
        if let Some(mut s) = self.retention.take() {
            let r = s.tick(self);
            self.retention = Some(s);
            r?;
        }
        if let Some(mut s) = self.push_faults.take() {
            s.tick(self);
            self.push_faults = Some(s);
        }
        if let Some(mut s) = self.truncation.take() {
            let r = s.tick(self);
            self.truncation = Some(s);
            r?;
        }
        Ok(())
    }

    /// After the heal: the first time every live follower's match index (as the leader
    /// sees it) reaches the leader's end; followers marked for reinstall are exempt.
    fn track_catch_up(&mut self) {
        if !self.healed || self.catch_up_after_heal_ms.is_some() {
            return;
        }
        let Some(l) = self.current_leader() else {
            return;
        };
        let Some(leader) = self.slots[l].node.as_ref() else {
            return;
        };
        let end = leader.log().end_index();
        let all = self.slots.iter().enumerate().all(|(i, s)| {
            let name = format!("n{i}");
            i == l
                || s.node.is_none()
                || leader.needs_reinstall(&name)
                || leader.match_index(&name) == end
        });
        if all {
            self.catch_up_after_heal_ms = Some(self.now - self.opts.fault_ms);
        }
    }

    /// The pass criteria of the scripted scenarios that are not invariants.
    fn scenario_final_checks(&self) -> Result<(), Violation> {
        if let Some(s) = &self.retention {
            s.final_check(self.now).map_err(|e| self.fail(e))?;
        }
        if self.push_faults.is_some() {
            match self.catch_up_after_heal_ms {
                Some(ms) if ms <= push_faults::CATCH_UP_LIMIT_MS => {}
                other => {
                    return Err(self.fail(format!(
                        "SIM-10: followers' match indexes reached the leader's end {other:?} ms after the faults stopped (limit {} ms)",
                        push_faults::CATCH_UP_LIMIT_MS
                    )))
                }
            }
        }
        if let Some(s) = &self.truncation {
            if s.rounds == 0 {
                return Err(self.fail("SIM-11: no partition round ran".into()));
            }
        }
        Ok(())
    }

    fn check_logs(&self) -> Result<(), Violation> {
        let logs: Vec<&L> = self
            .slots
            .iter()
            .filter_map(|s| s.node.as_ref().map(|n| n.log()))
            .collect();
        for a in 0..logs.len() {
            for b in a + 1..logs.len() {
                self.checker
                    .log_matching(logs[a], logs[b])
                    .map_err(|e| self.fail(e))?;
            }
        }
        Ok(())
    }

    fn final_checks(&mut self) -> Result<Outcome, Violation> {
        self.check_logs()?;
        self.scenario_final_checks()?;
        let Some(l) = self.current_leader() else {
            return Err(self.fail("liveness: no leader after healing".into()));
        };
        let Some(leader) = self.slots[l].node.as_ref() else {
            return Err(self.fail("liveness: leader vanished".into()));
        };
        let (end, committed, term) = (
            leader.log().end_index(),
            leader.committed_index(),
            leader.term(),
        );
        if committed != end {
            return Err(self.fail(format!(
                "liveness: leader n{l} committed {} != end {} after healing",
                Shown(committed),
                Shown(end)
            )));
        }
        let mut reinstall = 0;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(node) = s.node.as_ref() else {
                continue;
            };
            let name = format!("n{i}");
            let need = self.checker.next_needed(node.log(), leader.log());
            let begin = leader.log().begin_index();
            if leader.needs_reinstall(&name) {
                // R11: the mark is right only when the leader really lacks the next entry.
                if need >= begin {
                    return Err(self.fail(format!(
                        "n{i} is marked needs-reinstall but leader n{l} still holds its next entry {need} (begin {begin})"
                    )));
                }
                if node.term() != term {
                    return Err(self.fail(format!(
                        "n{i} (needs reinstall) is at term {} not the leader's {term}",
                        node.term()
                    )));
                }
                reinstall += 1;
                continue;
            }
            if need < begin {
                return Err(self.fail(format!(
                    "R11: n{i} needs entry {need}, below leader n{l}'s begin {begin}, but is not marked needs-reinstall"
                )));
            }
            if i != l && leader.match_index(&name) != end {
                return Err(self.fail(format!(
                    "push bookkeeping: leader n{l} has match index {} for n{i}, not its end {}, after healing",
                    Shown(leader.match_index(&name)),
                    Shown(end)
                )));
            }
            if node.term() != term
                || node.log().end_index() != end
                || node.committed_index() != committed
            {
                return Err(self.fail(format!(
                    "liveness: n{i} (term {}, end {}, committed {}) did not converge to leader n{l} (term {term}, end {}, committed {})",
                    node.term(),
                    Shown(node.log().end_index()),
                    Shown(node.committed_index()),
                    Shown(end),
                    Shown(committed)
                )));
            }
        }
        self.checker
            .check_acked_in(leader.log())
            .map_err(|e| self.fail(e))?;
        let bodies: std::collections::BTreeSet<Bytes> = leader
            .log()
            .all_entries()
            .into_iter()
            .map(|e| e.body)
            .collect();
        if let Some(b) = self.refused.iter().find(|b| bodies.contains(*b)) {
            let what = format!(
                "a definitely refused proposal ({:02x?}) is in the final log",
                &b[..8]
            );
            return Err(self.fail(what));
        }
        // Proposals still open must be recent or on a node that since crashed (lost).
        let stuck = self
            .proposals
            .values()
            .filter(|(_, node, inc)| {
                self.slots[*node].inc == *inc && self.slots[*node].node.is_some()
            })
            .count();
        if stuck > 0 {
            return Err(self.fail(format!("liveness: {stuck} proposals never resolved")));
        }
        Ok(Outcome {
            seed: self.seed,
            digest: self.digest,
            acked: self.checker.acked(),
            elections: self.checker.elections,
            elections_after_startup: self.checker.elections
                - self.elections_at_startup.unwrap_or(0),
            elections_after_heal: self.checker.elections - self.elections_at_heal,
            longest_leaderless_ms: self.longest_leaderless_ms,
            events: self.event_count,
            truncated_entries: self.truncated_entries,
            reinstall_followers: reinstall,
            catch_up_after_heal_ms: self.catch_up_after_heal_ms,
            max_repair_pushes_per_s: self.retention.as_ref().map_or(0, |s| s.max_per_second),
            repeated_pushes: self.repeated_pushes,
            faulted_push_responses: self.push_faults.as_ref().map_or(0, |s| s.faulted),
            trace: self.trace.iter().cloned().collect(),
        })
    }
}

fn short_req(r: &Request) -> String {
    match r {
        Request::Vote(v) => format!(
            "VOTE{} term={} end={}/{}",
            if v.pre_vote { "(pre)" } else { "" },
            v.term,
            v.ledger_end_index,
            v.ledger_end_term
        ),
        Request::HeartBeat(h) => format!("HEARTBEAT term={}", h.term),
        Request::Push(p) => format!(
            "PUSH {:?} term={} first={} count={} commit={}",
            p.push_type,
            p.term,
            Shown(p.first_index()),
            p.count(),
            p.commit_index
        ),
        Request::LeadershipTransfer(t) => {
            format!("TRANSFER to={:?} term={}", t.transferee_id, t.term)
        }
    }
}

fn short_resp(r: &Response) -> String {
    match r {
        Response::Vote(v) => format!("{:?} term={}", v.vote_result, v.term),
        Response::Push(p) => format!("{:?} index={:?} end={}", p.code, p.index, p.end_index),
        other => format!("{:?}", other.code()),
    }
}

/// Run one seed. On a violation, the run is replayed verbosely to attach a trace.
pub fn run(seed: u64, opts: &SimOptions) -> Result<Outcome, Violation> {
    if opts.real_store {
        run_on::<StoreSimLog>(seed, opts)
    } else {
        run_on::<MemLog>(seed, opts)
    }
}

fn run_on<L: SimLog>(seed: u64, opts: &SimOptions) -> Result<Outcome, Violation> {
    let result = World::<L>::new(seed, opts.clone()).and_then(|mut w| w.run());
    match result {
        Err(v) if !opts.verbose => {
            let verbose = SimOptions {
                verbose: true,
                ..opts.clone()
            };
            match World::<L>::new(seed, verbose).and_then(|mut w| w.run()) {
                Err(replayed) => Err(replayed),
                Ok(_) => Err(Violation {
                    what: format!("{} (did not replay!)", v.what),
                    ..v
                }),
            }
        }
        other => other,
    }
}
