//! Turns name-server requests (spec §11.6) into route-table and KV-config operations and
//! builds the responses. Every handler is synchronous: locks are taken and released inside
//! one call, never across an `.await`.
//!
//! Handlers return `Result<RemotingCommand, RemotingCommand>`: the error is the finished error
//! response, built once per failed request, so it is returned by value rather than boxed.
#![allow(clippy::result_large_err)]

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use remoting::code::{RequestCode, ResponseCode};
use remoting::command::RemotingCommand;
use remoting::connection::ConnectionHandle;
use remoting::custom_headers::{
    BrokerPermRequestHeader, CommandHeader, GetKvConfigRequestHeader, GetKvConfigResponseHeader,
    GetRouteInfoRequestHeader, GetTopicsByClusterRequestHeader, PutKvConfigRequestHeader,
    QueryDataVersionRequestHeader, QueryDataVersionResponseHeader, RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
};
use remoting::processor::{ProcessFuture, RequestProcessor};
use tracing::{debug, warn};

use crate::body::{self, DataVersion, RegisterBrokerBody, TopicRouteData};
use crate::compressed_body::decode_compressed_register_body;
use crate::config::{apply_properties, NameServerConfig, Switches};
use crate::headers::{
    AddWritePermResponseHeader, DeleteTopicInNamesrvRequestHeader,
    GetKvListByNamespaceRequestHeader, RegisterTopicRequestHeader, WipeWritePermResponseHeader,
};
use crate::kv_config::{KvConfig, NAMESPACE_ORDER_TOPIC_CONFIG};
use crate::route::{
    BrokerRegistration, BrokerUnregistration, ConnectionId, RouteTable, RouteTableOptions,
    UnitTopicFilter, WritePermChange,
};
use crate::route_cache::RouteCache;

/// Extension field a 5.x broker uses to report its zone.
const ZONE_NAME_KEY: &str = "__ZONE_NAME";

/// Shared state of one running name server.
pub struct NameServerState {
    table: RwLock<RouteTable>,
    kv: Mutex<KvConfig>,
    switches: RwLock<Switches>,
    routes: RouteCache,
    config: NameServerConfig,
    epoch: Instant,
}

/// Write access to the route table that marks cached routes stale when released (while the
/// lock is still held, so no reader can cache a route built from the old table afterwards).
pub struct TableWriteGuard<'a> {
    guard: RwLockWriteGuard<'a, RouteTable>,
    routes: &'a RouteCache,
}

impl Deref for TableWriteGuard<'_> {
    type Target = RouteTable;
    fn deref(&self) -> &RouteTable {
        &self.guard
    }
}

impl DerefMut for TableWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut RouteTable {
        &mut self.guard
    }
}

impl Drop for TableWriteGuard<'_> {
    fn drop(&mut self) {
        self.routes.invalidate();
    }
}

/// Early return of a handler: the error response to send.
type Handled = Result<RemotingCommand, RemotingCommand>;

impl NameServerState {
    /// State for `config` with an already opened KV store.
    pub fn new(config: NameServerConfig, kv: KvConfig) -> Self {
        let options = RouteTableOptions {
            default_broker_timeout_ms: config.broker_timeout_ms,
            delete_topic_with_broker_registration: config
                .switches
                .delete_topic_with_broker_registration,
        };
        NameServerState {
            table: RwLock::new(RouteTable::new(options)),
            kv: Mutex::new(kv),
            switches: RwLock::new(config.switches),
            routes: RouteCache::default(),
            config,
            epoch: Instant::now(),
        }
    }

