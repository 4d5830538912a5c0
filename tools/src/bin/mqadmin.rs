//! `mqadmin`: RocketMQ's admin command line (same subcommand names and `-n` flag) for this
//! project's name server and DLedger broker groups, plus DLedger views.
//!
//! Output is human-readable aligned tables on stdout; on failure one line `ERROR: ...` on
//! stderr and exit code 1.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use tools::body::{ClusterInfo, PERM_READ, PERM_WRITE};
use tools::msg_id::decode_offset_msg_id;
use tools::producer::now_ms;
use tools::table::Table;
use tools::{
    parse_addr, parse_addr_list, Admin, ClientOptions, Message, MessageExt, MqClient, Producer,
    ProducerOptions, PullConsumer, PullStatus, TagFilter, TopicSpec,
};

/// RocketMQ admin tool.
#[derive(Debug, Parser)]
#[command(name = "mqadmin", version)]
struct Cli {
    /// Name server address list, e.g. `127.0.0.1:9876;127.0.0.2:9876` (default:
    /// $NAMESRV_ADDR, else 127.0.0.1:9876).
    #[arg(short = 'n', long = "namesrvAddr", global = true)]
    namesrv: Option<String>,
    /// RPC timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 3000)]
    timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List brokers of every cluster with their runtime figures.
    #[command(name = "clusterList")]
    ClusterList {
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
    },
    /// List topics known to the name server.
    #[command(name = "topicList")]
    TopicList {
        /// Only topics of this cluster's brokers (routes are checked).
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
    },
    /// Print a topic's route.
    #[command(name = "topicRoute")]
    TopicRoute {
        #[arg(short = 't', long = "topic")]
        topic: String,
    },
    /// Min/max offsets of each queue of a topic.
    #[command(name = "topicStatus")]
    TopicStatus {
        #[arg(short = 't', long = "topic")]
        topic: String,
    },
    /// Create or update a topic on a cluster's masters (-c) or one broker (-b).
    #[command(name = "updateTopic")]
    UpdateTopic {
        #[arg(short = 't', long = "topic")]
        topic: String,
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
        #[arg(short = 'b', long = "brokerAddr")]
        broker: Option<String>,
        #[arg(short = 'r', long = "readQueueNums", default_value_t = 8)]
        read: i32,
        #[arg(short = 'w', long = "writeQueueNums", default_value_t = 8)]
        write: i32,
        #[arg(short = 'p', long = "perm", default_value_t = 6)]
        perm: i32,
        #[arg(short = 'o', long = "order", default_value_t = false)]
        order: bool,
    },
    /// Delete a topic from a cluster's brokers and from the name servers.
    #[command(name = "deleteTopic")]
    DeleteTopic {
        #[arg(short = 't', long = "topic")]
        topic: String,
        #[arg(short = 'c', long = "clusterName")]
        cluster: String,
    },
    /// Per-queue broker offset, consumer offset and lag of a consumer group.
    #[command(name = "consumerProgress")]
    ConsumerProgress {
        #[arg(short = 'g', long = "groupName")]
        group: String,
        /// Limit to one topic (also finds queues the broker has no offset for).
        #[arg(short = 't', long = "topicName")]
        topic: Option<String>,
    },
    /// A broker's runtime information.
    #[command(name = "brokerStatus")]
    BrokerStatus {
        #[arg(short = 'b', long = "brokerAddr")]
        broker: Option<String>,
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
    },
    /// A broker's configuration.
    #[command(name = "getBrokerConfig")]
    GetBrokerConfig {
        #[arg(short = 'b', long = "brokerAddr")]
        broker: Option<String>,
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
    },
    /// Look a message up by its offset message id.
    #[command(name = "queryMsgById")]
    QueryMsgById {
        #[arg(short = 'i', long = "msgId")]
        msg_id: String,
    },
    /// Look messages up by key.
    #[command(name = "queryMsgByKey")]
    QueryMsgByKey {
        #[arg(short = 't', long = "topic")]
        topic: String,
        #[arg(short = 'k', long = "msgKey")]
        key: String,
        #[arg(short = 'm', long = "maxNum", default_value_t = 64)]
        max: i32,
    },
    /// State of each DLedger group member: role, term, ledger indexes, peer water marks.
    #[command(name = "dledgerStatus")]
    DledgerStatus {
        #[arg(short = 'c', long = "clusterName")]
        cluster: Option<String>,
        #[arg(short = 'b', long = "brokerName")]
        broker_name: Option<String>,
        /// `n0-host:port;n1-host:port;...` when the brokers do not expose dLegerPeers.
        #[arg(long)]
        peers: Option<String>,
        /// DLedger group name (default: the broker config's dLegerGroup, else brokerName).
        #[arg(long)]
        group: Option<String>,
    },
    /// Ask the DLedger leader of a group to hand leadership to another member.
    #[command(name = "leadershipTransfer")]
    LeadershipTransfer {
        #[arg(short = 'b', long = "brokerName")]
        broker_name: Option<String>,
        /// Target member id, e.g. `n1`.
        #[arg(short = 'i', long = "to")]
        transferee: String,
        /// Term to send (default: the leader's reported term).
        #[arg(long)]
        term: Option<i64>,
        #[arg(long)]
        peers: Option<String>,
        #[arg(long)]
        group: Option<String>,
        /// How long to wait for the new leader to show up.
        #[arg(long, default_value_t = 15_000)]
        wait_ms: u64,
    },
    /// Send messages.
    #[command(name = "sendMessage")]
    SendMessage {
        #[arg(short = 't', long = "topic")]
        topic: String,
        #[arg(short = 'p', long = "body")]
        body: String,
        #[arg(short = 'k', long = "keys")]
        keys: Option<String>,
        #[arg(short = 'c', long = "tags")]
        tags: Option<String>,
        /// Send this many messages (bodies get a `-<i>` suffix when > 1).
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Read messages of a topic from every queue.
    #[command(name = "consumeMessage")]
    ConsumeMessage {
        #[arg(short = 't', long = "topic")]
        topic: String,
        #[arg(short = 'g', long = "consumerGroup", default_value = "TOOLS_CONSUMER")]
        group: String,
        /// Stop after this many messages.
        #[arg(short = 'c', long = "count", default_value_t = 128)]
        count: usize,
        /// Start offset for every queue (default: the queue's min offset).
        #[arg(short = 'o', long = "offset")]
        offset: Option<i64>,
        /// Tag expression.
        #[arg(short = 's', long = "subExpression", default_value = "*")]
        sub: String,
        /// Give up after this long without reaching --count.
        #[arg(long, default_value_t = 5_000)]
        wait_ms: u64,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let code = match run(cli).await {
        Ok(()) => 0,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("ERROR: {msg}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(cli: Cli) -> Result<()> {
    let namesrv = cli
        .namesrv
        .or_else(|| std::env::var("NAMESRV_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:9876".to_owned());
    let addrs = parse_addr_list(&namesrv).context("bad -n")?;
    let mut options = ClientOptions::new(addrs);
    options.rpc_timeout = Duration::from_millis(cli.timeout_ms);
    let client = MqClient::new(options);
    let admin = Admin::new(client.clone());
    let out = match cli.command {
        Command::ClusterList { cluster } => cluster_list(&admin, cluster.as_deref()).await?,
        Command::TopicList { cluster } => topic_list(&admin, cluster.as_deref()).await?,
        Command::TopicRoute { topic } => {
            let route = admin.topic_route(&topic).await?;
            format!("{}\n", serde_json::to_string_pretty(&route)?)
        }
        Command::TopicStatus { topic } => topic_status(&admin, &topic).await?,
        Command::UpdateTopic {
            topic,
            cluster,
            broker,
            read,
            write,
            perm,
            order,
        } => {
            let spec = TopicSpec {
                topic,
                read_queue_nums: read,
                write_queue_nums: write,
                perm,
                order,
            };
            update_topic(&admin, &spec, cluster.as_deref(), broker.as_deref()).await?
        }
        Command::DeleteTopic { topic, cluster } => delete_topic(&admin, &topic, &cluster).await?,
        Command::ConsumerProgress { group, topic } => {
            consumer_progress(&admin, &group, topic.as_deref()).await?
        }
        Command::BrokerStatus { broker, cluster } => {
            let mut out = String::new();
            for addr in broker_targets(&admin, broker.as_deref(), cluster.as_deref()).await? {
                let info = admin.runtime_info(addr).await?;
                if broker.is_none() {
                    out.push_str(&format!("============{addr}============\n"));
                }
                for (k, v) in info {
                    out.push_str(&format!("{k:<40}: {v}\n"));
                }
            }
            out
        }
        Command::GetBrokerConfig { broker, cluster } => {
            let mut out = String::new();
            for addr in broker_targets(&admin, broker.as_deref(), cluster.as_deref()).await? {
                let config = admin.broker_config(addr).await?;
                out.push_str(&format!("============{addr}============\n"));
                for (k, v) in config {
                    out.push_str(&format!("{k:<50}=  {v}\n"));
                }
            }
            out
        }
        Command::QueryMsgById { msg_id } => query_by_id(&admin, &msg_id).await?,
        Command::QueryMsgByKey { topic, key, max } => {
            query_by_key(&admin, &topic, &key, max).await?
        }
        Command::DledgerStatus {
            cluster,
            broker_name,
            peers,
            group,
        } => {
            dledger_status(
                &admin,
                cluster.as_deref(),
                broker_name.as_deref(),
                peers.as_deref(),
                group.as_deref(),
            )
            .await?
        }
        Command::LeadershipTransfer {
            broker_name,
            transferee,
            term,
            peers,
            group,
            wait_ms,
        } => {
            leadership_transfer(
                &admin,
                broker_name.as_deref(),
                &transferee,
                term,
                peers.as_deref(),
                group.as_deref(),
                Duration::from_millis(wait_ms),
            )
            .await?
        }
        Command::SendMessage {
            topic,
            body,
            keys,
            tags,
            count,
        } => send_message(&client, &topic, &body, keys, tags, count).await?,
        Command::ConsumeMessage {
            topic,
            group,
            count,
            offset,
            sub,
            wait_ms,
        } => {
            consume_message(
                &client,
                &topic,
                &group,
                count,
                offset,
                &sub,
                Duration::from_millis(wait_ms),
            )
            .await?
        }
    };
    print!("{out}");
    client.shutdown().await;
    Ok(())
}

/// First number of a TPS string such as `"12.5 10.0 9.1"`.
fn first_number(s: Option<&String>) -> f64 {
    s.and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn clusters_of(info: &ClusterInfo, only: Option<&str>) -> Vec<(String, Vec<String>)> {
    info.cluster_addr_table
        .iter()
        .filter(|(c, _)| only.map_or(true, |o| o == c.as_str()))
        .map(|(c, names)| {
            let mut n = names.clone();
            n.sort();
            (c.clone(), n)
        })
        .collect()
}

async fn cluster_list(admin: &Admin, only: Option<&str>) -> Result<String> {
    let info = admin.cluster_info().await?;
    if let Some(c) = only {
        if !info.cluster_addr_table.contains_key(c) {
            bail!("cluster {c} not found");
        }
    }
    let mut t = Table::new([
        "#Cluster Name",
        "#Broker Name",
        "#BID",
        "#Addr",
        "#Version",
        "#InTPS(LOAD)",
        "#OutTPS(LOAD)",
        "#PCWait(ms)",
        "#Hour",
        "#SPACE",
        "#ACTIVATED",
    ]);
    for (cluster, names) in clusters_of(&info, only) {
        for name in names {
            let Some(bd) = info.broker_addr_table.get(&name) else {
                continue;
            };
            for (id, addr) in &bd.broker_addrs {
                let rt = match parse_addr(addr) {
                    Ok(a) => admin.runtime_info(a).await.unwrap_or_default(),
                    Err(_) => BTreeMap::new(),
                };
                let hour = rt
                    .get("earliestMessageTimeStamp")
                    .and_then(|v| v.parse::<i64>().ok())
                    .filter(|t| *t > 0)
                    .map(|t| format!("{:.2}", (now_ms() - t) as f64 / 3_600_000.0))
                    .unwrap_or_else(|| "-".to_owned());
                t.row([
                    cluster.clone(),
                    name.clone(),
                    id.to_string(),
                    addr.clone(),
                    rt.get("brokerVersionDesc")
                        .cloned()
                        .unwrap_or_else(|| "-".to_owned()),
                    format!("{:.2}", first_number(rt.get("putTps"))),
                    format!("{:.2}", first_number(rt.get("getTransferredTps"))),
                    rt.get("pageCacheLockTimeMills")
                        .cloned()
                        .unwrap_or_else(|| "0".to_owned()),
                    hour,
                    rt.get("commitLogDiskRatio")
                        .and_then(|v| v.parse::<f64>().ok())
                        .map(|v| format!("{v:.4}"))
                        .unwrap_or_else(|| "-".to_owned()),
                    rt.get("brokerActive")
                        .cloned()
                        .unwrap_or_else(|| if rt.is_empty() { "-" } else { "true" }.to_owned()),
                ]);
            }
        }
    }
    Ok(t.render())
}

async fn topic_list(admin: &Admin, cluster: Option<&str>) -> Result<String> {
    let topics = admin.topic_list().await?;
    let mut out = String::new();
    match cluster {
        None => {
            for t in topics {
                out.push_str(&t);
                out.push('\n');
            }
        }
        Some(c) => {
            let mut t = Table::new(["#Cluster Name", "#Topic"]);
            for topic in topics {
                if let Ok(route) = admin.topic_route(&topic).await {
                    if route.broker_datas.iter().any(|b| b.cluster == c) {
                        t.row([c.to_owned(), topic]);
                    }
                }
            }
            out = t.render();
        }
    }
    Ok(out)
}

async fn topic_status(admin: &Admin, topic: &str) -> Result<String> {
    let route = admin.topic_route(topic).await?;
    let mut t = Table::new(["#Broker Name", "#QID", "#Min Offset", "#Max Offset"]);
    let mut datas = route.queue_datas.clone();
    datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    for q in datas {
        let bd = route
            .broker(&q.broker_name)
            .ok_or_else(|| anyhow!("route lists no addresses for {}", q.broker_name))?;
        let addr_text = bd
            .master_addr()
            .or_else(|| bd.broker_addrs.values().next().map(String::as_str))
            .ok_or_else(|| anyhow!("no address for broker {}", q.broker_name))?;
        let addr = parse_addr(addr_text)?;
        for qid in 0..q.read_queue_nums.max(q.write_queue_nums) {
            let (min, max) = admin.queue_offsets(addr, topic, qid).await?;
            t.row([
                q.broker_name.clone(),
                qid.to_string(),
                min.to_string(),
                max.to_string(),
            ]);
        }
    }
    Ok(t.render())
}

async fn master_addrs(admin: &Admin, cluster: &str) -> Result<Vec<(String, SocketAddr)>> {
    let info = admin.cluster_info().await?;
    let names = info
        .cluster_addr_table
        .get(cluster)
        .ok_or_else(|| anyhow!("cluster {cluster} not found"))?;
    let mut out = Vec::new();
    for n in names {
        if let Some(m) = info.broker_addr_table.get(n).and_then(|b| b.master_addr()) {
            out.push((n.clone(), parse_addr(m)?));
        }
    }
    if out.is_empty() {
        bail!("cluster {cluster} has no master (no broker registered with id 0)");
    }
    out.sort();
    Ok(out)
}

async fn broker_targets(
    admin: &Admin,
    broker: Option<&str>,
    cluster: Option<&str>,
) -> Result<Vec<SocketAddr>> {
    match (broker, cluster) {
        (Some(b), _) => Ok(vec![parse_addr(b)?]),
        (None, Some(c)) => {
            let info = admin.cluster_info().await?;
            let names = info
                .cluster_addr_table
                .get(c)
                .ok_or_else(|| anyhow!("cluster {c} not found"))?;
            let mut out = Vec::new();
            for n in names {
                if let Some(b) = info.broker_addr_table.get(n) {
                    for a in b.broker_addrs.values() {
                        out.push(parse_addr(a)?);
                    }
                }
            }
            out.sort();
            Ok(out)
        }
        (None, None) => bail!("give -b brokerAddr or -c clusterName"),
    }
}

async fn update_topic(
    admin: &Admin,
    spec: &TopicSpec,
    cluster: Option<&str>,
    broker: Option<&str>,
) -> Result<String> {
    let targets: Vec<SocketAddr> = match (broker, cluster) {
        (Some(b), _) => vec![parse_addr(b)?],
        (None, Some(c)) => master_addrs(admin, c)
            .await?
            .into_iter()
            .map(|(_, a)| a)
            .collect(),
        (None, None) => bail!("give -c clusterName or -b brokerAddr"),
    };
    let mut out = String::new();
    for addr in targets {
        admin.create_topic(addr, spec).await?;
        out.push_str(&format!("create topic to {addr} success.\n"));
    }
    out.push_str(&format!(
        "TopicConfig [topicName={}, readQueueNums={}, writeQueueNums={}, perm={}, topicFilterType=SINGLE_TAG, topicSysFlag=0, order={}]\n",
        spec.topic,
        spec.read_queue_nums,
        spec.write_queue_nums,
        perm_text(spec.perm),
        spec.order
    ));
    Ok(out)
}

fn perm_text(perm: i32) -> String {
    let r = if perm & PERM_READ != 0 { "R" } else { "-" };
    let w = if perm & PERM_WRITE != 0 { "W" } else { "-" };
    let x = if perm & 1 != 0 { "X" } else { "-" };
    format!("{r}{w}{x}")
}

async fn delete_topic(admin: &Admin, topic: &str, cluster: &str) -> Result<String> {
    let info = admin.cluster_info().await?;
    let names = info
        .cluster_addr_table
        .get(cluster)
        .ok_or_else(|| anyhow!("cluster {cluster} not found"))?;
    let mut addrs = BTreeSet::new();
    for n in names {
        if let Some(b) = info.broker_addr_table.get(n) {
            for (id, a) in &b.broker_addrs {
                if *id == 0 {
                    addrs.insert(parse_addr(a)?);
                }
            }
        }
    }
    // Every broker is tried and the name servers are cleaned even if a broker refuses, so
    // that clients stop routing to the topic; any refusal makes the command fail.
    let mut out = String::new();
    let mut failed = Vec::new();
    for addr in &addrs {
        match admin.delete_topic_in_broker(*addr, topic).await {
            Ok(()) => out.push_str(&format!(
                "delete topic [{topic}] from broker {addr} success.\n"
            )),
            Err(e) => failed.push(format!("broker {addr}: {e}")),
        }
    }
    admin.delete_topic_in_namesrv(topic, Some(cluster)).await?;
    out.push_str(&format!(
        "delete topic [{topic}] from NameServer success.\n"
    ));
    if !failed.is_empty() {
        print!("{out}");
        bail!("delete topic [{topic}] failed on {}", failed.join("; "));
    }
    out.insert_str(
        0,
        &format!("delete topic [{topic}] from cluster [{cluster}] success.\n"),
    );
    Ok(out)
}

async fn consumer_progress(admin: &Admin, group: &str, only_topic: Option<&str>) -> Result<String> {
    let info = admin.cluster_info().await?;
    // (topic, broker name, qid) -> consumer offset
    let mut offsets: BTreeMap<(String, String, i32), Option<i64>> = BTreeMap::new();
    let mut masters: BTreeMap<String, SocketAddr> = BTreeMap::new();
    for (name, bd) in &info.broker_addr_table {
        let Some(m) = bd.master_addr() else { continue };
        let addr = parse_addr(m)?;
        masters.insert(name.clone(), addr);
        let all = admin.all_consumer_offsets(addr).await?;
        for (key, queues) in all.offset_table {
            let Some((topic, g)) = key.rsplit_once('@') else {
                continue;
            };
            if g != group || only_topic.is_some_and(|t| t != topic) {
                continue;
            }
            for (qid, off) in queues {
                offsets.insert((topic.to_owned(), name.clone(), qid), Some(off));
            }
        }
    }
    if let Some(topic) = only_topic {
        let route = admin.topic_route(topic).await?;
        for q in &route.queue_datas {
            for qid in 0..q.read_queue_nums {
                let key = (topic.to_owned(), q.broker_name.clone(), qid);
                if let std::collections::btree_map::Entry::Vacant(slot) = offsets.entry(key) {
                    if let Some(addr) = masters.get(&q.broker_name) {
                        slot.insert(admin.consumer_offset(*addr, group, topic, qid).await?);
                    }
                }
            }
        }
    }
    if offsets.is_empty() {
        bail!("no consume progress found for group {group}");
    }
    let mut t = Table::new([
        "#Topic",
        "#Broker Name",
        "#QID",
        "#Broker Offset",
        "#Consumer Offset",
        "#Diff",
    ]);
    let mut total = 0i64;
    for ((topic, name, qid), off) in offsets {
        let Some(addr) = masters.get(&name) else {
            continue;
        };
        let (_, max) = admin.queue_offsets(*addr, &topic, qid).await?;
        let consumed = off.unwrap_or(0);
        let diff = (max - consumed).max(0);
        total += diff;
        t.row([
            topic,
            name,
            qid.to_string(),
            max.to_string(),
            off.map_or_else(|| "-".to_owned(), |o| o.to_string()),
            diff.to_string(),
        ]);
    }
    Ok(format!("{}\nDiff Total: {total}\n", t.render()))
}

fn describe_message(m: &MessageExt) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<20} {v}\n"));
    line("OffsetID:", m.offset_msg_id.clone());
    line("Topic:", m.topic.clone());
    line("Tags:", format!("[{}]", m.tags().unwrap_or("")));
    line("Keys:", format!("[{}]", m.keys().unwrap_or("")));
    line("Queue ID:", m.queue_id.to_string());
    line("Queue Offset:", m.queue_offset.to_string());
    line("CommitLog Offset:", m.commit_log_offset.to_string());
    line("Reconsume Times:", m.reconsume_times.to_string());
    line("Born Timestamp:", m.born_timestamp.to_string());
    line("Store Timestamp:", m.store_timestamp.to_string());
    line("Born Host:", m.born_host.to_string());
    line("Store Host:", m.store_host.to_string());
    line("System Flag:", m.sys_flag.to_string());
    let props: Vec<String> = m
        .properties
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    line("Properties:", format!("{{{}}}", props.join(", ")));
    line(
        "Message Body:",
        String::from_utf8_lossy(&m.body).into_owned(),
    );
    out
}

async fn query_by_id(admin: &Admin, id: &str) -> Result<String> {
    let (addr, offset) = decode_offset_msg_id(id)?;
    match admin.view_message(addr, offset).await {
        Ok(m) => Ok(describe_message(&m)),
        Err(first) => {
            // The store address may be a dead ex-leader: every replica holds the same bytes
            // at the same offset, so ask the other registered brokers.
            let info = admin.cluster_info().await?;
            for bd in info.broker_addr_table.values() {
                for a in bd.broker_addrs.values() {
                    let Ok(other) = parse_addr(a) else { continue };
                    if other == addr {
                        continue;
                    }
                    if let Ok(m) = admin.view_message(other, offset).await {
                        return Ok(describe_message(&m));
                    }
                }
            }
            Err(first.into())
        }
    }
}

async fn query_by_key(admin: &Admin, topic: &str, key: &str, max: i32) -> Result<String> {
    let route = admin.topic_route(topic).await?;
    let mut t = Table::new(["#Message ID", "#QID", "#Offset"]);
    let mut seen = BTreeSet::new();
    for bd in &route.broker_datas {
        let Some(addr_text) = bd
            .master_addr()
            .or_else(|| bd.broker_addrs.values().next().map(String::as_str))
        else {
            continue;
        };
        let addr = parse_addr(addr_text)?;
        for m in admin.query_message(addr, topic, key, max, false).await? {
            let matches =
                m.keys().is_some_and(|ks| ks.split(' ').any(|k| k == key)) || m.msg_id() == key;
            if matches && seen.insert(m.commit_log_offset) {
                t.row([
                    m.msg_id().to_owned(),
                    m.queue_id.to_string(),
                    m.queue_offset.to_string(),
                ]);
            }
        }
    }
    if t.is_empty() {
        bail!("no message with key {key} in topic {topic}");
    }
    Ok(t.render())
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

async fn dledger_status(
    admin: &Admin,
    cluster: Option<&str>,
    broker_name: Option<&str>,
    peers: Option<&str>,
    group: Option<&str>,
) -> Result<String> {
    let groups = admin
        .dledger_status(cluster, broker_name, peers, group)
        .await?;
    if groups.is_empty() {
        bail!("no broker group found");
    }
    let mut t = Table::new([
        "#Broker Name",
        "#Self Id",
        "#Role",
        "#Term",
        "#Leader",
        "#Begin Index",
        "#End Index",
        "#Committed Index",
        "#BID",
        "#Addr",
        "#DLedger Addr",
        "#Peers (water mark/lag)",
    ]);
    let mut notes = Vec::new();
    for g in &groups {
        for m in &g.members {
            let peers: Vec<String> = m
                .peer_water_marks
                .keys()
                .chain(m.peer_lags.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|p| {
                    format!(
                        "{p}:{}/{}",
                        m.peer_water_marks.get(p).map_or("-", String::as_str),
                        m.peer_lags.get(p).map_or("-", String::as_str)
                    )
                })
                .collect();
            t.row([
                m.broker_name.clone(),
                if m.self_id.is_empty() {
                    "-".to_owned()
                } else {
                    m.self_id.clone()
                },
                m.role.clone(),
                opt(&m.term),
                opt(&m.leader_id),
                opt(&m.begin_index),
                opt(&m.end_index),
                opt(&m.committed_index),
                opt(&m.broker_id),
                opt(&m.broker_addr),
                if m.dledger_addr.is_empty() {
                    "-".to_owned()
                } else {
                    m.dledger_addr.clone()
                },
                if peers.is_empty() {
                    "-".to_owned()
                } else {
                    peers.join(",")
                },
            ]);
            if let Some(n) = &m.note {
                notes.push(format!("{}/{}: {n}", m.broker_name, m.self_id));
            }
        }
    }
    let mut out = t.render();
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    Ok(out)
}

async fn leadership_transfer(
    admin: &Admin,
    broker_name: Option<&str>,
    transferee: &str,
    term: Option<i64>,
    peers: Option<&str>,
    group: Option<&str>,
    wait: Duration,
) -> Result<String> {
    let groups = admin
        .dledger_status(None, broker_name, peers, group)
        .await?;
    let g = match groups.as_slice() {
        [g] => g,
        [] => bail!("no broker group found"),
        _ => bail!("several broker groups; choose one with -b brokerName"),
    };
    if g.peers.is_empty() {
        bail!(
            "the peers of {} are unknown (its brokers do not report dLegerPeers); pass --peers 'n0-host:port;n1-host:port;...'",
            g.broker_name
        );
    }
    if !g.peers.contains_key(transferee) {
        bail!(
            "{transferee} is not a member of {} (peers: {})",
            g.broker_name,
            g.peers.keys().cloned().collect::<Vec<_>>().join(",")
        );
    }
    let leader = g
        .leader()
        .ok_or_else(|| anyhow!("group {} has no leader now", g.broker_name))?;
    if leader.self_id == transferee {
        return Ok(format!(
            "{transferee} already leads {} (term {})\n",
            g.broker_name,
            opt(&leader.term)
        ));
    }
    let term = term
        .or(leader.term)
        .ok_or_else(|| anyhow!("the leader's term is unknown; pass --term"))?;
    let addr = parse_addr(&leader.dledger_addr)?;
    let started = Instant::now();
    let r = admin
        .leadership_transfer(addr, &g.group, &leader.self_id, transferee, term)
        .await?;
    if r.code != tools::dledger::DLedgerCode::SUCCESS {
        bail!(
            "leader {} refused the transfer: {} ({})",
            leader.self_id,
            tools::dledger::code_name(r.code),
            r.code.0
        );
    }
    // Wait until the name server lists the new leader's broker as id 0.
    let deadline = Instant::now() + wait;
    loop {
        let now = admin
            .dledger_status(None, Some(&g.broker_name), peers, group)
            .await?;
        if let Some(l) = now.first().and_then(|g| g.leader()) {
            if l.self_id == transferee {
                return Ok(format!(
                    "leadership of {} transferred from {} to {} (term {}) in {} ms\n",
                    g.broker_name,
                    leader.self_id,
                    transferee,
                    opt(&l.term),
                    started.elapsed().as_millis()
                ));
            }
        }
        if Instant::now() >= deadline {
            bail!("transfer accepted but {transferee} does not lead after {wait:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn send_message(
    client: &MqClient,
    topic: &str,
    body: &str,
    keys: Option<String>,
    tags: Option<String>,
    count: u32,
) -> Result<String> {
    let producer = Producer::new(
        client.clone(),
        ProducerOptions {
            group: "TOOLS_PRODUCER".to_owned(),
            ..ProducerOptions::default()
        },
    );
    let mut t = Table::new([
        "#Broker Name",
        "#QID",
        "#Queue Offset",
        "#Send Result",
        "#MsgId",
    ]);
    for i in 0..count {
        let text = if count > 1 {
            format!("{body}-{i}")
        } else {
            body.to_owned()
        };
        let mut m = Message::new(topic, text.into_bytes());
        if let Some(k) = &keys {
            m = m.with_keys(k.split(' '));
        }
        if let Some(tg) = &tags {
            m = m.with_tags(tg.clone());
        }
        let r = producer.send(m).await?;
        t.row([
            r.queue.broker_name.clone(),
            r.queue.queue_id.to_string(),
            r.queue_offset.to_string(),
            format!("{:?}", r.status)
                .to_uppercase()
                .replace("SENDOK", "SEND_OK"),
            r.msg_id.clone(),
        ]);
    }
    Ok(t.render())
}

async fn consume_message(
    client: &MqClient,
    topic: &str,
    group: &str,
    count: usize,
    offset: Option<i64>,
    sub: &str,
    wait: Duration,
) -> Result<String> {
    let consumer = PullConsumer::new(client.clone(), group);
    let filter = TagFilter::parse(sub);
    let queues = consumer.queues(topic).await?;
    let mut next: BTreeMap<usize, i64> = BTreeMap::new();
    for (i, q) in queues.iter().enumerate() {
        let start = match offset {
            Some(o) => o,
            None => consumer.min_offset(q).await?,
        };
        next.insert(i, start);
    }
    let mut t = Table::new([
        "#Broker Name",
        "#QID",
        "#Offset",
        "#MsgId",
        "#Tags",
        "#Keys",
        "#Body",
    ]);
    let deadline = Instant::now() + wait;
    let mut got = 0;
    'outer: while got < count {
        let mut progressed = false;
        for (i, q) in queues.iter().enumerate() {
            let from = next[&i];
            let r = consumer.pull(q, from, 32, &filter, None, None).await?;
            if r.next_begin_offset != from {
                progressed = true;
            }
            next.insert(i, r.next_begin_offset);
            if r.status == PullStatus::Found {
                for m in r.messages {
                    t.row([
                        q.broker_name.clone(),
                        m.queue_id.to_string(),
                        m.queue_offset.to_string(),
                        m.msg_id().to_owned(),
                        m.tags().unwrap_or("-").to_owned(),
                        m.keys().unwrap_or("-").to_owned(),
                        String::from_utf8_lossy(&m.body).chars().take(64).collect(),
                    ]);
                    got += 1;
                    if got >= count {
                        break 'outer;
                    }
                }
            }
        }
        if !progressed {
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut out = t.render();
    out.push_str(&format!("consumed {got} message(s)\n"));
    Ok(out)
}
