//! Goal: the store behaves identically over mmap files and the in-memory disk.
//! Method: every test runs the same scenario against both backends (`Backend::both`).

#![allow(clippy::unwrap_used)]

mod store_common;

use dledger_commitlog::format::entry::{decode_header, HEADER_BYTES};
use dledger_commitlog::store::{FollowerEntry, StoreError};
use dledger_commitlog::{Index, Pos, Term};
use store_common::*;

#[test]
fn append_get_roll_and_reopen() {
    for (name, b) in Backend::both() {
        let cfg = small_cfg();
        let mut s = b.open(&cfg).unwrap();
        assert_eq!(
            (s.begin_index(), s.end_index(), s.next_index()),
            (None, None, Index(0))
        );
        fill(&mut s, 200);
        check_all(&s, 200);
        assert_eq!(s.begin_index(), Some(Index(0)));
        assert_eq!(s.end_index(), Some(Index(199)));
        assert_eq!(s.end_term(), Some(Term(20)));
        assert_eq!(s.term_at(Index(57)).unwrap(), Term(6));
        assert!(b.data_files().len() > 5, "{name}: segments rolled");
        // Entries never span files: each starts and ends inside one 4 KiB file.
        for i in 0..200 {
            let e = s.get(Index(i)).unwrap();
            assert_eq!(
                e.pos.0 / 4096,
                (e.end_pos().0 - 1) / 4096,
                "{name}: entry {i} spans files"
            );
        }
        let end_pos = s.end_pos();
        s.advance_committed(Index(150));
        s.close().unwrap();
        let s = b.open(&cfg).unwrap();
        assert_eq!(s.end_index(), Some(Index(199)), "{name}");
        assert_eq!(s.end_pos(), end_pos, "{name}");
        assert_eq!(
            s.committed_index(),
            Some(Index(150)),
            "{name}: checkpoint at close"
        );
        check_all(&s, 200);
        assert!(matches!(
            s.get(Index(200)),
            Err(StoreError::IndexOutOfRange { .. })
        ));
    }
}

#[test]
fn data_entry_bytes_follow_the_dledger_layout() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        let a = s.append_leader(Term(3), b"hello").unwrap();
        s.close().unwrap();
        let data = b.read("data/00000000000000000000").unwrap();
        assert_eq!(
            data.len(),
            4096,
            "{name}: files are preallocated to full size"
        );
        let e = &data[..HEADER_BYTES + 5];
        assert_eq!(&e[0..4], &1i32.to_be_bytes(), "magic");
        assert_eq!(&e[4..8], &53i32.to_be_bytes(), "size");
        assert_eq!(&e[8..16], &0i64.to_be_bytes(), "index");
        assert_eq!(&e[16..24], &3i64.to_be_bytes(), "term");
        assert_eq!(&e[24..32], &(a.pos.0 as i64).to_be_bytes(), "pos");
        assert_eq!(&e[32..36], &[0; 4], "channel");
        let crc = dledger_commitlog::format::crc::masked_crc32(b"hello");
        assert_eq!(&e[40..44], &crc.to_be_bytes(), "body crc");
        let hcrc = dledger_commitlog::format::crc::masked_crc32(&e[..36]);
        assert_eq!(
            &e[36..40],
            &hcrc.to_be_bytes(),
            "header crc in the chain-crc field"
        );
        assert_eq!(&e[44..48], &5i32.to_be_bytes(), "body size");
        assert_eq!(&e[48..], b"hello");
        let idx = b.read("index/00000000000000000000").unwrap();
        assert_eq!(&idx[0..4], &1i32.to_be_bytes());
        assert_eq!(&idx[4..12], &0i64.to_be_bytes());
        assert_eq!(&idx[12..16], &53i32.to_be_bytes());
        assert_eq!(&idx[16..24], &0i64.to_be_bytes());
        assert_eq!(&idx[24..32], &3i64.to_be_bytes());
        assert!(b.read("checkpoint").is_some());
    }
}

