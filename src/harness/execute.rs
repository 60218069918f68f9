//! Executing a check inside a sandbox: the patch-apply chain, and running a test command under
//! the runtime guard ([`super::guard`]) — the runner `exec`ed so the sandbox's exit status is its
//! own, the run's nonce on its stdin, canaries planted in the judged tests — then parsing the
//! runner's report and judging what the guard recorded.
//!
//! Applying: every patch is parsed by the one parser ([`super::diff`]), its paths are checked,
//! and only the re-serialisation of what was parsed is handed to `git apply` — never the
//! original text, never `patch`. The chain is `git apply` → `git apply --3way` (needs the
//! preimage blobs named on the `index` lines; a sanitised repository may lack them, then it
//! fails cleanly) → `git apply -C1` (the bounded "fuzz": at least one line of context must
//! still match on each side of every hunk). All three apply exactly the checked file
//! operations; the tree is restored between attempts.
//!
//! Running: [`runner_guard`] starts pytest with the ORIGINAL Base configuration (`-c`,
//! `--rootdir`, the config file restored from Base), no cache provider, no bytecode writes and no
//! user site directory; [`run_after`] runs the steps and the guarded runner in one command.

use super::diff::{path_problem, Patch};
use super::error::HarnessError;
use super::guard::{self, spec::CanaryNode, GuardMode, GuardOutcome, GuardSpec};
use super::logparse::{parse_log, ParsedLog, TestStatus, MAX_LOG_BYTES};
use super::sandbox::{shell_quote, Sandbox, HANDOFF_DIR};
use super::selector::CommandRunner;
use rand::Rng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const GIT_ID: &str =
    "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git -c user.name=execcritic -c user.email=harness@execcritic -c commit.gpgsign=false";

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
    let g = super::sandbox::TRUSTED_GIT;
    let attempts: [(&'static str, String); 3] = [
        ("git apply", format!("{g}; git apply --whitespace=nowarn {f}")),
        (
            "git apply --3way",
            format!("{g}; git apply --3way --whitespace=nowarn {f}"),
        ),
        ("git apply -C1", format!("{g}; git apply -C1 --whitespace=nowarn {f}")),
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
            .exec(&format!("{g}; git reset -q --hard HEAD && git clean -q -fd"), t)
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
    /// The runner's exit status as the sandbox observed it (`None` on a timeout, or when the
    /// sandbox could not observe the run).
    pub rc: Option<i32>,
    /// The sandbox observed the command's exit (its own exit status, not text the command
    /// printed).
    pub exit_observed: bool,
    /// Set from the sandbox's own timeout flag (never from the output text).
    pub timed_out: bool,
    /// The runner's output (bounded), the guard's and the planner's lines removed.
    pub output: String,
    /// Parsed from the runner's own report, under the tests' own names (canary names undone).
    pub parsed: ParsedLog,
    /// The runner whose report `parsed` is (decides what its exit codes mean).
    pub runner: CommandRunner,
    pub command: String,
    /// Wall time of the whole sandboxed command (preparation steps included).
    pub duration: Duration,
    /// The test command's own runtime, measured inside the sandbox around the runner alone
    /// (`None` when the runner did not complete).
    pub test_duration: Option<Duration>,
    pub log_path: Option<PathBuf>,
    /// What the runtime guard established (evidence of tampering, the authenticated
    /// completion, the canaries): see [`super::guard`].
    pub guard: GuardOutcome,
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

/// A runner command line as a guarded run executes it: environment assignments exported first,
/// then the runner's words, `exec`ed so that the sandbox's exit status is the runner's own. A word
/// marked with a canary node index is a selector the planner replaces (see [`guard::canary`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedCommand {
    pub runner: CommandRunner,
    /// `NAME=value` assignments before the runner.
    pub env: Vec<String>,
    pub words: Vec<(String, Option<usize>)>,
}

impl GuardedCommand {
    /// Split a shell command line (a validated bundle command, or an official one). Words equal to
    /// one of `selectors` are marked with its index (sympy: the name after `-k`).
    pub fn parse(
        runner: CommandRunner,
        command: &str,
        selectors: &[String],
    ) -> Result<GuardedCommand, HarnessError> {
        let tokens = shlex::split(command).ok_or_else(|| {
            HarnessError::Other(format!("cannot split the test command `{command}`"))
        })?;
        let mut env = Vec::new();
        let mut words = Vec::new();
        for t in tokens {
            let assignment = words.is_empty()
                && t.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !k.starts_with(|c: char| c.is_ascii_digit())
                });
            if assignment {
                env.push(t);
                continue;
            }
            let canonical = t.strip_prefix("./").unwrap_or(&t);
            let sel = selectors.iter().position(|s| s == canonical || *s == t);
            words.push((t, sel));
        }
        if words.is_empty() {
            return Err(HarnessError::Other(format!("empty test command `{command}`")));
        }
        Ok(GuardedCommand { runner, env, words })
    }

    /// The script a script runner runs (`tests/runtests.py`, `bin/test`), workspace-relative.
    pub fn script(&self) -> Option<String> {
        let w: Vec<&str> = self.words.iter().map(|(w, _)| w.as_str()).collect();
        let first = *w.first()?;
        let base = first.rsplit('/').next().unwrap_or(first);
        let script = if base.starts_with("python") { w.get(1).copied()? } else { first };
        if script.starts_with('-') || script == "pytest" || script == "py.test" {
            return None;
        }
        Some(script.strip_prefix("./").unwrap_or(script).to_string())
    }

    pub fn display(&self) -> String {
        self.env
            .iter()
            .cloned()
            .chain(self.words.iter().map(|(w, _)| shell_quote_word(w)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote_word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+[]".contains(c)) {
        w.to_string()
    } else {
        shell_quote(w)
    }
}

/// Everything a guarded run needs: the command, what the guard is told, the judged tests the
/// canary planner rewrites (empty: no canaries).
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub command: GuardedCommand,
    pub spec: GuardSpec,
    pub canary_nodes: Vec<CanaryNode>,
    /// The ids the verdict rests on (declared nodes; FAIL_TO_PASS and PASS_TO_PASS): the report
    /// must agree with what the runner recorded for these.
    pub judged: Vec<String>,
}

