//! A file mapped into memory and accessed as big-endian 32-bit words: the only module of the
//! broker with `unsafe`. The key index and the consume queues write their records through it,
//! so a put is a few memory stores instead of positioned read/write syscalls.
//!
//! Why words: every field of the index file (§12) and of a consume-queue unit (§11) starts at a
//! multiple of 4 bytes of its file (40-byte header, 4-byte slots, 20-byte entries/units), and a
//! 64-bit field is two words. Every access goes through an [`AtomicU32`] at a 4-aligned
//! position inside the mapping, so a reader racing the writer (a slot being overwritten, a
//! truncation zeroing units) sees old or new words, never undefined behaviour. Callers order
//! what matters with their own Release/Acquire publication (the consume queue's max offset,
//! the index header under its mutex).
//!
//! Disk space: a write into a hole of a sparse file that the filesystem cannot back would be a
//! SIGBUS, not an error. So ranges are reserved with `posix_fallocate` (zero-filled by `pwrite`
//! where the filesystem cannot) before they are written: callers reserve ahead with
//! [`MappedWords::reserve`], which reports ENOSPC as an error.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};

use memmap2::{MmapOptions, MmapRaw};

const ZERO_CHUNK: usize = 1 << 20;

/// A shared writable mapping of a whole file, accessed by 32-bit words.
#[derive(Debug)]
pub(crate) struct MappedWords {
    map: MmapRaw,
    len: usize,
    file: File,
}

