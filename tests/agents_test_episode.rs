//! Acceptance tests of the Test episode on the bundled task suite with scripted policies and real
//! bubblewrap sandboxes: every outcome branch, the gold-free boundary (the fix commit is
//! unreachable inside the sandbox), and eight concurrent episodes without cross-talk.

#[path = "common/agents.rs"]
mod agents;

use agents::*;
use execcritic::agent::Stop;
use execcritic::episode::test_episode::*;
use execcritic::harness::{self, Purpose, SandboxKind};
use std::time::Duration;

fn config(turns: usize) -> TestEpisodeConfig {
    let mut c = TestEpisodeConfig::default();
    c.limits.step_limit = turns;
    c.limits.command_timeout = Duration::from_secs(60);
    c
}

fn verdicts(r: &TestEpisodeRecord) -> Vec<String> {
    r.submissions
        .iter()
        .map(|s| match &s.verdict {
            SubmissionVerdict::Accepted { .. } => "accepted".to_string(),
            SubmissionVerdict::MissingFile { path } => format!("missing:{path}"),
            SubmissionVerdict::Rejected { kind, .. } => format!("rejected:{kind}"),
            SubmissionVerdict::BaseGateFailed { category, .. } => format!("base:{category}"),
        })
        .collect()
}

#[tokio::test]
async fn bundle_accepted_first_time() {
    let t = task(INSTANCE);
    let p = policy(&good_test_script(""));
    let r = run_test_episode(&t, &p, &config(10)).await;
    assert!(
        matches!(r.record.outcome, TestOutcome::Qualified { .. }),
        "{:?}",
        r.record
    );
    assert_eq!(verdicts(&r.record), ["accepted"]);
    let b = r.bundle.expect("frozen bundle");
    assert_eq!(b.bundle.test_command, good_command(""));
    assert!(b.bundle.test_patch.contains("def test_signed():"));
    assert_eq!(b.bundle.contract.test_nodes, vec![node("")]);
    assert_eq!(r.record.stats.turns, 3);
    assert_eq!(r.trajectory.events("submission").count(), 1);
}

#[tokio::test]
async fn rejected_then_accepted_with_feedback() {
    let t = task(INSTANCE);
    let n = node("");
    let p = policy(&[
        call(&add_test("")),
        call(&prepare("python -m pytest -rA tests/test_cells.py", &[&n])),
        call(SUBMIT_TEST),
        call(&prepare(&good_command(""), &[&n])),
        call(SUBMIT_TEST),
    ]);
    let r = run_test_episode(&t, &p, &config(10)).await;
    let v = verdicts(&r.record);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].starts_with("rejected:"), "{v:?}");
    assert_eq!(v[1], "accepted");
    assert!(matches!(r.record.outcome, TestOutcome::Qualified { .. }));
    // The rejection reached the agent before its second submission.
    let rejected = r
        .messages
        .iter()
        .find(|m| m.content.contains("rejected submission 1 of at most 5"))
        .expect("feedback");
    assert!(rejected.content.contains("<rejection>"));
}

#[tokio::test]
async fn five_rejections_end_in_base_gate_failure() {
    let t = task(INSTANCE);
    let n = node("");
    let mut turns = vec![
        call(&add_test("")),
        call(&prepare("python -m pytest -rA tests/test_cells.py", &[&n])),
    ];
    turns.extend(std::iter::repeat_n(call(SUBMIT_TEST), 6));
    let p = policy(&turns);
    let r = run_test_episode(&t, &p, &config(20)).await;
    assert_eq!(r.record.outcome, TestOutcome::BaseGateFailure);
    assert_eq!(r.record.submissions.len(), 5);
    assert!(verdicts(&r.record)
        .iter()
        .all(|v| v.starts_with("rejected:")));
    assert!(r.bundle.is_none());
    assert_eq!(p.served(), 7, "the sixth submission is never requested");
}

#[tokio::test]
async fn base_passes_is_not_qualified() {
    let t = task(INSTANCE);
    let p = policy(&[
        call(&add_passing_test()),
        call(&prepare(
            "python -m pytest -rA tests/test_cells.py::test_is_number_plain_digits",
            &["tests/test_cells.py::test_is_number_plain_digits"],
        )),
        call(SUBMIT_TEST),
    ]);
    let mut c = config(10);
    c.max_submissions = 1;
    let r = run_test_episode(&t, &p, &c).await;
    assert_eq!(r.record.outcome, TestOutcome::BaseGateFailure);
    assert_eq!(verdicts(&r.record), ["base:passed"]);
}

