//! Fail-closed bundle validation, before anything runs (harness-semantics §2, stricter): patch
//! paths, the one-line command and its exact selectors, the contract, and the binding between
//! declared nodes, selected nodes and the test functions the patch adds. Every failure is a
//! typed `Rejection` with a stable message the Test agent can act on.

use super::bundle::Bundle;
use super::diff::{is_test_path, parse_patch, FileChange};
use super::tamper::{screen_bundle, TamperClass};
use super::runners::{parse_native_command, NativeCommand};
use super::selector::{canonical_label, parse_command, pytest_node, CommandRunner, ParsedCommand};

/// Why a bundle was rejected. The `code` strings are stable.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectionKind {
    EmptyPatch,
    MalformedPatch,
    /// A bundle file is larger than its cap (`harness::bundle::PATCH_CAP`, …).
    BundleTooLarge,
    /// A bundle file is a symlink or not a regular file.
    BundleFileType,
    AbsolutePath,
    PathTraversal,
    GitPath,
    DeletedFile,
    RenamedFile,
    SymlinkOrBinary,
    NonTestPath,
    MissingCommand,
    MultiLineCommand,
    ShellSyntax,
    UnknownRunner,
    UnsupportedFlag,
    /// An environment assignment before the runner that is not on the allow-list.
    EnvironmentPrefix,
    SelectorNotExact,
    MissingContract,
    MalformedContract,
    DuplicateNode,
    NodeNotSelected,
    SelectedNotDeclared,
    UndeclaredTest,
    /// The test patch configures or hooks the runner (see `tamper`); the code is the class's.
    Tamper(TamperClass),
}

impl RejectionKind {
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::EmptyPatch => "empty_patch",
            RejectionKind::MalformedPatch => "malformed_patch",
            RejectionKind::BundleTooLarge => "bundle_too_large",
            RejectionKind::BundleFileType => "bundle_file_type",
            RejectionKind::AbsolutePath => "absolute_path",
            RejectionKind::PathTraversal => "path_traversal",
            RejectionKind::GitPath => "git_path",
            RejectionKind::DeletedFile => "deleted_file",
            RejectionKind::RenamedFile => "renamed_file",
            RejectionKind::SymlinkOrBinary => "symlink_or_binary",
            RejectionKind::NonTestPath => "non_test_path",
            RejectionKind::MissingCommand => "missing_command",
            RejectionKind::MultiLineCommand => "multi_line_command",
            RejectionKind::ShellSyntax => "shell_syntax",
            RejectionKind::UnknownRunner => "unknown_runner",
            RejectionKind::UnsupportedFlag => "unsupported_flag",
            RejectionKind::EnvironmentPrefix => "environment_prefix",
            RejectionKind::SelectorNotExact => "selector_not_exact",
            RejectionKind::MissingContract => "missing_contract",
            RejectionKind::MalformedContract => "malformed_contract",
            RejectionKind::DuplicateNode => "duplicate_node",
            RejectionKind::NodeNotSelected => "node_not_selected",
            RejectionKind::SelectedNotDeclared => "selected_not_declared",
            RejectionKind::UndeclaredTest => "undeclared_test",
            RejectionKind::Tamper(c) => c.code(),
        }
    }
}

/// A bundle rejection: kind + human-readable message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Rejection {
    pub kind: RejectionKind,
    pub message: String,
}

