//! Teacher trajectories for SFT: scripted policies stand in for the teacher model. Each task gets
//! several distinct solution paths — correct ones (edit then submit in one call, inspect first,
//! check the diff before submitting) and incorrect ones (a wrong edit, a submission without an
//! edit) — run as Repair episodes through the real controller in real sandboxes, scored by the
//! harness (eq. 6 against the task's selected Oracle F2P test), and recorded in the agent loop's
//! own trajectory format (what an `http:` teacher produces too).
//!
//! Paths are derived from the task's gold patch: a one-line change becomes `sed` edits of the
//! changed token (so tasks of one bug family share their commands); any other gold patch is
//! applied with `git apply` from a here-document.
//!
//! The Test role's paths are in [`super::test_teacher`]; both roles share [`SolutionPath`],
//! [`TeacherRecord`] (whose `role` says which agent the episode was) and [`scripted_policy`].

use super::grpo::Role;
use crate::agent::trajectory::Trajectory;
use crate::episode::rewards::{repair_reward, Reward};
use crate::episode::{run_repair, RepairConfig, RepairInputs};
use crate::harness::{FrozenBundle, SandboxKind};
use crate::pipeline::score::score_repair_rollout;
use crate::policy::ScriptedPolicy;
use crate::task::TaskInstance;
use serde::Serialize;
use std::time::Duration;

/// The Submit marker command after writing the patch of `file` (or of every change).
fn submit(file: Option<&str>) -> String {
    let scope = file.map(|f| format!(" -- {f}")).unwrap_or_default();
    format!(
        "git add -AN && git diff --no-color{scope} > /tmp/fix.patch && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch"
    )
}

/// One assistant turn calling bash with `command` (Qwen3.5 XML tool call).
pub fn tool_call(command: &str) -> String {
    format!("<tool_call>\n<function=bash>\n<parameter=command>\n{command}\n</parameter>\n</function>\n</tool_call>")
}

/// A one-line fix: in `file`, the whitespace-delimited token `old` becomes `new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenFix {
    pub file: String,
    pub old: String,
    pub new: String,
}

/// The token change of a gold patch that changes exactly one line of one file (`None`
/// otherwise, or when the tokens cannot be written into a single-quoted `sed` expression).
pub fn token_fix(gold: &str) -> Option<TokenFix> {
    let mut file = None;
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for line in gold.lines() {
        if let Some(f) = line.strip_prefix("+++ b/") {
            if file.replace(f.to_string()).is_some() {
                return None;
            }
        } else if line.starts_with("---") || line.starts_with("+++") {
            continue;
        } else if let Some(l) = line.strip_prefix('-') {
            removed.push(l);
        } else if let Some(l) = line.strip_prefix('+') {
            added.push(l);
        }
    }
    let ([old], [new], Some(file)) = (&removed[..], &added[..], file) else { return None };
    let (old, new) = changed_tokens(old, new)?;
    let safe = |s: &str| !s.is_empty() && s.chars().all(|c| !c.is_whitespace() && !"'/\\&.*[]^$".contains(c));
    (safe(&old) && safe(&new)).then_some(TokenFix { file, old, new })
}

/// The whitespace-delimited tokens that differ between two lines that differ in one place.
fn changed_tokens(old: &str, new: &str) -> Option<(String, String)> {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.split(' ').collect(), new.split(' ').collect());
    if a.len() != b.len() {
        return None;
    }
    let mut diff = a.iter().zip(&b).filter(|(x, y)| x != y);
    let (x, y) = diff.next()?;
    diff.next().is_none().then(|| (x.to_string(), y.to_string()))
}

/// A token that is neither side of the fix: the wrong edit of the incorrect path.
fn wrong_token(fix: &TokenFix) -> &'static str {
    ["*", "//", "%"].into_iter().find(|t| *t != fix.old && *t != fix.new).expect("three distinct tokens")
}

fn sed(fix: &TokenFix, to: &str) -> String {
    format!("sed -i 's/ {} / {} /' {}", fix.old, to, fix.file)
}

/// One scripted solution path.
#[derive(Clone, Debug, Serialize)]
pub struct SolutionPath {
    pub name: String,
    /// The path is meant to resolve the task (checked by the harness when it runs).
    pub correct: bool,
    /// Bash commands, one per assistant turn; the last one submits.
    pub commands: Vec<String>,
}

impl SolutionPath {
    pub(crate) fn new(name: &str, correct: bool, commands: Vec<String>) -> Self {
        SolutionPath { name: name.into(), correct, commands }
    }

