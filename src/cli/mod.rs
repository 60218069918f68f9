//! Command-line interface: the clap command tree. Each area's commands (arguments and the code
//! that runs them) live in their own file; this file only dispatches.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod harness_cmds;
pub mod interrupt;
pub mod jobs;
pub mod resume;
pub mod model_cmds;
pub mod agent_cmds;
pub mod train_cmds;
pub mod serve_cmds;
pub mod eval_cmds;
pub mod demo_cmds;
pub mod kernel_cmds;

#[derive(Parser, Debug)]
#[command(name = "execcritic", version, about = "ExecCritic: Test and Repair agents, fail-closed harness, in-process training")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a test bundle and run the Base gate on one instance.
    Qualify(harness_cmds::QualifyArgs),
    /// Audit bundles: validation, Base gate, Gold verdict, Q and balanced accuracy.
    Audit(harness_cmds::AuditArgs),
    /// Official grading of predictions (all FAIL_TO_PASS and PASS_TO_PASS tests).
    Grade(harness_cmds::GradeArgs),
    /// The static, structural tamper screen of patch files (no sandbox).
    Screen(harness_cmds::ScreenArgs),
    /// Print the model's logits for a sequence of token ids as JSON.
    Logits(model_cmds::LogitsArgs),
    /// Generate a completion for a prompt with the embedded engine.
    Generate(model_cmds::GenerateArgs),
    /// Run a Test episode (the Test agent writes a bundle).
    GenTest(agent_cmds::GenTestArgs),
    /// Run Round 0 and the Repair controller on one instance.
    Repair(agent_cmds::RepairArgs),
    /// End-to-end demo on the bundled task suite; `demo train`: a small training run that learns.
    Demo(agent_cmds::DemoArgs),
    /// Benchmarks of the system (e.g. the revision loop).
    #[command(subcommand)]
    Bench(agent_cmds::BenchCommand),
    /// The paper's evaluation protocol over a task file (Test generation, Repair runs, official
    /// grading, report).
    Eval(eval_cmds::EvalArgs),
    /// Rebuild an evaluation's report, or compare several.
    Report(eval_cmds::ReportArgs),
    /// Gradient of the mean next-token NLL of a sequence.
    Grads(train_cmds::GradsArgs),
    /// Training: SFT or GRPO.
    #[command(subcommand)]
    Train(train_cmds::TrainCommand),
    /// OpenAI-compatible HTTP server on the embedded engine.
    Serve(serve_cmds::ServeArgs),
    /// CUDA kernels without a GPU: prebuild CUBINs, verify a prebuilt directory, resource audit.
    #[command(subcommand)]
    Kernels(kernel_cmds::KernelsCommand),
}

/// Parse arguments, run the command, map errors to a message and exit code 2.
pub fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EXECCRITIC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Qualify(a) => harness_cmds::qualify(a),
        Command::Audit(a) => harness_cmds::audit(a),
        Command::Grade(a) => harness_cmds::grade(a),
        Command::Screen(a) => harness_cmds::screen(a),
        Command::Logits(a) => model_cmds::logits(a),
        Command::Generate(a) => model_cmds::generate(a),
        Command::GenTest(a) => agent_cmds::gen_test(a),
        Command::Repair(a) => agent_cmds::repair(a),
        Command::Demo(a) => agent_cmds::demo(a),
        Command::Bench(c) => agent_cmds::bench(c),
        Command::Eval(a) => eval_cmds::eval(a),
        Command::Report(a) => eval_cmds::report(a),
        Command::Grads(a) => train_cmds::grads(a),
        Command::Train(c) => train_cmds::train(c),
        Command::Serve(a) => serve_cmds::serve(a),
        Command::Kernels(c) => kernel_cmds::kernels(c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
