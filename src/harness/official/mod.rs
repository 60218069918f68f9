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
pub mod infra;
pub mod parsers;
pub mod pytext;
pub mod report;
pub mod status;

pub use grading::{
    eval_tests_report, official_logs_eval, read_test_output, resolution_status, EvalType,
    InfraFailure, InfraKind, LogsEval, ResolvedStatus, TestRun, TestsStatus,
};
pub use parsers::{
    language_for_parser, language_for_repo, parse, parser, parser_for_repo, LogParser, ParseError, ParserFn, TestSpec,
    MAX_LOG_BYTES, PARSER_NAMES,
};
pub use report::{eval_report, run_summary, InstanceReport, RunSummary};
pub use status::{OfficialStatus, StatusMap};
