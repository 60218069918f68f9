//! Gates on a real sandbox over a real pytest repository: qualification, adversarial test
//! bundles (each classified as rejected/inconclusive/fail, never pass), the candidate gate and
//! its feedback envelope, the Gold audit and official grading.

mod harness_support;

use execcritic::harness::gate::{base_gate, check_candidate_in, qualify_in};
use execcritic::harness::{
    audit, grade, open_sandbox, BaseCategory, Bundle, FailureKind, FrozenBundle, GateStatus,
    Purpose, Qualification, SandboxKind,
};
use harness_support::*;
use std::time::Duration;

const NODE: &str = "tests/test_calc.py::test_add";

fn frozen_with(files: &[(&str, &str)], nodes: &[&str]) -> FrozenBundle {
    let patch = diff_against_base(files);
    let cmd = format!("python3 -m pytest {}", nodes.join(" "));
    FrozenBundle::freeze(Bundle::from_parts(&patch, &cmd, &contract_with_nodes(nodes)).unwrap())
        .unwrap()
}

fn official() -> FrozenBundle {
    frozen_with(&[("tests/test_calc.py", &official_test_file())], &[NODE])
}

fn host_snapshot() -> String {
    let f = fixture();
    git(&f.dir, &["status", "--porcelain", "--ignored"]) + &git(&f.dir, &["rev-parse", "HEAD"])
}

#[tokio::test]
async fn base_gate_accepts_clean_failure_and_classifies_adversarial_tests() {
    let before = host_snapshot();
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Local, &task, Purpose::Gate)
        .await
        .unwrap();
    let sb = sb.as_ref();
    match qualify_in(sb, official()).await.unwrap() {
        Qualification::Accepted(f) => assert_eq!(f.plan.nodes, vec![NODE]),
        other => panic!("official tests not accepted: {other:?}"),
    }
    let t = Duration::from_secs(8);
    let cases: Vec<(&str, String, Option<BaseCategory>)> = vec![
        ("passes on base", test_file_with("    assert sub(2, 2) == 0"), Some(BaseCategory::Passed)),
        ("import error", test_file_with("    from calc import not_there\n    assert not_there()"), Some(BaseCategory::ImportNameMissing)),
        ("module missing", format!("import nonexistent_mod\n{}", test_file_with("    assert True")), Some(BaseCategory::ModuleNotFound)),
        ("infinite loop", test_file_with("    while True:\n        pass"), Some(BaseCategory::Timeout)),
        ("fork bomb", test_file_with("    import os\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass"), None),
        ("100 MB output", test_file_with("    import sys\n    for _ in range(100):\n        sys.stdout.write('y' * 1_000_000)\n    assert add(2, 3) == 5"), Some(BaseCategory::AssertionFailureClean)),
        // An exception raised in the test's call is a behavioural failure whatever its type
        // (classification reads the runner's per-node report, not words): these qualify on
        // Base, and the Gold check below shows they can never pass (Q = 0).
        ("network", test_file_with("    import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    assert True"), Some(BaseCategory::AssertionFailureClean)),
        ("write outside", test_file_with("    open('/usr/execcritic-escape', 'w').write('x')\n    assert True"), Some(BaseCategory::AssertionFailureClean)),
    ];
    for (name, file, expect) in cases {
        let f = frozen_with(&[("tests/test_calc.py", &file)], &[NODE]);
        let (cat, tail) = base_gate(sb, &f, t).await.unwrap();
        assert!(tail.chars().count() <= 1500, "{name}");
        match expect {
            Some(c) => assert_eq!(cat, c, "{name}: {tail}"),
            None => assert!(!cat.accepted() || name == "fork bomb", "{name}: {cat:?}"),
        }
        if matches!(name, "network" | "write outside") {
            let gold = check_candidate_in(sb, &f, &fixture().gold_patch, t)
                .await
                .unwrap();
            assert_eq!(gold.status, GateStatus::HardFail, "{name}: {}", gold.feedback);
        } else if name != "100 MB output" {
            assert!(!cat.accepted(), "{name} accepted");
        }
    }
    // A conftest that prints a fake PASSED line and exits non-zero never passes.
    let conftest = "import os, atexit\nprint('PASSED tests/test_calc.py::test_add')\natexit.register(lambda: os._exit(3))\n";
    let f = frozen_with(
        &[
            ("tests/test_calc.py", &official_test_file()),
            ("tests/conftest.py", conftest),
        ],
        &[NODE],
    );
    let v = check_candidate_in(sb, &f, &fixture().gold_patch, t)
        .await
        .unwrap();
    assert_ne!(v.status, GateStatus::Pass, "{}", v.feedback);
    assert!(!std::path::Path::new("/usr/execcritic-escape").exists());
    assert_eq!(host_snapshot(), before, "host repository changed");
}

