//! swebench's Go log parser (`log_parsers/go.py`): `go test -v`'s `--- PASS|FAIL|SKIP: name (time)` lines.

use super::{lazy, line_matches, own, Language, ParserRaised, TestSpec};
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// The Go entries of swebench's registry and its `MAP_REPO_TO_PARSER_GO`.
pub const LANGUAGE: Language = Language {
    name: "go",
    parsers: &[
        own("parse_log_gotest", gotest),
    ],
    repos: &[
        ("caddyserver/caddy", "parse_log_gotest"),
        ("hashicorp/terraform", "parse_log_gotest"),
        ("prometheus/prometheus", "parse_log_gotest"),
        ("gohugoio/hugo", "parse_log_gotest"),
        ("gin-gonic/gin", "parse_log_gotest"),
    ],
};

pub(super) fn gotest(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let pattern = r"^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$";
    Ok(line_matches(
        log,
        lazy(&RESULT, pattern),
        |caps| match caps.get(1)?.as_str() {
            "PASS" => Some((2, OfficialStatus::Passed)),
            "FAIL" => Some((2, OfficialStatus::Failed)),
            "SKIP" => Some((2, OfficialStatus::Skipped)),
            _ => None,
        },
    ))
}

