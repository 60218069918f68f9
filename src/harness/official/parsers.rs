//! The official SWE-bench log parsers by name (swebench 5.0.2 `PARSER_REGISTRY`, its Python,
//! Rust and Go entries) and the repository → parser table.
//!
//! One registry table: every name swebench registers, with the implementation it runs. Most
//! Python names are aliases of `parse_log_pytest`, `parse_log_pytest_options` or
//! `parse_log_pytest_v2`; the table says so in `alias_of` instead of repeating code. The pytest
//! family shares one summary-line reader.
//!
//! A parser never panics. Where swebench's own parser raises (Django's `FAIL:`/`ERROR:` line with
//! no test name after it: `IndexError`), ours returns [`ParseError::Raised`]: swebench would
//! abort that instance's evaluation, so no verdict may be drawn from it.
//!
//! Bounds: [`parse`] refuses a log over [`MAX_LOG_BYTES`] ([`ParseError::TooLarge`]; swebench
//! has no bound, so the fail-closed reading makes it an infrastructure failure,
//! `official_infra:log_too_large`). Below it every parser is linear in the log: one pass over
//! the lines with per-line work linear in the line, and whole-log patterns of the `regex` crate
//! (finite automata, no backtracking). Measured on adversarial shapes in
//! `benches/results/fuzz.md`.

use super::pytext::{before_first, before_last, py_split, py_strip, PY_SPACE_CLASS};
use super::status::{OfficialStatus, StatusMap, OFFICIAL_STATUSES};
use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Where swebench's parser would raise instead of returning a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParserRaised {
    /// The Python exception swebench raises.
    pub exception: &'static str,
    /// 1-based line of the log that triggers it.
    pub line: usize,
}

/// Why [`parse`] produced no status map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// No parser of that name in the registry.
    UnknownParser(String),
    /// swebench's parser raises on this log.
    Raised(ParserRaised),
    /// The log is over [`MAX_LOG_BYTES`]; it was not read.
    TooLarge { bytes: usize },
}

