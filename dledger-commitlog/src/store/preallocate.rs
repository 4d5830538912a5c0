//! Creates the next data/index file ahead of need, and keeps a bounded window of pages just
//! ahead of the writer populated, on two background threads, so the append path never pays
//! for file creation and, as long as they keep up, takes no first-touch faults.
//!
//! * The creating thread only allocates, maps and publishes files (short jobs). The writer
//!   waits only if it reaches a file whose creation this thread has started; it creates the
//!   file itself if nobody asked for it, if the background attempt failed (then it gets the
//!   error), or if the thread has not started on it yet: it takes the job back (`claim`).
//! * The populating thread keeps the [`DATA_AHEAD`] bytes of data (and [`INDEX_AHEAD`] of
//!   index) after the writer's end populated, across file boundaries, with the kernel's bulk
//!   populate that never changes file contents, so it may run while the writer writes the
//!   same file: when it falls behind, the writer faults the rest in itself. It works in
//!   2 MiB chunks, index first (small, needed often), and never within the 2 MiB just ahead
//!   of a writer that has caught up with it (both on one large folio only makes one wait for
//!   the other). The writer wakes it when it has used a quarter of the window (one atomic compare
//!   per append). Without bulk populate, files are touched page by page over the same
//!   window before they are published, and the writer faults in the rest.
//!
//! Why a window and not whole files (measured, ledger bench at 1 KiB / 256 in flight, 3
//! members in one process): every populated page is new page cache, zeroed by the kernel, and
//! on this VM new memory costs ~2-3 ms of CPU per MiB the first time it is touched. Whole
//! 1 GiB files (DLedger's default size) meant 2 GiB per member at start and a 1 GiB burst at
//! every roll, paid long before the writer needed it (and, with `MADV_POPULATE_WRITE`,
//! gigabytes of dirty zero pages for the kernel to write back). With a window the work is
//! proportional to what is written, and paid just before.
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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::segment::{Kind, Segment};
use super::shared::Shared;
use crate::config::LedgerConfig;

/// Data bytes kept populated after the writer's end. Refilled a quarter at a time, so that a
/// writer at 160 MiB/s (150k x 1 KiB per member) leaves the thread ~0.6 s to get its turn,
/// and one at 2 GB/s (benches/store.rs) ~50 ms.
pub(crate) const DATA_AHEAD: u64 = 128 << 20;
/// Index bytes kept populated after the writer's end (32 bytes per entry: 256k entries).
pub(crate) const INDEX_AHEAD: u64 = 8 << 20;
/// Bytes populated between two looks at the writer and the queue (~0.5-5 ms).
const POPULATE_CHUNK: u64 = 2 << 20;
/// Bytes just ahead of the writer that are left to it (one large folio) once it has caught
/// up with the populating thread.
const WRITER_GAP: u64 = 2 << 20;

/// How far behind the writer `kind` stays cached: `LedgerConfig::release_cache_behind_bytes`
/// for data, an eighth of it for the index (32 bytes per entry against ~100 B to 4 KiB of
/// data); `u64::MAX` (never) when unset.
fn behind(kind: Kind, cfg: &LedgerConfig) -> u64 {
    match (cfg.release_cache_behind_bytes, kind) {
        (None, _) => u64::MAX,
        (Some(b), Kind::Data) => b,
        (Some(b), Kind::Index) => b / 8,
    }
}

fn flushed_end(sh: &Shared, kind: Kind) -> u64 {
    match kind {
        Kind::Data => sh.flush.progress().flushed.0,
        Kind::Index => sh.flush.index_flushed(),
    }
}

/// How far ahead of the writer `kind` is kept populated.
pub(crate) fn ahead(kind: Kind) -> u64 {
    match kind {
        Kind::Data => DATA_AHEAD,
        Kind::Index => INDEX_AHEAD,
    }
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Data => 0,
        Kind::Index => 1,
    }
}

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<(Kind, u64)>,
    in_progress: HashSet<(Kind, u64)>,
    /// Files published since the populating thread last looked (it may have to go back to
    /// them: after a cut, a file is created again where one was populated before).
    published: Vec<(Kind, u64)>,
    /// The writer passed a wake mark since the populating thread last looked.
    kicked: bool,
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

