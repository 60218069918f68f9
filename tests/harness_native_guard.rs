//! The native runtime guard's canaries for `cargo test` (src/harness/guard/libtest.rs) on a
//! real crate built by the real toolchain: each attack first shown to get a pass outside the
//! guard (plain `cargo test`, or the guard without mutants), then refused; the fix and the honest
//! bug judged as they are.
//!
//! The fixture (`tests/fixtures/native_guard/calc`) is a crate with unit and integration tests;
//! `imp/*.rs` are the candidates' versions of its one source file.

use execcritic::harness::guard::libtest::{judge, plan_file, run_exact, run_paths, verdict, FilePlan, Judged};
use execcritic::harness::logparse::TestStatus;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/native_guard")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // The outer test run's settings must not leak into the fixture's build.
    for v in ["RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_TARGET_DIR", "RUSTC_WRAPPER"] {
        c.env_remove(v);
    }
    c.env("CARGO_INCREMENTAL", "0").env("CARGO_NET_OFFLINE", "true");
    c
}

/// A copy of the crate with `imp/<candidate>.rs` as its source, building into `target`.
fn checkout(candidate: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture().join("calc"), dir.path());
    std::fs::copy(fixture().join(format!("imp/{candidate}.rs")), dir.path().join("src/imp.rs")).unwrap();
    dir
}

