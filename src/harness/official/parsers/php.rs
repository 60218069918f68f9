//! swebench's PHP log parser (`log_parsers/php.py`): PHPUnit's `--testdox` report, a suite
//! heading `Name (Namespace\Class)` followed by `✔`/`✘`/`↩` test lines.

use super::{lazy, own, Language, ParserRaised, TestSpec, PY_WORD_CLASS};
use crate::harness::official::pytext::PY_SPACE_CLASS;
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// The PHP entries of swebench's registry and its `MAP_REPO_TO_PARSER_PHP`.
pub const LANGUAGE: Language = Language {
    name: "php",
    parsers: &[own("parse_log_phpunit", phpunit)],
    repos: &[
        ("phpoffice/phpspreadsheet", "parse_log_phpunit"),
        ("laravel/framework", "parse_log_phpunit"),
        ("php-cs-fixer/php-cs-fixer", "parse_log_phpunit"),
        ("briannesbitt/carbon", "parse_log_phpunit"),
    ],
};

/// Lines are matched unstripped; a test before any suite heading is `None > name`, as
/// Python formats `None`.
fn phpunit(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static SUITE: OnceLock<Option<Regex>> = OnceLock::new();
    static TEST: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let suite_pattern = format!(r"^({PY_WORD_CLASS}.+) \(.+\)$");
    let test_pattern = format!(r"^{s}*([✔✘↩]){s}*(.*)$");
    let mut map = StatusMap::new();
    let (Some(suite_re), Some(test_re)) = (lazy(&SUITE, &suite_pattern), lazy(&TEST, &test_pattern))
    else {
        return Ok(map);
    };
    let mut suite: Option<&str> = None;
    for line in log.split('\n') {
        if let Some(name) = suite_re.captures(line).and_then(|c| c.get(1)) {
            suite = Some(name.as_str());
            continue;
        }
        let Some(caps) = test_re.captures(line) else { continue };
        let (Some(mark), Some(test)) = (caps.get(1), caps.get(2)) else { continue };
        let status = match mark.as_str() {
            "✔" => OfficialStatus::Passed,
            "✘" => OfficialStatus::Failed,
            _ => OfficialStatus::Skipped,
        };
        map.insert(format!("{} > {}", suite.unwrap_or("None"), test.as_str()), status);
    }
    Ok(map)
}
