//! Simulated network: per-run chaos parameters and the link matrix for partitions.

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;

/// Message faults for one run (chosen from the seed).
#[derive(Clone, Debug, Default)]
pub struct Chaos {
    /// Per-mille of messages dropped.
    pub drop_permille: u64,
    /// Per-mille of messages delivered twice.
    pub dup_permille: u64,
    /// Base one-way delay range, ms.
    pub delay_min_ms: u64,
    pub delay_max_ms: u64,
    /// Per-mille of messages that get a long extra delay (reordering).
    pub tail_permille: u64,
    pub tail_max_ms: u64,
}

impl Chaos {
    /// A calm LAN: 1-3 ms, nothing lost.
    pub fn calm() -> Self {
        Chaos {
            delay_min_ms: 1,
            delay_max_ms: 3,
            ..Default::default()
        }
    }

    /// Random chaos within SIM-02's ranges: drop 0-30 %, duplicate 0-10 %, delay 1-50 ms with a
    /// 5 % tail up to 500 ms.
    pub fn random(rng: &mut ChaCha8Rng) -> Self {
        let delay_min_ms = 1 + rng.next_u64() % 10;
        Chaos {
            drop_permille: rng.next_u64() % 301,
            dup_permille: rng.next_u64() % 101,
            delay_min_ms,
            delay_max_ms: delay_min_ms + rng.next_u64() % 40,
            tail_permille: 50,
            tail_max_ms: 500,
        }
    }

    /// Delivery delays for one message: empty when dropped, two entries when duplicated.
    pub fn deliveries(&self, rng: &mut ChaCha8Rng) -> Vec<u64> {
        if rng.next_u64() % 1000 < self.drop_permille {
            return Vec::new();
        }
        let copies = if rng.next_u64() % 1000 < self.dup_permille {
            2
        } else {
            1
        };
        (0..copies)
            .map(|_| {
                let span = self.delay_max_ms.saturating_sub(self.delay_min_ms) + 1;
                let mut d = self.delay_min_ms + rng.next_u64() % span;
                if rng.next_u64() % 1000 < self.tail_permille {
                    d += rng.next_u64() % (self.tail_max_ms + 1);
                }
                d
            })
            .collect()
    }
}

/// Partition shapes of SIM-03.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// Two random halves.
    Halves,
    /// The current leader (or a random node) cut off both ways.
    IsolateLeader,
    /// Some directed links blocked, the reverse open.
    OneWay,
    /// Each node reaches only its two ring neighbours (5 nodes: overlapping majorities).
    Ring,
    /// Two halves joined by one bridge node that sees everybody.
    Bridge,
}

impl PartitionKind {
    pub const ALL: [PartitionKind; 5] = [
        PartitionKind::Halves,
        PartitionKind::IsolateLeader,
        PartitionKind::OneWay,
        PartitionKind::Ring,
        PartitionKind::Bridge,
    ];
}

/// Which directed links are blocked.
#[derive(Clone, Debug)]
pub struct Links {
    n: usize,
    blocked: Vec<bool>,
}

impl Links {
    /// All links open.
    pub fn open(n: usize) -> Self {
        Links {
            n,
            blocked: vec![false; n * n],
        }
    }
    /// Can `from` reach `to`?
    pub fn allows(&self, from: usize, to: usize) -> bool {
        !self.blocked[from * self.n + to]
    }
    /// Block or open one direction.
    pub fn set(&mut self, from: usize, to: usize, blocked: bool) {
        self.blocked[from * self.n + to] = blocked;
    }
    /// Open everything.
    pub fn heal(&mut self) {
        self.blocked.iter_mut().for_each(|b| *b = false);
    }
    /// Apply a partition shape (`leader` = current leader, if any).
    pub fn apply(&mut self, kind: PartitionKind, leader: Option<usize>, rng: &mut ChaCha8Rng) {
        let n = self.n;
        self.heal();
        let pick = |rng: &mut ChaCha8Rng| (rng.next_u64() % n as u64) as usize;
        match kind {
            PartitionKind::Halves => {
                let side: Vec<bool> = (0..n).map(|_| rng.next_u64() & 1 == 0).collect();
                for a in 0..n {
                    for b in 0..n {
                        if side[a] != side[b] {
                            self.set(a, b, true);
                        }
                    }
                }
            }
            PartitionKind::IsolateLeader => {
                let x = leader.unwrap_or_else(|| pick(rng));
                for o in 0..n {
                    if o != x {
                        self.set(x, o, true);
                        self.set(o, x, true);
                    }
                }
            }
            PartitionKind::OneWay => {
                let k = 1 + rng.next_u64() % (n as u64);
                for _ in 0..k {
                    let (a, b) = (pick(rng), pick(rng));
                    if a != b {
                        self.set(a, b, true);
                    }
                }
            }
            PartitionKind::Ring => {
                for a in 0..n {
                    for b in 0..n {
                        let d = (a + n - b) % n;
                        if a != b && d != 1 && d != n - 1 {
                            self.set(a, b, true);
                        }
                    }
                }
            }
            PartitionKind::Bridge => {
                let bridge = pick(rng);
                let side: Vec<bool> = (0..n).map(|i| i < n / 2).collect();
                for a in 0..n {
                    for b in 0..n {
                        if a != bridge && b != bridge && side[a] != side[b] {
                            self.set(a, b, true);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;

    #[test]
    fn ring_keeps_only_neighbours_and_heal_opens_all() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut l = Links::open(5);
        l.apply(PartitionKind::Ring, None, &mut rng);
        assert!(l.allows(0, 1) && l.allows(0, 4) && !l.allows(0, 2) && !l.allows(0, 3));
        l.apply(PartitionKind::IsolateLeader, Some(2), &mut rng);
        assert!(!l.allows(2, 0) && !l.allows(3, 2) && l.allows(0, 1));
        l.heal();
        assert!((0..5).all(|a| (0..5).all(|b| l.allows(a, b))));
        let calm = Chaos::calm();
        assert_eq!(calm.deliveries(&mut rng).len(), 1);
    }
}