/// The largest log [`parse`] reads: 64 MiB, the sandbox's default cap on an on-disk log.
pub const MAX_LOG_BYTES: usize = 64 << 20;

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::UnknownParser(name) => write!(f, "unknown SWE-bench log parser `{name}`"),
            ParseError::Raised(r) => {
                write!(
                    f,
                    "swebench's parser raises {} on line {}",
                    r.exception, r.line
                )
            }
            ParseError::TooLarge { bytes } => {
                write!(f, "log of {bytes} bytes is over the {MAX_LOG_BYTES}-byte bound")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// A log parser: the log text in, swebench's status map (or where it raises) out.
pub type ParserFn = fn(&str) -> Result<StatusMap, ParserRaised>;

/// One registry entry.
pub struct ParserEntry {
    /// swebench's registry name.
    pub name: &'static str,
    /// The parser this name is bound to in swebench (`None`: its own implementation).
    pub alias_of: Option<&'static str>,
    pub run: ParserFn,
}

const fn own(name: &'static str, run: ParserFn) -> ParserEntry {
    ParserEntry {
        name,
        alias_of: None,
        run,
    }
}

const fn alias(name: &'static str, of: &'static str, run: ParserFn) -> ParserEntry {
    ParserEntry {
        name,
        alias_of: Some(of),
        run,
    }
}

/// Every implemented registry name, in swebench's registry order.
pub const PARSERS: &[ParserEntry] = &[
    own("parse_log_pytest", pytest),
    own("parse_log_pytest_options", pytest_options),
    own("parse_log_django", django),
    own("parse_log_pytest_v2", pytest_v2),
    own("parse_log_seaborn", seaborn),
    own("parse_log_sympy", sympy),
    own("parse_log_matplotlib", matplotlib),
    alias("parse_log_astroid", "parse_log_pytest", pytest),
    alias("parse_log_flask", "parse_log_pytest", pytest),
    alias("parse_log_marshmallow", "parse_log_pytest", pytest),
    alias("parse_log_pvlib", "parse_log_pytest", pytest),
    alias("parse_log_pyvista", "parse_log_pytest", pytest),
    alias("parse_log_sqlfluff", "parse_log_pytest", pytest),
    alias("parse_log_xarray", "parse_log_pytest", pytest),
    alias(
        "parse_log_pydicom",
        "parse_log_pytest_options",
        pytest_options,
    ),
    alias(
        "parse_log_requests",
        "parse_log_pytest_options",
        pytest_options,
    ),
    alias(
        "parse_log_pylint",
        "parse_log_pytest_options",
        pytest_options,
    ),
    alias("parse_log_astropy", "parse_log_pytest_v2", pytest_v2),
    alias("parse_log_scikit", "parse_log_pytest_v2", pytest_v2),
    alias("parse_log_sphinx", "parse_log_pytest_v2", pytest_v2),
    own("parse_log_gotest", gotest),
    own("parse_log_cargo", cargo),
];

/// The registry names, in [`PARSERS`] order.
pub const PARSER_NAMES: [&str; PARSERS.len()] = names();

const fn names() -> [&'static str; PARSERS.len()] {
    let mut out = [""; PARSERS.len()];
    let mut i = 0;
    while i < PARSERS.len() {
        out[i] = PARSERS[i].name;
        i += 1;
    }
    out
}

/// swebench's `MAP_REPO_TO_PARSER_PY`, `_RUST` and `_GO`: repository → registry name.
pub const REPO_PARSERS: &[(&str, &str)] = &[
    ("astropy/astropy", "parse_log_astropy"),
    ("django/django", "parse_log_django"),
    ("marshmallow-code/marshmallow", "parse_log_marshmallow"),
    ("matplotlib/matplotlib", "parse_log_matplotlib"),
    ("mwaskom/seaborn", "parse_log_seaborn"),
    ("pallets/flask", "parse_log_flask"),
    ("psf/requests", "parse_log_requests"),
    ("pvlib/pvlib-python", "parse_log_pvlib"),
    ("pydata/xarray", "parse_log_xarray"),
    ("pydicom/pydicom", "parse_log_pydicom"),
    ("pylint-dev/astroid", "parse_log_astroid"),
    ("pylint-dev/pylint", "parse_log_pylint"),
    ("pytest-dev/pytest", "parse_log_pytest"),
    ("pyvista/pyvista", "parse_log_pyvista"),
    ("scikit-learn/scikit-learn", "parse_log_scikit"),
    ("sqlfluff/sqlfluff", "parse_log_sqlfluff"),
    ("sphinx-doc/sphinx", "parse_log_sphinx"),
    ("sympy/sympy", "parse_log_sympy"),
    ("burntsushi/ripgrep", "parse_log_cargo"),
    ("sharkdp/bat", "parse_log_cargo"),
    ("astral-sh/ruff", "parse_log_cargo"),
    ("tokio-rs/tokio", "parse_log_cargo"),
    ("uutils/coreutils", "parse_log_cargo"),
    ("nushell/nushell", "parse_log_cargo"),
    ("tokio-rs/axum", "parse_log_cargo"),
    ("caddyserver/caddy", "parse_log_gotest"),
    ("hashicorp/terraform", "parse_log_gotest"),
    ("prometheus/prometheus", "parse_log_gotest"),
    ("gohugoio/hugo", "parse_log_gotest"),
    ("gin-gonic/gin", "parse_log_gotest"),
];

/// The parser swebench binds to a registry name.
pub fn parser(name: &str) -> Option<ParserFn> {
    PARSERS.iter().find(|e| e.name == name).map(|e| e.run)
}

/// The registry name swebench uses for a repository's logs.
pub fn parser_for_repo(repo: &str) -> Option<&'static str> {
    REPO_PARSERS
        .iter()
        .find(|(r, _)| *r == repo)
        .map(|(_, p)| *p)
}

