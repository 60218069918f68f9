//! Native (non-Python) test runners, the first slice of issue 28: Rust's `cargo test` and Go's
//! `go test`, as pure logic — the command forms accepted with their exact selectors
//! ([`parse_native_command`]), the runners' structured reports read into per-node
//! [`TestStatus`]es ([`cargo::read_libtest`], [`go::read_go_json`]) and the Base-gate rule per
//! runner ([`base_category`]).
//!
//! Nothing here runs a toolchain. A validated `cargo test` or `go test` command runs through the
//! native guarded run (`super::gate_native`, `super::grade_native`: per-test processes and
//! canaries, not the report read here); a command that does not parse gets the precise
//! rejection of [`parse_native_command`].
//!
//! [`NativeRunner`] is kept apart from [`super::selector::CommandRunner`], which the Python run
//! path (execute, classify, gate, grade, guard) matches on exhaustively.

pub mod cargo;
pub mod go;

use super::classify::BaseCategory;
use super::logparse::{ParsedLog, TestStatus};
use super::selector::{check_env_assignment, quote, split_env, tokenize};
use super::validate::{Rejection, RejectionKind};

/// A native runner.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NativeRunner {
    Cargo,
    Go,
}

impl NativeRunner {
    /// The language of the repositories it runs (the feedback envelope's `language`).
    pub fn language(self) -> &'static str {
        match self {
            NativeRunner::Cargo => "rust",
            NativeRunner::Go => "go",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NativeRunner::Cargo => "cargo test",
            NativeRunner::Go => "go test",
        }
    }
}

/// A validated native test command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeCommand {
    pub runner: NativeRunner,
    /// Canonical node ids selected, in order: `<package>/<target>::<test path>` for cargo
    /// (`demo/lib::tests::test_ok`, `demo/test/integration::it_adds`), `<./dir>::<TestName>`
    /// for go (`./calc::TestAdd`, `.::TestRoot`).
    pub nodes: Vec<String>,
    /// What the report reader is told: cargo's one `<package>/<target>`, go's package paths.
    pub scope: Vec<String>,
    /// The command that would run: sanitised, with the flags the report reader needs.
    pub activated: String,
    /// Flags that change what is built, kept from the command (cargo's `--features=…`,
    /// `--release`, …): the guarded run builds with them.
    pub build_flags: Vec<String>,
    /// The command's environment assignments (`NAME=value`, checked against the runner's
    /// allowed names).
    pub env: Vec<String>,
}

/// What a runner's argument parser returns: nodes, scope and the activated arguments (after
/// the program and `test`).
pub(crate) struct Parsed {
    nodes: Vec<String>,
    scope: Vec<String>,
    args: Vec<String>,
    build_flags: Vec<String>,
}

pub(crate) fn reject(kind: RejectionKind, msg: impl Into<String>) -> Rejection {
    Rejection::new(kind, format!("test_command: {}", msg.into()))
}

/// `Some` when the command's program (after environment assignments) is `cargo` or `go`, with
/// the parse: the command or its rejection. `None` for any other command, and for one that is
/// not a plain simple command (left to [`super::selector::parse_command`]'s rejections).
pub fn parse_native_command(cmd: &str) -> Option<Result<NativeCommand, Rejection>> {
    let tokens = tokenize(cmd).ok()?;
    let (env, rest) = split_env(&tokens);
    let runner = match rest.first().map(String::as_str) {
        Some("cargo") => NativeRunner::Cargo,
        Some("go") => NativeRunner::Go,
        _ => return None,
    };
    Some(parse_with(runner, env, &rest[1..]))
}

