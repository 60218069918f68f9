//! One guarded `cargo test` run in a sandbox ([`super::libtest`]'s canaries, end to end).
//!
//! 1. **Plan**: each judged test file is read out of the sandbox, rewritten on the host
//!    ([`plan_file`]) and staged ([`stage`]): the rewrite at a hidden path of a random name, and
//!    at the judged path a stub that `include!`s it. Whatever reads the judged file by name
//!    while the crates compile (`include_str!("../tests/calc.rs")` in the code under test, a
//!    dependency's macro) reads the stub, and nothing can spell the hidden path.
//! 2. **Build**: `cargo test --offline --no-run --message-format=json <args>` in the sandbox,
//!    twice. First the files as written: every crate compiles before any rewrite exists, so code
//!    that reads files while its crate compiles (a dependency's proc macro that lists a
//!    directory) reads the tests as written; a failure here is [`GuardedRun::BuildFailed`]
//!    (Base gate: `collection_error`; never a clean failure). Then, staged, the rewrite: cargo
//!    recompiles what includes a judged file (the judged test targets), and the test binaries
//!    are the artifacts it lists; a failure here means the rewrite broke the files, an
//!    infrastructure error.
//! 3. **Put back**: the judged files as they were, the hidden ones removed (the rewrite names
//!    the copies and their expected values; the run phase must not see it).
//! 4. **Run**: every real test, mutant and control, in random order, each in its own process on a
//!    throw-away copy of the built workspace ([`Sandbox::exec_over_current`]: an empty `/tmp`,
//!    nothing written persists), so no run can leave a mark for the next — counting runs or
//!    remembering which copy came first is not possible. The status is the process's exit
//!    status alone.
//! 5. **Verdict** ([`verdict`]): the real tests' statuses under the caller's node ids, and the
//!    violations that make the run `tampered`.
//!
//! Needs a sandbox with throw-away runs (local, as root, with overlayfs) and a Rust toolchain in
//! it (the local allow-list binds the host's sysroot). The build is `--offline`: a crate's
//! dependencies come from the task's prepared environment when it holds a vendor directory at
//! [`CARGO_VENDOR`] (written once, with network, by an `environment_setup` command such as
//! `cargo vendor /env/cargo-vendor`, and mounted read-only: no candidate can change them), which
//! replaces crates.io for the build ([`vendor_args`]).

use super::libtest::{check_listed, plan_file, run_order, verdict, Judged};
use crate::harness::error::HarnessError;
use crate::harness::logparse::TestStatus;
use crate::harness::sandbox::{shell_quote, Sandbox, WORKDIR};
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Where a task's prepared environment keeps its vendored dependencies.
pub const CARGO_VENDOR: &str = "/env/cargo-vendor";

/// cargo's `--config` arguments replacing crates.io by [`CARGO_VENDOR`] when the sandbox has it.
pub async fn vendor_args(sb: &dyn Sandbox) -> Result<Vec<String>, HarnessError> {
    let probe = sb.exec(&format!("test -d {CARGO_VENDOR}"), Duration::from_secs(30)).await?;
    if probe.exit_code != Some(0) {
        return Ok(Vec::new());
    }
    Ok(vec![
        "--config".into(),
        "source.crates-io.replace-with=\"execcritic-vendor\"".into(),
        "--config".into(),
        format!("source.execcritic-vendor.directory=\"{CARGO_VENDOR}\""),
    ])
}

/// Which test binary of the package a file's tests are compiled into.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Binary {
    /// The library's unit tests (`--lib`).
    Lib,
    /// An integration test target (`--test <name>`).
    Test(String),
    /// A binary target's unit tests (`--bin <name>`).
    Bin(String),
}

impl Binary {
    /// The node id's target part (`lib`, `test/<name>`, `bin/<name>`) and back.
    fn parse(target: &str) -> Option<Binary> {
        match target.split_once('/') {
            None if target == "lib" => Some(Binary::Lib),
            Some(("test", n)) => Some(Binary::Test(n.to_string())),
            Some(("bin", n)) => Some(Binary::Bin(n.to_string())),
            _ => None,
        }
    }

    /// cargo's flags selecting this target.
    pub fn cargo_flags(&self) -> Vec<String> {
        match self {
            Binary::Lib => vec!["--lib".into()],
            Binary::Test(n) => vec!["--test".into(), n.clone()],
            Binary::Bin(n) => vec!["--bin".into(), n.clone()],
        }
    }
}

/// A cargo node id (`<package>/<target>::<test path>`, as `harness::runners::cargo` writes it)
/// split into package, binary and test path.
pub fn split_node(node: &str) -> Option<(&str, Binary, &str)> {
    let (scope, path) = node.split_once("::")?;
    let (package, target) = scope.split_once('/')?;
    Some((package, Binary::parse(target)?, path))
}

/// The files a node's test may live in, most specific first: for a crate root `src/lib.rs` and
/// the path `a::b::tests::t`, `src/a/b/tests.rs`, `src/a/b/tests/mod.rs`, `src/a/b.rs`,
/// `src/a/b/mod.rs`, `src/a.rs`, `src/a/mod.rs`, then the root itself — each with the module
/// path its items have and the test's path inside it.
pub fn candidate_files(root: &str, path: &str) -> Vec<(String, String, String)> {
    let segs: Vec<&str> = path.split("::").collect();
    let dir = root.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    for i in (1..segs.len()).rev() {
        let module = segs[..i].join("/");
        let inside = segs[i..].join("::");
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        for f in [format!("{prefix}{module}.rs"), format!("{prefix}{module}/mod.rs")] {
            out.push((f, segs[..i].join("::"), inside.clone()));
        }
    }
    out.push((root.to_string(), String::new(), path.to_string()));
    out
}

