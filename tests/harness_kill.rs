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
    sigkill_leaves_nothing("local");
}

#[test]
fn sigkill_of_the_harness_leaves_no_container() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if !rt.block_on(docker_available()) {
        return;
    }
    sigkill_leaves_nothing("docker");
    // No container labelled as ours is left.
    let left = rt.block_on(async {
        let d = execcritic::harness::sandbox::docker::connect()
            .await
            .unwrap();
        let start = Instant::now();
        loop {
            let mut filters = std::collections::HashMap::new();
            filters.insert(
                "label".to_string(),
                vec![execcritic::harness::sandbox::docker::LABEL.to_string()],
            );
            let list = d
                .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                }))
                .await
                .unwrap();
            let mine: Vec<_> = list
                .into_iter()
                .filter(|c| {
                    c.labels
                        .as_ref()
                        .and_then(|l| l.get("execcritic.owner"))
                        .is_some_and(|o| {
                            o == &LAST_CHILD
                                .load(std::sync::atomic::Ordering::SeqCst)
                                .to_string()
                        })
                })
                .collect();
            if mine.is_empty() || start.elapsed() > Duration::from_secs(20) {
                return mine.len();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    assert_eq!(left, 0, "containers of the killed harness survived");
}

static LAST_CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn sigkill_leaves_nothing(sandbox: &str) {
    let dir = tempfile::tempdir().unwrap();
    let task = fixture_task();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        serde_json::to_string(&task.to_json().unwrap()).unwrap() + "\n",
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
        .args(["qualify", "--sandbox", sandbox, "--tasks"])
        .arg(dir.path().join("tasks.jsonl"))
        .args(["--instance", &task.instance_id, "--bundle"])
        .arg(&bundle)
        .env("EXECCRITIC_DOCKER_IMAGE", docker_image())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    LAST_CHILD.store(child.id(), std::sync::atomic::Ordering::SeqCst);
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