fn parse_with(
    runner: NativeRunner,
    env: &[String],
    args: &[String],
) -> Result<NativeCommand, Rejection> {
    let allowed = match runner {
        NativeRunner::Cargo => cargo::ALLOWED_ENV,
        NativeRunner::Go => go::ALLOWED_ENV,
    };
    for e in env {
        check_env_assignment(e, allowed)?;
    }
    let program = match runner {
        NativeRunner::Cargo => "cargo",
        NativeRunner::Go => "go",
    };
    if args.first().map(String::as_str) != Some("test") {
        let sub = args.first().map(String::as_str).unwrap_or("");
        return Err(reject(
            RejectionKind::UnknownRunner,
            format!("`{program} {sub}` is not a test runner; use `{program} test …`"),
        ));
    }
    let p = match runner {
        NativeRunner::Cargo => cargo::parse_args(&args[1..])?,
        NativeRunner::Go => go::parse_args(&args[1..])?,
    };
    for (i, n) in p.nodes.iter().enumerate() {
        if p.nodes[..i].contains(n) {
            return Err(reject(
                RejectionKind::DuplicateNode,
                format!("`{n}` is selected twice"),
            ));
        }
    }
    let words: Vec<String> = env
        .iter()
        .cloned()
        .chain([program.to_string(), "test".to_string()])
        .chain(p.args)
        .collect();
    Ok(NativeCommand {
        runner,
        nodes: p.nodes,
        scope: p.scope,
        activated: words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
        build_flags: p.build_flags,
        env: env.to_vec(),
    })
}

/// The value of a flag given as `--flag value` or `--flag=value` (`inline`), taken from `rest`.
pub(crate) fn flag_value<'a>(
    flag: &str,
    inline: Option<&'a str>,
    rest: &mut impl Iterator<Item = &'a String>,
) -> Result<&'a str, Rejection> {
    match inline {
        Some(v) => Ok(v),
        None => rest.next().map(String::as_str).ok_or_else(|| {
            reject(RejectionKind::UnsupportedFlag, format!("`{flag}` needs a value"))
        }),
    }
}

/// A plain word: a package, target or feature list (`[A-Za-z0-9_-]` plus `extra`), not empty,
/// not starting with `-`.
pub(crate) fn plain_word(s: &str, extra: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c) || extra.contains(c))
}

/// Whether the run's exit status agrees with its report: cargo exits 101 on a failed test or a
/// build failure, 0 otherwise; go exits 1 on a failed test, 2 on a build failure (1 when a
/// package's set-up failed), 0 otherwise.
fn exit_agrees(runner: NativeRunner, rc: i32, log: &ParsedLog) -> bool {
    let build = !log.collection_errors.is_empty();
    let failed = log.has_failures();
    match runner {
        NativeRunner::Cargo => rc == if failed { 101 } else { 0 },
        NativeRunner::Go if build => rc == 1 || rc == 2,
        NativeRunner::Go => rc == if failed { 1 } else { 0 },
    }
}

/// The Base-gate category of a native run of the declared `nodes` (same names and rule as
/// [`super::classify`]): accepted only as `assertion_failure_clean` — a complete,
/// self-consistent report whose exit status agrees with it, every declared node reported, at
/// least one failed in its own run and every other passed or failed. A build or compile failure
/// is `collection_error` (never a clean failure of the declared nodes), an ignored/skipped node
/// `skipped_or_xfail`, a node missing from the report `runner_label_error`, a test whose run
/// never reported a result (the process ended inside it) `incomplete_run`.
pub fn base_category(
    runner: NativeRunner,
    rc: Option<i32>,
    timed_out: bool,
    log: &ParsedLog,
    nodes: &[String],
) -> BaseCategory {
    if timed_out {
        return BaseCategory::Timeout;
    }
    let Some(rc) = rc else {
        return BaseCategory::HarnessException;
    };
    if !exit_agrees(runner, rc, log) {
        return BaseCategory::IncompleteRun;
    }
    if !log.collection_errors.is_empty() {
        return BaseCategory::CollectionError;
    }
    if !log.summary_seen || !log.consistent {
        return BaseCategory::IncompleteRun;
    }
    nodes_category(&log.statuses, nodes, BaseCategory::IncompleteRun)
}

