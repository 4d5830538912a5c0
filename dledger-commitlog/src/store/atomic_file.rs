//! Small state files replaced atomically and durably: write `<name>.tmp`, fsync it, rename
//! over `<name>`, fsync the directory. After a crash either the old or the new content is
//! there, never a torn mix (R3: term and vote must be durable before a vote is answered).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Durably replaces `dir/name` with `bytes`.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, &dst)?;
    sync_dir(dir)
}

/// fsync of a directory, so created, renamed or deleted names are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads `dir/name`; `Ok(None)` if it does not exist.
pub(crate) fn read_optional(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    match fs::read(dir.join(name)) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
