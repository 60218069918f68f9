//! Executing a check inside a sandbox: the patch-apply chain and running a test command with
//! its exit code captured after a unique nonce marker, then parsing the log.
//!
//! Applying: every patch is parsed by the one parser ([`super::diff`]), its paths are checked,
//! and only the re-serialisation of what was parsed is handed to `git apply` — never the
//! original text, never `patch`. The chain is `git apply` → `git apply --3way` (needs the
//! preimage blobs named on the `index` lines; a sanitised repository may lack them, then it
//! fails cleanly) → `git apply -C1` (the bounded "fuzz": at least one line of context must
//! still match on each side of every hunk). All three apply exactly the checked file
//! operations; the tree is restored between attempts.
//!
//! Running: [`runner_guard`] is the runtime half of the tamper defence: pytest is started with
//! the ORIGINAL Base configuration (`-c`, `--rootdir`, the config file restored from Base), no
//! cache provider, no bytecode writes and no user site directory.

use super::diff::{path_problem, Patch};
use super::error::HarnessError;
use super::logparse::{parse_log, ParsedLog, TestStatus};
use super::sandbox::{shell_quote, Sandbox};
use super::selector::CommandRunner;
use rand::Rng;
use std::path::PathBuf;
use std::time::Duration;

const GIT_ID: &str =
    "git -c user.name=execcritic -c user.email=harness@execcritic -c commit.gpgsign=false";

/// How a patch was applied, or why it could not be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    Applied { method: &'static str },
    Failed { diagnostics: String },
}

/// The text the harness applies for `patch`: the one parser's re-serialisation, after every
/// path it touches was checked (`Err` names the class: `malformed_patch`, `unsupported_patch_format`,
/// `no_file_headers`, `unsafe_path`).
pub fn checked_patch_text(patch: &str) -> Result<String, String> {
    let parsed = Patch::parse(patch).map_err(|e| format!("{}: {e}", e.class()))?;
    for f in &parsed.files {
        for p in f.paths() {
            if let Some(problem) = path_problem(p) {
                return Err(format!("unsafe_path: `{}` ({problem:?})", p.escape_default()));
            }
        }
    }
    Ok(parsed.to_git())
}

/// Apply `patch` to the sandbox's working tree (on top of whatever is there). Between attempts
/// the tree is restored to the snapshot taken before the first attempt.
pub async fn apply_patch(
    sb: &dyn Sandbox,
    patch: &str,
    name: &str,
) -> Result<ApplyOutcome, HarnessError> {
    if patch.trim().is_empty() {
        return Ok(ApplyOutcome::Applied { method: "empty" });
    }
    let body = match checked_patch_text(patch) {
        Ok(b) => b,
        Err(diagnostics) => return Ok(ApplyOutcome::Failed { diagnostics }),
    };
    let file = format!("/tmp/.execcritic/{name}.patch");
    sb.put_file(&file, body.as_bytes()).await?;
    let t = Duration::from_secs(120);
    let f = shell_quote(&file);
    let attempts: [(&'static str, String); 3] = [
        ("git apply", format!("git apply --whitespace=nowarn {f}")),
        (
            "git apply --3way",
            format!("git apply --3way --whitespace=nowarn {f}"),
        ),
        ("git apply -C1", format!("git apply -C1 --whitespace=nowarn {f}")),
    ];
    let mut diagnostics = String::new();
    for (k, (method, cmd)) in attempts.into_iter().enumerate() {
        if k == 1 {
            // `git apply` is atomic, so the tree is untouched; snapshot it before the attempts
            // that may leave partial changes.
            let snap = sb.exec(&format!("git add -A && {GIT_ID} commit -q --allow-empty --no-verify -m execcritic-snapshot"), t).await?;
            if !snap.success() {
                return Err(HarnessError::Other(format!(
                    "snapshot before applying {name} failed: {}",
                    snap.output
                )));
            }
        }
        let out = sb.exec(&cmd, t).await?;
        if out.success() {
            return Ok(ApplyOutcome::Applied { method });
        }
        if k == 0 {
            diagnostics.push_str(&format!("$ {method}\n{}\n", out.output.trim_end()));
            continue;
        }
        diagnostics.push_str(&format!("$ {method}\n{}\n", out.output.trim_end()));
        let restore = sb
            .exec("git reset -q --hard HEAD && git clean -q -fd", t)
            .await?;
        if !restore.success() {
            return Err(HarnessError::Other(format!(
                "restoring after a failed apply: {}",
                restore.output
            )));
        }
    }
    Ok(ApplyOutcome::Failed {
        diagnostics: bound_tail(&diagnostics, 12_000),
    })
}

/// Keep the last `max` characters.
pub fn bound_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    s.chars().skip(n - max).collect()
}

