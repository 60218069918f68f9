//! Token sampling from one row of logits, with the log-probabilities GRPO needs.
//!
//! Order of operations (as in vLLM/HF): divide by the temperature, keep the `top_k` largest
//! (ties broken towards the lower id), softmax, keep the smallest set of most likely tokens whose
//! probability reaches `top_p`, renormalise, draw. Temperature 0 is greedy (argmax, lowest id on
//! ties). Each request has its own ChaCha20 generator seeded from its seed, and a token costs
//! exactly one uniform draw, so a seeded request reproduces its tokens whatever else is batched
//! with it (given the same logits).
//!
//! Two log-probabilities are returned for every sampled token:
//! * [`Sampled::logprob`] — **the policy's**: `log_softmax(logits)[token]` of the raw logits, i.e.
//!   temperature 1, no top-k/top-p truncation. This is π_θ(token | prefix) as GRPO's importance
//!   ratio and the trainer's recomputed log-probabilities use it; it is computed the same way
//!   whatever the sampling settings.
//! * [`Sampled::sampling_logprob`] — the log-probability under the distribution the token was
//!   actually drawn from (after temperature, top-k, top-p and renormalisation; 0 for greedy).

use super::error::EngineError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Sampling settings of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k restriction.
    pub top_k: usize,
    /// 1 = no nucleus restriction.
    pub top_p: f32,
    /// Seed of the request's generator; `None` draws one from the OS.
    pub seed: Option<u64>,
    pub max_tokens: usize,
    /// Extra stop ids, added to the tokenizer's.
    pub stop_token_ids: Vec<u32>,
    /// Stop strings: generation ends once the text contains one; the text is cut before it.
    pub stop: Vec<String>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: None,
            max_tokens: 256,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
        }
    }
}

impl SamplingParams {
    pub fn greedy(max_tokens: usize) -> Self {
        SamplingParams {
            max_tokens,
            ..Default::default()
        }
    }

    /// Reject settings that have no meaning.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::BadRequest(m));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "temperature must be finite and >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if self.max_tokens == 0 {
            return bad("max_tokens must be at least 1".into());
        }
        if self.stop.iter().any(String::is_empty) {
            return bad("stop strings must not be empty".into());
        }
        Ok(())
    }
}

/// One sampled token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampled {
    pub token: u32,
    /// log π(token): log-softmax of the raw logits (temperature 1, untruncated).
    pub logprob: f32,
    /// Log-probability under the sampling distribution (temperature, top-k, top-p).
    pub sampling_logprob: f32,
}

/// A request's sampler: its settings and its own random generator.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha20Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(seed) => ChaCha20Rng::seed_from_u64(seed),
            None => ChaCha20Rng::from_os_rng(),
        };
        Sampler { params, rng }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Sample one token from a row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> Sampled {
        let log_z = log_sum_exp(logits);
        let policy = |t: usize| (logits[t] as f64 - log_z) as f32;
        if self.params.temperature == 0.0 {
            let token = argmax(logits);
            return Sampled {
                token: token as u32,
                logprob: policy(token),
                sampling_logprob: 0.0,
            };
        }
        let support = self.support(logits);
        let u: f64 = self.rng.random();
        // Draw by the cumulative distribution over the support, most likely first.
        let mut acc = 0.0;
        let mut chosen = support.last().copied().unwrap_or((0, 1.0));
        for &(t, p) in &support {
            acc += p;
            if u < acc {
                chosen = (t, p);
                break;
            }
        }
        Sampled {
            token: chosen.0 as u32,
            logprob: policy(chosen.0),
            sampling_logprob: chosen.1.ln() as f32,
        }
    }

    /// The sampling distribution: `(token, probability)` pairs, most likely first, summing to 1.
    pub fn support(&self, logits: &[f32]) -> Vec<(usize, f64)> {
        let t = self.params.temperature.max(f32::MIN_POSITIVE) as f64;
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let by_value = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        let k = self.params.top_k;
        if k > 0 && k < order.len() {
            order.select_nth_unstable_by(k - 1, by_value);
            order.truncate(k);
        }
        order.sort_unstable_by(by_value);
        let max = logits[order[0]] as f64 / t;
        let weights: Vec<f64> = order
            .iter()
            .map(|&i| (logits[i] as f64 / t - max).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut support = Vec::with_capacity(order.len());
        let mut cum = 0.0;
        for (&i, w) in order.iter().zip(&weights) {
            let p = w / total;
            support.push((i, p));
            cum += p;
            if cum >= self.params.top_p as f64 {
                break;
            }
        }
        let kept: f64 = support.iter().map(|(_, p)| p).sum();
        for (_, p) in &mut support {
            *p /= kept;
        }
        support
    }
}

/// Index of the largest value (the lowest index among equals).
pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

/// `log Σ exp(x)` in f64.
pub fn log_sum_exp(xs: &[f32]) -> f64 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    max + xs.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln()
}

/// `log_softmax(xs)` in f32 (computed in f64).
pub fn log_softmax(xs: &[f32]) -> Vec<f32> {
    let z = log_sum_exp(xs);
    xs.iter().map(|&x| (x as f64 - z) as f32).collect()
}
