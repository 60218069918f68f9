//! swebench's JavaScript log parsers (`log_parsers/javascript.py`, SWE-bench Multilingual and
//! SWE-bench JS): Jest's `--verbose` lines and its per-file `PASS`/`FAIL` lines (Carbon, Grommet,
//! react-pdf, Calypso), Vitest's verbose reporter, Karma's progress and spec reporters (Preact,
//! bpmn-js, OpenLayers, Chart.js, Alibaba Fusion Next), Mocha's spec reporter (highlight.js,
//! Lighthouse, marked, p5.js, ESLint) and JSON reporter (Prism, old Lighthouse), TAP lines
//! (three.js, axios), Deno's test runner (Quarto) and the parsers that pick one of those by
//! instance (Lighthouse and Next by version, immutable-js by instance id).
//!
//! Each function is a line-by-line translation of swebench's; where swebench's raises (Prism's
//! JSON that does not parse or lacks `failures`, Calypso's `.group(1)` on a failed match, Karma's
//! `pop()` of an empty suite stack, an instance neither parser knows) ours returns the
//! exception's name.

use super::{findall, line_matches, own, Language, ParserRaised, TestSpec, PY_NON_SPACE_CLASS, PY_WORD_CLASS};
use crate::harness::official::pytext::{before_last, decimal_value, is_py_space, py_strip, PY_SPACE_CLASS};
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::{NoExpand, Regex};
use std::sync::OnceLock;

/// The JavaScript entries of swebench's registry and its `MAP_REPO_TO_PARSER_JS`.
pub const LANGUAGE: Language = Language {
    name: "javascript",
    parsers: &[
        own("parse_log_calypso", calypso),
        own("parse_log_bpmn_js", bpmn_js),
        own("parse_log_carbon", carbon),
        own("parse_log_eslint", eslint),
        own("parse_log_grommet", grommet),
        own("parse_log_highlightjs", highlightjs),
        own("parse_log_lighthouse", lighthouse),
        own("parse_log_next", next),
        own("parse_log_openlayers", openlayers),
        own("parse_log_prismjs", prismjs),
        own("parse_log_quarto_cli", quarto_cli),
        own("parse_log_chart_js", chart_js),
        own("parse_log_marked", marked),
        own("parse_log_p5js", p5js),
        own("parse_log_react_pdf", react_pdf),
        own("parse_log_jest", jest),
        own("parse_log_jest_json", jest_json),
        own("parse_log_vitest", vitest),
        own("parse_log_karma", karma),
        own("parse_log_tap", tap),
        own("parse_log_immutable_js", immutable_js),
    ],
    repos: &[
        ("Automattic/wp-calypso", "parse_log_calypso"),
        ("chartjs/Chart.js", "parse_log_chart_js"),
        ("markedjs/marked", "parse_log_marked"),
        ("processing/p5.js", "parse_log_p5js"),
        ("diegomura/react-pdf", "parse_log_react_pdf"),
        ("babel/babel", "parse_log_jest"),
        ("vuejs/core", "parse_log_vitest"),
        ("facebook/docusaurus", "parse_log_jest"),
        ("immutable-js/immutable-js", "parse_log_immutable_js"),
        ("mrdoob/three.js", "parse_log_tap"),
        ("preactjs/preact", "parse_log_karma"),
        ("axios/axios", "parse_log_tap"),
        ("alibaba-fusion/next", "parse_log_next"),
        ("bpmn-io/bpmn-js", "parse_log_bpmn_js"),
        ("carbon-design-system/carbon", "parse_log_carbon"),
        ("cypress-io/cypress", "parse_log_cypress"),
        ("emotion-js/emotion", "parse_log_emotion"),
        ("eslint/eslint", "parse_log_eslint"),
        ("GoogleChrome/lighthouse", "parse_log_lighthouse"),
        ("grommet/grommet", "parse_log_grommet"),
        ("highlightjs/highlight.js", "parse_log_highlightjs"),
        ("openlayers/openlayers", "parse_log_openlayers"),
        ("plotly/plotly.js", "parse_plotly_js"),
        // `parse_log_prettier = parse_log_carbon`, `parse_log_scratch_gui = parse_log_carbon`.
        ("prettier/prettier", "parse_log_carbon"),
        ("PrismJS/prism", "parse_log_prismjs"),
        ("quarto-dev/quarto-cli", "parse_log_quarto_cli"),
        ("scratchfoundation/scratch-gui", "parse_log_carbon"),
    ],
};

type Parsed = Result<StatusMap, ParserRaised>;

/// A Python pattern in the `regex` crate's syntax: `\s`, `\S` and `\w` spelt as Python's `re`
/// reads them for `str` patterns (also inside character classes, as nested classes).
fn py_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push_str(PY_SPACE_CLASS),
            Some('S') => out.push_str(PY_NON_SPACE_CLASS),
            Some('w') => out.push_str(PY_WORD_CLASS),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A constant Python pattern, compiled once (`None` would be a bug in the pattern text: the
/// parser then records nothing rather than panic).
macro_rules! py_re {
    ($pattern:expr) => {{
        static CELL: OnceLock<Option<Regex>> = OnceLock::new();
        CELL.get_or_init(|| Regex::new(&py_pattern($pattern)).ok()).as_ref()
    }};
}

/// Unwraps compiled patterns or returns the empty map.
macro_rules! patterns {
    ($($name:ident = $pattern:expr;)+) => {
        $(
            let Some($name) = py_re!($pattern) else {
                return Ok(StatusMap::new());
            };
        )+
    };
}

fn raised(exception: &'static str, line: usize) -> ParserRaised {
    ParserRaised { exception, line }
}

/// The 1-based line of `log` on which `part` (a slice of it) starts; 0 if `part` is not a slice
/// of `log`.
fn line_of(log: &str, part: &str) -> usize {
    let start = log.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    if at < start || at > start + log.len() {
        return 0;
    }
    let offset = at - start;
    log.get(..offset).map_or(0, |head| 1 + head.matches('\n').count())
}

/// `s.split(sep)[-1]` in Python (the whole string when `sep` is absent).
fn after_last<'a>(s: &'a str, sep: &str) -> &'a str {
    s.rsplit_once(sep).map_or(s, |(_, tail)| tail)
}

