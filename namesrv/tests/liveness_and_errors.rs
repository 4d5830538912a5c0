//! Goal: silent brokers expire, and malformed registrations are answered with an error and
//! change nothing. Method: a name server with a 300 ms broker timeout and a 20 ms scan; fake
//! brokers register over loopback; the table is compared before and after each bad request.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

mod common;

use common::*;
use namesrv::body::ClusterInfo;
use remoting::custom_headers::UnregisterBrokerRequestHeader;
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

const N0: &str = "127.0.0.1:30911";
const N1: &str = "127.0.0.1:30921";

async fn cluster_info(client: &RemotingClient, at: std::net::SocketAddr) -> ClusterInfo {
    let resp = client
        .invoke(
            at,
            RemotingCommand::request_empty(RequestCode::GET_BROKER_CLUSTER_INFO),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    namesrv::body::from_json(resp.body()).unwrap()
}

#[tokio::test]
async fn silent_broker_expires_but_registering_one_stays() {
    let ns = start_namesrv(300, 20).await;
    let at = ns.local_addr();
    let client = RemotingClient::new(ClientConfig::default());
    let master = FakeBroker::new(at, GROUP, N0);
    let slave = FakeBroker::new(at, GROUP, N1);
    master.register(0, &[("T", 2)]).await;
    slave.register(2, &[("T", 2)]).await;
    assert_eq!(
        route_addrs(&client, at, "T").await,
        addrs(&[(0, N0), (2, N1)])
    );

    // Keep the master registering; let the slave go silent (its connection stays open).
    eventually("slave expired", || async {
        master.register(0, &[("T", 2)]).await;
        route_addrs(&client, at, "T").await == addrs(&[(0, N0)])
    })
    .await;
    assert!(ns.route_table().live_info(CLUSTER, N1).is_none());

    // Then the master goes silent too: the whole group and its topics disappear.
    eventually("master expired", || async {
        route(&client, at, "T").await.is_err()
    })
    .await;
    assert_eq!(
        route(&client, at, "T").await.unwrap_err(),
        ResponseCode::TOPIC_NOT_EXIST
    );
    assert!(cluster_info(&client, at).await.broker_addr_table.is_empty());

    // A broker that comes back is routed again.
    master.register(0, &[("T", 2)]).await;
    assert_eq!(route_addrs(&client, at, "T").await, addrs(&[(0, N0)]));
    for c in [&client, &master.client, &slave.client] {
        c.shutdown().await;
    }
    ns.shutdown().await;
}

#[tokio::test]
async fn unregister_removes_broker() {
    let ns = start_namesrv(120_000, 5_000).await;
    let at = ns.local_addr();
    let b = FakeBroker::new(at, GROUP, N0);
    b.register(0, &[("T", 2)]).await;
    let req = RemotingCommand::request(
        RequestCode::UNREGISTER_BROKER,
        &UnregisterBrokerRequestHeader {
            broker_name: GROUP.to_owned(),
            broker_addr: N0.to_owned(),
            cluster_name: CLUSTER.to_owned(),
            broker_id: 0,
        },
    );
    let resp = b.client.invoke(at, req, TIMEOUT).await.unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    assert_eq!(
        route(&b.client, at, "T").await.unwrap_err(),
        ResponseCode::TOPIC_NOT_EXIST
    );
    b.client.shutdown().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn malformed_registrations_get_errors_and_change_nothing() {
    let ns = start_namesrv(120_000, 5_000).await;
    let at = ns.local_addr();
    let b = FakeBroker::new(at, GROUP, N0);
    b.register(0, &[("T", 2)]).await;
    let before = cluster_info(&b.client, at).await;
    let route_before = route(&b.client, at, "T").await.unwrap();

    let good_body = namesrv::body::to_json(&namesrv::body::RegisterBrokerBody {
        filter_server_list: vec![],
        topic_config_serialize_wrapper: topic_wrapper(&[("T", 8), ("New", 1)], 9),
    })
    .unwrap();
    let cases: Vec<(&str, RemotingCommand, &str)> = vec![
        (
            "not JSON",
            register_request_raw(GROUP, N1, 0, b"{not json".to_vec(), None),
            "malformed RegisterBrokerBody",
        ),
        (
            "wrong JSON types",
            register_request_raw(
                GROUP,
                N1,
                0,
                br#"{"topicConfigSerializeWrapper":{"topicConfigTable":[1,2]}}"#.to_vec(),
                None,
            ),
            "malformed RegisterBrokerBody",
        ),
        (
            "crc mismatch",
            register_request_raw(GROUP, N1, 0, good_body.clone(), Some(12345)),
            "crc32 not match",
        ),
        (
            "missing required header field",
            {
                let mut r = register_request_raw(GROUP, N1, 0, good_body.clone(), None);
                r.ext_fields_mut().remove("brokerAddr");
                r
            },
            "brokerAddr",
        ),
        (
            "unparsable broker id",
            {
                let mut r = register_request_raw(GROUP, N1, 0, good_body.clone(), None);
                r.ext_fields_mut().insert("brokerId".into(), "zero".into());
                r
            },
            "brokerId",
        ),
        (
            "compressed body",
            {
                let mut r = register_request_raw(GROUP, N1, 0, good_body.clone(), None);
                r.ext_fields_mut()
                    .insert("compressed".into(), "true".into());
                r
            },
            "compressed",
        ),
    ];
    for (what, req, remark_part) in cases {
        let resp = b.client.invoke(at, req, TIMEOUT).await.unwrap();
        assert_eq!(resp.response_code(), ResponseCode::SYSTEM_ERROR, "{what}");
        let remark = resp.remark().unwrap_or_default();
        assert!(remark.contains(remark_part), "{what}: remark {remark:?}");
        assert_eq!(
            cluster_info(&b.client, at).await,
            before,
            "{what} changed the table"
        );
        assert_eq!(
            route(&b.client, at, "T").await.unwrap(),
            route_before,
            "{what}"
        );
        assert_eq!(
            route(&b.client, at, "New").await.unwrap_err(),
            ResponseCode::TOPIC_NOT_EXIST,
            "{what}"
        );
        assert!(ns.route_table().live_info(CLUSTER, N1).is_none(), "{what}");
    }

    // The same body with the right CRC is accepted; a CRC of 0 means "not checked".
    let crc = namesrv::processor::masked_crc32(&good_body);
    let ok = register_request_raw(GROUP, N1, 2, good_body.clone(), Some(crc));
    let resp = b.client.invoke(at, ok, TIMEOUT).await.unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    let unchecked = register_request_raw(GROUP, N1, 2, good_body, Some(0));
    let resp = b.client.invoke(at, unchecked, TIMEOUT).await.unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    b.client.shutdown().await;
    ns.shutdown().await;
}
