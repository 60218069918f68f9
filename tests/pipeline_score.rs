//! Scoring finished rollouts with the real harness on the bundled suite: a Test rollout's bundle
//! is audited (Base, Gold, labelled candidates) and every outcome maps to the paper's Test reward
//! tier; a Repair rollout's terminal patch gets its selected-test and official outcomes and the
//! Repair reward tier (1.5 at Round 0, 1.0 after revision, 0.1/0.2 for wrong patches, 0 for
//! empty or test-touching patches, masked on infrastructure errors).

use execcritic::agent::run::AgentStats;
use execcritic::agent::trajectory::Trajectory;
use execcritic::episode::oracle::{oracle_bundle, selected_oracle_bundle};
use execcritic::episode::rewards::{repair_reward, test_reward, CandidateResult, RepairTerminal, Reward, TestAudit};
use execcritic::episode::test_episode::{SubmissionRecord, SubmissionVerdict};
use execcritic::episode::{RepairRecord, RepairResult, TerminalReason, TestEpisodeRecord, TestEpisodeResult, TestOutcome};
use execcritic::harness::{FrozenBundle, SandboxKind};
use execcritic::pipeline::score::{audit_test_rollout, score_repair_rollout};
use execcritic::task::{bundled_suite, load_tasks, TaskInstance};

fn task(id: &str) -> TaskInstance {
    let tasks = load_tasks(&bundled_suite().expect("bundled suite builds")).unwrap();
    tasks.into_iter().find(|t| t.instance_id == id).expect("task in the bundled suite")
}

fn test_result(t: &TaskInstance, outcome: TestOutcome, bundle: Option<FrozenBundle>, verdicts: Vec<SubmissionVerdict>) -> TestEpisodeResult {
    TestEpisodeResult {
        record: TestEpisodeRecord {
            instance_id: t.instance_id.clone(),
            outcome,
            submissions: verdicts
                .into_iter()
                .enumerate()
                .map(|(i, verdict)| SubmissionRecord { attempt: i + 1, turn: i + 1, leading_noise: false, verdict, qualify_ms: 0 })
                .collect(),
            stop: None,
            refused_commands: 0,
            stats: AgentStats::default(),
            wall_ms: 0,
        },
        bundle,
        trajectory: Trajectory::default(),
        messages: Vec::new(),
    }
}

