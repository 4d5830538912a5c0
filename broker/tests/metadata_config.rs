// Goal: BrokerConfig reads RocketMQ property files like the Java broker (keys, defaults,
// derived values), warns about and keeps unknown keys, and refuses invalid values naming the
// key. Method: parse literal texts and the shipped conf/dledger samples; capture tracing
// output with a test subscriber.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use broker::config::{BrokerConfig, BrokerRole, ConfigError, DLedgerPeer, FlushDiskType};

fn conf_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conf/dledger")
        .join(name)
}

#[test]
fn shipped_dledger_samples_parse_with_the_spec_values() {
    for (i, port, dport) in [
        (0u32, 30911u16, "40911"),
        (1, 30921, "40912"),
        (2, 30931, "40913"),
    ] {
        let cfg = BrokerConfig::from_file(&conf_path(&format!("broker-n{i}.conf"))).unwrap();
        assert_eq!(cfg.broker_cluster_name, "RaftCluster");
        assert_eq!(cfg.broker_name, "RaftNode00");
        assert_eq!(cfg.listen_port, port);
        assert_eq!(cfg.namesrv_addr.as_deref(), Some("127.0.0.1:9876"));
        let root = PathBuf::from(format!("/tmp/rmqstore/node0{i}"));
        assert_eq!(cfg.store_path_root_dir, root);
        assert_eq!(cfg.store_path_commit_log, root.join("commitlog"));
        assert!(cfg.enable_dleger_commit_log);
        assert_eq!(cfg.dleger_group.as_deref(), Some("RaftNode00"));
        assert_eq!(cfg.dleger_peers.len(), 3);
        assert_eq!(
            cfg.dleger_peers[2],
            DLedgerPeer {
                id: "n2".into(),
                addr: "127.0.0.1:40913".into()
            }
        );
        assert_eq!(
            cfg.dleger_self_id.as_deref(),
            Some(format!("n{i}").as_str())
        );
        assert_eq!(cfg.send_message_thread_pool_nums, 16);
        assert_eq!(cfg.broker_ip1, "127.0.0.1");
        assert!(cfg.extra.is_empty(), "no unknown keys in the samples");
        // Derived values (broker-roles.md §9).
        assert_eq!(cfg.dledger_self_number(), Some(i));
        assert_eq!(cfg.slave_broker_id(), Some(i64::from(i) + 1));
        assert_eq!(cfg.broker_addr(), format!("127.0.0.1:{port}"));
        assert_eq!(cfg.ha_listen_port(), port + 1);
        assert_eq!(cfg.vip_listen_port(), port - 2);
        assert_eq!(
            cfg.dledger_self_addr(),
            Some(format!("127.0.0.1:{dport}").as_str())
        );
        assert_eq!(
            cfg.dledger_data_dirs(),
            vec![root.join(format!("dledger-n{i}")).join("data")]
        );
        assert_eq!(cfg.consume_queue_dir(), root.join("consumequeue"));
    }
}

#[test]
fn defaults_are_rocketmq_defaults() {
    let cfg = BrokerConfig::from_properties("brokerName=b\n").unwrap();
    assert_eq!(cfg.broker_cluster_name, "DefaultCluster");
    assert_eq!(cfg.listen_port, 10911);
    assert_eq!(cfg.broker_id, 0);
    assert!(!cfg.enable_dleger_commit_log);
    assert!(cfg.auto_create_topic_enable);
    assert_eq!(cfg.default_topic_queue_nums, 8);
    assert_eq!(cfg.max_message_size, 4 * 1024 * 1024);
    assert_eq!(cfg.mapped_file_size_commit_log, 1_073_741_824);
    assert_eq!(cfg.mapped_file_size_consume_queue, 6_000_000);
    assert_eq!(cfg.flush_disk_type, FlushDiskType::AsyncFlush);
    assert_eq!(cfg.broker_role, BrokerRole::AsyncMaster);
    assert_eq!(cfg.file_reserved_time_hours, 72);
    assert_eq!(cfg.delete_when, "04");
    assert_eq!(cfg.message_delay_level_ms.len(), 18);
    assert_eq!(cfg.register_name_server_period_ms, 30_000);
    assert_eq!(
        cfg.store_path_commit_log,
        cfg.store_path_root_dir.join("commitlog")
    );
}