/// `s.split(sep, 1)[-1]` in Python.
fn after_first<'a>(s: &'a str, sep: &str) -> &'a str {
    s.split_once(sep).map_or(s, |(_, tail)| tail)
}

/// `len(line) - len(line.lstrip())`, in code points.
fn indent(line: &str) -> usize {
    line.chars().take_while(|c| is_py_space(*c)).count()
}

/// swebench's `ansi_escape` (`swebench/utils.py`).
fn ansi_escape(text: &str) -> String {
    match py_re!(r"\x1B(?:[@-Z\x5C-_]|\[[0-?]*[ -/]*[@-~])") {
        Some(re) => re.replace_all(text, "").into_owned(),
        None => text.to_string(),
    }
}

/// `re.sub(r"\s+", " ", text).strip()`.
fn squeeze(text: &str) -> String {
    match py_re!(r"\s+") {
        Some(re) => py_strip(&re.replace_all(text, " ")).to_string(),
        None => py_strip(text).to_string(),
    }
}

/// The suite stack of Calypso's, Next's and Lighthouse's parsers: an indented line that is no
/// test pops every suite indented as deep or deeper and pushes itself.
fn push_suite(suite: &mut Vec<(String, usize)>, line: &str) {
    let depth = indent(line);
    if depth == 0 {
        return;
    }
    while suite.last().is_some_and(|(_, d)| *d >= depth) {
        suite.pop();
    }
    suite.push((py_strip(line).to_string(), depth));
}

fn suite_names<'a>(suite: &'a [(String, usize)]) -> impl Iterator<Item = &'a str> + 'a {
    suite.iter().map(|(name, _)| name.as_str())
}

// ---------------------------------------------------------------------------------------------
// Calypso: Jest `--verbose` after each ` ./node_modules/.bin/jest `.

/// Jest's verbose tree after each ` ./node_modules/.bin/jest `, up to `Test Suites` or the first
/// `  ● ` failure detail: `✓`/`✕` lines are tests named `<suite - …> - <name>` (stripped; with no
/// suite that leaves a leading `- `), other indented lines are suites. A `✓`/`✕` line that the
/// name pattern does not match (no indentation, no space after the mark, a `(12ms)` not at the
/// end) raises `AttributeError`, as swebench's `.group(1)` on `None` does.
fn calypso(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        timing = r"\(\d+ms\)";
        pass_timed = r"^\s+✓\s(.*)\(\d+ms\)$";
        pass_plain = r"^\s+✓\s(.*)";
        fail_timed = r"^\s+✕\s(.*)\(\d+ms\)$";
        fail_plain = r"^\s+✕\s(.*)";
    }
    let mut map = StatusMap::new();
    let mut suite: Vec<(String, usize)> = Vec::new();
    for part in log.split(" ./node_modules/.bin/jest ").skip(1) {
        for line in part.split('\n') {
            if line.starts_with("Test Suites") || line.starts_with("  ● ") {
                break;
            }
            let stripped = py_strip(line);
            let (timed, plain, status) = if stripped.starts_with('✓') {
                (pass_timed, pass_plain, OfficialStatus::Passed)
            } else if stripped.starts_with('✕') {
                (fail_timed, fail_plain, OfficialStatus::Failed)
            } else {
                push_suite(&mut suite, line);
                continue;
            };
            let pattern = if timing.is_match(line) { timed } else { plain };
            let test = pattern
                .captures(line)
                .and_then(|c| c.get(1))
                .ok_or_else(|| raised("AttributeError", line_of(log, line)))?;
            let prefix = suite_names(&suite).collect::<Vec<_>>().join(" - ");
            let name = format!("{prefix} - {}", test.as_str());
            map.insert(py_strip(&name), status);
        }
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Karma-style `… FAILED` lines.

/// Karma's `FAILED` lines for PhantomJS and Chrome Headless (four patterns over the whole log;
/// the third's test is its second group).
fn bpmn_js(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        phantom_version = r"2KPhantomJS\s[\d\.]+\s\(Linux\s[\d\.]+\)\s(.*)FAILED\n";
        phantom_arch = r"2KPhantomJS\s[\d\.]+\s\(Linux\sx86_64\)\s(.*)FAILED\n";
        chrome_headless = r"Chrome\sHeadless\s(.*)\s\(Linux\sx86_64\)\s(.*)FAILED\n";
        headless_chrome = r"HeadlessChrome\s[\d\.]+\s\(Linux\s[\d\.]+\)\s(.*)FAILED\n";
    }
    let mut map = StatusMap::new();
    for (re, group) in [
        (phantom_version, 1),
        (phantom_arch, 1),
        (chrome_headless, 2),
        (headless_chrome, 1),
    ] {
        for name in findall(re, log, group) {
            map.insert(name, OfficialStatus::Failed);
        }
    }
    Ok(map)
}

/// Karma's `FAILED` lines in Chrome (Headless), mocha's numbered failures up to `Error:`, and
/// the rendering tests' `case <name>: mismatch`; each name with whitespace runs squeezed.
fn openlayers(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        headless = r"(?m)Chrome\sHeadless\s[\d\.]+\s\(Linux\s[\d\._\S]+\)\s(.*)\sFAILED\n";
        chrome = r"(?m)Chrome\s[\d\.]+\s\(Linux\s[\d\._\S]+\)\s(.*)FAILED\n";
        mocha = r"(?m)^\s{2}\d+\)([\s\S]*?)Error:";
        rendering = r"(?m)^case\s(.*):\smismatch";
    }
    let mut map = StatusMap::new();
    for re in [headless, chrome, mocha, rendering] {
        for name in findall(re, log, 1) {
            map.insert(squeeze(name), OfficialStatus::Failed);
        }
    }
    Ok(map)
}

