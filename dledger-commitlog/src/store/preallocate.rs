//! Creates the next data/index file ahead of need on a background thread (allocating and
//! pre-faulting it), so the append path never pays for file creation and, as long as this
//! thread keeps up, takes no first-touch faults. The writer waits only if it reaches a file
//! whose creation this thread has started (open, allocate, map: short); it creates the file
//! itself if nobody asked for it, if the background attempt failed (then it gets the error),
//! or if this thread has not started on it yet: it takes the job back (`claim`) and this
//! thread populates the file afterwards. On a busy machine this thread may not run for
//! milliseconds, and the writer used to sleep that long at each file boundary (bench: up to
//! 200 ms per 256 MiB of 128-byte entries).
//!
//! Measured on a 2-core machine shared with other work (benches/store.rs), three rules:
//! * A file is published as soon as it exists and is populated right after, with the
//!   kernel's bulk populate that never writes (`MADV_POPULATE_WRITE`): when this thread falls
//!   behind, the writer faults the rest in itself rather than waiting for it. Without bulk
//!   populate, the file is touched page by page before it is published.
//! * Index files are small but, with small entries, needed often (2 MiB of index per ~11 MiB
//!   of 128-byte entries); populating a data file takes tens of milliseconds. So creations go
//!   first (index files first), a data file is populated after the waiting creations (a
//!   populate queue), in 2 MiB chunks with any creation asked for meanwhile done in between,
//!   skipping what the writer has already written and the 2 MiB just ahead of it (the writer
//!   faults those in itself: both working on the same large folio only makes one wait for
//!   the other).
//! * The directory fsync that makes a new name durable is left to the first flush that
//!   covers the file (a journal commit: up to ~15 ms here, it would hold up the next job).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::segment::{Kind, Segment};
use super::shared::Shared;

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<(Kind, u64)>,
    in_progress: HashSet<(Kind, u64)>,
    /// Files the writer created itself (claimed jobs), to populate ahead of it; done after
    /// any waiting creation, and nobody waits for them.
    populate: VecDeque<(Kind, u64)>,
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
}

/// Bytes of a data file populated between two looks at the queue (~0.5 ms).
const POPULATE_CHUNK: u64 = 2 << 20;
/// Bytes just ahead of the writer that are left to it (one large folio), once it has caught
/// up with this thread.
const WRITER_GAP: u64 = 2 << 20;

#[derive(Debug, Default)]
pub(crate) struct PreallocState {
    q: Mutex<Queue>,
    cv: Condvar,
    /// Whether the kernel populates in bulk: 0 not probed yet, 1 yes, 2 no.
    bulk: AtomicU8,
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

    /// Takes back a requested job the thread has not started yet: true if the caller now
    /// owns it (and creates the file itself). The writer does this rather than wait for a
    /// thread that, on a busy machine, may not run for milliseconds.
    pub(crate) fn claim(&self, kind: Kind, start: u64) -> bool {
        let mut q = self.lock();
        let Some(i) = q.pending.iter().position(|j| *j == (kind, start)) else {
            return false;
        };
        q.pending.remove(i);
        q.in_progress.remove(&(kind, start));
        true
    }

