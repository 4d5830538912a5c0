//! `BrokerRoleServices`: the real [`RoleServices`] — which background services run in which
//! role (broker-roles.md §4.1-§4.2, RELIABILITY R13).
//!
//! * master: schedule (delay-level) service and transaction-check service;
//! * slave: slave synchronisation of metadata from the master.
//!
//! `on_slave` (after writes are refused): stop the schedule and check services (awaited, so
//! no re-proposal is in flight afterwards), start slave sync (kept if already running:
//! DLedger repeats FOLLOWER callbacks). `on_master` (before writes are accepted): stop slave
//! sync, pull the consumer and delay offsets once more from the previous master when it is
//! still reachable (bounded wait), then start the schedule and check services from those
//! tables. Every step is logged with the term and its elapsed time.
//!
//! Tunables (broker config keys of this implementation, not Java's; tests shorten them):
//! `slaveSyncIntervalMs` (default 10000), `slaveSyncFirstDelayMs` (3000),
//! `schedulePollMs` (100), `masterOffsetPullTimeoutMs` (1000).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remoting::{ClientConfig, RemotingClient};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::context::BrokerContext;
use crate::controller::RoleServices;
use crate::transaction::check::CheckSettings;
use crate::{schedule, slave_sync, transaction};

/// Timing knobs of the role services.
#[derive(Debug, Clone, Copy)]
pub struct RoleServiceSettings {
    pub slave_sync_interval: Duration,
    pub slave_sync_first_delay: Duration,
    pub schedule_poll: Duration,
    /// Bound of the synchronous offset pull from the previous master in `on_master`.
    pub master_offset_pull_timeout: Duration,
    pub check: CheckSettings,
}

fn extra_ms(cfg: &BrokerConfig, key: &str, default: Duration) -> Duration {
    cfg.extra
        .get(key)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

impl RoleServiceSettings {
    /// Java defaults, overridden by the keys listed in the module docs.
    pub fn from_config(cfg: &BrokerConfig) -> Self {
        RoleServiceSettings {
            slave_sync_interval: extra_ms(cfg, "slaveSyncIntervalMs", slave_sync::DEFAULT_INTERVAL)
                .max(Duration::from_millis(10)),
            slave_sync_first_delay: extra_ms(
                cfg,
                "slaveSyncFirstDelayMs",
                slave_sync::DEFAULT_FIRST_DELAY,
            ),
            schedule_poll: extra_ms(cfg, "schedulePollMs", schedule::DEFAULT_POLL)
                .max(Duration::from_millis(1)),
            master_offset_pull_timeout: extra_ms(
                cfg,
                "masterOffsetPullTimeoutMs",
                Duration::from_secs(1),
            ),
            check: CheckSettings::from_config(cfg),
        }
    }
}

/// A started background task and its stop switch.
struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Spawns `f` with a stop switch that also trips at broker shutdown (`parent`).
    fn spawn<F: Future<Output = ()> + Send + 'static>(
        parent: &CancellationToken,
        f: impl FnOnce(CancellationToken) -> F,
    ) -> Running {
        let stop = parent.child_token();
        let task = tokio::spawn(f(stop.clone()));
        Running { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "role service task ended abnormally");
        }
    }
}

#[derive(Default)]
struct Slots {
    schedule: Option<Running>,
    check: Option<Running>,
    slave_sync: Option<Running>,
}

/// Schedule service + transaction check (master) and slave sync (slave).
pub struct BrokerRoleServices {
    settings: Mutex<Option<RoleServiceSettings>>,
    client: RemotingClient,
    slots: Mutex<Slots>,
}

impl Default for BrokerRoleServices {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn term_of(ctx: &BrokerContext) -> i64 {
    ctx.store.log().role().borrow().term
}

impl BrokerRoleServices {
    /// Settings are read from the broker config at the first role change.
    pub fn new() -> Self {
        BrokerRoleServices {
            settings: Mutex::new(None),
            client: RemotingClient::new(ClientConfig::default()),
            slots: Mutex::new(Slots::default()),
        }
    }

    /// With explicit settings (tests).
    pub fn with_settings(settings: RoleServiceSettings) -> Self {
        let s = Self::new();
        *lock(&s.settings) = Some(settings);
        s
    }

    fn settings(&self, ctx: &BrokerContext) -> RoleServiceSettings {
        *lock(&self.settings).get_or_insert_with(|| RoleServiceSettings::from_config(&ctx.config))
    }

    /// Which services run now: (schedule, transaction check, slave sync).
    pub fn running(&self) -> (bool, bool, bool) {
        let s = lock(&self.slots);
        (
            s.schedule.is_some(),
            s.check.is_some(),
            s.slave_sync.is_some(),
        )
    }

    async fn stop_master_services(&self, term: i64) {
        let (sched, check) = {
            let mut s = lock(&self.slots);
            (s.schedule.take(), s.check.take())
        };
        if let Some(r) = sched {
            let t = Instant::now();
            r.stop().await;
            tracing::info!(
                term,
                elapsed_ms = t.elapsed().as_millis() as u64,
                "schedule service stopped"
            );
        }
        if let Some(r) = check {
            let t = Instant::now();
            r.stop().await;
            tracing::info!(
                term,
                elapsed_ms = t.elapsed().as_millis() as u64,
                "transaction check service stopped"
            );
        }
    }