#[tokio::test]
async fn candidate_gate_and_feedback() {
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Local, &task, Purpose::Gate)
        .await
        .unwrap();
    let sb = sb.as_ref();
    let f = official();
    let t = Duration::from_secs(60);
    let gold = check_candidate_in(sb, &f, &fixture().gold_patch, t)
        .await
        .unwrap();
    assert_eq!(gold.status, GateStatus::Pass, "{}", gold.feedback);
    let wrong = check_candidate_in(sb, &f, WRONG_PATCH, t).await.unwrap();
    assert_eq!(wrong.status, GateStatus::HardFail);
    assert_eq!(wrong.failure_kind, FailureKind::AssertionFailure);
    assert_eq!(wrong.failed_test_names, vec![NODE]);
    assert!(wrong.feedback.chars().count() <= 6000);
    assert!(
        wrong.feedback.contains("gate_status: hard_fail")
            && wrong.feedback.contains("<raw_test_output_tail>")
    );
    // the traceback's assertion line is shown (paper App. B.3.2: tracebacks may reveal it)
    assert!(
        wrong.feedback.contains("assert add(2, 3) == 5"),
        "{}",
        wrong.feedback
    );
    let empty = check_candidate_in(sb, &f, "", t).await.unwrap();
    assert_eq!(empty.status, GateStatus::HardFail);
    // a candidate touching the bundle's files is inconclusive (structural)
    let touch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let v = check_candidate_in(sb, &f, &touch, t).await.unwrap();
    assert_eq!(
        (v.status, v.failure_kind),
        (
            GateStatus::Inconclusive,
            FailureKind::HiddenTestPathsDirtied
        )
    );
    // an unappliable candidate
    let v = check_candidate_in(
        sb,
        &f,
        &WRONG_PATCH.replace("return a - b\n+", "return zzz\n+"),
        t,
    )
    .await
    .unwrap();
    assert_eq!(v.failure_kind, FailureKind::PatchApplyFailure);
    // an infinite loop in the source is a timeout (inconclusive), detected from the sandbox flag
    let hang = WRONG_PATCH.replace("+    return a * b", "+    while True:\n+        pass");
    let hang = hang.replace("@@ -1,5 +1,5 @@", "@@ -1,5 +1,6 @@");
    let v = check_candidate_in(sb, &f, &hang, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        (v.status, v.failure_kind, v.timeout_detected),
        (GateStatus::Inconclusive, FailureKind::Timeout, true)
    );
}

#[tokio::test]
async fn audit_and_official_grading() {
    let task = fixture_task();
    let rec = audit(&task, &official(), SandboxKind::Local).await.unwrap();
    assert!(rec.q, "{rec:?}");
    assert_eq!(rec.balanced_accuracy, Some(1.0));
    let g = grade(&task, &task.patch, SandboxKind::Local).await.unwrap();
    assert!(g.resolved && g.error_kind.is_none(), "{g:?}");
    assert_eq!(g.tests[NODE], "PASSED");
    let g = grade(&task, "", SandboxKind::Local).await.unwrap();
    assert!(!g.resolved);
    assert_eq!(g.tests[NODE], "FAILED");
    for c in &task.candidates {
        let g = grade(&task, &c.patch, SandboxKind::Local).await.unwrap();
        assert_eq!(g.resolved, c.resolved, "{g:?}");
    }
}

#[test]
fn balanced_accuracy_absent_class_is_zero_recall() {
    use execcritic::harness::balanced_accuracy;
    assert_eq!(balanced_accuracy(&[(true, true), (false, false)]), 1.0);
    assert_eq!(balanced_accuracy(&[(true, true), (true, true)]), 0.5);
    assert_eq!(balanced_accuracy(&[(true, false), (false, false)]), 0.5);
}

/// The same gates on the docker sandbox (skipped with a message when docker is unavailable).
#[tokio::test]
async fn docker_candidate_gate_audit_and_grading() {
    if !docker_available().await {
        return;
    }
    std::env::set_var("EXECCRITIC_DOCKER_IMAGE", docker_image());
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Docker, &task, Purpose::Gate)
        .await
        .unwrap();
    let f = official();
    match qualify_in(sb.as_ref(), f.clone()).await.unwrap() {
        Qualification::Accepted(_) => {}
        other => panic!("docker: official tests not accepted: {other:?}"),
    }
    let t = Duration::from_secs(60);
    let wrong = check_candidate_in(sb.as_ref(), &f, WRONG_PATCH, t)
        .await
        .unwrap();
    assert_eq!(
        (wrong.status, wrong.failure_kind),
        (GateStatus::HardFail, FailureKind::AssertionFailure)
    );
    let hang = WRONG_PATCH
        .replace("+    return a * b", "+    while True:\n+        pass")
        .replace("@@ -1,5 +1,5 @@", "@@ -1,5 +1,6 @@");
    let v = check_candidate_in(sb.as_ref(), &f, &hang, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        (v.status, v.failure_kind),
        (GateStatus::Inconclusive, FailureKind::Timeout)
    );
    let rec = audit(&task, &f, SandboxKind::Docker).await.unwrap();
    assert!(rec.q && rec.balanced_accuracy == Some(1.0), "{rec:?}");
    let g = grade(&task, &task.patch, SandboxKind::Docker)
        .await
        .unwrap();
    assert!(g.resolved, "{g:?}");
    let g = grade(&task, "", SandboxKind::Docker).await.unwrap();
    assert!(!g.resolved && g.error_kind.is_none(), "{g:?}");
}

