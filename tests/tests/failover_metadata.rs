//! Issue 26, RELIABILITY G5a: everything a master acknowledged survives its death. Topic
//! configs, subscription groups and consumer offsets go through the replicated log, so the next
//! master serves every change the old one answered, at once, and every member's table files
//! are the same.
//!
//! 1. A topic created (UPDATE_AND_CREATE_TOPIC, `autoCreateTopicEnable=false`) and written
//!    less than 1 s before kill -9 of the master: the new master's first pulls return the
//!    messages (never TOPIC_NOT_EXIST), its table has the topic, and the name server's route
//!    lists the topic once the new master registered.
//! 2. A two-way UPDATE_CONSUMER_OFFSET answered SUCCESS, kill -9 within 200 ms: the new
//!    master's QUERY_CONSUMER_OFFSET is exactly that offset.
//! 3. Create a group and a topic, delete another group and topic, kill -9 right after the last
//!    answer: the new master's tables agree on all four.
//! 4. Rolling restarts (kill -9, SIGTERM, kill -9, one member at a time, waiting for a master
//!    and for the restarted member to catch up): no topic, group or offset is lost.
//! 5. A clean restart (SIGTERM) of every member: the three members' `topics.json`,
//!    `subscriptionGroup.json` and `consumerOffset.json` tables are identical (dataVersion
//!    aside) and hold what was acknowledged.
//! 6. A member whose table files (and `metadataLog.json`) are gone rebuilds the same tables
//!    from the log.
//!
//! Tests 1-3 turn the periodic slave sync off (`NO_SLAVE_SYNC`): what the followers know
//! then came through the log, so a pass cannot be a lucky sync inside the kill window.
//! Tests 4-6 run with the harness's 1-s sync, as a deployment would.
//!
//! The tests of this file run one after the other (each starts its own name server and three
//! brokers; in parallel on a 2-core machine the fast DLedger timing would be starved). A
//! failing test keeps its temp dir (logs, stores) and prints its path and the logs' tails.
//! `cargo test -p tests --test failover_metadata -- --nocapture` prints the figures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use remoting::ResponseCode;
use tests::failover::*;
use tests::metadata_checks::*;

const T: Duration = Duration::from_secs(30);
/// Test 1: the kill follows the create's answer within this.
const CREATE_KILL_WINDOW: Duration = Duration::from_secs(1);
/// Test 2: the kill follows the offset commit's answer within this.
const COMMIT_KILL_WINDOW: Duration = Duration::from_millis(200);
/// A restarted member has caught up within this (MP-01's goal).
const CATCH_UP: Duration = Duration::from_secs(30);
/// Group of the checking pulls.
const CHECKER: &str = "FoChecker";
/// What to look for in a broker log when a test fails.
const LOG_NEEDLES: &[&str] = &[
    "metadata", "ERROR", "WARN", "leader", "master", "topic", "offset",
];

/// One test at a time (see the module doc).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn no_slave_sync(extra: &str) -> String {
    format!("{extra}{NO_SLAVE_SYNC}")
}

/// Panics with `msg`, the members' metadata-related log lines and where the logs are.
fn fail(cl: &Cluster, msg: &str) -> ! {
    let mut lines = String::new();
    for i in 0..cl.members.len() {
        lines.push_str(&format!(
            "--- {} (metadata / role / error lines)\n{}\n",
            cl.members[i].self_id,
            log_lines_about(cl, i, LOG_NEEDLES, 40)
        ));
    }
    panic!("{msg}\n{lines}logs: {}", log_paths(cl));
}

/// What the members must hold after the test's changes.
#[derive(Debug, Default, Clone)]
struct Expected {
    /// Topic → read = write queues.
    topics: BTreeMap<String, i64>,
    gone_topics: Vec<String>,
    groups: Vec<String>,
    gone_groups: Vec<String>,
    /// (group, topic, queue) → offset.
    offsets: BTreeMap<(String, String, i32), i64>,
    /// (group, topic, queue) that must have no offset (its group or topic was deleted).
    gone_offsets: Vec<(String, String, i32)>,
}