/// Karma's `Chrome <version> (<platform>) <test> FAILED` lines, after removing ANSI codes.
fn chart_js(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        failed = r"(?m)Chrome\s[\d\.]+[^\S\r\n]\(.+?\)[^\S\r\n](.*)FAILED$";
    }
    let log = ansi_escape(log);
    let mut map = StatusMap::new();
    for name in findall(failed, &log, 1) {
        map.insert(name, OfficialStatus::Failed);
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Jest's per-file `PASS`/`FAIL` lines.

/// `PASS <file> (1.2 s)`, `FAIL <file>`: the first of eight patterns that matches the line
/// decides (the timing, if any, left out of the name).
fn carbon(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        pass_ms = r"^PASS\s(.*)\s\([\d\.]+ms\)";
        pass_spaced_s = r"^PASS\s(.*)\s\([\d\.]+\ss\)";
        pass_s = r"^PASS\s(.*)\s\([\d\.]+s\)";
        pass_any = r"^PASS\s(.*)";
        fail_ms = r"^FAIL\s(.*)\s\([\d\.]+ms\)";
        fail_spaced_s = r"^FAIL\s(.*)\s\([\d\.]+\ss\)";
        fail_s = r"^FAIL\s(.*)\s\([\d\.]+s\)";
        fail_any = r"^FAIL\s(.*)";
    }
    let table = [
        (pass_ms, OfficialStatus::Passed),
        (pass_spaced_s, OfficialStatus::Passed),
        (pass_s, OfficialStatus::Passed),
        (pass_any, OfficialStatus::Passed),
        (fail_ms, OfficialStatus::Failed),
        (fail_spaced_s, OfficialStatus::Failed),
        (fail_s, OfficialStatus::Failed),
        (fail_any, OfficialStatus::Failed),
    ];
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        // Every pattern starts `^PASS\s` or `^FAIL\s`: other lines match none.
        if !(line.starts_with("PASS") || line.starts_with("FAIL")) {
            continue;
        }
        for (re, status) in &table {
            if let Some(test) = re.captures(line).and_then(|c| c.get(1)) {
                map.insert(test.as_str(), status.clone());
                break;
            }
        }
    }
    Ok(map)
}

/// The same code as [`carbon`] in swebench (a copy, not an alias).
fn react_pdf(log: &str, spec: &TestSpec) -> Parsed {
    carbon(log, spec)
}

/// `FAIL <file> (1.2 s)` and `PASS …` at line starts, stripped, the trailing timing removed;
/// all failures first, then all passes (a file in both ends up passed).
fn grommet(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        fail = r"(?m)^FAIL\s(.*)";
        pass = r"(?m)^PASS\s(.*)";
        timing = r"\s\([\d\.]+\s?(?:ms|s)\)$";
    }
    let mut map = StatusMap::new();
    for (re, status) in [(fail, OfficialStatus::Failed), (pass, OfficialStatus::Passed)] {
        for name in findall(re, log, 1) {
            map.insert(timing.replace_all(py_strip(name), "").into_owned(), status.clone());
        }
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Mocha.

/// ESLint's mocha failures: `  1) <title>` up to the first whitespace run before a line part
/// ending in `Error`, whitespace squeezed.
///
/// Bounds: swebench's backtracking `re.findall` with the lazy `[\s\S]*?` is quadratic in the
/// log in the worst case (each numbered item with no `Error` after it rescans the rest of the
/// log). The same pattern runs here on the `regex` crate's automata, which find the same
/// non-overlapping matches without backtracking, so ours stays linear in the log.
fn eslint(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        failure = r"(\s{2}\d+\))([\s\S]*?)\s+(?:(.*)Error)";
    }
    let mut map = StatusMap::new();
    for name in findall(failure, log, 2) {
        map.insert(squeeze(name), OfficialStatus::Failed);
    }
    Ok(map)
}

/// Mocha's spec reporter up to the first `<n> passing`: `✓`/`✔` lines pass and `1) …` lines
/// fail, named `<suite>.<test>` (timings removed); a line indented two spaces is the suite.
fn highlightjs(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        summary = r"\n[ \t]*\d+ passing";
        numbered = r"^\d+\)";
        timing = r"\(\d+ms\)";
    }
    let log = summary.find(log).map_or(log, |m| &log[..m.start()]);
    let remove_timing = |name: &str| py_strip(&timing.replace_all(name, "")).to_string();
    let mut map = StatusMap::new();
    let mut suite: Vec<String> = Vec::new();
    for line in log.split('\n') {
        let stripped = py_strip(line);
        let check = if stripped.starts_with('✓') {
            Some("✓")
        } else if stripped.starts_with('✔') {
            Some("✔")
        } else {
            None
        };
        let (test, status) = if let Some(check) = check {
            (remove_timing(after_first(line, check)), OfficialStatus::Passed)
        } else if numbered.is_match(stripped) {
            (remove_timing(after_first(line, ")")), OfficialStatus::Failed)
        } else {
            if line.starts_with("  ") {
                suite = vec![stripped.to_string()];
            }
            continue;
        };
        let mut parts: Vec<&str> = suite.iter().map(String::as_str).collect();
        parts.push(&test);
        map.insert(parts.join("."), status);
    }
    Ok(map)
}

