//! Image conventions against a real docker daemon (skipped, saying why, without one): an image
//! with the SWE-bench layout (a conda-like `/opt/miniconda3/bin/activate` whose `conda activate
//! testbed` puts the env's bin on PATH, the repository in `/testbed`) and a SWE-bench Pro-like
//! one (`/app`, exported variables). Every command of the code under test — a plain exec, a
//! guarded run with stdin (as gates and grading run), the agent's shell, and after a reset — sees
//! the activated env in the workdir; the same image without the activation script is an
//! infrastructure error at open, never a verdict.

mod harness_support;

use execcritic::agent::Shell;
use execcritic::episode::sandbox_shell::SandboxShell;
use execcritic::harness::sandbox::convention::ImageConvention;
use execcritic::harness::sandbox::DockerSandbox;
use execcritic::harness::{Sandbox, SandboxConfig};
use harness_support::*;
use std::process::Command;
use std::time::Duration;

/// Lays out `/opt/miniconda3` (an `activate` that defines `conda`), a `testbed` env with one
/// program, and a git repository at `/testbed` and at `/app`; prints the Base commit.
const LAYOUT: &str = r#"set -e
mkdir -p /opt/miniconda3/bin /opt/miniconda3/envs/testbed/bin
cat > /opt/miniconda3/bin/activate <<'EOF'
# Like conda reading ~/.condarc: a file under HOME would steer the activation.
[ -f "$HOME/.fakecondarc" ] && . "$HOME/.fakecondarc"
conda() {
  if [ "$1" = activate ] && [ -d "/opt/miniconda3/envs/$2" ]; then
    export CONDA_DEFAULT_ENV="$2" CONDA_PREFIX="/opt/miniconda3/envs/$2"
    export PATH="/opt/miniconda3/envs/$2/bin:$PATH"
  else
    echo "conda: no environment $2" >&2; return 1
  fi
}
EOF
printf '#!/bin/sh\necho "testbed-tool $*"\n' > /opt/miniconda3/envs/testbed/bin/tbtool
chmod +x /opt/miniconda3/envs/testbed/bin/tbtool
for d in /testbed /app; do
  mkdir -p "$d"; cd "$d"
  git init -q -b main; printf 'x = 1\n' > m.py
  git -c user.name=t -c user.email=t@t add . ; git -c user.name=t -c user.email=t@t commit -q -m base
done
cd /testbed; git rev-parse HEAD"#;

