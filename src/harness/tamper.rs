//! Screening patches for test-framework tampering (the paper's "forbidden test modification",
//! reward 0). A source-only candidate must change the code under test and nothing that decides
//! WHICH code runs as the test runner, its plugins or its dependencies, WHAT the runner reports,
//! or HOW the official tests are checked out. This module is the static half of the defence: it
//! reads the parsed patch (see [`super::diff`]) and names the first violation with its class.
//! The runtime half (the runner started with the Base configuration, no bytecode writes, no user
//! site) lives in [`super::execute::runner_guard`]; docs/harness.md lists which defence covers
//! what.
//!
//! Candidates (gate and official grading) are screened with [`screen_candidate`]; a Test
//! agent's bundle, whose test files may use the runner freely, with [`screen_bundle`] (no
//! configuration, start-up hooks, metadata, shadowing modules, bytecode, binaries, symlinks).
//! A repository that IS the runner (pytest's, pluggy's) may touch the runner's internals.

use super::diff::{path_problem, FileChange, FileOp, PathProblem};
use regex::Regex;
use std::sync::OnceLock;

/// The class of a forbidden modification. `code()` strings are stable.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TamperClass {
    /// An absolute path, a `..` component, a path that is not plain.
    UnsafePath,
    /// A path inside `.git` (hooks, config, objects).
    GitPath,
    /// pytest.ini / .pytest.ini, or a pytest section of pyproject.toml, setup.cfg, tox.ini.
    RunnerConfig,
    /// A conftest.py anywhere (pytest loads it as a plugin).
    Conftest,
    /// sitecustomize / usercustomize modules, `.pth` files: code run at interpreter start-up.
    StartupHook,
    /// A plugin entry point (`pytest11`, `entry_points`) in setup.py / setup.cfg / pyproject.
    PluginEntryPoint,
    /// `*.egg-info` / `*.dist-info` metadata, which the runner's plugin discovery reads.
    PackageMetadata,
    /// A new module that shadows the runner, its dependencies or the standard library.
    ShadowModule,
    /// Compiled bytecode (`.pyc`, `.pyo`, `__pycache__`).
    Bytecode,
    /// A binary patch (its content cannot be screened).
    BinaryPatch,
    /// A symbolic link, or a mode other than a regular file.
    Symlink,
    /// Code reaching into the runner's internals (`_pytest`, `pluggy`, hooks, `TestResult`,
    /// `sys.modules`, `builtins`, frame walking, tracing hooks, `ctypes`).
    RunnerInternals,
    /// Ending the process around the runner (`os._exit`, `atexit`, signals, a top-level exit).
    EarlyExit,
    /// Writing around the runner's output (raw descriptors, replaced streams, fake statuses).
    OutputForgery,
    /// Obfuscated dynamic code (`__import__`, computed `import_module`, `exec`, decoders).
    DynamicCode,
    /// Changes how the official tests are checked out (`.gitattributes`, `.gitmodules`).
    TestCheckout,
}

impl TamperClass {
    pub fn code(self) -> &'static str {
        use TamperClass::*;
        match self {
            UnsafePath => "unsafe_path",
            GitPath => "git_path",
            RunnerConfig => "runner_config",
            Conftest => "conftest",
            StartupHook => "startup_hook",
            PluginEntryPoint => "plugin_entry_point",
            PackageMetadata => "package_metadata",
            ShadowModule => "shadow_module",
            Bytecode => "bytecode",
            BinaryPatch => "binary_patch",
            Symlink => "symlink",
            RunnerInternals => "runner_internals",
            EarlyExit => "early_exit",
            OutputForgery => "output_forgery",
            DynamicCode => "dynamic_code",
            TestCheckout => "test_checkout",
        }
    }
}

/// One forbidden modification: its class, the path and what was found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("forbidden test modification ({}): `{path}`: {detail}", class.code())]
pub struct Tamper {
    pub class: TamperClass,
    pub path: String,
    pub detail: String,
}

fn tamper(class: TamperClass, path: &str, detail: impl Into<String>) -> Tamper {
    Tamper {
        class,
        path: path.to_string(),
        detail: detail.into(),
    }
}

/// What screening needs to know about the repository.
#[derive(Clone, Debug, Default)]
pub struct ScreenContext {
    /// The repository under test is the test runner itself (pytest, pluggy): its source may
    /// use the runner's internals.
    pub repository_is_runner: bool,
}

