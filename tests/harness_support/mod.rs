//! Shared fixtures for the harness integration tests: a tiny real pytest project in a git
//! repository (Base with a bug, a gold fix, an official test patch), and sandbox openers.
#![allow(dead_code)]

use execcritic::harness::sandbox::local::{LocalSandbox, Populate};
use execcritic::harness::{HarnessError, Sandbox, SandboxConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub const CALC_BASE: &str =
    "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";
pub const CALC_GOLD: &str =
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
pub const TEST_BASE: &str =
    "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n";

/// A fixture repository: `base` commit (buggy `add`), and a later `gold` commit that fixes it
/// (the gold commit lives in the repository like upstream history does).
pub struct Fixture {
    pub dir: PathBuf,
    pub base: String,
    pub gold_patch: String,
}

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("execcritic-fixture-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("calc")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("calc/__init__.py"), CALC_BASE).unwrap();
        std::fs::write(dir.join("tests/test_calc.py"), TEST_BASE).unwrap();
        std::fs::write(dir.join("setup.cfg"), "[tool:pytest]\ntestpaths = tests\n").unwrap();
        std::fs::write(dir.join("conftest.py"), "").unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "base"]);
        let base = git(&dir, &["rev-parse", "HEAD"]);
        std::fs::write(dir.join("calc/__init__.py"), CALC_GOLD).unwrap();
        let gold_patch = git(&dir, &["diff"]) + "\n";
        git(&dir, &["commit", "-q", "-am", "gold"]);
        git(&dir, &["checkout", "-q", &base]);
        Fixture {
            dir,
            base,
            gold_patch,
        }
    })
}

/// Populate closure cloning the fixture at its Base.
pub fn populate() -> Populate {
    let f = fixture();
    let src = f.dir.clone();
    let base = f.base.clone();
    Box::new(move |ws: &Path| -> Result<String, HarnessError> {
        let out = Command::new("git")
            .args(["clone", "-q", "--no-checkout"])
            .arg(&src)
            .arg(ws)
            .output()
            .map_err(|e| HarnessError::Task(e.to_string()))?;
        if !out.status.success() {
            return Err(HarnessError::Task(
                String::from_utf8_lossy(&out.stderr).into(),
            ));
        }
        let out = Command::new("git")
            .args(["checkout", "-q", &base])
            .current_dir(ws)
            .output()
            .map_err(|e| HarnessError::Task(e.to_string()))?;
        if !out.status.success() {
            return Err(HarnessError::Task(
                String::from_utf8_lossy(&out.stderr).into(),
            ));
        }
        Ok(base.clone())
    })
}

pub fn local_sandbox(config: &SandboxConfig) -> Box<dyn Sandbox> {
    Box::new(LocalSandbox::open(populate(), config).expect("local sandbox opens"))
}

/// Unified diff adding/modifying files (paths relative to repo root) against the fixture Base.
pub fn diff_against_base(changes: &[(&str, &str)]) -> String {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("r");
    git(tmp.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
    git(&ws, &["checkout", "-q", &f.base]);
    for (p, c) in changes {
        let path = ws.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    git(&ws, &["add", "-A"]);
    git(&ws, &["diff", "--cached"]) + "\n"
}

pub const CONTRACT: &str = r#"{"entrypoint": "calc.add", "trigger": "add(2, 3)", "expected_output": "5",
 "issue_evidence": ["add subtracts"], "alternative_hypotheses": ["none"], "non_assertions": ["sub unchanged"],
 "test_nodes": ["tests/test_calc.py::test_add"]}"#;

pub fn contract_with_nodes(nodes: &[&str]) -> String {
    let mut v: serde_json::Value = serde_json::from_str(CONTRACT).unwrap();
    v["test_nodes"] = serde_json::json!(nodes);
    v.to_string()
}

/// The official test file: adds `test_add`.
pub fn official_test_file() -> String {
    format!(
        "{}\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        TEST_BASE.replace("from calc import sub", "from calc import add, sub")
    )
}

/// A tests/test_calc.py whose new test has `body` (indented 4) as its body.
pub fn test_file_with(body: &str) -> String {
    format!(
        "{}\n\ndef test_add():\n{}\n",
        TEST_BASE.replace("from calc import sub", "from calc import add, sub"),
        body
    )
}

pub const WRONG_PATCH: &str = "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a * b\n \n \n def sub(a, b):\n";

/// The fixture as a task instance (gold fix, official test patch, labelled candidates).
pub fn fixture_task() -> execcritic::task::TaskInstance {
    let f = fixture();
    let test_patch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let v = serde_json::json!({
        "instance_id": "calc__calc-1",
        "repo": "calc/calc",
        "base_commit": f.base,
        "patch": f.gold_patch,
        "test_patch": test_patch,
        "problem_statement": "add() subtracts instead of adding",
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "repo_path": f.dir,
        "runner": "pytest",
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider",
        "candidates": [{"patch": f.gold_patch, "resolved": true}, {"patch": WRONG_PATCH, "resolved": false}, {"patch": "", "resolved": false}],
    });
    execcritic::task::TaskInstance::from_json(v, None).expect("fixture task parses")
}

/// The docker test image (built by scripts/ci-deps-harness.sh).
pub fn docker_image() -> String {
    std::env::var("EXECCRITIC_DOCKER_IMAGE").unwrap_or_else(|_| "execcritic-pytest:latest".into())
}

/// Whether the docker daemon and the test image are available; prints why not.
pub async fn docker_available() -> bool {
    match execcritic::harness::sandbox::docker::connect().await {
        Err(e) => {
            eprintln!("SKIPPED docker tests: {e} (run scripts/ci-deps-harness.sh)");
            false
        }
        Ok(d) => {
            match d.inspect_image(&docker_image()).await {
                Ok(_) => true,
                Err(e) => {
                    eprintln!("SKIPPED docker tests: image {} missing: {e} (run scripts/ci-deps-harness.sh)", docker_image());
                    false
                }
            }
        }
    }
}

pub async fn docker_sandbox(config: &SandboxConfig) -> Box<dyn Sandbox> {
    Box::new(
        execcritic::harness::sandbox::DockerSandbox::open(
            &docker_image(),
            Some(populate()),
            "",
            false,
            config,
        )
        .await
        .expect("docker sandbox opens"),
    )
}
