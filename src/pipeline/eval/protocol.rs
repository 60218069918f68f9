//! One instance through the generated-test evaluation protocol (Table 9, §A.3), and the run over
//! every instance.
//!
//! Per instance:
//! 1. For each condition with a Test source: one Test generation per issue and source
//!    (`generated`), or the given bundle qualified on Base (`DIR`), or the selected Oracle test;
//!    at most one qualified bundle, audited offline on Gold (Base-to-Gold), which never decides
//!    anything downstream.
//! 2. For each run: one Round 0 (the issue and Base only, so it is shared by every condition of
//!    the run), graded officially. Each condition with a qualified bundle continues that Round 0
//!    (its patch and retained conversation) through the Repair controller with the same bundle in
//!    every run; a condition without one keeps and scores the Round-0 patch.
//! 3. A fresh official grade of every terminal patch. An infrastructure failure anywhere in a
//!    row's units makes the row unresolved and is reported with it; a panicking instance becomes
//!    error rows. Every instance stays in the denominator.

use super::config::{Condition, EvalConfig};
use super::policies::PolicySource;
use super::records::{ResultRow, TestRow};
use super::units::{self, key, sha256, UnitStore};
use super::EvalError;
use crate::agent::trajectory::seed_messages;
use crate::agent::Trajectory;
use crate::episode::oracle::selected_oracle_bundle;
use crate::episode::repair::RepairInputs;
use crate::harness::official::language_of;
use crate::harness::provision::docker_image;
use crate::harness::sandbox::docker::{current_host, missing_images, on_host};
use crate::harness::sandbox::docker_host::{DockerHost, HostPool};
use crate::harness::{Bundle, FrozenBundle, Prediction, SandboxConfig, SandboxKind};
use crate::pipeline::jobs::run_each;
use crate::task::TaskInstance;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An evaluation to run.
pub struct EvalRun {
    pub tasks: Vec<TaskInstance>,
    pub config: EvalConfig,
    /// The Test agent (needed by the `generated` condition).
    pub test_policy: Option<PolicySource>,
    pub repair_policy: PolicySource,
    pub out: PathBuf,
}

/// What a run produced, in task-file order (conditions in the given order, runs ascending).
pub struct EvalOutcome {
    pub results: Vec<ResultRow>,
    pub tests: Vec<TestRow>,
    /// Per condition label and run: the terminal patches as SWE-bench predictions.
    pub predictions: Vec<(String, usize, Vec<Prediction>)>,
}

struct Ctx {
    config: EvalConfig,
    test_policy: Option<PolicySource>,
    repair_policy: PolicySource,
    out: PathBuf,
    store: UnitStore,
}

/// One row with the terminal patch it scored.
struct Scored {
    row: ResultRow,
    patch: String,
}

struct InstanceOut {
    results: Vec<Scored>,
    tests: Vec<TestRow>,
}

impl InstanceOut {
    /// Every row of the instance carries its language (the report's per-language breakdown).
    fn set_language(&mut self, language: &str) {
        for s in &mut self.results {
            s.row.language = language.to_string();
        }
        for t in &mut self.tests {
            t.language = language.to_string();
        }
    }
}

/// The bundle a condition gives an instance: `None` for the no-test condition.
type TestSource = Option<Option<FrozenBundle>>;

fn traj_path(out: &Path, id: &str, name: &str) -> PathBuf {
    out.join("trajectories").join(id).join(format!("{name}.jsonl"))
}

impl Ctx {
    fn sandbox(&self) -> String {
        format!("{:?}", self.config.sandbox)
    }

