//! `checkpoint` file: `endIndex=N` and `committedIndex=N` lines (Java properties text).

use super::properties::pairs;
use super::StateFileError;
use crate::types::Index;

/// Contents of the checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Ledger end index when written.
    pub end_index: Option<Index>,
    /// Committed index when written (durable: data up to it was flushed first).
    pub committed_index: Option<Index>,
}

fn parse_index(key: &'static str, v: &str) -> Result<Option<Index>, StateFileError> {
    v.parse::<i64>()
        .ok()
        .and_then(|n| Index::from_wire(n).ok())
        .ok_or_else(|| StateFileError::BadValue {
            key,
            value: v.chars().take(40).collect(),
        })
}

impl Checkpoint {
    /// Renders the file text.
    pub fn encode(&self) -> String {
        format!(
            "endIndex={}\ncommittedIndex={}\n",
            Index::to_wire(self.end_index),
            Index::to_wire(self.committed_index)
        )
    }

    /// Parses the file; missing keys mean none.
    pub fn parse(bytes: &[u8]) -> Result<Checkpoint, StateFileError> {
        let text = std::str::from_utf8(bytes).map_err(|_| StateFileError::NotText)?;
        let mut cp = Checkpoint::default();
        for (k, v) in pairs(text) {
            match k {
                "endIndex" => cp.end_index = parse_index("endIndex", v)?,
                "committedIndex" => cp.committed_index = parse_index("committedIndex", v)?,
                _ => {}
            }
        }
        Ok(cp)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let cp = Checkpoint {
            end_index: Some(Index(1234)),
            committed_index: Some(Index(1230)),
        };
        assert_eq!(cp.encode(), "endIndex=1234\ncommittedIndex=1230\n");
        assert_eq!(Checkpoint::parse(cp.encode().as_bytes()), Ok(cp));
        assert_eq!(
            Checkpoint::parse(b"committedIndex=-1\n")
                .unwrap()
                .committed_index,
            None
        );
        assert!(Checkpoint::parse(b"committedIndex=x").is_err());
        assert!(Checkpoint::parse(&[0xff, 0xfe]).is_err());
    }
}
