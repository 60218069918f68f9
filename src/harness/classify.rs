//! Classification of a test run, from the runner's structured report (per-node outcomes and
//! WHERE an error arose: collection, set-up, or the test's own call; see [`super::logparse`]),
//! the exit code, and the sandbox's own signals (its timeout flag, the exit status it observed) —
//! never from words the code under test prints.
//!
//! ONE rule for a bundle's several declared nodes, the paper's (App. B.1: "PASS when all bound
//! test nodes pass and FAIL when the completed test run reports a behavioral failure"): a valid
//! run is PASS iff every declared node passed; it is a behavioural FAIL iff at least one declared
//! node failed in its own call and every other declared node passed or failed the same way. A
//! declared node that errors in set-up, is skipped, xfails, xpasses (strict or not) or is not
//! reported is neither. The Base gate accepts exactly a behavioural FAIL whose failing nodes
//! failed on the behaviour (an assertion, or an exception the exercised code raised) rather than
//! on the test's own import, syntax or name errors; the candidate gate passes exactly a PASS.
//!
//! Completion ([`completion`]) is shared with official grading: a run counts only when the
//! sandbox observed its exit status, no timeout fired, the runner's closing summary was
//! printed, its report is self-consistent, and the exit code agrees with it (non-zero iff a
//! failure was reported; pytest's 2–5 are runner-level outcomes).

use super::execute::RunRecord;
use super::logparse::TestStatus;
use serde::Serialize;

/// Base-gate category. Only `AssertionFailureClean` is accepted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseCategory {
    /// The sandbox did not observe the run's exit status.
    HarnessException,
    /// The sandbox's timeout fired.
    Timeout,
    BadRelativeImport,
    ModuleNotFound,
    ImportNameMissing,
    OtherImportError,
    SyntaxError,
    FixtureNotFound,
    /// pytest exit code 3.
    InternalError,
    /// pytest exit code 4.
    UsageError,
    NameError,
    DatabaseAccess,
    /// A declared node was not reported, or nothing was collected (pytest exit code 5).
    RunnerLabelError,
    /// A test module could not be collected (another exception than the import/syntax kinds).
    CollectionError,
    /// The run did not finish or its report contradicts its exit code (no closing summary,
    /// non-zero exit without a reported failure, exit 0 with one, an entry the counts lack).
    IncompleteRun,
    FailuresMixedWithErrors,
    ErrorsOnly,
    /// The bundle's tests read the repository's source (or its git store) instead of exercising
    /// it: a textual test, not a behavioural one (see `harness::guard`).
    ReadsSource,
    /// The bundle's run carries other evidence of tampering (see `harness::guard`).
    Tampered,
    /// Two runs of the bundle on Base, each in fresh state, came out differently: its outcome
    /// depends on earlier runs or on chance.
    StateDependent,
    /// A declared node was skipped or xfailed on Base.
    SkippedOrXfail,
    /// A declared node xpassed on Base (`xfail(strict=True)` passing included).
    Xpass,
    Passed,
    AssertionFailureClean,
}

impl BaseCategory {
    /// Accepted: a behavioural FAIL (see the module doc).
    pub fn accepted(self) -> bool {
        self == BaseCategory::AssertionFailureClean
    }
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// Repair-gate failure kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    Passed,
    Timeout,
    /// A runner-level failure the candidate cannot cause (pytest usage error, exit code 4, with
    /// no module failing to collect).
    InfraOrCollection,
    AssertionFailure,
    TestError,
    /// A test module no longer collects/imports with the candidate (it did on Base).
    CollectionError,
    /// Every declared node passed but the run's exit code or report says otherwise.
    NonzeroExit,
    /// A declared node was skipped, xfailed, xpassed or not reported.
    NoPassSignal,
    /// The run did not finish (no closing summary), or its report contradicts itself.
    IncompleteRun,
    UnknownFailure,
    PatchApplyFailure,
    TestPatchApplyFailure,
    HiddenTestPathsDirtied,
    /// The candidate changes how tests are collected, run or reported (see `tamper`): the
    /// paper's forbidden test modification, reward 0.
    ForbiddenTestModification,
    /// The run carries evidence that the code under test tampered with the runner, its report,
    /// its exit or the tests (the runtime guard, the canaries: see `harness::guard`): never a
    /// behavioural verdict, reward 0.
    Tampered,
    BundleModified,
    HarnessException,
}

