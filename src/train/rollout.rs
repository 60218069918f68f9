//! Rollouts for GRPO: a [`Rollout`] is one sampled trajectory as the loss needs it (token ids,
//! which tokens the policy sampled, their rollout log-probabilities, the routing record for
//! replay), built from the engine's [`Completion`]s; a [`GroupSampler`] is anything that,
//! given the running engine, produces one scored group of rollouts (the built-in toy task in
//! `train::toy`; agent episodes above this layer). [`grpo_batch`] turns kept groups into the
//! trainer's [`GrpoSample`]s.

use super::dynamic::{KeptGroup, Scored};
use super::error::{Result, TrainError};
use super::grpo::GrpoSample;
use crate::engine::{Completion, Engine, RoutingRecord};

/// One trajectory: `ids` = prompt and sampled tokens (multi-turn trajectories interleave
/// observation tokens, masked out of `train_mask`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub ids: Vec<u32>,
    /// True at tokens the policy sampled (the trained tokens).
    pub train_mask: Vec<bool>,
    /// Rollout log-probability of `ids[t]` where `train_mask[t]`, else 0.
    pub logprobs: Vec<f32>,
    /// Per layer `[ids.len() · top_k]` experts for routing replay, when recorded.
    pub routing: Option<Vec<Vec<u32>>>,
}

impl Rollout {
    /// A single-turn rollout: `prompt` then the completion's sampled tokens (stop token
    /// included: it was sampled). The routing record, when present, must start at 0 (no
    /// conversation cache) and becomes the replay routing via [`replay_routing`].
    pub fn from_completion(prompt: &[u32], c: &Completion) -> Result<Self> {
        if c.logprobs.len() != c.token_ids.len() {
            return Err(TrainError::BadInput(format!(
                "completion has {} tokens but {} log-probabilities",
                c.token_ids.len(),
                c.logprobs.len()
            )));
        }
        let ids: Vec<u32> = prompt.iter().chain(&c.token_ids).copied().collect();
        let mut train_mask = vec![false; prompt.len()];
        train_mask.resize(ids.len(), true);
        let mut logprobs = vec![0.0; prompt.len()];
        logprobs.extend_from_slice(&c.logprobs);
        let routing = c.routing.as_ref().map(|r| replay_routing(r, ids.len())).transpose()?;
        Ok(Rollout {
            ids,
            train_mask,
            logprobs,
            routing,
        })
    }

    /// Number of sampled (trained) tokens.
    pub fn sampled_tokens(&self) -> usize {
        self.train_mask.iter().filter(|&&b| b).count()
    }
}

/// The training forward's forced experts from an engine routing record covering positions
/// `record.start..` of a `total`-token sequence. The engine never forwards the last sampled
/// token, so up to one trailing position is missing: it gets experts `0..top_k` — harmless,
/// since the last position's output feeds no trained log-probability.
pub fn replay_routing(record: &RoutingRecord, total: usize) -> Result<Vec<Vec<u32>>> {
    let k = record.top_k;
    if record.start != 0 {
        return Err(TrainError::BadInput(format!(
            "routing record starts at position {} (served from a conversation cache); replay needs the whole sequence",
            record.start
        )));
    }
    record
        .experts
        .iter()
        .map(|layer| {
            let covered = layer.len().checked_div(k).unwrap_or(0);
            if k == 0 || layer.len() % k != 0 || covered > total || covered + 1 < total {
                return Err(TrainError::BadInput(format!(
                    "routing record covers {covered} positions (top_k {k}), the sequence has {total}"
                )));
            }
            let mut l = layer.clone();
            for _ in covered..total {
                l.extend(0..k as u32);
            }
            Ok(l)
        })
        .collect()
}

