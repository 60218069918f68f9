//! Official grading of a native task (task runner `cargo`), after the model patch was screened
//! and applied (see [`super::grade::grade`]): the official test patch's paths and any test path
//! the model touched reset to Base, the official test patch applied, then the guarded run
//! ([`super::guard::libtest_run`]) of every FAIL_TO_PASS and PASS_TO_PASS test — each judged
//! test beside its look-alike copies, one process per test, the exit status alone. Resolved iff
//! the build succeeds, the canaries hold and every F2P and P2P test passes.
//!
//! - a build failure is a verdict (not resolved, `completion: build_failed`): the official tests
//!   built at Gold, so the model patch broke them;
//! - a run the canaries refuse is `tampered` (reward 0);
//! - a test past its timeout, an id that is not a cargo node id, or a `test_cmd` that is not
//!   `cargo test [build flags]` is an `error_kind`, never a verdict.

use super::error::HarnessError;
use super::execute::{apply_patch, ApplyOutcome};
use super::gate::TEST_TIMEOUT;
use super::gate_native::{BUILD_BUDGET, MUTANTS};
use super::grade::{status_name, GradeResult};
use super::guard::libtest_run::{run_guarded_nodes, split_node, GuardedRun, RunLimits};
use super::logparse::TestStatus;
use super::runners::cargo::task_build_flags;
use super::sandbox::Sandbox;
use crate::task::TaskInstance;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Grade the sandbox's tree (Base with the model patch applied; the caller reset test paths).
pub async fn grade_cargo(task: &TaskInstance, sb: &dyn Sandbox) -> Result<GradeResult, HarnessError> {
    let ids: Vec<String> = task.fail_to_pass.iter().chain(&task.pass_to_pass).cloned().collect();
    let blank = |error_kind: Option<String>| GradeResult {
        instance_id: task.instance_id.clone(),
        resolved: false,
        tests: BTreeMap::new(),
        error_kind,
        completion: None,
        forbidden: None,
        tampered: None,
        official: None,
    };
    if ids.is_empty() {
        return Ok(blank(Some("no_f2p_p2p_tests".into())));
    }
    if ids.iter().any(|id| split_node(id).is_none()) {
        return Ok(blank(Some("test_id_not_cargo".into())));
    }
    let Ok(flags) = task_build_flags(&task.test_cmd) else {
        return Ok(blank(Some("test_cmd_unsupported".into())));
    };
    if let ApplyOutcome::Failed { .. } = apply_patch(sb, &task.test_patch, "official-tests").await? {
        return Ok(blank(Some("test_patch_apply_failed".into())));
    }
    let limits = RunLimits { build: BUILD_BUDGET, per_test: TEST_TIMEOUT, mutants: MUTANTS, env: Vec::new() };
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut ids_unique = Vec::new();
    for id in &ids {
        if !ids_unique.contains(id) {
            ids_unique.push(id.clone());
        }
    }
    let j = match run_guarded_nodes(sb, &ids_unique, &flags, &limits, &mut rng).await? {
        GuardedRun::BuildFailed { .. } => {
            return Ok(GradeResult {
                tests: ids.iter().map(|id| (id.clone(), status_name(None))).collect(),
                completion: Some("build_failed".into()),
                ..blank(None)
            })
        }
        GuardedRun::Judged(j) => j,
    };
    if !j.violations.is_empty() {
        return Ok(GradeResult { tampered: Some(j.violations), ..blank(None) });
    }
    if j.real.values().any(|s| *s == TestStatus::Error) {
        return Ok(blank(Some("timeout".into())));
    }
    let mut tests = BTreeMap::new();
    let mut resolved = true;
    for id in &ids {
        let st = j.real.get(id).copied();
        resolved &= st == Some(TestStatus::Passed);
        tests.insert(id.clone(), status_name(st));
    }
    Ok(GradeResult { resolved, tests, ..blank(None) })
}