/// Each target's root source file (relative to `workdir`) by `(package, binary)`, from `cargo
/// metadata --format-version 1`.
pub fn target_roots(metadata: &str, workdir: &str) -> Result<BTreeMap<(String, Binary), String>, String> {
    let v: serde_json::Value = serde_json::from_str(metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let mut out = BTreeMap::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let Some(package) = p["name"].as_str() else { continue };
        for t in p["targets"].as_array().into_iter().flatten() {
            let (Some(kind), Some(name), Some(src)) = (t["kind"][0].as_str(), t["name"].as_str(), t["src_path"].as_str()) else {
                continue;
            };
            let binary = match kind {
                "lib" | "rlib" | "proc-macro" | "cdylib" | "staticlib" | "dylib" => Binary::Lib,
                "test" => Binary::Test(name.to_string()),
                "bin" => Binary::Bin(name.to_string()),
                _ => continue,
            };
            let Some(rel) = src.strip_prefix(&format!("{}/", workdir.trim_end_matches('/'))) else {
                continue;
            };
            out.insert((package.to_string(), binary), rel.to_string());
        }
    }
    Ok(out)
}

/// The judged files of cargo node ids: each node's file is the most specific candidate (see
/// [`candidate_files`]) whose text (`texts`: path → source, for the files that exist) has the
/// test at that path.
pub fn judged_files(
    nodes: &[String],
    roots: &BTreeMap<(String, Binary), String>,
    texts: &BTreeMap<String, String>,
) -> Result<Vec<JudgedFile>, String> {
    let mut out: Vec<JudgedFile> = Vec::new();
    for node in nodes {
        let (package, binary, path) = split_node(node).ok_or_else(|| format!("`{node}` is not a cargo node id"))?;
        let root = roots
            .get(&(package.to_string(), binary.clone()))
            .ok_or_else(|| format!("`{node}`: package `{package}` has no such target"))?;
        let (file, module, inside) = find_test(root, path, texts).ok_or_else(|| format!("`{node}`: no #[test] function at that path in {root} or its modules"))?;
        match out.iter_mut().find(|j| j.file == file) {
            Some(j) => j.tests.push((node.clone(), inside)),
            None => out.push(JudgedFile { file, binary, module, tests: vec![(node.clone(), inside)] }),
        }
    }
    Ok(out)
}

/// The file, module and path inside it of the `#[test]` function at `path` of the target whose
/// root is `root`, among `texts` (most specific module file first).
fn find_test(root: &str, path: &str, texts: &BTreeMap<String, String>) -> Option<(String, String, String)> {
    candidate_files(root, path)
        .into_iter()
        .find(|(f, _, inside)| texts.get(f).is_some_and(|t| super::libtest::test_paths(t).is_ok_and(|ps| ps.contains(inside))))
}

/// A file with judged tests.
#[derive(Clone, Debug)]
pub struct JudgedFile {
    /// Path relative to the workspace (`src/lib.rs`, `tests/calc.rs`).
    pub file: String,
    pub binary: Binary,
    /// The crate path of the file's items in its binary (`""` for a crate root, `parse` for
    /// `src/parse.rs`).
    pub module: String,
    /// `(node id, path of the test inside the file)`, e.g. `("calc/lib::tests::adds",
    /// "tests::adds")`.
    pub tests: Vec<(String, String)>,
}

/// Limits of one guarded run.
#[derive(Clone, Debug)]
pub struct RunLimits {
    pub build: Duration,
    pub per_test: Duration,
    pub mutants: usize,
    /// The command's environment assignments (`TZ=UTC`, validated), set for every test run.
    pub env: Vec<String>,
}

/// What a guarded run found.
#[derive(Clone, Debug)]
pub enum GuardedRun {
    /// The build failed (compile error): its diagnostics' tail.
    BuildFailed { output: String },
    /// Statuses by node id, the violations, and each run path's status.
    Judged(Judged),
}

/// Largest judged file read out of a sandbox.
const MAX_FILE: usize = 4 << 20;
/// Bytes per read (hex-encoded they stay under a sandbox's default output cap).
pub const CHUNK: usize = 24 * 1024;

/// Read a workspace file out of the sandbox, byte-exact.
pub(super) async fn read_file(sb: &dyn Sandbox, file: &str) -> Result<Vec<u8>, HarnessError> {
    read_path(sb, &format!("{WORKDIR}/{file}")).await
}

/// Read a file (absolute in-sandbox path) out of the sandbox, byte-exact (at most 4 MiB).
pub async fn read_path(sb: &dyn Sandbox, file: &str) -> Result<Vec<u8>, HarnessError> {
    let path = shell_quote(file);
    let mut out = Vec::new();
    loop {
        // One reader per chunk, no pipe that closes early: `tail | head` ended `tail` with
        // SIGPIPE (status 141 under pipefail) whenever `head` was done before `tail` had written
        // the rest of a file over one chunk, a spurious error seen on real test files.
        let cmd = format!("set -o pipefail; od -An -v -tx1 -j {} -N {CHUNK} {path} | tr -d ' \\n'", out.len());
        let r = sb.exec(&cmd, Duration::from_secs(60)).await?;
        if r.exit_code != Some(0) || r.truncated {
            let said = r.output.trim();
            let said = &said[said.floor_char_boundary(said.len().saturating_sub(600))..];
            return Err(HarnessError::Other(format!("reading {file} in the sandbox (status {:?}{}): {said}", r.exit_code, if r.truncated { ", output truncated" } else { "" })));
        }
        let bytes = hex::decode(r.output.trim()).map_err(|e| HarnessError::Other(format!("reading {file}: {e}")))?;
        let n = bytes.len();
        out.extend(bytes);
        if out.len() > MAX_FILE {
            return Err(HarnessError::Other(format!("{file} is larger than {MAX_FILE} bytes")));
        }
        if n < CHUNK {
            return Ok(out);
        }
    }
}

