//! CLI commands of the harness (no model): `qualify`, `audit`, `grade`, `screen`. `audit` and `grade`
//! write each result as it completes and resume an interrupted run (see [`super::resume`]);
//! Ctrl-C and SIGTERM shut every command down in order (see [`super::interrupt`]).

use super::interrupt::{self, Interrupted};
use super::{jobs, resume};
use crate::harness::{self, Bundle, BundleError, FrozenBundle, GradeResult, Qualification};
use crate::task::{find_task, load_tasks, TaskInstance};
use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::json;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
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

/// `screen` applies the static, structural screen (no sandbox) to patch files: a candidate
/// source patch, or with `--bundle` a Test agent's test patch. One JSON line per patch.
#[derive(Args, Debug)]
pub struct ScreenArgs {
    /// Patch files (unified diffs).
    #[arg(required = true)]
    pub patches: Vec<PathBuf>,
    /// Screen as a bundle's test patch instead of a candidate.
    #[arg(long)]
    pub bundle: bool,
    /// A git repository (work tree or bare) holding the Base commit: the configuration files a
    /// candidate changes are read from it (`--rev`), as the gate reads them from its sandbox.
    #[arg(long, requires = "rev")]
    pub repo: Option<PathBuf>,
    /// The Base commit in `--repo`.
    #[arg(long, requires = "repo")]
    pub rev: Option<String>,
}

