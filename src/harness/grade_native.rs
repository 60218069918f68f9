//! Official grading of a native task (task runner `cargo` or `go`), after the model patch was
//! screened and applied (see [`super::grade::grade`]): the official test patch's paths and any
//! test path the model touched reset to Base, the official test patch applied, then the guarded
//! run ([`super::guard::libtest_run`], [`super::guard::gotest_run`]) of every FAIL_TO_PASS and
//! PASS_TO_PASS test — each judged
//! test beside its look-alike copies, one process per test, the exit status alone. Resolved iff
//! the build succeeds, the canaries hold and every F2P and P2P test passes.
//!
//! - a build failure is a verdict (not resolved, `completion: build_failed`): the official tests
//!   built at Gold, so the model patch broke them;
//! - a run the canaries refuse is `tampered` (reward 0);
//! - a test past its timeout, an id that is not the runner's node id (`test_id_not_cargo`,
//!   `test_id_not_go`), or a `test_cmd` that is not `cargo test [build flags]` / `go test
//!   [flags]` (`test_cmd_unsupported`) is an `error_kind`, never a verdict.

use super::error::HarnessError;
use super::execute::{apply_patch, ApplyOutcome};
use super::gate::TEST_TIMEOUT;
use super::gate_native::{BUILD_BUDGET, MUTANTS};
use super::grade::{status_name, GradeResult};
use super::guard::{gotest_run, libtest_run};
use super::guard::libtest_run::{GuardedRun, RunLimits};
use super::logparse::TestStatus;
use super::runners::{cargo, go};
use crate::task::Runner;
use super::sandbox::Sandbox;
use crate::task::TaskInstance;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Grade the sandbox's tree (Base with the model patch applied; the caller reset test paths).
pub async fn grade_native(task: &TaskInstance, sb: &dyn Sandbox) -> Result<GradeResult, HarnessError> {
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
    let is_node = |id: &str| match task.runner {
        Runner::Go => gotest_run::split_node(id).is_some(),
        _ => libtest_run::split_node(id).is_some(),
    };
    if !ids.iter().all(|id| is_node(id)) {
        return Ok(blank(Some(format!("test_id_not_{}", task.runner.as_str()))));
    }
    let flags = match task.runner {
        Runner::Go => go::task_flags(&task.test_cmd),
        _ => cargo::task_build_flags(&task.test_cmd),
    };
    let Ok(flags) = flags else {
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
    let run = match task.runner {
        Runner::Go => gotest_run::run_guarded_nodes(sb, &ids_unique, &flags, &limits, &mut rng).await?,
        _ => libtest_run::run_guarded_nodes(sb, &ids_unique, &flags, &limits, &mut rng).await?,
    };
    let j = match run {
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