/// The result of running a test command.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// Exit code read from the nonce marker (`None` if the marker is missing).
    pub rc: Option<i32>,
    pub marker_found: bool,
    /// Set from the sandbox's own timeout flag (never from the output text).
    pub timed_out: bool,
    /// Bounded output with the marker line removed.
    pub output: String,
    pub parsed: ParsedLog,
    /// The runner whose report `parsed` is (decides what its exit codes mean).
    pub runner: CommandRunner,
    pub command: String,
    /// Wall time of the whole sandboxed command (preparation steps included).
    pub duration: Duration,
    /// The test command's own runtime, measured inside the sandbox around the command alone
    /// (`None` when the marker is missing). This is "harness time" in the revision-loop split.
    pub test_duration: Option<Duration>,
    pub log_path: Option<PathBuf>,
}

impl RunRecord {
    /// The run is pytest's (exit codes 2–5 are runner-level outcomes).
    pub fn is_pytest(&self) -> bool {
        self.runner == CommandRunner::Pytest
    }

    /// Status of each declared node; a parametrised pytest node aggregates its instances (worst
    /// status); `None` when the runner did not report it.
    pub fn node_statuses(&self, nodes: &[String]) -> Vec<(String, Option<TestStatus>)> {
        nodes
            .iter()
            .map(|n| {
                let mut st: Option<TestStatus> = None;
                for (id, s) in &self.parsed.statuses {
                    let matches =
                        id == n || (id.starts_with(n.as_str()) && id[n.len()..].starts_with('['));
                    if matches && st.is_none_or(|cur| s.rank() > cur.rank()) {
                        st = Some(*s);
                    }
                }
                (n.clone(), st)
            })
            .collect()
    }
}

/// Run `command` in the sandbox, reading its exit code from a nonce marker, and parse the log.
pub async fn run_tests(
    sb: &dyn Sandbox,
    runner: CommandRunner,
    command: &str,
    timeout: Duration,
) -> Result<RunRecord, HarnessError> {
    run_tests_keeping(sb, runner, command, timeout, &[]).await
}

/// [`run_tests`] whose [`runner_guard`] keeps the working-tree version of the `keep` paths
/// (official grading: the configuration as the official test patch left it).
pub async fn run_tests_keeping(
    sb: &dyn Sandbox,
    runner: CommandRunner,
    command: &str,
    timeout: Duration,
    keep: &[String],
) -> Result<RunRecord, HarnessError> {
    let guard = runner_guard(runner, sb.base_commit(), keep);
    match run_after(sb, &[("guard", guard)], runner, command, timeout, false).await? {
        Staged::Ran(r) => Ok(r),
        Staged::StepFailed(step) => Err(HarnessError::Other(format!(
            "unexpected failed step {step}"
        ))),
    }
}

/// pytest's configuration files in its order of precedence, with the section that makes each
/// one the configuration (`None`: the file always is).
const PYTEST_CONFIGS: &[(&str, Option<&str>)] = &[
    ("pytest.toml", None),
    (".pytest.toml", None),
    ("pytest.ini", None),
    (".pytest.ini", None),
    ("pyproject.toml", Some(r"^\[tool\.pytest(\.ini_options)?\]")),
    ("tox.ini", Some(r"^\[pytest\]")),
    ("setup.cfg", Some(r"^\[tool:pytest\]")),
];

