//! Bytes a directory tree occupies on disk (the broker's store root). Blocking filesystem
//! walk: call it from `spawn_blocking` or a sampler thread, never on a reactor thread.

use std::fs;
use std::io;
use std::path::Path;

/// Deepest directory level walked (the store layout is a few levels deep; this also stops
/// pathological trees).
const MAX_DEPTH: usize = 16;

/// Allocated bytes of every regular file under `root` (on Unix the allocated blocks, so sparse
/// preallocated segments count what they use; elsewhere the file length). Symbolic links are
/// not followed; entries that vanish during the walk are skipped.
pub fn disk_usage_bytes(root: &Path) -> io::Result<u64> {
    let meta = fs::symlink_metadata(root)?;
    if !meta.is_dir() {
        return Ok(allocated(&meta));
    }
    let mut total = 0u64;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((entry.path(), depth + 1));
                }
            } else if meta.is_file() {
                total = total.saturating_add(allocated(&meta));
            }
        }
    }
    Ok(total)
}

#[cfg(unix)]
fn allocated(meta: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

#[cfg(not(unix))]
fn allocated(meta: &fs::Metadata) -> u64 {
    meta.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_in_nested_directories() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::write(dir.path().join("top"), vec![1u8; 10_000]).unwrap();
        fs::write(dir.path().join("a/b/deep"), vec![2u8; 20_000]).unwrap();
        let used = disk_usage_bytes(dir.path()).unwrap();
        // Allocation is in blocks: at least the data, at most a few blocks more per file.
        assert!((30_000..=30_000 + 2 * 64 * 1024).contains(&used), "{used}");
        assert!(disk_usage_bytes(&dir.path().join("missing")).is_err());
    }
}
