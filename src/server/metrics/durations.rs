//! A histogram of call durations whose observation is two relaxed atomic adds.
//!
//! prometheus-client's `Histogram` takes a mutex on every observation; every hook call
//! observes one, from whichever core answers it, so that mutex's cache line would bounce
//! between the cores on every call. Here each bucket is its own counter, the sum is kept
//! in nanoseconds, and the count is the sum of the buckets, so a scrape always sees a
//! count equal to its `+Inf` bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

use super::HOOK_BUCKETS_SECONDS;

const BUCKETS: usize = HOOK_BUCKETS_SECONDS.len() + 1;

/// Durations in [`HOOK_BUCKETS_SECONDS`] (plus `+Inf`); clones share the counts.
#[derive(Clone, Debug, Default)]
pub struct Durations(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    /// Not cumulative: each observation lands in the first bucket that holds it.
    buckets: [AtomicU64; BUCKETS],
    sum_nanos: AtomicU64,
}

impl Durations {
    /// Counts one call that took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let at = HOOK_BUCKETS_SECONDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS - 1);
        if let Some(bucket) = self.0.buckets.get(at) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.0.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl TypedMetric for Durations {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Durations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let bounds = HOOK_BUCKETS_SECONDS.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.0.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.0.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::{Registry, Unit};

    use super::*;

    /// The same observations through prometheus-client's own histogram and through
    /// this one must expose the same text (names, buckets, count, sum).
    #[test]
    fn exposes_what_prometheus_clients_histogram_exposes() {
        let ours = Durations::default();
        let theirs = prometheus_client::metrics::histogram::Histogram::new(HOOK_BUCKETS_SECONDS);
        for micros in [
            300, 500, 700, 1_000, 30_000, 2_500_000, 9_000_000, 12_000_000,
        ] {
            ours.observe(Duration::from_micros(micros));
            theirs.observe(micros as f64 / 1e6);
        }
        let text = |register: &dyn Fn(&mut Registry)| {
            let mut registry = Registry::default();
            register(&mut registry);
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).map(|()| out)
        };
        let ours = text(&|r| r.register_with_unit("d", "Durations", Unit::Seconds, ours.clone()));
        let theirs =
            text(&|r| r.register_with_unit("d", "Durations", Unit::Seconds, theirs.clone()));
        let ours = ours.unwrap_or_default();
        assert!(ours.contains("d_seconds_bucket{le=\"+Inf\"} 8"), "{ours}");
        assert_eq!(Ok(ours), theirs);
    }
}
