//! CLI commands of the agents: `gen-test`, `repair`, `demo`, `bench revision-loop`.

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
    /// scripted:FILE | http:URL | engine:MODEL_DIR
    #[arg(long)]
    pub policy: String,
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
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Per-round time split into model, harness and controller overhead.
    RevisionLoop {
        #[arg(long)]
        tasks: PathBuf,
        #[arg(long)]
        policy: String,
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

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
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

pub fn gen_test(a: GenTestArgs) -> anyhow::Result<ExitCode> {
    let task = load_task(&a.tasks, &a.instance)?;
    let policy = policy_from(&a.policy)?;
    let config = test_config(&a);
    let result = runtime()?.block_on(run_test_episode(&task, policy.as_ref(), &config));
    std::fs::create_dir_all(&a.out)?;
    result
        .trajectory
        .write_jsonl(&a.out.join("trajectory.jsonl"))?;
    write_json(&a.out.join("record.json"), &result.record)?;
    if let Some(b) = &result.bundle {
        b.store(&a.out.join("bundle"))
            .context("writing the qualified bundle")?;
    }
    println!("{}", serde_json::to_string(&result.record.outcome)?);
    for s in &result.record.submissions {
        println!(
            "  submission {} (turn {}): {}",
            s.attempt,
            s.turn,
            s.verdict.describe()
        );
    }
    println!("trajectory: {}", a.out.join("trajectory.jsonl").display());
    Ok(match result.record.outcome {
        TestOutcome::Qualified { .. } => ExitCode::SUCCESS,
        TestOutcome::InfraError { message } => bail!("infrastructure error: {message}"),
        _ => ExitCode::from(1),
    })
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

pub fn repair(a: RepairArgs) -> anyhow::Result<ExitCode> {
    let task = load_task(&a.tasks, &a.instance)?;
    let policy = policy_from(&a.policy)?;
    let config = repair_config(
        (a.round0_turns, a.revision_rounds, a.revision_turns),
        &a.budget,
    );
    let mut inputs = RepairInputs::default();
    if let Some(p) = &a.patch {
        inputs.provided_patch =
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?);
    }
    if let Some(t) = &a.seed_trajectory {
        let traj = Trajectory::read_jsonl(t)?;
        inputs.seed_messages = Some(crate::agent::trajectory::seed_messages(&traj.messages()));
    }
    let rt = runtime()?;
    let bundle = match &a.bundle {
        Some(dir) => rt.block_on(qualified_bundle(&task, dir, config.sandbox))?,
        None => None,
    };
    let result = rt.block_on(run_repair(
        &task,
        bundle.as_ref(),
        policy.as_ref(),
        &config,
        inputs,
    ));
    std::fs::create_dir_all(&a.out)?;
    result
        .trajectory
        .write_jsonl(&a.out.join("trajectory.jsonl"))?;
    write_json(&a.out.join("record.json"), &result.record)?;
    std::fs::write(a.out.join("final.patch"), &result.record.terminal_patch)?;
    print_repair(&result.record);
    if a.grade {
        let g = rt.block_on(harness::grade(
            &task,
            &result.record.terminal_patch,
            config.sandbox,
        ))?;
        write_json(&a.out.join("grade.json"), &g)?;
        println!(
            "official grading: {}",
            if g.resolved {
                "RESOLVED"
            } else {
                "not resolved"
            }
        );
    }
    if let crate::episode::repair::TerminalReason::InfraError { message } = &result.record.terminal
    {
        bail!("infrastructure error: {message}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_repair(r: &RepairRecord) {
    for round in &r.rounds {
        println!(
            "  round {} ({:?}): {} turns, ended by {:?}, candidate {} lines",
            round.index,
            round.kind,
            round.turns,
            round.end,
            round.patch.lines().count()
        );
        for c in &round.checks {
            match (&c.verdict, c.unchanged) {
                (_, true) => println!(
                    "    check at turn {}: unchanged candidate, gate not rerun",
                    c.turn
                ),
                (Some(v), _) => println!(
                    "    {}check at turn {}: {} ({}), gate {} ms, test {} ms",
                    if c.forced { "forced " } else { "" },
                    c.turn,
                    v.status,
                    v.failure_kind,
                    c.gate_ms,
                    v.test_ms
                ),
                (None, _) => {}
            }
        }
    }
    println!(
        "  terminal: {:?} (candidate of round {})",
        r.terminal, r.terminal_round
    );
}

/// Scripted policies of the demo, embedded so `execcritic demo` needs no files.
const DEMO_TEST_SCRIPT: &str = include_str!("../../tests/fixtures/scripted/demo_test.jsonl");
const DEMO_REPAIR_SCRIPT: &str = include_str!("../../tests/fixtures/scripted/demo_repair.jsonl");
/// The bundled task the demo scripts were written for.
pub const DEMO_INSTANCE: &str = "tablefmt__tablefmt-1";

pub fn demo(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let out = match &a.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("execcritic-demo-{}", std::process::id())),
    };
    println!("ExecCritic demo — Test agent and Repair controller on the bundled task suite.");
    println!("NOTE: both agents are SCRIPTED policies replaying fixed responses (no model runs);");
    println!("      everything else is real: sandboxes, git, pytest, the harness and its gates.\n");
    let tasks = crate::task::bundled_suite().context("building the bundled task suite")?;
    let task = load_task(&tasks, DEMO_INSTANCE)?;
    println!("Task {} ({}):", task.instance_id, task.repo);
    for line in task.problem_statement.lines().take(3) {
        println!("  | {line}");
    }
    let rt = runtime()?;

    println!("\n[1] Test episode (scripted policy: demo_test.jsonl)");
    let test_policy = ScriptedPolicy::from_jsonl("demo_test.jsonl (embedded)", DEMO_TEST_SCRIPT)?;
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

    println!("\n[2] Repair: Round 0, gate, revision rounds (scripted policy: demo_repair.jsonl)");
    let repair_policy =
        ScriptedPolicy::from_jsonl("demo_repair.jsonl (embedded)", DEMO_REPAIR_SCRIPT)?;
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
    print_repair(&result.record);
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
            instance,
            repeat,
            round0_turns,
            revision_rounds,
            revision_turns,
            bundle,
            out,
        } => {
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
