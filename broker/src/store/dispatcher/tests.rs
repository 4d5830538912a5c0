//! Crash consistency of the derived structures (CC-09): a lagging consume queue or key index
//! is refilled from the log at the recorded queue offsets, and nothing is re-read when nothing
//! lags.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::*;
use crate::message::properties::append_property;
use crate::message::record::RecordFields;
use crate::store::commit_log::{physical_offset, CommitMark};
use crate::store::consume_queue::{CQ_UNIT_SIZE, DISPATCH_CHECKPOINT_FILE, GAP_SAFE_FILE};
use crate::store::index_file::{IndexConfig, HASH_SLOT_LEN, INDEX_ENTRY_LEN, INDEX_HEADER_LEN};
use crate::store::mem_log::MemLog;
use crate::store::test_support::{encode, record_fields, ProbedLog};

/// Four units per consume-queue file, so queues span several files.
const CQ_FILE: u64 = 4 * CQ_UNIT_SIZE as u64;
const INDEX_CFG: IndexConfig = IndexConfig {
    hash_slots: 64,
    max_entries: 1000,
};

/// One committed message as the test sent it.
#[derive(Debug, Clone)]
struct Sent {
    queue_id: i32,
    queue_offset: i64,
    phys: i64,
    key: Option<String>,
}

fn record(queue_id: i32, queue_offset: i64, key: Option<&str>) -> Bytes {
    let mut props = BytesMut::new();
    if let Some(k) = key {
        append_property(&mut props, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, k).unwrap();
    }
    encode(&RecordFields {
        queue_id,
        queue_offset,
        store_timestamp: 1_700_000_000_000,
        ..record_fields("T", b"payload", &props)
    })
    .freeze()
}

/// Sends `n` messages alternating over queues 0 and 1 (queue offsets assigned per queue, as
/// the store does); messages from `keyless_from` on carry no key.
async fn send(log: &ProbedLog, sent: &mut Vec<Sent>, n: usize, keyless_from: usize) {
    for _ in 0..n {
        let i = sent.len();
        let queue_id = (i % 2) as i32;
        let queue_offset = sent.iter().filter(|s| s.queue_id == queue_id).count() as i64;
        let key = (i < keyless_from).then(|| format!("key-{i}"));
        let p = log
            .propose(record(queue_id, queue_offset, key.as_deref()))
            .await
            .unwrap();
        sent.push(Sent {
            queue_id,
            queue_offset,
            phys: physical_offset(&p),
            key,
        });
    }
}

struct Store {
    cqs: Arc<ConsumeQueueSet>,
    index: Arc<KeyIndex>,
    delay: Arc<DelayOffsetTable>,
    dispatcher: Dispatcher,
    rx: watch::Receiver<DispatchMark>,
}

fn open(dir: &Path, log: &Arc<ProbedLog>) -> Store {
    let cqs = Arc::new(ConsumeQueueSet::open(&dir.join("consumequeue"), CQ_FILE).unwrap());
    let index = Arc::new(KeyIndex::open(&dir.join("index"), INDEX_CFG).unwrap());
    let delay = Arc::new(DelayOffsetTable::open(dir).unwrap());
    let log: Arc<dyn ReplicatedLog> = log.clone();
    let (dispatcher, rx) = Dispatcher::recover(
        log,
        Arc::clone(&cqs),
        Arc::clone(&index),
        vec![1000],
        Arc::clone(&delay),
        None,
    )
    .unwrap();
    Store {
        cqs,
        index,
        delay,
        dispatcher,
        rx,
    }
}

/// Runs the dispatcher until it reached `through`, then stops it (it flushes on the way out)
/// and persists the delay offsets (the broker does so periodically).
async fn run_until(store: Store, through: i64) -> (Arc<ConsumeQueueSet>, Arc<KeyIndex>) {
    let Store {
        cqs,
        index,
        delay,
        dispatcher,
        mut rx,
    } = store;
    let stop = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(stop.clone()));
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|m| m.index >= through))
        .await
        .expect("dispatch did not reach the committed index")
        .unwrap();
    stop.cancel();
    task.await.unwrap();
    delay.persist().unwrap();
    (cqs, index)
}