#[test]
fn blank_record_pads_the_end_of_a_file() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        // 4096 = 2 * 2000 + 96: the third 2000-byte entry leaves 96 bytes: fits? 2000+8 > 96.
        for _ in 0..3 {
            s.append_leader(Term(1), &[7u8; 2000 - HEADER_BYTES])
                .unwrap();
        }
        s.close().unwrap();
        let data = b.read("data/00000000000000000000").unwrap();
        assert_eq!(
            &data[4000..4004],
            &(-1i32).to_be_bytes(),
            "{name}: blank magic"
        );
        assert_eq!(
            &data[4004..4008],
            &96i32.to_be_bytes(),
            "{name}: blank covers the rest"
        );
        let next = b.read("data/00000000000000004096").unwrap();
        let h = decode_header(&next[..HEADER_BYTES]).unwrap();
        assert_eq!((h.index, h.pos), (Index(2), Pos(4096)));
    }
}

#[test]
fn follower_reproduces_the_leader_files_and_rejects_mismatches() {
    for (name, leader_b) in Backend::both() {
        let follower_b = Backend::mem();
        let mut leader = leader_b.open(&small_cfg()).unwrap();
        let mut follower = follower_b.open(&small_cfg()).unwrap();
        fill(&mut leader, 120);
        for i in 0..120 {
            let e = leader.get(Index(i)).unwrap();
            let fe = FollowerEntry {
                index: e.index,
                term: e.term,
                pos: e.pos,
                body_crc: e.body_crc,
                body: &e.body,
            };
            if i == 40 {
                let bad = FollowerEntry {
                    index: Index(41),
                    ..fe
                };
                assert!(
                    matches!(
                        follower.append_follower(bad),
                        Err(StoreError::IndexMismatch { .. })
                    ),
                    "{name}"
                );
                let bad = FollowerEntry {
                    pos: Pos(e.pos.0 + 1),
                    ..fe
                };
                assert!(
                    matches!(
                        follower.append_follower(bad),
                        Err(StoreError::PosMismatch { .. })
                    ),
                    "{name}"
                );
                let mut flipped = e.body.to_vec();
                flipped[0] ^= 1;
                let bad = FollowerEntry {
                    body: &flipped,
                    ..fe
                };
                assert!(
                    matches!(
                        follower.append_follower(bad),
                        Err(StoreError::ReceivedCorrupt { .. })
                    ),
                    "{name}"
                );
            }
            let a = follower.append_follower(fe).unwrap();
            assert_eq!(a.pos, e.pos);
        }
        leader.close().unwrap();
        follower.close().unwrap();
        // Identical files; the leader may also hold a preallocated, all-zero next file.
        for f in leader_b.data_files() {
            match follower_b.read(&f) {
                Some(fb) => assert!(leader_b.read(&f).unwrap() == fb, "{name}: {f} differs"),
                None => assert!(
                    leader_b.read(&f).unwrap().iter().all(|x| *x == 0),
                    "{name}: extra {f} not empty"
                ),
            }
        }
        assert!(follower_b
            .data_files()
            .iter()
            .all(|f| leader_b.read(f).is_some()));
    }
}

#[test]
fn truncate_cuts_data_index_files_and_clamps_committed() {
    for (name, b) in Backend::both() {
        let cfg = small_cfg();
        let mut s = b.open(&cfg).unwrap();
        fill(&mut s, 150);
        s.advance_committed(Index(100));
        let files_before = b.data_files().len();
        s.truncate_after(Some(Index(119))).unwrap();
        assert_eq!(s.end_index(), Some(Index(119)), "{name}");
        assert_eq!(s.end_term(), Some(Term(12)));
        assert_eq!(s.committed_index(), Some(Index(100)));
        assert_eq!(s.end_pos(), s.get(Index(119)).unwrap().end_pos());
        assert!(
            b.data_files().len() < files_before,
            "{name}: files after the cut removed"
        );
        // Below committed: allowed but clamped (R7).
        s.truncate_after(Some(Index(90))).unwrap();
        assert_eq!(s.committed_index(), Some(Index(90)));
        assert_eq!(s.reader().committed_index(), Some(Index(90)));
        assert_eq!(s.committed_end_pos(), s.end_pos());
        // Appends continue at the cut with a new term; old entries do not come back.
        for i in 91..130 {
            s.append_leader(Term(50), &body(i + 1000)).unwrap();
        }
        s.close().unwrap();
        let s = b.open(&cfg).unwrap();
        assert_eq!(s.end_index(), Some(Index(129)), "{name}");
        check_all(&s, 91);
        for i in 91..130 {
            assert_eq!(
                s.get(Index(i)).unwrap().body.as_ref(),
                body(i + 1000).as_slice()
            );
        }
        drop(s);
        let mut s = b.open(&cfg).unwrap();
        s.truncate_after(None).unwrap();
        assert_eq!(
            (s.begin_index(), s.end_index(), s.end_pos()),
            (None, None, Pos(0)),
            "{name}"
        );
        s.append_leader(Term(60), b"x").unwrap();
        s.close().unwrap();
        assert_eq!(b.open(&cfg).unwrap().end_index(), Some(Index(0)));
    }
}

