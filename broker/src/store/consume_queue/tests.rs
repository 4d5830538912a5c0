// Goal: consume queues append, read, roll files, truncate, recover and answer time lookups
// exactly as specified, and readers racing the writer never see a half-written unit.
// Method: real files in a temp dir with tiny files (5 units = 100 bytes) so rolls happen.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

use super::*;

const FILE: u64 = 5 * CQ_UNIT_SIZE as u64;

fn unit(n: i64) -> CqUnit {
    CqUnit {
        physical_offset: 48 + n * 100,
        size: 100,
        tag_code: n * 7,
    }
}

fn open(root: &Path) -> ConsumeQueue {
    ConsumeQueue::open(root, "TopicTest", 1, FILE).unwrap()
}

fn files_of(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(root.join("TopicTest").join("1"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn spec_unit_vector() {
    let u = CqUnit {
        physical_offset: 48,
        size: 187,
        tag_code: 2_598_919,
    };
    let expect = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0xbb, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x27, 0xa8, 0x07,
    ];
    assert_eq!(u.encode(), expect);
    assert_eq!(CqUnit::decode(&expect), u);
}

#[test]
fn append_read_and_roll_files() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (0, 0));
    assert!(q.read_units(0, 10).unwrap().is_empty());
    for n in 0..12 {
        assert_eq!(q.append(n, unit(n)).unwrap(), AppendOutcome::Appended);
    }
    assert_eq!((q.min_offset(), q.max_offset()), (0, 12));
    assert_eq!(q.max_physical_end(), unit(11).physical_end());
    assert_eq!(
        files_of(dir.path()),
        vec![file_name_of(0), file_name_of(100), file_name_of(200)]
    );
    // A read spanning two files, bounded by count and by max.
    let got = q.read_units(3, 4).unwrap();
    assert_eq!(got, (3..7).map(unit).collect::<Vec<_>>());
    assert_eq!(q.read_units(10, 100).unwrap(), vec![unit(10), unit(11)]);
    assert_eq!(q.get(12).unwrap(), None);
    assert_eq!(q.get(4).unwrap(), Some(unit(4)));
    q.flush().unwrap();
}

#[test]
fn restart_recovers_and_reappend_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = open(dir.path());
        for n in 0..7 {
            q.append(n, unit(n)).unwrap();
        }
        q.flush().unwrap();
    }
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (0, 7));
    assert_eq!(q.max_physical_end(), unit(6).physical_end());
    assert_eq!(
        q.read_units(0, 100).unwrap(),
        (0..7).map(unit).collect::<Vec<_>>()
    );
    // Re-dispatch after restart: the same record is a no-op.
    assert_eq!(q.append(6, unit(6)).unwrap(), AppendOutcome::AlreadyPresent);
    assert_eq!(q.append(7, unit(7)).unwrap(), AppendOutcome::Appended);
}

/// No record is refused for its offset (G7): one past the end leaves holes before it, a
/// taken, negative or absurd offset puts it at the end, and a hole is filled by its record;
/// readers see holes as blank units, and a restart keeps all of it.
#[test]
fn no_record_is_refused_for_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = open(dir.path());
        for n in 0..3 {
            assert_eq!(q.append(n, unit(n)).unwrap(), AppendOutcome::Appended);
        }
        // Offsets 3 and 4 never reached the queue (a refused proposal, a skipped record).
        assert_eq!(
            q.append(5, unit(5)).unwrap(),
            AppendOutcome::AfterHoles { holes: 2 }
        );
        assert_eq!((q.min_offset(), q.max_offset()), (0, 6));
        let units = q.read_units(0, 10).unwrap();
        assert_eq!(units.len(), 6);
        assert!(units[3].is_blank() && units[4].is_blank());
        assert_eq!(units[5], unit(5));
        // Another record claiming a taken offset is appended at the end.
        assert_eq!(
            q.append(1, unit(50)).unwrap(),
            AppendOutcome::Renumbered { stored: 1, at: 6 }
        );
        assert_eq!(
            q.append(-4, unit(51)).unwrap(),
            AppendOutcome::Renumbered { stored: -4, at: 7 }
        );
        assert_eq!(
            q.append(i64::MAX, unit(52)).unwrap(),
            AppendOutcome::Renumbered {
                stored: i64::MAX,
                at: 8
            }
        );
        assert_eq!(
            q.append(9 + MAX_HOLE_FILL + 1, unit(53)).unwrap(),
            AppendOutcome::Renumbered {
                stored: 9 + MAX_HOLE_FILL + 1,
                at: 9
            }
        );
        // A record whose offset is a hole fills it; the queue's end stays.
        assert_eq!(q.append(4, unit(4)).unwrap(), AppendOutcome::FilledHole);
        assert_eq!(q.append(4, unit(4)).unwrap(), AppendOutcome::AlreadyPresent);
        assert_eq!(q.max_offset(), 10);
        assert_eq!(q.max_physical_end(), unit(53).physical_end());
        // Holes are not records.
        assert!(q.append(10, BLANK).is_err());
        q.flush().unwrap();
    }
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (0, 10));
    assert_eq!(q.max_physical_end(), unit(53).physical_end());
    let units = q.read_units(0, 20).unwrap();
    assert!(units[3].is_blank());
    assert_eq!(units[4], unit(4));
    assert_eq!(&units[6..], &[unit(50), unit(51), unit(52), unit(53)]);
}

