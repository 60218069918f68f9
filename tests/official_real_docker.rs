//! Real public projects graded the official way in SWE-bench-layout images built here
//! (scripts/official-real-images.py, run in the background by scripts/ci-deps-official-real.sh):
//! Django 4.2.16 with the `strip_tags` fix of 4.2.17 (Django's own runner, `parse_log_django`),
//! sympy 1.13.2 with the Clebsch-Gordan fix of 1.13.3 (sympy's own runner, `parse_log_sympy`),
//! and inflection 0.5.1 with the PyPI suite's task 101 (pytest, parametrised ids,
//! `parse_log_pytest`); each of these images keeps the project importable only inside its
//! conda-style `testbed` env. And one JavaScript project as SWE-bench Multilingual's rows are:
//! qs 6.14.0 from npm with the fix of 6.14.1, its tests run by tape (TAP, `parse_log_tap`) with
//! Node.js and the test dependencies outside the repository. Gold resolves with every FAIL_TO_PASS and PASS_TO_PASS test PASSED, the empty
//! patch does not, and each `report.json` equals the one swebench 5.0.2 computes from the same
//! `test_output.txt`. Skipped, saying why, without docker or the images.

mod harness_support;
#[path = "common/official_eval.rs"]
mod official_eval;

use execcritic::harness::{self, SandboxKind};
use harness_support::*;
use official_eval::swebench_report;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn cache() -> PathBuf {
    std::env::var_os("EXECCRITIC_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/execcritic"))
        .join("official-real")
}

