//! Gate overhead: the candidate gate (sandbox reset, candidate + test patch apply, guarded
//! sandboxed run with canaries, parsing, judging) against running the same test command directly
//! on the host, plus its parts (sandbox start, reset, patch apply, an empty sandboxed command).
//! Medians over runs, for `local` (ephemeral gate runs where available, and resetting with git)
//! and (when available) `docker`. `--paired`: an interleaved in-process A/B that splits the
//! runtime guard's and the canaries' cost from an unguarded sandboxed run. A timed main
//! (`harness = false`):
//! `cargo bench --bench harness_overhead [-- RUNS] [--paired]`.

#[path = "../tests/harness_support/mod.rs"]
mod harness_support;

use execcritic::harness::execute::apply_patch;
use execcritic::harness::gate::check_candidate_in;
use execcritic::harness::sandbox::local::LocalSandbox;
use execcritic::harness::{Bundle, FrozenBundle, Sandbox, SandboxConfig};
use harness_support::*;
use std::time::{Duration, Instant};

const CMD: &str = "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py::test_add";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn time<F, Fut>(runs: usize, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut v = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        f().await;
        v.push(t.elapsed());
    }
    median(v)
}

async fn measure(
    name: &str,
    open: &dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>>,
    runs: usize,
    direct: Duration,
) -> String {
    let f = fixture();
    let patch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let frozen = FrozenBundle::freeze(Bundle::from_parts(&patch, CMD, CONTRACT).unwrap()).unwrap();
    let start = time(runs.min(5), || async {
        drop(open().await);
    })
    .await;
    let sb = open().await;
    let sb = sb.as_ref();
    let reset = time(runs, || async { sb.reset().await.unwrap() }).await;
    let apply = time(runs, || async {
        sb.reset().await.unwrap();
        apply_patch(sb, &f.gold_patch, "bench").await.unwrap();
    })
    .await
    .saturating_sub(reset);
    let empty = time(runs, || async {
        sb.exec("true", Duration::from_secs(30)).await.unwrap();
    })
    .await;
    let gate = time(runs, || async {
        let v = check_candidate_in(sb, &frozen, &f.gold_patch, Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(v.status, execcritic::harness::GateStatus::Pass);
    })
    .await;
    let overhead = gate.saturating_sub(direct);
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} |",
        ms(start),
        ms(reset),
        ms(apply),
        ms(empty),
        ms(direct),
        ms(gate),
        ms(overhead)
    )
}