    /// Milliseconds since the server started (the route table's clock).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Read access to the route table.
    pub fn table(&self) -> RwLockReadGuard<'_, RouteTable> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write access to the route table; cached routes become stale when it is released.
    pub fn table_mut(&self) -> TableWriteGuard<'_> {
        TableWriteGuard {
            guard: self.table.write().unwrap_or_else(PoisonError::into_inner),
            routes: &self.routes,
        }
    }

    fn kv(&self) -> MutexGuard<'_, KvConfig> {
        self.kv.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn switches(&self) -> Switches {
        *self.switches.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one request; codes the name server does not serve get Java's
    /// REQUEST_CODE_NOT_SUPPORTED answer.
    pub fn handle(&self, conn: Option<ConnectionId>, request: &RemotingCommand) -> RemotingCommand {
        let code = request.request_code();
        let result = match code {
            RequestCode::REGISTER_BROKER => self.register_broker(conn, request),
            RequestCode::UNREGISTER_BROKER => self.unregister_broker(request),
            RequestCode::GET_ROUTEINFO_BY_TOPIC => self.route_by_topic(request),
            RequestCode::GET_BROKER_CLUSTER_INFO => json_ok(&self.table().cluster_info()),
            RequestCode::QUERY_DATA_VERSION => self.query_data_version(request),
            RequestCode::PUT_KV_CONFIG => self.put_kv_config(request),
            RequestCode::GET_KV_CONFIG => self.get_kv_config(request),
            RequestCode::DELETE_KV_CONFIG => self.delete_kv_config(request),
            RequestCode::GET_KVLIST_BY_NAMESPACE => self.kv_list(request),
            RequestCode::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => self.all_topics(),
            RequestCode::GET_TOPICS_BY_CLUSTER => self.topics_by_cluster(request),
            RequestCode::GET_SYSTEM_TOPIC_LIST_FROM_NS => json_ok(&self.table().system_topics()),
            RequestCode::GET_UNIT_TOPIC_LIST => self.unit_topics(UnitTopicFilter::Unit),
            RequestCode::GET_HAS_UNIT_SUB_TOPIC_LIST => {
                self.unit_topics(UnitTopicFilter::HasUnitSub)
            }
            RequestCode::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST => {
                self.unit_topics(UnitTopicFilter::HasUnitSubNotUnit)
            }
            RequestCode::DELETE_TOPIC_IN_NAMESRV => self.delete_topic(request),
            RequestCode::REGISTER_TOPIC_IN_NAMESRV => self.register_topic(request),
            RequestCode::WIPE_WRITE_PERM_OF_BROKER => {
                self.write_perm(request, WritePermChange::Wipe)
            }
            RequestCode::ADD_WRITE_PERM_OF_BROKER => self.write_perm(request, WritePermChange::Add),
            RequestCode::GET_NAMESRV_CONFIG => Ok(RemotingCommand::success()
                .with_body(self.config.to_properties(&self.switches()).into_bytes())),
            RequestCode::UPDATE_NAMESRV_CONFIG => self.update_config(request),
            _ => Ok(RemotingCommand::request_code_not_supported(request)),
        };
        result.unwrap_or_else(|error_response| error_response)
    }

    fn register_broker(&self, conn: Option<ConnectionId>, request: &RemotingCommand) -> Handled {
        let header: RegisterBrokerRequestHeader = decode_header(request)?;
        let body_bytes = request.body();
        if let Some(expected) = header.body_crc32.filter(|&c| c != 0) {
            let actual = masked_crc32(body_bytes);
            if actual != expected {
                warn!(broker = %header.broker_addr, expected, actual, "register body crc32 mismatch");
                return Err(error(ResponseCode::SYSTEM_ERROR, "crc32 not match"));
            }
        }
        let body: RegisterBrokerBody = if body_bytes.is_empty() {
            RegisterBrokerBody::default()
        } else if header.compressed == Some(true) {
            decode_compressed_register_body(body_bytes, request.version()).map_err(|e| {
                warn!(broker = %header.broker_addr, error = %e, "malformed compressed register body");
                error(
                    ResponseCode::SYSTEM_ERROR,
                    format!("malformed compressed RegisterBrokerBody: {e}"),
                )
            })?
        } else {
            body::from_json(body_bytes).map_err(|e| {
                warn!(broker = %header.broker_addr, error = %e, "malformed register body");
                error(
                    ResponseCode::SYSTEM_ERROR,
                    format!("malformed RegisterBrokerBody: {e}"),
                )
            })?
        };
        let registration = BrokerRegistration {
            cluster_name: header.cluster_name,
            broker_addr: header.broker_addr,
            broker_name: header.broker_name,
            broker_id: header.broker_id,
            ha_server_addr: header.ha_server_addr,
            zone_name: request.ext_field(ZONE_NAME_KEY).map(str::to_owned),
            timeout_ms: header
                .heartbeat_timeout_millis
                .and_then(|t| u64::try_from(t).ok())
                .filter(|&t| t > 0),
            enable_acting_master: header.enable_acting_master,
            topics: body.topic_config_serialize_wrapper,
            filter_servers: body.filter_server_list,
            connection: conn,
        };
        debug!(
            broker = %registration.broker_addr, id = registration.broker_id,
            topics = registration.topics.topic_config_table.len(), "register broker"
        );
        let now = self.now_ms();
        let outcome = self.table_mut().register_broker(registration, now);
        let mut response = RemotingCommand::success().with_header(&RegisterBrokerResponseHeader {
            ha_server_addr: outcome.ha_server_addr,
            master_addr: outcome.master_addr,
        });
        if let Some(order) = self.kv().namespace(NAMESPACE_ORDER_TOPIC_CONFIG) {
            response = response.with_body(encode(&order)?);
        }
        Ok(response)
    }

    fn unregister_broker(&self, request: &RemotingCommand) -> Handled {
        let header: UnregisterBrokerRequestHeader = decode_header(request)?;
        self.table_mut().unregister_broker(&BrokerUnregistration {
            cluster_name: header.cluster_name,
            broker_addr: header.broker_addr,
            broker_name: header.broker_name,
            broker_id: header.broker_id,
        });
        Ok(RemotingCommand::success())
    }

    fn route_by_topic(&self, request: &RemotingCommand) -> Handled {
        let header: GetRouteInfoRequestHeader = decode_header(request)?;
        if self
            .config
            .wait_for_service_ms
            .is_some_and(|wait| self.now_ms() < wait)
        {
            return Err(error(ResponseCode::SYSTEM_ERROR, "name server not ready"));
        }
        if let Some(json) = self.routes.get(&header.topic) {
            return Ok(RemotingCommand::success().with_body(json));
        }
        let (generation, route) = {
            let table = self.table();
            (self.routes.generation(), table.topic_route(&header.topic))
        };
        let Some(mut route) = route else {
            return Err(error(
                ResponseCode::TOPIC_NOT_EXIST,
                format!(
                    "No topic route info in name server for the topic: {}\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.",
                    header.topic
                ),
            ));
        };
        if self.switches().order_message_enable {
            route.order_topic_conf = self
                .kv()
                .get(NAMESPACE_ORDER_TOPIC_CONFIG, &header.topic)
                .map(str::to_owned);
        }
        // Always standard JSON with quoted keys (quirk Q7), whatever the client version.
        let json = encode(&route)?;
        self.routes.put(&header.topic, generation, json.clone());
        Ok(RemotingCommand::success().with_body(json))
    }

    fn query_data_version(&self, request: &RemotingCommand) -> Handled {
        let header: QueryDataVersionRequestHeader = decode_header(request)?;
        let version: DataVersion = body::from_json(request.body()).map_err(|e| {
            error(
                ResponseCode::SYSTEM_ERROR,
                format!("malformed DataVersion body: {e}"),
            )
        })?;
        let now = self.now_ms();
        let (changed, held) = self.table_mut().query_data_version(
            &header.cluster_name,
            &header.broker_addr,
            &version,
            now,
        );
        let mut response =
            RemotingCommand::success().with_header(&QueryDataVersionResponseHeader {
                changed: Some(changed),
            });
        if let Some(held) = held {
            response = response.with_body(encode(&held)?);
        }
        Ok(response)
    }

    fn put_kv_config(&self, request: &RemotingCommand) -> Handled {
        let h: PutKvConfigRequestHeader = decode_header(request)?;
        let mut kv = self.kv();
        let stored = kv.put(&h.namespace, &h.key, &h.value);
        self.routes.invalidate();
        stored.map_err(|e| error(ResponseCode::SYSTEM_ERROR, e.to_string()))?;
        Ok(RemotingCommand::success())
    }

    fn get_kv_config(&self, request: &RemotingCommand) -> Handled {
        let h: GetKvConfigRequestHeader = decode_header(request)?;
        match self.kv().get(&h.namespace, &h.key) {
            Some(value) => Ok(
                RemotingCommand::success().with_header(&GetKvConfigResponseHeader {
                    value: Some(value.to_owned()),
                }),
            ),
            None => Err(error(
                ResponseCode::QUERY_NOT_FOUND,
                format!("No config item, Namespace: {} Key: {}", h.namespace, h.key),
            )),
        }
    }

    fn delete_kv_config(&self, request: &RemotingCommand) -> Handled {
        let h: GetKvConfigRequestHeader = decode_header(request)?;
        let mut kv = self.kv();
        let stored = kv.delete(&h.namespace, &h.key);
        self.routes.invalidate();
        stored.map_err(|e| error(ResponseCode::SYSTEM_ERROR, e.to_string()))?;
        Ok(RemotingCommand::success())
    }

    fn kv_list(&self, request: &RemotingCommand) -> Handled {
        let h: GetKvListByNamespaceRequestHeader = decode_header(request)?;
        match self.kv().namespace(&h.namespace) {
            Some(table) => json_ok(&table),
            None => Err(error(
                ResponseCode::QUERY_NOT_FOUND,
                format!("No config item, Namespace: {}", h.namespace),
            )),
        }
    }

    fn all_topics(&self) -> Handled {
        if !self.switches().enable_all_topic_list {
            return Err(error(ResponseCode::SYSTEM_ERROR, "disable"));
        }
        json_ok(&self.table().all_topics())
    }

    fn topics_by_cluster(&self, request: &RemotingCommand) -> Handled {
        if !self.switches().enable_topic_list {
            return Err(error(ResponseCode::SYSTEM_ERROR, "disable"));
        }
        let h: GetTopicsByClusterRequestHeader = decode_header(request)?;
        json_ok(&self.table().topics_by_cluster(&h.cluster))
    }

    fn unit_topics(&self, filter: UnitTopicFilter) -> Handled {
        if !self.switches().enable_topic_list {
            return Err(error(ResponseCode::SYSTEM_ERROR, "disable"));
        }
        json_ok(&self.table().unit_topics(filter))
    }

    fn delete_topic(&self, request: &RemotingCommand) -> Handled {
        let h: DeleteTopicInNamesrvRequestHeader = decode_header(request)?;
        let cluster = h.cluster_name.as_deref().filter(|c| !c.is_empty());
        self.table_mut().delete_topic(&h.topic, cluster);
        Ok(RemotingCommand::success())
    }

    fn register_topic(&self, request: &RemotingCommand) -> Handled {
        let h: RegisterTopicRequestHeader = decode_header(request)?;
        if request.body().is_empty() {
            return Ok(RemotingCommand::success());
        }
        let route: TopicRouteData = body::from_json(request.body()).map_err(|e| {
            error(
                ResponseCode::SYSTEM_ERROR,
                format!("malformed TopicRouteData body: {e}"),
            )
        })?;
        if let Err(e) = self.table_mut().register_topic(&h.topic, route.queue_datas) {
            // Java logs and still answers SUCCESS.
            warn!(error = %e, "register topic ignored");
        }
        Ok(RemotingCommand::success())
    }

    fn write_perm(&self, request: &RemotingCommand, change: WritePermChange) -> Handled {
        let h: BrokerPermRequestHeader = decode_header(request)?;
        let count = self.table_mut().change_write_perm(&h.broker_name, change);
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        let response = RemotingCommand::success();
        Ok(match change {
            WritePermChange::Wipe => response.with_header(&WipeWritePermResponseHeader {
                wipe_topic_count: count,
            }),
            WritePermChange::Add => response.with_header(&AddWritePermResponseHeader {
                add_topic_count: count,
            }),
        })
    }

    fn update_config(&self, request: &RemotingCommand) -> Handled {
        let mut switches = self
            .switches
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        apply_properties(request.body(), &mut switches)
            .map_err(|e| error(ResponseCode::SYSTEM_ERROR, e.to_string()))?;
        let mut table = self.table_mut();
        let mut options = table.options().clone();
        options.delete_topic_with_broker_registration =
            switches.delete_topic_with_broker_registration;
        table.set_options(options);
        Ok(RemotingCommand::success())
    }
}

