//! `environment_setup` for real, in both sandboxes: a fixture task whose code imports a library
//! that only the setup provides (copied into `/env/python`, or installed in development mode
//! into a venv at `/env/venv`); grading resolves with the setup and not without it;
//! the environment is built once (a host TCP listener counts setup runs; the second use is a
//! cache hit, also under concurrent workers); a failing setup is an infrastructure error with no
//! cache entry; the setup sandbox shares the host's network while later sandboxes have none and
//! see `/env` read-only; setup's workspace changes are discarded (clean `git status`).

mod harness_support;

use execcritic::harness::environment::{envs_dir, Manifest};
use execcritic::harness::{
    grade, open_sandbox, prepare_environment, HarnessError, Purpose, SandboxConfig, SandboxKind,
};
use execcritic::task::TaskInstance;
use harness_support::{docker_available, docker_image, git};
use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const QUAD_BASE: &str = "from helperlib import twice\n\n\ndef quad(x):\n    return twice(x) + x\n";
const QUAD_GOLD: &str =
    "from helperlib import twice\n\n\ndef quad(x):\n    return twice(twice(x))\n";
const TEST_BASE: &str = "from quad import quad\n\n\ndef test_zero():\n    assert quad(0) == 0\n";
const TEST_NEW: &str = "from quad import quad\n\n\ndef test_zero():\n    assert quad(0) == 0\n\n\ndef test_two():\n    assert quad(2) == 8\n";
const HELPER: &str = "def twice(x):\n    return 2 * x\n";
const HELPER_SETUP_PY: &str =
    "from setuptools import setup\n\nsetup(name=\"helperlib\", version=\"1.0\", packages=[\"helperlib\"])\n";

/// The fixture repository (Base, gold patch, test patch) and a private cache for this binary.
struct Repo {
    dir: PathBuf,
    base: String,
    gold: String,
    test_patch: String,
}

fn repo() -> &'static Repo {
    static R: OnceLock<Repo> = OnceLock::new();
    R.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("execcritic-envfix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Every environment of this test binary goes to a private cache.
        std::env::set_var("EXECCRITIC_CACHE", root.join("cache"));
        // Docker sandboxes (and their environments' identity) use the test image.
        std::env::set_var("EXECCRITIC_DOCKER_IMAGE", docker_image());
        let dir = root.join("repo");
        let w = |p: &str, c: &str| {
            let path = dir.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        };
        w("quad/__init__.py", QUAD_BASE);
        w("tests/test_quad.py", TEST_BASE);
        w("vendor/helperlib/helperlib/__init__.py", HELPER);
        w("vendor/helperlib/setup.py", HELPER_SETUP_PY);
        w(".gitignore", "*.egg-info/\nbuild/\n");
        git(&dir, &["init", "-q", "-b", "main"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "base"]);
        let base = git(&dir, &["rev-parse", "HEAD"]);
        w("quad/__init__.py", QUAD_GOLD);
        let gold = git(&dir, &["diff"]) + "\n";
        git(&dir, &["checkout", "-q", "--", "."]);
        w("tests/test_quad.py", TEST_NEW);
        let test_patch = git(&dir, &["diff"]) + "\n";
        git(&dir, &["checkout", "-q", "--", "."]);
        Repo {
            dir,
            base,
            gold,
            test_patch,
        }
    })
}

/// The fixture task; `setup` = (cache key, commands). `python3` on the test command resolves to
/// the venv's when a setup created one (`/env/venv/bin` leads PATH).
fn task(id: &str, setup: Option<(&str, &[&str])>) -> TaskInstance {
    let r = repo();
    let mut v = serde_json::json!({
        "instance_id": id,
        "repo": "fixture/quad",
        "base_commit": r.base,
        "patch": r.gold,
        "test_patch": r.test_patch,
        "problem_statement": "quad(x) is not 4x",
        "FAIL_TO_PASS": ["tests/test_quad.py::test_two"],
        "PASS_TO_PASS": ["tests/test_quad.py::test_zero"],
        "repo_path": r.dir,
        "runner": "pytest",
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider",
    });
    if let Some((key, cmds)) = setup {
        v["environment_setup"] = serde_json::json!({"cache_key": key, "commands": cmds});
    }
    TaskInstance::from_json(v, None).expect("fixture task parses")
}

/// A unique cache key (the cache is shared by the tests of this binary).
fn key(name: &str, kind: SandboxKind) -> String {
    format!("{name}-{kind:?}-{}", rand::random::<u64>())
}

/// Copies the vendored library into `/env/python` (on PYTHONPATH in every later sandbox).
const COPY_SETUP: &[&str] = &[
    "mkdir -p /env/python",
    "cp -r vendor/helperlib/helperlib /env/python/",
];

/// A host listener on 127.0.0.1 counting connections (setup runs report to it).
struct Listener {
    port: u16,
    count: Arc<AtomicUsize>,
}