/// Mocha's spec reporter as Lighthouse 9.5-10.2 run it: after each `running <n> test files`, up
/// to `<n> passing`, `✔` lines pass and `1) …` lines fail, named `<suite - …> - <test>`; any
/// other indented line is a suite.
fn lighthouse_mocha(log: &str) -> Parsed {
    patterns! {
        run = r"running\s\d+\stest\sfiles";
        passing = r"\d+\spassing";
        pass_timed = r"^✔\s(.*)\s\(\d+m+s\)";
        pass_plain = r"^✔\s(.*)";
        fail_timed = r"^\d+\)\s(.*)\s\(\d+m+s\)";
        fail_plain = r"^\d+\)\s(.*)";
    }
    let table = [
        (pass_timed, OfficialStatus::Passed),
        (pass_plain, OfficialStatus::Passed),
        (fail_timed, OfficialStatus::Failed),
        (fail_plain, OfficialStatus::Failed),
    ];
    let mut map = StatusMap::new();
    for part in run.split(log).skip(1) {
        let part = py_strip(passing.split(part).next().unwrap_or(""));
        let mut suite: Vec<(String, usize)> = Vec::new();
        for line in part.split('\n') {
            let stripped = py_strip(line);
            let found = table.iter().find_map(|(re, status)| {
                re.captures(stripped).and_then(|c| c.get(1)).map(|m| (m.as_str(), status.clone()))
            });
            match found {
                Some((test, status)) => {
                    let mut parts: Vec<&str> = suite_names(&suite).collect();
                    parts.push(test);
                    map.insert(parts.join(" - "), status);
                }
                None => push_suite(&mut suite, line),
            }
        }
    }
    Ok(map)
}

/// Python's `float(text)` succeeds: surrounding whitespace stripped, Unicode digits read as
/// digits, `_` only between digits, then a decimal, `inf`/`infinity` or `nan` with an optional
/// sign.
fn py_float(text: &str) -> Option<f64> {
    let text = text.trim_matches(is_py_space);
    let mut ascii = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let d = decimal_value(c)?;
            ascii.push(char::from_digit(d, 10)?);
        }
    }
    let bytes = ascii.as_bytes();
    let mut cleaned = String::with_capacity(ascii.len());
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = i > 0 && bytes[i - 1].is_ascii_digit();
            let after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            if !(before && after) {
                return None;
            }
        } else {
            cleaned.push(b as char);
        }
    }
    // Rust's grammar is C's `strtod` subset Python accepts: sign, digits with an optional point
    // and exponent, `inf`, `infinity`, `nan` (any case). Rust alone would also take none of
    // Python's rejects (no hex, no whitespace inside).
    if cleaned.is_empty() || cleaned.bytes().any(|b| b.is_ascii_whitespace()) {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

/// Lighthouse: mocha's spec reporter for versions 9.5, 10.0 and 10.2, [`carbon`]'s Jest
/// `PASS`/`FAIL` lines from version 3 on, and before that mocha's JSON reporter read with a
/// regex. A version that is not a number raises `ValueError`, as swebench's `float()` does.
fn lighthouse(log: &str, spec: &TestSpec) -> Parsed {
    if matches!(spec.version, "9.5" | "10.0" | "10.2") {
        return lighthouse_mocha(log);
    }
    let version = py_float(spec.version).ok_or_else(|| raised("ValueError", 0))?;
    if version >= 3.0 {
        return carbon(log, spec);
    }
    patterns! {
        title = r#"(?m)"fullTitle":\s"(.*)",\n"#;
    }
    let mut map = StatusMap::new();
    for part in log.split("./node_modules/.bin/mocha --reporter json").skip(1) {
        let passes = before_last(after_last(part, "\"passes\": ["), "]");
        for name in findall(title, passes, 1) {
            map.insert(name, OfficialStatus::Passed);
        }
        let failures = before_last(after_last(part, "\"failures\": ["), "],");
        for name in findall(title, failures, 1) {
            map.insert(name, OfficialStatus::Failed);
        }
    }
    Ok(map)
}

/// Mocha's numbered failures (`1) title`), stripped.
fn marked(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        failure = r"^\d+\)\s(.*)";
    }
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        if let Some(m) = failure.captures(line).and_then(|c| c.get(1)) {
            map.insert(py_strip(m.as_str()), OfficialStatus::Failed);
        }
    }
    Ok(map)
}

/// p5.js's mocha failures: after removing ANSI codes, JSON-looking blocks and `<tag>…</tag>`
/// blocks, each `<n>)` followed within 1000 characters by a `:` is a failure when every line of
/// the text in between is indented deeper than the one before (the first deeper than zero); the
/// lines, stripped, are joined with `:`.
///
/// Bounds: [`remove_xml_blocks`] is quadratic in the log in the worst case, as swebench's loop
/// is (it searches the whole log again after each removal).
fn p5js(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        number = r"(?m)^\s*(\d+)\)";
    }
    let log = ansi_escape(log);
    let log = remove_json_blocks(&log);
    let log = remove_xml_blocks(log);
    let mut map = StatusMap::new();
    let mut at = 0;
    // `re.finditer(r"^\s*(\d+)\)(.{0,1000}?):", log, re.M | re.S)`, with the bounded lazy
    // repetition done by hand: the shortest run of at most 1000 characters up to a `:`. For a
    // given start the prefix `^\s*\d+\)` has one extent only, so a start whose `:` is too far
    // fails and the search resumes one character later.
    while at <= log.len() {
        let Some(prefix) = number.find_at(&log, at) else {
            break;
        };
        let rest = &log[prefix.end()..];
        let colon = rest.char_indices().take(1001).find(|&(_, c)| c == ':').map(|(i, _)| i);
        let Some(colon) = colon else {
            let step = log[prefix.start()..].chars().next().map_or(1, char::len_utf8);
            at = prefix.start() + step;
            continue;
        };
        let text = &rest[..colon];
        if is_valid_fail(text) {
            let name = text.split('\n').map(py_strip).collect::<Vec<_>>().join(":");
            map.insert(name, OfficialStatus::Failed);
        }
        at = prefix.end() + colon + 1;
    }
    Ok(map)
}

fn is_valid_fail(text: &str) -> bool {
    let mut last = 0;
    for line in text.split('\n') {
        let depth = indent(line);
        if depth <= last {
            return false;
        }
        last = depth;
    }
    true
}

