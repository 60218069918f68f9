//! One guarded `go test` run in a sandbox ([`super::gotest`]'s canaries, end to end), the Go
//! counterpart of [`super::libtest_run`]:
//!
//! 1. **Plan**: each node `./dir::TestX` (a subtest `./dir::TestX/case` by its `TestX`) is found
//!    among the package directory's `_test.go` files (read out of the sandbox byte-exact); each
//!    file with judged tests is rewritten on the host.
//! 2. **Build**, offline ([`go_env`]: `GOPROXY=off`, `GOFLAGS=-mod=mod` against the
//!    environment's module cache where it has one, `GOTOOLCHAIN=local`, no user configuration;
//!    cgo as the plain `go test` in that sandbox would have it, so build constraints such as
//!    `//go:build !cgo` select the same files). First the files as written,
//!    `go test -c -o /dev/null ./dir` per package: `go test`'s own build with its default
//!    `go vet` checks (a vet finding fails the package there, so it is
//!    [`GuardedRun::BuildFailed`] here too, as is any other build failure). Then the rewrite,
//!    `go test -c -vet=off -overlay=<json> -o <random dir>/<n>.test ./dir` (vet judged the files
//!    as written): the rewritten files lie in a directory of a random name outside the workspace
//!    and reach the compiler only through the overlay, so the judged files on disk stay as
//!    written and nothing the build can name reads the copies: a cgo preamble's
//!    `.incbin "calc_test.go"` and a `//go:embed` read the file as written (embedding ignores
//!    overlays, golang/go#59406; the tamper screen refuses added `//go:embed` directives all
//!    the same, should a toolchain ever embed through the overlay). Where that build fails, the rewrite broke the files: an
//!    infrastructure error.
//! 3. **Remove** the rewrite's directory, before anything runs.
//! 4. **Run**: every real test, mutant and control, in random order, each in its own process
//!    (`<bin> -test.run '^TestX…$' -test.count=1 -test.paniconexit0`, `'^TestX…$/^case$'` for
//!    a subtest, in the package directory, as `go test` does) on a throw-away copy of the built
//!    workspace. The status is the exit status alone.
//! 5. **Verdict** ([`verdict`]).
//!
//! Needs a sandbox with throw-away runs and a Go toolchain on its `PATH` (the local sandbox
//! binds the host's `/usr`, where Debian's `golang-go` lives).

pub use super::gotest::split_case;
use super::gotest::{plan_file, test_functions};
use super::libtest::Judged;
use super::libtest_run::{base_text, check_path, judge_in, merge, read_file, GuardedRun, RunLimits};
use crate::harness::error::HarnessError;
use crate::harness::logparse::TestStatus;
use crate::harness::sandbox::{shell_quote, Sandbox, WORKDIR};
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where a task's prepared environment keeps its Go module cache (`GOMODCACHE`), written once
/// with network by an `environment_setup` command such as `GOMODCACHE=/env/go-modcache go mod
/// download`, mounted read-only afterwards.
pub const GO_MODCACHE: &str = "/env/go-modcache";

/// A Go node id's package directory (relative to the workspace, `""` for the module root) and
/// test name: `./calc::TestAdd` → (`calc`, `TestAdd`), `.::TestRoot` → (`""`, `TestRoot`),
/// `./calc::TestAdd/neg` → (`calc`, `TestAdd/neg`) (a subtest, [`split_case`]).
pub fn split_node(node: &str) -> Option<(String, &str)> {
    let (pkg, name) = node.split_once("::")?;
    let dir = if pkg == "." { String::new() } else { pkg.strip_prefix("./").filter(|d| !d.is_empty())?.to_string() };
    let (test, case) = split_case(name);
    let case_ok = case.is_none_or(crate::harness::runners::go::is_case_name);
    if crate::harness::runners::go::is_test_name(test) && case_ok {
        if !dir.is_empty() {
            check_path(&dir).ok()?;
        }
        return Some((dir, name));
    }
    None
}

