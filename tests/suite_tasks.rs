//! Verification of the bundled task suites without the harness: for every task, in a clone at
//! Base, run the project's test runner directly (pytest, or the Django-style
//! `tests/runtests.py`) on
//! - Base + official tests: every FAIL_TO_PASS test fails on an assertion (the only failure the
//!   harness's Base gate qualifies), every PASS_TO_PASS test passes;
//! - Base + gold + official tests: all pass;
//! - Base + each labelled candidate + official tests: all pass iff the candidate is `resolved`.
//!
//! Needs `python3` with pytest on the host (`scripts/ci-deps-suite.sh`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use execcritic::task::suite::{bundled_suite_in, pypi_suite_in};
use execcritic::task::{load_tasks, materialize, Runner, TaskError, TaskInstance};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    /// Failed on an assertion (pytest: `assert`/`AssertionError`/`pytest.fail`; unittest: FAIL).
    AssertionFailed,
    /// Any other failure: another exception, an error, a skip.
    Error,
}

/// How pytest's `-rA` summary reason of a FAILED test reads for an assertion failure.
fn is_assertion(reason: &str) -> bool {
    reason.starts_with("assert")
        || reason.starts_with("AssertionError")
        || reason.starts_with("Failed:")
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn apply(dir: &Path, patch: &str, what: &str) {
    let file = dir.join(format!(".{what}.patch"));
    std::fs::write(&file, patch).unwrap();
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["apply", "--whitespace=nowarn"])
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    assert!(
        out.status.success(),
        "{what} does not apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn reset(dir: &Path) {
    git(dir, &["checkout", "--quiet", "--force", "HEAD"]);
    git(dir, &["clean", "--quiet", "-fdx"]);
}

/// Django-style id `test_name (module.Class)` → runner label `module.Class.test_name`.
fn django_label(id: &str) -> String {
    let (name, rest) = id.split_once(" (").expect("django-style test id");
    format!("{}.{name}", rest.trim_end_matches(')'))
}

/// Run the given tests with the task's runner; statuses of the ids that were reported.
fn run_tests(task: &TaskInstance, dir: &Path, ids: &[String]) -> BTreeMap<String, Outcome> {
    let mut cmd;
    match task.runner {
        Runner::Pytest => {
            cmd = Command::new("python3");
            cmd.args(["-m", "pytest", "-rA", "-p", "no:cacheprovider"])
                .args(ids);
        }
        Runner::Django => {
            cmd = Command::new("python3");
            cmd.args(["tests/runtests.py", "--verbosity", "2"])
                .args(ids.iter().map(|i| django_label(i)));
        }
        Runner::Sympy | Runner::Cargo | Runner::Go => panic!("no {:?}-runner task in the Python suites (the native suites: tests/harness_native_guard.rs)", task.runner),
    }
    let out = cmd
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // pytest cuts summary lines to the terminal width; keep the failure reasons whole.
        .env("COLUMNS", "10000")
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut statuses = BTreeMap::new();
    for line in text.lines() {
        match task.runner {
            Runner::Pytest => {
                if let Some(id) = line.strip_prefix("PASSED ") {
                    statuses.insert(id.trim().to_string(), Outcome::Passed);
                } else if let Some(rest) = line.strip_prefix("FAILED ") {
                    let (id, reason) = rest.split_once(" - ").unwrap_or((rest, ""));
                    let outcome = if is_assertion(reason) {
                        Outcome::AssertionFailed
                    } else {
                        Outcome::Error
                    };
                    statuses.insert(id.trim().to_string(), outcome);
                } else if let Some(rest) = line.strip_prefix("ERROR ") {
                    let id = rest.split(" - ").next().unwrap();
                    statuses.insert(id.trim().to_string(), Outcome::Error);
                }
            }
            Runner::Django => {
                if let Some((id, status)) = line.split_once(" ... ") {
                    let outcome = match status.trim() {
                        "ok" => Outcome::Passed,
                        "FAIL" => Outcome::AssertionFailed,
                        _ => Outcome::Error,
                    };
                    statuses.insert(id.trim().to_string(), outcome);
                }
            }
            Runner::Sympy | Runner::Cargo | Runner::Go => unreachable!(),
        }
    }
    statuses
}

/// Whether every listed test passed.
fn all_pass(statuses: &BTreeMap<String, Outcome>, ids: &[String]) -> bool {
    ids.iter()
        .all(|id| statuses.get(id) == Some(&Outcome::Passed))
}

/// Names of the test functions a patch adds (`+def test_x(` / `+    def test_x(`).
fn added_test_functions(patch: &str) -> Vec<String> {
    patch
        .lines()
        .filter_map(|l| l.strip_prefix('+'))
        .filter_map(|l| l.trim_start().strip_prefix("def "))
        .filter(|l| l.starts_with("test"))
        .filter_map(|l| l.split('(').next())
        .map(str::to_string)
        .collect()
}

/// The test function an id names: pytest `path::[Class::]name[param]`, Django `name (mod.Class)`.
fn test_function(id: &str) -> &str {
    match id.split_once(" (") {
        Some((name, _)) => name,
        None => id.rsplit("::").next().unwrap().split('[').next().unwrap(),
    }
}

/// The official tests must qualify as a Test bundle: every test the test patch adds fails on
/// Base (is FAIL_TO_PASS), and every FAIL_TO_PASS test is one the patch adds or changes.
fn check_added_tests(task: &TaskInstance) -> Vec<String> {
    let id = &task.instance_id;
    let added = added_test_functions(&task.test_patch);
    let mut problems = Vec::new();
    for name in &added {
        if !task.fail_to_pass.iter().any(|t| test_function(t) == name) {
            problems.push(format!("{id}: added test {name} is not FAIL_TO_PASS"));
        }
    }
    for t in &task.pass_to_pass {
        if added.iter().any(|name| name == test_function(t)) {
            problems.push(format!("{id}: PASS_TO_PASS {t} is added by the test patch"));
        }
    }
    if added.is_empty() {
        problems.push(format!("{id}: the test patch adds no test"));
    }
    problems
}

fn verify_task(task: &TaskInstance, scratch: &Path) -> Vec<String> {
    let mut problems = check_added_tests(task);
    let dir = scratch.join(&task.instance_id);
    materialize(task, &dir, false).unwrap();
    let ids: Vec<String> = task
        .fail_to_pass
        .iter()
        .chain(&task.pass_to_pass)
        .cloned()
        .collect();
    let id = &task.instance_id;

    apply(&dir, &task.test_patch, "test");
    let base = run_tests(task, &dir, &ids);
    for t in &task.fail_to_pass {
        match base.get(t) {
            // The Base gate qualifies only clean assertion failures: so must the official tests.
            Some(Outcome::AssertionFailed) => {}
            other => problems.push(format!(
                "{id}: F2P {t} on Base: {other:?} (expected an assertion failure)"
            )),
        }
    }
    for t in &task.pass_to_pass {
        if base.get(t) != Some(&Outcome::Passed) {
            problems.push(format!("{id}: P2P {t} on Base: {:?}", base.get(t)));
        }
    }

    reset(&dir);
    apply(&dir, &task.patch, "gold");
    apply(&dir, &task.test_patch, "test");
    let gold = run_tests(task, &dir, &ids);
    for t in &ids {
        if gold.get(t) != Some(&Outcome::Passed) {
            problems.push(format!("{id}: {t} with gold: {:?}", gold.get(t)));
        }
    }

    for (i, c) in task.candidates.iter().enumerate() {
        reset(&dir);
        apply(&dir, &c.patch, "candidate");
        apply(&dir, &task.test_patch, "test");
        let got = all_pass(&run_tests(task, &dir, &ids), &ids);
        if got != c.resolved {
            problems.push(format!(
                "{id}: candidate {i} resolves={got}, labelled resolved={}",
                c.resolved
            ));
        }
    }
    problems
}

fn require_pytest() {
    let ok = Command::new("python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 with pytest is required: run scripts/ci-deps-suite.sh"
    );
}

fn verify_suite(tasks: &[TaskInstance]) {
    require_pytest();
    let scratch = tempfile::tempdir().unwrap();
    let problems: Vec<String> = tasks
        .iter()
        .flat_map(|t| verify_task(t, scratch.path()))
        .collect();
    assert!(
        problems.is_empty(),
        "suite verification failed:\n{}",
        problems.join("\n")
    );
}

#[test]
fn bundled_suite_tasks_behave_as_recorded() {
    let cache = tempfile::tempdir().unwrap();
    let tasks = load_tasks(&bundled_suite_in(cache.path()).unwrap()).unwrap();
    verify_suite(&tasks);
    let projects: std::collections::BTreeSet<&str> =
        tasks.iter().map(|t| t.repo.as_str()).collect();
    assert!(tasks.len() >= 10, "{} tasks", tasks.len());
    assert!(projects.len() >= 3, "{projects:?}");
    assert!(tasks.iter().any(|t| t.runner == Runner::Django));
    for t in &tasks {
        assert!(
            !t.fail_to_pass.is_empty() && !t.pass_to_pass.is_empty(),
            "{}",
            t.instance_id
        );
        assert!(
            t.candidates.iter().filter(|c| !c.resolved).count() >= 2,
            "{}",
            t.instance_id
        );
    }
}

#[test]
fn bundled_suite_is_deterministic_and_safe_to_build_concurrently() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = bundled_suite_in(a.path()).unwrap();
    // Two concurrent first uses of the same cache directory.
    let root = b.path().to_path_buf();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let root = root.clone();
            std::thread::spawn(move || bundled_suite_in(&root).unwrap())
        })
        .collect();
    let paths: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(paths[0], paths[1]);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&paths[0]).unwrap()
    );
    // No build directories are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(b.path().join("suites"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}

