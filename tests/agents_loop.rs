//! The agent turn loop on a real bubblewrap sandbox with scripted policies: observations,
//! head+tail truncation, per-command timeouts as observations, the gold-free guard, markers,
//! format errors (three in a row end the run), turn limits, and the trajectory (thinking kept,
//! every command recorded, JSONL round trip).

mod harness_support;

use execcritic::agent::*;
use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::harness::sandbox::local::LocalSandbox;
use execcritic::harness::{Sandbox, SandboxConfig};
use execcritic::policy::{ChatMessage, Role, SamplingParams, ScriptedPolicy};
use harness_support::git;
use std::path::Path;
use std::time::Duration;

fn sandbox() -> LocalSandbox {
    let populate = Box::new(|dir: &Path| {
        git(dir, &["init", "-q"]);
        std::fs::write(dir.join("a.py"), "x = 1\n").unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        Ok(git(dir, &["rev-parse", "HEAD"]))
    });
    LocalSandbox::open(populate, &SandboxConfig::default()).expect("bubblewrap sandbox")
}

fn call(cmd: &str) -> String {
    let inner = format!("<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call>");
    serde_json::json!({ "content": inner }).to_string()
}

fn script(lines: &[String]) -> ScriptedPolicy {
    ScriptedPolicy::from_jsonl("inline", &lines.join("\n")).unwrap()
}

