//! Acceptance tests of the Repair controller on the bundled task suite with scripted policies,
//! real bubblewrap sandboxes and the real gate: one test per controller branch, each asserting
//! the record (rounds, turns, candidates, verdicts, terminal reason).

#[path = "common/agents.rs"]
mod agents;

use agents::*;
use execcritic::episode::repair::*;
use execcritic::policy::{ChatMessage, Role};
use std::time::Duration;

fn config(rounds: usize, turns: usize) -> RepairConfig {
    RepairConfig {
        round0_turns: 10,
        revision_rounds: rounds,
        revision_turns: turns,
        command_timeout: Duration::from_secs(60),
        ..RepairConfig::default()
    }
}

async fn run(turns: &[String], cfg: RepairConfig, inputs: RepairInputs) -> RepairResult {
    let t = task(INSTANCE);
    let b = bundle().await;
    let p = policy(turns);
    let r = run_repair(&t, Some(b), &p, &cfg, inputs).await;
    assert!(
        !matches!(r.record.terminal, TerminalReason::InfraError { .. }),
        "{:?}",
        r.record.terminal
    );
    r
}

fn statuses(r: &RepairRecord) -> Vec<Vec<String>> {
    r.rounds
        .iter()
        .map(|round| {
            round
                .checks
                .iter()
                .map(|c| match (&c.verdict, c.unchanged, c.forced) {
                    (_, true, _) => "unchanged".to_string(),
                    (Some(v), _, true) => format!("forced:{}", v.status),
                    (Some(v), _, false) => v.status.clone(),
                    (None, _, _) => "none".into(),
                })
                .collect()
        })
        .collect()
}

fn has_message(r: &RepairResult, needle: &str) -> bool {
    r.messages.iter().any(|m| m.content.contains(needle))
}

#[tokio::test]
async fn pass_at_round_0() {
    let r = run(
        &[call(FIX_FULL), call(EXPORT), call(SUBMIT_FIX)],
        config(5, 40),
        RepairInputs::default(),
    )
    .await;
    assert_eq!(r.record.terminal, TerminalReason::PassAtRound0);
    assert_eq!(statuses(&r.record), vec![vec!["pass"]]);
    assert_eq!(r.record.rounds[0].turns, 3);
    assert_eq!(r.record.terminal_round, 0);
    assert!(r.record.terminal_patch.contains("float(value)"));
    assert_eq!(r.record.terminal_gate.as_ref().unwrap().status, "pass");
}

#[tokio::test]
async fn pass_after_revision() {
    let mut turns = round0_partial();
    turns.extend([
        call("cd /testbed && git diff"),
        call(FIX_FULL),
        call(EXPORT),
        call(CHECK_FIX),
    ]);
    let r = run(&turns, config(5, 40), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::Pass);
    assert_eq!(statuses(&r.record), vec![vec!["hard_fail"], vec!["pass"]]);
    assert_eq!(r.record.rounds[1].kind, RoundKind::Revision);
    assert_eq!(r.record.rounds[1].turns, 4);
    assert_eq!(r.record.terminal_round, 1);
    // The revision prompt carried the gate's envelope; the pass notice ended the conversation.
    assert!(has_message(
        &r,
        "<failing_test_output>\ntest_execution_contract:"
    ));
    assert!(r
        .messages
        .last()
        .unwrap()
        .content
        .starts_with("The hidden generated-test CHECK passed"));
    // Timings of every gated check are consistent: overhead = export + gate - test command.
    for c in r.record.rounds.iter().flat_map(|r| &r.checks) {
        let v = c.verdict.as_ref().unwrap();
        assert!(v.test_ms > 0 && v.test_ms <= c.gate_ms, "{c:?}");
        assert_eq!(c.overhead_ms, c.export_ms + c.gate_ms - v.test_ms);
    }
    assert!(r.record.rounds.iter().all(|r| r.wall_ms >= r.tool_ms));
    // The retained conversation: Round 0's system message is still the first message.
    assert_eq!(r.messages[0].role, Role::System);
    assert_eq!(
        r.messages.iter().filter(|m| m.role == Role::System).count(),
        1
    );
}

#[tokio::test]
async fn unchanged_check_does_not_rerun_the_gate() {
    let mut turns = round0_partial();
    turns.extend([
        call(EXPORT),
        call(CHECK_FIX),
        call(FIX_FULL),
        call(EXPORT),
        call(CHECK_FIX),
    ]);
    let r = run(&turns, config(5, 40), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::Pass);
    assert_eq!(
        statuses(&r.record),
        vec![vec!["hard_fail"], vec!["unchanged", "pass"]]
    );
    assert_eq!(r.record.gate_runs(), 2);
    assert_eq!(
        r.record.rounds.len(),
        2,
        "the unchanged CHECK consumed no round"
    );
    assert!(has_message(&r, "did not make a new source-code change"));
}

