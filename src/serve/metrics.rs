//! `/metrics`: Prometheus text exposition (version 0.0.4) of the server's counters — requests by
//! endpoint and status, prompt and completion tokens — gauges read from the engine at scrape time
//! (queue depth, running sequences, batch size of the last step, admitted sequences) and
//! histograms of time to first token, inter-token latency and request latency.

use crate::engine::LoadStats;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A cumulative latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    inner: Mutex<HistogramData>,
}

#[derive(Debug, Default, Clone)]
struct HistogramData {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let mut h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for (c, &le) in h.counts.iter_mut().zip(&BUCKETS) {
            if s <= le {
                *c += 1;
            }
        }
        h.count += 1;
        h.sum += s;
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).count
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let h = self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, le) in h.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
    }
}

/// Everything the server counts.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub cached_prompt_tokens: AtomicU64,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub request_latency: Histogram,
    /// Connections closed unread because the server had its maximum open.
    pub connections_refused: AtomicU64,
}

impl Metrics {
    /// Count a finished request of `endpoint` answered with `status`.
    pub fn request(&self, endpoint: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((endpoint, status))
            .or_default() += 1;
    }

    /// Count a connection closed because the maximum were open.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Add the token counts of one finished sequence.
    pub fn tokens(&self, prompt: usize, cached: usize, completion: usize) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cached_prompt_tokens.fetch_add(cached as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
    }

    /// The exposition text, with the engine's load and the admitted sequences as gauges.
    pub fn render(&self, load: LoadStats, admitted: usize) -> String {
        let mut out = String::new();
        out.push_str("# HELP execcritic_requests_total Requests answered, by endpoint and HTTP status.\n# TYPE execcritic_requests_total counter\n");
        for ((endpoint, status), n) in self.requests.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "execcritic_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        let counters = [
            ("execcritic_prompt_tokens_total", "Prompt tokens of finished sequences.", &self.prompt_tokens),
            ("execcritic_prompt_cached_tokens_total", "Prompt tokens served from the conversation cache.", &self.cached_prompt_tokens),
            ("execcritic_completion_tokens_total", "Generated tokens of finished sequences.", &self.completion_tokens),
            ("execcritic_connections_refused_total", "Connections closed unread: the maximum were open.", &self.connections_refused),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        }
        let gauges = [
            ("execcritic_queue_depth", "Requests queued in the engine, not yet running.", load.waiting),
            ("execcritic_running_sequences", "Sequences the engine is generating.", load.running),
            ("execcritic_batch_size", "Sequences in the engine's last step.", load.last_batch),
            ("execcritic_admitted_sequences", "Sequences admitted by the server (running, queued or being answered).", admitted),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        self.time_to_first_token.render(&mut out, "execcritic_time_to_first_token_seconds", "From request arrival to the first generated token.");
        self.inter_token_latency.render(&mut out, "execcritic_inter_token_latency_seconds", "Between consecutive generated tokens of a sequence.");
        self.request_latency.render(&mut out, "execcritic_request_latency_seconds", "From request arrival to the last generated token.");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request("chat", 200);
        m.request("chat", 200);
        m.request("chat", 400);
        m.tokens(10, 4, 3);
        m.time_to_first_token.observe(Duration::from_millis(3));
        m.time_to_first_token.observe(Duration::from_secs(2));
        let load = LoadStats { waiting: 5, running: 2, last_batch: 2 };
        let text = m.render(load, 7);
        for line in [
            "execcritic_requests_total{endpoint=\"chat\",status=\"200\"} 2",
            "execcritic_requests_total{endpoint=\"chat\",status=\"400\"} 1",
            "execcritic_prompt_tokens_total 10",
            "execcritic_prompt_cached_tokens_total 4",
            "execcritic_completion_tokens_total 3",
            "execcritic_queue_depth 5",
            "execcritic_running_sequences 2",
            "execcritic_admitted_sequences 7",
            "execcritic_time_to_first_token_seconds_bucket{le=\"0.001\"} 0",
            "execcritic_time_to_first_token_seconds_bucket{le=\"0.005\"} 1",
            "execcritic_time_to_first_token_seconds_bucket{le=\"2.5\"} 2",
            "execcritic_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2",
            "execcritic_time_to_first_token_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
