//! The tamper screen's structural rules for Rust (cargo) and Go repositories, by class as for
//! Python ([`super::tamper`]): files and manifest sections that change how tests are built,
//! configured or started, or which dependency code they run against — never how source is
//! spelled.
//!
//! - `runner_config`: `.cargo/config[.toml]` at any depth (test runners such as
//!   `runner = "true"`, rustflags, aliases, source replacement), `rust-toolchain[.toml]`; in a
//!   `Cargo.toml`, a changed line in a target or profile section (`[lib]`, `[[test]]`,
//!   `[[bench]]`, `[[bin]]`, `[[example]]`, `[profile.*]`) or a target key anywhere (`harness`,
//!   `test`, `doctest`, `autotests`, `autobenches`, `autobins`, `autoexamples`, `autolib`,
//!   `cargo-features`); in a `go.mod`, a `toolchain` or `godebug` directive.
//! - `build_script`: a cargo build script (`build.rs` outside `src/`; the `build` or `links`
//!   key of `[package]`): it runs before the tests are compiled and can rewrite them; a
//!   `//go:embed` directive added to Go source: the build reads files into the binary.
//! - `dependency_override`: what the tests link against, replaced: `[patch.*]` and `[replace]`
//!   in `Cargo.toml`, a dependency named as a standard library crate (`std = { package = … }`), `replace` directives in `go.mod` (one line or a block), `go.work` files,
//!   and vendored dependency source (`.go`/`.rs` files, `modules.txt`, `.cargo-checksum.json`
//!   under a `vendor/` directory) — a test helper such as an assertion library swapped for one
//!   that always passes.
//!
//! - `build_script`, by what Base's manifests declare ([`CargoPackage`], [`build_time_rules`]):
//!   any source file of a proc-macro crate (it runs inside the compiler while the tests are
//!   compiled), the build script a manifest names (`build = "src/gen.rs"` too), and, in a package
//!   with a build script, `.rs` files outside `src/`, `tests/`, `benches/` and `examples/` (where
//!   the script's own modules live). Code that runs at build time can read the judged tests as
//!   the native guard rewrites them (`guard::libtest`); none of it may come from a candidate.
//!
//! A hunk's section is read from the Base file where the caller has it (see
//! [`super::tamper::BaseFiles`]), else from the hunk; a whole-line comment configures nothing.

use super::diff::FileChange;
use super::tamper::{section_header, sections_of_changed_lines, tamper, BaseFiles, Tamper, TamperClass};

/// Manifests whose Base text the screen reads (besides Python's).
pub const MANIFESTS: [&str; 2] = ["Cargo.toml", "go.mod"];

/// Cargo target keys that change which tests are built or how they are run.
const CARGO_TARGET_KEYS: [&str; 10] = [
    "harness",
    "test",
    "doctest",
    "autotests",
    "autobenches",
    "autobins",
    "autoexamples",
    "autolib",
    "cargo-features",
    "proc-macro",
];

/// The standard library's crates: a dependency renamed as one of them replaces it.
const STANDARD_CRATES: [&str; 3] = ["std", "core", "alloc"];

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Rules on the path alone.
pub(super) fn path_rules(p: &str) -> Result<(), Tamper> {
    use TamperClass::*;
    let name = file_name(p);
    let comps: Vec<&str> = p.split('/').collect();
    let dirs = &comps[..comps.len() - 1];
    if dirs.last() == Some(&".cargo") && matches!(name, "config" | "config.toml") {
        return Err(tamper(RunnerConfig, p, "is cargo configuration (test runners, rustflags, aliases, source replacement)"));
    }
    if matches!(name, "rust-toolchain" | "rust-toolchain.toml") {
        return Err(tamper(RunnerConfig, p, "selects the Rust toolchain"));
    }
    if name == "build.rs" && !dirs.contains(&"src") {
        return Err(tamper(BuildScript, p, "is a cargo build script: it runs before the tests are compiled"));
    }
    if matches!(name, "go.work" | "go.work.sum") {
        return Err(tamper(DependencyOverride, p, "is a Go workspace file: it replaces modules"));
    }
    let vendored = name.ends_with(".go")
        || name.ends_with(".rs")
        || matches!(name, "modules.txt" | ".cargo-checksum.json");
    if vendored && dirs.contains(&"vendor") {
        return Err(tamper(DependencyOverride, p, "is vendored dependency source"));
    }
    Ok(())
}

