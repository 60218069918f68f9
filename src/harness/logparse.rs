//! Per-runner log parsers producing per-test statuses: pytest `-rA` short summary (and `-v`
//! lines; parametrised ids with spaces), unittest/Django verbose (`test (mod.Class) ... ok`,
//! multi-line docstring descriptions, Python 3.11+ `test (mod.Class.test)` form) and sympy
//! `bin/test --verbose`. When a node is reported more than once, the worst status wins, so a
//! forged `PASSED` line never hides a real failure.

use super::selector::{canonical_label, CommandRunner};
use std::collections::BTreeMap;

/// Status of one test as reported by its runner.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestStatus {
    Passed,
    Skipped,
    XFail,
    XPass,
    Failed,
    Error,
}

impl TestStatus {
    fn rank(self) -> u8 {
        match self {
            TestStatus::Passed => 0,
            TestStatus::Skipped | TestStatus::XFail => 1,
            TestStatus::XPass => 2,
            TestStatus::Failed => 3,
            TestStatus::Error => 4,
        }
    }
}

/// Parsed log: statuses by canonical test id, failure reasons, summary counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ParsedLog {
    pub statuses: BTreeMap<String, TestStatus>,
    /// Short failure reason per failed/errored test when the runner gives one.
    pub reasons: BTreeMap<String, String>,
    /// Runner's own summary counts (pytest `N failed, M passed`; unittest `Ran N tests`).
    pub counts: BTreeMap<String, u64>,
    /// Whether the runner's closing summary was seen (a sign the suite ran).
    pub summary_seen: bool,
}

impl ParsedLog {
    fn record(&mut self, id: String, status: TestStatus) {
        let e = self.statuses.entry(id).or_insert(status);
        if status.rank() > e.rank() {
            *e = status;
        }
    }
}

pub fn parse_log(runner: CommandRunner, output: &str) -> ParsedLog {
    match runner {
        CommandRunner::Pytest => parse_pytest(output),
        CommandRunner::Django | CommandRunner::Unittest => parse_unittest(output),
        CommandRunner::Sympy => parse_sympy(output),
    }
}

fn pytest_status(word: &str) -> Option<TestStatus> {
    Some(match word {
        "PASSED" => TestStatus::Passed,
        "FAILED" => TestStatus::Failed,
        "ERROR" => TestStatus::Error,
        "SKIPPED" => TestStatus::Skipped,
        "XFAIL" => TestStatus::XFail,
        "XPASS" => TestStatus::XPass,
        _ => return None,
    })
}

/// Split `id - reason` where the id may contain spaces inside `[...]`.
fn split_reason(rest: &str) -> (&str, Option<&str>) {
    let dash = rest.find(" - ");
    match rest.find('[') {
        // A parameter id starts inside the node id: it ends at the first `] - ` (or the end).
        Some(open) if dash.is_none_or(|d| open < d) => {
            if let Some(close) = rest[open..].find("] - ").map(|i| i + open) {
                return (&rest[..=close], Some(&rest[close + 4..]));
            }
            (rest, None)
        }
        _ => match dash {
            Some(d) => (&rest[..d], Some(&rest[d + 3..])),
            None => (rest, None),
        },
    }
}

fn parse_pytest(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    let verbose = regex::Regex::new(
        r"^(\S+\.py::.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \[\s*\d+%\])?$",
    )
    .expect("regex");
    let counts =
        regex::Regex::new(r"(\d+) (failed|passed|skipped|errors?|xfailed|xpassed|deselected)")
            .expect("regex");
    for raw in output.lines() {
        let line = raw.trim_end();
        if let Some((word, rest)) = line.split_once(' ') {
            if let Some(st) = pytest_status(word) {
                if st == TestStatus::Skipped && rest.starts_with('[') {
                    continue; // `SKIPPED [1] path:line: reason` names no node
                }
                let (id, reason) = split_reason(rest);
                if id.contains("::") || st == TestStatus::Error {
                    if let Some(r) = reason {
                        log.reasons.insert(id.to_string(), r.to_string());
                    }
                    log.record(id.to_string(), st);
                }
                continue;
            }
        }
        if let Some(c) = verbose.captures(line) {
            if let Some(st) = pytest_status(&c[2]) {
                log.record(c[1].to_string(), st);
            }
            continue;
        }
        if line.starts_with('=')
            && line.ends_with('=')
            && (line.contains(" in ") || line.contains("no tests ran"))
        {
            log.summary_seen = true;
            log.counts.clear();
            for c in counts.captures_iter(line) {
                let key = if c[2].starts_with("error") {
                    "error".to_string()
                } else {
                    c[2].to_string()
                };
                log.counts.insert(key, c[1].parse().unwrap_or(0));
            }
        }
    }
    log
}

fn unittest_status(s: &str) -> Option<TestStatus> {
    let s = s.trim();
    Some(if s == "ok" {
        TestStatus::Passed
    } else if s == "FAIL" {
        TestStatus::Failed
    } else if s == "ERROR" {
        TestStatus::Error
    } else if s.starts_with("skipped") {
        TestStatus::Skipped
    } else if s == "expected failure" {
        TestStatus::XFail
    } else if s == "unexpected success" {
        TestStatus::XPass
    } else {
        return None;
    })
}