pub(super) fn check_path(file: &str) -> Result<(), HarnessError> {
    let bad = file.is_empty() || file.starts_with('/') || file.split('/').any(|c| c == ".." || c.is_empty());
    if bad {
        return Err(HarnessError::Other(format!("judged file `{file}` is not a plain relative path")));
    }
    Ok(())
}

/// The guarded run (module doc). `cargo_args` select the package and targets (`-p calc --lib
/// --test calc`) and features; the build adds `--offline --no-run --message-format=json`.
pub async fn run_guarded(
    sb: &dyn Sandbox,
    files: &[JudgedFile],
    cargo_args: &[String],
    limits: &RunLimits,
    rng: &mut (impl Rng + Send),
) -> Result<GuardedRun, HarnessError> {
    if !sb.ephemeral_runs() {
        return Err(HarnessError::Other(
            "a guarded cargo run needs throw-away runs (a local sandbox as root, with overlayfs)".into(),
        ));
    }
    // 1. Plan (nothing is written yet).
    let mut planned = Vec::new();
    for f in files {
        check_path(&f.file)?;
        let original = read_file(sb, &f.file).await?;
        let source = String::from_utf8(original.clone()).map_err(|_| HarnessError::Other(format!("{} is not UTF-8", f.file)))?;
        let inside: Vec<String> = f.tests.iter().map(|(_, p)| p.clone()).collect();
        let plan = plan_file(&f.file, &source, &inside, limits.mutants, rng).map_err(HarnessError::Other)?;
        let staged = stage(&f.file, &f.module, &source, &plan.source, rng.random::<u64>());
        planned.push((f, original, plan, staged));
    }
    // 2. Build. First the files as written: every crate compiles before any rewrite exists, so
    // code that reads files while its crate compiles (a dependency's macro listing a
    // directory, say) reads the tests as written; a failure here is the candidate's build
    // failure. Then the staged rewrite: cargo recompiles only what includes a judged file.
    let args: Vec<String> = cargo_args.iter().map(|a| shell_quote(a)).collect();
    let build = format!(
        "cargo test --offline --no-run --message-format=json {} > /tmp/.execcritic-build.json 2> /tmp/.execcritic-build.err; rc=$?; \
         if [ $rc -ne 0 ]; then tail -c 8000 /tmp/.execcritic-build.err; exit $rc; fi; \
         grep '\"reason\":\"compiler-artifact\"' /tmp/.execcritic-build.json | grep -F '\"test\":true' | grep -F '\"executable\":\"'",
        args.join(" ")
    );
    let as_written = sb.exec(&build, limits.build).await?;
    if as_written.timed_out {
        return Ok(GuardedRun::BuildFailed { output: format!("the build ran past {:?}", limits.build) });
    }
    if as_written.exit_code != Some(0) {
        return Ok(GuardedRun::BuildFailed { output: as_written.output });
    }
    // Stage each rewrite with the judged file's own modification time, so that cargo finds
    // nothing newer than the first build (no build script runs again, no crate that read the
    // judged file compiles again), and remove the judged targets' binaries of the first build:
    // cargo builds those, and only those, again.
    let first = artifacts(&as_written.output);
    let mut mtimes = Vec::new();
    for (f, _, _, staged) in &planned {
        let path = format!("{WORKDIR}/{}", f.file);
        let hidden = format!("{WORKDIR}/{}", staged.hidden);
        let mtime = sb.exec(&format!("stat -c %.9Y {}", shell_quote(&path)), Duration::from_secs(30)).await?;
        let mtime = mtime.output.trim().to_string();
        if mtime.is_empty() || !mtime.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return Err(HarnessError::Other(format!("the modification time of {}: `{mtime}`", f.file)));
        }
        sb.put_file(&hidden, staged.included.as_bytes()).await?;
        sb.put_file(&path, staged.stub.as_bytes()).await?;
        let exe = first.get(&f.binary).map(|e| shell_quote(e)).unwrap_or_default();
        let cmd = format!("touch -m -d @{mtime} {} {} && rm -f {exe}", shell_quote(&path), shell_quote(&hidden));
        let done = sb.exec(&cmd, Duration::from_secs(30)).await?;
        mtimes.push(mtime);
        if done.exit_code != Some(0) {
            put_back(sb, &planned, &mtimes).await?;
            return Err(HarnessError::Other(format!("staging {}: {}", f.file, done.output.trim())));
        }
    }
    // The second build also names the units it compiled again (`"fresh":false`).
    let rebuilt_lines = "grep '\"reason\":\"compiler-artifact\"' /tmp/.execcritic-build.json | grep -F '\"fresh\":false' | sed 's/^/REBUILT /'";
    let built = sb.exec(&format!("{build}; {rebuilt_lines}"), limits.build).await?;
    if built.timed_out || built.exit_code != Some(0) {
        put_back(sb, &planned, &mtimes).await?;
        if built.timed_out {
            return Ok(GuardedRun::BuildFailed { output: format!("the build ran past {:?}", limits.build) });
        }
        // The files as written built: the rewrite broke them — the harness's fault, never the
        // candidate's.
        return Err(HarnessError::Other(format!(
            "the guard's rewrite of the judged tests does not compile, while the tests as written do:\n{}",
            built.output
        )));
    }
    let binaries = artifacts(&built.output);
    // 3. Put back.
    put_back(sb, &planned, &mtimes).await?;
    // A unit compiled again that is none of the judged targets read a judged file while it
    // compiled (cargo saw it in the unit's dep-info): it may have read the hidden rewrite too.
    let judged: Vec<Binary> = planned.iter().map(|(f, ..)| f.binary.clone()).collect();
    let readers = foreign_rebuilds(&built.output, &judged);
    if !readers.is_empty() {
        let mut j = Judged::default();
        j.real.extend(files.iter().flat_map(|f| f.tests.iter().map(|(n, _)| (n.clone(), TestStatus::Failed))));
        j.violations.push(format!(
            "{} read a judged test file while compiling (cargo compiled it again once the guard staged its rewrite): only the judged test targets may",
            readers.join(", ")
        ));
        return Ok(GuardedRun::Judged(j));
    }
    // 4. Run, 5. verdict.
    let env = std::iter::once("env".to_string())
        .chain(limits.env.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut all = Judged::default();
    for (f, _, plan, _) in &planned {
        let exe = binaries.get(&f.binary).ok_or_else(|| {
            HarnessError::Other(format!("the build listed no test binary for {:?} ({})", f.binary, f.file))
        })?;
        let prefix = if f.module.is_empty() { String::new() } else { format!("{}::", f.module) };
        // The binary's own test list first: a path no test has would run nothing and exit 0.
        let mut map = plan.map.clone();
        let listed = match list_tests(sb, &env, exe, &prefix, &map, limits.per_test).await? {
            Listing::Tests(listed) => listed,
            Listing::Refused(why) => {
                let mut j = Judged::default();
                j.real.extend(map.groups.iter().map(|g| (g.name.clone(), TestStatus::Failed)));
                j.violations.push(why);
                merge(&mut all, j, &f.file, &f.tests);
                continue;
            }
            // As a test that runs past its time: an error status, never the harness's error.
            Listing::TimedOut => {
                let mut j = Judged::default();
                j.real.extend(map.groups.iter().map(|g| (g.name.clone(), TestStatus::Error)));
                merge(&mut all, j, &f.file, &f.tests);
                continue;
            }
        };
        let (missing, violations) = check_listed(&mut map, &listed);
        if !violations.is_empty() {
            let mut j = Judged::default();
            j.real.extend(plan.map.groups.iter().map(|g| (g.name.clone(), TestStatus::Failed)));
            j.violations = violations;
            merge(&mut all, j, &f.file, &f.tests);
            continue;
        }
        let mut j = judge_in(sb, &map, limits.per_test, None, rng, |path| {
            format!("exec {env} {} --exact {} --test-threads=1 -q", shell_quote(exe), shell_quote(&format!("{prefix}{path}")))
        })
        .await?;
        j.real.extend(missing.into_iter().map(|name| (name, TestStatus::Failed)));
        merge(&mut all, j, &f.file, &f.tests);
    }
    Ok(GuardedRun::Judged(all))
}

