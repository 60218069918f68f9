//! `execcritic eval` end to end through the binary, with scripted per-instance policies for both
//! roles (`scripted:DIR`), real sandboxes, real git and pytest, on bundled-suite instances and a
//! PyPI-suite instance (when its sdist is fetched):
//!
//! - `tablefmt__tablefmt-1`: the Test agent qualifies a bundle (Base-to-Gold), Round 0 submits a
//!   partial fix (unresolved), one revision fixes it (resolved after 3 revision turns).
//! - `tablefmt__tablefmt-2`: Test generation fails (no submission within the turn budget), so the
//!   Round-0 patch (the Gold fix) is kept and scored: resolved at Round 0 in both conditions.
//! - `inikit__inikit-1`: the Repair script ends mid Round 0 (the policy fails): an infrastructure
//!   failure, unresolved in both conditions and reported separately.
//! - `jpvanhal__inflection-101` (PyPI suite, when its sdist is fetched; its Base is a root commit
//!   so the agents' sanitised workspaces hold no fixed file): no Test submission, Round 0 applies
//!   the Gold fix: resolved at Round 0 in both conditions, the Round-0 patch kept.
//!
//! The report's numbers are checked against hand-computed ones. The kill test SIGKILLs the same
//! evaluation at three seeded random points, reruns it, and compares `results.jsonl` (without
//! timings) and `report.json` with an uninterrupted run's.
//!
//! With docker available, a second `dockerd` speaking only TLS (client certificates from
//! `DOCKER_CERT_PATH`) checks `--sandbox docker` with two `--docker-host URL=N`s: a host without
//! the task image is an error naming it (nothing is pulled); once the image is `docker load`ed
//! there, three instances are spread over both daemons as their capacities (1 and 2) say.

#[path = "common/agents.rs"]
mod agents;
#[path = "common/process.rs"]
mod process;
#[path = "common/tls.rs"]
mod tls;

use agents::{call, good_test_script, round0_partial, CHECK_FIX, EXPORT, FIX_FULL};
use execcritic::task::{bundled_suite, load_tasks, TaskInstance};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const A: &str = "tablefmt__tablefmt-1";
const B: &str = "tablefmt__tablefmt-2";
const C: &str = "inikit__inikit-1";
const P: &str = "jpvanhal__inflection-101";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_execcritic"))
}

const EXPORT_ALL: &str = "cd /testbed && git add -AN && git diff --no-color > /tmp/fix.patch";
const SUBMIT_FIX: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch";

/// Round 0 that applies `patch` (the Gold fix) and submits it.
fn round0_applying(patch: &str) -> Vec<String> {
    vec![
        call(&format!("cd /testbed && git apply <<'ECPATCH'\n{patch}ECPATCH")),
        call(EXPORT_ALL),
        call(SUBMIT_FIX),
    ]
}

/// A Test agent that never submits (only looks around for the whole budget).
fn idle_test_script() -> Vec<String> {
    (0..8).map(|_| call("cd /testbed && ls")).collect()
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    tasks: PathBuf,
    with_pypi: bool,
}

fn write_script(dir: &Path, id: &str, turns: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{id}.jsonl")), turns.join("\n") + "\n").unwrap();
}

/// The task file (bundled instances, plus the PyPI one when available), the per-instance scripts
/// and a budget file.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let bundled = load_tasks(&bundled_suite().unwrap()).unwrap();
    let mut tasks: Vec<TaskInstance> = [A, B, C].iter().map(|id| bundled.iter().find(|t| t.instance_id == *id).unwrap().clone()).collect();
    let pypi = match execcritic::task::pypi_suite() {
        Ok(p) => Some(load_tasks(&p).unwrap().into_iter().find(|t| t.instance_id == P).unwrap()),
        Err(e) => {
            eprintln!("NOTE: PyPI suite not available ({e}); running the bundled instances only");
            None
        }
    };
    let (tdir, rdir) = (root.join("test-scripts"), root.join("repair-scripts"));
    write_script(&tdir, A, &good_test_script(""));
    let mut fix = round0_partial();
    fix.extend([call(FIX_FULL), call(EXPORT), call(CHECK_FIX)]);
    write_script(&rdir, A, &fix);
    write_script(&tdir, B, &idle_test_script());
    write_script(&rdir, B, &round0_applying(&tasks[1].patch));
    write_script(&tdir, C, &idle_test_script());
    write_script(&rdir, C, &[call("cd /testbed && ls")]);
    if let Some(p) = &pypi {
        write_script(&tdir, P, &idle_test_script());
        write_script(&rdir, P, &round0_applying(&p.patch));
        // Listed after the bundled instances (the report's order is the task file's).
        tasks.push(p.clone());
    }
    let lines: Vec<String> = tasks.iter().map(|t| t.to_json().unwrap().to_string()).collect();
    let tasks_file = root.join("tasks.jsonl");
    std::fs::write(&tasks_file, lines.join("\n") + "\n").unwrap();
    std::fs::write(root.join("eval.toml"), "test_turns = 6\nrevision_rounds = 2\n").unwrap();
    Setup { _dir: dir, root, tasks: tasks_file, with_pypi: pypi.is_some() }
}

