//! Grading one instance's `test_output.txt` as SWE-bench does, and a fail-closed reading of it.
//!
//! - [`official_logs_eval`] reproduces swebench 5.0.2 `get_logs_eval`: the same status map and
//!   the same `found` flag on every log, quirks included (see `docs/official-grading.md`).
//! - [`read_test_output`] is ours: it accepts a log only when its shape proves the test command
//!   ran between exactly one pair of markers and recorded its exit status after them; anything
//!   else is an [`InfraFailure`], never a verdict. Every log swebench refuses, it refuses too.
//! - [`eval_tests_report`] and [`resolution_status`] reproduce `get_eval_tests_report` and
//!   `get_resolution_status` (truncated parametrized ids, XFAIL as a pass, SKIPPED kept by
//!   PASS_TO_PASS but not FAIL_TO_PASS, fail-only grading).

use super::parsers::{parse, LogParser, ParseError, MAX_LOG_BYTES};
use super::pytext::{py_int, PY_SPACE_CLASS};
use super::status::{OfficialStatus, StatusMap};
use regex::Regex;
use serde::Serialize;
use std::sync::OnceLock;

pub const APPLY_PATCH_FAIL: &str = ">>>>> Patch Apply Failed";
pub const RESET_FAILED: &str = ">>>>> Reset Failed";
pub const TESTS_ERROR: &str = ">>>>> Tests Errored";
pub const TESTS_TIMEOUT: &str = ">>>>> Tests Timed Out";
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";

/// The run-level failure markers swebench looks for anywhere in the log, in its order.
const BAD_CODES: [&str; 4] = [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT];

/// swebench's `SUITE_RAN`: evidence that a runner executed, for logs whose parser found nothing.
fn suite_ran(text: &str) -> bool {
    static SUITE_RAN: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    SUITE_RAN
        .get_or_init(|| {
            Regex::new(&format!(
                r"(?m)Executed [1-9]\d* of \d+|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)|[1-9]\d* passing|Tests:{s}+[1-9]\d*|Test Suites:{s}+(?:\d+ \w+, )*[1-9]\d* total|^# tests [1-9]\d*|[1-9]\d* specs?, \d+ failures?|': ok$"
            ))
            .ok()
        })
        .as_ref()
        .is_some_and(|re| re.is_match(text))
}

/// The first `>>>>> Test Exit Code: N` anywhere in the text (swebench `parse_test_exit_code`),
/// with the byte offset of its marker.
fn first_exit_code(text: &str) -> Option<(usize, i64)> {
    static EXIT: OnceLock<Option<Regex>> = OnceLock::new();
    let re = EXIT
        .get_or_init(|| Regex::new(&format!(r">>>>> Test Exit Code:{PY_SPACE_CLASS}*(-?\d+)")).ok())
        .as_ref()?;
    let caps = re.captures(text)?;
    let start = caps.get(0)?.start();
    Some((start, py_int(caps.get(1)?.as_str())?))
}

/// swebench's `parse_test_exit_code`.
pub fn parse_test_exit_code(content: &str) -> Option<i64> {
    first_exit_code(content).map(|(_, code)| code)
}

/// The text swebench hands the parser: after the first start marker, up to the next start
/// marker, then up to the first end marker.
fn official_section(content: &str) -> &str {
    let after = content.split(START_TEST_OUTPUT).nth(1).unwrap_or("");
    after.split(END_TEST_OUTPUT).next().unwrap_or("")
}

fn has_failure(map: &StatusMap) -> bool {
    map.iter().any(|(_, s)| s.is_failure())
}

// ---------------------------------------------------------------------------------------------
// The replica of `get_logs_eval`.

/// Why swebench found no usable results (it does not say; we do).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotFound {
    /// One of the run-level failure markers occurs anywhere in the log.
    BadCode(&'static str),
    /// The start or the end marker is absent.
    MissingMarkers,
    /// Neither the section nor the whole log gave a status, and no sign the suite ran.
    NoResults,
    /// Non-zero recorded exit status but no FAILED/ERROR in the map.
    ExitCodeContradicts,
}

/// swebench's `(status_map, found)` pair, with the reason when not found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsEval {
    /// Empty when not found.
    pub status_map: StatusMap,
    /// `None` exactly when swebench's `found` is true.
    pub not_found: Option<NotFound>,
}

