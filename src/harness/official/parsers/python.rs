//! swebench's Python log parsers (`swebench/harness/log_parsers/python.py`): pytest's `-rA`
//! summary family, Django's and unittest's verbose runner, sympy's `bin/test`.

use super::{alias, findall, lazy, own, Language, ParserRaised, TestSpec};
use crate::harness::official::pytext::{before_first, before_last, py_split, py_strip, PY_SPACE_CLASS};
use crate::harness::official::status::{OfficialStatus, StatusMap, OFFICIAL_STATUSES};
use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

/// The Python entries of swebench's registry and its `MAP_REPO_TO_PARSER_PYTHON`.
pub const LANGUAGE: Language = Language {
    name: "python",
    parsers: &[
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
        alias("parse_log_pydicom", "parse_log_pytest_options", pytest_options),
        alias("parse_log_requests", "parse_log_pytest_options", pytest_options),
        alias("parse_log_pylint", "parse_log_pytest_options", pytest_options),
        alias("parse_log_astropy", "parse_log_pytest_v2", pytest_v2),
        alias("parse_log_scikit", "parse_log_pytest_v2", pytest_v2),
        alias("parse_log_sphinx", "parse_log_pytest_v2", pytest_v2),
    ],
    repos: &[
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
    ],
};

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

pub(super) fn pytest(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    Ok(pytest_summary(log, unchanged, unchanged))
}

pub(super) fn matplotlib(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    fn mouse_buttons(line: &str) -> Cow<'_, str> {
        Cow::Owned(
            line.replace("MouseButton.LEFT", "1")
                .replace("MouseButton.RIGHT", "3"),
        )
    }
    Ok(pytest_summary(log, mouse_buttons, unchanged))
}

pub(super) fn pytest_options(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
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

pub(super) fn pytest_v2(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
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

pub(super) fn seaborn(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
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

pub(super) fn sympy(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
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

pub(super) fn django(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
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
        .flat_map(|re| findall(re, log, 1))
        .collect()
}