#[tokio::test]
async fn missing_files_no_submission_and_format_errors() {
    let t = task(INSTANCE);
    // Submitting before writing the bundle: a missing-file rejection, then the turn limit.
    let p = policy(&[call(SUBMIT_TEST), call("ls")]);
    let r = run_test_episode(&t, &p, &config(2)).await;
    assert_eq!(verdicts(&r.record), ["missing:/tmp/test.patch"]);
    assert_eq!(r.record.outcome, TestOutcome::BaseGateFailure);
    assert_eq!(r.record.stop, Some(Stop::StepLimit));

    let p = policy(&[call("ls"), call("cat README.md")]);
    let r = run_test_episode(&t, &p, &config(2)).await;
    assert_eq!(r.record.outcome, TestOutcome::NoSubmission);
    assert_eq!(r.record.stop, Some(Stop::StepLimit));

    let p = policy(&[
        prose("I think the test should go in tests/test_cells.py."),
        prose("Done."),
        prose("Submitted."),
    ]);
    // Format errors do not end the episode: the turn budget does.
    let r = run_test_episode(&t, &p, &config(3)).await;
    assert_eq!(r.record.outcome, TestOutcome::NoSubmission);
    assert_eq!(r.record.stop, Some(Stop::StepLimit));
    assert_eq!(r.record.stats.format_errors, 3);
    assert_eq!(
        r.messages
            .iter()
            .filter(|m| m.content.starts_with("Tool call error:"))
            .count(),
        3
    );
}

#[tokio::test]
async fn fix_commit_unreachable_and_history_commands_refused() {
    let t = task(INSTANCE);
    // The fix commits of this task (and later ones) exist in the source repository...
    let repo = t
        .repo_path
        .clone()
        .expect("bundled tasks carry a repo path");
    let out = std::process::Command::new("git")
        .args(["rev-list", "--all", &format!("^{}", t.base_commit)])
        .current_dir(&repo)
        .output()
        .unwrap();
    let future: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        !future.is_empty(),
        "the suite's repository holds the fix commits"
    );
    // ...but not inside the Test agent's sandbox, even without the guard.
    let sb = harness::open_sandbox(SandboxKind::Local, &t, Purpose::TestAgent)
        .await
        .unwrap();
    for sha in &future {
        let o = sb
            .exec(
                &format!("git cat-file -e {sha}^{{commit}}"),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert_ne!(
            o.exit_code,
            Some(0),
            "fix commit {sha} reachable in the sandbox"
        );
    }
    let all = sb
        .exec(
            "git rev-list --all --reflog | sort",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let base_hist = sb
        .exec("git rev-list HEAD | sort", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        all.output, base_hist.output,
        "only Base's history is in the sandbox"
    );

    // And the agent's history-inspecting commands are refused without running.
    let mut turns = vec![
        call("git log --all --oneline"),
        call(&format!("git show {}", future[0])),
        call("cat .git/packed-refs"),
    ];
    turns.extend(good_test_script(""));
    let p = policy(&turns);
    let r = run_test_episode(&t, &p, &config(10)).await;
    assert_eq!(r.record.refused_commands, 3);
    assert!(matches!(r.record.outcome, TestOutcome::Qualified { .. }));
}

#[tokio::test]
async fn eight_concurrent_episodes_without_cross_talk() {
    let t = task(INSTANCE);
    let policies: Vec<_> = (0..8)
        .map(|k| {
            let suffix = format!("_ep{k}");
            // Each episode leaves a private marker and lists /tmp and the test file's new nodes.
            let mut turns = vec![call(&format!(
                "echo {k} > /tmp/episode_{k} && ls /tmp | grep episode_"
            ))];
            turns.extend(good_test_script(&suffix));
            turns.insert(2, call("grep -c 'def test_signed' tests/test_cells.py"));
            policy(&turns)
        })
        .collect();
    let c = config(10);
    let runs =
        futures_util::future::join_all(policies.iter().map(|p| run_test_episode(&t, p, &c))).await;
    let mut hashes = std::collections::HashSet::new();
    for (k, r) in runs.iter().enumerate() {
        assert!(
            matches!(r.record.outcome, TestOutcome::Qualified { .. }),
            "episode {k}: {:?}",
            r.record
        );
        let b = r.bundle.as_ref().unwrap();
        assert_eq!(b.bundle.contract.test_nodes, vec![node(&format!("_ep{k}"))]);
        assert!(hashes.insert(b.hash.clone()));
        // Its sandbox saw only its own marker and only its own new test.
        let obs: Vec<_> = r
            .messages
            .iter()
            .filter(|m| m.role == execcritic::policy::Role::Tool)
            .collect();
        assert!(
            obs[0].content.contains(&format!("episode_{k}"))
                && obs[0].content.matches("episode_").count() == 1,
            "{}",
            obs[0].content
        );
        assert!(
            obs[2].content.contains("<output>\n1\n"),
            "{}",
            obs[2].content
        );
    }
}
