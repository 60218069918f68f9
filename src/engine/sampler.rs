//! Token sampling from one row of logits, with the log-probabilities GRPO needs.
//!
//! Order of operations (as in vLLM/HF): divide by the temperature, keep the `top_k` largest
//! (ties broken towards the lower id), softmax, keep the smallest set of most likely tokens whose
//! probability reaches `top_p`, renormalise, draw by inverse CDF (over the kept tokens most likely
//! first; over the whole vocabulary in id order when nothing is truncated). Temperature 0 is greedy (argmax, lowest id on
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
        let u = self.next_uniform();
        self.sample_with(logits, u)
    }

    /// The next token's uniform draw in `[0, 1)` from the request's stream — the one draw
    /// [`Sampler::sample`] makes; a greedy request draws nothing and gets 0. A backend that
    /// samples on its device is handed this value, so the stream advances exactly as here.
    pub fn next_uniform(&mut self) -> f64 {
        if self.params.temperature == 0.0 {
            0.0
        } else {
            self.rng.random()
        }
    }

    /// Where the request's random stream stands (to take a draw back with [`Sampler::rewind`]).
    pub fn stream_position(&self) -> u128 {
        self.rng.get_word_pos()
    }

    /// Put the random stream back at `pos` (a [`Sampler::stream_position`]): the draws made
    /// since are made again, identically (a step that did not run is retried).
    pub fn rewind(&mut self, pos: u128) {
        self.rng.set_word_pos(pos);
    }

    /// Sample one token from a row of logits with the uniform draw `u` of
    /// [`Sampler::next_uniform`] (ignored when greedy).
    pub fn sample_with(&self, logits: &[f32], u: f64) -> Sampled {
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
        if self.params.top_k == 0 && self.params.top_p >= 1.0 {
            return self.draw_untruncated(logits, u, policy);
        }
        let support = self.support(logits);
        // Draw by the cumulative distribution over the support, in its order.
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

    /// The whole-vocabulary draw of [`Sampler::support`]'s untruncated case, without building the
    /// support list: one pass for the weights, one to find where `u` falls, in id order.
    fn draw_untruncated(&self, logits: &[f32], u: f64, policy: impl Fn(usize) -> f32) -> Sampled {
        let inv_t = 1.0 / self.params.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let weights: Vec<f32> = logits.iter().map(|&l| ((l - max) * inv_t).exp()).collect();
        let total: f64 = weights.iter().map(|&w| w as f64).sum();
        let target = u * total;
        let mut acc = 0.0;
        let mut token = weights.iter().rposition(|&w| w > 0.0).unwrap_or(0);
        for (i, &w) in weights.iter().enumerate() {
            acc += w as f64;
            if target < acc {
                token = i;
                break;
            }
        }
        Sampled {
            token: token as u32,
            logprob: policy(token),
            sampling_logprob: (weights[token] as f64 / total).ln() as f32,
        }
    }

    /// The sampling distribution: `(token, probability)` pairs summing to 1 — most likely first
    /// when top-k or top-p truncates, in id order otherwise (no sort of the whole vocabulary).
    pub fn support(&self, logits: &[f32]) -> Vec<(usize, f64)> {
        let t = self.params.temperature.max(f32::MIN_POSITIVE) as f64;
        let by_value = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let k = self.params.top_k;
        if k > 0 && k < order.len() {
            order.select_nth_unstable_by(k - 1, by_value);
            order.truncate(k);
            order.sort_unstable_by(by_value);
        }
        let max = order
            .iter()
            .map(|&i| logits[i])
            .fold(f32::NEG_INFINITY, f32::max) as f64
            / t;
        let total: f64 = order
            .iter()
            .map(|&i| (logits[i] as f64 / t - max).exp())
            .sum();
        let prob = |i: usize| (logits[i] as f64 / t - max).exp() / total;
        let top_p = self.params.top_p as f64;
        if top_p >= 1.0 {
            return order.into_iter().map(|i| (i, prob(i))).collect();
        }
        // The nucleus: sort a growing head of the candidates until it holds top_p of the mass.
        let mut head = order.len().min(256);
        let kept = loop {
            if head < order.len() {
                order.select_nth_unstable_by(head - 1, by_value);
            }
            order[..head].sort_unstable_by(by_value);
            let mut cum = 0.0;
            let found = order[..head].iter().position(|&i| {
                cum += prob(i);
                cum >= top_p
            });
            match found {
                Some(pos) => break pos + 1,
                None if head == order.len() => break head,
                None => head = order.len().min(head * 8),
            }
        };
        let mass: f64 = order[..kept].iter().map(|&i| prob(i)).sum();
        order[..kept].iter().map(|&i| (i, prob(i) / mass)).collect()
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

/// `log Σ exp(x)`: f32 exponentials of `x - max`, summed in f64.
pub fn log_sum_exp(xs: &[f32]) -> f64 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    let maxf = max as f32;
    max + xs
        .iter()
        .map(|&x| (x - maxf).exp() as f64)
        .sum::<f64>()
        .ln()
}

/// `log_softmax(xs)` in f32 (computed in f64).
pub fn log_softmax(xs: &[f32]) -> Vec<f32> {
    let z = log_sum_exp(xs);
    xs.iter().map(|&x| (x as f64 - z) as f32).collect()
}

/// The `n` most likely tokens of a row of logits with their policy log-probabilities
/// (`log_softmax` of the raw logits), most likely first, ties to the lower id.
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    let z = log_sum_exp(logits);
    let by_rank = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    if n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by_rank);
        ids.truncate(n);
    }
    ids.sort_unstable_by(by_rank);
    ids.into_iter()
        .map(|i| (i as u32, (logits[i] as f64 - z) as f32))
        .collect()
}
