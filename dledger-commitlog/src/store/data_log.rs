//! Where entries go in the data address space (the blank rule of spec/dledger.md §2.1) and
//! making sure the file that will hold a position exists.

use std::sync::Arc;

use super::error::StoreError;
use super::segment::{segment_name, Kind, Segment};
use super::shared::Shared;
use crate::format::entry::BLANK_HEADER_BYTES;

/// Where the next entry of `size` bytes goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// A blank record `(pos, len)` that pads the current file first.
    pub(crate) blank: Option<(u64, u64)>,
    /// Position of the entry.
    pub(crate) pos: u64,
}

/// Applies the blank rule: if `size + 8` does not fit in the rest of the current file, pad the
/// rest with a blank record and start the entry at the next file. `base` is the start of any
/// data file (files start at `base + k * seg_len`).
pub(crate) fn place(base: u64, seg_len: u64, write_pos: u64, size: u64) -> Placement {
    let seg_start = if write_pos >= base {
        write_pos - (write_pos - base) % seg_len
    } else {
        write_pos
    };
    let remaining = seg_start + seg_len - write_pos;
    if size + BLANK_HEADER_BYTES as u64 > remaining {
        let blank = (remaining >= BLANK_HEADER_BYTES as u64).then_some((write_pos, remaining));
        Placement {
            blank,
            pos: seg_start + seg_len,
        }
    } else {
        Placement {
            blank: None,
            pos: write_pos,
        }
    }
}

/// Returns the segment of `kind` holding `addr`, creating missing segments up to it (waiting
/// for a background creation in progress). `first_start` is used when the list is empty.
pub(crate) fn ensure_segment(
    sh: &Shared,
    kind: Kind,
    addr: u64,
    first_start: u64,
) -> Result<Arc<Segment>, StoreError> {
    let list = sh.list(kind);
    let len = list.seg_len();
    loop {
        if let Some(s) = list.find(addr) {
            return Ok(s);
        }
        let start = list.bounds().map_or(first_start, |(_, end)| end);
        if addr < start {
            return Err(StoreError::io(
                "locate",
                sh.dir.display(kind, &segment_name(addr)),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "position below the first file",
                ),
            ));
        }
        // A job the background thread has not started is taken over; one it is doing is
        // waited for (creating a file is short).
        let claimed = sh.prealloc.claim(kind, start);
        if !claimed {
            sh.prealloc.wait_idle(kind, start);
        }
        if list.find(addr).is_some() || list.bounds().map_or(first_start, |(_, e)| e) != start {
            continue;
        }
        // A claimed file is not populated here: the background thread does it (told below)
        // ahead of the writer, which faults in what it reaches first.
        let seg = sh
            .dir
            .create_segment(kind, start, len, !claimed)
            .map_err(|e| StoreError::io("create", sh.dir.display(kind, &segment_name(start)), e))?;
        let mut segs = list.write();
        if segs.last().map_or(first_start, |l| l.end()) == start {
            segs.push(Arc::new(seg));
        }
        drop(segs);
        sh.prealloc.published(kind, start);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn blank_rule() {
        // Fits with 8 bytes to spare: no blank.
        assert_eq!(
            place(0, 100, 0, 92),
            Placement {
                blank: None,
                pos: 0
            }
        );
        // One byte more: blank over the whole rest of the file, entry at the next file.
        assert_eq!(
            place(0, 100, 10, 83),
            Placement {
                blank: Some((10, 90)),
                pos: 100
            }
        );
        // At a file boundary the next file is current.
        assert_eq!(
            place(0, 100, 100, 50),
            Placement {
                blank: None,
                pos: 100
            }
        );
        // Files need not start at 0.
        assert_eq!(
            place(1000, 100, 1150, 10),
            Placement {
                blank: None,
                pos: 1150
            }
        );
        assert_eq!(
            place(1000, 100, 1195, 50),
            Placement {
                blank: None,
                pos: 1200
            }
        );
    }
}
