//! CLI commands of the harness (no model): `qualify`, `audit`, `grade`.

use crate::harness::{self, Bundle, BundleError, FrozenBundle, GradeResult, Qualification};
use crate::task::{find_task, load_tasks, TaskInstance};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SandboxKind {
    Local,
    Docker,
}

/// `qualify` checks ONE bundle against ONE instance (one sandbox), so it has no `--workers`;
/// `audit` is the parallel form over a directory of bundles.
#[derive(Args, Debug)]
pub struct QualifyArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    #[arg(long)]
    pub bundle: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub bundles: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

#[derive(Args, Debug)]
pub struct GradeArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub predictions: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

impl From<SandboxKind> for harness::SandboxKind {
    fn from(k: SandboxKind) -> Self {
        match k {
            SandboxKind::Local => harness::SandboxKind::Local,
            SandboxKind::Docker => harness::SandboxKind::Docker,
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Run `f` over `items` with at most `workers` in flight; results in input order.
async fn bounded<T, R, F, Fut>(items: Vec<T>, workers: usize, f: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = R> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(workers.max(1)));
    let f = Arc::new(f);
    let mut handles = Vec::new();
    for item in items {
        let sem = sem.clone();
        let f = f.clone();
        handles.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            f(item).await
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("worker task panicked"));
    }
    out
}

/// Ctrl-C: remove this process's docker containers, then exit (local sandboxes die with us via
/// bubblewrap `--die-with-parent`).
fn install_ctrl_c(rt: &tokio::runtime::Runtime) {
    rt.spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: removing sandboxes");
            harness::sandbox::docker::cleanup_all().await;
            std::process::exit(130);
        }
    });
}

pub fn qualify(a: QualifyArgs) -> anyhow::Result<ExitCode> {
    let tasks = load_tasks(&a.tasks)?;
    let task = find_task(&tasks, &a.instance)?.clone();
    let bundle = match Bundle::read_dir(&a.bundle) {
        Ok(b) => b,
        Err(BundleError::Rejected(r)) => {
            println!("rejected: {} — {}", r.kind.code(), r.message);
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let rt = runtime()?;
    install_ctrl_c(&rt);
    let q = rt.block_on(harness::qualify(&task, &bundle, a.sandbox.into()))?;
    Ok(match q {
        Qualification::Accepted(f) => {
            println!(
                "accepted: bundle {} ({} test node(s))",
                f.hash,
                f.plan.nodes.len()
            );
            ExitCode::SUCCESS
        }
        Qualification::Rejected(r) => {
            println!("rejected: {} — {}", r.kind.code(), r.message);
            ExitCode::from(1)
        }
        Qualification::BaseGateFailed { category, tail } => {
            println!("base gate failed: {}\n{}", category.name(), tail);
            ExitCode::from(1)
        }
    })
}

/// One line of audit.jsonl.
async fn audit_one(
    task: TaskInstance,
    dir: PathBuf,
    kind: harness::SandboxKind,
) -> serde_json::Value {
    let id = task.instance_id.clone();
    let bundle = match Bundle::read_dir(&dir) {
        Ok(b) => b,
        Err(BundleError::Rejected(r)) => {
            return json!({"instance_id": id, "validation": "rejected", "rejection": r, "q": false})
        }
        Err(e) => {
            return json!({"instance_id": id, "validation": "error", "error": e.to_string(), "q": false})
        }
    };
    let frozen = match FrozenBundle::freeze(bundle) {
        Ok(f) => f,
        Err(r) => {
            return json!({"instance_id": id, "validation": "rejected", "rejection": r, "q": false})
        }
    };
    match harness::audit(&task, &frozen, kind).await {
        Ok(rec) => {
            let mut v = serde_json::to_value(&rec).unwrap_or_default();
            v["instance_id"] = json!(id);
            v["validation"] = json!("ok");
            v["bundle_hash"] = json!(frozen.hash);
            v
        }
        Err(e) => {
            json!({"instance_id": id, "validation": "ok", "infra_error": e.to_string(), "q": false})
        }
    }
}

pub fn audit(a: AuditArgs) -> anyhow::Result<ExitCode> {
    let tasks = load_tasks(&a.tasks)?;
    let mut jobs = Vec::new();
    for t in &tasks {
        let dir = a.bundles.join(&t.instance_id);
        if dir.is_dir() {
            jobs.push((t.clone(), dir));
        }
    }
    if jobs.is_empty() {
        anyhow::bail!(
            "no bundle directories {}/<instance_id>/ for any task of {}",
            a.bundles.display(),
            a.tasks.display()
        );
    }
    std::fs::create_dir_all(&a.out)?;
    let rt = runtime()?;
    install_ctrl_c(&rt);
    let kind: harness::SandboxKind = a.sandbox.into();
    let n = jobs.len();
    let rows = rt.block_on(bounded(jobs, a.workers, move |(t, d)| {
        audit_one(t, d, kind)
    }));
    let mut out = std::fs::File::create(a.out.join("audit.jsonl"))?;
    let mut q = 0;
    for r in &rows {
        writeln!(out, "{r}")?;
        q += r["q"].as_bool().unwrap_or(false) as usize;
    }
    out.sync_all()?;
    let pct = 100.0 * q as f64 / tasks.len().max(1) as f64;
    println!(
        "Base-to-Gold: {q}/{} = {pct:.1}% ({n} bundles audited; results in {})",
        tasks.len(),
        a.out.join("audit.jsonl").display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn grade(a: GradeArgs) -> anyhow::Result<ExitCode> {
    let tasks = load_tasks(&a.tasks)?;
    let preds = harness::load_predictions(&a.predictions)?;
    let mut by_id = std::collections::BTreeMap::new();
    for p in preds {
        by_id.insert(p.instance_id.clone(), p);
    }
    for id in by_id.keys() {
        find_task(&tasks, id)?;
    }
    std::fs::create_dir_all(&a.out)?;
    let rt = runtime()?;
    install_ctrl_c(&rt);
    let kind: harness::SandboxKind = a.sandbox.into();
    let jobs: Vec<(TaskInstance, Option<String>)> = tasks
        .iter()
        .map(|t| {
            (
                t.clone(),
                by_id
                    .get(&t.instance_id)
                    .and_then(|p| p.model_patch.clone()),
            )
        })
        .collect();
    let rows = rt.block_on(bounded(jobs, a.workers, move |(t, patch)| async move {
        match patch {
            None => GradeResult {
                instance_id: t.instance_id.clone(),
                resolved: false,
                tests: Default::default(),
                error_kind: Some("no_prediction".into()),
                completion: None,
                forbidden: None,
            },
            Some(p) => match harness::grade(&t, &p, kind).await {
                Ok(r) => r,
                Err(e) => GradeResult {
                    instance_id: t.instance_id.clone(),
                    resolved: false,
                    tests: Default::default(),
                    error_kind: Some(format!("infra: {e}")),
                    completion: None,
                    forbidden: None,
                },
            },
        }
    }));
    let mut out = std::fs::File::create(a.out.join("results.jsonl"))?;
    for r in &rows {
        writeln!(out, "{}", serde_json::to_string(r)?)?;
    }
    out.sync_all()?;
    let resolved = rows.iter().filter(|r| r.resolved).count();
    let errors = rows.iter().filter(|r| r.error_kind.is_some()).count();
    println!(
        "resolved {resolved}/{} instances ({errors} not gradable); results in {}",
        tasks.len(),
        a.out.join("results.jsonl").display()
    );
    Ok(ExitCode::SUCCESS)
}
