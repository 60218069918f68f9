//! The Test episode (paper §3.1, App. B.3.1): the Test agent explores a history-sanitised Base
//! checkout through a guarded bash tool, writes a bundle to `/tmp/{test.patch,test_command,
//! test_contract.json}` and submits with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat
//! /tmp/test.patch`. Each submission is read from the sandbox and qualified by the harness
//! (validation + Base gate); a rejection goes back to the agent, at most five submissions.
//!
//! Outcome: `qualified` (the first bundle that fails cleanly on Base, frozen), `base_gate_failure`
//! (submissions made, none qualified), `no_submission`, or `infra_error` (a sandbox, harness or
//! policy failure — never counted as a model failure).

use super::sandbox_shell::{read_sandbox_file, SandboxShell};
use crate::agent::prompts::{render, runner_note, TEST_INSTANCE, TEST_REJECTED, TEST_SYSTEM};
use crate::agent::{Agent, AgentLimits, AgentStats, Marker, Stop, Trajectory, TurnOutcome};
use crate::harness::{self, Bundle, FrozenBundle, Purpose, Qualification, SandboxKind};
use crate::policy::{ChatMessage, Policy, SamplingParams};
use crate::task::TaskInstance;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Where the Test agent writes its bundle inside the sandbox.
pub const BUNDLE_PATCH: &str = "/tmp/test.patch";
pub const BUNDLE_COMMAND: &str = "/tmp/test_command";
pub const BUNDLE_CONTRACT: &str = "/tmp/test_contract.json";

/// Settings of a Test episode (defaults: the paper's 60 turns, 900 s, 5 submissions).
#[derive(Debug, Clone)]
pub struct TestEpisodeConfig {
    pub limits: AgentLimits,
    pub max_submissions: usize,
    pub sampling: SamplingParams,
    pub sandbox: SandboxKind,
}

impl Default for TestEpisodeConfig {
    fn default() -> Self {
        TestEpisodeConfig {
            limits: AgentLimits {
                step_limit: 60,
                wall_limit: Duration::from_secs(900),
                ..AgentLimits::default()
            },
            max_submissions: 5,
            sampling: SamplingParams::default(),
            sandbox: SandboxKind::Local,
        }
    }
}

/// How one submission was judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum SubmissionVerdict {
    /// Qualified: validated and failed cleanly on Base; `hash` binds the frozen bundle.
    Accepted { hash: String },
    /// A bundle file was missing in the sandbox.
    MissingFile { path: String },
    /// Validation rejected the bundle (harness's stable kind and message).
    Rejected { kind: String, message: String },
    /// Valid, but the Base gate did not show a clean assertion failure.
    BaseGateFailed { category: String, tail: String },
}

/// One submission attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionRecord {
    pub attempt: usize,
    pub turn: usize,
    /// Shell noise preceded the marker (accepted because unambiguous).
    pub leading_noise: bool,
    pub verdict: SubmissionVerdict,
    pub qualify_ms: u64,
}

/// The episode's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TestOutcome {
    Qualified { hash: String },
    BaseGateFailure,
    NoSubmission,
    InfraError { message: String },
}

/// Everything one Test episode did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestEpisodeRecord {
    pub instance_id: String,
    pub outcome: TestOutcome,
    pub submissions: Vec<SubmissionRecord>,
    /// Why the loop ended without qualification, if it hit a limit.
    pub stop: Option<Stop>,
    pub refused_commands: usize,
    pub stats: AgentStats,
    pub wall_ms: u64,
}

/// The record, the qualified bundle (if any) and the trajectory.
pub struct TestEpisodeResult {
    pub record: TestEpisodeRecord,
    pub bundle: Option<FrozenBundle>,
    pub trajectory: Trajectory,
    pub messages: Vec<ChatMessage>,
}

