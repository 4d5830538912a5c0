//! Latency histogram with bucket bounds fixed at construction. Each observation increments
//! exactly one (non-cumulative) bucket slot plus the sum; the exposition makes the counts
//! cumulative. Bounds are integer microseconds so bucket selection is integer compares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Default latency bounds: 100 µs .. 10 s, roughly 1-2.5-5 steps.
pub const DEFAULT_LATENCY_BOUNDS_US: &[u64] = &[
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Fixed-bucket latency histogram (exposed in seconds).
#[derive(Debug)]
pub struct LatencyHistogram {
    /// Upper bounds (inclusive), strictly increasing, in microseconds.
    bounds_us: &'static [u64],
    /// `bounds_us.len() + 1` slots; the last one counts observations above every bound.
    slots: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

/// A copy of a histogram's counters for rendering or tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds in microseconds.
    pub bounds_us: &'static [u64],
    /// Cumulative counts: `cumulative[i]` = observations <= `bounds_us[i]`.
    pub cumulative: Vec<u64>,
    /// Number of observations (the `+Inf` bucket).
    pub count: u64,
    /// Sum of observations in nanoseconds.
    pub sum_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new(DEFAULT_LATENCY_BOUNDS_US)
    }
}

impl LatencyHistogram {
    /// A histogram over `bounds_us`, which must be strictly increasing (checked: a broken
    /// static table is a programming error).
    pub fn new(bounds_us: &'static [u64]) -> Self {
        assert!(
            bounds_us.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must be strictly increasing"
        );
        let slots = (0..=bounds_us.len()).map(|_| AtomicU64::new(0)).collect();
        LatencyHistogram {
            bounds_us,
            slots,
            sum_ns: AtomicU64::new(0),
        }
    }

    /// The slot an observation of `us` microseconds lands in: the first bound >= `us`, or
    /// the overflow slot.
    pub fn slot_of(&self, us: u64) -> usize {
        self.bounds_us.partition_point(|&b| b < us)
    }

    /// Records one observation.
    #[inline]
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Round up to whole microseconds: 100.5 µs is above a 100 µs bound.
        let us = ns.div_ceil(1_000);
        let slot = self.slot_of(us);
        if let Some(s) = self.slots.get(slot) {
            s.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Cumulative counts, count and sum. Not an atomic cut: under concurrent updates the sum
    /// may include an observation the buckets do not yet show (Prometheus tolerates this).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0u64;
        let mut cumulative = Vec::with_capacity(self.bounds_us.len());
        for (i, slot) in self.slots.iter().enumerate() {
            running = running.wrapping_add(slot.load(Ordering::Relaxed));
            if i < self.bounds_us.len() {
                cumulative.push(running);
            }
        }
        HistogramSnapshot {
            bounds_us: self.bounds_us,
            cumulative,
            count: running,
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BOUNDS: &[u64] = &[10, 100, 1_000];

    #[test]
    fn bucket_bounds_are_inclusive_upper_limits() {
        let h = LatencyHistogram::new(BOUNDS);
        assert_eq!(h.slot_of(0), 0);
        assert_eq!(h.slot_of(10), 0);
        assert_eq!(h.slot_of(11), 1);
        assert_eq!(h.slot_of(100), 1);
        assert_eq!(h.slot_of(101), 2);
        assert_eq!(h.slot_of(1_000), 2);
        assert_eq!(h.slot_of(1_001), 3);
        assert_eq!(h.slot_of(u64::MAX), 3);
    }

    #[test]
    fn snapshot_is_cumulative_and_sums_nanoseconds() {
        let h = LatencyHistogram::new(BOUNDS);
        h.observe(Duration::from_micros(5)); // slot 0
        h.observe(Duration::from_micros(10)); // slot 0 (inclusive)
        h.observe(Duration::from_nanos(10_001)); // 10.001 µs rounds up: slot 1
        h.observe(Duration::from_micros(999)); // slot 2
        h.observe(Duration::from_secs(3)); // overflow
        let s = h.snapshot();
        assert_eq!(s.cumulative, vec![2, 3, 4]);
        assert_eq!(s.count, 5);
        assert_eq!(s.sum_ns, 5_000 + 10_000 + 10_001 + 999_000 + 3_000_000_000);
    }

    #[test]
    fn huge_durations_saturate_instead_of_panicking() {
        let h = LatencyHistogram::new(BOUNDS);
        h.observe(Duration::MAX);
        let s = h.snapshot();
        assert_eq!(s.count, 1);
        assert_eq!(s.cumulative, vec![0, 0, 0]);
        assert_eq!(s.sum_ns, u64::MAX);
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn unsorted_bounds_are_rejected() {
        static BAD: &[u64] = &[5, 5];
        let _ = LatencyHistogram::new(BAD);
    }
}
