//! GRPO on agent tasks (`train grpo` with `task = "test"` or `"repair"`): a
//! [`GroupSampler`] that runs one group of Test episodes or Repair episodes on a task through
//! the engine the trainer lent its weights to, scores every rollout with the harness
//! ([`super::score`]) and the paper's rewards (Test: eq. 5 with the length penalty inside the
//! group; Repair: eq. 6 against the task's selected Oracle F2P test), and turns each trajectory's
//! token records into training sequences.
//!
//! Operational errors (sandbox, harness, missing token records) abort the rollout: it is masked
//! (zero advantage, no tokens in the loss), never scored as a behavioural failure.

use super::score::{audit_test_rollout, score_repair_rollout};
use crate::agent::run::AgentLimits;
use crate::agent::trajectory::{turn_samples, Trajectory};
use crate::engine::Engine;
use crate::episode::oracle::selected_oracle_bundle;
use crate::episode::rewards::{apply_length_penalty, repair_reward, test_reward, Reward};
use crate::episode::{run_repair, run_test_episode, RepairConfig, RepairInputs, TestEpisodeConfig};
use crate::harness::{FrozenBundle, SandboxKind};
use crate::policy::{EnginePolicy, SamplingParams};
use crate::task::{bundled_suite, load_tasks, TaskInstance};
use crate::train::dynamic::Scored;
use crate::train::rollout::{replay_routing, GroupSampler, Rollout};
use crate::train::error::{Result, TrainError};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which agent is trained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Test,
    Repair,
}

impl Role {
    /// The role named by `train grpo`'s `task` (`None` for other tasks).
    pub fn from_task(task: &str) -> Option<Role> {
        match task {
            "test" => Some(Role::Test),
            "repair" => Some(Role::Repair),
            _ => None,
        }
    }
}

/// The `[agent]` table of a `train grpo` config. Defaults are the paper's (App. A, Tables 7–8).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentTaskConfig {
    /// SWE-bench-style task file (JSON or JSONL); default: the bundled suite.
    pub tasks: Option<PathBuf>,
    /// Train on these instance ids only (default: every task of the file).
    pub instances: Vec<String>,
    pub sandbox: SandboxKind,
    pub temperature: f32,
    pub top_p: f32,
    /// -1 disables top-k.
    pub top_k: i32,
    /// Tokens per response (Test 8,192; Repair 6,122).
    pub max_tokens: Option<u32>,
    /// Test agent: turns and wall time of one episode.
    pub test_turns: usize,
    pub test_wall_secs: u64,
    /// Repair agent: Round-0 turns, revision rounds and turns per revision round.
    pub round0_turns: usize,
    pub revision_rounds: usize,
    pub revision_turns: usize,
    pub repair_wall_secs: u64,
    pub command_timeout_secs: u64,
}

impl Default for AgentTaskConfig {
    fn default() -> Self {
        AgentTaskConfig {
            tasks: None,
            instances: Vec::new(),
            sandbox: SandboxKind::Local,
            temperature: 1.0,
            top_p: 1.0,
            top_k: -1,
            max_tokens: None,
            test_turns: 60,
            test_wall_secs: 900,
            round0_turns: 200,
            revision_rounds: 5,
            revision_turns: 40,
            repair_wall_secs: 4 * 3600,
            command_timeout_secs: 120,
        }
    }
}

impl AgentTaskConfig {
    /// Parse the pass-through `[agent]` table (absent: defaults); relative paths are relative
    /// to `base` (the config file's folder).
    pub fn from_table(table: Option<&toml::Table>, base: &Path) -> Result<Self> {
        let mut c: AgentTaskConfig = match table {
            Some(t) => t
                .clone()
                .try_into()
                .map_err(|e| TrainError::BadInput(format!("[agent]: {e}")))?,
            None => AgentTaskConfig::default(),
        };
        if let Some(p) = c.tasks.as_mut().filter(|p| p.is_relative()) {
            *p = base.join(&*p);
        }
        Ok(c)
    }