/// Run one Test episode on `task`.
pub async fn run_test_episode(
    task: &TaskInstance,
    policy: &dyn Policy,
    config: &TestEpisodeConfig,
) -> TestEpisodeResult {
    let started = Instant::now();
    let sandbox = match harness::open_sandbox(config.sandbox, task, Purpose::TestAgent).await {
        Ok(s) => s,
        Err(e) => {
            let agent_shell_less = Trajectory::default();
            return TestEpisodeResult {
                record: TestEpisodeRecord {
                    instance_id: task.instance_id.clone(),
                    outcome: TestOutcome::InfraError {
                        message: format!("opening the Test sandbox: {e}"),
                    },
                    submissions: Vec::new(),
                    stop: None,
                    refused_commands: 0,
                    stats: AgentStats::default(),
                    wall_ms: started.elapsed().as_millis() as u64,
                },
                bundle: None,
                trajectory: agent_shell_less,
                messages: Vec::new(),
            };
        }
    };
    let shell = SandboxShell(sandbox.as_ref());
    let mut agent = Agent::new(
        policy,
        &shell,
        "test",
        &task.instance_id,
        config.limits.clone(),
        config.sampling.clone(),
    )
    .with_history_guard()
    .with_markers(&[Marker::Submit]);
    agent.push(ChatMessage::system(TEST_SYSTEM));
    let mut instance = render(
        TEST_INSTANCE,
        &[
            ("task", task.problem_statement.as_str()),
            ("step_limit", &config.limits.step_limit.to_string()),
        ],
    );
    if let Some(note) = runner_note(task.runner) {
        instance.push_str("\n\n");
        instance.push_str(note);
    }
    agent.push(ChatMessage::user(instance));

    let mut submissions: Vec<SubmissionRecord> = Vec::new();
    let mut refused = 0;
    let mut bundle = None;
    let mut stop = None;
    let outcome = loop {
        let turn = match agent.step().await {
            Ok(t) => t,
            Err(e) => {
                break TestOutcome::InfraError {
                    message: e.to_string(),
                }
            }
        };
        match turn {
            TurnOutcome::Observed | TurnOutcome::FormatError => {}
            TurnOutcome::Refused => refused += 1,
            TurnOutcome::Stopped(s) => {
                stop = Some(s);
                break if submissions.is_empty() {
                    TestOutcome::NoSubmission
                } else {
                    TestOutcome::BaseGateFailure
                };
            }
            TurnOutcome::Marker { hit, form, .. } => {
                let attempt = submissions.len() + 1;
                let t0 = Instant::now();
                let judged = judge_submission(task, sandbox.as_ref(), config.sandbox).await;
                let qualify_ms = t0.elapsed().as_millis() as u64;
                let (verdict, frozen) = match judged {
                    Ok(v) => v,
                    Err(e) => {
                        break TestOutcome::InfraError {
                            message: e.to_string(),
                        }
                    }
                };
                let record = SubmissionRecord {
                    attempt,
                    turn: agent.turns(),
                    leading_noise: hit.leading_noise,
                    verdict: verdict.clone(),
                    qualify_ms,
                };
                agent.event(
                    "submission",
                    serde_json::to_value(&record).unwrap_or_default(),
                );
                submissions.push(record);
                if let Some(frozen) = frozen {
                    agent.observe(
                        &form,
                        "The harness qualified this bundle: it failed cleanly on the Base checkout. \
                         The bundle is frozen; the episode is complete."
                            .to_string(),
                    );
                    let hash = frozen.hash.clone();
                    bundle = Some(frozen);
                    break TestOutcome::Qualified { hash };
                }
                let feedback = rejection_feedback(&verdict);
                agent.observe(
                    &form,
                    render(
                        TEST_REJECTED,
                        &[
                            ("attempt", &attempt.to_string()),
                            ("max_attempts", &config.max_submissions.to_string()),
                            ("feedback", &feedback),
                        ],
                    ),
                );
                if attempt >= config.max_submissions {
                    break TestOutcome::BaseGateFailure;
                }
            }
        }
    };
    let outcome_json = serde_json::to_value(&outcome).unwrap_or_default();
    let (messages, trajectory, stats) = agent.finish(outcome_json);
    TestEpisodeResult {
        record: TestEpisodeRecord {
            instance_id: task.instance_id.clone(),
            outcome,
            submissions,
            stop,
            refused_commands: refused,
            stats,
            wall_ms: started.elapsed().as_millis() as u64,
        },
        bundle,
        trajectory,
        messages,
    }
}

/// Read the three bundle files from the sandbox and qualify them.
async fn judge_submission(
    task: &TaskInstance,
    sandbox: &dyn harness::Sandbox,
    kind: SandboxKind,
) -> Result<(SubmissionVerdict, Option<FrozenBundle>), harness::HarnessError> {
    let mut files = Vec::new();
    for path in [BUNDLE_PATCH, BUNDLE_COMMAND, BUNDLE_CONTRACT] {
        match read_sandbox_file(sandbox, path).await? {
            Some(bytes) => files.push(String::from_utf8_lossy(&bytes).into_owned()),
            None => {
                return Ok((
                    SubmissionVerdict::MissingFile {
                        path: path.to_string(),
                    },
                    None,
                ));
            }
        }
    }
    let bundle = match Bundle::from_parts(&files[0], &files[1], &files[2]) {
        Ok(b) => b,
        Err(r) => {
            return Ok((
                SubmissionVerdict::Rejected {
                    kind: r.kind.code().to_string(),
                    message: r.message,
                },
                None,
            ))
        }
    };
    Ok(match harness::qualify(task, &bundle, kind).await? {
        Qualification::Accepted(frozen) => (
            SubmissionVerdict::Accepted {
                hash: frozen.hash.clone(),
            },
            Some(frozen),
        ),
        Qualification::Rejected(r) => (
            SubmissionVerdict::Rejected {
                kind: r.kind.code().to_string(),
                message: r.message,
            },
            None,
        ),
        Qualification::BaseGateFailed { category, tail } => (
            SubmissionVerdict::BaseGateFailed {
                category: category.name(),
                tail,
            },
            None,
        ),
    })
}

impl SubmissionVerdict {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            SubmissionVerdict::Accepted { hash } => {
                format!("qualified (bundle sha256 {})", &hash[..hash.len().min(12)])
            }
            SubmissionVerdict::MissingFile { path } => format!("rejected: {path} is missing"),
            SubmissionVerdict::Rejected { kind, message } => {
                format!("rejected ({kind}): {message}")
            }
            SubmissionVerdict::BaseGateFailed { category, .. } => {
                format!("Base gate failed: {category} (only a clean assertion failure qualifies)")
            }
        }
    }
}

fn rejection_feedback(v: &SubmissionVerdict) -> String {
    match v {
        SubmissionVerdict::Accepted { .. } => String::new(),
        SubmissionVerdict::MissingFile { path } => format!(
            "missing_file: {path} does not exist. Write /tmp/test.patch, /tmp/test_command and \
             /tmp/test_contract.json before submitting."
        ),
        SubmissionVerdict::Rejected { kind, message } => format!("{kind}: {message}"),
        SubmissionVerdict::BaseGateFailed { category, tail } => format!(
            "base_gate: the bundle did not fail cleanly on the Base checkout (category: {category}).\n{tail}"
        ),
    }
}
