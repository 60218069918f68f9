#!/usr/bin/env python3
"""Write the scripted policies of the demo (tests/fixtures/scripted/demo_*.jsonl).

A scripted policy is JSONL, one {"content": ...} per assistant turn (optionally
"reasoning_content"). Each turn here is a Qwen3.5 XML bash tool call. The scripts target the
bundled task tablefmt__tablefmt-1 and (`*_rust.jsonl`) the crates suite's rapidfuzz__strsim-rs-201. Run from the repository root: python3 scripts/agents_make_scripts.py
"""
import json
import pathlib

OUT = pathlib.Path("tests/fixtures/scripted")


def call(cmd, thinking=None):
    content = (
        "<tool_call>\n<function=bash>\n<parameter=command>\n"
        + cmd
        + "\n</parameter>\n</function>\n</tool_call>"
    )
    turn = {"content": content}
    if thinking:
        turn["reasoning_content"] = thinking
    return turn


NODE = "test_signed_numbers"
TEST_ADD = f'''cd /testbed && cat >> tests/test_cells.py <<'EOF'


def {NODE}():
    for text in ["-40", "1250.75", "1e3"]:
        assert is_number(text), text
EOF
python -m pytest -rA "tests/test_cells.py::{NODE}" 2>&1 | tail -5'''

CONTRACT = {
    "entrypoint": "tablefmt.is_number (public API re-exported by tablefmt)",
    "trigger": "numeric strings with a sign, a decimal point or an exponent, as read from CSV",
    "expected_output": "is_number returns True for '-40', '1250.75' and '1e3'",
    "issue_evidence": ["issue: is_number('-40'), is_number('1250.75') and is_number('1e3') all return False; they should count as numbers"],
    "alternative_hypotheses": ["only the table alignment should change, not is_number: rejected, the issue names is_number directly"],
    "non_assertions": ["the exact rendered table layout", "behaviour for malformed strings such as '1.2.3'"],
    "test_nodes": [f"tests/test_cells.py::{NODE}"],
}


def prepare(command):
    return (
        "cat > /tmp/test_contract.json <<'EOF'\n" + json.dumps(CONTRACT, indent=1) + "\nEOF\n"
        f"echo '{command}' > /tmp/test_command && cd /testbed && git add -AN && "
        "git diff --no-color > /tmp/test.patch && cat /tmp/test.patch"
    )


SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch"

demo_test = [
    call("cd /testbed && ls && sed -n 1,15p tablefmt/cells.py",
         "The issue is about is_number on signed/decimal strings. Look at the implementation first."),
    call("cd /testbed && sed -n 1,25p tests/test_cells.py",
         "Adjacent tests live in tests/test_cells.py; follow their style."),
    call(TEST_ADD, "Add one parametrized regression test on the public is_number API."),
    # First submission selects the whole file: the harness must reject it.
    call(prepare("python -m pytest -rA tests/test_cells.py")),
    call(SUBMIT),
    call(prepare(f"python -m pytest -rA tests/test_cells.py::{NODE}"),
         "The harness wants every declared node selected explicitly, not the file."),
    call(SUBMIT),
]

FIX_PARTIAL = '''cd /testbed && python - <<'EOF'
import pathlib
p = pathlib.Path("tablefmt/cells.py")
s = p.read_text()
s = s.replace('return value.strip().isdigit()', 'return value.strip().lstrip("-").isdigit()')
p.write_text(s)
EOF
python -c 'from tablefmt import is_number; print(is_number("-40"))\''''

FIX_FULL = '''cd /testbed && python - <<'EOF'
import pathlib
p = pathlib.Path("tablefmt/cells.py")
s = p.read_text()
s = s.replace('        return value.strip().lstrip("-").isdigit()\\n',
              '        try:\\n            float(value)\\n        except ValueError:\\n            return False\\n        return True\\n')
p.write_text(s)
EOF
python -c 'from tablefmt import is_number; print([is_number(x) for x in ["-40", "1250.75", "1e3", "1.2.3", "-"]])\''''

EXPORT = "cd /testbed && git add -AN && git diff --no-color -- tablefmt/cells.py > /tmp/fix.patch"

demo_repair = [
    call("cd /testbed && grep -n 'def is_number' -A8 tablefmt/cells.py",
         "Find where numeric strings are recognised."),
    call(FIX_PARTIAL, "Negative numbers are the first example; allow a leading minus."),
    call(EXPORT),
    call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch"),
    # Revision round 1 (after the gate's failing feedback).
    call("cd /testbed && git diff", "The hidden test still fails: decimals and exponents are numbers too."),
    call(FIX_FULL, "Use float() to accept every number spelling Python accepts."),
    call(EXPORT),
    call("echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch"),
]

