//! DAPO dynamic sampling (paper App. A): draw groups until `groups` of them carry a learning
//! signal (non-zero reward variance among their unaborted samples), skipping zero-variance
//! groups, with a cap on the number of groups drawn. Knows nothing of what a sample is: the
//! caller's callback samples and scores one group for attempt `i` (and picks the prompt).
//! Kept groups come with group-mean advantages (no std division); aborted samples are masked
//! (advantage 0, and they must be left out of the token denominator — see
//! [`KeptGroup::is_trained`]).

use super::advantage::{group_advantages, has_reward_variance};
use serde::{Deserialize, Serialize};

/// How many groups to collect and how hard to try.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicSamplingConfig {
    /// Groups with reward variance per update (App. A: 16).
    pub groups: usize,
    /// Samples per group (App. A: 8).
    pub group_size: usize,
    /// Most groups drawn for one update before giving up.
    pub max_attempts: usize,
}

impl Default for DynamicSamplingConfig {
    fn default() -> Self {
        DynamicSamplingConfig {
            groups: 16,
            group_size: 8,
            max_attempts: 64,
        }
    }
}

/// One scored sample of a group.
#[derive(Clone, Debug)]
pub struct Scored<S> {
    pub sample: S,
    pub reward: f64,
    /// Aborted (operational error, engine failure, …): no reward, masked from the update.
    pub aborted: bool,
}

/// A group kept for the update.
#[derive(Clone, Debug)]
pub struct KeptGroup<S> {
    /// The attempt index the callback was called with.
    pub attempt: usize,
    pub samples: Vec<Scored<S>>,
    /// Per sample: reward − mean of the group's unaborted rewards; 0 for aborted samples.
    pub advantages: Vec<f64>,
}

impl<S> KeptGroup<S> {
    /// True when sample `j` takes part in the loss (and its tokens in the denominator).
    pub fn is_trained(&self, j: usize) -> bool {
        !self.samples[j].aborted
    }
}

/// What one collection did.
#[derive(Clone, Debug)]
pub struct Collected<S> {
    pub kept: Vec<KeptGroup<S>>,
    /// Groups drawn (kept + skipped).
    pub attempts: usize,
    /// Groups skipped for zero reward variance.
    pub skipped: usize,
    /// Mean reward over every unaborted sample drawn, kept or not (the policy's success rate).
    pub mean_reward: f64,
    pub aborted_samples: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum DynamicSamplingError<E: std::error::Error + 'static> {
    #[error("dynamic sampling: only {kept} of {wanted} groups had reward variance after {attempts} groups drawn (cap); the task is too easy or too hard for the policy")]
    CapReached {
        kept: usize,
        wanted: usize,
        attempts: usize,
        mean_reward: f64,
    },
    #[error("dynamic sampling: group {attempt} returned {got} samples, expected {want}")]
    GroupSize { attempt: usize, got: usize, want: usize },
    #[error("invalid dynamic sampling config: {0}")]
    Config(String),
    #[error(transparent)]
    Sample(E),
}

