//! Test commands and selectors, parsed per runner. A bundle's `test_command` must be one simple
//! command (no shell control operators, redirections, substitutions or expansions) that runs a
//! known runner on exact test nodes: pytest node ids `path.py::[Class::]test_name[param]` (any class name, parameter ids with spaces/brackets),
//! Django/unittest labels `module.Class.test_name`, sympy `bin/test path.py -k test_name`.
//! File-, class-, directory-, module- and suite-level selectors and `-k`/`-m` expressions are
//! rejected. Environment assignments before the runner are allow-listed (`PYTHONHASHSEED`, `TZ`,
//! `LANG`, `LC_ALL`, `PYTHONIOENCODING`): `PYTEST_ADDOPTS`, `PYTHONPATH` and the like would bypass the
//! flag allow-list. `cargo test` and `go test` commands are parsed by [`super::runners`], with the
//! shared helpers below (`tokenize`, `split_env`, `check_env_assignment`, `quote`).

use super::validate::{Rejection, RejectionKind};

/// The runner a command invokes (decides how the log is parsed).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandRunner {
    Pytest,
    Django,
    Unittest,
    Sympy,
}

/// A validated test command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCommand {
    pub runner: CommandRunner,
    /// Canonical node ids selected by the command, in order.
    pub nodes: Vec<String>,
    /// The command that is run: sanitised, with the flags the harness needs for parsing.
    pub activated: String,
    /// Flags removed from the command (e.g. `--no-header`).
    pub removed_flags: Vec<String>,
}

fn reject(kind: RejectionKind, msg: impl Into<String>) -> Rejection {
    Rejection::new(kind, msg)
}

/// Reject anything bash would treat as more than one plain simple command.
pub fn check_shell_syntax(cmd: &str) -> Result<(), Rejection> {
    #[derive(PartialEq)]
    enum Q {
        No,
        Single,
        Double,
    }
    let mut q = Q::No;
    let mut chars = cmd.chars().peekable();
    let mut word_start = true;
    while let Some(c) = chars.next() {
        match q {
            Q::Single => {
                if c == '\'' {
                    q = Q::No;
                }
            }
            Q::Double => match c {
                '"' => q = Q::No,
                '\\' => {
                    chars.next();
                }
                '$' | '`' => {
                    return Err(reject(RejectionKind::ShellSyntax, format!("test_command: `{c}` substitution/expansion is not allowed")))
                }
                _ => {}
            },
            Q::No => {
                match c {
                    '\'' => q = Q::Single,
                    '"' => q = Q::Double,
                    '\\' => {
                        chars.next();
                    }
                    ';' | '&' | '|' | '\n' | '\r' => {
                        return Err(reject(RejectionKind::ShellSyntax, format!("test_command: shell control operator `{}` is not allowed; give exactly one command", c.escape_default())))
                    }
                    '<' | '>' => {
                        return Err(reject(RejectionKind::ShellSyntax, format!("test_command: redirection `{c}` is not allowed")))
                    }
                    '(' | ')' | '{' | '}' => {
                        return Err(reject(RejectionKind::ShellSyntax, format!("test_command: `{c}` (subshell, group or brace expansion) is not allowed")))
                    }
                    '$' | '`' => {
                        return Err(reject(RejectionKind::ShellSyntax, format!("test_command: `{c}` substitution/expansion is not allowed")))
                    }
                    '*' | '?' => {
                        return Err(reject(RejectionKind::ShellSyntax, format!("test_command: unquoted glob `{c}` is not allowed")))
                    }
                    '#' if word_start => {
                        return Err(reject(RejectionKind::ShellSyntax, "test_command: comments are not allowed"))
                    }
                    _ => {}
                }
            }
        }
        word_start = q == Q::No && c.is_whitespace();
    }
    if q != Q::No {
        return Err(reject(
            RejectionKind::ShellSyntax,
            "test_command: unterminated quote",
        ));
    }
    Ok(())
}

