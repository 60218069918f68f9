//! SWE-bench Pro end to end against a real docker daemon (skipped, saying why, without one): a
//! Pro-style image (the repository in `/app` with its fix commit still in the store, as the
//! published images have it; `pytest` reachable only through the Dockerfile's `ENV PATH`), a Pro
//! row with its `before_repo_set_cmd`, run script, `parser.py` and Dockerfile `ENV` lines, graded
//! by `harness::grade` and by the `grade` command.
//!
//! Gold resolves, empty does not. Two attacks that the official Pro procedure (its entry script:
//! patch, `git checkout <fix> -- tests`, run script, `parser.py` in the same container) grades as
//! passing are first shown passing that procedure in a plain container, then refused here:
//! - reading the fix out of the git store (`git rev-list --all --not HEAD`): our container's
//!   history is sanitised, so there is no fix to read;
//! - rewriting `/workspace/parser.py` from the code under test: our parser runs in a fresh
//!   sandbox on the logs;
//! - rewriting `/workspace/stdout.log` at exit (and writing the same lines to `/dev/stdout`):
//!   our logs are rebuilt from the run script's tagged output stream, where lines cannot be
//!   taken back;
//! - printing a passing line for the failing test after pytest's report, then exiting 0: the
//!   official grading passes a name any of whose entries in `output.json` is PASSED; ours keeps
//!   a name's first other status.

mod harness_support;
#[path = "common/official_eval.rs"]
mod official_eval;

use execcritic::harness::{self, SandboxKind};
use execcritic::task::TaskInstance;
use harness_support::*;
use official_eval::Image;
use std::process::Command;

/// The image: `pytest` only in /opt/venv/bin, `/app` at Base on `main`, the fix commit (source
/// and test) on branch `upstream`. Prints the Base and fix commits.
const LAYOUT: &str = r#"set -e
mkdir -p /opt/venv/bin /workspace
printf '#!/bin/sh\nexec python3 -m pytest "$@"\n' > /opt/venv/bin/pytest
chmod +x /opt/venv/bin/pytest
ln -s "$(command -v python3)" /opt/venv/bin/python
mkdir -p /app/tests; cd /app
git init -q -b main
printf 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n' > calc.py
printf 'from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n' > tests/test_calc.py
touch tests/__init__.py conftest.py
git -c user.name=t -c user.email=t@t add .
git -c user.name=t -c user.email=t@t commit -q -m base
base=$(git rev-parse HEAD)
git checkout -q -b upstream
printf 'def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n' > calc.py
printf 'from calc import add, sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n\n\ndef test_add():\n    assert add(2, 3) == 5\n' > tests/test_calc.py
git -c user.name=t -c user.email=t@t commit -q -am fix
fix=$(git rev-parse HEAD)
git checkout -q main
echo "$base $fix""#;

const GOLD: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n";
/// The diff from Base to the fix commit of the test file (the row's `test_patch`).
const TEST_PATCH: &str = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1,5 +1,9 @@\n-from calc import sub\n+from calc import add, sub\n \n \n def test_sub():\n     assert sub(3, 1) == 2\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n";
/// Reads the fixed `calc.py` out of the git store (any commit HEAD does not reach).
const FUTURE: &str = r#"diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -4,3 +4,9 @@
 
 def sub(a, b):
     return a - b
+import os, subprocess
+_here = os.path.dirname(os.path.abspath(__file__))
+_run = lambda *a: subprocess.run(['git', *a], cwd=_here, capture_output=True, text=True).stdout
+_future = _run('rev-list', '--all', '--not', 'HEAD').split()
+if _future:
+    exec(_run('show', _future[0] + ':calc.py'))
"#;
/// Rewrites the instance's parser, from the code under test, into one that passes everything.
const PARSER_REWRITE: &str = r#"diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -4,3 +4,11 @@
 
 def sub(a, b):
     return a - b
+_CODE = """import json, re, sys
+names = re.findall(r"^(\S+::\S+)", open(sys.argv[1]).read(), re.M)
+json.dump({"tests": [{"name": n, "status": "PASSED"} for n in names]}, open(sys.argv[3], "w"))
+"""
+try:
+    open('/workspace/parser.py', 'w').write(_CODE)
+except OSError:
+    pass
"#;

/// Rewrites the run script's stdout log at exit, from the code under test, so that every test
/// named in it passes, and exits 0 (the official procedure redirects the run script into that
/// file; before logs were rebuilt from the stream, this resolved here too).
const LOG_REWRITE: &str = r#"diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -4,3 +4,14 @@
 
 def sub(a, b):
     return a - b
+import atexit, os, sys
+
+
+def _forge():
+    sys.stdout.flush()
+    try:
+        open('/workspace/stdout.log', 'w').write('tests/test_calc.py::test_add PASSED\ntests/test_calc.py::test_sub PASSED\n')
+    except OSError:
+        pass
+    os._exit(0)
+atexit.register(_forge)
"#;
/// Prints a passing line for the failing test after pytest's own report and exits 0: the
/// official grading counts a name as passed when any of its entries in `output.json` is.
const PRINTED: &str = r#"diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -4,3 +4,11 @@
 
 def sub(a, b):
     return a - b