/// What a test binary said of its tests ([`list_tests`]).
enum Listing {
    /// The run paths it lists as tests.
    Tests(BTreeSet<String>),
    /// It could not list them, or the count was tampered with (the code under test runs in the
    /// listing process): a violation.
    Refused(String),
    /// The listing ran past its time.
    TimedOut,
}

/// Which of a plan's run paths the test binary lists as tests (`<binary> --list` on a
/// throw-away copy). Only a count per group of copies (and per control) comes back — one short
/// line each, whatever the number of tests — and is read back into paths: all of a group's
/// copies, none, or (some but not all) its real test alone, which [`check_listed`] calls a
/// violation. Nothing of this can end in the harness's error by what the code under test does.
async fn list_tests(
    sb: &dyn Sandbox,
    env: &str,
    exe: &str,
    prefix: &str,
    map: &super::canary::CanaryMap,
    timeout: Duration,
) -> Result<Listing, HarnessError> {
    // Sorted within a group: the script names no copy as the real one.
    let mut sets: Vec<Vec<&String>> = map
        .groups
        .iter()
        .filter(|g| g.real.is_some())
        .map(|g| {
            let mut copies: Vec<&String> = g.real.iter().chain(&g.mutants).collect();
            copies.sort();
            copies
        })
        .collect();
    sets.extend(map.controls.iter().map(|c| vec![&c.name]));
    let calls: Vec<String> = sets
        .iter()
        .enumerate()
        .map(|(i, paths)| {
            let quoted: Vec<String> = paths.iter().map(|p| shell_quote(&format!("{prefix}{p}: test"))).collect();
            format!("g {i} {}", quoted.join(" "))
        })
        .collect();
    // The counting goes in a script file (a command line holds at most 128 KiB), in the
    // workspace for this one throw-away run and removed before any test runs.
    let script = format!(
        "g() {{ i=$1; shift; n=0; for p in \"$@\"; do grep -qxF -e \"$p\" /tmp/.execcritic-list && n=$((n+1)); done; echo \"G $i $n\"; }}\n{}\n",
        calls.join("\n")
    );
    let at = format!("{WORKDIR}/.execcritic-list-{:016x}.sh", rand::random::<u64>());
    sb.put_file(&at, script.as_bytes()).await?;
    let exe = shell_quote(exe);
    let cmd = format!("{env} {exe} --list > /tmp/.execcritic-list 2>/dev/null || exit 3; sh {} || exit 4; exit 0", shell_quote(&at));
    let r = sb.exec_over_current(&cmd, timeout + Duration::from_secs(60)).await;
    let removed = sb.exec(&format!("rm -f {}", shell_quote(&at)), Duration::from_secs(60)).await?;
    if removed.exit_code != Some(0) {
        return Err(HarnessError::Other(format!("could not remove {at}: {}", removed.output.trim())));
    }
    let r = r?;
    if r.timed_out {
        return Ok(Listing::TimedOut);
    }
    if r.exit_code != Some(0) {
        // 3: `--list` failed; 4: the counting script (ours, valid) failed — something the
        // listing process left behind changed it.
        return Ok(Listing::Refused(format!("the test binary {exe} could not list its tests (listing exited {:?})", r.exit_code)));
    }
    let mut listed = BTreeSet::new();
    for line in r.output.lines() {
        let mut w = line.split(' ');
        let (Some("G"), Some(i), Some(n), None) = (w.next(), w.next(), w.next(), w.next()) else { continue };
        let (Ok(i), Ok(n)) = (i.parse::<usize>(), n.parse::<usize>()) else { continue };
        let Some(paths) = sets.get(i) else { continue };
        let found = if n == paths.len() { &paths[..] } else if n == 0 { &[][..] } else { &paths[..1] };
        listed.extend(found.iter().map(|p| p.to_string()));
    }
    Ok(Listing::Tests(listed))
}

