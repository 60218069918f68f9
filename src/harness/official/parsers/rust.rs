//! swebench's Rust log parser (`log_parsers/rust.py`): libtest's `test <name> ... <outcome>` lines.

use super::{lazy, line_matches, own, Language, ParserRaised, TestSpec};
use super::PY_WORD_CLASS;
use crate::harness::official::pytext::PY_SPACE_CLASS;
use crate::harness::official::status::{OfficialStatus, StatusMap};
use regex::Regex;
use std::sync::OnceLock;

/// The Rust entries of swebench's registry and its `MAP_REPO_TO_PARSER_RUST`.
pub const LANGUAGE: Language = Language {
    name: "rust",
    parsers: &[
        own("parse_log_cargo", cargo),
    ],
    repos: &[
        ("burntsushi/ripgrep", "parse_log_cargo"),
        ("sharkdp/bat", "parse_log_cargo"),
        ("astral-sh/ruff", "parse_log_cargo"),
        ("tokio-rs/tokio", "parse_log_cargo"),
        ("uutils/coreutils", "parse_log_cargo"),
        ("nushell/nushell", "parse_log_cargo"),
        ("tokio-rs/axum", "parse_log_cargo"),
    ],
};

pub(super) fn cargo(log: &str, _: &TestSpec) -> Result<StatusMap, ParserRaised> {
    static RESULT: OnceLock<Option<Regex>> = OnceLock::new();
    let s = PY_SPACE_CLASS;
    let w = PY_WORD_CLASS;
    let pattern = format!(r"^test{s}+([^\s\x1C-\x1F]+){s}+\.\.\.{s}+({w}+)$");
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

