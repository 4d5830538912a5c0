// Goal: the JSON metadata tables use Java's file names and shapes, survive restarts, accept
// what a Java broker writes (fastjson bare integer keys, 4.x files without dataVersion,
// unknown members) and apply a master's snapshot the way a slave must. Method: real files in
// temp dirs; JSON compared structurally with serde_json::Value.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

use std::fs;
use std::path::Path;

use broker::config::BrokerConfig;
use broker::message::topic::{AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC};
use broker::store::offsets::ConsumerOffsetSerializeWrapper;
use broker::store::topics::{perm, topic_config, MULTI_TAG};
use broker::store::{
    ConsumerOffsetTable, DelayOffsetTable, SubscriptionGroupConfig, SubscriptionGroupTable,
    TopicTable,
};
use serde_json::{json, Value};

fn defaults(auto_create: bool) -> broker::store::topics::TopicDefaults {
    let mut cfg =
        BrokerConfig::from_properties("brokerClusterName=RaftCluster\nbrokerName=RaftNode00\n")
            .unwrap();
    cfg.auto_create_topic_enable = auto_create;
    cfg.topic_defaults()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn topic_table_registers_system_topics_and_auto_creates_from_tbw102() {
    let dir = tempfile::tempdir().unwrap();
    let t = TopicTable::open(dir.path(), &defaults(true)).unwrap();
    let tbw = t.get(AUTO_CREATE_TOPIC_KEY_TOPIC).unwrap();
    assert_eq!(tbw.perm, 7);
    assert_eq!((tbw.read_queue_nums, tbw.write_queue_nums), (8, 8));
    assert_eq!(t.get(SCHEDULE_TOPIC).unwrap().write_queue_nums, 18);
    assert!(t.contains(TRANS_HALF_TOPIC));
    assert!(t.contains("RaftCluster") && t.contains("RaftNode00"));

    let (cfg, created) = t
        .create_topic_in_send("TopicTest", AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 0)
        .unwrap();
    assert!(created);
    let cfg = cfg.unwrap();
    assert_eq!(
        (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm),
        (4, 4, 6)
    );
    // Capped by the template's write queues; existing topics are returned unchanged.
    let (cfg2, created2) = t
        .create_topic_in_send("Big", AUTO_CREATE_TOPIC_KEY_TOPIC, 100, 0)
        .unwrap();
    assert_eq!((cfg2.unwrap().write_queue_nums, created2), (8, true));
    let (again, created3) = t
        .create_topic_in_send("TopicTest", AUTO_CREATE_TOPIC_KEY_TOPIC, 8, 0)
        .unwrap();
    assert_eq!((again.unwrap().write_queue_nums, created3), (4, false));
    // A template without the inherit bit creates nothing.
    assert_eq!(
        t.create_topic_in_send("X", "TopicTest", 4, 0).unwrap(),
        (None, false)
    );
    let retry = t.create_retry_topic("CG", 1).unwrap();
    assert_eq!(
        (retry.topic_name.as_str(), retry.write_queue_nums),
        ("%RETRY%CG", 1)
    );
    assert_eq!(t.create_dlq_topic("CG").unwrap().topic_name, "%DLQ%CG");
    assert!(t.data_version().counter >= 4);

    // topics.json has Java's shape and is reloaded with the same content.
    let file = read_json(&dir.path().join("config/topics.json"));
    assert_eq!(
        file["topicConfigTable"]["TopicTest"],
        json!({"attributes":{},"order":false,"perm":6,"readQueueNums":4,
               "topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,
               "writeQueueNums":4})
    );
    assert!(file["dataVersion"]["counter"].is_i64());
    let t2 = TopicTable::open(dir.path(), &defaults(true)).unwrap();
    assert_eq!(t2.snapshot(), t.snapshot());
}

#[test]
fn topic_table_without_auto_create_has_no_tbw102_and_file_wins() {
    let dir = tempfile::tempdir().unwrap();
    let t = TopicTable::open(dir.path(), &defaults(false)).unwrap();
    assert!(!t.contains(AUTO_CREATE_TOPIC_KEY_TOPIC));
    assert_eq!(
        t.create_topic_in_send("TopicTest", AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 0)
            .unwrap(),
        (None, false)
    );
    // A Java-written file (5.x extras, unknown members, MULTI_TAG) loads and survives.
    fs::create_dir_all(dir.path().join("config")).unwrap();
    fs::write(
        dir.path().join("config/topics.json"),
        r#"{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},
            "topicConfigTable":{"SCHEDULE_TOPIC_XXXX":{"perm":6,"readQueueNums":2,
              "writeQueueNums":2,"topicName":"SCHEDULE_TOPIC_XXXX","topicFilterType":"MULTI_TAG",
              "topicSysFlag":0,"order":false,"topicMessageType":"NORMAL"}},
            "topicQueueMappingInfoMap":{}}"#,
    )
    .unwrap();
    let t = TopicTable::open(dir.path(), &defaults(false)).unwrap();
    let s = t.get(SCHEDULE_TOPIC).unwrap();
    assert_eq!(
        s.write_queue_nums, 2,
        "the file wins over the built-in system topic"
    );
    assert_eq!(s.topic_filter_type, MULTI_TAG);
    assert_eq!(t.data_version().counter, 3);
    // Members this broker does not interpret (topicMessageType) are tolerated.
    let body: Value = serde_json::from_str(&t.to_json()).unwrap();
    assert_eq!(body["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]["perm"], 6);
}

#[test]
fn slave_applies_master_topic_snapshot_only_when_versions_differ() {
    let m = tempfile::tempdir().unwrap();
    let s = tempfile::tempdir().unwrap();
    let master = TopicTable::open(m.path(), &defaults(true)).unwrap();
    let slave = TopicTable::open(s.path(), &defaults(true)).unwrap();
    master
        .update(topic_config("OnlyOnMaster", 2, perm::READ | perm::WRITE))
        .unwrap();
    slave
        .update(topic_config("OnlyOnSlave", 2, perm::READ | perm::WRITE))
        .unwrap();
    let body = master.to_json();
    let parsed = TopicTable::parse_body(body.as_bytes()).unwrap();
    assert!(slave.apply_snapshot(parsed.clone()).unwrap());
    assert!(slave.contains("OnlyOnMaster"));
    assert!(!slave.contains("OnlyOnSlave"));
    assert_eq!(slave.data_version(), master.data_version());
    assert!(!slave.apply_snapshot(parsed).unwrap());
    let reloaded = TopicTable::open(s.path(), &defaults(true)).unwrap();
    assert!(reloaded.contains("OnlyOnMaster"));
}

#[test]
fn consumer_offsets_round_trip_and_accept_fastjson() {
    let dir = tempfile::tempdir().unwrap();
    let t = ConsumerOffsetTable::open(dir.path()).unwrap();
    t.commit_offset("CG", "TopicTest", 0, 12);
    t.commit_offset("CG", "TopicTest", 1, 7);
    t.commit_offset("CG2", "Other", 3, 1);
    assert_eq!(t.query_offset("CG", "TopicTest", 1), Some(7));
    assert_eq!(t.query_offset("CG", "TopicTest", 2), None);
    assert_eq!(t.topics_of_group("CG"), vec!["TopicTest".to_owned()]);
    assert_eq!(t.groups_of_topic("Other"), vec!["CG2".to_owned()]);
    // Commits are pending until the log's metadata record applies them.
    t.persist().unwrap();
    let file = read_json(&dir.path().join("config/consumerOffset.json"));
    assert_eq!(file["offsetTable"], json!({}));
    let batch = t.pending_batch();
    t.apply_logged(&batch.commits);
    t.clear_pending_through(batch.through_seq);
    assert!(!t.has_pending());
    t.persist().unwrap();
    let file = read_json(&dir.path().join("config/consumerOffset.json"));
    assert_eq!(
        file["offsetTable"]["TopicTest@CG"],
        json!({"0": 12, "1": 7})
    );

    let t2 = ConsumerOffsetTable::open(dir.path()).unwrap();
    assert_eq!(t2.snapshot(), t.snapshot());
    t2.remove_group("CG2");
    assert!(t2.groups_of_topic("Other").is_empty());

    // What a Java master answers to GET_ALL_CONSUMER_OFFSET.
    let java =
        br#"{"dataVersion":{"counter":9,"timestamp":1},"offsetTable":{"TopicTest@CG":{0:40,2:5}}}"#;
    let w: ConsumerOffsetSerializeWrapper = ConsumerOffsetTable::parse_body(java).unwrap();
    t2.apply_snapshot(w).unwrap();
    assert_eq!(t2.query_offset("CG", "TopicTest", 0), Some(40));
    assert_eq!(t2.query_offset("CG", "TopicTest", 2), Some(5));
    // Synced values are answered but stay out of the log's table (the same on every member):
    // a restart answers what the log made it.
    assert_eq!(t2.query_offset("CG", "TopicTest", 1), Some(7));
    t2.persist().unwrap();
    let t3 = ConsumerOffsetTable::open(dir.path()).unwrap();
    assert_eq!(t3.query_offset("CG", "TopicTest", 0), Some(12));
}

#[test]
fn subscription_groups_defaults_auto_create_and_java_shape() {
    let dir = tempfile::tempdir().unwrap();
    let t = SubscriptionGroupTable::open(dir.path(), true).unwrap();
    assert!(t.get("TOOLS_CONSUMER").is_some());
    let cg = t.find_or_create("CG").unwrap().unwrap();
    assert_eq!(cg, SubscriptionGroupConfig::new("CG"));
    assert_eq!((cg.retry_queue_nums, cg.retry_max_times), (1, 16));
    assert!(cg.consume_enable && cg.consume_from_min_enable && cg.consume_broadcast_enable);
    assert_eq!((cg.broker_id, cg.which_broker_when_consume_slowly), (0, 1));
    let file = read_json(&dir.path().join("config/subscriptionGroup.json"));
    let g = &file["subscriptionGroupTable"]["CG"];
    assert_eq!(g["groupName"], "CG");
    assert_eq!(g["retryMaxTimes"], 16);
    assert_eq!(g["notifyConsumerIdsChangedEnable"], true);
    assert!(file["forbiddenTable"].is_object());

    let off = SubscriptionGroupTable::open(dir.path(), false).unwrap();
    assert!(off.get("CG").is_some(), "persisted");
    assert_eq!(off.find_or_create("Unknown").unwrap(), None);

    // A 5.x Java body with members we do not interpret.
    let java = br#"{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":5},"forbiddenTable":{},
      "subscriptionGroupTable":{"G5":{"groupName":"G5","consumeEnable":false,"retryMaxTimes":3,
      "groupRetryPolicy":{"type":"CUSTOMIZED"},"subscriptionDataSet":null,"attributes":{}}}}"#;
    let w = SubscriptionGroupTable::parse_body(java).unwrap();
    off.apply_snapshot(w).unwrap();
    let g5 = off.get("G5").unwrap();
    assert!(!g5.consume_enable);
    assert_eq!(g5.retry_max_times, 3);
    assert_eq!(g5.retry_queue_nums, 1);
    let body: Value = serde_json::from_str(&off.to_json()).unwrap();
    assert_eq!(
        body["subscriptionGroupTable"]["G5"]["groupRetryPolicy"],
        json!({"type":"CUSTOMIZED"})
    );
}

#[test]
fn delay_offsets_round_trip_and_read_4x_files() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("config")).unwrap();
    fs::write(
        dir.path().join("config/delayOffset.json"),
        "{\n\t\"offsetTable\":{1:0,2:15,18:3}\n}",
    )
    .unwrap();
    let t = DelayOffsetTable::open(dir.path()).unwrap();
    assert_eq!(t.get(2), Some(15));
    assert_eq!(t.get(3), None);
    t.update(3, 9);
    t.persist().unwrap();
    let file = read_json(&dir.path().join("config/delayOffset.json"));
    assert_eq!(file["offsetTable"], json!({"1":0,"2":15,"3":9,"18":3}));
    assert!(file["dataVersion"].is_object());
    let master = DelayOffsetTable::parse_body(br#"{"offsetTable":{5:50}}"#).unwrap();
    t.apply_snapshot(master).unwrap();
    assert_eq!((t.get(2), t.get(5)), (None, Some(50)));
    let t2 = DelayOffsetTable::open(dir.path()).unwrap();
    assert_eq!(t2.snapshot(), t.snapshot());
}

#[test]
fn metadata_writes_are_atomic_files_without_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let t = ConsumerOffsetTable::open(dir.path()).unwrap();
    for i in 0..20 {
        t.commit_offset("CG", "T", 0, i);
        let batch = t.pending_batch();
        t.apply_logged(&batch.commits);
        t.clear_pending_through(batch.through_seq);
        t.persist().unwrap();
    }
    let names: Vec<String> = fs::read_dir(dir.path().join("config"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["consumerOffset.json".to_owned()]);
    // A stale temp file from a crash mid-write is ignored and replaced.
    fs::write(
        dir.path().join("config/consumerOffset.json.tmp"),
        "{garbage",
    )
    .unwrap();
    let t2 = ConsumerOffsetTable::open(dir.path()).unwrap();
    assert_eq!(t2.query_offset("CG", "T", 0), Some(19));
    t2.persist().unwrap();
    assert!(!dir.path().join("config/consumerOffset.json.tmp").exists());
}
