//! What `demo train` measures and writes: per-phase metrics lines (`metrics.jsonl`), the score
//! of an evaluation split, the run summary (`summary.json`), the reward curve
//! (`reward_curve.svg`: mean reward and resolve rate per GRPO iteration — Repair, and the Test
//! role's eq. 5 reward and valid-test rate — held-back evaluations) and the Markdown report
//! (`report.md`, with per-role tables).

use super::curve::{render, Panel, Series};
use super::demo::{DemoConfig, DemoError, Result};
use super::grpo::{Role, RolloutLog};
use super::teacher::TeacherRecord;
use crate::train::trainer::StepReport;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// A reward at or above this resolves the task (eq. 6: 1.5 at Round 0, 1.0 after revision).
pub const RESOLVED: f64 = 1.0;

/// An episode of `role` succeeded: Repair resolved the task (eq. 6 ≥ [`RESOLVED`]); Test wrote a
/// valid test — qualified on Base and passing with the gold fix (Q = 1), the only case where
/// eq. 5 is positive.
pub fn succeeded(role: Role, reward: f64) -> bool {
    match role {
        Role::Repair => reward >= RESOLVED,
        Role::Test => reward > 0.0,
    }
}

/// Mean reward and success rate of a set of episodes (masked ones left out). `resolve_rate` is
/// [`succeeded`]'s rate: resolved tasks for Repair, valid tests for Test.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SplitScore {
    pub mean_reward: f64,
    pub resolve_rate: f64,
    pub rollouts: usize,
    pub aborted: usize,
}

impl SplitScore {
    pub fn of(logs: &[RolloutLog]) -> Self {
        let rewards: Vec<(Role, f64)> = logs.iter().filter_map(|l| l.reward.map(|r| (l.role, r))).collect();
        let n = rewards.len().max(1) as f64;
        SplitScore {
            mean_reward: rewards.iter().map(|(_, r)| r).sum::<f64>() / n,
            resolve_rate: rewards.iter().filter(|(role, r)| succeeded(*role, *r)).count() as f64 / n,
            rollouts: rewards.len(),
            aborted: logs.len() - rewards.len(),
        }
    }

