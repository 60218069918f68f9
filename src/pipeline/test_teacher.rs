//! Teacher trajectories of the Test role: scripted policies that play the Test agent (paper §3.1,
//! App. B.3.1) on a task — write a regression test into /testbed, write the bundle
//! (`/tmp/test.patch`, `/tmp/test_command`, `/tmp/test_contract.json`) and submit — through the
//! real Test episode (history guard, harness qualification of each submission, bubblewrap
//! sandboxes), scored by the offline audit with eq. 5, and recorded in the agent loop's own
//! trajectory format.
//!
//! The teacher knows the task's official test patch (as the Repair teacher knows the gold patch)
//! and derives every path from it and the task's Oracle bundle (its command and test nodes):
//!
//! - correct (the test fails on Base for the issue's reason and passes with the gold fix):
//!   `write-and-submit` (write the test, write the bundle, submit), `inspect-then-write` (read the
//!   adjacent test file first), `run-then-submit` (run the exact command and see the test fail
//!   before writing the bundle);
//! - incorrect: `vacuous-test` (every added `assert X` becomes `assert (X) in (True, False)`: passes
//!   on Base, the Base gate rejects it — eq. 5 gives 0), `wrong-expectation` (`assert (X) is None`:
//!   qualifies on Base but fails with the gold fix — 0), `malformed-contract` (the right test with a
//!   contract missing its required fields: the harness rejects it, no valid submission — −0.2).
//!
//! Each episode's turn limit is its script's length, so a rejected submission ends the episode
//! at the turn limit instead of asking the exhausted script for more.

use super::grpo::Role;
use super::score::audit_test_rollout;
use super::teacher::{scripted_policy, SolutionPath, TeacherRecord};
use crate::agent::trajectory::Trajectory;
use crate::episode::oracle::oracle_bundle;
use crate::episode::rewards::{test_reward, Reward};
use crate::episode::test_episode::{BUNDLE_COMMAND, BUNDLE_CONTRACT, BUNDLE_PATCH};
use crate::episode::{run_test_episode, TestEpisodeConfig};
use crate::harness::{SandboxKind, TestContract};
use crate::task::TaskInstance;
use std::time::Duration;

const EOF: &str = "EXECCRITIC_EOF";

/// The Test agent's submission call (App. B.3.1).
pub const SUBMIT_TEST: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch";

/// `cmd` reading `body` from a quoted here-document.
fn heredoc(cmd: &str, body: &str) -> String {
    let nl = if body.ends_with('\n') { "" } else { "\n" };
    format!("{cmd} <<'{EOF}'\n{body}{nl}{EOF}")
}

/// What a Test teacher writes: the test (as a patch to apply), the command and the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestDraft {
    pub patch: String,
    pub command: String,
    pub contract: String,
}

impl TestDraft {
    /// The correct draft of `task`: the official test patch, the Oracle bundle's command and test
    /// nodes, and a short contract in the paper's fields (short: a preparation call must fit in
    /// the demo's per-turn token budget).
    pub fn official(task: &TaskInstance) -> Result<TestDraft, String> {
        let oracle = oracle_bundle(task)?;
        let contract = TestContract {
            entrypoint: "the public function the issue names".into(),
            trigger: "the call in the issue".into(),
            expected_output: "the result the issue states".into(),
            issue_evidence: vec!["the issue".into()],
            alternative_hypotheses: vec!["intended behaviour".into()],
            non_assertions: vec!["other inputs".into()],
            test_nodes: oracle.contract.test_nodes,
        };
        let contract = serde_json::to_string(&contract).map_err(|e| e.to_string())?;
        Ok(TestDraft { patch: oracle.test_patch, command: oracle.test_command, contract })
    }

    /// The same draft with every added `assert X` line rewritten by `rewrite(X)` (`None` when
    /// the patch adds no assertion).
    fn with_asserts(&self, rewrite: impl Fn(&str) -> String) -> Option<TestDraft> {
        let mut changed = false;
        let lines: Vec<String> = self
            .patch
            .lines()
            .map(|l| match l.strip_prefix('+').filter(|_| !l.starts_with("+++")) {
                Some(body) => {
                    let indent = &body[..body.len() - body.trim_start().len()];
                    match body.trim_start().strip_prefix("assert ") {
                        Some(expr) => {
                            changed = true;
                            format!("+{indent}assert {}", rewrite(expr.trim_end()))
                        }
                        None => l.to_string(),
                    }
                }
                None => l.to_string(),
            })
            .collect();
        changed.then(|| TestDraft { patch: lines.join("\n") + "\n", ..self.clone() })
    }

