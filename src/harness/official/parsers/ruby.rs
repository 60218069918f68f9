//! swebench's Ruby log parsers (`log_parsers/ruby.py`): Minitest's verbose lines, Cucumber's
//! progress format, test-unit's verbose lines, RSpec's JSON turned into `name - passed|failed`
//! lines by the eval script, and Jekyll, which picks Minitest or Cucumber by instance.

use super::{lazy, line_matches, own, Language, ParserRaised, TestSpec, PY_WORD_CLASS};
use crate::harness::official::pytext::PY_SPACE_CLASS;
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// The Ruby entries of swebench's registry and its `MAP_REPO_TO_PARSER_RUBY`.
pub const LANGUAGE: Language = Language {
    name: "ruby",
    parsers: &[
        own("parse_log_minitest", minitest),
        own("parse_log_cucumber", cucumber),
        own("parse_log_ruby_unit", ruby_unit),
        own("parse_log_rspec_transformed_json", rspec_transformed_json),
        own("parse_log_jekyll", jekyll),
    ],
    repos: &[
        ("jekyll/jekyll", "parse_log_jekyll"),
        ("fluent/fluentd", "parse_log_ruby_unit"),
        ("fastlane/fastlane", "parse_log_rspec_transformed_json"),
        ("jordansissel/fpm", "parse_log_rspec_transformed_json"),
        ("faker-ruby/faker", "parse_log_ruby_unit"),
        ("rubocop/rubocop", "parse_log_rspec_transformed_json"),
    ],
};

/// `TestX#test_y = 0.01 s = .` (`F` or `E` for a failure).
fn minitest(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    Ok(line_matches(log, lazy(&RESULT, r"^(.+)\. .*=.*(\.|F|E).*$"), |caps| {
        match caps.get(2)?.as_str() {
            "." => Some((1, OfficialStatus::Passed)),
            _ => Some((1, OfficialStatus::Failed)),
        }
    }))
}

/// `Scenario name ....` followed by `.` (passed) or `F`.
fn cucumber(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    Ok(line_matches(log, lazy(&RESULT, r"^(.*) \.+(\.|F)"), |caps| {
        match caps.get(2)?.as_str() {
            "." => Some((1, OfficialStatus::Passed)),
            _ => Some((1, OfficialStatus::Failed)),
        }
    }))
}

/// `test: name: .`, `name: E`, `name: F`, `name: O` (omitted). Python's `E\b` is spelt out:
/// the letter followed by a character that is not Python's `\w`, or the end.
fn ruby_unit(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let not_word = PY_WORD_CLASS.replacen('[', "[^", 1);
    let pattern = format!(r"^{s}*(?:test: )?(.+):{s}+(?:(\.)|([EFO])(?:{not_word}|$))");
    Ok(line_matches(log, lazy(&RESULT, &pattern), |caps| {
        if caps.get(2).is_some() {
            return Some((1, OfficialStatus::Passed));
        }
        match caps.get(3)?.as_str() {
            "O" => Some((1, OfficialStatus::Skipped)),
            _ => Some((1, OfficialStatus::Failed)),
        }
    }))
}

/// `name - passed`, `name - failed` (the last such suffix on the line; no end anchor).
fn rspec_transformed_json(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    Ok(line_matches(log, lazy(&RESULT, r"^(.+) - (passed|failed)"), |caps| {
        match caps.get(2)?.as_str() {
            "passed" => Some((1, OfficialStatus::Passed)),
            _ => Some((1, OfficialStatus::Failed)),
        }
    }))
}

/// Minitest for pull requests 9141, 8047 and 8167, Cucumber for 8761 and 8771 (the second
/// `-`-separated field of the instance id); any other instance raises, as swebench's does.
fn jekyll(log: &str, spec: &TestSpec) -> Result<StatusMap, ParserRaised> {
    let raised = |exception| ParserRaised { exception, line: 0 };
    let pr = spec.instance_id.split('-').nth(1).ok_or_else(|| raised("IndexError"))?;
    match pr {
        "9141" | "8047" | "8167" => minitest(log, spec),
        "8761" | "8771" => cucumber(log, spec),
        _ => Err(raised("ValueError")),
    }
}