fn eval_cmd(s: &Setup, out: &Path) -> Command {
    eval_cmd_workers(s, out, 2)
}

fn eval_cmd_workers(s: &Setup, out: &Path, workers: usize) -> Command {
    let mut c = bin();
    c.arg("eval")
        .arg("--tasks")
        .arg(&s.tasks)
        .arg("--out")
        .arg(out)
        .arg(format!("--test-policy=scripted:{}", s.root.join("test-scripts").display()))
        .arg(format!("--repair-policy=scripted:{}", s.root.join("repair-scripts").display()))
        .args(["--tests", "generated,none", "--runs", "2", "--workers", &workers.to_string()])
        .arg("--config")
        .arg(s.root.join("eval.toml"));
    c
}

fn run_to_completion(s: &Setup, out: &Path) -> String {
    let o = eval_cmd(s, out).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    text
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `results.jsonl` without its timings.
fn results_without_timings(out: &Path) -> Vec<Value> {
    let mut rows = jsonl(&out.join("results.jsonl"));
    for r in &mut rows {
        r.as_object_mut().unwrap().remove("wall_ms");
    }
    rows
}

fn row<'a>(rows: &'a [Value], id: &str, cond: &str, run: u64) -> &'a Value {
    rows.iter().find(|r| r["instance_id"] == id && r["condition"] == cond && r["run"] == run).unwrap()
}

fn close(v: &Value, x: f64) -> bool {
    (v.as_f64().unwrap() - x).abs() < 1e-9
}