/// Masked CRC32 as RocketMQ computes it (quirk Q14).
pub fn masked_crc32(bytes: &[u8]) -> i32 {
    // The mask keeps the value within i32's non-negative range, so the cast is lossless.
    (crc32fast::hash(bytes) & 0x7FFF_FFFF) as i32
}

fn decode_header<H: CommandHeader>(request: &RemotingCommand) -> Result<H, RemotingCommand> {
    request.decode_header::<H>().map_err(|e| {
        let (code, remark) = e.to_response_parts();
        error(code, remark)
    })
}

fn error(code: ResponseCode, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response(code, remark)
}

/// JSON bytes of a body; an encoding failure becomes a SYSTEM_ERROR response.
fn encode<T: serde::Serialize>(value: &T) -> Result<bytes::Bytes, RemotingCommand> {
    body::to_json(value).map_err(|e| error(ResponseCode::SYSTEM_ERROR, e.to_string()))
}

fn json_ok<T: serde::Serialize>(value: &T) -> Handled {
    Ok(RemotingCommand::success().with_body(encode(value)?))
}

/// The remoting-facing processor: every name-server code goes through [`NameServerState`].
pub struct NamesrvProcessor {
    pub(crate) state: std::sync::Arc<NameServerState>,
    /// Counts every answered request (lock-free atomics).
    pub(crate) metrics: std::sync::Arc<observe::NamesrvMetrics>,
}