impl FailureKind {
    /// Gate status. The bundle ran to completion on Base (it qualified), so any other outcome of
    /// the same bundle on a candidate — a collection error, a crash, an unfinished or
    /// self-contradicting run — is caused by the candidate: a behavioural `hard_fail`. Only the
    /// sandbox's own signals (timeout, no observed exit), harness-blocked structural failures and
    /// runner usage errors are `inconclusive`.
    pub fn gate_status(self) -> GateStatus {
        use FailureKind::*;
        match self {
            Passed => GateStatus::Pass,
            AssertionFailure | TestError | CollectionError | NonzeroExit | NoPassSignal
            | IncompleteRun | UnknownFailure | ForbiddenTestModification | Tampered => {
                GateStatus::HardFail
            }
            Timeout
            | InfraOrCollection
            | PatchApplyFailure
            | TestPatchApplyFailure
            | HiddenTestPathsDirtied
            | BundleModified
            | HarnessException => GateStatus::Inconclusive,
        }
    }
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// Gate status of a check.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateStatus {
    Pass,
    HardFail,
    Inconclusive,
}

impl GateStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GateStatus::Pass => "pass",
            GateStatus::HardFail => "hard_fail",
            GateStatus::Inconclusive => "inconclusive",
        }
    }
}

/// Whether a run counts, from the sandbox's signals, the exit code and the runner's report.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// Finished, with a self-consistent report that agrees with the exit code.
    Complete,
    /// The sandbox's timeout fired.
    TimedOut,
    /// The sandbox did not observe the run's exit status.
    NoExitCode,
    /// A runner-level exit: pytest 2 (interrupted; collection errors), 3 (internal error),
    /// 4 (usage error), 5 (nothing collected).
    RunnerExit(i32),
    /// No closing summary (the run stopped early: crash, `os._exit`, signal), a report that
    /// contradicts itself or its exit code, or a guarded runner that never completed (no record
    /// with the run's nonce: see `harness::guard`).
    Incomplete,
}

/// The completion of a run: the one rule the gates and official grading share.
pub fn completion(r: &RunRecord) -> Completion {
    if r.timed_out {
        return Completion::TimedOut;
    }
    let Some(rc) = r.rc.filter(|_| r.exit_observed) else {
        return Completion::NoExitCode;
    };
    let p = &r.parsed;
    if r.is_pytest() && (2..=5).contains(&rc) && p.summary_seen {
        return Completion::RunnerExit(rc);
    }
    if !p.summary_seen || !p.consistent {
        return Completion::Incomplete;
    }
    // Under the guard, a run counts only if the designated runner completed and said so with
    // the run's nonce: text that looks like a summary is not a completion.
    if r.guard.guarded && !r.guard.authenticated {
        return Completion::Incomplete;
    }
    let failed = p.has_failures()
        || ["failed", "error", "failures", "errors", "exceptions"]
            .iter()
            .any(|k| p.counts.get(*k).copied().unwrap_or(0) > 0);
    if (rc != 0) != failed {
        return Completion::Incomplete;
    }
    Completion::Complete
}

/// The kind of an exception line (`Type: message`, pytest's `assert …` / `Failed: …`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Exc {
    Assertion,
    RelativeImport,
    ModuleNotFound,
    ImportName,
    Import,
    Syntax,
    Name,
    FixtureNotFound,
    DatabaseAccess,
    Other,
}

fn exception_of(reason: &str) -> Exc {
    let r = reason.trim();
    if r.starts_with("fixture '") && r.contains("' not found") {
        return Exc::FixtureNotFound;
    }
    if r.starts_with("assert ") || r == "assert" || r.starts_with("Failed:") {
        return Exc::Assertion;
    }
    let ty = r.split(':').next().unwrap_or("").trim();
    let ty = ty.rsplit('.').next().unwrap_or(ty);
    match ty {
        "AssertionError" => Exc::Assertion,
        "ModuleNotFoundError" => Exc::ModuleNotFound,
        "ImportError" if r.contains("attempted relative import") => Exc::RelativeImport,
        "ImportError" if r.contains("cannot import name") => Exc::ImportName,
        "ImportError" => Exc::Import,
        "SyntaxError" | "IndentationError" | "TabError" => Exc::Syntax,
        "NameError" | "UnboundLocalError" => Exc::Name,
        "RuntimeError" if r.contains("Database access not allowed") => Exc::DatabaseAccess,
        _ => Exc::Other,
    }
}

/// The Base category of a module that did not collect, by its exception.
fn collection_category(reason: &str) -> BaseCategory {
    use BaseCategory::*;
    match exception_of(reason) {
        Exc::RelativeImport => BadRelativeImport,
        Exc::ModuleNotFound => ModuleNotFound,
        Exc::ImportName => ImportNameMissing,
        Exc::Import => OtherImportError,
        Exc::Syntax => SyntaxError,
        Exc::Name => NameError,
        _ => CollectionError,
    }
}

