//! The official SWE-bench log parsers by name (swebench 5.0.2 `PARSER_REGISTRY`, every
//! language: SWE-bench, SWE-bench Multilingual) and the repository → parser tables.
//!
//! One module per swebench file (`log_parsers/python.py` → [`python`], `c.py` → [`c`], …),
//! each with its table of registry entries ([`ParserEntry`]) and its repository map
//! (swebench's `MAP_REPO_TO_PARSER_<LANG>`); [`LANGUAGES`] lists them, so the registry is their
//! union in swebench's registry order. Where swebench binds several names to one function
//! (`parse_log_flask` → `parse_log_pytest`), the entry says so in `alias_of` instead of
//! repeating code.
//!
//! A parser reads the log and, like swebench's, the instance's [`TestSpec`] (four JavaScript
//! and Ruby parsers choose a format by instance id or version).
//!
//! A parser never panics. Where swebench's own parser raises (Django's `FAIL:`/`ERROR:` line with
//! no test name after it: `IndexError`; doctest's XML that does not parse), ours returns
//! [`ParseError::Raised`]: swebench would abort that instance's evaluation, so no verdict may be
//! drawn from it.
//!
//! Python semantics are kept where they decide a result: `str.strip`/`split` and `\s` by
//! `str.isspace` ([`super::pytext`]), `\w` by `str.isalnum` ([`PY_WORD_CLASS`]), `re.match`
//! anchoring, `$` before a final newline, lengths in code points.
//!
//! Bounds: [`parse`] refuses a log over [`MAX_LOG_BYTES`] ([`ParseError::TooLarge`]; swebench
//! has no bound, so the fail-closed reading makes it an infrastructure failure,
//! `official_infra:log_too_large`). Below it the line parsers are linear in the log (one pass
//! over the lines, per-line work linear in the line) and whole-log patterns run on the `regex`
//! crate (finite automata, no backtracking), except p5.js's `remove_xml_blocks`, whose loop is
//! quadratic in the log as swebench's is ([`javascript`]). Measured on adversarial shapes in
//! `benches/results/fuzz.md`.

pub mod c;
pub mod go;
pub mod java;
pub mod javascript;
pub mod php;
pub mod python;
pub mod ruby;
pub mod rust;

use super::pytext::py_strip;
use super::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// Where swebench's parser would raise instead of returning a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParserRaised {
    /// The Python exception swebench raises.
    pub exception: &'static str,
    /// 1-based line of the log that triggers it (0: the instance, not a line, does).
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

/// The fields of swebench's `TestSpec` a parser may read: `parse_log_jekyll` and
/// `parse_log_immutable_js` pick a format by the instance id, `parse_log_next` and
/// `parse_log_lighthouse` by the version. [`TestSpec::default`] (both empty) is what a caller
/// without an instance passes; those four parsers then raise as swebench's would.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TestSpec<'a> {
    pub instance_id: &'a str,
    pub version: &'a str,
}

/// A parser by registry name, with the instance it reads for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogParser<'a> {
    pub name: &'a str,
    pub spec: TestSpec<'a>,
}

impl<'a> LogParser<'a> {
    pub fn new(name: &'a str, instance_id: &'a str, version: &'a str) -> Self {
        LogParser {
            name,
            spec: TestSpec {
                instance_id,
                version,
            },
        }
    }
}

impl<'a> From<&'a str> for LogParser<'a> {
    fn from(name: &'a str) -> Self {
        LogParser {
            name,
            spec: TestSpec::default(),
        }
    }
}

impl<'a> From<&'a String> for LogParser<'a> {
    fn from(name: &'a String) -> Self {
        LogParser::from(name.as_str())
    }
}

