//! Storage of one member's log: data files, index files, state files, flushing, cleaning and
//! recovery (spec/dledger.md §2, §9.5).
//!
//! ```text
//!   Store (single writer, &mut self) ──┐          StoreReader (Clone, committed only)
//!     append / truncate / commit       │                 │
//!          │                           ▼                 ▼
//!          ├── data_log: blank rule ── Shared: segment lists + atomics (begin/end/committed)
//!          ├── flusher thread ──────── FlushProgress watch (group commit), checkpoint
//!          ├── preallocate threads ─── next file created; a window ahead of the writer
//!          │                           populated, durable pages far behind it released
//!          ├── cleaner (caller's clock) and recovery (at open)
//!          ▼
//!      Dir: Fs (mmap_segment, atomic_file) | Mem (mem_disk crash model) + Faults
//! ```

mod atomic_file;
mod cleaner;
mod data_log;
mod dir;
mod error;
mod fault;
mod flusher;
mod header_crc;
mod mem_disk;
mod mmap_segment;
mod preallocate;
mod reader;
mod recovery;
mod segment;
mod segment_list;
mod shared;
mod writer;

pub use cleaner::{CleanInput, CleanReport};
pub use error::StoreError;
pub use fault::{FaultPoint, Faults};
pub use flusher::FlushProgress;
pub use mem_disk::{CrashMode, MemDisk};
pub use reader::StoreReader;
pub use recovery::RecoveryReport;
pub use shared::{EntryRef, StoredEntry};
pub use writer::{Appended, FollowerEntry, Store, CURRTERM_FILE};

/// Name of the checkpoint file in the member directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
