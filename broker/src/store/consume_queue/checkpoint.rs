//! The dispatch checkpoint, file `<cq_root>/.dispatched`: the log position through which the
//! dispatcher had fed every queue when all of them were last made durable (12 bytes: the
//! position i64 BE and its CRC32 u32 BE, replaced through a temporary file and a rename), and
//! the in-memory progress it is taken from.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::{lock, StoreError};

/// Name of the dispatch checkpoint file under the consume-queue root (not a topic: a file).
pub const DISPATCH_CHECKPOINT_FILE: &str = ".dispatched";

/// Checkpoint bytes: the position (i64 BE) and its CRC32 (u32 BE).
const CHECKPOINT_LEN: usize = 12;

/// The dispatcher's progress and the checkpoint on disk of one consume-queue root.
#[derive(Debug)]
pub(super) struct DispatchCheckpoint {
    root: PathBuf,
    /// Log position below which the dispatcher has handed every record to its queue (-1
    /// until the dispatcher says).
    dispatched_end: AtomicI64,
    /// The checkpoint on disk (`None`: no valid file); written under this lock.
    on_disk: Mutex<Option<i64>>,
}

impl DispatchCheckpoint {
    /// Reads the checkpoint of `root` (a missing, short or damaged file: none).
    pub(super) fn open(root: &Path) -> Result<Self, StoreError> {
        Ok(DispatchCheckpoint {
            root: root.to_path_buf(),
            dispatched_end: AtomicI64::new(-1),
            on_disk: Mutex::new(read_checkpoint(&root.join(DISPATCH_CHECKPOINT_FILE))?),
        })
    }

    /// The dispatcher has handed every record below `end_pos` to its queue.
    pub(super) fn note_dispatched_through(&self, end_pos: i64) {
        self.dispatched_end.store(end_pos, Ordering::Release);
    }

    /// The progress to record once the queues are flushed: read before the flush, every unit
    /// below it was stored before this load (release/acquire), so the flush covers it.
    pub(super) fn dispatched(&self) -> i64 {
        self.dispatched_end.load(Ordering::Acquire)
    }

    /// Records `dispatched` (from [`DispatchCheckpoint::dispatched`], before the queues were
    /// flushed) as the checkpoint, unless the dispatcher had not said yet.
    pub(super) fn record(&self, dispatched: i64) -> Result<(), StoreError> {
        if dispatched >= 0 {
            let mut cp = lock(&self.on_disk);
            if *cp != Some(dispatched) {
                write_checkpoint(&self.root, dispatched)?;
                *cp = Some(dispatched);
            }
        }
        Ok(())
    }

    /// The queues were cut at log position `cut_end`: neither the progress nor the checkpoint
    /// may claim the entries from there on any more.
    pub(super) fn cut(&self, cut_end: i64) -> Result<(), StoreError> {
        self.dispatched_end.fetch_min(cut_end, Ordering::AcqRel);
        let mut cp = lock(&self.on_disk);
        if cp.is_some_and(|c| c > cut_end) {
            write_checkpoint(&self.root, cut_end)?;
            *cp = Some(cut_end);
        }
        Ok(())
    }

    /// The checkpoint on disk.
    pub(super) fn on_disk(&self) -> Option<i64> {
        *lock(&self.on_disk)
    }
}

fn read_checkpoint(path: &Path) -> Result<Option<i64>, StoreError> {
    let b = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path)(e)),
    };
    let Some(b) = b.get(..CHECKPOINT_LEN) else {
        tracing::warn!(path = %path.display(), "short dispatch checkpoint ignored");
        return Ok(None);
    };
    let mut v = [0u8; 8];
    let mut c = [0u8; 4];
    v.copy_from_slice(&b[0..8]);
    c.copy_from_slice(&b[8..12]);
    if crc32fast::hash(&v) != u32::from_be_bytes(c) {
        tracing::warn!(path = %path.display(), "damaged dispatch checkpoint ignored");
        return Ok(None);
    }
    let pos = i64::from_be_bytes(v);
    Ok((pos >= 0).then_some(pos))
}

/// Writes the checkpoint through a temporary file and a rename, so a crash leaves the old or
/// the new value.
fn write_checkpoint(root: &Path, pos: i64) -> Result<(), StoreError> {
    fs::create_dir_all(root).map_err(StoreError::io(root))?;
    let tmp = root.join(".dispatched.tmp");
    let mut b = [0u8; CHECKPOINT_LEN];
    b[0..8].copy_from_slice(&pos.to_be_bytes());
    let crc = crc32fast::hash(&b[0..8]);
    b[8..12].copy_from_slice(&crc.to_be_bytes());
    let mut f = fs::File::create(&tmp).map_err(StoreError::io(&tmp))?;
    f.write_all(&b).map_err(StoreError::io(&tmp))?;
    f.sync_all().map_err(StoreError::io(&tmp))?;
    let path = root.join(DISPATCH_CHECKPOINT_FILE);
    fs::rename(&tmp, &path).map_err(StoreError::io(&path))?;
    Ok(())
}