    /// Step 1 for one condition: its bundle for `task` and the Test row.
    async fn test_source(&self, task: &TaskInstance, tj: &str, cond: &Condition) -> Result<(TestSource, Option<TestRow>), EvalError> {
        let id = &task.instance_id;
        let label = cond.label();
        let bundle_dir = self.out.join("tests").join(&label).join(id);
        let unit = match cond {
            Condition::None => return Ok((None, None)),
            Condition::Oracle => {
                let b = selected_oracle_bundle(task);
                let row = TestRow {
                    instance_id: id.clone(),
                    source: label,
                    qualified: b.is_ok(),
                    rejection: b.as_ref().err().map(|_| "no_oracle_test".to_string()),
                    base_to_gold: None,
                    gold_status: None,
                    turns: 0,
                    completion_tokens: 0,
                    bundle_sha256: b.as_ref().ok().map(|f| f.hash.clone()),
                    infra_error: None,
                    language: String::new(),
                };
                return Ok((Some(b.ok()), Some(row)));
            }
            Condition::Generated => {
                let Some(policy) = &self.test_policy else {
                    return Err(EvalError::BadCondition("generated (no Test policy given)".into()));
                };
                let b = &self.config.budgets;
                let settings = format!("{:?}", (b.test_turns, b.test_wall_secs, b.test_submissions, b.test_temperature, b.max_tokens, b.command_timeout_secs));
                let k = key("test", &[tj, &policy.identity(id), &settings, &self.sandbox()]);
                let config = b.test_config(self.config.sandbox);
                let traj = traj_path(&self.out, id, &format!("test-{label}"));
                let work = units::generate_test(task, policy.for_unit(id, 0), &config, &bundle_dir, &traj);
                self.store.unit("test", id, k, work).await?
            }
            Condition::Bundles(dir) => {
                let given = Bundle::read_dir(&dir.join(id)).ok();
                let hash = given.as_ref().map_or_else(|| "none".to_string(), Bundle::content_hash);
                let k = key("qualify", &[tj, &hash, &self.sandbox()]);
                self.store.unit("qualify", id, k, units::qualify_given(task, given, self.config.sandbox, &bundle_dir)).await?
            }
        };
        let mut row = TestRow {
            instance_id: id.clone(),
            source: label,
            qualified: unit.qualified,
            rejection: unit.rejection.clone(),
            base_to_gold: None,
            gold_status: None,
            turns: unit.turns,
            completion_tokens: unit.completion_tokens,
            bundle_sha256: unit.bundle_hash.clone(),
            infra_error: unit.infra_error.clone(),
            language: String::new(),
        };
        let frozen = match &unit.bundle_hash {
            Some(h) => match units::load_bundle(&bundle_dir, h) {
                Some(f) => Some(f),
                None => {
                    row.qualified = false;
                    row.infra_error = Some(format!("the stored bundle {} is missing or changed", bundle_dir.display()));
                    None
                }
            },
            None => None,
        };
        if let Some(f) = &frozen {
            let k = key("audit", &[tj, &f.hash, &self.sandbox()]);
            let a = self.store.unit("audit", id, k, units::audit(task, f, self.config.sandbox)).await?;
            row.base_to_gold = a.base_to_gold;
            row.gold_status = a.gold_status;
            if row.infra_error.is_none() {
                row.infra_error = a.infra_error;
            }
        }
        Ok((Some(frozen), Some(row)))
    }

    /// The official grade of `patch` (shared by every row that scores the same patch).
    async fn grade(&self, task: &TaskInstance, tj: &str, patch: &str) -> Result<units::GradeUnit, EvalError> {
        let k = key("grade", &[tj, patch, &self.sandbox()]);
        self.store.unit("grade", &task.instance_id, k, units::grade(task, patch, self.config.sandbox)).await
    }

