//! Admin calls behind `mqadmin`: name-server views (clusters, topics, routes), broker views
//! (runtime info, config, offsets, messages), topic create/delete, and the DLedger group
//! view assembled from broker runtime info, broker config and the DLedger METADATA RPC.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use remoting::custom_headers::{
    CreateTopicRequestHeader, DeleteTopicRequestHeader, GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader, OffsetResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, QueryMessageRequestHeader, ViewMessageRequestHeader,
};
use remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::body::{
    parse_body, parse_properties_text, ClusterInfo, ConsumerOffsetWrapper, KvTable, TopicList,
    TopicRouteData,
};
use crate::client::{expect_success, parse_addr, MqClient, AUTO_CREATE_TOPIC};
use crate::dledger::{
    parse_peers, DLedgerCode, LeadershipTransferRequest, LeadershipTransferResponse,
    MetadataRequest, MetadataResponse, LEADERSHIP_TRANSFER, METADATA,
};
use crate::error::ClientError;
use crate::record::{decode_all, decode_one, MessageExt};

/// Runtime-info keys a DLedger broker reports about its group member.
pub mod runtime_keys {
    pub const ROLE: &str = "dledgerRole";
    pub const TERM: &str = "dledgerTerm";
    pub const LEADER_ID: &str = "dledgerLeaderId";
    pub const BEGIN_INDEX: &str = "dledgerBeginIndex";
    pub const END_INDEX: &str = "dledgerEndIndex";
    pub const COMMITTED_INDEX: &str = "dledgerCommittedIndex";
    /// Prefix of `dledgerPeerLag_<id>` (leader only).
    pub const PEER_LAG_PREFIX: &str = "dledgerPeerLag_";
    /// Prefix of `dledgerPeerWaterMark_<id>` (leader only).
    pub const PEER_WATER_MARK_PREFIX: &str = "dledgerPeerWaterMark_";
}

/// A topic to create or update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub order: bool,
}

/// One member of a DLedger group as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberStatus {
    pub broker_name: String,
    pub self_id: String,
    pub dledger_addr: String,
    /// Client address and registered broker id, when the name server lists it.
    pub broker_addr: Option<String>,
    pub broker_id: Option<i64>,
    /// `LEADER`, `FOLLOWER`, `CANDIDATE`, or `UNREACHABLE`.
    pub role: String,
    pub term: Option<i64>,
    pub leader_id: Option<String>,
    pub begin_index: Option<i64>,
    pub end_index: Option<i64>,
    pub committed_index: Option<i64>,
    /// Per peer (leader only): water mark and lag, as reported.
    pub peer_water_marks: BTreeMap<String, String>,
    pub peer_lags: BTreeMap<String, String>,
    /// Why some columns are empty.
    pub note: Option<String>,
}

/// A DLedger group: its name, peers and members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupStatus {
    pub broker_name: String,
    pub group: String,
    pub peers: BTreeMap<String, String>,
    pub members: Vec<MemberStatus>,
}

impl GroupStatus {
    /// The member every reachable member agrees leads (role LEADER wins).
    pub fn leader(&self) -> Option<&MemberStatus> {
        self.members
            .iter()
            .find(|m| m.role == "LEADER")
            .or_else(|| {
                let id = self.members.iter().find_map(|m| m.leader_id.clone())?;
                self.members.iter().find(|m| m.self_id == id)
            })
    }
}

/// Admin calls; cheap to clone.
#[derive(Clone)]
pub struct Admin {
    client: MqClient,
}

impl Admin {
    /// Admin calls over `client`.
    pub fn new(client: MqClient) -> Admin {
        Admin { client }
    }

    /// The client used.
    pub fn client(&self) -> &MqClient {
        &self.client
    }

    async fn namesrv_ok(&self, request: RemotingCommand) -> Result<RemotingCommand, ClientError> {
        let (addr, response) = self.client.invoke_namesrv(request).await?;
        expect_success(addr, response)
    }

