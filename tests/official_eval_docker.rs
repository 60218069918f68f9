//! Official evaluation end to end against a real docker daemon (skipped, saying why, without
//! one): a swebench 5.x row whose image has the SWE-bench layout (a conda-like activation whose
//! `testbed` env is the only place `pytest` is found, the repository in `/testbed`) and whose
//! own `eval_script` and `log_parser` grade it. Gold resolves, a wrong and an empty patch do
//! not, a patch that passes only under the image's default interpreter (outside the env) does
//! not, a test-framework patch is refused unrun, the local sandbox says it cannot, and the
//! `grade` command writes swebench's `test_output.txt`, `report.json` and run summary — the
//! report equal to what swebench 5.0.2 itself computes from the same output (when installed).
//! A row with `image_assets` gets its binary file staged from beside the task file; without
//! the file it is an infrastructure failure.

mod harness_support;
#[path = "common/official_eval.rs"]
mod official_eval;

use execcritic::harness::{self, SandboxKind};
use execcritic::task::TaskInstance;
use harness_support::*;
use official_eval::{swebench_report, Image};
use std::process::Command;

/// The SWE-bench layout on top of the test image: `pytest` only inside the activated env, and
/// a repository at `/testbed` (a buggy `add`, a passing `test_sub`); prints the Base commit.
const LAYOUT: &str = r#"set -e
mkdir -p /opt/miniconda3/bin /opt/miniconda3/envs/testbed/bin
cat > /opt/miniconda3/bin/activate <<'EOF'
conda() {
  if [ "$1" = activate ] && [ -d "/opt/miniconda3/envs/$2" ]; then
    export CONDA_DEFAULT_ENV="$2" PATH="/opt/miniconda3/envs/$2/bin:$PATH"
  else
    echo "conda: no environment $2" >&2; return 1
  fi
}
EOF
ln -s "$(command -v python3)" /opt/miniconda3/envs/testbed/bin/python
printf '#!/bin/sh\nexec /opt/miniconda3/envs/testbed/bin/python -m pytest "$@"\n' > /opt/miniconda3/envs/testbed/bin/pytest
chmod +x /opt/miniconda3/envs/testbed/bin/pytest
mkdir -p /testbed/tests; cd /testbed
git init -q -b main
printf 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n' > calc.py
printf 'from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n' > tests/test_calc.py
touch tests/__init__.py conftest.py
git -c user.name=t -c user.email=t@t add .
git -c user.name=t -c user.email=t@t commit -q -m base
git rev-parse HEAD"#;

const GOLD: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n";
const WRONG: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a * b\n \n \n def sub(a, b):\n";
/// Fixes `add` only under an interpreter outside the testbed env (the wrong interpreter).
const WRONG_INTERPRETER: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,6 @@\n def add(a, b):\n-    return a - b\n+    import sys\n+    return a - b if sys.executable.startswith('/opt/miniconda3/') else a + b\n \n \n def sub(a, b):\n";
/// A pytest hook that turns every failure into a pass: refused before anything runs.
const HOOK: &str = "diff --git a/conftest.py b/conftest.py\n--- a/conftest.py\n+++ b/conftest.py\n@@ -0,0 +1,3 @@\n+import pytest\n+def pytest_runtest_makereport(item, call):\n+    call.excinfo = None\n";
const TEST_PATCH: &str = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1,5 +1,9 @@\n-from calc import sub\n+from calc import add, sub\n \n \n def test_sub():\n     assert sub(3, 1) == 2\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n";

/// A test patch whose new test reads a binary file the patch cannot carry (`tests/expected.bin`,
/// listed in the row's `image_assets`).
const TEST_PATCH_ASSET: &str = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1,5 +1,15 @@\n-from calc import sub\n+import pathlib\n+\n+from calc import add, sub\n \n \n def test_sub():\n     assert sub(3, 1) == 2\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n+\n+\n+def test_asset():\n+    assert pathlib.Path(__file__).with_name('expected.bin').read_bytes() == b'\\x89PNG\\x00\\xff'\n";

/// The eval script a 5.x row carries (swebench 5.x adds the exit-code record when it runs it).
fn eval_script(base: &str) -> String {
    eval_script_with(base, TEST_PATCH)
}

fn eval_script_with(base: &str, test_patch: &str) -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\n\
         git checkout {base} tests/test_calc.py\ngit apply -v - <<'EOF_114329324912'\n{test_patch}EOF_114329324912\n\
         : '>>>>> Start Test Output'\npytest -rA tests/test_calc.py\n: '>>>>> End Test Output'\n\
         git checkout {base} tests/test_calc.py\n"
    )
}

