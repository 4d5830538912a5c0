//! A file-backed segment mapped with memmap2: the only module with `unsafe` in the crate.
//!
//! Owns: one fixed-size, fully allocated file and its shared writable mapping.
//! Rules that make the raw accesses sound (upheld by `data_log`/`index_log` and the store):
//! * exactly one writer (the `Store` owner, `&mut self`) writes, and only to byte ranges that
//!   no reader has been told about yet (beyond the published end/committed positions);
//! * readers only read ranges published with a Release store of the committed position and
//!   loaded with Acquire; truncation never goes below the committed position;
//! * the mapping lives as long as any `Arc` to the segment, so a file deleted by the cleaner
//!   stays readable for a reader that still holds it.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

use super::atomic_file::sync_dir;

const PAGE: usize = 4096;
const ZERO_CHUNK: usize = 1 << 20;

/// A mapped data or index file.
#[derive(Debug)]
pub(crate) struct MmapSegment {
    map: MmapRaw,
    len: usize,
    path: PathBuf,
    /// The file's name is durable (its directory was fsynced after it was created).
    name_durable: AtomicBool,
    file: File,
}

/// Allocates `[from, to)` of `file` (extending it) so the blocks exist now and ENOSPC surfaces
/// as an error here rather than as SIGBUS on a mapped write. `posix_fallocate` reserves blocks
/// without copying zeros through the page cache; where the filesystem cannot, zeros are written.
fn allocate(file: &mut File, from: u64, to: u64) -> io::Result<()> {
    if to <= from {
        return Ok(());
    }
    let (Ok(off), Ok(len)) = (
        libc::off_t::try_from(from),
        libc::off_t::try_from(to - from),
    ) else {
        return Err(io::Error::other("file range too large"));
    };
    // SAFETY: plain syscall on a file descriptor we own for the duration of the call; it reads
    // and writes no memory of ours.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), off, len) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => zero_fill(file, from, to),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Writes zero bytes from `from` up to `to` (fallback allocation).
fn zero_fill(file: &mut File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK.min((to - from) as usize)];
    file.seek(SeekFrom::Start(from))?;
    let mut left = to - from;
    while left > 0 {
        let n = (left as usize).min(zeros.len());
        file.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    Ok(())
}

impl MmapSegment {
    /// Creates (or completes a half-created) file of `len` bytes, allocates it and maps it.
    /// `now = Some(prefix)`: also make the first `prefix` bytes present
    /// ([`MmapSegment::populate`]) and the name durable ([`MmapSegment::sync_name`]) before
    /// returning; otherwise the caller does both (the background threads: populating ahead
    /// of the writer, and syncing the name off the writer's path).
    pub(crate) fn create(
        path: &Path,
        len: u64,
        now: Option<u64>,
        large_folios: bool,
    ) -> io::Result<MmapSegment> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let have = file.metadata()?.len();
        if have > len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "existing file longer than the segment size",
            ));
        }
        allocate(&mut file, have, len)?;
        let seg = Self::map(file, path, len, false, large_folios)?;
        if let Some(prefix) = now {
            seg.populate(0, usize::try_from(prefix).unwrap_or(usize::MAX));
            seg.sync_name()?;
        }
        Ok(seg)
    }

    /// Opens an existing file; a short file is zero-extended to `len` (recovery decides whether
    /// that is allowed before calling this).
    pub(crate) fn open(path: &Path, len: u64, large_folios: bool) -> io::Result<MmapSegment> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let have = file.metadata()?.len();
        if have < len {
            allocate(&mut file, have, len)?;
        }
        Self::map(file, path, len, true, large_folios)
    }

    fn map(
        file: File,
        path: &Path,
        len: u64,
        name_durable: bool,
        large_folios: bool,
    ) -> io::Result<MmapSegment> {
        let len_usize = usize::try_from(len).map_err(|_| io::Error::other("segment too large"))?;
        let map = MmapOptions::new().len(len_usize).map_raw(&file)?;
        // A hint only (large page-cache folios: fewer faults when writing, fewer write-protect
        // faults after each msync, cheaper scans); kernels that ignore it lose nothing. Not in
        // sync-flush mode: there each msync would write back whole large folios, not the few
        // dirty pages of a commit (measured: 1 appender 1.05k -> 2.1k commits/s without it).
        // Known cost in async mode: the write-protect fault after each msync re-dirties the
        // whole folio (ext4's page_mkwrite marks every block of it), so more is written back
        // than was appended (ledger bench, 3 members at ~100k/s: the kernel counted 2.7x the
        // appended bytes dirtied, 1.35x without the hint); CPU was still lower with it (flush
        // thread 0.7 vs 2.1-2.8 us per commit, process 8.6-8.9 vs 10.3-13.9 us).
        if large_folios {
            let _ = map.advise(Advice::HugePage);
        }
        Ok(MmapSegment {
            map,
            len: len_usize,
            path: path.to_path_buf(),
            name_durable: AtomicBool::new(name_durable),
            file,
        })
    }

    #[inline]
    fn check(&self, off: usize, len: usize) -> io::Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the segment",
            )),
        }
    }

    /// Makes the pages of `[off, off+len)` present and writable in the page tables, in bulk in
    /// the kernel (`MADV_POPULATE_WRITE`, Linux 5.14+): no fault entry/exit per page, and with
    /// the huge-page hint the page cache can use large folios; on this machine a 64 MiB file
    /// takes ~16-18 ms instead of ~28 ms touched page by page. It never changes the contents,
    /// so it may run while the writer writes the same segment. Out-of-range parts are ignored.
    /// (`MADV_POPULATE_READ`, which leaves the pages clean and the writer a write-protect
    /// fault per page, measured the same in the ledger bench: 8.0-9.4 vs 8.1-8.2 us of CPU per
    /// commit, within noise; this one keeps the writer fault-free, which the store bench's
    /// appender needs. Pages it dirties are bounded by the populate window.)
    /// An error means the kernel cannot do it (callers fall back to [`MmapSegment::populate`]
    /// before publishing).
    pub(crate) fn populate_bulk(&self, off: usize, len: usize) -> io::Result<()> {
        let off = off.min(self.len);
        let end = off.saturating_add(len).min(self.len);
        if off >= end {
            return Ok(());
        }
        let start = off - off % PAGE;
        self.map
            .advise_range(Advice::PopulateWrite, start, end - start)
    }

    /// Releases the page cache of `[off, off+len)` (whole pages inside it only): unmaps it
    /// here (`MADV_DONTNEED`), then drops the file's clean pages (`POSIX_FADV_DONTNEED`), so
    /// the memory goes back to the kernel's free lists while it is still cheap to hand out
    /// again (see `preallocate`). Contents are unchanged: a later access faults the bytes
    /// back in from the file, and a dirty page is kept until written back.
    pub(crate) fn release(&self, off: usize, len: usize) -> io::Result<()> {
        let end = off.saturating_add(len).min(self.len);
        let start = off.div_ceil(PAGE) * PAGE;
        let end = end - end % PAGE;
        if start >= end {
            return Ok(());
        }
        // SAFETY: a shared mapping of a regular file: MADV_DONTNEED only drops page-table
        // entries (dirty state moves to the page cache), so every byte reads the same
        // afterwards, for the writer and for readers holding slices alike; the range is inside
        // the mapping (checked above).
        unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start)?;
        }
        let (Ok(o), Ok(l)) = (
            libc::off_t::try_from(start),
            libc::off_t::try_from(end - start),
        ) else {
            return Ok(());
        };
        // SAFETY: plain syscall on a file descriptor we own; it reads and writes no memory of
        // ours.
        let rc =
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), o, l, libc::POSIX_FADV_DONTNEED) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }

    /// As [`MmapSegment::populate_bulk`], falling back to touching each page (writing a zero)
    /// where the kernel cannot: only for a freshly created segment not yet published to the
    /// writer or readers.
    pub(crate) fn populate(&self, off: usize, len: usize) {
        if self.populate_bulk(off, len).is_ok() {
            return;
        }
        let end = off.saturating_add(len).min(self.len);
        let base = self.map.as_mut_ptr();
        let mut at = off.min(self.len);
        at -= at % PAGE;
        while at < end {
            // SAFETY: `at < end <= len`, inside the mapping; the segment is new and not yet
            // shared with anyone, and it is all zeros, so writing a zero changes nothing.
            unsafe { base.add(at).write_volatile(0) };
            at += PAGE;
        }
    }

    /// Gives the writer a mutable view of `[off, off+len)`.
    #[inline]
    pub(crate) fn write_with<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> io::Result<R> {
        self.check(off, len)?;
        // SAFETY: bounds checked above; only the single writer calls this, and only for ranges
        // not yet published to readers (module rules), so no other reference aliases them.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off), len) };
        Ok(f(slice))
    }

    /// Gives a reader a view of `[off, off+len)`.
    pub(crate) fn with_slice<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        self.check(off, len)?;
        // SAFETY: bounds checked above; callers read only published ranges, which the writer
        // no longer modifies (module rules), and the mapping outlives `self`.
        let slice = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) };
        Ok(f(slice))
    }

    /// Asks the CPU to start loading the cache lines of `[off, off+len)` (clipped to the
    /// file): a hint for a reader about to walk them, never a fault, never an error.
    pub(crate) fn prefetch(&self, off: usize, len: usize) {
        let end = off.saturating_add(len).min(self.len);
        let mut at = off - off % CACHE_LINE;
        while at < end {
            // Inside the mapping (checked above); a prefetch reads nothing the program sees.
            let line = self.map.as_ptr().wrapping_add(at);
            prefetch_line(line);
            at += CACHE_LINE;
        }
    }

    /// Makes the file's name durable (fsync of its directory) unless that was done already.
    pub(crate) fn sync_name(&self) -> io::Result<()> {
        if self.name_durable.load(Ordering::Acquire) {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        sync_dir(dir)?;
        self.name_durable.store(true, Ordering::Release);
        Ok(())
    }

    /// msync(MS_SYNC) of `[off, off+len)`; first makes the name durable if it is not yet
    /// (data in a file whose name could vanish is not durable).
    pub(crate) fn flush(&self, off: usize, len: usize) -> io::Result<()> {
        self.check(off, len)?;
        if len == 0 {
            return Ok(());
        }
        self.sync_name()?;
        self.map.flush_range(off, len)
    }

    /// Path of the file (for error messages).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The cache line size [`MmapSegment::prefetch`] steps by (x86-64 and most ARM cores).
const CACHE_LINE: usize = 64;

/// One prefetch into all cache levels; nothing on targets without the instruction here.
#[inline(always)]
fn prefetch_line(line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never dereferences in the program's sense: it cannot fault or
    // change memory, whatever the address (SSE, part of the x86-64 baseline).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}
