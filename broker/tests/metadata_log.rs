//! Metadata through the log (issue 26, G5a), in process: every acknowledged topic, group and
//! offset change is in the tables of the next broker that opens the same log, whether it
//! starts from a store whose files stopped at a random earlier point (a crash) or from an
//! empty store (a member that catches up). Seeded; the seed is printed for replay
//! (`METADATA_SEED=S`).

#![allow(clippy::unwrap_used)]

mod roles_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use broker::broker::Broker;
use broker::context::{BrokerContext, ServingRole};
use broker::metadata;
use broker::services::{BrokerRoleServices, RoleServiceSettings};
use broker::store::mem_log::MemLog;
use broker::store::{SubscriptionGroupConfig, TopicConfig};
use roles_common::{config, free_port, wait_for};

async fn start(log: &MemLog, dir: &Path) -> Broker {
    let cfg = config(dir, free_port(), "metadataOffsetFlushIntervalMs=20\n");
    let settings = RoleServiceSettings::from_config(&cfg);
    let services = Arc::new(BrokerRoleServices::with_settings(settings));
    let b = Broker::start_with_log(cfg, Arc::new(log.clone()), services)
        .await
        .unwrap();
    let ctx = Arc::clone(b.context());
    wait_for("master", || ctx.role.role() == ServingRole::Master).await;
    b
}

/// What the acknowledged changes made the tables.
#[derive(Default, Debug, Clone, PartialEq)]
struct Model {
    topics: BTreeMap<String, i32>,
    groups: BTreeMap<String, i32>,
    offsets: BTreeMap<(String, String, i32), i64>,
}

impl Model {
    fn check(&self, ctx: &BrokerContext, what: &str) {
        for (t, q) in &self.topics {
            let got = ctx.topics.get(t).map(|c| c.write_queue_nums);
            assert_eq!(got, Some(*q), "{what}: topic {t}");
        }
        for (g, r) in &self.groups {
            let got = ctx.subscriptions.get(g).map(|c| c.retry_max_times);
            assert_eq!(got, Some(*r), "{what}: group {g}");
        }
        for ((t, g, q), o) in &self.offsets {
            assert_eq!(
                ctx.offsets.query_offset(g, t, *q),
                Some(*o),
                "{what}: offset {t}@{g}/{q}"
            );
        }
    }

    fn check_deleted(&self, ctx: &BrokerContext, deleted: &[String], what: &str) {
        for t in deleted {
            if !self.topics.contains_key(t) {
                assert!(ctx.topics.get(t).is_none(), "{what}: topic {t} deleted");
            }
        }
    }
}