/// The Base category of the declared `nodes` from their statuses (a run that completed and is
/// trusted): a node missing is `runner_label_error`, one in error `error` (the caller's meaning:
/// an unfinished report, a timeout), a skipped or xfailed one `skipped_or_xfail`, an xpass
/// `xpass`; `assertion_failure_clean` needs one failed and every other passed.
pub fn nodes_category(
    statuses: &std::collections::BTreeMap<String, TestStatus>,
    nodes: &[String],
    error: BaseCategory,
) -> BaseCategory {
    let mut failed = false;
    for n in nodes {
        match statuses.get(n) {
            None => return BaseCategory::RunnerLabelError,
            Some(TestStatus::Error) => return error,
            Some(TestStatus::Skipped | TestStatus::XFail) => return BaseCategory::SkippedOrXfail,
            Some(TestStatus::XPass) => return BaseCategory::Xpass,
            Some(TestStatus::Failed) => failed = true,
            Some(TestStatus::Passed) => {}
        }
    }
    if failed {
        BaseCategory::AssertionFailureClean
    } else {
        BaseCategory::Passed
    }
}

#[cfg(test)]
pub(crate) fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/native_runners")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[cfg(test)]
pub(crate) fn fixture_rc(name: &str) -> i32 {
    fixture(&format!("{name}.rc")).trim().parse().expect("an exit status")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(cmd: &str) -> RejectionKind {
        parse_native_command(cmd).expect("a native command").unwrap_err().kind
    }

    #[test]
    fn only_cargo_and_go_programs_are_native() {
        for c in ["pytest a.py::test_x", "make test", "cargo-test x", "env cargo test", "gotest"] {
            assert!(parse_native_command(c).is_none(), "{c}");
        }
        // Shell syntax is left to the Python parser's rejection.
        assert!(parse_native_command("cargo test; rm -rf /").is_none());
        assert_eq!(kind("cargo build"), RejectionKind::UnknownRunner);
        assert_eq!(kind("go vet ./x"), RejectionKind::UnknownRunner);
        assert_eq!(kind("cargo"), RejectionKind::UnknownRunner);
    }

    #[test]
    fn env_prefixes_per_runner() {
        let c = "-p demo --lib -- --exact tests::a";
        assert!(parse_native_command(&format!("RUST_BACKTRACE=1 TZ=UTC cargo test {c}"))
            .unwrap()
            .unwrap()
            .activated
            .starts_with("RUST_BACKTRACE=1 TZ=UTC cargo test "));
        for e in ["RUSTFLAGS=--cfg=x", "CARGO_TARGET_DIR=/tmp", "PYTHONHASHSEED=0", "LANG='C x'"] {
            assert_eq!(kind(&format!("{e} cargo test {c}")), RejectionKind::EnvironmentPrefix, "{e}");
        }
        for e in ["GOFLAGS=-count=2", "CGO_ENABLED=1", "RUST_BACKTRACE=1", "GOPATH=/tmp"] {
            assert_eq!(
                kind(&format!("{e} go test -run '^TestA$' ./a")),
                RejectionKind::EnvironmentPrefix,
                "{e}"
            );
        }
    }

    #[test]
    fn odd_inputs_never_panic() {
        let long = "a".repeat(100_000);
        let odd = [
            "cargo test -- --exact 'tests::ünï'".to_string(),
            "cargo test -p \"\" --lib -- --exact ''".to_string(),
            "cargo test -p -- --lib".to_string(),
            "cargo test --test".to_string(),
            "go test -run".to_string(),
            "go test -run '' .".to_string(),
            "go test -run '^' .".to_string(),
            "go test -run '^$' .".to_string(),
            "go test -run '^(|)$' .".to_string(),
            "go test -run '^Test√$' ./ü".to_string(),
            format!("cargo test -p demo --lib -- --exact {long}"),
            format!("go test -run '^Test{long}$' ./{long}"),
            "cargo test -p demo --lib -- --exact \u{0}".to_string(),
        ];
        for c in &odd {
            let _ = parse_native_command(c);
        }
        for s in odd.iter().map(String::as_str).chain(["", "\u{feff}", "test result: ok. 99999999999999999999999 passed;", "running 18446744073709551616 tests", "{\"Action\":", "{\"Action\":\"pass\",\"Test\":7}"]) {
            let _ = cargo::read_libtest(s, "demo/lib");
            let _ = go::read_go_json(s, "example.com/demo", &[".".to_string()]);
        }
    }

    #[test]
    fn base_categories_from_real_runs() {
        let cargo_cat = |name: &str, nodes: &[&str]| {
            let log = cargo::read_libtest(&fixture(&format!("{name}.log")), "demo/lib");
            let nodes: Vec<String> = nodes.iter().map(|n| format!("demo/lib::{n}")).collect();
            base_category(NativeRunner::Cargo, Some(fixture_rc(name)), false, &log, &nodes)
        };
        assert_eq!(cargo_cat("cargo_lib_pass", &["tests::test_ok"]), BaseCategory::Passed);
        assert_eq!(
            cargo_cat("cargo_lib_mixed", &["tests::test_ok", "tests::test_fail"]),
            BaseCategory::AssertionFailureClean
        );
        assert_eq!(
            cargo_cat("cargo_lib_mixed", &["tests::test_fail", "tests::test_ignored"]),
            BaseCategory::SkippedOrXfail
        );
        assert_eq!(
            cargo_cat("cargo_lib_forged", &["tests::test_fail", "tests::test_forger"]),
            BaseCategory::IncompleteRun
        );
        assert_eq!(cargo_cat("cargo_compile_error", &["tests::test_ok"]), BaseCategory::CollectionError);
        assert_eq!(cargo_cat("cargo_no_match", &["test_ok"]), BaseCategory::RunnerLabelError);
        // An exit status that disagrees with the report.
        let log = cargo::read_libtest(&fixture("cargo_lib_pass.log"), "demo/lib");
        let n = ["demo/lib::tests::test_ok".to_string()];
        assert_eq!(base_category(NativeRunner::Cargo, Some(101), false, &log, &n), BaseCategory::IncompleteRun);
        assert_eq!(base_category(NativeRunner::Cargo, None, false, &log, &n), BaseCategory::HarnessException);
        assert_eq!(base_category(NativeRunner::Cargo, Some(0), true, &log, &n), BaseCategory::Timeout);

        let go_cat = |name: &str, pkgs: &[&str], nodes: &[&str]| {
            let pkgs: Vec<String> = pkgs.iter().map(|p| p.to_string()).collect();
            let log = go::read_go_json(&fixture(&format!("{name}.log")), "example.com/demo", &pkgs);
            let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
            base_category(NativeRunner::Go, Some(fixture_rc(name)), false, &log, &nodes)
        };
        assert_eq!(go_cat("go_pass", &["./calc"], &["./calc::TestAdd"]), BaseCategory::Passed);
        assert_eq!(
            go_cat("go_mixed", &["./calc"], &["./calc::TestAdd", "./calc::TestFail"]),
            BaseCategory::AssertionFailureClean
        );
        assert_eq!(
            go_cat("go_mixed", &["./calc"], &["./calc::TestFail", "./calc::TestSkip"]),
            BaseCategory::SkippedOrXfail
        );
        assert_eq!(go_cat("go_build_error", &["./broken"], &["./broken::TestMul"]), BaseCategory::CollectionError);
        assert_eq!(
            go_cat("go_two_packages", &["./calc", "./broken"], &["./calc::TestAdd", "./broken::TestMul"]),
            BaseCategory::CollectionError
        );
        assert_eq!(go_cat("go_setup_failed", &["./setup"], &["./setup::TestX"]), BaseCategory::CollectionError);
        assert_eq!(go_cat("go_no_match", &["./calc"], &["./calc::TestNone"]), BaseCategory::RunnerLabelError);
        assert_eq!(
            go_cat("go_forged", &["./calc"], &["./calc::TestFail", "./calc::TestForger"]),
            BaseCategory::IncompleteRun
        );
    }
}