    async fn stop_slave_sync(&self, term: i64) {
        let r = lock(&self.slots).slave_sync.take();
        if let Some(r) = r {
            let t = Instant::now();
            r.stop().await;
            tracing::info!(
                term,
                elapsed_ms = t.elapsed().as_millis() as u64,
                "slave sync stopped"
            );
        }
    }

    /// R13: the previous master's consumer and delay offsets, once, if it still answers.
    async fn pull_offsets_from_previous_master(
        &self,
        ctx: &BrokerContext,
        s: &RoleServiceSettings,
        term: i64,
    ) {
        let Some(master) = slave_sync::master_to_sync(ctx) else {
            tracing::info!(
                term,
                "no previous master known: serving from the last synced offsets"
            );
            return;
        };
        let t = Instant::now();
        // Consumer offsets come from the log once it carries metadata: every acknowledged
        // commit is there, and the address above may name a member that was not the last
        // master (its answers would undo newer commits).
        let log_carries_metadata = ctx.store.metadata().applied_through() >= 0;
        let pull = async {
            let a = if log_carries_metadata {
                Ok(())
            } else {
                slave_sync::sync_consumer_offsets(ctx, &self.client, master).await
            };
            let b = slave_sync::sync_delay_offsets(ctx, &self.client, master).await;
            (a, b)
        };
        match tokio::time::timeout(s.master_offset_pull_timeout, pull).await {
            Ok((Ok(()), Ok(()))) => {
                tracing::info!(term, %master, elapsed_ms = t.elapsed().as_millis() as u64, "pulled consumer and delay offsets from the previous master")
            }
            Ok((a, b)) => {
                tracing::info!(term, %master, consumer = a.is_ok(), delay = b.is_ok(), elapsed_ms = t.elapsed().as_millis() as u64, "previous master partly unreachable: using the last synced offsets")
            }
            Err(_) => {
                tracing::info!(term, %master, elapsed_ms = t.elapsed().as_millis() as u64, "previous master did not answer in time: using the last synced offsets")
            }
        }
    }

    async fn become_master(&self, ctx: &Arc<BrokerContext>) {
        let term = term_of(ctx);
        let s = self.settings(ctx);
        let t0 = Instant::now();
        self.stop_slave_sync(term).await;
        // Offsets a follower answered from slave sync may be older than the log's: only the
        // log's table and what the previous master still reports (below) are kept.
        ctx.offsets.clear_pending();
        self.pull_offsets_from_previous_master(ctx, &s, term).await;
        // Reload: the schedule service reads the delay-offset table (synced and persisted),
        // the check service the consumer-offset table; both start from them now.
        let levels = ctx.delay_offsets.snapshot().offset_table.len();
        tracing::info!(
            term,
            delay_levels_with_offsets = levels,
            elapsed_ms = t0.elapsed().as_millis() as u64,
            "delay and consumer offsets reloaded"
        );
        self.stop_master_services(term).await;
        let t = Instant::now();
        let sched = {
            let c = Arc::clone(ctx);
            Running::spawn(&ctx.shutdown, move |stop| {
                schedule::run(c, stop, s.schedule_poll)
            })
        };
        let check = {
            let c = Arc::clone(ctx);
            Running::spawn(&ctx.shutdown, move |stop| {
                transaction::check::run(c, stop, s.check)
            })
        };
        {
            let mut slots = lock(&self.slots);
            slots.schedule = Some(sched);
            slots.check = Some(check);
        }
        tracing::info!(
            term,
            elapsed_ms = t.elapsed().as_millis() as u64,
            total_ms = t0.elapsed().as_millis() as u64,
            "schedule and transaction check services started"
        );
    }

    async fn become_slave(&self, ctx: &Arc<BrokerContext>) {
        let term = term_of(ctx);
        let s = self.settings(ctx);
        let t0 = Instant::now();
        self.stop_master_services(term).await;
        // Commits this member took as master that never reached the log: the new master
        // decides (no client was told they were replicated).
        ctx.offsets.clear_pending();
        let mut slots = lock(&self.slots);
        if slots.slave_sync.is_none() {
            let c = Arc::clone(ctx);
            let client = self.client.clone();
            slots.slave_sync = Some(Running::spawn(&ctx.shutdown, move |stop| {
                slave_sync::run(
                    c,
                    client,
                    stop,
                    s.slave_sync_first_delay,
                    s.slave_sync_interval,
                )
            }));
            tracing::info!(
                term,
                total_ms = t0.elapsed().as_millis() as u64,
                "slave sync started"
            );
        }
    }
}

impl RoleServices for BrokerRoleServices {
    fn on_master<'a>(
        &'a self,
        ctx: &'a Arc<BrokerContext>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.become_master(ctx))
    }

    fn on_slave<'a>(
        &'a self,
        ctx: &'a Arc<BrokerContext>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.become_slave(ctx))
    }
}