fn check_report(s: &Setup, out: &Path) {
    let n = if s.with_pypi { 4.0 } else { 3.0 };
    let rows = results_without_timings(out);
    assert_eq!(rows.len(), n as usize * 2 * 2);
    for run in [1, 2] {
        let a = row(&rows, A, "generated", run);
        assert_eq!((a["round0_resolved"].as_bool(), a["final_resolved"].as_bool()), (Some(false), Some(true)), "{a}");
        assert_eq!(a["entered_repair"], true);
        assert_eq!(a["terminal_reason"], "pass");
        assert_eq!(a["revision_turns"], 3, "{a}");
        assert_eq!(a["checks"], 2, "p0 fails the gate, the revision passes: {a}");
        assert_eq!(a["terminal_gate"], "pass");
        let a0 = row(&rows, A, "none", run);
        assert_eq!((a0["final_resolved"].as_bool(), a0["terminal_reason"].as_str()), (Some(false), Some("no_test")));
        let b = row(&rows, B, "generated", run);
        assert_eq!(b["test_qualified"], false);
        assert_eq!(b["terminal_reason"], "no_qualified_bundle");
        assert_eq!((b["round0_resolved"].as_bool(), b["final_resolved"].as_bool(), b["entered_repair"].as_bool()), (Some(true), Some(true), Some(false)));
        assert_eq!(b["final_patch_sha256"], b["round0_patch_sha256"], "the Round-0 patch is kept");
        for cond in ["generated", "none"] {
            let c = row(&rows, C, cond, run);
            assert_eq!((c["final_resolved"].as_bool(), c["round0_resolved"].as_bool()), (Some(false), Some(false)));
            assert!(c["infra_error"].as_str().unwrap().contains("ran out of responses"), "{c}");
        }
        if s.with_pypi {
            for cond in ["generated", "none"] {
                let p = row(&rows, P, cond, run);
                assert_eq!((p["round0_resolved"].as_bool(), p["final_resolved"].as_bool()), (Some(true), Some(true)), "{p}");
                assert!(p["infra_error"].is_null(), "{p}");
            }
            let p = row(&rows, P, "generated", run);
            assert_eq!((p["test_qualified"].as_bool(), p["terminal_reason"].as_str()), (Some(false), Some("no_qualified_bundle")), "{p}");
        }
    }
    // Hand-computed report. none: B (and P) resolved at Round 0; generated adds A by revision.
    let infra = 1;
    let r0 = if s.with_pypi { 2.0 } else { 1.0 };
    let (qualified, no_submission) = if s.with_pypi { (1, 3) } else { (1, 2) };
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["instances"], n as u64);
    let cond = |name: &str| report["conditions"].as_array().unwrap().iter().find(|c| c["condition"] == name).unwrap().clone();
    let (g, none) = (cond("generated"), cond("none"));
    assert!(close(&g["round0"]["mean"], 100.0 * r0 / n), "{g}");
    assert!(close(&g["final"]["mean"], 100.0 * (r0 + 1.0) / n), "{g}");
    assert!(close(&g["final"]["std"], 0.0));
    assert!(close(&g["delta"], 100.0 / n));
    assert!(close(&g["delta_vs_none"], 100.0 / n));
    assert!(close(&none["final"]["mean"], 100.0 * r0 / n));
    assert!(close(&none["delta"], 0.0));
    assert_eq!(g["infra_errors"], 2 * infra, "two runs");
    assert_eq!(none["infra_errors"], 2 * infra);
    assert_eq!(g["revision_turns"]["trajectories"], 2, "A in both runs");
    assert!(close(&g["revision_turns"]["mean"], 3.0));
    assert!(close(&g["revision_turns"]["at_most_5_pct"], 100.0));
    let t = &report["tests"][0];
    assert_eq!(t["source"], "generated");
    assert_eq!((t["qualified"].as_u64(), t["base_to_gold"].as_u64()), (Some(qualified), Some(qualified)), "{t}");
    assert!(close(&t["base_to_gold_pct"], 100.0 * qualified as f64 / n));
    assert_eq!(t["rejections"], serde_json::json!([["no_submission", no_submission]]));
    assert_eq!(t["infra_errors"], 0);
    let listed: Vec<&str> = report["infra"].as_array().unwrap().iter().map(|e| e[0].as_str().unwrap()).collect();
    assert_eq!(listed, vec![C]);
    // tests.jsonl, predictions, report and plots.
    let tests = jsonl(&out.join("tests.jsonl"));
    assert_eq!(tests.iter().find(|t| t["instance_id"] == A).unwrap()["base_to_gold"], true);
    for cond in ["generated", "none"] {
        for run in [1, 2] {
            let preds = jsonl(&out.join(format!("predictions/{cond}/run-{run}.jsonl")));
            assert_eq!(preds.len(), n as usize);
            for p in &preds {
                let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["instance_id", "model_name_or_path", "model_patch"]);
                assert!(p["model_patch"].is_string());
            }
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| generated |") && md.contains("Infrastructure failures"), "{md}");
    for f in ["resolved", "revision_turns", "outcomes"] {
        let svg = std::fs::read_to_string(out.join(format!("plots/{f}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{f}");
    }
    assert!(out.join(format!("trajectories/{A}/repair-generated-run1.jsonl")).exists());
    assert!(out.join(format!("tests/generated/{A}/test.patch")).exists());
}

#[test]
fn eval_report_matches_hand_computed_numbers_and_survives_kills() {
    let s = setup();
    let reference = s.root.join("reference");
    let started = Instant::now();
    let text = run_to_completion(&s, &reference);
    let full = started.elapsed();
    assert!(text.contains("| generated |"), "{text}");
    check_report(&s, &reference);
    if let Ok(svg_out) = std::env::var("EXECCRITIC_EVAL_REPORT_SAMPLE") {
        std::fs::copy(reference.join("plots/outcomes.svg"), Path::new(&svg_out).join("eval-outcomes.svg")).unwrap();
        std::fs::copy(reference.join("plots/resolved.svg"), Path::new(&svg_out).join("eval-resolved.svg")).unwrap();
    }

    // `report DIR` rebuilds the same report from the row files.
    let before = std::fs::read_to_string(reference.join("report.json")).unwrap();
    std::fs::remove_file(reference.join("report.json")).unwrap();
    let o = bin().arg("report").arg(&reference).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(reference.join("report.json")).unwrap(), before);

    // SIGKILL at three seeded random points, then finish.
    let killed = s.root.join("killed");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
    for k in 0..3 {
        let at = Duration::from_millis(rng.random_range(200..full.as_millis().max(400) as u64));
        let mut child = eval_cmd(&s, &killed).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        eprintln!("kill {k} at {at:?}: {status}");
    }
    run_to_completion(&s, &killed);
    assert_eq!(results_without_timings(&killed), results_without_timings(&reference));
    assert_eq!(std::fs::read_to_string(killed.join("report.json")).unwrap(), before);
    for cond in ["generated", "none"] {
        let p = format!("predictions/{cond}/run-1.jsonl");
        assert_eq!(std::fs::read_to_string(killed.join(&p)).unwrap(), std::fs::read_to_string(reference.join(&p)).unwrap());
    }

    // A rerun of a finished evaluation reuses every unit.
    let started = Instant::now();
    run_to_completion(&s, &killed);
    eprintln!("rerun of a finished evaluation: {:?} (full run {full:?})", started.elapsed());
    assert_eq!(results_without_timings(&killed), results_without_timings(&reference));

    // Several directories: a comparison.
    let o = bin().arg("report").arg(&reference).arg(&killed).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("| reference | generated |") && text.contains("| killed | none |"), "{text}");
}

