//! The standard process metrics, as the Prometheus client libraries name them, read at
//! each scrape by `metrics-process` (from procfs on Linux, with the kernel's own page
//! size and clock ticks). What the platform cannot tell is left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let facts = metrics_process::collector::collect();
        if let Some(seconds) = facts.cpu_seconds_total {
            let counter = ConstCounter::new(seconds);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                facts.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                facts.virtual_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                facts.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                facts.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors (0: unlimited)",
                facts.max_fds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                facts.threads,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value as f64);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    /// A sample's value in the exposition.
    fn sample(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    #[test]
    fn the_process_is_described_as_procfs_sees_it() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // This test's own process: over a MiB resident, stdio open, started within the
        // hour, at least the test thread running.
        assert!(sample(&text, "process_resident_memory_bytes") > 1048576.0);
        let open = sample(&text, "process_open_fds");
        assert!(open >= 3.0, "{text}");
        let max = sample(&text, "process_max_fds");
        assert!(max == 0.0 || max >= open, "{text}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let started = sample(&text, "process_start_time_seconds");
        assert!(started > now - 3600.0 && started <= now + 1.0, "{text}");
        assert!(sample(&text, "process_threads") >= 1.0, "{text}");
        // Counted in clock ticks: a test that just started may not have used one yet.
        assert!(sample(&text, "process_cpu_seconds_total") >= 0.0, "{text}");
    }
}