    fn sampling(&self, role: Role, seed: u64) -> SamplingParams {
        let default_max = match role {
            Role::Test => 8192,
            Role::Repair => 6122,
        };
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens: self.max_tokens.unwrap_or(default_max),
            seed: Some(seed),
            logprobs: true,
            routing: true,
        }
    }
}

/// The tasks a role trains on, each with its fixed training bundle. Repair: the selected Oracle
/// F2P test ([`selected_oracle_bundle`]); a task without one is skipped with a warning naming
/// it and the reason.
pub fn training_tasks(role: Role, tasks: Vec<TaskInstance>) -> Vec<(TaskInstance, Option<FrozenBundle>)> {
    tasks
        .into_iter()
        .filter_map(|t| match role {
            Role::Test => Some((t, None)),
            Role::Repair => match selected_oracle_bundle(&t) {
                Ok(b) => Some((t, Some(b))),
                Err(reason) => {
                    tracing::warn!("Repair training skips a task without a training test: {reason}");
                    None
                }
            },
        })
        .collect()
}

/// One scored rollout, as logged to `rollouts.jsonl`.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutLog {
    pub draw: usize,
    pub instance_id: String,
    pub role: Role,
    /// The reward before centring (`null` when masked).
    pub reward: Option<f64>,
    pub turns: usize,
    pub sampled_tokens: usize,
    /// Why the rollout was aborted, if it was.
    pub aborted: Option<String>,
    /// Wall time of the episode and its scoring, and the part spent waiting for the policy
    /// (the rest is sandbox, shell and harness time).
    pub wall_ms: u64,
    pub model_ms: u64,
}

/// Samples groups of agent rollouts through the lent engine.
pub struct AgentSampler {
    role: Role,
    cfg: AgentTaskConfig,
    /// Tasks with their fixed training bundle (Repair: the selected Oracle F2P test).
    tasks: Vec<(TaskInstance, Option<FrozenBundle>)>,
    model_dir: PathBuf,
    seed: u64,
    /// The seed the rollouts' seeds derive from: `seed`, or the iteration's
    /// (`GroupSampler::begin_iteration`).
    stream: u64,
    rollouts_drawn: u64,
    /// Groups drawn so far: the next group's task (tasks rotate across iterations).
    groups_drawn: usize,
    /// Every rollout logged since the last [`AgentSampler::take_drawn`].
    drawn: Vec<RolloutLog>,
    log: Option<std::fs::File>,
    runtime: tokio::runtime::Runtime,
}