fn reason_of<'a>(r: &'a RunRecord, node: &str) -> &'a str {
    r.parsed
        .reasons
        .iter()
        .find(|(k, _)| {
            k.as_str() == node || (k.starts_with(node) && k[node.len()..].starts_with('['))
        })
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// Base-gate category of a run of the declared `nodes` on Base (the rule in the module doc).
pub fn base_category(r: &RunRecord, nodes: &[String]) -> BaseCategory {
    use BaseCategory::*;
    if r.guard.evidence.iter().any(|e| e.class == "reads_source") {
        return ReadsSource;
    }
    if !r.guard.evidence.is_empty() {
        return Tampered;
    }
    match completion(r) {
        Completion::TimedOut => return Timeout,
        Completion::NoExitCode => return HarnessException,
        _ => {}
    }
    if let Some(reason) = r.parsed.collection_errors.values().next() {
        return collection_category(reason);
    }
    match completion(r) {
        Completion::RunnerExit(3) => return InternalError,
        Completion::RunnerExit(4) => return UsageError,
        Completion::RunnerExit(5) => return RunnerLabelError,
        Completion::RunnerExit(_) => return CollectionError,
        Completion::Incomplete => return IncompleteRun,
        _ => {}
    }
    let st = r.node_statuses(nodes);
    if st.iter().any(|(_, s)| s.is_none()) {
        return RunnerLabelError;
    }
    let count = |want: TestStatus| st.iter().filter(|(_, s)| *s == Some(want)).count();
    let (n_fail, n_err, n_pass) = (
        count(TestStatus::Failed),
        count(TestStatus::Error),
        count(TestStatus::Passed),
    );
    if n_err > 0 {
        for (n, s) in &st {
            if *s == Some(TestStatus::Error) {
                match exception_of(reason_of(r, n)) {
                    Exc::FixtureNotFound => return FixtureNotFound,
                    Exc::DatabaseAccess => return DatabaseAccess,
                    _ => {}
                }
            }
        }
        return if n_fail > 0 {
            FailuresMixedWithErrors
        } else {
            ErrorsOnly
        };
    }
    if count(TestStatus::XPass) > 0 {
        return Xpass;
    }
    if count(TestStatus::Skipped) + count(TestStatus::XFail) > 0 {
        return SkippedOrXfail;
    }
    if n_pass == st.len() {
        return Passed;
    }
    debug_assert_eq!(n_fail + n_pass, st.len());
    // The test's own broken imports, syntax or names are not the behaviour under test.
    for (n, s) in &st {
        if *s == Some(TestStatus::Failed) {
            let cat = match exception_of(reason_of(r, n)) {
                Exc::RelativeImport => BadRelativeImport,
                Exc::ModuleNotFound => ModuleNotFound,
                Exc::ImportName => ImportNameMissing,
                Exc::Import => OtherImportError,
                Exc::Syntax => SyntaxError,
                Exc::Name => NameError,
                Exc::DatabaseAccess => DatabaseAccess,
                _ => continue,
            };
            return cat;
        }
    }
    AssertionFailureClean
}

