//! The built-in verifiable toy task of `train grpo` (`task = "toy-multiple-of-8"`): the policy
//! sees `[BOS, p]` for one of a few prompt tokens `p`, samples `completion_tokens` tokens at
//! temperature 1 through the engine, and earns reward 1 exactly when the sum of the sampled
//! token ids is a multiple of 8 (else 0). With one completion token that is 1/8 of the
//! vocabulary; with more, the last token must complement the earlier ones.

use super::dynamic::Scored;
use super::error::Result;
use super::rollout::{iteration_seed, GroupSampler, Rollout};
use crate::engine::{Engine, Request, SamplingParams};
use serde::Deserialize;

/// Settings of the toy task.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ToyTaskConfig {
    /// Prompt tokens, used round-robin, one per group.
    pub prompts: Vec<u32>,
    pub completion_tokens: usize,
    /// The token every prompt starts with.
    pub bos: u32,
    /// Prompt length in tokens (`[BOS, p, p, …]`; at least 2): long prompts make the toy a
    /// workload of agent-sized contexts for benchmarks (`tests/train_bench.rs`).
    pub prompt_tokens: usize,
}

impl Default for ToyTaskConfig {
    fn default() -> Self {
        ToyTaskConfig {
            prompts: vec![11, 222, 333, 444],
            completion_tokens: 2,
            bos: 1,
            prompt_tokens: 2,
        }
    }
}

/// The reward rule: 1 when the ids sum to a multiple of 8.
pub fn multiple_of_8_reward(tokens: &[u32]) -> f64 {
    if tokens.iter().map(|&t| t as u64).sum::<u64>() % 8 == 0 {
        1.0
    } else {
        0.0
    }
}

/// Samples toy groups through the engine, each request seeded from the current seed stream
/// (`seed`, or the iteration's [`iteration_seed`] after [`GroupSampler::begin_iteration`]) and
/// a running count.
pub struct MultipleOf8Task {
    pub cfg: ToyTaskConfig,
    seed: u64,
    stream: u64,
    requests: u64,
    groups: usize,
}

impl MultipleOf8Task {
    pub fn new(cfg: ToyTaskConfig, seed: u64) -> Self {
        MultipleOf8Task {
            cfg,
            seed,
            stream: seed,
            requests: 0,
            groups: 0,
        }
    }
}

impl GroupSampler for MultipleOf8Task {
    fn begin_iteration(&mut self, iteration: u64, groups: usize) {
        self.stream = iteration_seed(self.seed, iteration);
        self.requests = 0;
        self.groups = (iteration as usize).wrapping_mul(groups);
    }

    fn sample_group(&mut self, engine: &Engine, _attempt: usize, size: usize) -> Result<Vec<Scored<Vec<Rollout>>>> {
        let c = &self.cfg;
        if c.prompts.is_empty() || c.completion_tokens == 0 {
            return Err(super::TrainError::BadInput(
                "the toy task needs prompts and completion_tokens >= 1".into(),
            ));
        }
        let p = c.prompts[self.groups % c.prompts.len()];
        let prompt: Vec<u32> = std::iter::once(c.bos).chain(std::iter::repeat_n(p, c.prompt_tokens.max(2) - 1)).collect();
        self.groups += 1;
        let requests: Vec<Request> = (0..size)
            .map(|_| {
                self.requests += 1;
                let sampling = SamplingParams {
                    temperature: 1.0,
                    seed: Some(
                        self.stream
                            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                            .wrapping_add(self.requests),
                    ),
                    max_tokens: c.completion_tokens,
                    ..Default::default()
                };
                let mut r = Request::new(prompt.clone(), sampling).with_routing();
                r.ignore_eos = true;
                r
            })
            .collect();
        engine
            .generate_blocking(requests)
            .into_iter()
            .map(|done| {
                let scored = match done {
                    Ok(comp) if comp.token_ids.len() == c.completion_tokens => Scored {
                        reward: multiple_of_8_reward(&comp.token_ids),
                        sample: vec![Rollout::from_completion(&prompt, &comp)?],
                        aborted: false,
                    },
                    Ok(comp) => {
                        tracing::warn!("toy rollout ended after {} tokens; aborted", comp.token_ids.len());
                        Scored {
                            sample: vec![Rollout::from_completion(&prompt, &comp)?],
                            reward: 0.0,
                            aborted: true,
                        }
                    }
                    Err(e) => {
                        tracing::warn!("toy rollout failed: {e}; aborted");
                        Scored {
                            sample: Vec::new(),
                            reward: 0.0,
                            aborted: true,
                        }
                    }
                };
                Ok(scored)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rule_is_a_sum_modulo_8() {
        assert_eq!(super::multiple_of_8_reward(&[8]), 1.0);
        assert_eq!(super::multiple_of_8_reward(&[3, 5]), 1.0);
        assert_eq!(super::multiple_of_8_reward(&[3, 4]), 0.0);
        assert_eq!(super::multiple_of_8_reward(&[0, 0, 16]), 1.0);
    }
}