impl RequestProcessor for NamesrvProcessor {
    fn process<'a>(
        &'a self,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        let response = self.state.handle(Some(ConnectionId(conn.id().0)), &request);
        self.metrics
            .observe_request(request.request_code(), response.response_code());
        Box::pin(std::future::ready(Some(response)))
    }
}

#[cfg(test)]
mod tests {
    use remoting::custom_headers::GetRouteInfoRequestHeader;

    use super::*;
    use crate::body::{TopicConfig, TopicConfigSerializeWrapper};

    fn register(state: &NameServerState, id: i64, addr: &str, queues: i32, counter: i64) {
        let mut wrapper = TopicConfigSerializeWrapper::default();
        wrapper.data_version.counter = counter;
        wrapper
            .topic_config_table
            .insert("T".into(), TopicConfig::new("T", queues));
        let body = body::to_json(&RegisterBrokerBody {
            filter_server_list: vec![],
            topic_config_serialize_wrapper: wrapper,
        })
        .unwrap();
        let req = RemotingCommand::request(
            RequestCode::REGISTER_BROKER,
            &RegisterBrokerRequestHeader {
                broker_name: "B".into(),
                broker_addr: addr.into(),
                cluster_name: "C".into(),
                ha_server_addr: addr.into(),
                broker_id: id,
                body_crc32: Some(masked_crc32(&body)),
                ..RegisterBrokerRequestHeader::default()
            },
        )
        .with_body(body);
        let resp = state.handle(Some(ConnectionId(1)), &req);
        assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    }