fn parse_unittest(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    let head = regex::Regex::new(r"^(\w+) \(([\w.]+)\)").expect("regex");
    let ran = regex::Regex::new(r"^Ran (\d+) tests? in").expect("regex");
    let mut pending: Option<String> = None;
    for raw in output.lines() {
        let line = raw.trim_end();
        if let Some(c) = ran.captures(line) {
            log.summary_seen = true;
            log.counts.insert("ran".into(), c[1].parse().unwrap_or(0));
            pending = None;
            continue;
        }
        if line.starts_with("FAIL: ")
            || line.starts_with("ERROR: ")
            || line.starts_with("====")
            || line.starts_with("----")
        {
            pending = None;
            continue;
        }
        if let Some(c) = head.captures(line) {
            let id = canonical_label(&format!("{} ({})", &c[1], &c[2]));
            let after = &line[c.get(0).map_or(0, |m| m.end())..];
            if let Some(status) = after
                .rsplit_once(" ... ")
                .and_then(|(_, s)| unittest_status(s))
            {
                log.record(id, status);
                pending = None;
            } else {
                pending = Some(id);
            }
            continue;
        }
        if let Some(id) = pending.clone() {
            // Docstring line `First line ... ok`, or a bare status after test output.
            let status = match line.rsplit_once(" ... ") {
                Some((_, s)) => unittest_status(s),
                None => unittest_status(line).filter(|_| !line.is_empty()),
            };
            if let Some(s) = status {
                log.record(id, s);
                pending = None;
            }
        }
    }
    log
}

fn parse_sympy(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    for raw in output.lines() {
        let line = raw.trim();
        if line.contains("tests finished:") {
            log.summary_seen = true;
        }
        if !line.starts_with("test_") {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(name), Some(last)) = (it.next(), line.split_whitespace().last()) else {
            continue;
        };
        let st = match last {
            "ok" => TestStatus::Passed,
            "F" => TestStatus::Failed,
            "E" => TestStatus::Error,
            "f" => TestStatus::XFail,
            "X" => TestStatus::XPass,
            "s" | "skipped" => TestStatus::Skipped,
            _ => continue,
        };
        log.record(name.to_string(), st);
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_summary_with_params_and_spaces() {
        let out = "tests/a.py::test_v PASSED [ 50%]\n=== short test summary info ===\nPASSED tests/a.py::test_p[a b - c]\nFAILED tests/a.py::test_f[x y] - AssertionError: boom\nFAILED tests/a.py::TestK::test_g - assert 1 == 2\nERROR tests/b.py - ModuleNotFoundError: No module named 'z'\nSKIPPED [1] tests/a.py:3: skip\nXFAIL tests/a.py::test_x - reason\n==== 2 failed, 2 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ====\n";
        let l = parse_pytest(out);
        assert_eq!(l.statuses["tests/a.py::test_v"], TestStatus::Passed);
        assert_eq!(
            l.statuses["tests/a.py::test_p[a b - c]"],
            TestStatus::Passed
        );
        assert_eq!(l.statuses["tests/a.py::test_f[x y]"], TestStatus::Failed);
        assert_eq!(l.reasons["tests/a.py::test_f[x y]"], "AssertionError: boom");
        assert_eq!(l.statuses["tests/a.py::TestK::test_g"], TestStatus::Failed);
        assert_eq!(l.statuses["tests/b.py"], TestStatus::Error);
        assert_eq!(l.statuses["tests/a.py::test_x"], TestStatus::XFail);
        assert!(l.summary_seen);
        assert_eq!(l.counts["failed"], 2);
        assert_eq!(l.counts["error"], 1);
    }

    #[test]
    fn brackets_in_the_reason_are_not_a_parameter() {
        let l = parse_pytest("FAILED t.py::test_a - AssertionError: assert ['x'] == ['x', 'y']\n");
        assert_eq!(l.statuses["t.py::test_a"], TestStatus::Failed);
        assert_eq!(
            l.reasons["t.py::test_a"],
            "AssertionError: assert ['x'] == ['x', 'y']"
        );
    }

    #[test]
    fn forged_pass_never_hides_failure() {
        let l = parse_pytest("PASSED t.py::test_a\nFAILED t.py::test_a - assert 0\n");
        assert_eq!(l.statuses["t.py::test_a"], TestStatus::Failed);
    }

    #[test]
    fn unittest_verbose_forms() {
        let out = "test_a (app.tests.T) ... ok\ntest_b (app.tests.T)\nDoc line of b ... FAIL\ntest_c (app.tests.T.test_c) ... skipped 'x'\ntest_d (app.tests.T) ... printed\nERROR\n======\nFAIL: test_b (app.tests.T)\n----\nRan 4 tests in 0.01s\n";
        let l = parse_unittest(out);
        assert_eq!(l.statuses["app.tests.T.test_a"], TestStatus::Passed);
        assert_eq!(l.statuses["app.tests.T.test_b"], TestStatus::Failed);
        assert_eq!(l.statuses["app.tests.T.test_c"], TestStatus::Skipped);
        assert_eq!(l.statuses["app.tests.T.test_d"], TestStatus::Error);
        assert!(l.summary_seen);
    }

    #[test]
    fn sympy_verbose() {
        let l = parse_sympy("sympy/core/tests/test_a.py[3]\ntest_one ok\ntest_two F\ntest_three E\n= tests finished: 1 passed =");
        assert_eq!(l.statuses["test_one"], TestStatus::Passed);
        assert_eq!(l.statuses["test_two"], TestStatus::Failed);
        assert_eq!(l.statuses["test_three"], TestStatus::Error);
    }
}