impl LogsEval {
    pub fn found(&self) -> bool {
        self.not_found.is_none()
    }

    fn refused(reason: NotFound) -> Self {
        LogsEval {
            status_map: StatusMap::new(),
            not_found: Some(reason),
        }
    }
}

/// swebench 5.0.2 `get_logs_eval` on the text of a `test_output.txt`. `Err` where swebench's
/// parser raises (swebench then aborts the instance: no report), the parser is unknown, or the
/// log is over `parsers::MAX_LOG_BYTES` (where swebench has no bound).
pub fn official_logs_eval<'p>(
    parser: impl Into<LogParser<'p>>,
    content: &str,
) -> Result<LogsEval, ParseError> {
    let parser = parser.into();
    refuse_over_size(content)?;
    if let Some(code) = BAD_CODES.iter().find(|c| content.contains(**c)) {
        return Ok(LogsEval::refused(NotFound::BadCode(code)));
    }
    if !(content.contains(START_TEST_OUTPUT) && content.contains(END_TEST_OUTPUT)) {
        return Ok(LogsEval::refused(NotFound::MissingMarkers));
    }
    let mut status_map = parse(parser, official_section(content))?;
    if status_map.is_empty() {
        status_map = parse(parser, content)?;
    }
    if status_map.is_empty() && !suite_ran(content) {
        return Ok(LogsEval::refused(NotFound::NoResults));
    }
    let exit_code = parse_test_exit_code(content);
    if exit_code.is_some_and(|c| c != 0) && !status_map.is_empty() && !has_failure(&status_map) {
        return Ok(LogsEval::refused(NotFound::ExitCodeContradicts));
    }
    Ok(LogsEval {
        status_map,
        not_found: None,
    })
}

// ---------------------------------------------------------------------------------------------
// The fail-closed reading.

/// Why a log gives no verdict.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InfraKind {
    PatchApplyFailed,
    ResetFailed,
    TestsErrored,
    TestsTimedOut,
    MissingStartMarker,
    MissingEndMarker,
    /// A marker occurs more than once (a second copy can only come from the code under test).
    RepeatedMarker,
    /// End before start, or the exit status not after the end marker.
    MisorderedMarkers,
    MissingExitCode,
    /// The section parsed to an empty map and shows no sign the suite ran.
    NoResults,
    /// Non-zero exit status while the log reports no failure.
    ExitCodeContradictsLog,
    /// swebench's own parser raises on this log.
    ParserRaised,
    UnknownParser,
    /// The log is over the parsers' bound (`parsers::MAX_LOG_BYTES`).
    LogTooLarge,
}

/// An infrastructure failure: the run cannot be graded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InfraFailure {
    pub kind: InfraKind,
    pub detail: String,
}

impl InfraFailure {
    fn new(kind: InfraKind, detail: impl Into<String>) -> Self {
        InfraFailure {
            kind,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for InfraFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "infrastructure failure ({:?}): {}",
            self.kind, self.detail
        )
    }
}

impl std::error::Error for InfraFailure {}

/// A log that proved the suite ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRun<'a> {
    /// The text between the markers.
    pub section: &'a str,
    /// The recorded exit status of the test command.
    pub exit_code: i64,
    /// The named parser's map of the section alone.
    pub status_map: StatusMap,
}

impl From<ParseError> for InfraFailure {
    fn from(e: ParseError) -> Self {
        let kind = match e {
            ParseError::UnknownParser(_) => InfraKind::UnknownParser,
            ParseError::Raised(_) => InfraKind::ParserRaised,
            ParseError::TooLarge { .. } => InfraKind::LogTooLarge,
        };
        InfraFailure::new(kind, e.to_string())
    }
}

/// Reads a `test_output.txt` fail-closed with the named official parser.
pub fn read_test_output<'a, 'p>(
    parser: impl Into<LogParser<'p>>,
    content: &'a str,
) -> Result<TestRun<'a>, InfraFailure> {
    let parser = parser.into();
    read_test_output_with(parser.name, content, |section| Ok(parse(parser, section)?))
}

