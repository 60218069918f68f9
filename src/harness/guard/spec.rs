//! What a guarded run tells the code that starts first in the sandbox: the guard
//! (`sitecustomize.py`) and the canary planner (`canary.py`). Everything here is readable by the
//! code under test and holds no secret: which lines the candidate wrote (so events can be
//! attributed to them), which files it shipped, which test files are judged and which runner
//! process is the designated one. The run's nonce travels on the runner's stdin; the canary
//! mapping travels back on stdout; neither is ever written to a file.

use crate::harness::diff::{FileChange, FileOp};
use crate::harness::selector::CommandRunner;
use serde::Serialize;
use std::collections::BTreeMap;

/// Whose code is under suspicion in a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardMode {
    /// A candidate source patch (Repair gate, official grading): events are attributed to the
    /// lines it added.
    Candidate,
    /// A Test agent's bundle on Base (qualification): events are attributed to its test files.
    Bundle,
    /// A run with nothing under suspicion (a reference run on Base): events are recorded so that
    /// a candidate's unattributed events can be compared with what the repository does anyway.
    Reference,
}

/// One judged test the canary planner rewrites: its file, class (if any), function name, the
/// parameter suffix the command selected (`[a-b]`) and, for label runners, its dotted module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CanaryNode {
    pub path: String,
    pub cls: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
}

/// How a selector is written on the command line.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectorForm {
    /// `path.py::[Class::]name[param]`
    Pytest,
    /// `module.Class.name` (Django, unittest)
    Label,
    /// a bare name after sympy's `-k`
    Kw,
}

/// One word of the runner's command line: a literal, or the selector(s) of a judged node, which
/// the planner replaces by the node's random name, its mutants and the file's controls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ArgItem {
    Lit { lit: String },
    Node { node: usize, form: SelectorForm },
}

/// The canary part of a spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CanarySpec {
    /// `pytest` (module-level functions) or `unittest` (controls as a TestCase class).
    pub style: &'static str,
    /// Mutants per judged node (see [`super::canary::DEFAULT_MUTANTS`]).
    pub mutants: usize,
    pub nodes: Vec<CanaryNode>,
    /// The runner's whole command line (after environment assignments).
    pub args: Vec<ArgItem>,
    /// Where the planner writes the final command line (NUL-separated).
    pub args_file: String,
}

/// The spec file of a guarded run (JSON, in the handoff directory).
#[derive(Clone, Debug, Serialize)]
pub struct GuardSpec {
    pub prefix: &'static str,
    pub workspace: String,
    pub handoff: String,
    pub mode: GuardMode,
    /// `pytest`, `unittest`, `django`, `sympy`: which process is the designated runner.
    pub runner: &'static str,
    /// For script runners: the workspace-relative script (`tests/runtests.py`, `bin/test`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Lines the candidate added per path (`None`: a new file, every line).
    pub attributed: BTreeMap<String, Option<Vec<(u32, u32)>>>,
    /// Every path the candidate creates or changes.
    pub shipped: Vec<String>,
    /// Paths the candidate modifies that existed before (not new).
    pub modified: Vec<String>,
    /// The bundle's test files (bundle mode).
    pub bundle_files: Vec<String>,
    /// Test files whose functions are checked against what they compile to.
    pub test_files: Vec<String>,
    pub max_records: usize,
    /// Library source that looks like tests by name (`harness::diff::LIBRARY_TEST_SUPPORT`).
    pub source_prefixes: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
}

impl GuardSpec {
    pub fn new(mode: GuardMode, runner: CommandRunner, workspace: &str, handoff: &str) -> Self {
        GuardSpec {
            prefix: super::RECORD_PREFIX,
            workspace: workspace.to_string(),
            handoff: handoff.to_string(),
            mode,
            runner: runner_name(runner),
            script: None,
            attributed: BTreeMap::new(),
            shipped: Vec::new(),
            modified: Vec::new(),
            bundle_files: Vec::new(),
            test_files: Vec::new(),
            max_records: 4000,
            source_prefixes: crate::harness::diff::LIBRARY_TEST_SUPPORT.to_vec(),
            canary: None,
        }
    }

    /// Attribute events to the lines `files` add (a candidate patch).
    pub fn attribute_patch(&mut self, files: &[FileChange]) {
        for f in files {
            let Some(path) = f.new_path.clone() else {
                continue;
            };
            self.shipped.push(path.clone());
            if f.op == FileOp::Create || f.op == FileOp::Copy || f.op == FileOp::Rename {
                self.attributed.insert(path, None);
                continue;
            }
            self.modified.push(path.clone());
            self.attributed.insert(path, Some(added_line_ranges(f)));
        }
    }

