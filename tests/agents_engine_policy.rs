//! The engine policy on the tiny random Qwen3.5-MoE fixture (weights + the real tokenizer and chat
//! template): completions carry token ids and policy log-probabilities, batches are answered in
//! order, and the agent loop runs on it (a random model's gibberish is answered with format errors
//! until three in a row end the run).

use execcritic::agent::{Agent, AgentLimits, Stop, TurnOutcome};
use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::harness::{self, Purpose, SandboxKind};
use execcritic::policy::*;
use std::path::Path;
use std::time::Duration;

fn model_dir() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let dir = tempfile::tempdir().unwrap();
    for (sub, f) in [
        ("tiny-qwen35", "config.json"),
        ("tiny-qwen35", "model.safetensors"),
        ("tiny-qwen35", "generation_config.json"),
        ("tokenizer", "tokenizer.json"),
        ("tokenizer", "tokenizer_config.json"),
        ("tokenizer", "chat_template.jinja"),
    ] {
        std::os::unix::fs::symlink(root.join(sub).join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn request(text: &str, seed: u64) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::system("sys"), ChatMessage::user(text)],
        tools: execcritic::agent::tool::bash_tools(),
        sampling: SamplingParams {
            temperature: 1.0,
            max_tokens: 12,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        conversation: None,
    }
}

#[tokio::test]
async fn engine_policy_completes_batches_with_logprobs() {
    let dir = model_dir();
    let spec: PolicySpec = format!("engine:{}", dir.path().display()).parse().unwrap();
    let policy = open_policy(&spec).expect("engine policy");
    let reqs = [
        request("list the files", 1),
        request("list the files", 1),
        request("something else", 2),
    ];
    let out = policy.complete(&reqs).await.unwrap();
    assert_eq!(out.len(), 3);
    for c in &out {
        let ids = c.token_ids.as_ref().unwrap();
        assert!(!ids.is_empty() && ids.len() <= 12);
        assert_eq!(c.logprobs.as_ref().unwrap().len(), ids.len());
        assert!(c
            .logprobs
            .as_ref()
            .unwrap()
            .iter()
            .all(|l| l.is_finite() && *l <= 0.0));
        assert_eq!(c.usage.completion_tokens as usize, ids.len());
        assert!(c.usage.prompt_tokens > 0);
    }
    // Same chat, same seed: same sample, even when batched with others.
    assert_eq!(out[0].token_ids, out[1].token_ids);
}

#[tokio::test]
async fn agent_loop_runs_on_the_engine() {
    let dir = model_dir();
    let policy = EnginePolicy::open(dir.path()).unwrap();
    let task = {
        let path = execcritic::task::bundled_suite().unwrap();
        let all = execcritic::task::load_tasks(&path).unwrap();
        execcritic::task::find_task(&all, "tablefmt__tablefmt-1")
            .unwrap()
            .clone()
    };
    let sb = harness::open_sandbox(SandboxKind::Local, &task, Purpose::TestAgent)
        .await
        .unwrap();
    let shell = SandboxShell(sb.as_ref());
    let limits = AgentLimits {
        step_limit: 3,
        wall_limit: Duration::from_secs(300),
        command_timeout: Duration::from_secs(10),
    };
    let sampling = SamplingParams {
        max_tokens: 8,
        seed: Some(7),
        ..SamplingParams::default()
    };
    let mut agent = Agent::new(&policy, &shell, "test", &task.instance_id, limits, sampling);
    agent.push(ChatMessage::system("You are a test agent."));
    agent.push(ChatMessage::user("Run ls."));
    let mut outcomes = Vec::new();
    loop {
        match agent.step().await.unwrap() {
            TurnOutcome::Stopped(s) => {
                // Format errors never end a run: the turn budget does.
                assert_eq!(s, Stop::StepLimit);
                break;
            }
            o => outcomes.push(format!("{o:?}")),
        }
    }
    assert_eq!(outcomes, ["FormatError"; 3], "{outcomes:?}");
    assert!(agent.stats().usage.completion_tokens > 0);
}