#[test]
fn readers_see_committed_entries_only_and_by_physical_offset() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        fill(&mut s, 30);
        let r = s.reader();
        assert!(r.get(Index(0)).is_err(), "{name}: nothing committed yet");
        assert_eq!(
            s.advance_committed(Index(500)),
            Some(Index(29)),
            "capped at end"
        );
        assert_eq!(
            s.advance_committed(Index(10)),
            Some(Index(29)),
            "never decreases"
        );
        let r2 = r.clone();
        let h = std::thread::spawn(move || {
            (0..30)
                .map(|i| r2.get(Index(i)).unwrap().body)
                .collect::<Vec<_>>()
        });
        let bodies = h.join().unwrap();
        for (i, bd) in bodies.iter().enumerate() {
            assert_eq!(bd.as_ref(), body(i as u64).as_slice());
        }
        let e = s.get(Index(7)).unwrap();
        assert_eq!(r.read_message(e.pos.0 + 48).unwrap(), e.body);
        assert!(r.read_message(e.pos.0 + 49).is_err(), "not an entry start");
        s.append_leader(Term(9), b"uncommitted").unwrap();
        let last = s.get(Index(30)).unwrap();
        assert!(r.read_at(last.pos).is_err(), "{name}: above committed");
        assert!(r.get(Index(30)).is_err());
    }
}

#[test]
fn committed_runs_walk_the_files_and_match_entry_by_entry_reads() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        fill(&mut s, 200);
        assert!(b.data_files().len() > 5, "{name}: the run crosses files");
        s.advance_committed(Index(150));
        let r = s.reader();
        for from in [0u64, 1, 37, 150] {
            let mut seen = Vec::new();
            let n = r
                .with_committed_run(Index(from), Index(150), |e| {
                    seen.push((e.index, e.pos, e.body.to_vec()));
                    true
                })
                .unwrap();
            assert_eq!(n, 151 - from, "{name}: from {from}");
            for (k, (index, pos, bd)) in seen.iter().enumerate() {
                let e = r.get(Index(from + k as u64)).unwrap();
                assert_eq!((*index, *pos), (e.index, e.pos), "{name}");
                assert_eq!(bd.as_slice(), e.body.as_ref(), "{name}");
            }
        }
        let mut handed = 0;
        let n = r
            .with_committed_run(Index(3), Index(100), |_| {
                handed += 1;
                handed < 10
            })
            .unwrap();
        assert_eq!((n, handed), (10, 10), "{name}: stops when told");
        assert!(
            matches!(
                r.with_committed_run(Index(140), Index(151), |_| true),
                Err(StoreError::IndexOutOfRange { .. })
            ),
            "{name}: the whole run must be committed"
        );
        assert_eq!(
            r.with_committed_run(Index(9), Index(8), |_| true).unwrap(),
            0
        );
    }
}

