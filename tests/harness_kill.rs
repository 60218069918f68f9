//! Killing the harness mid-run leaves no sandbox process behind: `execcritic qualify` runs a
//! bundle whose test sleeps; the CLI is SIGKILLed; no process of the sandbox survives.

mod harness_support;

use harness_support::*;
use std::time::{Duration, Instant};

/// Processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(token) {
                out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

#[test]
fn sigkill_of_the_harness_leaves_no_sandbox_process() {
    let dir = tempfile::tempdir().unwrap();
    let task = fixture_task();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        serde_json::to_string(&task.to_json()).unwrap() + "\n",
    )
    .unwrap();
    let token = format!(
        "{}.{}",
        7000 + std::process::id() % 1000,
        std::process::id()
    );
    let body = format!("    import subprocess\n    subprocess.run(['sleep', '{token}'])\n    assert add(2, 3) == 5");
    let patch = diff_against_base(&[("tests/test_calc.py", &test_file_with(&body))]);
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("test.patch"), patch).unwrap();
    std::fs::write(
        bundle.join("test_command"),
        "python3 -m pytest tests/test_calc.py::test_add\n",
    )
    .unwrap();
    std::fs::write(bundle.join("test_contract.json"), CONTRACT).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["qualify", "--tasks"])
        .arg(dir.path().join("tasks.jsonl"))
        .args(["--instance", &task.instance_id, "--bundle"])
        .arg(&bundle)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while processes_with(&format!("sleep {token}")).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sandboxed test never started"
        );
        assert!(child.try_wait().unwrap().is_none(), "qualify exited early");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup code runs in the harness
    child.wait().unwrap();
    let start = Instant::now();
    loop {
        let left = processes_with(&token);
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sandbox processes survived: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
