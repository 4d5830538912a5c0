//! Goal: concurrent registrations and route queries never fail, never see a half-applied
//! registration, and leave a consistent table. Method: 6 broker groups of 3 members each
//! re-register in parallel (moving the master id between members at random) while 32 tasks
//! query routes; every route seen must have exactly one queue entry per group and addresses
//! drawn from that group. Seeded: set NAMESRV_TEST_SEED to replay.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

mod common;

use std::sync::Arc;

use common::*;
use remoting::{ClientConfig, RemotingClient};

const GROUPS: usize = 6;
const ROUNDS: usize = 30;
const QUERIERS: usize = 32;

fn member_addr(group: usize, member: usize) -> String {
    format!("127.0.0.1:{}", 40_000 + group * 10 + member)
}

/// xorshift64*: enough randomness for id shuffles, reproducible from the seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_registrations_and_queries() {
    let seed: u64 = std::env::var("NAMESRV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
        | 1;
    println!("NAMESRV_TEST_SEED={seed}");

    let ns = start_namesrv(120_000, 5_000).await;
    let at = ns.local_addr();
    let mut writers = Vec::new();
    for g in 0..GROUPS {
        writers.push(tokio::spawn(async move {
            let name = format!("group-{g}");
            let brokers: Vec<FakeBroker> = (0..3)
                .map(|m| FakeBroker::new(at, &name, &member_addr(g, m)))
                .collect();
            let mut rng = seed.wrapping_add(g as u64 * 7919) | 1;
            for _ in 0..ROUNDS {
                let master = (next(&mut rng) % 3) as usize;
                let regs = brokers.iter().enumerate().map(|(m, b)| {
                    let id = if m == master { 0 } else { m as i64 + 1 };
                    async move { b.register(id, &[("Shared", 4)]).await }
                });
                futures_util::future::join_all(regs).await;
            }
            for b in &brokers {
                b.register(
                    if b.addr == member_addr(g, 0) { 0 } else { 9 },
                    &[("Shared", 4)],
                )
                .await;
            }
            brokers
        }));
    }

    let client = Arc::new(RemotingClient::new(ClientConfig::default()));
    let mut readers = Vec::new();
    for _ in 0..QUERIERS {
        let client = client.clone();
        readers.push(tokio::spawn(async move {
            let mut seen = 0;
            for _ in 0..ROUNDS {
                let Ok(r) = route(&client, at, "Shared").await else {
                    continue;
                };
                for b in &r.broker_datas {
                    let g: usize = b.broker_name["group-".len()..].parse().unwrap();
                    assert!(!b.broker_addrs.is_empty());
                    let mut seen_addrs = std::collections::BTreeSet::new();
                    for addr in b.broker_addrs.values() {
                        assert!(
                            (0..3).any(|m| *addr == member_addr(g, m)),
                            "{addr} in group {g}"
                        );
                        assert!(seen_addrs.insert(addr.clone()), "{addr} listed twice");
                    }
                }
                let mut names: Vec<&str> = r
                    .queue_datas
                    .iter()
                    .map(|q| q.broker_name.as_str())
                    .collect();
                names.sort_unstable();
                names.dedup();
                assert_eq!(
                    names.len(),
                    r.queue_datas.len(),
                    "one queue entry per group"
                );
                seen += 1;
            }
            seen
        }));
    }
    let mut answered = 0;
    for r in readers {
        answered += r.await.unwrap();
    }
    let mut all_brokers = Vec::new();
    for w in writers {
        all_brokers.extend(w.await.unwrap());
    }
    assert!(answered > 0, "no route query succeeded");

    let r = route(&client, at, "Shared").await.unwrap();
    assert_eq!(r.queue_datas.len(), GROUPS);
    for b in &r.broker_datas {
        let g: usize = b.broker_name["group-".len()..].parse().unwrap();
        assert_eq!(b.broker_addrs[&0], member_addr(g, 0));
        assert_eq!(
            b.broker_addrs.len(),
            2,
            "master + one id-9 member left: {:?}",
            b.broker_addrs
        );
    }
    for b in &all_brokers {
        b.client.shutdown().await;
    }
    client.shutdown().await;
    ns.shutdown().await;
}
