//! Shared helpers of the SFT tests: a model folder with the tiny fixture's weights and the real
//! tokenizer + chat template, and scripted agent trajectories produced by the real agent loop in a
//! bubblewrap sandbox over `tests/fixtures/sft/repo`.
#![allow(dead_code)]

#[path = "../harness_support/mod.rs"]
mod harness_support;

use harness_support::git;
use execcritic::agent::{Agent, AgentLimits, Marker, Trajectory, TurnOutcome};
use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::harness::sandbox::local::LocalSandbox;
use execcritic::harness::SandboxConfig;
use execcritic::policy::{ChatMessage, SamplingParams, ScriptedPolicy};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SYSTEM: &str = "You are a software engineer working in the repository at /testbed. \
Use the bash tool, one command per response. When the task is done, run \
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.";
pub const SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// A model folder: `models/<weights>` config + weights, `models/tokenizer` files.
pub fn model_dir(weights: &str) -> tempfile::TempDir {
    let models = root().join("models");
    let dir = tempfile::tempdir().unwrap();
    for (sub, f) in [
        (weights, "config.json"),
        (weights, "model.safetensors"),
        (weights, "generation_config.json"),
        ("tokenizer", "tokenizer.json"),
        ("tokenizer", "tokenizer_config.json"),
        ("tokenizer", "chat_template.jinja"),
    ] {
        std::os::unix::fs::symlink(models.join(sub).join(f), dir.path().join(f)).unwrap();
    }
    dir
}

/// One scripted task: the user message and the commands run for it.
#[derive(serde::Deserialize)]
pub struct Task {
    pub task: String,
    pub commands: Vec<String>,
}

pub fn tasks() -> Vec<Task> {
    let text = std::fs::read_to_string(root().join("tests/fixtures/sft/tasks.jsonl")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One assistant turn calling bash with `cmd` (Qwen3.5 XML), as a scripted-policy JSONL line.
pub fn call(cmd: &str) -> String {
    let content =
        format!("<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call>");
    serde_json::json!({ "content": content }).to_string()
}

fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A sandbox holding the fixture repository as a git checkout.
pub fn sandbox() -> LocalSandbox {
    let populate = Box::new(|dir: &Path| {
        copy_tree(&root().join("tests/fixtures/sft/repo"), dir);
        git(dir, &["init", "-q"]);
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        Ok(git(dir, &["rev-parse", "HEAD"]))
    });
    LocalSandbox::open(populate, &SandboxConfig::default()).expect("bubblewrap sandbox")
}

/// Run every scripted task through the agent loop (real commands, real observations) and return
/// the trajectories; each ends with the submission turn.
pub async fn scripted_trajectories() -> Vec<Trajectory> {
    let mut out = Vec::new();
    for (i, t) in tasks().iter().enumerate() {
        let sb = sandbox();
        let shell = SandboxShell(&sb);
        let mut turns: Vec<String> = t.commands.iter().map(|c| call(c)).collect();
        turns.push(call(SUBMIT));
        let policy = ScriptedPolicy::from_jsonl("sft-script", &turns.join("\n")).unwrap();
        let limits = AgentLimits {
            step_limit: turns.len(),
            wall_limit: Duration::from_secs(120),
            command_timeout: Duration::from_secs(30),
        };
        let id = format!("sft-{i}");
        let mut agent = Agent::new(
            &policy,
            &shell,
            "sft",
            &id,
            limits,
            SamplingParams::default(),
        )
        .with_markers(&[Marker::Submit]);
        agent.push(ChatMessage::system(SYSTEM));
        agent.push(ChatMessage::user(t.task.clone()));
        loop {
            match agent.step().await.unwrap() {
                TurnOutcome::Observed => continue,
                TurnOutcome::Marker { .. } => break,
                other => panic!("task {i}: unexpected turn outcome {other:?}"),
            }
        }
        out.push(agent.finish(serde_json::json!({"submitted": true})).1);
    }
    out
}

/// Write trajectories one after another into one JSONL file.
pub fn write_all(trajectories: &[Trajectory], path: &Path) {
    let all = Trajectory {
        entries: trajectories
            .iter()
            .flat_map(|t| t.entries.clone())
            .collect(),
    };
    all.write_jsonl(path).unwrap();
}
