//! Goal: a 3-node DLedger broker group behind a real name server serves producers and
//! consumers end to end. Method: real `mqnamesrv`/`mqbroker` processes on free loopback ports
//! (property files like conf/dledger), driven by the harness producer/consumer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use remoting::custom_headers::*;
use remoting::{RemotingCommand, RequestCode, ResponseCode};
use tests::client::{props, Client, Queue};
use tests::cluster::{Bins, Group, NameSrv};

fn bins() -> Bins {
    Bins {
        broker: env!("CARGO_BIN_EXE_it-mqbroker").into(),
        namesrv: env!("CARGO_BIN_EXE_it-mqnamesrv").into(),
    }
}

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_all_send_modes_consumed_once_in_queue_order() {
    let dir = tempfile::tempdir().unwrap();
    let ns = NameSrv::start(&bins(), dir.path());
    let _g = Group::start(&bins(), "RaftNode00", ns.addr, dir.path(), 3, "");
    let c = Client::new(ns.addr);
    let tbw = c.wait_masters("TBW102", 1, WAIT).await;
    c.create_topic(tbw[0].addr, "Topic10k", 4).await.unwrap();
    let queues = Arc::new(c.wait_masters("Topic10k", 1, WAIT).await);
    assert_eq!(queues.len(), 4);

    let body = |mode: &str, i: usize| format!("{mode}-{i}").into_bytes();
    let p = |i: usize| {
        props(&[
            ("KEYS", &format!("key{i}")),
            ("TAGS", &format!("Tag{}", i % 4)),
            ("color", "blue"),
        ])
    };
    // 2,500 sync, one after another.
    for i in 0..2500 {
        let q = &queues[i % 4];
        c.send_retrying(
            q,
            Client::send_request("Topic10k", q.queue_id, &body("sync", i), &p(i)),
        )
        .await
        .unwrap();
    }
    // 2,500 async, 64 in flight.
    let mut tasks = Vec::new();
    for w in 0..64 {
        let (c, queues) = (c.clone(), Arc::clone(&queues));
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < 2500 {
                let q = &queues[i % 4];
                c.send_retrying(
                    q,
                    Client::send_request("Topic10k", q.queue_id, &body("async", i), &p(i)),
                )
                .await
                .unwrap();
                i += 64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 2,500 oneway.
    for i in 0..2500 {
        let q = &queues[i % 4];
        let req = Client::send_request("Topic10k", q.queue_id, &body("oneway", i), &p(i));
        c.rc.invoke_oneway(q.addr, req, Duration::from_secs(5))
            .await
            .unwrap();
    }
    // 2,500 in batches of 10.
    for b in 0..250 {
        let q = &queues[b % 4];
        let msgs: Vec<(Vec<u8>, String)> = (0..10)
            .map(|k| (body("batch", b * 10 + k), p(b * 10 + k)))
            .collect();
        let r = c
            .send_retrying(q, Client::batch_request("Topic10k", q.queue_id, &msgs))
            .await
            .unwrap();
        assert_eq!(r.ext_field("msgId").unwrap().split(',').count(), 10);
    }

    // Consume everything: each message exactly once, per-queue offsets dense and increasing.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut next: HashMap<i32, i64> = HashMap::new();
    while seen.len() < 10_000 {
        for q in queues.iter() {
            let from = *next.get(&q.queue_id).unwrap_or(&0);
            for m in c.drain("CG10k", "Topic10k", q, from).await.unwrap() {
                assert_eq!(
                    m.queue_offset,
                    from + (next.get(&q.queue_id).unwrap_or(&0) - from),
                    "queue order"
                );
                next.insert(q.queue_id, m.queue_offset + 1);
                assert!(m.property("KEYS").is_some() && m.property("TAGS").is_some());
                assert_eq!(m.property("color"), Some(&b"blue"[..]));
                assert!(
                    seen.insert(m.body.to_vec()),
                    "duplicate {:?}",
                    String::from_utf8_lossy(&m.body)
                );
            }
        }
        if seen.len() < 10_000 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of 10000 consumed",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(next.values().sum::<i64>(), 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sends_get_codes_and_store_nothing_and_offsets_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ns = NameSrv::start(&bins(), dir.path());
    let mut g = Group::start(
        &bins(),
        "RaftNode01",
        ns.addr,
        dir.path(),
        3,
        "autoCreateTopicEnable=false\nmaxMessageSize=65536\n",
    );
    let c = Client::new(ns.addr);
    // With auto-create off there is no TBW102 route: find the master through a created topic.
    let mut master = None;
    let deadline = tokio::time::Instant::now() + WAIT;
    while master.is_none() {
        for n in &g.nodes {
            if c.create_topic(n.addr, "Known", 2).await.is_ok() {
                if let Ok(Some(r)) = c.route("Known").await {
                    if let Some(q) = Client::master_queues(&r).first() {
                        master = Some(q.addr);
                    }
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no master");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let master = master.unwrap();
    let code = |r: RemotingCommand| r.response_code();
    let big = vec![b'x'; 65_537];
    assert_eq!(
        code(
            c.call(master, Client::send_request("Known", 0, &big, ""))
                .await
                .unwrap()
        ),
        ResponseCode::MESSAGE_ILLEGAL
    );
    let long = props(&[("K", &"v".repeat(40_000))]);
    assert_eq!(
        code(
            c.call(master, Client::send_request("Known", 0, b"x", &long))
                .await
                .unwrap()
        ),
        ResponseCode::MESSAGE_ILLEGAL
    );
    let mut missing = Client::send_request("Known", 0, b"x", "");
    missing.ext_fields_mut().remove("a");
    assert_eq!(
        code(c.call(master, missing).await.unwrap()),
        ResponseCode::SYSTEM_ERROR
    );
    assert_eq!(
        code(
            c.call(master, Client::send_request("NoSuchTopic", 0, b"x", ""))
                .await
                .unwrap()
        ),
        ResponseCode::TOPIC_NOT_EXIST
    );
    assert_eq!(
        code(
            c.call(
                master,
                Client::send_request("RMQ_SYS_TRANS_HALF_TOPIC", 0, b"x", "")
            )
            .await
            .unwrap()
        ),
        ResponseCode::NO_PERMISSION
    );
    let mx = |q: i32| {
        RemotingCommand::request(
            RequestCode::GET_MAX_OFFSET,
            &GetMaxOffsetRequestHeader {
                topic: "Known".into(),
                queue_id: q,
                ..Default::default()
            },
        )
    };
    let r = c.call(master, mx(0)).await.unwrap();
    assert_eq!(
        r.decode_header::<OffsetResponseHeader>().unwrap().offset,
        0,
        "bad sends stored something"
    );
    // A follower refuses sends.
    let follower = g
        .nodes
        .iter()
        .map(|n| n.addr)
        .find(|a| *a != master)
        .unwrap();
    assert_eq!(
        code(
            c.call(follower, Client::send_request("Known", 0, b"x", ""))
                .await
                .unwrap()
        ),
        ResponseCode::SERVICE_NOT_AVAILABLE
    );

    // Offsets committed on every member survive a restart of the whole group.
    for n in &g.nodes {
        let u = UpdateConsumerOffsetRequestHeader {
            consumer_group: "CG".into(),
            topic: "Known".into(),
            queue_id: 1,
            commit_offset: 42,
            broker_name: None,
        };
        let r = c
            .call(
                n.addr,
                RemotingCommand::request(RequestCode::UPDATE_CONSUMER_OFFSET, &u),
            )
            .await
            .unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    }
    let q = Queue {
        broker: "RaftNode01".into(),
        addr: master,
        queue_id: 1,
    };
    c.send_retrying(&q, Client::send_request("Known", 1, b"kept", ""))
        .await
        .unwrap();
    for i in 0..3 {
        assert!(g.stop_node(i), "unclean stop of node {i}");
    }
    for i in 0..3 {
        g.start_node(i);
    }
    let qs = c.wait_masters("Known", 1, WAIT).await;
    let new_master = qs[0].addr;
    let qo = QueryConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "Known".into(),
        queue_id: 1,
        ..Default::default()
    };
    let r = c
        .call(
            new_master,
            RemotingCommand::request(RequestCode::QUERY_CONSUMER_OFFSET, &qo),
        )
        .await
        .unwrap();
    assert_eq!(
        r.decode_header::<QueryConsumerOffsetResponseHeader>()
            .unwrap()
            .offset,
        42
    );
    let msgs = c
        .drain(
            "CG",
            "Known",
            &Queue {
                broker: "RaftNode01".into(),
                addr: new_master,
                queue_id: 1,
            },
            0,
        )
        .await
        .unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(&msgs[0].body[..], b"kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_serve_one_topic() {
    let dir = tempfile::tempdir().unwrap();
    let ns = NameSrv::start(&bins(), dir.path());
    let _a = Group::start(&bins(), "GroupA", ns.addr, dir.path(), 3, "");
    let _b = Group::start(&bins(), "GroupB", ns.addr, dir.path(), 3, "");
    let c = Client::new(ns.addr);
    let tbw = c.wait_masters("TBW102", 2, WAIT).await;
    let masters: BTreeMap<String, std::net::SocketAddr> =
        tbw.iter().map(|q| (q.broker.clone(), q.addr)).collect();
    assert_eq!(masters.len(), 2);
    for addr in masters.values() {
        c.create_topic(*addr, "Shared", 2).await.unwrap();
    }
    let qs = c.wait_masters("Shared", 2, WAIT).await;
    assert_eq!(qs.len(), 4);
    for (i, q) in qs.iter().enumerate() {
        c.send_retrying(
            q,
            Client::send_request("Shared", q.queue_id, format!("m{i}").as_bytes(), ""),
        )
        .await
        .unwrap();
    }
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while got.len() < 4 {
        got.clear();
        for q in &qs {
            for m in c.drain("CGS", "Shared", q, 0).await.unwrap() {
                got.push((
                    q.broker.clone(),
                    String::from_utf8_lossy(&m.body).to_string(),
                ));
            }
        }
        assert!(tokio::time::Instant::now() < deadline);
    }
    let brokers: HashSet<_> = got.iter().map(|(b, _)| b.clone()).collect();
    assert_eq!(brokers.len(), 2);
}
