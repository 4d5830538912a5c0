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

use memmap2::{MmapOptions, MmapRaw};

const PAGE: usize = 4096;
const ZERO_CHUNK: usize = 1 << 20;

/// A mapped data or index file.
#[derive(Debug)]
pub(crate) struct MmapSegment {
    map: MmapRaw,
    len: usize,
    path: PathBuf,
    _file: File,
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
    /// Creates (or completes a half-created) file of `len` bytes, allocates it, maps it and
    /// pre-touches every page so the append path takes no first-touch faults.
    pub(crate) fn create(path: &Path, len: u64) -> io::Result<MmapSegment> {
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
        let seg = Self::map(file, path, len)?;
        seg.pretouch();
        Ok(seg)
    }

    /// Opens an existing file; a short file is zero-extended to `len` (recovery decides whether
    /// that is allowed before calling this).
    pub(crate) fn open(path: &Path, len: u64) -> io::Result<MmapSegment> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let have = file.metadata()?.len();
        if have < len {
            allocate(&mut file, have, len)?;
        }
        Self::map(file, path, len)
    }

    fn map(file: File, path: &Path, len: u64) -> io::Result<MmapSegment> {
        let len_usize = usize::try_from(len).map_err(|_| io::Error::other("segment too large"))?;
        let map = MmapOptions::new().len(len_usize).map_raw(&file)?;
        Ok(MmapSegment {
            map,
            len: len_usize,
            path: path.to_path_buf(),
            _file: file,
        })
    }

    fn check(&self, off: usize, len: usize) -> io::Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the segment",
            )),
        }
    }

    /// Touches every page (writes a zero into each) of a freshly created, unpublished segment.
    fn pretouch(&self) {
        let base = self.map.as_mut_ptr();
        let mut off = 0;
        while off < self.len {
            // SAFETY: `off < len`, inside the mapping; the segment is new and not yet shared
            // with anyone, and it is all zeros, so writing a zero changes nothing visible.
            unsafe { base.add(off).write_volatile(0) };
            off += PAGE;
        }
    }

    /// Gives the writer a mutable view of `[off, off+len)`.
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

    /// msync(MS_SYNC) of `[off, off+len)`.
    pub(crate) fn flush(&self, off: usize, len: usize) -> io::Result<()> {
        self.check(off, len)?;
        if len == 0 {
            return Ok(());
        }
        self.map.flush_range(off, len)
    }

    /// Path of the file (for error messages).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}
