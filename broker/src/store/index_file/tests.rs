// Goal: the key index finds every indexed record by key within a time range, across file
// rolls and restarts, and stays bounded on damaged chains. Method: tiny index files (few
// slots so chains collide, few entries so files roll) in a temp dir.

use super::*;

const T0: i64 = 1_700_000_000_000;

fn small() -> IndexConfig {
    IndexConfig {
        hash_slots: 2,
        max_entries: 6,
    }
}

#[test]
fn file_names_and_hash() {
    assert_eq!(index_file_name(1_700_000_000_123), "20231114221320123");
    assert_eq!(index_file_name(0), "19700101000000000");
    assert!(index_key_hash("TopicTest", "k1") >= 0);
    assert_eq!(
        index_key_hash("T", "k"),
        java_string_hash("T#k").abs(),
        "topic#key, like Java's buildKey"
    );
    for (t, k) in [
        ("TopicTest", "UNIQ0123456789"),
        ("主题", "ключ"),
        ("T", "\u{1F600}"),
    ] {
        let whole = format!("{t}#{k}");
        let h = java_string_hash(&whole);
        let want = if h == i32::MIN { 0 } else { h.abs() };
        assert_eq!(index_key_hash(t, k), want, "{whole}");
    }
}

#[test]
fn finds_keys_and_uniq_keys_across_rolls_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = KeyIndex::open(dir.path(), small()).unwrap();
        assert_eq!(idx.last_physical_offset(), 0);
        for i in 0..10i64 {
            let keys = format!("order{} shared", i % 3);
            let uniq = format!("UNIQ{i}");
            idx.index_message(
                "T",
                Some(keys.as_bytes()),
                Some(uniq.as_bytes()),
                48 + i * 200,
                T0 + i * 1000,
            )
            .unwrap();
        }
        // 30 keys, 5 entries per file (entry numbers 1..=5).
        assert_eq!(idx.file_count(), 6);
        assert_eq!(idx.last_physical_offset(), 48 + 9 * 200);
        idx.flush().unwrap();
    }
    let idx = KeyIndex::open(dir.path(), small()).unwrap();
    assert_eq!(idx.file_count(), 6);
    let r = idx.query("T", "UNIQ4", 10, 0, i64::MAX).unwrap();
    assert_eq!(r.physical_offsets, vec![48 + 800]);
    assert_eq!(r.last_update_phys_offset, 48 + 9 * 200);
    assert_eq!(r.last_update_timestamp, T0 + 9000);
    let mut order1 = idx
        .query("T", "order1", 10, 0, i64::MAX)
        .unwrap()
        .physical_offsets;
    order1.sort();
    assert_eq!(order1, vec![48 + 200, 48 + 800, 48 + 1400]);
    // Newest first, bounded by maxNum.
    let shared = idx
        .query("T", "shared", 3, 0, i64::MAX)
        .unwrap()
        .physical_offsets;
    assert_eq!(shared, vec![48 + 1800, 48 + 1600, 48 + 1400]);
    // Time range: second precision, widened by one second before `begin`.
    let ranged = idx.query("T", "shared", 10, T0 + 2000, T0 + 4000).unwrap();
    let mut got = ranged.physical_offsets;
    got.sort();
    assert_eq!(got, vec![48 + 200, 48 + 400, 48 + 600, 48 + 800]);
    let ranged = idx.query("T", "shared", 10, T0 + 2001, T0 + 3999).unwrap();
    let mut got = ranged.physical_offsets;
    got.sort();
    assert_eq!(got, vec![48 + 400, 48 + 600]);
    // Another topic with the same key is a different hash.
    assert!(idx
        .query("Other", "UNIQ4", 10, 0, i64::MAX)
        .unwrap()
        .physical_offsets
        .is_empty());
    // Deleting expired files keeps the newest.
    assert_eq!(idx.delete_expired(48 + 1000).unwrap(), 3);
    assert_eq!(idx.file_count(), 3);
    assert_eq!(idx.delete_expired(i64::MAX).unwrap(), 2);
    assert_eq!(idx.file_count(), 1);
}