/// Runs the named parser over a log of at most [`MAX_LOG_BYTES`].
pub fn parse(name: &str, log: &str) -> Result<StatusMap, ParseError> {
    let run = parser(name).ok_or_else(|| ParseError::UnknownParser(name.to_string()))?;
    if log.len() > MAX_LOG_BYTES {
        return Err(ParseError::TooLarge { bytes: log.len() });
    }
    run(log).map_err(ParseError::Raised)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// A lazily compiled constant pattern (`None` would mean a bug in the pattern text; the parsers
/// then record nothing rather than panic).
fn lazy(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

fn starts_with_status(line: &str) -> bool {
    OFFICIAL_STATUSES.iter().any(|s| line.starts_with(s))
}

fn ends_with_status(line: &str) -> bool {
    OFFICIAL_STATUSES.iter().any(|s| line.ends_with(s))
}

/// pytest's `SKIPPED [N] path:line: reason` summary, whose `[N]` is a count, not a test.
fn is_skip_summary(status: &str, name: &str) -> bool {
    static COUNT: OnceLock<Option<Regex>> = OnceLock::new();
    status == "SKIPPED" && lazy(&COUNT, r"^\[\d+\]$").is_some_and(|re| re.is_match(name))
}

/// The `-rA` short-summary reading of `parse_log_pytest` and its relatives: a line starting
/// with a status word, `FAILED` lines with every ` - ` closed up, status = first token,
/// test = second token passed through `name`.
fn pytest_summary(
    log: &str,
    prepare: fn(&str) -> Cow<'_, str>,
    name: fn(&str) -> Cow<'_, str>,
) -> StatusMap {
    let mut map = StatusMap::new();
    for raw in log.split('\n') {
        let mut line = prepare(raw);
        if !starts_with_status(&line) {
            continue;
        }
        if line.starts_with("FAILED") {
            line = Cow::Owned(line.replace(" - ", " "));
        }
        let tokens = py_split(&line);
        let (Some(status), Some(test)) = (tokens.first(), tokens.get(1)) else {
            continue;
        };
        if is_skip_summary(status, test) {
            continue;
        }
        map.insert(name(test).into_owned(), OfficialStatus::from_token(status));
    }
    map
}

fn unchanged(s: &str) -> Cow<'_, str> {
    Cow::Borrowed(s)
}

// ---------------------------------------------------------------------------------------------
// The parsers.

fn pytest(log: &str) -> Result<StatusMap, ParserRaised> {
    Ok(pytest_summary(log, unchanged, unchanged))
}

fn matplotlib(log: &str) -> Result<StatusMap, ParserRaised> {
    fn mouse_buttons(line: &str) -> Cow<'_, str> {
        Cow::Owned(
            line.replace("MouseButton.LEFT", "1")
                .replace("MouseButton.RIGHT", "3"),
        )
    }
    Ok(pytest_summary(log, mouse_buttons, unchanged))
}

fn pytest_options(log: &str) -> Result<StatusMap, ParserRaised> {
    Ok(pytest_summary(log, unchanged, shorten_path_option))
}

/// `test[option]` with an absolute-path option keeps only the path's last component.
fn shorten_path_option(test: &str) -> Cow<'_, str> {
    static OPTION: OnceLock<Option<Regex>> = OnceLock::new();
    let Some(caps) = lazy(&OPTION, r"(.*?)\[(.*)\]").and_then(|re| re.captures(test)) else {
        return Cow::Borrowed(test);
    };
    let main = caps.get(1).map_or("", |m| m.as_str());
    let option = caps.get(2).map_or("", |m| m.as_str());
    let option = if option.starts_with('/') && !option.starts_with("//") && !option.contains('*') {
        format!("/{}", option.rsplit('/').next().unwrap_or(""))
    } else {
        option.to_string()
    };
    Cow::Owned(format!("{main}[{option}]"))
}

