//! SWE-bench as it is: the official log parsers by name, the official grading of a
//! `test_output.txt`, and the official `report.json` / run-summary shapes, reimplemented from
//! the observable behaviour of the reference package `swebench` 5.0.2 and checked against it
//! differentially (`tests/official_parsers.rs`, `scripts/swebench-oracle.py`).
//!
//! Two layers, kept apart on purpose:
//! - the *replica* ([`parsers`], [`grading::official_logs_eval`], [`grading::eval_tests_report`],
//!   [`report::eval_report`]) reproduces swebench's results bit for bit, quirks included
//!   (status strings that are not one of the five, whole-log fallback, first-match exit code);
//! - the *fail-closed reading* ([`grading::read_test_output`]) refuses every log whose shape
//!   does not prove the suite ran inside the markers, as a typed [`grading::InfraFailure`]: an
//!   infrastructure failure is never a verdict.
//!
//! Python text semantics the replica depends on (whitespace set, `str.split()`) live in
//! [`pytext`]; the ordered status map and the status strings in [`status`].

pub mod evaluate;
pub mod grading;
pub mod guarded;
pub mod infra;
pub mod parsers;
pub mod pytext;
pub mod report;
pub mod status;

pub use grading::{
    eval_tests_report, official_logs_eval, read_test_output, resolution_status, EvalType,
    InfraFailure, InfraKind, LogsEval, ResolvedStatus, TestRun, TestsStatus,
};
/// The language an instance's repository is written in, for reports: SWE-bench Pro's
/// `repo_language`, else the language swebench files the repository under (its per-language
/// parser maps: SWE-bench, SWE-bench Multilingual), else the language of the row's log parser,
/// else, for a task this crate runs with its own runners, `rust` for `cargo` (the crates suite), `go` for `go`
/// and `python` for pytest, Django and sympy (the bundled and PyPI suites).
pub fn language_of(task: &crate::task::TaskInstance) -> &'static str {
    use crate::task::official::Source;
    let official = task.official.as_ref();
    if let Some(Source::Pro(p)) = official.map(|o| &o.source) {
        if let Some(l) = p.repo_language.as_deref() {
            return pro_language(l);
        }
    }
    if let Some(l) = language_for_repo(&task.repo) {
        return l;
    }
    match official {
        Some(o) => language_for_parser(&o.log_parser).unwrap_or("unknown"),
        None => match task.runner {
            crate::task::Runner::Cargo => "rust",
            crate::task::Runner::Go => "go",
            _ => "python",
        },
    }
}

/// SWE-bench Pro's `repo_language` (`python`, `go`, `js`, `ts`) in the report's names.
fn pro_language(l: &str) -> &'static str {
    match l.trim().to_ascii_lowercase().as_str() {
        "python" | "py" => "python",
        "go" | "golang" => "go",
        "js" | "javascript" => "javascript",
        "ts" | "typescript" => "typescript",
        "rust" | "rs" => "rust",
        "java" => "java",
        "c" => "c",
        "c++" | "cpp" => "c++",
        "ruby" | "rb" => "ruby",
        "php" => "php",
        _ => "unknown",
    }
}

pub use parsers::{
    language_for_parser, language_for_repo, parse, parser, parser_for_repo, LogParser, ParseError, ParserFn, TestSpec,
    MAX_LOG_BYTES, PARSER_NAMES,
};
pub use report::{eval_report, run_summary, InstanceReport, RunSummary};
pub use status::{OfficialStatus, StatusMap};