    /// Put the bundle's files under suspicion (bundle mode).
    pub fn suspect_bundle(&mut self, files: &[FileChange]) {
        for f in files {
            if let Some(p) = &f.new_path {
                self.bundle_files.push(p.clone());
            }
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

fn runner_name(r: CommandRunner) -> &'static str {
    match r {
        CommandRunner::Pytest => "pytest",
        CommandRunner::Django => "django",
        CommandRunner::Unittest => "unittest",
        CommandRunner::Sympy => "sympy",
    }
}

/// New-file line ranges (1-based, inclusive) of the lines a file section adds.
pub fn added_line_ranges(f: &FileChange) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for h in &f.hunks {
        // `@@ -a,b +c,d @@`
        let Some(new_start) = h
            .header
            .split_whitespace()
            .find(|w| w.starts_with('+'))
            .and_then(|w| w[1..].split(',').next())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let mut line = new_start;
        for l in &h.lines {
            match l.chars().next() {
                Some('+') => {
                    match out.last_mut() {
                        Some((_, b)) if *b + 1 == line => *b = line,
                        _ => out.push((line, line)),
                    }
                    line += 1;
                }
                Some(' ') => line += 1,
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::diff::parse_patch;

    /// The guard's Python copy of the test-path rule agrees with the harness's.
    #[test]
    fn the_guard_classifies_test_paths_as_the_harness_does() {
        let paths = [
            "tests/test_a.py", "tests/helpers.py", "pkg/tests/data/x.json", "pkg/core.py",
            "conftest.py", "pkg/conftest.py", "test_x.py", "x_test.py", "x_tests.py", "tests.py",
            "testing/util.py", "django/test/runner.py", "django/test/test_x.py", "sympy/testing/runtests.py",
            "src/_pytest/python.py", "astropy/tests/helper.py", "astropy/tests/test_logger.py",
            "unittests/a.py", "test_data/a.py", "contest.py", "latest/a.py", "pkg/testing.py",
            "xarray/tests/__init__.py", "xarray/tests/test_x.py",
            "calc/calc_test.go", "calc/calc.go", "calc/testdata/in.txt", "calc/test.go",
        ];
        let dir = tempfile::tempdir().unwrap();
        let guard = dir.path().join("sitecustomize.py");
        std::fs::write(&guard, super::super::SITECUSTOMIZE).unwrap();
        let prefixes = serde_json::to_string(crate::harness::diff::LIBRARY_TEST_SUPPORT).unwrap();
        let list = serde_json::to_string(&paths).unwrap();
        let script = format!(
            "import json, importlib.util as u\ns = u.spec_from_file_location('g', {:?})\nm = u.module_from_spec(s); s.loader.exec_module(m)\nprint(json.dumps([m._execcritic_is_test_path(p, tuple(json.loads({prefixes:?}))) for p in json.loads({list:?})]))",
            guard.to_str().unwrap()
        );
        let out = std::process::Command::new("python3")
            .args(["-I", "-c", &script])
            .env_remove("EXECCRITIC_GUARD_SPEC")
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got: Vec<bool> = serde_json::from_slice(&out.stdout).unwrap();
        for (p, g) in paths.iter().zip(got) {
            assert_eq!(g, crate::harness::diff::is_test_path(p), "{p}");
        }
    }

    #[test]
    fn added_lines_are_attributed_in_new_file_coordinates() {
        let p = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,5 @@\n a = 1\n-b = 2\n+b = 3\n+c = 4\n d = 5\n e = 6\n@@ -10,2 +11,3 @@\n x\n+y\n z\n\
diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+import os\n+os._exit(0)\n";
        let files = parse_patch(p).unwrap();
        let mut s = GuardSpec::new(GuardMode::Candidate, CommandRunner::Pytest, "/testbed", "/tmp/.execcritic");
        s.attribute_patch(&files);
        assert_eq!(s.attributed["m.py"], Some(vec![(2, 3), (12, 12)]));
        assert_eq!(s.attributed["n.py"], None);
        assert_eq!(s.shipped, vec!["m.py", "n.py"]);
        assert_eq!(s.modified, vec!["m.py"]);
        let j: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(j["attributed"]["m.py"], serde_json::json!([[2, 3], [12, 12]]));
        assert_eq!(j["runner"], "pytest");
    }
}