+import atexit, os, sys
+
+
+def _forge():
+    sys.stdout.write('tests/test_calc.py::test_add PASSED\n')
+    sys.stdout.flush()
+    os._exit(0)
+atexit.register(_forge)
"#;

const RUN_SCRIPT: &str = r#"#!/bin/bash
set -e
run_all_tests() { pytest -v tests; }
run_selected_tests() { local files=("$@"); pytest -v "${files[@]}"; }
if [ $# -eq 0 ]; then run_all_tests; exit $?; fi
IFS=',' read -r -a TEST_FILES <<< "$1"
run_selected_tests "${TEST_FILES[@]}"
"#;

const PARSER: &str = r#"import json, re, sys
stdout = open(sys.argv[1]).read()
tests = [{"name": m.group(1), "status": m.group(2)}
         for m in re.finditer(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR)", stdout, re.M)]
json.dump({"tests": tests}, open(sys.argv[3], "w"))
"#;

const BASE_DOCKERFILE: &str = "FROM debian\nENV PATH=/opt/venv/bin:$PATH\nWORKDIR /app\n";
const INSTANCE_DOCKERFILE: &str = "FROM base\nENV PYTHONDONTWRITEBYTECODE=1\n";

const ID: &str = "instance_demo__calc-1a2b3c";

fn row(image: &str, base: &str, fix: &str) -> serde_json::Value {
    serde_json::json!({
        "repo": "demo/calc", "instance_id": ID, "base_commit": base,
        "patch": GOLD, "test_patch": TEST_PATCH, "problem_statement": "add subtracts",
        "repo_language": "python",
        "fail_to_pass": "['tests/test_calc.py::test_add']",
        "pass_to_pass": "['tests/test_calc.py::test_sub']",
        "before_repo_set_cmd": format!("git reset --hard {base}\ngit clean -fd \ngit checkout {base} \ngit checkout {fix} -- tests/test_calc.py"),
        "selected_test_files_to_run": "['tests/test_calc.py']",
        "image": image,
        "run_script": RUN_SCRIPT, "parser_script": PARSER,
        "base_dockerfile": BASE_DOCKERFILE, "instance_dockerfile": INSTANCE_DOCKERFILE,
    })
}

/// Builds the image; returns (Base, fix).
fn build(image: &str) -> (String, String) {
    let text = official_eval::build_image(&docker_image(), image, LAYOUT);
    let mut ids = text.split_whitespace().map(str::to_string);
    (ids.next().unwrap(), ids.next().unwrap())
}

/// The official Pro procedure (swe_bench_pro_eval.py's entry script) in a plain container of
/// `image`: the patch, the fix commit's test files, the run script, the parser in the same
/// container. Returns `output.json`.
fn official_procedure(image: &str, base: &str, fix: &str, patch: &str) -> serde_json::Value {
    let script = format!(
        "set -e\ncat > /workspace/patch.diff <<'EOF_P'\n{patch}EOF_P\n\
         cat > /workspace/run_script.sh <<'EOF_R'\n{RUN_SCRIPT}EOF_R\n\
         cat > /workspace/parser.py <<'EOF_Q'\n{PARSER}EOF_Q\nset +e\n\
         export PATH=/opt/venv/bin:$PATH\nexport PYTHONDONTWRITEBYTECODE=1\n\
         cd /app\ngit reset --hard {base}\ngit checkout {base}\ngit apply -v /workspace/patch.diff\n\
         git checkout {fix} -- tests/test_calc.py\n\
         bash /workspace/run_script.sh tests/test_calc.py > /workspace/stdout.log 2> /workspace/stderr.log\n\
         python /workspace/parser.py /workspace/stdout.log /workspace/stderr.log /workspace/output.json\n\
         cat /workspace/output.json\n"
    );
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", "none", image, "bash", "-c", &script])
        .output()
        .expect("docker run");
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.lines().last().unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)))
}

