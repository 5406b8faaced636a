//! Prometheus metrics in the text exposition format, kept by hand (a few
//! counters and histograms do not need a metrics framework):
//! - `evomem_http_requests_total{route,status}`;
//! - `evomem_http_request_duration_seconds{route}` (histogram);
//! - `evomem_memories_ingested_total`, `evomem_ingest_batches_total`;
//! - `evomem_tenant_opens_total`, `evomem_tenant_closes_total`,
//!   `evomem_tenant_open_failures_total`,
//!   `evomem_tenant_over_budget_total` and `evomem_tenant_open_seconds`
//!   (a summary: sum and count), kept by the registry;
//! - `evomem_index_vectors{tenant}` (open tenants only), the open
//!   tenants and their resident bytes, and `evomem_llm_calls_total`, read
//!   when scraped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The service's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// Memories acknowledged by `POST /v1/memories`.
    pub ingested: AtomicU64,
    /// Commits made by the group-commit writer.
    pub ingest_batches: AtomicU64,
    /// Tenants opened on demand (`registry.rs`).
    pub tenant_opens: AtomicU64,
    /// Tenants closed: idle past the budget, or at shutdown.
    pub tenant_closes: AtomicU64,
    /// Opens that failed (the request was answered 503
    /// `tenant_unavailable` or 500).
    pub tenant_open_failures: AtomicU64,
    /// Times the registry stayed over its budget because every open tenant
    /// was busy (counted once until it got within it again).
    pub tenant_over_budget: AtomicU64,
    /// Microseconds spent opening tenants, all opens together.
    pub tenant_open_micros: AtomicU64,
}

use crate::lock;

impl Metrics {
    /// Record one request.
    pub fn observe(&self, route: &str, status: u16, seconds: f64) {
        *lock(&self.requests)
            .entry((route.to_string(), status))
            .or_insert(0) += 1;
        let mut lat = lock(&self.latency);
        let h = lat.entry(route.to_string()).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// The exposition text; `gauges` are extra `(name, labels, value)` lines
    /// read at scrape time.
    pub fn render(&self, gauges: &[(&str, String, f64)]) -> String {
        let mut out = String::new();
        out.push_str("# HELP evomem_http_requests_total HTTP requests by route and status.\n# TYPE evomem_http_requests_total counter\n");
        for ((route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "evomem_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP evomem_http_request_duration_seconds Request latency by route.\n# TYPE evomem_http_request_duration_seconds histogram\n");
        for (route, h) in lock(&self.latency).iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "evomem_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "evomem_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "evomem_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "evomem_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        for (name, help, v) in [
            (
                "evomem_memories_ingested_total",
                "Memories acknowledged.",
                &self.ingested,
            ),
            (
                "evomem_ingest_batches_total",
                "Grouped commits of memory writes.",
                &self.ingest_batches,
            ),
            (
                "evomem_tenant_opens_total",
                "Tenants opened on their first request since the last close.",
                &self.tenant_opens,
            ),
            (
                "evomem_tenant_closes_total",
                "Tenants closed (idle past the budget, or at shutdown).",
                &self.tenant_closes,
            ),
            (
                "evomem_tenant_open_failures_total",
                "Tenant opens that failed (a store that did not answer, or a damaged one).",
                &self.tenant_open_failures,
            ),
            (
                "evomem_tenant_over_budget_total",
                "Times every open tenant was busy with the registry over its budget.",
                &self.tenant_over_budget,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP evomem_tenant_open_seconds Time to open a tenant (store read, index rebuilt).\n# TYPE evomem_tenant_open_seconds summary\nevomem_tenant_open_seconds_sum {}\nevomem_tenant_open_seconds_count {}",
            self.tenant_open_micros.load(Ordering::Relaxed) as f64 / 1e6,
            self.tenant_opens.load(Ordering::Relaxed)
        );
        // One family per name, its lines together under one TYPE line, as
        // the text format requires (the per-tenant series arrive tenant by
        // tenant); a `_total` name is a counter.
        let mut names: Vec<&str> = Vec::new();
        for (name, _, _) in gauges {
            if !names.contains(name) {
                names.push(name);
            }
        }
        for name in names {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (_, labels, v) in gauges.iter().filter(|(n, _, _)| *n == name) {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With two tenants the per-tenant series arrive interleaved; the text
    /// must hold each family once, contiguous, under one TYPE line (a
    /// Prometheus scrape rejects a second TYPE line for a name), and a
    /// `_total` series is a counter.
    #[test]
    fn each_family_is_contiguous_under_one_type_line() {
        let m = Metrics::default();
        let gauges = [
            ("evomem_index_vectors", "tenant=\"a\"".to_string(), 1.0),
            ("evomem_tenant_bytes", "tenant=\"a\"".to_string(), 10.0),
            ("evomem_index_vectors", "tenant=\"b\"".to_string(), 2.0),
            ("evomem_tenant_bytes", "tenant=\"b\"".to_string(), 20.0),
            ("evomem_llm_calls_total", String::new(), 3.0),
        ];
        let text = m.render(&gauges);
        let lines: Vec<&str> = text.lines().collect();
        for name in ["evomem_index_vectors", "evomem_tenant_bytes"] {
            let types = lines
                .iter()
                .filter(|l| **l == format!("# TYPE {name} gauge"))
                .count();
            assert_eq!(types, 1, "{name}: {text}");
            let at: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.starts_with(&format!("{name}{{")))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(at.len(), 2, "{text}");
            assert_eq!(at[1], at[0] + 1, "{name} not contiguous: {text}");
        }
        assert!(
            text.contains("# TYPE evomem_llm_calls_total counter"),
            "{text}"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe("/v1/x", 200, 0.002);
        m.observe("/v1/x", 200, 0.3);
        m.observe("/v1/x", 404, 0.0001);
        let t = m.render(&[("evomem_index_vectors", "tenant=\"a\"".into(), 3.0)]);
        assert!(
            t.contains("evomem_http_requests_total{route=\"/v1/x\",status=\"200\"} 2"),
            "{t}"
        );
        assert!(t.contains("le=\"0.0005\"} 1"), "{t}");
        assert!(t.contains("le=\"0.0025\"} 2"), "{t}");
        assert!(t.contains("le=\"0.5\"} 3"), "{t}");
        assert!(t.contains("le=\"+Inf\"} 3"), "{t}");
        assert!(t.contains("evomem_index_vectors{tenant=\"a\"} 3"), "{t}");
    }
}
