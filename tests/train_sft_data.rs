//! SFT data and rollout token records on the real Qwen3.5-format chat template and tokenizer:
//!
//! * the assistant mask of a rendered trajectory, checked by decoding the masked and unmasked
//!   spans (assistant reasoning, content, tool-call XML and `<|im_end|>` trained; system, user,
//!   tool observations and the assistant header not);
//! * the token records of an agent run on the engine policy: per assistant turn, the prompt ids
//!   the engine read (= the chat template's rendering of the conversation before the turn), the
//!   sampled ids, their log-probabilities and the routing record; `turn_samples` rebuilds them
//!   from the JSONL file, the training forward with routing replay recomputes the rollout's
//!   log-probabilities, and a GRPO step over the samples is on-policy.

#[path = "common/sft.rs"]
mod common;

use execcritic::agent::trajectory::{sft_conversations, turn_samples, Entry};
use execcritic::agent::{Agent, AgentLimits, Stop, Trajectory, TurnOutcome};
use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::model::chat::{ChatOptions, ChatTemplate, Message};
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::toolcall::ToolCall;
use execcritic::policy::{ChatMessage, EnginePolicy, SamplingParams};
use execcritic::train::grpo::GrpoSample;
use execcritic::train::loss::log_softmax_row;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::sft_data::{conversation_examples, Conversation};
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainModel};
use std::time::Duration;

/// Decoded runs of equal mask value, in order: (trained, text).
fn runs(tok: &Tokenizer, e: &SftExample) -> Vec<(bool, String)> {
    let mut out: Vec<(bool, Vec<u32>)> = Vec::new();
    for (&id, &m) in e.ids.iter().zip(&e.mask) {
        match out.last_mut() {
            Some((mm, ids)) if *mm == m => ids.push(id),
            _ => out.push((m, vec![id])),
        }
    }
    out.into_iter()
        .map(|(m, ids)| (m, tok.decode(&ids, false).unwrap()))
        .collect()
}

fn xml(cmd: &str) -> String {
    format!(
        "<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call><|im_end|>"
    )
}

#[tokio::test]
async fn assistant_mask_of_scripted_trajectories() {
    let dir = common::model_dir("tiny-qwen35");
    let (template, tok) = (
        ChatTemplate::from_dir(dir.path()).unwrap(),
        Tokenizer::from_dir(dir.path()).unwrap(),
    );
    let trajectories = common::scripted_trajectories().await;
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("t.jsonl");
    common::write_all(&trajectories, &file);
    let convs = sft_conversations(&file).unwrap();
    assert_eq!(convs.len(), common::tasks().len());
    for (conv, task) in convs.iter().zip(common::tasks()) {
        let ex = conversation_examples(&template, &tok, conv).unwrap();
        assert_eq!(
            ex.len(),
            1,
            "one query, then tool observations: one sequence"
        );
        let e = &ex[0];
        assert!(
            e.ids.iter().all(|&t| t < 1024),
            "ids fit the tiny model's vocabulary"
        );
        let r = runs(&tok, e);
        // Trained: exactly the assistant turns (the template writes an empty think block: the model
        // continues its generation prompt `<think>\n` with `\n</think>\n\n`, then the call).
        let trained: Vec<&str> = r
            .iter()
            .filter(|(m, _)| *m)
            .map(|(_, s)| s.as_str())
            .collect();
        let mut want: Vec<String> = task
            .commands
            .iter()
            .map(|c| format!("\n</think>\n\n{}", xml(c)))
            .collect();
        want.push(format!("\n</think>\n\n{}", xml(common::SUBMIT)));
        assert_eq!(trained, want);
        // Not trained: system (with the tool declaration), user, tool observations and every
        // assistant header.
        let untrained: Vec<&str> = r
            .iter()
            .filter(|(m, _)| !*m)
            .map(|(_, s)| s.as_str())
            .collect();
        assert!(
            untrained[0].starts_with("<|im_start|>system\n# Tools")
                && untrained[0].contains(common::SYSTEM)
        );
        assert!(untrained[0].contains(&format!("<|im_start|>user\n{}<|im_end|>", task.task)));
        let n = want.len();
        assert_eq!(untrained.len(), n + 1);
        assert_eq!(
            untrained[n], "\n",
            "only the newline after the last <|im_end|> follows"
        );
        for u in &untrained[..n] {
            assert!(u.ends_with("<|im_start|>assistant\n<think>\n"), "{u:?}");
        }
        for u in &untrained[1..n] {
            assert!(
                u.starts_with("\n<|im_start|>user\n<tool_response>\n<returncode>"),
                "{u:?}"
            );
        }
        // The sequence is the template's rendering of the whole conversation.
        let full = template
            .render(&conv.messages, &conv.tools, ChatOptions::default())
            .unwrap();
        assert_eq!(tok.decode(&e.ids, false).unwrap(), full);
    }
}