# The same demo on a Rust task: the crates suite's rapidfuzz__strsim-rs-201 (levenshtein("", "abc")
# is 0), run by `cargo test` under the native guard.
RS_NODE = "levenshtein_from_an_empty_string"
RS_TEST_ADD = f"""cd /testbed && cat >> tests/lib.rs <<'EOF'

#[test]
fn {RS_NODE}() {{
    assert_eq!(levenshtein("", "abc"), 3);
}}
EOF
cargo test --offline -q -p strsim --test lib -- --exact {RS_NODE} 2>&1 | tail -5"""

RS_CONTRACT = {
    "entrypoint": "strsim::levenshtein (public API)",
    "trigger": "an empty first string: levenshtein(\"\", \"abc\")",
    "expected_output": "the distance is 3, the length of the other string",
    "issue_evidence": ["issue: levenshtein(\"\", \"abc\") returns 0 but should be 3; levenshtein(\"abc\", \"\") is 3"],
    "alternative_hypotheses": ["only generic_levenshtein is wrong: rejected, the issue shows the str function"],
    "non_assertions": ["the distance for non-ASCII strings", "normalized_levenshtein of empty strings"],
    "test_nodes": [RS_NODE],
}


def rs_prepare(command):
    return (
        "cat > /tmp/test_contract.json <<'EOF'\n" + json.dumps(RS_CONTRACT, indent=1) + "\nEOF\n"
        f"echo '{command}' > /tmp/test_command && cd /testbed && git add -AN && "
        "git diff --no-color > /tmp/test.patch && cat /tmp/test.patch"
    )


demo_test_rust = [
    call("cd /testbed && ls && grep -n 'pub fn levenshtein' -B2 -A3 src/lib.rs",
         "The issue is about levenshtein with an empty first string. Look at the public function."),
    call("cd /testbed && sed -n 1,40p tests/lib.rs",
         "The crate's integration tests live in tests/lib.rs; follow their style."),
    call(RS_TEST_ADD, "Add one regression test on the public levenshtein function."),
    # First submission names the test without --exact (a substring filter): rejected.
    call(rs_prepare(f"cargo test -p strsim --test lib {RS_NODE}")),
    call(SUBMIT),
    call(rs_prepare(f"cargo test -p strsim --test lib -- --exact {RS_NODE}"),
         "libtest needs --exact and the full test path after --."),
    call(SUBMIT),
]

RS_EXPORT = "cd /testbed && git add -AN && git diff --no-color -- src/lib.rs > /tmp/fix.patch"

demo_repair_rust = [
    call("cd /testbed && grep -n 'pub fn generic_levenshtein' -A20 src/lib.rs",
         "Find where the distance starts."),
    call("cd /testbed && sed -i 's/    let mut result = 0;/    let mut result = b_len.saturating_sub(1);/' src/lib.rs && grep -n 'let mut result' src/lib.rs",
         "With an empty first string the loop never runs; start from the other length (minus the last step?)."),
    call(RS_EXPORT),
    call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch"),
    # Revision round 1 (after the gate's failing feedback).
    call("cd /testbed && git diff", "The check still fails: the distance from \"\" is the whole length."),
    call("cd /testbed && sed -i 's/    let mut result = b_len.saturating_sub(1);/    let mut result = b_len;/' src/lib.rs && grep -n 'let mut result' src/lib.rs",
         "Start from b_len: every element of b is one insertion."),
    call(RS_EXPORT),
    call("echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch"),
]

OUT.mkdir(parents=True, exist_ok=True)
for name, turns in [("demo_test.jsonl", demo_test), ("demo_repair.jsonl", demo_repair),
                    ("demo_test_rust.jsonl", demo_test_rust), ("demo_repair_rust.jsonl", demo_repair_rust)]:
    with open(OUT / name, "w") as f:
        for t in turns:
            f.write(json.dumps(t) + "\n")
    print(f"wrote {OUT / name} ({len(turns)} turns)")

# The revision-loop benchmark script: per episode, Round 0 submits the partial fix, then five
# revision rounds each make a new (still failing) candidate and CHECK it; three episodes.
bench = []
for episode in range(3):
    bench += [call(FIX_PARTIAL), call(EXPORT), call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch")]
    for k in range(1, 6):
        bench += [
            call(f"cd /testbed && echo '# revision {k}' >> tablefmt/cells.py"),
            call(EXPORT),
            call("echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch"),
        ]
with open(OUT / "bench_tablefmt1.jsonl", "w") as f:
    for t in bench:
        f.write(json.dumps(t) + "\n")
print(f"wrote {OUT / 'bench_tablefmt1.jsonl'} ({len(bench)} turns)")
