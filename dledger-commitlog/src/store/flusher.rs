//! Flushing: which byte ranges are dirty, the flushed-position watch, and the flush thread.
//!
//! * Async mode: the thread wakes every `flush_interval_ms` and flushes what was written.
//! * Sync mode (group commit): the first append after a pass wakes the thread (later ones cost
//!   one atomic swap); the thread waits until appends pause (a burst of appends from one
//!   driver turn is done: [`SETTLE_QUIET`], at most [`SETTLE_MAX`]), so one msync pass covers
//!   the whole burst, and every waiter whose position is now durable is released together
//!   through the `FlushProgress` watch.
//! * A failed flush poisons the store (writes refused until restart) and is published in the
//!   watch so waiters fail instead of hanging.
//!
//! The thread also writes the checkpoint every `checkpoint_interval_ms`, with a committed index
//! sampled *before* the flush, so the checkpoint never names data that is not durable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::error::StoreError;
use super::shared::{load_opt, Shared};
use crate::config::FlushMode;
use crate::format::checkpoint::Checkpoint;
use crate::types::Pos;

/// Name of the checkpoint file.
pub(crate) use super::CHECKPOINT_FILE;

/// What is durable: data up to `flushed` (exclusive end) is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushProgress {
    /// Every data byte below this position is durable.
    pub flushed: Pos,
    /// A flush failed: nothing more will become durable until restart.
    pub poisoned: bool,
}

/// Dirty ranges not yet flushed: `[from, max(to, written))`. `to` only exceeds the written
/// end after a cut zeroed bytes beyond it.
#[derive(Debug, Default)]
struct Marks {
    data_from: u64,
    data_to: u64,
    index_from: u64,
    index_to: u64,
    stop: bool,
}

/// Sync mode under a steady stream of appends: the index is flushed at least every this many
/// flush intervals (100 ms by default). Only recovery reads it after a crash, and it rebuilds
/// a short index from the data.
const GROUP_COMMIT_INDEX_EVERY: u32 = 10;
/// Sync mode: appends less than this apart belong to one burst (one group commit).
const SETTLE_QUIET: Duration = Duration::from_micros(20);
/// Sync mode: the longest a group commit waits for a burst to end (bounds the added latency
/// under a steady stream of appends).
const SETTLE_MAX: Duration = Duration::from_micros(500);

#[derive(Debug)]
pub(crate) struct FlushState {
    marks: Mutex<Marks>,
    /// Written ends, updated by the writer on every append without taking the lock.
    data_written: AtomicU64,
    index_written: AtomicU64,
    /// Index bytes below this address are durable (for the populating thread, which releases
    /// the page cache of durable bytes the writer has left behind).
    index_flushed: AtomicU64,
    /// Sync mode: something was appended since the last pass snapshot.
    wake: AtomicBool,
    cv: Condvar,
    flush_lock: Mutex<()>,
    tx: watch::Sender<FlushProgress>,
    sync_mode: bool,
}

