//! The durable units of an evaluation. Each unit (a Test generation, the qualification of a
//! given bundle, an audit, a Round 0, a repair run, an official grade) is one line of
//! `units.jsonl` keyed by a hash of everything it depends on — the task, the policy's identity,
//! the settings, and the outputs of the units it continues from — appended and fsynced the moment
//! it completes, after its files (trajectory, bundle). A rerun reads the log back and reuses
//! every finished unit; a unit that ended in an infrastructure failure is run again.

use super::EvalError;
use crate::agent::Trajectory;
use crate::episode::repair::{run_repair, RepairInputs, TerminalReason};
use crate::episode::test_episode::{run_test_episode, SubmissionVerdict, TestEpisodeConfig, TestOutcome};
use crate::episode::RepairConfig;
use crate::harness::{self, Bundle, FrozenBundle, Qualification, SandboxKind};
use crate::pipeline::durable::{input_key, ResultLog, KEY_FIELD};
use crate::policy::Policy;
use crate::task::TaskInstance;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;

/// The log of finished units (`units.jsonl`).
pub struct UnitStore {
    log: Mutex<ResultLog>,
    kept: HashMap<String, Value>,
    rows: Mutex<Vec<Value>>,
}

/// Whether a unit's line marks an infrastructure failure (retried by a rerun).
fn is_infra(v: &Value) -> bool {
    v.get("infra_error").is_some_and(|e| !e.is_null())
}

impl UnitStore {
    pub fn open(path: &Path) -> Result<UnitStore, EvalError> {
        let (log, kept) = ResultLog::open_keeping(path, |_, v| !is_infra(v))
            .map_err(EvalError::io(format!("opening {}", path.display())))?;
        Ok(UnitStore { log: Mutex::new(log), kept, rows: Mutex::new(Vec::new()) })
    }

    /// The unit `key`: its recorded output, or `work`'s, recorded now. `work` returns the output
    /// and the infrastructure error that spoils it, if any.
    pub async fn unit<T, F>(&self, kind: &str, instance_id: &str, key: String, work: F) -> Result<T, EvalError>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = (T, Option<String>)>,
    {
        if let Some(row) = self.kept.get(&key) {
            if let Ok(out) = serde_json::from_value::<T>(row["output"].clone()) {
                self.rows.lock().unwrap_or_else(|p| p.into_inner()).push(row.clone());
                return Ok(out);
            }
        }
        let (out, infra) = work.await;
        let row = json!({
            KEY_FIELD: key,
            "unit": kind,
            "instance_id": instance_id,
            "infra_error": infra,
            "output": serde_json::to_value(&out).map_err(|e| EvalError::Io {
                what: format!("recording a {kind} unit"),
                source: std::io::Error::other(e),
            })?,
        });
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&row)
            .map_err(EvalError::io("appending to units.jsonl"))?;
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).push(row);
        Ok(out)
    }

    /// Rewrite the log with this run's units only (sorted by key, so the file does not depend on
    /// completion order).
    pub fn finish(self) -> Result<(), EvalError> {
        let mut rows = self.rows.into_inner().unwrap_or_else(|p| p.into_inner());
        rows.sort_by(|a, b| a[KEY_FIELD].as_str().cmp(&b[KEY_FIELD].as_str()));
        rows.dedup_by(|a, b| a[KEY_FIELD] == b[KEY_FIELD]);
        self.log
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .finish(&rows)
            .map_err(EvalError::io("rewriting units.jsonl"))
    }
}

pub fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A unit's key: its kind and the given parts.
pub fn key(kind: &str, parts: &[&str]) -> String {
    let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    input_key(kind, &bytes)
}

/// Write a trajectory so a reader sees the whole file or none.
fn store_trajectory(path: &Path, t: &Trajectory) -> Result<(), EvalError> {
    let tmp = path.with_file_name(format!(
        ".partial-{}",
        path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(EvalError::io(format!("creating {}", d.display())))?;
    }
    t.write_jsonl(&tmp).map_err(|e| EvalError::Io { what: format!("writing {}", tmp.display()), source: std::io::Error::other(e) })?;
    std::fs::rename(&tmp, path).map_err(EvalError::io(format!("writing {}", path.display())))
}

/// A Test bundle's source for this instance, once qualified.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestUnit {
    pub qualified: bool,
    pub rejection: Option<String>,
    pub bundle_hash: Option<String>,
    pub turns: usize,
    pub completion_tokens: u64,
    pub wall_ms: u64,
    pub infra_error: Option<String>,
}