fn is_python(tok: &str) -> bool {
    let base = tok.rsplit('/').next().unwrap_or(tok);
    base.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// Check the shell syntax of a one-line command ([`check_shell_syntax`]) and split it into words.
pub(crate) fn tokenize(cmd: &str) -> Result<Vec<String>, Rejection> {
    check_shell_syntax(cmd)?;
    shlex::split(cmd).ok_or_else(|| {
        reject(
            RejectionKind::ShellSyntax,
            "test_command: cannot be tokenised",
        )
    })
}

/// Split leading `NAME=value` words (environment assignments) from the program and its
/// arguments; the assignments are not checked here (see [`check_env_assignment`]).
pub(crate) fn split_env(tokens: &[String]) -> (&[String], &[String]) {
    let n = tokens
        .iter()
        .take_while(|t| t.contains('=') && is_ident(t.split('=').next().unwrap_or("")))
        .count();
    tokens.split_at(n)
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_alphabetic() || f == '_')
        && c.all(|x| x.is_alphanumeric() || x == '_')
}

/// The runner a command's words (environment assignments removed) invoke, and how many of the
/// words name it (`pytest`: 1, `python -m pytest`: 3, `tests/runtests.py`: 1, …); `None` for any
/// other program.
pub fn runner_prefix(rest: &[String]) -> Option<(CommandRunner, usize)> {
    let at = |k: usize| rest.get(k).map(String::as_str).unwrap_or("");
    Some(if matches!(at(0), "pytest" | "py.test") {
        (CommandRunner::Pytest, 1)
    } else if is_python(at(0)) && at(1) == "-m" && at(2) == "pytest" {
        (CommandRunner::Pytest, 3)
    } else if is_python(at(0)) && at(1) == "-m" && at(2) == "unittest" {
        (CommandRunner::Unittest, 3)
    } else if matches!(at(0), "./tests/runtests.py" | "tests/runtests.py") {
        (CommandRunner::Django, 1)
    } else if is_python(at(0)) && matches!(at(1), "./tests/runtests.py" | "tests/runtests.py") {
        (CommandRunner::Django, 2)
    } else if matches!(at(0), "bin/test" | "./bin/test") {
        (CommandRunner::Sympy, 1)
    } else if is_python(at(0)) && matches!(at(1), "bin/test" | "./bin/test") {
        (CommandRunner::Sympy, 2)
    } else {
        return None;
    })
}

/// Parse and validate a test command (shell syntax, runner, flags, exact selectors).
pub fn parse_command(cmd: &str) -> Result<ParsedCommand, Rejection> {
    let tokens = tokenize(cmd)?;
    let (env, rest) = split_env(&tokens);
    for e in env {
        check_env_assignment(e, ALLOWED_ENV)?;
    }
    let Some((runner, prog_len)) = runner_prefix(rest) else {
        return Err(reject(
            RejectionKind::UnknownRunner,
            format!("test_command: unrecognised runner `{}`; use pytest, python -m pytest, python -m unittest, tests/runtests.py or bin/test", rest.first().map(String::as_str).unwrap_or("")),
        ));
    };
    let prefix: Vec<String> = env
        .iter()
        .cloned()
        .chain(rest[..prog_len].iter().cloned())
        .collect();
    let args = &rest[prog_len..];
    let parsed = match runner {
        CommandRunner::Pytest => parse_pytest(args)?,
        CommandRunner::Django => parse_labels(args, runner)?,
        CommandRunner::Unittest => parse_labels(args, runner)?,
        CommandRunner::Sympy => parse_sympy(args)?,
    };
    let (flags, nodes, removed, words) = parsed;
    let mut activated: Vec<String> = prefix;
    activated.extend(flags);
    activated.extend(words);
    Ok(ParsedCommand {
        runner,
        nodes,
        activated: activated
            .iter()
            .map(|t| quote(t))
            .collect::<Vec<_>>()
            .join(" "),
        removed_flags: removed,
    })
}

