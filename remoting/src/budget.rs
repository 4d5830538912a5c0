//! A byte budget shared by every connection of a server for bytes held in partial frames
//! (RELIABILITY.md §4.1, slow drip): without it, each of thousands of connections may buffer
//! up to a whole announced frame (16 MiB) while trickling bytes.
//!
//! Owns: the shared counter and the per-connection hold. Policy: the connection whose read
//! would take the total past the limit is closed (its bytes are released); others keep what
//! they hold. A read adds at most one read chunk (64 KiB) before the check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes held in partial frames across connections, and their limit.
#[derive(Debug)]
pub struct PartialFrameBudget {
    used: AtomicUsize,
    limit: usize,
}

impl PartialFrameBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<PartialFrameBudget> {
        Arc::new(PartialFrameBudget {
            used: AtomicUsize::new(0),
            limit,
        })
    }

    /// Bytes currently held.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn try_grow(&self, n: usize) -> bool {
        let before = self.used.fetch_add(n, Ordering::AcqRel);
        if before.saturating_add(n) > self.limit {
            self.used.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What one connection holds of the budget; released when dropped.
pub(crate) struct BudgetHold {
    budget: Arc<PartialFrameBudget>,
    held: usize,
}

impl BudgetHold {
    pub(crate) fn new(budget: Arc<PartialFrameBudget>) -> BudgetHold {
        BudgetHold { budget, held: 0 }
    }

    /// Sets this connection's partial bytes to `bytes`; false (holding nothing more) if the
    /// growth does not fit in the budget.
    pub(crate) fn set(&mut self, bytes: usize) -> bool {
        if bytes > self.held {
            if !self.budget.try_grow(bytes - self.held) {
                return false;
            }
        } else if bytes < self.held {
            self.budget.release(self.held - bytes);
        }
        self.held = bytes;
        true
    }
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        self.budget.release(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_grow_shrink_and_release_within_the_limit() {
        let budget = PartialFrameBudget::new(100);
        let mut a = BudgetHold::new(budget.clone());
        let mut b = BudgetHold::new(budget.clone());
        assert!(a.set(60));
        assert!(!b.set(50), "60 + 50 > 100");
        assert_eq!(budget.used(), 60);
        assert!(b.set(40));
        assert_eq!(budget.used(), 100);
        assert!(a.set(10));
        assert_eq!(budget.used(), 50);
        drop(b);
        assert_eq!(budget.used(), 10);
        assert!(a.set(0));
        drop(a);
        assert_eq!(budget.used(), 0);
    }
}
