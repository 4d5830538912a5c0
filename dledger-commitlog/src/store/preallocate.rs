//! Creates the next data/index file ahead of need and pre-faults it, on two background
//! threads, so the append path never pays for file creation and, as long as they keep up,
//! takes no first-touch faults.
//!
//! * The creating thread only allocates, maps and publishes files (short jobs). The writer
//!   waits only if it reaches a file whose creation this thread has started; it creates the
//!   file itself if nobody asked for it, if the background attempt failed (then it gets the
//!   error), or if the thread has not started on it yet: it takes the job back (`claim`).
//! * The populating thread pre-faults published files (index files first: small but, with
//!   small entries, needed often, 2 MiB of index per ~11 MiB of 128-byte entries), with the
//!   kernel's bulk populate that never writes (`MADV_POPULATE_WRITE`), so it may run while
//!   the writer writes the same file: when it falls behind, the writer faults the rest in
//!   itself. A data file goes in 2 MiB chunks, skipping what the writer has written and the
//!   2 MiB just ahead of it (both on one large folio only makes one wait for the other).
//!   Without bulk populate, the creating thread touches a file page by page before
//!   publishing it.
//!
//! Why two threads, measured on a 2-core machine shared with other work (benches/store.rs):
//! populating is most of the background CPU (the kernel zeroes every new page), and a thread
//! that has just run for milliseconds may wait as long for its next turn on a busy machine.
//! With one thread doing both, the writer slept at file boundaries for a creation queued
//! behind or started after a populate pass (up to ~50 ms per wait, 200 ms per 256 MiB of
//! 128-byte entries).
//!
//! The directory fsync that makes a new name durable is left to the first flush that covers
//! the file (a journal commit: up to ~15 ms here, it would hold up the next creation).

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
    /// Published files to populate ahead of the writer (by the populating thread; nobody
    /// waits for these).
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

    /// The next file to populate: index files first (small, needed often).
    fn pop_populate(&mut self) -> Option<(Kind, u64)> {
        let i = self.populate.iter().position(|(k, _)| *k == Kind::Index);
        self.populate.remove(i.unwrap_or(0))
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
    /// writer (bulk populate only).
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

    /// Blocks until `take` yields a job; `None` once stopped.
    fn next_job(&self, take: fn(&mut Queue) -> Option<(Kind, u64)>) -> Option<(Kind, u64)> {
        let mut q = self.lock();
        loop {
            if q.stop {
                return None;
            }
            if let Some(job) = take(&mut q) {
                return Some(job);
            }
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }
}

/// The background threads: one creates files, one populates them.
pub(crate) struct Preallocator {
    sh: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Preallocator {
    pub(crate) fn start(sh: Arc<Shared>) -> std::io::Result<Preallocator> {
        let mut p = Preallocator {
            sh: sh.clone(),
            handles: Vec::with_capacity(2),
        };
        let t = sh.clone();
        p.handles.push(
            std::thread::Builder::new()
                .name("dledger-prealloc".into())
                .spawn(move || run_creations(&t))?,
        );
        p.handles.push(
            std::thread::Builder::new()
                .name("dledger-populate".into())
                .spawn(move || run_populate(&sh))?,
        );
        Ok(p)
    }

    pub(crate) fn stop(&mut self) {
        self.sh.prealloc.stop();
        for h in self.handles.drain(..) {
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

/// The creating thread: short jobs only, so that it is scheduled soon after a request even
/// on a busy machine (a thread that just ran for milliseconds may wait that long for its
/// turn: with populating on this thread too, the writer waited up to ~50 ms for a file).
fn run_creations(sh: &Shared) {
    while let Some((kind, start)) = sh.prealloc.next_job(Queue::pop_next) {
        run_job(sh, kind, start);
    }
}

/// The populating thread: published files, index files first (small, needed often).
fn run_populate(sh: &Shared) {
    populate_last_files(sh);
    while let Some((kind, start)) = sh.prealloc.next_job(Queue::pop_populate) {
        populate_existing(sh, kind, start);
    }
}

/// Populates a published segment (if it still exists): bulk populate only, it is in use.
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
                    sh.prealloc.request_populate(kind, start);
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
/// written and the chunk it is about to write.
fn populate_ahead_of_writer(sh: &Shared, seg: &Segment) {
    let mut off = 0;
    while off < seg.len() {
        if sh.prealloc.lock().stop {
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