impl Expected {
    fn topic(&mut self, t: &str, queues: i32) {
        self.topics.insert(t.into(), i64::from(queues));
        self.gone_topics.retain(|g| g != t);
    }
    fn topic_gone(&mut self, t: &str) {
        self.topics.remove(t);
        self.gone_topics.push(t.into());
        let gone: Vec<_> = self
            .offsets
            .keys()
            .filter(|(_, topic, _)| topic == t)
            .cloned()
            .collect();
        for k in gone {
            self.offsets.remove(&k);
            self.gone_offsets.push(k);
        }
    }
    fn group(&mut self, g: &str) {
        self.groups.push(g.into());
        self.gone_groups.retain(|x| x != g);
    }
    fn group_gone(&mut self, g: &str) {
        self.groups.retain(|x| x != g);
        self.gone_groups.push(g.into());
        let gone: Vec<_> = self
            .offsets
            .keys()
            .filter(|(group, _, _)| group == g)
            .cloned()
            .collect();
        for k in gone {
            self.offsets.remove(&k);
            self.gone_offsets.push(k);
        }
    }
    fn offset(&mut self, g: &str, t: &str, q: i32, o: i64) {
        self.offsets.insert((g.into(), t.into(), q), o);
    }

    /// Differences between this and the topic and group tables given.
    fn table_problems(
        &self,
        topics: &serde_json::Map<String, serde_json::Value>,
        groups: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (t, n) in &self.topics {
            match queue_counts(topics, t) {
                Some((r, w)) if r == *n && w == *n => {}
                other => out.push(format!("topic {t}: want {n} queues, have {other:?}")),
            }
        }
        for t in &self.gone_topics {
            if topics.contains_key(t) {
                out.push(format!("deleted topic {t} is there"));
            }
        }
        for g in &self.groups {
            if !groups.contains_key(g) {
                out.push(format!("group {g} missing"));
            }
        }
        for g in &self.gone_groups {
            if groups.contains_key(g) {
                out.push(format!("deleted group {g} is there"));
            }
        }
        out
    }

    /// What member `addr` answers against this: its topic and group tables
    /// (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and QUERY_CONSUMER_OFFSET.
    async fn check_member(&self, c: &TestClient, addr: SocketAddr) -> Result<(), String> {
        let topics = topic_table(c, addr).await?;
        let groups = group_table(c, addr).await?;
        let mut out = self.table_problems(&topics, &groups);
        for ((g, t, q), o) in &self.offsets {
            match query_offset(c, addr, g, t, *q).await {
                OffsetAnswer::Offset(x) if x == *o => {}
                other => out.push(format!("offset {t}@{g} q{q}: want {o}, have {other:?}")),
            }
        }
        for (g, t, q) in &self.gone_offsets {
            match query_offset(c, addr, g, t, *q).await {
                OffsetAnswer::NotFound => {}
                other => out.push(format!("deleted offset {t}@{g} q{q}: have {other:?}")),
            }
        }
        if out.is_empty() {
            Ok(())
        } else {
            Err(format!("{addr}: {}", out.join("; ")))
        }
    }

    /// The table files of one member against this.
    fn check_files(&self, f: &TableFiles) -> Result<(), String> {
        let mut out = self.table_problems(&f.topics, &f.groups);
        for ((g, t, q), o) in &self.offsets {
            let have = offset_in(&f.offsets, t, g, *q);
            if have != Some(*o) {
                out.push(format!("offset {t}@{g} q{q}: want {o}, file has {have:?}"));
            }
        }
        for (g, t, q) in &self.gone_offsets {
            if let Some(o) = offset_in(&f.offsets, t, g, *q) {
                out.push(format!("deleted offset {t}@{g} q{q}: file has {o}"));
            }
        }
        if out.is_empty() {
            Ok(())
        } else {
            Err(out.join("; "))
        }
    }
}

