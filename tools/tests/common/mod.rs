//! Shared test helpers: an in-process name server and a small in-memory mock broker that
//! speaks the broker side of the protocol this client uses (send, pull, offsets, admin),
//! with an injectable list of failure codes for the next sends.

#![allow(dead_code, clippy::unwrap_used)] // shared by several test binaries; tests may unwrap

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker::message::record::{encode_record, MagicPolicy, MessageLimits, RecordFields};
use bytes::{Buf, Bytes, BytesMut};
use namesrv::{NameServer, NameServerConfig, NameServerHandle};
use remoting::custom_headers::*;
use remoting::{
    ClientConfig, ConnectionHandle, ProcessFuture, RemotingClient, RemotingCommand, RemotingServer,
    RequestCode, RequestProcessor, ResponseCode, ServerConfig,
};
use tools::record::decode_one;

pub const CLUSTER: &str = "MockCluster";

pub async fn start_namesrv() -> NameServerHandle {
    NameServer::start(NameServerConfig {
        listen_addr: "127.0.0.1:0".parse().unwrap(),
        ..NameServerConfig::default()
    })
    .await
    .unwrap()
}

#[derive(Default)]
pub struct State {
    pub log: BytesMut,
    /// (topic, qid) -> [(phys offset, size)]
    pub queues: BTreeMap<(String, i32), Vec<(i64, usize)>>,
    pub topics: BTreeMap<String, (i32, i32)>,
    /// "topic@group" -> qid -> offset
    pub offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    pub fail_next_sends: VecDeque<ResponseCode>,
    pub sends_seen: usize,
    pub runtime_extra: BTreeMap<String, String>,
}

pub struct MockBroker {
    pub name: String,
    pub addr: SocketAddr,
    pub state: Mutex<State>,
    namesrv: SocketAddr,
    client: RemotingClient,
    server: Mutex<Option<RemotingServer>>,
}

struct Processor(Arc<MockBroker>);

impl RequestProcessor for Processor {
    fn process<'a>(
        &'a self,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        let me = self.0.clone();
        Box::pin(async move { Some(me.handle(conn, request).await) })
    }
}

fn ok() -> RemotingCommand {
    RemotingCommand::success()
}

impl MockBroker {
    /// Starts a mock master of `name` with topic `T` (4 queues) and TBW102, registered with
    /// the name server as id 0.
    pub async fn start(namesrv: SocketAddr, name: &str) -> Arc<MockBroker> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let mut state = State::default();
        state.topics.insert("T".to_owned(), (4, 4));
        state.topics.insert("TBW102".to_owned(), (8, 8));
        let me = Arc::new(MockBroker {
            name: name.to_owned(),
            addr,
            state: Mutex::new(state),
            namesrv,
            client: RemotingClient::new(ClientConfig::default()),
            server: Mutex::new(None),
        });
        let server = RemotingServer::builder(ServerConfig::default())
            .default_processor(Arc::new(Processor(me.clone())))
            .bind(addr)
            .await
            .unwrap();
        *me.server.lock().unwrap() = Some(server);
        me.register().await;
        me
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Stops answering (connections close).
    pub async fn stop(&self) {
        let s = self.server.lock().unwrap().take();
        if let Some(s) = s {
            s.shutdown().await;
        }
    }