/// Environment assignments a `test_command` may start with: only variables that cannot change
/// which code runs as the runner, its plugins, options or imports, each with a plain value.
/// Everything else (`PYTEST_ADDOPTS`, `PYTEST_PLUGINS`, `PYTHONPATH`, `PYTHONSTARTUP`,
/// `LD_PRELOAD`, `DJANGO_SETTINGS_MODULE`, …) would bypass the flag allow-list and is rejected.
const ALLOWED_ENV: &[&str] = &["PYTHONHASHSEED", "TZ", "LANG", "LC_ALL", "PYTHONIOENCODING"];

/// Check one `NAME=value` prefix against a runner's allow-list (a plain value, no `..`).
pub(crate) fn check_env_assignment(tok: &str, allowed: &[&str]) -> Result<(), Rejection> {
    let (name, value) = tok.split_once('=').unwrap_or((tok, ""));
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:+@".contains(c));
    if !allowed.contains(&name) || !plain || value.contains("..") {
        return Err(reject(
            RejectionKind::EnvironmentPrefix,
            format!(
                "test_command: environment assignment `{name}=…` is not allowed (it can change how the runner runs); only {} with a plain value may prefix the command",
                allowed.join(", ")
            ),
        ));
    }
    Ok(())
}

/// One word of an activated command, shell-quoted where it needs to be.
pub(crate) fn quote(t: &str) -> String {
    if !t.is_empty()
        && t.chars()
            .all(|c| c.is_alphanumeric() || "-_./:=,@%+[]".contains(c))
    {
        t.to_string()
    } else {
        super::sandbox::shell_quote(t)
    }
}

type Parts = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

fn parse_pytest(args: &[String]) -> Result<Parts, Rejection> {
    const NO_ARG: &[&str] = &[
        "-v",
        "-vv",
        "-vvv",
        "-s",
        "-x",
        "-l",
        "--showlocals",
        "--disable-warnings",
        "--strict-markers",
        "--verbose",
        "--exitfirst",
    ];
    const WITH_ARG: &[&str] = &[
        "--tb",
        "-W",
        "--capture",
        "--color",
        "--import-mode",
        "--maxfail",
        "--durations",
    ];
    let mut flags = vec![
        "-rA".to_string(),
        "-p".to_string(),
        "no:cacheprovider".to_string(),
    ];
    let mut removed = Vec::new();
    let mut nodes = Vec::new();
    let mut k = 0;
    while k < args.len() {
        let a = args[k].as_str();
        k += 1;
        if a == "--no-header" || a == "-q" || a == "--quiet" {
            // `-q` hides the closing counts line the harness checks completion with.
            removed.push(a.to_string());
        } else if a == "-k"
            || a.starts_with("-k")
            || a == "-m"
            || a.starts_with("--deselect")
            || a.starts_with("--keyword")
        {
            return Err(reject(
                RejectionKind::SelectorNotExact,
                format!("test_command: `{a}` selects by expression; select exact node ids instead"),
            ));
        } else if a.starts_with("-r")
            || a == "-p" && args.get(k).is_some_and(|n| n == "no:cacheprovider")
        {
            if a == "-p" {
                k += 1;
            }
        } else if NO_ARG.contains(&a) {
            flags.push(a.to_string());
        } else if let Some(f) = WITH_ARG.iter().find(|f| a.starts_with(&format!("{f}="))) {
            let _ = f;
            flags.push(a.to_string());
        } else if WITH_ARG.contains(&a) {
            let v = args.get(k).ok_or_else(|| {
                reject(
                    RejectionKind::UnsupportedFlag,
                    format!("test_command: `{a}` needs a value"),
                )
            })?;
            flags.push(a.to_string());
            flags.push(v.clone());
            k += 1;
        } else if a.starts_with('-') {
            return Err(reject(
                RejectionKind::UnsupportedFlag,
                format!("test_command: pytest flag `{a}` is not supported"),
            ));
        } else {
            nodes.push(pytest_node(a)?);
        }
    }
    if nodes.is_empty() {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            "test_command: no test node selected (suite-level run)",
        ));
    }
    Ok((flags, nodes.clone(), removed, nodes))
}