    /// The score of `role`'s episodes among `logs` (`None` when there are none).
    pub fn of_role(logs: &[RolloutLog], role: Role) -> Option<Self> {
        let mine: Vec<RolloutLog> = logs.iter().filter(|l| l.role == role).cloned().collect();
        (!mine.is_empty()).then(|| SplitScore::of(&mine))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SftMetrics {
    pub phase: &'static str,
    pub step: u64,
    pub loss: f64,
    pub tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalMetrics {
    pub phase: &'static str,
    /// `untrained`, `sft` or `grpo`.
    pub stage: String,
    /// GRPO updates done before the evaluation.
    pub iteration: u64,
    /// `trained` or `held_back`.
    pub split: String,
    #[serde(flatten)]
    pub score: SplitScore,
}

/// One GRPO iteration.
#[derive(Clone, Debug, Serialize)]
pub struct GrpoMetrics {
    pub phase: &'static str,
    pub iteration: u64,
    /// Over every Repair episode drawn this iteration (kept or skipped groups).
    #[serde(flatten)]
    pub score: SplitScore,
    /// Over every Test episode drawn this iteration (eq. 5; `resolve_rate` = valid-test rate);
    /// `null` when no Test group was drawn.
    pub test: Option<SplitScore>,
    pub kept_groups: usize,
    pub skipped_groups: usize,
    /// Samples of kept groups with a non-zero advantage (what the update learns from).
    pub nonzero_advantages: usize,
    pub sampled_tokens: usize,
    /// Wall seconds: rollout phase (episodes, harness, scoring), update phase; the harness
    /// share of the rollout phase estimated from each episode's policy time.
    pub rollout_s: f64,
    pub update_s: f64,
    pub harness_s: f64,
    /// The update (absent: no group with reward variance, or every advantage zero).
    pub update: Option<StepReport>,
}

impl GrpoMetrics {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        iteration: u64,
        drawn: &[RolloutLog],
        kept_groups: usize,
        skipped_groups: usize,
        nonzero_advantages: usize,
        update: Option<StepReport>,
        rollout_s: f64,
        update_s: f64,
    ) -> Self {
        let wall: u64 = drawn.iter().map(|l| l.wall_ms).sum();
        let model: u64 = drawn.iter().map(|l| l.model_ms.min(l.wall_ms)).sum();
        let harness_share = if wall > 0 { (wall - model) as f64 / wall as f64 } else { 0.0 };
        GrpoMetrics {
            phase: "grpo",
            iteration,
            score: SplitScore::of_role(drawn, Role::Repair).unwrap_or_default(),
            test: SplitScore::of_role(drawn, Role::Test),
            kept_groups,
            skipped_groups,
            nonzero_advantages,
            sampled_tokens: drawn.iter().map(|l| l.sampled_tokens).sum(),
            rollout_s,
            update_s,
            harness_s: rollout_s * harness_share,
            update,
        }
    }

    pub fn progress_line(&self, of: u64) -> String {
        let upd = match &self.update {
            Some(u) => format!("loss {:+.4}, {} tokens", u.loss, u.tokens),
            None => "no update".into(),
        };
        let test = match &self.test {
            Some(t) => format!(" | Test: mean reward {:.3}, valid tests {:3.0}% ({} ep.)", t.mean_reward, 100.0 * t.resolve_rate, t.rollouts),
            None => String::new(),
        };
        format!(
            "[grpo] iteration {:3}/{of}: Repair: mean reward {:.3}, resolved {:3.0}%{test}; groups kept {} skipped {}, non-zero advantages {}, {upd}; rollout {:.1}s (harness ≈{:.1}s), update {:.1}s",
            self.iteration + 1,
            self.score.mean_reward,
            100.0 * self.score.resolve_rate,
            self.kept_groups,
            self.skipped_groups,
            self.nonzero_advantages,
            self.rollout_s,
            self.harness_s,
            self.update_s
        )
    }
}

/// Everything the run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub config: DemoConfig,
    pub trained: Vec<String>,
    pub held_back: Vec<String>,
    pub teacher: Vec<TeacherRecord>,
    pub teacher_s: f64,
    pub sft_losses: Vec<f64>,
    pub sft_s: f64,
    pub iterations: Vec<GrpoMetrics>,
    pub evals: Vec<EvalMetrics>,
    pub total_s: f64,
    pub final_checkpoint: PathBuf,
}

impl RunSummary {
    /// The evaluation of `split` at `stage` (the last one when several).
    pub fn eval(&self, stage: &str, split: &str) -> Option<SplitScore> {
        self.evals.iter().rev().find(|e| e.stage == stage && e.split == split).map(|e| e.score)
    }