/// The bundled suite's commits are deterministic across machines: its Base commit ids are
/// pinned in `tests/fixtures/suites/bundled.lock` (`<instance_id> <base_commit>` per line).
/// After editing the suite, regenerate it with `EXECCRITIC_UPDATE_SUITE_LOCK=1`.
#[test]
fn bundled_suite_base_commits_match_the_lock() {
    let cache = tempfile::tempdir().unwrap();
    let tasks = load_tasks(&bundled_suite_in(cache.path()).unwrap()).unwrap();
    let actual: String = tasks
        .iter()
        .map(|t| format!("{} {}\n", t.instance_id, t.base_commit))
        .collect();
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/bundled.lock");
    if std::env::var_os("EXECCRITIC_UPDATE_SUITE_LOCK").is_some() {
        std::fs::write(&lock, &actual).unwrap();
    }
    let pinned = std::fs::read_to_string(&lock).unwrap();
    assert_eq!(
        actual,
        pinned,
        "bundled suite commits differ from {}",
        lock.display()
    );
}

/// Every task's agent workspace (history kept, then sanitised) verifies: no later commit, no
/// reflog, and no fixed file version anywhere in the store — while the suite's repository does
/// hold later commits.
fn assert_sanitised_workspaces_hide_the_fix(tasks: &[TaskInstance]) {
    let scratch = tempfile::tempdir().unwrap();
    for t in tasks {
        let ws = materialize(t, &scratch.path().join(&t.instance_id), true).unwrap();
        let status = ws.sanitization.unwrap();
        assert!(
            status.verified,
            "{}: {:?}",
            t.instance_id,
            status.failures()
        );
        assert!(status.gold_blobs_checked > 0, "{}", t.instance_id);
        let upstream_commits = Command::new("git")
            .args(["rev-list", "--count", "--all"])
            .current_dir(t.repo_path.as_ref().unwrap())
            .output()
            .unwrap();
        let upstream: usize = String::from_utf8_lossy(&upstream_commits.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(upstream > status.commits_reachable, "{}", t.instance_id);
    }
}

#[test]
fn sanitised_bundled_workspaces_hide_the_fix() {
    let cache = tempfile::tempdir().unwrap();
    let tasks = load_tasks(&bundled_suite_in(cache.path()).unwrap()).unwrap();
    assert_sanitised_workspaces_hide_the_fix(&tasks);
}

/// The PyPI suite injects its bugs: the tree before a bug is the fix's post-image, so a Base
/// whose parent is that tree could never be sanitised (regression: every agent workspace of
/// this suite was refused).
#[test]
fn sanitised_pypi_workspaces_hide_the_fix() {
    let Some(tasks) = pypi_tasks("sanitised_pypi_workspaces_hide_the_fix") else {
        return;
    };
    assert_sanitised_workspaces_hide_the_fix(&tasks);
}

/// The PyPI suite's tasks, or `None` (with a SKIPPED line) when its sources are not fetched.
fn pypi_tasks(test: &str) -> Option<Vec<TaskInstance>> {
    let cache = execcritic::task::suite::cache_dir();
    match pypi_suite_in(&cache) {
        Ok(path) => Some(load_tasks(&path).unwrap()),
        Err(TaskError::SuiteNotFetched { message, .. }) => {
            eprintln!("SKIPPED {test}: {message}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn pypi_suite_tasks_behave_as_recorded() {
    let Some(tasks) = pypi_tasks("pypi_suite_tasks_behave_as_recorded") else {
        return;
    };
    assert!(tasks.len() >= 2);
    verify_suite(&tasks);
}