    /// GET_BROKER_CLUSTER_INFO.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, ClientError> {
        let r = self
            .namesrv_ok(RemotingCommand::request_empty(
                RequestCode::GET_BROKER_CLUSTER_INFO,
            ))
            .await?;
        parse_body("cluster info", r.body())
    }

    /// GET_ALL_TOPIC_LIST_FROM_NAMESERVER, sorted.
    pub async fn topic_list(&self) -> Result<Vec<String>, ClientError> {
        let r = self
            .namesrv_ok(RemotingCommand::request_empty(
                RequestCode::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            ))
            .await?;
        let mut list: TopicList = parse_body("topic list", r.body())?;
        list.topic_list.sort();
        Ok(list.topic_list)
    }

    /// GET_ROUTEINFO_BY_TOPIC (no cache).
    pub async fn topic_route(&self, topic: &str) -> Result<TopicRouteData, ClientError> {
        self.client
            .fetch_route(topic)
            .await?
            .ok_or_else(|| ClientError::NoRoute {
                topic: topic.to_owned(),
            })
    }

    /// GET_BROKER_RUNTIME_INFO as a map.
    pub async fn runtime_info(
        &self,
        addr: SocketAddr,
    ) -> Result<BTreeMap<String, String>, ClientError> {
        let r = self
            .client
            .invoke_ok(
                addr,
                RemotingCommand::request_empty(RequestCode::GET_BROKER_RUNTIME_INFO),
            )
            .await?;
        let kv: KvTable = parse_body("runtime info", r.body())?;
        Ok(kv.table)
    }

    /// GET_BROKER_CONFIG as a map.
    pub async fn broker_config(
        &self,
        addr: SocketAddr,
    ) -> Result<BTreeMap<String, String>, ClientError> {
        let r = self
            .client
            .invoke_ok(
                addr,
                RemotingCommand::request_empty(RequestCode::GET_BROKER_CONFIG),
            )
            .await?;
        Ok(parse_properties_text(&String::from_utf8_lossy(r.body())))
    }

    /// UPDATE_AND_CREATE_TOPIC on one broker.
    pub async fn create_topic(
        &self,
        addr: SocketAddr,
        spec: &TopicSpec,
    ) -> Result<(), ClientError> {
        let request = RemotingCommand::request(
            RequestCode::UPDATE_AND_CREATE_TOPIC,
            &CreateTopicRequestHeader {
                topic: spec.topic.clone(),
                default_topic: AUTO_CREATE_TOPIC.to_owned(),
                read_queue_nums: spec.read_queue_nums,
                write_queue_nums: spec.write_queue_nums,
                perm: spec.perm,
                topic_filter_type: "SINGLE_TAG".to_owned(),
                topic_sys_flag: Some(0),
                order: spec.order,
                attributes: None,
                force: None,
            },
        );
        self.client.invoke_ok(addr, request).await.map(|_| ())
    }

    /// DELETE_TOPIC_IN_BROKER on one broker.
    pub async fn delete_topic_in_broker(
        &self,
        addr: SocketAddr,
        topic: &str,
    ) -> Result<(), ClientError> {
        let request = RemotingCommand::request(
            RequestCode::DELETE_TOPIC_IN_BROKER,
            &DeleteTopicRequestHeader {
                topic: topic.to_owned(),
                cluster_name: None,
            },
        );
        self.client.invoke_ok(addr, request).await.map(|_| ())
    }

    /// DELETE_TOPIC_IN_NAMESRV on every name server.
    pub async fn delete_topic_in_namesrv(
        &self,
        topic: &str,
        cluster: Option<&str>,
    ) -> Result<(), ClientError> {
        for addr in self.client.options().namesrv_addrs.clone() {
            let request = RemotingCommand::request(
                RequestCode::DELETE_TOPIC_IN_NAMESRV,
                &DeleteTopicRequestHeader {
                    topic: topic.to_owned(),
                    cluster_name: cluster.map(str::to_owned),
                },
            );
            self.client.invoke_ok(addr, request).await?;
        }
        Ok(())
    }

    /// GET_MIN_OFFSET and GET_MAX_OFFSET of one queue.
    pub async fn queue_offsets(
        &self,
        addr: SocketAddr,
        topic: &str,
        queue_id: i32,
    ) -> Result<(i64, i64), ClientError> {
        let min = RemotingCommand::request(
            RequestCode::GET_MIN_OFFSET,
            &GetMinOffsetRequestHeader {
                topic: topic.to_owned(),
                queue_id,
                broker_name: None,
            },
        );
        let max = RemotingCommand::request(
            RequestCode::GET_MAX_OFFSET,
            &GetMaxOffsetRequestHeader {
                topic: topic.to_owned(),
                queue_id,
                committed: None,
                broker_name: None,
            },
        );
        let min: OffsetResponseHeader = self
            .client
            .invoke_ok(addr, min)
            .await?
            .decode_header()
            .map_err(|e| ClientError::Remoting(e.into()))?;
        let max: OffsetResponseHeader = self
            .client
            .invoke_ok(addr, max)
            .await?
            .decode_header()
            .map_err(|e| ClientError::Remoting(e.into()))?;
        Ok((min.offset, max.offset))
    }

    /// GET_ALL_CONSUMER_OFFSET of one broker.
    pub async fn all_consumer_offsets(
        &self,
        addr: SocketAddr,
    ) -> Result<ConsumerOffsetWrapper, ClientError> {
        let r = self
            .client
            .invoke_ok(
                addr,
                RemotingCommand::request_empty(RequestCode::GET_ALL_CONSUMER_OFFSET),
            )
            .await?;
        parse_body("consumer offsets", r.body())
    }

    /// QUERY_CONSUMER_OFFSET; `None` when the broker has no offset.
    pub async fn consumer_offset(
        &self,
        addr: SocketAddr,
        group: &str,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<i64>, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: group.to_owned(),
                topic: topic.to_owned(),
                queue_id,
                set_zero_if_not_found: Some(false),
                broker_name: None,
            },
        );
        let r = self
            .client
            .invoke(addr, request, self.client.options().rpc_timeout)
            .await?;
        if r.response_code() == ResponseCode::QUERY_NOT_FOUND {
            return Ok(None);
        }
        let h: QueryConsumerOffsetResponseHeader = expect_success(addr, r)?
            .decode_header()
            .map_err(|e| ClientError::Remoting(e.into()))?;
        Ok(Some(h.offset))
    }

    /// VIEW_MESSAGE_BY_ID at a physical offset.
    pub async fn view_message(
        &self,
        addr: SocketAddr,
        offset: i64,
    ) -> Result<MessageExt, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::VIEW_MESSAGE_BY_ID,
            &ViewMessageRequestHeader {
                offset,
                topic: None,
            },
        );
        let r = self.client.invoke_ok(addr, request).await?;
        Ok(decode_one(r.body(), 0)?.0)
    }

    /// QUERY_MESSAGE by key (or by `UNIQ_KEY` when `unique`) on one broker; empty when
    /// the broker found nothing.
    pub async fn query_message(
        &self,
        addr: SocketAddr,
        topic: &str,
        key: &str,
        max_num: i32,
        unique: bool,
    ) -> Result<Vec<MessageExt>, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::QUERY_MESSAGE,
            &QueryMessageRequestHeader {
                topic: topic.to_owned(),
                key: key.to_owned(),
                max_num,
                begin_timestamp: 0,
                end_timestamp: i64::MAX,
                unique_key_query: unique.then_some(true),
            },
        );
        let r = self
            .client
            .invoke(addr, request, self.client.options().rpc_timeout)
            .await?;
        if r.response_code() == ResponseCode::QUERY_NOT_FOUND {
            return Ok(Vec::new());
        }
        let r = expect_success(addr, r)?;
        let (msgs, err) = decode_all(r.body());
        match err {
            Some(e) if msgs.is_empty() => Err(e.into()),
            _ => Ok(msgs),
        }
    }

    /// DLedger METADATA of the member `remote_id` at `addr`.
    pub async fn dledger_metadata(
        &self,
        addr: SocketAddr,
        group: &str,
        remote_id: &str,
    ) -> Result<MetadataResponse, ClientError> {
        let body = MetadataRequest::request(group, "mqadmin", remote_id, None, -1);
        let r = self.dledger_rpc(addr, METADATA, &body, None).await?;
        parse_body("dledger metadata", r.body())
    }

    async fn dledger_rpc<T: serde::Serialize>(
        &self,
        addr: SocketAddr,
        code: i32,
        body: &T,
        timeout: Option<Duration>,
    ) -> Result<RemotingCommand, ClientError> {
        let json = serde_json::to_vec(body).map_err(|e| ClientError::BadBody {
            what: "dledger request",
            reason: e.to_string(),
        })?;
        let request = RemotingCommand::request_empty(RequestCode(code)).with_body(json);
        let timeout = timeout.unwrap_or(self.client.options().rpc_timeout);
        let r = self.client.invoke(addr, request, timeout).await?;
        // DLedger answers remoting code 200 (Java); accept SUCCESS (0) too.
        if r.response_code() != ResponseCode(DLedgerCode::SUCCESS.0)
            && r.response_code() != ResponseCode::SUCCESS
        {
            return Err(ClientError::Response {
                addr,
                code: r.response_code(),
                remark: r.remark().unwrap_or_default().to_owned(),
            });
        }
        Ok(r)
    }

    /// Sends LEADERSHIP_TRANSFER to the leader at `leader_addr` (dledger.md §3.7, §8) and
    /// returns the body of its answer (`code` 200 = the transferee now leads).
    pub async fn leadership_transfer(
        &self,
        leader_addr: SocketAddr,
        group: &str,
        leader_id: &str,
        transferee_id: &str,
        term: i64,
    ) -> Result<LeadershipTransferResponse, ClientError> {
        let body = LeadershipTransferRequest {
            code: DLedgerCode::SUCCESS,
            group: Some(group.to_owned()),
            leader_id: Some(leader_id.to_owned()),
            local_id: Some("mqadmin".to_owned()),
            remote_id: Some(leader_id.to_owned()),
            take_leadership_ledger_index: -1,
            term,
            transfer_id: Some(leader_id.to_owned()),
            transferee_id: Some(transferee_id.to_owned()),
        };
        let r = self
            .dledger_rpc(
                leader_addr,
                LEADERSHIP_TRANSFER,
                &body,
                Some(Duration::from_secs(10)),
            )
            .await?;
        parse_body("leadership transfer", r.body())
    }

    /// The state of every DLedger group (optionally only those of `cluster` or named
    /// `broker_name`). `peers_override`/`group_override` replace what broker configs say
    /// (`id-host:port;...`), for brokers that do not expose their config.
    pub async fn dledger_status(
        &self,
        cluster: Option<&str>,
        broker_name: Option<&str>,
        peers_override: Option<&str>,
        group_override: Option<&str>,
    ) -> Result<Vec<GroupStatus>, ClientError> {
        let info = self.cluster_info().await?;
        let mut names: BTreeSet<String> = match cluster {
            Some(c) => info
                .cluster_addr_table
                .get(c)
                .map(|v| v.iter().cloned().collect())
                .unwrap_or_default(),
            None => info.broker_addr_table.keys().cloned().collect(),
        };
        if let Some(b) = broker_name {
            names.retain(|n| n == b);
            if names.is_empty() && peers_override.is_some() {
                names.insert(b.to_owned());
            }
        }
        let mut out = Vec::new();
        for name in names {
            let registered = info
                .broker_addr_table
                .get(&name)
                .map(|b| b.broker_addrs.clone())
                .unwrap_or_default();
            out.push(
                self.group_status(&name, &registered, peers_override, group_override)
                    .await,
            );
        }
        Ok(out)
    }

    async fn group_status(
        &self,
        name: &str,
        registered: &BTreeMap<i64, String>,
        peers_override: Option<&str>,
        group_override: Option<&str>,
    ) -> GroupStatus {
        // Per registered broker: runtime info and config, keyed by its dLegerSelfId.
        let mut by_self_id: BTreeMap<String, (i64, String, BTreeMap<String, String>)> =
            BTreeMap::new();
        let mut peers = peers_override.map(parse_peers).unwrap_or_default();
        let mut group = group_override.map(str::to_owned);
        let mut unknown_self = Vec::new();
        for (id, addr_text) in registered {
            let Ok(addr) = parse_addr(addr_text) else {
                continue;
            };
            let config = self.broker_config(addr).await.unwrap_or_default();
            let runtime = self.runtime_info(addr).await.unwrap_or_default();
            if peers.is_empty() {
                if let Some(p) = config.get("dLegerPeers") {
                    peers = parse_peers(p);
                }
            }
            if group.is_none() {
                group = config.get("dLegerGroup").cloned();
            }
            match config.get("dLegerSelfId") {
                Some(self_id) => {
                    by_self_id.insert(self_id.clone(), (*id, addr_text.clone(), runtime));
                }
                None => unknown_self.push((*id, addr_text.clone(), runtime)),
            }
        }
        let group = group.unwrap_or_else(|| name.to_owned());
        // Members: every configured peer plus every registered broker that named its id.
        let mut ids: BTreeSet<String> = peers.keys().cloned().collect();
        ids.extend(by_self_id.keys().cloned());
        let mut members = Vec::new();
        for self_id in ids {
            let dledger_addr = peers.get(&self_id).cloned().unwrap_or_default();
            let mut m = MemberStatus {
                broker_name: name.to_owned(),
                self_id: self_id.clone(),
                dledger_addr: dledger_addr.clone(),
                ..MemberStatus::default()
            };
            let mut alive = false;
            if let Some((id, addr, runtime)) = by_self_id.get(&self_id) {
                m.broker_id = Some(*id);
                m.broker_addr = Some(addr.clone());
                alive = !runtime.is_empty();
                fill_from_runtime(&mut m, runtime);
            }
            let meta = if dledger_addr.is_empty() {
                Err(ClientError::InvalidArgument(
                    "DLedger address unknown (no dLegerPeers; pass --peers)".to_owned(),
                ))
            } else {
                match parse_addr(&dledger_addr) {
                    Ok(a) => self.dledger_metadata(a, &group, &self_id).await,
                    Err(e) => Err(e),
                }
            };
            match meta {
                Ok(meta) if meta.code == DLedgerCode::SUCCESS => {
                    if m.leader_id.is_none() {
                        m.leader_id = meta.leader_id.clone();
                    }
                    if m.role.is_empty() {
                        m.role = match &meta.leader_id {
                            Some(l) if *l == self_id => "LEADER".to_owned(),
                            Some(_) => "FOLLOWER".to_owned(),
                            None => "CANDIDATE".to_owned(),
                        };
                    }
                    if m.term.is_none() && meta.term >= 0 {
                        m.term = Some(meta.term);
                    }
                }
                Ok(meta) => {
                    m.note = Some(format!(
                        "METADATA answered {}",
                        crate::dledger::code_name(meta.code)
                    ));
                }
                Err(e) => {
                    m.note = Some(format!("METADATA: {e}"));
                }
            }
            if m.role.is_empty() {
                m.role = match (alive, m.broker_id) {
                    (true, Some(0)) => "LEADER".to_owned(),
                    (true, _) => "FOLLOWER".to_owned(),
                    (false, _) => "UNREACHABLE".to_owned(),
                };
            }
            members.push(m);
        }
        // Registered brokers whose self id is unknown (their config has no dLegerSelfId).
        for (id, addr, runtime) in unknown_self {
            let mut m = MemberStatus {
                broker_name: name.to_owned(),
                broker_id: Some(id),
                broker_addr: Some(addr),
                note: Some("broker config has no dLegerSelfId".to_owned()),
                ..MemberStatus::default()
            };
            fill_from_runtime(&mut m, &runtime);
            if m.role.is_empty() {
                m.role = if id == 0 { "LEADER" } else { "FOLLOWER" }.to_owned();
            }
            members.push(m);
        }
        GroupStatus {
            broker_name: name.to_owned(),
            group,
            peers,
            members,
        }
    }
}

