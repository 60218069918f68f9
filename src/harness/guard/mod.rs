//! The runtime guard: a verdict rests only on evidence the code under test cannot write or
//! predict.
//!
//! In an in-process runner (pytest, unittest, Django's and sympy's runners) the candidate's
//! import-time code runs inside the runner: it can change the runner, its output, its exit and
//! the tests themselves, through any spelling, file or door. Rules about how source is spelled
//! ([`super::tamper`]) stay as a cheap first filter; the defence is here:
//!
//! 1. **What starts first is ours** (`sitecustomize.py`, read-only, first on `PYTHONPATH`, so
//!    `site` runs it in every Python process before any repository code): an irremovable audit
//!    hook records capability uses — spawning or re-executing runners, killing the parent,
//!    compiling strings or shipped data files, code-object surgery, trace hooks, gc
//!    introspection, ctypes, import hooks, shadowing modules, reading the tests or `.git`,
//!    writing code or the harness's files — each attributed to a line the candidate added, or
//!    to no repository frame at all ([`records`]).
//! 2. **Canaries** the code cannot tell from the judged tests: the real test under a fresh
//!    random name among mutants that must fail, and controls ([`canary`]).
//! 3. **Results through a channel the code cannot forge**: the designated runner process reads
//!    the run's nonce from stdin before any repository code runs; only the guard's own
//!    completion code can emit the record carrying it, after its integrity checks (test
//!    functions are the ones the files compile to, no runner or standard-library function
//!    rebound to candidate code, no plugin or hook from candidate code). The exit status is the
//!    sandbox's own (the runner is `exec`ed, no shell marker to forge) and must equal the
//!    runner's own status in that record.
//!
//! A run with evidence is `tampered`: never a verdict, reward 0 (gates: `FailureKind::Tampered`,
//! grading: `tampered`). [`spec`] is what the in-sandbox code is told.

pub mod canary;
pub mod golex;
pub mod gotest;
pub mod gotest_run;
pub mod libtest;
pub mod macro_rules;
pub mod libtest_run;
pub mod records;
pub mod spec;

use super::error::HarnessError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use canary::CanaryMap;
pub use records::{Evidence, GuardRecords};
pub use spec::{GuardMode, GuardSpec};

/// Prefix of the guard's record lines.
pub const RECORD_PREFIX: &str = "@@EXECCRITIC-GUARD@@";
/// Prefix of the canary planner's answer line.
pub const CANARY_PREFIX: &str = "@@EXECCRITIC-CANARY@@";
/// The guard (loaded by `site` in every Python process of a guarded run).
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");
/// The canary planner (run with `python -I -S` before any repository code).
pub const PLANNER: &str = include_str!("canary.py");
/// The planner's file name in the guard directory.
pub const PLANNER_FILE: &str = "execcritic_canary.py";
/// Where a local sandbox sees the guard directory (bound read-only).
pub const GUARD_DIR: &str = "/.execcritic-guard";