/// A file's text at `rev` in the git repository `repo` (`None` where git cannot show it).
fn git_show(repo: &std::path::Path, rev: &str, path: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .arg("show")
        .arg(format!("{rev}:{path}"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Screen patch files: `{"patch", "result": "ok" | "refused" | "unparseable", "class", "path",
/// "detail"}` per line; exit 0 when every patch passes, 1 when one is refused or unparseable.
pub fn screen(a: ScreenArgs) -> anyhow::Result<ExitCode> {
    use crate::harness::diff::parse_patch;
    use crate::harness::tamper::{screen_bundle, screen_candidate_with};
    let base = |p: &str| match (&a.repo, &a.rev) {
        (Some(repo), Some(rev)) => git_show(repo, rev, p),
        _ => None,
    };
    let mut all_ok = true;
    for p in &a.patches {
        let text = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        let text = String::from_utf8_lossy(&text);
        let line = match parse_patch(&text) {
            Err(e) => {
                all_ok = false;
                json!({"patch": p, "result": "unparseable", "class": e.class(), "detail": e.to_string()})
            }
            Ok(files) => {
                let r = if a.bundle { screen_bundle(&files) } else { screen_candidate_with(&files, &base) };
                match r {
                    Ok(()) => json!({"patch": p, "result": "ok"}),
                    Err(t) => {
                        all_ok = false;
                        json!({"patch": p, "result": "refused", "class": t.class.code(), "path": t.path, "detail": t.detail})
                    }
                }
            }
        };
        println!("{line}");
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
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

/// The key of a result: `kind`, the task as loaded, the sandbox kind and `inputs`.
fn result_key(
    kind: &str,
    task: &TaskInstance,
    sandbox: harness::SandboxKind,
    inputs: &[&[u8]],
) -> anyhow::Result<String> {
    let task_json = serde_json::to_vec(&task.to_json()?)?;
    let sandbox = format!("{sandbox:?}");
    let mut parts: Vec<&[u8]> = vec![&task_json, sandbox.as_bytes()];
    parts.extend_from_slice(inputs);
    Ok(resume::input_key(kind, &parts))
}

/// sha256 of a file's bytes, streamed (`"absent"` when it cannot be read).
fn file_digest(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    match std::fs::File::open(path) {
        Ok(mut f) => {
            let mut h = Sha256::new();
            match std::io::copy(&mut f, &mut h) {
                Ok(_) => hex::encode(h.finalize()),
                Err(e) => format!("unreadable: {e}"),
            }
        }
        Err(_) => "absent".to_string(),
    }
}

/// What a batch command needs to know about its result lines.
struct Batch<'a> {
    /// `OUT/<file>`.
    path: PathBuf,
    /// Every item's key, in input order.
    keys: Vec<String>,
    /// A line of an earlier run that is a result (not an operational error to retry).
    is_final: fn(&serde_json::Value) -> bool,
    /// The result line of an item whose worker panicked.
    panicked: &'a (dyn Fn(usize, String) -> serde_json::Value + Sync),
}

/// Run a batch with resumable results: earlier final lines of the same inputs are reused, every
/// other item runs (`work(index)`), each line is appended with its key as it completes, and the
/// file is rewritten in input order at the end. `Ok(Err(signal))` when interrupted (the lines
/// written so far stay; a rerun finishes the rest).
fn run_batch<F, Fut>(
    batch: Batch<'_>,
    workers: usize,
    work: F,
) -> anyhow::Result<Result<Vec<serde_json::Value>, Interrupted>>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = serde_json::Value> + Send + 'static,
{
    let n = batch.keys.len();
    let key_set: HashSet<String> = batch.keys.iter().cloned().collect();
    let (mut log, mut kept) = resume::ResultLog::open(&batch.path, &key_set, batch.is_final)
        .with_context(|| format!("opening {}", batch.path.display()))?;
    let mut rows: Vec<Option<serde_json::Value>> =
        batch.keys.iter().map(|k| kept.remove(k)).collect();
    let reused = rows.iter().filter(|r| r.is_some()).count();
    if reused > 0 {
        eprintln!(
            "resuming: {reused}/{n} results of an earlier run with the same inputs are kept in {}",
            batch.path.display()
        );
    }
    let todo: Vec<(usize, usize)> = (0..n).filter(|&i| rows[i].is_none()).map(|i| (i, i)).collect();
    let keys = batch.keys.clone();
    let mut write_error: Option<std::io::Error> = None;
    let outcome = interrupt::run_interruptible(|| {
        jobs::run_each(todo, workers, work, |i, out| {
            let mut row = out.unwrap_or_else(|m| (batch.panicked)(i, m));
            row[resume::KEY_FIELD] = json!(keys[i]);
            if let Err(e) = log.append(&row) {
                write_error.get_or_insert(e);
            }
            rows[i] = Some(row);
        })
    })?;
    if let Some(e) = write_error {
        return Err(anyhow::Error::new(e).context(format!("writing {}", batch.path.display())));
    }
    if let Err(s) = outcome {
        let saved = rows.iter().filter(|r| r.is_some()).count();
        eprintln!(
            "interrupted by {}: {saved}/{n} results saved in {}; rerun with the same --out to finish",
            s.name(),
            batch.path.display()
        );
        return Ok(Err(s));
    }
    let rows: Vec<serde_json::Value> = rows.into_iter().flatten().collect();
    log.finish(&rows)
        .with_context(|| format!("writing {}", batch.path.display()))?;
    Ok(Ok(rows))
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
    harness::orphans::sweep();
    let kind = a.sandbox.into();
    let q = match interrupt::run_interruptible(|| harness::qualify(&task, &bundle, kind))? {
        Ok(q) => q?,
        Err(s) => return Ok(s.exit_code()),
    };
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
    // Balanced accuracy over the task's labelled candidates and the harness's own non-fixes.
    let task = if task.candidates.is_empty() {
        task.clone()
    } else {
        harness::nonfix::with_non_fixes(&task)
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

/// An audit line that is a result, not an operational error a rerun should retry.
fn audit_line_is_final(v: &serde_json::Value) -> bool {
    v.get("infra_error").is_none()
        && v.get("worker_error").is_none()
        && v["validation"] != json!("error")
}

/// The three files of a bundle directory, by digest (the bundle as `audit` will read it).
fn bundle_digests(dir: &Path) -> String {
    ["test.patch", "test_command", "test_contract.json"]
        .iter()
        .map(|f| format!("{f}={}", file_digest(&dir.join(f))))
        .collect::<Vec<_>>()
        .join(",")
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
    harness::orphans::sweep();
    let kind: harness::SandboxKind = a.sandbox.into();
    let keys = jobs
        .iter()
        .map(|(t, d)| result_key("audit", t, kind, &[bundle_digests(d).as_bytes()]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let n = jobs.len();
    let ids: Vec<String> = jobs.iter().map(|(t, _)| t.instance_id.clone()).collect();
    let panicked = move |i: usize, m: String| {
        json!({"instance_id": ids[i], "validation": "ok", "worker_error": format!("worker panicked: {m}"), "q": false})
    };
    let path = a.out.join("audit.jsonl");
    let batch = Batch {
        path: path.clone(),
        keys,
        is_final: audit_line_is_final,
        panicked: &panicked,
    };
    let jobs = Arc::new(jobs);
    let rows = match run_batch(batch, a.workers, move |i| {
        let (t, d) = jobs[i].clone();
        audit_one(t, d, kind)
    })? {
        Ok(rows) => rows,
        Err(s) => return Ok(s.exit_code()),
    };
    let q = rows
        .iter()
        .filter(|r| r["q"].as_bool().unwrap_or(false))
        .count();
    let pct = 100.0 * q as f64 / tasks.len().max(1) as f64;
    println!(
        "Base-to-Gold: {q}/{} = {pct:.1}% ({n} bundles audited; results in {})",
        tasks.len(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A grading line that is a result, not an operational error a rerun should retry.
fn grade_line_is_final(v: &serde_json::Value) -> bool {
    !v["error_kind"]
        .as_str()
        .is_some_and(|k| k.starts_with("infra:") || k.starts_with("worker_panic:"))
}

fn grade_error(t: &TaskInstance, kind: String) -> GradeResult {
    GradeResult {
        instance_id: t.instance_id.clone(),
        resolved: false,
        tests: Default::default(),
        error_kind: Some(kind),
        completion: None,
        forbidden: None,
        tampered: None,
        official: None,
    }
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
    harness::orphans::sweep();
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
    let keys = jobs
        .iter()
        .map(|(t, p)| {
            let patch = match p {
                Some(p) => format!("patch:{p}"),
                None => "no prediction".to_string(),
            };
            result_key("grade", t, kind, &[patch.as_bytes()])
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let tasks_for_panic: Vec<TaskInstance> = jobs.iter().map(|(t, _)| t.clone()).collect();
    let panicked = move |i: usize, m: String| {
        serde_json::to_value(grade_error(&tasks_for_panic[i], format!("worker_panic: {m}")))
            .unwrap_or_default()
    };
    let path = a.out.join("results.jsonl");
    let batch = Batch {
        path: path.clone(),
        keys,
        is_final: grade_line_is_final,
        panicked: &panicked,
    };
    let jobs = Arc::new(jobs);
    let logs = a.out.join("logs");
    let logs_for_jobs = logs.clone();
    let rows = match run_batch(batch, a.workers, move |i| {
        let (t, patch) = jobs[i].clone();
        let logs = logs_for_jobs.clone();
        async move {
            let mut r = match patch {
                None => grade_error(&t, "no_prediction".into()),
                Some(p) => match harness::grade(&t, &p, kind).await {
                    Ok(r) => r,
                    Err(e) => grade_error(&t, format!("infra: {e}")),
                },
            };
            if let Some(rec) = &r.official {
                if let Err(e) = write_official_logs(&logs.join(&t.instance_id), rec) {
                    r = grade_error(&t, format!("infra: writing the official logs: {e}"));
                }
            }
            serde_json::to_value(r).unwrap_or_default()
        }
    })? {
        Ok(rows) => rows,
        Err(s) => return Ok(s.exit_code()),
    };
    let resolved = rows
        .iter()
        .filter(|r| r["resolved"].as_bool().unwrap_or(false))
        .count();
    let errors = rows.iter().filter(|r| !r["error_kind"].is_null()).count();
    println!(
        "resolved {resolved}/{} instances ({errors} not gradable); results in {}",
        tasks.len(),
        path.display()
    );
    if tasks.iter().any(|t| t.official.is_some()) {
        let summary = a.out.join("swebench_summary.json");
        write_official_summary(&tasks, &by_id, &logs, &summary)?;
        println!(
            "swebench's own view: per-instance test_output.txt and report.json under {}, run summary {}",
            logs.display(),
            summary.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `test_output.txt` and `report.json` of one published instance, as swebench lays them out
/// (`report.json` only where swebench writes one).
fn write_official_logs(
    dir: &std::path::Path,
    rec: &harness::official::evaluate::OfficialRecord,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("test_output.txt"), &rec.test_output)?;
    if let Some(report) = &rec.report_json {
        std::fs::write(dir.join("report.json"), report)?;
    }
    Ok(())
}

/// swebench's run summary (`make_run_report`, without a docker client) from the logs written.
fn write_official_summary(
    tasks: &[TaskInstance],
    predictions: &std::collections::BTreeMap<String, harness::Prediction>,
    logs: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    use harness::official::report::{python_json, run_summary, RunInputs, StoredReport};
    let mut inputs = RunInputs {
        dataset: tasks.iter().map(|t| t.instance_id.clone()).collect(),
        ..RunInputs::default()
    };
    for (id, p) in predictions {
        inputs.predictions.insert(id.clone(), p.model_patch.clone());
        let dir = logs.join(id);
        if let Ok(text) = std::fs::read_to_string(dir.join("report.json")) {
            inputs.reports.insert(id.clone(), StoredReport::read(&text, id));
        }
        if let Ok(text) = std::fs::read_to_string(dir.join("test_output.txt")) {
            if let Some((reason, tier)) = harness::official::infra::classify_text(&text) {
                inputs.classifications.insert(id.clone(), (reason.to_string(), tier));
            }
        }
    }
    let mut text = python_json(&run_summary(&inputs))?;
    text.push('\n');
    std::fs::write(out, text)?;
    Ok(())
}