#[test]
fn values_are_trimmed_clamped_and_rounded() {
    let cfg = BrokerConfig::from_properties(
        "brokerName = x \nregisterNameServerPeriod=1000\nmappedFileSizeConsumeQueue=105\n\
         storePathRootDir=/r\nflushDiskType=SYNC_FLUSH\nbrokerRole=SLAVE\n\
         messageDelayLevel=1s 2m 3h 1d\n",
    )
    .unwrap();
    assert_eq!(cfg.broker_name, "x");
    assert_eq!(cfg.register_name_server_period_ms, 10_000);
    assert_eq!(cfg.mapped_file_size_consume_queue, 120);
    assert_eq!(cfg.store_path_commit_log, PathBuf::from("/r/commitlog"));
    assert_eq!(cfg.flush_disk_type, FlushDiskType::SyncFlush);
    assert_eq!(cfg.broker_role, BrokerRole::Slave);
    assert_eq!(
        cfg.message_delay_level_ms,
        vec![1_000, 120_000, 10_800_000, 86_400_000]
    );
    assert_eq!(cfg.message_limits().max_body_bytes, 4 * 1024 * 1024);
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn unknown_keys_are_warned_about_and_kept() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let cfg = tracing::subscriber::with_default(subscriber, || {
        BrokerConfig::from_properties(
            "brokerName=b\nfancyNewKey = 42\ndLegerHeartBeatTimeIntervalMs=500\n",
        )
        .unwrap()
    });
    assert_eq!(cfg.extra.get("fancyNewKey").map(String::as_str), Some("42"));
    let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("fancyNewKey"), "{log}");
    // DLedger tuning keys go to the ledger's options, without a warning.
    assert_eq!(
        cfg.dledger_options
            .get("dLegerHeartBeatTimeIntervalMs")
            .map(String::as_str),
        Some("500")
    );
    assert!(!cfg.extra.contains_key("dLegerHeartBeatTimeIntervalMs"));
    assert!(!log.contains("dLegerHeartBeatTimeIntervalMs"), "{log}");
}

fn invalid_key(text: &str) -> String {
    match BrokerConfig::from_properties(text) {
        Err(ConfigError::Invalid { key, .. }) | Err(ConfigError::Missing { key, .. }) => key,
        other => panic!("expected an error for {text:?}, got {other:?}"),
    }
}

#[test]
fn invalid_values_stop_startup_naming_the_key() {
    assert_eq!(invalid_key("listenPort=70000"), "listenPort");
    assert_eq!(invalid_key("listenPort=abc"), "listenPort");
    assert_eq!(
        invalid_key("autoCreateTopicEnable=yes"),
        "autoCreateTopicEnable"
    );
    assert_eq!(invalid_key("flushDiskType=SOMETIMES"), "flushDiskType");
    assert_eq!(invalid_key("messageDelayLevel=1s 5x"), "messageDelayLevel");
    assert_eq!(invalid_key("dLegerPeers=n0-127.0.0.1"), "dLegerPeers");
    assert_eq!(invalid_key("dLegerPeers=n0-a:1;n0-b:2"), "dLegerPeers");
    assert_eq!(invalid_key("maxMessageSize=0"), "maxMessageSize");
    assert_eq!(
        invalid_key("sendThreadPoolQueueCapacity=0"),
        "sendThreadPoolQueueCapacity"
    );
    let dledger =
        "enableDLegerCommitLog=true\ndLegerGroup=g\ndLegerPeers=n0-127.0.0.1:1;n1-127.0.0.1:2\n";
    assert_eq!(
        invalid_key(&format!("{dledger}dLegerSelfId=n5")),
        "dLegerSelfId"
    );
    assert_eq!(
        invalid_key(&format!("{dledger}dLegerSelfId=x")),
        "dLegerSelfId"
    );
    assert_eq!(invalid_key(dledger), "dLegerSelfId");
    assert_eq!(
        invalid_key("enableDLegerCommitLog=true\ndLegerSelfId=n0\ndLegerPeers=n0-h:1"),
        "dLegerGroup"
    );
    assert_eq!(
        invalid_key(&format!(
            "{dledger}dLegerSelfId=n1\nenableControllerMode=true"
        )),
        "enableControllerMode"
    );
    let err = BrokerConfig::from_properties("listenPort=abc").unwrap_err();
    assert!(err.to_string().contains("listenPort"), "{err}");
    assert!(matches!(
        BrokerConfig::from_file(Path::new("/nonexistent/broker.conf")),
        Err(ConfigError::Io { .. })
    ));
}
