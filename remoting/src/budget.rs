//! A byte budget shared by every connection of a server for the read buffers of partial
//! frames (RELIABILITY.md §4.1, slow drip): without it, each of thousands of connections may
//! buffer up to a whole announced frame (16 MiB) while trickling bytes.
//!
//! Owns: the shared counters and the per-connection hold. The limit applies to what the
//! buffers of partial frames have *allocated*, not to the bytes received: a read buffer grows
//! by doubling, so one holding a few received bytes past a power of two has nearly twice
//! that allocated (FZ-06 measured a 128 MiB budget of received bytes as ~250 MiB more
//! broker RSS). A connection whose read buffer is still its initial one (8 KiB, which grows
//! once less than 4 KiB of it is free: a partial frame of up to about 4 KiB) is not charged:
//! that buffer is a fixed cost of every connection, like its tasks, bounded by the
//! connection cap, and a full budget then cannot cut a client sending small frames.
//! Policy: the connection whose buffer would take the total past the limit is closed (its
//! bytes are released); others keep what they hold. The check comes before each read, with
//! the buffer that read fills, so the total never goes past the limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes held in partial frames across connections, what their buffers allocated, and the
/// limit on the latter.
#[derive(Debug)]
pub struct PartialFrameBudget {
    used: AtomicUsize,
    charged: AtomicUsize,
    limit: usize,
}

impl PartialFrameBudget {
    /// A budget of `limit` bytes of buffer.
    pub fn new(limit: usize) -> Arc<PartialFrameBudget> {
        Arc::new(PartialFrameBudget {
            used: AtomicUsize::new(0),
            charged: AtomicUsize::new(0),
            limit,
        })
    }

    /// Bytes currently held in partial frames (received, not yet a whole frame).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes of read buffer currently charged against the limit.
    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn try_charge(&self, n: usize) -> bool {
        let before = self.charged.fetch_add(n, Ordering::AcqRel);
        if before.saturating_add(n) > self.limit {
            self.charged.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }
}

/// What one connection holds of the budget; released when dropped.
pub(crate) struct BudgetHold {
    budget: Arc<PartialFrameBudget>,
    held: usize,
    charged: usize,
}

impl BudgetHold {
    pub(crate) fn new(budget: Arc<PartialFrameBudget>) -> BudgetHold {
        BudgetHold {
            budget,
            held: 0,
            charged: 0,
        }
    }

    /// Records that this connection holds `bytes` of a partial frame in a buffer of which
    /// `charged` bytes count against the limit; false (nothing changed) if the growth of the
    /// charge does not fit in the budget.
    pub(crate) fn set(&mut self, bytes: usize, charged: usize) -> bool {
        // Shared counters are touched only on a change: a connection without a partial
        // frame calls this after every read.
        if charged > self.charged {
            if !self.budget.try_charge(charged - self.charged) {
                return false;
            }
        } else if charged < self.charged {
            self.budget
                .charged
                .fetch_sub(self.charged - charged, Ordering::AcqRel);
        }
        self.charged = charged;
        if bytes > self.held {
            self.budget
                .used
                .fetch_add(bytes - self.held, Ordering::AcqRel);
        } else if bytes < self.held {
            self.budget
                .used
                .fetch_sub(self.held - bytes, Ordering::AcqRel);
        }
        self.held = bytes;
        true
    }
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::AcqRel);
        self.budget
            .charged
            .fetch_sub(self.charged, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_grow_shrink_and_release_within_the_limit() {
        let budget = PartialFrameBudget::new(100);
        let mut a = BudgetHold::new(budget.clone());
        let mut b = BudgetHold::new(budget.clone());
        assert!(a.set(40, 60));
        assert!(!b.set(30, 50), "60 + 50 > 100");
        assert_eq!((budget.used(), budget.charged()), (40, 60));
        assert!(b.set(30, 40));
        assert_eq!((budget.used(), budget.charged()), (70, 100));
        assert!(a.set(5, 10));
        assert_eq!((budget.used(), budget.charged()), (35, 50));
        // Bytes in an uncharged (initial) buffer are counted, not charged.
        assert!(a.set(8, 0));
        assert_eq!((budget.used(), budget.charged()), (38, 40));
        drop(b);
        assert_eq!((budget.used(), budget.charged()), (8, 0));
        assert!(a.set(0, 0));
        drop(a);
        assert_eq!((budget.used(), budget.charged()), (0, 0));
    }
}