/// p5.js's `remove_json_blocks`: drops lines from one ending in `{` (or `[`) to the `}` (or `]`)
/// closing it, and one-line `{…}`/`[…]`.
fn remove_json_blocks(log: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let (mut in_object, mut in_list) = (false, false);
    for line in log.split('\n') {
        let stripped = line.trim_end_matches(is_py_space);
        if stripped.ends_with('{') {
            in_object = true;
            continue;
        }
        if stripped.ends_with('[') {
            in_list = true;
            continue;
        }
        if stripped == "}" && in_object {
            in_object = false;
            continue;
        }
        if stripped == "]" && in_list {
            in_list = false;
            continue;
        }
        if in_object || in_list {
            continue;
        }
        if (stripped.starts_with('{') && stripped.ends_with('}'))
            || (stripped.starts_with('[') && stripped.ends_with(']'))
        {
            continue;
        }
        kept.push(line);
    }
    kept.join("\n")
}

/// p5.js's `remove_xml_blocks`: while `<(\w+)>[\s\S]*?<\/\1>` matches, the leftmost match is
/// replaced by as many `<tag>` as it holds beyond its first. The backreference is done by hand:
/// at a `<`, the tag is the whole run of word characters before a `>` (a shorter run cannot be
/// followed by `>`), and the match ends at the first `</tag>` after it.
///
/// Bounds: quadratic (times a logarithm) in the worst case: each removal shortens the log and
/// is followed by a fresh search of the whole log, as in swebench.
fn remove_xml_blocks(mut log: String) -> String {
    let (Some(open), Some(close)) = (py_re!(r"<(\w+)>"), py_re!(r"</(\w+)>")) else {
        return log;
    };
    loop {
        // Every closing tag, by name, in order (closing tags cannot overlap).
        let mut closes: std::collections::HashMap<&str, Vec<usize>> = Default::default();
        for caps in close.captures_iter(&log) {
            if let (Some(all), Some(name)) = (caps.get(0), caps.get(1)) {
                closes.entry(name.as_str()).or_default().push(all.start());
            }
        }
        let mut found = None;
        for caps in open.captures_iter(&log) {
            let (Some(all), Some(name)) = (caps.get(0), caps.get(1)) else {
                continue;
            };
            let Some(positions) = closes.get(name.as_str()) else {
                continue;
            };
            let i = positions.partition_point(|&p| p < all.end());
            if let Some(&end_tag) = positions.get(i) {
                let end = end_tag + name.as_str().len() + 3;
                found = Some((all.start(), end, name.as_str().to_string()));
                break;
            }
        }
        let Some((start, end, name)) = found else {
            return log;
        };
        let tag = format!("<{name}>");
        let opening = log[start..end].matches(tag.as_str()).count().saturating_sub(1);
        let mut next = String::with_capacity(log.len());
        next.push_str(&log[..start]);
        for _ in 0..opening {
            next.push_str(&tag);
        }
        next.push_str(&log[end..]);
        log = next;
    }
}

// ---------------------------------------------------------------------------------------------
// Next (Alibaba Fusion).

/// Fusion Next: version 1.27 reads the Cypress-style `Running:` sections, any other version
/// Karma's mocha reporter under `xvfb-run`.
fn next(log: &str, spec: &TestSpec) -> Parsed {
    if spec.version == "1.27" {
        next_v2(log)
    } else {
        next_v1(log)
    }
}

/// After removing ANSI codes and `AssertionError: #…` blocks up to a blank line, each section
/// after ` xvfb-run ` (from its last `Starting browser Chrome`) up to a `TOTAL` line: `✗` lines
/// fail and `✓` lines pass, named `<suite - …> - <test>`; lines starting with `ERROR`, `LOG`,
/// `WARN`, `Check` or `in` are skipped, other indented lines are suites (kept across sections).
fn next_v1(log: &str) -> Parsed {
    patterns! {
        ansi = r"\x1B(?:[@-Z\x5C-_]|\[[0-?]*[ -/]*[@-~])";
        assertion = r"(?s)AssertionError:\s+#([\s\S]*?)\n\n";
        fail = r"^.*?✗\s*(.*)";
        pass = r"^.*?✓\s*(.*)";
    }
    let log = ansi.replace_all(log, "");
    let log = assertion.replace_all(&log, "");
    let mut map = StatusMap::new();
    let mut suite: Vec<(String, usize)> = Vec::new();
    for section in log.split(" xvfb-run ").skip(1) {
        let section = after_last(section, "Starting browser Chrome");
        for line in section.split('\n') {
            if line.starts_with("TOTAL") {
                break;
            }
            let stripped = py_strip(line);
            if ["ERROR", "LOG", "WARN", "Check", "in"].iter().any(|p| stripped.starts_with(p)) {
                continue;
            }
            let found = fail
                .captures(line)
                .map(|c| (c, OfficialStatus::Failed))
                .or_else(|| pass.captures(line).map(|c| (c, OfficialStatus::Passed)));
            match found {
                Some((caps, status)) => {
                    let test = caps.get(1).map_or("", |m| m.as_str());
                    let mut parts: Vec<&str> = suite_names(&suite).collect();
                    parts.push(test);
                    map.insert(parts.join(" - "), status);
                }
                None => push_suite(&mut suite, line),
            }
        }
    }
    Ok(map)
}

