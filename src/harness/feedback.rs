//! The Repair feedback envelope (paper App. B.3.2, harness-semantics §5): the test execution
//! contract and the generated-test gate fields in their fixed order, then the raw output tail,
//! bounded to 6,000 characters in total with the tail getting whatever the fields leave. The
//! test source is hidden: output lines that reproduce lines added by the test patch are masked.

use serde_json::json;

/// Total bound of the envelope.
pub const FEEDBACK_LIMIT: usize = 6000;
/// Bound of any single command/list field.
const FIELD_LIMIT: usize = 600;

/// Values the envelope reports (derived from the gate's execution record).
#[derive(Clone, Debug, Default)]
pub struct EnvelopeInput {
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

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

/// Mask output lines that reproduce a line the test patch added (the hidden test source).
pub fn hide_test_source(output: &str, test_patch: &str) -> String {
    let added: std::collections::HashSet<&str> = test_patch
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .map(|l| l[1..].trim())
        .filter(|l| l.len() >= 4)
        .collect();
    output
        .lines()
        .map(|l| {
            let core = l.trim().trim_start_matches('>').trim();
            let core = core
                .split_once(": ")
                .filter(|(p, _)| p.chars().all(|c| c.is_ascii_digit()))
                .map_or(core, |(_, r)| r.trim());
            if added.contains(core) || added.iter().any(|a| a.len() >= 12 && l.contains(a)) {
                "    [hidden test source]".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Render the envelope, bounded to `FEEDBACK_LIMIT` characters.
pub fn render(e: &EnvelopeInput) -> String {
    let runner_command = clip(&e.runner_command, FIELD_LIMIT);
    let mut per_test = serde_json::Map::new();
    per_test.insert("blocked_by_harness".into(), json!(e.blocked_by_harness));
    if let Some(c) = &e.activated_command {
        per_test.insert("command".into(), json!(clip(c, FIELD_LIMIT)));
    }
    per_test.insert("command_sanitized".into(), json!(e.command_sanitized));
    per_test.insert("counts".into(), e.counts.clone());
    let failed: Vec<String> = e
        .failed_test_names
        .iter()
        .take(20)
        .map(|n| clip(n, 200))
        .collect();
    per_test.insert("failed_test_names".into(), json!(failed));
    per_test.insert("failure_kind".into(), json!(e.gate_reason));
    per_test.insert("filename".into(), json!(clip(&e.test_filename, 300)));
    per_test.insert("gate_status".into(), json!(e.gate_status));
    per_test.insert("inconclusive_infra".into(), json!(e.inconclusive_infra));
    per_test.insert("index".into(), json!(0));
    per_test.insert("rc".into(), json!(e.rc));
    per_test.insert(
        "removed_command_flags".into(),
        json!(e.removed_command_flags),
    );
    per_test.insert("timeout_detected".into(), json!(e.timeout_detected));
    let head = format!(
        "test_execution_contract:\n  language: python\n  working_directory: /testbed\n  test_source_visibility: hidden_verifier_only\n  per_test:\n    {}\ngenerated_test_gate:\n  gate_status: {}\n  gate_reason: {}\n  passed: {}\n  n_tests: {}\n  failed_test_names: {}\n  per_test:\n    {}\n",
        json!({"index": 0, "runner_command": runner_command, "test_filename": clip(&e.test_filename, 300)}),
        e.gate_status,
        e.gate_reason,
        if e.passed { "True" } else { "False" },
        e.n_tests,
        json!(failed),
        serde_json::Value::Object(per_test),
    );
    let open = "<raw_test_output_tail>\n";
    let close = "\n</raw_test_output_tail>";
    let used = head.chars().count() + open.len() + close.len();
    let room = FEEDBACK_LIMIT.saturating_sub(used);
    let raw = e.raw_output.trim_end();
    let n = raw.chars().count();
    let tail: String = if n <= room {
        raw.to_string()
    } else {
        raw.chars().skip(n - room).collect()
    };
    format!("{head}{open}{tail}{close}")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let order = [
            "test_execution_contract:",
            "language: python",
            "working_directory: /testbed",
            "test_source_visibility: hidden_verifier_only",
            "generated_test_gate:",
            "gate_status:",
            "gate_reason:",
            "passed: False",
            "n_tests: 1",
            "failed_test_names:",
            "<raw_test_output_tail>",
        ];
        let mut at = 0;
        for o in order {
            let i = s[at..]
                .find(o)
                .unwrap_or_else(|| panic!("{o} missing or out of order"));
            at += i;
        }
    }

    #[test]
    fn hides_patch_lines() {
        let patch = "+++ b/t.py\n+def test_a():\n+    assert compute_secret_value(3) == 42\n";
        let out = "    def test_a():\n>       assert compute_secret_value(3) == 42\nE       assert 41 == 42\n";
        let h = hide_test_source(out, patch);
        assert!(!h.contains("compute_secret_value"));
        assert!(h.contains("E       assert 41 == 42"));
    }
}
