//! Minimal Java-properties reader for the two state files: `key=value` lines.

/// Iterates `(key, value)` pairs; blank lines and `#`/`!` comments are skipped.
pub(crate) fn pairs(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            return None;
        }
        let split = line.find(['=', ':'])?;
        Some((line[..split].trim(), line[split + 1..].trim()))
    })
}