/// Polls every running member until it answers `e` (bounded by `timeout`); the error names
/// the members that did not and what they lacked.
async fn wait_members_hold(
    cl: &Cluster,
    c: &TestClient,
    e: &Expected,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut problems = Vec::new();
        for m in cl.members.iter().filter(|m| m.child.is_some()) {
            if let Err(p) = e.check_member(c, m.addr()).await {
                problems.push(format!("{}: {p}", m.self_id));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(problems.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Test 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_created_just_before_the_kill_is_served_by_the_new_master_at_once() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    const TOPIC: &str = "Fo26-Created";
    let mut cl = Cluster::start(
        &tests::failover_bins!(),
        &no_slave_sync("autoCreateTopicEnable=false\n"),
    );
    let c = TestClient::new(cl.namesrv);
    let old = wait_serving_master(&cl, &c, None, T).await;
    let master = cl.members[old].addr();
    // The group is complete before the change (a lagging follower could otherwise lose the
    // election for reasons unrelated to the metadata).
    wait_answering(&cl, &c, (old + 1) % 3, T).await;
    wait_answering(&cl, &c, (old + 2) % 3, T).await;

    if let Err(e) = create_topic(&c, master, TOPIC, 4).await {
        fail(&cl, &format!("creating the topic: {e}"));
    }
    let answered = Instant::now();
    let mut sent: BTreeMap<i32, (i64, String)> = BTreeMap::new();
    for q in 0..4 {
        let body = format!("created-q{q}");
        match c.send(master, TOPIC, q, body.as_bytes(), "").await {
            SendOutcome::Acked(off) => {
                sent.insert(q, (off, body));
            }
            other => fail(
                &cl,
                &format!("send to {TOPIC} q{q} on the master right after the create: {other:?}"),
            ),
        }
    }
    let before_kill = answered.elapsed();
    assert!(
        before_kill < CREATE_KILL_WINDOW,
        "the sends took {before_kill:?}: the kill must follow the create within {CREATE_KILL_WINDOW:?}"
    );
    cl.kill9(old);
    let killed = Instant::now();
    let new = wait_serving_master(&cl, &c, Some(old), T).await;
    let serving_after = killed.elapsed();
    let addr = cl.members[new].addr();

    // At once: the new master's first answer on every queue is the message sent to it.
    for (q, (off, body)) in &sent {
        let mut answers = Vec::new();
        let deadline = Instant::now() + T;
        let recs = loop {
            match c
                .pull_once(addr, CHECKER, TOPIC, *q, 0, Duration::ZERO)
                .await
            {
                PullOutcome::Failed => answers.push("no answer".to_owned()),
                PullOutcome::Found(r) if !r.is_empty() => break r,
                other => {
                    let code = match &other {
                        PullOutcome::Other(code, _) => *code,
                        _ => 0,
                    };
                    let what = if code == ResponseCode::TOPIC_NOT_EXIST.0 {
                        "TOPIC_NOT_EXIST (17)"
                    } else {
                        "not the message"
                    };
                    fail(
                        &cl,
                        &format!(
                            "new master {addr}, {serving_after:?} after the kill, answered the first \
                             pull of {TOPIC} q{q} with {what}: {other:?} (after {answers:?}); the \
                             topic was created {before_kill:?} before the kill"
                        ),
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "new master {addr} never answered a pull of {TOPIC} q{q}: {answers:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let got: Vec<(i64, &[u8])> = recs
            .iter()
            .map(|m| (m.queue_offset, m.body.as_ref()))
            .collect();
        if got != [(*off, body.as_bytes())] {
            fail(
                &cl,
                &format!(
                    "new master's {TOPIC} q{q}: {:?}, sent {body:?} at {off}",
                    recs.iter()
                        .map(|m| (m.queue_offset, String::from_utf8_lossy(&m.body)))
                        .collect::<Vec<_>>()
                ),
            );
        }
    }
    match topic_table(&c, addr).await {
        Ok(t) if queue_counts(&t, TOPIC) == Some((4, 4)) => {}
        other => fail(
            &cl,
            &format!(
                "new master's topic table: {TOPIC} = {:?}",
                other.map(|t| t.get(TOPIC).cloned())
            ),
        ),
    }
    let pulled_after = killed.elapsed();

    // The name server: once the new master registered, the topic's route names it and lists
    // the topic's queues.
    let new_addr = addr.to_string();
    let routed = tokio::time::timeout(
        T,
        poll(
            "the route of the topic through the new master",
            T,
            || async {
                (c.master(TOPIC).await.as_deref() == Some(new_addr.as_str())
                    && route_lists(&c, TOPIC, 4).await)
                    .then_some(())
            },
        ),
    )
    .await;
    if routed.is_err() {
        let registered = c.master(ALWAYS_REGISTERED_TOPIC).await;
        fail(
            &cl,
            &format!(
                "route of {TOPIC} after the kill: {:?}; master registered for \
                 {ALWAYS_REGISTERED_TOPIC}: {registered:?} (new master {new_addr})",
                c.route(TOPIC).await
            ),
        );
    }
    eprintln!(
        "G5a topic: killed {} {before_kill:?} after the create's answer; {} served as master \
         {serving_after:?} after the kill, pulls and topic table right at {pulled_after:?}, \
         route {:?} after the kill; test {:?}",
        cl.members[old].self_id,
        cl.members[new].self_id,
        killed.elapsed(),
        started.elapsed()
    );
}

/// Test 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_acknowledged_just_before_the_kill_is_the_new_masters_offset() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    const TOPIC: &str = "Fo26-Offsets";
    const GROUP: &str = "Fo26-OffsetGroup";
    let mut cl = Cluster::start(&tests::failover_bins!(), &no_slave_sync(""));
    let c = TestClient::new(cl.namesrv);
    let old = wait_serving_master(&cl, &c, None, T).await;
    let master = cl.members[old].addr();
    if let Err(e) = create_topic(&c, master, TOPIC, 4).await {
        fail(&cl, &format!("creating the topic: {e}"));
    }
    // The topic and a first offset on every member first: this test is about the last commit.
    if let Err(e) = commit_offset(&c, master, GROUP, TOPIC, 1, 3).await {
        fail(&cl, &format!("first commit: {e}"));
    }
    let mut e = Expected::default();
    e.topic(TOPIC, 4);
    e.offset(GROUP, TOPIC, 1, 3);
    if let Err(p) = wait_members_hold(&cl, &c, &e, T).await {
        fail(
            &cl,
            &format!("topic and first offset never reached every member:\n{p}"),
        );
    }

    if let Err(e) = commit_offset(&c, master, GROUP, TOPIC, 1, 7).await {
        fail(&cl, &format!("second commit: {e}"));
    }
    let answered = Instant::now();
    cl.kill9(old);
    let gap = answered.elapsed();
    assert!(
        gap < COMMIT_KILL_WINDOW,
        "kill {gap:?} after the answer (window {COMMIT_KILL_WINDOW:?})"
    );
    let killed = Instant::now();
    let new = wait_serving_master(&cl, &c, Some(old), T).await;
    let serving_after = killed.elapsed();
    let addr = cl.members[new].addr();
    let mut answers = Vec::new();
    let deadline = Instant::now() + T;
    loop {
        match query_offset(&c, addr, GROUP, TOPIC, 1).await {
            OffsetAnswer::Offset(7) => break,
            OffsetAnswer::Failed(why) if Instant::now() < deadline => answers.push(why),
            other => fail(
                &cl,
                &format!(
                    "new master {addr} ({serving_after:?} after the kill) answers offset \
                     {other:?} for {TOPIC}@{GROUP} q1; the old master acknowledged 7 (and 3 \
                     before it) {gap:?} before its kill (earlier attempts: {answers:?})"
                ),
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "G5a offset: killed {} {gap:?} after the commit's answer; {} served as master \
         {serving_after:?} after the kill with offset 7; test {:?}",
        cl.members[old].self_id,
        cl.members[new].self_id,
        started.elapsed()
    );
}

/// Test 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_and_deletes_just_before_the_kill_are_the_new_masters_tables() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    const OLD_TOPIC: &str = "Fo26-OldTopic";
    const OLD_GROUP: &str = "Fo26-OldGroup";
    const NEW_TOPIC: &str = "Fo26-NewTopic";
    const NEW_GROUP: &str = "Fo26-NewGroup";
    let mut cl = Cluster::start(&tests::failover_bins!(), &no_slave_sync(""));
    let c = TestClient::new(cl.namesrv);
    let old = wait_serving_master(&cl, &c, None, T).await;
    let master = cl.members[old].addr();
    let mut e = Expected::default();
    for r in [
        create_topic(&c, master, OLD_TOPIC, 2).await,
        create_group(&c, master, OLD_GROUP).await,
    ] {
        if let Err(err) = r {
            fail(&cl, &format!("setup: {err}"));
        }
    }
    e.topic(OLD_TOPIC, 2);
    e.group(OLD_GROUP);
    if let Err(p) = wait_members_hold(&cl, &c, &e, T).await {
        fail(&cl, &format!("setup never reached every member:\n{p}"));
    }

    for r in [
        create_group(&c, master, NEW_GROUP).await,
        create_topic(&c, master, NEW_TOPIC, 3).await,
        delete_group(&c, master, OLD_GROUP).await,
        delete_topic(&c, master, OLD_TOPIC).await,
    ] {
        if let Err(err) = r {
            fail(&cl, &err);
        }
    }
    let answered = Instant::now();
    cl.kill9(old);
    let gap = answered.elapsed();
    e.group(NEW_GROUP);
    e.topic(NEW_TOPIC, 3);
    e.group_gone(OLD_GROUP);
    e.topic_gone(OLD_TOPIC);
    let killed = Instant::now();
    let new = wait_serving_master(&cl, &c, Some(old), T).await;
    let serving_after = killed.elapsed();
    let addr = cl.members[new].addr();
    // At once: the first tables the new master answers (retried only without an answer).
    let deadline = Instant::now() + T;
    let (topics, groups) = loop {
        match (topic_table(&c, addr).await, group_table(&c, addr).await) {
            (Ok(t), Ok(g)) => break (t, g),
            (t, g) => assert!(
                Instant::now() < deadline,
                "new master {addr} never answered its tables: {t:?} {g:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let problems = e.table_problems(&topics, &groups);
    if !problems.is_empty() {
        // Late or lost? Tell them apart for the report.
        let later = wait_members_hold(&cl, &c, &e, Duration::from_secs(10)).await;
        fail(
            &cl,
            &format!(
                "new master {addr} ({serving_after:?} after the kill, {gap:?} after the last \
                 answer) disagrees at once: {}; 10 s later: {later:?}",
                problems.join("; ")
            ),
        );
    }
    eprintln!(
        "G5a tables: killed {} {gap:?} after the last answer; {} served as master \
         {serving_after:?} after the kill with all four changes; test {:?}",
        cl.members[old].self_id,
        cl.members[new].self_id,
        started.elapsed()
    );
}

/// How test 4 stops a member.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Kill9,
    Term,
}

/// Test 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_lose_no_topic_group_or_offset() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    let mut e = Expected::default();
    // Before the first restart: topics and groups, offsets, and a topic and a group deleted.
    let m = cl.members[wait_serving_master(&cl, &c, None, T).await].addr();
    let setup = [
        create_topic(&c, m, "Fo26-Roll", 4).await,
        create_topic(&c, m, "Fo26-RollGone", 1).await,
        create_group(&c, m, "Fo26-RollG").await,
        create_group(&c, m, "Fo26-RollGoneG").await,
        commit_offset(&c, m, "Fo26-RollG", "Fo26-Roll", 0, 5).await,
        commit_offset(&c, m, "Fo26-RollGoneG", "Fo26-Roll", 0, 6).await,
        commit_offset(&c, m, "Fo26-RollG", "Fo26-RollGone", 0, 1).await,
        delete_topic(&c, m, "Fo26-RollGone").await,
        delete_group(&c, m, "Fo26-RollGoneG").await,
    ];
    if let Some(Err(err)) = setup.into_iter().find(Result::is_err) {
        fail(&cl, &format!("setup: {err}"));
    }
    e.topic("Fo26-Roll", 4);
    e.topic("Fo26-RollGone", 1);
    e.group("Fo26-RollG");
    e.group("Fo26-RollGoneG");
    e.offset("Fo26-RollG", "Fo26-Roll", 0, 5);
    e.offset("Fo26-RollGoneG", "Fo26-Roll", 0, 6);
    e.offset("Fo26-RollG", "Fo26-RollGone", 0, 1);
    e.topic_gone("Fo26-RollGone");
    e.group_gone("Fo26-RollGoneG");

    let mut restarted: Vec<usize> = Vec::new();
    let mut figures = Vec::new();
    for (round, how) in [Stop::Kill9, Stop::Term, Stop::Kill9]
        .into_iter()
        .enumerate()
    {
        let master = wait_serving_master(&cl, &c, None, T).await;
        let m = cl.members[master].addr();
        // A change of this round, committed before its restart.
        let topic = format!("Fo26-Roll{round}");
        let group = format!("Fo26-RollG{round}");
        let changes = [
            create_topic(&c, m, &topic, 2).await,
            create_group(&c, m, &group).await,
            commit_offset(&c, m, &group, &topic, 1, 10 + round as i64).await,
            commit_offset(&c, m, "Fo26-RollG", "Fo26-Roll", 1, 100 + round as i64).await,
        ];
        if let Some(Err(err)) = changes.into_iter().find(Result::is_err) {
            fail(&cl, &format!("round {round}: {err}"));
        }
        e.topic(&topic, 2);
        e.group(&group);
        e.offset(&group, &topic, 1, 10 + round as i64);
        e.offset("Fo26-RollG", "Fo26-Roll", 1, 100 + round as i64);

        // Round 0 restarts the master, the others the members not restarted yet.
        let victim = if round == 0 {
            master
        } else {
            (0..3).find(|i| !restarted.contains(i)).unwrap()
        };
        let role = if victim == master { "master" } else { "slave" };
        let t0 = Instant::now();
        match how {
            Stop::Kill9 => cl.kill9(victim),
            Stop::Term => {
                if let Err(err) = stop_member(&mut cl, victim, Duration::from_secs(20)) {
                    fail(&cl, &format!("round {round}: {err}"));
                }
            }
        }
        let now_master = wait_serving_master(&cl, &c, Some(victim), T).await;
        let master_after = t0.elapsed();
        if let Err(p) = e.check_member(&c, cl.members[now_master].addr()).await {
            let later = wait_members_hold(&cl, &c, &e, Duration::from_secs(10)).await;
            fail(
                &cl,
                &format!(
                    "round {round}: after {how:?} of the {role} {}, the master {} lacks: {p}; \
                     10 s later: {later:?}",
                    cl.members[victim].self_id, cl.members[now_master].self_id
                ),
            );
        }
        cl.start_member(victim);
        let t1 = Instant::now();
        wait_answering(&cl, &c, victim, T).await;
        let _ = wait_serving_master(&cl, &c, None, T).await;
        if let Err(p) = wait_members_hold(&cl, &c, &e, CATCH_UP).await {
            fail(
                &cl,
                &format!(
                    "round {round}: {} restarted after {how:?} never caught up within {CATCH_UP:?}:\n{p}",
                    cl.members[victim].self_id
                ),
            );
        }
        figures.push(format!(
            "round {round}: {how:?} {role} {}: master serving after {master_after:?}, restarted \
             member caught up {:?} after its start",
            cl.members[victim].self_id,
            t1.elapsed()
        ));
        restarted.push(victim);
    }
    eprintln!(
        "G5a rolling restarts:\n  {}\n  test {:?}",
        figures.join("\n  "),
        started.elapsed()
    );
}

/// Tests 5 and 6: changes of every kind on the master, waited for on every member. Sends to
/// an auto-created topic; a push consumer's pull-carried commit; deletes that take offsets
/// with them.
async fn table_workload(cl: &Cluster, c: &TestClient) -> Expected {
    let m = cl.members[wait_serving_master(cl, c, None, T).await].addr();
    let mut e = Expected::default();
    let steps = [
        create_topic(c, m, "Fo26-Files", 4).await,
        create_topic(c, m, "Fo26-Files2", 2).await,
        create_topic(c, m, "Fo26-FilesGone", 1).await,
        create_group(c, m, "Fo26-FilesG").await,
        create_group(c, m, "Fo26-FilesG2").await,
        create_group(c, m, "Fo26-FilesGoneG").await,
    ];
    if let Some(Err(err)) = steps.into_iter().find(Result::is_err) {
        fail(cl, &format!("workload: {err}"));
    }
    e.topic("Fo26-Files", 4);
    e.topic("Fo26-Files2", 2);
    e.topic("Fo26-FilesGone", 1);
    e.group("Fo26-FilesG");
    e.group("Fo26-FilesG2");
    e.group("Fo26-FilesGoneG");
    for i in 0..3 {
        for (topic, q) in [("Fo26-Files", 0), ("Fo26-FilesAuto", 0)] {
            match c
                .send(m, topic, q, format!("files-{i}").as_bytes(), "")
                .await
            {
                SendOutcome::Acked(_) => {}
                other => fail(cl, &format!("workload: send to {topic}: {other:?}")),
            }
        }
    }
    // Created by the first send from TBW102 (8 queues).
    e.topic("Fo26-FilesAuto", TOPIC_QUEUES);
    let commits = [
        commit_offset(c, m, "Fo26-FilesG", "Fo26-Files", 0, 1).await,
        commit_offset(c, m, "Fo26-FilesG", "Fo26-Files", 1, 2).await,
        commit_offset(c, m, "Fo26-FilesG2", "Fo26-Files2", 0, 3).await,
        commit_offset(c, m, "Fo26-FilesG", "Fo26-FilesAuto", 5, 4).await,
        commit_offset(c, m, "Fo26-FilesGoneG", "Fo26-Files", 0, 4).await,
        commit_offset(c, m, "Fo26-FilesG", "Fo26-FilesGone", 0, 1).await,
    ];
    if let Some(Err(err)) = commits.into_iter().find(Result::is_err) {
        fail(cl, &format!("workload: {err}"));
    }
    e.offset("Fo26-FilesG", "Fo26-Files", 0, 1);
    e.offset("Fo26-FilesG", "Fo26-Files", 1, 2);
    e.offset("Fo26-FilesG2", "Fo26-Files2", 0, 3);
    e.offset("Fo26-FilesG", "Fo26-FilesAuto", 5, 4);
    e.offset("Fo26-FilesGoneG", "Fo26-Files", 0, 4);
    e.offset("Fo26-FilesG", "Fo26-FilesGone", 0, 1);
    // A push consumer's long poll commits the offset it pulls from (records are there, so it
    // is answered at once).
    match c
        .pull_once(
            m,
            "Fo26-FilesG2",
            "Fo26-Files",
            0,
            2,
            Duration::from_millis(1000),
        )
        .await
    {
        PullOutcome::Found(r) if !r.is_empty() => {}
        other => fail(cl, &format!("workload: pull with commit: {other:?}")),
    }
    e.offset("Fo26-FilesG2", "Fo26-Files", 0, 2);
    let deletes = [
        delete_topic(c, m, "Fo26-FilesGone").await,
        delete_group(c, m, "Fo26-FilesGoneG").await,
    ];
    if let Some(Err(err)) = deletes.into_iter().find(Result::is_err) {
        fail(cl, &format!("workload: {err}"));
    }
    e.topic_gone("Fo26-FilesGone");
    e.group_gone("Fo26-FilesGoneG");
    if let Err(p) = wait_members_hold(cl, c, &e, T).await {
        fail(cl, &format!("workload never reached every member:\n{p}"));
    }
    e
}

/// Each running member's table files.
fn member_files(cl: &Cluster) -> Vec<(String, Result<TableFiles, String>)> {
    cl.members
        .iter()
        .map(|m| {
            let files = store_root(m)
                .ok_or_else(|| format!("no storePathRootDir in {}", m.conf.display()))
                .and_then(|root| read_table_files(&root));
            (m.self_id.clone(), files)
        })
        .collect()
}

/// Every member's files identical to the first one's and holding `e`; `Err` describes the
/// differences.
fn files_agree(cl: &Cluster, e: &Expected) -> Result<(), String> {
    let files = member_files(cl);
    let mut out = Vec::new();
    let mut first: Option<(&str, &TableFiles)> = None;
    for (id, f) in &files {
        let f = match f {
            Ok(f) => f,
            Err(err) => {
                out.push(format!("{id}: {err}"));
                continue;
            }
        };
        if let Err(p) = e.check_files(f) {
            out.push(format!("{id}: {p}"));
        }
        match first {
            None => first = Some((id, f)),
            Some((id0, f0)) => {
                for (name, a, b) in [
                    ("topics.json", &f0.topics, &f.topics),
                    ("subscriptionGroup.json", &f0.groups, &f.groups),
                    ("consumerOffset.json", &f0.offsets, &f.offsets),
                ] {
                    let d = table_diff(a, b);
                    if !d.is_empty() {
                        out.push(format!("{name} {id0} vs {id}: {}", d.join("; ")));
                    }
                }
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out.join("\n"))
    }
}

/// Polls until [`files_agree`] (the files are written after the tables change, offsets on a
/// timer).
async fn wait_files_agree(cl: &Cluster, e: &Expected, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match files_agree(cl, e) {
            Ok(()) => return Ok(()),
            Err(d) if Instant::now() >= deadline => return Err(d),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Test 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_restart_of_every_member_rebuilds_identical_tables() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    let e = table_workload(&cl, &c).await;
    let t0 = Instant::now();
    for i in 0..3 {
        match stop_member(&mut cl, i, Duration::from_secs(20)) {
            Ok(s) if s.success() => {}
            other => fail(&cl, &format!("clean stop of n{i}: {other:?}")),
        }
    }
    let stopped = t0.elapsed();
    for i in 0..3 {
        cl.start_member(i);
    }
    for i in 0..3 {
        wait_answering(&cl, &c, i, T).await;
    }
    let _ = wait_serving_master(&cl, &c, None, T).await;
    if let Err(p) = wait_members_hold(&cl, &c, &e, CATCH_UP).await {
        fail(&cl, &format!("after the clean restart:\n{p}"));
    }
    if let Err(d) = wait_files_agree(&cl, &e, T).await {
        fail(
            &cl,
            &format!("table files after the clean restart (dataVersion aside):\n{d}"),
        );
    }
    eprintln!(
        "G5a files: 3 members stopped cleanly in {stopped:?}; restarted, caught up and \
         identical files {:?} after the restart; test {:?}",
        t0.elapsed() - stopped,
        started.elapsed()
    );
}

/// Test 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_without_table_files_rebuilds_them_from_the_log() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    let c = TestClient::new(cl.namesrv);
    let e = table_workload(&cl, &c).await;
    let master = wait_serving_master(&cl, &c, None, T).await;
    let victim = (master + 1) % 3;
    if let Err(err) = stop_member(&mut cl, victim, Duration::from_secs(20)) {
        fail(&cl, &err);
    }
    let root = store_root(&cl.members[victim]).expect("storePathRootDir in the test config");
    for f in [
        "topics.json",
        "subscriptionGroup.json",
        "consumerOffset.json",
        "metadataLog.json",
    ] {
        let p = root.join("config").join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("removing {}: {err}", p.display()),
        }
    }
    let t0 = Instant::now();
    cl.start_member(victim);
    wait_answering(&cl, &c, victim, T).await;
    if let Err(p) = wait_members_hold(&cl, &c, &e, CATCH_UP).await {
        fail(
            &cl,
            &format!(
                "{} restarted without its table files:\n{p}",
                cl.members[victim].self_id
            ),
        );
    }
    if let Err(d) = wait_files_agree(&cl, &e, T).await {
        fail(
            &cl,
            &format!(
                "table files after {} rebuilt its tables (dataVersion aside):\n{d}",
                cl.members[victim].self_id
            ),
        );
    }
    eprintln!(
        "G5a rebuild: {} restarted without table files, identical tables {:?} after its \
         start; test {:?}",
        cl.members[victim].self_id,
        t0.elapsed(),
        started.elapsed()
    );
}