/// Runner packages and the runner's dependencies: a new module by one of these names shadows
/// them (with the standard library, `stdlib_modules.txt`).
const RUNNER_MODULES: &[&str] = &[
    "pytest",
    "_pytest",
    "py",
    "pluggy",
    "iniconfig",
    "packaging",
    "exceptiongroup",
    "tomli",
    "colorama",
    "attr",
    "attrs",
    "more_itertools",
    "six",
    "setuptools",
    "pkg_resources",
    "importlib_metadata",
    "zipp",
    "typing_extensions",
    "hypothesis",
    "xdist",
    "execnet",
    "mock",
    "nose",
    "numpy",
    "django",
    "sympy",
    "conftest",
    "sitecustomize",
    "usercustomize",
];

fn stdlib_modules() -> &'static [&'static str] {
    static S: OnceLock<Vec<&'static str>> = OnceLock::new();
    S.get_or_init(|| {
        include_str!("stdlib_modules.txt")
            .lines()
            .filter(|l| !l.is_empty())
            .collect()
    })
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The importable top-level name a path defines when its root is a `sys.path` root (the
/// repository root, `src/`, `lib/`): `x.py` → `x`, `x/…` → `x`.
fn top_level_module(path: &str) -> Option<&str> {
    let rest = ["src/", "lib/"]
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .unwrap_or(path);
    let first = rest.split('/').next()?;
    let name = if rest.contains('/') {
        first
    } else {
        first
            .strip_suffix(".py")
            .or_else(|| first.strip_suffix(".pyw"))
            .or_else(|| {
                first
                    .split('.')
                    .next()
                    .filter(|_| first.ends_with(".so") || first.ends_with(".pyd"))
            })?
    };
    Some(name)
}

/// Path rules shared by candidates and bundles.
fn path_rules(f: &FileChange, p: &str, ctx: &ScreenContext) -> Result<(), Tamper> {
    use TamperClass::*;
    match path_problem(p) {
        Some(PathProblem::GitDir) => return Err(tamper(GitPath, p, "is inside .git")),
        Some(PathProblem::Absolute) => return Err(tamper(UnsafePath, p, "is an absolute path")),
        Some(PathProblem::Traversal) => return Err(tamper(UnsafePath, p, "has a `..` component")),
        Some(PathProblem::NotPlain) => {
            return Err(tamper(UnsafePath, p, "is not a plain relative path"))
        }
        None => {}
    }
    let name = file_name(p);
    let comps: Vec<&str> = p.split('/').collect();
    if matches!(name, "pytest.ini" | ".pytest.ini") {
        return Err(tamper(RunnerConfig, p, "is a pytest configuration file"));
    }
    if matches!(name, ".gitattributes" | ".gitmodules") {
        return Err(tamper(TestCheckout, p, "changes how files are checked out"));
    }
    if name.ends_with(".pth")
        || name.starts_with("sitecustomize")
        || name.starts_with("usercustomize")
        || comps
            .iter()
            .any(|c| matches!(*c, "sitecustomize" | "usercustomize"))
    {
        return Err(tamper(StartupHook, p, "runs code at interpreter start-up"));
    }
    if comps
        .iter()
        .any(|c| c.ends_with(".egg-info") || c.ends_with(".dist-info") || c.ends_with(".egg-link"))
    {
        return Err(tamper(
            PackageMetadata,
            p,
            "is package metadata read by plugin discovery",
        ));
    }
    if comps.contains(&"__pycache__") || [".pyc", ".pyo"].iter().any(|e| name.ends_with(e)) {
        return Err(tamper(Bytecode, p, "is compiled bytecode"));
    }
    if f.binary {
        return Err(tamper(BinaryPatch, p, "is a binary change"));
    }
    if f.modes().any(|m| m != 0o100644 && m != 0o100755) {
        return Err(tamper(
            Symlink,
            p,
            "is a symbolic link or not a regular file",
        ));
    }
    if f.creates() && f.new_path.as_deref() == Some(p) {
        let shadow = |n: &str| {
            (RUNNER_MODULES.contains(&n) && !ctx.repository_is_runner)
                || stdlib_modules().contains(&n)
        };
        let dir_hit = comps[..comps.len() - 1]
            .iter()
            .any(|c| matches!(*c, "pytest" | "_pytest" | "pluggy"));
        let stem = name.strip_suffix(".py").unwrap_or(name);
        let runner_name = dir_hit || matches!(stem, "pytest" | "_pytest" | "pluggy");
        if (runner_name && !ctx.repository_is_runner) || top_level_module(p).is_some_and(shadow) {
            return Err(tamper(ShadowModule, p, "creates a module that shadows the test runner, its dependencies or the standard library"));
        }
    }
    Ok(())
}

/// Configuration files whose sections may configure pytest or declare entry points.
fn config_rules(f: &FileChange, p: &str) -> Result<(), Tamper> {
    let name = file_name(p);
    let is_cfg = matches!(name, "pyproject.toml" | "setup.cfg" | "tox.ini");
    if !(is_cfg || name == "setup.py") {
        return Ok(());
    }
    let header = re(r"^\s*\[+\s*([^\]]*?)\s*\]+");
    let keys = re(
        r"(?i)pytest|addopts|testpaths|python_files|python_classes|python_functions|norecursedirs|confcutdir|rootdir|required_plugins|usefixtures|\bplugins\b|(^|\s)-p\s",
    );
    let entry = re(r"(?i)entry[_-]?points|pytest11");
    for h in &f.hunks {
        let mut section: Option<String> = None;
        for l in &h.lines {
            let (sign, text) = l.split_at(1);
            if let Some(c) = header.captures(text) {
                section = Some(c[1].to_ascii_lowercase());
            }
            if sign == " " || sign == "\\" {
                continue;
            }
            if entry.is_match(text)
                || section
                    .as_deref()
                    .is_some_and(|s| s.contains("entry") || s.contains("plugins"))
            {
                return Err(tamper(
                    TamperClass::PluginEntryPoint,
                    p,
                    format!("changes entry points: `{}`", text.trim()),
                ));
            }
            if !is_cfg {
                continue;
            }
            let in_pytest = section.as_deref().is_some_and(|s| s.contains("pytest"));
            if in_pytest
                || (section.is_none() && keys.is_match(text))
                || (header.is_match(text) && keys.is_match(text))
            {
                return Err(tamper(
                    TamperClass::RunnerConfig,
                    p,
                    format!("changes the test runner's configuration: `{}`", text.trim()),
                ));
            }
        }
    }
    Ok(())
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("valid screening regex")
}

/// Index of the top-level-exit rule in [`content_rules`].
const TOP_LEVEL_EXIT_RULE: usize = 10;

/// Content rules for added Python source lines: (class, pattern, what it means).
fn content_rules() -> &'static [(TamperClass, Regex, &'static str)] {
    static R: OnceLock<Vec<(TamperClass, Regex, &'static str)>> = OnceLock::new();
    R.get_or_init(|| {
        use TamperClass::*;
        let rules: &[(TamperClass, &str, &str)] = &[
            (RunnerInternals, r"\b_pytest\b|\bpluggy\b|\biniconfig\b", "uses the test runner's internals"),
            (RunnerInternals, r#"['"]_?pytest['"]|['"]py\.test['"]"#, "names the test runner as a string"),
            (RunnerInternals, r"\bdef\s+pytest_\w+|\bpytest_plugins\b|\bpytest\s*\.\s*(hookimpl|hookspec|main|register_assert_rewrite|Item|Function|Session|Config|CallInfo|TestReport|CollectReport|Package|Module|Class|Collector|Dir|Directory|File|PytestPluginManager|StashKey)\b", "implements or calls runner hooks"),
            (RunnerInternals, r"\b(TestResult|TextTestResult|TextTestRunner|TestProgram|_TextTestResult)\b|\bunittest\s*\.\s*(result|runner|main|loader|suite|signals|case)\b|\bfrom\s+unittest(\.\w+)?\s+import\s+[^#]*\b(result|runner|main|TestResult|TextTestRunner|TestProgram)\b", "reaches into unittest's result machinery"),
            (RunnerInternals, r"\bsys\s*\.\s*modules\b\s*($|[^\[]|\[\s*[^_\s])|\bdel\s+sys\s*\.\s*modules", "reads or rewrites sys.modules"),
            (RunnerInternals, r"\bbuiltins\b|__builtins__", "patches builtins"),
            (RunnerInternals, r"\b(getattr|setattr|delattr|vars)\s*\(\s*(sys|os|builtins|importlib|unittest|gc)\b|\b(sys|os|importlib|unittest)\s*\.\s*__dict__", "reaches module internals through getattr/vars"),
            (RunnerInternals, r"\bsys\s*\.\s*(_getframe|settrace|setprofile|excepthook|displayhook|addaudithook|breakpointhook|unraisablehook|meta_path|path_hooks|path_importer_cache)\b|\binspect\s*\.\s*(stack|currentframe|getouterframes|trace)\b|\bf_back\b|\bf_globals\b|\bf_locals\b|\bthreading\s*\.\s*(settrace|setprofile)\b|\bgc\s*\.\s*(get_objects|get_referrers|get_referents)\b", "walks or hooks the interpreter around the runner"),
            (RunnerInternals, r"\bctypes\b|\bcffi\b", "can rewrite interpreter memory"),
            (EarlyExit, r"\bos\s*\.\s*(_exit|abort|kill|killpg|fork|forkpty|exec\w*|spawn\w*)\s*\(|\batexit\b|\bsignal\s*\.\s*(signal|alarm|setitimer|pthread_kill|raise_signal)\b|\bfaulthandler\b", "ends or signals the process around the runner"),
            (EarlyExit, r"^(sys\s*\.\s*exit|exit|quit|os\s*\.\s*_exit)\s*\(|^raise\s+(SystemExit|KeyboardInterrupt)\b", "exits at import time"),
            (OutputForgery, r"\bos\s*\.\s*(write|dup2?|fdopen|openpty)\s*\(|\bsys\s*\.\s*(__stdout__|__stderr__)\b|\bsys\s*\.\s*(stdout|stderr)\s*=[^=]|/dev/(tty|stdout|stderr|fd)|/proc/self/fd|\bcontextlib\s*\.\s*redirect_std", "writes around the runner's output"),
            (OutputForgery, r"\b(PASSED|XPASS|XFAIL)\b|\d+\s+passed\b|\bpassed in\b|test session starts|short test summary|\bRan \d+ tests?\b", "prints test statuses"),
            (DynamicCode, r"__import__\s*\(|\bimport_module\s*\([^)]*(\+|%|\bf['\x22]|\.format|join|chr\s*\(|\[::|decode|replace)|(^|[^\w.])exec\s*\(|(^|[^\w.])(eval|compile)\s*\([^)]*(\+|chr\s*\(|decode|\[::)|\b(marshal|pickle|dill)\s*\.\s*loads?\b|\b(base64|codecs|zlib|bz2|lzma|binascii)\s*\.\s*(b64decode|b85decode|b32decode|a85decode|decode|decompress|unhexlify|a2b_\w+)\b|\bbytes\s*\.\s*fromhex\b|\brot_?13\b|\bimportlib\s*\.\s*(util\s*\.\s*(spec_from_file_location|spec_from_loader|module_from_spec)|machinery|abc|reload)\b|\bimp\s*\.\s*(load|reload)", "runs obfuscated or dynamically imported code"),
        ];
        rules.iter().map(|(c, p, m)| (*c, re(p), *m)).collect()
    })
}

fn content_screen(f: &FileChange, p: &str, ctx: &ScreenContext) -> Result<(), Tamper> {
    // setup.py runs only when the package is installed; its entry points are config rules.
    let py = [".py", ".pyw", ".pyx", ".pxd", ".pyi"]
        .iter()
        .any(|e| p.ends_with(e))
        && file_name(p) != "setup.py";
    if !py {
        return Ok(());
    }
    // A top-level exit only matters in a module something imports: a package module, not a
    // stray script at the repository root (`os._exit`, `atexit`, … are refused everywhere).
    let in_package = p.contains('/');
    for line in f.added_lines() {
        for (k, (class, pattern, what)) in content_rules().iter().enumerate() {
            if *class == TamperClass::RunnerInternals && ctx.repository_is_runner {
                continue;
            }
            if k == TOP_LEVEL_EXIT_RULE && !in_package {
                continue;
            }
            if pattern.is_match(line) {
                return Err(tamper(*class, p, format!("{what}: `{}`", line.trim())));
            }
        }
    }
    Ok(())
}

/// Screen a source candidate (gate and official grading). The caller has already refused test
/// paths; a conftest.py is forbidden wherever it is. Structural classes (paths, then
/// configuration) are decided over the whole patch before content, so a patch is named by
/// what it changes first, not by the order of its files.
pub fn screen_candidate(files: &[FileChange], ctx: &ScreenContext) -> Result<(), Tamper> {
    let target = |f: &FileChange| {
        f.new_path
            .clone()
            .or_else(|| f.old_path.clone())
            .unwrap_or_default()
    };
    for f in files {
        for p in f.paths() {
            if file_name(p) == "conftest.py" {
                return Err(tamper(
                    TamperClass::Conftest,
                    p,
                    "conftest.py is loaded by pytest as a plugin",
                ));
            }
            path_rules(f, p, ctx)?;
        }
    }
    for f in files {
        config_rules(f, &target(f))?;
    }
    for f in files.iter().filter(|f| f.op != FileOp::Delete) {
        content_screen(f, &target(f), ctx)?;
    }
    Ok(())
}

/// Screen a Test agent's bundle patch: test code may use the runner, but may not configure it,
/// hook interpreter start-up, ship metadata, shadow modules, bytecode, binaries or symlinks.
pub fn screen_bundle(files: &[FileChange]) -> Result<(), Tamper> {
    for f in files {
        for p in f.paths() {
            path_rules(f, p, &ScreenContext::default())?;
        }
        if let Some(p) = f.new_path.as_deref().or(f.old_path.as_deref()) {
            config_rules(f, p)?;
        }
    }
    Ok(())
}

/// Files at Base that mark a repository as its own test runner (pytest, pluggy, Django's and
/// sympy's runners).
const RUNNER_MARKERS: &[&str] = &[
    "src/_pytest/__init__.py",
    "_pytest/__init__.py",
    "src/pluggy/__init__.py",
    "pluggy/__init__.py",
    "django/test/runner.py",
    "sympy/testing/runtests.py",
    "sympy/utilities/runtests.py",
];

/// Screen a candidate in a sandbox at Base: when the static screen objects to the runner's
/// internals or names, the Base commit decides whether the repository is the runner itself.
pub async fn screen_candidate_in(
    sb: &dyn super::sandbox::Sandbox,
    files: &[FileChange],
) -> Result<Result<(), Tamper>, super::HarnessError> {
    let first = screen_candidate(files, &ScreenContext::default());
    let Err(t) = &first else { return Ok(first) };
    if !matches!(
        t.class,
        TamperClass::RunnerInternals | TamperClass::ShadowModule
    ) {
        return Ok(first);
    }
    let base = super::sandbox::shell_quote(sb.base_commit());
    let probe: Vec<String> = RUNNER_MARKERS
        .iter()
        .map(|m| {
            format!(
                "git cat-file -e {base}:{} 2>/dev/null",
                super::sandbox::shell_quote(m)
            )
        })
        .collect();
    // A read-only probe: on a sandbox with ephemeral runs it must not be a plain `exec`, which
    // would mark the workspace as possibly changed and cost the next gate its ephemeral run.
    let t = std::time::Duration::from_secs(60);
    let probe = probe.join(" || ");
    let out = if sb.ephemeral_runs() {
        sb.exec_ephemeral(&probe, t).await?
    } else {
        sb.exec(&probe, t).await?
    };
    if out.timed_out {
        return Err(super::HarnessError::Other(
            "probing the repository's runner timed out".into(),
        ));
    }
    if out.success() {
        return Ok(screen_candidate(
            files,
            &ScreenContext {
                repository_is_runner: true,
            },
        ));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::diff::parse_patch;

    fn add(path: &str, body: &str) -> String {
        let n = body.lines().count();
        let lines: String = body.lines().map(|l| format!("+{l}\n")).collect();
        format!("diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{n} @@\n{lines}")
    }

    fn class(patch: &str) -> Option<TamperClass> {
        screen_candidate(&parse_patch(patch).unwrap(), &ScreenContext::default())
            .err()
            .map(|t| t.class)
    }

    #[test]
    fn classes_of_candidate_tampering() {
        use TamperClass::*;
        let cases: &[(&str, &str, TamperClass)] = &[
            ("pkg/conftest.py", "x = 1", Conftest),
            ("pytest.ini", "[pytest]", RunnerConfig),
            ("sitecustomize.py", "x = 1", StartupHook),
            ("pkg/evil.pth", "import pkg", StartupHook),
            (
                "pkg.egg-info/entry_points.txt",
                "[pytest11]",
                PackageMetadata,
            ),
            ("pkg/__pycache__/core.cpython-311.pyc", "x", Bytecode),
            ("src/pluggy/__init__.py", "x = 1", ShadowModule),
            ("inspect.py", "x = 1", ShadowModule),
            ("pkg/_compat.py", "import _pytest.reports", RunnerInternals),
            (
                "pkg/_compat.py",
                "def pytest_runtest_makereport(item, call):\n    pass",
                RunnerInternals,
            ),
            (
                "pkg/_compat.py",
                "m = importlib.import_module('_' + 'py' + 'test')",
                DynamicCode,
            ),
            ("pkg/_compat.py", "m = __import__(name)", DynamicCode),
            ("pkg/_compat.py", "os._exit(0)", EarlyExit),
            ("pkg/_compat.py", "sys.exit(0)", EarlyExit),
            (
                "pkg/_compat.py",
                "print('tests/test_x.py::test_a PASSED')",
                OutputForgery,
            ),
            ("pkg/_compat.py", "import atexit", EarlyExit),
            ("pkg/_compat.py", "import builtins", RunnerInternals),
            ("pkg/_compat.py", "sys.modules['x'] = y", RunnerInternals),
            (".gitattributes", "*.py text eol=crlf", TestCheckout),
        ];
        for (path, body, want) in cases {
            assert_eq!(class(&add(path, body)), Some(*want), "{path}: {body}");
        }
        assert_eq!(
            class(&add(
                "pkg/core.py",
                "import sys\n\ndef f():\n    return sys.modules[__name__]"
            )),
            None
        );
        assert_eq!(
            class(&add("pkg/core.py", "import re\nP = re.compile('x')")),
            None
        );
    }

    #[test]
    fn top_level_exit_rule_index() {
        assert_eq!(
            content_rules()[TOP_LEVEL_EXIT_RULE].2,
            "exits at import time"
        );
        // A stray root script may exit; a package module may not.
        assert_eq!(class(&add("reproduce.py", "import sys\nsys.exit(0)")), None);
        assert_eq!(
            class(&add("pkg/x.py", "import sys\nsys.exit(0)")),
            Some(TamperClass::EarlyExit)
        );
    }

    #[test]
    fn config_sections_and_entry_points() {
        let py = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -1,2 +1,3 @@\n [tool.pytest.ini_options]\n+addopts = \"-p pkg._compat\"\n testpaths = [\"tests\"]\n";
        assert_eq!(class(py), Some(TamperClass::RunnerConfig));
        let other = "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n@@ -1,2 +1,2 @@\n [project]\n-version = \"0.3\"\n+version = \"0.4\"\n";
        assert_eq!(class(other), None);
        let cfg = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1,3 @@\n [metadata]\n+[options.entry_points]\n+pytest11 = x = pkg.plug\n";
        assert_eq!(class(cfg), Some(TamperClass::PluginEntryPoint));
    }

    #[test]
    fn runner_repository_may_use_its_internals_and_bundles_may_use_pytest() {
        let p = parse_patch(&add("src/_pytest/newmod.py", "import _pytest.nodes")).unwrap();
        let ctx = ScreenContext {
            repository_is_runner: true,
        };
        assert!(screen_candidate(&p, &ctx).is_ok());
        let other = ScreenContext::default();
        assert_eq!(
            screen_candidate(&p, &other).err().map(|t| t.class),
            Some(TamperClass::ShadowModule)
        );
        let p = parse_patch(&"diff --git a/src/_pytest/reports.py b/src/_pytest/reports.py\n--- a/src/_pytest/reports.py\n+++ b/src/_pytest/reports.py\n@@ -1 +1,2 @@\n x\n+import _pytest.nodes\n".to_string()).unwrap();
        assert!(screen_candidate(&p, &ctx).is_ok());
        let b = parse_patch(&add(
            "tests/test_x.py",
            "import pytest\n\ndef test_a():\n    assert 1",
        ))
        .unwrap();
        assert!(screen_bundle(&b).is_ok());
        let b = parse_patch(&add("tests/pytest.ini", "[pytest]")).unwrap();
        assert_eq!(
            screen_bundle(&b).err().map(|t| t.class),
            Some(TamperClass::RunnerConfig)
        );
    }
}
