//! Goal: the client library against an in-process name server and mock brokers.
//! Method: real sockets on 127.0.0.1 (free ports); the mock broker injects failure codes
//! and can be stopped or replaced to exercise retries, route refresh and failure
//! classification; every assertion checks returned data, not just success.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{start_namesrv, MockBroker};
use remoting::ResponseCode;
use tools::{
    ClientError, ClientOptions, Message, MqClient, Producer, ProducerOptions, PullConsumer,
    PullStatus, SendStatus, TagFilter,
};

fn client(namesrv: std::net::SocketAddr) -> MqClient {
    let mut o = ClientOptions::new(vec![namesrv]);
    o.rpc_timeout = Duration::from_secs(2);
    o.route_refresh_min = Duration::from_millis(10);
    MqClient::new(o)
}

fn producer(c: &MqClient) -> Producer {
    Producer::new(c.clone(), ProducerOptions::default())
}

#[tokio::test]
async fn route_lookup_and_round_robin_sync_sends() {
    let ns = start_namesrv().await;
    let broker = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let route = c.fetch_route("T").await.unwrap().unwrap();
    assert_eq!(
        route.broker("b0").unwrap().master_addr(),
        Some(broker.addr.to_string().as_str())
    );
    assert!(c.fetch_route("NoSuchTopic").await.unwrap().is_none());

    let p = producer(&c);
    let mut queues = BTreeSet::new();
    for i in 0..8 {
        let r = p
            .send(
                Message::new("T", format!("m{i}"))
                    .with_tags("TagA")
                    .with_keys(["k1"]),
            )
            .await
            .unwrap();
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.attempts, 1);
        assert_eq!(r.msg_id.len(), 32);
        assert_eq!(r.broker_addr, broker.addr);
        queues.insert(r.queue.queue_id);
        // The offset id decodes to the broker and the record it wrote.
        let (addr, phys) = tools::msg_id::decode_offset_msg_id(&r.offset_msg_id).unwrap();
        assert_eq!(addr, broker.addr);
        let props = common::props_of(&broker.state(), phys);
        assert_eq!(props["UNIQ_KEY"], r.msg_id);
        assert_eq!(props["TAGS"], "TagA");
        assert_eq!(props["KEYS"], "k1");
    }
    assert_eq!(queues.len(), 4, "round robin covers every queue");
    c.shutdown().await;
    broker.stop().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn busy_and_not_available_are_retried_and_definite() {
    let ns = start_namesrv().await;
    let broker = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let p = producer(&c);

    broker
        .state()
        .fail_next_sends
        .push_back(ResponseCode::SYSTEM_BUSY);
    let r = p.send(Message::new("T", "x")).await.unwrap();
    assert_eq!(r.attempts, 2);

    for _ in 0..3 {
        broker
            .state()
            .fail_next_sends
            .push_back(ResponseCode::SERVICE_NOT_AVAILABLE);
    }
    let e = p.send(Message::new("T", "x")).await.unwrap_err();
    assert!(e.definite, "{e}");
    assert_eq!(e.attempts, 3);
    assert_eq!(
        e.last.response_code(),
        Some(ResponseCode::SERVICE_NOT_AVAILABLE)
    );

    // SYSTEM_ERROR (quorum timeout) may have stored the message.
    for _ in 0..3 {
        broker
            .state()
            .fail_next_sends
            .push_back(ResponseCode::SYSTEM_ERROR);
    }
    let e = p.send(Message::new("T", "x")).await.unwrap_err();
    assert!(!e.definite, "{e}");
    assert!(e.to_string().contains("indeterminate"));

    // MESSAGE_ILLEGAL is final: no retry.
    broker
        .state()
        .fail_next_sends
        .push_back(ResponseCode::MESSAGE_ILLEGAL);
    let before = broker.state().sends_seen;
    let e = p.send(Message::new("T", "x")).await.unwrap_err();
    assert!(e.definite);
    assert_eq!(e.attempts, 1);
    assert_eq!(broker.state().sends_seen, before + 1);

    // Without indeterminate retries, one SYSTEM_ERROR ends the send.
    let strict = Producer::new(
        c.clone(),
        ProducerOptions {
            retry_indeterminate: false,
            ..ProducerOptions::default()
        },
    );
    broker
        .state()
        .fail_next_sends
        .push_back(ResponseCode::SYSTEM_ERROR);
    let e = strict.send(Message::new("T", "x")).await.unwrap_err();
    assert_eq!((e.attempts, e.definite), (1, false));
    c.shutdown().await;
    broker.stop().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn failover_refreshes_the_route_and_connection_refused_is_definite() {
    let ns = start_namesrv().await;
    let old = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let p = producer(&c);
    p.send(Message::new("T", "before")).await.unwrap();

    // The master dies; nothing else is registered. The first send may still race with the
    // close of the old connection (indeterminate); afterwards every attempt is refused
    // before anything is written -> definite.
    old.stop().await;
    assert!(p.send(Message::new("T", "during")).await.is_err());
    let e = p.send(Message::new("T", "during")).await.unwrap_err();
    assert!(e.definite, "{e}");
    assert!(matches!(e.last, ClientError::Remoting(_)), "{e}");

    // A new master registers under id 0: the next send finds it via a fresh route.
    let new = MockBroker::start(ns.local_addr(), "b0").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let r = loop {
        match p.send(Message::new("T", "after")).await {
            Ok(r) => break r,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%e, "retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("no failover: {e}"),
        }
    };
    assert_eq!(r.broker_addr, new.addr);
    c.shutdown().await;
    new.stop().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn batch_oneway_and_async_sends_are_pulled_back_in_order() {
    let ns = start_namesrv().await;
    let broker = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let p = producer(&c);
    let batch: Vec<Message> = (0..5)
        .map(|i| {
            Message::new("T", format!("b{i}")).with_tags(if i % 2 == 0 { "even" } else { "odd" })
        })
        .collect();
    let r = p.send_batch(batch).await.unwrap();
    assert_eq!(r.msg_id.split(',').count(), 5);
    assert_eq!(r.offset_msg_id.split(',').count(), 5);
    let q = r.queue.clone();

    let consumer = PullConsumer::new(c.clone(), "G1");
    let all = consumer
        .pull(&q, 0, 32, &TagFilter::parse("*"), None, None)
        .await
        .unwrap();
    assert_eq!(all.status, PullStatus::Found);
    let bodies: Vec<String> = all
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies, ["b0", "b1", "b2", "b3", "b4"]);
    assert_eq!(all.next_begin_offset, 5);
    assert_eq!(all.messages[3].queue_offset, 3);
    let ids: Vec<&str> = r.msg_id.split(',').collect();
    assert_eq!(all.messages[2].msg_id(), ids[2]);
    assert_eq!(all.messages[0].properties["MAX_OFFSET"], "5");

    // Client-side tag filtering.
    let even = consumer
        .pull(&q, 0, 32, &TagFilter::parse("even"), None, None)
        .await
        .unwrap();
    assert_eq!(even.messages.len(), 3);

    // Nothing new at the end; an illegal offset is corrected.
    let none = consumer
        .pull(&q, 5, 32, &TagFilter::parse("*"), None, None)
        .await
        .unwrap();
    assert_eq!(none.status, PullStatus::NoNewMsg);
    let moved = consumer
        .pull(&q, 99, 32, &TagFilter::parse("*"), None, None)
        .await
        .unwrap();
    assert_eq!(
        (moved.status, moved.next_begin_offset),
        (PullStatus::OffsetIllegal, 5)
    );

    // Oneway: visible once the broker processed it.
    let before: usize = broker.state().queues.values().map(Vec::len).sum();
    p.send_oneway(Message::new("T", "ow")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while broker.state().queues.values().map(Vec::len).sum::<usize>() == before {
        assert!(Instant::now() < deadline, "oneway send never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Async: the callback gets the result.
    let (tx, rx) = tokio::sync::oneshot::channel();
    p.send_async(Message::new("T", "async"), move |r| {
        let _ = tx.send(r);
    });
    let r = rx.await.unwrap().unwrap();
    assert_eq!(r.status, SendStatus::SendOk);
    c.shutdown().await;
    broker.stop().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn consumer_offsets_and_queue_offsets() {
    let ns = start_namesrv().await;
    let broker = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let consumer = PullConsumer::new(c.clone(), "G2");
    let queues = consumer.queues("T").await.unwrap();
    assert_eq!(queues.len(), 4);
    let q = &queues[1];
    assert_eq!(consumer.query_offset(q).await.unwrap(), None);
    consumer.update_offset(q, 7, false).await.unwrap();
    assert_eq!(consumer.query_offset(q).await.unwrap(), Some(7));
    // Oneway update: poll until stored.
    consumer.update_offset(q, 9, true).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while consumer.query_offset(q).await.unwrap() != Some(9) {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(consumer.max_offset(q).await.unwrap(), 0);
    assert_eq!(consumer.min_offset(q).await.unwrap(), 0);
    // Unknown topic: no route.
    match consumer.queues("Nope").await {
        Err(ClientError::NoRoute { topic }) => assert_eq!(topic, "Nope"),
        other => panic!("{other:?}"),
    }
    c.shutdown().await;
    broker.stop().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn unknown_topic_uses_the_template_route() {
    let ns = start_namesrv().await;
    let broker = MockBroker::start(ns.local_addr(), "b0").await;
    let c = client(ns.local_addr());
    let p = producer(&c);
    let mut seen = BTreeSet::new();
    for _ in 0..8 {
        let r = p.send(Message::new("NewTopic", "x")).await.unwrap();
        seen.insert(r.queue.queue_id);
    }
    // TBW102 has 8 queues; a producer uses min(4, n) of them for an unknown topic.
    assert_eq!(seen, (0..4).collect());
    assert!(broker.state().topics.contains_key("NewTopic"));
    c.shutdown().await;
    broker.stop().await;
    ns.shutdown().await;
}
