//! The collectors of one process. A scrape first runs the samplers (which refresh gauges read
//! from elsewhere, e.g. the route table's size), then asks every collector to render. The
//! collector list is written at startup and read per scrape; the lock is never held across
//! an `.await` (rendering is synchronous).

use std::sync::{Arc, PoisonError, RwLock};

use crate::exposition::Exposition;

/// Something that renders metric families into an exposition.
pub trait Collect: Send + Sync {
    /// Appends this collector's families; each family's samples must be contiguous.
    fn collect(&self, out: &mut Exposition);
}

type Sampler = Box<dyn Fn() + Send + Sync>;

/// Every metric set of a process, rendered in registration order.
#[derive(Default)]
pub struct Registry {
    collectors: RwLock<Vec<Arc<dyn Collect>>>,
    samplers: RwLock<Vec<Sampler>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a collector (a metric set); families must not repeat across collectors.
    pub fn register(&self, collector: Arc<dyn Collect>) {
        self.collectors
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(collector);
    }

    /// Adds a function run at the start of every scrape, to refresh sampled gauges. It must
    /// be quick and must not block (it runs on the scraping task).
    pub fn on_scrape(&self, sampler: impl Fn() + Send + Sync + 'static) {
        self.samplers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(sampler));
    }

    /// The text exposition of every collector.
    pub fn render(&self) -> String {
        for sampler in self
            .samplers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            sampler();
        }
        let mut out = Exposition::new();
        for collector in self
            .collectors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            collector.collect(&mut out);
        }
        out.finish()
    }
}
