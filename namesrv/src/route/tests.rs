//! Unit tests of the route table: registration rules (including the DLedger id moves of
//! broker-roles.md §5), unregistration, liveness and admin edits. Invariants are checked after
//! every step.

use std::collections::BTreeMap;

use super::*;
use crate::body::{TopicConfig, PERM_WRITE};

const CLUSTER: &str = "RaftCluster";
const GROUP: &str = "RaftNode00";
const N0: &str = "127.0.0.1:30911";
const N1: &str = "127.0.0.1:30921";
const N2: &str = "127.0.0.1:30931";

fn topics(names: &[(&str, i32)], counter: i64) -> TopicConfigSerializeWrapper {
    TopicConfigSerializeWrapper {
        data_version: DataVersion {
            counter,
            state_version: 0,
            timestamp: 1_700_000_000_000,
        },
        topic_config_table: names
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

fn reg(addr: &str, id: i64, conn: u64) -> BrokerRegistration {
    BrokerRegistration {
        cluster_name: CLUSTER.to_owned(),
        broker_addr: addr.to_owned(),
        broker_name: GROUP.to_owned(),
        broker_id: id,
        ha_server_addr: format!("{addr}-ha"),
        topics: topics(&[("TopicTest", 4), ("TBW102", 8)], 1),
        connection: Some(ConnectionId(conn)),
        ..BrokerRegistration::default()
    }
}

fn names(list: std::collections::BTreeSet<String>) -> Vec<String> {
    list.into_iter().collect()
}

fn ids(table: &RouteTable) -> BTreeMap<i64, String> {
    table.broker_addrs(GROUP).cloned().unwrap_or_default()
}

fn addrs(pairs: &[(i64, &str)]) -> BTreeMap<i64, String> {
    pairs.iter().map(|&(id, a)| (id, a.to_owned())).collect()
}

#[test]
fn master_registration_creates_route() {
    let mut t = RouteTable::default();
    let out = t.register_broker(reg(N0, 0, 1), 0);
    assert_eq!(out, RegisterOutcome::default());
    let route = t.topic_route("TopicTest").unwrap();
    assert_eq!(route.queue_datas.len(), 1);
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);
    assert_eq!(route.broker_datas[0].broker_addrs, addrs(&[(0, N0)]));
    assert!(t.topic_route("Nope").is_none());
    t.check_invariants();
}

#[test]
fn dledger_group_moves_through_ids_and_leader_change() {
    let mut t = RouteTable::default();
    // Startup: all three register with -1 before any role is known (quirk Q12).
    for (i, a) in [N0, N1, N2].iter().enumerate() {
        t.register_broker(reg(a, -1, i as u64), 0);
        t.check_invariants();
    }
    // Only one id -1 can exist: each registration replaced the previous holder's address.
    assert_eq!(ids(&t), addrs(&[(-1, N2)]));

    // n0 becomes leader, n1/n2 followers (ids selfId+1).
    t.register_broker(reg(N0, 0, 0), 1);
    let out1 = t.register_broker(reg(N1, 2, 1), 1);
    let out2 = t.register_broker(reg(N2, 3, 2), 1);
    t.check_invariants();
    assert_eq!(ids(&t), addrs(&[(0, N0), (2, N1), (3, N2)]));
    assert_eq!(out1.master_addr.as_deref(), Some(N0));
    assert_eq!(out1.ha_server_addr, Some(format!("{N0}-ha")));
    assert_eq!(out2.master_addr.as_deref(), Some(N0));

    // Leader change: n0 demoted to follower (id 1) first, then n1 registers as master.
    let out = t.register_broker(reg(N0, 1, 0), 2);
    assert_eq!(ids(&t), addrs(&[(1, N0), (2, N1), (3, N2)]));
    assert_eq!(out, RegisterOutcome::default(), "no live master yet");
    t.register_broker(reg(N1, 0, 1), 2);
    t.check_invariants();
    assert_eq!(ids(&t), addrs(&[(0, N1), (1, N0), (3, N2)]));
    let out = t.register_broker(reg(N2, 3, 2), 3);
    assert_eq!(out.master_addr.as_deref(), Some(N1));

    // The other order: n2 becomes master while the old master n1 still holds id 0.
    t.register_broker(reg(N2, 0, 2), 4);
    assert_eq!(ids(&t), addrs(&[(0, N2), (1, N0)]));
    t.register_broker(reg(N1, 2, 1), 4);
    assert_eq!(ids(&t), addrs(&[(0, N2), (1, N0), (2, N1)]));
    let route = t.topic_route("TopicTest").unwrap();
    assert_eq!(route.broker_datas[0].broker_addrs[&0], N2);
    t.check_invariants();
}

#[test]
fn queue_data_only_from_master_for_old_brokers() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N1, 2, 1), 0);
    assert!(
        t.topic_route("TopicTest").is_none(),
        "4.x slave does not define queues"
    );
    t.register_broker(reg(N0, 0, 0), 0);
    assert!(t.topic_route("TopicTest").is_some());
}