impl AgentSampler {
    /// Load the tasks (Repair: build each task's selected Oracle bundle; a task without one is
    /// skipped with a warning, and no task left is an error). `model_dir` names the policy; `log` receives one JSON line per rollout.
    pub fn new(role: Role, cfg: AgentTaskConfig, model_dir: &Path, seed: u64, log: Option<&Path>) -> Result<Self> {
        let file = match &cfg.tasks {
            Some(f) => f.clone(),
            None => bundled_suite().map_err(|e| TrainError::BadInput(format!("bundled suite: {e}")))?,
        };
        let mut tasks = load_tasks(&file).map_err(|e| TrainError::BadInput(format!("{}: {e}", file.display())))?;
        if !cfg.instances.is_empty() {
            if let Some(missing) = cfg.instances.iter().find(|id| !tasks.iter().any(|t| &t.instance_id == *id)) {
                return Err(TrainError::BadInput(format!("[agent] instances: `{missing}` is not in {}", file.display())));
            }
            tasks.retain(|t| cfg.instances.contains(&t.instance_id));
        }
        if tasks.is_empty() {
            return Err(TrainError::BadInput(format!("{}: no tasks", file.display())));
        }
        let n = tasks.len();
        let tasks = training_tasks(role, tasks);
        if tasks.is_empty() {
            return Err(TrainError::BadInput(format!(
                "{}: none of its {n} task(s) has a one-test Oracle F2P training bundle",
                file.display()
            )));
        }
        let log = log
            .map(|p| {
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir).map_err(|source| TrainError::Io { path: dir.into(), source })?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| TrainError::Io { path: p.into(), source })
            })
            .transpose()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| TrainError::BadInput(format!("cannot start the async runtime: {e}")))?;
        Ok(AgentSampler {
            role,
            cfg,
            tasks,
            model_dir: model_dir.to_path_buf(),
            seed,
            stream: seed,
            rollouts_drawn: 0,
            groups_drawn: 0,
            drawn: Vec::new(),
            log,
            runtime,
        })
    }

    /// Number of tasks groups rotate over.
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// The rollouts logged since the previous call (rewards, turns, tokens, timings).
    pub fn take_drawn(&mut self) -> Vec<RolloutLog> {
        std::mem::take(&mut self.drawn)
    }

    /// Run one episode of the role and score it: (reward, turns, trajectory, policy time).
    async fn rollout(&self, task: &TaskInstance, bundle: Option<&FrozenBundle>, policy: &EnginePolicy, seed: u64) -> (Reward, usize, Trajectory, Duration) {
        let c = &self.cfg;
        let sampling = c.sampling(self.role, seed);
        match (self.role, bundle) {
            (Role::Test, _) => {
                let cfg = TestEpisodeConfig {
                    limits: AgentLimits {
                        step_limit: c.test_turns,
                        wall_limit: Duration::from_secs(c.test_wall_secs),
                        command_timeout: Duration::from_secs(c.command_timeout_secs),
                        ..AgentLimits::default()
                    },
                    sampling,
                    sandbox: c.sandbox,
                    ..TestEpisodeConfig::default()
                };
                let r = run_test_episode(task, policy, &cfg).await;
                let audit = audit_test_rollout(task, &r, c.sandbox).await;
                (test_reward(&audit), r.record.stats.turns, r.trajectory, r.record.stats.model_time)
            }
            (Role::Repair, Some(bundle)) => {
                let cfg = RepairConfig {
                    round0_turns: c.round0_turns,
                    revision_rounds: c.revision_rounds,
                    revision_turns: c.revision_turns,
                    wall_limit: Duration::from_secs(c.repair_wall_secs),
                    command_timeout: Duration::from_secs(c.command_timeout_secs),
                    sampling,
                    sandbox: c.sandbox,
                    ..RepairConfig::default()
                };
                let r = run_repair(task, Some(bundle), policy, &cfg, RepairInputs::default()).await;
                let terminal = score_repair_rollout(task, &r, bundle, c.sandbox).await;
                (repair_reward(&terminal), r.record.stats.turns, r.trajectory, r.record.stats.model_time)
            }
            (Role::Repair, None) => (Reward::Masked, 0, Trajectory::default(), Duration::ZERO),
        }
    }

    fn write_log(&mut self, entry: RolloutLog) {
        if let Some(f) = self.log.as_mut() {
            let line = serde_json::to_string(&entry).unwrap_or_default();
            if let Err(e) = writeln!(f, "{line}") {
                tracing::warn!("cannot write the rollout log: {e}");
            }
        }
        self.drawn.push(entry);
    }
}