impl std::fmt::Display for LogParser<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A log parser: the log text and the instance in, swebench's status map (or where it raises)
/// out.
pub type ParserFn = fn(&str, &TestSpec<'_>) -> Result<StatusMap, ParserRaised>;

/// One registry entry.
pub struct ParserEntry {
    /// swebench's registry name.
    pub name: &'static str,
    /// The parser this name is bound to in swebench (`None`: its own implementation).
    pub alias_of: Option<&'static str>,
    pub run: ParserFn,
}

pub(crate) const fn own(name: &'static str, run: ParserFn) -> ParserEntry {
    ParserEntry {
        name,
        alias_of: None,
        run,
    }
}

pub(crate) const fn alias(name: &'static str, of: &'static str, run: ParserFn) -> ParserEntry {
    ParserEntry {
        name,
        alias_of: Some(of),
        run,
    }
}

/// One of swebench's `log_parsers/<language>.py` files: its registry entries and its
/// repository map.
pub struct Language {
    /// The language as reports name it (`python`, `javascript`, `c`, …).
    pub name: &'static str,
    pub parsers: &'static [ParserEntry],
    /// swebench's `MAP_REPO_TO_PARSER_<LANG>`: repository → the function's name. A few
    /// JavaScript repositories name a function swebench never registered (`parse_plotly_js`):
    /// such a repository has a language but no registry parser.
    pub repos: &'static [(&'static str, &'static str)],
}

/// Functions swebench's repository maps name that its registry does not: a 5.x row cannot
/// name them, so they are not implemented.
pub const UNREGISTERED: &[&str] =
    &["parse_plotly_js", "parse_log_cypress", "parse_log_emotion"];

/// Every language, in swebench's registry order.
pub const LANGUAGES: &[Language] = &[
    python::LANGUAGE,
    javascript::LANGUAGE,
    c::LANGUAGE,
    go::LANGUAGE,
    java::LANGUAGE,
    php::LANGUAGE,
    ruby::LANGUAGE,
    rust::LANGUAGE,
    c::LANGUAGE_CPP,
];

const fn registry_len() -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < LANGUAGES.len() {
        n += LANGUAGES[i].parsers.len();
        i += 1;
    }
    n
}

/// How many registry names are implemented.
pub const PARSER_COUNT: usize = registry_len();

/// The registry names, language by language.
pub const PARSER_NAMES: [&str; PARSER_COUNT] = names();

const fn names() -> [&'static str; PARSER_COUNT] {
    let mut out = [""; PARSER_COUNT];
    let (mut i, mut k) = (0, 0);
    while i < LANGUAGES.len() {
        let mut j = 0;
        while j < LANGUAGES[i].parsers.len() {
            out[k] = LANGUAGES[i].parsers[j].name;
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// Every registry entry.
pub fn entries() -> impl Iterator<Item = &'static ParserEntry> {
    LANGUAGES.iter().flat_map(|l| l.parsers.iter())
}

/// The parser swebench binds to a registry name.
pub fn parser(name: &str) -> Option<ParserFn> {
    entries().find(|e| e.name == name).map(|e| e.run)
}

/// The registry name swebench uses for a repository's logs (`None` for a repository it does
/// not map, or maps to an unregistered function).
pub fn parser_for_repo(repo: &str) -> Option<&'static str> {
    let (_, name) = LANGUAGES.iter().flat_map(|l| l.repos.iter()).find(|(r, _)| *r == repo)?;
    parser(name).map(|_| *name)
}

/// The language swebench files a repository under (`None` for a repository it does not map).
pub fn language_for_repo(repo: &str) -> Option<&'static str> {
    LANGUAGES
        .iter()
        .find(|l| l.repos.iter().any(|(r, _)| *r == repo))
        .map(|l| l.name)
}

/// The language of a registry parser's logs.
pub fn language_for_parser(name: &str) -> Option<&'static str> {
    LANGUAGES
        .iter()
        .find(|l| l.parsers.iter().any(|e| e.name == name))
        .map(|l| l.name)
}