#[test]
fn turns_before_a_later_user_message_train_in_their_own_sequence() {
    // A format-error message is a user turn: Qwen3.5's template then drops the reasoning of the
    // turns before it, so the first turn is trained in the sequence it was generated in.
    let dir = common::model_dir("tiny-qwen35");
    let (template, tok) = (
        ChatTemplate::from_dir(dir.path()).unwrap(),
        Tokenizer::from_dir(dir.path()).unwrap(),
    );
    let call = |c: &str| ToolCall {
        name: "bash".into(),
        arguments: serde_json::json!({ "command": c })
            .as_object()
            .unwrap()
            .clone(),
    };
    let conv = Conversation {
        messages: vec![
            Message::system("sys"),
            Message::user("List the files."),
            Message::assistant("")
                .with_reasoning("Look first.")
                .with_tool_calls(vec![call("ls")]),
            Message::tool("a.py"),
            Message::assistant("done?"),
            Message::user("Format error: no tool call."),
            Message::assistant("")
                .with_reasoning("Submit.")
                .with_tool_calls(vec![call("cat a.py")]),
        ],
        tools: execcritic::agent::tool::bash_tools(),
    };
    let ex = conversation_examples(&template, &tok, &conv).unwrap();
    assert_eq!(ex.len(), 2);
    let trained = |e: &SftExample| -> Vec<String> {
        runs(&tok, e)
            .into_iter()
            .filter(|(m, _)| *m)
            .map(|(_, s)| s)
            .collect()
    };
    assert_eq!(
        trained(&ex[0]),
        vec![
            format!("Look first.\n</think>\n\n{}", xml("ls")),
            "\n</think>\n\ndone?<|im_end|>".to_string()
        ]
    );
    assert_eq!(
        trained(&ex[1]),
        vec![format!("Submit.\n</think>\n\n{}", xml("cat a.py"))]
    );
    // In the full rendering the early turns carry no think block and are not trained.
    let text = tok.decode(&ex[1].ids, false).unwrap();
    assert!(
        text.contains("<|im_start|>assistant\n<tool_call>"),
        "{text}"
    );
}

