//! Goal: crash consistency of the storage (RELIABILITY.md §6(c) CC-01..08, CC-10, CC-12).
//! Method: build a reference log, damage copies of its files the way crashes, bit rot and
//! operators do, reopen, and check what recovery kept, repaired or refused. Most sweeps run on
//! the in-memory disk (same recovery code); samples run on real files. Random choices print
//! their seed (`STORE_TEST_SEED` replays).

#![allow(clippy::unwrap_used)]

mod store_common;

use std::sync::Arc;

use dledger_commitlog::format::index::INDEX_ENTRY_BYTES;
use dledger_commitlog::store::{
    CrashMode, FaultPoint, Faults, MemDisk, Store, StoreError, CURRTERM_FILE,
};
use dledger_commitlog::{Index, LedgerConfig, Term};
use store_common::*;

const N: u64 = 60;

/// A closed reference log of `N` entries with committed = `committed` checkpointed.
fn reference(b: &Backend, committed: u64) -> Vec<(u64, u64)> {
    let mut s = b.open(&small_cfg()).unwrap();
    fill(&mut s, N);
    s.advance_committed(Index(committed));
    let spans = (0..N)
        .map(|i| s.get(Index(i)).unwrap())
        .map(|e| (e.pos.0, e.end_pos().0))
        .collect();
    s.close().unwrap();
    spans
}

fn data_name(pos: u64) -> String {
    format!("data/{:020}", pos - pos % 4096)
}

/// Asserts the reopened log holds exactly entries `0..=end`, intact, and accepts the next.
fn assert_recovered(b: &Backend, end: u64, ctx: &str) {
    let mut s = b
        .open(&small_cfg())
        .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
    assert_eq!(s.end_index(), Some(Index(end)), "{ctx}");
    check_all(&s, end + 1);
    // Index holds exactly the surviving entries: the slot after the end is empty.
    let slot = (end + 1) * INDEX_ENTRY_BYTES as u64;
    let iname = format!("index/{:020}", slot - slot % (64 * 32));
    if let Some(idx) = b.read(&iname) {
        let off = (slot % (64 * 32)) as usize;
        assert!(
            idx[off..off + 32].iter().all(|x| *x == 0),
            "{ctx}: stale index entry after the end"
        );
    }
    let a = s.append_leader(Term(100), b"next").unwrap();
    assert_eq!(a.index, Index(end + 1), "{ctx}");
    s.close().unwrap();
    assert_eq!(
        b.open(&small_cfg()).unwrap().end_index(),
        Some(Index(end + 1)),
        "{ctx}: second reopen"
    );
}

fn cut(src: &Backend, at: u64, random: Option<&mut u64>) -> Backend {
    let b = src.copy_to_mem();
    let name = data_name(at);
    let mut data = b.read(&name).unwrap();
    let off = (at % 4096) as usize;
    match random {
        Some(state) => data[off..].iter_mut().for_each(|x| *x = rng(state) as u8),
        None => data[off..].fill(0),
    }
    b.write(&name, data);
    // Everything after the cut is lost: later files read as zeros.
    for f in b.data_files() {
        if f > name {
            b.write(&f, vec![0; 4096]);
        }
    }
    b
}

#[test]
fn cc01_torn_tail_at_every_byte_of_the_last_two_entries() {
    let reference_b = Backend::mem();
    let spans = reference(&reference_b, N - 3);
    let mut state = seed(1);
    let (from, to) = (spans[N as usize - 2].0, spans[N as usize - 1].1);
    for at in from..to {
        let expected = spans.iter().rposition(|(_, end)| *end <= at).unwrap() as u64;
        assert_recovered(
            &cut(&reference_b, at, None),
            expected,
            &format!("zero cut at {at}"),
        );
        assert_recovered(
            &cut(&reference_b, at, Some(&mut state)),
            expected,
            &format!("random cut at {at}"),
        );
    }
}

