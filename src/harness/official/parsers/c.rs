//! swebench's C and C++ log parsers (`log_parsers/c.py`): Redis's and Valkey's Tcl test suite,
//! jq's automake `PASS:`/`FAIL:` lines, doctest's XML reporter (nlohmann/json), MicroPython's
//! `run-tests.py` and GoogleTest's `[ OK ]`/`[ FAILED ]` lines (fmt).

use super::{lazy, line_matches, own, Language, ParserRaised, TestSpec, PY_NON_SPACE_CLASS};
use crate::harness::official::pytext::PY_SPACE_CLASS;
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// The C entries of swebench's registry and its `MAP_REPO_TO_PARSER_C`.
pub const LANGUAGE: Language = Language {
    name: "c",
    parsers: &[
        own("parse_log_redis", redis),
        own("parse_log_jq", jq),
        own("parse_log_doctest", doctest),
        own("parse_log_micropython_test", micropython_test),
        own("parse_log_googletest", googletest),
    ],
    repos: &[
        ("redis/redis", "parse_log_redis"),
        ("jqlang/jq", "parse_log_jq"),
        ("micropython/micropython", "parse_log_micropython_test"),
        ("valkey-io/valkey", "parse_log_redis"),
    ],
};

/// The C++ repositories of `MAP_REPO_TO_PARSER_C` (swebench files them with C; the paper's
/// Table 5 reports C++ apart). No parsers of its own: they are C's.
pub const LANGUAGE_CPP: Language = Language {
    name: "c++",
    parsers: &[],
    repos: &[
        ("nlohmann/json", "parse_log_doctest"),
        ("fmtlib/fmt", "parse_log_googletest"),
    ],
};

/// `[ok]: name (12 ms)`, `[err]: name in tests/unit/x.tcl`, `[skip]: …`, `[ignore]: …`.
fn redis(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    static WHERE: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let result = format!(r"^\[(ok|err|skip|ignore)\]:{s}(.+?)(?:{s}\((\d+{s}*m?s)\))?$");
    let location = format!(r"{s}+in{s}+{PY_NON_SPACE_CLASS}+$");
    let mut map = StatusMap::new();
    let (Some(result), Some(location)) = (lazy(&RESULT, &result), lazy(&WHERE, &location)) else {
        return Ok(map);
    };
    for raw in log.split('\n') {
        let Some(caps) = result.captures(crate::harness::official::pytext::py_strip(raw)) else {
            continue;
        };
        let test = caps.get(2).map_or("", |m| m.as_str());
        match caps.get(1).map_or("", |m| m.as_str()) {
            "ok" => map.insert(test, OfficialStatus::Passed),
            "err" => map.insert(location.replace_all(test, "").into_owned(), OfficialStatus::Failed),
            _ => map.insert(test, OfficialStatus::Skipped),
        }
    }
    Ok(map)
}

/// `PASS: tests/jqtest`, `FAIL: tests/shtest`.
fn jq(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let pattern = format!(r"^{s}*(PASS|FAIL):{s}(.+)$");
    Ok(line_matches(log, lazy(&RESULT, &pattern), |caps| {
        match caps.get(1)?.as_str() {
            "PASS" => Some((2, OfficialStatus::Passed)),
            _ => Some((2, OfficialStatus::Failed)),
        }
    }))
}

/// doctest's XML report (`-r=xml`): from the first `<doctest` to the first `</doctest>` after
/// it, parsed as XML (a document that does not parse raises, as `ET.fromstring` does); each
/// `SubCase` of each `TestCase` is `<test case> > <subcase>`, passed when every `Expression`
/// under it has `success="true"`.
fn doctest(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    const START: &str = "<doctest";
    const END: &str = "</doctest>";
    let mut map = StatusMap::new();
    let Some(start) = log.find(START) else {
        return Ok(map);
    };
    let raised = || ParserRaised {
        exception: "ParseError",
        line: 1 + log[..start].matches('\n').count(),
    };
    // Without an end tag Python slices `log[start:9]`: never a document, so `ET.fromstring`
    // raises.
    let end = log[start..].find(END).ok_or_else(raised)?;
    let xml = &log[start..start + end + END.len()];
    let doc = roxmltree::Document::parse(xml).map_err(|_| raised())?;
    let named = |n: &roxmltree::Node<'_, '_>, tag: &str| {
        n.is_element() && n.tag_name().name() == tag && n.tag_name().namespace().is_none()
    };
    let root = doc.root_element();
    for case in root.descendants().filter(|n| *n != root && named(n, "TestCase")) {
        let case_name = case.attribute("name").unwrap_or("None");
        for sub in case.descendants().filter(|n| *n != case && named(n, "SubCase")) {
            let sub_name = sub.attribute("name").unwrap_or("None");
            let passed = sub
                .descendants()
                .filter(|n| *n != sub && named(n, "Expression"))
                .all(|e| e.attribute("success") == Some("true"));
            let status = if passed { OfficialStatus::Passed } else { OfficialStatus::Failed };
            map.insert(format!("{case_name} > {sub_name}"), status);
        }
    }
    Ok(map)
}

/// `pass  basics/int.py`, `FAIL  …`, `skip  …`.
fn micropython_test(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let pattern = format!(r"^(pass|FAIL|skip){s}+(.+)$");
    Ok(line_matches(log, lazy(&RESULT, &pattern), |caps| {
        match caps.get(1)?.as_str() {
            "pass" => Some((2, OfficialStatus::Passed)),
            "FAIL" => Some((2, OfficialStatus::Failed)),
            _ => Some((2, OfficialStatus::Skipped)),
        }
    }))
}

/// `[       OK ] Suite.Name (0 ms)`, `[  FAILED  ] Suite.Name (1 ms)`.
fn googletest(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let pattern = format!(r"^.*\[{s}*(OK|FAILED){s}*\]{s}(.*){s}\(.*\)$");
    Ok(line_matches(log, lazy(&RESULT, &pattern), |caps| {
        match caps.get(1)?.as_str() {
            "OK" => Some((2, OfficialStatus::Passed)),
            _ => Some((2, OfficialStatus::Failed)),
        }
    }))
}
