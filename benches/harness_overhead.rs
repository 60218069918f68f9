//! Gate overhead: the candidate gate (sandbox reset, candidate + test patch apply, sandboxed run
//! with exit marker and parsing) against running the same test command directly on the host,
//! plus its parts (sandbox start, reset, patch apply, an empty sandboxed command). Medians over
//! runs, for `local` and (when available) `docker`. A timed main (`harness = false`):
//! `cargo bench --bench harness_overhead [-- RUNS]`.

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
    println!("| sandbox | start | reset | patch apply | empty exec | direct test run | full candidate gate | gate overhead (gate − direct) |");
    println!("|---|---|---|---|---|---|---|---|");
    let local = || -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>> {
        Box::pin(async {
            Box::new(LocalSandbox::open(populate(), &SandboxConfig::default()).unwrap())
                as Box<dyn Sandbox>
        })
    };
    println!("{}", measure("local", &local, runs, direct).await);
    if docker_available().await {
        let docker =
            || -> std::pin::Pin<Box<dyn std::future::Future<Output = Box<dyn Sandbox>>>> {
                Box::pin(async { docker_sandbox(&SandboxConfig::default()).await })
            };
        println!("{}", measure("docker", &docker, runs, direct).await);
    }
}