/// The judged files as they were (with their modification times, where `mtimes` has them), and
/// the rewrites' hidden files gone.
async fn put_back(sb: &dyn Sandbox, planned: &[(&JudgedFile, Vec<u8>, super::libtest::FilePlan, Staged)], mtimes: &[String]) -> Result<(), HarnessError> {
    for (i, (f, original, _, Staged { hidden, .. })) in planned.iter().enumerate() {
        let path = format!("{WORKDIR}/{}", f.file);
        sb.put_file(&path, original).await?;
        let touch = mtimes.get(i).map(|m| format!("touch -m -d @{m} {} && ", shell_quote(&path))).unwrap_or_default();
        let rm = sb.exec(&format!("{touch}rm -f {}", shell_quote(&format!("{WORKDIR}/{hidden}"))), Duration::from_secs(60)).await?;
        if rm.exit_code != Some(0) {
            return Err(HarnessError::Other(format!("could not remove the guard's rewrite {hidden}: {}", rm.output.trim())));
        }
    }
    Ok(())
}

/// A judged file as the build sees it: at its own path a stub — the file's inner attributes
/// and doc comments, then `include!("<hidden>")` — and the rewrite at a hidden path of a random
/// name, with those inner attributes blanked (line numbers stay).
#[derive(Debug, PartialEq, Eq)]
pub struct Staged {
    /// The stub written at the judged file's path.
    pub stub: String,
    /// Where the rewrite lies during the build (relative to the workspace).
    pub hidden: String,
    /// The rewrite as included.
    pub included: String,
}

/// Stage `rewrite` (the plan of `file`, whose items are the module `module`, `""` for a crate
/// root): code that reads a file by name while the crate compiles (`include_str!`,
/// `include_bytes!`, `include!`, `#[path]`, a macro of a dependency) finds the stub at the
/// judged path and cannot spell the hidden one (`source` is the file as written).
///
/// The hidden file has no `.rs` extension (cargo never takes it for a target). It lies beside
/// the judged file, so the test file's own relative paths (`include_str!("data.txt")`, `mod
/// common;` in `tests/`) resolve as written; an included file's out-of-line modules resolve
/// from the included file's directory, so for a module file that is neither a crate root nor a
/// `mod.rs` and declares modules of its own (`src/calc.rs` with `mod sub;` → `src/calc/sub.rs`)
/// the hidden file lies in the module's directory instead (there the test file's own relative
/// paths would not resolve: the rewrite then fails to build, an infrastructure error, never a
/// verdict).
pub fn stage(file: &str, module: &str, source: &str, rewrite: &str, random: u64) -> Staged {
    let (dir, name) = file.rsplit_once('/').map_or(("", file), |(d, n)| (d, n));
    let stem = name.strip_suffix(".rs").unwrap_or(name);
    let own_dir = module.is_empty() || name == "mod.rs" || !declares_module_files(source);
    let hidden_name = format!(".execcritic-{random:016x}.guard");
    let rel = if own_dir { hidden_name.clone() } else { format!("{stem}/{hidden_name}") };
    let hidden = if dir.is_empty() { rel.clone() } else { format!("{dir}/{rel}") };
    let k = inner_prefix_len(rewrite);
    let stub = format!("{}\ninclude!(\"{rel}\");\n", &rewrite[..k]);
    let blank: String = rewrite[..k].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
    Staged { stub, hidden, included: blank + &rewrite[k..] }
}

/// Whether a file's items declare out-of-line modules (`mod sub;`), at any depth of inline ones.
fn declares_module_files(source: &str) -> bool {
    fn any(items: &[syn::Item]) -> bool {
        items.iter().any(|i| match i {
            syn::Item::Mod(m) => m.content.as_ref().is_none_or(|(_, inner)| any(inner)),
            _ => false,
        })
    }
    syn::parse_file(source).map_or(true, |f| any(&f.items))
}

