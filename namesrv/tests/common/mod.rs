//! Shared helpers of the loopback tests: an in-process name server on a free port, a fake
//! broker (its own client, hence its own connection) and request builders.

#![allow(dead_code, clippy::unwrap_used)] // shared by several test binaries; tests may unwrap

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use namesrv::body::{
    self, DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, TopicRouteData,
};
use namesrv::processor::masked_crc32;
use namesrv::{NameServer, NameServerConfig, NameServerHandle};
use remoting::custom_headers::{
    GetRouteInfoRequestHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
};
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};

pub const TIMEOUT: Duration = Duration::from_secs(5);
pub const CLUSTER: &str = "RaftCluster";
pub const GROUP: &str = "RaftNode00";

/// A name server on 127.0.0.1 with a free port and the given liveness timings.
pub async fn start_namesrv(broker_timeout_ms: u64, scan_interval_ms: u64) -> NameServerHandle {
    NameServer::start(NameServerConfig {
        listen_addr: "127.0.0.1:0".parse().unwrap(),
        broker_timeout_ms,
        scan_interval_ms,
        ..NameServerConfig::default()
    })
    .await
    .unwrap()
}

/// Topic configs as a broker would register them.
pub fn topic_wrapper(topics: &[(&str, i32)], counter: i64) -> TopicConfigSerializeWrapper {
    TopicConfigSerializeWrapper {
        data_version: DataVersion {
            counter,
            state_version: 0,
            timestamp: 1_700_000_000_000,
        },
        topic_config_table: topics
            .iter()
            .map(|&(name, queues)| {
                (
                    name.to_owned(),
                    TopicConfig {
                        topic_name: name.to_owned(),
                        read_queue_nums: queues,
                        write_queue_nums: queues,
                        ..TopicConfig::default()
                    },
                )
            })
            .collect(),
        ..TopicConfigSerializeWrapper::default()
    }
}

/// A REGISTER_BROKER request with a correct body CRC.
pub fn register_request(
    name: &str,
    addr: &str,
    id: i64,
    topics: TopicConfigSerializeWrapper,
) -> RemotingCommand {
    let body = body::to_json(&RegisterBrokerBody {
        filter_server_list: vec![],
        topic_config_serialize_wrapper: topics,
    })
    .unwrap();
    register_request_raw(name, addr, id, body.clone(), Some(masked_crc32(&body)))
}

/// A REGISTER_BROKER request with any body and CRC.
pub fn register_request_raw(
    name: &str,
    addr: &str,
    id: i64,
    body: impl Into<bytes::Bytes>,
    crc: Option<i32>,
) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::REGISTER_BROKER,
        &RegisterBrokerRequestHeader {
            broker_name: name.to_owned(),
            broker_addr: addr.to_owned(),
            cluster_name: CLUSTER.to_owned(),
            ha_server_addr: format!("{addr}-ha"),
            broker_id: id,
            heartbeat_timeout_millis: None,
            enable_acting_master: Some(false),
            compressed: Some(false),
            body_crc32: crc,
        },
    )
    .with_body(body)
}

/// A fake broker process: one client, so one connection to the name server.
pub struct FakeBroker {
    pub client: RemotingClient,
    pub addr: String,
    pub name: String,
    pub namesrv: SocketAddr,
}

impl FakeBroker {
    pub fn new(namesrv: SocketAddr, name: &str, addr: &str) -> FakeBroker {
        FakeBroker {
            client: RemotingClient::new(ClientConfig::default()),
            addr: addr.to_owned(),
            name: name.to_owned(),
            namesrv,
        }
    }

    /// Two-way registration (the periodic one); returns the master address header.
    pub async fn register(&self, id: i64, topics: &[(&str, i32)]) -> RegisterBrokerResponseHeader {
        let req = register_request(&self.name, &self.addr, id, topic_wrapper(topics, 1));
        let resp = self
            .client
            .invoke(self.namesrv, req, TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            resp.response_code(),
            ResponseCode::SUCCESS,
            "{:?}",
            resp.remark()
        );
        resp.decode_header().unwrap()
    }

    /// Oneway registration (what a broker sends right after a role change).
    pub async fn register_oneway(&self, id: i64, topics: &[(&str, i32)]) {
        let req = register_request(&self.name, &self.addr, id, topic_wrapper(topics, 1));
        self.client
            .invoke_oneway(self.namesrv, req.with_oneway(), TIMEOUT)
            .await
            .unwrap();
    }
}

/// Queries a route: `Ok(route)` or `Err(response code)`.
pub async fn route(
    client: &RemotingClient,
    namesrv: SocketAddr,
    topic: &str,
) -> Result<TopicRouteData, ResponseCode> {
    let req = RemotingCommand::request(
        RequestCode::GET_ROUTEINFO_BY_TOPIC,
        &GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
            accept_standard_json_only: None,
        },
    );
    let resp = client.invoke(namesrv, req, TIMEOUT).await.unwrap();
    if resp.response_code() != ResponseCode::SUCCESS {
        return Err(resp.response_code());
    }
    Ok(body::from_json(resp.body()).unwrap())
}

/// The id -> address map of `GROUP` in a topic route (empty when the route is missing).
pub async fn route_addrs(
    client: &RemotingClient,
    namesrv: SocketAddr,
    topic: &str,
) -> BTreeMap<i64, String> {
    match route(client, namesrv, topic).await {
        Ok(r) => r
            .broker_datas
            .into_iter()
            .find(|b| b.broker_name == GROUP)
            .map(|b| b.broker_addrs)
            .unwrap_or_default(),
        Err(_) => BTreeMap::new(),
    }
}

pub fn addrs(pairs: &[(i64, &str)]) -> BTreeMap<i64, String> {
    pairs.iter().map(|&(id, a)| (id, a.to_owned())).collect()
}

/// Polls `check` every 10 ms until it returns true or `TIMEOUT` passes.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