    /// The file the test patch writes (`+++ b/<path>`).
    fn test_file(&self) -> Option<&str> {
        self.patch.lines().find_map(|l| l.strip_prefix("+++ b/"))
    }

    /// The lines a patch of one file adds, when it only adds lines (`None` otherwise).
    fn added_lines(&self) -> Option<String> {
        let mut added = String::new();
        let mut files = 0;
        for l in self.patch.lines() {
            if l.starts_with("+++") {
                files += 1;
            } else if l.starts_with("---") {
                continue;
            } else if let Some(body) = l.strip_prefix('+') {
                added.push_str(body);
                added.push('\n');
            } else if l.starts_with('-') {
                return None;
            }
        }
        (files == 1 && !added.is_empty()).then_some(added)
    }

    /// Write the test into /testbed: a test that only adds lines to one file is appended to it
    /// (new test functions, as an agent writes them); any other test patch is applied.
    fn write_test(&self) -> String {
        match (self.test_file(), self.added_lines()) {
            (Some(file), Some(added)) => heredoc(&format!("cd /testbed && cat >> {file}"), &added),
            _ => heredoc("cd /testbed && git apply", &self.patch),
        }
    }

    /// The preparation call: contract, command and the patch of the working tree.
    fn write_bundle(&self) -> String {
        format!(
            "{}\n{}\ncd /testbed && git add -AN && git diff --no-color > {BUNDLE_PATCH}",
            heredoc(&format!("cat > {BUNDLE_CONTRACT}"), &self.contract),
            heredoc(&format!("cat > {BUNDLE_COMMAND}"), self.command.trim()),
        )
    }
}

