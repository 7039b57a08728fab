//! What the source engine tells Prometheus: fetches by result and reason, how long they
//! take, when each remote last succeeded, and what the caches hold.
//!
//! Families (all prefixed `metahooks_source_`):
//! - `fetches_total{kind,result,reason}`: one per request a fetch job answered; `kind`
//!   is `git` or `http`, `result` `success` or `failure`, `reason` the condition reason
//!   of a failure (a fixed set) or empty;
//! - `refusals_total{reason}`: fetches refused by a safety rule before or while
//!   connecting (scheme, address, redirect, credentials binding, host key, certificate);
//! - `fetch_duration_seconds{kind}`: each fetch job's time;
//! - `last_success_timestamp_seconds{remote}` and `interval_seconds{remote}`: the URL
//!   without credentials, bounded; at most `--metrics-max-remotes` remotes (default
//!   [`MAX_REMOTE_SERIES`]), the least recently fetched dropped beyond;
//! - `cache_evictions_total`, `snapshot_evictions_total`; and, read from the engine at
//!   each scrape, `cache_bytes`, `snapshot_bytes`, `snapshot_reserved_bytes`,
//!   `jobs_waiting_for_room`, `git_workers_busy`, `git_jobs_waiting`,
//!   `remote_series` ([`EngineGaugesFn`]).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::FetchError;

/// Most remotes with a last-success series (each is one series; a cluster with more
/// remotes keeps the most recently successful ones).
pub const MAX_REMOTE_SERIES: usize = 256;

