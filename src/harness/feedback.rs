//! The Repair feedback envelope (paper App. B.3.2, harness-semantics §5): the test execution
//! contract and the generated-test gate fields in their fixed order, then the raw output tail,
//! at most [`FEEDBACK_LIMIT`] characters in total with the tail getting whatever the fields
//! leave.
//!
//! What is hidden is what the paper hides: the Test bundle itself (its patch, i.e. the test
//! source, and its contract) never enters the envelope — `test_source_visibility:
//! hidden_verifier_only`. The runner's output is shown as it is, "although tracebacks can reveal
//! paths and assertion lines" (App. B.3.2): assertion lines are behavioural evidence the paper
//! deliberately passes on. Two things keep the characters for evidence:
//!
//! - separator lines collapse: an unindented line that is only a run of one of `= - _ * ~ #`
//!   (10 or more), or such runs around a title, keeps three characters of each run —
//!   `=================== FAILURES ===================` becomes `=== FAILURES ===`;
//! - the cap holds in the worst case: every field is clipped (in characters, so multi-byte text
//!   cannot overflow it), and if the encoded fields are still too long (escaping can multiply
//!   a control character by six) they are re-rendered with smaller bounds, then cut; the tail
//!   says how many earlier characters it leaves out.

use serde_json::json;

/// Total bound of the envelope, in characters.
pub const FEEDBACK_LIMIT: usize = 6000;
/// The fields may take at most this much, so the output tail always has room.
const HEAD_LIMIT: usize = 3000;
/// Initial bound of any single command/name field (halved while the fields do not fit).
const FIELD_LIMIT: usize = 600;
/// Initial number of list entries shown (failed test names, removed flags).
const LIST_LIMIT: usize = 20;
/// Shortest run of one separator character that makes a separator line.
const SEPARATOR_RUN: usize = 10;

/// Values the envelope reports (derived from the gate's execution record).
#[derive(Clone, Debug, Default)]
pub struct EnvelopeInput {
    /// The test execution contract's `language` (`python` when empty; `rust` for a cargo bundle).
    pub language: String,
    pub runner_command: String,
    pub test_filename: String,
    pub gate_status: String,
    pub gate_reason: String,
    pub passed: bool,
    pub n_tests: usize,
    pub failed_test_names: Vec<String>,
    pub activated_command: Option<String>,
    pub command_sanitized: bool,
    pub counts: serde_json::Value,
    pub inconclusive_infra: bool,
    pub blocked_by_harness: bool,
    pub rc: Option<i32>,
    pub removed_command_flags: Vec<String>,
    pub timeout_detected: bool,
    pub raw_output: String,
}

/// `s` cut to at most `n` characters (an ellipsis marks the cut).
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

