//! The Repair controller (paper §3.2, App. B.1, B.3.2).
//!
//! Round 0: the Repair agent solves from the issue alone (200 turns) and its complete
//! Base-relative source patch p0 is exported (or p0 is provided, with an optional seed
//! conversation). Without a qualified bundle p0 is forwarded. Otherwise the gate grades p0 (fresh
//! Base + p0 + frozen bundle): a valid pass forwards p0; on FAIL up to five revision rounds of 40
//! turns follow on the *retained* conversation. In a round the agent may CHECK (the controller
//! exports the complete source diff — new files and staged edits included, test files and the
//! bundle's paths excluded — and gates it) or FINAL-SUBMIT. A CHECK of an unchanged candidate
//! neither reruns the gate nor consumes budget; a valid pass ends repair at once with the terminal
//! notice; the round's 40th turn forces a CHECK; after the fifth revision the latest candidate is
//! force-submitted. A candidate that cannot be applied gets the recovery prompt (workspace reset
//! to Base) within the same budget. Operational (inconclusive) results are no verdict and grant no
//! budget: the round is spent like any non-passing check.

use super::sandbox_shell::SandboxShell;
use crate::agent::action::CallForm;
use crate::agent::observation::{render_output, truncate_head_tail};
use crate::agent::prompts::{
    render, REPAIR_EXHAUSTED_NOTICE, REPAIR_FALLBACK_SYSTEM, REPAIR_FOLLOWUP, REPAIR_PASS_NOTICE,
    REPAIR_RECOVERY, REPAIR_REVISION, REPAIR_SYSTEM, REPAIR_UNCHANGED, ROUND0_INSTANCE,
};
use crate::agent::{Agent, AgentLimits, AgentStats, Marker, Stop, Trajectory, TurnOutcome};
use crate::harness::{
    self, FailureKind, FrozenBundle, GateStatus, GateVerdict, Purpose, Sandbox, SandboxKind,
};
use crate::policy::{ChatMessage, Policy, SamplingParams};
use crate::task::TaskInstance;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// Patch-application diagnostics shown in the recovery prompt are capped at this many characters.
pub const APPLY_DIAGNOSTICS_CAP: usize = 12_000;

/// Settings of the Repair controller (defaults: the paper's 200 / 5 × 40 turns).
#[derive(Debug, Clone)]
pub struct RepairConfig {
    pub round0_turns: usize,
    pub revision_rounds: usize,
    pub revision_turns: usize,
    pub wall_limit: Duration,
    pub command_timeout: Duration,
    pub sampling: SamplingParams,
    pub sandbox: SandboxKind,
}

impl Default for RepairConfig {
    fn default() -> Self {
        RepairConfig {
            round0_turns: 200,
            revision_rounds: 5,
            revision_turns: 40,
            wall_limit: Duration::from_secs(4 * 3600),
            command_timeout: Duration::from_secs(120),
            sampling: SamplingParams {
                temperature: 0.6,
                ..SamplingParams::default()
            },
            sandbox: SandboxKind::Local,
        }
    }
}

/// What the controller starts from.
#[derive(Debug, Clone, Default)]
pub struct RepairInputs {
    /// A provided Round-0 patch (provided-patch mode); `None` runs Round 0.
    pub provided_patch: Option<String>,
    /// The Round-0 conversation to retain (seed conversion already applied).
    pub seed_messages: Option<Vec<ChatMessage>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundKind {
    /// Round 0 solved by the agent.
    Initial,
    /// Round 0 given as a patch.
    Provided,
    /// A feedback-guided revision round.
    Revision,
    /// A revision round after an unappliable candidate (recovery prompt, clean Base).
    Recovery,
}

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundEnd {
    /// Round 0 submitted its patch.
    Submitted,
    /// Round 0 ran out of turns (p0 is the diff at that point).
    TurnLimit,
    /// Provided patch.
    Provided,
    /// The agent's CHECK was gated.
    Check,
    /// The turn limit forced a CHECK.
    ForcedCheck,
    /// The turn limit forced a CHECK of an unchanged candidate (gate not rerun).
    ForcedCheckUnchanged,
    FinalSubmit,
    WallTime,
    InfraError,
}

/// The gate's verdict as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictRecord {
    /// `pass`, `hard_fail` or `inconclusive`.
    pub status: String,
    pub failure_kind: String,
    /// The feedback envelope shown to the agent.
    pub feedback: String,
    /// Runtime of the test command itself.
    pub test_ms: u64,
}