fn queue_file(dir: &Path, queue_id: i32, start: u64) -> PathBuf {
    dir.join("consumequeue")
        .join("T")
        .join(queue_id.to_string())
        .join(crate::store::consume_queue::file_name_of(start))
}

/// Zeroes the last `n` units of a queue (a tail that never reached the disk); removes files
/// left empty.
fn lose_queue_tail(dir: &Path, queue_id: i32, units: u64, n: u64) {
    for u in units - n..units {
        let start = u * CQ_UNIT_SIZE as u64 / CQ_FILE * CQ_FILE;
        let path = queue_file(dir, queue_id, start);
        if u * CQ_UNIT_SIZE as u64 == start {
            std::fs::remove_file(&path).unwrap();
            continue;
        }
        if !path.exists() {
            continue;
        }
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0u8; CQ_UNIT_SIZE], u * CQ_UNIT_SIZE as u64 - start)
            .unwrap();
    }
}

fn index_file(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    files.pop().unwrap()
}

fn read_i32(f: &std::fs::File, at: u64) -> i32 {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, at).unwrap();
    i32::from_be_bytes(b)
}

fn read_i64(f: &std::fs::File, at: u64) -> i64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).unwrap();
    i64::from_be_bytes(b)
}

fn open_index_rw(dir: &Path) -> std::fs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(index_file(dir))
        .unwrap()
}

fn entry_pos(n: i32) -> u64 {
    INDEX_HEADER_LEN + u64::from(INDEX_CFG.hash_slots) * HASH_SLOT_LEN + n as u64 * INDEX_ENTRY_LEN
}

/// The header lost its last `n` updates (the entries are there but not counted).
fn index_header_lags(dir: &Path, n: i32) {
    let f = open_index_rw(dir);
    let count = read_i32(&f, 36);
    let new_count = count - n;
    let end_phys = read_i64(&f, entry_pos(new_count - 1) + 4);
    f.write_all_at(&new_count.to_be_bytes(), 36).unwrap();
    f.write_all_at(&end_phys.to_be_bytes(), 24).unwrap();
}

/// The header reached the disk but its last `n` entries did not.
fn index_entries_lost(dir: &Path, n: i32) {
    let f = open_index_rw(dir);
    let count = read_i32(&f, 36);
    for e in count - n..count {
        f.write_all_at(&[0u8; INDEX_ENTRY_LEN as usize], entry_pos(e))
            .unwrap();
    }
}

/// Every committed message is in its queue at its recorded offset exactly once, and every
/// keyed one is found by its key exactly once.
fn assert_complete(cqs: &ConsumeQueueSet, index: &KeyIndex, sent: &[Sent]) {
    for queue_id in 0..2 {
        let expected: Vec<&Sent> = sent.iter().filter(|s| s.queue_id == queue_id).collect();
        let q = cqs.get("T", queue_id).unwrap();
        assert_eq!(q.max_offset(), expected.len() as i64, "queue {queue_id}");
        for s in expected {
            let u = q.get(s.queue_offset).unwrap().unwrap();
            assert_eq!(u.physical_offset, s.phys, "{s:?}");
        }
    }
    for s in sent {
        let Some(k) = &s.key else { continue };
        let r = index.query("T", k, 64, 0, i64::MAX).unwrap();
        let hits = r.physical_offsets.iter().filter(|&&p| p == s.phys).count();
        assert_eq!(hits, 1, "{s:?} in {:?}", r.physical_offsets);
    }
}

fn new_log() -> Arc<ProbedLog> {
    Arc::new(ProbedLog::new(MemLog::new_leader()))
}

