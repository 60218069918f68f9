//! The turn loop (mini-swe-agent style): ask the policy for one response, parse its single bash
//! call, run it in the shell, append the observation. Controllers (Test episode, Repair
//! controller) drive it turn by turn with `step` and react to markers and limits. A response
//! without a valid call is answered with the paper's format-error message (App. B.3.1) and costs
//! one turn; the loop goes on until the turn or wall-clock budget ends, however many format
//! errors come in a row (the paper has no rule that ends an episode on them). Every message,
//! command and controller event goes into the trajectory as it happens.

use super::action::{parse_response, CallForm};
use super::guard::history_guard;
use super::marker::{detect, Marker, MarkerHit};
use super::observation::{render_output, render_refusal};
use super::prompts::{render, FORMAT_ERROR};
use super::shell::{Shell, ShellError, ShellOutput};
use super::tool::bash_tools;
use super::trajectory::{Entry, Trajectory, TurnTokens, TRAJECTORY_SCHEMA};
use crate::policy::{
    complete_one, ChatMessage, ChatRequest, Policy, PolicyError, Role, SamplingParams, Usage,
};
use std::time::{Duration, Instant, SystemTime};

/// Limits of one agent run.
#[derive(Debug, Clone)]
pub struct AgentLimits {
    /// Model turns allowed (the controller may move this budget per round).
    pub step_limit: usize,
    /// Wall-clock limit of the whole run.
    pub wall_limit: Duration,
    /// Timeout of one bash command (a timeout is an observation).
    pub command_timeout: Duration,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            step_limit: 60,
            wall_limit: Duration::from_secs(900),
            command_timeout: Duration::from_secs(120),
        }
    }
}

/// Why the loop cannot take another turn. Format errors are not among them: the paper has no
/// such rule, so a response without a valid call is answered with the format-error message and
/// costs one turn of the budget like any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    StepLimit,
    WallTime,
}

/// What one turn did.
#[derive(Debug, Clone)]
pub enum TurnOutcome {
    /// A command ran; its observation was appended.
    Observed,
    /// A command crossed the guard; the refusal was appended.
    Refused,
    /// The response had no valid call; the format-error message was appended.
    FormatError,
    /// A command's output carried a controller marker. No observation was appended: the
    /// controller answers with `observe` (and usually a message of its own).
    Marker {
        hit: MarkerHit,
        command: String,
        output: ShellOutput,
        form: CallForm,
    },
    /// No turn was taken.
    Stopped(Stop),
}

/// Infrastructure failures of a turn (never a model decision).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Shell(#[from] ShellError),
}

/// Totals of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AgentStats {
    pub turns: usize,
    pub format_errors: usize,
    pub usage: Usage,
    pub model_time: Duration,
    pub tool_time: Duration,
}

/// One agent conversation bound to a policy and a shell.
pub struct Agent<'a> {
    policy: &'a dyn Policy,
    shell: &'a dyn Shell,
    sampling: SamplingParams,
    limits: AgentLimits,
    guard: bool,
    markers: Vec<Marker>,
    messages: Vec<ChatMessage>,
    trajectory: Trajectory,
    stats: AgentStats,
    started: Instant,
    /// Prompt + completion of the last turn with a token record (what the next record is stored
    /// relative to).
    token_reference: Vec<u32>,
    /// This run's conversation id at the policy (unique in the process); the policy may keep
    /// state for it (the engine's cache) until the agent is dropped.
    conversation: String,
}

/// Runs started in this process (makes conversation ids unique).
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Drop for Agent<'_> {
    fn drop(&mut self) {
        self.policy.end_conversation(&self.conversation);
    }
}