/// Rules on the changed lines of `Cargo.toml` and `go.mod`.
pub(super) fn manifest_rules(f: &FileChange, p: &str, base: BaseFiles) -> Result<(), Tamper> {
    match file_name(p) {
        "Cargo.toml" => cargo_toml(f, p, base),
        "go.mod" => go_mod(f, p, base),
        n if n.ends_with(".go") => go_source(f, p),
        _ => Ok(()),
    }
}

/// A `//go:embed` directive a Go source change adds: the build reads files into the binary —
/// the judged tests among them, as the guard rewrites them (`guard::gotest`), which maps each
/// random test name to its expected value. Whatever the pattern (a file, a glob, a directory),
/// the capability is build-time reading, so every added directive is refused.
fn go_source(f: &FileChange, p: &str) -> Result<(), Tamper> {
    for line in f.added_lines() {
        if line.trim_start().starts_with("//go:embed") {
            return Err(tamper(TamperClass::BuildScript, p, "adds a //go:embed directive: the build reads files (the judged tests among them) into the binary"));
        }
    }
    Ok(())
}

fn cargo_toml(f: &FileChange, p: &str, base: BaseFiles) -> Result<(), Tamper> {
    use TamperClass::*;
    let key_re = regex::Regex::new(r#"^\s*"?([A-Za-z0-9_.\-]+)"?\s*="#).expect("valid regex");
    for (section, text) in sections_of_changed_lines(f, base, &section_header) {
        if text.trim_start().starts_with('#') || text.trim().is_empty() {
            continue;
        }
        // A header line itself opens its section; a dotted key reaches one from the root.
        let key = key_re.captures(text).map(|c| c[1].to_ascii_lowercase()).unwrap_or_default();
        let here = section_header(text).or(section).unwrap_or_default();
        let path = if here.is_empty() { key.clone() } else if key.is_empty() { here.clone() } else { format!("{here}.{key}") };
        let first = path.split('.').next().unwrap_or("");
        let last = key.rsplit('.').next().unwrap_or("");
        // Target keys belong to the root and `[package]` (in a dependency or feature table the
        // same word names a crate or a feature).
        let keyed = (here.is_empty() || here == "package") && CARGO_TARGET_KEYS.contains(&last);
        let quoted = || format!("`{}`", text.trim());
        if matches!(first, "patch" | "replace") {
            return Err(tamper(DependencyOverride, p, format!("replaces dependencies: {}", quoted())));
        }
        // A dependency under a standard library crate's name replaces that crate for the code
        // that names it — the guard's own `extern crate std` item among it (guard::libtest).
        let segments: Vec<&str> = path.split('.').map(|s| s.trim_matches(|c| c == '"' || c == '\'')).collect();
        if segments.windows(2).any(|w| w[0].ends_with("dependencies") && STANDARD_CRATES.contains(&w[1])) {
            return Err(tamper(DependencyOverride, p, format!("names a dependency as a standard library crate: {}", quoted())));
        }
        if first == "package" && matches!(last, "build" | "links") {
            return Err(tamper(BuildScript, p, format!("sets the package's build script: {}", quoted())));
        }
        if matches!(first, "lib" | "test" | "bench" | "bin" | "example" | "profile") || keyed {
            return Err(tamper(RunnerConfig, p, format!("changes how tests are built or run: {}", quoted())));
        }
    }
    Ok(())
}

/// A cargo package of the Base tree: where its build-time code is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CargoPackage {
    /// The package's directory (`""` at the repository root, `crates/macros`).
    pub dir: String,
    pub proc_macro: bool,
    /// The build script's path from the repository root, when the package has one.
    pub build_script: Option<String>,
}