#[tokio::test]
async fn final_submit_with_failing_gate() {
    let mut turns = round0_partial();
    turns.extend([call(&touch_source(1)), call(EXPORT), call(SUBMIT_FIX)]);
    let r = run(&turns, config(5, 40), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::FinalSubmit);
    assert_eq!(r.record.rounds[1].end, RoundEnd::FinalSubmit);
    assert!(r.record.terminal_patch.contains("# attempt 1"));
    let g = r
        .record
        .terminal_gate
        .as_ref()
        .expect("the submitted patch's gate result is recorded");
    assert_eq!(g.status, "hard_fail");
}

#[tokio::test]
async fn exhaustion_force_submits_the_latest_candidate() {
    let mut turns = round0_partial();
    for k in 1..=5 {
        turns.extend([call(&touch_source(k)), call(EXPORT), call(CHECK_FIX)]);
    }
    let r = run(&turns, config(5, 40), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::Exhausted);
    assert_eq!(r.record.rounds.len(), 6);
    assert!(statuses(&r.record).iter().all(|s| s == &vec!["hard_fail"]));
    assert_eq!(r.record.terminal_round, 5);
    assert!(
        r.record.terminal_patch.contains("# attempt 5"),
        "the latest, not an earlier candidate"
    );
    assert!(r
        .messages
        .last()
        .unwrap()
        .content
        .contains("after the fifth feedback-guided revision"));
    // Follow-ups after rounds 1-4 use the paper's follow-up message.
    assert_eq!(
        r.messages
            .iter()
            .filter(|m| m.content.contains("<updated_failing_test_output>"))
            .count(),
        4
    );
}

#[tokio::test]
async fn forced_check_at_the_turn_limit() {
    let mut turns = round0_partial();
    // Round 1: two turns, no CHECK, candidate unchanged -> forced check, gate not rerun.
    turns.extend([call("ls"), call("cd /testbed && git diff --stat")]);
    // Round 2: new candidate, no CHECK -> forced check of it.
    turns.extend([call(&touch_source(1)), call("ls")]);
    // Round 3: the fix, no CHECK -> forced check passes.
    turns.extend([call(FIX_FULL), call("ls")]);
    let r = run(&turns, config(5, 2), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::Pass);
    let ends: Vec<_> = r.record.rounds.iter().map(|r| r.end).collect();
    assert_eq!(
        ends,
        vec![
            RoundEnd::Submitted,
            RoundEnd::ForcedCheckUnchanged,
            RoundEnd::ForcedCheck,
            RoundEnd::ForcedCheck
        ]
    );
    assert_eq!(
        statuses(&r.record),
        vec![
            vec!["hard_fail"],
            vec!["unchanged"],
            vec!["forced:hard_fail"],
            vec!["forced:pass"]
        ]
    );
    assert!(r.record.rounds[1..].iter().all(|r| r.turns == 2));
}

#[tokio::test]
async fn unappliable_patch_gets_the_recovery_prompt() {
    let bad = "diff --git a/tablefmt/cells.py b/tablefmt/cells.py\n--- a/tablefmt/cells.py\n+++ b/tablefmt/cells.py\n@@ -8,3 +8,3 @@\n-    this line is not in the file\n+    neither is this\n     return False\n";
    let turns = [
        call("cd /testbed && git status --short && git diff"),
        call(FIX_FULL),
        call(EXPORT),
        call(SUBMIT_FIX),
    ];
    let inputs = RepairInputs {
        provided_patch: Some(bad.to_string()),
        seed_messages: None,
    };
    let r = run(&turns, config(5, 40), inputs).await;
    assert_eq!(r.record.terminal, TerminalReason::Pass);
    let kinds: Vec<_> = r.record.rounds.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, vec![RoundKind::Provided, RoundKind::Recovery]);
    // Fallback path: the careful-engineer system message, then the recovery prompt.
    assert!(r.messages[0]
        .content
        .starts_with("You are a careful software engineer"));
    assert!(r.messages[1]
        .content
        .contains("could NOT be applied by the harness"));
    assert!(r.messages[1]
        .content
        .contains("<failed_patch_apply_diagnostics>"));
    // The workspace was at clean Base: the first observation shows an empty status and diff.
    assert!(
        r.messages[3]
            .content
            .contains("<returncode>0</returncode>\n<output>\n</output>"),
        "{}",
        r.messages[3].content
    );
}

/// A candidate that breaks the module's syntax makes the frozen test uncollectable. The bundle
/// collected on Base, so this is the candidate's behaviour: a `hard_fail` (never `inconclusive`,
/// which training masks — a way to hide a failure).
#[tokio::test]
async fn broken_collection_is_a_hard_fail_not_masked() {
    let mut turns = round0_partial();
    // Round 1: the candidate breaks the module's syntax: the test cannot be collected.
    turns.extend([
        call("cd /testbed && echo 'def broken(:' >> tablefmt/cells.py"),
        call(EXPORT),
        call(CHECK_FIX),
    ]);
    let r = run(&turns, config(1, 40), RepairInputs::default()).await;
    assert_eq!(
        statuses(&r.record),
        vec![vec!["hard_fail"], vec!["hard_fail"]]
    );
    // One revision round was allowed.
    assert_eq!(r.record.terminal, TerminalReason::Exhausted);
    assert_eq!(r.record.rounds.len(), 2);
    assert!(r.record.terminal_patch.contains("def broken(:"));
}