#[test]
fn cc01_torn_tail_on_real_files_sampled() {
    let reference_b = Backend::fs();
    let spans = reference(&reference_b, N - 3);
    let (from, to) = (spans[N as usize - 2].0, spans[N as usize - 1].1);
    for at in (from..to).step_by(23) {
        let expected = spans.iter().rposition(|(_, end)| *end <= at).unwrap() as u64;
        let b = Backend::fs();
        for n in reference_b.names() {
            std::fs::create_dir_all(b.root().unwrap().join("data")).unwrap();
            std::fs::create_dir_all(b.root().unwrap().join("index")).unwrap();
            let mut bytes = reference_b.read(&n).unwrap();
            if n == data_name(at) {
                bytes[(at % 4096) as usize..].fill(0);
            } else if n.starts_with("data/") && n > data_name(at) {
                continue; // later files lost entirely
            }
            b.write(&n, bytes);
        }
        assert_recovered(&b, expected, &format!("fs cut at {at}"));
    }
}

#[test]
fn cc01_power_loss_keeps_everything_flushed() {
    let mut state = seed(7);
    for round in 0..150 {
        let disk = MemDisk::new();
        let mut s = Store::open_in_memory(&disk, &small_cfg()).unwrap();
        let mut flushed_end = None;
        let n = 20 + rng(&mut state) % 60;
        for i in 0..n {
            s.append_leader(Term(1 + i / 10), &body(i)).unwrap();
            if rng(&mut state).is_multiple_of(7) {
                s.flush().unwrap();
                flushed_end = Some(i);
            }
        }
        let mode = match round % 3 {
            0 => CrashMode::DropUnflushed,
            1 => CrashMode::TearUnflushed {
                seed: rng(&mut state),
            },
            _ => CrashMode::KeepPageCache,
        };
        let after = disk.crash(mode);
        s.abandon();
        let s = Store::open_in_memory(&after, &small_cfg())
            .unwrap_or_else(|e| panic!("round {round} {mode:?}: {e}"));
        let end = s.end_index().map(|i| i.0);
        if mode == CrashMode::KeepPageCache {
            assert_eq!(end, Some(n - 1), "round {round}");
        }
        assert!(
            end >= flushed_end,
            "round {round} {mode:?}: lost flushed entries ({end:?} < {flushed_end:?})"
        );
        if let Some(e) = end {
            check_all(&s, e + 1);
        }
    }
}

/// The byte span `[start, end)` of a random committed entry, and a position in it.
fn committed_target(spans: &[(u64, u64)], state: &mut u64) -> (u64, u64) {
    let (a, z) = spans[(rng(state) % spans.len() as u64) as usize];
    (a, a + rng(state) % (z - a))
}

#[test]
fn cc02_every_single_bit_flip_in_committed_data_is_detected() {
    let reference_b = Backend::mem();
    let spans = reference(&reference_b, N - 1);
    let mut state = seed(2);
    for run in 0..1000 {
        let (_, at) = committed_target(&spans, &mut state);
        let bit = rng(&mut state) % 8;
        let b = reference_b.copy_to_mem();
        let name = data_name(at);
        let mut data = b.read(&name).unwrap();
        data[(at % 4096) as usize] ^= 1 << bit;
        b.write(&name, data);
        let digest = b.digest();
        match b.open(&small_cfg()) {
            Err(StoreError::CorruptCommitted { file, .. }) => {
                assert!(file.contains(&name[5..]), "run {run}: {file}")
            }
            other => panic!("run {run}: flip at {at} bit {bit} not refused: {other:?}"),
        }
        assert_eq!(b.digest(), digest, "run {run}: refused start changed files");
    }
}

#[test]
fn cc02_overwritten_runs_in_committed_data_are_detected() {
    let reference_b = Backend::mem();
    let spans = reference(&reference_b, N - 1);
    let mut state = seed(3);
    for run in 0..200 {
        let (_, at) = committed_target(&spans, &mut state);
        let b = reference_b.copy_to_mem();
        let name = data_name(at);
        let mut data = b.read(&name).unwrap();
        let off = (at % 4096) as usize;
        let end = (off + 512).min(4096);
        data[off..end]
            .iter_mut()
            .for_each(|x| *x = rng(&mut state) as u8);
        b.write(&name, data);
        assert!(
            matches!(
                b.open(&small_cfg()),
                Err(StoreError::CorruptCommitted { .. })
            ),
            "run {run} at {at}"
        );
    }
}