#[derive(Debug, Default)]
pub(crate) struct PreallocState {
    q: Mutex<Queue>,
    /// Wakes the creating thread and writers waiting for a creation.
    cv: Condvar,
    /// Wakes the populating thread.
    populate_cv: Condvar,
    /// Whether the kernel populates in bulk: 0 not probed yet, 1 yes, 2 no.
    bulk: AtomicU8,
    /// Written ends (data, index) at which the writer wakes the populating thread; set by
    /// that thread before it sleeps, `u64::MAX` once the writer has woken it.
    wake_at: [AtomicU64; 2],
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

    /// Tells the populating thread that the segment starting at `start` was published.
    pub(crate) fn published(&self, kind: Kind, start: u64) {
        let mut q = self.lock();
        if q.stop {
            return;
        }
        q.published.push((kind, start));
        drop(q);
        self.populate_cv.notify_one();
    }

    /// Writer, after each append: wakes the populating thread once the written ends pass
    /// its wake marks (two loads and compares otherwise).
    #[inline]
    pub(crate) fn note_written(&self, data_end: u64, index_end: u64) {
        if data_end >= self.wake_at[0].load(Ordering::Relaxed)
            || index_end >= self.wake_at[1].load(Ordering::Relaxed)
        {
            self.kick();
        }
    }

    #[cold]
    fn kick(&self) {
        for w in &self.wake_at {
            w.store(u64::MAX, Ordering::Relaxed);
        }
        self.lock().kicked = true;
        self.populate_cv.notify_one();
    }