#[test]
fn get_range_is_bounded_by_count_and_bytes() {
    for (_, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        fill(&mut s, 50);
        assert_eq!(s.get_range(Index(10), 5, u64::MAX).unwrap().len(), 5);
        let r = s.get_range(Index(10), 100, 1000).unwrap();
        let bytes: u64 = r.iter().map(|e| u64::from(e.size())).sum();
        assert!(bytes <= 1000 && !r.is_empty());
        assert_eq!(
            s.get_range(Index(49), 100, 1).unwrap().len(),
            1,
            "always one entry"
        );
        assert_eq!(
            s.get_range(Index(45), 100, u64::MAX).unwrap().len(),
            5,
            "stops at end"
        );
    }
}

#[test]
fn append_hook_patches_the_body_before_the_crc() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        s.append_leader(Term(1), &[0u8; 100]).unwrap();
        let a = s
            .append_leader_with(Term(1), &[0u8; 100], |pos, body| {
                body[28..36].copy_from_slice(&(pos.0 as i64 + 48).to_be_bytes())
            })
            .unwrap();
        s.advance_committed(Index(1));
        let m = s.reader().read_message(a.pos.0 + 48).unwrap();
        assert_eq!(&m[28..36], &(a.pos.0 as i64 + 48).to_be_bytes(), "{name}");
        s.close().unwrap();
        b.open(&small_cfg()).unwrap();
    }
}

#[test]
fn hard_state_and_checkpoint_survive_reopen() {
    for (name, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        assert_eq!(s.hard_state().term, Term(0));
        s.save_hard_state(Term(7), Some("n1")).unwrap();
        fill(&mut s, 10);
        s.advance_committed(Index(4));
        s.write_checkpoint().unwrap();
        s.abandon();
        assert_eq!(
            b.read("currterm").unwrap(),
            b"currTerm=7\nvoteLeader=n1\n",
            "{name}"
        );
        assert_eq!(
            b.read("checkpoint").unwrap(),
            b"endIndex=9\ncommittedIndex=4\n"
        );
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(s.hard_state().voted_for.as_deref(), Some("n1"));
        assert_eq!(s.committed_index(), Some(Index(4)));
        assert_eq!(s.committed_end_pos(), s.get(Index(4)).unwrap().end_pos());
    }
}

#[test]
fn oversized_body_and_term_regression_are_refused() {
    for (_, b) in Backend::both() {
        let mut s = b.open(&small_cfg()).unwrap();
        assert!(matches!(
            s.append_leader(Term(1), &vec![0u8; 4096]),
            Err(StoreError::BodyTooLarge { .. })
        ));
        s.append_leader(Term(5), b"a").unwrap();
        assert!(matches!(
            s.append_leader(Term(4), b"b"),
            Err(StoreError::TermRegression { .. })
        ));
        assert_eq!(s.end_index(), Some(Index(0)));
    }
}

#[test]
fn sync_mode_flushed_position_covers_each_append() {
    let b = Backend::fs();
    let cfg = dledger_commitlog::LedgerConfig {
        flush_mode: dledger_commitlog::FlushMode::Sync,
        ..small_cfg()
    };
    let mut s = b.open(&cfg).unwrap();
    let r = s.reader();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for i in 0..50 {
        let a = s.append_leader(Term(1), &body(i)).unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), r.wait_flushed(a.end_pos)).await
        })
        .expect("durable in time")
        .unwrap();
        assert!(s.flush_progress().flushed >= a.end_pos);
    }
}