fn pytest_v2(log: &str) -> Result<StatusMap, ParserRaised> {
    static COLOUR: OnceLock<Option<Regex>> = OnceLock::new();
    let mut map = StatusMap::new();
    for raw in log.split('\n') {
        let uncoloured = match lazy(&COLOUR, r"\[(\d+)m") {
            Some(re) => re.replace_all(raw, ""),
            None => Cow::Borrowed(raw),
        };
        let line: String = uncoloured
            .chars()
            .filter(|c| !('\u{1}'..='\u{1f}').contains(c))
            .collect();
        if starts_with_status(&line) {
            let kept = if line.starts_with("FAILED") {
                before_first(&line, " - ")
            } else {
                &line
            };
            let tokens = py_split(kept);
            if tokens.len() >= 2 && !is_skip_summary(tokens[0], tokens[1]) {
                map.insert(tokens[1..].join(" "), OfficialStatus::from_token(tokens[0]));
            }
        } else if ends_with_status(&line) {
            let tokens = py_split(&line);
            if let Some((status, test)) = tokens.split_last().filter(|(_, t)| !t.is_empty()) {
                map.insert(test.join(" "), OfficialStatus::from_token(status));
            }
        }
    }
    Ok(map)
}

fn seaborn(log: &str) -> Result<StatusMap, ParserRaised> {
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        let parts = py_split(line);
        let [first, second, ..] = parts[..] else {
            continue;
        };
        if line.starts_with("FAILED") {
            map.insert(second, OfficialStatus::Failed);
        } else if line.contains(" PASSED ") {
            if second == "PASSED" {
                map.insert(first, OfficialStatus::Passed);
            }
        } else if line.starts_with("PASSED") {
            map.insert(second, OfficialStatus::Passed);
        }
    }
    Ok(map)
}

fn sympy(log: &str) -> Result<StatusMap, ParserRaised> {
    static HEADER: OnceLock<Option<Regex>> = OnceLock::new();
    let mut map = StatusMap::new();
    if let Some(re) = lazy(&HEADER, r"(_*) (.*)\.py:(.*) (_*)") {
        for caps in re.captures_iter(log) {
            let file = caps.get(2).map_or("", |m| m.as_str());
            let rest = caps.get(3).map_or("", |m| m.as_str());
            map.insert(format!("{file}.py:{rest}"), OfficialStatus::Failed);
        }
    }
    const ENDINGS: [(&str, OfficialStatus); 3] = [
        (" E", OfficialStatus::Error),
        (" F", OfficialStatus::Failed),
        (" ok", OfficialStatus::Passed),
    ];
    for raw in log.split('\n') {
        let line = py_strip(raw);
        if !line.starts_with("test_") {
            continue;
        }
        for (ending, status) in &ENDINGS {
            if let (true, Some(test)) = (line.ends_with(ending), py_split(line).first()) {
                map.insert(*test, status.clone());
            }
        }
    }
    Ok(map)
}

fn django(log: &str) -> Result<StatusMap, ParserRaised> {
    const VERSION_NOTE: &str = "--version is equivalent to version";
    const PASS_SUFFIXES: [&str; 3] = [" ... ok", " ... OK", " ...  OK"];
    const DJANGO_7188: &str = "Applying sites.0002_alter_domain_unique...test_no_migrations";
    let mut map = StatusMap::new();
    let mut prev_test: Option<&str> = None;
    for (i, raw) in log.split('\n').enumerate() {
        let mut line = py_strip(raw);
        if line.contains(VERSION_NOTE) {
            map.insert(VERSION_NOTE, OfficialStatus::Passed);
        }
        if line.contains(" ... ") {
            prev_test = Some(before_first(line, " ... "));
        }
        if let Some(suffix) = PASS_SUFFIXES.iter().find(|s| line.ends_with(**s)) {
            if line.starts_with(DJANGO_7188) {
                line = py_strip(line.split_once("...").map_or(line, |(_, rest)| rest));
            }
            map.insert(before_last(line, suffix), OfficialStatus::Passed);
        }
        if line.contains(" ... skipped") {
            map.insert(before_first(line, " ... skipped"), OfficialStatus::Skipped);
        }
        for (suffix, header, status) in [
            (" ... FAIL", "FAIL:", OfficialStatus::Failed),
            (" ... ERROR", "ERROR:", OfficialStatus::Error),
        ] {
            if line.ends_with(suffix) {
                map.insert(before_first(line, suffix), status.clone());
            }
            if line.starts_with(header) {
                let test = py_split(line).get(1).copied();
                let test = test.ok_or(ParserRaised {
                    exception: "IndexError",
                    line: i + 1,
                })?;
                map.insert(test, status);
            }
        }
        if let (true, Some(test)) = (line.starts_with("ok"), prev_test) {
            map.insert(test, OfficialStatus::Passed);
        }
    }
    for test in django_interrupted_passes(log) {
        map.insert(test, OfficialStatus::Passed);
    }
    Ok(map)
}