    async fn run_instance(&self, task: &TaskInstance) -> Result<InstanceOut, EvalError> {
        let id = &task.instance_id;
        let tj = task.to_json().map(|v| v.to_string()).map_err(|e| EvalError::BadRecords { path: id.clone(), reason: e.to_string() })?;
        let mut sources = Vec::new();
        let mut tests = Vec::new();
        for cond in &self.config.conditions {
            let (src, row) = self.test_source(task, &tj, cond).await?;
            sources.push((cond.label(), src));
            tests.extend(row);
        }
        let b = &self.config.budgets;
        let rcfg = b.repair_config(self.config.sandbox);
        let settings = format!("{:?}", (b.round0_turns, b.revision_rounds, b.revision_turns, b.repair_wall_secs, b.temperature, b.max_tokens, b.command_timeout_secs));
        let policy = &self.repair_policy;
        let mut results = Vec::new();
        for run in 1..=self.config.runs {
            let k0 = key("round0", &[&tj, &policy.identity(id), &settings, &self.sandbox(), &run.to_string()]);
            let traj0 = traj_path(&self.out, id, &format!("round0-run{run}"));
            let work = units::repair(task, None, policy.for_unit(id, 0), &rcfg, RepairInputs::default(), &traj0);
            let r0 = self.store.unit("round0", id, k0.clone(), work).await?;
            let p0 = r0.terminal_patch.clone();
            let g0 = match &r0.infra_error {
                Some(_) => None,
                None => Some(self.grade(task, &tj, &p0).await?),
            };
            let round0_resolved = g0.as_ref().is_some_and(|g| g.resolved);
            for (label, src) in &sources {
                let mut row = ResultRow {
                    instance_id: id.clone(),
                    condition: label.clone(),
                    run,
                    test_qualified: src.as_ref().map(Option::is_some),
                    entered_repair: false,
                    round0_resolved,
                    final_resolved: round0_resolved,
                    terminal_reason: match src {
                        None => "no_test".into(),
                        Some(None) => "no_qualified_bundle".into(),
                        Some(Some(_)) => r0.terminal_reason.clone(),
                    },
                    terminal_round: 0,
                    revision_rounds: 0,
                    checks: 0,
                    terminal_gate: None,
                    round0_turns: r0.turns,
                    revision_turns: 0,
                    prompt_tokens: r0.prompt_tokens,
                    completion_tokens: r0.completion_tokens,
                    wall_ms: r0.wall_ms,
                    round0_patch_sha256: sha256(&p0),
                    final_patch_sha256: sha256(&p0),
                    infra_error: r0.infra_error.clone().or_else(|| g0.as_ref().and_then(|g| g.infra_error.clone())),
                    docker_host: current_host(),
                    language: String::new(),
                };
                let mut patch = p0.clone();
                if let (Some(Some(frozen)), None) = (src, &r0.infra_error) {
                    let traj = traj_path(&self.out, id, &format!("repair-{label}-run{run}"));
                    let seed = Trajectory::read_jsonl(&traj0).map(|t| seed_messages(&t.messages()));
                    let ru = match seed {
                        Ok(seed) => {
                            let k = key("repair", &[&k0, &frozen.hash]);
                            let inputs = RepairInputs { provided_patch: Some(p0.clone()), seed_messages: Some(seed) };
                            let work = units::repair(task, Some(frozen), policy.for_unit(id, r0.turns), &rcfg, inputs, &traj);
                            self.store.unit("repair", id, k, work).await?
                        }
                        Err(e) => {
                            row.infra_error = Some(format!("reading the Round-0 trajectory {}: {e}", traj0.display()));
                            row.final_resolved = false;
                            results.push(Scored { row, patch });
                            continue;
                        }
                    };
                    row.entered_repair = true;
                    row.terminal_reason = ru.terminal_reason.clone();
                    row.terminal_round = ru.terminal_round;
                    row.revision_rounds = ru.revision_rounds;
                    row.checks = ru.checks;
                    row.terminal_gate = ru.terminal_gate.clone();
                    row.revision_turns = ru.turns;
                    row.prompt_tokens += ru.prompt_tokens;
                    row.completion_tokens += ru.completion_tokens;
                    row.wall_ms += ru.wall_ms;
                    row.final_patch_sha256 = sha256(&ru.terminal_patch);
                    patch = ru.terminal_patch.clone();
                    row.final_resolved = false;
                    match &ru.infra_error {
                        Some(e) => row.infra_error = Some(e.clone()),
                        None => {
                            let g = self.grade(task, &tj, &patch).await?;
                            row.final_resolved = g.resolved;
                            row.infra_error = row.infra_error.clone().or(g.infra_error);
                        }
                    }
                }
                if row.infra_error.is_some() {
                    row.final_resolved = false;
                    if r0.infra_error.is_some() {
                        row.round0_resolved = false;
                    }
                }
                results.push(Scored { row, patch });
            }
        }
        Ok(InstanceOut { results, tests })
    }

    /// The rows of an instance that could not be evaluated at all (a crash): every condition and
    /// run unresolved, with the error.
    fn error_rows(&self, id: &str, error: &str) -> InstanceOut {
        let mut results = Vec::new();
        for run in 1..=self.config.runs {
            for cond in &self.config.conditions {
                let row = ResultRow {
                    instance_id: id.to_string(),
                    condition: cond.label(),
                    run,
                    test_qualified: None,
                    entered_repair: false,
                    round0_resolved: false,
                    final_resolved: false,
                    terminal_reason: "infra_error".into(),
                    terminal_round: 0,
                    revision_rounds: 0,
                    checks: 0,
                    terminal_gate: None,
                    round0_turns: 0,
                    revision_turns: 0,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    wall_ms: 0,
                    round0_patch_sha256: sha256(""),
                    final_patch_sha256: sha256(""),
                    infra_error: Some(error.to_string()),
                    docker_host: current_host(),
                    language: String::new(),
                };
                results.push(Scored { row, patch: String::new() });
            }
        }
        InstanceOut { results, tests: Vec::new() }
    }
}