#[test]
fn cleaner_deletes_old_files_up_to_the_floor_and_sets_disk_full() {
    use dledger_commitlog::store::CleanInput;
    for (name, b) in Backend::both() {
        let cfg = dledger_commitlog::LedgerConfig {
            file_reserved_hours: 1,
            ..small_cfg()
        };
        let mut s = b.open(&cfg).unwrap();
        fill(&mut s, 200);
        s.advance_committed(Index(199));
        let far_future = u64::MAX / 2;
        let input = CleanInput {
            now_ms: far_future,
            local_hour: 4,
            disk_usage_ratio: 0.1,
            keep_from: Index(60),
        };
        let rep = s.clean(input).unwrap();
        assert!(!rep.deleted_data_files.is_empty(), "{name}");
        let begin = s.begin_index().unwrap();
        assert!(
            begin <= Index(60) && begin > Index(0),
            "{name}: begin {begin}"
        );
        assert_eq!(s.reader().begin_index(), Some(begin));
        assert!(s.get(Index(begin.0 - 1)).is_err());
        for i in begin.0..200 {
            assert_eq!(s.get(Index(i)).unwrap().body.as_ref(), body(i).as_slice());
        }
        let full = CleanInput {
            disk_usage_ratio: 0.96,
            local_hour: 10,
            ..input
        };
        assert!(s.clean(full).unwrap().disk_full);
        assert!(
            matches!(
                s.append_leader(Term(99), b"x"),
                Err(StoreError::DiskFull(_))
            ),
            "{name}"
        );
        s.clean(CleanInput {
            disk_usage_ratio: 0.2,
            local_hour: 10,
            ..input
        })
        .unwrap();
        s.append_leader(Term(99), b"x").unwrap();
        s.close().unwrap();
        let s = b.open(&cfg).unwrap();
        assert_eq!(
            s.begin_index(),
            Some(begin),
            "{name}: begin re-derived from the first file"
        );
        assert_eq!(s.end_index(), Some(Index(200)));
    }
}

#[test]
fn next_file_is_preallocated_ahead_of_need() {
    let b = Backend::fs();
    let mut s = b.open(&small_cfg()).unwrap();
    s.append_leader(Term(1), b"first").unwrap();
    // Poll (no sleeps for synchronization) until the background thread created the next
    // data and index files, while the writer is still in the first ones.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let full = |name: &str, len: usize| b.read(name).is_some_and(|d| d.len() == len);
    while !(full("data/00000000000000004096", 4096) && full("index/00000000000000002048", 2048)) {
        assert!(
            std::time::Instant::now() < deadline,
            "next files not preallocated: {:?}",
            b.names()
        );
        std::thread::yield_now();
    }
    assert_eq!(s.end_pos(), Pos(53));
}

#[test]
fn sync_mode_group_commit_releases_every_burst() {
    // Bursts of 1..=64 appends followed by one wait for the last: one group commit must cover
    // the whole burst, and no wake-up may be lost between bursts (the wait would time out).
    let b = Backend::fs();
    let cfg = dledger_commitlog::LedgerConfig {
        flush_mode: dledger_commitlog::FlushMode::Sync,
        ..small_cfg()
    };
    let mut s = b.open(&cfg).unwrap();
    let r = s.reader();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut i = 0;
    for burst in [1u64, 64, 2, 33, 1, 1, 64, 7] {
        let mut last = Pos(0);
        for _ in 0..burst {
            last = s.append_leader(Term(1), &body(i)).unwrap().end_pos;
            i += 1;
        }
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), r.wait_flushed(last)).await
        })
        .expect("burst durable in time")
        .unwrap();
        assert!(s.flush_progress().flushed >= last);
    }
}

#[test]
fn files_published_before_they_are_populated_keep_every_entry() {
    // 2 MiB data files: the background thread publishes each next file at once and populates
    // it in chunks while the writer may already be writing it.
    let b = Backend::fs();
    let cfg = dledger_commitlog::LedgerConfig {
        data_segment_bytes: 2 << 20,
        index_segment_bytes: 64 << 10,
        ..small_cfg()
    };
    let mut s = b.open(&cfg).unwrap();
    let n = 3_000u64;
    let big = |i: u64| -> Vec<u8> {
        let mut v = body(i);
        v.resize(2_000 + (i % 7) as usize * 300, i as u8);
        v
    };
    for i in 0..n {
        s.append_leader(Term(1), &big(i)).unwrap();
    }
    s.advance_committed(Index(n - 1));
    assert!(s.end_pos().0 > 3 * (2 << 20), "crosses several files");
    for i in 0..n {
        assert_eq!(s.get(Index(i)).unwrap().body.as_ref(), big(i).as_slice());
    }
    s.close().unwrap();
    let s = b.open(&cfg).unwrap();
    assert_eq!(s.end_index(), Some(Index(n - 1)));
    assert_eq!(
        s.get(Index(n - 1)).unwrap().body.as_ref(),
        big(n - 1).as_slice()
    );
}