/// The training sequences of an agent trajectory from its per-turn token records: consecutive
/// turns whose prompt extends the previous turn's prompt + completion share one sequence (only
/// their completions are trained); a turn whose prompt does not (the template re-rendered an
/// earlier turn) starts a new sequence. Routing replay comes from each sequence's last turn,
/// whose record covers the whole sequence.
pub fn trajectory_sequences(t: &Trajectory) -> std::result::Result<Vec<Rollout>, String> {
    let mut out: Vec<Rollout> = Vec::new();
    for ts in turn_samples(t).map_err(|e| e.to_string())? {
        let ids = ts.ids();
        let continues = out.last().is_some_and(|last: &Rollout| ids.len() > last.ids.len() && ids.starts_with(&last.ids));
        if !continues {
            out.push(Rollout { ids: Vec::new(), train_mask: Vec::new(), logprobs: Vec::new(), routing: None });
        }
        let seq = out.last_mut().expect("pushed above");
        let prompt_end = ts.prompt_ids.len();
        seq.train_mask.resize(prompt_end, false);
        seq.logprobs.resize(prompt_end, 0.0);
        seq.train_mask.extend(std::iter::repeat_n(true, ts.completion_ids.len()));
        seq.logprobs.extend_from_slice(&ts.logprobs);
        seq.routing = ts.routing.as_ref().and_then(|r| match replay_routing(r, ids.len()) {
            Ok(routing) => Some(routing),
            Err(e) => {
                tracing::debug!("routing replay unavailable for turn {}: {e}", ts.turn);
                None
            }
        });
        seq.ids = ids;
    }
    Ok(out)
}

impl GroupSampler for AgentSampler {
    fn needs_chat_template(&self) -> bool {
        true
    }

    fn begin_iteration(&mut self, iteration: u64, groups: usize) {
        self.stream = crate::train::rollout::iteration_seed(self.seed, iteration);
        self.rollouts_drawn = 0;
        self.groups_drawn = (iteration as usize).wrapping_mul(groups);
    }

    fn sample_group(&mut self, engine: &Engine, attempt: usize, size: usize) -> Result<Vec<Scored<Vec<Rollout>>>> {
        let (task, bundle) = self.tasks[self.groups_drawn % self.tasks.len()].clone();
        self.groups_drawn += 1;
        let policy = EnginePolicy::from_engine(engine.clone(), &self.model_dir)
            .map_err(|e| TrainError::BadInput(e.to_string()))?;
        let first = self.rollouts_drawn;
        self.rollouts_drawn += size as u64;
        let seeds: Vec<u64> = (0..size as u64).map(|j| self.stream.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(first + j)).collect();
        let results = {
            let this = &*self;
            let (task, bundle, policy) = (&task, bundle.as_ref(), &policy);
            let runs = seeds.iter().map(|&s| async move {
                let start = std::time::Instant::now();
                let (reward, turns, trajectory, model_time) = this.rollout(task, bundle, policy, s).await;
                (reward, turns, trajectory, (start.elapsed(), model_time))
            });
            this.runtime.block_on(futures_util::future::join_all(runs))
        };
        drop(policy);
        // The Test reward's length penalty compares rollouts within the group.
        let rewards: Vec<Reward> = match self.role {
            Role::Test => apply_length_penalty(&results.iter().map(|(r, turns, _, _)| (*r, *turns)).collect::<Vec<_>>()),
            Role::Repair => results.iter().map(|(r, _, _, _)| *r).collect(),
        };
        let mut group = Vec::with_capacity(size);
        for (reward, (_, turns, trajectory, (wall, model_time))) in rewards.into_iter().zip(results) {
            let (sequences, aborted) = match (reward, trajectory_sequences(&trajectory)) {
                (Reward::Masked, _) => (Vec::new(), Some("operational error (masked)".to_string())),
                (_, Err(e)) => (Vec::new(), Some(format!("token records: {e}"))),
                (Reward::Value(_), Ok(s)) => (s, None),
            };
            self.write_log(RolloutLog {
                draw: attempt,
                instance_id: task.instance_id.clone(),
                role: self.role,
                reward: reward.value().filter(|_| aborted.is_none()),
                turns,
                sampled_tokens: sequences.iter().map(Rollout::sampled_tokens).sum(),
                aborted: aborted.clone(),
                wall_ms: wall.as_millis() as u64,
                model_ms: model_time.as_millis() as u64,
            });
            group.push(Scored { sample: sequences, reward: reward.value().unwrap_or(0.0), aborted: aborted.is_some() });
        }
        Ok(group)
    }
}