impl Rejection {
    pub fn new(kind: RejectionKind, message: impl Into<String>) -> Self {
        Rejection {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rejected ({}): {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for Rejection {}

/// A validated test command: a Python runner's (run under the Python guard), or a native
/// runner's (run by its own guarded run: `guard::libtest_run` for cargo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanCommand {
    Python(ParsedCommand),
    Native(NativeCommand),
}

impl PlanCommand {
    /// Canonical node ids the command selects, in order.
    pub fn nodes(&self) -> &[String] {
        match self {
            PlanCommand::Python(c) => &c.nodes,
            PlanCommand::Native(c) => &c.nodes,
        }
    }
    /// The command that runs: sanitised, with the flags the harness needs.
    pub fn activated(&self) -> &str {
        match self {
            PlanCommand::Python(c) => &c.activated,
            PlanCommand::Native(c) => &c.activated,
        }
    }
    /// Flags removed from the command (a native command keeps or refuses each flag).
    pub fn removed_flags(&self) -> &[String] {
        match self {
            PlanCommand::Python(c) => &c.removed_flags,
            PlanCommand::Native(_) => &[],
        }
    }
}

/// What validation establishes about a bundle: how to run it and which nodes it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestPlan {
    pub command: PlanCommand,
    /// Canonical declared nodes (== selected nodes).
    pub nodes: Vec<String>,
    /// Every path the test patch touches.
    pub paths: Vec<String>,
    pub command_sanitized: bool,
}

/// Check every patch path: relative, no `..`, not under `.git`, test-like, no deletion, rename,
/// symlink or binary, and nothing that configures or hooks the runner ([`screen_bundle`]).
pub fn check_patch_paths(files: &[FileChange]) -> Result<Vec<String>, Rejection> {
    let mut paths = Vec::new();
    for f in files {
        for p in f.paths() {
            let r = |k, m: &str| Err(Rejection::new(k, format!("test.patch: `{p}` {m}")));
            if p.starts_with('/') {
                return r(RejectionKind::AbsolutePath, "is an absolute path");
            }
            if p.split('/').any(|c| c == "..") {
                return r(RejectionKind::PathTraversal, "contains a `..` component");
            }
            if p.split('/').any(|c| c.eq_ignore_ascii_case(".git")) {
                return r(RejectionKind::GitPath, "is inside .git");
            }
            if p.is_empty() || p.split('/').any(|c| c.is_empty() || c == ".") {
                return r(
                    RejectionKind::MalformedPatch,
                    "is not a plain relative path",
                );
            }
            if !is_test_path(p) {
                return r(RejectionKind::NonTestPath, "is not a test file; a Test bundle may only add or change tests, conftest.py and test data");
            }
            if !paths.iter().any(|q| q == p) {
                paths.push(p.to_string());
            }
        }
        let first = f.paths().next().unwrap_or("?");
        if f.deleted {
            return Err(Rejection::new(
                RejectionKind::DeletedFile,
                format!("test.patch: deletes `{first}`; a Test bundle may not delete files"),
            ));
        }
        if f.renamed {
            return Err(Rejection::new(
                RejectionKind::RenamedFile,
                format!("test.patch: renames or copies `{first}`; not allowed"),
            ));
        }
        if f.symlink || f.binary {
            return Err(Rejection::new(
                RejectionKind::SymlinkOrBinary,
                format!("test.patch: `{first}` is a symlink or binary change; not allowed"),
            ));
        }
    }
    if let Err(t) = screen_bundle(files) {
        return Err(Rejection::new(RejectionKind::Tamper(t.class), format!("test.patch: {t}")));
    }
    Ok(paths)
}

fn canonical_node(runner: CommandRunner, n: &str) -> Result<String, Rejection> {
    match runner {
        CommandRunner::Pytest => pytest_node(n.trim()).map_err(|r| {
            Rejection::new(
                RejectionKind::MalformedContract,
                format!(
                    "test_nodes: {}",
                    r.message.trim_start_matches("test_command: ")
                ),
            )
        }),
        CommandRunner::Django | CommandRunner::Unittest => Ok(canonical_label(n)),
        CommandRunner::Sympy => Ok(n.trim().rsplit("::").next().unwrap_or(n).to_string()),
    }
}

/// The paper's prompt asks the Test agent for "every exact test_* name": a declared node that is a
/// bare Python identifier (`test_x`) stands for the one selected node whose test name it is
/// (`path.py::[Class::]test_x[param]`, `module.Class.test_x`, sympy `-k test_x`). No match, or
/// several, is a rejection; anything else is returned unchanged for the exact checks.
fn resolve_bare_name(
    runner: CommandRunner,
    n: &str,
    selected: &[String],
) -> Result<String, Rejection> {
    let n = n.trim();
    let is_identifier = n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_identifier || runner == CommandRunner::Sympy {
        return Ok(n.to_string());
    }
    let test_name = |node: &str| -> String {
        let last = match runner {
            CommandRunner::Pytest => node.rsplit("::").next().unwrap_or(node),
            _ => node.rsplit('.').next().unwrap_or(node),
        };
        last.split('[').next().unwrap_or(last).to_string()
    };
    only_match(n, selected.iter().filter(|s| test_name(s) == n).collect())
}

/// The one selected node a declared short name stands for: none is `node_not_selected`, several
/// a `malformed_contract` naming them.
fn only_match(n: &str, matches: Vec<&String>) -> Result<String, Rejection> {
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Rejection::new(
            RejectionKind::NodeNotSelected,
            format!("test_nodes: `{n}` is declared but not selected by test_command"),
        )),
        several => Err(Rejection::new(
            RejectionKind::MalformedContract,
            format!(
                "test_nodes: `{n}` names several selected nodes ({}); declare the exact node ids",
                several.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Whether a declared node names test function `name` defined in `file`.
fn node_covers(runner: CommandRunner, node: &str, file: &str, name: &str) -> bool {
    match runner {
        CommandRunner::Pytest => {
            let (path, rest) = node.split_once("::").unwrap_or(("", node));
            let func = rest.rsplit("::").next().unwrap_or(rest);
            let func = func.split('[').next().unwrap_or(func);
            path == file && func == name
        }
        CommandRunner::Django | CommandRunner::Unittest => {
            let module = file.trim_end_matches(".py").replace('/', ".");
            let parts: Vec<&str> = node.rsplitn(3, '.').collect();
            parts.len() == 3
                && parts[0] == name
                && (module == parts[2] || module.ends_with(&format!(".{}", parts[2])))
        }
        CommandRunner::Sympy => node == name,
    }
}

/// Validate a parsed bundle. `Ok` carries the run plan.
pub fn validate(bundle: &Bundle) -> Result<TestPlan, Rejection> {
    validate_with(bundle, true)
}

/// Validate a harness-built Oracle training bundle (the task's official test patch with a
/// command selecting one F2P node, paper Table 8): every rule of [`validate`] but one — the
/// tests the official patch adds need not all be declared, since only the selected node runs.
pub fn validate_oracle_selection(bundle: &Bundle) -> Result<TestPlan, Rejection> {
    validate_with(bundle, false)
}

fn validate_with(bundle: &Bundle, added_tests_declared: bool) -> Result<TestPlan, Rejection> {
    let files = parse_patch(&bundle.test_patch)
        .map_err(|m| Rejection::new(RejectionKind::MalformedPatch, format!("test.patch: {m}")))?;
    // A native command is judged first: precisely rejected when it does not parse.
    let native = match parse_native_command(&bundle.test_command) {
        Some(Ok(c)) => Some(c),
        Some(Err(r)) => return Err(r),
        None => None,
    };
    let paths = check_patch_paths(&files)?;
    let command = match native {
        Some(c) => PlanCommand::Native(c),
        None => PlanCommand::Python(parse_command(&bundle.test_command)?),
    };
    let selected_nodes = command.nodes().to_vec();
    let mut declared = Vec::new();
    for n in &bundle.contract.test_nodes {
        let c = match &command {
            PlanCommand::Python(p) => {
                let n = resolve_bare_name(p.runner, n, &p.nodes)?;
                canonical_node(p.runner, &n)?
            }
            PlanCommand::Native(c) => native_node(n, &c.nodes)?,
        };
        if declared.contains(&c) {
            return Err(Rejection::new(
                RejectionKind::DuplicateNode,
                format!("test_nodes: `{n}` is declared twice"),
            ));
        }
        declared.push(c);
    }
    let mut selected: Vec<String> = Vec::new();
    for n in &selected_nodes {
        if selected.contains(n) {
            return Err(Rejection::new(
                RejectionKind::DuplicateNode,
                format!("test_command: `{n}` is selected twice"),
            ));
        }
        selected.push(n.clone());
    }
    for d in &declared {
        if !selected.contains(d) {
            return Err(Rejection::new(
                RejectionKind::NodeNotSelected,
                format!("test_nodes: `{d}` is declared but not selected by test_command"),
            ));
        }
    }
    for s in &selected {
        if !declared.contains(s) {
            return Err(Rejection::new(
                RejectionKind::SelectedNotDeclared,
                format!("test_command: `{s}` is selected but not declared in test_nodes"),
            ));
        }
    }
    // The test functions a patch adds are read from Python source; a native bundle's tests run
    // only when selected (libtest's `--exact`), so one it adds and does not declare never runs.
    if let PlanCommand::Python(p) = &command {
        for f in files.iter().filter(|_| added_tests_declared) {
            let Some(file) = f.new_path.as_deref() else {
                continue;
            };
            for t in &f.added_tests {
                if !declared.iter().any(|d| node_covers(p.runner, d, file, t)) {
                    return Err(Rejection::new(
                        RejectionKind::UndeclaredTest,
                        format!("test.patch adds `{t}` in `{file}` but no declared test node names it"),
                    ));
                }
            }
        }
    }
    let sanitized = !command.removed_flags().is_empty();
    Ok(TestPlan {
        command,
        nodes: declared,
        paths,
        command_sanitized: sanitized,
    })
}

/// A declared node of a native command: a selected node id as it is (`calc/test/calc::adds`),
/// or the test path of exactly one selected node (`adds`, `tests::adds`).
fn native_node(n: &str, selected: &[String]) -> Result<String, Rejection> {
    let n = n.trim();
    if selected.iter().any(|s| s == n) {
        return Ok(n.to_string());
    }
    only_match(n, selected.iter().filter(|s| s.split_once("::").is_some_and(|(_, path)| path == n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GO_PATCH: &str = "diff --git a/calc/calc_test.go b/calc/calc_test.go\nnew file mode 100644\n--- /dev/null\n+++ b/calc/calc_test.go\n@@ -0,0 +1,3 @@\n+package calc\n+\n+func TestAdd(t *testing.T) {}\n";

    fn go_bundle(command: &str) -> Bundle {
        let contract = r#"{"entrypoint": "calc.Add", "trigger": "Add(2, 3)", "expected_output": "5",
 "issue_evidence": ["Add subtracts"], "alternative_hypotheses": ["none"], "non_assertions": ["Sub unchanged"],
 "test_nodes": ["./calc::TestAdd"]}"#;
        Bundle::from_parts(GO_PATCH, command, contract).expect("a well-formed bundle")
    }

    fn rejection(command: &str) -> Rejection {
        validate(&go_bundle(command)).expect_err("refused")
    }

    #[test]
    fn go_bundles_validate_and_bad_native_commands_get_precise_rejections() {
        let plan = validate(&go_bundle("go test -short -run '^TestAdd$' ./calc")).expect("a go bundle validates");
        assert_eq!(plan.nodes, ["./calc::TestAdd"]);
        let PlanCommand::Native(c) = &plan.command else { panic!("{:?}", plan.command) };
        assert_eq!(c.runner, super::super::runners::NativeRunner::Go);
        assert_eq!(c.build_flags, ["-short"]);
        // A native command that does not parse gets its precise rejection, not `unknown_runner`.
        assert_eq!(rejection("go test ./...").kind, RejectionKind::SelectorNotExact);
        assert_eq!(rejection("cargo test -p calc --lib -- tests::a").kind, RejectionKind::SelectorNotExact);
        assert_eq!(rejection("GOFLAGS=-x go test -run '^TestAdd$' ./calc").kind, RejectionKind::EnvironmentPrefix);
        // Any other command takes the Python path: `calc/calc_test.go` is a test file by Go's
        // convention, so the command itself is what is refused.
        assert_eq!(rejection("make test").kind, RejectionKind::UnknownRunner);
    }

    const RS_PATCH: &str = "diff --git a/tests/calc.rs b/tests/calc.rs\nnew file mode 100644\n--- /dev/null\n+++ b/tests/calc.rs\n@@ -0,0 +1,2 @@\n+#[test]\n+fn adds() { assert_eq!(calc::add(2, 3), 5); }\n";

    fn cargo_bundle(patch: &str, command: &str, nodes: &[&str]) -> Result<TestPlan, Rejection> {
        let contract = serde_json::json!({"entrypoint": "calc::add", "trigger": "add(2, 3)", "expected_output": "5",
            "issue_evidence": ["add subtracts"], "alternative_hypotheses": ["none"], "non_assertions": ["label unchanged"],
            "test_nodes": nodes});
        validate(&Bundle::from_parts(patch, command, &contract.to_string()).expect("a well-formed bundle"))
    }

    #[test]
    fn a_cargo_bundle_is_validated_with_its_exact_nodes() {
        let plan = cargo_bundle(RS_PATCH, "cargo test -p calc --test calc --features=x -- --exact adds", &["adds"]).unwrap();
        assert_eq!(plan.nodes, vec!["calc/test/calc::adds"]);
        assert_eq!(plan.paths, vec!["tests/calc.rs"]);
        let PlanCommand::Native(c) = &plan.command else { panic!("{plan:?}") };
        assert_eq!(c.build_flags, vec!["--features=x"]);
        assert!(plan.command.activated().contains("--test-threads=1"), "{}", plan.command.activated());
        // The full id is the same node; a test the command does not select is refused.
        let full = cargo_bundle(RS_PATCH, "cargo test -p calc --test calc -- --exact adds", &["calc/test/calc::adds"]).unwrap();
        assert_eq!(full.nodes, plan.nodes);
        let r = cargo_bundle(RS_PATCH, "cargo test -p calc --test calc -- --exact adds", &["subs"]).unwrap_err();
        assert_eq!(r.kind, RejectionKind::NodeNotSelected, "{r}");
        let r = cargo_bundle(RS_PATCH, "cargo test -p calc --test calc -- --exact adds subs", &["adds"]).unwrap_err();
        assert_eq!(r.kind, RejectionKind::SelectedNotDeclared, "{r}");
        // The patch's paths: tests only; build scripts and cargo configuration are refused by class.
        let src = RS_PATCH.replace("tests/calc.rs", "src/lib.rs");
        assert_eq!(cargo_bundle(&src, "cargo test -p calc --lib -- --exact adds", &["adds"]).unwrap_err().kind, RejectionKind::NonTestPath);
        for (path, class) in [("tests/build.rs", "build_script"), ("tests/.cargo/config.toml", "runner_config")] {
            let p = RS_PATCH.replace("tests/calc.rs", path);
            let r = cargo_bundle(&p, "cargo test -p calc --test calc -- --exact adds", &["adds"]).unwrap_err();
            assert_eq!(r.kind.code(), class, "{path}: {r}");
        }
    }
}