/// Blank units left at the end by a crash between the holes and their record are not taken
/// for a unit (their "end" would be i32::MAX): recovery trims them.
#[test]
fn recovery_trims_holes_left_without_their_record() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = open(dir.path());
        for n in 0..2 {
            q.append(n, unit(n)).unwrap();
        }
        q.append(4, unit(4)).unwrap();
        q.flush().unwrap();
    }
    // The record's unit (offset 4) was lost; its holes (2, 3) reached the disk.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("TopicTest/1").join(file_name_of(0)))
        .unwrap();
    f.write_all_at(&[0u8; CQ_UNIT_SIZE], 4 * CQ_UNIT_SIZE as u64)
        .unwrap();
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (0, 2));
    assert_eq!(q.max_physical_end(), unit(1).physical_end());
    // Dispatch writes them again with the record.
    assert_eq!(
        q.append(4, unit(4)).unwrap(),
        AppendOutcome::AfterHoles { holes: 2 }
    );
}

/// Lookups by physical offset and time treat a hole as the record it was written for, so
/// the minimum never moves past a live record and truncation takes holes with their record.
#[test]
fn holes_do_not_mislead_binary_searches() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path());
    q.append(0, unit(0)).unwrap();
    q.append(3, unit(3)).unwrap(); // holes at 1, 2
    q.append(4, unit(4)).unwrap();
    // Everything is still in the log: the minimum stays at 0.
    assert_eq!(q.correct_min_offset(0).unwrap(), 0);
    // Time lookup: store time = physical offset here.
    let t = |phys: i64, _| Some(phys);
    assert_eq!(
        q.offset_by_time(unit(3).physical_offset, TimeBoundary::Lower, t)
            .unwrap(),
        1
    );
    // Truncating the log at record 3 removes its holes too.
    q.truncate_physical(unit(3).physical_offset).unwrap();
    assert_eq!(q.max_offset(), 1);
    assert_eq!(q.max_physical_end(), unit(0).physical_end());
}

#[test]
fn recovery_ignores_a_torn_tail_and_empty_trailing_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = open(dir.path());
        for n in 0..5 {
            q.append(n, unit(n)).unwrap();
        }
    }
    let qdir = dir.path().join("TopicTest").join("1");
    // Torn unit: only the physical offset made it to the next file; plus an empty file after.
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(qdir.join(file_name_of(100)))
        .unwrap();
    f.set_len(FILE).unwrap();
    f.write_all_at(&unit(5).encode()[..8], 0).unwrap();
    File::create(qdir.join(file_name_of(200))).unwrap();
    let q = open(dir.path());
    assert_eq!(q.max_offset(), 5);
    // Files without a single whole unit are removed.
    assert_eq!(files_of(dir.path()), vec![file_name_of(0)]);
    assert_eq!(q.append(5, unit(5)).unwrap(), AppendOutcome::Appended);
    assert_eq!(q.read_units(4, 10).unwrap(), vec![unit(4), unit(5)]);
}

#[test]
fn truncate_removes_units_at_or_above_a_physical_offset() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path());
    for n in 0..13 {
        q.append(n, unit(n)).unwrap();
    }
    // Cut inside a record's range: units whose start is ≥ the cut go.
    q.truncate_physical(unit(8).physical_offset + 1).unwrap();
    assert_eq!(q.max_offset(), 9);
    q.truncate_physical(unit(7).physical_offset).unwrap();
    assert_eq!(q.max_offset(), 7);
    assert_eq!(q.max_physical_end(), unit(6).physical_end());
    assert_eq!(
        files_of(dir.path()),
        vec![file_name_of(0), file_name_of(100)]
    );
    assert_eq!(q.read_units(5, 10).unwrap(), vec![unit(5), unit(6)]);
    // Truncating above the end changes nothing.
    q.truncate_physical(1 << 40).unwrap();
    assert_eq!(q.max_offset(), 7);
    // At a file boundary the (now empty) file stays, zeroed.
    q.truncate_physical(unit(5).physical_offset).unwrap();
    assert_eq!(q.max_offset(), 5);
    drop(q);
    let q = open(dir.path());
    assert_eq!(q.max_offset(), 5);
    assert_eq!(q.append(5, unit(50)).unwrap(), AppendOutcome::Appended);
    // Everything.
    q.truncate_physical(0).unwrap();
    assert_eq!(
        (q.min_offset(), q.max_offset(), q.max_physical_end()),
        (0, 0, 0)
    );
    drop(q);
    let q = open(dir.path());
    assert_eq!(q.max_offset(), 0);
    assert_eq!(q.append(0, unit(0)).unwrap(), AppendOutcome::Appended);
}