/// Call `sample_group(i)` for i = 0, 1, … until `cfg.groups` groups with reward variance are
/// kept or `cfg.max_attempts` groups were drawn (then [`DynamicSamplingError::CapReached`]).
pub fn collect_groups<S, E, F>(
    cfg: &DynamicSamplingConfig,
    mut sample_group: F,
) -> Result<Collected<S>, DynamicSamplingError<E>>
where
    E: std::error::Error + 'static,
    F: FnMut(usize) -> Result<Vec<Scored<S>>, E>,
{
    if cfg.groups == 0 || cfg.group_size < 2 || cfg.max_attempts < cfg.groups {
        return Err(DynamicSamplingError::Config(format!(
            "need groups >= 1, group_size >= 2 and max_attempts >= groups: {cfg:?}"
        )));
    }
    let mut out = Collected {
        kept: vec![],
        attempts: 0,
        skipped: 0,
        mean_reward: 0.0,
        aborted_samples: 0,
    };
    let (mut sum, mut n) = (0.0, 0usize);
    while out.kept.len() < cfg.groups {
        if out.attempts == cfg.max_attempts {
            return Err(DynamicSamplingError::CapReached {
                kept: out.kept.len(),
                wanted: cfg.groups,
                attempts: out.attempts,
                mean_reward: sum / n.max(1) as f64,
            });
        }
        let attempt = out.attempts;
        out.attempts += 1;
        let samples = sample_group(attempt).map_err(DynamicSamplingError::Sample)?;
        if samples.len() != cfg.group_size {
            return Err(DynamicSamplingError::GroupSize {
                attempt,
                got: samples.len(),
                want: cfg.group_size,
            });
        }
        let rewards: Vec<Option<f64>> = samples.iter().map(|s| (!s.aborted).then_some(s.reward)).collect();
        for r in rewards.iter().flatten() {
            sum += r;
            n += 1;
        }
        out.aborted_samples += samples.iter().filter(|s| s.aborted).count();
        if !has_reward_variance(&rewards) {
            out.skipped += 1;
            continue;
        }
        out.kept.push(KeptGroup {
            attempt,
            advantages: group_advantages(&rewards),
            samples,
        });
    }
    out.mean_reward = sum / n.max(1) as f64;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    fn group(rewards: &[(f64, bool)]) -> Vec<Scored<usize>> {
        rewards
            .iter()
            .enumerate()
            .map(|(i, &(reward, aborted))| Scored {
                sample: i,
                reward,
                aborted,
            })
            .collect()
    }

    fn cfg(groups: usize, max_attempts: usize) -> DynamicSamplingConfig {
        DynamicSamplingConfig {
            groups,
            group_size: 3,
            max_attempts,
        }
    }

    #[test]
    fn zero_variance_groups_are_skipped_and_aborted_samples_masked() {
        let groups = [
            group(&[(1.0, false), (1.0, false), (1.0, false)]), // all solved: skipped
            group(&[(1.0, false), (0.0, false), (7.0, true)]),  // aborted one masked
            group(&[(0.0, false), (0.0, false), (0.0, false)]), // all failed: skipped
            group(&[(0.0, false), (0.0, false), (1.0, true)]),  // variance only via the aborted one: skipped
            group(&[(1.0, false), (1.0, false), (0.0, false)]),
        ];
        let got = collect_groups::<_, Boom, _>(&cfg(2, 10), |i| Ok(groups[i].clone())).unwrap();
        assert_eq!(
            (got.attempts, got.skipped, got.kept.len(), got.aborted_samples),
            (5, 3, 2, 2)
        );
        assert_eq!(got.kept[0].attempt, 1);
        assert_eq!(got.kept[0].advantages, vec![0.5, -0.5, 0.0]);
        assert!(got.kept[0].is_trained(0) && !got.kept[0].is_trained(2));
        assert_eq!(got.kept[1].attempt, 4);
        let a = &got.kept[1].advantages;
        assert!((a[0] - 1.0 / 3.0).abs() < 1e-12 && (a[2] + 2.0 / 3.0).abs() < 1e-12);
        // 13 unaborted samples, 6 of them rewarded 1.
        assert!((got.mean_reward - 6.0 / 13.0).abs() < 1e-12);
    }

    #[test]
    fn the_attempt_cap_is_a_clear_error() {
        let flat = group(&[(0.0, false), (0.0, false), (0.0, false)]);
        let good = group(&[(1.0, false), (0.0, false), (0.0, false)]);
        let err = collect_groups::<_, Boom, _>(&cfg(2, 4), |i| Ok(if i == 0 { good.clone() } else { flat.clone() }))
            .unwrap_err();
        match err {
            DynamicSamplingError::CapReached {
                kept: 1,
                wanted: 2,
                attempts: 4,
                ..
            } => {}
            e => panic!("unexpected {e:?}"),
        }
        assert!(matches!(
            collect_groups::<_, Boom, _>(&cfg(1, 4), |_| Ok(group(&[(1.0, false)]))),
            Err(DynamicSamplingError::GroupSize { got: 1, want: 3, .. })
        ));
        assert!(matches!(
            collect_groups::<usize, _, _>(&cfg(1, 4), |_| Err(Boom)),
            Err(DynamicSamplingError::Sample(Boom))
        ));
        assert!(matches!(
            collect_groups::<usize, Boom, _>(&cfg(3, 2), |_| unreachable!()),
            Err(DynamicSamplingError::Config(_))
        ));
    }
}