    /// Asks for the published segment starting at `start` to be populated ahead of the
    /// writer (a file the writer created itself after `claim`).
    pub(crate) fn request_populate(&self, kind: Kind, start: u64) {
        let mut q = self.lock();
        if q.stop {
            return;
        }
        q.populate.push_back((kind, start));
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
    populate_last_files(sh);
    loop {
        let (kind, start, create) = {
            let mut q = sh.prealloc.lock();
            loop {
                if q.stop {
                    return;
                }
                if let Some((kind, start)) = q.pop_next() {
                    break (kind, start, true);
                }
                if let Some((kind, start)) = q.populate.pop_front() {
                    break (kind, start, false);
                }
                q = sh.prealloc.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        if create {
            run_job(sh, kind, start);
        } else {
            populate_existing(sh, kind, start);
        }
    }
}

/// Populates a published segment the writer created itself (if it still exists).
fn populate_existing(sh: &Shared, kind: Kind, start: u64) {
    let list = match kind {
        Kind::Data => &sh.data,
        Kind::Index => &sh.index,
    };
    let Some(seg) = list.find(start).filter(|s| s.start() == start) else {
        return;
    };
    if !bulk_supported(sh, &seg) {
        return;
    }
    match kind {
        Kind::Index => {
            let _ = seg.populate_bulk(0, seg.len());
        }
        Kind::Data => populate_ahead_of_writer(sh, &seg),
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

/// Runs the creations waiting now (between two chunks of a data file: index files first, and
/// the next data file, so that it exists long before the writer needs it); false once
/// stopping.
fn run_waiting_creations(sh: &Shared) -> bool {
    loop {
        let job = {
            let mut q = sh.prealloc.lock();
            if q.stop {
                return false;
            }
            q.pop_next()
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
    let wanted = |segs: &Vec<Arc<Segment>>| segs.last().is_some_and(|l| l.end() == start);
    if !wanted(&list.read()) {
        return;
    }
    match sh.dir.create_segment(kind, start, list.seg_len(), false) {
        Ok(seg) => {
            // With the kernel's bulk populate, which never writes, a file is published right
            // after creation and populated just after, ahead of the writer: if this thread
            // falls behind (the cores are busy), the writer takes the remaining first-touch
            // faults itself instead of stalling on work it could do. Without it, the file is
            // touched page by page before anyone sees it.
            let bulk = bulk_supported(sh, &seg);
            if !bulk {
                seg.populate(0, seg.len());
            }
            let seg = Arc::new(seg);
            let mut segs = list.write();
            if wanted(&segs) {
                segs.push(seg.clone());
                drop(segs);
                release(sh, kind, start);
                // The name is made durable by the first flush that covers this file
                // (`Segment::flush`): see the module doc.
                tracing::debug!(?kind, start, "next segment ready");
                if bulk {
                    match kind {
                        // Small: at once (well under a millisecond).
                        Kind::Index => {
                            let _ = seg.populate_bulk(0, seg.len());
                        }
                        // After the creations waiting now (possibly from between two chunks
                        // of the file before this one).
                        Kind::Data => sh.prealloc.request_populate(kind, start),
                    }
                }
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

/// At open, the last data and index files were populated by an earlier process, if at all:
/// this one's page tables are new, so the unwritten rest is populated again before the
/// writer reaches it (bulk populate only; it never changes file contents).
fn populate_last_files(sh: &Shared) {
    let index = sh.index.read().last().cloned();
    if let Some(seg) = index {
        if bulk_supported(sh, &seg) {
            let _ = seg.populate_bulk(0, seg.len());
        }
    }
    let data = sh.data.read().last().cloned();
    if let Some(seg) = data {
        if bulk_supported(sh, &seg) {
            populate_ahead_of_writer(sh, &seg);
        }
    }
}

/// Whether the kernel populates in bulk: probed once, on the first page of a file, then
/// remembered (a probe per file faulted a whole large folio in before the file was
/// published, while the writer might be waiting for it).
fn bulk_supported(sh: &Shared, seg: &Segment) -> bool {
    match sh.prealloc.bulk.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = seg.populate_bulk(0, 1).is_ok();
            sh.prealloc
                .bulk
                .store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

/// Populates a published data file chunk by chunk, skipping what the writer has already
/// written and doing waiting index jobs in between.
fn populate_ahead_of_writer(sh: &Shared, seg: &Segment) {
    let mut off = 0;
    while off < seg.len() {
        if !run_waiting_creations(sh) {
            return;
        }
        // Relative to the file; none while the writer is still in an earlier file.
        let written = sh.flush.data_written().checked_sub(seg.start());
        let chunk_end = off + POPULATE_CHUNK;
        let from = written.map_or(off, |w| off.max(w + WRITER_GAP));
        if from < chunk_end && seg.populate_bulk(from, chunk_end - from).is_err() {
            return;
        }
        off += POPULATE_CHUNK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_not_started_can_be_claimed_once_and_then_nobody_waits_for_it() {
        let st = PreallocState::default();
        st.request(Kind::Data, 4096);
        st.request(Kind::Index, 64);
        assert!(st.claim(Kind::Data, 4096));
        assert!(!st.claim(Kind::Data, 4096), "claimed twice");
        // Not in progress any more: returns at once.
        st.wait_idle(Kind::Data, 4096);
        let mut q = st.lock();
        assert_eq!(q.pop_next(), Some((Kind::Index, 64)));
        assert_eq!(q.pop_next(), None, "the claimed job is gone from the queue");
        // A started job (popped) cannot be claimed: the writer waits for it instead.
        drop(q);
        assert!(!st.claim(Kind::Index, 64));
    }

    #[test]
    fn populate_requests_never_become_creations() {
        let st = PreallocState::default();
        st.request_populate(Kind::Data, 0);
        let mut q = st.lock();
        assert_eq!(q.pop_next(), None);
        assert_eq!(q.populate.pop_front(), Some((Kind::Data, 0)));
        assert!(q.in_progress.is_empty());
    }
}
