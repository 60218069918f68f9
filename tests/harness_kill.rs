//! Killing the harness mid-run leaves no sandbox process behind: `execcritic qualify` runs a
//! bundle whose test sleeps; the CLI is SIGKILLed; no process of the sandbox survives.
//!
//! Interrupts and crashes lose nothing: `audit` and `grade` are SIGKILLed and SIGINTed at
//! seeded random points, each time resumed on the same `--out` (which first holds stale results
//! of a run with other inputs); the final results equal an uninterrupted run's, a SIGINT leaves
//! no sandbox directory or process even before the rerun, and after the last run the private
//! temp dir holds nothing at all.

mod harness_support;

use harness_support::*;
use std::time::{Duration, Instant};

/// Processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(token) {
                out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

#[test]
fn sigkill_of_the_harness_leaves_no_sandbox_process() {
    sigkill_leaves_nothing("local");
}

#[test]
fn sigkill_of_the_harness_leaves_no_container() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if !rt.block_on(docker_available()) {
        return;
    }
    sigkill_leaves_nothing("docker");
    // No container labelled as ours is left.
    let left = rt.block_on(async {
        let d = execcritic::harness::sandbox::docker::connect()
            .await
            .unwrap();
        let start = Instant::now();
        loop {
            let mut filters = std::collections::HashMap::new();
            filters.insert(
                "label".to_string(),
                vec![execcritic::harness::sandbox::docker::LABEL.to_string()],
            );
            let list = d
                .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                }))
                .await
                .unwrap();
            let mine: Vec<_> = list
                .into_iter()
                .filter(|c| {
                    c.labels
                        .as_ref()
                        .and_then(|l| l.get("execcritic.owner"))
                        .is_some_and(|o| {
                            o == &LAST_CHILD
                                .load(std::sync::atomic::Ordering::SeqCst)
                                .to_string()
                        })
                })
                .collect();
            if mine.is_empty() || start.elapsed() > Duration::from_secs(20) {
                return mine.len();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    assert_eq!(left, 0, "containers of the killed harness survived");
}