/// The task file, once the background build is done (waits up to 20 minutes); `Err` says why not.
fn built_tasks() -> Result<PathBuf, String> {
    let dir = cache();
    let started = Instant::now();
    loop {
        let status = std::fs::read_to_string(dir.join("build.status")).unwrap_or_default();
        match status.trim() {
            "ok" => return Ok(dir.join("tasks.jsonl")),
            "running" if started.elapsed() < Duration::from_secs(1200) => std::thread::sleep(Duration::from_secs(5)),
            "running" => return Err("the image build is still running after 20 minutes".into()),
            "" => return Err(format!("not built ({} has no build.status: run scripts/ci-deps-official-real.sh)", dir.display())),
            other => {
                let log = std::fs::read_to_string(dir.join("build.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
                return Err(format!("{other}\n{tail}"));
            }
        }
    }
}

/// The task file for `test`, or `None` after saying why it is skipped (no docker, no images).
async fn tasks_for(test: &str) -> Option<PathBuf> {
    if !docker_available().await {
        return None;
    }
    match built_tasks() {
        Ok(t) => Some(t),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_projects_resolve_with_gold_as_swebench_grades_them() {
    let Some(tasks) = tasks_for("real_projects_resolve_with_gold_as_swebench_grades_them").await else { return };
    let tasks = execcritic::task::load_tasks(&tasks).expect("the real-project rows load");
    let parsers: Vec<String> = tasks.iter().map(|t| t.official.as_ref().unwrap().log_parser.clone()).collect();
    assert_eq!(parsers, ["parse_log_django", "parse_log_sympy", "parse_log_pytest", "parse_log_tap"]);
    let languages: Vec<&str> = tasks.iter().map(execcritic::harness::official::language_of).collect();
    assert_eq!(languages, ["python", "python", "python", "javascript"]);
    for task in &tasks {
        let parser = &task.official.as_ref().unwrap().log_parser;
        let gold = harness::grade(task, &task.patch, SandboxKind::Docker).await.expect("grades");
        let rec = gold.official.clone().expect("an official record");
        assert!(gold.resolved, "{}: {gold:?}\n{}", task.instance_id, rec.test_output);
        // The Python runners' commands run under the runtime guard; tape's as the benchmark runs it.
        let guard = rec.guard.as_deref().unwrap_or("");
        if parser == "parse_log_tap" {
            assert!(guard.starts_with("unguarded: "), "{}: {guard}", task.instance_id);
        } else {
            assert_eq!(guard, "guarded", "{}", task.instance_id);
        }
        assert!(gold.tests.values().all(|s| s == "PASSED"), "{}: {:?}", task.instance_id, gold.tests);
        assert_eq!(gold.tests.len(), task.fail_to_pass.len() + task.pass_to_pass.len());
        if let Some(theirs) = swebench_report(&rec.test_output, task, parser, &task.patch) {
            assert_eq!(rec.report_json.clone().unwrap(), theirs, "{}", task.instance_id);
        }
    }
    // The empty patch: unresolved, every FAIL_TO_PASS test failing, as swebench reads it.
    for task in &tasks {
        let parser = &task.official.as_ref().unwrap().log_parser;
        let empty = harness::grade(task, "", SandboxKind::Docker).await.unwrap();
        let rec = empty.official.clone().expect("an official record");
        assert!(!empty.resolved && empty.error_kind.is_none(), "{}: {empty:?}", task.instance_id);
        for id in &task.fail_to_pass {
            assert!(matches!(empty.tests[id].as_str(), "FAILED" | "ERROR" | "MISSING"), "{id}: {}", empty.tests[id]);
        }
        if let Some(theirs) = swebench_report(&rec.test_output, task, parser, "") {
            assert_eq!(rec.report_json.unwrap(), theirs, "{}", task.instance_id);
        }
    }
}

/// `eval` over a mixed-language task file (inflection: Python; qs: JavaScript), a scripted
/// Repair agent applying the gold patch: both resolve, and `report.json` breaks the run down by
/// language.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_language_eval_reports_each_language() {
    let Some(tasks) = tasks_for("a_mixed_language_eval_reports_each_language").await else { return };
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&tasks)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| matches!(r["repo"].as_str(), Some("jpvanhal/inflection" | "ljharb/qs")))
        .collect();
    assert_eq!(rows.len(), 2);
    let work: Vec<(&str, &str)> = rows.iter().map(|r| ("/testbed", r["patch"].as_str().unwrap())).collect();
    let dir = tempfile::tempdir().unwrap();
    let results = official_eval::eval_rows(dir.path(), &rows, &work);
    let by: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|r| (r["instance_id"].as_str().unwrap(), r["language"].as_str().unwrap(), r["final_resolved"].as_bool().unwrap()))
        .collect();
    assert_eq!(by, [("jpvanhal__inflection-101", "python", true), ("ljharb__qs-6141", "javascript", true)]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval-out/report.json")).unwrap()).unwrap();
    let langs: Vec<(&str, u64, f64)> = report["by_language"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["language"].as_str().unwrap(), l["instances"].as_u64().unwrap(), l["conditions"][0]["final"]["mean"].as_f64().unwrap()))
        .collect();
    assert_eq!(langs, [("python", 1, 100.0), ("javascript", 1, 100.0)]);
    let md = std::fs::read_to_string(dir.path().join("eval-out/report.md")).unwrap();
    assert!(md.contains("## By language") && md.contains("| javascript | 1 | none |"), "{md}");
}