async fn lagging_queue_and_index_are_refilled(with_checkpoint: bool, header_lags: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let mut sent = Vec::new();
    send(&log, &mut sent, 10, usize::MAX).await;
    if with_checkpoint {
        // A periodic flush after the first 10 messages, then 10 more that only partly reached
        // the disk.
        let (cqs, _) = run_until(open(dir.path(), &log), 9).await;
        cqs.flush_all().unwrap();
    }
    send(&log, &mut sent, 10, usize::MAX).await;
    let (_cqs, _index) = run_until(open(dir.path(), &log), 19).await;
    drop((_cqs, _index));
    // Crash: queue 1 lost its last 3 units (2 files involved), queue 0 kept everything, the
    // index lost its last 4 keys, and the checkpoint is the one from before.
    lose_queue_tail(dir.path(), 1, 10, 3);
    if header_lags {
        index_header_lags(dir.path(), 4);
    } else {
        index_entries_lost(dir.path(), 4);
    }
    let cp = dir
        .path()
        .join("consumequeue")
        .join(DISPATCH_CHECKPOINT_FILE);
    if with_checkpoint {
        // Checkpoint at the end of message 9 (entry 9), as the earlier flush wrote it.
        let end9 = log.inner.committed_entry(9).unwrap().unwrap().end_pos();
        let cqs = ConsumeQueueSet::open(&dir.path().join("consumequeue"), CQ_FILE).unwrap();
        cqs.note_dispatched_through(end9);
        // Flushing writes the checkpoint only (the queues are as the crash left them).
        cqs.flush_all().unwrap();
        assert_eq!(cqs.dispatch_checkpoint(), Some(end9));
    } else {
        std::fs::remove_file(&cp).unwrap();
    }
    let store = open(dir.path(), &log);
    let replay = store.dispatcher.replay_len();
    assert!(replay > 0 && replay <= 20, "replay {replay}");
    if with_checkpoint {
        assert_eq!(replay, 10, "re-read from the checkpoint");
    }
    let (cqs, index) = run_until(store, 19).await;
    assert_complete(&cqs, &index, &sent);
    // New messages continue at the right offsets after the refill.
    send(&log, &mut sent, 4, usize::MAX).await;
    let store = open(dir.path(), &log);
    let (cqs, index) = run_until(store, 23).await;
    assert_complete(&cqs, &index, &sent);
}

#[tokio::test]
async fn a_lagging_queue_and_index_header_are_refilled_without_a_checkpoint() {
    lagging_queue_and_index_are_refilled(false, true).await;
}

#[tokio::test]
async fn a_lagging_queue_and_lost_index_entries_are_refilled_from_the_checkpoint() {
    lagging_queue_and_index_are_refilled(true, false).await;
}

#[tokio::test]
async fn a_lost_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let mut sent = Vec::new();
    send(&log, &mut sent, 12, usize::MAX).await;
    let _ = run_until(open(dir.path(), &log), 11).await;
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let store = open(dir.path(), &log);
    assert_eq!(store.dispatcher.replay_len(), 12);
    let (cqs, index) = run_until(store, 11).await;
    assert_complete(&cqs, &index, &sent);
}

#[tokio::test]
async fn nothing_is_re_read_when_nothing_lags() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let mut sent = Vec::new();
    // The last messages carry no key: the index must not look behind because of them.
    send(&log, &mut sent, 16, 12).await;
    let _ = run_until(open(dir.path(), &log), 15).await;
    let store = open(dir.path(), &log);
    assert_eq!(store.dispatcher.replay_len(), 0);
    assert_eq!(store.rx.borrow().index, 15);
    log.reads.store(0, Ordering::SeqCst);
    // One new message: exactly one entry is read and dispatched.
    send(&log, &mut sent, 1, 12).await;
    let (cqs, index) = run_until(store, 16).await;
    assert_eq!(log.reads.load(Ordering::SeqCst), 1);
    assert_complete(&cqs, &index, &sent);
}