/// Cypress's `Running: <spec> (n of m)` sections: in the text after each, `    1) title` lines
/// fail and `    ✓ title (12ms)` lines pass, named `<suite title>: <test>`.
fn next_v2(log: &str) -> Parsed {
    patterns! {
        running = r"Running:(.*)\)\n{3}\s{2}(.*)\n";
        failure = r"(?m)^\s{4}\d+\)\s(.*)";
        success = r"(?m)^\s{4}✓\s(.*)\(";
    }
    let mut map = StatusMap::new();
    let headers: Vec<regex::Captures<'_>> = running.captures_iter(log).collect();
    for (i, caps) in headers.iter().enumerate() {
        let suite = caps.get(2).map_or("", |m| m.as_str());
        let start = caps.get(0).map_or(0, |m| m.end());
        let end = headers.get(i + 1).and_then(|c| c.get(0)).map_or(log.len(), |m| m.start());
        let section = &log[start..end];
        for test in findall(failure, section, 1) {
            map.insert(format!("{suite}: {}", py_strip(test)), OfficialStatus::Failed);
        }
        for test in findall(success, section, 1) {
            map.insert(format!("{suite}: {}", py_strip(test)), OfficialStatus::Passed);
        }
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Prism: mocha's JSON reporter.

/// After each `./node_modules/.bin/mocha tests/run.js --reporter json`, the text from its first
/// `{` to its last `}` read as JSON (Python's `json.loads`): each of `failures` then `passes` is
/// a list of objects whose `fullTitle` names a failed or passed test. JSON that does not parse
/// raises `JSONDecodeError`, a missing key `KeyError`, a value of the wrong shape `TypeError`.
///
/// Not replicable: a `fullTitle` that is a number, `true`, `false` or `null` becomes a
/// non-string key of swebench's dict; ours records nothing for it (such a key can never equal a
/// test id, so the grading is the same, only the map differs). A lone surrogate escape
/// (`"\ud800"`) is read as U+FFFD.
fn prismjs(log: &str, _: &TestSpec) -> Parsed {
    const COMMAND: &str = "./node_modules/.bin/mocha tests/run.js --reporter json";
    let mut map = StatusMap::new();
    for part in log.split(COMMAND).skip(1) {
        let line = line_of(log, part);
        let body = before_last(after_first(part, "{"), "}");
        let document = format!("{{{body}}}");
        let results = json::parse(&document).map_err(|e| raised(e, line))?;
        for (key, status) in [("failures", OfficialStatus::Failed), ("passes", OfficialStatus::Passed)] {
            let tests = results.key(key).ok_or_else(|| raised("KeyError", line))?;
            let items: &[json::Value] = match tests {
                json::Value::Array(items) => items,
                json::Value::Object(pairs) if pairs.is_empty() => &[],
                json::Value::Str(s) if s.is_empty() => &[],
                _ => return Err(raised("TypeError", line)),
            };
            for item in items {
                let json::Value::Object(_) = item else {
                    return Err(raised("TypeError", line));
                };
                match item.key("fullTitle") {
                    None => return Err(raised("KeyError", line)),
                    Some(json::Value::Str(title)) => map.insert(title.as_str(), status.clone()),
                    Some(json::Value::Array(_) | json::Value::Object(_)) => {
                        return Err(raised("TypeError", line))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(map)
}

/// Python's `json.loads` (the C scanner, `strict=True`), as far as [`prismjs`] needs it.
mod json {
    /// A parsed JSON value (object members in document order, duplicates kept; lookups take the
    /// last, as Python's `dict` does).
    pub enum Value {
        Null,
        Bool,
        Number,
        Str(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn key(&self, name: &str) -> Option<&Value> {
            match self {
                Value::Object(pairs) => pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v),
                _ => None,
            }
        }
    }

    /// Nesting deeper than this raises `RecursionError` in CPython 3.11 at the oracle's stack
    /// depth (about 994 from a top-level call; a little less below a harness).
    const MAX_DEPTH: usize = 985;

    type Error = &'static str;
    const DECODE: Error = "JSONDecodeError";

    pub fn parse(text: &str) -> Result<Value, Error> {
        let mut p = Parser { s: text.as_bytes(), text, i: 0 };
        p.ws();
        let v = p.value(0)?;
        p.ws();
        if p.i != p.s.len() {
            return Err(DECODE);
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        text: &'a str,
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            }
        }

        fn literal(&mut self, word: &str) -> bool {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                true
            } else {
                false
            }
        }

        fn value(&mut self, depth: usize) -> Result<Value, Error> {
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    self.string().map(Value::Str)
                }
                Some(b'{') => {
                    if depth + 1 > MAX_DEPTH {
                        return Err("RecursionError");
                    }
                    self.i += 1;
                    self.object(depth + 1)
                }
                Some(b'[') => {
                    if depth + 1 > MAX_DEPTH {
                        return Err("RecursionError");
                    }
                    self.i += 1;
                    self.array(depth + 1)
                }
                Some(b'n') if self.literal("null") => Ok(Value::Null),
                Some(b't') if self.literal("true") => Ok(Value::Bool),
                Some(b'f') if self.literal("false") => Ok(Value::Bool),
                Some(b'N') if self.literal("NaN") => Ok(Value::Number),
                Some(b'I') if self.literal("Infinity") => Ok(Value::Number),
                Some(b'-') if self.literal("-Infinity") => Ok(Value::Number),
                Some(b'-' | b'0'..=b'9') => self.number(),
                _ => Err(DECODE),
            }
        }

        fn digits(&mut self) -> usize {
            let start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            self.i - start
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`; a `.` or exponent without digits is
        /// not part of the number (what follows then fails to parse).
        fn number(&mut self) -> Result<Value, Error> {
            if self.s[self.i] == b'-' {
                self.i += 1;
            }
            match self.s.get(self.i) {
                Some(b'0') => self.i += 1,
                Some(b'1'..=b'9') => {
                    self.digits();
                }
                _ => return Err(DECODE),
            }
            if self.s.get(self.i) == Some(&b'.') && self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
                self.digits();
            }
            if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
                let save = self.i;
                self.i += 1;
                if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                    self.i += 1;
                }
                if self.digits() == 0 {
                    self.i = save;
                }
            }
            Ok(Value::Number)
        }

        fn hex4(&self, at: usize) -> Option<u32> {
            let h = self.s.get(at..at + 4)?;
            let h = std::str::from_utf8(h).ok()?;
            if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(h, 16).ok()
        }

        /// After the opening quote, up to and past the closing one.
        fn string(&mut self) -> Result<String, Error> {
            let mut out = String::new();
            loop {
                let start = self.i;
                while let Some(&b) = self.s.get(self.i) {
                    if b == b'"' || b == b'\\' || b < 0x20 {
                        break;
                    }
                    self.i += 1;
                }
                // `start..i` ends before an ASCII byte or at the end: char boundaries.
                out.push_str(self.text.get(start..self.i).ok_or(DECODE)?);
                match self.s.get(self.i) {
                    Some(b'"') => {
                        self.i += 1;
                        return Ok(out);
                    }
                    Some(b'\\') => {}
                    _ => return Err(DECODE),
                }
                self.i += 1;
                let esc = *self.s.get(self.i).ok_or(DECODE)?;
                self.i += 1;
                let c = match esc {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    b'u' => {
                        let mut code = self.hex4(self.i).ok_or(DECODE)?;
                        self.i += 4;
                        if (0xD800..0xDC00).contains(&code)
                            && self.s.get(self.i) == Some(&b'\\')
                            && self.s.get(self.i + 1) == Some(&b'u')
                        {
                            let low = self.hex4(self.i + 2).ok_or(DECODE)?;
                            if (0xDC00..0xE000).contains(&low) {
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                                self.i += 6;
                            }
                        }
                        char::from_u32(code).unwrap_or('\u{FFFD}')
                    }
                    _ => return Err(DECODE),
                };
                out.push(c);
            }
        }

        fn object(&mut self, depth: usize) -> Result<Value, Error> {
            let mut pairs = Vec::new();
            self.ws();
            if self.s.get(self.i) == Some(&b'}') {
                self.i += 1;
                return Ok(Value::Object(pairs));
            }
            loop {
                if self.s.get(self.i) != Some(&b'"') {
                    return Err(DECODE);
                }
                self.i += 1;
                let key = self.string()?;
                self.ws();
                if self.s.get(self.i) != Some(&b':') {
                    return Err(DECODE);
                }
                self.i += 1;
                self.ws();
                let value = self.value(depth)?;
                pairs.push((key, value));
                self.ws();
                match self.s.get(self.i) {
                    Some(b'}') => {
                        self.i += 1;
                        return Ok(Value::Object(pairs));
                    }
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                    }
                    _ => return Err(DECODE),
                }
            }
        }

        fn array(&mut self, depth: usize) -> Result<Value, Error> {
            let mut items = Vec::new();
            self.ws();
            if self.s.get(self.i) == Some(&b']') {
                self.i += 1;
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth)?);
                self.ws();
                match self.s.get(self.i) {
                    Some(b']') => {
                        self.i += 1;
                        return Ok(Value::Array(items));
                    }
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                    }
                    _ => return Err(DECODE),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Quarto: Deno's test runner.

/// Deno's `[smoke] …`/`[unit] …` lines up to the first `ERRORS` or `failures:`: `/tmp/<x>.qmd`
/// and `/tmp/<x>/` become `/tmp/<n>` (numbered in order of first sight), the name is the text
/// before `...`, stripped; `32mok` passes, `31mFAILED` fails, no status fails unless the name
/// already has one. Lines starting `test result:`, step summaries (`passed`, `failed` and
/// `steps`) and `34mINFO` lines are skipped.
fn quarto_cli(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        prefix = r"\[(smoke|unit)\]";
        tmp_qmd = r"/tmp/(\w+)\.qmd";
        tmp_dir = r"/tmp/(\w+)/";
    }
    let mut tmp_keys: std::collections::HashMap<String, usize> = Default::default();
    let mut map = StatusMap::new();
    for raw in log.split('\n') {
        if raw.contains("ERRORS") || raw.contains("failures:") {
            break;
        }
        if !prefix.is_match(raw) {
            continue;
        }
        let mut line = raw.to_string();
        for pattern in [tmp_qmd, tmp_dir] {
            let Some(found) = pattern.find(&line) else {
                continue;
            };
            let next_n = tmp_keys.len();
            let n = *tmp_keys.entry(found.as_str().to_string()).or_insert(next_n);
            line = pattern.replace_all(&line, NoExpand(&format!("/tmp/{n}"))).into_owned();
        }
        let test = py_strip(line.split("...").next().unwrap_or(""));
        let reject = line.starts_with("test result:")
            || (line.contains("passed") && line.contains("failed") && line.contains("steps"))
            || line.contains("34mINFO");
        if reject {
            continue;
        }
        if line.contains("32mok") {
            map.insert(test, OfficialStatus::Passed);
        } else if line.contains("31mFAILED") {
            map.insert(test, OfficialStatus::Failed);
        } else if !map.contains(test) {
            map.insert(test, OfficialStatus::Failed);
        }
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Generic runners.

/// Jest `--verbose`: `✓ name (12 ms)`, `✕ name`, `○ skipped name`.
fn jest(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        result = r"^\s*(✓|✕|○)\s(.+?)(?:\s\((\d+\s*m?s)\))?$";
    }
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        let Some(caps) = result.captures(py_strip(line)) else {
            continue;
        };
        let test = py_strip(caps.get(2).map_or("", |m| m.as_str()));
        match caps.get(1).map_or("", |m| m.as_str()) {
            "✓" => map.insert(test, OfficialStatus::Passed),
            "✕" => map.insert(test, OfficialStatus::Failed),
            _ => map.insert(test, OfficialStatus::Skipped),
        }
    }
    Ok(map)
}

/// `[PASSED] name` / `[FAILED] name`, the eval script's jq rendering of `jest --json`.
fn jest_json(log: &str, _: &TestSpec) -> Parsed {
    Ok(line_matches(log, py_re!(r"^\[(PASSED|FAILED)\]\s(.+)$"), |caps| {
        match caps.get(1)?.as_str() {
            "PASSED" => Some((2, OfficialStatus::Passed)),
            _ => Some((2, OfficialStatus::Failed)),
        }
    }))
}

/// Vitest `--reporter=verbose`: `✓ name 12ms`, `× name`, `↓ name [skipped]`.
fn vitest(log: &str, _: &TestSpec) -> Parsed {
    Ok(line_matches(log, py_re!(r"^\s*(✓|×|↓)\s(.+?)(?:\s(\d+\s*m?s?|\[skipped\]))?$"), |caps| {
        match caps.get(1)?.as_str() {
            "✓" => Some((2, OfficialStatus::Passed)),
            "×" => Some((2, OfficialStatus::Failed)),
            _ => Some((2, OfficialStatus::Skipped)),
        }
    }))
}

/// Karma's mocha reporter between `Starting browser` and `SUMMARY:`: an indented line without
/// a mark opens a suite when deeper than the last and closes one when shallower; `✔`/`✖` lines
/// are tests named `<suite > …> > <test>`. Closing a suite when none is open raises
/// `IndexError`, as swebench's `pop()` does.
fn karma(log: &str, _: &TestSpec) -> Parsed {
    patterns! {
        entry = r"^(\s*)?([✔✖])?\s(.*)$";
    }
    let mut map = StatusMap::new();
    let mut current_indent: isize = -1;
    let mut suite: Vec<&str> = Vec::new();
    let mut started = false;
    for (n, line) in log.split('\n').enumerate() {
        if line.starts_with("SUMMARY:") {
            return Ok(map);
        }
        if line.contains("Starting browser") {
            started = true;
            continue;
        }
        if !started {
            continue;
        }
        let Some(caps) = entry.captures(line) else {
            continue;
        };
        let lead = caps.get(1).map_or("", |m| m.as_str());
        let status = caps.get(2).map(|m| m.as_str());
        let name = caps.get(3).map_or("", |m| m.as_str());
        if !lead.is_empty() && status.is_none() {
            let depth = lead.chars().count() as isize;
            if depth > current_indent {
                current_indent = depth;
                suite.push(name);
            } else if depth < current_indent {
                current_indent = depth;
                suite.pop().ok_or_else(|| raised("IndexError", n + 1))?;
                continue;
            }
        }
        if let Some(mark) = status {
            let mut parts = suite.clone();
            parts.push(name);
            let status = if mark == "✔" { OfficialStatus::Passed } else { OfficialStatus::Failed };
            map.insert(parts.join(" > "), status);
        }
    }
    Ok(map)
}

/// TAP: `ok 1 name`, `not ok 2 name`.
fn tap(log: &str, _: &TestSpec) -> Parsed {
    Ok(line_matches(log, py_re!(r"^(ok|not ok) (\d+) (.+)$"), |caps| {
        match caps.get(1)?.as_str() {
            "ok" => Some((3, OfficialStatus::Passed)),
            _ => Some((3, OfficialStatus::Failed)),
        }
    }))
}

/// immutable-js: [`jest`] for pull request 2006, [`jest_json`] for 2005 (the last `-`-separated
/// field of the instance id); any other instance raises `ValueError`, as swebench's does.
fn immutable_js(log: &str, spec: &TestSpec) -> Parsed {
    match after_last(spec.instance_id, "-") {
        "2006" => jest(log, spec),
        "2005" => jest_json(log, spec),
        _ => Err(raised("ValueError", 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: Parsed) -> Vec<(String, &'static str)> {
        r.map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        OfficialStatus::Passed => "PASSED",
                        OfficialStatus::Failed => "FAILED",
                        _ => "OTHER",
                    };
                    (k.to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default()
    }

    #[test]
    fn python_float_and_xml_blocks() {
        assert_eq!(py_float(" 1_0 "), Some(10.0));
        assert_eq!(py_float("\u{ff13}"), Some(3.0));
        assert_eq!(py_float(""), None);
        assert_eq!(py_float("1__0"), None);
        assert_eq!(py_float("-inf"), Some(f64::NEG_INFINITY));
        assert!(py_float("nan").is_some_and(f64::is_nan));
        assert_eq!(py_float("0x10"), None);
        assert_eq!(remove_xml_blocks("a<b>x<b>y</b>z".into()), "a<b>z");
        assert_eq!(remove_xml_blocks("<a>1</b><b>2</b>".into()), "<a>1</b>");
    }

    #[test]
    fn raises_where_swebench_raises() {
        let spec = TestSpec::default();
        let karma_log = "Starting browser X\n      a\n    b\n  c\n";
        assert_eq!(karma(karma_log, &spec), Err(raised("IndexError", 4)));
        let prism_log = "x\n./node_modules/.bin/mocha tests/run.js --reporter json\n{\"passes\": []}";
        assert_eq!(prismjs(prism_log, &spec), Err(raised("KeyError", 2)));
        let prism_log = "./node_modules/.bin/mocha tests/run.js --reporter json {\"failures\": [,]}";
        assert_eq!(prismjs(prism_log, &spec), Err(raised("JSONDecodeError", 1)));
        assert_eq!(lighthouse("", &spec), Err(raised("ValueError", 0)));
        assert_eq!(immutable_js("", &spec), Err(raised("ValueError", 0)));
        let calypso_log = "+ ./node_modules/.bin/jest x\n\u{2713} top (1ms) trailing\n";
        assert_eq!(calypso(calypso_log, &spec), Err(raised("AttributeError", 2)));
    }

    #[test]
    fn reads_each_runner() {
        let spec = TestSpec { instance_id: "immutable-js__immutable-js-2006", version: "1.27" };
        let prism = "./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": [{\"fullTitle\": \"f\"}], \"passes\": [{\"fullTitle\": \"p\", \"fullTitle\": \"q\"}, {\"fullTitle\": NaN}]}";
        assert_eq!(keys(prismjs(prism, &spec)), vec![("f".into(), "FAILED"), ("q".into(), "PASSED")]);
        assert_eq!(keys(immutable_js("  \u{2713} a (3 ms)\n\u{2715} b", &spec)), vec![("a".into(), "PASSED"), ("b".into(), "FAILED")]);
        let next_log = "Running:  a.tsx  (1 of 1)\n\n\n  Suite\n    \u{2713} ok one (3ms)\n    1) bad\n";
        assert_eq!(keys(next(next_log, &spec)), vec![("Suite: bad".into(), "FAILED"), ("Suite: ok one".into(), "PASSED")]);
        let p5 = "  1) S\n    t:\n";
        assert_eq!(keys(p5js(p5, &spec)), vec![("S:t".into(), "FAILED")]);
    }
}