/// Paired A/B in one process, interleaved (rotating order per iteration so load drifts hit
/// every variant alike): per iteration the direct run and each variant back to back, all on the
/// same ephemeral local sandbox; the medians of the per-iteration differences (variant − direct)
/// are the overheads. Variants:
/// - the candidate gate as it runs (runtime guard + canaries: 6 mutants and 2 controls);
/// - the same guarded run without canaries (`run_after` with no canary nodes);
/// - an unguarded sandboxed run: the same two `git apply`s and the test command, no guard;
/// so guard cost = guarded − unguarded and canary cost = gate − guarded. Also the test command's
/// own in-sandbox runtime where the run reports it.
async fn paired(
    runs: usize,
    repo: &std::path::Path,
) -> Vec<(String, Duration, Duration, Duration)> {
    use execcritic::harness::execute::{run_after, GuardedCommand, RunPlan, Staged};
    use execcritic::harness::sandbox::HANDOFF_DIR;
    let f = fixture();
    let patch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let frozen = FrozenBundle::freeze(Bundle::from_parts(&patch, CMD, CONTRACT).unwrap()).unwrap();
    let sb = LocalSandbox::open(populate(), &SandboxConfig::default()).unwrap();
    let sb: &dyn Sandbox = &sb;
    let t = Duration::from_secs(120);
    let names = [
        "candidate gate: guard + canaries (6 mutants, 2 controls)",
        "guarded run, no canaries",
        "unguarded sandboxed run (same patches and command)",
    ];
    let cand = format!("{HANDOFF_DIR}/bench-candidate.patch");
    let test = format!("{HANDOFF_DIR}/bench-test.patch");
    let apply = format!("git apply --whitespace=nowarn {cand} {test}");
    let mut diffs: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut abs: Vec<Vec<Duration>> = vec![Vec::new(); names.len() + 1];
    let mut harness_only: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for i in 0..runs {
        let mut took = [Duration::ZERO; 4];
        let mut inside = [Duration::ZERO; 4];
        for k in 0..4 {
            let which = (i + k) % 4;
            if which >= 2 {
                // A reset empties /tmp (and the handoff directory with it).
                sb.put_file(&cand, f.gold_patch.as_bytes()).await.unwrap();
                sb.put_file(&test, patch.as_bytes()).await.unwrap();
            }
            let start = Instant::now();
            match which {
                0 => {
                    let out = tokio::process::Command::new("bash")
                        .arg("-c")
                        .arg(CMD)
                        .current_dir(repo)
                        .output()
                        .await
                        .unwrap();
                    assert!(out.status.success());
                }
                1 => {
                    let v = check_candidate_in(sb, &frozen, &f.gold_patch, t).await.unwrap();
                    assert_eq!(v.status, execcritic::harness::GateStatus::Pass, "{}", v.feedback);
                    inside[which] = v.test_duration.unwrap_or_default();
                }
                2 => {
                    let plan = &frozen.plan;
                    let execcritic::harness::validate::PlanCommand::Python(python) = &plan.command else {
                        panic!("the benchmark's bundle is a pytest bundle")
                    };
                    let command = GuardedCommand::parse(python.runner, &python.activated, &plan.nodes).unwrap();
                    let run = RunPlan::plain(command, sb);
                    let r = run_after(sb, &[("apply", apply.clone())], run, t, true).await.unwrap();
                    let Staged::Ran(r) = r else { panic!("a step failed") };
                    assert_eq!(r.rc, Some(0));
                    assert!(r.guard.authenticated);
                    inside[which] = r.test_duration.unwrap_or_default();
                }
                _ => {
                    let out = sb
                        .exec_ephemeral(&format!("{apply} && {CMD}"), t)
                        .await
                        .unwrap();
                    assert!(out.success(), "{}", out.output);
                }
            }
            took[which] = start.elapsed();
        }
        abs[0].push(took[0]);
        for v in 0..names.len() {
            diffs[v].push(took[v + 1].saturating_sub(took[0]));
            abs[v + 1].push(took[v + 1]);
            harness_only[v].push(took[v + 1].saturating_sub(inside[v + 1]));
        }
    }
    names
        .iter()
        .enumerate()
        .map(|(v, n)| {
            (
                n.to_string(),
                median(abs[v + 1].clone()),
                median(diffs[v].clone()),
                median(harness_only[v].clone()),
            )
        })
        .chain(std::iter::once((
            "direct test run".to_string(),
            median(abs[0].clone()),
            Duration::ZERO,
            Duration::ZERO,
        )))
        .collect()
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(15);
    // Direct: the same test command on a host checkout with the gold fix and the test applied.
    let f = fixture();
    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("r");
    git(host.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
    git(&repo, &["checkout", "-q", &f.base]);
    std::fs::write(repo.join("calc/__init__.py"), CALC_GOLD).unwrap();
    std::fs::write(repo.join("tests/test_calc.py"), official_test_file()).unwrap();
    let direct = time(runs, || async {
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(CMD)
            .current_dir(&repo)
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
    })
    .await;
    println!("runs per median: {runs}\n");
    if std::env::args().any(|a| a == "--paired") {
        println!("| local variant | median time | median paired overhead (variant − direct) | median harness work (variant − in-sandbox test time) |");
        println!("|---|---|---|---|");
        for (name, t, d, h) in paired(runs, &repo).await {
            println!("| {name} | {} | {} | {} |", ms(t), ms(d), ms(h));
        }
        return;
    }
    println!("| sandbox | start | reset | patch apply | empty exec | direct test run | full candidate gate | gate overhead (gate − direct) |");
    println!("|---|---|---|---|---|---|---|---|");
    let local = || -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>> {
        Box::pin(async {
            Box::new(LocalSandbox::open(populate(), &SandboxConfig::default()).unwrap())
                as Box<dyn Sandbox>
        })
    };
    println!("{}", measure("local", &local, runs, direct).await);
    // The same without ephemeral runs: every gate resets with `git reset --hard` + `git clean`.
    let local_git = || -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>> {
        Box::pin(async {
            let config = SandboxConfig {
                no_ephemeral: true,
                ..Default::default()
            };
            Box::new(LocalSandbox::open(populate(), &config).unwrap()) as Box<dyn Sandbox>
        })
    };
    println!(
        "{}",
        measure("local (git reset)", &local_git, runs, direct).await
    );
    if docker_available().await {
        let docker =
            || -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>> {
                Box::pin(async { docker_sandbox(&SandboxConfig::default()).await })
            };
        println!("{}", measure("docker", &docker, runs, direct).await);
    }
}