/// Why a Test episode kept no bundle.
fn test_rejection(outcome: &TestOutcome, last: Option<&SubmissionVerdict>) -> Option<String> {
    match outcome {
        TestOutcome::Qualified { .. } => None,
        TestOutcome::BaseGateFailure => Some("base_gate_failure".into()),
        TestOutcome::InfraError { .. } => Some("infra_error".into()),
        TestOutcome::NoSubmission => Some(match last {
            Some(SubmissionVerdict::Rejected { kind, .. }) => kind.clone(),
            Some(SubmissionVerdict::MissingFile { .. }) => "missing_file".into(),
            Some(SubmissionVerdict::BaseGateFailed { .. }) => "base_gate_failure".into(),
            _ => "no_submission".into(),
        }),
    }
}

/// Load a stored frozen bundle and check it is the one recorded.
pub fn load_bundle(dir: &Path, hash: &str) -> Option<FrozenBundle> {
    let f = FrozenBundle::freeze(Bundle::read_dir(dir).ok()?).ok()?;
    (f.hash == hash).then_some(f)
}

/// Store a qualified bundle in `dir`, replacing a bundle of an earlier unit with other inputs.
fn store_bundle(b: &FrozenBundle, dir: &Path) -> Result<(), String> {
    if dir.exists() && load_bundle(dir, &b.hash).is_none() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("removing the stale bundle {}: {e}", dir.display()))?;
    }
    b.store(dir).map_err(|e| format!("storing the bundle: {e}"))
}

/// One Test generation; a qualified bundle is stored (read-only) in `bundle_dir`.
pub async fn generate_test(
    task: &TaskInstance,
    policy: Result<std::sync::Arc<dyn Policy>, crate::policy::PolicyError>,
    config: &TestEpisodeConfig,
    bundle_dir: &Path,
    trajectory: &Path,
) -> (TestUnit, Option<String>) {
    let failed = |message: String| {
        (
            TestUnit { qualified: false, rejection: Some("infra_error".into()), bundle_hash: None, turns: 0, completion_tokens: 0, wall_ms: 0, infra_error: Some(message.clone()) },
            Some(message),
        )
    };
    let policy = match policy {
        Ok(p) => p,
        Err(e) => return failed(format!("test policy: {e}")),
    };
    let r = run_test_episode(task, policy.as_ref(), config).await;
    if let Err(e) = store_trajectory(trajectory, &r.trajectory) {
        return failed(e.to_string());
    }
    if let TestOutcome::InfraError { message } = &r.record.outcome {
        return failed(format!("test generation: {message}"));
    }
    if let Some(b) = &r.bundle {
        if let Err(e) = store_bundle(b, bundle_dir) {
            return failed(e);
        }
    }
    let unit = TestUnit {
        qualified: r.bundle.is_some(),
        rejection: test_rejection(&r.record.outcome, r.record.submissions.last().map(|s| &s.verdict)),
        bundle_hash: r.bundle.as_ref().map(|b| b.hash.clone()),
        turns: r.record.stats.turns,
        completion_tokens: r.record.stats.usage.completion_tokens,
        wall_ms: r.record.wall_ms,
        infra_error: None,
    };
    (unit, None)
}

/// Qualification of a given bundle on Base.
pub async fn qualify_given(task: &TaskInstance, bundle: Option<Bundle>, kind: SandboxKind, bundle_dir: &Path) -> (TestUnit, Option<String>) {
    let unit = |qualified, rejection: Option<String>, bundle_hash, infra: Option<String>| TestUnit {
        qualified,
        rejection,
        bundle_hash,
        turns: 0,
        completion_tokens: 0,
        wall_ms: 0,
        infra_error: infra,
    };
    let Some(bundle) = bundle else {
        return (unit(false, Some("no_bundle".into()), None, None), None);
    };
    match harness::qualify(task, &bundle, kind).await {
        Ok(Qualification::Accepted(f)) => match store_bundle(&f, bundle_dir) {
            Ok(()) => (unit(true, None, Some(f.hash.clone()), None), None),
            Err(m) => (unit(false, Some("infra_error".into()), None, Some(m.clone())), Some(m)),
        },
        Ok(Qualification::Rejected(r)) => (unit(false, Some(r.kind.code().into()), None, None), None),
        Ok(Qualification::BaseGateFailed { .. }) => (unit(false, Some("base_gate_failure".into()), None, None), None),
        Err(e) => {
            let m = format!("qualification: {e}");
            (unit(false, Some("infra_error".into()), None, Some(m.clone())), Some(m))
        }
    }
}

/// The offline Base-to-Gold audit of a qualified bundle (Gold never reaches the agents).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditUnit {
    pub base_to_gold: Option<bool>,
    pub gold_status: Option<String>,
    pub infra_error: Option<String>,
}

