//! One guarded `cargo test` run in a sandbox ([`super::libtest`]'s canaries, end to end).
//!
//! 1. **Plan**: each judged test file is read out of the sandbox, rewritten on the host
//!    ([`plan_file`]) and written back.
//! 2. **Build**: `cargo test --offline --no-run --message-format=json <args>` in the sandbox;
//!    the test binaries are the artifacts cargo lists. A build that fails is
//!    [`GuardedRun::BuildFailed`] (Base gate: `collection_error`; never a clean failure).
//! 3. **Put back**: the judged files as they were (the rewrite names the copies and their
//!    expected values; the run phase must not see it).
//! 4. **Run**: every real test, mutant and control, in random order, each in its own process on a
//!    throw-away copy of the built workspace ([`Sandbox::exec_over_current`]: an empty `/tmp`,
//!    nothing written persists), so no run can leave a mark for the next — counting runs or
//!    remembering which copy came first is not possible. The status is the process's exit
//!    status alone.
//! 5. **Verdict** ([`verdict`]): the real tests' statuses under the caller's node ids, and the
//!    violations that make the run `tampered`.
//!
//! Needs a sandbox with throw-away runs (local, as root, with overlayfs) and a Rust toolchain in
//! it (the local allow-list binds the host's sysroot); dependencies must already be in the
//! workspace or vendored (the build is `--offline`).

use super::libtest::{plan_file, run_order, verdict, Judged};
use crate::harness::error::HarnessError;
use crate::harness::logparse::TestStatus;
use crate::harness::sandbox::{shell_quote, Sandbox, WORKDIR};
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Which test binary of the package a file's tests are compiled into.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Binary {
    /// The library's unit tests (`--lib`).
    Lib,
    /// An integration test target (`--test <name>`).
    Test(String),
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
const CHUNK: usize = 24 * 1024;

/// Read a workspace file out of the sandbox, byte-exact.
async fn read_file(sb: &dyn Sandbox, file: &str) -> Result<Vec<u8>, HarnessError> {
    let path = shell_quote(&format!("{WORKDIR}/{file}"));
    let mut out = Vec::new();
    loop {
        let cmd = format!("set -o pipefail; tail -c +{} {path} | head -c {CHUNK} | od -An -v -tx1 | tr -d ' \\n'", out.len() + 1);
        let r = sb.exec(&cmd, Duration::from_secs(60)).await?;
        if r.exit_code != Some(0) || r.truncated {
            return Err(HarnessError::Other(format!("reading {file} in the sandbox: {}", r.output.trim())));
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

fn check_path(file: &str) -> Result<(), HarnessError> {
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
    // 1. Plan.
    let mut planned = Vec::new();
    for f in files {
        check_path(&f.file)?;
        let original = read_file(sb, &f.file).await?;
        let source = String::from_utf8(original.clone()).map_err(|_| HarnessError::Other(format!("{} is not UTF-8", f.file)))?;
        let inside: Vec<String> = f.tests.iter().map(|(_, p)| p.clone()).collect();
        let plan = plan_file(&f.file, &source, &inside, limits.mutants, rng).map_err(HarnessError::Other)?;
        sb.put_file(&format!("{WORKDIR}/{}", f.file), plan.source.as_bytes()).await?;
        planned.push((f, original, plan));
    }
    // 2. Build.
    let args: Vec<String> = cargo_args.iter().map(|a| shell_quote(a)).collect();
    let build = format!(
        "cargo test --offline --no-run --message-format=json {} > /tmp/.execcritic-build.json 2> /tmp/.execcritic-build.err; rc=$?; \
         if [ $rc -ne 0 ]; then tail -c 8000 /tmp/.execcritic-build.err; exit $rc; fi; \
         grep '\"reason\":\"compiler-artifact\"' /tmp/.execcritic-build.json | grep -F '\"test\":true' | grep -F '\"executable\":\"'",
        args.join(" ")
    );
    let built = sb.exec(&build, limits.build).await?;
    if built.timed_out || built.exit_code != Some(0) {
        for (f, original, _) in &planned {
            sb.put_file(&format!("{WORKDIR}/{}", f.file), original).await?;
        }
        let output = if built.timed_out { format!("the build ran past {:?}", limits.build) } else { built.output };
        return Ok(GuardedRun::BuildFailed { output });
    }
    let binaries = artifacts(&built.output);
    // 3. Put back.
    for (f, original, _) in &planned {
        sb.put_file(&format!("{WORKDIR}/{}", f.file), original).await?;
    }
    // 4. Run, 5. verdict.
    let mut all = Judged::default();
    for (f, _, plan) in &planned {
        let exe = binaries.get(&f.binary).ok_or_else(|| {
            HarnessError::Other(format!("the build listed no test binary for {:?} ({})", f.binary, f.file))
        })?;
        let prefix = if f.module.is_empty() { String::new() } else { format!("{}::", f.module) };
        let mut statuses = BTreeMap::new();
        for path in run_order(&plan.map, rng) {
            let cmd = format!(
                "exec {} --exact {} --test-threads=1 -q",
                shell_quote(exe),
                shell_quote(&format!("{prefix}{path}"))
            );
            let r = sb.exec_over_current(&cmd, limits.per_test).await?;
            let st = match (r.timed_out, r.exit_code) {
                (true, _) => TestStatus::Error,
                (false, Some(0)) => TestStatus::Passed,
                _ => TestStatus::Failed,
            };
            statuses.insert(path, st);
        }
        let j = verdict(&plan.map, statuses);
        for (node, inside) in &f.tests {
            if let Some(st) = j.real.get(inside) {
                all.real.insert(node.clone(), *st);
            }
        }
        all.violations.extend(j.violations.into_iter().map(|v| format!("{}: {v}", f.file)));
        all.run.extend(j.run.into_iter().map(|(p, s)| (format!("{}::{p}", f.file), s)));
    }
    Ok(GuardedRun::Judged(all))
}

/// Test binaries by target from cargo's `compiler-artifact` lines.
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
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn judged_files_must_be_plain_relative_paths() {
        for bad in ["", "/etc/passwd", "../x.rs", "src//lib.rs", "src/../../x.rs"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        assert!(check_path("tests/calc.rs").is_ok());
    }
}
