//! The gates' run of a native bundle (a validated `cargo test` or `go test` command): fresh Base,
//! the candidate's source patch, the bundle's test patch, then the guarded run of the declared
//! nodes ([`guard::libtest_run`], [`guard::gotest_run`]: look-alike copies of each judged test,
//! one process per test on a
//! throw-away copy, the exit status alone). What it found is read here into the gates' own
//! terms — the Base category, the candidate's failure kind, the feedback text — so the Base gate,
//! the second Base run, the Gold audit and the candidate gate keep one flow for every runner
//! (see [`super::gate`]).
//!
//! The build has a budget of its own ([`BUILD_BUDGET`]), stated apart from the test timeout,
//! which bounds each test's process. Needs a sandbox with throw-away runs and the runner's
//! toolchain (the local sandbox as root, with overlayfs); elsewhere the run is an
//! infrastructure error, never a verdict.

use super::classify::{BaseCategory, FailureKind};
use super::error::HarnessError;
use super::execute::{apply_patch, bound_tail, ApplyOutcome};
use super::guard::libtest::Judged;
use super::guard::libtest_run::{run_guarded_nodes, GuardedRun, RunLimits};
use super::logparse::TestStatus;
use super::guard::gotest_run;
use super::runners::{NativeCommand, NativeRunner};
use super::sandbox::Sandbox;
use super::bundle::FrozenBundle;
use rand::SeedableRng;
use std::time::Duration;

/// Wall-clock budget of the build (`cargo test --no-run`, `go test -c`), apart from the tests'
/// timeout.
pub const BUILD_BUDGET: Duration = Duration::from_secs(900);
/// Look-alike copies of each judged test (the guard's K).
pub const MUTANTS: usize = 6;
/// Characters of the build's diagnostics kept in feedback.
const BUILD_TAIL: usize = 4000;

/// The bundle run on a fresh Base with `source_patch`, and the guarded run's wall time (build
/// and every test process): `Err((kind, diagnostics))` when a patch does not apply.
pub async fn native_run(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    command: &NativeCommand,
    source_patch: &str,
    timeout: Duration,
) -> Result<Result<(GuardedRun, Duration), (FailureKind, String)>, HarnessError> {
    sb.reset().await?;
    if let ApplyOutcome::Failed { diagnostics } = apply_patch(sb, source_patch, "candidate").await? {
        return Ok(Err((FailureKind::PatchApplyFailure, diagnostics)));
    }
    if let ApplyOutcome::Failed { diagnostics } = apply_patch(sb, &frozen.bundle.test_patch, "test").await? {
        return Ok(Err((FailureKind::TestPatchApplyFailure, diagnostics)));
    }
    let limits = RunLimits {
        build: BUILD_BUDGET,
        per_test: timeout,
        mutants: MUTANTS,
        env: command.env.clone(),
    };
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let t0 = std::time::Instant::now();
    let run = match command.runner {
        NativeRunner::Cargo => run_guarded_nodes(sb, &frozen.plan.nodes, &command.build_flags, &limits, &mut rng).await?,
        NativeRunner::Go => gotest_run::run_guarded_nodes(sb, &frozen.plan.nodes, &command.build_flags, &limits, &mut rng).await?,
    };
    Ok(Ok((run, t0.elapsed())))
}

/// The Base-gate category of a guarded run of the declared `nodes` (the rule of
/// [`super::runners::base_category`]): accepted only as `assertion_failure_clean` — every node
/// ran, at least one failed and every other passed. A build failure is `collection_error`
/// (never a clean failure), a run the canaries refuse `tampered`, a node that did not run
/// `runner_label_error`, one that ran past its timeout `timeout`.
pub fn base_category(run: &GuardedRun, nodes: &[String]) -> BaseCategory {
    let j = match run {
        GuardedRun::BuildFailed { .. } => return BaseCategory::CollectionError,
        GuardedRun::Judged(j) if !j.violations.is_empty() => return BaseCategory::Tampered,
        GuardedRun::Judged(j) => j,
    };
    super::runners::nodes_category(&j.real, nodes, BaseCategory::Timeout)
}

/// The candidate gate's failure kind (the bundle built and failed cleanly on Base, so a build
/// failure now is the candidate's: `collection_error`, a behavioural hard fail).
pub fn failure_kind(run: &GuardedRun, nodes: &[String]) -> FailureKind {
    let j = match run {
        GuardedRun::BuildFailed { .. } => return FailureKind::CollectionError,
        GuardedRun::Judged(j) if !j.violations.is_empty() => return FailureKind::Tampered,
        GuardedRun::Judged(j) => j,
    };
    let st: Vec<Option<TestStatus>> = nodes.iter().map(|n| j.real.get(n).copied()).collect();
    if st.iter().all(|s| *s == Some(TestStatus::Passed)) {
        FailureKind::Passed
    } else if st.contains(&Some(TestStatus::Failed)) {
        FailureKind::AssertionFailure
    } else if st.contains(&Some(TestStatus::Error)) {
        FailureKind::Timeout
    } else {
        FailureKind::NoPassSignal
    }
}