/// The runtime tamper defence, as a preparation step (shell) run after the patches are applied
/// and before the tests: for pytest, the Base commit's configuration file (the first of
/// [`PYTEST_CONFIGS`] that configures pytest at Base) is restored from Base — unless listed in
/// `keep` — and named explicitly with `-c` and `--rootdir` through `PYTEST_ADDOPTS`, so no
/// patched or added configuration file can add options, plugins or test paths; without one at
/// Base an empty configuration outside the workspace is used. For every runner: no bytecode
/// is written (`PYTHONDONTWRITEBYTECODE`), the user site directory is off
/// (`PYTHONNOUSERSITE`), `PYTHONSTARTUP`/`PYTHONINSPECT` are unset, and pytest's cache
/// provider is off. The step exports variables, so it must run in the test command's shell.
pub fn runner_guard(runner: CommandRunner, base_commit: &str, keep: &[String]) -> String {
    let mut g = String::from(
        "export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1; unset PYTHONSTARTUP PYTHONINSPECT PYTEST_PLUGINS",
    );
    if runner != CommandRunner::Pytest {
        return g;
    }
    let base = shell_quote(base_commit);
    g.push_str("\n__ec_cfg=''; __ec_ok=1\n");
    for (file, section) in PYTEST_CONFIGS {
        let q = shell_quote(file);
        let qualifies = match section {
            None => "true".to_string(),
            Some(re) => format!("git show {base}:{q} | grep -Eq {}", shell_quote(re)),
        };
        let restore = if keep.iter().any(|k| k == file) {
            "true".to_string()
        } else {
            format!("git show {base}:{q} > {q}")
        };
        g.push_str(&format!(
            "if [ -z \"$__ec_cfg\" ] && git cat-file -e {base}:{q} 2>/dev/null && {qualifies}; then {restore} && __ec_cfg=\"$PWD\"/{q} || __ec_ok=0; fi\n"
        ));
    }
    g.push_str(
        "if [ -z \"$__ec_cfg\" ]; then __ec_dir=$(mktemp -d /tmp/.execcritic-cfg.XXXXXX) && printf '[pytest]\\n' > \"$__ec_dir/pytest.ini\" && __ec_cfg=\"$__ec_dir/pytest.ini\" || __ec_ok=0; fi\n\
         export PYTEST_ADDOPTS=\"-c $__ec_cfg --rootdir=$PWD -p no:cacheprovider\"; [ \"$__ec_ok\" = 1 ]",
    );
    g
}

/// Outcome of [`run_after`].
#[derive(Clone, Debug)]
pub enum Staged {
    /// Every preparation step succeeded and the tests ran.
    Ran(RunRecord),
    /// The named preparation step failed; nothing else ran.
    StepFailed(String),
}

/// Run the preparation `steps` (name, shell command; output discarded) and then the test
/// `command`, all in one sandboxed command (one sandbox start), as an ephemeral run (see
/// [`Sandbox::exec_ephemeral`]) when `ephemeral`. Used by the gates' fast path.
pub async fn run_after(
    sb: &dyn Sandbox,
    steps: &[(&str, String)],
    runner: CommandRunner,
    command: &str,
    timeout: Duration,
    ephemeral: bool,
) -> Result<Staged, HarnessError> {
    let nonce: u64 = rand::rng().random();
    let marker = format!("__EXECCRITIC_RC_{nonce:016x}__=");
    let step_marker = format!("__EXECCRITIC_STEP_{nonce:016x}__=");
    let mut script = String::new();
    for (name, cmd) in steps {
        script.push_str(&format!(
            "{{ {cmd}\n}} >/dev/null 2>&1 || {{ printf '\\n%s%s\\n' '{step_marker}' '{name}'; exit 0; }}\n"
        ));
    }
    // The marker line carries the exit code and bash's EPOCHREALTIME before and after the
    // command, so the test command's own runtime is known apart from the preparation steps.
    script.push_str(&format!(
        "export COLUMNS=400\n__execcritic_t0=$EPOCHREALTIME\n{command}\n__execcritic_rc=$?; printf '\\n%s%d %s %s\\n' '{marker}' \"$__execcritic_rc\" \"$__execcritic_t0\" \"$EPOCHREALTIME\""
    ));
    let out = if ephemeral {
        sb.exec_ephemeral(&script, timeout).await?
    } else {
        sb.exec(&script, timeout).await?
    };
    let mut rc = None;
    let mut test_duration = None;
    let mut kept = Vec::new();
    for line in out.output.lines() {
        if let Some(step) = line.strip_prefix(&step_marker) {
            if !out.timed_out {
                return Ok(Staged::StepFailed(step.trim().to_string()));
            }
        } else if let Some(v) = line.strip_prefix(&marker) {
            let mut fields = v.split_whitespace();
            rc = fields.next().and_then(|c| c.parse::<i32>().ok());
            test_duration = elapsed_between(fields.next(), fields.next());
        } else {
            kept.push(line);
        }
    }
    let output = kept.join("\n");
    let parsed = parse_log(runner, &output);
    Ok(Staged::Ran(RunRecord {
        rc: if out.timed_out { None } else { rc },
        marker_found: rc.is_some(),
        timed_out: out.timed_out,
        output,
        parsed,
        runner,
        command: command.to_string(),
        duration: out.duration,
        test_duration,
        log_path: out.log_path,
    }))
}

/// Seconds between two `EPOCHREALTIME` readings (`1701234567.123456`; a locale may write `,`).
fn elapsed_between(t0: Option<&str>, t1: Option<&str>) -> Option<Duration> {
    let secs = |t: Option<&str>| t?.replace(',', ".").parse::<f64>().ok();
    let d = secs(t1)? - secs(t0)?;
    (d.is_finite() && d >= 0.0).then(|| Duration::from_secs_f64(d))
}
