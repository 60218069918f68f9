//! Classification of a test run: Base-gate categories (harness-semantics §4, in order; only a
//! clean assertion failure of every declared node qualifies) and Repair-gate failure kinds
//! mapped to `pass | hard_fail | inconclusive`. Timeouts come from the sandbox's flag, never
//! from the word "timeout" in the output; the exit code is cross-checked against statuses.

use super::execute::RunRecord;
use super::logparse::TestStatus;
use serde::Serialize;

/// Base-gate category. Only `AssertionFailureClean` is accepted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseCategory {
    HarnessException,
    Timeout,
    BadRelativeImport,
    ModuleNotFound,
    ImportNameMissing,
    OtherImportError,
    SyntaxError,
    FixtureNotFound,
    InternalError,
    UsageError,
    NameError,
    DatabaseAccess,
    PermissionSetup,
    /// The test needs the network or writes outside the workspace (blocked by the sandbox).
    SandboxViolation,
    RunnerLabelError,
    CollectionError,
    FailuresMixedWithErrors,
    ErrorsOnly,
    /// Some declared nodes fail and others pass/skip on Base: not a clean reproduction.
    PartialPass,
    Passed,
    EmptyOutput,
    AssertionFailureClean,
    OtherFailure,
    Unknown,
}

impl BaseCategory {
    /// Accepted: every declared node reports FAILED (or some FAILED, the rest PASSED), none
    /// errors or is skipped, and no operational pattern appears.
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
    InfraOrCollection,
    AssertionFailure,
    TestError,
    NonzeroExit,
    NoPassSignal,
    UnknownFailure,
    PatchApplyFailure,
    TestPatchApplyFailure,
    HiddenTestPathsDirtied,
    /// The candidate changes how tests are collected, run or reported (see `tamper`): the
    /// paper's forbidden test modification, reward 0.
    ForbiddenTestModification,
    BundleModified,
    HarnessException,
}

