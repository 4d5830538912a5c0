//! Benchmark statistics: a log-linear latency histogram (percentiles with ~3% error, fixed
//! memory) and an outage tracker (first failed send -> next success) for failover timing.

use std::time::{Duration, Instant};

const SUB_BUCKETS: usize = 32;
const MAGNITUDES: usize = 40;

/// Latency histogram over microseconds: 32 linear sub-buckets per power of two.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_us: u128,
    max_us: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; SUB_BUCKETS * MAGNITUDES],
            total: 0,
            sum_us: 0,
            max_us: 0,
        }
    }
}

fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS as u64 {
        return us as usize;
    }
    let mag = 63 - us.leading_zeros() as usize; // >= 5
    let shift = mag - 5;
    let sub = ((us >> shift) as usize) - SUB_BUCKETS; // 0..32
    ((mag - 4) * SUB_BUCKETS + sub).min(SUB_BUCKETS * MAGNITUDES - 1)
}

fn bucket_upper(b: usize) -> u64 {
    if b < SUB_BUCKETS {
        return b as u64;
    }
    let mag = b / SUB_BUCKETS + 4;
    let sub = (b % SUB_BUCKETS) as u64;
    let shift = mag - 5;
    ((SUB_BUCKETS as u64 + sub + 1) << shift) - 1
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.counts[bucket_of(us)] += 1;
        self.total += 1;
        self.sum_us += u128::from(us);
        self.max_us = self.max_us.max(us);
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum_us += other.sum_us;
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Mean in milliseconds (0 when empty).
    pub fn mean_ms(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.total as f64 / 1000.0
        }
    }

    /// Max in milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.max_us as f64 / 1000.0
    }

    /// The `q` quantile (0..=1) in milliseconds, as the upper edge of its bucket capped at
    /// the max seen.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(b).min(self.max_us) as f64 / 1000.0;
            }
        }
        self.max_ms()
    }
}

/// One unavailability window.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    /// Since the benchmark started.
    pub start: Duration,
    pub end: Duration,
    /// Failed sends inside the window.
    pub failures: u64,
    /// The first error seen.
    pub first_error: String,
}

impl Outage {
    /// Length of the window.
    pub fn duration(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// Tracks outage windows from send outcomes in completion order.
#[derive(Debug)]
pub struct OutageTracker {
    origin: Instant,
    open: Option<(Duration, u64, String)>,
    closed: Vec<Outage>,
}

impl OutageTracker {
    /// A tracker whose times are relative to `origin`.
    pub fn new(origin: Instant) -> OutageTracker {
        OutageTracker {
            origin,
            open: None,
            closed: Vec::new(),
        }
    }

    /// Records a failed send at `at`.
    pub fn failure(&mut self, at: Instant, error: &str) {
        let t = at.saturating_duration_since(self.origin);
        match &mut self.open {
            Some((_, n, _)) => *n += 1,
            None => self.open = Some((t, 1, error.to_owned())),
        }
    }

    /// Records a success at `at`; returns the window it closed, if any.
    pub fn success(&mut self, at: Instant) -> Option<Outage> {
        let (start, failures, first_error) = self.open.take()?;
        let o = Outage {
            start,
            end: at.saturating_duration_since(self.origin),
            failures,
            first_error,
        };
        self.closed.push(o.clone());
        Some(o)
    }

    /// Closed windows so far.
    pub fn outages(&self) -> &[Outage] {
        &self.closed
    }

    /// The window still open (start, failures), if sends are failing now.
    pub fn open_since(&self) -> Option<(Duration, u64)> {
        self.open.as_ref().map(|(s, n, _)| (*s, *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut prev = 0;
        for us in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1000,
            12_345,
            1 << 30,
            u64::MAX >> 20,
        ] {
            let b = bucket_of(us);
            assert!(b >= prev, "{us}");
            prev = b;
            let up = bucket_upper(b);
            assert!(up >= us, "{us} -> {up}");
            assert!((up - us) as f64 <= us as f64 / 32.0 + 1.0, "{us} -> {up}");
        }
    }

    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut h = Histogram::default();
        for ms in 1..=1000u64 {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.count(), 1000);
        assert!((h.mean_ms() - 500.5).abs() < 0.01);
        assert_eq!(h.max_ms(), 1000.0);
        let p50 = h.quantile_ms(0.5);
        assert!((500.0..=516.0).contains(&p50), "{p50}");
        let p99 = h.quantile_ms(0.99);
        assert!((990.0..=1000.0).contains(&p99), "{p99}");
        let p999 = h.quantile_ms(0.999);
        assert!((999.0..=1000.0).contains(&p999), "{p999}");
        let mut h2 = Histogram::default();
        h2.record(Duration::from_secs(2));
        h.merge(&h2);
        assert_eq!(h.max_ms(), 2000.0);
    }

    #[test]
    fn outage_windows() {
        let t0 = Instant::now();
        let mut t = OutageTracker::new(t0);
        assert!(t.success(t0 + Duration::from_millis(5)).is_none());
        t.failure(t0 + Duration::from_millis(100), "busy");
        t.failure(t0 + Duration::from_millis(200), "refused");
        assert_eq!(t.open_since(), Some((Duration::from_millis(100), 2)));
        let o = t.success(t0 + Duration::from_millis(1100)).unwrap();
        assert_eq!(o.duration(), Duration::from_millis(1000));
        assert_eq!(o.failures, 2);
        assert_eq!(o.first_error, "busy");
        assert_eq!(t.outages().len(), 1);
        assert!(t.open_since().is_none());
    }
}