    /// The path as a scripted-policy JSONL script.
    pub fn script(&self) -> String {
        self.commands
            .iter()
            .map(|c| serde_json::json!({ "content": tool_call(c) }).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The solution paths of a task: three correct and two incorrect ones for a one-line fix; the
/// gold patch applied (correct) and an unedited submission (incorrect) otherwise.
pub fn solution_paths(gold: &str) -> Vec<SolutionPath> {
    let cd = "cd /testbed && ";
    match token_fix(gold) {
        Some(fix) => {
            let f = Some(fix.file.as_str());
            vec![
                SolutionPath::new("edit-and-submit", true, vec![format!("{cd}{} && {}", sed(&fix, &fix.new), submit(f))]),
                SolutionPath::new(
                    "inspect-then-fix",
                    true,
                    vec![format!("{cd}grep -n ' {} ' {}", fix.old, fix.file), format!("{cd}{} && {}", sed(&fix, &fix.new), submit(f))],
                ),
                SolutionPath::new(
                    "fix-review-submit",
                    true,
                    vec![format!("{cd}{}", sed(&fix, &fix.new)), format!("{cd}git diff"), format!("{cd}{}", submit(f))],
                ),
                SolutionPath::new(
                    "wrong-operator",
                    false,
                    vec![format!("{cd}{} && {}", sed(&fix, wrong_token(&fix)), submit(f))],
                ),
                SolutionPath::new("submit-unedited", false, vec![format!("{cd}{}", submit(f))]),
            ]
        }
        None => vec![
            SolutionPath::new(
                "apply-fix",
                true,
                vec![format!("{cd}git apply <<'EXECCRITIC_EOF'\n{gold}EXECCRITIC_EOF"), format!("{cd}{}", submit(None))],
            ),
            SolutionPath::new("submit-unedited", false, vec![format!("{cd}{}", submit(None))]),
        ],
    }
}

/// One teacher episode as recorded in the run's `teacher.jsonl`.
#[derive(Clone, Debug, Serialize)]
pub struct TeacherRecord {
    /// The agent the episode ran as (`repair` or `test`).
    pub role: Role,
    pub instance_id: String,
    pub path: String,
    pub correct: bool,
    /// The role's reward from the harness — Repair eq. 6, Test eq. 5 — (`null`: operational
    /// error, the trajectory is left out).
    pub reward: Option<f64>,
    pub turns: usize,
}

impl TeacherRecord {
    pub(crate) fn new(role: Role, task: &TaskInstance, path: &SolutionPath, reward: Reward, turns: usize) -> Self {
        TeacherRecord {
            role,
            instance_id: task.instance_id.clone(),
            path: path.name.clone(),
            correct: path.correct,
            reward: reward.value(),
            turns,
        }
    }
}

/// The scripted policy that plays `path` (`None`, with a warning, when its script is unusable).
pub(crate) fn scripted_policy(task: &TaskInstance, path: &SolutionPath) -> Option<ScriptedPolicy> {
    ScriptedPolicy::from_jsonl(&format!("teacher:{}", path.name), &path.script())
        .map_err(|e| tracing::warn!("teacher path {} of {}: {e}", path.name, task.instance_id))
        .ok()
}

/// Run every solution path of `task` as a Repair episode (Round 0 only, `revision_rounds` 0)
/// with a scripted policy and score it; returns each path's record and trajectory (operational
/// errors come back with `reward: None`).
pub async fn teacher_episodes(
    task: &TaskInstance,
    bundle: &FrozenBundle,
    sandbox: SandboxKind,
) -> Vec<(TeacherRecord, Trajectory)> {
    let runs = solution_paths(&task.patch).into_iter().map(|path| async move {
        let Some(policy) = scripted_policy(task, &path) else {
            return (TeacherRecord::new(Role::Repair, task, &path, Reward::Masked, 0), Trajectory::default());
        };
        let cfg = RepairConfig {
            round0_turns: path.commands.len(),
            revision_rounds: 0,
            revision_turns: 0,
            command_timeout: Duration::from_secs(60),
            sandbox,
            ..RepairConfig::default()
        };
        let r = run_repair(task, Some(bundle), &policy, &cfg, RepairInputs::default()).await;
        let reward = repair_reward(&score_repair_rollout(task, &r, bundle, sandbox).await);
        (TeacherRecord::new(Role::Repair, task, &path, reward, r.record.stats.turns), r.trajectory)
    });
    futures_util::future::join_all(runs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLD: &str = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -3,3 +3,3 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

    #[test]
    fn one_line_gold_patch_gives_the_changed_token() {
        let fix = token_fix(GOLD).unwrap();
        assert_eq!(fix, TokenFix { file: "calc/ops.py".into(), old: "-".into(), new: "+".into() });
        assert_eq!(sed(&fix, "+"), "sed -i 's/ - / + /' calc/ops.py");
        assert_eq!(wrong_token(&fix), "*");
        let lt = GOLD.replace("a - b", "a < b").replace("a + b", "a <= b");
        assert_eq!(token_fix(&lt).unwrap().new, "<=");
    }

    #[test]
    fn other_gold_patches_have_no_token_fix() {
        let two_lines = GOLD.replace("+    return a + b\n", "+    return a + b\n+    pass\n");
        assert_eq!(token_fix(&two_lines), None);
        let two_tokens = GOLD.replace("a + b", "b + a");
        assert_eq!(token_fix(&two_tokens), None);
        let regex_char = GOLD.replace("a + b", "a . b");
        assert_eq!(token_fix(&regex_char), None);
    }

    #[test]
    fn every_path_ends_with_a_submission_and_both_kinds_exist() {
        let paths = solution_paths(GOLD);
        assert_eq!(paths.len(), 5);
        assert_eq!(paths.iter().filter(|p| p.correct).count(), 3);
        for p in &paths {
            assert!(p.commands.last().unwrap().contains("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch"));
            assert_eq!(p.script().lines().count(), p.commands.len());
        }
        let paths = solution_paths(&GOLD.replace("+    return a + b\n", "+    return a + b\n+    pass\n"));
        assert_eq!(paths.iter().map(|p| p.correct).collect::<Vec<_>>(), vec![true, false]);
    }
}