#[tokio::test]
async fn test_file_edits_are_refused_not_stripped() {
    // Round 0 edits tests next to the fix: the exported candidate keeps them and the gate refuses
    // it (a forbidden test modification), instead of silently dropping them. The revision that
    // reverts the test edits passes.
    let turns = [
        call(FIX_FULL),
        call("cd /testbed && echo 'def test_mine(): pass' >> tests/test_cells.py && printf 'X = 1\\n' > tests/test_extra.py && printf 'def helper():\\n    return 1\\n' > tablefmt/extra.py && git add tablefmt/extra.py tests/test_extra.py"),
        call("cd /testbed && echo '# staged edit' >> tablefmt/align.py && git add tablefmt/align.py"),
        call(EXPORT),
        call(SUBMIT_FIX),
        call("cd /testbed && git checkout -q tests/test_cells.py && git rm -q -f tests/test_extra.py"),
        call(EXPORT),
        call(CHECK_FIX),
    ];
    let r = run(&turns, config(5, 40), RepairInputs::default()).await;
    let round0 = r.record.rounds[0].checks[0].verdict.as_ref().unwrap();
    assert_eq!(round0.failure_kind, "hidden_test_paths_dirtied", "{round0:?}");
    let p = &r.record.terminal_patch;
    assert!(
        p.contains("tablefmt/cells.py")
            && p.contains("tablefmt/extra.py")
            && p.contains("# staged edit"),
        "{p}"
    );
    assert!(!p.contains("tests/"), "the test edits were reverted: {p}");
    assert_eq!(r.record.terminal, TerminalReason::Pass, "{:?}", statuses(&r.record));
}

#[tokio::test]
async fn format_errors_do_not_end_repair() {
    // Three format errors in a row use the round's three turns; the turn limit then forces the
    // CHECK (of the unchanged candidate), and the last round ends with the latest candidate
    // force-submitted.
    let mut turns = round0_partial();
    turns.extend([prose("Thinking."), prose("Still thinking."), prose("Done.")]);
    let r = run(&turns, config(1, 3), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::Exhausted);
    assert_eq!(r.record.rounds[1].end, RoundEnd::ForcedCheckUnchanged, "nothing new to gate");
    assert_eq!(r.record.rounds[1].turns, 3);
    assert!(r.record.terminal_patch.contains("lstrip"));
    assert_eq!(r.record.stats.format_errors, 3);
}

#[tokio::test]
async fn no_qualified_bundle_forwards_p0() {
    let t = task(INSTANCE);
    let p = policy(&round0_partial());
    let r = run_repair(&t, None, &p, &config(5, 40), RepairInputs::default()).await;
    assert_eq!(r.record.terminal, TerminalReason::NoQualifiedBundle);
    assert_eq!(r.record.rounds.len(), 1);
    assert!(r.record.rounds[0].checks.is_empty());
    assert!(r.record.terminal_patch.contains("lstrip"));
}

#[tokio::test]
async fn seeded_conversation_is_retained() {
    let partial = "diff --git a/tablefmt/cells.py b/tablefmt/cells.py\n--- a/tablefmt/cells.py\n+++ b/tablefmt/cells.py\n@@ -8,7 +8,7 @@ def is_number(value):\n     if isinstance(value, (int, float)):\n         return True\n     if isinstance(value, str):\n-        return value.strip().isdigit()\n+        return value.strip().lstrip(\"-\").isdigit()\n     return False\n \n \n";
    let seed = vec![
        ChatMessage::system("You are a helpful assistant that can interact with a computer shell to solve programming tasks."),
        ChatMessage::user("Round-0 issue message"),
        ChatMessage::assistant("I fixed negative numbers."),
    ];
    let turns = [
        call("cd /testbed && git diff --stat"),
        call(FIX_FULL),
        call(EXPORT),
        call(CHECK_FIX),
    ];
    let inputs = RepairInputs {
        provided_patch: Some(partial.to_string()),
        seed_messages: Some(seed.clone()),
    };
    let r = run(&turns, config(5, 40), inputs).await;
    assert_eq!(r.record.terminal, TerminalReason::Pass);
    assert_eq!(&r.messages[..3], &seed[..]);
    assert!(r.messages[3]
        .content
        .starts_with("You are fixing a bug. A previous patch attempt is ALREADY APPLIED"));
    // p0 really was applied in the workspace.
    assert!(
        r.messages[5].content.contains("tablefmt/cells.py | 2 +-"),
        "{}",
        r.messages[5].content
    );
}
