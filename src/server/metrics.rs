//! Prometheus text exposition of hook-call counts and latencies.
//!
//! Hand-rolled on purpose: four series families (calls, latencies, calls in flight, open
//! connections) do not justify a global recorder, and a per-server registry keeps
//! parallel tests independent. Labels stay low-cardinality
//! (controller, hook, code): never parent names.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS_SECONDS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS_SECONDS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Series {
    requests: BTreeMap<(String, String, u16), u64>,
    durations: BTreeMap<(String, String), Histogram>,
}

/// Counters and latency histograms of hook calls, per server.
#[derive(Default)]
pub struct Metrics {
    series: Mutex<Series>,
}

impl Metrics {
    /// Counts one answered call and its duration.
    pub fn record(&self, controller: &str, hook: &str, code: u16, elapsed: Duration) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        *series
            .requests
            .entry((controller.to_owned(), hook.to_owned(), code))
            .or_default() += 1;
        let histogram = series
            .durations
            .entry((controller.to_owned(), hook.to_owned()))
            .or_default();
        let seconds = elapsed.as_secs_f64();
        for (bucket, bound) in histogram.buckets.iter_mut().zip(BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// The Prometheus text exposition, with the current in-flight calls and open connections.
    pub fn render(&self, in_flight: usize, connections: usize) -> String {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str("# HELP metahooks_hook_requests_total Hook calls answered, by status code.\n");
        out.push_str("# TYPE metahooks_hook_requests_total counter\n");
        for ((controller, hook, code), count) in &series.requests {
            let _ = writeln!(
                out,
                "metahooks_hook_requests_total{{controller=\"{controller}\",hook=\"{hook}\",code=\"{code}\"}} {count}"
            );
        }
        out.push_str("# HELP metahooks_hook_duration_seconds Time to answer a hook call.\n");
        out.push_str("# TYPE metahooks_hook_duration_seconds histogram\n");
        for ((controller, hook), histogram) in &series.durations {
            let labels = format!("controller=\"{controller}\",hook=\"{hook}\"");
            for (bound, count) in BUCKETS_SECONDS.iter().zip(histogram.buckets) {
                let _ = writeln!(
                    out,
                    "metahooks_hook_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "metahooks_hook_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                histogram.count
            );
            let _ = writeln!(
                out,
                "metahooks_hook_duration_seconds_sum{{{labels}}} {}",
                histogram.sum
            );
            let _ = writeln!(
                out,
                "metahooks_hook_duration_seconds_count{{{labels}}} {}",
                histogram.count
            );
        }
        out.push_str("# HELP metahooks_hook_in_flight Hook calls being answered now.\n");
        out.push_str("# TYPE metahooks_hook_in_flight gauge\n");
        let _ = writeln!(out, "metahooks_hook_in_flight {in_flight}");
        out.push_str("# HELP metahooks_hook_connections_open Hook port connections open now.\n");
        out.push_str("# TYPE metahooks_hook_connections_open gauge\n");
        let _ = writeln!(out, "metahooks_hook_connections_open {connections}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets_accumulate() {
        let metrics = Metrics::default();
        metrics.record("apimock", "sync", 200, Duration::from_micros(700));
        metrics.record("apimock", "sync", 200, Duration::from_millis(30));
        metrics.record("apimock", "sync", 400, Duration::from_millis(1));
        let text = metrics.render(1, 3);
        assert!(text.contains("metahooks_hook_connections_open 3"));
        assert!(text.contains(
            "metahooks_hook_requests_total{controller=\"apimock\",hook=\"sync\",code=\"200\"} 2"
        ));
        assert!(text.contains(
            "metahooks_hook_requests_total{controller=\"apimock\",hook=\"sync\",code=\"400\"} 1"
        ));
        assert!(text.contains("metahooks_hook_duration_seconds_bucket{controller=\"apimock\",hook=\"sync\",le=\"0.001\"} 2"));
        assert!(text.contains(
            "metahooks_hook_duration_seconds_count{controller=\"apimock\",hook=\"sync\"} 3"
        ));
        assert!(text.contains("metahooks_hook_in_flight 1"));
    }
}