/// The guard's files in a host directory (`$EXECCRITIC_CACHE/guard/<hash>`, written once,
/// read-only), for sandboxes that bind it.
pub fn host_dir() -> Result<&'static Path, HarnessError> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = DIR.get_or_init(|| {
        use sha2::Digest;
        use std::os::unix::fs::PermissionsExt;
        let mut h = sha2::Sha256::new();
        h.update(SITECUSTOMIZE.as_bytes());
        h.update(PLANNER.as_bytes());
        let tag = hex::encode(&h.finalize()[..8]);
        // In the cache, not the temp directory: commands leave their temp directory empty.
        let root = crate::task::suite::cache_dir().join("guard");
        let _ = std::fs::create_dir_all(&root);
        let dir = root.join(tag.clone());
        let ready = dir.join("sitecustomize.py").is_file() && dir.join(PLANNER_FILE).is_file();
        if !ready {
            let tmp = root.join(format!(
                ".tmp-{tag}-{}-{}",
                std::process::id(),
                rand::random::<u32>()
            ));
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(&tmp)?;
                std::fs::write(tmp.join("sitecustomize.py"), SITECUSTOMIZE)?;
                std::fs::write(tmp.join(PLANNER_FILE), PLANNER)?;
                for f in ["sitecustomize.py", PLANNER_FILE] {
                    std::fs::set_permissions(tmp.join(f), std::fs::Permissions::from_mode(0o444))?;
                }
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o555))?;
                match std::fs::rename(&tmp, &dir) {
                    Ok(()) => Ok(()),
                    // Another process published it first.
                    Err(_) if dir.join("sitecustomize.py").is_file() => {
                        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
                        let _ = std::fs::remove_dir_all(&tmp);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            };
            write().map_err(|e| format!("writing the guard to {}: {e}", dir.display()))?;
        }
        // The files are ours and unchanged (the directory name is their hash).
        let ok = std::fs::read_to_string(dir.join("sitecustomize.py")).ok().as_deref()
            == Some(SITECUSTOMIZE)
            && std::fs::read_to_string(dir.join(PLANNER_FILE)).ok().as_deref() == Some(PLANNER);
        if !ok {
            return Err(format!("{} does not hold this build's guard", dir.display()));
        }
        Ok(dir)
    });
    match r {
        Ok(p) => Ok(p.as_path()),
        Err(e) => Err(HarnessError::Other(e.clone())),
    }
}

/// Reference runs on Base already made in this process, by what they ran (the gate: Base, bundle
/// and sandbox; grading: Base, official tests and sandbox).
pub fn reference_cache() -> &'static std::sync::Mutex<std::collections::HashMap<String, GuardRecords>> {
    static C: OnceLock<std::sync::Mutex<std::collections::HashMap<String, GuardRecords>>> =
        OnceLock::new();
    C.get_or_init(Default::default)
}

/// The records of the reference run named `key`: from [`reference_cache`], or made by `run`
/// (a run that could not be prepared gives empty records) and cached.
pub async fn reference_records<F, Fut, E>(
    key: String,
    run: F,
) -> Result<GuardRecords, crate::harness::HarnessError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Result<GuardRecords, E>, crate::harness::HarnessError>>,
{
    if let Some(rec) = reference_cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(rec);
    }
    let rec = match run().await? {
        Ok(r) => r,
        Err(_) => Default::default(),
    };
    if let Ok(mut c) = reference_cache().lock() {
        c.insert(key, rec.clone());
    }
    Ok(rec)
}

/// What the guard established about one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GuardOutcome {
    /// The run was started under the guard at all.
    pub guarded: bool,
    pub records: GuardRecords,
    /// The designated runner completed and said so with the run's nonce.
    pub authenticated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryMap>,
    /// Mutant and control outcomes, by their run names.
    pub canary_statuses: std::collections::BTreeMap<String, super::logparse::TestStatus>,
    /// Why the run is not a behavioural verdict (empty: it is one).
    pub evidence: Vec<Evidence>,
    /// Events that are evidence only if a reference run on Base does not show them.
    pub unresolved: Vec<records::Event>,
}

impl GuardOutcome {
    /// Whether a reference run is needed to finish judging.
    pub fn needs_reference(&self) -> bool {
        !self.unresolved.is_empty()
            || self
                .records
                .done
                .as_ref()
                .is_some_and(|d| d.changed.iter().any(|c| !c.suspect && c.runner))
    }

    /// Add what a reference run shows the candidate did beyond Base.
    pub fn judge_with_reference(&mut self, reference: &GuardRecords) {
        let changed = self
            .records
            .done
            .as_ref()
            .map(|d| d.changed.clone())
            .unwrap_or_default();
        let more = records::against_reference(&self.unresolved, &changed, reference);
        self.evidence.extend(more);
        self.unresolved.clear();
    }

    /// One line per piece of evidence (for feedback and results).
    pub fn evidence_lines(&self) -> Vec<String> {
        self.evidence.iter().map(|e| e.to_string()).collect()
    }
}