/// The environment of every `go` command of a guarded run (`modcache`: the environment has
/// [`GO_MODCACHE`]).
pub fn go_env(modcache: bool) -> String {
    let mut env = vec![
        "GOPROXY=off",
        "GOSUMDB=off",
        "GOTOOLCHAIN=local",
        "GOENV=off",
        "GOWORK=off",
        "GOCACHE=/tmp/.execcritic-gocache",
        "GOPATH=/tmp/.execcritic-gopath",
        "HOME=/tmp",
    ];
    if modcache {
        env.extend(["GOMODCACHE=/env/go-modcache", "GOFLAGS=-mod=mod"]);
    } else {
        env.push("GOFLAGS=");
    }
    format!("env {}", env.join(" "))
}

/// One package's judged files: (file relative to the workspace, its judged test names, node ids).
type Files = BTreeMap<String, Vec<(String, String)>>;

/// The command's kept flags (`harness::runners::go`: `-short`, `-failfast`, `-tags=…`,
/// `-timeout=…`) split into the build's (`-tags=…`) and the test binary's (`-test.short`,
/// `-test.timeout=…`; `-failfast` means nothing for one test per process).
pub fn split_flags(flags: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut build, mut test) = (Vec::new(), Vec::new());
    for f in flags {
        if f.starts_with("-tags=") {
            build.push(f.clone());
        } else if f == "-short" {
            test.push("-test.short".to_string());
        } else if let Some(v) = f.strip_prefix("-timeout=") {
            test.push(format!("-test.timeout={v}"));
        }
    }
    (build, test)
}