impl FailureKind {
    pub fn gate_status(self) -> GateStatus {
        match self {
            FailureKind::Passed => GateStatus::Pass,
            FailureKind::AssertionFailure | FailureKind::TestError => GateStatus::HardFail,
            _ => GateStatus::Inconclusive,
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

fn has(out: &str, pats: &[&str]) -> bool {
    pats.iter().any(|p| out.contains(p))
}

/// Operational patterns in the output (harness-semantics §4 order, after exceptions/timeouts).
fn pattern_category(out: &str) -> Option<BaseCategory> {
    use BaseCategory::*;
    let rules: &[(BaseCategory, &[&str])] = &[
        (
            BadRelativeImport,
            &["attempted relative import", "beyond top-level package"],
        ),
        (ModuleNotFound, &["ModuleNotFoundError"]),
        (ImportNameMissing, &["ImportError: cannot import name"]),
        (OtherImportError, &["ImportError"]),
        (
            SyntaxError,
            &["SyntaxError", "IndentationError", "TabError"],
        ),
        (FixtureNotFound, &["fixture '", "' not found"]),
        (InternalError, &["INTERNALERROR>"]),
        (
            UsageError,
            &[
                "ERROR: usage:",
                "error: unrecognized arguments",
                "error: argument",
            ],
        ),
        (NameError, &["NameError", "UnboundLocalError"]),
        (DatabaseAccess, &["Database access not allowed"]),
        (PermissionSetup, &["403 Forbidden", "status_code=403"]),
        (
            SandboxViolation,
            &[
                "Network is unreachable",
                "Temporary failure in name resolution",
                "ConnectionRefusedError",
                "Read-only file system",
                "PermissionError",
            ],
        ),
    ];
    for (cat, pats) in rules {
        let hit = if *cat == FixtureNotFound {
            out.contains("fixture '") && out.contains("' not found")
        } else {
            has(out, pats)
        };
        if hit {
            return Some(*cat);
        }
    }
    None
}

fn label_error(out: &str) -> bool {
    has(
        out,
        &[
            "collected 0 items",
            "no tests ran",
            "Ran 0 tests",
            "file or directory not found",
            "ERROR: not found:",
            "No module named",
        ],
    )
}

fn collection_error(r: &RunRecord) -> bool {
    has(
        &r.output,
        &[
            "ERROR collecting",
            "errors during collection",
            "_FailedTest",
            "Interrupted:",
        ],
    ) || r.parsed.statuses.keys().any(|k| {
        !k.contains("::") && r.parsed.statuses[k] == TestStatus::Error && k.ends_with(".py")
    })
}

/// Base-gate category of a run of the declared `nodes` on Base.
/// Rule for several nodes: every declared node must fail (FAILED, not ERROR, skip or pass).
pub fn base_category(r: &RunRecord, nodes: &[String]) -> BaseCategory {
    use BaseCategory::*;
    if r.timed_out {
        return Timeout;
    }
    if !r.marker_found {
        return HarnessException;
    }
    if let Some(c) = pattern_category(&r.output) {
        return c;
    }
    let mut st = r.node_statuses(nodes);
    if st.iter().any(|(_, s)| s.is_none()) || label_error(&r.output) {
        return RunnerLabelError;
    }
    if r.output.contains("\nRan ") {
        for (_, s) in st.iter_mut() {
            if *s == Some(TestStatus::Error) {
                *s = Some(TestStatus::Failed);
            }
        }
    }
    if collection_error(r) {
        return CollectionError;
    }
    let n_fail = st
        .iter()
        .filter(|(_, s)| *s == Some(TestStatus::Failed))
        .count();
    let n_err = st
        .iter()
        .filter(|(_, s)| *s == Some(TestStatus::Error))
        .count();
    let n_pass = st
        .iter()
        .filter(|(_, s)| *s == Some(TestStatus::Passed))
        .count();
    if n_fail > 0 && n_err > 0 {
        return FailuresMixedWithErrors;
    }
    if n_err > 0 {
        return ErrorsOnly;
    }
    if n_pass == st.len() {
        return Passed;
    }
    if r.output.trim().is_empty() {
        return EmptyOutput;
    }
    if n_fail > 0 && n_fail + n_pass == st.len() && r.rc.is_some_and(|c| c != 0) {
        // Rule for several nodes: at least one declared node fails, none errors, is skipped or
        // missing; passing declared nodes act as regression guards.
        return AssertionFailureClean;
    }
    if n_fail > 0 {
        return PartialPass;
    }
    if r.rc.is_some_and(|c| c != 0) {
        return OtherFailure;
    }
    Unknown
}

fn is_assertion(reason: Option<&String>, out: &str) -> bool {
    match reason {
        Some(r) => {
            r.starts_with("assert") || r.starts_with("AssertionError") || r.starts_with("Failed:")
        }
        None => {
            out.contains("AssertionError")
                || out.contains("\nE       assert")
                || out.contains("\nE   assert")
        }
    }
}

/// Every FAILED declared node failed on an assertion (not another exception).
fn all_assertions(r: &RunRecord, nodes: &[String]) -> bool {
    r.node_statuses(nodes)
        .iter()
        .filter(|(_, s)| *s == Some(TestStatus::Failed))
        .all(|(n, _)| {
            let reason = r
                .parsed
                .reasons
                .iter()
                .find(|(k, _)| *k == n || k.starts_with(n.as_str()))
                .map(|(_, v)| v);
            is_assertion(reason, &r.output)
        })
}

/// Repair-gate failure kind of a run. A pass needs rc 0, every declared node PASSED (no
/// failed/error/skipped/xfail/xpass), and runner counts consistent with that.
pub fn failure_kind(r: &RunRecord, nodes: &[String]) -> FailureKind {
    use FailureKind::*;
    if r.timed_out {
        return Timeout;
    }
    if !r.marker_found {
        return HarnessException;
    }
    let st = r.node_statuses(nodes);
    let all_pass = st.iter().all(|(_, s)| *s == Some(TestStatus::Passed));
    let c = &r.parsed.counts;
    let counts_ok = !r.parsed.summary_seen
        || (c.get("failed").copied().unwrap_or(0) == 0
            && c.get("error").copied().unwrap_or(0) == 0);
    if all_pass {
        return if r.rc == Some(0) && counts_ok && r.parsed.summary_seen {
            Passed
        } else if r.rc != Some(0) {
            NonzeroExit
        } else {
            NoPassSignal
        };
    }
    if pattern_category(&r.output).is_some_and(|c| !matches!(c, BaseCategory::NameError))
        || collection_error(r)
    {
        return InfraOrCollection;
    }
    if st.iter().any(|(_, s)| s.is_none()) {
        return if label_error(&r.output) {
            InfraOrCollection
        } else {
            NoPassSignal
        };
    }
    if st.iter().any(|(_, s)| *s == Some(TestStatus::Failed)) {
        return if all_assertions(r, nodes) {
            AssertionFailure
        } else {
            TestError
        };
    }
    if st.iter().any(|(_, s)| *s == Some(TestStatus::Error)) {
        return TestError;
    }
    if st.iter().any(|(_, s)| {
        matches!(
            s,
            Some(TestStatus::Skipped | TestStatus::XFail | TestStatus::XPass)
        )
    }) {
        return NoPassSignal;
    }
    UnknownFailure
}