/// One CHECK (agent, forced, or the terminal gate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub turn: usize,
    pub forced: bool,
    /// Same candidate as the previous check: gate not rerun, no budget used.
    pub unchanged: bool,
    pub candidate_sha256: String,
    pub verdict: Option<VerdictRecord>,
    /// Exporting the candidate from the agent's workspace.
    pub export_ms: u64,
    /// The whole gate call (reset, apply, test command, parse, envelope).
    pub gate_ms: u64,
    /// Everything but the test command's own runtime: export + gate − test.
    pub overhead_ms: u64,
}

/// One round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundRecord {
    pub index: usize,
    pub kind: RoundKind,
    pub turns: usize,
    pub end: RoundEnd,
    /// The candidate at the end of the round.
    pub patch: String,
    pub checks: Vec<CheckRecord>,
    pub model_ms: u64,
    pub tool_ms: u64,
    pub wall_ms: u64,
}

/// Why repair ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum TerminalReason {
    /// No qualified bundle: p0 forwarded without feedback-guided repair.
    NoQualifiedBundle,
    /// p0 passed the gate.
    PassAtRound0,
    /// A revision's CHECK passed.
    Pass,
    FinalSubmit,
    /// Fifth revision without a pass: latest candidate force-submitted.
    Exhausted,
    WallTime,
    /// Sandbox, harness or policy failure; the latest candidate is kept.
    InfraError {
        message: String,
    },
    /// The agent's source diff grew past the harness's limit
    /// (`harness::gate::MAX_SOURCE_DIFF`): the candidate's own fault, so the episode ends with
    /// no terminal patch (an invalid patch, reward 0), never an infrastructure error.
    PatchTooLarge { bytes: u64, limit: u64 },
}

/// The complete record of one repair episode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepairRecord {
    pub instance_id: String,
    pub bundle_hash: Option<String>,
    pub rounds: Vec<RoundRecord>,
    pub terminal: TerminalReason,
    /// Index of the round whose candidate is the terminal patch.
    pub terminal_round: usize,
    pub terminal_patch: String,
    /// The gate result of the terminal patch (the latest check of exactly that candidate).
    pub terminal_gate: Option<VerdictRecord>,
    pub stats: AgentStats,
    pub wall_ms: u64,
}

impl RepairRecord {
    /// Gated checks actually run (unchanged checks excluded).
    pub fn gate_runs(&self) -> usize {
        self.rounds
            .iter()
            .flat_map(|r| &r.checks)
            .filter(|c| c.verdict.is_some() && !c.unchanged)
            .count()
    }
}

/// The record, trajectory and final conversation.
pub struct RepairResult {
    pub record: RepairRecord,
    pub trajectory: Trajectory,
    pub messages: Vec<ChatMessage>,
}

fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Internal: a gated candidate.
enum GateOutcome {
    Verdict(GateVerdict, CheckRecord),
    /// The candidate could not be applied onto Base.
    Unappliable {
        diagnostics: String,
        check: CheckRecord,
    },
}

/// The gate sandbox: still opening, or ready.
enum GateSandbox {
    None,
    Opening(tokio::task::JoinHandle<Result<Box<dyn Sandbox>, harness::HarnessError>>),
    Ready(Box<dyn Sandbox>),
}

