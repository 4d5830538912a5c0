//! Creates the next data/index file ahead of need on a background thread (allocating and
//! pre-touching it), so the append path never pays for file creation or first-touch faults.
//! The writer waits only if it reaches a file whose creation is still in progress, and creates
//! it itself if nobody asked for it (or the background attempt failed: then it gets the error).
//!
//! Index files are small but, with small entries, needed often (2 MiB of index per ~11 MiB of
//! 128-byte entries); a data file takes tens of milliseconds to populate. So index jobs go
//! first, and a data file is populated in chunks with any waiting index job done in between:
//! the writer never stalls on an index file queued behind a data file.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::segment::Kind;
use super::shared::Shared;

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<(Kind, u64)>,
    in_progress: HashSet<(Kind, u64)>,
    stop: bool,
}

impl Queue {
    /// The next job: index files first (see the module doc), then in request order.
    fn pop_next(&mut self) -> Option<(Kind, u64)> {
        let i = self
            .pending
            .iter()
            .position(|(k, _)| *k == Kind::Index)
            .unwrap_or(0);
        self.pending.remove(i)
    }

    /// The next waiting index job, if any.
    fn pop_index(&mut self) -> Option<(Kind, u64)> {
        let i = self.pending.iter().position(|(k, _)| *k == Kind::Index)?;
        self.pending.remove(i)
    }
}

/// Bytes of a data file populated between two looks at the queue (a few milliseconds).
const POPULATE_CHUNK: u64 = 8 << 20;

#[derive(Debug, Default)]
pub(crate) struct PreallocState {
    q: Mutex<Queue>,
    cv: Condvar,
}

impl PreallocState {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for the segment starting at `start` (deduplicated).
    pub(crate) fn request(&self, kind: Kind, start: u64) {
        let mut q = self.lock();
        if q.stop || !q.in_progress.insert((kind, start)) {
            return;
        }
        q.pending.push_back((kind, start));
        drop(q);
        self.cv.notify_all();
    }

    /// Blocks while the segment at `start` is being created in the background.
    pub(crate) fn wait_idle(&self, kind: Kind, start: u64) {
        let mut q = self.lock();
        while q.in_progress.contains(&(kind, start)) && !q.stop {
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }
}

/// The background creator thread.
pub(crate) struct Preallocator {
    sh: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Preallocator {
    pub(crate) fn start(sh: Arc<Shared>) -> std::io::Result<Preallocator> {
        let t = sh.clone();
        let handle = std::thread::Builder::new()
            .name("dledger-prealloc".into())
            .spawn(move || run(&t))?;
        Ok(Preallocator {
            sh,
            handle: Some(handle),
        })
    }

    pub(crate) fn stop(&mut self) {
        self.sh.prealloc.stop();
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!("preallocation thread panicked");
            }
        }
    }
}

impl Drop for Preallocator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(sh: &Shared) {
    loop {
        let (kind, start) = {
            let mut q = sh.prealloc.lock();
            loop {
                if q.stop {
                    return;
                }
                if let Some(job) = q.pop_next() {
                    break job;
                }
                q = sh.prealloc.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        run_job(sh, kind, start);
    }
}

fn run_job(sh: &Shared, kind: Kind, start: u64) {
    create_one(sh, kind, start);
    release(sh, kind, start);
}

/// Marks the job finished and wakes a writer waiting for it.
fn release(sh: &Shared, kind: Kind, start: u64) {
    sh.prealloc.lock().in_progress.remove(&(kind, start));
    sh.prealloc.cv.notify_all();
}

/// Runs the index jobs waiting now (between two chunks of a data file); false once stopping.
fn run_waiting_index_jobs(sh: &Shared) -> bool {
    loop {
        let job = {
            let mut q = sh.prealloc.lock();
            if q.stop {
                return false;
            }
            q.pop_index()
        };
        match job {
            Some((kind, start)) => run_job(sh, kind, start),
            None => return true,
        }
    }
}

fn create_one(sh: &Shared, kind: Kind, start: u64) {
    let list = match kind {
        Kind::Data => &sh.data,
        Kind::Index => &sh.index,
    };
    let wanted =
        |segs: &Vec<Arc<super::segment::Segment>>| segs.last().is_some_and(|l| l.end() == start);
    if !wanted(&list.read()) {
        return;
    }
    match sh.dir.create_segment(kind, start, list.seg_len(), false) {
        Ok(seg) => {
            match kind {
                Kind::Index => seg.populate(0, seg.len()),
                Kind::Data => {
                    let mut off = 0;
                    while off < seg.len() {
                        seg.populate(off, POPULATE_CHUNK);
                        off += POPULATE_CHUNK;
                        if !run_waiting_index_jobs(sh) {
                            // Stopping: the rest is faulted in by the writer, if ever used.
                            break;
                        }
                    }
                }
            }
            let mut segs = list.write();
            if wanted(&segs) {
                segs.push(Arc::new(seg));
                drop(segs);
                release(sh, kind, start);
                // The name is made durable by the first flush that covers this file
                // (`Segment::flush`), not here: a directory fsync is a journal commit (up to
                // ~15 ms on this machine) and would hold up the next job the writer waits for.
                tracing::debug!(?kind, start, "next segment ready");
            } else {
                drop(segs);
                // The log was cut meanwhile; this file is not next any more.
                if let Err(e) = sh.dir.remove_segment(kind, start) {
                    tracing::warn!(?kind, start, error = %e, "removing a stale preallocated file failed");
                }
            }
        }
        Err(e) => {
            tracing::warn!(?kind, start, error = %e, "preallocating the next file failed; the writer will retry")
        }
    }
}