/// The declared nodes that did not pass.
pub fn failing(run: &GuardedRun, nodes: &[String]) -> Vec<String> {
    let j = match run {
        GuardedRun::Judged(j) => j,
        GuardedRun::BuildFailed { .. } => return nodes.to_vec(),
    };
    nodes
        .iter()
        .filter(|n| j.real.get(*n) != Some(&TestStatus::Passed))
        .cloned()
        .collect()
}

/// What the run shows an agent: the build's diagnostics, the guard's findings, or one line per
/// declared node. Never a test's own output (the verdict is the exit status alone; a test
/// process writes what it likes).
pub fn report(run: &GuardedRun, nodes: &[String]) -> String {
    match run {
        GuardedRun::BuildFailed { output } => {
            format!("the tests did not build:\n{}", bound_tail(output, BUILD_TAIL))
        }
        GuardedRun::Judged(j) if !j.violations.is_empty() => format!(
            "the run is not a verdict: the runtime guard found\n{}",
            j.violations.join("\n")
        ),
        GuardedRun::Judged(j) => node_lines(j, nodes),
    }
}

fn node_lines(j: &Judged, nodes: &[String]) -> String {
    let mut out = String::new();
    let (mut passed, mut failed) = (0, 0);
    for n in nodes {
        let word = match j.real.get(n) {
            Some(TestStatus::Passed) => {
                passed += 1;
                "ok"
            }
            Some(TestStatus::Error) => {
                failed += 1;
                "TIMED OUT"
            }
            Some(_) => {
                failed += 1;
                "FAILED"
            }
            None => {
                failed += 1;
                "NOT RUN"
            }
        };
        out.push_str(&format!("test {n} ... {word}\n"));
    }
    out.push_str(&format!("test result: {passed} passed; {failed} failed (each test in its own process; the status is its exit status)\n"));
    out
}

/// Counts for the feedback envelope.
pub fn counts(run: &GuardedRun, nodes: &[String]) -> serde_json::Value {
    let failed = failing(run, nodes).len();
    serde_json::json!({"passed": nodes.len() - failed, "failed": failed})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(pairs: &[(&str, TestStatus)], violations: &[&str]) -> GuardedRun {
        let mut j = Judged::default();
        for (n, s) in pairs {
            j.real.insert(n.to_string(), *s);
        }
        j.violations = violations.iter().map(|v| v.to_string()).collect();
        GuardedRun::Judged(j)
    }

    #[test]
    fn guarded_runs_read_as_gate_outcomes() {
        use TestStatus::*;
        let nodes = vec!["c/test/c::a".to_string(), "c/test/c::b".to_string()];
        let cases: Vec<(GuardedRun, BaseCategory, FailureKind)> = vec![
            (judged(&[("c/test/c::a", Failed), ("c/test/c::b", Passed)], &[]), BaseCategory::AssertionFailureClean, FailureKind::AssertionFailure),
            (judged(&[("c/test/c::a", Passed), ("c/test/c::b", Passed)], &[]), BaseCategory::Passed, FailureKind::Passed),
            (judged(&[("c/test/c::a", Passed), ("c/test/c::b", Passed)], &["mutant passed"]), BaseCategory::Tampered, FailureKind::Tampered),
            (judged(&[("c/test/c::a", Failed)], &[]), BaseCategory::RunnerLabelError, FailureKind::AssertionFailure),
            (judged(&[("c/test/c::a", Passed)], &[]), BaseCategory::RunnerLabelError, FailureKind::NoPassSignal),
            (judged(&[("c/test/c::a", Error), ("c/test/c::b", Passed)], &[]), BaseCategory::Timeout, FailureKind::Timeout),
            (GuardedRun::BuildFailed { output: "error[E0425]".into() }, BaseCategory::CollectionError, FailureKind::CollectionError),
        ];
        for (run, cat, kind) in cases {
            assert_eq!(base_category(&run, &nodes), cat, "{run:?}");
            assert_eq!(failure_kind(&run, &nodes), kind, "{run:?}");
        }
        let run = judged(&[("c/test/c::a", Failed), ("c/test/c::b", Passed)], &[]);
        assert_eq!(failing(&run, &nodes), vec!["c/test/c::a"]);
        assert_eq!(report(&run, &nodes), "test c/test/c::a ... FAILED\ntest c/test/c::b ... ok\ntest result: 1 passed; 1 failed (each test in its own process; the status is its exit status)\n");
        assert_eq!(counts(&run, &nodes), serde_json::json!({"passed": 1, "failed": 1}));
        let tampered = judged(&[], &["tests/c.rs: a copy passed"]);
        assert!(report(&tampered, &nodes).contains("a copy passed"));
    }
}