impl GateSandbox {
    /// Start opening a gate sandbox for `task` in the background.
    fn open(kind: SandboxKind, task: &TaskInstance) -> Self {
        let task = task.clone();
        GateSandbox::Opening(tokio::spawn(async move {
            harness::open_sandbox(kind, &task, Purpose::Gate).await
        }))
    }

    /// The ready sandbox, waiting for (or starting) its opening.
    async fn ready(
        &mut self,
        kind: SandboxKind,
        task: &TaskInstance,
    ) -> Result<&dyn Sandbox, harness::HarnessError> {
        if matches!(self, GateSandbox::None) {
            *self = GateSandbox::open(kind, task);
        }
        if let GateSandbox::Opening(handle) = self {
            let sb = handle.await.map_err(|e| {
                harness::HarnessError::Other(format!("opening the gate sandbox: {e}"))
            })??;
            *self = GateSandbox::Ready(sb);
        }
        match &*self {
            GateSandbox::Ready(sb) => Ok(sb.as_ref()),
            _ => Err(harness::HarnessError::Other(
                "gate sandbox unavailable".into(),
            )),
        }
    }
}

impl Drop for GateSandbox {
    fn drop(&mut self) {
        if let GateSandbox::Opening(handle) = self {
            handle.abort();
        }
    }
}

struct Controller<'a> {
    task: &'a TaskInstance,
    config: &'a RepairConfig,
    bundle: Option<&'a FrozenBundle>,
    sandbox: &'a dyn Sandbox,
    /// The gate's own sandbox, reset before and after every check. It is opened in the
    /// background while Round 0 runs, so the first check does not wait for it.
    gate_sandbox: GateSandbox,
    exclude: Vec<String>,
    rounds: Vec<RoundRecord>,
    /// Latest candidate and its sha (the last exported one).
    latest: String,
    latest_round: usize,
    /// sha of the last gated candidate and its verdict.
    last_checked: Option<(String, VerdictRecord)>,
}

impl<'a> Controller<'a> {
    async fn export(&self) -> Result<(String, Duration), harness::HarnessError> {
        let t0 = Instant::now();
        let diff = harness::export_source_diff(self.sandbox, &self.task.base_commit, &self.exclude)
            .await?;
        Ok((diff, t0.elapsed()))
    }

    /// Gate `candidate` (already exported, `export` long) in the gate sandbox.
    async fn gate(
        &mut self,
        candidate: &str,
        export: Duration,
        turn: usize,
        forced: bool,
    ) -> Result<GateOutcome, harness::HarnessError> {
        let bundle = self.bundle.ok_or_else(|| {
            harness::HarnessError::Other("the gate needs a qualified bundle".into())
        })?;
        let t0 = Instant::now();
        let sb = self
            .gate_sandbox
            .ready(self.config.sandbox, self.task)
            .await?;
        let verdict =
            harness::check_candidate_in(sb, bundle, candidate, harness::gate::TEST_TIMEOUT).await?;
        let gate = t0.elapsed();
        let test_ms = verdict.test_duration.map_or(0, ms);
        let record = VerdictRecord {
            status: verdict.status.as_str().to_string(),
            failure_kind: verdict.failure_kind.name(),
            feedback: verdict.feedback.clone(),
            test_ms,
        };
        let check = CheckRecord {
            turn,
            forced,
            unchanged: false,
            candidate_sha256: sha256(candidate),
            verdict: Some(record.clone()),
            export_ms: ms(export),
            gate_ms: ms(gate),
            overhead_ms: (ms(export) + ms(gate)).saturating_sub(test_ms),
        };
        self.last_checked = Some((sha256(candidate), record));
        if verdict.failure_kind == FailureKind::PatchApplyFailure {
            let diagnostics = verdict
                .apply_diagnostics
                .clone()
                .unwrap_or_else(|| verdict.feedback.clone());
            return Ok(GateOutcome::Unappliable { diagnostics, check });
        }
        Ok(GateOutcome::Verdict(verdict, check))
    }

