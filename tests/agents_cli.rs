//! The agent commands end to end through the binary: `demo` (scripted policies, real sandboxes,
//! official grading), `gen-test` then `repair --bundle --grade` with the scripted policy files, and
//! `bench revision-loop`. Also bad input: an unknown policy kind is a clear error.

use std::path::Path;
use std::process::Command;

#[path = "common/process.rs"]
mod process;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_execcritic"))
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/scripted")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn demo_runs_both_agents_and_grades() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["demo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("SCRIPTED policies"), "{text}");
    assert!(
        text.contains("submission 1 at turn 5: rejected (selector_not_exact)"),
        "{text}"
    );
    assert!(text.contains("submission 2 at turn 7: qualified"), "{text}");
    assert!(text.contains("check at turn 4: hard_fail"), "{text}");
    assert!(text.contains("check at turn 8: pass"), "{text}");
    assert!(text.contains("official result: RESOLVED"), "{text}");
    for f in [
        "test/trajectory.jsonl",
        "test/record.json",
        "test/bundle/test.patch",
        "repair/record.json",
        "grade.json",
    ] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
}

/// The same demo on a Rust task (the crates suite, `cargo test` under the native guard).
#[test]
fn demo_runs_both_agents_on_a_rust_task() {
    native_demo("rust", execcritic::task::crates_suite, "rapidfuzz__strsim-rs-201", "cargo test");
}

/// The same demo on a Go task (the golang suite, `go test` under the native guard).
#[test]
fn demo_runs_both_agents_on_a_go_task() {
    if !std::process::Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no `go` on the PATH (apt-get install golang-go)");
        return;
    }
    native_demo("go", execcritic::task::suite::golang_suite, "dustin__go-humanize-201", "go test");
}

/// `demo --language <language>` on a native suite's task: the story of the Python demo (a
/// rejected selector, a qualified bundle, a partial fix failed by the gate, a passing CHECK,
/// RESOLVED), where the guarded run can run and the suite is fetched.
fn native_demo(
    language: &str,
    suite: fn() -> Result<std::path::PathBuf, execcritic::task::TaskError>,
    instance: &str,
    runner: &str,
) {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded {runner} run needs throw-away runs (root with overlayfs)");
        return;
    }
    match suite() {
        Err(execcritic::task::TaskError::SuiteNotFetched { message, .. }) => {
            eprintln!("SKIPPED: {message}");
            return;
        }
        other => {
            other.unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(["demo", "--language", language, "--out"]).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(instance) && text.contains(runner), "{text}");
    assert!(text.contains("submission 1 at turn 5: rejected (selector_not_exact)"), "{text}");
    assert!(text.contains("submission 2 at turn 7: qualified"), "{text}");
    assert!(text.contains("check at turn 4: hard_fail (assertion_failure)"), "{text}");
    assert!(text.contains("check at turn 8: pass"), "{text}");
    assert!(text.contains("official result: RESOLVED"), "{text}");
}

#[test]
fn gen_test_then_repair_with_grading() {
    let tasks = execcritic::task::bundled_suite().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("gen");
    let out = bin()
        .args([
            "gen-test",
            "--instance",
            "tablefmt__tablefmt-1",
            "--max-turns",
            "10",
            "--tasks",
        ])
        .arg(&tasks)
        .arg("--policy")
        .arg(format!("scripted:{}", fixture("demo_test.jsonl")))
        .arg("--out")
        .arg(&gen)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = gen.join("bundle");
    assert!(bundle.join("test_command").exists() && bundle.join("bundle.sha256").exists());
    let traj = execcritic::agent::Trajectory::read_jsonl(&gen.join("trajectory.jsonl")).unwrap();
    assert_eq!(traj.events("submission").count(), 2);

    let rep = dir.path().join("repair");
    let out = bin()
        .args([
            "repair",
            "--instance",
            "tablefmt__tablefmt-1",
            "--grade",
            "--tasks",
        ])
        .arg(&tasks)
        .arg("--policy")
        .arg(format!("scripted:{}", fixture("demo_repair.jsonl")))
        .arg("--bundle")
        .arg(&bundle)
        .arg("--out")
        .arg(&rep)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("official grading: RESOLVED"), "{text}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rep.join("record.json")).unwrap()).unwrap();
    assert_eq!(record["terminal"]["reason"], "pass");
    assert_eq!(record["rounds"].as_array().unwrap().len(), 2);
    assert!(std::fs::read_to_string(rep.join("final.patch"))
        .unwrap()
        .contains("float(value)"));

    // The bench on the same bundle: every round measured, overhead reported.
    let report = dir.path().join("bench.json");
    let out = bin()
        .args([
            "bench",
            "revision-loop",
            "--instance",
            "tablefmt__tablefmt-1",
            "--tasks",
        ])
        .arg(&tasks)
        .arg("--policy")
        .arg(format!("scripted:{}", fixture("demo_repair.jsonl")))
        .arg("--bundle")
        .arg(&bundle)
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(r["overhead_per_check"]["n"], 2);
}

