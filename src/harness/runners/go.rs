//! `go test`: the command form with exact `-run` selectors, and the reader of its `-json` event
//! stream (`go test -json`, test2json's events).
//!
//! Accepted: `[ENV=…] go test [flags] -run '<regex>' <package>…`:
//! - `-run` exactly once, an anchored list of exact test names: `'^TestX$'` or
//!   `'^(TestA|TestB)$'` (single-quoted: `$` in double quotes is shell expansion). Names are
//!   `Test` functions (`Test`, `TestX`, `Test_x`; not `Testx`). A second level selects subtests
//!   of those tests by exact name: `'^TestX$/^case$'` or `'^TestX$/^(a|b)$'`, each name as go
//!   prints it (spaces already `_`, `#01` for a repeated name) with regexp metacharacters
//!   escaped as `regexp.QuoteMeta` does (`'^TestX$/^f\(1\)$'`); one level of subtests only;
//! - packages: relative directories, `.` or `./dir/sub`; `./...`, import paths, absolute paths
//!   and `..` are `selector_not_exact`. The regex applies to every package listed, so each
//!   (package, name) pair is a selected node;
//! - kept: `-short`, `-failfast`, `-tags <list>`, `-timeout <duration>`; dropped (the harness sets
//!   its own): `-v`, `-json`, `-count`; anything else (`-skip`, `-bench`, `-list`, `-exec`,
//!   `-c`, `-o`, `-args`, `-vet`, cover and build flags, `--double-dash` forms) is
//!   `unsupported_flag`;
//! - environment prefixes: `TZ`, `LANG`, `LC_ALL` with plain values (`GOFLAGS`, `CGO_*`,
//!   `GOPATH` are rejected).
//!
//! Node id: `<package dir>::<TestName>` (`./calc::TestAdd`, `.::TestRoot`), for a subtest
//! `<package dir>::<TestName>/<case>` (`./calc::TestAdd/negative`), as go's `-json` events name
//! it. The activated command is `go test -json -count=1 [kept flags] -run=<regex> <package>…`
//! (`-count=1`: no cached results).
//!
//! The reader ([`read_go_json`]) reads only JSON event lines (`Action` run/pass/fail/skip/
//! output/…, `Package` the import path, `Test`). Test output — framing lines such as
//! `--- PASS: TestX` or JSON printed by the test — reaches the stream as `output` events only;
//! Go 1.19's test2json still turns a printed `--- PASS: TestX` line into a `pass` event, so:
//! the worst of a test's results wins, a second result for a test, a result for a test that was
//! never `run`, events after the package's own result, or a package result that contradicts its
//! tests' results make the report untrusted (`consistent = false`). A test that was `run` and
//! never got a result (the process ended inside it) is `Error`. A package's `skip` event is
//! "no test files". A package that did not build (go's own `FAIL\t<pkg> [build failed]` or
//! `[setup failed]` line, or a package `fail` with no test run) is a build failure, kept in
//! `collection_errors` with the first compiler line, never a test failure. The report is
//! complete (`summary_seen`) when every listed package ended with a result or a build failure.
//! Exit status: 0 all passed, 1 a test failed (or a package's set-up failed), 2 a build failure.

use super::{flag_value, plain_word, reject, Parsed};
use crate::harness::logparse::{ParsedLog, TestStatus};
use crate::harness::validate::{Rejection, RejectionKind};
use std::collections::{BTreeMap, BTreeSet};

/// Environment assignments a `go test` command may start with.
pub const ALLOWED_ENV: &[&str] = &["TZ", "LANG", "LC_ALL"];