/// [`read_test_output`] with the statuses from `statuses` (given the marked section): the same
/// markers, exit-code record and contradiction rules for a parser that is not ours (SWE-bench
/// Pro's `parser.py`, which reads the run script's own log files).
pub fn read_test_output_with<'a>(
    parser: &str,
    content: &'a str,
    statuses: impl FnOnce(&'a str) -> Result<StatusMap, InfraFailure>,
) -> Result<TestRun<'a>, InfraFailure> {
    refuse_over_size(content)?;
    refuse_bad_codes(content)?;
    let (section, end) = locate_section(content)?;
    let exit_code = recorded_exit_code(content, end)?;
    let status_map = statuses(section)?;
    if status_map.is_empty() && !suite_ran(section) {
        return Err(InfraFailure::new(
            InfraKind::NoResults,
            format!("{parser} found no test result between the markers"),
        ));
    }
    if exit_code != 0 && !has_failure(&status_map) {
        return Err(InfraFailure::new(
            InfraKind::ExitCodeContradictsLog,
            format!(
                "exit status {exit_code} but no FAILED or ERROR among {} results",
                status_map.len()
            ),
        ));
    }
    Ok(TestRun {
        section,
        exit_code,
        status_map,
    })
}

/// A log over the parsers' bound is read by no one ([`ParseError::TooLarge`]).
fn refuse_over_size(content: &str) -> Result<(), ParseError> {
    match content.len() {
        bytes if bytes > MAX_LOG_BYTES => Err(ParseError::TooLarge { bytes }),
        _ => Ok(()),
    }
}

fn refuse_bad_codes(content: &str) -> Result<(), InfraFailure> {
    const KINDS: [InfraKind; 4] = [
        InfraKind::PatchApplyFailed,
        InfraKind::ResetFailed,
        InfraKind::TestsErrored,
        InfraKind::TestsTimedOut,
    ];
    match BAD_CODES
        .iter()
        .zip(KINDS)
        .find(|(code, _)| content.contains(**code))
    {
        Some((code, kind)) => Err(InfraFailure::new(
            kind,
            format!("the log contains `{code}`"),
        )),
        None => Ok(()),
    }
}

/// The one occurrence of a marker, or the failure its absence or repetition is.
fn sole(content: &str, marker: &str, missing: InfraKind) -> Result<usize, InfraFailure> {
    let mut found = content.match_indices(marker).map(|(i, _)| i);
    match (found.next(), found.next()) {
        (Some(i), None) => Ok(i),
        (None, _) => Err(InfraFailure::new(missing, format!("no `{marker}`"))),
        (Some(_), Some(_)) => Err(InfraFailure::new(
            InfraKind::RepeatedMarker,
            format!("`{marker}` occurs more than once"),
        )),
    }
}

/// The section between the sole start and end markers, and the end marker's offset.
fn locate_section(content: &str) -> Result<(&str, usize), InfraFailure> {
    let start = sole(content, START_TEST_OUTPUT, InfraKind::MissingStartMarker)?;
    let end = sole(content, END_TEST_OUTPUT, InfraKind::MissingEndMarker)?;
    let body = start + START_TEST_OUTPUT.len();
    if end < body {
        return Err(InfraFailure::new(
            InfraKind::MisorderedMarkers,
            "end marker before start marker",
        ));
    }
    Ok((&content[body..end], end))
}

