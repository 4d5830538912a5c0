//! DataVersion: the change counter attached to every metadata table (spec remoting.md §12.4).

use serde::{Deserialize, Serialize};

/// `{"counter":N,"stateVersion":0,"timestamp":ms}`; equality = all fields equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataVersion {
    pub counter: i64,
    pub state_version: i64,
    pub timestamp: i64,
}

impl DataVersion {
    /// A fresh version stamped `now_ms` (Java: `new DataVersion()`).
    pub fn new(now_ms: i64) -> Self {
        Self {
            counter: 0,
            state_version: 0,
            timestamp: now_ms,
        }
    }

    /// Java's `nextVersion()`: new timestamp, counter + 1, state version 0.
    pub fn next(&mut self, now_ms: i64) {
        self.timestamp = now_ms;
        self.state_version = 0;
        self.counter += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let v = DataVersion {
            counter: 3,
            state_version: 0,
            timestamp: 1_700_000_000_000,
        };
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"counter":3,"stateVersion":0,"timestamp":1700000000000}"#
        );
        let back: DataVersion = serde_json::from_str(r#"{"counter":3,"timestamp":5}"#).unwrap();
        assert_eq!(
            (back.counter, back.state_version, back.timestamp),
            (3, 0, 5)
        );
        let mut n = back;
        n.next(9);
        assert_eq!((n.counter, n.timestamp), (4, 9));
    }
}