/// The exported candidate is the complete Base-relative source diff: new files and staged edits
/// included, test paths excluded, and it reproduces the candidate on a fresh Base.
#[tokio::test]
async fn export_source_diff_is_complete_and_source_only() {
    use execcritic::harness::export_source_diff;
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Local, &task, Purpose::RepairAgent)
        .await
        .unwrap();
    let sb = sb.as_ref();
    let t = Duration::from_secs(30);
    let edit =
        "sed -i 's/return a - b/return a + b/' calc/__init__.py && git add calc/__init__.py \
                && sed -i '1i # staged then edited' calc/__init__.py \
                && printf 'X = 1\\n' > calc/extra.py \
                && printf 'def test_mine():\\n    pass\\n' > tests/test_mine.py";
    let out = sb.exec(edit, t).await.unwrap();
    assert!(out.success(), "{}", out.output);
    let diff = export_source_diff(sb, sb.base_commit(), &[]).await.unwrap();
    assert!(
        diff.contains("calc/__init__.py") && diff.contains("calc/extra.py"),
        "{diff}"
    );
    assert!(
        diff.contains("+# staged then edited") && diff.contains("+    return a + b"),
        "{diff}"
    );
    // A test edit is not stripped: the gate refuses it (forbidden test modification, reward 0).
    assert!(diff.contains("tests/test_mine.py"), "{diff}");
    let v = check_candidate_in(sb, &official(), &diff, t).await.unwrap();
    assert_eq!(v.failure_kind, FailureKind::HiddenTestPathsDirtied, "{}", v.feedback);
    // Without it (the bundle's own paths are what callers exclude) the candidate passes.
    let diff = export_source_diff(sb, sb.base_commit(), &["tests/test_mine.py".to_string()])
        .await
        .unwrap();
    assert!(!diff.contains("tests/test_mine.py"), "{diff}");
    let v = check_candidate_in(sb, &official(), &diff, t).await.unwrap();
    assert_eq!(v.status, GateStatus::Pass, "{}", v.feedback);
}

#[tokio::test]
async fn export_source_diff_streams_diffs_over_the_output_cap() {
    use execcritic::harness::export_source_diff;
    use execcritic::harness::gate::MAX_SOURCE_DIFF;
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Local, &task, Purpose::RepairAgent)
        .await
        .unwrap();
    let sb = sb.as_ref();
    let t = Duration::from_secs(60);
    // ~600 KiB of new source (ten times the 64 KiB output cap) plus the fix.
    let edit = "sed -i 's/return a - b/return a + b/' calc/__init__.py \
                && python3 -c \"open('calc/table.py','w').write(''.join(f'V{i} = {i!r}  # padding padding padding\\n' for i in range(20000)))\"";
    let out = sb.exec(edit, t).await.unwrap();
    assert!(out.success(), "{}", out.output);
    let diff = export_source_diff(sb, sb.base_commit(), &[]).await.unwrap();
    assert!(diff.len() > 10 * 64 * 1024, "{}", diff.len());
    assert!(diff.contains("+V19999 = 19999  # padding"), "the tail is exported");
    let v = check_candidate_in(sb, &official(), &diff, t).await.unwrap();
    assert_eq!(v.status, GateStatus::Pass, "{}", v.feedback);
    // Over the documented limit: its own error, not a truncated diff.
    let big = format!("head -c {} /dev/zero | tr '\\0' 'x' | fold -w 100 > calc/huge.py", MAX_SOURCE_DIFF + 1024);
    let out = sb.exec(&big, t).await.unwrap();
    assert!(out.success(), "{}", out.output);
    match export_source_diff(sb, sb.base_commit(), &[]).await {
        Err(execcritic::harness::HarnessError::DiffTooLarge { bytes, limit }) => {
            assert!(bytes > limit && limit == MAX_SOURCE_DIFF)
        }
        other => panic!("expected DiffTooLarge, got {:?}", other.map(|d| d.len())),
    }
}