static LAST_CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn sigkill_leaves_nothing(sandbox: &str) {
    let dir = tempfile::tempdir().unwrap();
    let task = fixture_task();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        serde_json::to_string(&task.to_json().unwrap()).unwrap() + "\n",
    )
    .unwrap();
    let token = format!(
        "{}.{}",
        7000 + std::process::id() % 1000,
        std::process::id()
    );
    let body = format!("    import subprocess\n    subprocess.run(['sleep', '{token}'])\n    assert add(2, 3) == 5");
    let patch = diff_against_base(&[("tests/test_calc.py", &test_file_with(&body))]);
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("test.patch"), patch).unwrap();
    std::fs::write(
        bundle.join("test_command"),
        "python3 -m pytest tests/test_calc.py::test_add\n",
    )
    .unwrap();
    std::fs::write(bundle.join("test_contract.json"), CONTRACT).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["qualify", "--sandbox", sandbox, "--tasks"])
        .arg(dir.path().join("tasks.jsonl"))
        .args(["--instance", &task.instance_id, "--bundle"])
        .arg(&bundle)
        .env("EXECCRITIC_DOCKER_IMAGE", docker_image())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    LAST_CHILD.store(child.id(), std::sync::atomic::Ordering::SeqCst);
    let start = Instant::now();
    while processes_with(&format!("sleep {token}")).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sandboxed test never started"
        );
        assert!(child.try_wait().unwrap().is_none(), "qualify exited early");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup code runs in the harness
    child.wait().unwrap();
    let start = Instant::now();
    loop {
        let left = processes_with(&token);
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sandbox processes survived: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---- interrupted and resumed batch runs ------------------------------------------------------

use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// The fixture task under another instance id.
fn task_as(id: &str) -> serde_json::Value {
    let mut v = fixture_task().to_json().unwrap();
    v["instance_id"] = serde_json::json!(id);
    v
}

/// A bundle directory whose test has `body`.
fn write_bundle(dir: &Path, body: &str, contract: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let patch = diff_against_base(&[("tests/test_calc.py", &test_file_with(body))]);
    std::fs::write(dir.join("test.patch"), patch).unwrap();
    std::fs::write(
        dir.join("test_command"),
        "python3 -m pytest tests/test_calc.py::test_add\n",
    )
    .unwrap();
    std::fs::write(dir.join("test_contract.json"), contract).unwrap();
}

/// Inputs of the batch runs: three tasks, the real bundles and predictions, and stale ones.
struct Inputs {
    root: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let ids = ["calc__calc-1", "calc__calc-2", "calc__calc-3"];
        let tasks: String = ids
            .iter()
            .map(|id| serde_json::to_string(&task_as(id)).unwrap() + "\n")
            .collect();
        std::fs::write(root.path().join("tasks.jsonl"), tasks).unwrap();
        let b = root.path().join("bundles");
        // Qualifies (clean Base failure, Gold passes); rejected by validation (undeclared node);
        // passes on Base.
        write_bundle(&b.join(ids[0]), "    assert add(2, 3) == 5", CONTRACT);
        write_bundle(
            &b.join(ids[1]),
            "    assert add(2, 3) == 5",
            &contract_with_nodes(&["tests/test_calc.py::test_other"]),
        );
        write_bundle(&b.join(ids[2]), "    assert add(2, 2) == 0", CONTRACT);
        // Stale inputs: the same instance ids with other bundles / predictions.
        let s = root.path().join("stale-bundles");
        for id in ids {
            write_bundle(&s.join(id), "    assert add(1, 1) == 0", CONTRACT);
        }
        let f = fixture();
        let preds = |patches: [&str; 3]| -> String {
            ids.iter()
                .zip(patches)
                .map(|(id, p)| {
                    serde_json::json!({"instance_id": id, "model_name_or_path": "m", "model_patch": p})
                        .to_string()
                        + "\n"
                })
                .collect()
        };
        std::fs::write(
            root.path().join("preds.jsonl"),
            preds([&f.gold_patch, WRONG_PATCH, ""]),
        )
        .unwrap();
        std::fs::write(
            root.path().join("stale-preds.jsonl"),
            preds([WRONG_PATCH, &f.gold_patch, &f.gold_patch]),
        )
        .unwrap();
        Inputs { root }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    /// The command line of `audit` or `grade` over `inputs` (`bundles`/`preds` file names).
    fn args(&self, command: &str, inputs: &str, out: &Path) -> Vec<String> {
        let input_flag = if command == "audit" { "--bundles" } else { "--predictions" };
        vec![
            command.to_string(),
            "--tasks".into(),
            self.path("tasks.jsonl").display().to_string(),
            input_flag.into(),
            self.path(inputs).display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--workers".into(),
            "2".into(),
        ]
    }
}

/// Start the CLI with its own temp dir.
fn spawn(args: &[String], tmp: &Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(args)
        .env("TMPDIR", tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Run the CLI to completion; panics unless it succeeds.
fn run_to_end(args: &[String], tmp: &Path) -> Duration {
    let start = Instant::now();
    let out = spawn(args, tmp).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

/// The result lines of a run, as JSON values.
fn results(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What is left in the private temp dir and the processes that still name it.
fn leftovers(tmp: &Path) -> (Vec<String>, Vec<String>) {
    let entries = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    (entries, processes_with(&tmp.display().to_string()))
}

/// Wait until nothing is left (processes may take a moment to die).
fn assert_nothing_left(tmp: &Path, when: &str) {
    let start = Instant::now();
    loop {
        let (entries, procs) = leftovers(tmp);
        if entries.is_empty() && procs.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{when}: left behind: entries {entries:?}, processes {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn interrupted_runs_equal_an_uninterrupted_one(command: &str, inputs: &str, stale: &str, file: &str, seed: u64) {
    let data = Inputs::new();
    let tmp = tempfile::tempdir().unwrap();
    let reference_out = data.path("reference");
    let took = run_to_end(&data.args(command, inputs, &reference_out), tmp.path());
    let reference = results(&reference_out.join(file));
    assert_eq!(reference.len(), 3);
    assert_nothing_left(tmp.path(), "an uninterrupted run");

    // The resumed run's --out first holds the complete results of a run with other inputs.
    let out = data.path("resumed");
    run_to_end(&data.args(command, stale, &out), tmp.path());
    let stale_rows = results(&out.join(file));
    assert_ne!(stale_rows, reference, "the stale inputs must give other results");

    let args = data.args(command, inputs, &out);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for (round, signal) in ["KILL", "INT", "KILL", "INT"].into_iter().enumerate() {
        // Within the first 60 % of an uninterrupted run, so resumed runs are hit too.
        let delay = Duration::from_millis(rng.random_range(0..took.as_millis() as u64 * 3 / 5 + 1));
        let mut child = spawn(&args, tmp.path());
        std::thread::sleep(delay);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let sig = match signal {
            "KILL" => nix::sys::signal::Signal::SIGKILL,
            _ => nix::sys::signal::Signal::SIGINT,
        };
        let _ = nix::sys::signal::kill(pid, sig);
        let status = child.wait().unwrap();
        eprintln!("{command} round {round}: SIG{signal} after {delay:?}: {status:?}");
        if signal == "INT" {
            // Ctrl-C is an orderly shutdown: 130 (success when the run had just finished; the
            // default action when it came before the handler, i.e. before any sandbox), and
            // nothing is left behind even before a rerun.
            use std::os::unix::process::ExitStatusExt;
            assert!(
                matches!(status.code(), Some(130) | Some(0)) || status.signal() == Some(2),
                "{command}: SIGINT exit status {status:?}"
            );
            assert_nothing_left(tmp.path(), &format!("{command} after SIGINT"));
        }
        // Whatever is on disk now parses (a torn line of a SIGKILLed run aside, which a rerun drops).
        let text = std::fs::read_to_string(out.join(file)).unwrap_or_default();
        for line in text.lines().filter(|l| l.ends_with('}')) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.get("input_key").is_some(), "{line}");
        }
    }
    run_to_end(&args, tmp.path());
    // The result lines carry no timings: they compare exactly.
    assert_eq!(results(&out.join(file)), reference, "{command}: resumed results differ");
    assert_nothing_left(tmp.path(), &format!("{command} after the final rerun"));
    // A rerun of a finished run changes nothing.
    run_to_end(&args, tmp.path());
    assert_eq!(results(&out.join(file)), results(&reference_out.join(file)));
}

#[test]
fn audit_interrupted_at_random_points_resumes_to_the_same_results() {
    interrupted_runs_equal_an_uninterrupted_one("audit", "bundles", "stale-bundles", "audit.jsonl", 7);
}

#[test]
fn grade_interrupted_at_random_points_resumes_to_the_same_results() {
    interrupted_runs_equal_an_uninterrupted_one("grade", "preds.jsonl", "stale-preds.jsonl", "results.jsonl", 8);
}
