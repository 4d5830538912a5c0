//! DataVersion: the change counter attached to every metadata table (spec remoting.md §12.4).
//! The wire type lives in `remoting::body` (shared with the name server and the register
//! body); this module re-exports it for the store's tables.

pub use remoting::body::DataVersion;

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