impl CargoPackage {
    /// From a Base manifest (`dir/Cargo.toml`) and whether a Base file exists (for the default
    /// `build.rs`). `None` for a manifest without `[package]` (a virtual workspace) or one that
    /// does not parse.
    pub fn from_manifest(dir: &str, manifest: &str, exists: &dyn Fn(&str) -> bool) -> Option<CargoPackage> {
        let v: toml::Value = toml::from_str(manifest).ok()?;
        v.get("package")?;
        let join = |rel: &str| if dir.is_empty() { rel.to_string() } else { format!("{dir}/{rel}") };
        let lib = v.get("lib");
        let proc_macro = ["proc-macro", "proc_macro"]
            .iter()
            .any(|k| lib.and_then(|l| l.get(k)).and_then(toml::Value::as_bool) == Some(true));
        let build_script = match v.get("package").and_then(|p| p.get("build")) {
            Some(toml::Value::String(s)) => Some(join(s.trim_start_matches("./"))),
            Some(toml::Value::Boolean(false)) => None,
            _ => Some(join("build.rs")).filter(|p| exists(p)),
        };
        Some(CargoPackage { dir: dir.to_string(), proc_macro, build_script })
    }
}

/// The `build_script` rules for a changed `.rs` file, by the deepest package holding it.
pub fn build_time_rules(p: &str, packages: &[CargoPackage]) -> Result<(), Tamper> {
    use TamperClass::*;
    if !p.ends_with(".rs") {
        return Ok(());
    }
    let inside = |pkg: &&CargoPackage| pkg.dir.is_empty() || p.starts_with(&format!("{}/", pkg.dir));
    let Some(pkg) = packages.iter().filter(inside).max_by_key(|pkg| pkg.dir.len()) else {
        return Ok(());
    };
    let name = if pkg.dir.is_empty() { "the root package".to_string() } else { format!("package `{}`", pkg.dir) };
    if pkg.proc_macro {
        return Err(tamper(BuildScript, p, format!("is source of {name}, a proc-macro crate: it runs inside the compiler while the tests are compiled")));
    }
    if let Some(script) = &pkg.build_script {
        if p == script {
            return Err(tamper(BuildScript, p, format!("is the build script of {name}: it runs before the tests are compiled")));
        }
        let rel = if pkg.dir.is_empty() { p } else { &p[pkg.dir.len() + 1..] };
        let top = rel.split('/').next().unwrap_or("");
        if !rel.contains('/') || !matches!(top, "src" | "tests" | "benches" | "examples") {
            return Err(tamper(BuildScript, p, format!("lies beside the build script of {name}, where its modules live: it may run before the tests are compiled")));
        }
    }
    Ok(())
}

