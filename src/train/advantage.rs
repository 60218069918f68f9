//! Group-relative advantages of GRPO (paper App. A): each reward minus the mean of its group's
//! unmasked rewards, without division by the standard deviation; masked samples (aborted,
//! operational errors) get exactly 0 and do not enter the mean. Plus the DAPO test of whether a
//! group carries any learning signal. Pure functions over `Option<f64>` (None = masked), shared
//! by `train::dynamic` and the episode rewards.

/// Reward minus the group mean of the unmasked rewards; masked entries get 0.
pub fn group_advantages(rewards: &[Option<f64>]) -> Vec<f64> {
    let values: Vec<f64> = rewards.iter().flatten().copied().collect();
    if values.is_empty() {
        return vec![0.0; rewards.len()];
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    rewards.iter().map(|r| r.map_or(0.0, |v| v - mean)).collect()
}

/// DAPO dynamic sampling: true when the unmasked rewards are not all equal.
pub fn has_reward_variance(rewards: &[Option<f64>]) -> bool {
    let mut values = rewards.iter().flatten();
    match values.next() {
        Some(first) => values.any(|v| (v - first).abs() > 1e-12),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_centred_on_the_unmasked_mean() {
        let a = group_advantages(&[Some(1.0), Some(0.0), None, Some(0.5)]);
        assert_eq!(a, vec![0.5, -0.5, 0.0, 0.0]);
        assert_eq!(group_advantages(&[None, None]), vec![0.0, 0.0]);
        assert!(has_reward_variance(&[Some(1.0), None, Some(0.0)]));
        assert!(!has_reward_variance(&[Some(1.0), None, Some(1.0)]));
        assert!(!has_reward_variance(&[None]));
    }
}
