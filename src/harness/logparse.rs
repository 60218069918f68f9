//! Per-runner log parsers producing per-test statuses from the runner's own structured report,
//! never from free text printed by the code under test:
//! - pytest: only the `short test summary info` section(s) of `-rA` count (node statuses, with
//!   `[XPASS(strict)]` recognised), plus the `ERROR collecting <path>` / `ERROR at setup of`
//!   section headers of the body for WHERE an error arose and its exception type, and the closing
//!   counts line for the completion and consistency checks;
//! - unittest/Django verbose (`test (mod.Class) ... ok`, multi-line docstring descriptions,
//!   Python 3.11+ `test (mod.Class.test)` form), loader failures (`unittest.loader._FailedTest`)
//!   as collection errors, exception types from the `ERROR:`/`FAIL:` traceback blocks;
//! - sympy `bin/test --verbose`.
//!
//! When a node is reported more than once, the worst status wins, so a forged `PASSED` line never
//! hides a real failure.
//!
//! Bounds: a log over [`MAX_LOG_BYTES`] is refused ([`LogTooLarge`]); below it every parser is
//! linear in the log (one pass over the lines, regexes of the `regex` crate, no per-line copy of
//! anything but the line itself; failure sections are matched to nodes through an index, not
//! each against each, and the exception line a section gives every node it names is cut to
//! 1 KiB). Measured on adversarial shapes in `benches/results/fuzz.md`.

use super::selector::{canonical_label, CommandRunner};
use std::collections::BTreeMap;

/// Status of one test as reported by its runner. `Failed` is a failure in the test's own call
/// (an assertion or an exception raised while it ran); `Error` arose outside it (fixture
/// set-up or tear-down); an error while collecting a module is in
/// [`ParsedLog::collection_errors`].
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
    /// Severity: the worst report of a node wins.
    pub fn rank(self) -> u8 {
        match self {
            TestStatus::Passed => 0,
            TestStatus::Skipped | TestStatus::XFail => 1,
            TestStatus::XPass => 2,
            TestStatus::Failed => 3,
            TestStatus::Error => 4,
        }
    }
}

/// Parsed log: statuses by canonical test id, failure reasons, summary counts, collection
/// errors and the runner's completion signals.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ParsedLog {
    pub statuses: BTreeMap<String, TestStatus>,
    /// Failure reason per failed/errored test: its exception line (`Type: message`, or pytest's
    /// `assert ...` / `Failed: ...`) when the runner gives one.
    pub reasons: BTreeMap<String, String>,
    /// Runner's own summary counts (pytest `N failed, M passed`; unittest `ran`, `failures`,
    /// `errors`; sympy `passed`, `failed`, …).
    pub counts: BTreeMap<String, u64>,
    /// Whether the runner's closing summary was seen (a sign the suite ran to its end).
    pub summary_seen: bool,
    /// Modules that could not be collected/imported, with the exception line when known.
    pub collection_errors: BTreeMap<String, String>,
    /// The runner's own report is self-consistent: the per-node entries of its summary agree
    /// with its closing counts (a line the code under test printed into the report breaks it).
    pub consistent: bool,
}

impl ParsedLog {
    pub(crate) fn record(&mut self, id: String, status: TestStatus) {
        let e = self.statuses.entry(id).or_insert(status);
        if status.rank() > e.rank() {
            *e = status;
        }
    }

    /// Whether the runner reported any failing entry (a failed/errored node or a module that
    /// could not be collected).
    pub fn has_failures(&self) -> bool {
        !self.collection_errors.is_empty()
            || self.statuses.values().any(|s| {
                matches!(
                    s,
                    TestStatus::Failed | TestStatus::Error | TestStatus::XPass
                )
            })
    }
}

/// The largest runner output [`parse_log`] reads: 64 MiB, the sandbox's default cap on the
/// on-disk log (`SandboxLimits::log_cap`).
pub const MAX_LOG_BYTES: usize = 64 << 20;

