//! Acceptance on the bundled task suite: for every task, the official tests as a bundle are
//! accepted by `qualify`, the Gold audit gives Q = 1 (and BA over the labelled candidates), and
//! official grading resolves the gold patch, not the empty patch, and labels every candidate as
//! recorded.

use execcritic::harness::{
    audit, grade, qualify, Bundle, FrozenBundle, Qualification, SandboxKind,
};
use execcritic::task::{bundled_suite, load_tasks, Runner, TaskInstance};

/// The task's official tests as a Test bundle selecting its FAIL_TO_PASS nodes.
fn official_bundle(t: &TaskInstance) -> Bundle {
    // F2P plus the P2P tests the official patch adds (every added test must be declared).
    let added: Vec<String> = execcritic::harness::diff::parse_patch(&t.test_patch)
        .unwrap()
        .into_iter()
        .flat_map(|f| f.added_tests)
        .collect();
    let func = |n: &str| -> String {
        let l = execcritic::harness::selector::canonical_label(n);
        let last = l.rsplit(['.', ':']).next().unwrap_or("").to_string();
        last.split('[').next().unwrap_or("").to_string()
    };
    let mut nodes: Vec<String> = t.fail_to_pass.clone();
    nodes.extend(
        t.pass_to_pass
            .iter()
            .filter(|n| added.contains(&func(n)))
            .cloned(),
    );
    let nodes: Vec<String> = match t.runner {
        Runner::Django => nodes
            .iter()
            .map(|n| execcritic::harness::selector::canonical_label(n))
            .collect(),
        _ => nodes,
    };
    let quoted: Vec<String> = nodes
        .iter()
        .map(|n| execcritic::harness::sandbox::shell_quote(n))
        .collect();
    let cmd = match t.runner {
        Runner::Django => format!(
            "python3 tests/runtests.py --verbosity 2 {}",
            quoted.join(" ")
        ),
        Runner::Sympy | Runner::Cargo | Runner::Go => unreachable!("no {:?} task in the bundled suite", t.runner),
        Runner::Pytest => format!("python3 -m pytest {}", quoted.join(" ")),
    };
    let contract = serde_json::json!({
        "entrypoint": "official tests", "trigger": "see issue", "expected_output": "tests pass",
        "issue_evidence": [t.problem_statement.lines().next().unwrap_or("issue")],
        "alternative_hypotheses": ["none"], "non_assertions": ["none"], "test_nodes": nodes,
    });
    Bundle::from_parts(&t.test_patch, &cmd, &contract.to_string()).expect("official bundle parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_suite_official_bundles_qualify_audit_and_grade() {
    let tasks = load_tasks(&bundled_suite().expect("bundled suite builds")).unwrap();
    assert!(tasks.len() >= 10);
    let mut failures = Vec::new();
    for t in &tasks {
        let b = official_bundle(t);
        match qualify(t, &b, SandboxKind::Local).await.unwrap() {
            Qualification::Accepted(_) => {}
            other => {
                failures.push(format!("{}: not accepted: {other:?}", t.instance_id));
                continue;
            }
        }
        let frozen = FrozenBundle::freeze(b).unwrap();
        let rec = audit(t, &frozen, SandboxKind::Local).await.unwrap();
        if !rec.q {
            failures.push(format!("{}: Q=0 {rec:?}", t.instance_id));
        }
        let g = grade(t, &t.patch, SandboxKind::Local).await.unwrap();
        if !g.resolved {
            failures.push(format!("{}: gold not resolved {g:?}", t.instance_id));
        }
        let g = grade(t, "", SandboxKind::Local).await.unwrap();
        if g.resolved || g.error_kind.is_some() {
            failures.push(format!("{}: empty patch {g:?}", t.instance_id));
        }
        for (i, c) in t.candidates.iter().enumerate() {
            let g = grade(t, &c.patch, SandboxKind::Local).await.unwrap();
            if g.resolved != c.resolved {
                failures.push(format!(
                    "{}: candidate {i} graded {} (recorded {}) {g:?}",
                    t.instance_id, g.resolved, c.resolved
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