/// Regression (MP-01 flake): after a restart the store's committed index comes from its
/// checkpoint and can lag what the queues already hold (and the dispatch checkpoint claims).
/// Recovery trims the queues to the committed end; dispatch must resume right there, not at
/// the dispatch checkpoint, or every queue keeps a hole ("expected logical offset 5, got 10").
#[tokio::test]
async fn queues_trimmed_to_a_lagging_commit_are_refilled_from_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let mut sent = Vec::new();
    send(&log, &mut sent, 20, usize::MAX).await;
    let (cqs, _) = run_until(open(dir.path(), &log), 19).await;
    cqs.flush_all().unwrap();
    let end19 = log.inner.committed_entry(19).unwrap().unwrap().end_pos();
    assert_eq!(cqs.dispatch_checkpoint(), Some(end19));
    drop(cqs);
    let end9 = log.inner.committed_entry(9).unwrap().unwrap().end_pos();
    let commit = log.override_committed(CommitMark {
        index: 9,
        end_pos: end9,
    });
    let store = open(dir.path(), &log);
    assert_eq!(
        store.cqs.dispatch_checkpoint(),
        Some(end9),
        "checkpoint lowered with the cut"
    );
    assert_eq!(store.rx.borrow().index, 9);
    commit.send_replace(CommitMark {
        index: 19,
        end_pos: end19,
    });
    let (cqs, index) = run_until(store, 19).await;
    assert_complete(&cqs, &index, &sent);
}

/// A consume-queue write that fails on the filesystem stalls dispatch at that record and is
/// retried; the message is not skipped (consumers would never see it).
#[tokio::test]
async fn a_queue_the_filesystem_refuses_stalls_dispatch_until_it_can_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let mut sent = Vec::new();
    send(&log, &mut sent, 6, usize::MAX).await;
    let store = open(dir.path(), &log);
    // The topic's directory cannot be created: a plain file is in its way.
    let blocker = dir.path().join("consumequeue").join("T");
    std::fs::create_dir_all(dir.path().join("consumequeue")).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();
    let Store {
        cqs,
        index,
        dispatcher,
        mut rx,
        ..
    } = store;
    log.reads.store(0, Ordering::SeqCst);
    let stop = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(stop.clone()));
    // Wait for the first attempt and one retry of the same entry.
    tokio::time::timeout(Duration::from_secs(10), async {
        while log.reads.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("dispatch did not retry");
    assert_eq!(
        rx.borrow().index,
        -1,
        "nothing published past the failed record"
    );
    std::fs::remove_file(&blocker).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|m| m.index >= 5))
        .await
        .expect("dispatch did not resume")
        .unwrap();
    stop.cancel();
    task.await.unwrap();
    assert_complete(&cqs, &index, &sent);
}

/// Appends to queue 0 of `T` a record stored with `queue_offset` and `sys_flag`, as whatever
/// wrote the log did (old code included); its physical offset.
async fn put_raw(log: &ProbedLog, queue_offset: i64, sys_flag: i32) -> i64 {
    let rec = encode(&RecordFields {
        queue_offset,
        sys_flag,
        store_timestamp: 1_700_000_000_000,
        ..record_fields("T", b"payload", b"")
    })
    .freeze();
    physical_offset(&log.propose(rec).await.unwrap())
}

/// Queue 0 of `T` as issue 25's requests left it: offsets 0, 2 and 3 taken by plain records,
/// offset 1 by a ROLLBACK record that dispatch leaves out of the queue. The plain records'
/// physical offsets.
async fn log_with_a_gap(log: &ProbedLog) -> [i64; 3] {
    let a = put_raw(log, 0, 0).await;
    put_raw(log, 1, sysflag::TRANSACTION_ROLLBACK_TYPE).await;
    let c = put_raw(log, 2, 0).await;
    let d = put_raw(log, 3, 0).await;
    [a, c, d]
}

/// The physical offset of each real unit of queue 0 of `T` (None for a hole).
fn queue_units(cqs: &ConsumeQueueSet) -> Vec<Option<i64>> {
    let q = cqs.get("T", 0).unwrap();
    q.read_units(q.min_offset(), 100)
        .unwrap()
        .into_iter()
        .map(|u| (!u.is_blank()).then_some(u.physical_offset))
        .collect()
}