/// Validate one pytest node id and return it canonically (no leading `./`).
pub fn pytest_node(a: &str) -> Result<String, Rejection> {
    let a = a.strip_prefix("./").unwrap_or(a);
    let Some((path, rest)) = a.split_once("::") else {
        let what = if a.ends_with(".py") {
            "file-level"
        } else {
            "directory-level"
        };
        return Err(reject(RejectionKind::SelectorNotExact, format!("test_command: `{a}` is a {what} selector; name exact test nodes (path.py::test_name)")));
    };
    check_rel_path(path)?;
    if !path.ends_with(".py") {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            format!("test_command: `{a}`: node ids must start with a .py file"),
        ));
    }
    let (names, param) = match rest.find('[') {
        Some(i) if rest.ends_with(']') => (&rest[..i], Some(&rest[i..])),
        Some(_) => {
            return Err(reject(
                RejectionKind::SelectorNotExact,
                format!("test_command: `{a}`: malformed parameter id"),
            ))
        }
        None => (rest, None),
    };
    let parts: Vec<&str> = names.split("::").collect();
    let (last, classes) = parts.split_last().expect("split yields one part");
    // Any class name the runner reports (unittest-style `TestCase` subclasses need not be named
    // `Test*`); the last part is a test function or method.
    if !classes.iter().all(|c| is_ident(c)) || !is_ident(last) {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            format!("test_command: `{a}` is not a node id path.py::[Class::]test_name"),
        ));
    }
    if !last.starts_with("test") {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            format!("test_command: `{a}` is a class-level selector; name the test function"),
        ));
    }
    let _ = param;
    Ok(a.to_string())
}

pub(crate) fn check_rel_path(p: &str) -> Result<(), Rejection> {
    if p.starts_with('/') || p.split('/').any(|c| c == "..") {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            format!("test_command: `{p}` must be a relative path inside the repository"),
        ));
    }
    Ok(())
}

/// Canonical unittest/Django label `module.Class.test_name` (accepts the log forms
/// `test_name (module.Class)` and `test_name (module.Class.test_name)`).
pub fn canonical_label(s: &str) -> String {
    let s = s.trim();
    if let Some((name, rest)) = s.split_once(" (") {
        if let Some(inner) = rest.strip_suffix(')') {
            let name = name.trim();
            if inner.ends_with(&format!(".{name}")) {
                return inner.to_string();
            }
            return format!("{inner}.{name}");
        }
    }
    s.to_string()
}

fn check_label(l: &str) -> Result<String, Rejection> {
    let parts: Vec<&str> = l.split('.').collect();
    let ok = parts.len() >= 3
        && parts.iter().all(|p| is_ident(p))
        && parts[parts.len() - 1].starts_with("test")
        && parts[parts.len() - 2]
            .chars()
            .next()
            .is_some_and(|c| c.is_uppercase());
    if !ok {
        return Err(reject(RejectionKind::SelectorNotExact, format!("test_command: `{l}` is a module-, class- or suite-level label; name module.Class.test_name")));
    }
    Ok(l.to_string())
}

fn parse_labels(args: &[String], runner: CommandRunner) -> Result<Parts, Rejection> {
    let mut flags = Vec::new();
    let mut nodes = Vec::new();
    let mut k = 0;
    let with_arg: &[&str] = match runner {
        CommandRunner::Django => &["--verbosity", "-v", "--settings", "--parallel"],
        _ => &[],
    };
    while k < args.len() {
        let a = args[k].as_str();
        k += 1;
        if a == "-k" || a.starts_with("-k") || a == "--tag" || a == "--exclude-tag" {
            return Err(reject(
                RejectionKind::SelectorNotExact,
                format!("test_command: `{a}` selects by pattern; name exact labels instead"),
            ));
        } else if runner == CommandRunner::Django
            && (a.starts_with("--verbosity") || a == "-v" || a.starts_with("--parallel"))
        {
            if !a.contains('=') {
                k += 1;
            }
        } else if runner == CommandRunner::Unittest && a == "-v" {
        } else if a == "--noinput" || a == "--failfast" || a == "-q" {
            flags.push(a.to_string());
        } else if let Some(f) = with_arg.iter().find(|f| a.starts_with(&format!("{f}="))) {
            let _ = f;
            flags.push(a.to_string());
        } else if with_arg.contains(&a) {
            let v = args.get(k).ok_or_else(|| {
                reject(
                    RejectionKind::UnsupportedFlag,
                    format!("test_command: `{a}` needs a value"),
                )
            })?;
            flags.push(format!("{a}={v}"));
            k += 1;
        } else if a.starts_with('-') {
            return Err(reject(
                RejectionKind::UnsupportedFlag,
                format!("test_command: flag `{a}` is not supported"),
            ));
        } else {
            nodes.push(check_label(a)?);
        }
    }
    if nodes.is_empty() {
        return Err(reject(
            RejectionKind::SelectorNotExact,
            "test_command: no test label selected (suite-level run)",
        ));
    }
    let mut all = match runner {
        CommandRunner::Django => vec!["--verbosity=2".to_string()],
        _ => vec!["-v".to_string()],
    };
    all.extend(flags);
    Ok((all, nodes.clone(), Vec::new(), nodes))
}

