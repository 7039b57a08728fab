//! The `/metrics` exposition (Prometheus text format 0.0.4), on `prometheus-client`.
//!
//! One registry per server, so parallel tests stay independent. Families:
//! - hook calls: `metahooks_hook_requests_total{controller,hook,code}`,
//!   `metahooks_hook_duration_seconds{controller,hook}` (buckets up to 10 s: the hook
//!   deadline is 8 s and Metacontroller's timeout 10 s), `metahooks_hook_in_flight`,
//!   `metahooks_hook_connections_open`;
//! - `metahooks_build_info{version}`;
//! - the source engine's own ([`crate::source::metrics`]);
//! - the standard `process_*` metrics of this process ([`ProcessCollector`]).
//!
//! Labels stay low-cardinality: never parent names; remote URLs only in the source
//! engine's bounded last-success family. Recording a call takes no lock beyond the
//! families' read locks and allocates nothing once its series exists.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

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
        let durations = Family::<HookLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(HOOK_BUCKETS_SECONDS)) as fn() -> Histogram,
        );
        registry.register_with_unit(
            "metahooks_hook_duration",
            "Time to answer a hook call",
            Unit::Seconds,
            durations.clone(),
        );
        let in_flight = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "metahooks_hook_in_flight",
            "Hook calls being answered now",
            in_flight.clone(),
        );
        let connections = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "metahooks_hook_connections_open",
            "Hook port connections open now",
            connections.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("metahooks_build_info", "The running build (value 1)", build);
        registry.register_collector(Box::new(ProcessCollector));
        if let Some(sources) = sources {
            sources.register_metrics(&mut registry);
        }
        Metrics {
            registry,
            requests,
            durations,
            in_flight,
            connections,
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
        self.requests
            .get_or_create(&CallLabels {
                controller,
                hook,
                code,
            })
            .inc();
        self.durations
            .get_or_create(&HookLabels { controller, hook })
            .observe(elapsed.as_secs_f64());
    }

    /// The exposition, with the current in-flight calls and open connections.
    pub fn render(&self, in_flight: usize, connections: usize) -> String {
        self.in_flight
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
        self.connections
            .set(i64::try_from(connections).unwrap_or(i64::MAX));
        let mut out = String::new();
        if prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# the metrics could not be encoded\n");
        }
        out
    }
}

/// The standard process metrics (as the Prometheus client libraries name them), read
/// from `/proc/self` at each scrape. Where `/proc` cannot be read, none are shown.
#[derive(Debug)]
struct ProcessCollector;

/// What `/proc/self` says now.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessFacts {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// Start time since the epoch, in seconds.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The open-file soft limit.
    pub max_fds: u64,
}

impl ProcessFacts {
    /// Reads them (None where `/proc` is not there, as on macOS).
    pub fn read() -> Option<ProcessFacts> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name is in parentheses and may hold spaces: fields follow the last ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n).and_then(|f| f.parse::<u64>().ok());
        let ticks = 100.0; // USER_HZ, 100 on every Linux ABI
        let page = 4096;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| {
                l.strip_prefix("btime ")
                    .and_then(|t| t.trim().parse::<f64>().ok())
            })?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let max_fds = rlimit::Resource::NOFILE.get().ok()?.0;
        Some(ProcessFacts {
            // After the ')': state is field 0, utime 11, stime 12, starttime 19,
            // vsize 20, rss (pages) 21 (proc(5) numbers them from the pid, 1-based).
            cpu_seconds: (field(11)? + field(12)?) as f64 / ticks,
            start_time_seconds: boot + field(19)? as f64 / ticks,
            virtual_bytes: field(20)?,
            resident_bytes: field(21)? * page,
            open_fds,
            max_fds,
        })
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(facts) = ProcessFacts::read() else {
            return Ok(());
        };
        let counter = ConstCounter::new(facts.cpu_seconds);
        counter.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            counter.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                facts.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                facts.virtual_bytes as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                facts.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                facts.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                facts.max_fds as f64,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
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
        let text = metrics.render(1, 3);
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
            text.contains(&format!(
                "metahooks_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.contains("process_open_fds "), "{text}");
    }

    #[test]
    fn process_facts_are_read_from_proc() {
        let facts = ProcessFacts::read().expect("Linux has /proc");
        assert!(facts.resident_bytes > 1024 * 1024, "{facts:?}");
        assert!(
            facts.open_fds >= 3 && facts.max_fds >= facts.open_fds,
            "{facts:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        assert!(
            facts.start_time_seconds > now - 3600.0 && facts.start_time_seconds <= now + 1.0,
            "{facts:?}"
        );
    }
}