/// The Test solution paths of a draft: three correct and three incorrect ones (fewer when the
/// test adds no `assert` line to rewrite or names no file to inspect). Writing the test and
/// writing the bundle are separate calls, so every call stays short.
pub fn test_paths(draft: &TestDraft) -> Vec<SolutionPath> {
    let write = |d: &TestDraft| vec![d.write_test(), d.write_bundle(), SUBMIT_TEST.to_string()];
    let mut paths = vec![SolutionPath::new("write-and-submit", true, write(draft))];
    if let Some(file) = draft.test_file() {
        let mut commands = vec![format!("cd /testbed && cat {file}")];
        commands.extend(write(draft));
        paths.push(SolutionPath::new("inspect-then-write", true, commands));
    }
    let mut commands = write(draft);
    commands.insert(1, format!("cd /testbed && {}", draft.command.trim()));
    paths.push(SolutionPath::new("run-then-submit", true, commands));
    if let Some(d) = draft.with_asserts(|x| format!("({x}) in (True, False)")) {
        paths.push(SolutionPath::new("vacuous-test", false, write(&d)));
    }
    if let Some(d) = draft.with_asserts(|x| format!("({x}) is None")) {
        paths.push(SolutionPath::new("wrong-expectation", false, write(&d)));
    }
    let malformed = TestDraft { contract: r#"{"entrypoint": "the issue"}"#.into(), ..draft.clone() };
    paths.push(SolutionPath::new("malformed-contract", false, write(&malformed)));
    paths
}

/// Run every Test path of `task` as a Test episode with a scripted policy and score it with the
/// offline audit and eq. 5; returns each path's record and trajectory (operational errors come
/// back with `reward: None`). A task without an Oracle bundle has no Test paths (empty result,
/// with a warning).
pub async fn test_teacher_episodes(task: &TaskInstance, sandbox: SandboxKind) -> Vec<(TeacherRecord, Trajectory)> {
    let draft = match TestDraft::official(task) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("no Test teacher paths for {}: {e}", task.instance_id);
            return Vec::new();
        }
    };
    let runs = test_paths(&draft).into_iter().map(|path| async move {
        let Some(policy) = scripted_policy(task, &path) else {
            return (TeacherRecord::new(Role::Test, task, &path, Reward::Masked, 0), Trajectory::default());
        };
        let mut cfg = TestEpisodeConfig { sandbox, ..TestEpisodeConfig::default() };
        cfg.limits.step_limit = path.commands.len();
        cfg.limits.command_timeout = Duration::from_secs(60);
        let r = run_test_episode(task, &policy, &cfg).await;
        let reward = test_reward(&audit_test_rollout(task, &r, sandbox).await);
        (TeacherRecord::new(Role::Test, task, &path, reward, r.record.stats.turns), r.trajectory)
    });
    futures_util::future::join_all(runs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/tests/test_ops.py b/tests/test_ops.py\n--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -3,3 +3,7 @@ from calc import ops\n \n def test_imports():\n     assert callable(ops.add)\n+\n+\n+def test_add():\n+    assert ops.add(2, 5) == 7\n";

    fn draft() -> TestDraft {
        TestDraft {
            patch: PATCH.into(),
            command: "python -m pytest -rA tests/test_ops.py::test_add".into(),
            contract: r#"{"test_nodes": ["tests/test_ops.py::test_add"]}"#.into(),
        }
    }

    #[test]
    fn only_added_asserts_are_rewritten() {
        let d = draft().with_asserts(|x| format!("({x}) is None")).unwrap();
        assert!(d.patch.contains("+    assert (ops.add(2, 5) == 7) is None\n"), "{}", d.patch);
        // The context line's assertion is untouched, and the line count (the hunk) is unchanged.
        assert!(d.patch.contains("\n     assert callable(ops.add)\n"));
        assert_eq!(d.patch.lines().count(), PATCH.lines().count());
        let no_assert = TestDraft { patch: PATCH.replace("+    assert ops.add(2, 5) == 7\n", "+    pass\n"), ..draft() };
        assert_eq!(no_assert.with_asserts(|x| x.to_string()), None);
    }

    #[test]
    fn six_paths_write_the_bundle_and_submit() {
        let paths = test_paths(&draft());
        let names: Vec<&str> = paths.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["write-and-submit", "inspect-then-write", "run-then-submit", "vacuous-test", "wrong-expectation", "malformed-contract"]
        );
        assert_eq!(paths.iter().filter(|p| p.correct).count(), 3);
        for p in &paths {
            assert_eq!(p.commands.last().unwrap(), SUBMIT_TEST);
            let all = p.commands.join("\n");
            for file in [BUNDLE_PATCH, BUNDLE_COMMAND, BUNDLE_CONTRACT] {
                assert!(all.contains(file), "{} does not write {file}", p.name);
            }
            assert_eq!(p.script().lines().count(), p.commands.len());
        }
        assert_eq!(paths[0].commands[0], "cd /testbed && cat >> tests/test_ops.py <<'EXECCRITIC_EOF'\n\n\ndef test_add():\n    assert ops.add(2, 5) == 7\nEXECCRITIC_EOF");
        assert_eq!(paths[1].commands[0], "cd /testbed && cat tests/test_ops.py");
        assert_eq!(paths[2].commands[1], "cd /testbed && python -m pytest -rA tests/test_ops.py::test_add");
        assert!(paths[3].commands[0].contains("\n    assert (ops.add(2, 5) == 7) in (True, False)\n"));
        assert!(!paths[5].commands[1].contains("test_nodes"));
    }

    #[test]
    fn a_patch_that_removes_lines_is_applied() {
        let d = TestDraft { patch: PATCH.replace("     assert callable(ops.add)\n", "-    assert callable(ops.add)\n"), ..draft() };
        assert!(d.write_test().starts_with("cd /testbed && git apply <<'EXECCRITIC_EOF'\ndiff --git"));
    }

    #[test]
    fn heredocs_end_with_their_delimiter_on_its_own_line() {
        assert_eq!(heredoc("cat > f", "x"), "cat > f <<'EXECCRITIC_EOF'\nx\nEXECCRITIC_EOF");
        assert_eq!(heredoc("cat > f", "x\n"), "cat > f <<'EXECCRITIC_EOF'\nx\nEXECCRITIC_EOF");
    }
}