/// Reads the DLedger keys of a runtime-info table. Key case is ignored
/// (`dledgerEndIndex` and `dLedgerEndIndex` are the same key).
fn fill_from_runtime(m: &mut MemberStatus, runtime: &BTreeMap<String, String>) {
    use runtime_keys as k;
    let lower: BTreeMap<String, (&str, &String)> = runtime
        .iter()
        .map(|(key, v)| (key.to_ascii_lowercase(), (key.as_str(), v)))
        .collect();
    let get = |key: &str| lower.get(&key.to_ascii_lowercase()).map(|(_, v)| *v);
    let get_int = |key: &str| get(key).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(role) = get(k::ROLE).filter(|r| !r.is_empty()) {
        m.role = role.to_ascii_uppercase();
    }
    m.term = get_int(k::TERM);
    m.leader_id = get(k::LEADER_ID).filter(|s| !s.is_empty()).cloned();
    m.begin_index = get_int(k::BEGIN_INDEX);
    m.end_index = get_int(k::END_INDEX);
    m.committed_index = get_int(k::COMMITTED_INDEX);
    let lag_prefix = k::PEER_LAG_PREFIX.to_ascii_lowercase();
    let wm_prefix = k::PEER_WATER_MARK_PREFIX.to_ascii_lowercase();
    for (low, (orig, value)) in &lower {
        if low.starts_with(&lag_prefix) {
            m.peer_lags
                .insert(orig[lag_prefix.len()..].to_owned(), (*value).clone());
        } else if low.starts_with(&wm_prefix) {
            m.peer_water_marks
                .insert(orig[wm_prefix.len()..].to_owned(), (*value).clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_keys_are_read_case_insensitively() {
        let rt: BTreeMap<String, String> = [
            ("dledgerRole", "leader"),
            ("dledgerTerm", "3"),
            ("dLedgerEndIndex", "41"),
            ("dLedgerCommittedIndex", "40"),
            ("dledgerPeerLag_n1", "2"),
            ("dledgerPeerWaterMark_n1", "39"),
            ("brokerActive", "true"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        let mut m = MemberStatus::default();
        fill_from_runtime(&mut m, &rt);
        assert_eq!(m.role, "LEADER");
        assert_eq!(m.term, Some(3));
        assert_eq!(m.end_index, Some(41));
        assert_eq!(m.committed_index, Some(40));
        assert_eq!(m.begin_index, None);
        assert_eq!(m.peer_lags["n1"], "2");
        assert_eq!(m.peer_water_marks["n1"], "39");
    }
}