fn parse_sympy(args: &[String]) -> Result<Parts, Rejection> {
    let mut paths = Vec::new();
    let mut names = Vec::new();
    let mut k = 0;
    while k < args.len() {
        let a = args[k].as_str();
        k += 1;
        match a {
            "-C" | "--no-cache" | "--verbose" | "-v" => {}
            "-k" => {
                let v = args.get(k).ok_or_else(|| {
                    reject(
                        RejectionKind::UnsupportedFlag,
                        "test_command: `-k` needs a test name",
                    )
                })?;
                k += 1;
                if !(is_ident(v) && v.starts_with("test_")) {
                    return Err(reject(
                        RejectionKind::SelectorNotExact,
                        format!("test_command: `-k {v}` is not an exact test function name"),
                    ));
                }
                names.push(v.clone());
            }
            _ if a.starts_with('-') => {
                return Err(reject(
                    RejectionKind::UnsupportedFlag,
                    format!("test_command: flag `{a}` is not supported"),
                ))
            }
            _ => {
                check_rel_path(a)?;
                if !a.ends_with(".py") {
                    return Err(reject(
                        RejectionKind::SelectorNotExact,
                        format!("test_command: `{a}` is a directory-level selector"),
                    ));
                }
                paths.push(a.to_string());
            }
        }
    }
    if names.is_empty() || paths.is_empty() {
        return Err(reject(RejectionKind::SelectorNotExact, "test_command: sympy commands need `path.py -k test_name` (file-level runs are rejected)"));
    }
    let flags = vec!["-C".to_string(), "--verbose".to_string()];
    let mut words = paths;
    for n in &names {
        words.push("-k".into());
        words.push(n.clone());
    }
    Ok((flags, names, Vec::new(), words))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(cmd: &str) -> RejectionKind {
        parse_command(cmd).unwrap_err().kind
    }

    #[test]
    fn pytest_exact_nodes() {
        let p = parse_command("python -m pytest --no-header tests/test_a.py::TestX::test_y[1-2] ./tests/test_a.py::test_z").unwrap();
        assert_eq!(p.runner, CommandRunner::Pytest);
        assert_eq!(
            p.nodes,
            vec![
                "tests/test_a.py::TestX::test_y[1-2]",
                "tests/test_a.py::test_z"
            ]
        );
        assert_eq!(p.removed_flags, vec!["--no-header"]);
        assert!(p.activated.contains("-rA"));
        assert!(!p.activated.contains("--no-header"));
    }

    #[test]
    fn rejects_shell_and_inexact_selectors() {
        for c in [
            "pytest a.py::test_x; rm -rf /",
            "pytest a.py::test_x && true",
            "pytest a.py::test_x | cat",
            "pytest $(echo a.py::test_x)",
            "pytest `x`",
            "pytest a.py::test_x > out",
            "pytest \"${X}\"",
            "pytest a.py::test_x &",
        ] {
            assert_eq!(kind(c), RejectionKind::ShellSyntax, "{c}");
        }
        assert_eq!(
            kind("pytest tests/test_a.py"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(kind("pytest tests/"), RejectionKind::SelectorNotExact);
        assert_eq!(
            kind("pytest tests/test_a.py -k test_x"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(
            kind("pytest tests/test_a.py::TestX"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(
            kind("pytest ../x.py::test_a"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(
            kind("pytest --lf a.py::test_x"),
            RejectionKind::UnsupportedFlag
        );
        assert_eq!(kind("make test"), RejectionKind::UnknownRunner);
        assert_eq!(
            kind("./tests/runtests.py --verbosity 2 app.tests"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(
            kind("bin/test sympy/core/tests/test_a.py"),
            RejectionKind::SelectorNotExact
        );
        assert_eq!(
            kind("bin/test sympy/core/tests/test_a.py -k 'test_a or test_b'"),
            RejectionKind::SelectorNotExact
        );
        // quoted metacharacters are plain data
        assert!(parse_command("pytest 'tests/test_a.py::test_x[a;b]'").is_ok());
    }

    #[test]
    fn env_prefixes_cannot_bypass_the_flag_allow_list() {
        for c in [
            "PYTEST_ADDOPTS='-p evil' pytest a.py::test_x",
            "PYTEST_ADDOPTS=--lf pytest a.py::test_x",
            "PYTEST_PLUGINS=evil pytest a.py::test_x",
            "PYTHONPATH=/tmp pytest a.py::test_x",
            "PYTHONSTARTUP=x.py python -m pytest a.py::test_x",
            "LD_PRELOAD=/tmp/x.so pytest a.py::test_x",
            "TZ=UTC PYTEST_ADDOPTS=-x pytest a.py::test_x",
            "LANG='C; x' pytest a.py::test_x",
            "DJANGO_SETTINGS_MODULE=evil ./tests/runtests.py app.tests.T.test_x",
        ] {
            assert_eq!(kind(c), RejectionKind::EnvironmentPrefix, "{c}");
        }
        // `env` is not a runner.
        assert_eq!(
            kind("env PYTEST_ADDOPTS=-x pytest a.py::test_x"),
            RejectionKind::UnknownRunner
        );
        let p = parse_command("PYTHONHASHSEED=0 TZ=UTC pytest a.py::test_x").unwrap();
        assert!(p.activated.starts_with("PYTHONHASHSEED=0 TZ=UTC "));
    }

    #[test]
    fn every_node_id_pytest_reports_is_a_selector() {
        // Real ids from pytest 9 (`-rA`) on a generated module: a unittest-style class not
        // named Test*, parameter ids with spaces, ` - ` and a bracket.
        for id in [
            "test_a.py::Checks::test_u",
            "tests/test_a.py::MyCase::Inner::test_v",
            "test_a.py::test_p[a b]",
            "test_a.py::test_p[c]d]",
            "test_a.py::test_p[e - f]",
            "test_a.py::test_p[x::y]",
        ] {
            let cmd = format!("pytest {}", crate::harness::sandbox::shell_quote(id));
            let p = parse_command(&cmd).unwrap_or_else(|r| panic!("{id}: {r}"));
            assert_eq!(p.nodes, vec![id.to_string()]);
        }
    }

    #[test]
    fn django_unittest_sympy() {
        let p = parse_command(
            "./tests/runtests.py --verbosity 2 --settings=test_sqlite app.tests.FooTests.test_bar",
        )
        .unwrap();
        assert_eq!(p.runner, CommandRunner::Django);
        assert_eq!(p.nodes, vec!["app.tests.FooTests.test_bar"]);
        let p = parse_command("python3 -m unittest -v tests.test_x.TestX.test_y").unwrap();
        assert_eq!(p.runner, CommandRunner::Unittest);
        let p = parse_command("bin/test sympy/core/tests/test_a.py -k test_one").unwrap();
        assert_eq!(p.nodes, vec!["test_one"]);
        assert_eq!(
            canonical_label("test_y (tests.test_x.TestX)"),
            "tests.test_x.TestX.test_y"
        );
        assert_eq!(
            canonical_label("test_y (tests.test_x.TestX.test_y)"),
            "tests.test_x.TestX.test_y"
        );
    }
}