#[test]
fn damaged_chains_terminate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = IndexConfig {
        hash_slots: 1,
        max_entries: 100,
    };
    let idx = KeyIndex::open(dir.path(), cfg).unwrap();
    for i in 0..5 {
        idx.put_key("T", "k", 48 + i, T0).unwrap();
    }
    let f = &idx.files()[0];
    // Make entry 2 point forward to 4 (a cycle in a damaged file).
    assert!(f.map.store_i32(f.entry_pos(2) as usize + 16, 4));
    let r = idx.query("T", "k", 100, 0, i64::MAX).unwrap();
    assert_eq!(r.physical_offsets, vec![52, 51, 50, 49]);
}

#[test]
fn rejects_files_of_the_wrong_size_and_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("20231114221320123"), b"short").unwrap();
    assert!(matches!(
        KeyIndex::open(dir.path(), small()),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(KeyIndex::open(
        dir.path(),
        IndexConfig {
            hash_slots: 0,
            max_entries: 5
        }
    )
    .is_err());
}

#[test]
fn records_without_keys_advance_the_end_offset() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = KeyIndex::open(dir.path(), small()).unwrap();
        idx.index_message("T", None, None, 48, T0).unwrap();
        assert_eq!(idx.last_physical_offset(), 48);
        idx.index_message("T", None, Some(b"U1"), 248, T0).unwrap();
        idx.index_message("T", Some(b""), None, 448, T0).unwrap();
        assert_eq!(idx.last_physical_offset(), 448);
        idx.flush().unwrap();
    }
    let idx = KeyIndex::open(dir.path(), small()).unwrap();
    assert_eq!(idx.last_physical_offset(), 448);
    let r = idx.query("T", "U1", 10, 0, i64::MAX).unwrap();
    assert_eq!(r.physical_offsets, vec![248]);
}

#[test]
fn entries_counted_but_never_written_are_dropped_and_their_chains_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = IndexConfig {
        hash_slots: 2,
        max_entries: 100,
    };
    {
        let idx = KeyIndex::open(dir.path(), cfg).unwrap();
        for i in 0..8i64 {
            idx.put_key("T", &format!("k{i}"), 48 + i * 100, T0)
                .unwrap();
        }
        idx.flush().unwrap();
    }
    // Crash: the header (count 9) reached the disk, the last three entries did not.
    let path = fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    let entries = INDEX_HEADER_LEN + u64::from(cfg.hash_slots) * HASH_SLOT_LEN;
    for n in 6..9u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 20], entries + n * INDEX_ENTRY_LEN)
            .unwrap();
    }
    drop(f);
    let idx = KeyIndex::open(dir.path(), cfg).unwrap();
    // Entries 1..=5 (k0..k4) are kept; the end offset is k4's, so k5.. are re-indexed.
    assert_eq!(idx.last_physical_offset(), 48 + 400);
    for i in 0..5i64 {
        let r = idx.query("T", &format!("k{i}"), 10, 0, i64::MAX).unwrap();
        assert_eq!(r.physical_offsets, vec![48 + i * 100], "k{i}");
    }
    for i in 5..8i64 {
        idx.put_key("T", &format!("k{i}"), 48 + i * 100, T0)
            .unwrap();
    }
    for i in 0..8i64 {
        let r = idx.query("T", &format!("k{i}"), 10, 0, i64::MAX).unwrap();
        assert_eq!(r.physical_offsets, vec![48 + i * 100], "k{i}");
    }
}

#[test]
fn key_hash_of_bytes_matches_the_text_hash_and_skips_non_utf8() {
    for key in [
        "",
        "k",
        "ORDER-1",
        "7F0000010000AAAABBBBCCCCDDDDEEEE",
        "clé",
        "\u{1F600}x",
    ] {
        assert_eq!(
            index_key_hash_bytes("TopicA", key.as_bytes()),
            Some(index_key_hash("TopicA", key)),
            "{key:?}"
        );
    }
    assert_eq!(index_key_hash_bytes("TopicA", b"\xff\xfe"), None);
}