/// G7: a log in which a queue offset was given to a record that dispatch leaves out of the
/// queue (a ROLLBACK batch element, as issue 25's requests produced) does not stop the queue:
/// the offset becomes a hole and every later record is readable at its own offset.
#[tokio::test]
async fn a_gap_in_a_queues_offsets_becomes_a_hole_and_the_queue_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let [a, c, d] = log_with_a_gap(&log).await;
    let (cqs, _) = run_until(open(dir.path(), &log), 3).await;
    assert_eq!(queue_units(&cqs), [Some(a), None, Some(c), Some(d)]);
    assert_eq!(cqs.repairs().holes.load(Ordering::Relaxed), 1);
    // A later record claiming a taken offset is still dispatched, at the end.
    let e = put_raw(&log, 2, 0).await;
    let (cqs, _) = run_until(open(dir.path(), &log), 4).await;
    assert_eq!(
        queue_units(&cqs),
        [Some(a), None, Some(c), Some(d), Some(e)]
    );
    assert_eq!(cqs.repairs().renumbered.load(Ordering::Relaxed), 1);
}

/// Builds the consume queue an older dispatcher left: `units` (physical offsets of records
/// of queue 0, at offsets 0..) written, the dispatch checkpoint at the log's end, and no
/// gap-safe marker.
fn old_store(dir: &Path, log: &ProbedLog, units: &[i64]) {
    let cqs = ConsumeQueueSet::open(&dir.join("consumequeue"), CQ_FILE).unwrap();
    let q = cqs.get_or_create("T", 0).unwrap();
    for (n, &phys) in units.iter().enumerate() {
        let size = log.inner.read_message(phys).unwrap().len() as i32;
        let unit = CqUnit {
            physical_offset: phys,
            size,
            tag_code: 0,
        };
        assert_eq!(q.append(n as i64, unit).unwrap(), AppendOutcome::Appended);
    }
    let last = log.inner.committed_mark().index;
    let end = log.inner.committed_entry(last).unwrap().unwrap().end_pos();
    cqs.note_dispatched_through(end);
    cqs.flush_all().unwrap();
    let _ = std::fs::remove_file(dir.join("consumequeue").join(GAP_SAFE_FILE));
}

/// Issue 25 point 3: a queue an older dispatcher left stuck (it refused the record after the
/// gap and the checkpoint moved past everything after it) is readable again after a restart
/// with this code, which re-checks the queues once and then marks the store gap-safe.
#[tokio::test]
async fn a_queue_stuck_by_an_older_dispatcher_is_repaired_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let [a, c, d] = log_with_a_gap(&log).await;
    old_store(dir.path(), &log, &[a]);
    let store = open(dir.path(), &log);
    assert_eq!(store.dispatcher.replay_len(), 4, "every entry re-checked");
    let (cqs, _) = run_until(store, 3).await;
    assert_eq!(queue_units(&cqs), [Some(a), None, Some(c), Some(d)]);
    drop(cqs);
    assert!(dir.path().join("consumequeue").join(GAP_SAFE_FILE).exists());
    // Once marked, a restart re-reads nothing.
    let store = open(dir.path(), &log);
    assert_eq!(store.dispatcher.replay_len(), 0);
    let (cqs, _) = run_until(store, 3).await;
    assert_eq!(queue_units(&cqs), [Some(a), None, Some(c), Some(d)]);
}

/// The same, when the older broker was also restarted after the queue got stuck: its send
/// path then handed the stuck records' offsets out again (counters restart at the queue's
/// end), so they are taken; the stuck records are appended at the end instead of lost.
#[tokio::test]
async fn records_whose_offsets_were_handed_out_again_are_kept_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_log();
    let a = put_raw(&log, 0, 0).await;
    put_raw(&log, 1, sysflag::TRANSACTION_ROLLBACK_TYPE).await;
    let b = put_raw(&log, 2, 0).await;
    let c = put_raw(&log, 3, 0).await;
    // The restart: the queue ended at 1, so offsets 1.. were handed out again.
    let d = put_raw(&log, 1, 0).await;
    let e = put_raw(&log, 2, 0).await;
    old_store(dir.path(), &log, &[a, d, e]);
    let (cqs, _) = run_until(open(dir.path(), &log), 5).await;
    assert_eq!(
        queue_units(&cqs),
        [Some(a), Some(d), Some(e), Some(b), Some(c)]
    );
    assert_eq!(cqs.repairs().renumbered.load(Ordering::Relaxed), 2);
}
