//! Goal: every name-server request code that clients or mqadmin use answers as the spec
//! (§11.6) says. Method: one in-process name server, a fake broker registering two topics, then
//! each code over loopback with its response code, header and JSON body checked.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

mod common;

use common::*;
use namesrv::body::{self, DataVersion, KvTable, TopicList, TopicRouteData};
use namesrv::headers::{
    AddWritePermResponseHeader, DeleteTopicInNamesrvRequestHeader,
    GetKvListByNamespaceRequestHeader, RegisterTopicRequestHeader, WipeWritePermResponseHeader,
};
use remoting::custom_headers::{
    BrokerPermRequestHeader, GetKvConfigRequestHeader, GetKvConfigResponseHeader,
    GetRouteInfoRequestHeader, GetTopicsByClusterRequestHeader, PutKvConfigRequestHeader,
    QueryDataVersionRequestHeader, QueryDataVersionResponseHeader,
};
use remoting::{
    ClientConfig, CommandHeader, RemotingClient, RemotingCommand, RequestCode, ResponseCode,
};

const N0: &str = "127.0.0.1:30911";

struct Ctx {
    client: RemotingClient,
    at: std::net::SocketAddr,
}

impl Ctx {
    async fn call<H: CommandHeader>(&self, code: RequestCode, header: &H) -> RemotingCommand {
        self.client
            .invoke(self.at, RemotingCommand::request(code, header), TIMEOUT)
            .await
            .unwrap()
    }

    async fn call_body(&self, code: RequestCode, body: Vec<u8>) -> RemotingCommand {
        self.client
            .invoke(
                self.at,
                RemotingCommand::request_empty(code).with_body(body),
                TIMEOUT,
            )
            .await
            .unwrap()
    }

    async fn topic_list(&self, code: RequestCode) -> Vec<String> {
        let resp = self.call(code, &()).await;
        assert_eq!(resp.response_code(), ResponseCode::SUCCESS, "{code}");
        body::from_json::<TopicList>(resp.body())
            .unwrap()
            .topic_list
            .into_iter()
            .collect()
    }
}

fn ok(resp: &RemotingCommand) {
    assert_eq!(
        resp.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        resp.remark()
    );
}