fn go_mod(f: &FileChange, p: &str, base: BaseFiles) -> Result<(), Tamper> {
    use TamperClass::*;
    // A block `replace (` … `)` is a section; any other line closes nothing.
    let section_of = |line: &str| {
        let t = line.trim();
        if let Some(rest) = t.strip_suffix('(') {
            Some(rest.trim().to_string())
        } else if t == ")" {
            Some(String::new())
        } else {
            None
        }
    };
    for (section, text) in sections_of_changed_lines(f, base, &section_of) {
        let t = text.trim();
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        let directive = t.split_whitespace().next().unwrap_or("");
        if directive == "replace" || (section.as_deref() == Some("replace") && t != ")") {
            return Err(tamper(DependencyOverride, p, format!("replaces a module: `{t}`")));
        }
        if matches!(directive, "toolchain" | "godebug") || section.as_deref() == Some("godebug") {
            return Err(tamper(RunnerConfig, p, format!("changes the Go toolchain or its settings: `{t}`")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::diff::parse_patch;
    use super::super::tamper::{screen_candidate, screen_candidate_with, TamperClass};
    use super::{build_time_rules, CargoPackage};

    #[test]
    fn build_time_code_is_found_from_the_base_manifests() {
        let exists = |p: &str| p == "build.rs" || p == "crates/gen/build.rs";
        let root = CargoPackage::from_manifest("", "[package]\nname = \"calc\"\n", &exists).unwrap();
        assert_eq!(root.build_script.as_deref(), Some("build.rs"));
        let macros = CargoPackage::from_manifest("crates/macros", "[package]\nname = \"m\"\n[lib]\nproc-macro = true\n", &exists).unwrap();
        assert!(macros.proc_macro && macros.build_script.is_none());
        let custom = CargoPackage::from_manifest("crates/gen", "[package]\nname = \"g\"\nbuild = \"src/gen.rs\"\n", &exists).unwrap();
        assert_eq!(custom.build_script.as_deref(), Some("crates/gen/src/gen.rs"));
        let none = CargoPackage::from_manifest("crates/plain", "[package]\nname = \"p\"\nbuild = false\n", &exists).unwrap();
        assert_eq!(none.build_script, None);
        assert!(CargoPackage::from_manifest("", "[workspace]\nmembers = []\n", &exists).is_none());
        assert!(CargoPackage::from_manifest("", "not toml [", &exists).is_none());

        let pkgs = [root, macros, custom, none];
        let class = |p: &str| build_time_rules(p, &pkgs).err().map(|t| t.class);
        // Refused: proc-macro source, a declared build script inside src/, build-script modules.
        for p in ["crates/macros/src/lib.rs", "crates/macros/src/deep/x.rs", "crates/gen/src/gen.rs", "helpers.rs", "build/util.rs", "crates/gen/codegen.rs"] {
            assert_eq!(class(p), Some(TamperClass::BuildScript), "{p}");
        }
        // Allowed: ordinary source, tests, examples of any package; non-Rust files.
        for p in ["src/lib.rs", "tests/calc.rs", "examples/e.rs", "crates/gen/src/lib.rs", "crates/plain/helper.rs", "crates/macros/README.md", "docs/x.md"] {
            assert_eq!(class(p), None, "{p}");
        }
    }

    fn class(patch: &str) -> Option<TamperClass> {
        screen_candidate(&parse_patch(patch).unwrap()).err().map(|t| t.class)
    }

    fn add(path: &str, body: &str) -> String {
        let n = body.lines().count();
        let lines: String = body.lines().map(|l| format!("+{l}\n")).collect();
        format!("diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{n} @@\n{lines}")
    }

    fn edit(path: &str, start: usize, context: &str, added: &str) -> String {
        format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{start},1 +{start},2 @@\n {context}\n+{added}\n")
    }

    #[test]
    fn native_paths_by_class() {
        use TamperClass::*;
        for (path, want) in [
            (".cargo/config.toml", Some(RunnerConfig)),
            ("crates/a/.cargo/config", Some(RunnerConfig)),
            ("rust-toolchain.toml", Some(RunnerConfig)),
            ("build.rs", Some(BuildScript)),
            ("crates/a/build.rs", Some(BuildScript)),
            ("src/build.rs", None), // a module named build
            ("go.work", Some(DependencyOverride)),
            ("vendor/github.com/stretchr/testify/assert/assertions.go", Some(DependencyOverride)),
            ("vendor/modules.txt", Some(DependencyOverride)),
            ("vendor/serde/src/lib.rs", Some(DependencyOverride)),
            ("pkg/calc.go", None),
            ("src/lib.rs", None),
            ("docs/vendor/notes.md", None),
        ] {
            assert_eq!(class(&add(path, "x")), want, "{path}");
        }
    }

    #[test]
    fn cargo_manifest_sections_and_keys() {
        use TamperClass::*;
        let base = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[dependencies]\nserde = \"1\"\n\n[lib]\npath = \"src/lib.rs\"\n";
        let at = |start: usize, context: &str, added: &str| {
            let files = parse_patch(&edit("Cargo.toml", start, context, added)).unwrap();
            screen_candidate_with(&files, &|p| (p == "Cargo.toml").then(|| base.to_string())).err().map(|t| t.class)
        };
        assert_eq!(at(6, "serde = \"1\"", "regex = \"1\""), None, "a dependency is a fix's business");
        assert_eq!(at(3, "version = \"0.1.0\"", "edition = \"2021\""), None);
        assert_eq!(at(9, "path = \"src/lib.rs\"", "test = false"), Some(RunnerConfig));
        assert_eq!(at(3, "version = \"0.1.0\"", "build = \"gen.rs\""), Some(BuildScript));
        assert_eq!(at(3, "version = \"0.1.0\"", "autotests = false"), Some(RunnerConfig));
        assert_eq!(at(6, "serde = \"1\"", "[[test]]"), Some(RunnerConfig));
        assert_eq!(at(6, "serde = \"1\"", "[patch.crates-io]"), Some(DependencyOverride));
        assert_eq!(at(6, "serde = \"1\"", "[profile.test]"), Some(RunnerConfig));
        assert_eq!(at(6, "serde = \"1\"", "# a comment mentioning [[test]]"), None);
        assert_eq!(at(6, "serde = \"1\"", "test = \"0.1\""), None, "a crate named test");
        // A dependency renamed as a standard library crate, in any dependency table and form.
        assert_eq!(at(6, "serde = \"1\"", "std = { path = \"fake\", package = \"fake\" }"), Some(DependencyOverride));
        assert_eq!(at(6, "serde = \"1\"", "\"core\" = { package = \"fake\", version = \"1\" }"), Some(DependencyOverride));
        assert_eq!(at(6, "serde = \"1\"", "[dev-dependencies.std]"), Some(DependencyOverride));
        assert_eq!(at(6, "serde = \"1\"", "[target.'cfg(target_os = \"linux\")'.dependencies.alloc]"), Some(DependencyOverride));
        assert_eq!(class(&edit("Cargo.toml", 1, "name = \"calc\"", "build-dependencies.std.path = \"x\"")), Some(DependencyOverride));
        assert_eq!(at(6, "serde = \"1\"", "stdx = \"1\""), None);
        // Without Base the hunk's own header, if any, decides; a dotted key reaches a section.
        assert_eq!(class(&edit("Cargo.toml", 1, "[dependencies]", "serde = \"1\"")), None);
        assert_eq!(class(&edit("Cargo.toml", 1, "name = \"calc\"", "patch.crates-io.serde = { path = \"x\" }")), Some(DependencyOverride));
        assert_eq!(class(&edit("Cargo.toml", 1, "[[test]]", "harness = false")), Some(RunnerConfig));
    }

    #[test]
    fn go_mod_replace_and_toolchain() {
        use TamperClass::*;
        assert_eq!(class(&edit("go.mod", 3, "require example.com/a v1.0.0", "replace example.com/a => ./fake")), Some(DependencyOverride));
        let base = "module calc\n\ngo 1.19\n\nreplace (\n\texample.com/a => ./a\n)\n\nrequire example.com/a v1.0.0\n";
        let at = |start: usize, context: &str, added: &str| {
            let files = parse_patch(&edit("go.mod", start, context, added)).unwrap();
            screen_candidate_with(&files, &|p| (p == "go.mod").then(|| base.to_string())).err().map(|t| t.class)
        };
        assert_eq!(at(6, "\texample.com/a => ./a", "\texample.com/b => ./fake"), Some(DependencyOverride));
        assert_eq!(at(9, "require example.com/a v1.0.0", "require example.com/c v1.2.0"), None);
        assert_eq!(at(3, "go 1.19", "toolchain go1.21.0"), Some(RunnerConfig));
        assert_eq!(at(3, "go 1.19", "// replace is a word in a comment"), None);
    }

    #[test]
    fn go_embed_directives_are_build_time_reads() {
        use TamperClass::*;
        for added in ["//go:embed calc_test.go", "\t//go:embed *", "//go:embed testdata/x.txt", "//go:embed   ."] {
            assert_eq!(class(&add("calc.go", &format!("package calc\n\nimport _ \"embed\"\n\n{added}\nvar s string\n"))), Some(BuildScript), "{added}");
        }
        // Prose about embedding, a directive the change only keeps, and other directives pass.
        assert_eq!(class(&add("calc.go", "package calc\n\n// go:embed is not a directive with a space\nfunc Add(a, b int) int { return a + b }\n")), None);
        assert_eq!(class(&edit("calc.go", 3, "//go:embed static", "// Static holds the pages.")), None);
        assert_eq!(class(&add("calc.go", "package calc\n\n//go:noinline\nfunc Add(a, b int) int { return a + b }\n")), None);
    }
}
