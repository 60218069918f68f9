//! The fixed prompts and controller messages of the paper (App. B.3), verbatim up to the PDF
//! extraction artefacts (typographic quotes around commands restored to backticks, `–` restored to
//! `--`, the blank lines the extraction put between wrapped lines removed). Placeholders: `{{ task }}`
//! and `{{ step_limit }}` in initial messages, `{feedback}` and `{error}` in follow-ups, exactly as
//! the paper's listings declare them.
//!
//! Three messages the paper does not print are ours and marked as such: the Round-0 solve prompt
//! (the paper inherits mini-swe-agent's), the Test agent's rejection follow-up, and the runner
//! note appended to the Test agent's instance message for a repository that is not Python
//! ([`runner_note`]: the paper's prompt is Python-specific only by example — `test_*` names,
//! node ids — and stays verbatim).

/// Test agent: system message (B.3.1).
pub const TEST_SYSTEM: &str = "\
You are an experienced repository maintainer writing one precise regression test for the issue.
Correctly identify the smallest public behavior contract before treating a Base failure as useful.
You have one standard bash tool; all inspection, editing, testing, and submission use it.";

/// Test agent: instance message (B.3.1).
pub const TEST_INSTANCE: &str = "\
You are in a real shell at /testbed, checked out at the BUGGY commit: the bug is NOT fixed.
A correct regression test should cleanly FAIL here for the issue behavior, and would pass once
a correct fix is applied. You do not have that fix, its patch, or oracle tests.

<original_issue>
{{ task }}
</original_issue>

The prepared repository environment is active and the package is importable. Do not create a
virtualenv, reinstall, or run pip. Infer the repository-native test entrypoint and selector from
current configuration, CI, and adjacent tests. Do not create a standalone reproduction script,
custom settings module, or custom runner when an adjacent repository test can exercise the issue.

You have at most {{ step_limit }} model turns. A clean Base failure is necessary but not sufficient:
it proves only that the buggy checkout disagrees with your assertion, not that the assertion is the
behavior required by the issue. Before editing, determine the public behavior contract. Inspect the
adjacent test file, its fixtures, parameter tables, and nearby boundary cases so your test uses the
same supported workflow. Consider at least one plausible alternative interpretation of the issue.

Gold-free boundary:
- Never inspect git history, refs, branches, tags, remotes, commits, or `.git` internals. Do not run
`git log`, `git show`, `git branch`, `git cat-file`, or any diff against a commit/ref.
- For git, use only `git status`, `git add -AN`, and plain working-tree `git diff`.
- Derive expected behavior only from the issue text, public docs, current buggy code, and current
tests. Do not search for or reconstruct the historical fix or oracle test.

Test-quality contract:
1. Exercise a public API, CLI, rendered output, migration operation, or established repository
workflow. Do not assert private/internal state merely because it is easy to inspect. If the
issue is about rendering or integration behavior, test that observable result rather than an
internal flag or helper.
2. Assert the CORRECTED behavior, never the buggy symptom. Pin an exact value, message, count, or
ordering only when the issue, docs, or an existing public test explicitly fixes that literal.
Otherwise use the weakest observable property that the issue guarantees and buggy Base violates.
3. Add one coherent regression-test group for this behavior. It may contain one or more new
`test_*` functions or methods and may modify the fixture, parameter, helper, or data files they
require. If the repository already expresses cases through a parameter/data table, extending
that table and targeting its existing exact test node is allowed. Do not add unrelated coverage.
4. The one-line command in /tmp/test_command must explicitly select every test node declared for
this behavior. A file-, class-, directory-, or suite-level command is rejected even if it fails.

Before submission, write valid JSON to /tmp/test_contract.json with exactly these required fields:
- \"entrypoint\": public API/CLI/workflow exercised;
- \"trigger\": issue-backed input and setup that exposes the bug;
- \"expected_output\": minimal corrected observable behavior asserted;
- \"issue_evidence\": nonempty list of issue/doc/current-test evidence supporting the expectation;
- \"alternative_hypotheses\": nonempty list of plausible interpretations you considered and rejected;
- \"non_assertions\": nonempty list of tempting literals/internal details intentionally not pinned;
- \"test_nodes\": a nonempty list containing every exact test_* name exercised by this change.
The harness validates this structure, requires every newly added test_* to be declared, and binds
every declared node to /tmp/test_command. Existing nodes are allowed for fixture/parameter/data edits.