#[test]
fn a_queue_may_start_past_zero_with_pre_blank_units() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = open(dir.path());
        assert_eq!(q.append(7, unit(7)).unwrap(), AppendOutcome::Appended);
        assert_eq!((q.min_offset(), q.max_offset()), (7, 8));
        assert_eq!(q.read_units(5, 10).unwrap(), vec![]);
        assert_eq!(q.read_units(7, 10).unwrap(), vec![unit(7)]);
        q.append(8, unit(8)).unwrap();
    }
    assert_eq!(files_of(dir.path()), vec![file_name_of(100)]);
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (7, 9));
    assert_eq!(q.append(3, unit(3)).unwrap(), AppendOutcome::AlreadyPresent);
    q.truncate_physical(0).unwrap();
    assert_eq!((q.min_offset(), q.max_offset()), (7, 7));
}

#[test]
fn lookup_by_store_time() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path());
    for n in 0..11 {
        q.append(n, unit(n)).unwrap();
    }
    // Store time = 1000 + 10 * n, with two equal times at n = 4, 5.
    let time = |phys: i64, _size: i32| {
        let n = (phys - 48) / 100;
        Some(1000 + 10 * if n == 5 { 4 } else { n })
    };
    assert_eq!(
        q.offset_by_time(1040, TimeBoundary::Lower, time).unwrap(),
        4
    );
    assert_eq!(
        q.offset_by_time(1040, TimeBoundary::Upper, time).unwrap(),
        5
    );
    assert_eq!(
        q.offset_by_time(1061, TimeBoundary::Lower, time).unwrap(),
        7
    );
    assert_eq!(
        q.offset_by_time(1061, TimeBoundary::Upper, time).unwrap(),
        6
    );
    assert_eq!(q.offset_by_time(0, TimeBoundary::Lower, time).unwrap(), 0);
    assert_eq!(q.offset_by_time(0, TimeBoundary::Upper, time).unwrap(), 0);
    assert_eq!(
        q.offset_by_time(9999, TimeBoundary::Lower, time).unwrap(),
        11
    );
    assert_eq!(
        q.offset_by_time(9999, TimeBoundary::Upper, time).unwrap(),
        10
    );
}

#[test]
fn min_offset_follows_commit_log_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path());
    for n in 0..12 {
        q.append(n, unit(n)).unwrap();
    }
    assert_eq!(q.correct_min_offset(unit(3).physical_offset).unwrap(), 3);
    assert_eq!(q.get(2).unwrap(), None);
    assert_eq!(q.read_units(0, 5).unwrap(), vec![]);
    // Files 0 (units 0-4) and 1 (5-9) end below unit 10's offset; the last file stays.
    assert_eq!(q.delete_expired_files(unit(10).physical_offset).unwrap(), 2);
    assert_eq!(files_of(dir.path()), vec![file_name_of(200)]);
    assert_eq!((q.min_offset(), q.max_offset()), (10, 12));
    drop(q);
    let q = open(dir.path());
    assert_eq!((q.min_offset(), q.max_offset()), (10, 12));
    assert_eq!(q.read_units(10, 5).unwrap(), vec![unit(10), unit(11)]);
}

#[test]
fn readers_racing_the_writer_see_only_whole_units() {
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(open(dir.path()));
    const N: i64 = 2000;
    std::thread::scope(|s| {
        let writer = Arc::clone(&q);
        s.spawn(move || {
            for n in 0..N {
                writer.append(n, unit(n)).unwrap();
            }
        });
        for _ in 0..2 {
            let reader = Arc::clone(&q);
            s.spawn(move || {
                let mut buf = Vec::new();
                let mut next = 0;
                while next < N {
                    reader.read_units_into(next, 64, &mut buf).unwrap();
                    for u in &buf {
                        assert_eq!(*u, unit(next));
                        next += 1;
                    }
                    std::thread::yield_now();
                }
            });
        }
    });
    assert_eq!(q.max_offset(), N);
}

