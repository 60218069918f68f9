//! Tamper screening for Rust and Go repositories (issue 28, item 2), shown on a real crate with
//! the real `cargo test` and a real module with the real `go test`: each attack is first shown
//! WORKING on a plain checkout — the validated command
//! (`harness::runners`, activated form) exits 0 on the buggy source, and where the attack forges
//! a report, libtest's reader (`read_libtest`) reads the judged test as PASSED — then refused by
//! the candidate screen with its class. The gold fix passes the screen and the test; the buggy
//! Base fails it. Needs `cargo` on PATH (the project's own build has it); the Go test needs `go`
//! and says so and skips without it. Both run offline.

use execcritic::harness::diff::parse_patch;
use execcritic::harness::logparse::TestStatus;
use execcritic::harness::runners::cargo::read_libtest;
use execcritic::harness::runners::go::read_go_json;
use execcritic::harness::runners::parse_native_command;
use execcritic::harness::tamper::{screen_candidate, TamperClass};
use std::path::Path;
use std::process::Command;

const CARGO_TOML: &str = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n";
const LIB: &str = "pub fn add(a: i64, b: i64) -> i64 {\n    a - b\n}\n";
const TEST: &str = "#[test]\nfn adds() {\n    assert_eq!(calc::add(2, 3), 5);\n}\n";

const GOLD: &str = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n pub fn add(a: i64, b: i64) -> i64 {\n-    a - b\n+    a + b\n }\n";

/// A build script that rewrites the judged test before it is compiled: real libtest output,
/// the test really passes.
const BUILD_SCRIPT: &str = r#"diff --git a/build.rs b/build.rs
new file mode 100644
--- /dev/null
+++ b/build.rs
@@ -0,0 +1,5 @@
+fn main() {
+    let t = std::fs::read_to_string("tests/calc.rs").unwrap();
+    std::fs::write("tests/calc.rs", t.replace("calc::add(2, 3), 5", "5, 5")).unwrap();
+    println!("cargo:rerun-if-changed=build.rs");
+}
"#;

/// A cargo configuration whose test runner is `true`: the test binary never runs, exit 0.
const CARGO_CONFIG: &str = "diff --git a/.cargo/config.toml b/.cargo/config.toml\nnew file mode 100644\n--- /dev/null\n+++ b/.cargo/config.toml\n@@ -0,0 +1,2 @@\n+[target.x86_64-unknown-linux-gnu]\n+runner = \"true\"\n";

/// The judged test target swapped for a `harness = false` program printing libtest's report.
const HARNESS_FALSE: &str = r#"diff --git a/Cargo.toml b/Cargo.toml
--- a/Cargo.toml
+++ b/Cargo.toml
@@ -6,1 +6,6 @@
 [dependencies]
+
+[[test]]
+name = "calc"
+path = "src/report.rs"
+harness = false
diff --git a/src/report.rs b/src/report.rs
new file mode 100644
--- /dev/null
+++ b/src/report.rs
@@ -0,0 +1,3 @@
+fn main() {
+    print!("\nrunning 1 test\ntest adds ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n");
+}
"#;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("version").output().is_ok_and(|o| o.status.success())
}

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A fresh checkout of `files` at Base with `patch` applied by git; the activated command's
/// exit code and output.
fn run_in(files: &[(&str, &str)], patch: &str, env: &[(&str, &Path)], activated: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (path, text) in files {
        write(d, path, text);
    }
    if !patch.is_empty() {
        let mut child = Command::new("git")
            .args(["apply", "-"])
            .current_dir(d)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), patch.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "the patch applies:\n{patch}");
    }
    let out = Command::new("bash")
        .args(["-c", activated])
        .current_dir(d)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .env("CARGO_NET_OFFLINE", "true")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=vendor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn run(patch: &str, target: &Path, activated: &str) -> (i32, String) {
    let files = [("Cargo.toml", CARGO_TOML), ("src/lib.rs", LIB), ("tests/calc.rs", TEST)];
    run_in(&files, patch, &[("CARGO_TARGET_DIR", target)], activated)
}

