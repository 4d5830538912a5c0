//! The leader's append hook (RocketMQ's PHYSICALOFFSET rewrite) runs before the entry is
//! stored and replicated: a 3-member group on loopback, a hook writing the entry's pos into
//! the body, and every member must hold byte-identical, CRC-valid bodies carrying that pos.
//! Waits poll a condition with a deadline; nothing sleeps for synchronisation.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod ledger_common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dledger_commitlog::runtime::{AppendHook, Role};
use ledger_common::{free_peers, poll, shutdown_all, start_group};

/// Writes `pos` big-endian into the first 8 bytes of bodies long enough to hold it.
fn pos_hook() -> AppendHook {
    AppendHook(Arc::new(|pos, body| {
        if let Some(head) = body.get_mut(..8) {
            head.copy_from_slice(&pos.to_be_bytes());
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_rewrites_bodies_before_storage_and_replication() {
    let dir = tempfile::tempdir().unwrap();
    let peers = free_peers(3);
    let nodes = start_group(dir.path(), &peers, |o| {
        o.store.data_segment_bytes = 1 << 20;
        o.store.index_segment_bytes = 32 * 1024;
        o.append_hook = Some(pos_hook());
    })
    .await;
    let leader = poll("a leader", Duration::from_secs(10), || {
        let mut leaders = nodes
            .iter()
            .filter(|n| n.role().borrow().role == Role::Leader);
        match (leaders.next(), leaders.next()) {
            (Some(l), None) => Some(l.clone()),
            _ => None,
        }
    })
    .await;

    let mut committed = Vec::new();
    for i in 0..50u8 {
        // The first 8 bytes are a placeholder the hook overwrites.
        let mut body = vec![0u8; 8];
        body.extend(std::iter::repeat_n(i, 20 + usize::from(i)));
        let c = leader.propose(Bytes::from(body.clone())).await.unwrap();
        body[..8].copy_from_slice(&c.pos.raw().to_be_bytes());
        committed.push((c.index, body));
    }
    let last = committed.last().unwrap().0;
    for n in &nodes {
        poll("every member to commit", Duration::from_secs(10), || {
            (n.committed().borrow().index >= Some(last)).then_some(())
        })
        .await;
        let reader = n.reader();
        for (index, expected) in &committed {
            let e = reader.get(*index).unwrap();
            assert_eq!(
                e.pos.raw(),
                i64::from_be_bytes(expected[..8].try_into().unwrap())
            );
            assert_eq!(
                &e.body[..],
                &expected[..],
                "member {} index {index}",
                n.self_id()
            );
        }
    }
    shutdown_all(&nodes).await;
}
