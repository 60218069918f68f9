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