fn limits(steps: usize) -> AgentLimits {
    AgentLimits {
        step_limit: steps,
        wall_limit: Duration::from_secs(120),
        command_timeout: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn observations_timeouts_guard_and_markers() {
    let sb = sandbox();
    let shell = SandboxShell(&sb);
    let policy = script(&[
        serde_json::json!({"content": "<think>plan: look around</think>\n<tool_call>\n<function=bash>\n<parameter=command>\ncat a.py\n</parameter>\n</function>\n</tool_call>"}).to_string(),
        call("python3 -c \"print('A'*6000 + 'B'*3000 + 'C'*6000)\""),
        call("sleep 30; echo never"),
        call("git log --all --oneline"),
        serde_json::json!({"content": "Running it:\n```bash\necho hi > /tmp/x && cat /tmp/x\n```"}).to_string(),
        call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat a.py"),
    ]);
    let mut agent = Agent::new(
        &policy,
        &shell,
        "test",
        "inst-1",
        limits(10),
        SamplingParams::default(),
    )
    .with_history_guard();
    agent.push(ChatMessage::system("sys"));
    agent.push(ChatMessage::user("task"));

    assert!(matches!(agent.step().await.unwrap(), TurnOutcome::Observed));
    let obs = &agent.messages().last().unwrap();
    assert_eq!(obs.role, Role::Tool);
    assert!(
        obs.content.contains("<returncode>0</returncode>") && obs.content.contains("x = 1"),
        "{}",
        obs.content
    );

    assert!(matches!(agent.step().await.unwrap(), TurnOutcome::Observed));
    let long = &agent.messages().last().unwrap().content;
    assert!(long.contains("5001 characters elided"), "{long:.300}"); // 15,000 chars + newline
    assert!(!long.contains('B'), "the middle is elided");

    assert!(matches!(agent.step().await.unwrap(), TurnOutcome::Observed));
    let timed = &agent.messages().last().unwrap().content;
    assert!(
        timed.contains("<returncode>timeout</returncode>") && !timed.contains("never"),
        "{timed}"
    );

    assert!(matches!(agent.step().await.unwrap(), TurnOutcome::Refused));
    assert!(agent
        .messages()
        .last()
        .unwrap()
        .content
        .contains("gold-free boundary"));

    assert!(matches!(agent.step().await.unwrap(), TurnOutcome::Observed));
    let fenced = agent.messages().last().unwrap();
    assert_eq!(
        fenced.role,
        Role::User,
        "fenced-block observations are user messages"
    );
    assert!(fenced.content.contains("hi"));

    match agent.step().await.unwrap() {
        TurnOutcome::Marker { hit, .. } => {
            assert_eq!(hit.marker, Marker::Submit);
            assert_eq!(hit.payload, "x = 1\n");
        }
        other => panic!("expected a marker, got {other:?}"),
    }

    let (_, traj, stats) = agent.finish(serde_json::json!({"done": true}));
    assert_eq!(stats.turns, 6);
    // Thinking is kept in the trajectory, separate from the content.
    let first = traj
        .messages()
        .into_iter()
        .find(|m| m.role == Role::Assistant)
        .unwrap();
    assert_eq!(
        first.reasoning_content.as_deref(),
        Some("plan: look around")
    );
    let commands: Vec<_> = traj
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Command {
                command,
                timed_out,
                refused,
                ..
            } => Some((command.clone(), *timed_out, refused.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(commands.len(), 6);
    assert!(commands[2].1, "timeout recorded");
    assert!(commands[3].2, "refusal recorded");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.jsonl");
    traj.write_jsonl(&p).unwrap();
    assert_eq!(Trajectory::read_jsonl(&p).unwrap(), traj);
}

#[tokio::test]
async fn format_errors_in_a_row_never_end_the_run() {
    let sb = sandbox();
    let shell = SandboxShell(&sb);
    let policy = script(&[
        r#"{"content": "I think the bug is in a.py."}"#.to_string(),
        call("true"),
        r#"{"content": "prose again"}"#.to_string(),
        r#"{"content": "<tool_call>\n<function=python>\n<parameter=code>\n1\n</parameter>\n</function>\n</tool_call>"}"#.to_string(),
        r#"{"content": "```bash\nls\n```\n```bash\npwd\n```"}"#.to_string(),
        r#"{"content": "and prose once more"}"#.to_string(),
        call("echo still answering"),
    ]);
    let mut agent = Agent::new(
        &policy,
        &shell,
        "test",
        "inst-2",
        limits(7),
        SamplingParams::default(),
    );
    agent.push(ChatMessage::user("task"));
    let mut outcomes = Vec::new();
    loop {
        match agent.step().await.unwrap() {
            TurnOutcome::Stopped(s) => {
                outcomes.push(format!("stop:{s:?}"));
                break;
            }
            o => outcomes.push(
                format!("{o:?}")
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .to_string(),
            ),
        }
    }
    assert_eq!(
        outcomes,
        [
            "FormatError",
            "Observed",
            "FormatError",
            "FormatError",
            "FormatError",
            "FormatError",
            "Observed",
            "stop:StepLimit"
        ]
    );
    let errors: Vec<_> = agent
        .messages()
        .iter()
        .filter(|m| m.content.starts_with("Tool call error:"))
        .collect();
    assert_eq!(errors.len(), 5, "every format error is answered with the message");
    assert!(errors[2].content.contains("Unknown tool \"python\""));
    assert_eq!(
        errors[2].role,
        Role::Tool,
        "a parsed-but-invalid call is answered as its tool response"
    );
    assert_eq!(agent.stats().format_errors, 5);
    assert!(
        agent
            .messages()
            .last()
            .is_some_and(|m| m.content.contains("still answering")),
        "the call after four format errors in a row ran"
    );
    assert_eq!(policy.served(), 7);
}

#[tokio::test]
async fn turn_limit_and_exhausted_script() {
    let sb = sandbox();
    let shell = SandboxShell(&sb);
    let policy = script(&[call("true"), call("true"), call("true")]);
    let mut agent = Agent::new(
        &policy,
        &shell,
        "test",
        "inst-3",
        limits(2),
        SamplingParams::default(),
    );
    agent.push(ChatMessage::user("task"));
    agent.step().await.unwrap();
    agent.step().await.unwrap();
    assert!(matches!(
        agent.step().await.unwrap(),
        TurnOutcome::Stopped(Stop::StepLimit)
    ));
    agent.grant_turns(5);
    agent.step().await.unwrap();
    // The script is exhausted: an infrastructure error, not a model turn.
    assert!(matches!(agent.step().await, Err(AgentError::Policy(_))));
    // The shell really is the sandbox: /tmp persists between commands, files land in /testbed.
    let out = sb
        .exec(
            "echo y > /tmp/p && cat /tmp/p && pwd",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(out.output, "y\n/testbed\n");
}