#[tokio::test]
async fn route_body_is_compact_json_with_quoted_ids() {
    let ns = start_namesrv(120_000, 5_000).await;
    let b = FakeBroker::new(ns.local_addr(), GROUP, N0);
    b.register(-1, &[("T", 4)]).await;
    b.register(0, &[("T", 4)]).await;
    // An old Java client (version < V4_9_4) still gets standard JSON.
    let req = RemotingCommand::request(
        RequestCode::GET_ROUTEINFO_BY_TOPIC,
        &GetRouteInfoRequestHeader {
            topic: "T".into(),
            accept_standard_json_only: None,
        },
    )
    .with_version(373);
    let resp = b
        .client
        .invoke(ns.local_addr(), req, TIMEOUT)
        .await
        .unwrap();
    ok(&resp);
    let text = std::str::from_utf8(resp.body()).unwrap();
    assert_eq!(
        text,
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:30911"},"brokerName":"RaftNode00","cluster":"RaftCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"RaftNode00","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );
    let missing = route(&b.client, ns.local_addr(), "Missing").await;
    assert_eq!(missing.unwrap_err(), ResponseCode::TOPIC_NOT_EXIST);
    b.client.shutdown().await;
    ns.shutdown().await;
}

#[tokio::test]
async fn admin_and_kv_codes() {
    let ns = start_namesrv(120_000, 5_000).await;
    let b = FakeBroker::new(ns.local_addr(), GROUP, N0);
    b.register(0, &[("T", 4), ("TBW102", 8)]).await;
    let c = Ctx {
        client: RemotingClient::new(ClientConfig::default()),
        at: ns.local_addr(),
    };

    // Topic lists.
    assert_eq!(
        c.topic_list(RequestCode::GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            .await,
        ["T", "TBW102"]
    );
    let resp = c
        .call(
            RequestCode::GET_TOPICS_BY_CLUSTER,
            &GetTopicsByClusterRequestHeader {
                cluster: CLUSTER.into(),
            },
        )
        .await;
    ok(&resp);
    assert_eq!(
        body::from_json::<TopicList>(resp.body())
            .unwrap()
            .topic_list
            .into_iter()
            .collect::<Vec<_>>(),
        ["T", "TBW102"]
    );
    let resp = c
        .call(RequestCode::GET_SYSTEM_TOPIC_LIST_FROM_NS, &())
        .await;
    ok(&resp);
    let sys: TopicList = body::from_json(resp.body()).unwrap();
    assert_eq!(
        sys.topic_list.into_iter().collect::<Vec<_>>(),
        [CLUSTER, GROUP]
    );
    assert_eq!(sys.broker_addr.as_deref(), Some(N0));
    assert!(c
        .topic_list(RequestCode::GET_UNIT_TOPIC_LIST)
        .await
        .is_empty());
    assert!(c
        .topic_list(RequestCode::GET_HAS_UNIT_SUB_TOPIC_LIST)
        .await
        .is_empty());
    assert!(c
        .topic_list(RequestCode::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)
        .await
        .is_empty());

    // Write permission.
    let perm = BrokerPermRequestHeader {
        broker_name: GROUP.into(),
    };
    let resp = c.call(RequestCode::WIPE_WRITE_PERM_OF_BROKER, &perm).await;
    ok(&resp);
    let wiped: WipeWritePermResponseHeader = resp.decode_header().unwrap();
    assert_eq!(wiped.wipe_topic_count, 2);
    assert_eq!(
        route(&c.client, c.at, "T").await.unwrap().queue_datas[0].perm,
        4
    );
    let resp = c.call(RequestCode::ADD_WRITE_PERM_OF_BROKER, &perm).await;
    let added: AddWritePermResponseHeader = resp.decode_header().unwrap();
    assert_eq!(added.add_topic_count, 2);
    assert_eq!(
        route(&c.client, c.at, "T").await.unwrap().queue_datas[0].perm,
        6
    );

    // Register a topic directly, then delete it (per cluster) and another one (everywhere).
    let mut new_route = route(&c.client, c.at, "T").await.unwrap();
    new_route.queue_datas[0].read_queue_nums = 1;
    let req = RemotingCommand::request(
        RequestCode::REGISTER_TOPIC_IN_NAMESRV,
        &RegisterTopicRequestHeader {
            topic: "Direct".into(),
        },
    )
    .with_body(body::to_json(&new_route).unwrap());
    ok(&c.client.invoke(c.at, req, TIMEOUT).await.unwrap());
    assert_eq!(
        route(&c.client, c.at, "Direct").await.unwrap().queue_datas[0].read_queue_nums,
        1
    );
    let del = |topic: &str, cluster: Option<&str>| DeleteTopicInNamesrvRequestHeader {
        topic: topic.into(),
        cluster_name: cluster.map(str::to_owned),
    };
    ok(&c
        .call(
            RequestCode::DELETE_TOPIC_IN_NAMESRV,
            &del("Direct", Some("Other")),
        )
        .await);
    assert!(route(&c.client, c.at, "Direct").await.is_ok());
    ok(&c
        .call(
            RequestCode::DELETE_TOPIC_IN_NAMESRV,
            &del("Direct", Some(CLUSTER)),
        )
        .await);
    assert!(route(&c.client, c.at, "Direct").await.is_err());
    ok(&c
        .call(RequestCode::DELETE_TOPIC_IN_NAMESRV, &del("TBW102", None))
        .await);
    assert!(route(&c.client, c.at, "TBW102").await.is_err());

    // KV config.
    let get = GetKvConfigRequestHeader {
        namespace: "NS".into(),
        key: "k".into(),
    };
    let resp = c.call(RequestCode::GET_KV_CONFIG, &get).await;
    assert_eq!(resp.response_code(), ResponseCode::QUERY_NOT_FOUND);
    let put = PutKvConfigRequestHeader {
        namespace: "NS".into(),
        key: "k".into(),
        value: "v".into(),
    };
    ok(&c.call(RequestCode::PUT_KV_CONFIG, &put).await);
    let resp = c.call(RequestCode::GET_KV_CONFIG, &get).await;
    ok(&resp);
    let value: GetKvConfigResponseHeader = resp.decode_header().unwrap();
    assert_eq!(value.value.as_deref(), Some("v"));
    let list = GetKvListByNamespaceRequestHeader {
        namespace: "NS".into(),
    };
    let resp = c.call(RequestCode::GET_KVLIST_BY_NAMESPACE, &list).await;
    ok(&resp);
    assert_eq!(
        body::from_json::<KvTable>(resp.body()).unwrap().table["k"],
        "v"
    );
    ok(&c.call(RequestCode::DELETE_KV_CONFIG, &get).await);
    let resp = c.call(RequestCode::GET_KVLIST_BY_NAMESPACE, &list).await;
    assert_eq!(resp.response_code(), ResponseCode::QUERY_NOT_FOUND);

    // Order-topic config: returned to registering brokers and, once enabled, in routes.
    let order = PutKvConfigRequestHeader {
        namespace: "ORDER_TOPIC_CONFIG".into(),
        key: "T".into(),
        value: format!("{GROUP}:4"),
    };
    ok(&c.call(RequestCode::PUT_KV_CONFIG, &order).await);
    let resp = b
        .client
        .invoke(
            c.at,
            register_request(GROUP, N0, 0, topic_wrapper(&[("T", 4)], 1)),
            TIMEOUT,
        )
        .await
        .unwrap();
    ok(&resp);
    assert_eq!(
        body::from_json::<KvTable>(resp.body()).unwrap().table["T"],
        format!("{GROUP}:4")
    );
    assert_eq!(
        route(&c.client, c.at, "T").await.unwrap().order_topic_conf,
        None
    );
    let resp = c
        .call_body(
            RequestCode::UPDATE_NAMESRV_CONFIG,
            b"orderMessageEnable=true\n".to_vec(),
        )
        .await;
    ok(&resp);
    let resp = c.call(RequestCode::GET_NAMESRV_CONFIG, &()).await;
    ok(&resp);
    assert!(std::str::from_utf8(resp.body())
        .unwrap()
        .contains("orderMessageEnable=true"));
    let r: TopicRouteData = route(&c.client, c.at, "T").await.unwrap();
    assert_eq!(r.order_topic_conf, Some(format!("{GROUP}:4")));
    let resp = c
        .call_body(
            RequestCode::UPDATE_NAMESRV_CONFIG,
            b"kvConfigPath=/tmp/x\n".to_vec(),
        )
        .await;
    assert_eq!(resp.response_code(), ResponseCode::SYSTEM_ERROR);

    // Data version.
    let dv_header = QueryDataVersionRequestHeader {
        broker_name: GROUP.into(),
        broker_addr: N0.into(),
        cluster_name: CLUSTER.into(),
        broker_id: 0,
    };
    let same = topic_wrapper(&[], 1).data_version;
    let resp = c
        .client
        .invoke(
            c.at,
            RemotingCommand::request(RequestCode::QUERY_DATA_VERSION, &dv_header)
                .with_body(body::to_json(&same).unwrap()),
            TIMEOUT,
        )
        .await
        .unwrap();
    ok(&resp);
    let changed: QueryDataVersionResponseHeader = resp.decode_header().unwrap();
    assert_eq!(changed.changed, Some(false));
    assert_eq!(body::from_json::<DataVersion>(resp.body()).unwrap(), same);
    let newer = topic_wrapper(&[], 2).data_version;
    let resp = c
        .client
        .invoke(
            c.at,
            RemotingCommand::request(RequestCode::QUERY_DATA_VERSION, &dv_header)
                .with_body(body::to_json(&newer).unwrap()),
            TIMEOUT,
        )
        .await
        .unwrap();
    let changed: QueryDataVersionResponseHeader = resp.decode_header().unwrap();
    assert_eq!(changed.changed, Some(true));

    // Unknown code: Java's answer.
    let resp = c.call(RequestCode(999), &()).await;
    assert_eq!(
        resp.response_code(),
        ResponseCode::REQUEST_CODE_NOT_SUPPORTED
    );
    assert_eq!(resp.remark(), Some(" request type 999 not supported"));

    b.client.shutdown().await;
    c.client.shutdown().await;
    ns.shutdown().await;
}