    /// Mean of the per-iteration Repair mean rewards of iterations `range`.
    pub fn mean_reward(&self, range: std::ops::Range<usize>) -> f64 {
        let xs: Vec<f64> = self.iterations[range].iter().map(|m| m.score.mean_reward).collect();
        xs.iter().sum::<f64>() / xs.len().max(1) as f64
    }
}

/// One line per role and path kind: episodes, mean reward, resolved (Repair) or valid tests
/// (Test).
pub fn teacher_lines(records: &[TeacherRecord]) -> Vec<String> {
    let mut kinds: Vec<(Role, &str)> = records.iter().map(|r| (r.role, r.path.as_str())).collect();
    kinds.sort_by_key(|(role, name)| (*role == Role::Test, *name));
    kinds.dedup();
    kinds
        .into_iter()
        .map(|(role, name)| {
            let rs: Vec<&TeacherRecord> = records.iter().filter(|r| r.role == role && r.path == name).collect();
            let rewards: Vec<f64> = rs.iter().filter_map(|r| r.reward).collect();
            let (label, eq, success) = match role {
                Role::Repair => ("Repair", "eq. 6", "resolved"),
                Role::Test => ("Test", "eq. 5", "valid tests"),
            };
            format!(
                "{label:<6} {name:<18} ({}): {} episodes, mean reward ({eq}) {:.2}, {success} {}/{}, masked {}",
                if rs[0].correct { "correct" } else { "incorrect" },
                rs.len(),
                rewards.iter().sum::<f64>() / rewards.len().max(1) as f64,
                rewards.iter().filter(|r| succeeded(role, **r)).count(),
                rewards.len(),
                rs.len() - rewards.len()
            )
        })
        .collect()
}

/// The reward curve: training mean reward and held-back evaluations, resolve rates.
pub fn reward_curve(s: &RunSummary) -> String {
    let it = |f: fn(&GrpoMetrics) -> f64| s.iterations.iter().map(|m| (m.iteration as f64 + 1.0, f(m))).collect::<Vec<_>>();
    let evals = |split: &str, f: fn(&SplitScore) -> f64| {
        s.evals
            .iter()
            .filter(|e| e.split == split && e.stage != "untrained")
            .map(|e| (e.iteration as f64, f(&e.score)))
            .collect::<Vec<_>>()
    };
    let test = |g: fn(&SplitScore) -> f64| {
        s.iterations.iter().filter_map(|m| m.test.as_ref().map(|t| (m.iteration as f64 + 1.0, g(t)))).collect::<Vec<_>>()
    };
    let panel = |title: &str, y_min: f64, y_max: f64, f: fn(&GrpoMetrics) -> f64, g: fn(&SplitScore) -> f64, test_label: &str| Panel {
        title: title.into(),
        y_min,
        y_max,
        series: vec![
            Series { label: "Repair, trained tasks (rollouts)".into(), color: "#1f77b4", points: it(f) },
            Series { label: "Repair, trained tasks (eval)".into(), color: "#2ca02c", points: evals("trained", g) },
            Series { label: "Repair, held-back tasks (eval)".into(), color: "#d62728", points: evals("held_back", g) },
            Series { label: test_label.into(), color: "#9467bd", points: test(g) },
        ],
    };
    render(
        &[
            panel(
                "Mean reward per GRPO iteration (Repair eq. 6, Test eq. 5)",
                -0.2,
                1.5,
                |m| m.score.mean_reward,
                |s| s.mean_reward,
                "Test, trained tasks (rollouts)",
            ),
            panel(
                "Resolve rate (Repair) / valid-test rate (Test) per GRPO iteration",
                0.0,
                1.0,
                |m| m.score.resolve_rate,
                |s| s.resolve_rate,
                "Test valid tests, trained tasks (rollouts)",
            ),
        ],
        s.iterations.len() as f64,
    )
}

/// The Markdown report.
pub fn report(s: &RunSummary) -> String {
    let c = &s.config;
    let mut r = String::new();
    let _ = writeln!(r, "# `execcritic demo train` report\n");
    let _ = writeln!(
        r,
        "Model: random-initialised Qwen3.5-MoE `{}` with tokenizer `{}`; device {}; seed {}.  ",
        c.init_model.display(),
        c.tokenizer.display(),
        c.device,
        c.seed
    );
    let _ = writeln!(r, "Trained tasks: {}.  \nHeld-back tasks (never trained on): {}.\n", s.trained.join(", "), s.held_back.join(", "));
    let _ = writeln!(r, "## Teacher trajectories ({:.0} s)\n", s.teacher_s);
    for l in teacher_lines(&s.teacher) {
        let _ = writeln!(r, "- {l}");
    }
    let (first, last) = (s.sft_losses.first().copied().unwrap_or(0.0), s.sft_losses.last().copied().unwrap_or(0.0));
    let _ = writeln!(
        r,
        "\n## SFT ({} steps × batch {}, lr {}, {:.0} s)\n\nloss {first:.3} → {last:.4} (assistant tokens only)\n",
        c.sft_steps, c.sft_batch_size, c.sft_lr, s.sft_s
    );
    let _ = writeln!(r, "## Before / after\n");
    let _ = writeln!(r, "| stage | trained: mean reward | trained: resolved | held-back: mean reward | held-back: resolved |");
    let _ = writeln!(r, "|---|---|---|---|---|");
    for stage in ["untrained", "sft", "grpo"] {
        let cell = |split| match s.eval(stage, split) {
            Some(e) => (format!("{:.3}", e.mean_reward), format!("{:.0}% ({} ep.)", 100.0 * e.resolve_rate, e.rollouts)),
            None => ("—".into(), "—".into()),
        };
        let (tr, th) = (cell("trained"), cell("held_back"));
        let label = match stage {
            "untrained" => "random init".to_string(),
            "sft" => "after SFT".to_string(),
            _ => format!("after GRPO ({} iterations)", s.iterations.len()),
        };
        let _ = writeln!(r, "| {label} | {} | {} | {} | {} |", tr.0, tr.1, th.0, th.1);
    }
    let _ = writeln!(
        r,
        "\n## GRPO ({} iterations; {} groups × {} samples, DAPO cap {}; lr {}; ≤ {} tokens × {} turns, T = {})\n",
        s.iterations.len(),
        c.groups,
        c.group_size,
        c.max_attempts,
        c.grpo_lr,
        c.max_tokens,
        c.round0_turns,
        c.temperature
    );
    let roles = match c.test_every {
        0 => "Repair groups only (eq. 6, resolved = reward ≥ 1); no Test groups were drawn (`test_every = 0`).".to_string(),
        k => format!("Per role: Repair groups (eq. 6, resolved = reward ≥ 1) and Test groups (eq. 5, valid test = qualified on Base and passing with the gold fix), one group in every {k} drawn being a Test group."),
    };
    let _ = writeln!(r, "{roles}\n");
    let _ = writeln!(r, "| iter | Repair mean reward | Repair resolved | Test mean reward | Test valid tests | kept / skipped | non-zero adv. | loss | sampled tokens | rollout s | harness s | update s |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in &s.iterations {
        let loss = m.update.as_ref().map_or("—".into(), |u| format!("{:+.4}", u.loss));
        let (test_reward, test_valid) = match &m.test {
            Some(t) => (format!("{:.3}", t.mean_reward), format!("{:.0}% ({} ep.)", 100.0 * t.resolve_rate, t.rollouts)),
            None => ("—".into(), "—".into()),
        };
        let _ = writeln!(
            r,
            "| {} | {:.3} | {:.0}% | {test_reward} | {test_valid} | {} / {} | {} | {loss} | {} | {:.1} | {:.1} | {:.1} |",
            m.iteration + 1,
            m.score.mean_reward,
            100.0 * m.score.resolve_rate,
            m.kept_groups,
            m.skipped_groups,
            m.nonzero_advantages,
            m.sampled_tokens,
            m.rollout_s,
            m.harness_s,
            m.update_s
        );
    }
    let sum = |f: fn(&GrpoMetrics) -> f64| s.iterations.iter().map(f).sum::<f64>();
    let (roll, harness, upd) = (sum(|m| m.rollout_s), sum(|m| m.harness_s), sum(|m| m.update_s));
    let sampled = sum(|m| m.sampled_tokens as f64);
    let trained = sum(|m| m.update.as_ref().map_or(0.0, |u| u.tokens as f64));
    let _ = writeln!(
        r,
        "\n## Time\n\nTotal {:.0} s: teacher {:.0} s, SFT {:.0} s, GRPO rollouts {roll:.0} s (of which harness/sandbox ≈ {harness:.0} s, policy ≈ {:.0} s), GRPO updates {upd:.0} s, evaluations and checkpoints the rest.  \nRollout throughput {:.1} sampled tokens/s (wall, including sandboxes); update throughput {:.1} trained tokens/s.",
        s.total_s,
        s.teacher_s,
        s.sft_s,
        roll - harness,
        sampled / roll.max(1e-9),
        trained / upd.max(1e-9)
    );
    let n = s.iterations.len();
    let k = (n / 4).max(1);
    let _ = writeln!(
        r,
        "\nRepair mean reward of the first {k} iterations {:.3}, of the last {k} {:.3}.\n\n![reward curve](reward_curve.svg)",
        s.mean_reward(0..k),
        s.mean_reward(n - k..n)
    );
    r
}

/// Write `summary.json`, `reward_curve.svg` and `report.md` into `out`.
pub fn write_outputs(s: &RunSummary, out: &Path) -> Result<()> {
    let json = serde_json::to_string_pretty(s).map_err(|e| DemoError::Invalid(e.to_string()))?;
    for (name, text) in [("summary.json", json), ("reward_curve.svg", reward_curve(s)), ("report.md", report(s))] {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|source| DemoError::Io { path: p, source })?;
    }
    Ok(())
}
