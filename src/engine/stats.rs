//! Engine counters: how many tokens the model read as prompt (prefill), how many it decoded, how
//! many prompt tokens the conversation cache spared, and how chat turns were rendered
//! (continued on the conversation's own tokens, or re-rendered in full), and how many model steps
//! ran with how many bytes of logits handed to the host, and how many sequences were preempted. The engine thread adds to
//! them; any [`crate::engine::Engine`] handle reads a consistent-enough snapshot at any time.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the counters (totals since the engine started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Prompt tokens forwarded through the model (everything not served from the cache).
    pub prefilled_tokens: u64,
    /// Sampled tokens forwarded through the model (one per decode step and sequence).
    pub decoded_tokens: u64,
    /// Prompt tokens served from the conversation cache instead of being prefilled.
    pub cached_tokens: u64,
    /// Requests finished.
    pub requests: u64,
    /// Chat turns whose prompt continued the conversation's previous prompt + completion tokens.
    pub continued_turns: u64,
    /// Chat turns of a known conversation rendered in full (the template re-rendered history
    /// differently, so only the longest cached prefix could be reused).
    pub rerendered_turns: u64,
    /// Model steps run.
    pub steps: u64,
    /// Bytes of logits rows the model handed to the host. A device backend copies a row only
    /// when it is asked for (top log-probabilities, returned logits, a draw its sampler leaves
    /// to the host), so a plain decode on the device adds nothing here; the CPU model's rows
    /// are on the host already and are counted as handed over.
    pub logits_bytes_to_host: u64,
    /// Running sequences preempted because the model's cache was full (their states dropped;
    /// each was re-read from its prompt and sampled tokens when there was room again).
    pub preemptions: u64,
}

/// The shared, atomically updated counters behind [`EngineStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    prefilled: AtomicU64,
    decoded: AtomicU64,
    cached: AtomicU64,
    requests: AtomicU64,
    continued: AtomicU64,
    rerendered: AtomicU64,
    steps: AtomicU64,
    logits_bytes: AtomicU64,
    preemptions: AtomicU64,
}

impl Counters {
    pub fn prefilled(&self, n: usize) {
        self.prefilled.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub fn decoded(&self, n: usize) {
        self.decoded.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub fn finished(&self, cached: usize) {
        self.cached.fetch_add(cached as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
    /// A model step that handed `logits_bytes` of logits to the host.
    pub fn step(&self, logits_bytes: usize) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.logits_bytes
            .fetch_add(logits_bytes as u64, Ordering::Relaxed);
    }
    pub fn preempted(&self) {
        self.preemptions.fetch_add(1, Ordering::Relaxed);
    }
    pub fn turn(&self, continued: bool) {
        let c = if continued {
            &self.continued
        } else {
            &self.rerendered
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> EngineStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            prefilled_tokens: get(&self.prefilled),
            decoded_tokens: get(&self.decoded),
            cached_tokens: get(&self.cached),
            requests: get(&self.requests),
            continued_turns: get(&self.continued),
            rerendered_turns: get(&self.rerendered),
            steps: get(&self.steps),
            logits_bytes_to_host: get(&self.logits_bytes),
            preemptions: get(&self.preemptions),
        }
    }
}