/// A runner output over [`MAX_LOG_BYTES`]: not read, so no report (the caller treats the run as
/// one whose runner never completed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogTooLarge {
    /// The output's size.
    pub bytes: usize,
}

impl std::fmt::Display for LogTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "runner output of {} bytes is over the {MAX_LOG_BYTES}-byte bound", self.bytes)
    }
}

impl std::error::Error for LogTooLarge {}

/// The runner's report in `output`, which the code under test writes into: bounded by
/// [`MAX_LOG_BYTES`], linear below it (module doc).
pub fn parse_log(runner: CommandRunner, output: &str) -> Result<ParsedLog, LogTooLarge> {
    if output.len() > MAX_LOG_BYTES {
        return Err(LogTooLarge {
            bytes: output.len(),
        });
    }
    Ok(match runner {
        CommandRunner::Pytest => parse_pytest(output),
        CommandRunner::Django | CommandRunner::Unittest => parse_unittest(output),
        CommandRunner::Sympy => parse_sympy(output),
    })
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

/// Split `id - reason` where the id may contain spaces, ` - ` and brackets inside its parameter
/// part `[...]`: the parameter ends at the last `]` followed by ` - ` or the end of the line.
fn split_reason(rest: &str) -> (&str, Option<&str>) {
    let dash = rest.find(" - ");
    match rest.find('[') {
        Some(open) if dash.is_none_or(|d| open < d) => {
            if rest.ends_with(']') && !rest[open..].contains("] - ") {
                return (rest, None);
            }
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

/// A pytest section rule line `=== title ===` (returns the title).
fn rule_title(line: &str, ch: char) -> Option<&str> {
    let t = line.trim();
    if t.len() < 7 || !t.starts_with(ch) || !t.ends_with(ch) {
        return None;
    }
    let inner = t.trim_matches(ch);
    (inner.starts_with(' ') && inner.ends_with(' ')).then(|| inner.trim())
}

/// The exception line of an `E   Type: message` block (pytest's long report), last one wins.
fn e_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('E')?;
    rest.starts_with(' ').then(|| rest.trim())
}

/// The longest exception line kept from a failure section: one section's line becomes the
/// reason of every node it is titled after, so an unbounded line would be copied once per node.
const MAX_SECTION_REASON_BYTES: usize = 1024;

/// `s` cut to [`MAX_SECTION_REASON_BYTES`] at a character boundary.
fn clip(s: &str) -> &str {
    let mut end = s.len().min(MAX_SECTION_REASON_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// pytest's closing counts (`2 failed, 1 passed, 1 error in 0.1s`), keys normalised.
fn closing_counts(counts: &regex::Regex, line: &str) -> BTreeMap<String, u64> {
    counts
        .captures_iter(line)
        .map(|c| {
            let key = match &c[2] {
                k if k.starts_with("error") => "error",
                k if k.starts_with("warning") => "warnings",
                k => k,
            };
            (key.to_string(), c[1].parse().unwrap_or(0))
        })
        .collect()
}

fn parse_pytest(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    let counts = regex::Regex::new(
        r"(\d+) (failed|passed|skipped|errors?|xfailed|xpassed|deselected|warnings?)",
    )
    .expect("regex");
    let final_line = regex::Regex::new(r"\bin \d+(\.\d+)?s\b").expect("regex");
    // The closing line without its `=` rule (`-q`): only counts, then the duration.
    let plain_final =
        regex::Regex::new(r"^(no tests ran|\d+ [a-z]+(, \d+ [a-z]+)*) in \d+(\.\d+)?s\b")
            .expect("regex");
    #[derive(PartialEq)]
    enum Where {
        Body,
        Summary,
    }
    let mut at = Where::Body;
    // The body section being read: (kind, name) where kind is "collect", "setup" or "call",
    // and its last exception line (recorded when the section ends).
    let mut section: Option<((&'static str, String), Option<&str>)> = None;
    let mut section_exc: BTreeMap<(&'static str, String), String> = BTreeMap::new();
    let mut close = |section: &mut Option<((&'static str, String), Option<&str>)>| {
        if let Some((key, Some(e))) = section.take() {
            section_exc.insert(key, clip(e).to_string());
        }
    };
    // Entries of the last summary section, per status word.
    let mut entries: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut collect_entries: Vec<String> = Vec::new();
    for raw in output.lines() {
        let line = raw.trim_end();
        if let Some(title) = rule_title(line, '=') {
            if title == "short test summary info" {
                at = Where::Summary;
                entries.clear();
                close(&mut section);
                continue;
            }
            if final_line.is_match(title) || title.starts_with("no tests ran") {
                log.summary_seen = true;
                log.counts = closing_counts(&counts, title);
                at = Where::Body;
                close(&mut section);
                continue;
            }
            at = Where::Body;
            close(&mut section);
            continue;
        }
        if at == Where::Body {
            if let Some(title) = rule_title(line, '_') {
                close(&mut section);
                let key = if let Some(p) = title.strip_prefix("ERROR collecting ") {
                    ("collect", p.trim().to_string())
                } else if let Some(p) = title
                    .strip_prefix("ERROR at setup of ")
                    .or_else(|| title.strip_prefix("ERROR at teardown of "))
                {
                    ("setup", p.trim().to_string())
                } else {
                    ("call", title.to_string())
                };
                section = Some((key, None));
                continue;
            }
            if let (Some((_, last)), Some(e)) = (section.as_mut(), e_line(line)) {
                if !e.is_empty() {
                    *last = Some(e);
                }
            }
            continue;
        }
        if plain_final.is_match(line) {
            log.summary_seen = true;
            log.counts = closing_counts(&counts, line);
            at = Where::Body;
            continue;
        }
        // Summary section: `WORD node[ - reason]`.
        let Some((word, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(mut st) = pytest_status(word) else {
            continue;
        };
        if st == TestStatus::Skipped && rest.starts_with('[') {
            *entries.entry("skipped").or_default() += 1;
            // `SKIPPED [1] path:line: reason` names no node; verbose runs may write
            // `SKIPPED [1] path::node: reason`.
            let after = rest.split_once("] ").map_or("", |(_, a)| a);
            if let Some((id, _)) = after.split_once(": ").filter(|(id, _)| id.contains("::")) {
                log.record(id.to_string(), TestStatus::Skipped);
            }
            continue;
        }
        let (id, reason) = split_reason(rest);
        let key = match st {
            TestStatus::Passed => "passed",
            TestStatus::Failed => "failed",
            TestStatus::Error => "error",
            TestStatus::Skipped => "skipped",
            TestStatus::XFail => "xfailed",
            TestStatus::XPass => "xpassed",
        };
        *entries.entry(key).or_default() += 1;
        if !id.contains("::") {
            if st == TestStatus::Error {
                collect_entries.push(id.to_string());
                log.collection_errors
                    .insert(id.to_string(), reason.unwrap_or("").to_string());
            }
            continue;
        }
        if st == TestStatus::Failed && reason.is_some_and(|r| r.starts_with("[XPASS(strict)]")) {
            st = TestStatus::XPass;
        }
        if let Some(r) = reason {
            log.reasons.insert(id.to_string(), r.to_string());
        }
        log.record(id.to_string(), st);
    }
    close(&mut section);
    // Exception lines of the body sections complete what the summary leaves out.
    for ((kind, name), exc) in &section_exc {
        if *kind == "collect" {
            if let Some(r) = log.collection_errors.get_mut(name) {
                if r.is_empty() {
                    *r = exc.clone();
                }
            }
        }
    }
    section_reasons(&mut log, &section_exc);
    let c = |k: &str| log.counts.get(k).copied().unwrap_or(0);
    let e = |k: &str| entries.get(k).copied().unwrap_or(0);
    // No more entries than the closing counts (a bounded log may lose entries in its middle,
    // never gain any); strict XPASS entries are counted as `failed` by pytest.
    log.consistent = log.summary_seen
        && ["failed", "error", "passed", "xpassed", "xfailed"]
            .iter()
            .all(|k| e(k) <= c(k));
    log
}

/// The exception lines of the failure (`call`) and set-up sections onto the failed (errored)
/// nodes they are titled after: a section titled `name` or `Class.name` matches every node
/// whose last `::` part is `name`; sections are taken in title order, and each overwrites a
/// reason that is empty or cut short (`...`). Linear in the log: the sections are indexed by
/// reversed title and looked up once per distinct (kind, name), so that many sections against
/// many nodes is not their product.
fn section_reasons(log: &mut ParsedLog, sections: &BTreeMap<(&'static str, String), String>) {
    let rev = |s: &str| s.chars().rev().collect::<String>();
    let by_rev: BTreeMap<(&str, String), (&str, &str)> = sections
        .iter()
        .filter(|((kind, _), _)| *kind != "collect")
        .map(|((kind, name), exc)| ((*kind, rev(name)), (name.as_str(), exc.as_str())))
        .collect();
    let mut found: BTreeMap<(&str, String), Option<String>> = BTreeMap::new();
    let mut reason_of = |kind: &'static str, last: &str| -> Option<String> {
        found
            .entry((kind, last.to_string()))
            .or_insert_with(|| {
                let exact = rev(last);
                let dotted = format!("{exact}.");
                let mut hits: Vec<(&str, &str)> = by_rev.get(&(kind, exact)).copied().into_iter().collect();
                hits.extend(
                    by_rev
                        .range((kind, dotted.clone())..)
                        .take_while(|((k, n), _)| *k == kind && n.starts_with(&dotted))
                        .map(|(_, hit)| *hit),
                );
                hits.sort_unstable();
                let mut r = String::new();
                for (_, exc) in hits {
                    if r.is_empty() || r.ends_with("...") {
                        r = exc.to_string();
                    }
                }
                (!r.is_empty()).then_some(r)
            })
            .clone()
    };
    for (id, status) in &log.statuses {
        let kind = match status {
            TestStatus::Failed => "call",
            TestStatus::Error => "setup",
            _ => continue,
        };
        let last = id.rsplit("::").next().unwrap_or("");
        let Some(exc) = reason_of(kind, last) else {
            continue;
        };
        let r = log.reasons.entry(id.clone()).or_default();
        if r.is_empty() || r.ends_with("...") {
            *r = exc;
        }
    }
}

fn unittest_status(s: &str) -> Option<TestStatus> {
    let s = s.trim();
    Some(if s == "ok" {
        TestStatus::Passed
    } else if s == "FAIL" {
        TestStatus::Failed
    } else if s == "ERROR" {
        // unittest reports any exception raised by the test (or its setUp) as ERROR: it arose
        // while the test ran, so it is a failure of the call, with its exception as reason.
        TestStatus::Failed
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

/// The label of a unittest loader failure (`unittest.loader._FailedTest.mod`), i.e. a module
/// that could not be imported.
fn loader_failure(id: &str) -> bool {
    id.contains("unittest.loader._FailedTest") || id.contains("unittest.loader.ModuleImportFailure")
}

fn parse_unittest(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    let head = regex::Regex::new(r"^(\w+) \(([\w.]+)\)").expect("regex");
    let ran = regex::Regex::new(r"^Ran (\d+) tests? in").expect("regex");
    let block =
        regex::Regex::new(r"^(?:FAIL|ERROR|UNEXPECTED SUCCESS): (\w+ \([\w.]+\))").expect("regex");
    let result = regex::Regex::new(r"^(OK|FAILED)\b(?: \((.*)\))?").expect("regex");
    let exc = regex::Regex::new(r"^([A-Za-z_][\w.]*)(?::|$)").expect("regex");
    let mut pending: Option<String> = None;
    let mut failures_seen = 0u64;
    // The traceback block being read (label) and its last exception-like line.
    let mut tb: Option<(String, Option<String>)> = None;
    let mut ran_seen = false;
    let flush = |tb: &mut Option<(String, Option<String>)>, log: &mut ParsedLog| {
        if let Some((id, Some(e))) = tb.take() {
            log.reasons.insert(id, e);
        }
    };
    for raw in output.lines() {
        let line = raw.trim_end();
        if let Some(c) = ran.captures(line) {
            flush(&mut tb, &mut log);
            ran_seen = true;
            log.counts.insert("ran".into(), c[1].parse().unwrap_or(0));
            pending = None;
            continue;
        }
        if ran_seen {
            if let Some(c) = result.captures(line) {
                log.summary_seen = true;
                for kv in c.get(2).map_or("", |m| m.as_str()).split(", ") {
                    if let Some((k, v)) = kv.split_once('=') {
                        log.counts
                            .insert(k.trim().to_string(), v.parse().unwrap_or(0));
                    }
                }
                log.counts.insert("ok".into(), u64::from(&c[1] == "OK"));
                continue;
            }
        }
        if let Some(c) = block.captures(line) {
            flush(&mut tb, &mut log);
            failures_seen += 1;
            tb = Some((canonical_label(&c[1]), None));
            pending = None;
            continue;
        }
        if line.starts_with("====") {
            flush(&mut tb, &mut log);
            pending = None;
            continue;
        }
        if let Some((_, last)) = tb.as_mut() {
            if !line.starts_with(' ') && !line.starts_with("Traceback") && !line.starts_with("----")
            {
                if let Some(c) = exc.captures(line) {
                    if c[1].ends_with("Error")
                        || c[1].ends_with("Exception")
                        || c[1].contains('.')
                        || line.contains(": ")
                    {
                        *last = Some(line.to_string());
                    }
                }
            }
            continue;
        }
        if line.starts_with("----") {
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
        if pending.is_some() {
            // Docstring line `First line ... ok`, or a bare status after test output.
            let status = match line.rsplit_once(" ... ") {
                Some((_, s)) => unittest_status(s),
                None => unittest_status(line).filter(|_| !line.is_empty()),
            };
            if let Some(s) = status {
                if let Some(id) = pending.take() {
                    log.record(id, s);
                }
            }
        }
    }
    flush(&mut tb, &mut log);
    // Loader failures are collection errors, not nodes.
    let loader: Vec<String> = log
        .statuses
        .keys()
        .filter(|k| loader_failure(k))
        .cloned()
        .collect();
    for id in loader {
        log.statuses.remove(&id);
        let reason = log.reasons.remove(&id).unwrap_or_default();
        let module = id.rsplit('.').next().unwrap_or(&id).to_string();
        log.collection_errors.insert(module, reason);
    }
    let c = |k: &str| log.counts.get(k).copied().unwrap_or(0);
    log.consistent = log.summary_seen
        && failures_seen <= c("failures") + c("errors") + c("unexpected successes")
        && (c("ok") == 1) == (c("failures") + c("errors") + c("unexpected successes") == 0);
    log
}

fn parse_sympy(output: &str) -> ParsedLog {
    let mut log = ParsedLog::default();
    let counts = regex::Regex::new(
        r"(\d+) (passed|failed|skipped|expected to fail but passed|expected to fail|exceptions?)",
    )
    .expect("regex");
    let mut n_fail = 0u64;
    for raw in output.lines() {
        let line = raw.trim();
        if let Some(rest) = line.split_once("tests finished:").map(|(_, r)| r) {
            log.summary_seen = true;
            log.counts.clear();
            for c in counts.captures_iter(rest) {
                let key = match &c[2] {
                    k if k.starts_with("exception") => "exceptions",
                    "expected to fail but passed" => "xpassed",
                    "expected to fail" => "xfailed",
                    k => k,
                };
                log.counts
                    .insert(key.to_string(), c[1].parse().unwrap_or(0));
            }
            continue;
        }
        if !line.starts_with("test_") {
            continue;
        }
        // The last test of a file carries the file's status after its own (`test_x ok   [OK]`,
        // `[FAIL]`): its own is the word before.
        let words: Vec<&str> = line.split_whitespace().collect();
        let words = match words.split_last() {
            Some((file_status, rest)) if matches!(*file_status, "[OK]" | "[FAIL]") => rest,
            _ => &words[..],
        };
        let (Some(&name), Some(&last)) = (words.first(), words.last()) else {
            continue;
        };
        if words.len() < 2 {
            continue;
        }
        let st = match last {
            "ok" => TestStatus::Passed,
            "F" => TestStatus::Failed,
            // sympy's runner reports an exception raised by the test as `E`: a failure of the
            // test's own call.
            "E" => TestStatus::Failed,
            "f" => TestStatus::XFail,
            "X" => TestStatus::XPass,
            "s" | "skipped" => TestStatus::Skipped,
            _ => continue,
        };
        if st == TestStatus::Failed {
            n_fail += 1;
        }
        log.record(name.to_string(), st);
    }
    let c = |k: &str| log.counts.get(k).copied().unwrap_or(0);
    log.consistent = log.summary_seen && n_fail <= c("failed") + c("exceptions");
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real pytest 9 output (`-rA`) of a generated module: parametrised ids with spaces,
    /// brackets and ` - `, a unittest-style class not named `Test*`, a strict XPASS, set-up
    /// errors with and without a summary reason, call-phase exceptions of several types.
    const PYTEST: &str = "\
============================= test session starts ==============================
collected 14 items

test_a.py .F.FFEE.XF....F                                                [100%]

==================================== ERRORS ====================================
_______________________ ERROR at setup of test_setup ___________________________
    @pytest.fixture
    def boom():
>       raise RuntimeError(\"setup boom\")
E       RuntimeError: setup boom
_____________________ ERROR at setup of test_fixmissing ________________________
file test_a.py, line 15
  def test_fixmissing(nofix):
E       fixture 'nofix' not found
=================================== FAILURES ===================================
__________________________________ test_imp ____________________________________
    def test_imp():
>       from os import not_there
E       ImportError: cannot import name 'not_there' from 'os' (/usr/lib/python3.11/os.py)
==================================== PASSES ====================================
__________________________________ test_pass ___________________________________
----------------------------- Captured stdout call -----------------------------
FAILED test_a.py::test_pass - assert 0
=========================== short test summary info ============================
PASSED test_a.py::test_pass
PASSED test_a.py::test_p[a b]
PASSED test_a.py::test_p[c]d]
PASSED test_a.py::test_p[e - f]
XPASS test_a.py::test_xp - r2
ERROR test_a.py::test_setup - RuntimeError: setup boom
ERROR test_a.py::test_fixmissing
FAILED test_a.py::test_assert - assert 1 == 2
FAILED test_a.py::test_perm - PermissionError: denied
FAILED test_a.py::test_imp - ImportError: cannot import name 'not_there' from 'os' (/usr/lib/...
FAILED test_a.py::test_xps - [XPASS(strict)] r
FAILED test_a.py::Checks::test_u - AssertionError: 1 != 2
FAILED test_a.py::test_raises - Failed: DID NOT RAISE ImportError
============= 6 failed, 4 passed, 1 xpassed, 2 errors in 0.03s =================
";

    #[test]
    fn pytest_summary_is_the_structured_report() {
        let l = parse_pytest(PYTEST);
        let st = |id: &str| l.statuses.get(id).copied();
        // A line printed by a passing test is not a report.
        assert_eq!(st("test_a.py::test_pass"), Some(TestStatus::Passed));
        assert_eq!(st("test_a.py::test_p[a b]"), Some(TestStatus::Passed));
        assert_eq!(st("test_a.py::test_p[c]d]"), Some(TestStatus::Passed));
        assert_eq!(st("test_a.py::test_p[e - f]"), Some(TestStatus::Passed));
        assert_eq!(st("test_a.py::test_xps"), Some(TestStatus::XPass));
        assert_eq!(st("test_a.py::test_xp"), Some(TestStatus::XPass));
        assert_eq!(st("test_a.py::test_setup"), Some(TestStatus::Error));
        assert_eq!(st("test_a.py::Checks::test_u"), Some(TestStatus::Failed));
        assert_eq!(l.reasons["test_a.py::test_perm"], "PermissionError: denied");
        assert_eq!(
            l.reasons["test_a.py::test_fixmissing"],
            "fixture 'nofix' not found"
        );
        // A truncated summary reason is completed from the body's exception line.
        assert!(l.reasons["test_a.py::test_imp"].ends_with("(/usr/lib/python3.11/os.py)"));
        assert!(l.summary_seen && l.consistent);
        assert_eq!(l.counts["failed"], 6);
        assert_eq!(l.counts["error"], 2);
        assert!(l.collection_errors.is_empty());
    }

    #[test]
    fn pytest_collection_error_with_its_exception() {
        let out = "collected 0 items / 1 error\n\n==================================== ERRORS ====================================\n_____________________ ERROR collecting tests/test_b.py _______________________\nImportError while importing test module '/t/tests/test_b.py'.\ntests/test_b.py:1: in <module>\n    import nonexistent\nE   ModuleNotFoundError: No module named 'nonexistent'\n=========================== short test summary info ============================\nERROR tests/test_b.py\n!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n=============================== 1 error in 0.11s ===============================\n";
        let l = parse_pytest(out);
        assert_eq!(
            l.collection_errors["tests/test_b.py"],
            "ModuleNotFoundError: No module named 'nonexistent'"
        );
        assert!(l.statuses.is_empty() && l.summary_seen && l.consistent);
    }

    #[test]
    fn forged_entries_break_consistency_and_never_hide_a_failure() {
        let l = parse_pytest("=== short test summary info ===\nPASSED t.py::test_a\nFAILED t.py::test_a - assert 0\n==== 1 failed in 0.1s ====\n");
        assert_eq!(l.statuses["t.py::test_a"], TestStatus::Failed);
        assert!(!l.consistent, "a PASSED entry the counts do not have");
        // No closing line: the run did not finish.
        let l = parse_pytest("=== short test summary info ===\nPASSED t.py::test_a\n");
        assert!(!l.summary_seen && !l.consistent);
        // Verbose progress lines are not the report.
        let l = parse_pytest("t.py::test_a PASSED [100%]\n");
        assert!(l.statuses.is_empty());
    }

    #[test]
    fn quiet_closing_line_counts() {
        // Real `pytest -rA -q` tail: the closing line has no `=` rule.
        let l = parse_pytest("=== short test summary info ===\nPASSED t.py::test_pass\nFAILED t.py::test_a - assert 1 == 2\n1 failed, 1 passed in 0.07s\n");
        assert!(l.summary_seen && l.consistent);
        assert_eq!(l.counts["failed"], 1);
        // A line like it printed in the body is not the closing line.
        assert!(!parse_pytest("1 passed in 0.01s\n").summary_seen);
    }

    #[test]
    fn brackets_in_the_reason_are_not_a_parameter() {
        let l = parse_pytest("=== short test summary info ===\nFAILED t.py::test_a - AssertionError: assert ['x'] == ['x', 'y']\n=== 1 failed in 1s ===\n");
        assert_eq!(l.statuses["t.py::test_a"], TestStatus::Failed);
        assert_eq!(
            l.reasons["t.py::test_a"],
            "AssertionError: assert ['x'] == ['x', 'y']"
        );
    }

    /// Real `python -m unittest -v` output (Python 3.11).
    const UNITTEST: &str = "\
test_u (test_c.Checks.test_u) ... FAIL
test_e (test_c.Checks.test_e) ... ERROR
test_ok (test_c.Checks.test_ok) ... ok
test_xp (test_c.Checks.test_xp) ... unexpected success
test_nonexist (unittest.loader._FailedTest.test_nonexist) ... ERROR

======================================================================
ERROR: test_e (test_c.Checks.test_e)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"/tmp/test_c.py\", line 6, in test_e
    raise PermissionError(\"nope\")
PermissionError: nope

======================================================================
ERROR: test_nonexist (unittest.loader._FailedTest.test_nonexist)
----------------------------------------------------------------------
ImportError: Failed to import test module: test_nonexist
Traceback (most recent call last):
  File \"/usr/lib/python3.11/unittest/loader.py\", line 162, in loadTestsFromName
    module = __import__(module_name)
             ^^^^^^^^^^^^^^^^^^^^^^^
ModuleNotFoundError: No module named 'test_nonexist'


======================================================================
FAIL: test_u (test_c.Checks.test_u)
----------------------------------------------------------------------
Traceback (most recent call last):
  File \"/tmp/test_c.py\", line 4, in test_u
    self.assertEqual(1, 2)
AssertionError: 1 != 2

======================================================================
UNEXPECTED SUCCESS: test_xp (test_c.Checks.test_xp)
----------------------------------------------------------------------
Ran 5 tests in 0.000s

FAILED (failures=1, errors=2, unexpected successes=1)
";

    #[test]
    fn unittest_verbose_with_exceptions_and_loader_failures() {
        let l = parse_unittest(UNITTEST);
        assert_eq!(l.statuses["test_c.Checks.test_u"], TestStatus::Failed);
        assert_eq!(l.reasons["test_c.Checks.test_u"], "AssertionError: 1 != 2");
        assert_eq!(l.statuses["test_c.Checks.test_e"], TestStatus::Failed);
        assert_eq!(l.reasons["test_c.Checks.test_e"], "PermissionError: nope");
        assert_eq!(l.statuses["test_c.Checks.test_ok"], TestStatus::Passed);
        assert_eq!(l.statuses["test_c.Checks.test_xp"], TestStatus::XPass);
        assert_eq!(
            l.collection_errors["test_nonexist"],
            "ModuleNotFoundError: No module named 'test_nonexist'"
        );
        assert!(l.summary_seen && l.consistent);
    }

    #[test]
    fn unittest_older_forms() {
        let out = "test_a (app.tests.T) ... ok\ntest_b (app.tests.T)\nDoc line of b ... FAIL\ntest_c (app.tests.T.test_c) ... skipped 'x'\ntest_d (app.tests.T) ... printed\nERROR\n======\nFAIL: test_b (app.tests.T)\n----\nRan 4 tests in 0.01s\n\nFAILED (failures=1, errors=1, skipped=1)\n";
        let l = parse_unittest(out);
        assert_eq!(l.statuses["app.tests.T.test_a"], TestStatus::Passed);
        assert_eq!(l.statuses["app.tests.T.test_b"], TestStatus::Failed);
        assert_eq!(l.statuses["app.tests.T.test_c"], TestStatus::Skipped);
        assert_eq!(l.statuses["app.tests.T.test_d"], TestStatus::Failed);
        assert!(l.summary_seen && l.consistent);
        // `Ran` without the OK/FAILED verdict line: unfinished.
        assert!(!parse_unittest("test_a (app.tests.T) ... ok\nRan 1 test in 0.1s\n").summary_seen);
    }

    #[test]
    fn sympy_verbose() {
        let l = parse_sympy("sympy/core/tests/test_a.py[3]\ntest_one ok\ntest_two F\ntest_three E\n= tests finished: 1 passed, 1 failed, 1 exceptions, in 0.1 seconds =");
        assert_eq!(l.statuses["test_one"], TestStatus::Passed);
        assert_eq!(l.statuses["test_two"], TestStatus::Failed);
        assert_eq!(l.statuses["test_three"], TestStatus::Failed);
        assert!(l.summary_seen && l.consistent);
        assert_eq!(l.counts["failed"], 1);
        // The file's status after its last test (sympy 1.13's runner, seen on the real row):
        // the test's own status is the word before it.
        let l = parse_sympy("sympy/physics/tests/test_cg.py[2] \ntest_a ok\ntest_b ok                                  [OK]\ntest_c F    [FAIL]\n[OK]\n= tests finished: 2 passed, 1 failed, in 0.1 seconds =");
        assert_eq!(l.statuses["test_b"], TestStatus::Passed);
        assert_eq!(l.statuses["test_c"], TestStatus::Failed);
        assert_eq!(l.statuses.len(), 3);
    }
}