/// The sole exit-status record, which must follow the end marker. The record is a line the
/// eval script printed; a bash `set -x` trace of the command that prints it
/// (`+ echo '>>>>> Test Exit Code: 0'`: every swebench 5.x script runs with `-x`) is the shell
/// showing the command, not a record, and is skipped. Any other line holding the marker counts,
/// so a second one (printed by the code under test, even after the run) is refused.
fn recorded_exit_code(content: &str, end: usize) -> Result<i64, InfraFailure> {
    let mut records = Vec::new();
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        if let Some(i) = line.find(TEST_EXIT_CODE) {
            if !line.starts_with('+') {
                records.push(offset + i);
            }
        }
        offset += line.len();
    }
    let at = match records.as_slice() {
        [] => {
            return Err(InfraFailure::new(
                InfraKind::MissingExitCode,
                format!("no `{TEST_EXIT_CODE}`"),
            ))
        }
        [at] => *at,
        _ => {
            return Err(InfraFailure::new(
                InfraKind::RepeatedMarker,
                format!("`{TEST_EXIT_CODE}` occurs more than once"),
            ))
        }
    };
    if at < end {
        return Err(InfraFailure::new(
            InfraKind::MisorderedMarkers,
            "exit status recorded before the end of the test output",
        ));
    }
    match first_exit_code(&content[at..]) {
        Some((0, code)) => Ok(code),
        _ => Err(InfraFailure::new(
            InfraKind::MissingExitCode,
            "exit status marker without a number",
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The tests report and the resolution.

/// `EvalType`: how absent and skipped tests count.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    PassAndFail,
    FailOnly,
}

impl EvalType {
    /// swebench's `FAIL_ONLY_REPOS` are graded fail-only, every other repository pass-and-fail.
    pub fn for_repo(repo: &str) -> Self {
        const FAIL_ONLY_REPOS: [&str; 6] = [
            "chartjs/Chart.js",
            "processing/p5.js",
            "markedjs/marked",
            "bpmn-io/bpmn-js",
            "openlayers/openlayers",
            "eslint/eslint",
        ];
        if FAIL_ONLY_REPOS.contains(&repo) {
            EvalType::FailOnly
        } else {
            EvalType::PassAndFail
        }
    }
}

/// One `{success, failure}` pair of a tests report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

/// `get_eval_tests_report`'s result, keys in swebench's order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Outcome,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Outcome,
    #[serde(rename = "FAIL_TO_FAIL")]
    pub fail_to_fail: Outcome,
    #[serde(rename = "PASS_TO_FAIL")]
    pub pass_to_fail: Outcome,
}

/// The map key an expected id grades against: itself, or, for an id truncated inside its
/// parameter brackets, the first key it prefixes when all such keys agree on pass versus fail.
fn resolve_case<'m>(case: &str, map: &'m StatusMap) -> Option<(&'m str, &'m OfficialStatus)> {
    if let Some((k, v)) = map.iter().find(|(k, _)| *k == case) {
        return Some((k, v));
    }
    if case.matches('[').count() <= case.matches(']').count() {
        return None;
    }
    let mut matches = map.iter().filter(|(k, _)| k.starts_with(case));
    let first = matches.next()?;
    let agree = matches.all(|(_, s)| s.is_passing() == first.1.is_passing());
    agree.then_some(first)
}

fn passed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_some_and(|(_, s)| s.is_passing())
}

fn maintained(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_some_and(|(_, s)| s.is_passing() || *s == OfficialStatus::Skipped)
}

fn failed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_none_or(|(_, s)| s.is_failure() || *s == OfficialStatus::Skipped)
}

/// A grading rule: does the case succeed, does it fail (it may do neither).
type Rule = fn(&str, &StatusMap) -> (bool, bool);

fn rule_pass_and_fail(case: &str, map: &StatusMap) -> (bool, bool) {
    (passed(case, map), failed(case, map))
}

fn rule_maintained(case: &str, map: &StatusMap) -> (bool, bool) {
    (maintained(case, map), failed(case, map))
}

fn rule_fail_only(case: &str, map: &StatusMap) -> (bool, bool) {
    let failed = map.get(case) == Some(&OfficialStatus::Failed);
    (!failed, failed)
}

fn grade_all(cases: &[String], map: &StatusMap, rule: Rule) -> Outcome {
    let mut out = Outcome::default();
    for case in cases {
        match rule(case, map) {
            (true, _) => out.success.push(case.clone()),
            (false, true) => out.failure.push(case.clone()),
            (false, false) => {}
        }
    }
    out
}

/// `get_eval_tests_report(status_map, gold, calculate_to_fail=False, eval_type)`.
pub fn eval_tests_report(
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    status_map: &StatusMap,
    eval_type: EvalType,
) -> TestsStatus {
    eval_tests_report_with_to_fail(fail_to_pass, pass_to_pass, None, status_map, eval_type)
}

/// The same with `calculate_to_fail=True` when `to_fail` = (FAIL_TO_FAIL, PASS_TO_FAIL) is given.
pub fn eval_tests_report_with_to_fail(
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    to_fail: Option<(&[String], &[String])>,
    status_map: &StatusMap,
    eval_type: EvalType,
) -> TestsStatus {
    let (check, check_p2p): (Rule, Rule) = match eval_type {
        EvalType::PassAndFail => (rule_pass_and_fail, rule_maintained),
        EvalType::FailOnly => (rule_fail_only, rule_fail_only),
    };
    let (fail_to_fail, pass_to_fail) = match to_fail {
        Some((f2f, p2f)) => (
            grade_all(f2f, status_map, check),
            grade_all(p2f, status_map, check),
        ),
        None => (Outcome::default(), Outcome::default()),
    };
    TestsStatus {
        fail_to_pass: grade_all(fail_to_pass, status_map, check),
        pass_to_pass: grade_all(pass_to_pass, status_map, check_p2p),
        fail_to_fail,
        pass_to_fail,
    }
}