/// `name`'s status as swe_bench_pro_eval.py grades it: PASSED when any entry of `name` in
/// `output.json` is PASSED (`passed_tests = {x["name"] for x in output["tests"] if x["status"] ==
/// "PASSED"}`), else its first entry's status.
fn status_of(output: &serde_json::Value, name: &str) -> String {
    let entries: Vec<&str> = output["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["name"] == name)
        .filter_map(|t| t["status"].as_str())
        .collect();
    if entries.contains(&"PASSED") {
        return "PASSED".into();
    }
    entries.first().copied().unwrap_or("MISSING").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pro_row_is_graded_in_its_image_and_its_attacks_are_refused() {
    if !docker_available().await {
        return;
    }
    let image = format!("execcritic-test-pro:{}", std::process::id());
    let _cleanup = Image(image.clone());
    let (base, fix) = build(&image);
    let task = TaskInstance::from_json(row(&image, &base, &fix), None).expect("the Pro row loads");
    assert!(task.official.is_some());
    let add = "tests/test_calc.py::test_add";

    // The official procedure: gold passes; both attacks pass too.
    assert_eq!(status_of(&official_procedure(&image, &base, &fix, GOLD), add), "PASSED");
    assert_eq!(status_of(&official_procedure(&image, &base, &fix, FUTURE), add), "PASSED", "the store attack works outside");
    assert_eq!(status_of(&official_procedure(&image, &base, &fix, PARSER_REWRITE), add), "PASSED", "the parser attack works outside");
    assert_eq!(status_of(&official_procedure(&image, &base, &fix, LOG_REWRITE), add), "PASSED", "the log attack works outside");
    assert_eq!(status_of(&official_procedure(&image, &base, &fix, PRINTED), add), "PASSED", "the printing attack works outside");

    let gold = harness::grade(&task, GOLD, SandboxKind::Docker).await.expect("grades");
    let out = gold.official.as_ref().map(|r| r.test_output.clone()).unwrap_or_default();
    assert!(gold.resolved, "gold: {gold:?}\n{out}");
    assert_eq!(gold.tests[add], "PASSED");
    assert_eq!(gold.tests["tests/test_calc.py::test_sub"], "PASSED");

    let empty = harness::grade(&task, "", SandboxKind::Docker).await.unwrap();
    assert!(!empty.resolved && empty.error_kind.is_none(), "{empty:?}");
    assert_eq!(empty.tests[add], "FAILED");

    for (name, attack) in [("store", FUTURE), ("parser", PARSER_REWRITE), ("log", LOG_REWRITE), ("printing", PRINTED)] {
        let g = harness::grade(&task, attack, SandboxKind::Docker).await.unwrap();
        assert!(!g.resolved, "the {name} attack: {g:?}");
        assert_eq!(g.tests[add], "FAILED", "the {name} attack: {g:?}");
    }

    // A test patch that does not apply is an infrastructure failure, never a verdict.
    let mut broken = row(&image, &base, &fix);
    broken["test_patch"] = TEST_PATCH.replace("from calc import sub", "from calc import nothing").into();
    let broken = TaskInstance::from_json(broken, None).unwrap();
    let g = harness::grade(&broken, GOLD, SandboxKind::Docker).await.unwrap();
    assert!(!g.resolved && g.error_kind.as_deref().is_some_and(|k| k.starts_with("official_infra:")), "{g:?}");

    // The `grade` command on a Pro task file whose scripts lie beside it, as in SWE-bench_Pro-os.
    let dir = tempfile::tempdir().unwrap();
    let mut file_row = row(&image, &base, &fix);
    for field in ["run_script", "parser_script", "base_dockerfile", "instance_dockerfile"] {
        file_row.as_object_mut().unwrap().remove(field);
    }
    for (path, text) in [
        (format!("run_scripts/{ID}/run_script.sh"), RUN_SCRIPT),
        (format!("run_scripts/{ID}/parser.py"), PARSER),
        (format!("dockerfiles/base_dockerfile/{ID}/Dockerfile"), BASE_DOCKERFILE),
        (format!("dockerfiles/instance_dockerfile/{ID}/Dockerfile"), INSTANCE_DOCKERFILE),
    ] {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let tasks = dir.path().join("pro.jsonl");
    std::fs::write(&tasks, format!("{file_row}\n")).unwrap();
    let preds = dir.path().join("preds.jsonl");
    let pred = |patch: &str| serde_json::json!({"instance_id": ID, "model_name_or_path": "m", "model_patch": patch});
    std::fs::write(&preds, format!("{}\n", pred(GOLD))).unwrap();
    let out = dir.path().join("out");
    let summary = official_eval::grade_cli(&tasks, &preds, &out);
    assert_eq!(
        summary["resolved_instances"], 1,
        "{summary}\n{}",
        std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default()
    );
    let log = std::fs::read_to_string(out.join(format!("logs/{ID}/test_output.txt"))).unwrap();
    assert!(log.contains(">>>>> Test Exit Code: 0"), "{log}");
    // report.json in SWE-bench's shape, from parser.py's statuses.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("logs/{ID}/report.json"))).unwrap()).unwrap();
    assert_eq!(report[ID]["resolved"], true, "{report}");
    assert_eq!(report[ID]["tests_status"]["FAIL_TO_PASS"]["success"][0], add, "{report}");

    // `execcritic eval` on the Pro task file: a Repair agent in the image's own `/app` (the
    // ENV exports applied to its shell) submitting gold resolves; one submitting the store
    // attack does not.
    let mut second = row(&image, &base, &fix);
    second["instance_id"] = format!("{ID}-attack").into();
    let rows = official_eval::eval_rows(dir.path(), &[row(&image, &base, &fix), second], &[("/app", GOLD), ("/app", FUTURE)]);
    let final_of = |id: &str| rows.iter().find(|r| r["instance_id"] == id).map(|r| r["final_resolved"].clone());
    assert_eq!(final_of(ID), Some(true.into()), "{rows:?}");
    assert_eq!(final_of(&format!("{ID}-attack")), Some(false.into()), "{rows:?}");
}
