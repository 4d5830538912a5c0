//! Numbers that must not mix: log `Index`, leader `Term`, data-log byte `Pos`.
//!
//! DLedger puts `-1` on the wire and on disk for "none" (empty log, no committed
//! index, no term yet). Inside the crate "none" is `Option::None`; the `-1`
//! convention is converted here and nowhere else (`from_wire` / `to_wire`).

use std::fmt;

/// A wire or disk integer that is negative but not the `-1` "none" marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("negative value {0} where only -1 (none) or a non-negative number is allowed")]
pub struct NegativeWireValue(pub i64);

macro_rules! wire_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl $name {
            /// Decodes DLedger's signed representation: `-1` is none, other negatives are errors.
            pub fn from_wire(v: i64) -> Result<Option<Self>, NegativeWireValue> {
                match v {
                    -1 => Ok(None),
                    v if v < 0 => Err(NegativeWireValue(v)),
                    v => Ok(Some(Self(v as u64))),
                }
            }

            /// Encodes for the wire or disk: none becomes `-1`.
            pub fn to_wire(v: Option<Self>) -> i64 {
                v.map_or(-1, Self::raw)
            }

            /// The value as DLedger's `long` (values beyond `i64::MAX` never occur: they would
            /// need an exabyte log).
            pub fn raw(self) -> i64 {
                i64::try_from(self.0).unwrap_or(i64::MAX)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

wire_newtype!(
    /// Raft log entry number, starting at 0, contiguous.
    Index
);
wire_newtype!(
    /// Term in which a leader created an entry (or the member's current term).
    Term
);
wire_newtype!(
    /// Absolute byte position in the DLedger data address space (where an entry's header starts).
    Pos
);

impl Index {
    /// The following index.
    pub fn next(self) -> Index {
        Index(self.0 + 1)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn minus_one_is_none_and_round_trips() {
        assert_eq!(Index::from_wire(-1), Ok(None));
        assert_eq!(Index::from_wire(7), Ok(Some(Index(7))));
        assert_eq!(Index::from_wire(-2), Err(NegativeWireValue(-2)));
        assert_eq!(Term::to_wire(None), -1);
        assert_eq!(Pos::to_wire(Some(Pos(48))), 48);
    }
}
