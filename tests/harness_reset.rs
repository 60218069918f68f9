//! The reset between gate attempts is complete, in every mode (local with ephemeral runs,
//! local resetting with git, docker): a candidate whose code, when imported by the tests,
//! plants a pytest hook that turns every test into a pass (in a tracked `conftest.py`, an
//! untracked `tests/conftest.py`, an ignored file and `/tmp`) must not influence the next
//! gate: a wrong candidate gated afterwards still fails and the gold patch still passes.

mod harness_support;

use execcritic::harness::gate::check_candidate_in;
use execcritic::harness::{Bundle, FrozenBundle, GateStatus, Sandbox, SandboxConfig};
use harness_support::*;
use std::time::Duration;

// The planting code comes last, so the candidate diff ends with added lines. The runtime guard
// (`harness::guard`) finds the poison writing conftest.py (`tampered`); what is tested here is
// the reset behind it: whatever the poison left must not reach the next gate.
const POISON: &str = r#"def add(a, b):
    return a - b


def sub(a, b):
    return a - b


import os

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_hook = (
    "import py" "test\n\n\n@py" "test.hookimpl(tryfirst=True)\n"
    "def py" "test_runtest_call(item):\n    item.runtest = lambda: None\n"
)
for _p in ("conftest.py", os.path.join("tests", "conftest.py")):
    with open(os.path.join(_root, _p), "w") as _f:
        _f.write(_hook)
with open(os.path.join(_root, ".git", "info", "exclude"), "a") as _f:
    _f.write("planted.txt\n")
with open(os.path.join(_root, "planted.txt"), "w") as _f:
    _f.write("x")
with open("/tmp/planted", "w") as _f:
    _f.write("x")
"#;

fn frozen() -> FrozenBundle {
    let patch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let cmd = "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py::test_add";
    FrozenBundle::freeze(Bundle::from_parts(&patch, cmd, CONTRACT).unwrap()).unwrap()
}

/// `git_metadata_restored`: whether the mode also restores `.git/` (every mode does: ephemeral
/// runs never write it, the other modes put it back from their snapshot, see docs/harness.md).
async fn check(sb: &dyn Sandbox, label: &str, git_metadata_restored: bool) {
    let f = fixture();
    let frozen = frozen();
    let poison = diff_against_base(&[("calc/__init__.py", POISON)]);
    let t = Duration::from_secs(120);
    let gate = |p: String| {
        let frozen = frozen.clone();
        async move { check_candidate_in(sb, &frozen, &p, t).await.unwrap() }
    };
    let screened = POISON.replace("\"py\" \"test", "\"pytest").replace("@py\" \"test", "@pytest").replace("def py\" \"test", "def pytest");
    let v = gate(diff_against_base(&[("calc/__init__.py", &screened)])).await;
    assert_eq!(
        v.failure_kind,
        execcritic::harness::FailureKind::Tampered,
        "{label}: the plain poison is found by the runtime guard"
    );
    let v = gate(poison.clone()).await;
    assert_eq!(
        v.status,
        GateStatus::HardFail,
        "{label}: poison itself fails"
    );
    // The hook is planted now; a reset that missed any of it would make this pass.
    let v = gate(WRONG_PATCH.to_string()).await;
    assert_eq!(v.status, GateStatus::HardFail, "{label}: {}", v.feedback);
    let v = gate(poison).await;
    assert_eq!(v.status, GateStatus::HardFail, "{label}: poison again");
    let v = gate(String::new()).await;
    assert_eq!(
        v.status,
        GateStatus::HardFail,
        "{label}: empty patch: {}",
        v.feedback
    );
    let v = gate(f.gold_patch.clone()).await;
    assert_eq!(v.status, GateStatus::Pass, "{label}: gold: {}", v.feedback);
    // After a reset, the work tree is exactly Base and /tmp is empty.
    sb.reset().await.unwrap();
    let st = sb
        .exec(
            "git status --porcelain --untracked-files=all --ignored; ls -A /tmp",
            t,
        )
        .await
        .unwrap();
    assert!(
        !st.output.contains("conftest") && !st.output.contains("planted"),
        "{label}: {}",
        st.output
    );
    let exclude = sb.exec("cat .git/info/exclude", t).await.unwrap();
    assert_eq!(
        exclude.output.contains("planted"),
        !git_metadata_restored,
        "{label}: {}",
        exclude.output
    );
}

#[tokio::test]
async fn reset_between_gates_is_complete_local_ephemeral() {
    let sb = local_sandbox(&SandboxConfig::default());
    assert!(
        sb.ephemeral_runs(),
        "root with overlayfs: ephemeral runs expected"
    );
    check(sb.as_ref(), "local", true).await;
}

#[tokio::test]
async fn reset_between_gates_is_complete_local_git_reset() {
    let sb = local_sandbox(&SandboxConfig {
        no_ephemeral: true,
        ..Default::default()
    });
    assert!(!sb.ephemeral_runs());
    check(sb.as_ref(), "local, git reset", true).await;
}

#[tokio::test]
async fn reset_between_gates_is_complete_docker() {
    if !docker_available().await {
        return;
    }
    let sb = docker_sandbox(&SandboxConfig::default()).await;
    check(sb.as_ref(), "docker", true).await;
}
