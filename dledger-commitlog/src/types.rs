//! Numbers that must not mix: log `Index`, leader `Term`, data-log byte `Pos`; and the
//! [`LogEntry`] they describe.
//!
//! DLedger puts `-1` on the wire and on disk for "none" (empty log, no committed
//! index, no term yet). Inside the crate "none" is `Option::None`; the `-1`
//! convention is converted here and nowhere else (`from_wire` / `to_wire`).

use bytes::Bytes;
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

/// Largest number DLedger's signed `long` can carry: no index, term or position beyond it
/// exists on the wire or on disk.
const LONG_MAX: u64 = i64::MAX as u64;

impl Index {
    /// The first entry's index.
    pub const ZERO: Index = Index(0);

    /// The following index.
    pub fn next(self) -> Index {
        Index(self.0 + 1)
    }

    /// The index before this one; `None` before the first entry.
    pub fn prev(self) -> Option<Index> {
        self.0.checked_sub(1).map(Index)
    }

    /// The index that follows `last` (the first, 0, after none): where the entry after
    /// `last` goes.
    pub fn after(last: Option<Index>) -> Index {
        last.map_or(Index::ZERO, Index::next)
    }

    /// The index `n` entries further on.
    pub fn plus(self, n: u64) -> Index {
        Index(self.0.saturating_add(n))
    }

    /// `self + n`, if that is still a DLedger index (at most `i64::MAX`).
    pub fn checked_add(self, n: u64) -> Option<Index> {
        self.0.checked_add(n).filter(|v| *v <= LONG_MAX).map(Index)
    }

    /// How many indexes `0..=last` covers (0 for none).
    pub fn count_through(last: Option<Index>) -> u64 {
        last.map_or(0, |i| i.0.saturating_add(1))
    }

    /// The last index of a log prefix of `count` entries (`None` for none): the inverse of
    /// [`Index::count_through`].
    pub fn last_of_count(count: u64) -> Option<Index> {
        count.checked_sub(1).map(Index)
    }

    /// How far `to` is ahead of `from` in entries (negative when behind), as DLedger's
    /// difference of the two `long`s (none counting as the position before index 0).
    pub fn distance(from: Option<Index>, to: Option<Index>) -> i64 {
        let diff = i128::from(Index::count_through(to)) - i128::from(Index::count_through(from));
        i64::try_from(diff).unwrap_or(if diff < 0 { i64::MIN } else { i64::MAX })
    }
}

impl Term {
    /// The term a member starts in before it has seen any.
    pub const ZERO: Term = Term(0);

    /// The next term, if there is one: terms end at `i64::MAX`, the largest DLedger `long`.
    pub fn checked_next(self) -> Option<Term> {
        self.0.checked_add(1).filter(|v| *v <= LONG_MAX).map(Term)
    }
}

impl Pos {
    /// The position `bytes` further on.
    pub fn plus(self, bytes: u64) -> Pos {
        Pos(self.0.saturating_add(bytes))
    }

    /// Bytes from `from` to `self` (0 when `self` is not after `from`).
    pub fn bytes_since(self, from: Pos) -> u64 {
        self.0.saturating_sub(from.0)
    }
}

/// One log entry as consensus and the RPCs see it: its index, the term of the leader that
/// created it, where its header starts in the data address space, and its body. An empty
/// `body` is the no-op entry a leader appends on election (R1). Here rather than in the core
/// so that `wire` converts it to and from `DLedgerEntry` without depending on the core.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LogEntry {
    pub index: Index,
    pub term: Term,
    pub pos: Pos,
    pub body: Bytes,
}

/// Displays an optional index, term or position as DLedger writes it (`-1` for none), so
/// logs and reasons read as they do in DLedger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown<T>(pub Option<T>);

impl<T: fmt::Display> fmt::Display for Shown<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-1"),
        }
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

    #[test]
    fn index_and_term_helpers() {
        assert_eq!(Index::after(None), Index(0));
        assert_eq!(Index::after(Some(Index(4))), Index(5));
        assert_eq!(Index(0).prev(), None);
        assert_eq!(Index(5).prev(), Some(Index(4)));
        assert_eq!(Index(7).checked_add(3), Some(Index(10)));
        assert_eq!(Index(i64::MAX as u64).checked_add(1), None);
        assert_eq!(Index::count_through(None), 0);
        assert_eq!(Index::count_through(Some(Index(2))), 3);
        assert_eq!(Index::last_of_count(0), None);
        assert_eq!(Index::last_of_count(3), Some(Index(2)));
        assert_eq!(Index::distance(None, Some(Index(4))), 5);
        assert_eq!(Index::distance(Some(Index(4)), Some(Index(1))), -3);
        assert_eq!(Index::distance(Some(Index(4)), Some(Index(4))), 0);
        assert_eq!(Term(3).checked_next(), Some(Term(4)));
        assert_eq!(Term(i64::MAX as u64).checked_next(), None);
        assert_eq!(Term(u64::MAX).raw(), i64::MAX);
        assert_eq!(Pos(48).plus(5), Pos(53));
        assert_eq!(Index(3).plus(2), Index(5));
        assert_eq!(Pos(53).bytes_since(Pos(48)), 5);
        assert_eq!(Shown::<Index>(None).to_string(), "-1");
        assert_eq!(Shown(Some(Index(9))).to_string(), "9");
        // "none" orders below every value, as -1 did.
        assert!(None < Some(Index(0)));
    }
}
