//! Real public projects graded the official way in SWE-bench-layout images built here
//! (scripts/official-real-images.py, run in the background by scripts/ci-deps-official-real.sh):
//! Django 4.2.16 with the `strip_tags` fix of 4.2.17 (Django's own runner, `parse_log_django`),
//! sympy 1.13.2 with the Clebsch-Gordan fix of 1.13.3 (sympy's own runner, `parse_log_sympy`),
//! and inflection 0.5.1 with the PyPI suite's task 101 (pytest, parametrised ids,
//! `parse_log_pytest`). Each image keeps the project importable only inside its conda-style
//! `testbed` env. Gold resolves with every FAIL_TO_PASS and PASS_TO_PASS test PASSED, the empty
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


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_projects_resolve_with_gold_as_swebench_grades_them() {
    if !docker_available().await {
        return;
    }
    let tasks = match built_tasks() {
        Ok(t) => t,
        Err(why) => {
            eprintln!("SKIPPED real_projects_resolve_with_gold_as_swebench_grades_them: {why}");
            return;
        }
    };
    let tasks = execcritic::task::load_tasks(&tasks).expect("the real-project rows load");
    let parsers: Vec<String> = tasks.iter().map(|t| t.official.as_ref().unwrap().log_parser.clone()).collect();
    assert_eq!(parsers, ["parse_log_django", "parse_log_sympy", "parse_log_pytest"]);
    for task in &tasks {
        let parser = &task.official.as_ref().unwrap().log_parser;
        let gold = harness::grade(task, &task.patch, SandboxKind::Docker).await.expect("grades");
        let rec = gold.official.clone().expect("an official record");
        assert!(gold.resolved, "{}: {gold:?}\n{}", task.instance_id, rec.test_output);
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