fn listener() -> Listener {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 16];
            let _ = s.read(&mut buf);
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    Listener { port, count }
}

fn connect_cmd(port: u16) -> String {
    format!(
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=5); s.sendall(b'x'); s.close()\""
    )
}

async fn kinds() -> Vec<SandboxKind> {
    repo();
    let mut v = vec![SandboxKind::Local];
    if docker_available().await {
        v.push(SandboxKind::Docker);
    }
    v
}

fn config() -> SandboxConfig {
    SandboxConfig {
        docker_image: Some(docker_image()),
        ..Default::default()
    }
}

#[tokio::test]
async fn grading_resolves_with_setup_and_not_without() {
    for kind in kinds().await {
        let with = task("quad-env", Some((&key("grade", kind), COPY_SETUP)));
        let g = grade_with(&with, &with.patch, kind).await.unwrap();
        assert!(g.resolved, "{kind:?}: gold with setup: {g:?}");
        let g = grade_with(&with, "", kind).await.unwrap();
        assert!(!g.resolved, "{kind:?}: empty patch with setup: {g:?}");
        let without = task("quad-noenv", None);
        let g = grade_with(&without, &without.patch, kind).await.unwrap();
        assert!(!g.resolved, "{kind:?}: gold without setup: {g:?}");
    }
}

/// `grade` with the test image for docker.
async fn grade_with(
    t: &TaskInstance,
    patch: &str,
    kind: SandboxKind,
) -> Result<execcritic::harness::GradeResult, HarnessError> {
    repo();
    grade(t, patch, kind).await
}