    /// Blocks while the segment at `start` is being created in the background.
    pub(crate) fn wait_idle(&self, kind: Kind, start: u64) {
        let mut q = self.lock();
        while q.in_progress.contains(&(kind, start)) && !q.stop {
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks until a creation job is queued; `None` once stopped.
    fn next_job(&self) -> Option<(Kind, u64)> {
        let mut q = self.lock();
        loop {
            if q.stop {
                return None;
            }
            if let Some(job) = q.pop_next() {
                return Some(job);
            }
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks until the writer passed a wake mark or a file was published; returns the files
    /// published meanwhile, `None` once stopped.
    fn next_populate_round(&self) -> Option<Vec<(Kind, u64)>> {
        let mut q = self.lock();
        loop {
            if q.stop {
                return None;
            }
            if q.kicked || !q.published.is_empty() {
                q.kicked = false;
                return Some(std::mem::take(&mut q.published));
            }
            q = self.populate_cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stopped(&self) -> bool {
        self.lock().stop
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
        self.populate_cv.notify_all();
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
    while let Some((kind, start)) = sh.prealloc.next_job() {
        run_job(sh, kind, start);
    }
}

fn written_end(sh: &Shared, kind: Kind) -> u64 {
    match kind {
        Kind::Data => sh.flush.data_written(),
        Kind::Index => sh.flush.index_written(),
    }
}

/// The populated window of one address space, as the populating thread sees it.
#[derive(Debug)]
struct Window {
    kind: Kind,
    /// Bytes kept populated after the writer's end ([`ahead`]).
    ahead: u64,
    /// Durable bytes kept cached before the writer's end ([`behind`]).
    behind: u64,
    /// Everything from the writer's end up to here is populated (unknown until first look).
    to: Option<u64>,
    /// Pages below this were released (unknown until first look: pages from before the
    /// store was opened are left to the kernel).
    released: Option<u64>,
}

/// What [`Window::advance`] ran into.
#[derive(Debug, PartialEq, Eq)]
enum Stopped {
    /// The window is full.
    Full,
    /// The next file is not published yet (its publication wakes the thread).
    NoFile,
    /// Stopping, or the kernel refused.
    Quit,
}

impl Window {
    fn new(kind: Kind, cfg: &LedgerConfig) -> Window {
        Window {
            kind,
            ahead: ahead(kind),
            behind: behind(kind, cfg),
            to: None,
            released: None,
        }
    }

    /// A file published at `start`: if the window had gone past it, that was an earlier file
    /// at the same place (removed by a cut), so this one is populated from its start.
    fn published(&mut self, start: u64) {
        if let Some(to) = &mut self.to {
            *to = (*to).min(start);
        }
    }

    /// Releases the cached pages of durable bytes more than `behind` before the writer's
    /// end, up to a chunk boundary, one call per file (each unmapping interrupts the other
    /// cores to flush their TLBs): the memory is handed out again at once, by the populate
    /// that follows (new memory costs the kernel much more on this VM: see the module doc).
    fn release_behind(&mut self, sh: &Shared) -> bool {
        if self.behind == u64::MAX {
            // Releasing is off (the default) or was given up.
            return true;
        }
        let list = sh.list(self.kind);
        let limit = written_end(sh, self.kind)
            .saturating_sub(self.behind)
            .min(flushed_end(sh, self.kind));
        let limit = limit - limit % POPULATE_CHUNK;
        // After a cut the writer may be back below: the bytes it writes again there are
        // released again once it has left them behind.
        let mut from = self.released.unwrap_or(limit).min(limit);
        while from < limit {
            let seg = match list.find(from) {
                Some(seg) => seg,
                None => match list.bounds() {
                    Some((first, _)) if from < first => {
                        from = first.min(limit);
                        continue;
                    }
                    _ => break,
                },
            };
            let end = seg.end().min(limit);
            if sh.prealloc.stopped() {
                self.released = Some(from);
                return false;
            }
            if let Err(e) = seg.release(from - seg.start(), end - from) {
                // Only a cost: the kernel reclaims the pages when it needs them.
                tracing::warn!(kind = ?self.kind, error = %e, "releasing cached pages failed; no longer trying");
                self.behind = u64::MAX;
                break;
            }
            from = end;
        }
        self.released = Some(from);
        true
    }

    /// Populates chunks until the window reaches `ahead` past the writer's end.
    fn advance(&mut self, sh: &Shared) -> Stopped {
        let list = sh.list(self.kind);
        loop {
            let written = written_end(sh, self.kind);
            let mut to = self.to.unwrap_or(written);
            if to < written {
                // Fell behind: the writer faults in its next pages itself; stay clear of the
                // folio it is in.
                to = written + WRITER_GAP;
            }
            self.to = Some(to);
            if to >= written + self.ahead {
                return Stopped::Full;
            }
            let seg = match list.find(to) {
                Some(seg) => seg,
                None => match list.bounds() {
                    // Below the first file (cleaned or cut away): resume at the first.
                    Some((first, _)) if to < first => {
                        self.to = Some(first);
                        continue;
                    }
                    _ => return Stopped::NoFile,
                },
            };
            let end = (to - to % POPULATE_CHUNK + POPULATE_CHUNK).min(seg.end());
            if sh.prealloc.stopped() || seg.populate_bulk(to - seg.start(), end - to).is_err() {
                return Stopped::Quit;
            }
            self.to = Some(end);
        }
    }

    /// The written end at which the writer should wake the thread again: once a quarter of
    /// the window is used.
    fn wake_mark(&self) -> u64 {
        let to = self.to.unwrap_or(0);
        to.saturating_sub(self.ahead - self.ahead / 4)
    }
}

/// The populating thread: keeps a window ahead of the writer populated (bulk populate only).
fn run_populate(sh: &Shared) {
    let mut windows = [
        Window::new(Kind::Index, &sh.cfg),
        Window::new(Kind::Data, &sh.cfg),
    ];
    let mut published = Vec::new();
    loop {
        for (kind, start) in published.drain(..) {
            if let Some(w) = windows.iter_mut().find(|w| w.kind == kind) {
                w.published(start);
            }
        }
        let mut again = false;
        for w in &mut windows {
            let Some(seg) = sh.list(w.kind).read().last().cloned() else {
                continue;
            };
            if !bulk_supported(sh, &seg) {
                return;
            }
            if !w.release_behind(sh) {
                return;
            }
            let mark = match w.advance(sh) {
                Stopped::Quit => return,
                // The next file's publication wakes the thread.
                Stopped::NoFile => u64::MAX,
                Stopped::Full => w.wake_mark(),
            };
            sh.prealloc.wake_at[slot(w.kind)].store(mark, Ordering::Relaxed);
            // The writer may have passed the mark while it was being set.
            again |= written_end(sh, w.kind) >= mark;
        }
        if again {
            continue;
        }
        match sh.prealloc.next_populate_round() {
            Some(p) => published = p,
            None => return,
        }
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
    let list = sh.list(kind);
    let wanted = |segs: &Vec<Arc<Segment>>| segs.last().is_some_and(|l| l.end() == start);
    if !wanted(&list.read()) {
        return;
    }
    match sh.dir.create_segment(kind, start, list.seg_len(), false) {
        Ok(seg) => {
            // With the kernel's bulk populate, which never writes, a file is published right
            // after creation and the populating thread populates it when the writer comes
            // near. Without it, the part the writer reaches first is touched page by page
            // before anyone sees it.
            if !bulk_supported(sh, &seg) {
                seg.populate(0, ahead(kind));
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
                sh.prealloc.published(kind, start);
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
    fn publications_never_become_creations() {
        let st = PreallocState::default();
        st.published(Kind::Data, 0);
        let mut q = st.lock();
        assert_eq!(q.pop_next(), None);
        assert!(q.in_progress.is_empty());
        drop(q);
        assert_eq!(st.next_populate_round(), Some(vec![(Kind::Data, 0)]));
    }

    #[test]
    fn the_writer_wakes_the_populating_thread_once_per_mark() {
        let st = PreallocState::default();
        st.wake_at[0].store(100, Ordering::Relaxed);
        st.wake_at[1].store(10, Ordering::Relaxed);
        st.note_written(99, 9);
        assert!(!st.lock().kicked, "below both marks");
        st.note_written(100, 9);
        assert!(st.lock().kicked);
        assert_eq!(st.next_populate_round(), Some(vec![]));
        // The marks are cleared by the wake-up: no second one until the thread sets them.
        st.note_written(200, 20);
        assert!(!st.lock().kicked);
        st.stop();
        assert_eq!(st.next_populate_round(), None);
    }

    #[test]
    fn a_window_goes_back_to_a_file_published_again_after_a_cut() {
        let mut w = Window::new(Kind::Data, &LedgerConfig::default());
        w.to = Some(3 << 20);
        w.published(2 << 20);
        assert_eq!(w.to, Some(2 << 20));
        w.published(4 << 20);
        assert_eq!(
            w.to,
            Some(2 << 20),
            "a later file leaves the window as it is"
        );
        assert_eq!(
            w.wake_mark(),
            0,
            "three quarters of a window behind, saturating"
        );
    }

    /// A real store on 1 MiB files, the windows shrunk to a few chunks, driven by hand
    /// (no background threads): the populated window follows the writer across files, and
    /// releasing the pages behind it changes no byte any reader sees.
    #[test]
    fn windows_follow_the_writer_and_releasing_changes_no_byte() {
        use crate::config::LedgerConfig;
        use crate::store::Store;
        use crate::types::{Index, Term};

        let dir = tempfile::tempdir().unwrap();
        let cfg = LedgerConfig {
            data_segment_bytes: 1 << 20,
            index_segment_bytes: 64 << 10,
            background_threads: false,
            ..LedgerConfig::default()
        };
        let mut st = Store::open(dir.path(), &cfg).unwrap();
        let body = |i: u64| vec![(i % 251) as u8; 4000];
        for i in 0..2000u64 {
            st.append_leader(Term(1), &body(i)).unwrap();
        }
        st.flush().unwrap();
        let sh = st.sh.clone();
        let written = sh.flush.data_written();
        assert!(written > 7 << 20, "several files written: {written}");
        let chunk = POPULATE_CHUNK;
        let mut w = Window {
            ahead: 4 * chunk,
            behind: chunk,
            ..Window::new(Kind::Data, &cfg)
        };
        assert!(w.release_behind(&sh));
        assert_eq!(
            w.released,
            Some((written - chunk) / chunk * chunk),
            "first look"
        );
        w.released = Some(0);
        assert!(w.release_behind(&sh));
        assert_eq!(w.released, Some((written - chunk) / chunk * chunk));
        // Only the files that exist are populated: the next one is not created yet.
        assert_eq!(w.advance(&sh), Stopped::NoFile);
        assert_eq!(w.to, Some(sh.data.bounds().unwrap().1));
        let reader = st.reader();
        st.advance_committed(Index(1999));
        for i in (0..2000u64).step_by(97) {
            let e = reader.get(Index(i)).unwrap();
            assert_eq!(e.body[..], body(i)[..], "entry {i} after release");
        }
        // After a cut, a file published again at a place the window had passed is populated
        // again from its start.
        let start = sh.data.bounds().unwrap().1 - (1 << 20);
        w.published(start);
        assert_eq!(w.to, Some(start));
        assert_eq!(w.advance(&sh), Stopped::NoFile);
    }
}