#[test]
fn cc02_corruption_is_never_served_by_a_running_store() {
    use std::os::unix::fs::FileExt;
    let b = Backend::fs();
    let mut s = b.open(&small_cfg()).unwrap();
    fill(&mut s, N);
    s.advance_committed(Index(N - 1));
    let spans: Vec<(u64, u64)> = (0..N)
        .map(|i| s.get(Index(i)).unwrap())
        .map(|e| (e.pos.0, e.end_pos().0))
        .collect();
    let r = s.reader();
    let mut state = seed(4);
    for run in 0..300 {
        let i = rng(&mut state) % N;
        let (a, z) = spans[i as usize];
        let at = a + rng(&mut state) % (z - a);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(b.root().unwrap().join(data_name(at)))
            .unwrap();
        let mut byte = [0u8];
        f.read_at(&mut byte, at % 4096).unwrap();
        f.write_at(&[byte[0] ^ (1 << (rng(&mut state) % 8))], at % 4096)
            .unwrap();
        assert!(
            r.get(Index(i)).is_err(),
            "run {run}: corrupt entry {i} served (byte {at})"
        );
        assert!(
            r.read_at(dledger_commitlog::Pos(a)).is_err(),
            "run {run}: corrupt entry {i} served by pos"
        );
        f.write_at(&byte, at % 4096).unwrap();
        assert_eq!(r.get(Index(i)).unwrap().body.as_ref(), body(i).as_slice());
    }
}

#[test]
fn cc03_checkpoint_ahead_of_data_is_reported() {
    for (name, b) in Backend::both() {
        reference(&b, 10);
        b.write("checkpoint", b"endIndex=200\ncommittedIndex=150\n".to_vec());
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(
            s.recovery_report().lost_committed,
            Some(Index(150)),
            "{name}"
        );
        assert_eq!(
            s.committed_index(),
            Some(Index(N - 1)),
            "{name}: clamped to the end"
        );
        check_all(&s, N);
    }
}

#[test]
fn cc04_missing_empty_or_garbage_checkpoint_starts_with_no_committed_index() {
    for (name, b) in Backend::both() {
        reference(&b, 10);
        for content in [
            None,
            Some(Vec::new()),
            Some(b"\xff\xfe garbage".to_vec()),
            Some(b"committedIndex=zz".to_vec()),
        ] {
            match content {
                None => b.remove("checkpoint"),
                Some(c) => b.write("checkpoint", c),
            }
            let s = b.open(&small_cfg()).unwrap();
            assert_eq!(s.committed_index(), None, "{name}");
            assert_eq!(s.end_index(), Some(Index(N - 1)));
            check_all(&s, N);
            s.abandon();
        }
    }
}

#[test]
fn cc05_missing_or_short_index_is_rebuilt() {
    for (name, b) in Backend::both() {
        reference(&b, 10);
        let files = b.index_files();
        assert!(!files.is_empty());
        for f in &files {
            b.remove(f);
        }
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(
            s.recovery_report().index_rebuilt_from,
            Some(Index(0)),
            "{name}"
        );
        check_all(&s, N);
        s.close().unwrap();
        // Short last index file.
        let last = b.index_files().into_iter().next().unwrap();
        let mut idx = b.read(&last).unwrap();
        idx.truncate(40 * 32 + 5);
        b.write(&last, idx);
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(
            s.recovery_report().index_rebuilt_from,
            Some(Index(40)),
            "{name}"
        );
        check_all(&s, N);
    }
}

