//! Behavioural test-suite of the sandboxes: the same checks run against `local` (bubblewrap)
//! and `docker` (when a docker daemon and the local test image are available).

mod harness_support;

use execcritic::harness::{Sandbox, SandboxConfig, SandboxLimits};
use harness_support::*;
use std::time::Duration;

/// The behavioural checks every sandbox must pass.
async fn behaves(sb: &dyn Sandbox, kind: &str) {
    // Runs in /testbed at Base.
    let out = sb
        .exec(
            "pwd && git rev-parse HEAD && cat calc/__init__.py",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{kind}: {}", out.output);
    assert!(
        out.output.starts_with("/testbed\n"),
        "{kind}: {}",
        out.output
    );
    assert!(out.output.contains(&fixture().base), "{kind}");

    // Exit codes pass through; stdout and stderr are both captured.
    let out = sb
        .exec(
            "echo to-out; echo to-err >&2; exit 3",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3), "{kind}");
    assert!(
        out.output.contains("to-out") && out.output.contains("to-err"),
        "{kind}"
    );

    // pytest runs.
    let out = sb
        .exec(
            "python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py",
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{kind}: {}", out.output);
    assert!(
        out.output.contains("PASSED tests/test_calc.py::test_sub"),
        "{kind}: {}",
        out.output
    );

    // Infinite loop: killed at the timeout, reported as timed_out, nothing left running.
    let out = sb
        .exec("echo start; while :; do :; done", Duration::from_secs(2))
        .await
        .unwrap();
    assert!(out.timed_out, "{kind}");
    assert_eq!(out.exit_code, None, "{kind}");
    assert!(out.output.contains("start"), "{kind}");
    // A background process that outlives the timeout is gone too.
    let out = sb
        .exec(
            "(sleep 300; echo ghost > /testbed/ghost) & sleep 300",
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert!(
        out.timed_out,
        "{kind}: {:?}",
        (out.exit_code, out.duration, &out.output)
    );
    let out = sb
        .exec(
            "sleep 0.2; ps -eo comm=,pid=,ppid=,args= | grep '^sleep ' || true",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(
        out.output.trim(),
        "",
        "{kind}: processes survived the timeout"
    );

    // 100 MB of output: bounded in memory, head and tail kept.
    let out = sb
        .exec(
            "echo FIRST; head -c 100000000 /dev/zero | tr '\\0' x; echo; echo LAST",
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{kind}");
    assert!(out.truncated, "{kind}");
    assert!(
        out.output.len() < 100_000,
        "{kind}: {} bytes kept",
        out.output.len()
    );
    assert!(
        out.output.starts_with("FIRST") && out.output.trim_end().ends_with("LAST"),
        "{kind}"
    );

    // No network.
    let out = sb
        .exec(
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_ne!(
        out.exit_code,
        Some(0),
        "{kind}: network reachable: {}",
        out.output
    );

    // Writes outside the workspace and /tmp fail.
    let marker = format!("/usr/execcritic-escape-{}", std::process::id());
    let out = sb
        .exec(&format!("echo x > {marker}"), Duration::from_secs(10))
        .await
        .unwrap();
    assert_ne!(out.exit_code, Some(0), "{kind}");
    assert!(
        !std::path::Path::new(&marker).exists(),
        "{kind}: host was modified"
    );

    // Fork bomb: contained by the process limit and the timeout; the sandbox stays usable.
    let out = sb
        .exec("bomb() { bomb | bomb; }; bomb", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        out.output.contains("Resource temporarily unavailable") || out.output.contains("fork"),
        "{kind}: the process limit did not bite: {}",
        &out.output[..out.output.len().min(500)]
    );
    let out = sb
        .exec("echo alive", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "alive", "{kind}");

    // put_file + reset: back to clean Base.
    sb.put_file("/testbed/calc/new.py", b"x = 1\n")
        .await
        .unwrap();
    sb.exec(
        "echo dirty >> calc/__init__.py && git add -A",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    sb.reset().await.unwrap();
    let out = sb
        .exec(
            "git status --porcelain && test ! -e calc/new.py && echo clean",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "clean", "{kind}");
}

fn small_limits() -> SandboxConfig {
    SandboxConfig {
        limits: SandboxLimits {
            max_procs: 64,
            output_cap: 16 * 1024,
            log_cap: 1 << 20,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn local_sandbox_behaves() {
    let sb = local_sandbox(&small_limits());
    behaves(sb.as_ref(), "local").await;
}

#[tokio::test]
async fn docker_sandbox_behaves() {
    if !docker_available().await {
        return;
    }
    let sb = docker_sandbox(&small_limits()).await;
    behaves(sb.as_ref(), "docker").await;
}