impl FlushState {
    pub(crate) fn new(mode: FlushMode, written: u64, index_written: u64) -> FlushState {
        let (tx, _) = watch::channel(FlushProgress {
            flushed: Pos(written),
            poisoned: false,
        });
        FlushState {
            marks: Mutex::new(Marks {
                data_from: written,
                data_to: written,
                index_from: index_written,
                index_to: index_written,
                ..Marks::default()
            }),
            data_written: AtomicU64::new(written),
            index_written: AtomicU64::new(index_written),
            index_flushed: AtomicU64::new(index_written),
            wake: AtomicBool::new(false),
            cv: Condvar::new(),
            flush_lock: Mutex::new(()),
            tx,
            sync_mode: mode == FlushMode::Sync,
        }
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<FlushProgress> {
        self.tx.subscribe()
    }

    pub(crate) fn progress(&self) -> FlushProgress {
        *self.tx.borrow()
    }

    /// Data written so far (end position).
    pub(crate) fn data_written(&self) -> u64 {
        self.data_written.load(Ordering::Acquire)
    }

    /// Index written so far (end address).
    pub(crate) fn index_written(&self) -> u64 {
        self.index_written.load(Ordering::Acquire)
    }

    /// Index durable so far (end address).
    pub(crate) fn index_flushed(&self) -> u64 {
        self.index_flushed.load(Ordering::Acquire)
    }

    /// Writer: bytes up to these ends were written.
    pub(crate) fn note_written(&self, data_end: u64, index_end: u64) {
        self.data_written.store(data_end, Ordering::Release);
        self.index_written.store(index_end, Ordering::Release);
        // Only the first append after a pass snapshot takes the lock: the flush thread checks
        // `wake` under it before sleeping, so taking it here before notifying cannot lose the
        // wake-up. The snapshot clears `wake` with a swap before reading `data_written`: if it
        // swapped after this swap, it synchronizes with it and sees `data_end`; otherwise
        // this swap sees `false` and wakes the thread again.
        if self.sync_mode && !self.wake.swap(true, Ordering::AcqRel) {
            drop(self.marks());
            self.cv.notify_one();
        }
    }

    /// Writer: the logs were cut back to these ends (the zeroed bytes are dirty too).
    pub(crate) fn note_truncated(&self, data_cut: u64, index_cut: u64) {
        let mut m = self.marks();
        m.data_from = m.data_from.min(data_cut);
        self.data_written.store(data_cut, Ordering::Release);
        m.index_from = m.index_from.min(index_cut);
        self.index_flushed.fetch_min(index_cut, Ordering::AcqRel);
        self.index_written.store(index_cut, Ordering::Release);
        drop(m);
        self.tx.send_if_modified(|p| {
            let changed = p.flushed.0 > data_cut;
            p.flushed = Pos(p.flushed.0.min(data_cut));
            changed
        });
    }

    /// Marks bytes zeroed beyond the written end dirty, without moving the written end.
    pub(crate) fn note_dirty(&self, data: (u64, u64), index: (u64, u64)) {
        let mut m = self.marks();
        m.data_from = m.data_from.min(data.0);
        m.data_to = m.data_to.max(data.1);
        m.index_from = m.index_from.min(index.0);
        m.index_to = m.index_to.max(index.1);
    }

    pub(crate) fn publish_poisoned(&self) {
        self.tx.send_modify(|p| p.poisoned = true);
    }

    fn stop(&self) {
        self.marks().stop = true;
        self.cv.notify_all();
    }
}

/// One flush pass: makes everything written so far durable and publishes it.
pub(crate) fn flush_now(sh: &Shared) -> Result<Pos, StoreError> {
    flush_pass(sh, true)
}

/// A flush pass; `with_index = false` (sync-mode group commit) flushes only the data: an
/// entry is durable once its data is, since recovery rebuilds a short index from the data.
/// The index follows at the next periodic pass. For the same reason the flushed position is
/// published as soon as the data is durable, before the index flush of the same pass.
fn flush_pass(sh: &Shared, with_index: bool) -> Result<Pos, StoreError> {
    let _one_at_a_time = sh
        .flush
        .flush_lock
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if sh.poisoned.load(Ordering::Acquire) {
        return Err(StoreError::Poisoned("an earlier flush failed".into()));
    }
    let (df, dt, dw, xf, xt, xw) = {
        let mut m = sh.flush.marks();
        sh.flush.wake.swap(false, Ordering::AcqRel);
        let dw = sh.flush.data_written.load(Ordering::Acquire);
        let xw = sh.flush.index_written.load(Ordering::Acquire);
        let snap = (
            m.data_from,
            m.data_to.max(dw),
            dw,
            m.index_from,
            m.index_to.max(xw),
            xw,
        );
        m.data_from = dw;
        m.data_to = dw;
        if with_index {
            m.index_from = xw;
            m.index_to = xw;
        }
        snap
    };
    let poison = |e| {
        let err = StoreError::io("flush", "data/index files", e);
        sh.poison(err.to_string());
        err
    };
    sh.data.flush_range(df, dt).map_err(poison)?;
    // Published before the index is flushed: waiters are released after one sync, not two.
    let flushed = dw.min(sh.flush.marks().data_from);
    sh.flush.tx.send_if_modified(|p| {
        let changed = p.flushed.0 != flushed;
        p.flushed = Pos(flushed);
        changed
    });
    if with_index {
        sh.index.flush_range(xf, xt).map_err(poison)?;
        // Everything below the snapshot's written end, unless a cut came meanwhile (it
        // lowered `index_from`, and the cut part is dirty again).
        let durable = xw.min(sh.flush.marks().index_from);
        sh.flush.index_flushed.store(durable, Ordering::Release);
    }
    Ok(Pos(flushed))
}

/// Writes the checkpoint with a committed index that is already durable.
pub(crate) fn write_checkpoint(sh: &Shared, cp: Checkpoint) -> Result<(), StoreError> {
    let _guard = sh.state_file_lock.lock().unwrap_or_else(|e| e.into_inner());
    sh.dir
        .write_state(CHECKPOINT_FILE, cp.encode().as_bytes())
        .map_err(|e| StoreError::io("write", CHECKPOINT_FILE, e))
}

/// Samples the checkpoint, flushes, then writes it (so it only names durable data).
pub(crate) fn flush_and_checkpoint(sh: &Shared) -> Result<(), StoreError> {
    let cp = Checkpoint {
        end_index: load_opt(&sh.end_index),
        committed_index: load_opt(&sh.committed_index),
    };
    flush_now(sh)?;
    write_checkpoint(sh, cp)
}

/// The background flush thread.
pub(crate) struct Flusher {
    sh: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start(sh: Arc<Shared>) -> std::io::Result<Flusher> {
        let t = sh.clone();
        let handle = std::thread::Builder::new()
            .name("dledger-flush".into())
            .spawn(move || run(&t))?;
        Ok(Flusher {
            sh,
            handle: Some(handle),
        })
    }

