//! The standard process metrics, read from `/proc/self` at each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The standard process metrics (as the Prometheus client libraries name them), read
/// from `/proc/self` at each scrape. Where `/proc` cannot be read, none are shown.
#[derive(Debug)]
pub struct ProcessCollector;

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