pub async fn audit(task: &TaskInstance, frozen: &FrozenBundle, kind: SandboxKind) -> (AuditUnit, Option<String>) {
    // Base-to-Gold needs no labelled candidates.
    let mut t = task.clone();
    t.candidates.clear();
    match harness::audit(&t, frozen, kind).await {
        Ok(r) => (AuditUnit { base_to_gold: Some(r.q), gold_status: Some(r.gold_status), infra_error: None }, None),
        Err(e) => {
            let m = format!("audit: {e}");
            (AuditUnit { base_to_gold: None, gold_status: None, infra_error: Some(m.clone()) }, Some(m))
        }
    }
}

/// A Repair episode (Round 0 alone, or the revisions after a shared Round 0).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepairUnit {
    pub terminal_reason: String,
    pub terminal_round: usize,
    pub terminal_patch: String,
    pub revision_rounds: usize,
    pub checks: usize,
    pub terminal_gate: Option<String>,
    /// Policy turns served (the continuation of a replay starts after them).
    pub turns: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub wall_ms: u64,
    pub infra_error: Option<String>,
}

fn reason_name(t: &TerminalReason) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Run Round 0 (`bundle` = `None`, no inputs) or the revisions after it (`bundle` and the Round-0
/// patch and conversation as inputs).
pub async fn repair(
    task: &TaskInstance,
    bundle: Option<&FrozenBundle>,
    policy: Result<std::sync::Arc<dyn Policy>, crate::policy::PolicyError>,
    config: &RepairConfig,
    inputs: RepairInputs,
    trajectory: &Path,
) -> (RepairUnit, Option<String>) {
    let kept = inputs.provided_patch.clone().unwrap_or_default();
    let failed = |m: String| {
        (
            RepairUnit {
                terminal_reason: "infra_error".into(),
                terminal_round: 0,
                terminal_patch: kept.clone(),
                revision_rounds: 0,
                checks: 0,
                terminal_gate: None,
                turns: 0,
                prompt_tokens: 0,
                completion_tokens: 0,
                wall_ms: 0,
                infra_error: Some(m.clone()),
            },
            Some(m),
        )
    };
    let policy = match policy {
        Ok(p) => p,
        Err(e) => return failed(format!("repair policy: {e}")),
    };
    let r = run_repair(task, bundle, policy.as_ref(), config, inputs).await;
    if let Err(e) = store_trajectory(trajectory, &r.trajectory) {
        return failed(e.to_string());
    }
    let rec = &r.record;
    let infra = match &rec.terminal {
        TerminalReason::InfraError { message } => Some(format!("repair: {message}")),
        _ => None,
    };
    let unit = RepairUnit {
        terminal_reason: reason_name(&rec.terminal),
        terminal_round: rec.terminal_round,
        terminal_patch: rec.terminal_patch.clone(),
        revision_rounds: rec.rounds.iter().filter(|x| x.index > 0).count(),
        checks: rec.gate_runs(),
        terminal_gate: rec.terminal_gate.as_ref().map(|g| g.status.clone()),
        turns: rec.stats.turns,
        prompt_tokens: rec.stats.usage.prompt_tokens,
        completion_tokens: rec.stats.usage.completion_tokens,
        wall_ms: rec.wall_ms,
        infra_error: infra.clone(),
    };
    (unit, infra)
}

/// The fresh official evaluation of one patch (all F2P and P2P tests).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GradeUnit {
    pub resolved: bool,
    /// Why the patch is not resolved without a test verdict (`empty_patch`, a grading error kind,
    /// a forbidden modification).
    pub note: Option<String>,
    pub infra_error: Option<String>,
}

pub async fn grade(task: &TaskInstance, patch: &str, kind: SandboxKind) -> (GradeUnit, Option<String>) {
    if patch.trim().is_empty() {
        return (GradeUnit { resolved: false, note: Some("empty_patch".into()), infra_error: None }, None);
    }
    match harness::grade(task, patch, kind).await {
        // A patch that does not apply or tampers with tests is the patch's fault: unresolved.
        Ok(g)
            if g.forbidden.is_some()
                || g.tampered.is_some()
                || g.error_kind.as_deref() == Some("patch_apply_failed") =>
        {
            let note = g.forbidden.or(g.tampered.map(|_| "tampered".to_string())).or(g.error_kind);
            (GradeUnit { resolved: false, note, infra_error: None }, None)
        }
        Ok(g) => match g.error_kind {
            Some(k) => {
                let m = format!("official grading: {k}");
                (GradeUnit { resolved: false, note: Some(k), infra_error: Some(m.clone()) }, Some(m))
            }
            None => (GradeUnit { resolved: g.resolved, note: None, infra_error: None }, None),
        },
        Err(e) => {
            let m = format!("official grading: {e}");
            (GradeUnit { resolved: false, note: None, infra_error: Some(m.clone()) }, Some(m))
        }
    }
}
