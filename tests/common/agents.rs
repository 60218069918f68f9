//! Shared helpers of the agents' acceptance tests: the bundled task, scripted turns (Qwen3.5 XML
//! bash calls), the regression test / fixes the scripts write, and a qualified bundle.
#![allow(dead_code)]

use execcritic::harness::{self, Bundle, FrozenBundle, Qualification, SandboxKind};
use execcritic::policy::ScriptedPolicy;
use execcritic::task::{bundled_suite, find_task, load_tasks, TaskInstance};
use tokio::sync::OnceCell;

pub const INSTANCE: &str = "tablefmt__tablefmt-1";

pub fn task(id: &str) -> TaskInstance {
    let path = bundled_suite().expect("bundled suite");
    let all = load_tasks(&path).expect("tasks");
    find_task(&all, id).expect("task").clone()
}

/// One assistant turn calling bash with `cmd`, as a scripted-policy JSONL line.
pub fn call(cmd: &str) -> String {
    let content = format!("<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call>");
    serde_json::json!({ "content": content }).to_string()
}

/// A turn without a tool call.
pub fn prose(text: &str) -> String {
    serde_json::json!({ "content": text }).to_string()
}

pub fn policy(turns: &[String]) -> ScriptedPolicy {
    ScriptedPolicy::from_jsonl("test-script", &turns.join("\n")).expect("script")
}

// ---- Test agent ------------------------------------------------------------------------------

/// The test function's name.
pub fn name(suffix: &str) -> String {
    format!("test_signed{suffix}")
}

/// Its exact node id (what the contract declares and the command selects).
pub fn node(suffix: &str) -> String {
    format!("tests/test_cells.py::{}", name(suffix))
}

/// Append a regression test (failing on Base) named `node(suffix)`.
pub fn add_test(suffix: &str) -> String {
    format!(
        "cd /testbed && cat >> tests/test_cells.py <<'EOF'\n\n\ndef {}():\n    for text in [\"-40\", \"1250.75\", \"1e3\"]:\n        assert is_number(text), text\nEOF",
        name(suffix)
    )
}

/// Append a test that passes on Base.
pub fn add_passing_test() -> String {
    "cd /testbed && cat >> tests/test_cells.py <<'EOF'\n\n\ndef test_is_number_plain_digits():\n    assert is_number(\"42\")\nEOF".to_string()
}

pub fn contract(nodes: &[&str]) -> String {
    serde_json::json!({
        "entrypoint": "tablefmt.is_number",
        "trigger": "signed, decimal and exponent strings",
        "expected_output": "is_number returns True",
        "issue_evidence": ["the issue lists is_number('-40') returning False"],
        "alternative_hypotheses": ["only alignment changes: rejected"],
        "non_assertions": ["exact table layout"],
        "test_nodes": nodes,
    })
    .to_string()
}

/// Write contract, command and patch (the paper's preparation call).
pub fn prepare(command: &str, nodes: &[&str]) -> String {
    format!(
        "cat > /tmp/test_contract.json <<'EOF'\n{}\nEOF\necho '{command}' > /tmp/test_command && cd /testbed && git add -AN && git diff --no-color > /tmp/test.patch",
        contract(nodes)
    )
}

pub fn good_command(suffix: &str) -> String {
    format!("python -m pytest -rA {}", node(suffix))
}

pub const SUBMIT_TEST: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch";

/// A complete, qualifying Test-agent script.
pub fn good_test_script(suffix: &str) -> Vec<String> {
    let n = node(suffix);
    vec![
        call(&add_test(suffix)),
        call(&prepare(&good_command(suffix), &[&n])),
        call(SUBMIT_TEST),
    ]
}

// ---- Repair agent ----------------------------------------------------------------------------

/// A partial fix: accepts a leading minus only (fails the bundle on decimals/exponents).
pub const FIX_PARTIAL: &str = "cd /testbed && sed -i 's/return value.strip().isdigit()/return value.strip().lstrip(\"-\").isdigit()/' tablefmt/cells.py && grep -n lstrip tablefmt/cells.py";

/// The full fix from Base or from the partial fix.
pub const FIX_FULL: &str = "cd /testbed && python - <<'EOF'\nimport pathlib, re\np = pathlib.Path('tablefmt/cells.py')\ns = p.read_text()\ns = re.sub(r'        return value\\.strip\\(\\)(\\.lstrip\\(\"-\"\\))?\\.isdigit\\(\\)\\n', '        try:\\n            float(value)\\n        except ValueError:\\n            return False\\n        return True\\n', s)\np.write_text(s)\nEOF\ngrep -n float tablefmt/cells.py";

/// A harmless source change that keeps the behaviour (a new candidate each time).
pub fn touch_source(k: usize) -> String {
    format!("cd /testbed && echo '# attempt {k}' >> tablefmt/cells.py")
}

pub const EXPORT: &str =
    "cd /testbed && git add -AN && git diff --no-color -- tablefmt > /tmp/fix.patch";
pub const SUBMIT_FIX: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch";
pub const CHECK_FIX: &str = "echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch";

/// Round 0 ending with the partial fix submitted.
pub fn round0_partial() -> Vec<String> {
    vec![call(FIX_PARTIAL), call(EXPORT), call(SUBMIT_FIX)]
}

static BUNDLE: OnceCell<FrozenBundle> = OnceCell::const_new();

/// The qualified bundle the repair tests share (qualified once per test binary).
pub async fn bundle() -> &'static FrozenBundle {
    BUNDLE
        .get_or_init(|| async {
            let t = task(INSTANCE);
            let n = node("");
            let patch = "diff --git a/tests/test_cells.py b/tests/test_cells.py\n--- a/tests/test_cells.py\n+++ b/tests/test_cells.py\n@@ -10,6 +10,11 @@ def test_is_number_accepts_ints_and_floats():\n     assert is_number(\" 7 \")\n \n \n+def test_signed():\n+    for text in [\"-40\", \"1250.75\", \"1e3\"]:\n+        assert is_number(text), text\n+\n+\n def test_is_number_rejects_text_and_bools():\n     assert not is_number(\"abc\")\n     assert not is_number(\"\")\n";
            let b = Bundle::from_parts(patch, &good_command(""), &contract(&[&n])).expect("bundle parts");
            match harness::qualify(&t, &b, SandboxKind::Local).await.expect("qualify") {
                Qualification::Accepted(f) => f,
                other => panic!("the shared bundle must qualify: {other:?}"),
            }
        })
        .await
}