/// Plain `cargo test` of the checkout: did it exit 0?
fn plain_cargo_test(dir: &Path, target: &Path) -> bool {
    let out = cargo()
        .args(["test", "--offline", "-q"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(dir)
        .output()
        .unwrap();
    out.status.success()
}

/// The guarded run: plan the judged tests of both files (`k` mutants), build the test binaries,
/// put the original files back, run every test in its own process, judge. Keys of `real`:
/// `lib::<path>` / `calc::<path>`.
fn guarded(dir: &Path, target: &Path, k: usize, seed: u64) -> Judged {
    guarded_with(dir, target, k, seed, Weaker::None)
}

/// A guard weaker than the real one, to show an attack working.
#[derive(PartialEq)]
enum Weaker {
    None,
    /// The rewritten files stay in place while the tests run.
    RewriteLeftInPlace,
    /// Each real test runs before its copies (and, on this host, the runs share `/tmp`).
    RealTestFirst,
    /// The rewrite staged at a hidden path as the guard stages it, but built in one step (no
    /// build of the files as written first).
    StagedOnePhase,
    /// Staged and built as the guard builds (the files as written first), but with no look at
    /// what cargo compiled again.
    StagedTwoPhase,
}

fn guarded_with(dir: &Path, target: &Path, k: usize, seed: u64, weaker: Weaker) -> Judged {
    let files = [
        ("src/lib.rs", "lib", vec!["tests::adds_unit", "tests::labels_unit"]),
        ("tests/calc.rs", "calc", vec!["adds", "adds_negative", "adds_commutes", "labels", "adds_case"]),
    ];
    guarded_files(dir, target, &files, k, seed, weaker)
}

/// The guarded run over the given `(file, binary, judged tests)`.
fn guarded_files(dir: &Path, target: &Path, files: &[(&str, &str, Vec<&str>)], k: usize, seed: u64, weaker: Weaker) -> Judged {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut plans = Vec::new();
    if weaker == Weaker::StagedTwoPhase {
        let out = cargo().args(["test", "--offline", "--no-run"]).env("CARGO_TARGET_DIR", target).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    for (file, binary, judged) in files {
        let path = dir.join(file);
        let source = std::fs::read_to_string(&path).unwrap();
        let judged: Vec<String> = judged.iter().map(|t| t.to_string()).collect();
        let plan = plan_file(file, &source, &judged, k, &mut rng).unwrap();
        if matches!(weaker, Weaker::StagedOnePhase | Weaker::StagedTwoPhase) {
            // Both fixtures' judged files are crate roots (module "").
            let staged = execcritic::harness::guard::libtest_run::stage(file, "", &source, &plan.source, rand::Rng::random::<u64>(&mut rng));
            std::fs::write(dir.join(&staged.hidden), &staged.included).unwrap();
            std::fs::write(&path, &staged.stub).unwrap();
        } else {
            std::fs::write(&path, &plan.source).unwrap();
        }
        plans.push((binary, plan, path, source));
    }
    // The build: one step before any test runs; the binaries are what it printed as artifacts.
    let out = cargo()
        .args(["test", "--offline", "--no-run", "--message-format=json"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let mut binaries = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact" && v["profile"]["test"] == true {
            let kind = v["target"]["kind"][0].as_str().unwrap_or_default();
            let name = if kind == "lib" { "lib".to_string() } else { v["target"]["name"].as_str().unwrap().to_string() };
            binaries.insert(name, PathBuf::from(v["executable"].as_str().unwrap()));
        }
    }
    // The run phase sees the files as they were: the rewritten ones name the copies and hold
    // their expected values.
    if weaker != Weaker::RewriteLeftInPlace {
        for (_, _, path, source) in &plans {
            std::fs::write(path, source).unwrap();
        }
        for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
            if e.file_name().to_string_lossy().ends_with(".guard") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    let mut all = Judged::default();
    for (binary, plan, _, _) in plans {
        let exe = &binaries[*binary];
        let j = if weaker == Weaker::RealTestFirst {
            let statuses = run_paths(&plan.map).into_iter().map(|p| {
                let st = run_exact(exe, &p, Duration::from_secs(60));
                (p, st)
            });
            verdict(&plan.map, statuses.collect())
        } else {
            judge(&plan.map, &mut rng, |p| run_exact(exe, p, Duration::from_secs(60)))
        };
        for (k, v) in j.real {
            all.real.insert(format!("{binary}::{k}"), v);
        }
        all.violations.extend(j.violations.into_iter().map(|v| format!("{binary}: {v}")));
        all.run.extend(j.run.into_iter().map(|(k, v)| (format!("{binary}::{k}"), v)));
    }
    all
}

fn status(j: &Judged, id: &str) -> TestStatus {
    *j.real.get(id).unwrap_or_else(|| panic!("{id} not judged: {:?}", j.real))
}

/// `calc::adds_case` is written by a macro (`case!(adds_case, |label| { … })`): the guard copies
/// the invocation into modules of random names.
const JUDGED_BUG: [&str; 4] = ["lib::tests::adds_unit", "calc::adds", "calc::adds_negative", "calc::adds_case"];
const UNTOUCHED: [&str; 2] = ["lib::tests::labels_unit", "calc::labels"];

#[test]
fn the_fix_passes_and_the_bug_fails_under_the_guard() {
    let target = tempfile::tempdir().unwrap();
    for (candidate, want) in [("gold", TestStatus::Passed), ("base", TestStatus::Failed)] {
        let dir = checkout(candidate);
        let j = guarded(dir.path(), target.path(), 6, 1);
        assert!(j.violations.is_empty(), "{candidate}: {:?}", j.violations);
        for id in JUDGED_BUG {
            assert_eq!(status(&j, id), want, "{candidate}: {id}");
        }
        for id in UNTOUCHED {
            assert_eq!(status(&j, id), TestStatus::Passed, "{candidate}: {id}");
        }
        // A test with no literal assertion is renamed and guarded by its tail copies alone.
        assert_eq!(status(&j, "calc::adds_commutes"), if candidate == "gold" { TestStatus::Passed } else { TestStatus::Failed });
        // 6 planned tests × (1 + 6 literal look-alikes + 6 tail copies) + 2 × 2 controls + the
        // tail-guarded one × (1 + 6).
        assert_eq!(j.run.len(), 6 * 13 + 4 + 7, "{:?}", j.run);
        assert_eq!(j.run.keys().filter(|p| p.ends_with("::adds_case")).count(), 13, "{:?}", j.run);
    }
}

#[test]
fn forged_passes_are_refused() {
    let target = tempfile::tempdir().unwrap();
    // Each attack gets a pass where only the exit status or the report counts.
    for attack in ["exit_forger", "panic_hook", "always_equal"] {
        let dir = checkout(attack);
        assert!(plain_cargo_test(dir.path(), target.path()), "{attack}: plain cargo test did not pass");
    }
    // The guard's own abort, caught by a SIGABRT handler, passes the real test where there are no
    // mutants to compare with.
    let dir = checkout("abort_catcher");
    let naive = guarded(dir.path(), target.path(), 0, 2);
    assert_eq!(status(&naive, "calc::adds"), TestStatus::Passed, "{naive:?}");

    // Under the guard: a pass that does not rest on the fix is `tampered` (violations), or is
    // no pass at all (the panic hook never sees a value: the assertion aborts without one).
    for (attack, seed) in [("exit_forger", 3), ("always_equal", 4), ("abort_catcher", 5)] {
        let dir = checkout(attack);
        let j = guarded(dir.path(), target.path(), 6, seed);
        assert!(
            j.violations.iter().any(|v| v.contains("mutant") && v.contains("adds")),
            "{attack}: not refused: {j:?}"
        );
    }
    // Ending the process with status 0 from inside a test, after what it checks first: plain
    // `cargo test` of that test passes; the tail copies run on to the same exit and pass too.
    // `probe_exit` first runs its own test once more in a subprocess where `add` panics, and
    // exits late only where that run ends as libtest ends a panic (status 101): a tail copy whose
    // end differs from the real test's under a panic (an aborting drop guard: SIGABRT) is told
    // apart and spared. Every copy runs its body in one inner function, so they end a panic alike.
    for (attack, seed) in [("late_exit", 6), ("probe_exit", 9)] {
        let dir = checkout(attack);
        let plain = cargo()
            .args(["test", "--offline", "-q", "--test", "calc", "--", "--exact", "adds_commutes"])
            .env("CARGO_TARGET_DIR", target.path())
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(plain.status.success(), "{attack}: plain cargo test did not pass");
        let j = guarded(dir.path(), target.path(), 6, seed);
        assert!(j.violations.iter().any(|v| v.contains("adds_commutes")), "{attack}: not refused: {j:?}");
    }

    // Reading the rewritten test file at run time finds the copy that expects 5: it works where
    // the file is left in place, and finds nothing in the file as it was.
    let dir = checkout("source_reader");
    let weak = guarded_with(dir.path(), target.path(), 6, 7, Weaker::RewriteLeftInPlace);
    assert!(weak.violations.is_empty(), "{:?}", weak.violations);
    assert_eq!(status(&weak, "calc::adds"), TestStatus::Passed, "{weak:?}");
    let dir = checkout("source_reader");
    let j = guarded(dir.path(), target.path(), 6, 7);
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(status(&j, "calc::adds"), TestStatus::Failed);

    // Reading the judged files at build time (`include_str!`) finds the copy that expects 5 (and
    // the unit test's that expects 42): it works where the rewrite lies at the judged paths while
    // the crates compile, as here (the guard in the sandbox stages it at a hidden path, below).
    // (A look-alike of the unit test may expect the bug's own value, 38 = 40 − 2, where the
    // window of values holds it: that copy passes honestly beside the forced real one, and this
    // seed's plan has it. The integration test's window, around 5, never holds −1.)
    let dir = checkout("include_reader");
    let weak = guarded(dir.path(), target.path(), 6, 7);
    assert!(weak.violations.iter().all(|v| v.starts_with("lib: mutant tests::") && v.contains(" of tests::adds_unit ")), "{:?}", weak.violations);
    assert_eq!(status(&weak, "calc::adds"), TestStatus::Passed, "{weak:?}");
    assert_eq!(status(&weak, "lib::tests::adds_unit"), TestStatus::Passed, "{weak:?}");

    // Remembering which copy ran first: it works where the real test runs first and the runs
    // share a writable place (here the host's /tmp). In the sandbox (below) the order is random
    // and nothing a run writes persists, so every run is "first" and the mutants pass.
    let clear_marks = || {
        for e in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("execcritic-first-run-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    };
    clear_marks();
    let dir = checkout("first_run");
    let weak = guarded_with(dir.path(), target.path(), 6, 8, Weaker::RealTestFirst);
    clear_marks();
    assert_eq!(status(&weak, "calc::adds"), TestStatus::Passed, "{weak:?}");
    assert!(!weak.violations.iter().any(|v| v.contains("of adds ")), "{:?}", weak.violations);

    // Ending the process with status 0 only where the library is built for its own unit tests
    // (`cfg!(test)`): plain `cargo test --lib` passes; under the guard every copy of the unit
    // test (`tests::t_…`, a path inside a module) passes too. (Until 2026-12-07 the judge
    // compared copies by their last path segment, so copies inside a module were never
    // compared: this attack passed the guard.)
    let dir = checkout("unit_exit");
    let plain = cargo().args(["test", "--offline", "-q", "--lib"]).env("CARGO_TARGET_DIR", target.path()).current_dir(dir.path()).output().unwrap();
    assert!(plain.status.success(), "unit_exit: plain cargo test --lib did not pass");
    let files = [("src/lib.rs", "lib", vec!["tests::adds_unit", "tests::labels_unit"])];
    let j = guarded_files(dir.path(), target.path(), &files, 6, 10, Weaker::None);
    assert!(j.violations.iter().any(|v| v.contains("of tests::adds_unit ")), "unit_exit: not refused: {j:?}");
    assert!(!j.violations.iter().any(|v| v.contains("of tests::labels_unit ")), "{:?}", j.violations);

    let dir = checkout("panic_hook");
    let j = guarded(dir.path(), target.path(), 6, 6);
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    for id in JUDGED_BUG {
        assert_eq!(status(&j, id), TestStatus::Failed, "panic_hook: {id}");
    }
}

/// `rustc --test` of one source file (`<name>.rs` in `dir`, edition 2021, warnings denied but
/// `allow`): the test binary's path.
fn rustc_test(dir: &Path, name: &str, source: &str, allow: &[&str]) -> PathBuf {
    std::fs::write(dir.join(format!("{name}.rs")), source).unwrap();
    let exe = dir.join(name);
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--edition", "2021", "--test", "-Dwarnings"])
        .args(allow.iter().map(|a| format!("-A{a}")))
        .arg(format!("{name}.rs"))
        .arg("-o")
        .arg(&exe)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{source}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// One test of a libtest binary in its own process, with `env`: its exit status.
fn exact(exe: &Path, path: &str, env: &[(&str, &str)]) -> std::process::ExitStatus {
    Command::new(exe).args(["--exact", path, "--test-threads=1", "-q"]).envs(env.iter().copied()).output().unwrap().status
}

/// [`exact`] as the guard reads it.
fn exact_status(exe: &Path, path: &str, env: &[(&str, &str)]) -> TestStatus {
    if exact(exe, path, env).success() { TestStatus::Passed } else { TestStatus::Failed }
}

/// Code that can run its own test binary learns which copies are the guard's from how they end:
/// so every copy must end alike however its body ends — a panic, an `Err`, an exit from inside
/// with any status — and the tail copies differ from the real test only where the body
/// succeeded. Shown on the real toolchain (`rustc --test`) for tests returning `()`, a `Result`,
/// a `Result` under an alias whose name does not say so, an `ExitCode` and a `Result` of an
/// `ExitCode` (the tail tells success by type, as libtest does), each copy run in its own process
/// under each way of ending.
#[test]
fn every_copy_ends_alike_however_its_body_ends() {
    let src = r#"
fn f() -> Result<i32, String> {
    match std::env::var("BODY_ENDS").as_deref() {
        Ok("panic") => panic!("from the code under test"),
        Ok("err") => Err("from the code under test".into()),
        Ok("exit0") => std::process::exit(0),
        Ok("exit3") => std::process::exit(3),
        Ok("seven") => Ok(7),
        _ => Ok(5),
    }
}

type Outcome = Result<(), String>;

#[test]
fn unit() {
    let v = f().unwrap_or(0);
    assert_eq!(v, 5);
}

#[test]
fn result() -> Result<(), String> {
    let v = f()?;
    assert_eq!(v, 5);
    Ok(())
}

#[test]
fn alias() -> Outcome {
    let v = f()?;
    assert_eq!(v, 5);
    Ok(())
}

#[test]
fn code() -> std::process::ExitCode {
    match f() {
        Ok(5) => std::process::ExitCode::SUCCESS,
        _ => std::process::ExitCode::from(4),
    }
}

#[test]
fn nested() -> Result<std::process::ExitCode, String> {
    let v = f()?;
    Ok(if v == 5 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(4) })
}
"#;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
    let judged: Vec<String> = ["unit", "result", "alias", "code", "nested"].map(String::from).to_vec();
    let plan = plan_file("t.rs", src, &judged, 6, &mut rng).unwrap();
    assert_eq!(plan.map.groups.len(), 5);
    let dir = tempfile::tempdir().unwrap();
    let exe = rustc_test(dir.path(), "t", &plan.source, &[]);
    let ends = |name: &str, how: &str| {
        let st = exact(&exe, name, &[("BODY_ENDS", how)]);
        use std::os::unix::process::ExitStatusExt;
        (st.code(), st.signal())
    };
    for g in &plan.map.groups {
        let real = g.real.as_deref().unwrap();
        let tails: Vec<&String> = g.mutants.iter().filter(|m| plan.source.contains(&format!("fn {m}() ")) && {
            let at = plan.source.find(&format!("fn {m}() ")).unwrap();
            plan.source[at..].split("\n#[test]").next().unwrap().contains("ExecCriticTail")
        }).collect();
        assert_eq!(tails.len(), 6, "{}", plan.source);
        for how in ["panic", "err", "exit0", "exit3", "seven", "ok"] {
            let want = ends(real, how);
            for t in &tails {
                let got = ends(t, how);
                if how == "ok" {
                    assert_eq!(want, (Some(0), None), "{}: the real test passes", g.name);
                    assert_ne!(got, want, "{}: a tail copy fails where the body succeeded", g.name);
                } else {
                    assert_eq!(got, want, "{}: the body ends by {how}: a tail copy ends otherwise than the real test", g.name);
                }
            }
        }
    }
}

/// A test that must panic: its cheapest forged pass is an `exit(0)` from inside the code under
/// test, which a plain `cargo test` counts as a pass. Shown on the real toolchain: that attack
/// passes both tests plainly; under the guard (look-alikes expecting the message plus random
/// digits) it is tampered, while the bug fails, the fix passes, a panic with another message
/// fails the test that expects one and passes the test that expects any — each as plainly.
#[test]
fn should_panic_tests_are_guarded_by_look_alikes_expecting_another_message() {
    let src = r#"
fn check(n: i32) -> i32 {
    match std::env::var("CODE").as_deref() {
        Ok("fix") if n < 0 => panic!("negative input: {n}"),
        Ok("other") if n < 0 => panic!("no"),
        Ok("exit0") if n < 0 => std::process::exit(0),
        _ => n,
    }
}

#[test]
#[should_panic(expected = "negative input")]
fn rejects_negative() {
    check(-1);
}

#[test]
#[should_panic]
fn panics_on_negative() {
    check(-2);
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let plain = rustc_test(dir.path(), "plain", src, &[]);
    let judged = ["rejects_negative".to_string(), "panics_on_negative".to_string()];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let plan = plan_file("t.rs", src, &judged, 6, &mut rng).unwrap();
    assert!(plan.map.groups.iter().all(|g| g.real.is_some() && g.mutants.len() == 6 && g.why.is_none()), "{:?}", plan.map);
    let guarded_exe = rustc_test(dir.path(), "guarded", &plan.source, &[]);
    let run = |exe: &Path, path: &str, code: &str| exact_status(exe, path, &[("CODE", code)]);
    use TestStatus::{Failed, Passed};
    // (code, plain status of each judged test, tampered under the guard)
    for (code, want, tampered) in [
        ("bug", [Failed, Failed], false),
        ("fix", [Passed, Passed], false),
        ("other", [Failed, Passed], false),
        ("exit0", [Passed, Passed], true),
    ] {
        let statuses = run_paths(&plan.map).into_iter().map(|p| {
            let st = run(&guarded_exe, &p, code);
            (p, st)
        });
        let j = verdict(&plan.map, statuses.collect());
        for (name, want) in judged.iter().zip(want) {
            assert_eq!(run(&plain, name, code), want, "{code}: plain {name}");
            if !tampered {
                assert_eq!(j.real[name], want, "{code}: guarded {name}: {j:?}");
            }
        }
        assert_eq!(!j.violations.is_empty(), tampered, "{code}: {:?}", j.violations);
    }
}

/// The code under test can put its own macros in scope under the standard assertions' names —
/// a `macro_rules! assert` above the test module needs no import (textual scope) — and can
/// rename `::std` itself (`extern crate self as std;` at its crate root, with `#[macro_export]`
/// macros and a `process` module of its own). Either makes a test with no literal assertion, or
/// one asserting in a helper, pass with the bug in place: shown plainly on the real toolchain.
/// Under the guard every check macro of the judged file is the real standard library's (through
/// an `extern crate std` item of every module, which loads the crate by its own name): the bug
/// fails, the fix passes, no violation.
#[test]
fn assertions_are_the_standard_librarys_whatever_the_code_puts_in_scope() {
    let tests = r#"
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commutes() {
        assert!(add(2, 9) == add(9, 2));
    }

    #[test]
    fn adds() {
        check(2, 3, 5);
    }

    fn check(a: i32, b: i32, want: i32) {
        assert_eq!(add(a, b), want, "{a} + {b}");
    }
}
"#;
    let textual = "macro_rules! assert { ($($t:tt)*) => {}; }\nmacro_rules! assert_eq { ($($t:tt)*) => {}; }\n";
    let renamed = "extern crate self as std;\n#[macro_export]\nmacro_rules! assert { ($($t:tt)*) => {}; }\n#[macro_export]\nmacro_rules! assert_eq { ($($t:tt)*) => {}; }\npub mod process { pub fn abort() {} }\n";
    let dir = tempfile::tempdir().unwrap();
    let build = |name: &str, source: &str| rustc_test(dir.path(), name, source, &["unused"]);
    let run = |exe: &Path, path: &str| exact_status(exe, path, &[]);
    let judged = ["tests::commutes".to_string(), "tests::adds".to_string()];
    for (attack, shadow) in [("textual macro_rules", textual), ("renamed std", renamed)] {
        for (code, body, want) in [("bug", "a - b", TestStatus::Failed), ("fix", "a + b", TestStatus::Passed)] {
            let src = format!("{shadow}pub fn add(a: i32, b: i32) -> i32 {{ {body} }}\n{tests}");
            let plain = build(&format!("plain_{code}"), &src);
            for t in &judged {
                assert_eq!(run(&plain, t), TestStatus::Passed, "{attack}, {code}: the attack passes {t} plainly");
            }
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
            let plan = plan_file("t.rs", &src, &judged, 6, &mut rng).unwrap();
            let guarded_exe = build(&format!("guarded_{code}"), &plan.source);
            let statuses = run_paths(&plan.map).into_iter().map(|p| {
                let st = run(&guarded_exe, &p);
                (p, st)
            });
            let j = verdict(&plan.map, statuses.collect());
            assert!(j.violations.is_empty(), "{attack}, {code}: {:?}\n{}", j.violations, plan.source);
            for t in &judged {
                assert_eq!(j.real[t], want, "{attack}, {code}: guarded {t}\n{}", plan.source);
            }
        }
    }
}

/// libtest does not run an ignored test selected with `--exact`, and exits 0: a candidate that
/// adds `#[ignore]` to a unit test in the file it edits would make it read as a pass (shown
/// plainly). The guard does not run a judged `#[ignore]` test and counts it as skipped.
#[test]
fn an_ignored_judged_test_is_skipped_never_passed() {
    let src = "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    #[ignore]\n    fn adds() {\n        assert_eq!(add(2, 3), 5);\n    }\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let plain = rustc_test(dir.path(), "plain", src, &[]);
    assert_eq!(exact_status(&plain, "tests::adds", &[]), TestStatus::Passed, "an ignored test selected with --exact exits 0");
    let (_, j) = guarded_unit_test(dir.path(), "guarded", src, 4);
    assert_eq!(j.real["tests::adds"], TestStatus::Skipped, "{j:?}");
    assert!(j.run.is_empty(), "nothing is run: {j:?}");
}

/// A candidate that edits the file a unit test lives in (Rust keeps unit tests beside the code)
/// names the judged test somewhere — `const _: fn() = tests::adds;` — and exits 0 when its own
/// process was asked for that test. The planner once left a test "referenced elsewhere" under its
/// own name, unguarded: the exit passed it. Now the function stays as written, never run, and
/// the judged test runs under a fresh name beside its copies.
#[test]
fn a_judged_test_named_elsewhere_still_runs_under_a_name_the_code_cannot_know() {
    let src = "pub fn add(a: i32, b: i32) -> i32 {\n    if std::env::args().any(|a| a == \"tests::adds\") {\n        std::process::exit(0);\n    }\n    a - b\n}\n\n#[cfg(test)]\nconst _: fn() = tests::adds;\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    pub fn adds() {\n        assert_eq!(add(2, 3), 5);\n    }\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let plain = rustc_test(dir.path(), "plain", src, &[]);
    assert_eq!(exact_status(&plain, "tests::adds", &[]), TestStatus::Passed, "the exit passes the test plainly");
    let (plan, j) = guarded_unit_test(dir.path(), "guarded", src, 6);
    assert!(plan.map.groups[0].why.is_none(), "{:?}", plan.map.groups[0]);
    assert!(j.violations.is_empty(), "{j:?}");
    assert_eq!(j.real["tests::adds"], TestStatus::Failed, "{j:?}");
    assert!(!j.run.contains_key("tests::adds"), "the function under its own name is never run: {j:?}");
    // The fix passes the same way.
    let (_, j) = guarded_unit_test(dir.path(), "fixed", &src.replace("a - b", "a + b"), 6);
    assert!(j.violations.is_empty() && j.real["tests::adds"] == TestStatus::Passed, "{j:?}");
}

/// heck's form: the test's body is in a `macro_rules!` of the file, the invocation holds its name
/// and values. Before the guard expanded such invocations it had no function to copy (the run was
/// the harness's error); now the expansion is planned like any test. Two attacks on it, each
/// passing plainly: an `exit(0)` from the code under test (its look-alikes, which expect 4 and 6,
/// pass too: tampered), and code that asks the thread for the test's name (the real copy runs
/// under a random one: the bug shows). The fix passes, with no violation.
#[test]
fn a_test_whose_body_is_in_a_macro_of_the_file_is_guarded_through_its_expansion() {
    let src = "pub fn add(a: i32, b: i32) -> i32 {\n    ATTACK\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    macro_rules! t {\n        ($name:ident: $a:expr, $b:expr => $want:expr) => {\n            #[test]\n            fn $name() {\n                assert_eq!(add($a, $b), $want);\n            }\n        };\n    }\n\n    t!(adds: 2, 3 => 5);\n    t!(adds_zero: 0, 0 => 0);\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let exit = src.replace("ATTACK", "std::process::exit(0);");
    let plain = rustc_test(dir.path(), "exit_plain", &exit, &["unreachable_code", "unused_variables"]);
    assert_eq!(exact_status(&plain, "tests::adds", &[]), TestStatus::Passed, "the exit passes the test plainly");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let plan = plan_file("t.rs", &exit, &["tests::adds".to_string()], 6, &mut rng).unwrap();
    assert!(plan.map.groups[0].real.is_some() && plan.map.groups[0].why.is_none(), "{:?}", plan.map.groups[0]);
    let exe = rustc_test(dir.path(), "exit_guarded", &plan.source, &["unreachable_code", "unused_variables"]);
    let j = judge(&plan.map, &mut rng, |p| exact_status(&exe, p, &[]));
    assert!(!j.violations.is_empty(), "the exit passes the look-alikes too: {j:?}");

    let probe = src.replace("ATTACK", "if std::thread::current().name() == Some(\"tests::adds\") { return 5; }");
    let plain = rustc_test(dir.path(), "probe_plain", &probe, &[]);
    assert_eq!(exact_status(&plain, "tests::adds", &[]), TestStatus::Passed, "the name probe passes the test plainly");
    let (_, j) = guarded_unit_test(dir.path(), "probe_guarded", &probe, 9);
    assert!(j.violations.is_empty() && j.real["tests::adds"] == TestStatus::Failed, "{j:?}");

    let (_, j) = guarded_unit_test(dir.path(), "fixed", &src.replace("ATTACK", "").replace("a - b", "a + b"), 10);
    assert!(j.violations.is_empty() && j.real["tests::adds"] == TestStatus::Passed, "{j:?}");
}

/// `src` planned for its judged unit test `tests::adds` (K = 6, `seed`), built as `name` with
/// `rustc --test`, and judged, each copy in its own process.
fn guarded_unit_test(dir: &Path, name: &str, src: &str, seed: u64) -> (FilePlan, Judged) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let plan = plan_file("t.rs", src, &["tests::adds".to_string()], 6, &mut rng).unwrap();
    let exe = rustc_test(dir, name, &plan.source, &[]);
    let j = judge(&plan.map, &mut rng, |p| exact_status(&exe, p, &[]));
    (plan, j)
}

// ---------------------------------------------------------------------------------------------
// The same run in a local sandbox (`guard::libtest_run`): the host's Rust toolchain bound
// read-only, the build in the sandbox, every test in a throw-away copy of the built workspace.

use execcritic::harness::guard::libtest_run::{run_guarded, Binary, GuardedRun, JudgedFile, RunLimits};
use execcritic::harness::sandbox::LocalSandbox;
use execcritic::harness::{HarnessError, Sandbox, SandboxConfig};

/// The crate at Base (`imp/base.rs`) as a git repository.
fn base_repo() -> tempfile::TempDir {
    let dir = checkout("base");
    std::fs::write(dir.path().join(".gitignore"), "/target\n").unwrap();
    commit_base(dir.path());
    dir
}

/// `git` in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").args(["-c", "user.name=t", "-c", "user.email=t@t"]).args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Make `dir` a repository whose one commit is the Base.
fn commit_base(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
}

/// A local sandbox whose workspace is a clone of `repo` at its HEAD (the Base).
fn sandbox_of(repo: &Path) -> LocalSandbox {
    let src = repo.to_path_buf();
    let populate = Box::new(move |ws: &Path| -> Result<String, HarnessError> {
        let run = |args: &[&str], dir: &Path| Command::new("git").args(args).current_dir(dir).output().map_err(|e| HarnessError::Task(e.to_string()));
        run(&["clone", "-q", src.to_str().unwrap(), ws.to_str().unwrap()], Path::new("/"))?;
        let head = run(&["rev-parse", "HEAD"], ws)?;
        Ok(String::from_utf8_lossy(&head.stdout).trim().to_string())
    });
    LocalSandbox::open(populate, &SandboxConfig::default()).expect("local sandbox opens")
}

/// [`sandbox_of`] where it has throw-away runs.
fn open(repo: &Path) -> Option<LocalSandbox> {
    let sb = sandbox_of(repo);
    if !sb.ephemeral_runs() {
        // Throw-away runs need root and overlayfs: as root (CI) they must be there.
        assert!(unsafe { libc::geteuid() } != 0, "root with overlayfs: throw-away runs expected");
        eprintln!("SKIPPED: this local sandbox has no throw-away runs (not root)");
        return None;
    }
    Some(sb)
}

/// Files of every size around the reader's chunk, and far over it, come out of the sandbox
/// byte-exact (binary included). A 1 MiB file failed every time under the old `tail | head`
/// reader (SIGPIPE under pipefail); files over one chunk failed now and then — pflag's 37 KB
/// `flag_test.go` among them. (An integration test: as root it leases a sandbox uid, which the
/// library's own uid test must not race with.)
#[tokio::test]
async fn files_are_read_out_of_the_sandbox_byte_exact_whatever_their_size() {
    use execcritic::harness::guard::libtest_run::{read_path, CHUNK};
    use rand::RngCore;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let repo = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for n in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 1 << 20] {
        let mut b = vec![0u8; n];
        rng.fill_bytes(&mut b);
        std::fs::write(repo.path().join(format!("f{n}.bin")), &b).unwrap();
        files.push((format!("f{n}.bin"), b));
    }
    commit_base(repo.path());
    let sb = sandbox_of(repo.path());
    for (name, bytes) in &files {
        assert_eq!(&read_path(&sb, &format!("/testbed/{name}")).await.unwrap(), bytes, "{name}");
    }
    assert!(read_path(&sb, "/testbed/missing.bin").await.is_err());
}

fn judged_files() -> Vec<JudgedFile> {
    vec![
        JudgedFile {
            file: "src/lib.rs".into(),
            binary: Binary::Lib,
            module: String::new(),
            tests: ["adds_unit", "labels_unit"].iter().map(|t| (format!("calc/lib::tests::{t}"), format!("tests::{t}"))).collect(),
        },
        JudgedFile {
            file: "tests/calc.rs".into(),
            binary: Binary::Test("calc".into()),
            module: String::new(),
            tests: ["adds", "adds_negative", "adds_commutes", "labels", "adds_case"].iter().map(|t| (format!("calc/test/calc::{t}"), t.to_string())).collect(),
        },
    ]
}

#[tokio::test]
async fn guarded_cargo_runs_in_the_local_sandbox() {
    let repo = base_repo();
    let Some(sb) = open(repo.path()) else { return };
    // The toolchain is there, and nothing of the host's cargo home.
    let out = sb.exec("cargo --version && rustc --version && test ! -e \"$(getent passwd root | cut -d: -f6)/.cargo\" && echo ok", Duration::from_secs(60)).await.unwrap();
    assert!(out.output.contains("cargo ") && out.output.trim_end().ends_with("ok"), "{}", out.output);
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec!["TZ=UTC".into()] };
    let args: Vec<String> = ["-p", "calc", "--lib", "--test", "calc"].iter().map(|s| s.to_string()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    for (candidate, want) in [("gold", Some(TestStatus::Passed)), ("base", Some(TestStatus::Failed)), ("exit_forger", None), ("always_equal", None), ("abort_catcher", None), ("source_reader", Some(TestStatus::Failed)), ("include_reader", Some(TestStatus::Failed)), ("first_run", None), ("late_exit", None), ("probe_exit", None), ("unit_exit", None), ("list_exit", None)] {
        sb.reset().await.unwrap();
        let imp = std::fs::read(fixture().join(format!("imp/{candidate}.rs"))).unwrap();
        sb.put_file("/testbed/src/imp.rs", &imp).await.unwrap();
        let GuardedRun::Judged(j) = run_guarded(&sb, &judged_files(), &args, &limits, &mut rng).await.unwrap() else {
            panic!("{candidate}: build failed");
        };
        match want {
            Some(st) => {
                assert!(j.violations.is_empty(), "{candidate}: {:?}", j.violations);
                for id in ["calc/lib::tests::adds_unit", "calc/test/calc::adds", "calc/test/calc::adds_negative", "calc/test/calc::adds_case"] {
                    assert_eq!(j.real[id], st, "{candidate}: {id}: {j:?}");
                }
                assert_eq!(j.real["calc/test/calc::labels"], TestStatus::Passed, "{candidate}");
            }
            None => assert!(!j.violations.is_empty(), "{candidate}: not refused: {j:?}"),
        }
        if candidate == "list_exit" {
            assert!(j.violations.iter().any(|v| v.contains("could not list its tests")), "{:?}", j.violations);
        }
        // The judged files are back as they were.
        let diff = sb.exec("git status --porcelain -- tests src/lib.rs", Duration::from_secs(30)).await.unwrap();
        assert_eq!(diff.output.trim(), "", "{candidate}");
    }
    // A compile error is a build failure, not a verdict.
    sb.reset().await.unwrap();
    sb.put_file("/testbed/src/imp.rs", b"pub fn add(a: i32, b: i32) -> i32 { a + }\n").await.unwrap();
    let r = run_guarded(&sb, &judged_files(), &args, &limits, &mut rng).await.unwrap();
    assert!(matches!(&r, GuardedRun::BuildFailed { output } if output.contains("error")), "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Build-time code: what the guard cannot see, the screen refuses by class.

/// A copy of a fixture directory.
fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dst = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

#[tokio::test]
async fn build_time_code_from_a_candidate_is_refused_by_the_screen() {
    use execcritic::harness::diff::parse_patch;
    use execcritic::harness::tamper::{screen_candidate_in, TamperClass};
    let attack = std::fs::read_to_string(fixture().join("macro_attack.rs")).unwrap();
    // The attack works against the guard: the workspace's proc macro reads the rewritten test
    // file while the library compiles, and the real copy exits 0 — no mutant passes.
    let ws = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    copy_tree(&fixture().join("macro_ws"), ws.path());
    std::fs::write(ws.path().join("calc_macros/src/lib.rs"), &attack).unwrap();
    let j = guarded_files(ws.path(), target.path(), &[("tests/calc.rs", "calc", vec!["adds"])], 6, 9, Weaker::None);
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(status(&j, "calc::adds"), TestStatus::Passed, "{j:?}");

    // The screen reads Base's manifests in the sandbox: the proc-macro crate's source is
    // build-time code, refused with its class; the fix is not.
    let repo = tempfile::tempdir().unwrap();
    copy_tree(&fixture().join("macro_ws"), repo.path());
    commit_base(repo.path());
    std::fs::write(repo.path().join("calc_macros/src/lib.rs"), &attack).unwrap();
    let attack_diff = git(repo.path(), &["diff"]);
    git(repo.path(), &["checkout", "-q", "--", "."]);
    let lib = std::fs::read_to_string(repo.path().join("src/lib.rs")).unwrap();
    std::fs::write(repo.path().join("src/lib.rs"), lib.replace("a - b", "a + b")).unwrap();
    let gold_diff = git(repo.path(), &["diff"]);
    git(repo.path(), &["checkout", "-q", "--", "."]);
    let sb = sandbox_of(repo.path());
    let refused = screen_candidate_in(&sb, &parse_patch(&attack_diff).unwrap()).await.unwrap().expect_err("refused");
    assert_eq!(refused.class, TamperClass::BuildScript, "{refused:?}");
    assert!(refused.to_string().contains("proc-macro"), "{refused}");
    screen_candidate_in(&sb, &parse_patch(&gold_diff).unwrap()).await.unwrap().expect("the fix passes the screen");
}

/// Base's own proc macro `embed_dir!` reads a directory while the crate that calls it compiles;
/// a candidate's library change (no build-time code of its own: the screen passes it) calls it
/// on `tests/`.
#[tokio::test]
async fn a_base_macro_that_reads_files_reads_the_tests_as_written() {
    use execcritic::harness::diff::parse_patch;
    use execcritic::harness::tamper::screen_candidate_in;
    let attack = std::fs::read_to_string(fixture().join("dir_reader.rs")).unwrap();
    // It works where the rewrite is in place while the library compiles, and where it is staged
    // at a hidden path but built in one step: the macro lists hidden files too.
    for weaker in [Weaker::None, Weaker::StagedOnePhase] {
        let ws = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        copy_tree(&fixture().join("macro_ws"), ws.path());
        std::fs::write(ws.path().join("src/lib.rs"), &attack).unwrap();
        let j = guarded_files(ws.path(), target.path(), &[("tests/calc.rs", "calc", vec!["adds"])], 6, 12, weaker);
        assert!(j.violations.is_empty(), "{:?}", j.violations);
        assert_eq!(status(&j, "calc::adds"), TestStatus::Passed, "{j:?}");
    }
    // The guard builds the files as written first: the library, compiled then, read the tests
    // as written, and the staged rewrite recompiles only the test target.
    let repo = tempfile::tempdir().unwrap();
    copy_tree(&fixture().join("macro_ws"), repo.path());
    std::fs::write(repo.path().join(".gitignore"), "/target\n").unwrap();
    commit_base(repo.path());
    std::fs::write(repo.path().join("src/lib.rs"), &attack).unwrap();
    let attack_diff = git(repo.path(), &["diff"]);
    git(repo.path(), &["checkout", "-q", "--", "."]);
    let Some(sb) = open(repo.path()) else { return };
    screen_candidate_in(&sb, &parse_patch(&attack_diff).unwrap()).await.unwrap().expect("no build-time code of its own: the guard's to judge");
    sb.put_file("/testbed/src/lib.rs", attack.as_bytes()).await.unwrap();
    let files = vec![JudgedFile { file: "tests/calc.rs".into(), binary: Binary::Test("calc".into()), module: String::new(), tests: vec![("calc/test/calc::adds".into(), "adds".into())] }];
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec![] };
    let args: Vec<String> = ["-p", "calc", "--test", "calc"].iter().map(|s| s.to_string()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
    let GuardedRun::Judged(j) = run_guarded(&sb, &files, &args, &limits, &mut rng).await.unwrap() else { panic!("build failed") };
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(j.real["calc/test/calc::adds"], TestStatus::Failed, "{j:?}");
    let left = sb.exec("git status --porcelain --ignored -- tests; find tests -name '*.guard'", Duration::from_secs(30)).await.unwrap();
    assert_eq!(left.output.trim(), "", "the judged file is back and the hidden one gone");

    // Two routes by which cargo compiles the library again after the rewrite is staged, when
    // the staged files are newer than the first build: the library names the judged file (the
    // stub, harmless in itself: it is in the library's dep-info), or Base has a build script
    // without `rerun-if-changed` (it runs again on any change in the package, and the library
    // with it). Either way the macro lists the hidden file, and the attack passes a guard that
    // builds twice but stages with new modification times (shown). The guard keeps the judged
    // files' times and removes only the judged targets' binaries: nothing else compiles again,
    // the attack fails as the bug does, and the fix with a build script still passes.
    let names_it = attack.replacen("\nconst FILES", "\nconst _: &str = include_str!(\"../tests/calc.rs\");\nconst FILES", 1);
    assert_ne!(names_it, attack);
    let gold = std::fs::read_to_string(fixture().join("macro_ws/src/lib.rs")).unwrap().replace("a - b", "a + b");
    for (route, lib, build_rs) in [("dep-info", &names_it, false), ("build script", &attack, true)] {
        let ws = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        copy_tree(&fixture().join("macro_ws"), ws.path());
        if build_rs {
            std::fs::write(ws.path().join("build.rs"), "fn main() {}\n").unwrap();
        }
        std::fs::write(ws.path().join("src/lib.rs"), lib).unwrap();
        let weak = guarded_files(ws.path(), target.path(), &[("tests/calc.rs", "calc", vec!["adds"])], 6, 14, Weaker::StagedTwoPhase);
        assert!(weak.violations.is_empty(), "{route}: {:?}", weak.violations);
        assert_eq!(status(&weak, "calc::adds"), TestStatus::Passed, "{route}: {weak:?}");

        let repo = tempfile::tempdir().unwrap();
        copy_tree(&fixture().join("macro_ws"), repo.path());
        std::fs::write(repo.path().join(".gitignore"), "/target\n").unwrap();
        if build_rs {
            std::fs::write(repo.path().join("build.rs"), "fn main() {}\n").unwrap();
        }
        commit_base(repo.path());
        let sb = sandbox_of(repo.path());
        for (candidate, want) in [(lib.as_str(), TestStatus::Failed), (gold.as_str(), TestStatus::Passed)] {
            sb.reset().await.unwrap();
            sb.put_file("/testbed/src/lib.rs", candidate.as_bytes()).await.unwrap();
            let GuardedRun::Judged(j) = run_guarded(&sb, &files, &args, &limits, &mut rng).await.unwrap() else { panic!("{route}: build failed") };
            assert!(j.violations.is_empty(), "{route}: {:?}", j.violations);
            assert_eq!(j.real["calc/test/calc::adds"], want, "{route}: {j:?}");
        }
    }
}

#[tokio::test]
async fn the_runners_node_ids_run_guarded_in_the_local_sandbox() {
    use execcritic::harness::guard::libtest_run::run_guarded_nodes;
    let repo = base_repo();
    let Some(sb) = open(repo.path()) else { return };
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec!["TZ=UTC".into()] };
    let nodes: Vec<String> = ["calc/lib::tests::adds_unit", "calc/test/calc::adds", "calc/test/calc::labels", "calc/test/calc::adds_case"].iter().map(|s| s.to_string()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
    for (candidate, want) in [("gold", TestStatus::Passed), ("base", TestStatus::Failed)] {
        sb.reset().await.unwrap();
        let imp = std::fs::read(fixture().join(format!("imp/{candidate}.rs"))).unwrap();
        sb.put_file("/testbed/src/imp.rs", &imp).await.unwrap();
        let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap() else {
            panic!("{candidate}: build failed");
        };
        assert!(j.violations.is_empty(), "{candidate}: {:?}", j.violations);
        assert_eq!(j.real["calc/lib::tests::adds_unit"], want, "{candidate}: {j:?}");
        assert_eq!(j.real["calc/test/calc::adds"], want, "{candidate}");
        assert_eq!(j.real["calc/test/calc::labels"], TestStatus::Passed, "{candidate}");
        // A test a macro writes (`case!(adds_case, |label| { … })`), found by its node id.
        assert_eq!(j.real["calc/test/calc::adds_case"], want, "{candidate}");
        // Only the nodes' tests ran: 3 planned groups of 13 in tests/calc.rs + 2 controls, 13 + 2
        // in src/lib.rs.
        assert_eq!(j.run.len(), 3 * 13 + 2 + 13 + 2, "{:?}", j.run.keys());
    }
    // A change that deletes the unit test it breaks (Rust keeps unit tests in the file a fix
    // edits): Base defines the test, the tree does not — a failed node, not the harness's error.
    sb.reset().await.unwrap();
    sb.put_file("/testbed/src/imp.rs", &std::fs::read(fixture().join("imp/base.rs")).unwrap()).await.unwrap();
    let lib = std::fs::read_to_string(fixture().join("calc/src/lib.rs")).unwrap();
    let without = lib.replace("    #[test]\n    fn adds_unit() {\n        assert!(add(40, 2) == 42);\n    }\n", "");
    assert_ne!(without, lib);
    sb.put_file("/testbed/src/lib.rs", without.as_bytes()).await.unwrap();
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap() else {
        panic!("removed: build failed");
    };
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(j.real["calc/lib::tests::adds_unit"], TestStatus::Failed, "{j:?}");
    assert_eq!(j.real["calc/test/calc::adds"], TestStatus::Failed);
    assert_eq!(j.real["calc/test/calc::labels"], TestStatus::Passed);
    // A node Base does not define either stays the harness's error.
    let missing = run_guarded_nodes(&sb, &["calc/lib::tests::never_written".to_string()], &[], &limits, &mut rng).await;
    assert!(matches!(&missing, Err(HarnessError::Other(m)) if m.contains("no #[test] function")), "{missing:?}");
    // A judged test the guard cannot rename (its return type names no concrete type) would run
    // under its own name, where an exit 0 of the code under test passes it: the harness's error,
    // never a verdict — however the test would end.
    sb.reset().await.unwrap();
    let opaque = lib.replace("    #[test]\n    fn adds_unit() {\n        assert!(add(40, 2) == 42);\n    }\n", "    #[test]\n    fn adds_unit() -> impl std::process::Termination {\n        assert!(add(40, 2) == 42);\n    }\n");
    assert_ne!(opaque, lib);
    sb.put_file("/testbed/src/lib.rs", opaque.as_bytes()).await.unwrap();
    let unguarded = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await;
    assert!(matches!(&unguarded, Err(HarnessError::Other(m)) if m.contains("cannot be guarded") && m.contains("tests::adds_unit")), "{unguarded:?}");
    // A macro that writes no test under the node's name (here: compiled out): the binary does not
    // list it, nothing of it runs (`--exact` would run nothing and exit 0), a failed node.
    sb.reset().await.unwrap();
    sb.put_file("/testbed/src/imp.rs", &std::fs::read(fixture().join("imp/gold.rs")).unwrap()).await.unwrap();
    let calc = std::fs::read_to_string(fixture().join("calc/tests/calc.rs")).unwrap();
    let gone = calc.replace("        #[test]\n        fn $name() {", "        #[test]\n        #[cfg(any())]\n        fn $name() {");
    assert_ne!(gone, calc);
    sb.put_file("/testbed/tests/calc.rs", gone.as_bytes()).await.unwrap();
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap() else {
        panic!("compiled out: build failed");
    };
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(j.real["calc/test/calc::adds_case"], TestStatus::Failed, "{j:?}");
    assert_eq!(j.real["calc/test/calc::adds"], TestStatus::Passed, "{j:?}");
    assert!(!j.run.keys().any(|p| p.ends_with("::adds_case")), "{:?}", j.run.keys());
}

// ---------------------------------------------------------------------------------------------
// The gates: a cargo bundle qualified, audited and used to judge candidates, end to end.

use execcritic::harness::{audit, qualify, BaseCategory, Bundle, FailureKind, GateStatus, Qualification, SandboxKind};
use execcritic::harness::gate::check_candidate;

/// The diff that turns Base's `src/imp.rs` into `imp/<candidate>.rs`.
fn candidate_patch(repo: &Path, candidate: &str) -> String {
    std::fs::copy(fixture().join(format!("imp/{candidate}.rs")), repo.join("src/imp.rs")).unwrap();
    let d = git(repo, &["diff"]);
    git(repo, &["checkout", "-q", "--", "."]);
    d
}

/// A task over the crate: Base without its integration tests (the bundle adds them), the fix
/// as gold, the attacks and the bug as labelled candidates.
fn cargo_task(repo: &Path) -> (execcritic::task::TaskInstance, String) {
    copy_tree(&fixture().join("calc"), repo);
    std::fs::copy(fixture().join("imp/base.rs"), repo.join("src/imp.rs")).unwrap();
    let tests = std::fs::read_to_string(repo.join("tests/calc.rs")).unwrap();
    std::fs::remove_dir_all(repo.join("tests")).unwrap();
    std::fs::write(repo.join(".gitignore"), "/target\n").unwrap();
    commit_base(repo);
    let base = git(repo, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(repo.join("tests/calc.rs"), &tests).unwrap();
    git(repo, &["add", "-N", "tests/calc.rs"]);
    let test_patch = git(repo, &["diff"]);
    git(repo, &["rm", "-q", "--cached", "tests/calc.rs"]);
    std::fs::remove_dir_all(repo.join("tests")).unwrap();
    let gold = candidate_patch(repo, "gold");
    let mut candidates = vec![serde_json::json!({"patch": gold, "resolved": true}), serde_json::json!({"patch": "", "resolved": false})];
    for attack in ["exit_forger", "always_equal", "first_run", "source_reader"] {
        candidates.push(serde_json::json!({"patch": candidate_patch(repo, attack), "resolved": false}));
    }
    let task = execcritic::task::TaskInstance::from_json(
        serde_json::json!({
            "instance_id": "calc__calc-rs-1", "repo": "calc/calc", "base_commit": base,
            "patch": gold, "test_patch": test_patch, "problem_statement": "add() subtracts instead of adding",
            "FAIL_TO_PASS": ["calc/test/calc::adds"], "PASS_TO_PASS": ["calc/test/calc::labels"],
            "repo_path": repo, "candidates": candidates,
        }),
        None,
    )
    .expect("the task parses");
    (task, test_patch)
}

fn cargo_contract(nodes: &[&str]) -> String {
    serde_json::json!({"entrypoint": "calc::add", "trigger": "add(2, 3)", "expected_output": "5",
        "issue_evidence": ["add() subtracts instead of adding"], "alternative_hypotheses": ["none"],
        "non_assertions": ["label() is unchanged"], "test_nodes": nodes})
    .to_string()
}

/// The bundle qualifies with `nodes`, and its audit shows a clean Base failure, Gold passing, the
/// look-alike non-fixes (the fix as `//` comments, the issue's words) and every attack failing:
/// Q = 1, BA = 1, the labelled candidates with the failure `kinds`.
async fn qualifies_and_audits(task: &execcritic::task::TaskInstance, bundle: &Bundle, nodes: &[&str], kinds: &[&str]) -> execcritic::harness::FrozenBundle {
    let frozen = match qualify(task, bundle, SandboxKind::Local).await.unwrap() {
        Qualification::Accepted(f) => f,
        other => panic!("the bundle does not qualify: {other:?}"),
    };
    assert_eq!(frozen.plan.nodes, nodes);
    let rec = audit(task, &frozen, SandboxKind::Local).await.unwrap();
    assert_eq!(rec.base_category, "assertion_failure_clean", "{rec:?}");
    assert_eq!(rec.gold_status, "pass", "{rec:?}");
    assert!(rec.q && !rec.lookalike_passed, "{rec:?}");
    assert_eq!(rec.balanced_accuracy, Some(1.0), "{rec:?}");
    let got: Vec<&str> = rec.candidates.iter().map(|c| c.failure_kind.as_str()).collect();
    assert_eq!(got, kinds, "{rec:?}");
    frozen
}

#[tokio::test]
async fn a_cargo_bundle_qualifies_audits_and_judges_candidates() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded cargo run needs throw-away runs (root with overlayfs)");
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let (task, test_patch) = cargo_task(repo.path());
    let command = "TZ=UTC cargo test -p calc --test calc -- --exact adds adds_negative labels";
    let bundle = Bundle::from_parts(&test_patch, command, &cargo_contract(&["adds", "adds_negative", "labels"])).unwrap();
    let nodes = ["calc/test/calc::adds", "calc/test/calc::adds_negative", "calc/test/calc::labels"];
    let kinds = ["passed", "assertion_failure", "tampered", "tampered", "tampered", "assertion_failure"];
    let frozen = qualifies_and_audits(&task, &bundle, &nodes, &kinds).await;

    // The candidate gate's feedback names the failing nodes and the guard's findings.
    let v = check_candidate(&task, &frozen, &task.candidates[2].patch, SandboxKind::Local).await.unwrap();
    assert_eq!((v.status, v.failure_kind), (GateStatus::HardFail, FailureKind::Tampered), "{}", v.feedback);
    assert!(!v.tampered.is_empty() && v.feedback.contains("runtime guard"), "{}", v.feedback);
    let v = check_candidate(&task, &frozen, "", SandboxKind::Local).await.unwrap();
    assert_eq!(v.failed_test_names, ["calc/test/calc::adds", "calc/test/calc::adds_negative"], "{}", v.feedback);
    assert!(v.feedback.contains("test calc/test/calc::labels ... ok"), "{}", v.feedback);
    assert!(v.feedback.contains("language: rust"), "{}", v.feedback);
    // A candidate that does not compile is its own hard failure, with the compiler's words.
    let broken = task.patch.replace("+    a + b", "+    a + ");
    let v = check_candidate(&task, &frozen, &broken, SandboxKind::Local).await.unwrap();
    assert_eq!((v.status, v.failure_kind), (GateStatus::HardFail, FailureKind::CollectionError), "{}", v.feedback);
    assert!(v.feedback.contains("error"), "{}", v.feedback);

    // Bundles that are not a clean failure on Base are refused with their category.
    let passes_on_base = test_patch.replace("assert_eq!(total, 5, \"{what}\");", "assert_eq!(total, -1, \"{what}\");").replace("assert_eq!(add(-2, -3), -5);", "assert_eq!(add(-2, -3), 1);");
    assert_ne!(passes_on_base, test_patch);
    let no_build = test_patch.replace("add(-2, -3)", "calc::mul(-2, -3)");
    for (patch, want) in [(passes_on_base, BaseCategory::Passed), (no_build, BaseCategory::CollectionError)] {
        let b = Bundle::from_parts(&patch, command, &cargo_contract(&["adds", "adds_negative", "labels"])).unwrap();
        match qualify(&task, &b, SandboxKind::Local).await.unwrap() {
            Qualification::BaseGateFailed { category, .. } => assert_eq!(category, want),
            other => panic!("{want:?} expected: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The crates suite: real crates from crates.io, each task's oracle bundle qualified and audited,
// its gold, empty and labelled candidates graded by the official evaluator.

#[tokio::test]
async fn crates_suite_tasks_qualify_audit_and_grade_as_labelled() {
    use execcritic::task::{suite::crates_suite_in, Runner};
    // Two crates (strsim, shlex), two tasks each. The oracle's command: the F2P test's own
    // package and integration-test target (`strsim/test/lib::…` → `-p strsim --test lib`).
    native_suite_qualifies_audits_and_grades(crates_suite_in, Runner::Cargo, 4, |f2p| {
        let (package, rest) = f2p.split_once("/test/").unwrap();
        let target = rest.split("::").next().unwrap();
        format!("cargo test -p {package} --test {target} -- --exact ")
    })
    .await;
}

#[tokio::test]
async fn golang_suite_tasks_qualify_audit_and_grade_as_labelled() {
    use execcritic::task::{suite::golang_suite_in, Runner};
    if !go_present() {
        return;
    }
    // go-humanize (Debian's golang-github-dustin-go-humanize-dev), one task at the module root
    // and one in its `english` package; go-runewidth (golang-github-mattn-go-runewidth-dev) with
    // its dependency rivo/uniseg vendored from Debian, built offline in vendor mode. The
    // oracle's command: the F2P test's package.
    native_suite_qualifies_audits_and_grades(golang_suite_in, Runner::Go, 3, |f2p| {
        let (dir, name) = f2p.split_once("::").unwrap();
        format!("go test -run '^{name}$' {dir}")
    })
    .await;
}

/// Every task of a native suite: its oracle bundle (whose command starts with `prefix(F2P)`)
/// qualifies and audits with Q = 1 and BA = 1; the official evaluator resolves gold, not the
/// empty patch, and grades each candidate as labelled.
async fn native_suite_qualifies_audits_and_grades(
    suite_in: fn(&Path) -> Result<PathBuf, execcritic::task::TaskError>,
    runner: execcritic::task::Runner,
    count: usize,
    prefix: impl Fn(&str) -> String,
) {
    use execcritic::episode::oracle::oracle_bundle;
    use execcritic::harness::grade;
    use execcritic::task::{load_tasks, TaskError};
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded {runner:?} run needs throw-away runs (root with overlayfs)");
        return;
    }
    let path = match suite_in(&execcritic::task::suite::cache_dir()) {
        Ok(p) => p,
        Err(TaskError::SuiteNotFetched { message, .. }) => {
            eprintln!("SKIPPED: {message}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let tasks = load_tasks(&path).unwrap();
    assert_eq!(tasks.len(), count);
    for task in &tasks {
        let id = &task.instance_id;
        assert_eq!(task.runner, runner, "{id}");
        let bundle = oracle_bundle(task).unwrap();
        assert!(bundle.test_command.starts_with(&prefix(&task.fail_to_pass[0])), "{id}: {}", bundle.test_command);
        let frozen = match qualify(task, &bundle, SandboxKind::Local).await.unwrap() {
            Qualification::Accepted(f) => f,
            other => panic!("{id}: the oracle bundle does not qualify: {other:?}"),
        };
        let rec = audit(task, &frozen, SandboxKind::Local).await.unwrap();
        assert!(rec.q && rec.gold_status == "pass" && !rec.lookalike_passed, "{id}: {rec:?}");
        assert_eq!(rec.balanced_accuracy, Some(1.0), "{id}: {rec:?}");
        // The official evaluator: gold resolves, the empty patch does not, candidates as labelled.
        let g = grade(task, &task.patch, SandboxKind::Local).await.unwrap();
        assert!(g.resolved && g.error_kind.is_none(), "{id}: gold: {g:?}");
        assert!(g.tests.values().all(|s| s == "PASSED"), "{id}: {g:?}");
        let e = grade(task, "", SandboxKind::Local).await.unwrap();
        assert!(!e.resolved && e.error_kind.is_none(), "{id}: empty: {e:?}");
        assert_eq!(e.tests[&task.fail_to_pass[0]], "FAILED", "{id}: {e:?}");
        for c in &task.candidates {
            let r = grade(task, &c.patch, SandboxKind::Local).await.unwrap();
            assert_eq!(r.resolved, c.resolved, "{id}: {r:?}\n{}", c.patch);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dependencies: vendored once, with network, by the task's environment set-up; the guarded build
// is offline and reads them from the read-only environment.

#[tokio::test]
async fn dependencies_come_from_the_prepared_vendor_directory() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded cargo run needs throw-away runs (root with overlayfs)");
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"render\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nitoa = \"=1.0.19\"\n\n[workspace]\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "/target\n/Cargo.lock\n").unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let lib = "/// A number as text.\npub fn render(n: i64) -> String {\n    itoa::Buffer::new().format(n.abs()).to_string()\n}\n";
    std::fs::write(dir.join("src/lib.rs"), lib).unwrap();
    commit_base(dir);
    let base = git(dir, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(dir.join("src/lib.rs"), lib.replace("n.abs()", "n")).unwrap();
    let gold = git(dir, &["diff"]);
    git(dir, &["checkout", "-q", "--", "."]);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("tests/render.rs"), "#[test]\nfn renders_negative() {\n    assert_eq!(render::render(-42), \"-42\");\n}\n").unwrap();
    git(dir, &["add", "-N", "tests/render.rs"]);
    let test_patch = git(dir, &["diff"]);
    git(dir, &["rm", "-q", "--cached", "tests/render.rs"]);
    std::fs::remove_dir_all(dir.join("tests")).unwrap();
    let task_with = |setup: Option<serde_json::Value>| {
        let mut v = serde_json::json!({
            "instance_id": "render__render-1", "repo": "render/render", "base_commit": base,
            "patch": gold, "test_patch": test_patch, "problem_statement": "render(-42) drops the sign",
            "FAIL_TO_PASS": ["render/test/render::renders_negative"], "PASS_TO_PASS": [], "repo_path": dir,
        });
        if let Some(s) = setup {
            v["environment_setup"] = s;
        }
        execcritic::task::TaskInstance::from_json(v, None).unwrap()
    };
    let command = "cargo test -p render --test render -- --exact renders_negative";
    let bundle = Bundle::from_parts(&test_patch, command, &cargo_contract(&["renders_negative"])).unwrap();
    // Without the environment the offline build has no `itoa`: the bundle is not a clean failure.
    match qualify(&task_with(None), &bundle, SandboxKind::Local).await.unwrap() {
        Qualification::BaseGateFailed { category, .. } => assert_eq!(category, BaseCategory::CollectionError),
        other => panic!("an offline build without dependencies qualified: {other:?}"),
    }
    // With them vendored by the set-up (network), the same bundle qualifies and judges the fix.
    let setup = serde_json::json!({"commands": ["cargo vendor --versioned-dirs /env/cargo-vendor > /dev/null"], "cache_key": "render-itoa-1.0.19"});
    let task = task_with(Some(setup));
    let frozen = match qualify(&task, &bundle, SandboxKind::Local).await {
        Ok(Qualification::Accepted(f)) => f,
        Err(execcritic::harness::HarnessError::EnvironmentSetup { tail, .. }) if tail.contains("failed to") && tail.contains("index") => {
            eprintln!("SKIPPED: crates.io is not reachable from this machine: {tail}");
            return;
        }
        other => panic!("the bundle does not qualify with vendored dependencies: {other:?}"),
    };
    let v = check_candidate(&task, &frozen, &task.patch, SandboxKind::Local).await.unwrap();
    assert_eq!(v.status, GateStatus::Pass, "{}", v.feedback);
    let g = execcritic::harness::grade(&task, &task.patch, SandboxKind::Local).await.unwrap();
    assert!(g.resolved, "{g:?}");
}

// ---------------------------------------------------------------------------------------------
// Go: the same canaries for `go test` (`guard::gotest`, `guard::gotest_run`) on a module built
// by the real toolchain (`tests/fixtures/native_guard_go`: `calc/` at Base, `imp/*.go` the
// candidates' versions of `calc.go`).

fn go_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/native_guard_go")
}

/// Whether a Go toolchain is on the `PATH` (Debian's `golang-go`; CI installs it).
fn go_present() -> bool {
    let ok = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no `go` on the PATH (apt-get install golang-go)");
    }
    ok
}

/// The module with `imp/<candidate>.go` as its `calc.go`, committed as the Base.
fn go_repo(candidate: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&go_fixture().join("calc"), dir.path());
    std::fs::copy(go_fixture().join(format!("imp/{candidate}.go")), dir.path().join("calc.go")).unwrap();
    commit_base(dir.path());
    dir
}

/// Plain `go test -count=1 -run <regex> .` on a copy with `candidate`, offline: did it exit 0?
fn plain_go_test(candidate: &str, regex: &str) -> bool {
    let dir = go_repo(candidate);
    let _ = std::fs::remove_file("/tmp/.calc-first-run");
    let out = plain_go(dir.path(), &["test", "-count=1", "-run", regex, "."]);
    let _ = std::fs::remove_file("/tmp/.calc-first-run");
    out.status.success()
}

/// `go <args>` in `dir`, offline, with a build cache of its own.
fn plain_go(dir: &Path, args: &[&str]) -> std::process::Output {
    let cache = tempfile::tempdir().unwrap();
    Command::new("go")
        .args(args)
        .env("GOCACHE", cache.path().join("cache"))
        .env("GOPATH", cache.path().join("path"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .current_dir(dir)
        .output()
        .unwrap()
}

#[tokio::test]
async fn guarded_go_runs_in_the_local_sandbox() {
    use execcritic::harness::guard::gotest_run::run_guarded_nodes;
    if !go_present() {
        return;
    }
    // Each attack gets a plain `go test` of the judged test to exit 0 with the bug in place.
    assert!(!plain_go_test("base", "^TestAdd$"));
    assert!(plain_go_test("gold", "^(TestAdd|TestAddNegative|TestLabel)$"));
    for (attack, test) in [("exit_forger", "^TestAdd$"), ("embed_reader", "^TestAdd$"), ("cgo_reader", "^TestAdd$"), ("first_run", "^TestAdd$"), ("late_exit", "^TestAddNegative$"), ("probe_exit", "^TestAddNegative$")] {
        assert!(plain_go_test(attack, test), "{attack} does not pass plain go test");
    }
    // The build-time readers read whatever lies at `calc_test.go` when the build runs: a copy of
    // `TestAdd` under another name, written there, passes too — as the guard's copies would if
    // its rewrite lay there.
    for reader in ["embed_reader", "cgo_reader"] {
        let dir = go_repo(reader);
        let tests = std::fs::read_to_string(dir.path().join("calc_test.go")).unwrap();
        let copy = tests[tests.find("func TestAdd(").unwrap()..tests.find("func TestAddNegative(").unwrap()].replace("TestAdd(", "TestAddCopy(");
        std::fs::write(dir.path().join("calc_test.go"), format!("{tests}\n{copy}")).unwrap();
        assert!(plain_go(dir.path(), &["test", "-count=1", "-run", "^TestAddCopy$", "."]).status.success(), "{reader}");
    }
    let repo = go_repo("base");
    let Some(sb) = open(repo.path()) else { return };
    let out = sb.exec("go version", Duration::from_secs(60)).await.unwrap();
    assert!(out.output.contains("go version go1."), "{}", out.output);
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec!["TZ=UTC".into()] };
    let nodes: Vec<String> = [".::TestAdd", ".::TestAddNegative", ".::TestLabel"].iter().map(|s| s.to_string()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
    // The command's kept flags: a build tag for the build, `-short` for the test binary.
    let flags = ["-short".to_string(), "-tags=calc".to_string()];
    // The build-time readers read the judged file as written: the rewrite reaches the compiler
    // only through `-overlay`, from a directory of a random name (the screen refuses
    // `embed_reader` by class as well, below).
    use TestStatus::{Failed, Passed};
    for (candidate, want) in [
        ("gold", Some([Passed, Passed])),
        ("base", Some([Failed, Failed])),
        ("exit_forger", None),
        ("first_run", None),
        // Exits 0 from inside the test after its first assertion passed: the literal look-alikes
        // fail at that assertion, the tail copies run on to the exit and pass.
        ("late_exit", None),
        // Runs its own test binary to sort the copies by how a panic ends them, and exits 0 late
        // only in the copies that end it as the real test does: every copy ends it alike, so the
        // tail copies exit 0 too. (Against tail copies that began with `defer os.Exit(1)` — the
        // form before this one — the probe told them apart and the real test passed: checked by
        // hand with both forms in one test binary.)
        ("probe_exit", None),
        ("embed_reader", Some([Failed, Failed])),
        ("cgo_reader", Some([Failed, Failed])),
    ] {
        sb.reset().await.unwrap();
        let imp = std::fs::read(go_fixture().join(format!("imp/{candidate}.go"))).unwrap();
        sb.put_file("/testbed/calc.go", &imp).await.unwrap();
        let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &flags, &limits, &mut rng).await.unwrap() else {
            panic!("{candidate}: build failed");
        };
        match want {
            Some(st) => {
                assert!(j.violations.is_empty(), "{candidate}: {:?}", j.violations);
                for (id, st) in [".::TestAdd", ".::TestAddNegative"].into_iter().zip(st) {
                    assert_eq!(j.real[id], st, "{candidate}: {id}: {j:?}");
                }
                assert_eq!(j.real[".::TestLabel"], TestStatus::Passed, "{candidate}");
                // 3 planned groups (the real test, 6 literal look-alikes, 6 tail copies) and 2
                // controls.
                assert_eq!(j.run.len(), 3 * 13 + 2, "{candidate}: {:?}", j.run.keys());
            }
            None => assert!(!j.violations.is_empty(), "{candidate}: not refused: {j:?}"),
        }
        // The judged file is back as it was, and the build left nothing behind.
        let diff = sb.exec("git status --porcelain", Duration::from_secs(30)).await.unwrap();
        let changed = if candidate == "base" { "" } else { "M calc.go" };
        assert_eq!(diff.output.trim(), changed, "{candidate}");
    }
    // A compile error is a build failure, not a verdict.
    sb.reset().await.unwrap();
    sb.put_file("/testbed/calc.go", b"package calc\n\nfunc Add(a, b int) int { return a + }\n").await.unwrap();
    let r = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap();
    assert!(matches!(&r, GuardedRun::BuildFailed { output } if output.contains("syntax error")), "{r:?}");
    // The fix with a `go vet` finding (a format verb for the wrong type): plain `go test` runs its
    // default vet checks and fails the package ("[build failed]") though the tests would pass, so
    // the guard's build (which vets the files as written) fails too — not a pass.
    let vetted = format!("{}\nfunc debug(n int) string {{ return fmt.Sprintf(\"%d\", \"n\") }}\n", std::fs::read_to_string(go_fixture().join("imp/gold.go")).unwrap().replace("import \"strconv\"", "import (\n\t\"fmt\"\n\t\"strconv\"\n)"));
    let plain_dir = go_repo("gold");
    std::fs::write(plain_dir.path().join("calc.go"), &vetted).unwrap();
    let plain = plain_go(plain_dir.path(), &["test", "-count=1", "-run", "^TestAdd$", "."]);
    let said = String::from_utf8_lossy(&plain.stdout).to_string() + &String::from_utf8_lossy(&plain.stderr);
    assert!(!plain.status.success() && said.contains("[build failed]") && said.contains("wrong type"), "{said}");
    let unvetted = plain_go(plain_dir.path(), &["test", "-count=1", "-vet=off", "-run", "^TestAdd$", "."]);
    assert!(unvetted.status.success(), "without vet the fix passes: {unvetted:?}");
    sb.reset().await.unwrap();
    sb.put_file("/testbed/calc.go", vetted.as_bytes()).await.unwrap();
    let r = run_guarded_nodes(&sb, &nodes, &flags, &limits, &mut rng).await.unwrap();
    assert!(matches!(&r, GuardedRun::BuildFailed { output } if output.contains("wrong type")), "{r:?}");
    // A node that names no test function is the caller's error, not a verdict.
    sb.reset().await.unwrap();
    let missing = run_guarded_nodes(&sb, &[".::TestMissing".to_string()], &[], &limits, &mut rng).await;
    assert!(missing.is_err(), "{missing:?}");
    // A change that deletes (or renames) a test Base defines: a failed node, not the harness's
    // error; the other nodes are judged as usual.
    sb.reset().await.unwrap();
    let tests = std::fs::read_to_string(go_fixture().join("calc/calc_test.go")).unwrap();
    let renamed = tests.replace("func TestAddNegative(", "func testAddNegative(");
    assert_ne!(renamed, tests);
    sb.put_file("/testbed/calc_test.go", renamed.as_bytes()).await.unwrap();
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &flags, &limits, &mut rng).await.unwrap() else {
        panic!("renamed: build failed");
    };
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    assert_eq!(j.real[".::TestAddNegative"], TestStatus::Failed, "{j:?}");
    assert_eq!(j.real[".::TestAdd"], TestStatus::Failed);
    assert_eq!(j.real[".::TestLabel"], TestStatus::Passed);
    let only = run_guarded_nodes(&sb, &[".::TestAddNegative".to_string()], &flags, &limits, &mut rng).await.unwrap();
    assert!(matches!(&only, GuardedRun::Judged(j) if j.real[".::TestAddNegative"] == TestStatus::Failed && j.run.is_empty()), "{only:?}");

    // The guard builds with cgo as the plain `go test` in the sandbox does (on, where a C
    // compiler is present): a fix only in a `//go:build !cgo` file passes `CGO_ENABLED=0 go test`
    // and fails `go test`, and fails under the guard.
    let flag = std::fs::read_to_string(go_fixture().join("imp/base.go"))
        .unwrap()
        .replace("func Add(a, b int) int { return a - b }", "func Add(a, b int) int {\n\tif fixed {\n\t\treturn a + b\n\t}\n\treturn a - b\n}\n\nvar fixed bool");
    assert!(flag.contains("var fixed bool"));
    let nocgo = "//go:build !cgo\n\npackage calc\n\nfunc init() { fixed = true }\n";
    let dir = go_repo("base");
    std::fs::write(dir.path().join("calc.go"), &flag).unwrap();
    std::fs::write(dir.path().join("calc_nocgo.go"), nocgo).unwrap();
    let cgo_off = Command::new("go").args(["env", "CGO_ENABLED"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&cgo_off.stdout).trim(), "1", "this test needs a C compiler (cgo on by default)");
    assert!(!plain_go(dir.path(), &["test", "-count=1", "-run", "^TestAdd$", "."]).status.success());
    let off = Command::new("go")
        .args(["test", "-count=1", "-run", "^TestAdd$", "."])
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", dir.path().join(".cache"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(off.status.success(), "{off:?}");
    sb.reset().await.unwrap();
    sb.put_file("/testbed/calc.go", flag.as_bytes()).await.unwrap();
    sb.put_file("/testbed/calc_nocgo.go", nocgo.as_bytes()).await.unwrap();
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &flags, &limits, &mut rng).await.unwrap() else {
        panic!("!cgo fix: build failed");
    };
    assert_eq!(j.real[".::TestAdd"], TestStatus::Failed, "{j:?}");

    // The screen refuses the embed reader by class; the fix passes it.
    use execcritic::harness::diff::parse_patch;
    use execcritic::harness::tamper::{screen_candidate_in, TamperClass};
    let patch_of = |candidate: &str| {
        std::fs::copy(go_fixture().join(format!("imp/{candidate}.go")), repo.path().join("calc.go")).unwrap();
        let d = git(repo.path(), &["diff"]);
        git(repo.path(), &["checkout", "-q", "--", "."]);
        d
    };
    let refused = screen_candidate_in(&sb, &parse_patch(&patch_of("embed_reader")).unwrap()).await.unwrap().expect_err("refused");
    assert_eq!(refused.class, TamperClass::BuildScript, "{refused:?}");
    assert!(refused.to_string().contains("go:embed"), "{refused}");
    for fine in ["gold", "exit_forger", "first_run", "probe_exit", "cgo_reader"] {
        screen_candidate_in(&sb, &parse_patch(&patch_of(fine)).unwrap()).await.unwrap().expect("passes the screen (the guard refuses the attacks)");
    }
}

#[tokio::test]
async fn guarded_go_subtests_run_only_where_the_subtest_ran() {
    use execcritic::harness::guard::gotest_run::run_guarded_nodes;
    if !go_present() {
        return;
    }
    // TestAddCases names its subtests by `Label`, code under test: the renamer names them
    // otherwise, a filter for `n=1` matches nothing, and the parent passes with the bug in place.
    let one = "^TestAddCases$/^n=1$";
    assert!(!plain_go_test("base", one) && plain_go_test("gold", "^TestAddCases$/^(n=1|n=2)$"));
    assert!(plain_go_test("renamer", one), "the renamer does not pass plain go test");
    assert!(plain_go_test("base", "^TestAddCases$/^n=9$"), "a subtest that never runs passes plainly");
    // The argv attack keeps the bug and, in an `init`, rewrites the `-test.run` filter from `n=1`
    // to `n=0`, a case the bug passes.
    assert!(plain_go_test("argv", one), "the argv rewrite does not pass plain go test");
    let repo = go_repo("base");
    let Some(sb) = open(repo.path()) else { return };
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec![] };
    let nodes: Vec<String> = [".::TestAddCases/n=1", ".::TestAddCases/n=2", ".::TestAddCases", ".::TestLabel", ".::TestAddCases/n=9"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(33);
    use TestStatus::{Failed, Passed};
    for (candidate, want) in [
        ("gold", [Passed, Passed, Passed]),
        ("base", [Failed, Failed, Failed]),
        // Its subtests run under other names: the selected ones never run, so they fail (the
        // whole test runs them as renamed, and they fail with the bug).
        ("renamer", [Failed, Failed, Failed]),
        // The case is written into the copies, not read from the command line it rewrites.
        ("argv", [Failed, Failed, Failed]),
    ] {
        sb.reset().await.unwrap();
        let imp = std::fs::read(go_fixture().join(format!("imp/{candidate}.go"))).unwrap();
        sb.put_file("/testbed/calc.go", &imp).await.unwrap();
        let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap() else {
            panic!("{candidate}: build failed");
        };
        assert!(j.violations.is_empty(), "{candidate}: {:?}", j.violations);
        for (id, st) in nodes.iter().zip(want) {
            assert_eq!(j.real[id], st, "{candidate}: {id}: {j:?}");
        }
        assert_eq!(j.real[".::TestLabel"], Passed, "{candidate}");
        // A subtest the parent never runs is failed, never passed.
        assert_eq!(j.real[".::TestAddCases/n=9"], Failed, "{candidate}");
        // The subtests' copies (6 tail copies each, no literal at the parent's top level), the
        // whole test's own, TestLabel's 13, 2 controls.
        assert_eq!(j.run.len(), 3 * 7 + 7 + 13 + 2, "{candidate}: {:?}", j.run.keys());
    }
    // A late exit 0 from inside the subtest: its tail copies exit 0 too.
    sb.reset().await.unwrap();
    let late = std::fs::read_to_string(go_fixture().join("imp/gold.go")).unwrap().replace("return a + b", "if b == 0 { syscall.Exit(0) }; return a + b").replace("import \"strconv\"", "import (\"strconv\"; \"syscall\")");
    sb.put_file("/testbed/calc.go", late.as_bytes()).await.unwrap();
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes[..1], &[], &limits, &mut rng).await.unwrap() else { panic!("late exit: build failed") };
    assert!(!j.violations.is_empty(), "late exit not refused: {j:?}");
}

/// Honest tests keep the outcome a plain `go test` run gives them (found on real modules by
/// scripts/guard_sweep_go.py): a test that skips is skipped — its look-alikes skip with it —
/// never passed and never `tampered` (a skip once exited 0 beside every look-alike: a false
/// `tampered`, google/uuid's TestClockSeqRace); a subtest that needs what its siblings did
/// passes where it passes plainly (its copy once ran it alone and failed it: gorilla/mux's
/// TestMiddleware cases); a test that keys what it expects by its own name (`t.Name()`, as
/// go-cmp's TestDiff does its golden diffs) finds it under the renamed copies.
#[tokio::test]
async fn honest_go_tests_keep_their_plain_outcome_under_the_guard() {
    use execcritic::harness::guard::gotest_run::run_guarded_nodes;
    if !go_present() {
        return;
    }
    let skips = "package calc\n\nimport \"testing\"\n\n\
        func TestSkips(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"add\")\n\t}\n\tt.Skip(\"not here\")\n}\n\n\
        func TestFailsThenSkips(t *testing.T) {\n\tt.Error(\"failed first\")\n\tt.Skip(\"then skipped\")\n}\n\n\
        func TestSubSkips(t *testing.T) {\n\tt.Run(\"skips\", func(t *testing.T) { t.Skip(\"not here\") })\n\
        \tt.Run(\"runs\", func(t *testing.T) {\n\t\tif Add(1, 1) != 2 {\n\t\t\tt.Fatal(\"add\")\n\t\t}\n\t})\n}\n\n\
        var golden = map[string]int{\"TestByName\": 4, \"TestByName/sub\": 6}\n\n\
        func TestByName(t *testing.T) {\n\tif Add(2, 2) != golden[t.Name()] {\n\t\tt.Fatal(t.Name())\n\t}\n\
        \tt.Run(\"sub\", func(t *testing.T) {\n\t\tif Add(3, 3) != golden[t.Name()] {\n\t\t\tt.Fatal(t.Name())\n\t\t}\n\t})\n}\n\n\
        func TestSeq(t *testing.T) {\n\tcount := 0\n\tt.Run(\"first\", func(t *testing.T) { count = Add(count, 1) })\n\
        \tt.Run(\"second\", func(t *testing.T) {\n\t\tif count != 1 {\n\t\t\tt.Fatal(\"first did not run\")\n\t\t}\n\t})\n}\n";
    let repo = go_repo("gold");
    std::fs::write(repo.path().join("skip_test.go"), skips).unwrap();
    // Plain `go test -json`: what each id is.
    let out = plain_go(repo.path(), &["test", "-json", "-count=1", "-vet=off", "."]);
    let events = String::from_utf8_lossy(&out.stdout);
    for (test, action) in [("TestSkips", "skip"), ("TestFailsThenSkips", "fail"), ("TestSubSkips/skips", "skip"), ("TestSubSkips/runs", "pass"), ("TestSubSkips", "pass"), ("TestSeq/second", "pass"), ("TestByName", "pass"), ("TestByName/sub", "pass")] {
        assert!(events.contains(&format!("\"Action\":\"{action}\",\"Package\":\"example.com/calc\",\"Test\":\"{test}\"")), "{test} plainly: {events}");
    }
    commit_base(repo.path());
    let Some(sb) = open(repo.path()) else { return };
    let limits = RunLimits { build: Duration::from_secs(300), per_test: Duration::from_secs(60), mutants: 6, env: vec![] };
    let nodes: Vec<String> =
        [".::TestSkips", ".::TestFailsThenSkips", ".::TestSubSkips/skips", ".::TestSubSkips/runs", ".::TestSubSkips", ".::TestSeq/second", ".::TestByName", ".::TestByName/sub"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
    let GuardedRun::Judged(j) = run_guarded_nodes(&sb, &nodes, &[], &limits, &mut rng).await.unwrap() else { panic!("build failed") };
    assert!(j.violations.is_empty(), "{:?}", j.violations);
    use TestStatus::{Failed, Passed, Skipped};
    for (id, want) in nodes.iter().zip([Skipped, Failed, Skipped, Passed, Passed, Passed, Passed, Passed]) {
        assert_eq!(j.real[id], want, "{id}: {j:?}");
    }
}

/// A task over the Go module: Base without `calc_test.go` (the bundle adds it), the fix as gold,
/// the attacks and the bug as labelled candidates.
fn go_task(repo: &Path) -> (execcritic::task::TaskInstance, String) {
    copy_tree(&go_fixture().join("calc"), repo);
    std::fs::copy(go_fixture().join("imp/base.go"), repo.join("calc.go")).unwrap();
    let tests = std::fs::read_to_string(repo.join("calc_test.go")).unwrap();
    std::fs::remove_file(repo.join("calc_test.go")).unwrap();
    commit_base(repo);
    let base = git(repo, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(repo.join("calc_test.go"), &tests).unwrap();
    git(repo, &["add", "-N", "calc_test.go"]);
    let test_patch = git(repo, &["diff"]);
    git(repo, &["rm", "-q", "--cached", "calc_test.go"]);
    std::fs::remove_file(repo.join("calc_test.go")).unwrap();
    let patch_of = |candidate: &str| {
        std::fs::copy(go_fixture().join(format!("imp/{candidate}.go")), repo.join("calc.go")).unwrap();
        let d = git(repo, &["diff"]);
        git(repo, &["checkout", "-q", "--", "."]);
        d
    };
    let gold = patch_of("gold");
    let mut candidates = vec![serde_json::json!({"patch": gold, "resolved": true}), serde_json::json!({"patch": "", "resolved": false})];
    for attack in ["exit_forger", "first_run", "embed_reader", "cgo_reader", "late_exit"] {
        candidates.push(serde_json::json!({"patch": patch_of(attack), "resolved": false}));
    }
    let task = execcritic::task::TaskInstance::from_json(
        serde_json::json!({
            "instance_id": "calc__calc-go-1", "repo": "calc/calc-go", "base_commit": base,
            "patch": gold, "test_patch": test_patch, "problem_statement": "Add subtracts instead of adding",
            "FAIL_TO_PASS": [".::TestAdd", ".::TestAddNegative"], "PASS_TO_PASS": [".::TestLabel"],
            "repo_path": repo, "candidates": candidates,
        }),
        None,
    )
    .expect("the task parses");
    (task, test_patch)
}

#[tokio::test]
async fn a_go_bundle_qualifies_audits_and_judges_candidates() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: the guarded go run needs throw-away runs (root with overlayfs)");
        return;
    }
    if !go_present() {
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let (task, test_patch) = go_task(repo.path());
    let command = "go test -run '^(TestAdd|TestAddNegative|TestLabel)$' .";
    let contract = serde_json::json!({"entrypoint": "calc.Add", "trigger": "Add(2, 3)", "expected_output": "5",
        "issue_evidence": ["Add subtracts instead of adding"], "alternative_hypotheses": ["none"],
        "non_assertions": ["Label is unchanged"], "test_nodes": ["TestAdd", "TestAddNegative", "TestLabel"]})
    .to_string();
    let bundle = Bundle::from_parts(&test_patch, command, &contract).unwrap();
    // The embed reader is refused by the screen, before anything runs; the cgo reader reads the
    // judged file as written, so its bug fails the tests.
    let kinds = ["passed", "assertion_failure", "tampered", "tampered", "forbidden_test_modification", "assertion_failure", "tampered"];
    let frozen = qualifies_and_audits(&task, &bundle, &[".::TestAdd", ".::TestAddNegative", ".::TestLabel"], &kinds).await;

    let v = check_candidate(&task, &frozen, &task.candidates[2].patch, SandboxKind::Local).await.unwrap();
    assert_eq!((v.status, v.failure_kind), (GateStatus::HardFail, FailureKind::Tampered), "{}", v.feedback);
    assert!(v.feedback.contains("runtime guard"), "{}", v.feedback);
    let v = check_candidate(&task, &frozen, &task.candidates[4].patch, SandboxKind::Local).await.unwrap();
    assert_eq!(v.failure_kind, FailureKind::ForbiddenTestModification, "{}", v.feedback);
    assert!(v.feedback.contains("go:embed"), "{}", v.feedback);
    let v = check_candidate(&task, &frozen, "", SandboxKind::Local).await.unwrap();
    assert_eq!(v.failed_test_names, [".::TestAdd", ".::TestAddNegative"], "{}", v.feedback);
    assert!(v.feedback.contains("test .::TestLabel ... ok"), "{}", v.feedback);
    assert!(v.feedback.contains("language: go"), "{}", v.feedback);
    let broken = task.patch.replace("return a + b", "return a + ");
    assert_ne!(broken, task.patch);
    let v = check_candidate(&task, &frozen, &broken, SandboxKind::Local).await.unwrap();
    assert_eq!((v.status, v.failure_kind), (GateStatus::HardFail, FailureKind::CollectionError), "{}", v.feedback);
    assert!(v.feedback.contains("syntax error"), "{}", v.feedback);

    // The oracle bundle (the official tests, selected by the runner's own command form)
    // qualifies, and the official evaluator grades gold, empty and the candidates as labelled.
    use execcritic::episode::oracle::oracle_bundle;
    use execcritic::harness::grade;
    assert_eq!(task.runner, execcritic::task::Runner::Go, "inferred from the root go.mod");
    let oracle = oracle_bundle(&task).unwrap();
    assert!(oracle.test_command.starts_with("go test -run '^(TestAdd|TestAddNegative"), "{}", oracle.test_command);
    assert!(matches!(qualify(&task, &oracle, SandboxKind::Local).await.unwrap(), Qualification::Accepted(_)));
    let g = grade(&task, &task.patch, SandboxKind::Local).await.unwrap();
    assert!(g.resolved && g.error_kind.is_none(), "gold: {g:?}");
    assert!(g.tests.len() == 3 && g.tests.values().all(|s| s == "PASSED"), "{g:?}");
    let e = grade(&task, "", SandboxKind::Local).await.unwrap();
    assert!(!e.resolved && e.error_kind.is_none(), "empty: {e:?}");
    assert_eq!(e.tests[".::TestAdd"], "FAILED", "{e:?}");
    for c in &task.candidates {
        let r = grade(&task, &c.patch, SandboxKind::Local).await.unwrap();
        assert_eq!(r.resolved, c.resolved, "{r:?}\n{}", c.patch);
    }
    let forged = grade(&task, &task.candidates[2].patch, SandboxKind::Local).await.unwrap();
    assert!(forged.tampered.is_some(), "{forged:?}");

    // A bundle selecting subtests by name qualifies: they fail cleanly on Base, pass on Gold.
    let subtests = "go test -run '^TestAddCases$/^(n=1|n=2)$' .";
    let contract_of = |nodes: &[&str]| {
        let mut c: serde_json::Value = serde_json::from_str(&contract).unwrap();
        c["test_nodes"] = serde_json::json!(nodes);
        c.to_string()
    };
    let b = Bundle::from_parts(&test_patch, subtests, &contract_of(&["TestAddCases/n=1", "TestAddCases/n=2"])).unwrap();
    match qualify(&task, &b, SandboxKind::Local).await.unwrap() {
        Qualification::Accepted(f) => assert_eq!(f.plan.nodes, [".::TestAddCases/n=1", ".::TestAddCases/n=2"]),
        other => panic!("subtests: {other:?}"),
    }

    // Not a clean failure on Base: refused with the category.
    let passes_on_base = test_patch.replace("want := 5", "want := -1").replace("got != -3", "got != -5").replace("got != -4", "got != 0");
    let no_build = test_patch.replace("Add(-4, 1)", "Mul(-4, 1)");
    for (patch, want) in [(passes_on_base, BaseCategory::Passed), (no_build, BaseCategory::CollectionError)] {
        assert_ne!(patch, test_patch);
        let b = Bundle::from_parts(&patch, command, &contract).unwrap();
        match qualify(&task, &b, SandboxKind::Local).await.unwrap() {
            Qualification::BaseGateFailed { category, .. } => assert_eq!(category, want),
            other => panic!("{want:?} expected: {other:?}"),
        }
    }
}

