//! The member's directory: segment files under `data/` and `index/`, state files at the root.
//! One enum over the real filesystem and the in-memory disk, so the store above is the same
//! code for both.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use super::atomic_file;
use super::fault::{FaultPoint, Faults};
use super::mem_disk::MemDisk;
use super::mmap_segment::MmapSegment;
use super::preallocate;
use super::segment::{segment_name, Kind, Segment};

/// A file found in `data/` or `index/`.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) name: String,
    pub(crate) len: u64,
    pub(crate) modified_ms: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum Dir {
    /// `large_folios`: give new mappings the huge-page hint (see `MmapSegment::map`).
    Fs {
        root: PathBuf,
        faults: Arc<Faults>,
        large_folios: bool,
    },
    Mem(MemDisk),
}

impl Dir {
    /// Creates the directories if needed.
    pub(crate) fn prepare(&self) -> io::Result<()> {
        if let Dir::Fs { root, .. } = self {
            fs::create_dir_all(root.join("data"))?;
            fs::create_dir_all(root.join("index"))?;
        }
        Ok(())
    }

    /// Human-readable path of a segment file.
    pub(crate) fn display(&self, kind: Kind, name: &str) -> String {
        match self {
            Dir::Fs { root, .. } => root.join(kind.dir_name()).join(name).display().to_string(),
            Dir::Mem(_) => format!("{}/{}", kind.dir_name(), name),
        }
    }

    pub(crate) fn list(&self, kind: Kind) -> io::Result<Vec<Listed>> {
        match self {
            Dir::Fs { root, .. } => {
                let mut out = Vec::new();
                for e in fs::read_dir(root.join(kind.dir_name()))? {
                    let e = e?;
                    let meta = e.metadata()?;
                    if !meta.is_file() {
                        continue;
                    }
                    let modified_ms = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_millis() as u64);
                    out.push(Listed {
                        name: e.file_name().to_string_lossy().into_owned(),
                        len: meta.len(),
                        modified_ms,
                    });
                }
                Ok(out)
            }
            Dir::Mem(m) => Ok(m
                .list(kind.dir_name())
                .into_iter()
                .map(|(name, len, modified_ms)| Listed {
                    name,
                    len,
                    modified_ms,
                })
                .collect()),
        }
    }

    /// Opens an existing segment, zero-extending it to `len` if short.
    pub(crate) fn open_segment(&self, kind: Kind, start: u64, len: u64) -> io::Result<Segment> {
        let name = segment_name(start);
        match self {
            Dir::Fs {
                root,
                faults,
                large_folios,
            } => {
                let path = root.join(kind.dir_name()).join(&name);
                let seg = MmapSegment::open(&path, len, *large_folios)?;
                Ok(Segment::mmap(kind, start, seg, len, faults.clone()))
            }
            Dir::Mem(m) => {
                let f = m.open_segment(&format!("{}/{}", kind.dir_name(), name), len)?;
                Ok(Segment::mem(kind, start, f, m.faults().clone()))
            }
        }
    }

    /// Creates and allocates a new segment. `now`: also pre-faults the part the writer
    /// reaches first (`preallocate::ahead`) and makes its name durable before returning;
    /// otherwise (background creation) the caller populates it and the name is synced later
    /// (a flush syncs it first if still needed).
    pub(crate) fn create_segment(
        &self,
        kind: Kind,
        start: u64,
        len: u64,
        now: bool,
    ) -> io::Result<Segment> {
        let name = segment_name(start);
        match self {
            Dir::Fs {
                root,
                faults,
                large_folios,
            } => {
                faults.check(kind.create_point())?;
                let dir = root.join(kind.dir_name());
                let prefix = now.then(|| preallocate::ahead(kind));
                let seg = MmapSegment::create(&dir.join(&name), len, prefix, *large_folios)?;
                Ok(Segment::mmap(kind, start, seg, len, faults.clone()))
            }
            Dir::Mem(m) => {
                let f = m.create_segment(
                    &format!("{}/{}", kind.dir_name(), name),
                    len,
                    kind.create_point(),
                )?;
                Ok(Segment::mem(kind, start, f, m.faults().clone()))
            }
        }
    }

    /// Deletes a segment file (readers holding the mapping keep reading it).
    pub(crate) fn remove_segment(&self, kind: Kind, start: u64) -> io::Result<()> {
        let name = segment_name(start);
        match self {
            Dir::Fs { root, .. } => {
                let dir = root.join(kind.dir_name());
                match fs::remove_file(dir.join(&name)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                atomic_file::sync_dir(&dir)
            }
            Dir::Mem(m) => {
                m.remove_segment(&format!("{}/{}", kind.dir_name(), name));
                Ok(())
            }
        }
    }

    pub(crate) fn read_state(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match self {
            Dir::Fs { root, .. } => atomic_file::read_optional(root, name),
            Dir::Mem(m) => Ok(m.read_state(name)),
        }
    }

    pub(crate) fn write_state(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        match self {
            Dir::Fs { root, faults, .. } => {
                faults.check(FaultPoint::StateFileWrite)?;
                atomic_file::write_atomic(root, name, bytes)
            }
            Dir::Mem(m) => m.write_state(name, bytes),
        }
    }
}
