//! `execcritic eval` (the paper's generated-test evaluation protocol over a task file, see
//! `pipeline::eval`) and `execcritic report DIR [DIR…]` (rebuild or compare reports). This file
//! only parses arguments, shows progress and prints; the protocol lives in the library.

use super::agent_cmds::SandboxArg;
use super::interrupt;
use crate::pipeline::eval::{self, outputs, policies::PolicySource, report, Budgets, Condition, EvalConfig, EvalRun};
use crate::task::{load_tasks, TaskInstance};
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// SWE-bench JSON or JSONL task file (`bundled`, `pypi`, `crates` or `golang` for the built-in suites).
    #[arg(long)]
    pub tasks: String,
    /// Output directory (rerunning the same command continues an interrupted run).
    #[arg(long)]
    pub out: PathBuf,
    /// Policy of both roles: scripted:FILE|DIR, http:URL[#MODEL], engine:MODEL_DIR.
    #[arg(long)]
    pub policy: Option<String>,
    /// Policy of the Test agent (default: --policy).
    #[arg(long)]
    pub test_policy: Option<String>,
    /// Policy of the Repair agent (default: --policy).
    #[arg(long)]
    pub repair_policy: Option<String>,
    /// Test conditions, comma-separated: generated, oracle, none, or a bundles directory
    /// (DIR/<instance_id>/).
    #[arg(long, value_delimiter = ',', default_value = "generated")]
    pub tests: Vec<String>,
    /// Repair runs per instance and condition.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Only these instances.
    #[arg(long, value_delimiter = ',')]
    pub instances: Vec<String>,
    /// Only the first N instances (after --instances).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Instances in flight at once.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Concurrent model requests to a shared (HTTP or engine) policy.
    #[arg(long, default_value_t = 8)]
    pub slots: usize,
    #[arg(long, value_enum, default_value = "local")]
    pub sandbox: SandboxArg,
    /// With --sandbox docker: a docker host to run sandboxes on, `URL` or `URL=N` (at most N
    /// instances at once there); URL is unix:///path, tcp://host:port (TLS with
    /// DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH), https://host:port or ssh://[user@]host.
    /// Repeat to spread instances over several (default: DOCKER_HOST or the local daemon).
    /// Images are never pulled: every missing one is named, per host, before any work.
    #[arg(long = "docker-host")]
    pub docker_hosts: Vec<crate::harness::sandbox::docker_host::DockerHost>,
    /// TOML file overriding the budgets (Table 9 defaults; see docs/eval.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Evaluation output directories; one rebuilds its report, several are compared.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
}

fn tasks_from(spec: &str) -> anyhow::Result<Vec<TaskInstance>> {
    let path = match spec {
        "bundled" => crate::task::bundled_suite().context("building the bundled suite")?,
        "pypi" => crate::task::pypi_suite().context("building the PyPI suite")?,
        "crates" => crate::task::crates_suite().context("building the crates suite")?,
        "golang" => crate::task::suite::golang_suite().context("building the golang suite")?,
        p => PathBuf::from(p),
    };
    load_tasks(&path).with_context(|| format!("loading tasks from {}", path.display()))
}

fn select(mut tasks: Vec<TaskInstance>, ids: &[String], limit: Option<usize>) -> anyhow::Result<Vec<TaskInstance>> {
    if !ids.is_empty() {
        for id in ids {
            if !tasks.iter().any(|t| &t.instance_id == id) {
                return Err(eval::EvalError::UnknownInstance(id.clone()).into());
            }
        }
        tasks.retain(|t| ids.contains(&t.instance_id));
    }
    if let Some(n) = limit {
        tasks.truncate(n);
    }
    Ok(tasks)
}

fn progress(total: usize) -> Arc<dyn Fn(&eval::ResultRow) + Send + Sync> {
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {msg}  [{elapsed_precise}, ETA {eta}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let counts = std::sync::Mutex::new((0usize, 0usize));
    Arc::new(move |row: &eval::ResultRow| {
        let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
        c.0 += row.final_resolved as usize;
        c.1 += row.infra_error.is_some() as usize;
        bar.set_message(format!("resolved {}  infra errors {}", c.0, c.1));
        bar.inc(1);
        if bar.position() == bar.length().unwrap_or(0) {
            bar.finish();
        }
    })
}

pub fn eval(a: EvalArgs) -> anyhow::Result<ExitCode> {
    let budgets = match &a.config {
        Some(p) => Budgets::from_toml_file(p)?,
        None => Budgets::default(),
    };
    let conditions = a.tests.iter().map(|s| Condition::parse(s)).collect::<Result<Vec<_>, _>>()?;
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !a.docker_hosts.is_empty() && !matches!(a.sandbox, SandboxArg::Docker) {
        bail!("--docker-host needs --sandbox docker");
    }
    let tasks = select(tasks_from(&a.tasks)?, &a.instances, a.limit)?;
    let spec = |role: &Option<String>| role.clone().or_else(|| a.policy.clone());
    let Some(repair_spec) = spec(&a.repair_policy) else {
        bail!("give --policy or --repair-policy");
    };
    let test_policy = match spec(&a.test_policy) {
        Some(s) => Some(PolicySource::open(&s, a.slots)?),
        None if conditions.contains(&Condition::Generated) => bail!("the generated condition needs --policy or --test-policy"),
        None => None,
    };
    let run = EvalRun {
        config: EvalConfig { budgets, conditions: conditions.clone(), runs: a.runs, sandbox: a.sandbox.into(), workers: a.workers, docker_hosts: a.docker_hosts.clone() },
        test_policy,
        repair_policy: PolicySource::open(&repair_spec, a.slots)?,
        out: a.out.clone(),
        tasks,
    };
    let total = run.tasks.len() * conditions.len() * a.runs;
    crate::harness::orphans::sweep();
    let on_row = progress(total);
    let outcome = match interrupt::run_interruptible(|| eval::run_eval(run, on_row))? {
        Ok(o) => o?,
        Err(s) => {
            eprintln!("{}: stopped; rerun the same command to continue", s.name());
            return Ok(s.exit_code());
        }
    };
    let report = outputs::write_outcome(&a.out, &outcome)?;
    print!("{}", report.markdown(&format!("Evaluation report: {}", a.out.display())));
    println!("Outputs: {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}

fn name_of(dir: &Path) -> String {
    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
}

pub fn report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut reports = Vec::new();
    for d in &a.dirs {
        let r = outputs::write_report(d).with_context(|| format!("rebuilding the report of {}", d.display()))?;
        reports.push((name_of(d), r));
    }
    match reports.as_slice() {
        [(name, r)] => print!("{}", r.markdown(&format!("Evaluation report: {name}"))),
        _ => print!("{}", report::compare_markdown(&reports)),
    }
    Ok(ExitCode::SUCCESS)
}