/// `ResolvedStatus`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ResolvedStatus {
    #[serde(rename = "RESOLVED_NO")]
    No,
    #[serde(rename = "RESOLVED_PARTIAL")]
    Partial,
    #[serde(rename = "RESOLVED_FULL")]
    Full,
}

impl ResolvedStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolvedStatus::No => "RESOLVED_NO",
            ResolvedStatus::Partial => "RESOLVED_PARTIAL",
            ResolvedStatus::Full => "RESOLVED_FULL",
        }
    }
}

/// `get_resolution_status`: FULL when nothing of FAIL_TO_PASS or PASS_TO_PASS failed (an empty
/// list counts as all passed), PARTIAL when FAIL_TO_PASS is mixed and PASS_TO_PASS clean.
pub fn resolution_status(report: &TestsStatus) -> ResolvedStatus {
    let f2p = &report.fail_to_pass;
    let p2p_clean = report.pass_to_pass.failure.is_empty();
    match (f2p.failure.is_empty(), f2p.success.is_empty(), p2p_clean) {
        (true, _, true) => ResolvedStatus::Full,
        (false, false, true) => ResolvedStatus::Partial,
        _ => ResolvedStatus::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTEST: &str = "parse_log_pytest";

    fn log(body: &str, exit: &str) -> String {
        format!("+ pytest -rA\n{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n{exit}")
    }

    fn kind(content: &str) -> Option<InfraKind> {
        read_test_output(PYTEST, content).err().map(|e| e.kind)
    }

    #[test]
    fn every_infra_kind_is_refused() {
        let ok = log("PASSED a.py::t", ">>>>> Test Exit Code: 0\n");
        assert_eq!(kind(&ok), None);
        let cases: Vec<(String, InfraKind)> = vec![
            (format!("{APPLY_PATCH_FAIL}\n{ok}"), InfraKind::PatchApplyFailed),
            (format!("{RESET_FAILED}\n{ok}"), InfraKind::ResetFailed),
            (format!("{ok}{TESTS_ERROR}"), InfraKind::TestsErrored),
            (format!("{ok}{TESTS_TIMEOUT}"), InfraKind::TestsTimedOut),
            (ok.replace(START_TEST_OUTPUT, ""), InfraKind::MissingStartMarker),
            (ok.replace(END_TEST_OUTPUT, ""), InfraKind::MissingEndMarker),
            (log(&format!("PASSED a.py::t\n{START_TEST_OUTPUT}"), ">>>>> Test Exit Code: 0"), InfraKind::RepeatedMarker),
            (format!("{END_TEST_OUTPUT}\n{START_TEST_OUTPUT}\nPASSED a.py::t\n>>>>> Test Exit Code: 0"), InfraKind::MisorderedMarkers),
            (log("PASSED a.py::t", ""), InfraKind::MissingExitCode),
            (log("PASSED a.py::t", ">>>>> Test Exit Code: none"), InfraKind::MissingExitCode),
            (log("PASSED a.py::t\n>>>>> Test Exit Code: 0", ">>>>> Test Exit Code: 1"), InfraKind::RepeatedMarker),
            (format!("{START_TEST_OUTPUT}\n>>>>> Test Exit Code: 0\nPASSED a.py::t\n{END_TEST_OUTPUT}\n"), InfraKind::MisorderedMarkers),
            (log("collected 0 items", ">>>>> Test Exit Code: 5"), InfraKind::NoResults),
            (log("PASSED a.py::t", ">>>>> Test Exit Code: 1"), InfraKind::ExitCodeContradictsLog),
        ];
        for (content, expected) in &cases {
            assert_eq!(kind(content), Some(*expected), "{content}");
        }
        let django = log("FAIL:", ">>>>> Test Exit Code: 1");
        assert_eq!(
            read_test_output("parse_log_django", &django)
                .err()
                .map(|e| e.kind),
            Some(InfraKind::ParserRaised)
        );
        assert_eq!(
            read_test_output("nope", &ok).err().map(|e| e.kind),
            Some(InfraKind::UnknownParser)
        );
    }

    #[test]
    fn a_real_5x_log_with_its_set_x_trace_is_read() {
        // What every swebench 5.x script prints under `set -uxo pipefail`: the markers as trace
        // lines, the exit-code record twice — traced, then printed.
        let real = "+ : '>>>>> Start Test Output'\n+ pytest -rA t.py\nPASSED t.py::a\n\
                    + SWEBENCH_TEST_EXIT_CODE=0\n+ : '>>>>> End Test Output'\n\
                    + echo '>>>>> Test Exit Code: 0'\n+ git checkout abc t.py\n\
                    >>>>> Test Exit Code: 0\nUpdated 1 path\n";
        let run = read_test_output(PYTEST, real).expect("a real log reads");
        assert_eq!(run.exit_code, 0);
        assert_eq!(run.status_map.get("t.py::a").map(|s| s.as_str()), Some("PASSED"));
        // A second printed record (the code under test, even after the run) is still refused,
        // and a trace line alone is no record.
        assert_eq!(kind(&format!("{real}>>>>> Test Exit Code: 0\n")), Some(InfraKind::RepeatedMarker));
        let traced_only = real.replace("\n>>>>> Test Exit Code: 0\n", "\n");
        assert_eq!(kind(&traced_only), Some(InfraKind::MissingExitCode));
    }

    #[test]
    fn every_log_swebench_refuses_is_refused_here() {
        let samples = [
            log("PASSED a.py::t", ">>>>> Test Exit Code: 1"),
            log("", ">>>>> Test Exit Code: 0"),
            format!("{APPLY_PATCH_FAIL}"),
            "PASSED a.py::t".to_string(),
        ];
        for s in &samples {
            let official = official_logs_eval(PYTEST, s).map(|l| l.found());
            assert_eq!(official, Ok(false), "{s}");
            assert!(read_test_output(PYTEST, s).is_err(), "{s}");
        }
    }

    #[test]
    fn swebench_accepts_what_we_refuse() {
        // No exit status recorded: swebench grades it.
        let no_exit = log("PASSED a.py::t", "");
        assert_eq!(
            official_logs_eval(PYTEST, &no_exit).map(|l| l.found()),
            Ok(true)
        );
        // Results only outside the markers: swebench falls back to the whole log.
        let outside = format!("PASSED a.py::t\n{}", log("", ">>>>> Test Exit Code: 0"));
        let eval = official_logs_eval(PYTEST, &outside).ok();
        assert_eq!(eval.map(|l| l.status_map.len()), Some(1));
        assert_eq!(kind(&outside), Some(InfraKind::NoResults));
        // A forged exit status inside the section is the one swebench reads.
        let forged = log(
            "PASSED a.py::t\n>>>>> Test Exit Code: 0",
            ">>>>> Test Exit Code: 1",
        );
        assert_eq!(
            official_logs_eval(PYTEST, &forged).map(|l| l.found()),
            Ok(true)
        );
    }

    #[test]
    fn report_follows_swebench_grading_rules() {
        let mut map = StatusMap::new();
        for (k, v) in [
            ("t[a-1]", "PASSED"),
            ("t[a-2]", "XFAIL"),
            ("u", "SKIPPED"),
            ("v", "XPASSED"),
            ("w[x-1]", "SKIPPED"),
            ("w[x-2]", "FAILED"),
        ] {
            map.insert(k, OfficialStatus::from_token(v));
        }
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r = eval_tests_report(
            &ids(&["t[a", "u", "v", "w[x", "gone"]),
            &ids(&["u", "w[x"]),
            &map,
            EvalType::PassAndFail,
        );
        assert_eq!(r.fail_to_pass.success, ids(&["t[a"]));
        assert_eq!(r.fail_to_pass.failure, ids(&["u", "w[x", "gone"]));
        assert_eq!(r.pass_to_pass.success, ids(&["u", "w[x"]));
        assert_eq!(resolution_status(&r), ResolvedStatus::Partial);
        let only = eval_tests_report(&ids(&["gone", "w[x-2]"]), &[], &map, EvalType::FailOnly);
        assert_eq!(
            (only.fail_to_pass.success, only.fail_to_pass.failure),
            (ids(&["gone"]), ids(&["w[x-2]"]))
        );
        let neither = eval_tests_report(&ids(&["v"]), &[], &map, EvalType::PassAndFail);
        assert_eq!(resolution_status(&neither), ResolvedStatus::Full);
    }
}
