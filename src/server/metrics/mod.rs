//! The `/metrics` exposition (Prometheus text format 0.0.4), on `prometheus-client`.
//!
//! One registry per server, so parallel tests stay independent. Families:
//! - hook calls: `metahooks_hook_requests_total{controller,hook,code}`,
//!   `metahooks_hook_duration_seconds{controller,hook}` (buckets up to 10 s: the hook
//!   deadline is 8 s and Metacontroller's timeout 10 s), `metahooks_hook_in_flight`,
//!   `metahooks_hook_connections_open`, `metahooks_hook_connections_evicted_total`;
//! - `metahooks_build_info{version}`;
//! - the source engine's own ([`crate::source::metrics`]);
//! - the standard `process_*` metrics of this process ([`ProcessCollector`]).
//!
//! Labels stay low-cardinality: never parent names; remote URLs only in the source
//! engine's bounded last-success family.

mod process;

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use self::process::ProcessCollector;

/// Upper bounds of the hook-duration buckets, in seconds.
pub const HOOK_BUCKETS_SECONDS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 8.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    controller: &'static str,
    hook: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    controller: &'static str,
    hook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// `name` as a label that lives as long as the process: the names of registered
/// controllers, interned once each (a handful), so recording a call allocates nothing.
pub fn label(name: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{OnceLock, RwLock};
    static NAMES: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(RwLock::default);
    if let Some(found) = names
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
    {
        return found;
    }
    let mut names = names
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(found) = names.get(name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<CallLabels, Counter>,
    durations: Family<HookLabels, Histogram>,
    in_flight: Gauge<i64, AtomicI64>,
    connections: Gauge<i64, AtomicI64>,
    evicted: Counter,
    answer_memo: Gauge<i64, AtomicI64>,
    step_memo: Gauge<i64, AtomicI64>,
    bodies: Gauge<i64, AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(None)
    }
}

impl Metrics {
    /// A registry with the hook, build and process families, and the source engine's
    /// when `sources` registers any.
    pub fn new(sources: Option<&dyn crate::source::Sources>) -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<CallLabels, Counter>::default();
        registry.register(
            "metahooks_hook_requests",
            "Hook calls answered, by status code",
            requests.clone(),
        );
        let durations = Family::<HookLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(HOOK_BUCKETS_SECONDS)
        });
        registry.register_with_unit(
            "metahooks_hook_duration",
            "Time to answer a hook call",
            Unit::Seconds,
            durations.clone(),
        );
        let in_flight = gauge(
            &mut registry,
            "metahooks_hook_in_flight",
            "Hook calls being answered now",
        );
        let connections = gauge(
            &mut registry,
            "metahooks_hook_connections_open",
            "Hook port connections open now",
        );
        let evicted = Counter::default();
        registry.register(
            "metahooks_hook_connections_evicted",
            "Idle hook connections closed to give their slot to a new connection",
            evicted.clone(),
        );
        let answer_memo = gauge(
            &mut registry,
            "metahooks_answer_memo_bytes",
            "Bytes of answers remembered (--answer-memo-bytes at most)",
        );
        let step_memo = gauge(
            &mut registry,
            "metahooks_step_memo_bytes",
            "Bytes of remembered steps: validated definitions (--step-memo-bytes at most)",
        );
        let bodies = gauge(
            &mut registry,
            "metahooks_hook_body_bytes",
            "Bytes of hook request bodies being read or answered (--body-budget-bytes at most)",
        );
        register_process(&mut registry);
        if let Some(sources) = sources {
            sources.register_metrics(&mut registry);
        }
        Metrics {
            registry,
            requests,
            durations,
            in_flight,
            connections,
            evicted,
            answer_memo,
            step_memo,
            bodies,
        }
    }

    /// Counts one answered call and its duration.
    pub fn record(
        &self,
        controller: &'static str,
        hook: &'static str,
        code: u16,
        elapsed: Duration,
    ) {
        let call = CallLabels {
            controller,
            hook,
            code,
        };
        self.requests.get_or_create(&call).inc();
        self.durations
            .get_or_create(&HookLabels { controller, hook })
            .observe(elapsed.as_secs_f64());
    }

    /// The exposition, with what is in use now.
    pub fn render(&self, now: &InUse) -> String {
        let set = |gauge: &Gauge<i64, AtomicI64>, value: u64| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&self.in_flight, now.in_flight as u64);
        set(&self.connections, now.connections as u64);
        // The count lives with the slots; the counter shows it.
        self.evicted.inner().store(
            now.connections_evicted,
            std::sync::atomic::Ordering::Relaxed,
        );
        set(&self.answer_memo, now.answer_memo_bytes);
        set(&self.step_memo, now.step_memo_bytes);
        set(&self.bodies, now.body_bytes as u64);
        let mut out = String::new();
        if prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# the metrics could not be encoded\n");
        }
        out
    }
}