#[test]
fn queue_set_discovers_queues_and_tracks_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("consumequeue");
    {
        let set = ConsumeQueueSet::open(&root, FILE).unwrap();
        assert_eq!(set.physical_end_bounds(), (0, 0));
        let a = set.get_or_create("A", 0).unwrap();
        let b = set.get_or_create("B", 3).unwrap();
        assert!(Arc::ptr_eq(&a, &set.get_or_create("A", 0).unwrap()));
        for n in 0..3 {
            a.append(n, unit(n)).unwrap();
        }
        b.append(0, unit(7)).unwrap();
        set.flush_all().unwrap();
    }
    let set = ConsumeQueueSet::open(&root, FILE).unwrap();
    assert_eq!(set.max_offset("A", 0), 3);
    assert_eq!(set.max_offset("B", 3), 1);
    assert_eq!(set.max_offset("C", 0), 0);
    assert_eq!(
        set.physical_end_bounds(),
        (unit(2).physical_end(), unit(7).physical_end())
    );
    set.truncate_physical(unit(1).physical_offset).unwrap();
    assert_eq!(set.max_offset("A", 0), 1);
    assert_eq!(set.max_offset("B", 3), 0);
    set.remove_topic("A").unwrap();
    assert!(set.get("A", 0).is_none());
    assert!(!root.join("A").exists());
    assert_eq!(set.queues_of_topic("B").len(), 1);
}

#[test]
fn dispatch_checkpoint_is_written_after_the_flush_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("consumequeue");
    {
        let set = ConsumeQueueSet::open(&root, FILE).unwrap();
        assert_eq!(set.dispatch_checkpoint(), None);
        // Nothing noted by a dispatcher yet: a flush writes no checkpoint.
        set.flush_all().unwrap();
        assert!(!root.join(DISPATCH_CHECKPOINT_FILE).exists());
        let q = set.get_or_create("TopicTest", 1).unwrap();
        q.append(0, unit(0)).unwrap();
        set.note_dispatched_through(unit(0).physical_end());
        set.flush_all().unwrap();
        assert_eq!(set.dispatch_checkpoint(), Some(unit(0).physical_end()));
    }
    // The checkpoint file is not taken for a topic; the queue and the value come back.
    let set = ConsumeQueueSet::open(&root, FILE).unwrap();
    assert_eq!(set.queues().len(), 1);
    assert_eq!(set.dispatch_checkpoint(), Some(unit(0).physical_end()));
    // It may move down (the log was truncated below it).
    set.note_dispatched_through(10);
    set.flush_all().unwrap();
    drop(set);
    let set = ConsumeQueueSet::open(&root, FILE).unwrap();
    assert_eq!(set.dispatch_checkpoint(), Some(10));
}

#[test]
fn a_damaged_dispatch_checkpoint_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("consumequeue");
    fs::create_dir_all(&root).unwrap();
    for bytes in [&b"short"[..], &[1u8; 12][..]] {
        fs::write(root.join(DISPATCH_CHECKPOINT_FILE), bytes).unwrap();
        let set = ConsumeQueueSet::open(&root, FILE).unwrap();
        assert_eq!(set.dispatch_checkpoint(), None);
    }
}

#[test]
fn the_queue_cache_hands_out_the_sets_queues_and_forgets_removed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let set = ConsumeQueueSet::open(&dir.path().join("cq"), FILE).unwrap();
    let mut cache = QueueCache::default();
    let a0 = cache.get_or_create(&set, "A", 0).unwrap();
    assert!(Arc::ptr_eq(&a0, &set.get("A", 0).unwrap()));
    assert!(Arc::ptr_eq(
        &a0,
        &cache.get_or_create(&set, "A", 0).unwrap()
    ));
    // Same queue id, other topic; same topic, other queue id: other queues.
    let b0 = cache.get_or_create(&set, "B", 0).unwrap();
    let a1 = cache.get_or_create(&set, "A", 1).unwrap();
    assert!(!Arc::ptr_eq(&a0, &b0) && !Arc::ptr_eq(&a0, &a1));
    a0.append(0, unit(0)).unwrap();
    // A removed topic's queue is not handed out again: the cache looks it up anew.
    set.remove_topic("A").unwrap();
    let again = cache.get_or_create(&set, "A", 0).unwrap();
    assert!(!Arc::ptr_eq(&a0, &again));
    assert!(Arc::ptr_eq(&again, &set.get("A", 0).unwrap()));
    assert_eq!(again.max_offset(), 0);
    assert!(Arc::ptr_eq(
        &b0,
        &cache.get_or_create(&set, "B", 0).unwrap()
    ));
    // More queues than the cache holds: every lookup still answers the set's queue.
    for q in 0..200 {
        let got = cache.get_or_create(&set, "C", q).unwrap();
        assert!(Arc::ptr_eq(&got, &set.get("C", q).unwrap()));
    }
    for q in (0..200).rev() {
        let got = cache.get_or_create(&set, "C", q).unwrap();
        assert!(Arc::ptr_eq(&got, &set.get("C", q).unwrap()));
    }
}