fn row(image: &str, base: &str) -> serde_json::Value {
    serde_json::json!({
        "instance_id": "demo__calc-7", "repo": "demo/calc", "base_commit": base,
        "patch": GOLD, "test_patch": TEST_PATCH, "problem_statement": "add subtracts",
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "image": image, "eval_script": eval_script(base),
        "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
    })
}

fn build(image: &str) -> String {
    official_eval::build_image(&docker_image(), image, LAYOUT)
}


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swebench_5_row_is_graded_in_its_image_as_swebench_grades_it() {
    if !docker_available().await {
        return;
    }
    let image = format!("execcritic-test-official:{}", std::process::id());
    let _cleanup = Image(image.clone());
    let base = build(&image);
    let task = TaskInstance::from_json(row(&image, &base), None).expect("the 5.x row loads");
    assert!(task.official.is_some());

    let gold = harness::grade(&task, GOLD, SandboxKind::Docker).await.expect("grades");
    let rec = gold.official.clone().expect("an official record");
    assert!(gold.resolved, "gold: {gold:?}\n{}", rec.test_output);
    assert_eq!(gold.tests["tests/test_calc.py::test_add"], "PASSED");
    assert_eq!(rec.resolution.as_deref(), Some("RESOLVED_FULL"));
    let report = rec.report_json.clone().expect("report.json");
    assert!(report.contains("\"resolved\": true"), "{report}");
    if let Some(theirs) = swebench_report(&rec.test_output, &task, "parse_log_pytest", GOLD) {
        assert_eq!(report, theirs, "our report.json differs from swebench's");
    }

    let wrong = harness::grade(&task, WRONG, SandboxKind::Docker).await.unwrap();
    assert!(!wrong.resolved && wrong.error_kind.is_none(), "{wrong:?}");
    assert_eq!(wrong.tests["tests/test_calc.py::test_add"], "FAILED");
    assert_eq!(wrong.tests["tests/test_calc.py::test_sub"], "PASSED");
    let wrong_rec = wrong.official.clone().unwrap();
    assert_eq!(wrong_rec.resolution.as_deref(), Some("RESOLVED_NO"));
    if let Some(theirs) = swebench_report(&wrong_rec.test_output, &task, "parse_log_pytest", WRONG) {
        assert_eq!(wrong_rec.report_json.unwrap(), theirs);
    }

    let empty = harness::grade(&task, "", SandboxKind::Docker).await.unwrap();
    assert!(!empty.resolved, "{empty:?}");

    // A patch that passes only outside the env: run with the image's default interpreter it
    // passes; graded in the activated env, as SWE-bench grades, it does not.
    let outside = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &image, "bash", "-c"])
        .arg(format!(
            "cd /testbed && git apply <<'EOF'\n{WRONG_INTERPRETER}EOF\ngit apply <<'EOF'\n{TEST_PATCH}EOF\npython3 -m pytest -q tests/test_calc.py"
        ))
        .output()
        .unwrap();
    assert!(outside.status.success(), "outside the env it passes: {}", String::from_utf8_lossy(&outside.stdout));
    let interp = harness::grade(&task, WRONG_INTERPRETER, SandboxKind::Docker).await.unwrap();
    assert!(!interp.resolved && interp.error_kind.is_none(), "{interp:?}");
    assert_eq!(interp.tests["tests/test_calc.py::test_add"], "FAILED");

    // On a plain checkout the hook turns the failing test into a pass (shown with the local
    // runner in tests/harness_attacks.rs); here it is refused before anything runs.
    let hook = harness::grade(&task, HOOK, SandboxKind::Docker).await.unwrap();
    assert!(!hook.resolved && hook.forbidden.is_some(), "{hook:?}");

    // `image_assets`: a binary file the test patch cannot carry, read from the task
    // repository's layout beside the task file and copied in before the tests, as swebench
    // stages it. Without the file the instance is an infrastructure failure, not a verdict.
    let dir = tempfile::tempdir().unwrap();
    let mut with_asset = row(&image, &base);
    with_asset["instance_id"] = "demo__calc-8".into();
    with_asset["test_patch"] = TEST_PATCH_ASSET.into();
    with_asset["eval_script"] = eval_script_with(&base, TEST_PATCH_ASSET).into();
    with_asset["FAIL_TO_PASS"] = serde_json::json!(["tests/test_calc.py::test_add", "tests/test_calc.py::test_asset"]);
    with_asset["image_assets"] = serde_json::json!({"test_patch": [{"path": "tests/expected.bin", "url": "https://example.invalid/expected.bin"}]}).to_string().into();
    let missing = TaskInstance::from_json(with_asset.clone(), Some(dir.path())).unwrap();
    let g = harness::grade(&missing, GOLD, SandboxKind::Docker).await.unwrap();
    assert_eq!(g.error_kind.as_deref(), Some("official_infra:image_asset_missing"), "{g:?}");
    let asset = dir.path().join("tasks/demo__calc-8/test_assets/tests/expected.bin");
    std::fs::create_dir_all(asset.parent().unwrap()).unwrap();
    std::fs::write(&asset, b"\x89PNG\x00\xff").unwrap();
    let staged = TaskInstance::from_json(with_asset, Some(dir.path())).unwrap();
    let g = harness::grade(&staged, GOLD, SandboxKind::Docker).await.unwrap();
    assert!(g.resolved, "gold with its asset staged: {g:?}");
    assert_eq!(g.tests["tests/test_calc.py::test_asset"], "PASSED");
    let g = harness::grade(&staged, "", SandboxKind::Docker).await.unwrap();
    assert!(!g.resolved && g.error_kind.is_none(), "{g:?}");
    assert_eq!(g.tests["tests/test_calc.py::test_asset"], "PASSED", "the asset is there whatever the patch");

    let local = harness::grade(&task, GOLD, SandboxKind::Local).await.unwrap();
    assert_eq!(local.error_kind.as_deref(), Some("official_needs_docker"));

    // The `grade` command lays the outputs out as swebench does.
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{}\n", row(&image, &base))).unwrap();
    let preds = dir.path().join("preds.jsonl");
    std::fs::write(
        &preds,
        format!("{}\n", serde_json::json!({"instance_id": "demo__calc-7", "model_name_or_path": "m", "model_patch": GOLD})),
    )
    .unwrap();
    let out = dir.path().join("out");
    let summary = official_eval::grade_cli(&tasks, &preds, &out);
    let logs = out.join("logs/demo__calc-7");
    assert!(std::fs::read_to_string(logs.join("test_output.txt")).unwrap().contains(">>>>> End Test Output"));
    assert_eq!(std::fs::read_to_string(logs.join("report.json")).unwrap(), report);
    assert_eq!(summary["resolved_instances"], 1, "{summary}");
    assert_eq!(summary["resolved_ids"][0], "demo__calc-7");
}