#[test]
fn five_x_smallest_id_defines_queues_and_minus_one_is_routed() {
    let mut t = RouteTable::default();
    let mut r = reg(N0, -1, 0);
    r.enable_acting_master = Some(false);
    t.register_broker(r, 0);
    let route = t.topic_route("TopicTest").unwrap();
    assert_eq!(route.broker_datas[0].broker_addrs, addrs(&[(-1, N0)]));
    assert_eq!(
        route.queue_datas[0].perm, 6,
        "perm kept without acting master"
    );
}

#[test]
fn acting_master_prime_slave_has_no_write_perm() {
    let mut t = RouteTable::default();
    let mut r = reg(N1, 2, 1);
    r.enable_acting_master = Some(true);
    t.register_broker(r, 0);
    assert_eq!(
        t.topic_route("TopicTest").unwrap().queue_datas[0].perm & PERM_WRITE,
        0
    );
}

#[test]
fn data_version_controls_queue_updates() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 0), 0);
    // Same version, different content: ignored (Java only re-reads changed versions).
    let mut same = reg(N0, 0, 0);
    same.topics = topics(&[("TopicTest", 2), ("TBW102", 8)], 1);
    t.register_broker(same, 1);
    assert_eq!(
        t.topic_route("TopicTest").unwrap().queue_datas[0].read_queue_nums,
        4
    );
    // New version: taken.
    let mut newer = reg(N0, 0, 0);
    newer.topics = topics(&[("TopicTest", 2), ("TBW102", 8)], 2);
    t.register_broker(newer, 2);
    assert_eq!(
        t.topic_route("TopicTest").unwrap().queue_datas[0].read_queue_nums,
        2
    );
    // A new topic under the same version is still added (missing for this broker).
    let mut extra = reg(N0, 0, 0);
    extra.topics = topics(&[("Other", 1)], 2);
    t.register_broker(extra, 3);
    assert!(t.topic_route("Other").is_some());
    // Topics the broker dropped stay unless the option says otherwise.
    assert!(t.topic_route("TBW102").is_some());
    let (changed, held) = t.query_data_version(CLUSTER, N0, &topics(&[], 2).data_version, 4);
    assert!(!changed);
    assert_eq!(held.unwrap().counter, 2);
    let (changed, _) = t.query_data_version(CLUSTER, N0, &topics(&[], 3).data_version, 4);
    assert!(changed);
    assert_eq!(t.live_info(CLUSTER, N0).unwrap().last_update_ms, 4);
}

#[test]
fn delete_topic_with_broker_registration_option() {
    let mut t = RouteTable::new(RouteTableOptions {
        delete_topic_with_broker_registration: true,
        ..RouteTableOptions::default()
    });
    t.register_broker(reg(N0, 0, 0), 0);
    let mut next = reg(N0, 0, 0);
    next.topics = topics(&[("TopicTest", 4)], 2);
    t.register_broker(next, 1);
    assert!(t.topic_route("TBW102").is_none());
    assert!(t.topic_route("TopicTest").is_some());
    t.check_invariants();
}

#[test]
fn unregister_removes_address_and_empty_group() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 0), 0);
    t.register_broker(reg(N1, 2, 1), 0);
    let gone = t.unregister_broker(&BrokerUnregistration {
        cluster_name: CLUSTER.to_owned(),
        broker_addr: N0.to_owned(),
        broker_name: GROUP.to_owned(),
        broker_id: 0,
    });
    assert!(!gone);
    assert_eq!(ids(&t), addrs(&[(2, N1)]));
    assert!(
        t.topic_route("TopicTest").is_some(),
        "queues stay while the group lives"
    );
    let gone = t.unregister_broker(&BrokerUnregistration {
        cluster_name: CLUSTER.to_owned(),
        broker_addr: N1.to_owned(),
        broker_name: GROUP.to_owned(),
        broker_id: 2,
    });
    assert!(gone);
    assert!(t.topic_route("TopicTest").is_none());
    assert!(t.cluster_info().cluster_addr_table.is_empty());
    t.check_invariants();
}