/// Fail before any work, in one error naming every host and each image it lacks (or why it
/// cannot be reached), when a docker host cannot run the tasks (nothing is pulled).
async fn check_images(tasks: &[TaskInstance], hosts: &[DockerHost]) -> Result<(), EvalError> {
    let mut images: Vec<String> = tasks.iter().map(|t| docker_image(t, &SandboxConfig::default())).collect();
    images.sort();
    images.dedup();
    let hosts: Vec<Option<&str>> = if hosts.is_empty() { vec![None] } else { hosts.iter().map(|h| Some(h.url.as_str())).collect() };
    let checks = futures_util::future::join_all(hosts.iter().map(|h| missing_images(*h, &images))).await;
    let mut problems = Vec::new();
    for (host, check) in hosts.iter().zip(checks) {
        let name = host.unwrap_or("(DOCKER_HOST or local)").to_string();
        match check {
            Ok(missing) if missing.is_empty() => {}
            Ok(missing) => problems.push((name, format!("missing {}", missing.join(", ")))),
            Err(e) => problems.push((name, e.to_string())),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EvalError::MissingImages { hosts: problems })
    }
}

/// Run the evaluation; `on_row` sees each result row as its instance completes.
pub async fn run_eval(run: EvalRun, on_row: Arc<dyn Fn(&ResultRow) + Send + Sync>) -> Result<EvalOutcome, EvalError> {
    if run.tasks.is_empty() {
        return Err(EvalError::NoInstances);
    }
    if run.config.conditions.contains(&Condition::Generated) && run.test_policy.is_none() {
        return Err(EvalError::BadCondition("generated (no Test policy given)".into()));
    }
    if run.config.sandbox == SandboxKind::Docker {
        check_images(&run.tasks, &run.config.docker_hosts).await?;
    }
    std::fs::create_dir_all(&run.out).map_err(EvalError::io(format!("creating {}", run.out.display())))?;
    let store = UnitStore::open(&run.out.join("units.jsonl"))?;
    let ctx = Arc::new(Ctx { config: run.config, test_policy: run.test_policy, repair_policy: run.repair_policy, out: run.out, store });
    let ids: Vec<String> = run.tasks.iter().map(|t| t.instance_id.clone()).collect();
    let languages: Vec<&'static str> = run.tasks.iter().map(language_of).collect();
    let items: Vec<(usize, (usize, TaskInstance))> = run.tasks.into_iter().enumerate().map(|(i, t)| (i, (i, t))).collect();
    let mut outs: Vec<Option<InstanceOut>> = (0..ids.len()).map(|_| None).collect();
    let c = ctx.clone();
    let pool = HostPool::new(&ctx.config.docker_hosts);
    run_each(
        items,
        ctx.config.workers,
        move |(_, task): (usize, TaskInstance)| {
            let c = c.clone();
            let pool = pool.clone();
            async move {
                // A slot on the least busy host with room, held for the whole instance.
                let slot = match &pool {
                    Some(p) => Some(p.acquire().await),
                    None => None,
                };
                let host = slot.as_ref().map(|s| s.url().to_string());
                on_host(host, c.run_instance(&task)).await.map_err(|e| e.to_string())
            }
        },
        |i, r| {
            let mut out = match r {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => ctx.error_rows(&ids[i], &e),
                Err(panic) => ctx.error_rows(&ids[i], &format!("the instance panicked: {panic}")),
            };
            out.set_language(languages[i]);
            for s in &out.results {
                on_row(&s.row);
            }
            outs[i] = Some(out);
        },
    )
    .await;
    let ctx = Arc::try_unwrap(ctx).map_err(|_| EvalError::Io { what: "finishing the run".into(), source: std::io::Error::other("workers still hold the run") })?;
    let model = ctx.repair_policy.spec().to_string();
    let mut results = Vec::new();
    let mut tests = Vec::new();
    let mut predictions: Vec<(String, usize, Vec<Prediction>)> = Vec::new();
    for run in 1..=ctx.config.runs {
        for cond in &ctx.config.conditions {
            predictions.push((cond.label(), run, Vec::new()));
        }
    }
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.unwrap_or_else(|| {
            let mut out = ctx.error_rows(&ids[i], "the instance was cancelled");
            out.set_language(languages[i]);
            out
        });
        tests.extend(out.tests);
        for s in out.results {
            if let Some(p) = predictions.iter_mut().find(|(c, r, _)| *c == s.row.condition && *r == s.row.run) {
                p.2.push(Prediction {
                    instance_id: s.row.instance_id.clone(),
                    model_name_or_path: format!("execcritic+{}+run{}:{model}", s.row.condition, s.row.run),
                    model_patch: Some(s.patch),
                });
            }
            results.push(s.row);
        }
    }
    results.sort_by_key(|r| (ids.iter().position(|x| *x == r.instance_id), ctx.config.conditions.iter().position(|c| c.label() == r.condition), r.run));
    ctx.store.finish()?;
    Ok(EvalOutcome { results, tests, predictions })
}
