//! swebench's Java log parsers (`log_parsers/java.py`): Maven run once per test under `set -x`
//! (the `-Dtest=` of each traced command paired with the next `BUILD SUCCESS|FAILURE`), Ant's
//! JUnit task (Lombok) and Gradle with the harness's per-test log lines (Lucene, RxJava).

use super::{lazy, line_matches, own, Language, ParserRaised, TestSpec, PY_NON_SPACE_CLASS};
use crate::harness::official::pytext::{py_strip, PY_SPACE_CLASS};
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::collections::VecDeque;
use std::sync::OnceLock;

/// The Java entries of swebench's registry and its `MAP_REPO_TO_PARSER_JAVA`.
pub const LANGUAGE: Language = Language {
    name: "java",
    parsers: &[
        own("parse_log_maven", maven),
        own("parse_log_ant", ant),
        own("parse_log_gradle_custom", gradle_custom),
    ],
    repos: &[
        ("google/gson", "parse_log_maven"),
        ("apache/druid", "parse_log_maven"),
        ("javaparser/javaparser", "parse_log_maven"),
        ("projectlombok/lombok", "parse_log_ant"),
        ("apache/lucene", "parse_log_gradle_custom"),
        ("reactivex/rxjava", "parse_log_gradle_custom"),
    ],
};

fn passed_or_failed(status: &str) -> OfficialStatus {
    if status == "SUCCESS" || status == "PASSED" || status == "PASS" {
        OfficialStatus::Passed
    } else {
        OfficialStatus::Failed
    }
}

/// Test names from `-Dtest=<name>` in the traced commands, queued; each `BUILD SUCCESS` /
/// `BUILD FAILURE` line resolves the oldest queued name, or waits for one (results that came
/// before their command are paired first-in first-out at the end).
fn maven(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static NAME: OnceLock<Option<Regex>> = OnceLock::new();
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let mut map = StatusMap::new();
    let name = format!(r"^.*-Dtest=({PY_NON_SPACE_CLASS}+).*$");
    let (Some(name), Some(result)) =
        (lazy(&NAME, &name), lazy(&RESULT, r"^.*BUILD (SUCCESS|FAILURE)$"))
    else {
        return Ok(map);
    };
    let mut pending: VecDeque<&str> = VecDeque::new();
    let mut unmatched: VecDeque<&str> = VecDeque::new();
    for raw in log.split('\n') {
        let line = py_strip(raw);
        if let Some(test) = name.captures(line).and_then(|c| c.get(1)) {
            pending.push_back(test.as_str());
        }
        if let Some(status) = result.captures(line).and_then(|c| c.get(1)) {
            match pending.pop_front() {
                Some(test) => map.insert(test, passed_or_failed(status.as_str())),
                None => unmatched.push_back(status.as_str()),
            }
        }
    }
    while let (Some(test), Some(status)) = (pending.front(), unmatched.front()) {
        map.insert(*test, passed_or_failed(status));
        pending.pop_front();
        unmatched.pop_front();
    }
    Ok(map)
}

/// `[junit] [PASS] name`, `[junit] [FAIL] name`, `[junit] [ERR] name`.
fn ant(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let pattern = format!(r"^{s}*\[junit\]{s}+\[(PASS|FAIL|ERR)\]{s}+(.*)$");
    Ok(line_matches(log, lazy(&RESULT, &pattern), |caps| {
        Some((2, passed_or_failed(caps.get(1)?.as_str())))
    }))
}

/// `com.example.Test > method PASSED|FAILED`, or the name alone on one line and the status
/// alone on a later one (interleaved output); a line starting with `>` is never a test.
fn gradle_custom(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static FULL: OnceLock<Option<Regex>> = OnceLock::new();
    static NAME: OnceLock<Option<Regex>> = OnceLock::new();
    static STATUS: OnceLock<Option<Regex>> = OnceLock::new();
    let (s, ns) = (PY_SPACE_CLASS, PY_NON_SPACE_CLASS);
    let full = format!(r"^([^>].+){s}+(PASSED|FAILED)$");
    let name = format!(r"^([^>]{ns}*{s}+>{s}+{ns}+)$");
    let mut map = StatusMap::new();
    let (Some(full), Some(name), Some(status_only)) =
        (lazy(&FULL, &full), lazy(&NAME, &name), lazy(&STATUS, r"^(PASSED|FAILED)$"))
    else {
        return Ok(map);
    };
    let mut pending: Option<&str> = None;
    for raw in log.split('\n') {
        let line = py_strip(raw);
        if let Some(caps) = full.captures(line) {
            let (Some(test), Some(status)) = (caps.get(1), caps.get(2)) else { continue };
            map.insert(test.as_str(), passed_or_failed(status.as_str()));
            pending = None;
            continue;
        }
        if let Some(test) = name.captures(line).and_then(|c| c.get(1)) {
            pending = Some(test.as_str());
            continue;
        }
        if let Some(test) = pending {
            if let Some(status) = status_only.captures(line).and_then(|c| c.get(1)) {
                map.insert(test, passed_or_failed(status.as_str()));
                pending = None;
            }
        }
    }
    Ok(map)
}