Protocol:
1. Inspect only enough implementation to confirm a public call signature or observable behavior,
plus the adjacent tests/fixtures/parameters needed for a repository-native test.
2. Edit files directly in /testbed with bash. Run the exact focused command for the declared nodes. If it
fails for the intended issue behavior, review every assertion against the behavior contract;
revise over-pinned, private-state, or unsupported expectations before submitting.
3. In one preparation bash call, write /tmp/test_contract.json and exactly one command line to
/tmp/test_command, then create and inspect the patch outside the repository:
cd /testbed && git add -AN && git diff --no-color > /tmp/test.patch
/tmp/test.patch must be nonempty and contain only the intended regression-test changes.
4. Submit with exactly one final bash call:
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch

The harness applies the patch on an isolated clean buggy Base and runs only the bound test nodes.
If rejected, fix the reported contract, selector, collection, or behavior problem and resubmit.
Nothing is submitted by ordinary prose. Every response must contain a bash tool call.";

/// Test agent: the runner note for a `cargo test` repository (ours), appended to the instance
/// message: how the paper's `test_*` names, selectors and node ids read for Rust.
pub const CARGO_NOTE: &str = "\
Runner note: this repository's tests run with Rust's `cargo test`, not a Python runner. Read
`test_*` above as the repository's `#[test]` functions. Add new tests in an integration test file
under `tests/` (a test bundle may not change `src/`, `Cargo.toml`, `build.rs` or cargo
configuration). The one-line command selects one package and one test target, then the exact
test paths: `cargo test -p <package> --test <target> -- --exact <test path>...` (`--lib` for the
library's own unit tests). A declared test node is `<package>/<target>::<test path>`, e.g.
`strsim/test/lib::levenshtein_works` or `calc/lib::tests::adds`, or the test path alone. The
harness builds the tests once and runs each declared test in its own process; its exit status
is the result.";

/// Test agent: the runner note for a `go test` repository (ours): the same for Go.
pub const GO_NOTE: &str = "\
Runner note: this repository's tests run with Go's `go test`, not a Python runner. Read `test_*`
above as the repository's `func TestX(t *testing.T)` functions. Add new tests in a `_test.go`
file of the package under test (a test bundle may not change non-test `.go` files, `go.mod` or
`vendor/`). The one-line command selects exact test names with one anchored, single-quoted regex
and the package directory: `go test -run '^TestX$' ./pkg` or `go test -run '^(TestA|TestB)$'
./pkg` (`.` for the module root); a subtest by its exact name as `go test -v` prints it, regexp
metacharacters escaped with `\\`: `go test -run '^TestAdd$/^negative$' ./calc`. A declared test
node is `<package dir>::<TestName>`, e.g. `./calc::TestAdd` or `./calc::TestAdd/negative`, or
the test name alone. Write each check as `if got != want { t.Errorf(...) }`
with a literal expected value: the harness builds the tests once and runs each declared test in
its own process; its exit status is the result.";

/// The runner note for a task's runner (`None`: a Python runner, the paper's prompt as it is).
pub fn runner_note(runner: crate::task::Runner) -> Option<&'static str> {
    match runner {
        crate::task::Runner::Cargo => Some(CARGO_NOTE),
        crate::task::Runner::Go => Some(GO_NOTE),
        _ => None,
    }
}

/// Format-error message for a response without a valid tool call (B.3.1).
pub const FORMAT_ERROR: &str = "\
Tool call error:

<error>
{error}
</error>

Every response must contain at least one standard bash tool call. Do not emit custom tools.";

/// Test agent: follow-up after a rejected submission (ours; the paper prints no text for it).
pub const TEST_REJECTED: &str = "\
The harness rejected submission {attempt} of at most {max_attempts}. Nothing was qualified.

<rejection>
{feedback}
</rejection>

Fix the reported contract, selector, collection, or behavior problem and resubmit with
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch";

/// Round-0 (initial solve) system message (B.3.2, the default Repair system message).
pub const REPAIR_SYSTEM: &str =
    "You are a helpful assistant that can interact with a computer shell to solve programming tasks.";

/// System message of the fallback path, used only when no seed conversation exists (B.3.2).
pub const REPAIR_FALLBACK_SYSTEM: &str =
    "You are a careful software engineer that interacts with a computer shell to solve programming tasks.";

/// Round-0 solve prompt (ours, after mini-swe-agent's SWE-bench instance prompt, which the paper
/// inherits and does not print).
pub const ROUND0_INSTANCE: &str = "\
<pr_description>
Consider the following issue description:

{{ task }}
</pr_description>