/// Parse the arguments after `go test`.
pub(crate) fn parse_args(args: &[String]) -> Result<Parsed, Rejection> {
    let mut run: Option<Vec<String>> = None;
    let mut regex = String::new();
    let mut kept = Vec::new();
    let mut packages: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v)),
            _ => (a.as_str(), None),
        };
        match flag {
            "-run" => {
                let v = flag_value(flag, inline, &mut it)?;
                if run.is_some() {
                    return Err(reject(RejectionKind::SelectorNotExact, "`-run` is given twice"));
                }
                run = Some(run_selection(v)?);
                regex = v.to_string();
            }
            "-v" | "-json" if inline.is_none() => {}
            "-count" => {
                flag_value(flag, inline, &mut it)?;
            }
            "-short" | "-failfast" if inline.is_none() => kept.push(a.clone()),
            "-tags" | "-timeout" => {
                let v = flag_value(flag, inline, &mut it)?;
                if !plain_word(v, ",.") {
                    return Err(reject(
                        RejectionKind::UnsupportedFlag,
                        format!("`{flag} {v}` needs a plain value"),
                    ));
                }
                kept.push(format!("{flag}={v}"));
            }
            "-skip" | "-list" | "-bench" => {
                return Err(reject(
                    RejectionKind::SelectorNotExact,
                    format!("`{flag}` selects by pattern; select exact tests with -run '^TestX$'"),
                ))
            }
            f if f.starts_with('-') => {
                return Err(reject(
                    RejectionKind::UnsupportedFlag,
                    format!("go test flag `{a}` is not supported"),
                ))
            }
            _ => packages.push(package_dir(a)?),
        }
    }
    let Some(names) = run else {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            "go test needs `-run '^TestX$'` (or `'^(TestA|TestB)$'`): without it every test of the package runs",
        ));
    };
    if packages.is_empty() {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            "go test needs the package directories (`./dir`) that hold the tests",
        ));
    }
    let nodes = packages
        .iter()
        .flat_map(|p| names.iter().map(move |n| format!("{p}::{n}")))
        .collect();
    let mut all = vec!["-json".to_string(), "-count=1".to_string()];
    all.extend(kept.iter().cloned());
    all.push(format!("-run={regex}"));
    all.extend(packages.iter().cloned());
    Ok(Parsed {
        nodes,
        scope: packages,
        args: all,
        build_flags: kept,
    })
}

/// The flags of a task's official `test_cmd` (`go test [flags] [packages]`, selecting no test:
/// the F2P and P2P ids select): `-short`, `-tags`, `-timeout` kept as a bundle keeps them; `-v`,
/// `-count` and package patterns (`./...`, the ids name their packages) dropped; anything else
/// refused.
pub fn task_flags(test_cmd: &str) -> Result<Vec<String>, String> {
    let words = shlex::split(test_cmd).ok_or_else(|| format!("`{test_cmd}` does not split into words"))?;
    if words.len() < 2 || words[0] != "go" || words[1] != "test" {
        return Err(format!("`{test_cmd}` is not `go test [flags]`"));
    }
    let mut flags = Vec::new();
    let mut it = words[2..].iter();
    while let Some(w) = it.next() {
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (w.as_str(), None),
        };
        match flag {
            "-v" | "-json" if inline.is_none() => {}
            "-short" if inline.is_none() => flags.push(w.clone()),
            "-count" => {
                if inline.is_none() {
                    it.next();
                }
            }
            "-tags" | "-timeout" => match inline.or_else(|| it.next().cloned()) {
                Some(v) if plain_word(&v, ",.") => flags.push(format!("{flag}={v}")),
                _ => return Err(format!("`{test_cmd}`: `{flag}` needs a plain value")),
            },
            p if !p.starts_with('-') && (p == "./..." || p == "." || p.starts_with("./")) => {}
            other => return Err(format!("`{test_cmd}`: `{other}` is not a flag the official run keeps")),
        }
    }
    Ok(flags)
}

