//! Fault injection at each write step (CC-10, SIM-14): a test arms a point, the next matching
//! operation fails with the chosen OS error. Disarmed, a check is one relaxed atomic load.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A write step that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Creating (allocating) a new data file.
    CreateDataSegment,
    /// Creating a new index file.
    CreateIndexSegment,
    /// Writing entry bytes (in-memory segments only: mmap stores cannot fail after allocation).
    DataWrite,
    /// Writing an index entry (in-memory segments only).
    IndexWrite,
    /// msync / fsync of data or index files.
    Flush,
    /// Writing `checkpoint` or `currterm`.
    StateFileWrite,
}

#[derive(Debug)]
struct Armed {
    point: FaultPoint,
    skip: u32,
    errno: i32,
    sticky: bool,
}

/// Shared fault plan of one store (data files, index files and state files).
#[derive(Debug, Default)]
pub struct Faults {
    any: AtomicBool,
    armed: Mutex<Vec<Armed>>,
}

impl Faults {
    /// Makes the `(skip + 1)`-th next operation at `point` fail with `errno` (e.g. `libc::ENOSPC`);
    /// `sticky` keeps failing every later one too.
    pub fn arm(&self, point: FaultPoint, skip: u32, errno: i32, sticky: bool) {
        if let Ok(mut a) = self.armed.lock() {
            a.push(Armed {
                point,
                skip,
                errno,
                sticky,
            });
            self.any.store(true, Ordering::Release);
        }
    }

    /// Removes every armed fault.
    pub fn clear(&self) {
        if let Ok(mut a) = self.armed.lock() {
            a.clear();
            self.any.store(false, Ordering::Release);
        }
    }

    /// Called by the store before each step; `Err` when a fault fires.
    #[inline]
    pub(crate) fn check(&self, point: FaultPoint) -> io::Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        self.check_armed(point)
    }

    #[cold]
    fn check_armed(&self, point: FaultPoint) -> io::Result<()> {
        let Ok(mut armed) = self.armed.lock() else {
            return Ok(());
        };
        let Some(i) = armed.iter().position(|a| a.point == point) else {
            return Ok(());
        };
        if armed[i].skip > 0 {
            armed[i].skip -= 1;
            return Ok(());
        }
        let errno = armed[i].errno;
        if !armed[i].sticky {
            armed.remove(i);
            if armed.is_empty() {
                self.any.store(false, Ordering::Release);
            }
        }
        Err(io::Error::from_raw_os_error(errno))
    }
}