/// Repair-gate failure kind of a run (the rule in the module doc). A pass needs a complete run
/// with exit code 0 and every declared node PASSED.
pub fn failure_kind(r: &RunRecord, nodes: &[String]) -> FailureKind {
    use FailureKind::*;
    // Evidence of tampering outranks every outcome the run reported.
    if !r.guard.evidence.is_empty() {
        return Tampered;
    }
    let done = completion(r);
    match done {
        Completion::TimedOut => return Timeout,
        Completion::NoExitCode => return HarnessException,
        _ => {}
    }
    // Before the exit code: pytest exits 4 ("found no collectors") when a selected node's module
    // does not import.
    if !r.parsed.collection_errors.is_empty() {
        return CollectionError;
    }
    if done == Completion::RunnerExit(4) {
        return InfraOrCollection;
    }
    let st = r.node_statuses(nodes);
    let all_pass = st.iter().all(|(_, s)| *s == Some(TestStatus::Passed));
    // Canaries fail by design: the exit status then says "tests failed", and it must be
    // nothing but them that failed.
    let exit_ok = r.rc == Some(0)
        || (r.guard.canary.is_some()
            && r.rc.is_some_and(|c| c != 0)
            && !r.parsed.has_failures()
            && r.guard.canary_statuses.values().any(|s| *s == TestStatus::Failed));
    if all_pass {
        return if done == Completion::Complete && exit_ok {
            Passed
        } else {
            NonzeroExit
        };
    }
    if st.iter().any(|(_, s)| *s == Some(TestStatus::Failed)) {
        let assertions = st
            .iter()
            .filter(|(_, s)| *s == Some(TestStatus::Failed))
            .all(|(n, _)| exception_of(reason_of(r, n)) == Exc::Assertion);
        return if assertions {
            AssertionFailure
        } else {
            TestError
        };
    }
    if st.iter().any(|(_, s)| *s == Some(TestStatus::Error)) {
        return TestError;
    }
    if done != Completion::Complete {
        return IncompleteRun;
    }
    if st.iter().any(|(_, s)| {
        s.is_none()
            || matches!(
                s,
                Some(TestStatus::Skipped | TestStatus::XFail | TestStatus::XPass)
            )
    }) {
        return NoPassSignal;
    }
    UnknownFailure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::logparse::parse_log;
    use crate::harness::selector::CommandRunner;
    use std::time::Duration;

    fn run(rc: Option<i32>, timed_out: bool, output: &str) -> RunRecord {
        RunRecord {
            rc,
            exit_observed: rc.is_some(),
            timed_out,
            output: output.to_string(),
            parsed: parse_log(CommandRunner::Pytest, output).expect("a short log"),
            runner: CommandRunner::Pytest,
            command: String::new(),
            duration: Duration::ZERO,
            test_duration: None,
            log_path: None,
            guard: Default::default(),
        }
    }

    const PASSED: &str =
        "=== short test summary info ===\nPASSED t.py::test_a\n=== 1 passed in 0.1s ===\n";
    const FAILED: &str = "=== short test summary info ===\nFAILED t.py::test_a - assert 0\n=== 1 failed in 0.1s ===\n";

    #[test]
    fn completion_is_the_one_rule_of_gates_and_grading() {
        assert_eq!(
            completion(&run(Some(0), false, PASSED)),
            Completion::Complete
        );
        assert_eq!(
            completion(&run(Some(1), false, FAILED)),
            Completion::Complete
        );
        // A non-zero exit with only PASSED lines, exit 0 with a failure, no closing line.
        assert_eq!(
            completion(&run(Some(1), false, PASSED)),
            Completion::Incomplete
        );
        assert_eq!(
            completion(&run(Some(0), false, FAILED)),
            Completion::Incomplete
        );
        let cut = "=== short test summary info ===\nPASSED t.py::test_a\n";
        assert_eq!(
            completion(&run(Some(0), false, cut)),
            Completion::Incomplete
        );
        assert_eq!(
            completion(&run(Some(3), false, PASSED)),
            Completion::RunnerExit(3)
        );
        // Only the sandbox's flag makes a timeout; the word does not.
        let word = PASSED.replace("0.1s", "0.1s timeout Timeout");
        assert_eq!(
            completion(&run(Some(0), false, &word)),
            Completion::Complete
        );
        assert_eq!(completion(&run(None, true, PASSED)), Completion::TimedOut);
        assert_eq!(
            completion(&run(None, false, PASSED)),
            Completion::NoExitCode
        );
    }

    #[test]
    fn classes_come_from_the_report_not_words() {
        let nodes = vec!["t.py::test_a".to_string()];
        let perm = "PermissionError: denied\nNetwork is unreachable\n=== short test summary info ===\nFAILED t.py::test_a - PermissionError: denied\n=== 1 failed in 0.1s ===\n";
        assert_eq!(
            base_category(&run(Some(1), false, perm), &nodes),
            BaseCategory::AssertionFailureClean
        );
        let xps = "=== short test summary info ===\nFAILED t.py::test_a - [XPASS(strict)] known\n=== 1 failed in 0.1s ===\n";
        assert_eq!(
            base_category(&run(Some(1), false, xps), &nodes),
            BaseCategory::Xpass
        );
        let words = format!("ImportError: x\nINTERNALERROR> y\n{FAILED}");
        let r = run(Some(1), false, &words);
        assert_eq!(failure_kind(&r, &nodes), FailureKind::AssertionFailure);
        assert_eq!(failure_kind(&r, &nodes).gate_status(), GateStatus::HardFail);
        assert_eq!(
            failure_kind(&run(Some(1), false, PASSED), &nodes),
            FailureKind::NonzeroExit
        );
        assert_eq!(
            failure_kind(&run(Some(0), false, PASSED), &nodes),
            FailureKind::Passed
        );
        assert_eq!(
            failure_kind(&run(None, true, PASSED), &nodes).gate_status(),
            GateStatus::Inconclusive
        );
    }
}