    fn route(state: &NameServerState) -> TopicRouteData {
        let req = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &GetRouteInfoRequestHeader {
                topic: "T".into(),
                accept_standard_json_only: None,
            },
        );
        let resp = state.handle(None, &req);
        assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
        body::from_json(resp.body()).unwrap()
    }

    #[test]
    fn compressed_registration_is_routed() {
        let hex = crate::inflate::vectors::REGISTER_V5;
        let body: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let state = NameServerState::new(NameServerConfig::default(), KvConfig::default());
        let req = RemotingCommand::request(
            RequestCode::REGISTER_BROKER,
            &RegisterBrokerRequestHeader {
                broker_name: "B".into(),
                broker_addr: "a:1".into(),
                cluster_name: "C".into(),
                ha_server_addr: "a:2".into(),
                broker_id: 0,
                compressed: Some(true),
                body_crc32: Some(masked_crc32(&body)),
                ..RegisterBrokerRequestHeader::default()
            },
        )
        .with_body(body)
        .with_version(remoting::code::version::V5_3_1);
        let resp = state.handle(Some(ConnectionId(1)), &req);
        assert_eq!(
            resp.response_code(),
            ResponseCode::SUCCESS,
            "{:?}",
            resp.remark()
        );
        let table = state.table();
        let route = table.topic_route("TBW102").unwrap();
        assert_eq!(route.queue_datas[0].perm, 7);
        assert_eq!(route.queue_datas[0].write_queue_nums, 8);
    }

    #[test]
    fn routes_wait_for_service_when_configured() {
        let config = NameServerConfig {
            wait_for_service_ms: Some(60_000),
            ..NameServerConfig::default()
        };
        let state = NameServerState::new(config, KvConfig::default());
        register(&state, 0, "a:1", 4, 1);
        let req = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &GetRouteInfoRequestHeader {
                topic: "T".into(),
                accept_standard_json_only: None,
            },
        );
        let resp = state.handle(None, &req);
        assert_eq!(resp.response_code(), ResponseCode::SYSTEM_ERROR);
        assert_eq!(resp.remark(), Some("name server not ready"));
    }

    #[test]
    fn cached_route_follows_every_table_change() {
        let state = NameServerState::new(NameServerConfig::default(), KvConfig::default());
        register(&state, 0, "a:1", 4, 1);
        assert_eq!(route(&state).queue_datas[0].write_queue_nums, 4);
        assert!(
            state.routes.get("T").is_some(),
            "second query is served from the cache"
        );
        register(&state, 0, "a:1", 2, 2);
        assert_eq!(route(&state).queue_datas[0].write_queue_nums, 2);
        register(&state, 1, "a:1", 2, 2);
        let addrs = &route(&state).broker_datas[0].broker_addrs;
        assert_eq!(addrs.get(&1).map(String::as_str), Some("a:1"));
        assert!(!addrs.contains_key(&0));
        state.table_mut().connection_closed(ConnectionId(1));
        let req = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &GetRouteInfoRequestHeader {
                topic: "T".into(),
                accept_standard_json_only: None,
            },
        );
        let resp = state.handle(None, &req);
        assert_eq!(resp.response_code(), ResponseCode::TOPIC_NOT_EXIST);
    }
}
