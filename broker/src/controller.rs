//! `BrokerController`: applies the role machine's decisions (broker-roles.md §3-§4).
//!
//! One task feeds [`RoleMachine`] every ledger role change (in order) and, while a new leader
//! catches up, every water-mark change (ledger commit, dispatch progress), and executes the
//! returned commands one at a time, so transitions never overlap. In any other state the
//! marks only matter to nothing the machine decides, so the task does not wake for each
//! commit then (it still samples them every 100 ms):
//!
//! * `ChangeToSlave` → stop master-only services, brokerId = selfId number + 1, sends refused
//!   with SERVICE_NOT_AVAILABLE, start slave-only services, re-register at once;
//! * `ChangeToMaster` (only once dispatch caught up with a fully committed log, R13) →
//!   `recover_topic_queue_table`, stop slave-only services, start master-only services,
//!   brokerId 0, sends accepted, re-register at once.
//!
//! Extension points: [`RoleServices`] is where slave sync, the schedule-message service and
//! the transaction-check service plug in.

use std::sync::Arc;
use std::time::Instant;

use crate::context::{BrokerContext, ServingRole};
use crate::role::{BrokerState, RoleCommand, RoleMachine};

/// Services that run only in one role. Hooks are awaited in order inside the transition, so
/// a service is fully stopped before the broker flips its role.
pub trait RoleServices: Send + Sync + 'static {
    /// Called on `change_to_master`, before writes are accepted: start the schedule-message
    /// service and the transaction-check service; R13: reload delay offsets and pull the
    /// previous master's consumer offsets here.
    fn on_master<'a>(
        &'a self,
        ctx: &'a Arc<BrokerContext>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    /// Called on `change_to_slave`, after writes are refused: stop master-only services and
    /// start slave synchronisation (metadata from `ctx.role.master_addr()`).
    fn on_slave<'a>(
        &'a self,
        ctx: &'a Arc<BrokerContext>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
}

/// No role-specific services yet (slave sync, schedule and transaction check are later work).
pub struct NoRoleServices;

impl RoleServices for NoRoleServices {
    fn on_master<'a>(
        &'a self,
        _ctx: &'a Arc<BrokerContext>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
    fn on_slave<'a>(
        &'a self,
        _ctx: &'a Arc<BrokerContext>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

/// Catch-up longer than this is logged loudly (the wait itself is not bounded: a leader
/// either commits its tail or steps down).
pub const CATCH_UP_WARN_MS: u64 = 10_000;

/// Drives the broker role from the ledger.
pub struct BrokerController {
    ctx: Arc<BrokerContext>,
    services: Arc<dyn RoleServices>,
}

impl BrokerController {
    /// A controller for `ctx`.
    pub fn new(ctx: Arc<BrokerContext>, services: Arc<dyn RoleServices>) -> Self {
        BrokerController { ctx, services }
    }

    /// Becomes a slave: writes refused first, then services switched, then re-registration.
    pub async fn change_to_slave(&self, broker_id: i64) {
        let id = if broker_id == 0 { 1 } else { broker_id };
        self.ctx.role.set(ServingRole::Slave, id);
        self.services.on_slave(&self.ctx).await;
        tracing::info!(broker_id = id, "changed to slave");
        self.ctx.register_now.notify_one();
    }

    /// Becomes the master: counters rebuilt from the (caught-up) consume queues, services
    /// started, then writes accepted and the name servers told at once.
    pub async fn change_to_master(&self) {
        self.ctx.store.recover_topic_queue_table().await;
        self.services.on_master(&self.ctx).await;
        self.ctx.role.set_master_addr(None);
        self.ctx.role.set(ServingRole::Master, 0);
        tracing::info!("changed to master (brokerId 0)");
        self.ctx.register_now.notify_one();
    }

    async fn apply(&self, cmds: Vec<RoleCommand>) {
        for c in cmds {
            match c {
                RoleCommand::ChangeToSlave { term, broker_id } => {
                    tracing::info!(term, "ledger role: not leader");
                    self.change_to_slave(broker_id).await;
                }
                RoleCommand::ChangeToMaster { term, waited_ms } => {
                    tracing::info!(term, waited_ms, "ledger leader caught up");
                    self.change_to_master().await;
                }
                RoleCommand::CatchUpSlow {
                    term,
                    waited_ms,
                    marks,
                } => {
                    tracing::warn!(
                        term,
                        waited_ms,
                        ?marks,
                        "new leader still catching up before serving writes"
                    );
                }
            }
        }
    }

    /// Runs until shutdown.
    pub async fn run(self) {
        let slave_id = self.ctx.config.slave_broker_id().unwrap_or(1);
        let mut machine = RoleMachine::new(slave_id, CATCH_UP_WARN_MS);
        let log = Arc::clone(self.ctx.store.log());
        let mut role_rx = log.role();
        let mut committed_rx = log.commit_watch();
        let mut dispatched_rx = self.ctx.store.dispatched();
        let start = Instant::now();
        let now = || start.elapsed().as_millis() as u64;
        // The initial state counts as a role callback only once the member has a term.
        let first = role_rx.borrow_and_update().clone();
        if first.term > 0 {
            let cmds = machine.on_role(first.term, first.role, self.ctx.store.water_marks(), now());
            self.apply(cmds).await;
        }
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            let catching_up = matches!(machine.state(), BrokerState::CatchingUp { .. });
            tokio::select! {
                _ = self.ctx.shutdown.cancelled() => break,
                r = role_rx.changed() => {
                    if r.is_err() { break; }
                    let s = role_rx.borrow_and_update().clone();
                    let cmds = machine.on_role(s.term, s.role, self.ctx.store.water_marks(), now());
                    self.apply(cmds).await;
                }
                r = committed_rx.changed(), if catching_up => {
                    if r.is_err() { break; }
                    committed_rx.borrow_and_update();
                    let cmds = machine.on_progress(self.ctx.store.water_marks(), now());
                    self.apply(cmds).await;
                }
                r = dispatched_rx.changed(), if catching_up => {
                    if r.is_err() { break; }
                    dispatched_rx.borrow_and_update();
                    let cmds = machine.on_progress(self.ctx.store.water_marks(), now());
                    self.apply(cmds).await;
                }
                // The ledger end can move without a commit (entries received as follower):
                // re-sample so catch-up completes even when nothing else changes.
                _ = tick.tick() => {
                    let cmds = machine.on_progress(self.ctx.store.water_marks(), now());
                    self.apply(cmds).await;
                }
            }
        }
    }
}