fn repair_result(t: &TaskInstance, patch: &str, round: usize, terminal: TerminalReason) -> RepairResult {
    RepairResult {
        record: RepairRecord {
            instance_id: t.instance_id.clone(),
            bundle_hash: None,
            rounds: Vec::new(),
            terminal,
            terminal_round: round,
            terminal_patch: patch.to_string(),
            terminal_gate: None,
            stats: AgentStats::default(),
            wall_ms: 0,
        },
        trajectory: Trajectory::default(),
        messages: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_rollouts_map_to_every_reward_tier() {
    let t = task("inikit__inikit-1");
    let frozen = FrozenBundle::freeze(oracle_bundle(&t).unwrap()).unwrap();
    let qualified = test_result(&t, TestOutcome::Qualified { hash: frozen.hash.clone() }, Some(frozen), vec![]);
    let audit = audit_test_rollout(&t, &qualified, SandboxKind::Local).await;
    let TestAudit::Audited { base_clean_fail, gold_pass, candidates } = &audit else {
        panic!("the official tests must be audited, got {audit:?}")
    };
    assert!(*base_clean_fail && *gold_pass, "{audit:?}");
    // The task's candidates and the harness's look-alike non-fixes (`harness::nonfix`).
    let look_alikes = execcritic::harness::nonfix::non_fixes(&t).len();
    assert_eq!(look_alikes, 2);
    assert_eq!(candidates.len(), t.candidates.len() + look_alikes);
    // The official tests label every candidate as recorded: BA = 1 → reward 1.0.
    assert!(candidates.iter().all(|c| c.passed == c.correct), "{candidates:?}");
    assert_eq!(test_reward(&audit), Reward::Value(1.0));

    let base_failed = SubmissionVerdict::BaseGateFailed { category: "passed".into(), tail: String::new() };
    let rejected = SubmissionVerdict::Rejected { kind: "malformed_json".into(), message: "x".into() };
    let r = test_result(&t, TestOutcome::BaseGateFailure, None, vec![rejected.clone(), base_failed]);
    assert_eq!(test_reward(&audit_test_rollout(&t, &r, SandboxKind::Local).await), Reward::Value(0.0));
    let r = test_result(&t, TestOutcome::NoSubmission, None, vec![rejected]);
    assert_eq!(test_reward(&audit_test_rollout(&t, &r, SandboxKind::Local).await), Reward::Value(-0.2));
    let r = test_result(&t, TestOutcome::InfraError { message: "sandbox".into() }, None, vec![]);
    assert_eq!(test_reward(&audit_test_rollout(&t, &r, SandboxKind::Local).await), Reward::Masked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_rollouts_map_to_every_reward_tier() {
    let t = task("inikit__inikit-1");
    let bundle = selected_oracle_bundle(&t).unwrap();
    assert_eq!(bundle.plan.nodes.len(), 1, "the training test is one F2P test: {}", bundle.bundle.test_command);
    let score = |patch: &str, round: usize, terminal: TerminalReason| {
        let (t, bundle) = (&t, &bundle);
        let r = repair_result(t, patch, round, terminal);
        async move { score_repair_rollout(t, &r, bundle, SandboxKind::Local).await }
    };
    let gold = score(&t.patch, 0, TerminalReason::PassAtRound0).await;
    assert_eq!(gold, RepairTerminal::Valid { selected_test_pass: true, official_pass: true, round: 0 });
    assert_eq!(repair_reward(&gold), Reward::Value(1.5));
    let revised = score(&t.patch, 2, TerminalReason::Pass).await;
    assert_eq!(repair_reward(&revised), Reward::Value(1.0));

    for c in t.candidates.iter().filter(|c| !c.resolved) {
        let s = score(&c.patch, 1, TerminalReason::Exhausted).await;
        let RepairTerminal::Valid { official_pass, .. } = s else { panic!("wrong candidate: {s:?}") };
        assert!(!official_pass);
        let r = repair_reward(&s);
        assert!(r == Reward::Value(0.1) || r == Reward::Value(0.2), "{r:?}");
    }
    assert_eq!(score("", 0, TerminalReason::Exhausted).await, RepairTerminal::InvalidPatch);
    // A "source" patch that edits the test's own files is a forbidden test modification.
    assert_eq!(score(&t.test_patch, 1, TerminalReason::FinalSubmit).await, RepairTerminal::InvalidPatch);
    let infra = score(&t.patch, 0, TerminalReason::InfraError { message: "engine died".into() }).await;
    assert_eq!(repair_reward(&infra), Reward::Masked);
}

/// Eq. 12: an operationally invalid Gold run counts as G = 0 — the Test rollout scores 0, it is
/// not masked (which would hide the failure from training).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconclusive_gold_run_scores_zero_not_masked() {
    let mut t = task("inikit__inikit-1");
    let frozen = FrozenBundle::freeze(oracle_bundle(&t).unwrap()).unwrap();
    // A Gold patch that also edits the bundle's own test files: the Gold check is blocked by the
    // harness (never a pass). (An unappliable Gold no longer gets this far: a workspace whose
    // Gold patch does not apply to Base fails to provision, an operational error of the task.)
    t.patch = format!("{}\n{}", t.patch.trim_end(), t.test_patch);
    t.candidates.clear();
    let qualified = test_result(&t, TestOutcome::Qualified { hash: frozen.hash.clone() }, Some(frozen), vec![]);
    let audit = audit_test_rollout(&t, &qualified, SandboxKind::Local).await;
    // Only the harness's look-alike non-fixes are left to label, and the bundle fails them.
    let look_alikes = (0..execcritic::harness::nonfix::non_fixes(&t).len())
        .map(|_| CandidateResult { correct: false, passed: false })
        .collect();
    assert_eq!(audit, TestAudit::Audited { base_clean_fail: true, gold_pass: false, candidates: look_alikes });
    assert_eq!(test_reward(&audit), Reward::Value(0.0));
}