/// Tests whose `ok` landed on the next line after one of three known multi-line prints.
fn django_interrupted_passes(log: &str) -> Vec<&str> {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        let s = PY_SPACE_CLASS;
        [
            format!(r"(?m)^(.*?){s}\.\.\.{s}Testing against Django installed in ((?s:.*?)) silenced\)\.\nok$"),
            format!(r"(?m)^(.*?){s}\.\.\.{s}Internal Server Error: /(.*)/\nok$"),
            format!(r"(?m)^(.*?){s}\.\.\.{s}System check identified no issues \(0 silenced\)\nok$"),
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    });
    patterns
        .iter()
        .flat_map(|re| {
            re.captures_iter(log)
                .filter_map(|c| c.get(1).map(|m| m.as_str()))
        })
        .collect()
}

fn cargo(log: &str) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let pattern = format!(r"^test{s}+([^\s\x1C-\x1F]+){s}+\.\.\.{s}+(\w+)$");
    Ok(line_matches(
        log,
        lazy(&RESULT, &pattern),
        |caps| match caps.get(2)?.as_str() {
            "ok" => Some((1, OfficialStatus::Passed)),
            "FAILED" => Some((1, OfficialStatus::Failed)),
            _ => None,
        },
    ))
}

fn gotest(log: &str) -> Result<StatusMap, ParserRaised> {
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

/// For each stripped line the pattern matches, `pick` names the capture group holding the test
/// and the status to record.
fn line_matches(
    log: &str,
    re: Option<&Regex>,
    pick: impl Fn(&regex::Captures<'_>) -> Option<(usize, OfficialStatus)>,
) -> StatusMap {
    let mut map = StatusMap::new();
    let Some(re) = re else { return map };
    for raw in log.split('\n') {
        let Some(caps) = re.captures(py_strip(raw)) else {
            continue;
        };
        if let Some((group, status)) = pick(&caps) {
            if let Some(test) = caps.get(group) {
                map.insert(test.as_str(), status);
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(name: &str, log: &str) -> Vec<(String, String)> {
        parse(name, log)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.as_str().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn registry_holds_every_python_name_and_resolves_aliases() {
        assert_eq!(PARSER_NAMES.len(), 22);
        let sample = "PASSED a.py::t[/x/y.py]\nFAILED b.py::u - e\n\u{1b}[32mPASSED\u{1b}[0m c d\nt.py::v PASSED";
        for e in PARSERS {
            if let Some(target) = e.alias_of {
                let canonical = PARSERS.iter().find(|c| c.name == target);
                let same = canonical
                    .filter(|c| c.alias_of.is_none())
                    .map(|c| (c.run)(sample));
                assert_eq!(same, Some((e.run)(sample)), "{}", e.name);
            }
        }
        for (_, p) in REPO_PARSERS {
            assert!(parser(p).is_some(), "{p}");
        }
        assert_eq!(parser_for_repo("django/django"), Some("parse_log_django"));
        assert!(matches!(
            parse("parse_log_nope", ""),
            Err(ParseError::UnknownParser(_))
        ));
    }

    #[test]
    fn pytest_failed_reason_and_skip_count() {
        let log =
            "PASSED a.py::t[x]\nFAILED a.py::u - assert 1 - 2\nSKIPPED [2] a.py:3: no\nPASSED";
        assert_eq!(
            pairs("parse_log_pytest", log),
            vec![
                ("a.py::t[x]".into(), "PASSED".into()),
                ("a.py::u".into(), "FAILED".into())
            ]
        );
    }

    #[test]
    fn django_missing_name_is_where_swebench_raises() {
        let err = parse("parse_log_django", "test_a (m.C) ... ok\nFAIL:\n");
        assert_eq!(
            err,
            Err(ParseError::Raised(ParserRaised {
                exception: "IndexError",
                line: 2
            }))
        );
    }
}