You are in a real shell at /testbed, a checkout of the repository at the commit the issue was
reported against. Make changes to non-test source files in /testbed so that the behavior described
in the issue is fixed, in a way that is general and consistent with the codebase.
Do not modify or add test files.

You have one bash tool and at most {{ step_limit }} model turns. Every response must contain exactly
one bash tool call. Recommended workflow: analyze the relevant code, reproduce the issue, edit the
source code, verify the fix and edge cases.

When you are done, submit your work with EXACTLY two separate commands (the second must start your
command's output):
cd /testbed && git add -AN && git diff --no-color -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch";

/// First revision message, appended to the retained Round-0 conversation (B.3.2).
pub const REPAIR_REVISION: &str = "\
You are fixing a bug. A previous patch attempt is ALREADY APPLIED in the repository workspace,
but the hidden regression-test gate has not produced a valid pass. You CANNOT see the test file;
you receive the execution feedback below.
Your job: edit the SOURCE code in /testbed so the described behavior is correct. Do NOT edit or
create test files.

<original_issue>
{{ task }}
</original_issue>

<failing_test_output>
{{ feedback }}
</failing_test_output>

A valid behavioral failure is useful evidence, but the generated test may be incomplete,
over-specific, or wrong. An operational error is not evidence that the source patch violates
the test requirement. Judge valid test feedback together with the original issue, repository
behavior, and checks you can run in the repository workspace.

Steps:
1. `cd /testbed && git diff` to see the already-applied previous attempt.
2. Distinguish behavioral failure from operational error. Infer the intended behavior from
the original issue and any valid behavioral feedback.
3. Make the minimal SOURCE edit(s) needed. Only non-test files.
4. Re-derive your own quick check if helpful, then explicitly choose one action below.

Export the complete cumulative SOURCE patch relative to Base, including intended new files,
not just edits since the previous round. Preserve this rule for both CHECK and FINAL-SUBMIT.

To CHECK the current candidate against the hidden generated test, use EXACTLY two separate
commands (must exit 0):
cd /testbed && git diff -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch
The check returns environment feedback. A valid pass immediately ends repair; the controller
submits the passing patch without another agent action. A valid failure allows another revision
while budget remains and does not by itself prove the source patch is wrong. An operational
error is reported as inconclusive and does not add revision budget.
If the test has not passed after the fifth revision, the controller force-submits the latest
candidate and ends repair without requiring another agent decision.

To FINAL-SUBMIT the current patch because it is your best solution, even if the hidden generated
test is still failing or suspect, use EXACTLY two separate commands (must exit 0):
cd /testbed && git diff -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch
FINAL-SUBMIT ends repair. The harness records the latest gate result separately; your decision
to submit does not claim that the generated test passed.";

/// Follow-up after a non-passing CHECK with revision budget remaining (B.3.2).
pub const REPAIR_FOLLOWUP: &str = "\
Your latest source patch was tested against the hidden generated regression test, but the gate
has not produced a valid pass. Distinguish behavioral failure from an operationally inconclusive
execution; an environment or infrastructure error does not establish a source-code defect.
Treat the output as environment feedback, not an absolute veto. Compare it
with the original issue and repository behavior. Then either make another minimal source-only
edit and CHECK the candidate again, or FINAL-SUBMIT the current patch if the generated test is
wrong or over-specific and the source patch is already the best solution.

<updated_failing_test_output>
{feedback}
</updated_failing_test_output>

Do not edit or create tests. Export the full cumulative SOURCE patch relative to Base,
including intended new source files, for either action.

CHECK candidate:
cd /testbed && git diff -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH && cat /tmp/fix.patch

FINAL-SUBMIT current patch regardless of the gate result:
cd /testbed && git diff -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch";

/// Terminal notice after a valid passing CHECK (B.3.2).
pub const REPAIR_PASS_NOTICE: &str = "\
The hidden generated-test CHECK passed in a valid execution.
The controller has submitted the passing candidate as the final source patch.
Repair is complete; no further edits, checks, or submission decisions are accepted.
The full official evaluator determines whether this patch resolves the task.";

/// Terminal notice when the fifth revision did not pass (B.3.2).
pub const REPAIR_EXHAUSTED_NOTICE: &str = "\
The generated test has not produced a valid pass after the fifth feedback-guided revision.
The controller has force-submitted the latest candidate as the final source patch.
Repair is complete; no further edits, checks, or submission decisions are accepted.
The full official evaluator determines whether this patch resolves the task.";

/// Answer to a CHECK whose candidate equals the last checked one (B.3.2).
pub const REPAIR_UNCHANGED: &str = "\
The latest candidate CHECK did not make a new source-code change, so the hidden generated test was
not rerun and this did not consume a gate check. Inspect the current diff and feedback. Either make
a concrete non-test source edit before checking again, or explicitly FINAL-SUBMIT the unchanged
patch if it is already the best solution and the generated test is wrong or over-specific.";

/// Recovery prompt after a source patch that could not be applied (B.3.2).
pub const REPAIR_RECOVERY: &str = "\
You are fixing a bug. A previous patch attempt could NOT be applied by the harness, so /testbed
is currently at the clean base checkout. You CANNOT see the hidden regression tests yet.
Your job in this round: create a valid minimal SOURCE patch in /testbed that addresses the
original issue. Use the failed patch/apply diagnostics only as hints. Do NOT edit or create test
files.

<original_issue>
{{ task }}
</original_issue>

<failed_patch_apply_diagnostics>
{{ diagnostics }}
</failed_patch_apply_diagnostics>

Steps:
1. `cd /testbed && git status && git diff` to confirm the clean starting point.
2. Read the issue and the patch-apply diagnostics. Infer the intended source change.
3. Make the minimal SOURCE edit(s). Only non-test files.
4. Submit a syntactically valid unified diff.

Submit with EXACTLY two separate commands (must exit 0):
cd /testbed && git diff -- <non-test source files> > /tmp/fix.patch
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch";

/// Fill `{{ name }}` (Jinja-style, initial messages) and `{name}` (Python-format style,
/// follow-ups) placeholders. Values are inserted literally (no re-expansion of their content).
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    'scan: while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let tail = &rest[open..];
        for (name, value) in vars {
            for pattern in [format!("{{{{ {name} }}}}"), format!("{{{name}}}")] {
                if tail.starts_with(&pattern) {
                    out.push_str(value);
                    rest = &tail[pattern.len()..];
                    continue 'scan;
                }
            }
        }
        out.push('{');
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cargo_note_names_forms_the_validator_accepts() {
        use crate::harness::runners::parse_native_command;
        assert_eq!(runner_note(crate::task::Runner::Pytest), None);
        let note = runner_note(crate::task::Runner::Cargo).unwrap();
        for cmd in ["cargo test -p strsim --test lib -- --exact levenshtein_works", "cargo test -p calc --lib -- --exact tests::adds"] {
            let c = parse_native_command(cmd).unwrap().unwrap();
            assert!(c.nodes.iter().all(|n| note.contains(n.as_str())), "{:?}", c.nodes);
        }
        assert!(note.contains("cargo test -p <package> --test <target> -- --exact <test path>..."));
    }

    #[test]
    fn the_go_note_names_forms_the_validator_accepts() {
        use crate::harness::runners::parse_native_command;
        let note = runner_note(crate::task::Runner::Go).unwrap();
        for (cmd, node) in [("go test -run '^TestX$' ./pkg", "./pkg::TestX"), ("go test -run '^TestAdd$/^negative$' ./calc", "./calc::TestAdd/negative")] {
            assert!(note.contains(cmd), "{cmd}");
            assert_eq!(parse_native_command(cmd).unwrap().unwrap().nodes, [node]);
        }
        assert!(note.contains("`./calc::TestAdd/negative`"));
    }

    #[test]
    fn renders_both_placeholder_styles_without_reexpansion() {
        let s = render(
            "a {{ task }} b {feedback} c {other}",
            &[("task", "T {feedback}"), ("feedback", "F")],
        );
        assert_eq!(s, "a T {feedback} b F c {other}");
    }

    #[test]
    fn every_template_placeholder_is_known() {
        for (t, names) in [
            (TEST_INSTANCE, &["task", "step_limit"][..]),
            (FORMAT_ERROR, &["error"][..]),
            (REPAIR_REVISION, &["task", "feedback"][..]),
            (REPAIR_FOLLOWUP, &["feedback"][..]),
            (REPAIR_RECOVERY, &["task", "diagnostics"][..]),
            (ROUND0_INSTANCE, &["task", "step_limit"][..]),
        ] {
            let vars: Vec<(&str, &str)> = names.iter().map(|n| (*n, "X")).collect();
            let out = render(t, &vars);
            assert!(!out.contains("{{"), "unfilled placeholder in {out}");
            for n in names {
                assert!(!out.contains(&format!("{{{n}}}")));
            }
        }
    }
}