    fn terminal_gate(&self) -> Option<VerdictRecord> {
        match &self.last_checked {
            Some((sha, v)) if *sha == sha256(&self.latest) => Some(v.clone()),
            _ => None,
        }
    }
}

/// Run Round 0 (or take the provided p0) and the Repair controller on `task`.
pub async fn run_repair(
    task: &TaskInstance,
    bundle: Option<&FrozenBundle>,
    policy: &dyn Policy,
    config: &RepairConfig,
    inputs: RepairInputs,
) -> RepairResult {
    let started = Instant::now();
    let sandbox = match harness::open_sandbox(config.sandbox, task, Purpose::RepairAgent).await {
        Ok(s) => s,
        Err(e) => {
            let patch = inputs.provided_patch.clone().unwrap_or_default();
            return RepairResult {
                record: RepairRecord {
                    instance_id: task.instance_id.clone(),
                    bundle_hash: bundle.map(|b| b.hash.clone()),
                    rounds: Vec::new(),
                    terminal: TerminalReason::InfraError {
                        message: format!("opening the Repair sandbox: {e}"),
                    },
                    terminal_round: 0,
                    terminal_patch: patch,
                    terminal_gate: None,
                    stats: AgentStats::default(),
                    wall_ms: ms(started.elapsed()),
                },
                trajectory: Trajectory::default(),
                messages: Vec::new(),
            };
        }
    };
    let shell = SandboxShell(sandbox.as_ref());
    let limits = AgentLimits {
        step_limit: config.round0_turns,
        wall_limit: config.wall_limit,
        command_timeout: config.command_timeout,
    };
    let mut agent = Agent::new(
        policy,
        &shell,
        "repair",
        &task.instance_id,
        limits,
        config.sampling.clone(),
    )
    .with_markers(&[Marker::Submit, Marker::Check]);
    let exclude = bundle.map(|b| b.plan.paths.clone()).unwrap_or_default();
    let mut ctl = Controller {
        task,
        config,
        bundle,
        sandbox: sandbox.as_ref(),
        gate_sandbox: match bundle {
            Some(_) => GateSandbox::open(config.sandbox, task),
            None => GateSandbox::None,
        },
        exclude,
        rounds: Vec::new(),
        latest: String::new(),
        latest_round: 0,
        last_checked: None,
    };
    let terminal = drive(&mut ctl, &mut agent, inputs).await;
    let terminal_gate = ctl.terminal_gate();
    agent.event(
        "terminal",
        serde_json::json!({ "terminal": &terminal, "round": ctl.latest_round, "patch_sha256": sha256(&ctl.latest) }),
    );
    let (messages, trajectory, stats) =
        agent.finish(serde_json::to_value(&terminal).unwrap_or_default());
    RepairResult {
        record: RepairRecord {
            instance_id: task.instance_id.clone(),
            bundle_hash: bundle.map(|b| b.hash.clone()),
            rounds: ctl.rounds,
            terminal,
            terminal_round: ctl.latest_round,
            terminal_patch: ctl.latest,
            terminal_gate,
            stats,
            wall_ms: ms(started.elapsed()),
        },
        trajectory,
        messages,
    }
}

/// Per-round bookkeeping of agent totals.
struct RoundStart {
    turns: usize,
    model: Duration,
    tool: Duration,
    at: Instant,
}

impl RoundStart {
    fn now(agent: &Agent<'_>) -> Self {
        let s = agent.stats();
        RoundStart {
            turns: s.turns,
            model: s.model_time,
            tool: s.tool_time,
            at: Instant::now(),
        }
    }

    fn close(
        self,
        agent: &Agent<'_>,
        index: usize,
        kind: RoundKind,
        end: RoundEnd,
        patch: &str,
        checks: Vec<CheckRecord>,
    ) -> RoundRecord {
        let s = agent.stats();
        RoundRecord {
            index,
            kind,
            turns: s.turns - self.turns,
            end,
            patch: patch.to_string(),
            checks,
            model_ms: ms(s.model_time - self.model),
            tool_ms: ms(s.tool_time - self.tool),
            wall_ms: ms(self.at.elapsed()),
        }
    }
}

