//! The paper's rewards (eq. 5–6, App. A; harness-semantics §7) as pure functions, and the group
//! utilities GRPO needs: the Test length penalty within a reward tier, group-mean centering without
//! standard-deviation division, zero-advantage masking of operationally invalid trajectories, and
//! the candidate pool (≤ 8 deduplicated, approximately class-balanced labelled patches).

use serde::{Deserialize, Serialize};

/// A reward, or "masked": the trajectory met an operational error, gets zero advantage and is
/// left out of the group statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reward {
    Value(f64),
    Masked,
}

impl Reward {
    pub fn value(self) -> Option<f64> {
        match self {
            Reward::Value(v) => Some(v),
            Reward::Masked => None,
        }
    }
}

/// One labelled candidate patch run against a bundle (valid execution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateResult {
    /// The official evaluator resolves the task with this patch (positive class).
    pub correct: bool,
    /// The generated test passed on it.
    pub passed: bool,
}

/// BA = ½(TPR + TNR); the recall of an absent class is 0, so a single-class pool gives BA ≤ 0.5.
pub fn balanced_accuracy(candidates: &[CandidateResult]) -> f64 {
    let recall = |class: bool, expect_pass: bool| {
        let members: Vec<_> = candidates.iter().filter(|c| c.correct == class).collect();
        if members.is_empty() {
            0.0
        } else {
            members.iter().filter(|c| c.passed == expect_pass).count() as f64 / members.len() as f64
        }
    };
    0.5 * (recall(true, true) + recall(false, false))
}

/// What the offline audit established for one Test rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TestAudit {
    /// The rollout completed without a valid submission.
    NoValidSubmission,
    /// Some execution on Base, Gold or a candidate was operationally invalid.
    OperationalError,
    /// A valid bundle with its Base (clean failure) and Gold (pass) indicators and the candidate
    /// results (used only when Q = 1).
    Audited {
        base_clean_fail: bool,
        gold_pass: bool,
        candidates: Vec<CandidateResult>,
    },
}

/// Test reward, eq. 5 (before the length penalty).
pub fn test_reward(audit: &TestAudit) -> Reward {
    match audit {
        TestAudit::NoValidSubmission => Reward::Value(-0.2),
        TestAudit::OperationalError => Reward::Masked,
        TestAudit::Audited {
            base_clean_fail,
            gold_pass,
            candidates,
        } => {
            if !(*base_clean_fail && *gold_pass) {
                return Reward::Value(0.0);
            }
            let ba = balanced_accuracy(candidates);
            Reward::Value(if ba >= 1.0 {
                1.0
            } else if ba >= 0.8 {
                0.5
            } else {
                0.2
            })
        }
    }
}

/// The terminal state of one Repair rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RepairTerminal {
    /// Missing or invalid terminal patch, including a forbidden test modification.
    InvalidPatch,
    /// The terminal test execution was operationally invalid.
    OperationalError,
    /// A valid execution of the selected training test, the official verdict, and the round of
    /// the terminal patch (0 = Round 0).
    Valid {
        selected_test_pass: bool,
        official_pass: bool,
        round: usize,
    },
}

/// Repair reward, eq. 6.
pub fn repair_reward(t: &RepairTerminal) -> Reward {
    match *t {
        RepairTerminal::InvalidPatch => Reward::Value(0.0),
        RepairTerminal::OperationalError => Reward::Masked,
        RepairTerminal::Valid {
            selected_test_pass: false,
            ..
        } => Reward::Value(0.1),
        RepairTerminal::Valid {
            official_pass: false,
            ..
        } => Reward::Value(0.2),
        RepairTerminal::Valid { round: 0, .. } => Reward::Value(1.5),
        RepairTerminal::Valid { .. } => Reward::Value(1.0),
    }
}

/// Turns beyond the tier's shortest rollout after which the reward is halved.
pub const LENGTH_SLACK_TURNS: usize = 8;

/// Length penalty within a group: a rollout with a positive reward that took more than
/// `LENGTH_SLACK_TURNS` turns more than the shortest rollout *of the same reward tier* gets half
/// its reward. Masked and non-positive rewards are unchanged.
/// `group` holds each rollout's reward and turn count.
pub fn apply_length_penalty(group: &[(Reward, usize)]) -> Vec<Reward> {
    group
        .iter()
        .map(|&(r, t)| match r {
            Reward::Value(v) if v > 0.0 => {
                let shortest = group
                    .iter()
                    .filter(|(o, _)| o.value() == Some(v))
                    .map(|&(_, n)| n)
                    .min()
                    .unwrap_or(t);
                if t > shortest + LENGTH_SLACK_TURNS {
                    Reward::Value(v / 2.0)
                } else {
                    Reward::Value(v)
                }
            }
            other => other,
        })
        .collect()
}

/// Group-relative advantages: reward minus the mean of the unmasked rewards (no division by the
/// standard deviation); masked trajectories get exactly 0 and do not enter the mean.
pub fn group_advantages(rewards: &[Reward]) -> Vec<f64> {
    crate::train::advantage::group_advantages(&values(rewards))
}

/// DAPO dynamic sampling: keep a group only if its unmasked rewards are not all equal.
pub fn has_reward_variance(rewards: &[Reward]) -> bool {
    crate::train::advantage::has_reward_variance(&values(rewards))
}

fn values(rewards: &[Reward]) -> Vec<Option<f64>> {
    rewards.iter().map(|r| r.value()).collect()
}

/// The candidate cap of the Test reward.
pub const CANDIDATE_CAP: usize = 8;

/// Choose at most `CANDIDATE_CAP` candidates from labelled patches `(patch, correct)`:
/// deduplicated (trailing whitespace of lines ignored, empty patches dropped) and approximately
/// class-balanced (alternating classes while both have members left). Returns indices into the
/// input, in input order per class.
pub fn select_candidates(patches: &[(&str, bool)]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    for (i, (patch, correct)) in patches.iter().enumerate() {
        let norm: String = patch
            .lines()
            .map(|l| l.trim_end())
            .collect::<Vec<_>>()
            .join("\n");
        if norm.trim().is_empty() || !seen.insert(norm) {
            continue;
        }
        if *correct {
            pos.push(i)
        } else {
            neg.push(i)
        }
    }
    let mut out = Vec::new();
    let (mut p, mut n) = (pos.into_iter(), neg.into_iter());
    loop {
        let mut took = false;
        for it in [&mut p, &mut n] {
            if out.len() < CANDIDATE_CAP {
                if let Some(i) = it.next() {
                    out.push(i);
                    took = true;
                }
            }
        }
        if !took {
            break;
        }
    }
    out
}
