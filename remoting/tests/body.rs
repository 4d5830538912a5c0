//! Goal: the shared JSON bodies of remoting.md §12 parse what Java, Go and C++ clients send
//! (quirks Q7, Q13, Q19) and are written as compact standard JSON.
//! Method: literal documents from the spec and from the quirk descriptions.

#![allow(clippy::unwrap_used)]

use remoting::body::{
    from_json, java_string_hash, to_json, BrokerData, ClusterInfo, ConsumeFromWhere, ConsumeType,
    ConsumerOffsetSerializeWrapper, DelayOffsetSerializeWrapper, HeartbeatData,
    LockBatchRequestBody, LockBatchResponseBody, MessageModel, MessageQueue, QueueData,
    RegisterBrokerBody, SubscriptionData, SubscriptionGroupWrapper, TopicConfig, TopicRouteData,
};

#[test]
fn route_is_written_compact_with_quoted_keys() {
    let route = TopicRouteData {
        broker_datas: vec![BrokerData {
            broker_addrs: [
                (0, "10.0.0.1:30911".to_owned()),
                (2, "10.0.0.2:30921".to_owned()),
                (3, "10.0.0.3:30931".to_owned()),
            ]
            .into_iter()
            .collect(),
            broker_name: "RaftNode00".into(),
            cluster: "RaftCluster".into(),
            enable_acting_master: false,
            zone_name: None,
        }],
        queue_datas: vec![QueueData {
            broker_name: "RaftNode00".into(),
            perm: 6,
            read_queue_nums: 4,
            topic_sys_flag: 0,
            write_queue_nums: 4,
        }],
        ..Default::default()
    };
    let text = to_json(&route).unwrap();
    assert_eq!(
        std::str::from_utf8(&text).unwrap(),
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:30911","2":"10.0.0.2:30921","3":"10.0.0.3:30931"},"brokerName":"RaftNode00","cluster":"RaftCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"RaftNode00","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );
    let back: TopicRouteData = from_json(&text).unwrap();
    assert_eq!(back, route);
    assert_eq!(back.broker_datas[0].master_addr(), Some("10.0.0.1:30911"));
}

#[test]
fn route_from_old_java_with_unquoted_keys() {
    let text = br#"{"brokerDatas":[{"brokerAddrs":{0:"a:1",1:"b:2"},"brokerName":"b","cluster":"c"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"topicSynFlag":0,"writeQueueNums":4}]}"#;
    let r: TopicRouteData = from_json(text).unwrap();
    assert_eq!(
        r.broker_datas[0].broker_addrs.get(&1).map(String::as_str),
        Some("b:2")
    );
    assert_eq!(r.queue_datas[0].write_queue_nums, 4);
}

#[test]
fn heartbeat_java_form() {
    let text = br#"{"clientID":"10.0.0.9@12345","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"CG","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"TopicTest"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}"#;
    let hb: HeartbeatData = from_json(text).unwrap();
    assert_eq!(hb.client_id, "10.0.0.9@12345");
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::Passively);
    assert_eq!(c.message_model, MessageModel::Clustering);
    assert_eq!(c.consume_from_where, ConsumeFromWhere::LastOffset);
    let s = &c.subscription_data_set[0];
    assert_eq!(s.sub_version, 1_700_000_000_000);
    assert_eq!(s.code_set, vec![java_string_hash("TagA")]);
    assert_eq!(java_string_hash("TagA"), 2598919);
    assert_eq!(hb.producer_data_set[0].group_name, "CLIENT_INNER_PRODUCER");
    // Written back in the same (alphabetical, compact) form.
    assert_eq!(&to_json(&hb).unwrap()[..], &text[..]);
}