impl MappedWords {
    /// Maps all `len` bytes of `file` (already `len` long).
    pub(crate) fn map(file: File, len: u64) -> io::Result<MappedWords> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("file too large to map"))?;
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        Ok(MappedWords { map, len, file })
    }

    /// `[pos, pos+n)` is inside the mapping and starts on a word.
    fn fits(&self, pos: usize, n: usize) -> bool {
        pos.is_multiple_of(4) && pos.checked_add(n).is_some_and(|end| end <= self.len)
    }

    fn word(&self, pos: usize) -> Option<&AtomicU32> {
        if !self.fits(pos, 4) {
            return None;
        }
        // SAFETY: `pos..pos+4` is inside the mapping (checked above) and 4-aligned (the mapping
        // starts on a page boundary and `pos` is a multiple of 4), as `AtomicU32` requires. The
        // mapping lives as long as `self`, which the returned reference borrows. Every access
        // to the mapping in this process goes through such atomic words (this module never
        // hands out byte slices), so there are no conflicting non-atomic accesses.
        Some(unsafe { &*self.map.as_mut_ptr().add(pos).cast::<AtomicU32>() })
    }

    /// The big-endian word at `pos` (0 outside the mapping or unaligned: callers compute
    /// positions from validated sizes, so that never happens for a well-formed file).
    pub(crate) fn load_u32(&self, pos: usize) -> u32 {
        self.word(pos)
            .map_or(0, |w| u32::from_be(w.load(Ordering::Relaxed)))
    }

    /// Stores `v` big-endian at `pos`; `false` if `pos` is outside the mapping or unaligned.
    pub(crate) fn store_u32(&self, pos: usize, v: u32) -> bool {
        match self.word(pos) {
            Some(w) => {
                w.store(v.to_be(), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The big-endian i32 at `pos`.
    pub(crate) fn load_i32(&self, pos: usize) -> i32 {
        self.load_u32(pos) as i32
    }

    /// The big-endian i64 at `pos` (two words, high first).
    pub(crate) fn load_i64(&self, pos: usize) -> i64 {
        let hi = u64::from(self.load_u32(pos));
        let lo = u64::from(self.load_u32(pos + 4));
        ((hi << 32) | lo) as i64
    }

    /// Stores `v` big-endian at `pos`.
    pub(crate) fn store_i32(&self, pos: usize, v: i32) -> bool {
        self.store_u32(pos, v as u32)
    }

    /// Stores `v` big-endian at `pos` (two words, high first).
    pub(crate) fn store_i64(&self, pos: usize, v: i64) -> bool {
        let v = v as u64;
        self.store_u32(pos, (v >> 32) as u32) && self.store_u32(pos + 4, v as u32)
    }

    /// Copies `out.len()` bytes from `pos` (both multiples of 4); `false` when out of range.
    pub(crate) fn read_into(&self, pos: usize, out: &mut [u8]) -> bool {
        if !out.len().is_multiple_of(4) || !self.fits(pos, out.len()) {
            return false;
        }
        for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&self.load_u32(pos + 4 * i).to_be_bytes());
        }
        true
    }

    /// Writes `bytes` at `pos` (both multiples of 4); `false` when out of range.
    pub(crate) fn write_from(&self, pos: usize, bytes: &[u8]) -> bool {
        if !bytes.len().is_multiple_of(4) || !self.fits(pos, bytes.len()) {
            return false;
        }
        for (i, chunk) in bytes.chunks_exact(4).enumerate() {
            let mut w = [0u8; 4];
            w.copy_from_slice(chunk);
            self.store_u32(pos + 4 * i, u32::from_be_bytes(w));
        }
        true
    }

    /// Makes sure the file's blocks for `[from, to)` exist, so writing them through the
    /// mapping cannot fault for lack of space. Never changes the contents.
    ///
    /// The same `posix_fallocate` call as `allocate` in dledger-commitlog's mmap segment; not
    /// shared: the crates have no common utility crate, and this fallback must keep existing
    /// contents (it fills holes only) where that one zero-fills a new file's range.
    pub(crate) fn reserve(&self, from: u64, to: u64) -> io::Result<()> {
        let to = to.min(self.len as u64);
        if to <= from {
            return Ok(());
        }
        let (Ok(off), Ok(len)) = (
            libc::off_t::try_from(from),
            libc::off_t::try_from(to - from),
        ) else {
            return Err(io::Error::other("file range too large"));
        };
        // SAFETY: plain syscall on a descriptor owned by `self` for the whole call; it reads
        // and writes no memory of this process.
        let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), off, len) };
        match rc {
            0 => Ok(()),
            libc::EOPNOTSUPP | libc::EINVAL => self.zero_fill_holes(from, to),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }

    /// Fallback of [`MappedWords::reserve`]: rewrites the range with its current contents
    /// (zeros in a never-written range), which allocates its blocks.
    fn zero_fill_holes(&self, from: u64, to: u64) -> io::Result<()> {
        let mut buf = vec![0u8; ZERO_CHUNK.min((to - from) as usize)];
        let mut at = from;
        while at < to {
            let n = ((to - at) as usize).min(buf.len());
            let chunk = &mut buf[..n];
            self.file.read_exact_at(chunk, at)?;
            self.file.write_all_at(chunk, at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Writes dirty pages back and waits (msync).
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_big_endian_in_the_file_and_bounds_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(16).unwrap();
        let m = MappedWords::map(file, 16).unwrap();
        m.reserve(0, 16).unwrap();
        assert!(m.store_i64(4, 0x0102_0304_0506_0708));
        assert!(m.store_i32(12, -2));
        assert!(!m.store_u32(14, 1), "unaligned");
        assert!(!m.store_u32(16, 1), "past the end");
        assert_eq!(m.load_i64(4), 0x0102_0304_0506_0708);
        assert_eq!(m.load_i32(12), -2);
        assert_eq!(m.load_u32(16), 0);
        let mut b = [0u8; 8];
        assert!(m.read_into(8, &mut b));
        assert_eq!(b, [5, 6, 7, 8, 0xff, 0xff, 0xff, 0xfe]);
        assert!(m.write_from(0, &[9, 9, 9, 9]));
        m.flush().unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(
            on_disk,
            [9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xfe]
        );
    }
}