/// The Base text of `path` in `image`'s repository.
fn base_file(image: &str, path: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", image, "cat", &format!("/testbed/{path}")])
        .output()
        .expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A patch appending `added` to `path`, whose Base text is `base`.
fn append_patch(path: &str, base: &str, added: &str) -> String {
    let lines: Vec<&str> = base.lines().collect();
    let ctx = &lines[lines.len() - 3..];
    let add: Vec<&str> = added.lines().collect();
    let start = lines.len() - 2;
    let mut p = format!(
        "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{start},3 +{start},{} @@\n",
        3 + add.len()
    );
    for l in ctx {
        p.push_str(&format!(" {l}\n"));
    }
    for l in add {
        p.push_str(&format!("+{l}\n"));
    }
    p
}

/// The row's eval script run as the benchmark runs it, on `patch` applied at Base, outside our
/// harness (plain `docker run`); returns its output.
fn run_plainly(task: &execcritic::task::TaskInstance, patch: &str) -> String {
    let spec = task.official.as_ref().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("patch.diff"), patch).unwrap();
    std::fs::write(dir.path().join("eval.sh"), &spec.eval_script).unwrap();
    let mount = format!("{}:/ec:ro", dir.path().display());
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v", &mount, &spec.image, "bash", "-c"])
        .arg("cd /testbed && git apply /ec/patch.diff && bash /ec/eval.sh 2>&1")
        .output()
        .expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Attacks from inside the code under test on a real project (inflection's task 101, pytest),
/// each first shown to give RESOLVED under the benchmark's own script and swebench 5.0.2's own
/// grading, then graded by us: (1) the package, when the tests import it, rebinds how pytest
/// builds its reports so every test reports passed — consistent summary, exit 0 — caught by the
/// runtime guard carried into the eval script (`tampered`); (2) every public function calls
/// `pytest.xfail()` when pytest is loaded — swebench counts XFAIL as passed — not resolved: a
/// FAIL_TO_PASS test reported as an expected failure still fails. Gold stays resolved, guarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_under_test_cannot_fake_an_official_pass() {
    let Some(tasks) = tasks_for("code_under_test_cannot_fake_an_official_pass").await else { return };
    let tasks = execcritic::task::load_tasks(&tasks).expect("the real-project rows load");
    let task = tasks.iter().find(|t| t.instance_id == "jpvanhal__inflection-101").unwrap();
    let spec = task.official.as_ref().unwrap();
    let base = base_file(&spec.image, "inflection/__init__.py");
    let rewrite = append_patch(
        "inflection/__init__.py",
        &base,
        r#"

def _speedups():
    import sys
    m = sys.modules.get("_py" + "test.reports")
    if m is None:
        return
    cls = getattr(m, "Test" + "Report")
    made = cls.from_item_and_call

    def make(item, call):
        rep = made(item, call)
        rep.outcome = "passed"
        rep.longrepr = None
        return rep

    cls.from_item_and_call = staticmethod(make)


_speedups()
"#,
    );
    let xfail = append_patch(
        "inflection/__init__.py",
        &base,
        r#"

def _wrap_all():
    import sys
    g = globals()
    for name, f in list(g.items()):
        if name.startswith("_") or not callable(f) or getattr(f, "__module__", "") != __name__:
            continue

        def w(*a, _f=f, **k):
            t = sys.modules.get("py" + "test")
            if t is not None:
                getattr(t, "x" + "fail")("known")
            return _f(*a, **k)

        g[name] = w


_wrap_all()
"#,
    );
    for (what, patch) in [("report rewrite", &rewrite), ("xfail", &xfail)] {
        // Outside our harness: the benchmark's script, swebench's grading.
        let log = run_plainly(task, patch);
        if let Some(report) = swebench_report(&log, task, &spec.log_parser, patch) {
            let v: serde_json::Value = serde_json::from_str(&report).unwrap();
            assert_eq!(v[&task.instance_id]["resolved"], true, "{what}: swebench does not resolve it:\n{report}\n{log}");
        }
        let g = harness::grade(task, patch, SandboxKind::Docker).await.expect("grades");
        let rec = g.official.clone().expect("an official record");
        assert_eq!(rec.guard.as_deref(), Some("guarded"), "{what}");
        assert!(g.forbidden.is_none(), "{what}: refused by the static screen, not by the run: {g:?}");
        assert!(!g.resolved, "{what}: {g:?}\n{}", rec.test_output);
        match what {
            "report rewrite" => assert!(g.tampered.is_some(), "{what}: {g:?}\n{}", rec.test_output),
            _ => assert_eq!(g.completion.as_deref(), Some("fail_to_pass_xfailed"), "{what}: {g:?}"),
        }
    }
    let gold = harness::grade(task, &task.patch, SandboxKind::Docker).await.unwrap();
    assert!(gold.resolved && gold.tampered.is_none(), "{gold:?}");
    assert_eq!(gold.official.unwrap().guard.as_deref(), Some("guarded"));
}