#[test]
fn heartbeat_cpp_form_with_ordinals_and_missing_members() {
    let text = br#"{"clientID":"127.0.0.1@9","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,"groupName":"CG","messageModel":1,"subscriptionDataSet":[{"subString":"TagA || TagB","subVersion":"1700000000001","topic":"T"}],"unitMode":"0"}],"producerDataSet":[]}"#;
    let hb: HeartbeatData = from_json(text).unwrap();
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::Passively);
    assert_eq!(c.message_model, MessageModel::Clustering);
    assert!(!c.unit_mode);
    let s: &SubscriptionData = &c.subscription_data_set[0];
    assert_eq!(s.sub_version, 1_700_000_000_001);
    assert_eq!(s.expression_type(), "TAG");
    assert_eq!(
        s.effective_tags(),
        vec!["TagA".to_owned(), "TagB".to_owned()]
    );
    // Malformed heartbeat -> error, not panic.
    assert!(
        from_json::<HeartbeatData>(br#"{"consumerDataSet":[{"subscriptionDataSet":"x"}]}"#)
            .is_err()
    );
    assert!(from_json::<HeartbeatData>(b"{").is_err());
}

#[test]
fn register_body_and_topic_config_defaults() {
    let text = br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}},"topicQueueMappingInfoMap":{}}}"#;
    let body: RegisterBrokerBody = from_json(text).unwrap();
    let w = &body.topic_config_serialize_wrapper;
    assert_eq!(w.data_version.counter, 3);
    assert_eq!(
        w.topic_config_table["TopicTest"],
        TopicConfig::new("TopicTest", 4)
    );
    assert_eq!(&to_json(&body).unwrap()[..], &text[..]);
    let minimal: TopicConfig = from_json(br#"{"topicName":"X"}"#).unwrap();
    assert_eq!(
        (
            minimal.read_queue_nums,
            minimal.perm,
            minimal.topic_filter_type.as_str()
        ),
        (16, 6, "SINGLE_TAG")
    );
}

#[test]
fn offsets_with_unquoted_integer_keys() {
    let text =
        br#"{"dataVersion":{"counter":1,"timestamp":5},"offsetTable":{"TopicTest@CG":{0:12,1:7}}}"#;
    let w: ConsumerOffsetSerializeWrapper = from_json(text).unwrap();
    assert_eq!(w.offset_table["TopicTest@CG"][&1], 7);
    let d: DelayOffsetSerializeWrapper = from_json(br#"{"offsetTable":{1:0,2:15}}"#).unwrap();
    assert_eq!(d.offset_table[&2], 15);
    assert!(d.data_version.is_none());
    assert_eq!(
        &to_json(&d).unwrap()[..],
        br#"{"offsetTable":{"1":0,"2":15}}"#
    );
    let g: SubscriptionGroupWrapper =
        from_json(br#"{"dataVersion":{},"forbiddenTable":{},"subscriptionGroupTable":{"CG":{"groupName":"CG"}}}"#).unwrap();
    let cg = &g.subscription_group_table["CG"];
    assert!(
        cg.consume_enable && cg.consume_broadcast_enable && cg.notify_consumer_ids_changed_enable
    );
    assert_eq!(
        (
            cg.retry_queue_nums,
            cg.retry_max_times,
            cg.which_broker_when_consume_slowly
        ),
        (1, 16, 1)
    );
}

#[test]
fn cluster_info_and_lock_bodies() {
    let c: ClusterInfo = from_json(
        br#"{"brokerAddrTable":{"b":{"brokerAddrs":{0:"a:1"},"brokerName":"b","cluster":"c"}},"clusterAddrTable":{"c":["b"]}}"#,
    )
    .unwrap();
    assert_eq!(c.broker_addr_table["b"].master_addr(), Some("a:1"));
    assert!(c.cluster_addr_table["c"].contains("b"));
    let lock: LockBatchRequestBody = from_json(
        br#"{"clientId":"cid","consumerGroup":"CG","mqSet":[{"brokerName":"b","queueId":0,"topic":"t"},{"brokerName":"b","queueId":"1","topic":"t"}],"onlyThisBroker":false}"#,
    )
    .unwrap();
    assert_eq!(lock.mq_set.len(), 2);
    assert!(lock.mq_set.contains(&MessageQueue::new("t", "b", 1)));
    let resp = LockBatchResponseBody {
        lock_ok_mq_set: lock.mq_set.clone(),
    };
    let text = to_json(&resp).unwrap();
    assert!(text.starts_with(br#"{"lockOKMQSet":[{"brokerName":"b","queueId":0,"topic":"t"}"#));
}