    pub async fn register(&self) {
        let body = {
            let st = self.state();
            let table: serde_json::Map<String, serde_json::Value> = st
                .topics
                .iter()
                .map(|(t, (r, w))| {
                    let perm = if t == "TBW102" { 7 } else { 6 };
                    (
                        t.clone(),
                        serde_json::json!({"topicName": t, "readQueueNums": r, "writeQueueNums": w,
                            "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false}),
                    )
                })
                .collect();
            serde_json::json!({
                "topicConfigSerializeWrapper": {
                    "dataVersion": {"counter": st.topics.len(), "stateVersion": 0, "timestamp": 1},
                    "topicConfigTable": table
                },
                "filterServerList": []
            })
            .to_string()
        };
        let request = RemotingCommand::request(
            RequestCode::REGISTER_BROKER,
            &RegisterBrokerRequestHeader {
                broker_name: self.name.clone(),
                broker_addr: self.addr.to_string(),
                cluster_name: CLUSTER.to_owned(),
                ha_server_addr: self.addr.to_string(),
                broker_id: 0,
                ..Default::default()
            },
        )
        .with_body(body);
        let r = self
            .client
            .invoke(self.namesrv, request, Duration::from_secs(3))
            .await
            .unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS, "{:?}", r.remark());
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        st: &mut State,
        topic: &str,
        qid: i32,
        flag: i32,
        body: &[u8],
        props: &str,
        born: i64,
    ) -> (i64, i64) {
        let q = st.queues.entry((topic.to_owned(), qid)).or_default();
        let queue_offset = q.len() as i64;
        let phys = st.log.len() as i64;
        let mut rec = BytesMut::new();
        encode_record(
            &RecordFields {
                topic,
                queue_id: qid,
                flag,
                queue_offset,
                physical_offset: phys,
                sys_flag: 0,
                born_timestamp: born,
                born_host: "127.0.0.1:5555".parse().unwrap(),
                store_timestamp: tools::producer::now_ms(),
                store_host: self.addr,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
                body,
                properties: props.as_bytes(),
            },
            &MessageLimits::default(),
            MagicPolicy::V1Only,
            &mut rec,
        )
        .unwrap();
        q.push((phys, rec.len()));
        st.log.extend_from_slice(&rec);
        (phys, queue_offset)
    }

    fn record_at(st: &State, phys: i64) -> Option<Bytes> {
        let p = usize::try_from(phys).ok()?;
        if p + 4 > st.log.len() {
            return None;
        }
        let size = (&st.log[p..p + 4]).get_i32() as usize;
        Some(Bytes::copy_from_slice(&st.log[p..p + size]))
    }

    async fn handle(
        self: Arc<Self>,
        _conn: ConnectionHandle,
        req: RemotingCommand,
    ) -> RemotingCommand {
        let code = req.request_code();
        match code {
            RequestCode::SEND_MESSAGE_V2 | RequestCode::SEND_BATCH_MESSAGE | RequestCode::SEND_MESSAGE => {
                let h = match SendMessageRequestHeader::from_request(&req) {
                    Ok(h) => h,
                    Err(e) => return e.to_response(),
                };
                let mut st = self.state();
                st.sends_seen += 1;
                if let Some(code) = st.fail_next_sends.pop_front() {
                    return RemotingCommand::response(code, "injected failure");
                }
                if !st.topics.contains_key(&h.topic) {
                    st.topics.insert(h.topic.clone(), (4, 4));
                }
                let qid = h.queue_id.max(0);
                let mut ids = Vec::new();
                let mut first_offset = -1;
                if h.is_batch() {
                    let mut b = req.body().clone();
                    while b.remaining() >= 20 {
                        let _size = b.get_i32();
                        let _magic = b.get_i32();
                        let _crc = b.get_i32();
                        let flag = b.get_i32();
                        let len = b.get_i32() as usize;
                        let body = b.split_to(len);
                        let plen = b.get_i16() as usize;
                        let props = b.split_to(plen);
                        let props = String::from_utf8_lossy(&props).into_owned();
                        let (phys, qo) = self.append(&mut st, &h.topic, qid, flag, &body, &props, h.born_timestamp);
                        if first_offset < 0 {
                            first_offset = qo;
                        }
                        ids.push(tools::msg_id::offset_msg_id(self.addr, phys));
                    }
                } else {
                    let props = h.properties.clone().unwrap_or_default();
                    let (phys, qo) = self.append(&mut st, &h.topic, qid, h.flag, req.body(), &props, h.born_timestamp);
                    first_offset = qo;
                    ids.push(tools::msg_id::offset_msg_id(self.addr, phys));
                }
                ok().with_header(&SendMessageResponseHeader::new(ids.join(","), qid, first_offset))
            }
            RequestCode::PULL_MESSAGE => {
                let h: PullMessageRequestHeader = match req.decode_header() {
                    Ok(h) => h,
                    Err(e) => return e.to_response(),
                };
                let mut st = self.state();
                if h.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0 {
                    st.offsets
                        .entry(format!("{}@{}", h.topic, h.consumer_group))
                        .or_default()
                        .insert(h.queue_id, h.commit_offset);
                }
                let units = st.queues.get(&(h.topic.clone(), h.queue_id)).cloned().unwrap_or_default();
                let max = units.len() as i64;
                let mut body = BytesMut::new();
                let mut next = h.queue_offset;
                let (code, next) = if h.queue_offset > max || h.queue_offset < 0 {
                    (ResponseCode::PULL_OFFSET_MOVED, max)
                } else if h.queue_offset == max {
                    (ResponseCode::PULL_NOT_FOUND, max)
                } else {
                    for (phys, size) in units.iter().skip(h.queue_offset as usize).take(h.max_msg_nums.max(1) as usize) {
                        body.extend_from_slice(&st.log[*phys as usize..*phys as usize + size]);
                        next += 1;
                    }
                    (ResponseCode::SUCCESS, next)
                };
                RemotingCommand::response(code, "")
                    .with_header(&PullMessageResponseHeader {
                        suggest_which_broker_id: 0,
                        next_begin_offset: next,
                        min_offset: 0,
                        max_offset: max,
                        ..Default::default()
                    })
                    .with_body(body.freeze())
            }
            RequestCode::QUERY_CONSUMER_OFFSET => {
                let h: QueryConsumerOffsetRequestHeader = req.decode_header().unwrap();
                let st = self.state();
                match st.offsets.get(&format!("{}@{}", h.topic, h.consumer_group)).and_then(|m| m.get(&h.queue_id)) {
                    Some(o) => ok().with_header(&QueryConsumerOffsetResponseHeader { offset: *o }),
                    None => RemotingCommand::response(ResponseCode::QUERY_NOT_FOUND, "Not found"),
                }
            }
            RequestCode::UPDATE_CONSUMER_OFFSET => {
                let h: UpdateConsumerOffsetRequestHeader = req.decode_header().unwrap();
                self.state()
                    .offsets
                    .entry(format!("{}@{}", h.topic, h.consumer_group))
                    .or_default()
                    .insert(h.queue_id, h.commit_offset);
                ok()
            }
            RequestCode::GET_MAX_OFFSET | RequestCode::GET_MIN_OFFSET => {
                let topic = req.ext_field("topic").unwrap_or_default().to_owned();
                let qid: i32 = req.ext_field("queueId").and_then(|q| q.parse().ok()).unwrap_or(0);
                let st = self.state();
                let max = st.queues.get(&(topic, qid)).map_or(0, |q| q.len() as i64);
                let offset = if code == RequestCode::GET_MAX_OFFSET { max } else { 0 };
                ok().with_header(&OffsetResponseHeader { offset })
            }
            RequestCode::GET_BROKER_RUNTIME_INFO => {
                let st = self.state();
                let mut t: BTreeMap<String, String> = [
                    ("brokerVersionDesc", "V4_9_4"),
                    ("brokerActive", "true"),
                    ("putTps", "12.5 10.0 9.0"),
                    ("getTransferredTps", "3.25 1.0 1.0"),
                    ("commitLogDiskRatio", "0.25"),
                    ("pageCacheLockTimeMills", "0"),
                ]
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect();
                t.insert("msgPutTotalTodayNow".into(), st.sends_seen.to_string());
                t.extend(st.runtime_extra.clone());
                ok().with_body(serde_json::json!({ "table": t }).to_string())
            }
            RequestCode::GET_BROKER_CONFIG => ok().with_body(format!(
                "brokerClusterName={CLUSTER}\nbrokerName={}\nlistenPort={}\ndLegerGroup={}\ndLegerSelfId=n0\ndLegerPeers=n0-127.0.0.1:1\n",
                self.name,
                self.addr.port(),
                self.name
            )),
            RequestCode::VIEW_MESSAGE_BY_ID => {
                let h: ViewMessageRequestHeader = req.decode_header().unwrap();
                match Self::record_at(&self.state(), h.offset) {
                    Some(r) => ok().with_body(r),
                    None => RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "no message"),
                }
            }
            RequestCode::QUERY_MESSAGE => {
                let h: QueryMessageRequestHeader = req.decode_header().unwrap();
                let st = self.state();
                let mut body = BytesMut::new();
                let all = Bytes::copy_from_slice(&st.log);
                let mut pos = 0;
                while pos < all.len() {
                    let (m, next) = decode_one(&all, pos).unwrap();
                    let keys = m.properties.get("KEYS").cloned().unwrap_or_default();
                    if m.topic == h.topic && keys.split(' ').any(|k| k == h.key) {
                        body.extend_from_slice(&all[pos..next]);
                    }
                    pos = next;
                }
                if body.is_empty() {
                    RemotingCommand::response(ResponseCode::QUERY_NOT_FOUND, "")
                } else {
                    ok().with_header(&QueryMessageResponseHeader {
                        index_last_update_timestamp: 0,
                        index_last_update_phyoffset: 0,
                    })
                    .with_body(body.freeze())
                }
            }
            RequestCode::GET_ALL_CONSUMER_OFFSET => {
                let st = self.state();
                ok().with_body(serde_json::json!({ "offsetTable": st.offsets }).to_string())
            }
            RequestCode::UPDATE_AND_CREATE_TOPIC => {
                let h: CreateTopicRequestHeader = match req.decode_header() {
                    Ok(h) => h,
                    Err(e) => return e.to_response(),
                };
                self.state().topics.insert(h.topic, (h.read_queue_nums, h.write_queue_nums));
                self.register().await;
                ok()
            }
            RequestCode::DELETE_TOPIC_IN_BROKER => {
                let h: DeleteTopicRequestHeader = req.decode_header().unwrap();
                self.state().topics.remove(&h.topic);
                ok()
            }
            RequestCode::HEART_BEAT => ok(),
            _ => RemotingCommand::request_code_not_supported(&req),
        }
    }
}

/// Properties of a stored record in the mock (test assertions).
pub fn props_of(st: &State, phys: i64) -> BTreeMap<String, String> {
    let r = MockBroker::record_at(st, phys).unwrap();
    let (m, _) = decode_one(&r, 0).unwrap();
    m.properties
}