/// The same image as a swebench 4.x row (`repo` + `version`: the eval script from the spec
/// table, the image by the instance id, 4.x's `parse_log_pytest_options` for requests), graded and evaluated; and
/// `execcritic eval` on the 4.x and 5.x task files: a Repair agent in the image's own `/testbed`
/// (conda activation applied to its shell) submitting gold resolves, empty does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swebench_4_and_5_rows_grade_and_evaluate_in_their_images() {
    if !docker_available().await {
        return;
    }
    let image = format!("execcritic-test-official4:{}", std::process::id());
    let _cleanup = Image(image.clone());
    let base = build(&image);
    const ID4: &str = "psf__requests-4242";
    let image4 = execcritic::task::default_image(ID4);
    assert!(Command::new("docker").args(["tag", &image, &image4]).status().unwrap().success());
    let _cleanup4 = Image(image4.clone());
    let row4 = serde_json::json!({
        "instance_id": ID4, "repo": "psf/requests", "version": "2.0", "base_commit": base,
        "patch": GOLD, "test_patch": TEST_PATCH, "problem_statement": "add subtracts",
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "environment_setup_commit": base,
    });
    let task4 = TaskInstance::from_json(row4.clone(), None).expect("the 4.x row loads");
    let spec = task4.official.as_ref().expect("a 4.x spec");
    assert_eq!(spec.log_parser, "parse_log_pytest_options");
    assert_eq!(task4.image, image4);
    let gold = harness::grade(&task4, GOLD, SandboxKind::Docker).await.unwrap();
    let rec = gold.official.clone().unwrap();
    assert!(gold.resolved, "{gold:?}\n{}", rec.test_output);
    if let Some(theirs) = swebench_report(&rec.test_output, &task4, "parse_log_pytest_options", GOLD) {
        assert_eq!(rec.report_json.clone().unwrap(), theirs);
    }
    let empty = harness::grade(&task4, "", SandboxKind::Docker).await.unwrap();
    assert!(!empty.resolved && empty.error_kind.is_none(), "{empty:?}");

    let dir = tempfile::tempdir().unwrap();
    let rows = official_eval::eval_rows(
        dir.path(),
        &[row4, row(&image, &base), { let mut r = row(&image, &base); r["instance_id"] = "demo__calc-8".into(); r }],
        &[("/testbed", GOLD), ("/testbed", GOLD), ("/testbed", "")],
    );
    let by_id = |id: &str| rows.iter().find(|r| r["instance_id"] == id).unwrap_or_else(|| panic!("{id}: {rows:?}"));
    for id in [ID4, "demo__calc-7"] {
        assert_eq!(by_id(id)["final_resolved"], true, "{rows:?}");
        assert!(by_id(id)["infra_error"].is_null(), "{rows:?}");
    }
    assert_eq!(by_id("demo__calc-8")["final_resolved"], false, "{rows:?}");
}