/// Runs the named parser over a log of at most [`MAX_LOG_BYTES`].
pub fn parse<'a>(parser: impl Into<LogParser<'a>>, log: &str) -> Result<StatusMap, ParseError> {
    let parser = parser.into();
    let run = self::parser(parser.name)
        .ok_or_else(|| ParseError::UnknownParser(parser.name.to_string()))?;
    if log.len() > MAX_LOG_BYTES {
        return Err(ParseError::TooLarge { bytes: log.len() });
    }
    run(log, &parser.spec).map_err(ParseError::Raised)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// A lazily compiled constant pattern (`None` would mean a bug in the pattern text; the parsers
/// then record nothing rather than panic).
pub(crate) fn lazy(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

/// `\w` of Python's `re` for `str` patterns (`str.isalnum()` or `_`), as a `regex` class: the
/// `regex` crate's own `\w` adds marks and connector punctuation and leaves out numbers such as
/// `¹` and `½`.
pub const PY_WORD_CLASS: &str = r"[\p{L}\p{N}_]";

/// `\S` of Python's `re` for `str` patterns.
pub const PY_NON_SPACE_CLASS: &str = r"[^\s\x1C-\x1F]";

/// Python's `re.findall` read for one group: that group's text in each non-overlapping match,
/// left to right (a match without the group gives nothing).
pub(crate) fn findall<'a>(re: &'a Regex, text: &'a str, group: usize) -> impl Iterator<Item = &'a str> + 'a {
    re.captures_iter(text).filter_map(move |c| c.get(group).map(|m| m.as_str()))
}

/// `re.match(pattern, line.strip())` on every line: for each line the pattern matches, `pick`
/// names the capture group holding the test and the status to record.
pub(crate) fn line_matches(
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

    /// swebench 5.0.2's `PARSER_REGISTRY`, in its order.
    const SWEBENCH_REGISTRY: &[&str] = &[
        "parse_log_pytest", "parse_log_pytest_options", "parse_log_django", "parse_log_pytest_v2",
        "parse_log_seaborn", "parse_log_sympy", "parse_log_matplotlib", "parse_log_astroid",
        "parse_log_flask", "parse_log_marshmallow", "parse_log_pvlib", "parse_log_pyvista",
        "parse_log_sqlfluff", "parse_log_xarray", "parse_log_pydicom", "parse_log_requests",
        "parse_log_pylint", "parse_log_astropy", "parse_log_scikit", "parse_log_sphinx",
        "parse_log_calypso", "parse_log_bpmn_js", "parse_log_carbon", "parse_log_eslint",
        "parse_log_grommet", "parse_log_highlightjs", "parse_log_lighthouse", "parse_log_next",
        "parse_log_openlayers", "parse_log_prismjs", "parse_log_quarto_cli", "parse_log_chart_js",
        "parse_log_marked", "parse_log_p5js", "parse_log_react_pdf", "parse_log_jest",
        "parse_log_jest_json", "parse_log_vitest", "parse_log_karma", "parse_log_tap",
        "parse_log_immutable_js", "parse_log_redis", "parse_log_jq", "parse_log_doctest",
        "parse_log_micropython_test", "parse_log_googletest", "parse_log_gotest", "parse_log_maven",
        "parse_log_ant", "parse_log_gradle_custom", "parse_log_phpunit", "parse_log_minitest",
        "parse_log_cucumber", "parse_log_ruby_unit", "parse_log_rspec_transformed_json",
        "parse_log_jekyll", "parse_log_cargo",
    ];

    #[test]
    fn registry_is_swebench_s_in_its_order_and_resolves_aliases() {
        let implemented: Vec<&str> =
            SWEBENCH_REGISTRY.iter().copied().filter(|n| parser(n).is_some()).collect();
        assert_eq!(PARSER_NAMES.to_vec(), implemented, "every name once, in swebench's order");
        for n in PARSER_NAMES {
            assert!(SWEBENCH_REGISTRY.contains(&n), "{n} is not a swebench name");
        }
        let sample = "PASSED a.py::t[/x/y.py]\nFAILED b.py::u - e\n\u{1b}[32mPASSED\u{1b}[0m c d\nt.py::v PASSED";
        let spec = TestSpec::default();
        for e in entries() {
            if let Some(target) = e.alias_of {
                let canonical = entries().find(|c| c.name == target);
                let same = canonical
                    .filter(|c| c.alias_of.is_none())
                    .map(|c| (c.run)(sample, &spec));
                assert_eq!(same, Some((e.run)(sample, &spec)), "{}", e.name);
            }
        }
        for l in LANGUAGES {
            for (repo, p) in l.repos {
                assert!(parser(p).is_some() || UNREGISTERED.contains(p), "{repo}: {p}");
                assert_eq!(language_for_repo(repo), Some(l.name));
            }
            for e in l.parsers {
                assert_eq!(language_for_parser(e.name), Some(l.name));
            }
        }
        assert_eq!(parser_for_repo("django/django"), Some("parse_log_django"));
        assert_eq!(language_for_repo("tokio-rs/tokio"), Some("rust"));
        assert_eq!(language_for_repo("nobody/nothing"), None);
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