impl<'a> Agent<'a> {
    pub fn new(
        policy: &'a dyn Policy,
        shell: &'a dyn Shell,
        role: &str,
        instance_id: &str,
        limits: AgentLimits,
        sampling: SamplingParams,
    ) -> Self {
        let mut trajectory = Trajectory::default();
        trajectory.push(Entry::Header {
            schema: TRAJECTORY_SCHEMA,
            role: role.to_string(),
            instance_id: instance_id.to_string(),
            policy: policy.describe(),
            started_at: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
        Agent {
            policy,
            shell,
            sampling,
            limits,
            guard: false,
            markers: vec![Marker::Submit],
            messages: Vec::new(),
            trajectory,
            stats: AgentStats::default(),
            started: Instant::now(),
            token_reference: Vec::new(),
            conversation: format!(
                "{role}/{instance_id}/{}",
                RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
        }
    }

    /// Refuse history-inspecting git commands (Test agent).
    pub fn with_history_guard(mut self) -> Self {
        self.guard = true;
        self
    }

    /// The markers this run reacts to (default: Submit).
    pub fn with_markers(mut self, markers: &[Marker]) -> Self {
        self.markers = markers.to_vec();
        self
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }
    pub fn trajectory(&self) -> &Trajectory {
        &self.trajectory
    }
    pub fn stats(&self) -> AgentStats {
        self.stats
    }
    pub fn turns(&self) -> usize {
        self.stats.turns
    }
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
    pub fn limits(&self) -> &AgentLimits {
        &self.limits
    }

    /// Allow `turns` more model turns from now (a Repair round's budget).
    pub fn grant_turns(&mut self, turns: usize) {
        self.limits.step_limit = self.stats.turns + turns;
    }

    /// Append a system or user message (also used to load a seed conversation).
    pub fn push(&mut self, message: ChatMessage) {
        self.trajectory.push(Entry::Message {
            turn: self.stats.turns,
            message: message.clone(),
            usage: None,
            model_ms: None,
            tokens: None,
        });
        self.messages.push(message);
    }

    /// Answer the call of the last turn with `text` (a tool message, or a user message for the
    /// fenced fallback).
    pub fn observe(&mut self, form: &CallForm, text: String) {
        let m = match form {
            CallForm::ToolCall { id } => ChatMessage::tool(id.clone(), text),
            CallForm::Fenced => ChatMessage::user(text),
        };
        self.push(m);
    }

    /// Record a controller event.
    pub fn event(&mut self, name: &str, data: serde_json::Value) {
        self.trajectory.push(Entry::Event {
            turn: self.stats.turns,
            name: name.to_string(),
            data,
        });
    }

    /// The limit that prevents another turn, if any.
    pub fn stop_reason(&self) -> Option<Stop> {
        if self.stats.turns >= self.limits.step_limit {
            Some(Stop::StepLimit)
        } else if self.started.elapsed() >= self.limits.wall_limit {
            Some(Stop::WallTime)
        } else {
            None
        }
    }

    /// Take one turn.
    pub async fn step(&mut self) -> Result<TurnOutcome, AgentError> {
        if let Some(stop) = self.stop_reason() {
            return Ok(TurnOutcome::Stopped(stop));
        }
        let request_tools = bash_tools();
        let request = ChatRequest {
            messages: self.messages.clone(),
            tools: request_tools.clone(),
            sampling: self.sampling.clone(),
            conversation: Some(self.conversation.clone()),
        };
        let t0 = Instant::now();
        let mut completion = complete_one(self.policy, request).await?;
        let model_time = t0.elapsed();
        self.stats.model_time += model_time;
        self.stats.turns += 1;
        self.stats.usage.prompt_tokens += completion.usage.prompt_tokens;
        self.stats.usage.completion_tokens += completion.usage.completion_tokens;

        let tokens = self.token_record(&mut completion);
        let parsed = parse_response(&completion, self.stats.turns, &request_tools);
        let assistant = ChatMessage {
            role: Role::Assistant,
            content: parsed.content,
            reasoning_content: parsed.reasoning,
            tool_calls: parsed.tool_calls,
            tool_call_id: None,
        };
        self.trajectory.push(Entry::Message {
            turn: self.stats.turns,
            message: assistant.clone(),
            usage: Some(completion.usage),
            model_ms: Some(model_time.as_millis() as u64),
            tokens,
        });
        self.messages.push(assistant);

        let action = match parsed.action {
            Ok(a) => a,
            Err(e) => {
                self.stats.format_errors += 1;
                // Calls that were parsed but unusable still need an answer to stay well-formed.
                let ids: Vec<String> = self
                    .messages
                    .last()
                    .map(|m| m.tool_calls.iter().map(|c| c.id.clone()).collect())
                    .unwrap_or_default();
                let text = render(FORMAT_ERROR, &[("error", &e.0)]);
                if ids.is_empty() {
                    self.push(ChatMessage::user(text));
                } else {
                    for id in ids {
                        self.push(ChatMessage::tool(id, text.clone()));
                    }
                }
                return Ok(TurnOutcome::FormatError);
            }
        };

        if self.guard {
            if let Some(reason) = history_guard(&action.command) {
                self.trajectory.push(Entry::Command {
                    turn: self.stats.turns,
                    command: action.command.clone(),
                    exit_code: None,
                    timed_out: false,
                    truncated: false,
                    refused: Some(reason.clone()),
                    duration_ms: 0,
                });
                self.observe(&action.form, render_refusal(&reason));
                return Ok(TurnOutcome::Refused);
            }
        }

        let remaining = self
            .limits
            .wall_limit
            .saturating_sub(self.started.elapsed());
        let timeout = self
            .limits
            .command_timeout
            .min(remaining.max(Duration::from_secs(1)));
        let output = self.shell.run(&action.command, timeout).await?;
        self.stats.tool_time += output.duration;
        self.trajectory.push(Entry::Command {
            turn: self.stats.turns,
            command: action.command.clone(),
            exit_code: output.exit_code,
            timed_out: output.timed_out,
            truncated: output.truncated,
            refused: None,
            duration_ms: output.duration.as_millis() as u64,
        });

        if !output.timed_out {
            if let Some(hit) = detect(&output.output, &self.markers) {
                return Ok(TurnOutcome::Marker {
                    hit,
                    command: action.command,
                    output,
                    form: action.form,
                });
            }
        }
        let text = render_output(&output, timeout.as_secs());
        self.observe(&action.form, text);
        Ok(TurnOutcome::Observed)
    }

    /// The token record of a completion, when the backend returned prompt ids, completion ids
    /// and log-probabilities (the engine does; scripted and HTTP policies do not). The routing
    /// record, if any, moves into it.
    fn token_record(&mut self, c: &mut crate::policy::Completion) -> Option<TurnTokens> {
        let (Some(prompt), Some(ids), Some(logprobs)) = (&c.prompt_ids, &c.token_ids, &c.logprobs)
        else {
            return None;
        };
        let record = TurnTokens::new(
            &self.token_reference,
            prompt,
            ids.clone(),
            logprobs.clone(),
            c.routing.take(),
        );
        self.token_reference = [&prompt[..], &ids[..]].concat();
        Some(record)
    }

    /// Close the trajectory with the outcome and totals and hand back messages and trajectory.
    pub fn finish(
        mut self,
        outcome: serde_json::Value,
    ) -> (Vec<ChatMessage>, Trajectory, AgentStats) {
        self.trajectory.push(Entry::Footer {
            outcome,
            turns: self.stats.turns,
            usage: self.stats.usage,
            model_ms: self.stats.model_time.as_millis() as u64,
            tool_ms: self.stats.tool_time.as_millis() as u64,
            wall_ms: self.started.elapsed().as_millis() as u64,
        });
        let messages = std::mem::take(&mut self.messages);
        let trajectory = std::mem::take(&mut self.trajectory);
        (messages, trajectory, self.stats)
    }
}