/// The length of a Rust file's head that only an inner position allows: a shebang line, inner
/// attributes (`#![…]`) and inner doc comments (`//!`, `/*!…*/`), with the comments and
/// whitespace among them. `include!` takes items only, so these stay in the stub.
pub fn inner_prefix_len(src: &str) -> usize {
    let b = src.as_bytes();
    let mut i = 0;
    let mut end = 0;
    if src.starts_with("#!") && !src[2..].trim_start().starts_with('[') {
        i = src.find('\n').map_or(src.len(), |n| n + 1);
        end = i;
    }
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let rest = &src[i..];
        if rest.starts_with("//") {
            let inner = rest.starts_with("//!");
            i += rest.find('\n').map_or(rest.len(), |n| n + 1);
            if inner {
                end = i;
            }
        } else if rest.starts_with("/*") {
            let inner = rest.starts_with("/*!");
            let mut depth = 0usize;
            let mut j = 0;
            let rb = rest.as_bytes();
            while j < rb.len() {
                // Bytes, not `str` slices: a comment may hold any UTF-8 (`/* © 2024 */`).
                if rb[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rb[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            if depth != 0 {
                return end;
            }
            i += j;
            if inner {
                end = i;
            }
        } else if rest.starts_with("#!") && rest[2..].trim_start().starts_with('[') {
            match attribute_len(rest) {
                Some(n) => {
                    i += n;
                    end = i;
                }
                None => return end,
            }
        } else {
            return end;
        }
    }
}

/// The length of `#![…]` at the start of `s`, brackets matched outside string and character
/// literals (raw strings included).
fn attribute_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = s.find('[')?;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'[' | b'(' | b'{' => depth += 1,
            b']' | b')' | b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b'r' if s[i..].starts_with("r\"") || s[i..].starts_with("r#") => {
                let hashes = s[i + 1..].bytes().take_while(|&c| c == b'#').count();
                if s.as_bytes().get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let from = i + 2 + hashes;
                i = from + s[from..].find(&close)? + close.len();
                continue;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Run every path of a plan in random order, each as `command(path)` on a throw-away copy of the
/// built workspace (the status is the process's exit status: 0 passed, `skipped_exit` skipped,
/// any other a failure; past `per_test`, `Error`), and judge.
pub(super) async fn judge_in(
    sb: &dyn Sandbox,
    map: &super::canary::CanaryMap,
    per_test: Duration,
    skipped_exit: Option<i32>,
    rng: &mut (impl Rng + Send),
    command: impl Fn(&str) -> String,
) -> Result<Judged, HarnessError> {
    // A judged test left under its own name (it cannot be renamed: `impl Trait` or `!` as its
    // return type, a `#[should_panic]` form the planner does not read, a Go test whose signature
    // is not `(t *testing.T)`) would pass on an `exit(0)` of the code under test when its process
    // is asked for that name: such a pass is no evidence, so the run is the harness's error,
    // never a verdict. (A judged `#[ignore]` test is not run: skipped.)
    if let Some(g) = map.groups.iter().find(|g| g.real.is_none() && g.why.as_deref() != Some(super::libtest::IGNORED)) {
        return Err(HarnessError::Other(format!(
            "{}: the judged test `{}` cannot be guarded ({}): a pass under its own name could be the code under test's exit, so it is not judged",
            g.path,
            g.name,
            g.why.as_deref().unwrap_or("not renamed")
        )));
    }
    let mut statuses = BTreeMap::new();
    for path in run_order(map, rng) {
        let r = sb.exec_over_current(&command(&path), per_test).await?;
        let st = match (r.timed_out, r.exit_code) {
            (true, _) => TestStatus::Error,
            (false, Some(0)) => TestStatus::Passed,
            (false, Some(c)) if Some(c) == skipped_exit => TestStatus::Skipped,
            _ => TestStatus::Failed,
        };
        statuses.insert(path, st);
    }
    Ok(verdict(map, statuses))
}

/// Fold one file's verdict into the run's: the real tests' statuses under their node ids
/// (`tests`: node id, name inside the file), violations and run paths prefixed by the file.
pub(super) fn merge(all: &mut Judged, j: Judged, file: &str, tests: &[(String, String)]) {
    for (node, inside) in tests {
        if let Some(st) = j.real.get(inside) {
            all.real.insert(node.clone(), *st);
        }
    }
    all.violations.extend(j.violations.into_iter().map(|v| format!("{file}: {v}")));
    all.run.extend(j.run.into_iter().map(|(p, s)| (format!("{file}::{p}"), s)));
}

/// [`run_guarded`] for cargo node ids (`harness::runners::cargo`'s): the targets from `cargo
/// metadata` in the sandbox, each node's file found among its crate's module files, the build
/// selecting the nodes' package and targets (`extra`: kept flags such as `--features=…`).
pub async fn run_guarded_nodes(
    sb: &dyn Sandbox,
    nodes: &[String],
    extra: &[String],
    limits: &RunLimits,
    rng: &mut (impl Rng + Send),
) -> Result<GuardedRun, HarnessError> {
    let vendor = vendor_args(sb).await?;
    let vendor_words: Vec<String> = vendor.iter().map(|a| shell_quote(a)).collect();
    let meta = sb
        .exec(
            &format!("cargo metadata --offline --no-deps --format-version 1 {} > /tmp/.execcritic-metadata.json", vendor_words.join(" ")),
            limits.build,
        )
        .await?;
    if meta.exit_code != Some(0) {
        return Ok(GuardedRun::BuildFailed { output: meta.output });
    }
    let metadata = read_path(sb, "/tmp/.execcritic-metadata.json").await?;
    let roots = target_roots(&String::from_utf8_lossy(&metadata), WORKDIR).map_err(HarnessError::Other)?;
    let mut texts = BTreeMap::new();
    let mut args: Vec<String> = Vec::new();
    for node in nodes {
        let Some((package, binary, path)) = split_node(node) else {
            return Err(HarnessError::Other(format!("`{node}` is not a cargo node id")));
        };
        if !args.contains(&package.to_string()) {
            args.extend(["-p".to_string(), package.to_string()]);
        }
        let flags = binary.cargo_flags();
        if !args.windows(flags.len()).any(|w| w == flags.as_slice()) {
            args.extend(flags);
        }
        let Some(root) = roots.get(&(package.to_string(), binary)) else { continue };
        for (f, _, _) in candidate_files(root, path) {
            if texts.contains_key(&f) {
                continue;
            }
            let exists = sb.exec(&format!("test -f {}", shell_quote(&format!("{WORKDIR}/{f}"))), Duration::from_secs(30)).await?;
            if exists.exit_code == Some(0) {
                let bytes = read_file(sb, &f).await?;
                texts.insert(f, String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }
    args.extend(extra.iter().cloned());
    args.extend(vendor);
    // A judged test the tree no longer defines, where Base's tree (`HEAD`) does, was removed (or
    // renamed) by the change under test: a failed node, never the harness's error — a candidate
    // that deletes a unit test its change breaks gets no infrastructure error out of it. A node
    // found in neither stays the harness's error (a test our module reading cannot place).
    let mut removed = Vec::new();
    for node in nodes {
        let Some((package, binary, path)) = split_node(node) else { continue };
        let Some(root) = roots.get(&(package.to_string(), binary)) else { continue };
        if find_test(root, path, &texts).is_some() {
            continue;
        }
        let mut base = BTreeMap::new();
        for (f, _, _) in candidate_files(root, path) {
            if let Some(text) = base_text(sb, &f).await? {
                base.insert(f, text);
            }
        }
        if find_test(root, path, &base).is_some() {
            removed.push(node.clone());
        }
    }
    let judged: Vec<String> = nodes.iter().filter(|n| !removed.contains(n)).cloned().collect();
    let mut run = if judged.is_empty() {
        GuardedRun::Judged(Judged::default())
    } else {
        let files = judged_files(&judged, &roots, &texts).map_err(HarnessError::Other)?;
        run_guarded(sb, &files, &args, limits, rng).await?
    };
    if let GuardedRun::Judged(j) = &mut run {
        for node in removed {
            j.real.insert(node, TestStatus::Failed);
        }
    }
    Ok(run)
}

/// A workspace file as Base has it (`git show HEAD:<file>` in the workspace); `None` where Base
/// has no such file.
pub(super) async fn base_text(sb: &dyn Sandbox, file: &str) -> Result<Option<String>, HarnessError> {
    check_path(file)?;
    let tmp = "/tmp/.execcritic-base-file";
    let r = sb
        .exec(&format!("cd {WORKDIR} && git show {} > {tmp} 2>/dev/null", shell_quote(&format!("HEAD:{file}"))), Duration::from_secs(60))
        .await?;
    if r.exit_code != Some(0) {
        return Ok(None);
    }
    let bytes = read_path(sb, tmp).await?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Test binaries by target from cargo's `compiler-artifact` lines.
/// The units the staged build compiled again (its `REBUILT` lines) that are not judged targets,
/// as `kind name`. The staged files keep their modification times and only the judged targets'
/// binaries were removed, so cargo compiles again just those: test targets (leaves: nothing links
/// them), and the test build of a judged library or `bin`. Anything else compiled again read a
/// judged file by a route cargo saw.
pub fn foreign_rebuilds(output: &str, judged: &[Binary]) -> Vec<String> {
    let mut out = Vec::new();
    for line in output.lines() {
        let Some(json) = line.strip_prefix("REBUILT ") else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            out.push("a unit cargo could not describe".to_string());
            continue;
        };
        let kind = v["target"]["kind"][0].as_str().unwrap_or("?");
        let name = v["target"]["name"].as_str().unwrap_or("?");
        let test_build = v["profile"]["test"] == true;
        let allowed = kind == "test"
            || (test_build && kind == "bin" && judged.contains(&Binary::Bin(name.to_string())))
            || (test_build && kind == "lib" && judged.contains(&Binary::Lib));
        if !allowed {
            out.push(format!("`{name}` ({kind})"));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn artifacts(lines: &str) -> BTreeMap<Binary, String> {
    let mut out = BTreeMap::new();
    for line in lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (Some(kind), Some(name), Some(exe)) = (
            v["target"]["kind"][0].as_str(),
            v["target"]["name"].as_str(),
            v["executable"].as_str(),
        ) else {
            continue;
        };
        let key = match kind {
            "lib" | "rlib" | "cdylib" | "staticlib" | "dylib" => Binary::Lib,
            "test" => Binary::Test(name.to_string()),
            "bin" => Binary::Bin(name.to_string()),
            _ => continue,
        };
        out.insert(key, exe.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_binaries_come_from_cargos_artifact_lines() {
        let lines = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"calc"},"profile":{"test":true},"executable":"/testbed/target/debug/deps/calc-1"}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"calc"},"profile":{"test":true},"executable":"/testbed/target/debug/deps/calc-2"}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"tool"},"profile":{"test":true},"executable":"/x"}
not json"#;
        let b = artifacts(lines);
        assert_eq!(b[&Binary::Lib], "/testbed/target/debug/deps/calc-1");
        assert_eq!(b[&Binary::Test("calc".into())], "/testbed/target/debug/deps/calc-2");
        assert_eq!(b[&Binary::Bin("tool".into())], "/x");
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn nodes_find_their_files_through_the_crate_modules() {
        let metadata = r#"{"packages":[{"name":"calc","targets":[
            {"kind":["lib"],"name":"calc","src_path":"/testbed/src/lib.rs"},
            {"kind":["test"],"name":"calc","src_path":"/testbed/tests/calc.rs"},
            {"kind":["bin"],"name":"tool","src_path":"/testbed/src/bin/tool.rs"}]},
            {"name":"other","targets":[{"kind":["lib"],"name":"other","src_path":"/elsewhere/lib.rs"}]}]}"#;
        let roots = target_roots(metadata, "/testbed").unwrap();
        assert_eq!(roots.len(), 3);
        assert_eq!(roots[&("calc".to_string(), Binary::Test("calc".into()))], "tests/calc.rs");
        assert_eq!(
            candidate_files("src/lib.rs", "a::tests::t").iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["src/a/tests.rs", "src/a/tests/mod.rs", "src/a.rs", "src/a/mod.rs", "src/lib.rs"]
        );
        let texts: BTreeMap<String, String> = [
            ("src/lib.rs", "mod a;\n#[cfg(test)]\nmod tests { #[test] fn root() { assert_eq!(1, 1); } }\n"),
            ("src/a/mod.rs", "#[cfg(test)]\nmod tests { #[test] fn t() { assert_eq!(2, 2); } }\n"),
            ("tests/calc.rs", "#[test]\nfn adds() {}\n#[test]\nfn more() {}\n"),
            ("src/bin/tool.rs", "fn main() {}\n#[test]\nfn cli() {}\n"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let nodes: Vec<String> = ["calc/lib::a::tests::t", "calc/lib::tests::root", "calc/test/calc::adds", "calc/test/calc::more", "calc/bin/tool::cli"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let files = judged_files(&nodes, &roots, &texts).unwrap();
        let summary: Vec<(String, String, Vec<String>)> =
            files.iter().map(|f| (f.file.clone(), f.module.clone(), f.tests.iter().map(|t| t.1.clone()).collect())).collect();
        assert_eq!(
            summary,
            vec![
                ("src/a/mod.rs".into(), "a".into(), vec!["tests::t".into()]),
                ("src/lib.rs".into(), "".into(), vec!["tests::root".into()]),
                ("tests/calc.rs".into(), "".into(), vec!["adds".into(), "more".into()]),
                ("src/bin/tool.rs".into(), "".into(), vec!["cli".into()]),
            ]
        );
        for bad in ["calc/lib::tests::missing", "nopkg/lib::x", "calc/example/e::x", "calc"] {
            assert!(judged_files(&[bad.to_string()], &roots, &texts).is_err(), "{bad}");
        }
    }

    #[test]
    fn units_compiled_again_other_than_the_judged_targets_are_named() {
        let line = |kind: &str, name: &str, test: bool| {
            format!("REBUILT {{\"reason\":\"compiler-artifact\",\"target\":{{\"kind\":[\"{kind}\"],\"name\":\"{name}\"}},\"profile\":{{\"test\":{test}}},\"fresh\":false}}")
        };
        let out = [
            line("test", "calc", true),
            line("test", "other", true),
            line("lib", "calc", false),
            line("proc-macro", "m", false),
            line("bin", "tool", false),
            line("bin", "tool", true),
            line("lib", "calc", true),
            "{\"executable\":\"x\"}".into(),
            "REBUILT not json".into(),
        ]
        .join("\n");
        let tests = [Binary::Test("calc".into())];
        assert_eq!(foreign_rebuilds(&out, &tests), ["`calc` (lib)", "`m` (proc-macro)", "`tool` (bin)", "a unit cargo could not describe"]);
        // A judged library's or bin's test build may be compiled again; their plain builds not.
        assert_eq!(foreign_rebuilds(&out, &[Binary::Test("calc".into()), Binary::Bin("tool".into())]), ["`calc` (lib)", "`m` (proc-macro)", "`tool` (bin)", "a unit cargo could not describe"]);
        let only_tests = [line("test", "calc", true), line("lib", "calc", true), line("bin", "tool", true)].join("\n");
        assert!(foreign_rebuilds(&only_tests, &[Binary::Lib, Binary::Bin("tool".into())]).is_empty());
        assert_eq!(foreign_rebuilds(&only_tests, &[Binary::Lib]), ["`tool` (bin)"]);
        assert_eq!(foreign_rebuilds(&line("lib", "calc", false), &[Binary::Lib]), ["`calc` (lib)"]);
    }

    #[test]
    fn a_staged_file_keeps_its_inner_head_in_the_stub_and_hides_the_rewrite() {
        let src = "#!/usr/bin/env run\n//! Tests.\n/*! more */\n// plain\n#![allow(dead_code, reason = \"a ] bracket\")]\n#![doc = r#\"x\"]\"#]\n\nuse x::y;\n#[test]\nfn t() {}\n";
        let k = inner_prefix_len(src);
        assert!(src[..k].ends_with("#![doc = r#\"x\"]\"#]"), "{}", &src[..k]);
        assert_eq!(&src[k..], "\n\nuse x::y;\n#[test]\nfn t() {}\n");
        // Comments and attributes in any UTF-8.
        let licensed = "/* © 2024 Ünïcode */\n//! Tësts.\n#![doc = \"é ]\"]\nuse x;\n";
        assert_eq!(&licensed[inner_prefix_len(licensed)..], "\nuse x;\n");
        assert_eq!(inner_prefix_len("/* © */\nuse x;\n"), 0);
        for none in ["use x;\n", "#[test]\nfn t() {}\n", "// c\n#[cfg(test)]\nmod tests {}\n", "#![unclosed\n", ""] {
            assert_eq!(inner_prefix_len(none), 0, "{none:?}");
        }
        let s = stage("tests/calc.rs", "", src, src, 0xabc);
        assert_eq!(s.hidden, "tests/.execcritic-0000000000000abc.guard");
        assert_eq!(s.stub, format!("{}\ninclude!(\".execcritic-0000000000000abc.guard\");\n", &src[..k]));
        assert_eq!(s.included.lines().count(), src.lines().count());
        assert!(s.included.trim_start().starts_with("use x::y;") && !s.included.contains("#!"));
        // A module file that declares module files of its own hides the rewrite in its module's
        // directory; a crate root or `mod.rs`, and a module file without any, beside itself.
        let modded = "mod sub;\n#[cfg(test)]\nmod tests { mod deeper { mod x; } }\n";
        assert_eq!(stage("src/calc.rs", "calc", modded, modded, 1).hidden, "src/calc/.execcritic-0000000000000001.guard");
        assert_eq!(stage("src/calc.rs", "calc", modded, modded, 1).stub, "\ninclude!(\"calc/.execcritic-0000000000000001.guard\");\n");
        assert_eq!(stage("src/lib.rs", "", modded, modded, 1).hidden, "src/.execcritic-0000000000000001.guard");
        assert_eq!(stage("src/a/mod.rs", "a", modded, modded, 1).hidden, "src/a/.execcritic-0000000000000001.guard");
        let inline = "#[cfg(test)]\nmod tests { #[test] fn t() {} }\n";
        assert_eq!(stage("src/calc.rs", "calc", inline, inline, 1).hidden, "src/.execcritic-0000000000000001.guard");
        assert_eq!(stage("lib.rs", "", inline, inline, 2).hidden, ".execcritic-0000000000000002.guard");
    }

    #[test]
    fn judged_files_must_be_plain_relative_paths() {
        for bad in ["", "/etc/passwd", "../x.rs", "src//lib.rs", "src/../../x.rs"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        assert!(check_path("tests/calc.rs").is_ok());
    }
}
