//! Tamper screening for Rust repositories (issue 28, item 2), shown on a real crate with the real
//! `cargo test`: each attack is first shown WORKING on a plain checkout — the validated command
//! (`harness::runners`, activated form) exits 0 on the buggy source, and where the attack forges
//! a report, libtest's reader (`read_libtest`) reads the judged test as PASSED — then refused by
//! the candidate screen with its class. The gold fix passes the screen and the test; the buggy
//! Base fails it. Needs `cargo` on PATH (the project's own build has it); runs offline.

use execcritic::harness::diff::parse_patch;
use execcritic::harness::logparse::TestStatus;
use execcritic::harness::runners::cargo::read_libtest;
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

fn have_cargo() -> bool {
    Command::new("cargo").arg("--version").output().is_ok_and(|o| o.status.success())
}

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A fresh checkout of the crate at Base with `patch` applied by git; the activated command's
/// exit code and output.
fn run(patch: &str, target: &Path, activated: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "Cargo.toml", CARGO_TOML);
    write(d, "src/lib.rs", LIB);
    write(d, "tests/calc.rs", TEST);
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
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn cargo_attacks_work_on_a_plain_checkout_and_are_refused_by_class() {
    if !have_cargo() {
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
