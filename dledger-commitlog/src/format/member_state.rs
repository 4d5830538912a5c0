//! `currterm` file: `currTerm=N` and `voteLeader=<peer id or empty>`.

use super::properties::pairs;
use super::StateFileError;
use crate::types::Term;

/// Term and vote: what must be durable before a vote is answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HardState {
    /// Current term.
    pub term: Term,
    /// Peer voted for in `term`, if any.
    pub voted_for: Option<String>,
}

impl HardState {
    /// Renders the file text.
    pub fn encode(&self) -> String {
        format!(
            "currTerm={}\nvoteLeader={}\n",
            self.term.0,
            self.voted_for.as_deref().unwrap_or("")
        )
    }

    /// Parses the file; `currTerm` is required (a present but unreadable file is an error).
    pub fn parse(bytes: &[u8]) -> Result<HardState, StateFileError> {
        let text = std::str::from_utf8(bytes).map_err(|_| StateFileError::NotText)?;
        let mut term = None;
        let mut voted_for = None;
        for (k, v) in pairs(text) {
            match k {
                "currTerm" => {
                    let t = v
                        .parse::<i64>()
                        .ok()
                        .and_then(|n| Term::from_wire(n).ok())
                        .ok_or_else(|| StateFileError::BadValue {
                            key: "currTerm",
                            value: v.chars().take(40).collect(),
                        })?;
                    term = Some(t.unwrap_or_default());
                }
                "voteLeader" => voted_for = (!v.is_empty()).then(|| v.to_string()),
                _ => {}
            }
        }
        Ok(HardState {
            term: term.ok_or(StateFileError::MissingKey("currTerm"))?,
            voted_for,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let hs = HardState {
            term: Term(7),
            voted_for: Some("n1".into()),
        };
        assert_eq!(hs.encode(), "currTerm=7\nvoteLeader=n1\n");
        assert_eq!(HardState::parse(hs.encode().as_bytes()), Ok(hs));
        let none = HardState::parse(b"currTerm=3\nvoteLeader=\n").unwrap();
        assert_eq!(none.voted_for, None);
        assert!(HardState::parse(b"").is_err());
        assert!(HardState::parse(b"currTerm=abc\n").is_err());
    }
}
