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

// ---------------------------------------------------------------------------------------------
// Exposure of the host: every attack is first shown to work on the host (outside the harness),
// then shown to fail inside the sandbox.

use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::harness::{open_sandbox, HarnessError, Purpose, SandboxKind};
use std::path::{Path, PathBuf};

/// A sentinel file that removes itself.
struct Sentinel(PathBuf);

impl Sentinel {
    fn new(dir: &Path, name: &str) -> Sentinel {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(format!("{name}-{}", std::process::id()));
        std::fs::write(&p, "SENTINEL-SECRET\n").unwrap();
        Sentinel(p)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The attack: read the file, and list its directory looking for its name.
fn attack(s: &Sentinel) -> String {
    let dir = s.0.parent().unwrap().display().to_string();
    let name = s.0.file_name().unwrap().to_string_lossy().to_string();
    format!(
        "cat '{}' 2>/dev/null; ls -a '{dir}' 2>/dev/null | grep -F '{name}' | sed 's/^/LISTED:/'; \
         python3 -c \"import os; print('PY-LISTED' if '{name}' in os.listdir('{dir}') else '')\" 2>/dev/null; true",
        s.0.display()
    )
}

fn host_run(command: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", command])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sentinels in a host directory (the user's home), in the project checkout, next to the task's
/// repository (where task files and gold patches live) and in the host's /tmp.
fn sentinels() -> Vec<Sentinel> {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let task_dir = fixture().dir.parent().unwrap().to_path_buf();
    vec![
        Sentinel::new(&home, ".execcritic-sentinel-home"),
        Sentinel::new(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            ".execcritic-sentinel-checkout",
        ),
        Sentinel::new(&task_dir, "execcritic-sentinel-gold.patch"),
        Sentinel::new(Path::new("/var/tmp"), "execcritic-sentinel-var"),
    ]
}

async fn assert_hidden(run: impl AsyncFn(&str) -> String, what: &str) {
    for s in sentinels() {
        let cmd = attack(&s);
        let host = host_run(&cmd);
        assert!(
            host.contains("SENTINEL-SECRET")
                && host.contains("LISTED:")
                && host.contains("PY-LISTED"),
            "the attack must work on the host first ({:?}): {host}",
            s.0
        );
        let inside = run(&cmd).await;
        assert!(
            !inside.contains("SENTINEL") && !inside.contains("LISTED"),
            "{what}: {:?} is visible inside: {inside}",
            s.0
        );
    }
}

#[tokio::test]
async fn local_sandbox_hides_everything_outside_the_allow_list() {
    let sb = local_sandbox(&small_limits());
    assert_hidden(
        async |c: &str| sb.exec(c, Duration::from_secs(60)).await.unwrap().output,
        "sandbox",
    )
    .await;
    // The checkout and the home directory do not even exist inside; the system does.
    let out = sb
        .exec(
            &format!(
                "for p in '{}' \"$(getent passwd root | cut -d: -f6)\"/.cargo /etc/shadow /opt /var /srv /work; do \
                   test -e \"$p\" && echo \"EXISTS $p\"; done; test -x /usr/bin/env && echo system-ok",
                env!("CARGO_MANIFEST_DIR")
            ),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "system-ok", "{}", out.output);
}

#[tokio::test]
async fn test_agent_shell_hides_everything_outside_the_allow_list() {
    use execcritic::agent::Shell;
    let task = fixture_task();
    let sb = open_sandbox(SandboxKind::Local, &task, Purpose::TestAgent)
        .await
        .unwrap();
    let shell = SandboxShell(sb.as_ref());
    assert_hidden(
        async |c: &str| shell.run(c, Duration::from_secs(60)).await.unwrap().output,
        "Test-agent shell",
    )
    .await;
    // The agent's tools still work: pytest on the workspace.
    let out = shell
        .run(
            "python3 -m pytest -q -p no:cacheprovider tests/test_calc.py",
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
}

/// Descriptors a process started by the sandbox's shell inherits (listed from outside it: a
/// shell listing its own descriptors races with its own pipelines). Listed once `sleep` is
/// asleep: before its exec the forked shell briefly holds descriptor 3 (bash opens /dev/null
/// for a background job's stdin, then moves it to 0), and right after it `sleep` opens its
/// locale files — both seen as a stray "3" about one run in fifty.
const LIST_FDS: &str = r#"sleep 30 & p=$!; until read -r _ c s _ < /proc/$p/stat && [ "$c $s" = "(sleep) S" ]; do :; done; ls /proc/$p/fd | sort -n | tr '\n' ' '; kill $p"#;

#[tokio::test]
async fn no_descriptor_of_the_harness_leaks_into_the_sandbox() {
    // The attack works on the host: a descriptor opened without close-on-exec reaches a child.
    let host = host_run(&format!("exec 7</dev/null; {LIST_FDS}"));
    assert!(host.contains('7'), "{host}");
    // The harness holds inheritable descriptors (a pipe without O_CLOEXEC); none reaches inside.
    let (_r, _w) = nix::unistd::pipe().unwrap();
    let sb = local_sandbox(&small_limits());
    let out = sb.exec(LIST_FDS, Duration::from_secs(30)).await.unwrap();
    assert_eq!(out.output.trim(), "0 1 2", "{}", out.output);
}

#[tokio::test]
async fn docker_sandbox_is_unprivileged() {
    if !docker_available().await {
        return;
    }
    let sb = docker_sandbox(&small_limits()).await;
    let out = sb
        .exec(
            &format!("id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; {LIST_FDS}; echo; \
             cat /proc/net/dev | grep -cv -E 'lo:|Inter-|face'"),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.output.lines().map(str::trim).collect();
    assert_eq!(lines[0], "65534", "{}", out.output);
    assert!(
        out.output.contains("CapEff:\t0000000000000000"),
        "{}",
        out.output
    );
    assert!(
        out.output.contains("CapBnd:\t0000000000000000"),
        "{}",
        out.output
    );
    assert!(out.output.contains("NoNewPrivs:\t1"), "{}", out.output);
    // No network interface but loopback.
    assert_eq!(lines.last().copied(), Some("0"), "{}", out.output);
    // The sandbox user still owns the workspace: it can write it and run git.
    let out = sb
        .exec(
            "touch newfile && git status --porcelain",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert!(out.output.contains("newfile"), "{}", out.output);
}

// ---------------------------------------------------------------------------------------------
// Total memory per sandbox.

#[tokio::test]
async fn a_process_tree_beyond_the_memory_limit_is_a_resource_signal() {
    use execcritic::harness::sandbox::cgroup::MemoryCgroup;
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: sandbox memory cgroups need root");
        return;
    }
    if let Some(why) = MemoryCgroup::unavailable_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let limit: u64 = 256 << 20;
    let config = SandboxConfig {
        limits: SandboxLimits {
            memory_bytes: limit,
            ..Default::default()
        },
        ..Default::default()
    };
    // Four processes of 100 MiB each: each one alone is under the limit, the tree is not.
    let hog = "for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(100 << 20); \
               b[::4096] = b\"x\" * len(b[::4096]); time.sleep(30)' & done; wait; echo survived";
    // The cgroup of a sandbox whose process was killed before cleaning up (no such pid) is
    // removed when the next sandbox opens.
    let stale = execcritic::harness::sandbox::cgroup::parent()
        .unwrap()
        .join("execcritic-999999999-0");
    std::fs::create_dir(&stale).unwrap();
    let sb = execcritic::harness::sandbox::LocalSandbox::open(populate(), &config).unwrap();
    assert!(!stale.exists(), "stale cgroup {stale:?} left behind");
    let own = sb.cgroup_dir().expect("a memory cgroup").to_path_buf();
    assert!(own.is_dir());
    let err = sb.exec(hog, Duration::from_secs(120)).await.unwrap_err();
    assert!(
        matches!(&err, HarnessError::ResourceLimit { resource, limit: l, .. } if resource == "memory" && *l == limit),
        "{err}"
    );
    // Below the limit the same sandbox runs normally afterwards.
    let out = sb
        .exec(
            "python3 -c 'b = bytearray(50 << 20); print(len(b))'",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(
        out.output.trim(),
        (50u64 << 20).to_string(),
        "{}",
        out.output
    );
    // Its cgroup goes with the sandbox.
    drop(sb);
    assert!(!own.exists(), "{own:?} left behind");
}

#[tokio::test]
async fn live_sandboxes_never_share_a_uid() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: sandbox uids are leased as root only");
        return;
    }
    let sbs: Vec<_> = (0..4).map(|_| local_sandbox(&small_limits())).collect();
    let mut uids = Vec::new();
    for sb in &sbs {
        let out = sb.exec("id -u", Duration::from_secs(30)).await.unwrap();
        uids.push(out.output.trim().to_string());
    }
    let distinct: std::collections::HashSet<_> = uids.iter().collect();
    assert_eq!(distinct.len(), uids.len(), "{uids:?}");
}

// ---------------------------------------------------------------------------------------------
// History: no commit, object or ref after Base in any workspace where agent or candidate code
// runs, whatever program reads it.

/// Ways to reach the gold fix without typing `git log`: git through python and through `env`,
/// the refs files and the object store read directly (python zlib over loose objects, and every
/// object in the store through `git cat-file --batch-all-objects`). Prints `LEAK:<how>` for
/// every way that finds the gold commit or the gold file content.
fn history_attack(gold_commit: &str) -> String {
    format!(
        r#"g={gold_commit}
python3 -c 'import subprocess,sys; o=subprocess.run(["git","log","--all","--format=%H"],capture_output=True,text=True).stdout; print("LEAK:py-git-log" if sys.argv[1] in o else "")' "$g"
env git log --all --format=%H 2>/dev/null | grep -q "$g" && echo LEAK:env-git
env git cat-file -e "$g" 2>/dev/null && echo LEAK:cat-file
cat .git/packed-refs .git/FETCH_HEAD .git/ORIG_HEAD 2>/dev/null | grep -q "$g" && echo LEAK:refs-files
grep -rqs "$g" .git/refs .git/logs 2>/dev/null && echo LEAK:refs-dir
python3 - <<'PY'
import os, zlib
for root, _, files in os.walk('.git/objects'):
    for f in files:
        p = os.path.join(root, f)
        if len(f) == 38:
            data = zlib.decompress(open(p, 'rb').read())
            if b'return a + b' in data:
                print('LEAK:loose-object')
PY
git cat-file --batch-all-objects --batch 2>/dev/null | grep -q 'return a + b' && echo LEAK:object-store
true"#
    )
}

#[tokio::test]
async fn no_workspace_where_agent_or_candidate_code_runs_reaches_the_fix() {
    let f = fixture();
    let gold_commit = git(&f.dir, &["rev-parse", "main"]);
    assert_ne!(gold_commit, f.base);
    let attack = history_attack(&gold_commit);
    // The attack works on a plain clone of the task's repository (what grading used to run in).
    let plain = tempfile::tempdir().unwrap();
    let ws = plain.path().join("r");
    execcritic::task::materialize(&fixture_task(), &ws, false).unwrap();
    let host = std::process::Command::new("bash")
        .args(["-c", &attack])
        .current_dir(&ws)
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout);
    for how in ["py-git-log", "env-git", "cat-file", "object-store"] {
        assert!(
            host.contains(&format!("LEAK:{how}")),
            "{how} must work on a plain clone: {host}"
        );
    }
    let task = fixture_task();
    for purpose in [
        Purpose::TestAgent,
        Purpose::RepairAgent,
        Purpose::Gate,
        Purpose::Grading,
    ] {
        let sb = open_sandbox(SandboxKind::Local, &task, purpose)
            .await
            .unwrap();
        let out = sb.exec(&attack, Duration::from_secs(120)).await.unwrap();
        assert!(out.success(), "{purpose:?}: {}", out.output);
        assert!(!out.output.contains("LEAK"), "{purpose:?}: {}", out.output);
        // The workspace is still a usable repository at Base.
        let out = sb
            .exec(
                "git rev-parse HEAD && git status --porcelain",
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert_eq!(out.output.trim(), f.base, "{purpose:?}");
    }
}

#[tokio::test]
async fn what_a_candidate_run_writes_into_git_does_not_persist() {
    let sb = local_sandbox(&small_limits());
    if !sb.ephemeral_runs() {
        eprintln!("SKIPPED: no ephemeral runs here (root with overlayfs needed)");
        return;
    }
    let attack = "mkdir -p .git/hooks && echo 'echo pwned' > .git/hooks/post-checkout && \
                  git config user.name pwned && echo WROTE";
    let probe = "test -e .git/hooks/post-checkout && echo HOOK; git config user.name || true";
    // The attack persists in a plain (agent) run of the sandbox ...
    let out = sb.exec(attack, Duration::from_secs(30)).await.unwrap();
    assert!(out.output.contains("WROTE"), "{}", out.output);
    let out = sb.exec(probe, Duration::from_secs(30)).await.unwrap();
    assert!(
        out.output.contains("HOOK") && out.output.contains("pwned"),
        "{}",
        out.output
    );
    drop(sb);
    // ... but not past a candidate's run.
    let sb = local_sandbox(&small_limits());
    let out = sb
        .exec_ephemeral(attack, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(out.output.contains("WROTE"), "{}", out.output);
    let out = sb
        .exec_ephemeral(probe, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        !out.output.contains("HOOK") && !out.output.contains("pwned"),
        "{}",
        out.output
    );
    let out = sb.exec(probe, Duration::from_secs(30)).await.unwrap();
    assert!(
        !out.output.contains("HOOK") && !out.output.contains("pwned"),
        "{}",
        out.output
    );
}

/// An image whose own `/testbed` holds the repository at Base with the fix on another branch, a
/// tag and a remote-tracking-like ref (as SWE-bench instance images hold upstream history).
/// Returns (image, base, fix).
fn image_with_history() -> (String, String, String) {
    let image = format!("execcritic-test-history:{}", std::process::id());
    let name = format!("execcritic-test-history-{}", std::process::id());
    let script = r#"set -e; mkdir /testbed; cd /testbed; g() { git -c user.name=t -c user.email=t@t "$@"; }
g init -q -b main; printf 'def add(a, b):\n    return a - b\n' > calc.py; g add .; g commit -q -m base
b=$(git rev-parse HEAD); printf 'def add(a, b):\n    return a + b\n' > calc.py; g commit -q -am fix
git update-ref refs/remotes/origin/main HEAD; git tag v1; git branch fixed
git reset -q --hard "$b"; echo "$b $(git rev-parse fixed)""#;
    let out = std::process::Command::new("docker")
        .args([
            "run",
            "--name",
            &name,
            "--network",
            "none",
            &docker_image(),
            "bash",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (base, fix) = ids.split_once(' ').unwrap();
    let commit = std::process::Command::new("docker")
        .args(["commit", &name, &image])
        .output()
        .unwrap();
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &name])
        .output();
    assert!(
        commit.status.success(),
        "{}",
        String::from_utf8_lossy(&commit.stderr)
    );
    (image, base.to_string(), fix.to_string())
}

#[tokio::test]
async fn docker_image_history_is_sanitised_before_the_first_command() {
    if !docker_available().await {
        return;
    }
    let (image, base, fix) = image_with_history();
    let attack = history_attack(&fix);
    // The attack works in the image as it is.
    let plain = std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "-w",
            "/testbed",
            &image,
            "bash",
            "-c",
            &attack,
        ])
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(
        plain.contains("LEAK:env-git") && plain.contains("LEAK:object-store"),
        "{plain}"
    );
    let sb = execcritic::harness::sandbox::DockerSandbox::open(
        &image,
        None,
        &base,
        true,
        &small_limits(),
    )
    .await
    .unwrap();
    let out = sb.exec(&attack, Duration::from_secs(120)).await.unwrap();
    assert!(!out.output.contains("LEAK"), "{}", out.output);
    let out = sb
        .exec(
            "git rev-parse HEAD && git status --porcelain",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(out.output.trim(), base);
    drop(sb);
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &image])
        .output();
}