#[tokio::test]
async fn built_once_then_cached_even_under_concurrent_workers() {
    for kind in kinds().await {
        let l = listener();
        let report = connect_cmd(l.port);
        let nonce = "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /env/nonce";
        let cmds = [COPY_SETUP[0], COPY_SETUP[1], nonce, report.as_str()];
        let t = task("quad-once", Some((&key("once", kind), &cmds)));
        let cfg = config();
        let (a, b) = tokio::join!(
            prepare_environment(kind, &t, &cfg),
            prepare_environment(kind, &t, &cfg)
        );
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        assert_eq!(a.dir, b.dir);
        assert_eq!(
            [a.built, b.built].iter().filter(|x| **x).count(),
            1,
            "{kind:?}: exactly one concurrent worker builds"
        );
        let c = prepare_environment(kind, &t, &cfg).await.unwrap().unwrap();
        assert!(!c.built, "{kind:?}: second use is a cache hit");
        assert_eq!(c.dir, a.dir);
        assert_eq!(
            l.count.load(Ordering::SeqCst),
            1,
            "{kind:?}: setup ran once"
        );
        let nonce = std::fs::read_to_string(a.dir.join("nonce")).unwrap();
        // Sandboxes opened later see the same environment and do not rerun the setup.
        let sb = open_sandbox(kind, &t, Purpose::Gate).await.unwrap();
        let seen = sb
            .exec("cat /env/nonce", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(seen.output.trim(), nonce.trim());
        drop(sb);
        assert_eq!(
            l.count.load(Ordering::SeqCst),
            1,
            "{kind:?}: setup ran once"
        );
        let manifest: Manifest =
            serde_json::from_str(&std::fs::read_to_string(a.dir.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest.commands, cmds);
        assert_eq!(manifest.key, a.key);
    }
}

#[tokio::test]
async fn failing_setup_is_an_infrastructure_error_without_cache_entry() {
    for kind in kinds().await {
        let cmds = [
            "mkdir -p /env/python",
            "echo setup-went-wrong >&2; exit 3",
            "touch /env/never",
        ];
        let k = key("fail", kind);
        let t = task("quad-badenv", Some((&k, &cmds)));
        let err = grade_with(&t, &t.patch, kind).await.unwrap_err();
        match &err {
            HarnessError::EnvironmentSetup {
                instance,
                command,
                status,
                tail,
            } => {
                assert_eq!(instance, "quad-badenv");
                assert_eq!(command, cmds[1]);
                assert_eq!(status, "exited with code 3");
                assert!(tail.contains("setup-went-wrong"), "{tail}");
            }
            other => panic!("{kind:?}: expected EnvironmentSetup, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("quad-badenv") && msg.contains("exit 3"),
            "{msg}"
        );
        let cfg = config();
        let env_key = execcritic::harness::environment_key(
            t.environment_setup.as_ref().unwrap(),
            &match kind {
                SandboxKind::Local => "local".to_string(),
                SandboxKind::Docker => format!("docker:{}", docker_image()),
            },
        );
        assert!(!envs_dir().join(&env_key).exists(), "no cache entry");
        let leftovers: Vec<_> = std::fs::read_dir(envs_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(&env_key))
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
            .collect();
        assert!(leftovers.is_empty(), "build dir left: {leftovers:?}");
        // Still failing (not cached as a success) on the next use.
        assert!(prepare_environment(kind, &t, &cfg).await.is_err());
    }
}

#[tokio::test]
async fn setup_has_host_network_later_sandboxes_have_none_and_a_read_only_env() {
    for kind in kinds().await {
        let l = listener();
        let report = connect_cmd(l.port);
        let cmds = [
            "readlink /proc/self/ns/net > /env/setup-netns",
            report.as_str(),
            "touch /testbed/setup-artifact && mkdir -p /testbed/build && touch /testbed/build/x",
        ];
        let t = task("quad-net", Some((&key("net", kind), &cmds)));
        let sb = open_sandbox(kind, &t, Purpose::Gate).await.unwrap();
        assert_eq!(
            l.count.load(Ordering::SeqCst),
            1,
            "{kind:?}: setup reached the host"
        );
        let env = prepare_environment(kind, &t, &config())
            .await
            .unwrap()
            .unwrap();
        assert!(!env.built);
        let t60 = Duration::from_secs(60);

        // No network in later sandboxes: the host listener cannot be reached.
        let out = sb.exec(&connect_cmd(l.port), t60).await.unwrap();
        assert!(
            !out.success(),
            "{kind:?}: gate sandbox reached the host: {}",
            out.output
        );
        assert_eq!(l.count.load(Ordering::SeqCst), 1);
        // The setup sandbox shared the host's network namespace (local: no new netns); the
        // gate sandbox has its own.
        let setup_ns = std::fs::read_to_string(env.dir.join("setup-netns")).unwrap();
        let gate_ns = sb.exec("readlink /proc/self/ns/net", t60).await.unwrap();
        assert_ne!(gate_ns.output.trim(), setup_ns.trim(), "{kind:?}");
        if kind == SandboxKind::Local {
            let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
            assert_eq!(setup_ns.trim(), host_ns.to_string_lossy());
        }

        // /env is read-only.
        let out = sb
            .exec("touch /env/written; echo rc=$?; ls /env", t60)
            .await
            .unwrap();
        assert!(out.output.contains("rc=1"), "{kind:?}: {}", out.output);
        assert!(!env.dir.join("written").exists());
        assert!(out.output.contains("setup-netns"), "{}", out.output);

        // Setup's workspace changes are discarded and recorded; the gate's Base is clean.
        let st = sb
            .exec(
                "git status --porcelain --untracked-files=all --ignored",
                t60,
            )
            .await
            .unwrap();
        assert!(
            st.success() && st.output.trim().is_empty(),
            "{kind:?}: {}",
            st.output
        );
        let manifest: Manifest =
            serde_json::from_str(&std::fs::read_to_string(env.dir.join("manifest.json")).unwrap())
                .unwrap();
        let changes = manifest.discarded_workspace_changes.join("\n");
        assert!(changes.contains("setup-artifact"), "{changes}");
        assert!(changes.contains("build/"), "{changes}");
    }
}

/// A realistic setup: a venv at /env/venv and a development-mode install of the vendored
/// library into it (`setup.py develop`, the mechanism of a legacy `pip install -e`; PEP 660
/// editable builds need the `wheel` package, which no index can provide here). Local sandbox
/// only: the host toolchain has setuptools, the test image has none.
#[tokio::test]
async fn venv_with_development_install_serves_later_sandboxes() {
    let has_pip = std::process::Command::new("python3")
        .args(["-c", "import setuptools"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_pip {
        eprintln!("SKIPPED venv test: the host python3 lacks setuptools");
        return;
    }
    let cmds = [
        "python3 -m venv --without-pip --system-site-packages /env/venv",
        "cd vendor/helperlib && python3 setup.py -q develop --no-deps",
    ];
    let t = task("quad-venv", Some((&key("venv", SandboxKind::Local), &cmds)));
    let g = grade(&t, &t.patch, SandboxKind::Local).await.unwrap();
    assert!(g.resolved, "{g:?}");
    let env = prepare_environment(SandboxKind::Local, &t, &SandboxConfig::default())
        .await
        .unwrap()
        .unwrap();
    let manifest: Manifest =
        serde_json::from_str(&std::fs::read_to_string(env.dir.join("manifest.json")).unwrap())
            .unwrap();
    assert!(
        manifest
            .discarded_workspace_changes
            .iter()
            .any(|c| c.contains("egg-info")),
        "{manifest:?}"
    );
    let sb = open_sandbox(SandboxKind::Local, &t, Purpose::Grading)
        .await
        .unwrap();
    let out = sb
        .exec(
            "echo $VIRTUAL_ENV; python3 -c 'import sys, helperlib; print(sys.prefix, helperlib.__file__)'",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(out.success(), "{}", out.output);
    assert!(
        out.output
            .contains("/env/venv /testbed/vendor/helperlib/helperlib/__init__.py"),
        "{}",
        out.output
    );
}