/// The controller's decision procedure; returns the terminal reason (terminal patch in `ctl`).
async fn drive(
    ctl: &mut Controller<'_>,
    agent: &mut Agent<'_>,
    inputs: RepairInputs,
) -> TerminalReason {
    macro_rules! infra {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => {
                    return TerminalReason::InfraError {
                        message: e.to_string(),
                    }
                }
            }
        };
    }
    // Exporting the candidate: a diff over the size limit ends the episode as an invalid patch.
    macro_rules! export {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(harness::HarnessError::DiffTooLarge { bytes, limit }) => {
                    ctl.latest.clear();
                    return TerminalReason::PatchTooLarge { bytes, limit };
                }
                Err(e) => {
                    return TerminalReason::InfraError {
                        message: e.to_string(),
                    }
                }
            }
        };
    }
    let issue = ctl.task.problem_statement.clone();
    let seeded = inputs.seed_messages.as_ref().is_some_and(|m| !m.is_empty());

    // ---- Round 0 -------------------------------------------------------------------------
    let start = RoundStart::now(agent);
    let mut recovery_diagnostics: Option<String> = None;
    if let Some(p0) = inputs.provided_patch {
        for m in inputs.seed_messages.unwrap_or_default() {
            agent.push(m);
        }
        ctl.latest = p0.clone();
        // The workspace must hold p0 ("already applied"); if it does not apply, recovery.
        match apply_in_workspace(ctl.sandbox, &p0).await {
            Ok(None) => {}
            Ok(Some(diag)) => recovery_diagnostics = Some(diag),
            Err(e) => {
                return TerminalReason::InfraError {
                    message: e.to_string(),
                }
            }
        }
        ctl.rounds.push(start.close(
            agent,
            0,
            RoundKind::Provided,
            RoundEnd::Provided,
            &p0,
            Vec::new(),
        ));
    } else {
        if seeded {
            for m in inputs.seed_messages.unwrap_or_default() {
                agent.push(m);
            }
        } else {
            agent.push(ChatMessage::system(REPAIR_SYSTEM));
            agent.push(ChatMessage::user(render(
                ROUND0_INSTANCE,
                &[
                    ("task", &issue),
                    ("step_limit", &ctl.config.round0_turns.to_string()),
                ],
            )));
        }
        agent.grant_turns(ctl.config.round0_turns);
        let end = loop {
            match infra!(agent.step().await) {
                TurnOutcome::Marker { form, output, .. } => {
                    agent.observe(
                        &form,
                        render_output(&output, ctl.config.command_timeout.as_secs()),
                    );
                    break RoundEnd::Submitted;
                }
                TurnOutcome::Stopped(Stop::StepLimit) => break RoundEnd::TurnLimit,
                TurnOutcome::Stopped(Stop::WallTime) => break RoundEnd::WallTime,
                _ => {}
            }
        };
        let (p0, _) = export!(ctl.export().await);
        ctl.latest = p0.clone();
        ctl.rounds
            .push(start.close(agent, 0, RoundKind::Initial, end, &p0, Vec::new()));
        if end == RoundEnd::WallTime {
            return TerminalReason::WallTime;
        }
    }

    if ctl.bundle.is_none() {
        return TerminalReason::NoQualifiedBundle;
    }

    // ---- Gate p0 --------------------------------------------------------------------------
    let mut feedback = String::new();
    if recovery_diagnostics.is_none() {
        let p0 = ctl.latest.clone();
        match infra!(ctl.gate(&p0, Duration::ZERO, agent.turns(), false).await) {
            GateOutcome::Verdict(v, check) => {
                agent.event("gate", serde_json::to_value(&check).unwrap_or_default());
                ctl.rounds[0].checks.push(check);
                if v.status == GateStatus::Pass {
                    return TerminalReason::PassAtRound0;
                }
                feedback = v.feedback;
            }
            GateOutcome::Unappliable { diagnostics, check } => {
                agent.event("gate", serde_json::to_value(&check).unwrap_or_default());
                ctl.rounds[0].checks.push(check);
                infra!(ctl.sandbox.reset().await);
                recovery_diagnostics = Some(diagnostics);
            }
        }
    }

    // ---- Revision rounds ------------------------------------------------------------------
    // The message that opens the next round and whether the workspace was reset for recovery.
    let mut pending_call: Option<CallForm> = None;
    for round in 1..=ctl.config.revision_rounds {
        let start = RoundStart::now(agent);
        let kind;
        // Open the round.
        let opening = if let Some(diag) = recovery_diagnostics.take() {
            kind = RoundKind::Recovery;
            let diag: String = diag.chars().take(APPLY_DIAGNOSTICS_CAP).collect();
            render(REPAIR_RECOVERY, &[("task", &issue), ("diagnostics", &diag)])
        } else if round == 1 {
            kind = RoundKind::Revision;
            render(
                REPAIR_REVISION,
                &[("task", &issue), ("feedback", &feedback)],
            )
        } else {
            kind = RoundKind::Revision;
            render(REPAIR_FOLLOWUP, &[("feedback", &feedback)])
        };
        match pending_call.take() {
            // The previous round ended on a CHECK call: answer it with the follow-up.
            Some(form) => agent.observe(&form, opening),
            None => {
                // Fallback path: no seed conversation exists (provided patch without one).
                if agent.messages().is_empty() {
                    agent.push(ChatMessage::system(REPAIR_FALLBACK_SYSTEM));
                }
                agent.push(ChatMessage::user(opening));
            }
        }
        agent.grant_turns(ctl.config.revision_turns);
        let mut checks = Vec::new();
        let last_round = round == ctl.config.revision_rounds;

        // Turns of the round until a gated check, a submission or a stop.
        let (end, verdict, form) = loop {
            let (forced, form) = match infra!(agent.step().await) {
                TurnOutcome::Marker { hit, form, .. }
                    if hit.marker == Marker::Check || kind == RoundKind::Recovery =>
                {
                    (false, Some(form))
                }
                TurnOutcome::Marker { form, .. } => {
                    // FINAL-SUBMIT.
                    let (cand, export) = export!(ctl.export().await);
                    ctl.latest = cand.clone();
                    ctl.latest_round = round;
                    if ctl.last_checked.as_ref().map(|(s, _)| s.as_str())
                        != Some(sha256(&cand).as_str())
                    {
                        // Record the gate result of the submitted patch (does not change the decision).
                        match infra!(ctl.gate(&cand, export, agent.turns(), false).await) {
                            GateOutcome::Verdict(_, c)
                            | GateOutcome::Unappliable { check: c, .. } => {
                                agent.event("gate", serde_json::to_value(&c).unwrap_or_default());
                                checks.push(c)
                            }
                        }
                    }
                    agent.observe(&form, "FINAL-SUBMIT received: the current candidate is the final source patch. Repair is complete.".to_string());
                    ctl.rounds.push(start.close(
                        agent,
                        round,
                        kind,
                        RoundEnd::FinalSubmit,
                        &cand,
                        checks,
                    ));
                    return TerminalReason::FinalSubmit;
                }
                TurnOutcome::Stopped(Stop::StepLimit) => (true, None),
                TurnOutcome::Stopped(Stop::WallTime) => {
                    let (cand, _) = export!(ctl.export().await);
                    ctl.latest = cand.clone();
                    ctl.latest_round = round;
                    ctl.rounds.push(start.close(
                        agent,
                        round,
                        kind,
                        RoundEnd::WallTime,
                        &cand,
                        checks,
                    ));
                    return TerminalReason::WallTime;
                }
                _ => continue,
            };
            // A CHECK (agent's or forced).
            let (cand, export) = export!(ctl.export().await);
            ctl.latest = cand.clone();
            ctl.latest_round = round;
            let sha = sha256(&cand);
            let unchanged = ctl.last_checked.as_ref().is_some_and(|(s, _)| *s == sha);
            if unchanged {
                let check = CheckRecord {
                    turn: agent.turns(),
                    forced,
                    unchanged: true,
                    candidate_sha256: sha,
                    verdict: None,
                    export_ms: ms(export),
                    gate_ms: 0,
                    overhead_ms: ms(export),
                };
                agent.event(
                    "unchanged_check",
                    serde_json::to_value(&check).unwrap_or_default(),
                );
                checks.push(check);
                if let Some(form) = form {
                    agent.observe(&form, REPAIR_UNCHANGED.to_string());
                    continue; // no gate run, no budget consumed
                }
                // Forced check at the turn limit with nothing new: the round is spent.
                let prev = ctl.last_checked.as_ref().map(|(_, v)| v.clone());
                break (RoundEnd::ForcedCheckUnchanged, prev, None);
            }
            match infra!(ctl.gate(&cand, export, agent.turns(), forced).await) {
                GateOutcome::Verdict(v, check) => {
                    agent.event("gate", serde_json::to_value(&check).unwrap_or_default());
                    let rec = check.verdict.clone();
                    checks.push(check);
                    if v.status == GateStatus::Pass {
                        match &form {
                            Some(f) => agent.observe(f, REPAIR_PASS_NOTICE.to_string()),
                            None => agent.push(ChatMessage::user(REPAIR_PASS_NOTICE)),
                        }
                        let end = if forced {
                            RoundEnd::ForcedCheck
                        } else {
                            RoundEnd::Check
                        };
                        ctl.rounds
                            .push(start.close(agent, round, kind, end, &cand, checks));
                        return TerminalReason::Pass;
                    }
                    let end = if forced {
                        RoundEnd::ForcedCheck
                    } else {
                        RoundEnd::Check
                    };
                    break (end, rec, form);
                }
                GateOutcome::Unappliable { diagnostics, check } => {
                    agent.event("gate", serde_json::to_value(&check).unwrap_or_default());
                    let rec = check.verdict.clone();
                    checks.push(check);
                    infra!(ctl.sandbox.reset().await);
                    recovery_diagnostics = Some(diagnostics);
                    let end = if forced {
                        RoundEnd::ForcedCheck
                    } else {
                        RoundEnd::Check
                    };
                    break (end, rec, form);
                }
            }
        };
        let cand = ctl.latest.clone();
        ctl.rounds
            .push(start.close(agent, round, kind, end, &cand, checks));
        if last_round {
            match &form {
                Some(f) => agent.observe(f, REPAIR_EXHAUSTED_NOTICE.to_string()),
                None => agent.push(ChatMessage::user(REPAIR_EXHAUSTED_NOTICE)),
            }
            return TerminalReason::Exhausted;
        }
        feedback = verdict.map(|v| v.feedback).unwrap_or_default();
        pending_call = form;
    }
    // revision_rounds == 0: p0 stands.
    TerminalReason::Exhausted
}

/// Apply a provided patch in the agent's workspace. `Ok(Some(diagnostics))` when it does not apply
/// (the workspace is then back at Base).
async fn apply_in_workspace(
    sandbox: &dyn Sandbox,
    patch: &str,
) -> Result<Option<String>, harness::HarnessError> {
    if patch.trim().is_empty() {
        return Ok(None);
    }
    sandbox
        .put_file("/tmp/execcritic_p0.patch", patch.as_bytes())
        .await?;
    let out = sandbox
        .exec(
            "git apply --whitespace=nowarn /tmp/execcritic_p0.patch 2>&1 || git apply --3way /tmp/execcritic_p0.patch 2>&1",
            Duration::from_secs(120),
        )
        .await?;
    if out.success() {
        return Ok(None);
    }
    sandbox.reset().await?;
    Ok(Some(truncate_head_tail(&out.output)))
}