/// Build `image` from the test image with `script` run in it; returns its stdout.
fn build(image: &str, from: &str, script: &str) -> String {
    let name = image.replace([':', '/'], "-");
    let out = Command::new("docker")
        .args(["run", "--name", &name, "--network", "none", from, "bash", "-c", script])
        .output()
        .expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let commit = Command::new("docker").args(["commit", &name, image]).output().expect("docker commit");
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    assert!(commit.status.success(), "{}", String::from_utf8_lossy(&commit.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Removes the test images when the test ends (even by panic).
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for i in &self.0 {
            let _ = Command::new("docker").args(["rmi", "-f", i]).output();
        }
    }
}

fn config(convention: ImageConvention) -> SandboxConfig {
    SandboxConfig { convention, ..Default::default() }
}

/// What a command sees: the env's tool, the conda env, the working directory, HEAD.
const PROBE: &str = "tbtool hi; echo env=$CONDA_DEFAULT_ENV; pwd; git rev-parse HEAD";

fn sees_testbed(output: &str, base: &str, what: &str) {
    assert!(output.contains("testbed-tool hi"), "{what}: {output:?}");
    assert!(output.contains("env=testbed\n/testbed\n"), "{what}: {output:?}");
    assert!(output.contains(base), "{what}: {output:?}");
    assert!(!output.contains("execcritic-activated"), "{what}: the marker leaked: {output:?}");
}

#[tokio::test]
async fn swebench_images_run_every_command_in_the_activated_env() {
    if !docker_available().await {
        return;
    }
    let tag = std::process::id();
    let image = format!("execcritic-test-swebench:{tag}");
    let broken = format!("execcritic-test-swebench-noconda:{tag}");
    let _images = Images(vec![image.clone(), broken.clone()]);
    let base = build(&image, &docker_image(), LAYOUT);
    build(&broken, &image, "rm /opt/miniconda3/bin/activate");

    let sb = DockerSandbox::open(&image, None, &base, true, &config(ImageConvention::swebench()))
        .await
        .expect("the swebench sandbox opens");
    assert_eq!(sb.workdir(), "/testbed");
    // A plain command.
    let out = sb.exec(PROBE, Duration::from_secs(60)).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    sees_testbed(&out.output, &base, "exec");
    // Exit codes pass through the prelude.
    let out = sb.exec("echo out; exit 7", Duration::from_secs(60)).await.unwrap();
    assert_eq!((out.exit_code, out.output.trim()), (Some(7), "out"));
    // A run with stdin (how gates and grading run the guarded test command): the input reaches
    // the command, not the prelude.
    let cmd = format!("{PROBE}; echo input=$(cat)");
    let out = sb.exec_input(&cmd, Duration::from_secs(60), b"nonce-42", false).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    sees_testbed(&out.output, &base, "exec_input");
    assert!(out.output.contains("input=nonce-42"), "{}", out.output);
    // The agent's bash tool.
    let shell = SandboxShell(&sb);
    let out = shell.run(PROBE, Duration::from_secs(60)).await.unwrap();
    sees_testbed(&out.output, &base, "agent shell");
    // A command plants a config under its HOME (/tmp) for the next activation: the prelude
    // reads nothing from there, the command keeps its HOME.
    let out = sb
        .exec("echo 'echo PLANTED; tbtool() { echo hijacked; }' > $HOME/.fakecondarc", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    let out = sb.exec(&format!("{PROBE}; echo home=$HOME"), Duration::from_secs(60)).await.unwrap();
    sees_testbed(&out.output, &base, "after planting a config");
    assert!(!out.output.contains("PLANTED") && !out.output.contains("hijacked"), "{}", out.output);
    assert!(out.output.ends_with("home=/tmp\n"), "{}", out.output);
    // A run that dirties the tree; after a reset the next command is activated again at Base.
    let out = sb
        .exec("echo junk > m.py && touch new.txt && git add -A", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    sb.reset().await.expect("reset");
    let out = sb.exec(&format!("{PROBE}; git status --porcelain"), Duration::from_secs(60)).await.unwrap();
    sees_testbed(&out.output, &base, "after reset");
    assert!(out.output.trim_end().ends_with(&base), "clean tree after reset: {}", out.output);
    drop(sb);

    // Without the activation script: an infrastructure error at open naming the prelude.
    let err = DockerSandbox::open(&broken, None, &base, true, &config(ImageConvention::swebench()))
        .await
        .err()
        .expect("an image without the activation script does not open");
    let msg = err.to_string();
    assert!(
        msg.contains("activation prelude `source /opt/miniconda3/bin/activate && conda activate testbed` failed"),
        "{msg}"
    );
    assert!(msg.contains("/opt/miniconda3/bin/activate"), "{msg}");

    // The plain convention on the same image: no activation, the image's PATH.
    let sb = DockerSandbox::open(&image, None, &base, true, &SandboxConfig::default()).await.unwrap();
    let out = sb.exec("command -v tbtool || echo no-tool; pwd", Duration::from_secs(60)).await.unwrap();
    assert_eq!(out.output, "no-tool\n/testbed\n");
}

#[tokio::test]
async fn pro_images_work_in_app_with_their_environment() {
    if !docker_available().await {
        return;
    }
    let image = format!("execcritic-test-pro:{}", std::process::id());
    let _images = Images(vec![image.clone()]);
    build(&image, &docker_image(), LAYOUT);
    let base = {
        let out = Command::new("docker")
            .args(["run", "--rm", "-w", "/app", &image, "git", "rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let convention = ImageConvention::pro(vec![("PRO_MODE".into(), "on it".into())]);
    let sb = DockerSandbox::open(&image, None, &base, true, &config(convention)).await.unwrap();
    assert_eq!(sb.workdir(), "/app");
    let out = sb
        .exec("pwd; echo \"mode=$PRO_MODE\"; git rev-parse HEAD", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(out.output, format!("/app\nmode=on it\n{base}\n"));
    sb.exec("echo junk > m.py", Duration::from_secs(60)).await.unwrap();
    sb.reset().await.expect("reset in /app");
    let out = sb.exec("git status --porcelain; cat m.py", Duration::from_secs(60)).await.unwrap();
    assert_eq!(out.output, "x = 1\n");
}
