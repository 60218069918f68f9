//! Gate overhead: the candidate gate (sandbox reset, candidate + test patch apply, sandboxed run
//! with exit marker and parsing) against running the same test command directly on the host,
//! plus its parts (sandbox start, reset, patch apply, an empty sandboxed command). Medians over
//! runs, for `local` (ephemeral gate runs where available, and resetting with git) and (when
//! available) `docker`. `--paired`: an interleaved in-process A/B of the local gate variants
//! (and the previous fast path) with per-iteration differences to the direct run. A timed main
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
/// every variant alike): per iteration the direct run and each gate variant back to back; the
/// medians of the per-iteration differences (variant − direct) are the overheads.
/// Variants: the gate with ephemeral runs, the gate resetting with git (one `git apply`), and
/// the previous fast path (in-script `git reset --hard` + `git clean -fdx` + two `git apply`s,
/// the test run and log parsing, without building the verdict — so it is, if anything,
/// under-estimated).
/// Also: the test command's own in-sandbox runtime (marker timestamps), so the overhead splits
/// into harness work (variant − in-sandbox test time) and the command running slower inside
/// the sandbox (in-sandbox test time − direct).
async fn paired(
    runs: usize,
    repo: &std::path::Path,
) -> Vec<(String, Duration, Duration, Duration)> {
    use execcritic::harness::execute::run_after;
    use execcritic::harness::sandbox::reset_command;
    let f = fixture();
    let patch = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    let frozen = FrozenBundle::freeze(Bundle::from_parts(&patch, CMD, CONTRACT).unwrap()).unwrap();
    let open = |no_ephemeral: bool| {
        let config = SandboxConfig {
            no_ephemeral,
            ..Default::default()
        };
        LocalSandbox::open(populate(), &config).unwrap()
    };
    let (eph, git, old) = (open(false), open(true), open(true));
    let t = Duration::from_secs(120);
    let names = [
        "gate, ephemeral run (new)",
        "gate, git reset, one git apply (new)",
        "previous fast path: git reset + clean, two git apply",
    ];
    let mut diffs: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut abs: Vec<Vec<Duration>> = vec![Vec::new(); names.len() + 1];
    let mut harness_only: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for i in 0..runs {
        let mut took = [Duration::ZERO; 4];
        let mut inside = [Duration::ZERO; 4];
        for k in 0..4 {
            let which = (i + k) % 4;
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
                1 | 2 => {
                    let sb: &dyn Sandbox = if which == 1 { &eph } else { &git };
                    let v = check_candidate_in(sb, &frozen, &f.gold_patch, t)
                        .await
                        .unwrap();
                    assert_eq!(v.status, execcritic::harness::GateStatus::Pass);
                    inside[which] = v.test_duration.unwrap();
                }
                _ => {
                    let sb: &dyn Sandbox = &old;
                    sb.put_file("/tmp/.execcritic/fast-test.patch", patch.as_bytes())
                        .await
                        .unwrap();
                    sb.put_file(
                        "/tmp/.execcritic/fast-candidate.patch",
                        f.gold_patch.as_bytes(),
                    )
                    .await
                    .unwrap();
                    let steps = [
                        ("reset", reset_command(sb.base_commit())),
                        (
                            "candidate",
                            "git apply --whitespace=nowarn /tmp/.execcritic/fast-candidate.patch"
                                .to_string(),
                        ),
                        (
                            "test",
                            "git apply --whitespace=nowarn /tmp/.execcritic/fast-test.patch"
                                .to_string(),
                        ),
                    ];
                    let plan = &frozen.plan;
                    let r = run_after(
                        sb,
                        &steps,
                        plan.command.runner,
                        &plan.command.activated,
                        t,
                        false,
                    )
                    .await
                    .unwrap();
                    let execcritic::harness::execute::Staged::Ran(r) = r else {
                        panic!("previous fast path: a step failed")
                    };
                    assert_eq!(r.rc, Some(0));
                    inside[which] = r.test_duration.unwrap();
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
