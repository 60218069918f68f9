//! CLI commands of the agents: `gen-test`, `repair`, `demo`, `bench revision-loop`.
//!
//! `gen-test` and `repair` write every output file atomically and a completion marker
//! (`done.json`, keyed by a hash of the inputs) last: a rerun with the same inputs and `--out`
//! replays the result without running the episode again; Ctrl-C and SIGTERM remove every
//! sandbox and workspace before the command returns.

use super::interrupt::{self, Interrupted};
use super::{jobs, resume};
use crate::agent::Trajectory;
use crate::episode::bench::{bench_revision_loop, BenchConfig};
use crate::episode::repair::{run_repair, RepairConfig, RepairInputs, RepairRecord};
use crate::episode::test_episode::{run_test_episode, TestEpisodeConfig, TestOutcome};
use crate::harness::{self, Bundle, FrozenBundle, Qualification, SandboxKind};
use crate::policy::{open_policy, Policy, PolicySpec, ScriptedPolicy};
use crate::task::{find_task, load_tasks, TaskInstance};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Budgets shared by the agent commands (defaults: the paper's).
#[derive(Args, Debug, Clone)]
pub struct BudgetArgs {
    /// Sandbox kind for the agent and the gates.
    #[arg(long, value_enum, default_value = "local")]
    pub sandbox: SandboxArg,
    /// Timeout of one agent bash command, seconds.
    #[arg(long, default_value_t = 120)]
    pub command_timeout: u64,
    /// Sampling temperature.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Maximum new tokens per model turn.
    #[arg(long, default_value_t = 8192)]
    pub max_tokens: u32,
}

/// Where an `engine:` policy runs: `--device`/`--dtype` place it like `engine:DIR@DEVICE[:DTYPE]`
/// (and override a device given in the spec).
#[derive(Args, Debug, Clone, Default)]
pub struct PolicyDeviceArgs {
    /// cpu, cuda, cuda:N or emulator, for an engine:MODEL_DIR policy.
    #[arg(long)]
    pub device: Option<crate::engine::DeviceChoice>,
    /// Storage type on cuda/emulator: bf16 (default there) or f32.
    #[arg(long)]
    pub dtype: Option<crate::tensor::cuda::ActType>,
}

impl PolicyDeviceArgs {
    /// The policy spec with these options applied.
    pub fn apply(&self, spec: &str) -> anyhow::Result<String> {
        if self.device.is_none() && self.dtype.is_none() {
            return Ok(spec.to_string());
        }
        match spec.parse::<PolicySpec>()? {
            PolicySpec::Engine { dir, placement } => {
                let device = self.device.unwrap_or(placement.device);
                let placement = crate::engine::Placement::new(device, self.dtype.or(placement.dtype))
                    .map_err(|e| anyhow::anyhow!("--device/--dtype: {e}"))?;
                Ok(format!("engine:{}@{placement}", dir.display()))
            }
            _ => bail!("--device/--dtype place an engine:MODEL_DIR policy; {spec:?} is not one"),
        }
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum SandboxArg {
    Local,
    Docker,
}

impl From<SandboxArg> for SandboxKind {
    fn from(a: SandboxArg) -> Self {
        match a {
            SandboxArg::Local => SandboxKind::Local,
            SandboxArg::Docker => SandboxKind::Docker,
        }
    }
}

#[derive(Args, Debug)]
pub struct GenTestArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    /// scripted:FILE | http:URL | engine:MODEL_DIR[@DEVICE[:DTYPE]]
    #[arg(long)]
    pub policy: String,
    #[command(flatten)]
    pub policy_device: PolicyDeviceArgs,
    #[arg(long)]
    pub out: PathBuf,
    /// Model turns of the Test agent.
    #[arg(long, default_value_t = 60)]
    pub max_turns: usize,
    /// Wall-clock limit of the episode, seconds.
    #[arg(long, default_value_t = 900)]
    pub wall_secs: u64,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

#[derive(Args, Debug)]
pub struct RepairArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    #[arg(long)]
    pub policy: String,
    #[command(flatten)]
    pub policy_device: PolicyDeviceArgs,
    /// A Test bundle directory (test.patch, test_command, test_contract.json); it is qualified on
    /// Base first. Without one (or if it does not qualify) p0 is forwarded.
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    /// Run official grading of the terminal patch.
    #[arg(long)]
    pub grade: bool,
    #[arg(long)]
    pub out: PathBuf,
    /// Provided-patch mode: use this file as the Round-0 patch instead of running Round 0.
    #[arg(long)]
    pub patch: Option<PathBuf>,
    /// Seed the retained conversation from a Round-0 trajectory (JSONL).
    #[arg(long)]
    pub seed_trajectory: Option<PathBuf>,
    #[arg(long, default_value_t = 200)]
    pub round0_turns: usize,
    #[arg(long, default_value_t = 5)]
    pub revision_rounds: usize,
    #[arg(long, default_value_t = 40)]
    pub revision_turns: usize,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The task's language: `python` (the bundled suite's tablefmt__tablefmt-1, pytest) or
    /// `rust` (the crates suite's rapidfuzz__strsim-rs-201, `cargo test` under the native guard;
    /// needs `scripts/fetch-crates-suite.sh` and a local sandbox as root) or `go` (the golang
    /// suite's dustin__go-humanize-201, `go test` under the native guard; needs
    /// `scripts/fetch-golang-suite.sh`, a Go toolchain and a local sandbox as root).
    #[arg(long, value_enum, default_value_t = DemoLanguage::Python)]
    pub language: DemoLanguage,
    /// `demo train`: teacher trajectories → SFT → GRPO on a small model.
    #[command(subcommand)]
    pub command: Option<super::demo_cmds::DemoCommand>,
}

/// The language of the demo's task.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemoLanguage {
    Python,
    Rust,
    Go,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Per-round time split into model, harness and controller overhead.
    RevisionLoop {
        #[arg(long)]
        tasks: PathBuf,
        #[arg(long)]
        policy: String,
        #[command(flatten)]
        policy_device: PolicyDeviceArgs,
        /// Only these instances (default: all in the file).
        #[arg(long)]
        instance: Vec<String>,
        /// Episodes per instance.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        #[arg(long, default_value_t = 200)]
        round0_turns: usize,
        #[arg(long, default_value_t = 5)]
        revision_rounds: usize,
        #[arg(long, default_value_t = 40)]
        revision_turns: usize,
        /// Use this bundle directory for every instance instead of the Oracle bundle.
        #[arg(long)]
        bundle: Option<PathBuf>,
        /// Write the per-round measurements as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn load_task(tasks: &Path, id: &str) -> anyhow::Result<TaskInstance> {
    let all =
        load_tasks(tasks).with_context(|| format!("loading tasks from {}", tasks.display()))?;
    Ok(find_task(&all, id)?.clone())
}

fn policy_from(spec: &str) -> anyhow::Result<Box<dyn Policy>> {
    let spec: PolicySpec = spec.parse()?;
    Ok(open_policy(&spec)?)
}

/// Write `value` as pretty JSON, atomically (write-then-rename).
fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    resume::write_atomically(path, (text + "\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Write a trajectory as JSONL, atomically (write-then-rename).
fn write_trajectory(path: &Path, t: &Trajectory) -> anyhow::Result<()> {
    let tmp = path.with_extension("jsonl.partial");
    t.write_jsonl(&tmp)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn test_config(a: &GenTestArgs) -> TestEpisodeConfig {
    let mut c = TestEpisodeConfig::default();
    c.limits.step_limit = a.max_turns;
    c.limits.wall_limit = Duration::from_secs(a.wall_secs);
    c.limits.command_timeout = Duration::from_secs(a.budget.command_timeout);
    c.sandbox = a.budget.sandbox.into();
    c.sampling.max_tokens = a.budget.max_tokens;
    if let Some(t) = a.budget.temperature {
        c.sampling.temperature = t;
    }
    c
}

/// The identity of a policy for a result key: its spec, and for a scripted policy the script's
/// bytes (an edited script is a different policy).
fn policy_identity(spec: &str) -> String {
    match spec.parse::<PolicySpec>() {
        Ok(PolicySpec::Scripted(path)) => format!(
            "{spec} sha256={}",
            std::fs::read(&path).map_or_else(|e| format!("unreadable: {e}"), |b| hex::encode(Sha256::digest(b)))
        ),
        _ => spec.to_string(),
    }
}

/// The key of a single-episode command's outputs: the task, the policy and every setting.
fn episode_key(command: &str, task: &TaskInstance, policy: &str, settings: String) -> anyhow::Result<String> {
    let task_json = serde_json::to_vec(&task.to_json()?)?;
    Ok(resume::input_key(
        command,
        &[&task_json, policy_identity(policy).as_bytes(), settings.as_bytes()],
    ))
}

/// A finished run with the same inputs in `out`: print what it printed and replay its status.
fn replay_finished(out: &Path, key: &str) -> anyhow::Result<Option<ExitCode>> {
    Ok(resume::Marker::load(out, key)?.map(|m| {
        print!("{}", m.summary);
        eprintln!(
            "note: {} already holds this run's results (same inputs); remove {} to run it again",
            out.display(),
            out.join("done.json").display()
        );
        ExitCode::from(m.exit_code)
    }))
}

/// Run one episode interruptibly; a panic of the episode is an error, not an abort.
fn run_episode<T, F: std::future::Future<Output = T>>(
    work: impl FnOnce() -> F,
) -> anyhow::Result<Result<T, Interrupted>> {
    use futures_util::FutureExt;
    match interrupt::run_interruptible(|| std::panic::AssertUnwindSafe(work()).catch_unwind())? {
        Ok(Ok(v)) => Ok(Ok(v)),
        Ok(Err(p)) => bail!("the episode panicked: {}", jobs::panic_message(p.as_ref())),
        Err(s) => Ok(Err(s)),
    }
}

pub fn gen_test(mut a: GenTestArgs) -> anyhow::Result<ExitCode> {
    a.policy = a.policy_device.apply(&a.policy)?;
    let task = load_task(&a.tasks, &a.instance)?;
    let key = episode_key(
        "gen-test",
        &task,
        &a.policy,
        format!("{:?}", (a.max_turns, a.wall_secs, &a.budget)),
    )?;
    if let Some(code) = replay_finished(&a.out, &key)? {
        return Ok(code);
    }
    let policy = policy_from(&a.policy)?;
    let config = test_config(&a);
    harness::orphans::sweep();
    let result = match run_episode(|| run_test_episode(&task, policy.as_ref(), &config))? {
        Ok(r) => r,
        Err(s) => return Ok(s.exit_code()),
    };
    std::fs::create_dir_all(&a.out)?;
    write_trajectory(&a.out.join("trajectory.jsonl"), &result.trajectory)?;
    write_json(&a.out.join("record.json"), &result.record)?;
    let bundle_dir = a.out.join("bundle");
    if bundle_dir.exists() {
        // A bundle of an earlier, unfinished or different run.
        std::fs::remove_dir_all(&bundle_dir)
            .with_context(|| format!("removing {}", bundle_dir.display()))?;
    }
    if let Some(b) = &result.bundle {
        b.store(&bundle_dir)
            .context("writing the qualified bundle")?;
    }
    let mut summary = format!("{}\n", serde_json::to_string(&result.record.outcome)?);
    for s in &result.record.submissions {
        summary += &format!(
            "  submission {} (turn {}): {}\n",
            s.attempt,
            s.turn,
            s.verdict.describe()
        );
    }
    summary += &format!("trajectory: {}\n", a.out.join("trajectory.jsonl").display());
    print!("{summary}");
    let code: u8 = match result.record.outcome {
        TestOutcome::Qualified { .. } => 0,
        // No marker: an operational failure is retried by a rerun.
        TestOutcome::InfraError { message } => bail!("infrastructure error: {message}"),
        _ => 1,
    };
    resume::Marker {
        input_key: key,
        exit_code: code,
        summary,
    }
    .store(&a.out)?;
    Ok(ExitCode::from(code))
}

/// Read a bundle directory and qualify it on Base; `None` (with a note) when it does not qualify.
async fn qualified_bundle(
    task: &TaskInstance,
    dir: &Path,
    kind: SandboxKind,
) -> anyhow::Result<Option<FrozenBundle>> {
    let bundle =
        Bundle::read_dir(dir).with_context(|| format!("reading bundle {}", dir.display()))?;
    match harness::qualify(task, &bundle, kind).await? {
        Qualification::Accepted(f) => Ok(Some(f)),
        other => {
            eprintln!(
                "note: the bundle does not qualify on Base ({other:?}); Round-0 patch is forwarded"
            );
            Ok(None)
        }
    }
}

fn repair_config(rounds: (usize, usize, usize), budget: &BudgetArgs) -> RepairConfig {
    let mut c = RepairConfig {
        round0_turns: rounds.0,
        revision_rounds: rounds.1,
        revision_turns: rounds.2,
        command_timeout: Duration::from_secs(budget.command_timeout),
        sandbox: budget.sandbox.into(),
        ..RepairConfig::default()
    };
    c.sampling.max_tokens = budget.max_tokens;
    if let Some(t) = budget.temperature {
        c.sampling.temperature = t;
    }
    c
}

pub fn repair(mut a: RepairArgs) -> anyhow::Result<ExitCode> {
    a.policy = a.policy_device.apply(&a.policy)?;
    let task = load_task(&a.tasks, &a.instance)?;
    let config = repair_config(
        (a.round0_turns, a.revision_rounds, a.revision_turns),
        &a.budget,
    );
    let digest = |p: &Option<PathBuf>| {
        p.as_ref().map(|p| {
            let files: Vec<PathBuf> = if p.is_dir() {
                ["test.patch", "test_command", "test_contract.json"].iter().map(|f| p.join(f)).collect()
            } else {
                vec![p.clone()]
            };
            files
                .iter()
                .map(|f| std::fs::read(f).map_or_else(|_| "absent".into(), |b| hex::encode(Sha256::digest(b))))
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let key = episode_key(
        "repair",
        &task,
        &a.policy,
        format!(
            "{:?}",
            (
                digest(&a.bundle),
                digest(&a.patch),
                digest(&a.seed_trajectory),
                (a.round0_turns, a.revision_rounds, a.revision_turns),
                &a.budget,
            )
        ),
    )?;
    // The episode's key leaves out `--grade`: a rerun that adds it only grades.
    let done_key = resume::input_key("repair-done", &[key.as_bytes(), &[a.grade as u8]]);
    if let Some(code) = replay_finished(&a.out, &done_key)? {
        return Ok(code);
    }
    let policy = policy_from(&a.policy)?;
    let mut inputs = RepairInputs::default();
    if let Some(p) = &a.patch {
        inputs.provided_patch =
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?);
    }
    if let Some(t) = &a.seed_trajectory {
        let traj = Trajectory::read_jsonl(t)?;
        inputs.seed_messages = Some(crate::agent::trajectory::seed_messages(&traj.messages()));
    }
    harness::orphans::sweep();
    let kind = config.sandbox;
    std::fs::create_dir_all(&a.out)?;
    // The episode, unless an interrupted run with the same inputs finished it (then only the
    // grading is left).
    const EPISODE_MARKER: &str = "episode.done.json";
    let record: RepairRecord = match resume::Marker::load_named(&a.out, EPISODE_MARKER, &key)? {
        Some(_) => {
            let text = std::fs::read_to_string(a.out.join("record.json"))?;
            eprintln!("note: the repair episode of these inputs is already in {}", a.out.display());
            serde_json::from_str(&text).context("reading the finished episode's record.json")?
        }
        None => {
            let episode = run_episode(|| async {
                let bundle = match &a.bundle {
                    Some(dir) => qualified_bundle(&task, dir, kind).await?,
                    None => None,
                };
                anyhow::Ok(run_repair(&task, bundle.as_ref(), policy.as_ref(), &config, inputs).await)
            })?;
            let result = match episode {
                Ok(r) => r?,
                Err(s) => return Ok(s.exit_code()),
            };
            write_trajectory(&a.out.join("trajectory.jsonl"), &result.trajectory)?;
            write_json(&a.out.join("record.json"), &result.record)?;
            resume::write_atomically(&a.out.join("final.patch"), result.record.terminal_patch.as_bytes())?;
            if !matches!(result.record.terminal, crate::episode::repair::TerminalReason::InfraError { .. }) {
                resume::Marker { input_key: key.clone(), exit_code: 0, summary: String::new() }
                    .store_named(&a.out, EPISODE_MARKER)?;
            }
            result.record
        }
    };
    let mut summary = render_repair(&record);
    if a.grade {
        let g = match run_episode(|| harness::grade(&task, &record.terminal_patch, kind))? {
            Ok(g) => g?,
            Err(s) => return Ok(s.exit_code()),
        };
        write_json(&a.out.join("grade.json"), &g)?;
        summary += &format!(
            "official grading: {}\n",
            if g.resolved { "RESOLVED" } else { "not resolved" }
        );
    }
    print!("{summary}");
    // No marker: an operational failure is retried by a rerun.
    if let crate::episode::repair::TerminalReason::InfraError { message } = &record.terminal {
        bail!("infrastructure error: {message}");
    }
    resume::Marker {
        input_key: done_key,
        exit_code: 0,
        summary,
    }
    .store(&a.out)?;
    Ok(ExitCode::SUCCESS)
}

/// The per-round summary of a repair episode, as printed.
fn render_repair(r: &RepairRecord) -> String {
    let mut out = String::new();
    for round in &r.rounds {
        out += &format!(
            "  round {} ({:?}): {} turns, ended by {:?}, candidate {} lines\n",
            round.index,
            round.kind,
            round.turns,
            round.end,
            round.patch.lines().count()
        );
        for c in &round.checks {
            match (&c.verdict, c.unchanged) {
                (_, true) => {
                    out += &format!(
                        "    check at turn {}: unchanged candidate, gate not rerun\n",
                        c.turn
                    )
                }
                (Some(v), _) => {
                    out += &format!(
                        "    {}check at turn {}: {} ({}), gate {} ms, test {} ms\n",
                        if c.forced { "forced " } else { "" },
                        c.turn,
                        v.status,
                        v.failure_kind,
                        c.gate_ms,
                        v.test_ms
                    )
                }
                (None, _) => {}
            }
        }
    }
    out += &format!(
        "  terminal: {:?} (candidate of round {})\n",
        r.terminal, r.terminal_round
    );
    out
}

/// Scripted policies of the demo, embedded so `execcritic demo` needs no files.
const DEMO_TEST_SCRIPT: &str = include_str!("../../tests/fixtures/scripted/demo_test.jsonl");
const DEMO_REPAIR_SCRIPT: &str = include_str!("../../tests/fixtures/scripted/demo_repair.jsonl");
/// The bundled task the demo scripts were written for.
pub const DEMO_INSTANCE: &str = "tablefmt__tablefmt-1";
const DEMO_TEST_SCRIPT_RUST: &str = include_str!("../../tests/fixtures/scripted/demo_test_rust.jsonl");
const DEMO_REPAIR_SCRIPT_RUST: &str = include_str!("../../tests/fixtures/scripted/demo_repair_rust.jsonl");
/// The crates-suite task the Rust demo scripts were written for.
pub const DEMO_INSTANCE_RUST: &str = "rapidfuzz__strsim-rs-201";
const DEMO_TEST_SCRIPT_GO: &str = include_str!("../../tests/fixtures/scripted/demo_test_go.jsonl");
const DEMO_REPAIR_SCRIPT_GO: &str = include_str!("../../tests/fixtures/scripted/demo_repair_go.jsonl");
/// The golang-suite task the Go demo scripts were written for.
pub const DEMO_INSTANCE_GO: &str = "dustin__go-humanize-201";

/// The demo of a language: suite, instance, the scripts' names and texts.
struct DemoCase {
    suite: &'static str,
    instance: &'static str,
    runner: &'static str,
    test: (&'static str, &'static str),
    repair: (&'static str, &'static str),
}

fn demo_case(language: DemoLanguage) -> DemoCase {
    match language {
        DemoLanguage::Python => DemoCase {
            suite: "bundled",
            instance: DEMO_INSTANCE,
            runner: "pytest",
            test: ("demo_test.jsonl", DEMO_TEST_SCRIPT),
            repair: ("demo_repair.jsonl", DEMO_REPAIR_SCRIPT),
        },
        DemoLanguage::Rust => DemoCase {
            suite: "crates",
            instance: DEMO_INSTANCE_RUST,
            runner: "cargo test",
            test: ("demo_test_rust.jsonl", DEMO_TEST_SCRIPT_RUST),
            repair: ("demo_repair_rust.jsonl", DEMO_REPAIR_SCRIPT_RUST),
        },
        DemoLanguage::Go => DemoCase {
            suite: "golang",
            instance: DEMO_INSTANCE_GO,
            runner: "go test",
            test: ("demo_test_go.jsonl", DEMO_TEST_SCRIPT_GO),
            repair: ("demo_repair_go.jsonl", DEMO_REPAIR_SCRIPT_GO),
        },
    }
}

pub fn demo(a: DemoArgs) -> anyhow::Result<ExitCode> {
    if let Some(c) = a.command {
        return super::demo_cmds::run(c);
    }
    let out = match &a.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("execcritic-demo-{}", std::process::id())),
    };
    let case = demo_case(a.language);
    println!("ExecCritic demo — Test agent and Repair controller on the {} task suite.", case.suite);
    println!("NOTE: both agents are SCRIPTED policies replaying fixed responses (no model runs);");
    println!("      everything else is real: sandboxes, git, {}, the harness and its gates.\n", case.runner);
    let tasks = match a.language {
        DemoLanguage::Python => crate::task::bundled_suite().context("building the bundled task suite")?,
        DemoLanguage::Rust => crate::task::crates_suite().context("building the crates task suite")?,
        DemoLanguage::Go => crate::task::suite::golang_suite().context("building the golang task suite")?,
    };
    let task = load_task(&tasks, case.instance)?;
    println!("Task {} ({}):", task.instance_id, task.repo);
    for line in task.problem_statement.lines().take(3) {
        println!("  | {line}");
    }
    let rt = runtime()?;

    println!("\n[1] Test episode (scripted policy: {})", case.test.0);
    let test_policy = ScriptedPolicy::from_jsonl(&format!("{} (embedded)", case.test.0), case.test.1)?;
    let test = rt.block_on(run_test_episode(
        &task,
        &test_policy,
        &TestEpisodeConfig::default(),
    ));
    test.trajectory
        .write_jsonl(&out.join("test/trajectory.jsonl"))?;
    write_json(&out.join("test/record.json"), &test.record)?;
    for s in &test.record.submissions {
        println!(
            "  submission {} at turn {}: {}",
            s.attempt,
            s.turn,
            s.verdict.describe()
        );
    }
    println!(
        "  outcome: {}",
        serde_json::to_string(&test.record.outcome)?
    );
    if let Some(b) = &test.bundle {
        b.store(&out.join("test/bundle"))?;
        println!(
            "  bundle: {}  (command: {})",
            out.join("test/bundle").display(),
            b.bundle.test_command
        );
    }

    println!("\n[2] Repair: Round 0, gate, revision rounds (scripted policy: {})", case.repair.0);
    let repair_policy =
        ScriptedPolicy::from_jsonl(&format!("{} (embedded)", case.repair.0), case.repair.1)?;
    let result = rt.block_on(run_repair(
        &task,
        test.bundle.as_ref(),
        &repair_policy,
        &RepairConfig::default(),
        RepairInputs::default(),
    ));
    result
        .trajectory
        .write_jsonl(&out.join("repair/trajectory.jsonl"))?;
    write_json(&out.join("repair/record.json"), &result.record)?;
    print!("{}", render_repair(&result.record));
    println!("  terminal patch:");
    for line in result.record.terminal_patch.lines() {
        println!("    {line}");
    }

    println!("\n[3] Official grading (FAIL_TO_PASS + PASS_TO_PASS of the hidden official tests)");
    let g = rt.block_on(harness::grade(
        &task,
        &result.record.terminal_patch,
        SandboxKind::Local,
    ))?;
    write_json(&out.join("grade.json"), &g)?;
    println!(
        "  official result: {}",
        if g.resolved {
            "RESOLVED"
        } else {
            "NOT RESOLVED"
        }
    );
    println!("\nRecords and trajectories: {}", out.display());
    Ok(if g.resolved {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn bench(c: BenchCommand) -> anyhow::Result<ExitCode> {
    match c {
        BenchCommand::RevisionLoop {
            tasks,
            policy,
            policy_device,
            instance,
            repeat,
            round0_turns,
            revision_rounds,
            revision_turns,
            bundle,
            out,
        } => {
            let policy = policy_device.apply(&policy)?;
            let all = load_tasks(&tasks)?;
            let selected: Vec<TaskInstance> = if instance.is_empty() {
                all
            } else {
                instance
                    .iter()
                    .map(|id| find_task(&all, id).cloned())
                    .collect::<Result<_, _>>()?
            };
            let policy = policy_from(&policy)?;
            let config = BenchConfig {
                repair: RepairConfig {
                    round0_turns,
                    revision_rounds,
                    revision_turns,
                    ..RepairConfig::default()
                },
                repeat,
                bundle: match &bundle {
                    Some(dir) => Some(
                        Bundle::read_dir(dir)
                            .with_context(|| format!("reading bundle {}", dir.display()))?,
                    ),
                    None => None,
                },
            };
            let report =
                runtime()?.block_on(bench_revision_loop(&selected, policy.as_ref(), &config))?;
            println!("{}", report.render());
            if let Some(p) = out {
                write_json(&p, &report)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PolicyDeviceArgs;

    #[test]
    fn device_options_place_an_engine_policy() {
        let args = |device: Option<&str>, dtype: Option<&str>| PolicyDeviceArgs {
            device: device.map(|d| d.parse().unwrap()),
            dtype: dtype.map(|d| d.parse().unwrap()),
        };
        let none = args(None, None);
        assert_eq!(none.apply("scripted:a.jsonl").unwrap(), "scripted:a.jsonl");
        assert_eq!(none.apply("engine:/m@cuda:1").unwrap(), "engine:/m@cuda:1");
        let emu = args(Some("emulator"), Some("f32"));
        assert_eq!(emu.apply("engine:/m").unwrap(), "engine:/m@emulator:f32");
        assert_eq!(emu.apply("engine:/m@cuda:1:bf16").unwrap(), "engine:/m@emulator:f32");
        // --dtype alone keeps the spec's device
        let f32 = args(None, Some("f32"));
        assert_eq!(f32.apply("engine:/m@cuda:2").unwrap(), "engine:/m@cuda:2:f32");
        assert!(args(None, Some("bf16")).apply("engine:/m").is_err());
        assert!(emu.apply("scripted:a.jsonl").is_err());
        assert!(emu.apply("http:http://h:1").is_err());
    }
}