#[test]
fn bad_policy_spec_is_a_clear_error() {
    let out = bin()
        .args([
            "gen-test",
            "--tasks",
            "/nonexistent.jsonl",
            "--instance",
            "x",
            "--policy",
            "magic:1",
            "--out",
            "/tmp/x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    let out = bin()
        .args([
            "repair",
            "--instance",
            "tablefmt__tablefmt-1",
            "--policy",
            "engine:/nonexistent",
            "--out",
            "/tmp/x",
            "--tasks",
        ])
        .arg(execcritic::task::bundled_suite().unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("engine policy: loading /nonexistent"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--device`/`--dtype` of `gen-test` place an engine policy: with a model folder that has no
/// weights the load fails on the emulated device (the error names it), not on the CPU; device
/// options without an engine policy, or an unknown device in the spec, are clear errors. (A
/// whole episode on the emulator is too slow for CI: it reads the ~2k-token agent prompt at
/// ~25 tokens/s; `tests/engine_turns.rs` runs the engine policy there.)
#[test]
fn gen_test_places_the_engine_policy_on_the_chosen_device() {
    let tasks = execcritic::task::bundled_suite().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let gen_test = |policy: &str, extra: &[&str]| {
        let out = bin()
            .args(["gen-test", "--instance", "tablefmt__tablefmt-1", "--tasks"])
            .arg(&tasks)
            .args(["--policy", policy])
            .args(extra)
            .arg("--out")
            .arg(empty.path().join("gen"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{policy} {extra:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let spec = format!("engine:{}", empty.path().display());
    let err = gen_test(&spec, &["--device", "emulator", "--dtype", "f32"]);
    assert!(err.contains("onto emulat"), "{err}");
    let err = gen_test(&format!("{spec}@emulator"), &[]);
    assert!(err.contains("onto emulat"), "{err}");
    let err = gen_test(&spec, &[]);
    assert!(!err.contains("onto"), "the CPU engine by default: {err}");
    let err = gen_test("scripted:/x.jsonl", &["--device", "emulator"]);
    assert!(err.contains("engine:MODEL_DIR policy"), "{err}");
    let err = gen_test(&format!("{spec}@tpu"), &[]);
    assert!(err.contains("unknown device"), "{err}");
}

/// The output of a finished command.
fn run_ok(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn reruns_replay_finished_episodes_and_redo_stale_ones() {
    let tasks = execcritic::task::bundled_suite().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("gen");
    let gen_test = |turns: &str| {
        let mut c = bin();
        c.args(["gen-test", "--instance", "tablefmt__tablefmt-1", "--max-turns", turns, "--tasks"])
            .arg(&tasks)
            .arg("--policy")
            .arg(format!("scripted:{}", fixture("demo_test.jsonl")))
            .arg("--out")
            .arg(&gen);
        c
    };
    let (first, _) = run_ok(&mut gen_test("10"));
    let record = std::fs::read_to_string(gen.join("record.json")).unwrap();
    // Same inputs: the result is replayed, nothing runs again (the record, with its timings, is
    // the first run's).
    let (again, note) = run_ok(&mut gen_test("10"));
    assert_eq!(again, first);
    assert!(note.contains("already holds this run's results"), "{note}");
    assert_eq!(std::fs::read_to_string(gen.join("record.json")).unwrap(), record);
    // Other inputs in the same --out: the old results are stale, the episode runs.
    let (_, note) = run_ok(&mut gen_test("11"));
    assert!(!note.contains("already holds"), "{note}");
    assert_ne!(std::fs::read_to_string(gen.join("record.json")).unwrap(), record);

    // repair: the episode first, then a rerun that adds --grade only grades.
    let rep = dir.path().join("repair");
    let repair = |grade: bool| {
        let mut c = bin();
        c.args(["repair", "--instance", "tablefmt__tablefmt-1", "--tasks"])
            .arg(&tasks)
            .arg("--policy")
            .arg(format!("scripted:{}", fixture("demo_repair.jsonl")))
            .arg("--bundle")
            .arg(gen.join("bundle"))
            .arg("--out")
            .arg(&rep);
        if grade {
            c.arg("--grade");
        }
        c
    };
    let (text, _) = run_ok(&mut repair(false));
    assert!(!text.contains("official grading"), "{text}");
    let record = std::fs::read_to_string(rep.join("record.json")).unwrap();
    let (text, note) = run_ok(&mut repair(true));
    assert!(note.contains("the repair episode of these inputs is already in"), "{note}");
    assert!(text.contains("official grading: RESOLVED"), "{text}");
    assert_eq!(std::fs::read_to_string(rep.join("record.json")).unwrap(), record);
    assert!(rep.join("grade.json").exists());
    let (again, note) = run_ok(&mut repair(true));
    assert_eq!(again, text);
    assert!(note.contains("already holds this run's results"), "{note}");
}

#[test]
fn sigint_and_sigterm_remove_every_sandbox_and_workspace() {
    let tasks = execcritic::task::bundled_suite().unwrap();
    for (signal, code) in [(nix::sys::signal::Signal::SIGINT, 130), (nix::sys::signal::Signal::SIGTERM, 143)] {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let token = format!("{}.{}", 3000 + code, std::process::id());
        let call = |cmd: &str| {
            let content = format!("<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call>");
            serde_json::json!({ "content": content }).to_string()
        };
        let script = dir.path().join("script.jsonl");
        std::fs::write(&script, [call("ls"), call(&format!("sleep {token}"))].join("\n")).unwrap();
        let mut child = bin()
            .args(["gen-test", "--instance", "tablefmt__tablefmt-1", "--tasks"])
            .arg(&tasks)
            .arg("--policy")
            .arg(format!("scripted:{}", script.display()))
            .arg("--out")
            .arg(dir.path().join("out"))
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let status = process::signal_while_running(&mut child, &format!("sleep {token}"), signal);
        assert_eq!(status.code(), Some(code), "{signal}: {status:?}");
        // Orderly: the workspace is gone when the command returns; the sandboxed processes were
        // killed.
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{signal}: left in the temp dir: {left:?}");
        assert!(!dir.path().join("out/done.json").exists(), "an interrupted run is not finished");
    }
}