/// Fetch-duration buckets, in seconds, up to the 20 s fetch limit.
const FETCH_BUCKETS_SECONDS: [f64; 11] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FetchLabels {
    kind: &'static str,
    result: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RemoteLabels {
    remote: String,
}

/// The engine's metric handles (cheap to clone into a registry).
pub struct SourceMetrics {
    fetches: Family<FetchLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    verification_failures: Family<ReasonLabels, Counter>,
    durations: Family<KindLabels, Histogram, fn() -> Histogram>,
    last_success: Family<RemoteLabels, Gauge<f64, AtomicU64>>,
    intervals: Family<RemoteLabels, Gauge>,
    /// Remotes with a last-success series, least recently successful first.
    remotes: Mutex<VecDeque<String>>,
    /// Most remotes with series (`--metrics-max-remotes`).
    max_remotes: usize,
    pub(super) cache_evictions: Counter,
    pub(super) snapshot_evictions: Counter,
}

fn fetch_histogram() -> Histogram {
    Histogram::new(FETCH_BUCKETS_SECONDS)
}

impl SourceMetrics {
    /// Handles keeping per-remote series for at most `max_remotes` remotes (the least
    /// recently fetched dropped first).
    pub(super) fn new(max_remotes: usize) -> SourceMetrics {
        SourceMetrics {
            fetches: Family::default(),
            refusals: Family::default(),
            verification_failures: Family::default(),
            durations: Family::new_with_constructor(fetch_histogram),
            last_success: Family::default(),
            intervals: Family::default(),
            remotes: Mutex::default(),
            max_remotes,
            cache_evictions: Counter::default(),
            snapshot_evictions: Counter::default(),
        }
    }
}

/// The reasons that mean a safety rule refused the fetch (`FetchError::reason`).
const REFUSAL_REASONS: [&str; 10] = [
    "SchemeRefused",
    "HostRefused",
    "RedirectRefused",
    "CredentialsNotAllowed",
    "HostKeyMismatch",
    "KnownHostsMissing",
    "CertificateInvalid",
    "PathRefused",
    "SymlinkRefused",
    "UnsupportedEntry",
];

/// The reasons of a signature not accepted (`FetchError::is_signature`).
const VERIFICATION_REASONS: [&str; 4] = [
    "SignatureMissing",
    "SignatureUntrusted",
    "SignatureInvalid",
    "UnsupportedSignature",
];

fn is_refusal(error: &FetchError) -> bool {
    REFUSAL_REASONS.contains(&error.reason())
}

impl SourceMetrics {
    /// Adds the families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let prefixed = registry.sub_registry_with_prefix("metahooks_source");
        prefixed.register(
            "fetches",
            "Requests answered by fetch jobs, by result",
            self.fetches.clone(),
        );
        // Every reason's series exists from the start, at 0: a first refusal is then an
        // increase a rule can see, not a series appearing at 1.
        for reason in REFUSAL_REASONS {
            let _ = self.refusals.get_or_create(&ReasonLabels { reason });
        }
        prefixed.register(
            "refusals",
            "Fetches refused by a safety rule",
            self.refusals.clone(),
        );
        for reason in VERIFICATION_REASONS {
            let _ = self
                .verification_failures
                .get_or_create(&ReasonLabels { reason });
        }
        prefixed.register(
            "verification_failures",
            "Commits or tags not rolled because their signature is missing, untrusted, invalid or unsupported (source.git.verify)",
            self.verification_failures.clone(),
        );
        prefixed.register_with_unit(
            "fetch_duration",
            "Time a fetch job took",
            Unit::Seconds,
            self.durations.clone(),
        );
        prefixed.register(
            "last_success_timestamp_seconds",
            "When a fetch of this remote last succeeded (seconds since the epoch)",
            self.last_success.clone(),
        );
        prefixed.register(
            "interval_seconds",
            "The shortest poll period of the parents reading this remote",
            self.intervals.clone(),
        );
        prefixed.register(
            "cache_evictions",
            "Repositories removed from the disk cache to stay under its cap",
            self.cache_evictions.clone(),
        );
        prefixed.register(
            "snapshot_evictions",
            "Snapshots let go to stay under the snapshot memory budget",
            self.snapshot_evictions.clone(),
        );
        // Present from the first scrape, so rates and alerts see zeros, not nothing.
        for kind in ["git", "http"] {
            drop(self.durations.get_or_create(&KindLabels { kind }));
            drop(self.fetches.get_or_create(&FetchLabels {
                kind,
                result: "success",
                reason: "",
            }));
        }
    }

    /// One job of `kind` ended after `seconds`, with these outcomes (an error per failed
    /// request); `remote` (without credentials, polled every `interval` seconds)
    /// succeeded when any request did.
    pub fn job(
        &self,
        kind: &'static str,
        remote: &str,
        seconds: f64,
        interval: u64,
        outcomes: &[Option<&FetchError>],
    ) {
        self.durations
            .get_or_create(&KindLabels { kind })
            .observe(seconds);
        let mut succeeded = false;
        for outcome in outcomes {
            let (result, reason) = match outcome {
                None => {
                    succeeded = true;
                    ("success", "")
                }
                Some(error) => {
                    if error.is_signature() {
                        self.verification_failures
                            .get_or_create(&ReasonLabels {
                                reason: error.reason(),
                            })
                            .inc();
                    }
                    if is_refusal(error) {
                        self.refusals
                            .get_or_create(&ReasonLabels {
                                reason: error.reason(),
                            })
                            .inc();
                    }
                    ("failure", error.reason())
                }
            };
            self.fetches
                .get_or_create(&FetchLabels {
                    kind,
                    result,
                    reason,
                })
                .inc();
        }
        self.track(remote, succeeded, interval);
    }

    /// Remotes with series now.
    pub(super) fn remote_series(&self) -> usize {
        self.remotes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Keeps `remote`'s series, at most `--metrics-max-remotes` remotes (the least recently
    /// fetched dropped beyond): its interval, and its last success when it succeeded.
    fn track(&self, remote: &str, succeeded: bool, interval: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let mut remotes = self
            .remotes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        remotes.retain(|r| r != remote);
        remotes.push_back(remote.to_owned());
        while remotes.len() > self.max_remotes {
            if let Some(oldest) = remotes.pop_front() {
                let labels = RemoteLabels { remote: oldest };
                self.last_success.remove(&labels);
                self.intervals.remove(&labels);
            }
        }
        let labels = RemoteLabels {
            remote: remote.to_owned(),
        };
        self.intervals
            .get_or_create(&labels)
            .set(i64::try_from(interval).unwrap_or(i64::MAX));
        if succeeded {
            self.last_success.get_or_create(&labels).set(now);
        }
    }
}

/// What [`EngineGaugesFn`] reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Bytes of the disk cache when last measured.
    pub cache_bytes: u64,
    /// Bytes of snapshots held in memory.
    pub snapshot_bytes: u64,
    /// Bytes of the snapshot budget reserved by jobs for what they bring, and jobs
    /// waiting for room in it.
    pub snapshot_room: (u64, u64),
    /// Git jobs running, and waiting for a worker.
    pub git_jobs: (usize, usize),
    /// Remotes with per-remote series.
    pub remote_series: usize,
}