#[test]
fn stale_unregister_by_id_does_not_remove_new_holder() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N1, 0, 1), 0);
    // The old master N0 unregisters claiming id 0, but id 0 now belongs to N1.
    t.unregister_broker(&BrokerUnregistration {
        cluster_name: CLUSTER.to_owned(),
        broker_addr: N0.to_owned(),
        broker_name: GROUP.to_owned(),
        broker_id: 0,
    });
    assert_eq!(ids(&t), addrs(&[(0, N1)]));
}

#[test]
fn brokers_expire_after_their_timeout() {
    let mut t = RouteTable::new(RouteTableOptions {
        default_broker_timeout_ms: 1000,
        ..RouteTableOptions::default()
    });
    t.register_broker(reg(N0, 0, 7), 0);
    let mut short = reg(N1, 2, 8);
    short.timeout_ms = Some(100);
    t.register_broker(short, 0);
    assert!(!t.any_expired(100));
    assert!(t.expire_brokers(100).is_empty(), "timeout is inclusive");
    assert!(t.any_expired(101));
    let expired = t.expire_brokers(101);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].key.addr, N1);
    assert_eq!(expired[0].connection, Some(ConnectionId(8)));
    assert_eq!(ids(&t), addrs(&[(0, N0)]));
    t.register_broker(reg(N0, 0, 7), 500);
    assert!(t.expire_brokers(1500).is_empty());
    assert_eq!(t.expire_brokers(1501).len(), 1);
    assert!(t.broker_addrs(GROUP).is_none());
    assert!(t.topic_route("TopicTest").is_none());
    t.check_invariants();
}

#[test]
fn closed_connection_removes_only_its_brokers() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 1), 0);
    t.register_broker(reg(N1, 2, 2), 0);
    // N1 re-registers on a new connection: closing the old one must not remove it.
    t.register_broker(reg(N1, 2, 3), 1);
    assert!(!t.has_connection(ConnectionId(2)));
    assert!(t.has_connection(ConnectionId(3)));
    assert!(t.connection_closed(ConnectionId(2)).is_empty());
    let removed = t.connection_closed(ConnectionId(1));
    assert_eq!(removed.len(), 1);
    assert_eq!(ids(&t), addrs(&[(2, N1)]));
    assert!(t.live_info(CLUSTER, N0).is_none());
    t.check_invariants();
}

#[test]
fn acting_master_group_losing_master_turns_read_only() {
    let mut t = RouteTable::default();
    let mut m = reg(N0, 0, 1);
    m.enable_acting_master = Some(true);
    t.register_broker(m, 0);
    let mut s = reg(N1, 2, 2);
    s.enable_acting_master = Some(true);
    t.register_broker(s, 0);
    assert_eq!(t.topic_route("TopicTest").unwrap().queue_datas[0].perm, 6);
    t.connection_closed(ConnectionId(1));
    assert_eq!(
        t.topic_route("TopicTest").unwrap().queue_datas[0].perm & PERM_WRITE,
        0
    );
}

#[test]
fn state_version_guard_refuses_older_registrant() {
    let mut t = RouteTable::default();
    let mut newer = reg(N0, 0, 1);
    newer.topics.data_version.state_version = 5;
    t.register_broker(newer, 0);
    let out = t.register_broker(reg(N1, 0, 2), 0);
    assert_eq!(out, RegisterOutcome::default());
    assert_eq!(ids(&t), addrs(&[(0, N0)]));
    assert!(t.live_info(CLUSTER, N1).is_none());
}