/// The guarded run for `go test` node ids (`harness::runners::go`'s), with the command's kept
/// `flags` ([`split_flags`]).
pub async fn run_guarded_nodes(
    sb: &dyn Sandbox,
    nodes: &[String],
    flags: &[String],
    limits: &RunLimits,
    rng: &mut (impl Rng + Send),
) -> Result<GuardedRun, HarnessError> {
    let (build_flags, test_flags) = split_flags(flags);
    if !sb.ephemeral_runs() {
        return Err(HarnessError::Other(
            "a guarded go run needs throw-away runs (a local sandbox as root, with overlayfs)".into(),
        ));
    }
    // 1. Find each node's file, plan.
    let mut packages: BTreeMap<String, Files> = BTreeMap::new();
    for node in nodes {
        let (dir, _) = split_node(node).ok_or_else(|| HarnessError::Other(format!("`{node}` is not a go test node id")))?;
        packages.entry(dir).or_default();
    }
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for (dir, files) in packages.iter_mut() {
        let at = if dir.is_empty() { WORKDIR.to_string() } else { format!("{WORKDIR}/{dir}") };
        let listed = sb
            .exec(&format!("cd {} && find . -maxdepth 1 -type f -name '*_test.go' | LC_ALL=C sort", shell_quote(&at)), Duration::from_secs(60))
            .await?;
        if listed.exit_code != Some(0) {
            return Ok(GuardedRun::BuildFailed { output: format!("package directory `{dir}`: {}", listed.output.trim()) });
        }
        for entry in listed.output.lines() {
            let Some(base) = entry.strip_prefix("./") else { continue };
            let file = if dir.is_empty() { base.to_string() } else { format!("{dir}/{base}") };
            if check_path(&file).is_err() {
                continue;
            }
            let bytes = read_file(sb, &file).await?;
            let Ok(text) = String::from_utf8(bytes) else { continue };
            let names = test_functions(&text).unwrap_or_default();
            for node in nodes {
                let Some((ndir, name)) = split_node(node) else { continue };
                if &ndir == dir && names.iter().any(|n| n == split_case(name).0) {
                    files.entry(file.clone()).or_default().push((node.clone(), name.to_string()));
                }
            }
            texts.insert(file, text);
        }
    }
    // A judged test the package no longer defines, where Base's tree (`HEAD`) defines it exactly
    // once, was removed or renamed by the change under test: a failed node, never the harness's
    // error (as for cargo, `libtest_run::run_guarded_nodes`).
    let mut removed = Vec::new();
    for node in nodes {
        let found = packages.values().flat_map(|f| f.values()).flatten().filter(|(n, _)| n == node).count();
        if found == 0 && base_defines(sb, node).await? {
            removed.push(node.clone());
        } else if found != 1 {
            return Err(HarnessError::Other(format!("`{node}`: {found} test functions of that name in its package's _test.go files")));
        }
    }
    if removed.len() == nodes.len() {
        let mut j = Judged::default();
        j.real.extend(removed.into_iter().map(|n| (n, TestStatus::Failed)));
        return Ok(GuardedRun::Judged(j));
    }
    let mut planned = Vec::new();
    for files in packages.values() {
        for (file, tests) in files {
            let inside: Vec<String> = tests.iter().map(|(_, n)| n.clone()).collect();
            let plan = plan_file(file, &texts[file], &inside, limits.mutants, rng).map_err(HarnessError::Other)?;
            planned.push((file.clone(), plan));
        }
    }
    // 2. Build. First the files as written, as `go test` builds them — with its default `go vet`
    // checks, whose failure fails the package ("[build failed]") — discarding the binaries (no
    // code runs). Then the rewrite, one binary per package into a directory of a random name,
    // with vet off: vet judged the files as written, not the guard's copies.
    let modcache = sb.exec(&format!("test -d {GO_MODCACHE}"), Duration::from_secs(30)).await?.exit_code == Some(0);
    let build_words: Vec<String> = build_flags.iter().map(|a| shell_quote(a)).collect();
    let go_build = |vet: &str, out: &str, pkg: &str| {
        format!(
            " && {{ {} go test -c {vet} {} -o {} {} > /tmp/.execcritic-go-build.log 2>&1 || {{ tail -c 8000 /tmp/.execcritic-go-build.log; exit 1; }}; }}",
            go_env(modcache),
            build_words.join(" "),
            shell_quote(out),
            shell_quote(pkg)
        )
    };
    let pkg_arg = |dir: &str| if dir.is_empty() { ".".to_string() } else { format!("./{dir}") };
    let mut plain = format!("cd {WORKDIR}");
    for dir in packages.keys() {
        plain.push_str(&go_build("", "/dev/null", &pkg_arg(dir)));
    }
    let as_written = sb.exec(&plain, limits.build).await?;
    if as_written.timed_out {
        return Ok(GuardedRun::BuildFailed { output: format!("the build ran past {:?}", limits.build) });
    }
    if as_written.exit_code != Some(0) {
        return Ok(GuardedRun::BuildFailed { output: as_written.output });
    }
    // The rewrite reaches the compiler only through `-overlay`, from a directory of a random name
    // outside the workspace: the judged files on disk stay as written, so nothing the build can
    // name reads the copies (a cgo preamble's `.incbin "calc_test.go"` reads the file as written).
    let src_dir = format!("/tmp/.execcritic-go-src-{:016x}", rng.random::<u64>());
    let mut replace = serde_json::Map::new();
    for (i, (file, plan)) in planned.iter().enumerate() {
        let copy = format!("{src_dir}/{i}.go");
        sb.put_file(&copy, plan.source.as_bytes()).await?;
        replace.insert(format!("{WORKDIR}/{file}"), serde_json::Value::String(copy));
    }
    let overlay = format!("{src_dir}/overlay.json");
    let json = serde_json::json!({ "Replace": replace }).to_string();
    sb.put_file(&overlay, json.as_bytes()).await?;
    let out_dir = format!("{WORKDIR}/.execcritic-go-{:016x}", rng.random::<u64>());
    let mut build = format!("mkdir {} && cd {WORKDIR}", shell_quote(&out_dir));
    let mut binaries = BTreeMap::new();
    let rewrite_flags = format!("-vet=off -overlay={}", shell_quote(&overlay));
    for (i, dir) in packages.keys().enumerate() {
        let bin = format!("{out_dir}/{i}.test");
        build.push_str(&go_build(&rewrite_flags, &bin, &pkg_arg(dir)));
        binaries.insert(dir.clone(), bin);
    }
    let built = sb.exec(&build, limits.build).await;
    // 3. Remove the rewrite before anything runs.
    let removed_src = sb.exec(&format!("rm -rf {}", shell_quote(&src_dir)), Duration::from_secs(60)).await;
    let built = built?;
    if removed_src?.exit_code != Some(0) {
        return Err(HarnessError::Other(format!("could not remove the guard's rewrite at {src_dir}")));
    }
    if built.timed_out || built.exit_code != Some(0) {
        let _ = sb.exec(&format!("rm -rf {}", shell_quote(&out_dir)), Duration::from_secs(60)).await;
        if built.timed_out {
            return Ok(GuardedRun::BuildFailed { output: format!("the build ran past {:?}", limits.build) });
        }
        return Err(HarnessError::Other(format!(
            "the guard's rewrite of the judged tests does not compile, while the tests as written do:\n{}",
            built.output
        )));
    }
    // 4. Run, 5. verdict.
    let env = std::iter::once("env".to_string())
        .chain(limits.env.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let extra: Vec<String> = test_flags.iter().map(|a| shell_quote(a)).collect();
    let mut all = Judged::default();
    for (file, plan) in &planned {
        let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
        let bin = &binaries[dir];
        let at = if dir.is_empty() { WORKDIR.to_string() } else { format!("{WORKDIR}/{dir}") };
        let j = judge_in(sb, &plan.map, limits.per_test, Some(super::gotest::SKIPPED_EXIT), rng, |path| {
            format!(
                "cd {} && exec {env} {} -test.run {} -test.count=1 -test.paniconexit0 {}",
                shell_quote(&at),
                shell_quote(bin),
                shell_quote(&run_filter(path)),
                extra.join(" ")
            )
        })
        .await?;
        merge(&mut all, j, file, &packages[dir][file]);
    }
    let _ = sb.exec(&format!("rm -rf {}", shell_quote(&out_dir)), Duration::from_secs(60)).await;
    all.real.extend(removed.into_iter().map(|n| (n, TestStatus::Failed)));
    Ok(GuardedRun::Judged(all))
}

/// The `-test.run` filter of one run path (a copy's name, `TestX` + 16 hex digits): `^TestX…$`.
/// A copy that judges a subtest runs whole too; the case is written into it, never read from
/// the command line, which the code under test can rewrite ([`super::gotest`]).
pub fn run_filter(path: &str) -> String {
    format!("^{path}$")
}

/// Whether Base's tree (`HEAD` of the workspace) defines `node`'s test exactly once among its
/// package directory's `_test.go` files.
async fn base_defines(sb: &dyn Sandbox, node: &str) -> Result<bool, HarnessError> {
    let Some((dir, name)) = split_node(node) else { return Ok(false) };
    let tree = if dir.is_empty() { "HEAD:".to_string() } else { format!("HEAD:{dir}") };
    let listed = sb
        .exec(&format!("cd {WORKDIR} && git ls-tree --name-only {}", shell_quote(&tree)), Duration::from_secs(60))
        .await?;
    if listed.exit_code != Some(0) {
        return Ok(false);
    }
    let mut count = 0;
    for base in listed.output.lines().filter(|f| f.ends_with("_test.go") && !f.contains('/')) {
        let file = if dir.is_empty() { base.to_string() } else { format!("{dir}/{base}") };
        if check_path(&file).is_err() {
            continue;
        }
        if let Some(text) = base_text(sb, &file).await? {
            count += test_functions(&text).unwrap_or_default().iter().filter(|n| *n == split_case(name).0).count();
        }
    }
    Ok(count == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_split_into_package_directory_and_test() {
        assert_eq!(split_node("./calc::TestAdd"), Some(("calc".to_string(), "TestAdd")));
        assert_eq!(split_node("./a/b::Test_x"), Some(("a/b".to_string(), "Test_x")));
        assert_eq!(split_node(".::TestRoot"), Some((String::new(), "TestRoot")));
        assert_eq!(split_node("./calc::TestAdd/f(1)::x"), Some(("calc".to_string(), "TestAdd/f(1)::x")));
        assert_eq!(split_case("TestAdd/neg#01"), ("TestAdd", Some("neg#01")));
        assert_eq!(run_filter("TestX0123"), "^TestX0123$");
        for bad in ["calc::TestAdd", "./calc::Testx", "./../x::TestA", "./a//b::TestA", "./calc::TestA$(x)", "./calc", "/abs::TestA", "./::TestA", "./calc::TestA/", "./calc::TestA/a/b", "./calc::TestA/a b", "./calc::Testx/a"] {
            assert_eq!(split_node(bad), None, "{bad}");
        }
        assert!(go_env(true).contains("GOMODCACHE=/env/go-modcache") && go_env(false).contains("GOPROXY=off"));
    }
}