/// A bare (not JSON-encoded) field value on one line: clipped, line breaks and other control
/// characters replaced by spaces.
fn bare(s: &str, n: usize) -> String {
    clip(s, n)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A list field: at most `items` entries of at most `n` characters, and a note of how many more.
fn list(v: &[String], items: usize, n: usize) -> serde_json::Value {
    let mut out: Vec<String> = v.iter().take(items).map(|s| clip(s, n)).collect();
    if v.len() > items {
        out.push(format!("... {} more", v.len() - items));
    }
    json!(out)
}

/// The separator character `line` is made of, if it is a separator line (see the module doc):
/// (char, title between the runs).
fn separator(line: &str) -> Option<(char, &str)> {
    let c = line.chars().next()?;
    if !"=-_*~#".contains(c) {
        return None;
    }
    let lead = line.chars().take_while(|&x| x == c).count();
    if lead < SEPARATOR_RUN {
        return None;
    }
    let rest = &line[lead * c.len_utf8()..];
    if rest.trim().is_empty() {
        return Some((c, ""));
    }
    let trail = rest.chars().rev().take_while(|&x| x == c).count();
    let title = &rest[..rest.len() - trail * c.len_utf8()];
    (trail >= SEPARATOR_RUN
        && title.starts_with(' ')
        && title.ends_with(' ')
        && !title.trim().is_empty())
    .then_some((c, title.trim()))
}

/// Collapse the runner's separator lines (see the module doc); every other line is unchanged.
pub fn collapse_separators(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    for (i, line) in output.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match separator(line.trim_end()) {
            Some((c, "")) => out.extend([c; 3]),
            Some((c, title)) => {
                out.extend([c; 3]);
                out.push(' ');
                out.push_str(title);
                out.push(' ');
                out.extend([c; 3]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// The fields part of the envelope with every variable field bounded by `field` characters and
/// lists by `items` entries.
fn render_head(e: &EnvelopeInput, field: usize, items: usize) -> String {
    let name = (field / 3).max(8);
    let failed = list(&e.failed_test_names, items, name);
    let counts = {
        let text = e.counts.to_string();
        if text.chars().count() <= field {
            e.counts.clone()
        } else {
            json!(clip(&text, field))
        }
    };
    let mut per_test = serde_json::Map::new();
    per_test.insert("blocked_by_harness".into(), json!(e.blocked_by_harness));
    if let Some(c) = &e.activated_command {
        per_test.insert("command".into(), json!(clip(c, field)));
    }
    per_test.insert("command_sanitized".into(), json!(e.command_sanitized));
    per_test.insert("counts".into(), counts);
    per_test.insert("failed_test_names".into(), failed.clone());
    per_test.insert("failure_kind".into(), json!(clip(&e.gate_reason, name)));
    per_test.insert("filename".into(), json!(clip(&e.test_filename, name)));
    per_test.insert("gate_status".into(), json!(clip(&e.gate_status, name)));
    per_test.insert("inconclusive_infra".into(), json!(e.inconclusive_infra));
    per_test.insert("index".into(), json!(0));
    per_test.insert("rc".into(), json!(e.rc));
    per_test.insert(
        "removed_command_flags".into(),
        list(&e.removed_command_flags, items, name),
    );
    per_test.insert("timeout_detected".into(), json!(e.timeout_detected));
    format!(
        "test_execution_contract:\n  language: {}\n  working_directory: /testbed\n  test_source_visibility: hidden_verifier_only\n  per_test:\n    {}\ngenerated_test_gate:\n  gate_status: {}\n  gate_reason: {}\n  passed: {}\n  n_tests: {}\n  failed_test_names: {}\n  per_test:\n    {}\n",
        if e.language.is_empty() { "python".to_string() } else { clip(&e.language, name) },
        json!({"index": 0, "runner_command": clip(&e.runner_command, field), "test_filename": clip(&e.test_filename, name)}),
        bare(&e.gate_status, name),
        bare(&e.gate_reason, name),
        if e.passed { "True" } else { "False" },
        e.n_tests,
        failed,
        serde_json::Value::Object(per_test),
    )
}

/// The fields part within [`HEAD_LIMIT`]: smaller bounds until it fits, then a hard cut.
fn bounded_head(e: &EnvelopeInput) -> String {
    let (mut field, mut items) = (FIELD_LIMIT, LIST_LIMIT);
    loop {
        let head = render_head(e, field, items);
        if head.chars().count() <= HEAD_LIMIT {
            return head;
        }
        if field <= 24 && items <= 1 {
            let mut cut = clip(&head, HEAD_LIMIT - 1);
            cut.push('\n');
            return cut;
        }
        field = (field / 2).max(24);
        items = (items / 2).max(1);
    }
}

/// Render the envelope, at most [`FEEDBACK_LIMIT`] characters whatever the input.
pub fn render(e: &EnvelopeInput) -> String {
    let head = bounded_head(e);
    let open = "<raw_test_output_tail>\n";
    let close = "\n</raw_test_output_tail>";
    let used = head.chars().count() + open.len() + close.len();
    let room = FEEDBACK_LIMIT.saturating_sub(used);
    let raw = collapse_separators(e.raw_output.trim_end());
    let n = raw.chars().count();
    let tail: String = if n <= room {
        raw
    } else {
        // Say what was left out, within the room.
        let mut keep = room.saturating_sub(40);
        loop {
            let note = format!("[{} earlier characters elided]\n", n - keep);
            if note.chars().count() + keep <= room || keep == 0 {
                let kept: String = raw.chars().skip(n - keep).collect();
                break clip(&(note + &kept), room);
            }
            keep -= 1;
        }
    };
    format!("{head}{open}{tail}{close}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn assert_order(s: &str) {
        let order = [
            "test_execution_contract:",
            "language: python",
            "working_directory: /testbed",
            "test_source_visibility: hidden_verifier_only",
            "generated_test_gate:",
            "gate_status:",
            "gate_reason:",
            "passed:",
            "n_tests:",
            "failed_test_names:",
            "<raw_test_output_tail>",
        ];
        let mut at = 0;
        for o in order {
            let i = s[at..]
                .find(o)
                .unwrap_or_else(|| panic!("{o} missing or out of order in {s}"));
            at += i;
        }
        assert!(s.ends_with("\n</raw_test_output_tail>"));
    }

    #[test]
    fn the_contract_names_the_bundles_language() {
        let rust = render(&EnvelopeInput { language: "rust".into(), ..Default::default() });
        assert!(rust.contains("test_execution_contract:\n  language: rust\n"), "{rust}");
        let default = render(&EnvelopeInput::default());
        assert!(default.contains("  language: python\n"), "{default}");
    }

    #[test]
    fn bounded_and_ordered() {
        let e = EnvelopeInput {
            runner_command: "pytest t.py::test_a".into(),
            test_filename: "t.py".into(),
            gate_status: "hard_fail".into(),
            gate_reason: "assertion_failure".into(),
            n_tests: 1,
            raw_output: "x".repeat(50_000) + "END",
            ..Default::default()
        };
        let s = render(&e);
        assert!(s.chars().count() <= FEEDBACK_LIMIT);
        assert!(s.ends_with("END\n</raw_test_output_tail>"));
        assert!(s.contains("earlier characters elided]"));
        assert!(s.contains("passed: False") && s.contains("n_tests: 1"));
        assert_order(&s);
    }

    #[test]
    fn assertion_lines_are_shown() {
        let out = "    def test_a():\n>       assert compute_secret_value(3) == 42\nE       assert 41 == 42\n";
        let s = render(&EnvelopeInput {
            raw_output: out.into(),
            ..Default::default()
        });
        assert!(s.contains(">       assert compute_secret_value(3) == 42"));
        assert!(s.contains("E       assert 41 == 42"));
    }

    #[test]
    fn separator_lines_collapse_and_nothing_else_does() {
        let out = format!(
            "{eq} test session starts {eq}\n{us} test_a {us}\n{dash}\nE   assert '{dash}' == '---'\n  {eq}\n----  ----\nRan 1 test\n{eq}=",
            eq = "=".repeat(30),
            us = "_".repeat(25),
            dash = "-".repeat(70)
        );
        let c = collapse_separators(&out);
        assert_eq!(
            c,
            format!(
                "=== test session starts ===\n___ test_a ___\n---\nE   assert '{dash}' == '---'\n  {eq}\n----  ----\nRan 1 test\n===",
                dash = "-".repeat(70),
                eq = "=".repeat(30)
            )
        );
        // In the envelope, the collapsed output leaves room for more of the real output.
        let long = format!(
            "{}\nlast line",
            format!("{}\nline\n", "=".repeat(80)).repeat(200)
        );
        let s = render(&EnvelopeInput {
            raw_output: long,
            ..Default::default()
        });
        assert!(!s.contains("===="));
        assert!(s.ends_with("last line\n</raw_test_output_tail>"));
    }

    /// Adversarial text: multi-byte characters, control characters (six times longer once
    /// JSON-escaped), quotes, separators, huge and empty values, many lines.
    fn nasty(rng: &mut rand_chacha::ChaCha8Rng) -> String {
        nasty_upto(rng, 40_000)
    }

    /// [`nasty`] of at most `max` pieces.
    fn nasty_upto(rng: &mut rand_chacha::ChaCha8Rng, max: usize) -> String {
        let pieces = [
            "\u{0}",
            "\u{1b}[31m",
            "\"",
            "\\",
            "\n",
            "\r\n",
            "é",
            "漢字",
            "🦀",
            "\u{200b}",
            "=",
            "-",
            "_",
            " ",
            "assert x == y",
            "PASSED",
            "</raw_test_output_tail>",
        ];
        let len = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..20),
            2 => rng.random_range(20..2_000),
            _ => rng.random_range(2_000..40_000),
        }
        .min(max);
        let mut s = String::new();
        for _ in 0..len {
            match rng.random_range(0..3) {
                0 => s.push_str(pieces[rng.random_range(0..pieces.len())]),
                1 => s.push_str(
                    &pieces[rng.random_range(0..pieces.len())].repeat(rng.random_range(1..80)),
                ),
                _ => s.push(char::from_u32(rng.random_range(0x20..0x3000)).unwrap_or('?')),
            }
        }
        s
    }

    #[test]
    fn the_cap_holds_in_the_worst_case() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for case in 0..200 {
            let names = |rng: &mut rand_chacha::ChaCha8Rng| {
                let n = match rng.random_range(0..3) {
                    0 => 0,
                    1 => rng.random_range(1..5),
                    _ => rng.random_range(5..3_000),
                };
                let long = rng.random_range(0..n.max(1));
                (0..n)
                    .map(|i| nasty_upto(rng, if i == long { 40_000 } else { 200 }))
                    .collect::<Vec<_>>()
            };
            let e = EnvelopeInput {
                language: nasty(&mut rng),
                runner_command: nasty(&mut rng),
                test_filename: nasty(&mut rng),
                gate_status: nasty(&mut rng),
                gate_reason: nasty(&mut rng),
                passed: rng.random(),
                n_tests: rng.random::<u32>() as usize,
                failed_test_names: names(&mut rng),
                activated_command: rng.random::<bool>().then(|| nasty(&mut rng)),
                command_sanitized: rng.random(),
                counts: if rng.random() {
                    json!({"failed": 1, "passed": 2})
                } else {
                    let mut m = serde_json::Map::new();
                    m.insert(nasty(&mut rng), json!(nasty(&mut rng)));
                    serde_json::Value::Object(m)
                },
                inconclusive_infra: rng.random(),
                blocked_by_harness: rng.random(),
                rc: rng.random::<bool>().then(|| rng.random()),
                removed_command_flags: names(&mut rng),
                timeout_detected: rng.random(),
                raw_output: nasty(&mut rng),
            };
            let s = render(&e);
            let n = s.chars().count();
            assert!(n <= FEEDBACK_LIMIT, "case {case}: {n} characters");
            assert!(s.starts_with("test_execution_contract:\n"), "case {case}");
            assert!(s.ends_with("\n</raw_test_output_tail>"), "case {case}");
            // The tail always has room: the fields never take more than their share.
            assert!(
                s.find("<raw_test_output_tail>\n").unwrap() <= HEAD_LIMIT * 4,
                "case {case}"
            );
            // The last line of a short output is shown in full.
            let raw = collapse_separators(e.raw_output.trim_end());
            if raw.chars().count() <= FEEDBACK_LIMIT - HEAD_LIMIT - 50 {
                assert!(s.contains(&raw), "case {case}: the output is shown whole");
            }
        }
    }
}