#[test]
fn cluster_info_and_topic_lists() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 1), 0);
    let mut other = reg("127.0.0.1:1", 0, 2);
    other.cluster_name = "C2".to_owned();
    other.broker_name = "B2".to_owned();
    other.topics = topics(&[("OnlyB2", 1), ("TopicTest", 2)], 1);
    t.register_broker(other, 0);
    let info = t.cluster_info();
    assert_eq!(info.cluster_addr_table["C2"].len(), 1);
    assert_eq!(info.broker_addr_table["B2"].broker_addrs[&0], "127.0.0.1:1");
    assert_eq!(
        names(t.all_topics().topic_list),
        ["OnlyB2", "TBW102", "TopicTest"]
    );
    assert_eq!(
        names(t.topics_by_cluster(CLUSTER).topic_list),
        ["TBW102", "TopicTest"]
    );
    assert!(t.topics_by_cluster("none").topic_list.is_empty());
    let sys = t.system_topics();
    assert_eq!(names(sys.topic_list.clone()), ["B2", "C2", CLUSTER, GROUP]);
    assert!(sys.broker_addr.is_some());
    assert_eq!(t.topic_route("TopicTest").unwrap().queue_datas.len(), 2);
}

#[test]
fn delete_topic_everywhere_or_per_cluster() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 1), 0);
    let mut other = reg("127.0.0.1:1", 0, 2);
    other.cluster_name = "C2".to_owned();
    other.broker_name = "B2".to_owned();
    t.register_broker(other, 0);
    t.delete_topic("TopicTest", Some("C2"));
    let route = t.topic_route("TopicTest").unwrap();
    assert_eq!(route.queue_datas.len(), 1);
    assert_eq!(route.queue_datas[0].broker_name, GROUP);
    t.delete_topic("TopicTest", Some(CLUSTER));
    assert!(t.topic_route("TopicTest").is_none());
    t.delete_topic("TBW102", None);
    assert!(t.topic_route("TBW102").is_none());
    t.check_invariants();
}

#[test]
fn write_perm_wipe_and_add() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 1), 0);
    assert_eq!(t.change_write_perm(GROUP, WritePermChange::Wipe), 2);
    assert_eq!(t.topic_route("TopicTest").unwrap().queue_datas[0].perm, 4);
    assert_eq!(t.change_write_perm(GROUP, WritePermChange::Add), 2);
    assert_eq!(t.topic_route("TopicTest").unwrap().queue_datas[0].perm, 6);
    assert_eq!(t.change_write_perm("unknown", WritePermChange::Wipe), 0);
}

#[test]
fn register_topic_requires_known_brokers() {
    let mut t = RouteTable::default();
    t.register_broker(reg(N0, 0, 1), 0);
    let q = |name: &str| crate::body::QueueData {
        broker_name: name.to_owned(),
        perm: 6,
        read_queue_nums: 2,
        topic_sys_flag: 0,
        write_queue_nums: 2,
    };
    assert!(t.register_topic("New", vec![q(GROUP), q("ghost")]).is_err());
    assert!(t.topic_route("New").is_none());
    t.register_topic("New", vec![q(GROUP)]).unwrap();
    assert_eq!(
        t.topic_route("New").unwrap().queue_datas[0].read_queue_nums,
        2
    );
    t.check_invariants();
}

#[test]
fn unit_topic_filters() {
    let mut t = RouteTable::default();
    let mut r = reg(N0, 0, 1);
    r.topics
        .topic_config_table
        .get_mut("TopicTest")
        .unwrap()
        .topic_sys_flag = 2;
    r.topics
        .topic_config_table
        .get_mut("TBW102")
        .unwrap()
        .topic_sys_flag = 3;
    t.register_broker(r, 0);
    assert_eq!(
        names(t.unit_topics(UnitTopicFilter::Unit).topic_list),
        ["TBW102"]
    );
    assert_eq!(
        names(t.unit_topics(UnitTopicFilter::HasUnitSub).topic_list),
        ["TBW102", "TopicTest"]
    );
    assert_eq!(
        names(t.unit_topics(UnitTopicFilter::HasUnitSubNotUnit).topic_list),
        ["TopicTest"]
    );
}

#[test]
fn filter_servers_show_in_route() {
    let mut t = RouteTable::default();
    let mut r = reg(N0, 0, 1);
    r.filter_servers = vec!["127.0.0.1:5000".to_owned()];
    t.register_broker(r, 0);
    let route = t.topic_route("TopicTest").unwrap();
    assert_eq!(route.filter_server_table[N0], ["127.0.0.1:5000"]);
    t.register_broker(reg(N0, 0, 1), 1);
    assert!(t
        .topic_route("TopicTest")
        .unwrap()
        .filter_server_table
        .is_empty());
}