fn docker(host: &str) -> Command {
    let mut c = Command::new("docker");
    c.arg("-H").arg(host);
    c
}

/// Containers created by the daemon `cli` talks to since `since` (unix seconds).
fn containers_created(mut cli: Command, since: u64) -> usize {
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 1;
    let o = cli
        .args(["events", "--since", &since.to_string(), "--until", &until.to_string(), "--filter", "type=container", "--filter", "event=create", "--format", "{{.ID}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).lines().count()
}

#[test]
fn eval_spreads_docker_sandboxes_over_hosts_and_never_pulls() {
    const IMAGE: &str = "execcritic-suite:latest";
    let default_host = "unix:///var/run/docker.sock";
    let usable = docker(default_host).args(["image", "inspect", IMAGE]).output().is_ok_and(|o| o.status.success());
    if !usable {
        eprintln!("SKIPPED eval_spreads_docker_sandboxes_over_hosts_and_never_pulls: no docker daemon with {IMAGE} (scripts/ci-deps-harness.sh)");
        return;
    }
    let second = match tls::TlsDaemon::start() {
        Ok(d) if d.wait_ready(60) => d,
        Ok(_) => panic!("the TLS dockerd did not answer in 60 s"),
        Err(why) => {
            eprintln!("SKIPPED eval_spreads_docker_sandboxes_over_hosts_and_never_pulls: a TLS dockerd {why}");
            return;
        }
    };
    let s = setup();
    let out = s.root.join("docker");
    // Capacities: one instance at a time on the default daemon, two on the TLS one. Three
    // instances start together (three workers): round robin alone would put two on the first.
    let eval = || {
        let mut c = eval_cmd_workers(&s, &out, 3);
        c.args(["--sandbox", "docker", "--instances", &format!("{A},{B},{C}")])
            .args(["--docker-host", &format!("{default_host}=1"), "--docker-host", &format!("{}=2", second.https())])
            .env("DOCKER_CERT_PATH", second.certs());
        c
    };
    // The second host has no image yet: a clear error naming it, nothing pulled.
    let o = eval().output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(IMAGE) && err.contains(&second.https()) && err.contains("never pulled"), "{err}");
    assert!(!second.cli().args(["image", "inspect", IMAGE]).output().unwrap().status.success());

    // `docker load` a saved image there, and run.
    let saved = s.root.join("image.tar");
    assert!(docker(default_host).args(["save", "-o"]).arg(&saved).arg(IMAGE).status().unwrap().success());
    assert!(second.cli().args(["load", "-i"]).arg(&saved).status().unwrap().success());
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let o = eval().output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = results_without_timings(&out);
    for run in [1, 2] {
        assert_eq!(row(&rows, A, "generated", run)["final_resolved"], true, "{rows:?}");
        assert_eq!(row(&rows, B, "none", run)["final_resolved"], true);
    }
    assert!(rows.iter().filter(|r| r["instance_id"] != C).all(|r| r["infra_error"].is_null()), "{rows:?}");
    // Each instance's rows name one host; the capacities decide how many go where.
    let mut on: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for r in &rows {
        let host = r["docker_host"].as_str().unwrap_or_else(|| panic!("no docker_host: {r}")).to_string();
        on.entry(r["instance_id"].as_str().unwrap().to_string()).or_default().insert(host);
    }
    assert!(on.values().all(|h| h.len() == 1), "{on:?}");
    let count = |h: &str| on.values().filter(|hs| hs.contains(h)).count();
    assert_eq!((count(default_host), count(&second.https())), (1, 2), "{on:?}");
    let (first_n, second_n) = (containers_created(docker(default_host), since), containers_created(second.cli(), since));
    eprintln!("containers created: {first_n} on the default daemon, {second_n} on the TLS one");
    assert!(first_n > 0 && second_n > 0, "{first_n} / {second_n}");
}

#[test]
fn sigterm_stops_an_eval_leaving_no_sandbox_or_workspace() {
    let s = setup();
    let tmp = s.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let token = format!("3143.{}", std::process::id());
    let scripts = s.root.join("sleepy");
    write_script(&scripts, A, &[call("ls"), call(&format!("sleep {token}"))]);
    let out = s.root.join("interrupted");
    let mut child = bin()
        .arg("eval")
        .arg("--tasks")
        .arg(&s.tasks)
        .arg("--out")
        .arg(&out)
        .arg(format!("--policy=scripted:{}", scripts.display()))
        .args(["--tests", "none", "--runs", "1", "--instances", A])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = process::signal_while_running(&mut child, &format!("sleep {token}"), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(status.code(), Some(143));
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left in the temp dir: {left:?}");
    assert!(!out.join("results.jsonl").exists(), "an interrupted evaluation writes no results");
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A repository as users have it from a partial clone: `git clone --filter=blob:none` of the
/// bundled repository, every blob then fetched (so it is whole, but its packs carry `.promisor`
/// markers, which git never prunes). `eval` opens its workspaces (fetching Base by id: the
/// future commits in the promisor store never reach a workspace, as the Repair agent's own probe
/// shows) and resolves with the gold patch.
#[test]
fn eval_resolves_on_a_promisor_clone_whose_workspaces_hold_no_future() {
    let s = setup();
    let bundled = load_tasks(&bundled_suite().unwrap()).unwrap();
    let mut task = bundled.iter().find(|t| t.instance_id == B).unwrap().clone();
    let upstream = task.repo_path.clone().expect("a local repository");
    let future: Vec<String> = git_in(&upstream, &["rev-list", "--all", &format!("^{}", task.base_commit)]).lines().map(str::to_string).collect();
    assert!(!future.is_empty(), "the bundled repository holds commits after Base");

    let root = s.root.join("promisor");
    std::fs::create_dir_all(&root).unwrap();
    let src = root.join("src.git");
    git_in(&root, &["clone", "-q", "--bare", upstream.to_str().unwrap(), src.to_str().unwrap()]);
    git_in(&src, &["config", "uploadpack.allowFilter", "true"]);
    let clone = root.join("clone.git");
    git_in(&root, &["clone", "-q", "--bare", "--filter=blob:none", &format!("file://{}", src.display()), clone.to_str().unwrap()]);
    let missing = |c: &Path| git_in(c, &["rev-list", "--objects", "--all", "--missing=print"]).lines().filter(|l| l.starts_with('?')).map(|l| l[1..].to_string()).collect::<Vec<_>>();
    let absent = missing(&clone);
    assert!(!absent.is_empty(), "a blobless clone lacks blobs");
    // Fetch every blob (lazily, one `cat-file` batch), then check the clone is whole.
    let mut fetch = Command::new("git").arg("-C").arg(&clone).args(["cat-file", "--batch"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::null()).spawn().unwrap();
    use std::io::Write;
    fetch.stdin.take().unwrap().write_all((absent.join("\n") + "\n").as_bytes()).unwrap();
    assert!(fetch.wait().unwrap().success());
    assert!(missing(&clone).is_empty(), "every blob fetched");
    let promisor = std::fs::read_dir(clone.join("objects/pack")).unwrap().flatten().any(|e| e.path().extension().is_some_and(|x| x == "promisor"));
    assert!(promisor, "the clone's packs carry .promisor markers");
    for f in &future {
        git_in(&clone, &["cat-file", "-e", f]);
    }

    task.repo_path = Some(clone.clone());
    let tasks = root.join("tasks.jsonl");
    std::fs::write(&tasks, format!("{}\n", task.to_json().unwrap())).unwrap();
    let scripts = root.join("repair");
    let probe = format!("cd /testbed && for c in {}; do echo \"visible=$(git cat-file -t $c 2>/dev/null || echo none)\"; done", future.join(" "));
    let mut turns = vec![call(&probe)];
    turns.extend(round0_applying(&task.patch));
    write_script(&scripts, B, &turns);
    let out = root.join("out");
    let o = bin()
        .args(["eval", "--tests", "none", "--runs", "1", "--tasks"])
        .arg(&tasks)
        .arg("--out")
        .arg(&out)
        .arg(format!("--repair-policy=scripted:{}", scripts.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = results_without_timings(&out);
    assert_eq!(row(&rows, B, "none", 1)["final_resolved"], true, "{rows:?}");
    assert!(rows[0]["infra_error"].is_null(), "{rows:?}");
    let traj: String = std::fs::read_dir(out.join("trajectories").join(B)).unwrap().flatten().map(|e| std::fs::read_to_string(e.path()).unwrap()).collect();
    assert_eq!(traj.matches("visible=none").count(), future.len(), "{traj}");
    assert!(!traj.contains("visible=commit"), "a future commit reached the Repair agent's workspace");
}

/// `eval` on a task file mixing Python and Rust instances: one report, a per-language breakdown
/// (the bundled suite's tablefmt, pytest; the crates suite's strsim and shlex, `cargo test` under
/// the native guard), each language's Round-0 Gold patch resolved by its own official evaluator and an
/// empty Round 0 not.
#[test]
fn eval_reports_each_language_of_a_mixed_task_file() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded cargo run needs throw-away runs (root with overlayfs)");
        return;
    }
    let crates = match execcritic::task::crates_suite() {
        Ok(p) => load_tasks(&p).unwrap(),
        Err(execcritic::task::TaskError::SuiteNotFetched { message, .. }) => {
            eprintln!("SKIPPED: {message}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let bundled = load_tasks(&bundled_suite().unwrap()).unwrap();
    let python = bundled.iter().find(|t| t.instance_id == A).unwrap().clone();
    // The first task of each crate (strsim, shlex).
    let rust: Vec<TaskInstance> = crates.into_iter().filter(|t| t.instance_id.ends_with("-201")).collect();
    assert_eq!(rust.len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("repair-scripts");
    // The Python instance and the first Rust one submit their gold fix; the second Rust one
    // submits nothing (looks around, then submits an empty patch).
    write_script(&scripts, A, &round0_applying(&python.patch));
    write_script(&scripts, &rust[0].instance_id, &round0_applying(&rust[0].patch));
    write_script(&scripts, &rust[1].instance_id, &[call("cd /testbed && ls"), call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]);
    // The golang suite's first task submits its gold fix, where the suite is fetched and `go`
    // is installed (else the report has no Go row, saying why).
    let go_present = std::process::Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    let go: Vec<TaskInstance> = match execcritic::task::suite::golang_suite() {
        Ok(p) if go_present => load_tasks(&p).unwrap().into_iter().filter(|t| t.instance_id.ends_with("-201")).collect(),
        Ok(_) => {
            eprintln!("SKIPPED (the Go row): no `go` on the PATH");
            Vec::new()
        }
        Err(e) => {
            eprintln!("SKIPPED (the Go row): {e}");
            Vec::new()
        }
    };
    for t in &go {
        write_script(&scripts, &t.instance_id, &round0_applying(&t.patch));
    }
    let tasks: Vec<String> = std::iter::once(&python).chain(&rust).chain(&go).map(|t| t.to_json().unwrap().to_string()).collect();
    let tasks_file = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks_file, tasks.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let o = bin()
        .args(["eval", "--tests", "none", "--runs", "1", "--workers", "2", "--tasks"])
        .arg(&tasks_file)
        .arg("--out")
        .arg(&out)
        .arg(format!("--repair-policy=scripted:{}", scripts.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let by: Vec<(String, u64, f64)> = report["by_language"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["language"].as_str().unwrap().to_string(), l["instances"].as_u64().unwrap(), l["conditions"][0]["final"]["mean"].as_f64().unwrap()))
        .collect();
    let mut by = by;
    by.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![("python".to_string(), 1, 100.0), ("rust".to_string(), 2, 50.0)];
    if !go.is_empty() {
        want.insert(0, ("go".to_string(), 1, 100.0));
    }
    assert_eq!(by, want, "{report:#}");
    assert_eq!(report["infra"].as_array().unwrap().len(), 0, "{report:#}");
}