    pub(crate) fn stop(&mut self) {
        self.sh.flush.stop();
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!("flush thread panicked");
            }
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sync mode: waits until appends pause for [`SETTLE_QUIET`] (at most [`SETTLE_MAX`]), so
/// that one pass covers a whole burst instead of its first entry only.
fn settle(sh: &Shared) {
    let deadline = Instant::now() + SETTLE_MAX;
    let mut seen = sh.flush.data_written.load(Ordering::Acquire);
    while Instant::now() < deadline {
        std::thread::sleep(SETTLE_QUIET);
        let now = sh.flush.data_written.load(Ordering::Acquire);
        if now == seen {
            return;
        }
        seen = now;
    }
}

fn run(sh: &Shared) {
    let interval = sh.cfg.flush_interval();
    let cp_interval = sh.cfg.checkpoint_interval();
    let mut last_cp = Instant::now();
    let mut last_full = Instant::now();
    loop {
        let woken = {
            let m = sh.flush.marks();
            let (m, _) = sh
                .flush
                .cv
                .wait_timeout_while(m, interval, |m| {
                    !sh.flush.wake.load(Ordering::Acquire) && !m.stop
                })
                .unwrap_or_else(|e| e.into_inner());
            if m.stop {
                return;
            }
            sh.flush.wake.load(Ordering::Acquire)
        };
        if woken {
            settle(sh);
        }
        if sh.poisoned.load(Ordering::Acquire) {
            // Nothing can become durable any more; idle until stopped.
            let m = sh.flush.marks();
            let _ = sh
                .flush
                .cv
                .wait_timeout_while(m, Duration::from_secs(1), |m| !m.stop);
            continue;
        }
        if last_cp.elapsed() >= cp_interval {
            last_cp = Instant::now();
            if let Err(e) = flush_and_checkpoint(sh) {
                tracing::error!(error = %e, "flush/checkpoint failed");
            }
        } else {
            // Group commit passes (woken by appends) flush data only; the index is flushed by
            // the periodic pass when appends pause, and at least every
            // `GROUP_COMMIT_INDEX_EVERY` intervals under a steady stream (each index msync
            // is a second sync that delays the next group commit).
            let with_index = !woken || last_full.elapsed() >= interval * GROUP_COMMIT_INDEX_EVERY;
            if with_index {
                last_full = Instant::now();
            }
            if let Err(e) = flush_pass(sh, with_index) {
                tracing::error!(error = %e, "flush failed");
            }
        }
    }
}