impl RunPlan {
    /// A plan with nothing under suspicion and no canaries (a reference run, or a caller that
    /// judges no candidate).
    pub fn plain(command: GuardedCommand, sb: &dyn Sandbox) -> RunPlan {
        let spec = GuardSpec::new(GuardMode::Reference, command.runner, sb.workdir(), HANDOFF_DIR);
        RunPlan {
            command,
            spec,
            canary_nodes: Vec::new(),
            judged: Vec::new(),
        }
    }
}

/// Run `command` in the sandbox under the guard and parse the log.
pub async fn run_tests(
    sb: &dyn Sandbox,
    plan: RunPlan,
    timeout: Duration,
) -> Result<RunRecord, HarnessError> {
    run_tests_keeping(sb, plan, timeout, &[]).await
}

/// [`run_tests`] whose [`runner_guard`] keeps the working-tree version of the `keep` paths
/// (official grading: the configuration as the official test patch left it).
pub async fn run_tests_keeping(
    sb: &dyn Sandbox,
    plan: RunPlan,
    timeout: Duration,
    keep: &[String],
) -> Result<RunRecord, HarnessError> {
    let guard = runner_guard(plan.command.runner, sb.base_commit(), keep);
    match run_after(sb, &[("guard", guard)], plan, timeout, false).await? {
        Staged::Ran(r) => Ok(r),
        Staged::StepFailed(step) => Err(HarnessError::Other(format!(
            "preparing the guarded run failed at step {step}"
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

/// Where the planner (or the harness) leaves the final command line, NUL-separated.
const ARGS_FILE: &str = "/tmp/.execcritic-run/args";

/// Run the preparation `steps` (name, shell command; output discarded, stdin closed), then the
/// plan's runner under the guard, all in one sandboxed command (one sandbox start), as an
/// ephemeral run (see [`Sandbox::exec_ephemeral`]) when `ephemeral`:
/// the guard and its spec are put in place, the canary planner rewrites the judged tests (before
/// any repository code runs), and the runner is `exec`ed with the run's nonce on its stdin. The
/// exit status is the sandbox's; the guard's records and the planner's answer are read back and
/// judged ([`guard`]).
pub async fn run_after(
    sb: &dyn Sandbox,
    steps: &[(&str, String)],
    plan: RunPlan,
    timeout: Duration,
    ephemeral: bool,
) -> Result<Staged, HarnessError> {
    let nonce = format!("{:032x}", rand::rng().random::<u128>());
    let step_marker = format!("__EXECCRITIC_STEP_{}__=", &nonce[..16]);
    let t0_marker = format!("__EXECCRITIC_T0_{}__=", &nonce[..16]);
    let gdir = sb.guard_dir().await?;
    let RunPlan {
        command,
        mut spec,
        canary_nodes,
        judged,
    } = plan;
    spec.script = match command.runner {
        CommandRunner::Django | CommandRunner::Sympy => command.script(),
        _ => None,
    };
    let canary_on = !canary_nodes.is_empty();
    spec.test_files = canary_nodes.iter().map(|n| n.path.clone()).collect();
    spec.test_files.dedup();
    let args_src = if canary_on {
        spec.canary = Some(guard::canary::spec(
            command.runner,
            canary_nodes,
            &command.words,
            ARGS_FILE,
        ));
        ARGS_FILE.to_string()
    } else {
        let mut nul = Vec::new();
        for (w, _) in &command.words {
            nul.extend_from_slice(w.as_bytes());
            nul.push(0);
        }
        let f = format!("{HANDOFF_DIR}/guard-args");
        sb.put_file(&f, &nul).await?;
        f
    };
    let spec_file = format!("{HANDOFF_DIR}/guard-spec.json");
    sb.put_file(&spec_file, spec.to_json().as_bytes()).await?;
    let mut script = String::new();
    for (name, cmd) in steps {
        script.push_str(&format!(
            "{{ {cmd}\n}} </dev/null >/dev/null 2>&1 || {{ printf '\\n%s%s\\n' '{step_marker}' '{name}'; exit 0; }}\n"
        ));
    }
    let fail = |name: &str| format!("{{ printf '\\n%s%s\\n' '{step_marker}' '{name}'; exit 0; }}");
    let g = shell_quote(&gdir);
    let sf = shell_quote(&spec_file);
    script.push_str(&format!(
        "export COLUMNS=400 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 EXECCRITIC_GUARD_SPEC={sf}\n\
         export PYTHONPATH={g}${{PYTHONPATH:+:$PYTHONPATH}}\n"
    ));
    for a in &command.env {
        script.push_str(&format!("export {}\n", shell_quote(a)));
    }
    if canary_on {
        script.push_str(&format!(
            "__ec_py=$(command -v python3 || command -v python) && mkdir -p /tmp/.execcritic-run && \"$__ec_py\" -I -S {g}/{} {sf} </dev/null 2>&1 || {}\n",
            guard::PLANNER_FILE,
            fail("canary")
        ));
    }
    script.push_str(&format!(
        "mapfile -d '' -t __ec_args < {} || {}\n\
         printf '\\n%s%s\\n' '{t0_marker}' \"$EPOCHREALTIME\"\n\
         exec \"${{__ec_args[@]}}\"\n",
        shell_quote(&args_src),
        fail("args")
    ));
    let input = format!("{nonce}\n");
    let out = sb
        .exec_input(&script, timeout, input.as_bytes(), ephemeral)
        .await?;
    // The on-disk log when the bounded output lost its middle: the guard's records are read
    // from both; the runner's report from the log when the log is whole (a long report does not
    // fit the bounded output's tail), else from the bounded output.
    let full = match (&out.log_path, out.truncated) {
        (Some(p), true) => std::fs::read(p)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    };
    let text: &str = match &full {
        Some(f) if f.len() <= MAX_LOG_BYTES && !f.contains("\n[execcritic: log truncated at ") => f,
        _ => &out.output,
    };
    let mut t0 = None;
    let mut body = String::with_capacity(text.len());
    for line in text.lines() {
        if t0.is_none() {
            if let Some(step) = line.strip_prefix(&step_marker) {
                if !out.timed_out {
                    return Ok(Staged::StepFailed(step.trim().to_string()));
                }
                continue;
            }
            if let Some(v) = line.strip_prefix(&t0_marker) {
                t0 = v.trim().replace(',', ".").parse::<f64>().ok().or(Some(f64::NAN));
                continue;
            }
        }
        body.push_str(line);
        body.push('\n');
    }
    let (runner_text, records, canary_json) =
        guard::records::split_output(&body, full.as_deref(), &nonce);
    // A report over the parsers' bound (a sandbox whose output cap was raised past it) is no
    // report: the run is incomplete (`classify::completion`), never graded from a part of it.
    let mut parsed = parse_log(command.runner, &runner_text).unwrap_or_default();
    let rc = if out.timed_out { None } else { out.exit_code };
    let outcome = judge(
        &spec,
        records,
        canary_json.as_deref(),
        canary_on,
        &mut parsed,
        rc,
        command.runner,
        &judged,
    );
    let test_duration = match (t0, outcome.records.done.as_ref().and(done_time(&runner_text, &body))) {
        (Some(a), Some(b)) if a.is_finite() => elapsed_between(a, b),
        _ => None,
    };
    // What the agent may see: the canaries taken out of the report.
    let output = match &outcome.canary {
        Some(map) => guard::canary::scrub(&runner_text, map, &outcome.canary_statuses),
        None => runner_text,
    };
    Ok(Staged::Ran(RunRecord {
        rc,
        exit_observed: rc.is_some(),
        timed_out: out.timed_out,
        output,
        parsed,
        runner: command.runner,
        command: command.display(),
        duration: out.duration,
        test_duration,
        log_path: out.log_path,
        guard: outcome,
    }))
}

/// The guard's verdict on one run: events, completion, exit status, results and canaries.
fn judge(
    spec: &GuardSpec,
    records: guard::GuardRecords,
    canary_json: Option<&str>,
    canary_on: bool,
    parsed: &mut ParsedLog,
    rc: Option<i32>,
    runner: CommandRunner,
    judged: &[String],
) -> GuardOutcome {
    use guard::records::judge_events;
    let (mut evidence, unresolved) = judge_events(&records, spec.mode);
    let mut outcome = GuardOutcome {
        guarded: true,
        authenticated: records.done.is_some(),
        ..Default::default()
    };
    // The runner's own status, said by the guard, is the exit status the sandbox saw.
    if let (Some(done), Some(rc)) = (&records.done, rc) {
        if let Some(own) = done.rc {
            if own != rc && runner == CommandRunner::Pytest {
                evidence.push(guard::Evidence {
                    class: "exit_status".into(),
                    detail: format!(
                        "the runner finished with status {own}, the process exited with {rc}"
                    ),
                });
            }
        }
    }
    if canary_on {
        match canary_json.and_then(guard::CanaryMap::parse) {
            Some(map) => {
                // Statuses under the run's names (mutants and controls included) for the check.
                let run_names = parsed.statuses.clone();
                map.restore_log(parsed);
                // The authenticated results where the runner gives them, else the report.
                let from_done: BTreeMap<String, TestStatus> = records
                    .done
                    .as_ref()
                    .map(|d| {
                        d.results
                            .iter()
                            .filter_map(|(k, v)| status_of(v).map(|s| (k.clone(), s)))
                            .collect()
                    })
                    .unwrap_or_default();
                let statuses = if from_done.is_empty() {
                    run_names
                } else {
                    from_done.clone()
                };
                for v in map.violations(&statuses) {
                    evidence.push(guard::Evidence {
                        class: "canary".into(),
                        detail: v,
                    });
                }
                outcome.canary_statuses = map.split_statuses(&statuses).1;
                // The report must agree with the guard where both speak.
                if !from_done.is_empty() {
                    let (real_done, _) = map.split_statuses(&from_done);
                    compare_reports(&real_done, &parsed.statuses, judged, &mut evidence);
                }
                outcome.canary = Some(map);
            }
            None => evidence.push(guard::Evidence {
                class: "canary".into(),
                detail: "the canary planner gave no answer".into(),
            }),
        }
    } else if let Some(done) = &records.done {
        let from_done: BTreeMap<String, TestStatus> = done
            .results
            .iter()
            .filter_map(|(k, v)| status_of(v).map(|s| (k.clone(), s)))
            .collect();
        if !from_done.is_empty() {
            compare_reports(&from_done, &parsed.statuses, judged, &mut evidence);
        }
    }
    outcome.evidence = evidence;
    outcome.unresolved = unresolved;
    outcome.records = records;
    outcome
}

/// Among the judged tests (and their parameter instances): one the guard saw fail that the
/// report shows passed, or the other way round; one the report shows passed that the runner
/// never ran.
fn compare_reports(
    guard_view: &BTreeMap<String, TestStatus>,
    report: &BTreeMap<String, TestStatus>,
    judged: &[String],
    evidence: &mut Vec<guard::Evidence>,
) {
    let canon = |id: &str| crate::harness::selector::canonical_label(id);
    let guard_view: BTreeMap<String, TestStatus> =
        guard_view.iter().map(|(k, v)| (canon(k), *v)).collect();
    let judged: Vec<String> = judged.iter().map(|j| canon(j)).collect();
    let is_judged = |id: &str| {
        judged
            .iter()
            .any(|j| id == j || (id.starts_with(j.as_str()) && id[j.len()..].starts_with('[')))
    };
    for (id, st) in report {
        let id_c = canon(id);
        if !is_judged(&id_c) {
            continue;
        }
        let passed = |s: TestStatus| s == TestStatus::Passed;
        match guard_view.get(&id_c) {
            Some(g) if passed(*g) != passed(*st) => evidence.push(guard::Evidence {
                class: "results_mismatch".into(),
                detail: format!("{id}: the report says {st:?}, the runner recorded {g:?}"),
            }),
            None if passed(*st) && !guard_view.is_empty() => evidence.push(guard::Evidence {
                class: "results_mismatch".into(),
                detail: format!("{id}: the report says passed, the runner never ran it"),
            }),
            _ => {}
        }
    }
}

fn status_of(outcome: &str) -> Option<TestStatus> {
    Some(match outcome {
        "passed" => TestStatus::Passed,
        "failed" => TestStatus::Failed,
        "error" => TestStatus::Error,
        "skipped" => TestStatus::Skipped,
        "xfailed" => TestStatus::XFail,
        "xpassed" => TestStatus::XPass,
        _ => return None,
    })
}

/// The guard's completion time (seconds since the epoch), from its `done` record.
fn done_time(_runner_text: &str, body: &str) -> Option<f64> {
    body.lines()
        .filter_map(|l| l.strip_prefix(guard::RECORD_PREFIX))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j.trim()).ok())
        .filter(|v| v.get("k").and_then(|k| k.as_str()) == Some("done"))
        .find_map(|v| v.get("t").and_then(|t| t.as_f64()))
}


/// Seconds between two wall-clock readings (`EPOCHREALTIME` before the runner, the guard's
/// completion time after it).
fn elapsed_between(t0: f64, t1: f64) -> Option<Duration> {
    let d = t1 - t0;
    (d.is_finite() && d >= 0.0).then(|| Duration::from_secs_f64(d))
}