impl<F: Fn() -> Gauges + Send + Sync + 'static> std::fmt::Debug for EngineGaugesFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineGauges")
    }
}

/// A `Collector` over a closure (closures are not `Debug`).
pub struct EngineGaugesFn<F>(pub F);

impl<F: Fn() -> Gauges + Send + Sync + 'static> prometheus_client::collector::Collector
    for EngineGaugesFn<F>
{
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::gauge::ConstGauge;
        let now = (self.0)();
        let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (name, help, value) in [
            (
                "metahooks_source_cache_bytes",
                "Bytes of git repositories cached on disk",
                to_i64(now.cache_bytes),
            ),
            (
                "metahooks_source_snapshot_bytes",
                "Bytes of fetched files held in memory, with what was made of them",
                to_i64(now.snapshot_bytes),
            ),
            (
                "metahooks_source_snapshot_reserved_bytes",
                "Bytes of the snapshot budget reserved by fetches for what they bring",
                to_i64(now.snapshot_room.0),
            ),
            (
                "metahooks_source_jobs_waiting_for_room",
                "Fetches waiting for parents to take what is held before they start",
                to_i64(now.snapshot_room.1),
            ),
            (
                "metahooks_source_git_workers_busy",
                "Git fetch workers running now",
                to_i64(now.git_jobs.0 as u64),
            ),
            (
                "metahooks_source_git_jobs_waiting",
                "Git fetch jobs waiting for a worker",
                to_i64(now.git_jobs.1 as u64),
            ),
            (
                "metahooks_source_remote_series",
                "Remotes with per-remote series (--metrics-max-remotes at most)",
                to_i64(now.remote_series as u64),
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

    fn text(metrics: &SourceMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            .unwrap_or_default();
        out
    }

    #[test]
    fn fetches_are_counted_by_result_and_reason_and_remotes_are_bounded() {
        let metrics = SourceMetrics::new(MAX_REMOTE_SERIES);
        let refused = FetchError::HostRefused {
            host: "h".to_owned(),
            why: "w".to_owned(),
        };
        metrics.job(
            "git",
            "https://git.example.com/a.git",
            0.3,
            60,
            &[None, Some(&refused)],
        );
        let out = text(&metrics);
        assert!(
            out.contains(
                "metahooks_source_fetches_total{kind=\"git\",result=\"success\",reason=\"\"} 1"
            ),
            "{out}"
        );
        assert!(out.contains("metahooks_source_fetches_total{kind=\"git\",result=\"failure\",reason=\"HostRefused\"} 1"), "{out}");
        assert!(
            out.contains("metahooks_source_refusals_total{reason=\"HostRefused\"} 1"),
            "{out}"
        );
        assert!(out.contains("metahooks_source_last_success_timestamp_seconds{remote=\"https://git.example.com/a.git\"}"), "{out}");
        for i in 0..MAX_REMOTE_SERIES + 10 {
            metrics.job(
                "http",
                &format!("https://files.example.com/{i}"),
                0.1,
                60,
                &[None],
            );
        }
        let out = text(&metrics);
        let series = out
            .lines()
            .filter(|l| l.starts_with("metahooks_source_last_success_timestamp_seconds{"))
            .count();
        assert_eq!(series, MAX_REMOTE_SERIES);
        assert_eq!(metrics.remote_series(), MAX_REMOTE_SERIES);
        assert!(
            !out.contains("git.example.com/a.git\""),
            "the oldest remote went first"
        );
        // A lower bound (`--metrics-max-remotes`) is kept the same way.
        let metrics = SourceMetrics::new(3);
        for i in 0..5 {
            let remote = format!("https://files.example.com/{i}");
            metrics.job("http", &remote, 0.1, 60, &[None]);
        }
        assert_eq!(metrics.remote_series(), 3);
        let out = text(&metrics);
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("metahooks_source_interval_seconds{"))
                .count(),
            3
        );
        assert!(
            !out.contains("files.example.com/1\"") && out.contains("files.example.com/2\""),
            "{out}"
        );
    }
}