/// The exact names an anchored `-run` regex selects: `^TestX$` or `^(TestA|TestB)$`, and with a
/// second level (`^TestX$/^case$`, `^TestX$/^(a|b)$`) every (test, case) pair as `TestX/case`.
fn run_selection(re: &str) -> Result<Vec<String>, Rejection> {
    let not_exact = || {
        reject(
            RejectionKind::SelectorNotExact,
            format!("`-run {re}` is not an anchored list of exact test names; use '^TestX$', '^(TestA|TestB)$' or, for subtests, '^TestX$/^case$'"),
        )
    };
    // Go splits the pattern at `/` outside brackets and parentheses; escaped metacharacters
    // (the only backslashes accepted) never hide one, and case names hold none.
    let mut levels = re.split('/');
    let tests = levels.next().ok_or_else(not_exact)?;
    let cases = levels.next();
    if levels.next().is_some() {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            format!("`-run {re}` selects nested subtests; one level (`'^TestX$/^case$'`) is supported"),
        ));
    }
    let names = anchored_alternatives(tests).ok_or_else(not_exact)?;
    if !names.iter().all(|n| is_test_name(n)) {
        return Err(not_exact());
    }
    let Some(cases) = cases else { return Ok(names) };
    let cases = anchored_alternatives(cases).ok_or_else(not_exact)?;
    let mut out = Vec::new();
    for n in &names {
        for c in &cases {
            if !is_case_name(c) {
                return Err(not_exact());
            }
            out.push(format!("{n}/{c}"));
        }
    }
    Ok(out)
}

/// `^x$` or `^(x|y)$`, each alternative an exact name with regexp metacharacters escaped
/// (`\(`): the names unescaped; `None` where the anchors are not there or an alternative has an
/// unescaped metacharacter.
fn anchored_alternatives(re: &str) -> Option<Vec<String>> {
    // (An escaped `\$` before the end leaves a lone `\` that no name unescapes to.)
    let inner = re.strip_prefix('^')?.strip_suffix('$')?;
    let alternatives = match inner.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        Some(alt) => split_unescaped(alt, '|'),
        None => vec![inner.to_string()],
    };
    alternatives.iter().map(|a| unquote_meta(a)).collect()
}

/// `s` split at each `sep` that no backslash escapes.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut part = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == sep {
            out.push(std::mem::take(&mut part));
            continue;
        }
        part.push(c);
        if c == '\\' {
            part.extend(chars.next());
        }
    }
    out.push(part);
    out
}

/// The characters `regexp.QuoteMeta` escapes.
const META: &str = "\\.+*?()|[]{}^$";

/// The literal an escaped regex stands for (`regexp.QuoteMeta`'s inverse): `None` where it has
/// an unescaped metacharacter or escapes anything else.
fn unquote_meta(re: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = re.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next().filter(|e| META.contains(*e))?),
            c if META.contains(c) => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// `regexp.QuoteMeta`: a regex matching exactly `name`.