/// Produces scored groups of rollouts by sampling through a running engine. One sample of a
/// group is one rollout's training sequences: a single-turn rollout is one [`Rollout`]; a
/// multi-turn agent rollout may need several (one per run of turns whose prompts extend each
/// other — a chat template may re-render earlier turns differently).
pub trait GroupSampler {
    /// Sample and score one group of `size` rollouts for draw `attempt` (the sampler picks
    /// the prompt, e.g. round-robin over its prompts). Failed samples are `aborted`.
    fn sample_group(&mut self, engine: &Engine, attempt: usize, size: usize) -> Result<Vec<Scored<Vec<Rollout>>>>;

    /// True when the engine must be started with the model's chat template (samplers that
    /// render chats, like the agents').
    fn needs_chat_template(&self) -> bool {
        false
    }

    /// Called by `train grpo` before iteration `iteration` (0-based), which wants `groups`
    /// groups: a sampler whose draws are seeded re-derives its seed stream with
    /// [`iteration_seed`] and starts its round-robin at group `iteration · groups`, so that what
    /// an iteration draws depends on the run's seed and the iteration only — a run resumed at
    /// iteration k draws what the uninterrupted run drew there, never the first iterations'
    /// draws again. Not called: the draws continue one stream from the constructor's seed.
    fn begin_iteration(&mut self, iteration: u64, groups: usize) {
        let _ = (iteration, groups);
    }
}

/// The seed of iteration `iteration`'s draws in a run seeded `seed` (splitmix64 of the pair):
/// deterministic, and distinct iterations get unrelated streams.
pub fn iteration_seed(seed: u64, iteration: u64) -> u64 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    mix(seed ^ mix(iteration))
}

/// GRPO samples of the kept groups, in order. Aborted samples are left out altogether: they
/// have no advantage and their tokens must not enter the denominator (their rollout may be
/// empty or partial).
pub fn grpo_batch(groups: &[KeptGroup<Vec<Rollout>>]) -> Vec<GrpoSample<'_>> {
    groups
        .iter()
        .flat_map(|g| {
            g.samples
                .iter()
                .zip(&g.advantages)
                .enumerate()
                .filter(|&(j, _)| g.is_trained(j))
                .flat_map(|(_, (s, &a))| s.sample.iter().map(move |r| (r, a)))
                .map(|(r, a)| {
                    GrpoSample {
                        ids: &r.ids,
                        train_mask: &r.train_mask,
                        old_logprobs: &r.logprobs,
                        ref_logprobs: None,
                        advantage: a as f32,
                        routing: r.routing.as_deref(),
                    }
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_seeds_are_deterministic_and_distinct() {
        assert_eq!(iteration_seed(7, 3), iteration_seed(7, 3));
        let seeds: std::collections::BTreeSet<u64> =
            (0..1000).flat_map(|i| [iteration_seed(7, i), iteration_seed(8, i)]).collect();
        assert_eq!(seeds.len(), 2000, "distinct (seed, iteration) pairs give distinct streams");
        assert!(!seeds.contains(&7) && !seeds.contains(&8), "no iteration replays the constructor's stream");
    }

    fn record(start: usize, per_layer: Vec<Vec<u32>>) -> RoutingRecord {
        RoutingRecord {
            start,
            top_k: 2,
            experts: per_layer,
        }
    }

    #[test]
    fn replay_pads_the_unforwarded_last_token() {
        let r = record(0, vec![vec![3, 1, 4, 0, 2, 5], vec![0, 1, 1, 2, 2, 3]]);
        let f = replay_routing(&r, 4).unwrap();
        assert_eq!(f[0], vec![3, 1, 4, 0, 2, 5, 0, 1]);
        assert_eq!(f[1].len(), 8);
        assert_eq!(
            replay_routing(&r, 3).unwrap(),
            r.experts,
            "a fully covered sequence is unchanged"
        );
        assert!(
            replay_routing(&r, 5).is_err(),
            "two missing positions is not the engine's record"
        );
        assert!(replay_routing(&r, 2).is_err());
        assert!(
            replay_routing(&record(1, vec![vec![0, 1]]), 2).is_err(),
            "cached prefixes cannot be replayed"
        );
    }
}