/// splitmix64: a small seeded generator (no dependency for a few draws).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// One random acknowledged change; the model follows it.
async fn random_change(
    ctx: &BrokerContext,
    rng: &mut Rng,
    model: &mut Model,
    deleted: &mut Vec<String>,
) {
    let topic = format!("MetaT{}", rng.below(6));
    let group = format!("MetaG{}", rng.below(4));
    match rng.below(5) {
        0 => {
            let q = 1 + rng.below(8) as i32;
            metadata::put_topic(ctx, TopicConfig::new(topic.clone(), q))
                .await
                .unwrap();
            model.topics.insert(topic, q);
        }
        1 => {
            metadata::delete_topic(ctx, &topic).await.unwrap();
            model.topics.remove(&topic);
            model.offsets.retain(|(t, _, _), _| *t != topic);
            deleted.push(topic);
        }
        2 => {
            let mut g = SubscriptionGroupConfig::new(group.clone());
            g.retry_max_times = rng.below(30) as i32;
            model.groups.insert(group, g.retry_max_times);
            metadata::put_group(ctx, g).await.unwrap();
        }
        3 => {
            let clean = rng.below(2) == 0;
            metadata::delete_group(ctx, &group, clean).await.unwrap();
            model.groups.remove(&group);
            if clean {
                model.offsets.retain(|(_, g, _), _| *g != group);
            }
        }
        _ => {
            let q = rng.below(4) as i32;
            let o = rng.below(10_000) as i64;
            metadata::commit_offset_replicated(ctx, &group, &topic, q, o)
                .await
                .unwrap();
            model.offsets.insert((topic, group, q), o);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_metadata_survives_crashes_at_random_points() {
    let seed = std::env::var("METADATA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| broker::context::now_ms() as u64);
    println!("METADATA_SEED={seed}");
    let mut rng = Rng(seed);
    let log = MemLog::new_leader();
    let dir = tempfile::tempdir().unwrap();
    let stale = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    let mut deleted = Vec::new();
    for round in 0..4 {
        let b = start(&log, dir.path()).await;
        let ctx = Arc::clone(b.context());
        model.check(&ctx, &format!("seed {seed} round {round}: after restart"));
        model.check_deleted(&ctx, &deleted, &format!("seed {seed} round {round}"));
        let n = 10 + rng.below(20);
        let crash_at = rng.below(n);
        for i in 0..n {
            if i == crash_at {
                // What the disk holds if every later write is lost in the crash.
                ctx.persist();
                let _ = std::fs::remove_dir_all(stale.path());
                copy_dir(&dir.path().join("config"), stale.path());
            }
            random_change(&ctx, &mut rng, &mut model, &mut deleted).await;
        }
        b.shutdown().await;
        // The crash: the config files are as they were at `crash_at`.
        std::fs::remove_dir_all(dir.path().join("config")).unwrap();
        copy_dir(stale.path(), &dir.path().join("config"));
    }
    // A member that catches up from the log with an empty store gets the same tables.
    let fresh = tempfile::tempdir().unwrap();
    let b = start(&log, fresh.path()).await;
    model.check(b.context(), &format!("seed {seed}: fresh member"));
    model.check_deleted(b.context(), &deleted, &format!("seed {seed}: fresh member"));
    b.shutdown().await;
}

/// A commit offset carried by a pull (no answer waits for it) reaches the log within the
/// flush window, so the table on disk has it without any request for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_offsets_reach_the_log_within_the_window() {
    let log = MemLog::new_leader();
    let dir = tempfile::tempdir().unwrap();
    let b = start(&log, dir.path()).await;
    let ctx = Arc::clone(b.context());
    ctx.offsets.commit_offset("PG", "PT", 3, 77);
    wait_for("offset logged", || !ctx.offsets.has_pending()).await;
    b.shutdown().await;
    let fresh = tempfile::tempdir().unwrap();
    let b = start(&log, fresh.path()).await;
    assert_eq!(b.context().offsets.query_offset("PG", "PT", 3), Some(77));
    b.shutdown().await;
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) and DELETE_SUBSCRIPTIONGROUP (207) go through the
/// log: a member that catches up from it has the created group and not the deleted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_requests_go_through_the_log() {
    use remoting::custom_headers::DeleteSubscriptionGroupRequestHeader;
    use remoting::{RemotingCommand, RequestCode, ResponseCode};
    let log = MemLog::new_leader();
    let dir = tempfile::tempdir().unwrap();
    let b = start(&log, dir.path()).await;
    let c = roles_common::client();
    let mut cfg = SubscriptionGroupConfig::new("ReqG");
    cfg.retry_max_times = 3;
    let update_group = |body: Vec<u8>| {
        let req = RemotingCommand::request_empty(RequestCode::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
            .with_body(body);
        roles_common::call(&c, b.local_addr(), req)
    };
    for g in [cfg, SubscriptionGroupConfig::new("GoneG")] {
        let r = update_group(serde_json::to_vec(&g).unwrap()).await;
        assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    }
    let del = DeleteSubscriptionGroupRequestHeader {
        group_name: "GoneG".into(),
        clean_offset: Some(true),
    };
    let r = roles_common::call(
        &c,
        b.local_addr(),
        RemotingCommand::request(RequestCode::DELETE_SUBSCRIPTIONGROUP, &del),
    )
    .await;
    assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    // A bad name or body is refused and writes nothing.
    let end = b.context().store.water_marks().ledger_end_index;
    for bad in [&b"{\"groupName\":\"bad group\"}"[..], b"\xff{"] {
        let r = update_group(bad.to_vec()).await;
        assert_eq!(r.response_code(), ResponseCode::INVALID_PARAMETER);
    }
    assert_eq!(b.context().store.water_marks().ledger_end_index, end);
    b.shutdown().await;
    let fresh = tempfile::tempdir().unwrap();
    let b = start(&log, fresh.path()).await;
    let g = b.context().subscriptions.get("ReqG").unwrap();
    assert_eq!(g.retry_max_times, 3);
    assert!(b.context().subscriptions.get("GoneG").is_none());
    b.shutdown().await;
}

/// A store written before metadata went through the log: its master puts its tables into the
/// log once, so a member catching up from the log (which slave sync may never have reached)
/// gets them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_stores_tables_are_logged_once_by_its_master() {
    let log = MemLog::new_leader();
    let dir = tempfile::tempdir().unwrap();
    let b = start(&log, dir.path()).await;
    let ctx = Arc::clone(b.context());
    b.shutdown().await;
    // What an older broker left in its files, never logged.
    ctx.topics.update(TopicConfig::new("OldT", 3)).unwrap();
    ctx.subscriptions
        .update(SubscriptionGroupConfig::new("OldG"))
        .unwrap();
    ctx.offsets
        .apply_logged(&[broker::store::metadata_log::OffsetCommit {
            topic: "OldT".into(),
            group: "OldG".into(),
            queue_id: 2,
            offset: 9,
        }]);
    ctx.offsets.persist().unwrap();
    drop(ctx);
    let b = start(&log, dir.path()).await;
    let ctx = Arc::clone(b.context());
    wait_for("tables logged", || {
        ctx.store.metadata().applied_through() >= 0 && !ctx.offsets.has_pending()
    })
    .await;
    // Settled: the bootstrap ran to its end (the offsets record is its last).
    wait_for("offsets logged", || {
        let fresh_view = ctx.store.water_marks().ledger_end_index;
        fresh_view >= 2
    })
    .await;
    b.shutdown().await;
    let fresh = tempfile::tempdir().unwrap();
    let b = start(&log, fresh.path()).await;
    let c = b.context();
    assert_eq!(c.topics.get("OldT").map(|t| t.write_queue_nums), Some(3));
    assert!(c.subscriptions.get("OldG").is_some());
    assert_eq!(c.offsets.query_offset("OldG", "OldT", 2), Some(9));
    b.shutdown().await;
}