pub fn quote_meta(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if META.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A subtest name as go prints it: not empty, no `/` (a deeper level), no space (go writes `_`)
/// and no control character (go writes an escape).
pub fn is_case_name(c: &str) -> bool {
    !c.is_empty() && c.chars().all(|ch| ch != '/' && !ch.is_whitespace() && !ch.is_control())
}

/// A Go test function name: `Test` followed by nothing or by a non-lower-case character.
pub fn is_test_name(n: &str) -> bool {
    n.strip_prefix("Test").is_some_and(|rest| {
        rest.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !rest.chars().next().is_some_and(char::is_lowercase)
    })
}

/// A package directory `.` or `./a/b`, canonical (no trailing `/`).
fn package_dir(p: &str) -> Result<String, Rejection> {
    let bad = |why: &str| Err(reject(RejectionKind::SelectorNotExact, format!("package `{p}` {why}")));
    if p.contains("...") {
        return bad("is a pattern; list the package directories (`./dir`)");
    }
    let p = p.trim_end_matches('/');
    if p == "." {
        return Ok(p.to_string());
    }
    let Some(rest) = p.strip_prefix("./") else {
        return bad("is not a relative directory; use `./dir` (or `.`)");
    };
    let plain = rest.split('/').all(|c| {
        plain_word(c, ".") && !c.starts_with('.') && !c.starts_with('_')
    });
    if !plain {
        return bad("is not a plain directory inside the module");
    }
    Ok(p.to_string())
}

/// One line of the `-json` stream.
#[derive(serde::Deserialize)]
struct Event {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: Option<String>,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

/// What the stream said about one package.
#[derive(Default)]
struct Package {
    run: BTreeSet<String>,
    done: BTreeMap<String, TestStatus>,
    result: Option<String>,
}

/// The package directory (`.`, `./dir`) of an import path under `module`; any other import path
/// is kept as it is (and matches no node).
fn package_rel(module: &str, import: &str) -> String {
    if import == module {
        return ".".into();
    }
    match import.strip_prefix(module).and_then(|r| r.strip_prefix('/')) {
        Some(rest) => format!("./{rest}"),
        None => import.to_string(),
    }
}

/// Read a `go test -json` log (the JSON stream, go's own stderr lines may be interleaved) of
/// the `packages` listed in the command (`.`, `./dir`), in module `module` (go.mod's path).
/// See the module doc for the rules.
pub fn read_go_json(output: &str, module: &str, packages: &[String]) -> ParsedLog {
    let mut p = ParsedLog {
        consistent: true,
        ..ParsedLog::default()
    };
    let mut pkgs: BTreeMap<String, Package> = BTreeMap::new();
    let mut last_compiler_line: BTreeMap<String, String> = BTreeMap::new();
    let mut header: Option<String> = None;
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        let Ok(e) = serde_json::from_str::<Event>(line) else {
            read_go_line(&mut p, module, line, &mut header, &mut last_compiler_line);
            continue;
        };
        let rel = package_rel(module, e.package.as_deref().unwrap_or(""));
        let pkg = pkgs.entry(rel.clone()).or_default();
        if pkg.result.is_some() {
            // Nothing follows a package's own result.
            p.consistent = false;
            continue;
        }
        let status = match e.action.as_str() {
            "pass" => Some(TestStatus::Passed),
            "fail" => Some(TestStatus::Failed),
            "skip" => Some(TestStatus::Skipped),
            _ => None,
        };
        match (e.test, status) {
            (Some(t), _) if e.action == "run" => {
                if !pkg.run.insert(t) {
                    p.consistent = false;
                }
            }
            (Some(t), Some(s)) => {
                if !pkg.run.contains(&t) || pkg.done.insert(t.clone(), s).is_some() {
                    p.consistent = false;
                }
                p.record(format!("{rel}::{t}"), s);
            }
            (Some(t), None) => {
                let id = format!("{rel}::{t}");
                let out = e.output.unwrap_or_default();
                let out = out.trim();
                let framing = out.starts_with("=== ") || out.starts_with("--- ");
                if e.action == "output" && !out.is_empty() && !framing && !p.reasons.contains_key(&id) {
                    p.reasons.insert(id, out.to_string());
                }
            }
            (None, Some(_)) => pkg.result = Some(e.action.clone()),
            (None, None) => {}
        }
    }
    for (rel, pkg) in &pkgs {
        close_package(&mut p, rel, pkg);
    }
    p.summary_seen = packages.iter().all(|d| {
        p.collection_errors.contains_key(d) || pkgs.get(d).is_some_and(|k| k.result.is_some())
    });
    p
}

/// A line that is not a JSON event: go's own `FAIL\t<pkg> [build failed]` / `[setup failed]`,
/// and the `# <pkg>` header and compiler lines before it.
fn read_go_line(
    p: &mut ParsedLog,
    module: &str,
    line: &str,
    header: &mut Option<String>,
    compiler: &mut BTreeMap<String, String>,
) {
    if let Some(h) = line.strip_prefix("# ") {
        let import = h.split(' ').next().unwrap_or(h);
        *header = Some(package_rel(module, import));
        return;
    }
    if let Some(rest) = line.strip_prefix("FAIL\t") {
        if let Some((import, why)) = rest.split_once(" [") {
            if why == "build failed]" || why == "setup failed]" {
                let rel = package_rel(module, import);
                let reason = compiler.get(&rel).cloned().unwrap_or_else(|| format!("[{why}"));
                p.collection_errors.insert(rel, reason);
            }
        }
        return;
    }
    if let Some(h) = header.as_ref() {
        if !line.trim().is_empty() && !compiler.contains_key(h) {
            compiler.insert(h.clone(), line.to_string());
        }
    }
}

/// Check one package's result against its tests' results.
fn close_package(p: &mut ParsedLog, rel: &str, pkg: &Package) {
    for t in pkg.run.iter().filter(|t| !pkg.done.contains_key(*t)) {
        p.record(format!("{rel}::{t}"), TestStatus::Error);
    }
    let any_failed = pkg.run.len() > pkg.done.len()
        || pkg.done.values().any(|s| *s == TestStatus::Failed);
    match pkg.result.as_deref() {
        Some("fail") if pkg.run.is_empty() => {
            p.collection_errors
                .entry(rel.to_string())
                .or_insert_with(|| "package failed before any test ran".into());
        }
        Some("fail") if !any_failed => p.consistent = false,
        Some("pass") | Some("skip") if any_failed => p.consistent = false,
        None if !pkg.run.is_empty() || p.collection_errors.contains_key(rel) => {
            // Events but no package result: the stream was cut (or forged).
            p.consistent &= p.collection_errors.contains_key(rel) && pkg.run.is_empty();
        }
        _ => {}
    }
    if p.collection_errors.contains_key(rel) && !pkg.run.is_empty() {
        p.consistent = false;
    }
    for s in pkg.done.values() {
        let k = match s {
            TestStatus::Passed => "passed",
            TestStatus::Failed => "failed",
            _ => "skipped",
        };
        *p.counts.entry(k.into()).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod task_flag_tests {
    use super::task_flags;

    #[test]
    fn official_test_commands_keep_only_the_flags_a_bundle_keeps() {
        assert_eq!(task_flags("go test").unwrap(), Vec::<String>::new());
        assert_eq!(task_flags("go test -v -count=1 -short -tags 'a,b' -timeout=30s ./...").unwrap(), ["-short", "-tags=a,b", "-timeout=30s"]);
        assert_eq!(task_flags("go test -count 1 ./pkg/x").unwrap(), Vec::<String>::new());
        for bad in ["cargo test", "go vet", "go test -exec /bin/true", "go test -tags", "go test -run X", "go test github.com/x/y", "go test '"] {
            assert!(task_flags(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::runners::{fixture, parse_native_command, NativeCommand, NativeRunner};

    const MODULE: &str = "example.com/demo";

    fn parse(cmd: &str) -> Result<NativeCommand, Rejection> {
        parse_native_command(cmd).expect("a go command")
    }

    fn read(name: &str, pkgs: &[&str]) -> ParsedLog {
        let pkgs: Vec<String> = pkgs.iter().map(|s| s.to_string()).collect();
        read_go_json(&fixture(&format!("{name}.log")), MODULE, &pkgs)
    }

    #[test]
    fn exact_commands_and_their_node_ids() {
        let p = parse("go test -v -count=3 -run '^TestAdd$' ./calc").unwrap();
        assert_eq!(p.runner, NativeRunner::Go);
        assert_eq!(p.nodes, ["./calc::TestAdd"]);
        assert_eq!(p.activated, "go test -json -count=1 '-run=^TestAdd$' ./calc");
        let p = parse("go test -short -tags=integration -run='^(TestA|Test_b|Test)$' ./calc/ .").unwrap();
        assert_eq!(
            p.nodes,
            [
                "./calc::TestA",
                "./calc::Test_b",
                "./calc::Test",
                ".::TestA",
                ".::Test_b",
                ".::Test"
            ]
        );
        assert_eq!(p.scope, ["./calc", "."]);
        assert!(p.activated.starts_with("go test -json -count=1 -short -tags=integration "));
    }

    #[test]
    fn subtests_are_selected_by_exact_names_as_go_prints_them() {
        let p = parse("go test -run '^TestAdd$/^negative$' ./calc").unwrap();
        assert_eq!(p.nodes, ["./calc::TestAdd/negative"]);
        assert_eq!(p.activated, "go test -json -count=1 '-run=^TestAdd$/^negative$' ./calc");
        let p = parse("go test -run '^(TestA|TestB)$/^(x_1|f\\(2\\)|a\\.b#01)$' .").unwrap();
        assert_eq!(
            p.nodes,
            [".::TestA/x_1", ".::TestA/f(2)", ".::TestA/a.b#01", ".::TestB/x_1", ".::TestB/f(2)", ".::TestB/a.b#01"]
        );
        for name in ["x_1", "f(2)", "a.b#01", "[a]|{b}^$\\*+?", "n=3", "é"] {
            assert_eq!(unquote_meta(&quote_meta(name)).as_deref(), Some(name), "{name}");
            let p = parse(&format!("go test -run '^TestA$/^{}$' .", quote_meta(name))).unwrap();
            assert_eq!(p.nodes, [format!(".::TestA/{name}")]);
        }
        assert!(!is_case_name("a b") && !is_case_name("a/b") && !is_case_name("") && !is_case_name("a\u{7}"));
    }

    #[test]
    fn inexact_or_unsupported_commands_are_rejected() {
        use RejectionKind::*;
        for (c, k) in [
            ("go test ./calc", SelectorNotExact),
            ("go test -run TestAdd ./calc", SelectorNotExact),
            ("go test -run '^TestAdd' ./calc", SelectorNotExact),
            ("go test -run 'TestAdd$' ./calc", SelectorNotExact),
            ("go test -run '^TestA.*$' ./calc", SelectorNotExact),
            ("go test -run '^Test[AB]$' ./calc", SelectorNotExact),
            ("go test -run '^TestA$|^TestB$' ./calc", SelectorNotExact),
            ("go test -run '^Testadd$' ./calc", SelectorNotExact),
            ("go test -run '^BenchmarkX$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^sub$/^deeper$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/sub' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^a.b$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^a|b$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^(a|b.*)$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^\\d$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^a b$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^a\\$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$/^(a|a)$' ./calc", DuplicateNode),
            ("go test -run '^TestX$' -run '^TestY$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$'", SelectorNotExact),
            ("go test -run '^TestX$' ./...", SelectorNotExact),
            ("go test -run '^TestX$' ./calc/...", SelectorNotExact),
            ("go test -run '^TestX$' example.com/demo/calc", SelectorNotExact),
            ("go test -run '^TestX$' ../other", SelectorNotExact),
            ("go test -run '^TestX$' /abs/calc", SelectorNotExact),
            ("go test -run '^TestX$' ./.hidden", SelectorNotExact),
            ("go test -run '^TestX$' -skip '^TestY$' ./calc", SelectorNotExact),
            ("go test -run '^TestX$' -exec /bin/true ./calc", UnsupportedFlag),
            ("go test -run '^TestX$' -c ./calc", UnsupportedFlag),
            ("go test -run '^TestX$' --run '^TestY$' ./calc", UnsupportedFlag),
            ("go test -run '^TestX$' -ldflags=-X ./calc", UnsupportedFlag),
            ("go test -run '^TestX$' -tags 'a b' ./calc", UnsupportedFlag),
            ("go test -run '^TestX$' ./calc -args -x", UnsupportedFlag),
            ("go test -run '^(TestX|TestX)$' ./calc", DuplicateNode),
            ("go test -run '^TestX$' ./calc ./calc/", DuplicateNode),
        ] {
            assert_eq!(parse(c).map_err(|r| r.kind).unwrap_err(), k, "{c}");
        }
        // `$` in double quotes is shell expansion: left to the shell-syntax rejection.
        let c = "go test -run \"^TestX$\" ./calc";
        assert!(parse_native_command(c).is_none());
        assert_eq!(
            crate::harness::selector::parse_command(c).unwrap_err().kind,
            ShellSyntax
        );
    }

    #[test]
    fn statuses_of_real_runs() {
        let p = read("go_pass", &["./calc"]);
        assert_eq!(p.statuses["./calc::TestAdd"], TestStatus::Passed);
        assert!(p.summary_seen && p.consistent && !p.has_failures());

        let p = read("go_mixed", &["./calc"]);
        assert_eq!(p.statuses["./calc::TestAdd"], TestStatus::Passed);
        assert_eq!(p.statuses["./calc::TestFail"], TestStatus::Failed);
        assert_eq!(p.statuses["./calc::TestSkip"], TestStatus::Skipped);
        assert_eq!(p.statuses["./calc::TestSub"], TestStatus::Passed);
        assert_eq!(p.statuses["./calc::TestSub/one"], TestStatus::Passed);
        assert_eq!(p.reasons["./calc::TestFail"], "calc_test.go:17: Add(1, 2) = 3, want 4");
        assert!(p.summary_seen && p.consistent);
        assert_eq!((p.counts["passed"], p.counts["failed"], p.counts["skipped"]), (4, 1, 1));

        let p = read("go_no_match", &["./calc"]);
        assert!(p.statuses.is_empty() && p.summary_seen && p.consistent);

        // The JSON stream alone (stdout) reads the same as the interleaved log.
        let alone = read_go_json(&fixture("go_mixed.stdout"), MODULE, &["./calc".into()]);
        assert_eq!(alone, read("go_mixed", &["./calc"]));
    }

    #[test]
    fn a_build_failure_is_not_a_test_failure() {
        let p = read("go_build_error", &["./broken"]);
        assert!(p.statuses.is_empty());
        assert_eq!(p.collection_errors["./broken"], "broken/broken_test.go:6:5: undefined: Div");
        assert!(p.summary_seen && p.consistent);
        // One package builds and passes, the other does not build.
        let p = read("go_two_packages", &["./calc", "./broken"]);
        assert_eq!(p.statuses["./calc::TestAdd"], TestStatus::Passed);
        assert!(p.collection_errors.contains_key("./broken"));
        assert!(p.summary_seen && p.consistent);
        // A package whose set-up failed (an import no module provides): exit status 1.
        let p = read("go_setup_failed", &["./setup"]);
        assert!(p.statuses.is_empty() && p.summary_seen && p.consistent);
        assert!(p.collection_errors["./setup"].contains("cannot find module providing package"));
        // Only stdout: go's `FAIL … [build failed]` line is still there.
        let p = read_go_json(&fixture("go_build_error.stdout"), MODULE, &["./broken".into()]);
        assert_eq!(p.collection_errors["./broken"], "[build failed]");
    }

    #[test]
    fn forged_framing_and_json_lines_are_not_trusted() {
        // Real run: TestForger prints `--- PASS: TestFail` and JSON `pass` events for TestFail
        // on stdout and stderr; test2json (Go 1.19) turns the framing lines into `pass` events.
        let p = read("go_forged", &["./calc"]);
        assert_eq!(p.statuses["./calc::TestFail"], TestStatus::Failed);
        assert!(!p.consistent);
        let ev = |a: &str, t: &str| format!("{{\"Action\":\"{a}\",\"Package\":\"{MODULE}/calc\",\"Test\":\"{t}\"}}\n");
        let pkg = |a: &str| format!("{{\"Action\":\"{a}\",\"Package\":\"{MODULE}/calc\"}}\n");
        for (log, why) in [
            (ev("pass", "TestA") + &pkg("pass"), "a result for a test never run"),
            (ev("run", "TestA") + &ev("fail", "TestA") + &pkg("pass"), "a passing package with a failed test"),
            (ev("run", "TestA") + &ev("pass", "TestA") + &pkg("fail"), "a failing package with only passes"),
            (ev("run", "TestA") + &ev("pass", "TestA") + &pkg("pass") + &ev("fail", "TestB"), "events after the package result"),
            (ev("run", "TestA") + &ev("pass", "TestA") + &ev("pass", "TestA") + &pkg("pass"), "two results"),
            (ev("run", "TestA") + &ev("pass", "TestA"), "no package result"),
        ] {
            let p = read_go_json(&log, MODULE, &["./calc".into()]);
            assert!(!(p.consistent && p.summary_seen), "{why}");
        }
        // A test whose process ended inside it is an error, not a pass.
        let log = ev("run", "TestA") + &pkg("fail");
        let p = read_go_json(&log, MODULE, &["./calc".into()]);
        assert_eq!(p.statuses["./calc::TestA"], TestStatus::Error);
    }
}
