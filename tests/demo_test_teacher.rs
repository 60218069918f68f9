//! The Test teacher of `demo train` on one task of the easy suite: every scripted Test path runs
//! as a real Test episode (history guard, harness qualification, bubblewrap sandbox), is audited
//! and scored with eq. 5, and is what it claims — the correct paths' bundles qualify on Base and
//! pass with the gold fix (the highest reward), the incorrect ones are rejected by the Base gate,
//! fail with the gold fix, or are malformed, each scoring by its own eq. 5 branch.

use execcritic::agent::prompts::TEST_SYSTEM;
use execcritic::agent::trajectory::Entry;
use execcritic::episode::rewards::{test_reward, TestAudit};
use execcritic::harness::SandboxKind;
use execcritic::pipeline::grpo::Role;
use execcritic::pipeline::test_teacher::{test_paths, test_teacher_episodes, TestDraft};
use execcritic::task::{easy_suite, load_tasks};

#[tokio::test]
async fn every_test_path_scores_by_its_eq5_branch() {
    let tasks = load_tasks(&easy_suite().unwrap()).unwrap();
    let task = tasks.iter().find(|t| t.instance_id == "calc__calc-1").expect("calc__calc-1 in the easy suite");
    let paths = test_paths(&TestDraft::official(task).unwrap());
    let episodes = test_teacher_episodes(task, SandboxKind::Local).await;
    assert_eq!(episodes.len(), 6);

    // Eq. 5 with the suite's (empty) candidate pool: a valid test (Q = 1) earns the BA < 0.8 tier.
    let valid = test_reward(&TestAudit::Audited { base_clean_fail: true, gold_pass: true, candidates: Vec::new() }).value().unwrap();
    assert!(valid > 0.0);
    for ((record, trajectory), path) in episodes.iter().zip(&paths) {
        assert_eq!((record.role, record.path.as_str()), (Role::Test, path.name.as_str()));
        let reward = record.reward.unwrap_or_else(|| panic!("operational error: {record:?}"));
        let verdicts: Vec<String> = trajectory.events("submission").map(|e| e["verdict"]["verdict"].as_str().unwrap_or("?").to_string()).collect();
        let (want_reward, want_verdict) = match record.path.as_str() {
            "write-and-submit" | "inspect-then-write" | "run-then-submit" => (valid, "accepted"),
            // Passes on Base: the Base gate rejects it (a validated submission, Q = 0).
            "vacuous-test" => (0.0, "base_gate_failed"),
            // Fails cleanly on Base, so it qualifies, but fails with the gold fix too (Q = 0).
            "wrong-expectation" => (0.0, "accepted"),
            // The harness rejects the contract: no valid submission.
            "malformed-contract" => (-0.2, "rejected"),
            other => panic!("unexpected path {other}"),
        };
        assert_eq!(reward, want_reward, "{record:?}");
        assert_eq!(verdicts, [want_verdict], "{record:?}");
        assert_eq!(record.correct, reward > 0.0, "{record:?}");
        assert_eq!(record.turns, path.commands.len(), "{record:?}");
        // The Test agent's own prompts and the role in the trajectory's header.
        let header_role = trajectory.entries.iter().find_map(|e| match e {
            Entry::Header { role, .. } => Some(role.as_str()),
            _ => None,
        });
        assert_eq!(header_role, Some("test"));
        let system = trajectory.entries.iter().find_map(|e| match e {
            Entry::Message { message, .. } => Some(message.content.clone()),
            _ => None,
        });
        assert_eq!(system.as_deref(), Some(TEST_SYSTEM));
    }
    // Every correct path earns more than every incorrect one.
    let best_incorrect = episodes.iter().filter(|(r, _)| !r.correct).filter_map(|(r, _)| r.reward).fold(f64::MIN, f64::max);
    assert!(episodes.iter().filter(|(r, _)| r.correct).all(|(r, _)| r.reward.unwrap() > best_incorrect));
    assert_eq!(episodes.iter().filter(|(r, _)| r.correct).count(), 3);
}
