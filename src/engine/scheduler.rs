//! The batching policy: which tokens of which running sequences go into the next model step.
//!
//! Continuous batching: sequences join (admitted first-come first-served while fewer than
//! `max_running` are in flight) and leave (when finished) between steps, and one step mixes
//! decode tokens and prefill chunks. Within a step:
//! 1. every decoding sequence contributes its one pending token (decode first, so running
//!    generations advance every step whatever arrives);
//! 2. the rest of the `max_batch_tokens` budget goes to prefilling sequences in arrival order,
//!    each at most `prefill_chunk` tokens, so a long prompt is read over several steps while
//!    others keep decoding, and a new short prompt does not wait behind it for long.
//!
//! Recompute preemption (vLLM's policy) when the model's cache cannot take a step's tokens
//! ([`preemption_victim`]): the youngest running sequence gives its cache back and waits at the
//! front of the queue; when it is admitted again it re-reads its prompt and the tokens it has
//! sampled (as a prefill) and goes on sampling from its own random stream, so its output is the
//! one it would have had. Cached conversations are evicted (least recently used) before a
//! running sequence is preempted, and no new request is admitted after a preemption until a
//! sequence has finished. Only a sequence that cannot fit even alone fails.

/// Limits of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences in flight at once.
    pub max_running: usize,
    /// Tokens forwarded per step (decode tokens + prefill chunks). Must exceed `max_running`.
    pub max_batch_tokens: usize,
    /// Most prompt tokens one sequence forwards in one step.
    pub prefill_chunk: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_running: 64,
            max_batch_tokens: 1024,
            prefill_chunk: 256,
        }
    }
}

/// What the scheduler needs to know of a running sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Tokens not yet consumed by the model state.
    pub tokens: usize,
    /// True while (part of) the prompt is still pending.
    pub prefill: bool,
}

/// The next step: `(index into running, number of pending tokens to forward)`, indices
/// ascending.
pub fn plan(running: &[Pending], cfg: &SchedulerConfig) -> Vec<(usize, usize)> {
    let mut budget = cfg.max_batch_tokens;
    let mut chosen: Vec<(usize, usize)> = Vec::with_capacity(running.len());
    for (i, p) in running.iter().enumerate() {
        if !p.prefill && p.tokens > 0 && budget > 0 {
            chosen.push((i, 1));
            budget -= 1;
        }
    }
    for (i, p) in running.iter().enumerate() {
        if budget == 0 {
            break;
        }
        if p.prefill && p.tokens > 0 {
            let n = p.tokens.min(cfg.prefill_chunk).min(budget);
            chosen.push((i, n));
            budget -= n;
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The running sequence to preempt when the cache is full: the youngest (the last admitted;
/// `running` counts the sequences in flight, indexed in admission order). `None` when only one
/// runs: it cannot be helped by preempting anything.
pub fn preemption_victim(running: usize) -> Option<usize> {
    (running > 1).then(|| running - 1)
}