#[tokio::test]
async fn engine_turns_carry_token_records_that_replay_exactly() {
    let dir = common::model_dir("tiny-qwen35");
    let policy = EnginePolicy::open(dir.path()).unwrap();
    let sb = common::sandbox();
    let shell = SandboxShell(&sb);
    let limits = AgentLimits {
        step_limit: 3,
        wall_limit: Duration::from_secs(300),
        command_timeout: Duration::from_secs(10),
    };
    let sampling = SamplingParams {
        max_tokens: 12,
        seed: Some(5),
        logprobs: true,
        routing: true,
        ..SamplingParams::default()
    };
    let mut agent = Agent::new(&policy, &shell, "test", "records", limits, sampling);
    agent.push(ChatMessage::system(common::SYSTEM));
    agent.push(ChatMessage::user("List the files."));
    while !matches!(agent.step().await.unwrap(), TurnOutcome::Stopped(_)) {}
    assert!(matches!(
        agent.stop_reason(),
        Some(Stop::StepLimit)
    ));
    let (messages, traj, _) = agent.finish(serde_json::json!({}));

    let samples = turn_samples(&traj).unwrap();
    assert_eq!(samples.len(), 3, "every assistant turn has a record");
    // The prompt is what the chat template renders for the conversation before the turn.
    let engine = policy.engine();
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    let assistant_at: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == execcritic::policy::Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    for (s, &i) in samples.iter().zip(&assistant_at) {
        let before: Vec<Message> = messages[..i].iter().map(ChatMessage::to_model).collect();
        let (_, ids) = engine
            .render_chat(&before, &execcritic::agent::tool::bash_tools(), opts)
            .unwrap();
        assert_eq!(s.prompt_ids, ids, "turn {}", s.turn);
        assert_eq!(s.logprobs.len(), s.completion_ids.len());
    }

    // The JSONL keeps the ids and log-probabilities (prompts relative to the previous turn), not
    // the routing; reading it back gives the same samples.
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("t.jsonl");
    traj.write_jsonl(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"prompt_shared\"") && !text.contains("routing"));
    let shared: Vec<usize> = traj
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Message {
                tokens: Some(k), ..
            } => Some(k.prompt_shared),
            _ => None,
        })
        .collect();
    assert!(
        shared[0] == 0 && shared[1..].iter().all(|&n| n > 0),
        "{shared:?}"
    );
    let back = turn_samples(&Trajectory::read_jsonl(&path).unwrap()).unwrap();
    for (a, b) in samples.iter().zip(&back) {
        assert_eq!(
            (&a.prompt_ids, &a.completion_ids, &a.logprobs),
            (&b.prompt_ids, &b.completion_ids, &b.logprobs)
        );
        assert!(b.routing.is_none());
    }

    // The training forward on each sample, replaying the rollout's routing, recomputes the
    // rollout's log-probabilities.
    let model = TrainModel::load(dir.path()).unwrap();
    let v = model.cfg.vocab_size;
    let mut worst = 0f32;
    for s in &samples {
        let ids = s.ids();
        let routing = s
            .replay_routing()
            .expect("routing recorded for the whole sequence");
        let tape = model
            .forward(&ids, Some(&routing), TapeOptions::default())
            .unwrap();
        assert_eq!(tape.experts, routing, "replayed experts");
        let p = s.prompt_ids.len();
        for (k, (&id, &old)) in s.completion_ids.iter().zip(&s.logprobs).enumerate() {
            let t = p + k;
            let lp = log_softmax_row(&tape.logits[(t - 1) * v..t * v])[id as usize];
            worst = worst.max((lp - old).abs());
        }
    }
    eprintln!("rollout vs recomputed log-probabilities: max |Δ| = {worst:.2e}");
    assert!(worst < 1e-5, "max |Δ logprob| {worst}");

    // The samples are GRPO's unit: one update over them is on-policy (every ratio is 1), so the
    // clipped objective is −Σ advantage · tokens / tokens.
    let advantages = [1.0f32, -1.0, 0.5];
    let parts: Vec<_> = samples
        .iter()
        .map(|s| {
            (
                s.ids(),
                s.train_mask(),
                s.old_logprobs(),
                s.replay_routing(),
            )
        })
        .collect();
    let batch: Vec<GrpoSample<'_>> = parts
        .iter()
        .zip(advantages)
        .map(|((ids, mask, old, routing), advantage)| GrpoSample {
            ids,
            train_mask: mask,
            old_logprobs: old,
            ref_logprobs: None,
            advantage,
            routing: routing.as_deref(),
        })
        .collect();
    let mut tr = Trainer::new(
        model,
        AdamWConfig {
            lr: 1e-3,
            ..Default::default()
        },
    );
    let report = tr.grpo_step(&batch).unwrap().expect("active samples");
    let n: Vec<f64> = samples
        .iter()
        .map(|s| s.completion_ids.len() as f64)
        .collect();
    let want = -(0..3).map(|i| advantages[i] as f64 * n[i]).sum::<f64>() / n.iter().sum::<f64>();
    assert_eq!(report.tokens, n.iter().sum::<f64>() as usize);
    assert!(
        (report.loss - want).abs() < 1e-4,
        "GRPO loss {} vs on-policy {want}",
        report.loss
    );
}

#[tokio::test]
async fn train_sft_cli_trains_on_trajectory_files() {
    let dir = common::model_dir("tiny-qwen35");
    let work = tempfile::tempdir().unwrap();
    let trajectories = common::scripted_trajectories().await;
    // Two files: a list of paths is accepted as well as one path.
    common::write_all(&trajectories[..2], &work.path().join("a.jsonl"));
    common::write_all(&trajectories[2..], &work.path().join("b.jsonl"));
    let model = format!(
        "model = {:?}\nout = \"run\"\nsteps = 2\nbatch_size = 2\n",
        dir.path().display().to_string()
    );
    let run = |name: &str, body: &str| {
        let p = work.path().join(name);
        std::fs::write(&p, format!("{model}{body}")).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
            .args(["train", "sft", "--config"])
            .arg(&p)
            .output()
            .unwrap()
    };
    let o = run(
        "ok.toml",
        "trajectories = [\"a.jsonl\", \"b.jsonl\"]\n[optimizer]\nlr = 1e-3\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 2);
    assert!(steps
        .iter()
        .all(|s| s["loss"].as_f64().unwrap() > 0.0 && s["tokens"].as_u64().unwrap() > 0));
    assert!(work.path().join("run/final/config.json").exists());

    // Both or neither source, a missing file, a file that is not a trajectory: clear errors.
    for (name, body, says) in [
        (
            "both.toml",
            "data = \"x.jsonl\"\ntrajectories = \"a.jsonl\"\n",
            "exactly one of `data`",
        ),
        ("neither.toml", "", "exactly one of `data`"),
        (
            "missing.toml",
            "trajectories = \"nope.jsonl\"\n",
            "nope.jsonl",
        ),
        ("bad.toml", "trajectories = \"ok.toml\"\n", "ok.toml"),
    ] {
        let o = run(name, body);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}