/// What describes the process rather than its calls: the build, the process collector
/// and the log lines dropped.
fn register_process(registry: &mut Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register("metahooks_build_info", "The running build (value 1)", build);
    registry.register_collector(Box::new(ProcessCollector));
    registry.register_collector(Box::new(DroppedLogLines));
}

/// A gauge registered under `name`.
fn gauge(registry: &mut Registry, name: &str, help: &str) -> Gauge<i64, AtomicI64> {
    let gauge = Gauge::<i64, AtomicI64>::default();
    registry.register(name, help, gauge.clone());
    gauge
}

/// What is in use when `/metrics` is scraped.
#[derive(Debug, Clone, Copy, Default)]
pub struct InUse {
    /// Hook calls being answered.
    pub in_flight: usize,
    /// Hook connections open.
    pub connections: usize,
    /// Idle hook connections closed so far to make room for new ones.
    pub connections_evicted: u64,
    /// Bytes of remembered answers.
    pub answer_memo_bytes: u64,
    /// Bytes of remembered steps.
    pub step_memo_bytes: u64,
    /// Bytes of request bodies being read or answered.
    pub body_bytes: usize,
}

/// `metahooks_log_lines_dropped_total`: log lines the non-blocking log writer dropped
/// because its buffer was full (the output could not keep up), rather than block a call.
#[derive(Debug)]
struct DroppedLogLines;

impl Collector for DroppedLogLines {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(crate::telemetry::dropped_lines());
        counter.encode(encoder.encode_descriptor(
            "metahooks_log_lines_dropped",
            "Log lines dropped because the log output could not keep up",
            None,
            counter.metric_type(),
        )?)
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
        metrics.record("apimock", "sync", 200, Duration::from_secs(9));
        let text = metrics.render(&InUse {
            in_flight: 1,
            connections: 3,
            ..InUse::default()
        });
        assert!(text.contains("metahooks_hook_connections_open 3"), "{text}");
        assert!(
            text.contains(
                "metahooks_hook_requests_total{controller=\"apimock\",hook=\"sync\",code=\"200\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains(
            "metahooks_hook_requests_total{controller=\"apimock\",hook=\"sync\",code=\"400\"} 1"
        ));
        assert!(text.contains("metahooks_hook_duration_seconds_bucket{controller=\"apimock\",hook=\"sync\",le=\"0.001\"} 2"), "{text}");
        assert!(text.contains("metahooks_hook_duration_seconds_bucket{controller=\"apimock\",hook=\"sync\",le=\"10\"} 4"), "a call near the deadline lands in a bucket of its own: {text}");
        assert!(text.contains(
            "metahooks_hook_duration_seconds_count{controller=\"apimock\",hook=\"sync\"} 4"
        ));
        assert!(text.contains("metahooks_hook_in_flight 1"));
        assert!(
            text.contains("metahooks_log_lines_dropped_total 0"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "metahooks_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.contains("process_open_fds "), "{text}");
    }
}