#[test]
fn cc06_wrong_index_entries_are_rebuilt_from_the_first_mismatch() {
    let reference_b = Backend::mem();
    reference(&reference_b, 10);
    let mut state = seed(6);
    for run in 0..100 {
        let b = reference_b.copy_to_mem();
        let name = b.index_files()[0].clone();
        let mut idx = b.read(&name).unwrap();
        let first = rng(&mut state) % N;
        for k in [first, first + rng(&mut state) % 5] {
            if k < N {
                let off = (k * 32) as usize;
                idx[off..off + 32]
                    .iter_mut()
                    .for_each(|x| *x = rng(&mut state) as u8);
            }
        }
        b.write(&name, idx);
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(
            s.recovery_report().index_rebuilt_from,
            Some(Index(first)),
            "run {run}"
        );
        check_all(&s, N);
    }
}

#[test]
fn cc07_structural_damage_refuses_to_start_and_names_the_file() {
    for (name, src) in Backend::both() {
        reference(&src, 10);
        let files = src.data_files();
        assert!(files.len() >= 3);
        // Missing middle file.
        let b = src.copy_to_mem();
        b.remove(&files[1]);
        let digest = b.digest();
        match b.open(&small_cfg()) {
            Err(e @ StoreError::MissingSegment { .. }) => {
                assert!(e.to_string().contains(&files[1][5..]), "{name}: {e}")
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(b.digest(), digest);
        // Non-last file of the wrong size.
        let b = src.copy_to_mem();
        let mut d = b.read(&files[0]).unwrap();
        d.truncate(1000);
        b.write(&files[0], d);
        let digest = b.digest();
        match b.open(&small_cfg()) {
            Err(e @ StoreError::BadSegmentLength { .. }) => {
                assert!(e.to_string().contains(&files[0][5..]), "{name}: {e}")
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(b.digest(), digest);
        // Overlapping names.
        let b = src.copy_to_mem();
        b.write("data/00000000000000004000", b.read(&files[1]).unwrap());
        let digest = b.digest();
        match b.open(&small_cfg()) {
            Err(e @ StoreError::OverlappingSegment { .. }) => assert!(
                e.to_string().contains("00000000000000004000"),
                "{name}: {e}"
            ),
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(b.digest(), digest);
    }
    // On real files too: a shrunk non-last file is refused and left untouched.
    let b = Backend::fs();
    reference(&b, 10);
    let first = b.data_files()[0].clone();
    let mut d = b.read(&first).unwrap();
    d.truncate(100);
    b.write(&first, d);
    let digest = b.digest();
    assert!(matches!(
        b.open(&small_cfg()),
        Err(StoreError::BadSegmentLength { .. })
    ));
    assert_eq!(b.digest(), digest);
}

#[test]
fn cc07_short_last_file_is_zero_extended_and_recovered() {
    for (name, b) in Backend::both() {
        let spans = reference(&b, 10);
        let last = b
            .data_files()
            .into_iter()
            .rfind(|f| b.read(f).unwrap()[..4] != [0; 4])
            .unwrap();
        let mut d = b.read(&last).unwrap();
        let keep = 300;
        d.truncate(keep);
        b.write(&last, d);
        let start: u64 = last[5..].parse().unwrap();
        let expected = spans
            .iter()
            .rposition(|(_, end)| *end <= start + keep as u64)
            .unwrap() as u64;
        assert_recovered(&b, expected, name);
    }
}

#[test]
fn cc12_truncation_guard() {
    // Damage above the checkpoint, but later files still hold data: refuse.
    let b = Backend::mem();
    let mut s = b.open(&small_cfg()).unwrap();
    fill(&mut s, 150);
    s.advance_committed(Index(5));
    let spans: Vec<(u64, u64)> = (0..150)
        .map(|i| s.get(Index(i)).unwrap())
        .map(|e| (e.pos.0, e.end_pos().0))
        .collect();
    s.close().unwrap();
    let files = b.data_files();
    assert!(files.len() >= 4);
    let victim = spans
        .iter()
        .find(|(a, _)| *a >= 4096 && *a < 8192)
        .unwrap()
        .0;
    let mut d = b.read(&files[1]).unwrap();
    d[(victim % 4096) as usize + 10] ^= 0x40;
    b.write(&files[1], d);
    let digest = b.digest();
    match b.open(&small_cfg()) {
        Err(e @ StoreError::TruncationTooLarge { .. }) => {
            assert!(e.to_string().contains(&files[1][5..]), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.digest(), digest);
}

/// CC-08: a power loss at any step of the `currterm` write sequence (tmp written in part or
/// whole, renamed or not) leaves the old or the new term and vote, never a mix, and a later
/// save still works; an empty or unreadable `currterm` is refused by name and left untouched.
#[test]
fn cc08_currterm_write_steps_and_unreadable_file() {
    let b = Backend::fs();
    let root = b.root().unwrap().to_path_buf();
    let cur = root.join(CURRTERM_FILE);
    let tmp = root.join(format!("{CURRTERM_FILE}.tmp"));
    let mut s = b.open(&small_cfg()).unwrap();
    fill(&mut s, 3);
    s.save_hard_state(Term(4), Some("n1")).unwrap();
    s.close().unwrap();
    let state = |s: &Store| (s.hard_state().term, s.hard_state().voted_for.clone());
    let old = (Term(4), Some("n1".to_string()));
    let new_text = b"currTerm=5\nvoteLeader=n2\n".to_vec();
    // Crash before the rename: any prefix of the new text in the tmp file; the old state rules.
    for cut in 0..=new_text.len() {
        std::fs::write(&tmp, &new_text[..cut]).unwrap();
        let s = b.open(&small_cfg()).unwrap();
        assert_eq!(state(&s), old, "tmp cut at {cut}");
        assert_eq!(s.end_index(), Some(Index(2)));
        s.close().unwrap();
    }
    // Crash after the rename: the new state.
    std::fs::rename(&tmp, &cur).unwrap();
    let mut s = b.open(&small_cfg()).unwrap();
    assert_eq!(state(&s), (Term(5), Some("n2".to_string())));
    // A stale tmp left by an earlier crash does not disturb the next save.
    std::fs::write(&tmp, b"currTerm=9").unwrap();
    s.save_hard_state(Term(6), None).unwrap();
    s.close().unwrap();
    assert!(!tmp.exists());
    let s = b.open(&small_cfg()).unwrap();
    assert_eq!(state(&s), (Term(6), None));
    s.close().unwrap();
    // Unreadable in place (empty, no term, bad term, not text): refuse, name it, touch nothing.
    for bad in [
        &b""[..],
        b"voteLeader=n1\n",
        b"currTerm=\nvoteLeader=n1\n",
        b"currTerm=x5\n",
        b"\xff\xfe\x00currTerm=5\n",
    ] {
        std::fs::write(&cur, bad).unwrap();
        let before = b.digest();
        match b.open(&small_cfg()) {
            Err(e @ StoreError::BadStateFile { .. }) => {
                assert!(e.to_string().contains(CURRTERM_FILE), "{e}")
            }
            Err(e) => panic!("{bad:?}: wrong error {e}"),
            Ok(_) => panic!("{bad:?}: opened with an unreadable currterm"),
        }
        assert_eq!(
            b.digest(),
            before,
            "{bad:?}: files changed by a refused open"
        );
        assert_eq!(std::fs::read(&cur).unwrap(), bad);
    }
}

fn open_with(b: &Backend, faults: &Arc<Faults>, cfg: &LedgerConfig) -> Store {
    match b {
        Backend::Fs(d) => Store::open_with_faults(d.path(), cfg, faults.clone()).unwrap(),
        Backend::Mem(m) => Store::open_in_memory(m, cfg).unwrap(),
    }
}

#[test]
fn cc10_enospc_at_each_write_step() {
    let points = [
        FaultPoint::CreateDataSegment,
        FaultPoint::CreateIndexSegment,
        FaultPoint::DataWrite,
        FaultPoint::IndexWrite,
        FaultPoint::Flush,
        FaultPoint::StateFileWrite,
    ];
    for (name, b) in Backend::both() {
        for point in points {
            let b = match b {
                Backend::Fs(_) => Backend::fs(),
                Backend::Mem(_) => Backend::mem(),
            };
            let is_mem = matches!(b, Backend::Mem(_));
            if !is_mem && matches!(point, FaultPoint::DataWrite | FaultPoint::IndexWrite) {
                continue; // mmap writes cannot fail once the file is allocated
            }
            let faults = match &b {
                Backend::Mem(m) => m.faults().clone(),
                Backend::Fs(_) => Arc::new(Faults::default()),
            };
            let cfg = small_cfg();
            let mut s = open_with(&b, &faults, &cfg);
            fill(&mut s, 30);
            faults.arm(point, 0, libc::ENOSPC, true);
            let ctx = format!("{name} {point:?}");
            let mut acked = 29u64;
            let err = match point {
                FaultPoint::Flush => s.flush().unwrap_err(),
                FaultPoint::StateFileWrite => {
                    let e = s.save_hard_state(Term(3), Some("n2")).unwrap_err();
                    assert!(
                        matches!(s.write_checkpoint(), Err(StoreError::DiskFull(_))),
                        "{ctx}"
                    );
                    e
                }
                _ => loop {
                    match s.append_leader(Term(5), &body(acked + 1)) {
                        Ok(a) => acked = a.index.0,
                        Err(e) => break e,
                    }
                    assert!(acked < 400, "{ctx}: fault never fired");
                },
            };
            // A background flush may hit the fault first and poison the store.
            assert!(
                matches!(err, StoreError::DiskFull(_) | StoreError::Poisoned(_)),
                "{ctx}: {err:?}"
            );
            if point == FaultPoint::Flush {
                assert!(s.is_poisoned());
                assert!(
                    matches!(s.append_leader(Term(5), b"x"), Err(StoreError::Poisoned(_))),
                    "{ctx}"
                );
            }
            faults.clear();
            s.abandon();
            let s = match &b {
                Backend::Fs(d) => Store::open(d.path(), &cfg).unwrap(),
                Backend::Mem(m) => {
                    Store::open_in_memory(&m.crash(CrashMode::KeepPageCache), &cfg).unwrap()
                }
            };
            assert_eq!(
                s.end_index(),
                Some(Index(acked)),
                "{ctx}: failed append must not appear"
            );
            check_all(&s, 30);
            for i in 30..=acked {
                assert_eq!(
                    s.get(Index(i)).unwrap().body.as_ref(),
                    body(i).as_slice(),
                    "{ctx}"
                );
            }
            if point == FaultPoint::StateFileWrite {
                assert_eq!(s.hard_state().term, Term(0), "{ctx}: old currterm kept");
            }
        }
    }
}

#[test]
#[ignore = "slow: writes 1 GiB; run by hand with --ignored"]
fn cc05_reindex_one_gib_within_30_s() {
    let b = Backend::fs();
    let cfg = LedgerConfig {
        data_segment_bytes: 256 << 20,
        index_segment_bytes: 32 << 16,
        ..LedgerConfig::default()
    };
    let mut s = b.open(&cfg).unwrap();
    let body = vec![0x42u8; 4096];
    while s.end_pos().0 < 1 << 30 {
        s.append_leader(Term(1), &body).unwrap();
    }
    let end = s.end_index();
    s.close().unwrap();
    for f in b.index_files() {
        b.remove(&f);
    }
    let t = std::time::Instant::now();
    let s = b.open(&cfg).unwrap();
    let took = t.elapsed();
    println!(
        "re-indexed {} entries ({} bytes) in {took:?}",
        s.recovery_report().entries_scanned,
        s.recovery_report().bytes_scanned
    );
    assert_eq!(s.end_index(), end);
    assert_eq!(s.recovery_report().index_rebuilt_from, Some(Index(0)));
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
}