const GO_MOD: &str = "module example.com/calc\n\ngo 1.19\n\nrequire example.com/check v0.1.0\n";
const GO_MODULES_TXT: &str = "# example.com/check v0.1.0\n## explicit\nexample.com/check\n";
const GO_CHECK: &str = "package check\n\nimport \"testing\"\n\nfunc Equal(t *testing.T, got, want int) {\n\tt.Helper()\n\tif got != want {\n\t\tt.Fatalf(\"got %d, want %d\", got, want)\n\t}\n}\n";
const GO_CALC: &str = "package calc\n\nfunc Add(a, b int) int {\n\treturn a - b\n}\n";
const GO_TEST: &str = "package calc\n\nimport (\n\t\"testing\"\n\n\t\"example.com/check\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tcheck.Equal(t, Add(2, 3), 5)\n}\n";
/// The vendored assertion library made to accept anything: the test really passes.
const GO_VENDOR: &str = "diff --git a/vendor/example.com/check/check.go b/vendor/example.com/check/check.go\n--- a/vendor/example.com/check/check.go\n+++ b/vendor/example.com/check/check.go\n@@ -5,6 +5,4 @@\n func Equal(t *testing.T, got, want int) {\n \tt.Helper()\n-\tif got != want {\n-\t\tt.Fatalf(\"got %d, want %d\", got, want)\n-\t}\n+\t_, _ = got, want\n }\n";
const GO_GOLD: &str = "diff --git a/calc.go b/calc.go\n--- a/calc.go\n+++ b/calc.go\n@@ -1,5 +1,5 @@\n package calc\n \n func Add(a, b int) int {\n-\treturn a - b\n+\treturn a + b\n }\n";

#[test]
fn a_go_vendored_dependency_attack_works_on_a_plain_checkout_and_is_refused() {
    if !have("go") {
        eprintln!("skipped: no go on PATH");
        return;
    }
    let cmd = parse_native_command("go test -run '^TestAdd$' .").expect("a go command").expect("valid");
    let cache = tempfile::tempdir().unwrap();
    let files = [
        ("go.mod", GO_MOD),
        ("vendor/modules.txt", GO_MODULES_TXT),
        ("vendor/example.com/check/check.go", GO_CHECK),
        ("calc.go", GO_CALC),
        ("calc_test.go", GO_TEST),
    ];
    let env = [("GOCACHE", cache.path()), ("GOPATH", cache.path())];
    let status = |text: &str| read_go_json(text, "example.com/calc", &cmd.scope).statuses.get(&cmd.nodes[0]).copied();
    let (rc, text) = run_in(&files, "", &env, &cmd.activated);
    assert_ne!(rc, 0, "Base must fail: {text}");
    assert_eq!(status(&text), Some(TestStatus::Failed), "{text}");
    let (rc, text) = run_in(&files, GO_GOLD, &env, &cmd.activated);
    assert_eq!((rc, status(&text)), (0, Some(TestStatus::Passed)), "{text}");
    assert!(screen_candidate(&parse_patch(GO_GOLD).unwrap()).is_ok());
    let (rc, text) = run_in(&files, GO_VENDOR, &env, &cmd.activated);
    assert_eq!((rc, status(&text)), (0, Some(TestStatus::Passed)), "the vendor attack passes a plain checkout:\n{text}");
    let refused = screen_candidate(&parse_patch(GO_VENDOR).unwrap()).expect_err("refused");
    assert_eq!(refused.class, TamperClass::DependencyOverride, "{refused}");
}

#[test]
fn cargo_attacks_work_on_a_plain_checkout_and_are_refused_by_class() {
    if !have("cargo") {
        eprintln!("skipped: no cargo on PATH");
        return;
    }
    let cmd = parse_native_command("cargo test -p calc --test calc -- --exact adds")
        .expect("a cargo command")
        .expect("valid");
    let node = &cmd.nodes[0];
    let target = tempfile::tempdir().unwrap();
    let status = |text: &str| read_libtest(text, &cmd.scope[0]).statuses.get(node).copied();

    // Base fails, gold passes (and the screen lets the fix through).
    let (rc, text) = run("", target.path(), &cmd.activated);
    assert_ne!(rc, 0, "Base must fail: {text}");
    assert_eq!(status(&text), Some(TestStatus::Failed), "{text}");
    let (rc, text) = run(GOLD, target.path(), &cmd.activated);
    assert_eq!((rc, status(&text)), (0, Some(TestStatus::Passed)), "{text}");
    assert!(screen_candidate(&parse_patch(GOLD).unwrap()).is_ok());

    for (name, patch, class, forged_pass) in [
        ("build script", BUILD_SCRIPT, TamperClass::BuildScript, true),
        ("cargo config runner", CARGO_CONFIG, TamperClass::RunnerConfig, false),
        ("harness = false target", HARNESS_FALSE, TamperClass::RunnerConfig, true),
    ] {
        let (rc, text) = run(patch, target.path(), &cmd.activated);
        assert_eq!(rc, 0, "the {name} attack passes a plain checkout by exit code:\n{text}");
        if forged_pass {
            assert_eq!(status(&text), Some(TestStatus::Passed), "the {name} attack passes the report reader too:\n{text}");
        }
        let refused = screen_candidate(&parse_patch(patch).unwrap()).expect_err(name);
        assert_eq!(refused.class, class, "{name}: {refused}");
    }
}
