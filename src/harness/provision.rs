//! Sandbox provisioning: the ONE place where a sandbox is opened for a task. The gates, official
//! grading, the agents' episodes and environment setup all call [`open_sandbox`] /
//! [`open_sandbox_with`], so every sandbox gets, from here and nowhere else:
//!
//! - its workspace: the task's repository at Base with the history its [`Purpose`] allows
//!   ([`Purpose::history`]: no commit, object or ref after Base in any workspace where agent or
//!   candidate code runs, verified before the sandbox opens);
//! - the task's prepared environment (`environment_setup`, built once per cache key here, cached
//!   by [`super::environment`]) mounted read-only at `/env`;
//! - the docker image ([`docker_image`]) or the local sandbox's allow-list, and the limits of
//!   `SandboxConfig` (uid lease, memory cgroup, descriptor hygiene: see `sandbox::local`).

use super::environment::{self, PreparedEnvironment, SETUP_TIMEOUT};
use super::error::HarnessError;
use super::execute::bound_tail;
use super::sandbox::docker::{DockerSandbox, Populate as DockerPopulate};
use super::sandbox::local::LocalSandbox;
use super::sandbox::{EnvAccess, ImageConvention, Purpose, Sandbox, SandboxConfig, SandboxKind};
use crate::task::{EnvironmentSetup, TaskInstance};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Characters of the failing setup command's output kept in the error.
const ERROR_TAIL: usize = 2000;

/// Open a fresh sandbox holding `task`'s repository at Base, with the history `purpose` allows.
pub async fn open_sandbox(
    kind: SandboxKind,
    task: &TaskInstance,
    purpose: Purpose,
) -> Result<Box<dyn Sandbox>, HarnessError> {
    let config = SandboxConfig {
        convention: convention_for(task),
        ..SandboxConfig::default()
    };
    open_sandbox_with(kind, task, purpose, &config).await
}

/// The image convention a task's published format asks for: SWE-bench images activate their
/// conda env in `/testbed`, Pro images export their Dockerfiles' ENV lines in `/app`; our own
/// tasks keep the plain convention.
pub fn convention_for(task: &TaskInstance) -> ImageConvention {
    use crate::task::official::Activation;
    let Some(spec) = &task.official else {
        return ImageConvention::default();
    };
    let activation = match &spec.activation {
        Activation::Conda { env } => Some(format!(
            "source /opt/miniconda3/bin/activate && conda activate {}",
            super::sandbox::shell_quote(env)
        )),
        Activation::Exports { lines } if !lines.is_empty() => Some(lines.join("\n")),
        _ => None,
    };
    ImageConvention {
        workdir: spec.workdir.clone(),
        activation,
        scratch_dirs: spec.scratch_dirs.clone(),
        ..ImageConvention::default()
    }
}

/// Open a sandbox with explicit options. A task with `environment_setup` gets its prepared
/// environment (built once per cache key) mounted read-only at `/env`, unless `config` already
/// names an environment.
pub async fn open_sandbox_with(
    kind: SandboxKind,
    task: &TaskInstance,
    purpose: Purpose,
    config: &SandboxConfig,
) -> Result<Box<dyn Sandbox>, HarnessError> {
    if config.environment == EnvAccess::None {
        if let Some(env) = prepare_environment(kind, task, config).await? {
            let config = SandboxConfig {
                environment: EnvAccess::ReadOnly(env.dir),
                ..config.clone()
            };
            return open_bare(kind, task, purpose, &config).await;
        }
    }
    open_bare(kind, task, purpose, config).await
}

/// The docker image a task's sandboxes use: `config`'s, else `$EXECCRITIC_DOCKER_IMAGE`, else
/// the task's `image`.
pub fn docker_image(task: &TaskInstance, config: &SandboxConfig) -> String {
    config
        .docker_image
        .clone()
        .or_else(|| {
            std::env::var("EXECCRITIC_DOCKER_IMAGE")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| task.image.clone())
}

/// The task's environment, built now if the cache has none (`None`: the task has no
/// `environment_setup`).
pub async fn prepare_environment(
    kind: SandboxKind,
    task: &TaskInstance,
    config: &SandboxConfig,
) -> Result<Option<PreparedEnvironment>, HarnessError> {
    let Some(setup) = &task.environment_setup else {
        return Ok(None);
    };
    let identity = match kind {
        SandboxKind::Local => "local".to_string(),
        SandboxKind::Docker => format!("docker:{}", docker_image(task, config)),
    };
    environment::prepare_cached(task, setup, identity, |build: PathBuf| async move {
        run_setup(kind, task, config, setup, &build).await
    })
    .await
    .map(Some)
}

/// The workspace filler of a sandbox: `task`'s repository at Base with `purpose`'s history.
fn populate_for(
    task: &TaskInstance,
    purpose: Purpose,
) -> impl Fn(&Path) -> Result<String, HarnessError> + Send + Sync + 'static {
    let t = task.clone();
    let history = purpose.history();
    move |ws: &Path| {
        crate::task::materialize_with(&t, ws, history)
            .map(|w| w.base_commit)
            .map_err(|e| HarnessError::Task(e.to_string()))
    }
}

/// Open a sandbox exactly as `config` says (no environment preparation).
async fn open_bare(
    kind: SandboxKind,
    task: &TaskInstance,
    purpose: Purpose,
    config: &SandboxConfig,
) -> Result<Box<dyn Sandbox>, HarnessError> {
    match kind {
        SandboxKind::Local => {
            let populate = Box::new(populate_for(task, purpose));
            let config = config.clone();
            let sb = tokio::task::spawn_blocking(move || LocalSandbox::open(populate, &config))
                .await
                .map_err(|e| HarnessError::Other(format!("sandbox setup task: {e}")))??;
            Ok(Box::new(sb))
        }
        SandboxKind::Docker => {
            let image = docker_image(task, config);
            let populate: Option<DockerPopulate> = task
                .repo_path
                .as_ref()
                .map(|_| Box::new(populate_for(task, purpose)) as DockerPopulate);
            let sb = DockerSandbox::open(
                &image,
                populate,
                &task.base_commit,
                purpose.sanitize_history(),
                config,
            )
            .await?;
            Ok(Box::new(sb))
        }
    }
}

/// Run the setup commands in a network-enabled sandbox with `build` writable at `/env`;
/// returns the workspace changes they left (discarded).
async fn run_setup(
    kind: SandboxKind,
    task: &TaskInstance,
    config: &SandboxConfig,
    setup: &EnvironmentSetup,
    build: &Path,
) -> Result<Vec<String>, HarnessError> {
    let config = SandboxConfig {
        environment: EnvAccess::Setup(build.to_path_buf()),
        ..config.clone()
    };
    let sb = open_bare(kind, task, Purpose::EnvironmentSetup, &config).await?;
    for command in &setup.commands {
        let out = sb.exec(command, SETUP_TIMEOUT).await?;
        if !out.success() {
            let status = if out.timed_out {
                format!("timed out after {} s", SETUP_TIMEOUT.as_secs())
            } else {
                match out.exit_code {
                    Some(c) => format!("exited with code {c}"),
                    None => "was killed".into(),
                }
            };
            return Err(HarnessError::EnvironmentSetup {
                instance: task.instance_id.clone(),
                command: command.clone(),
                status,
                tail: bound_tail(&out.output, ERROR_TAIL),
            });
        }
    }
    let status = sb
        .exec(
            "git status --porcelain --untracked-files=all --ignored",
            Duration::from_secs(120),
        )
        .await?;
    if !status.success() {
        return Err(HarnessError::Other(format!(
            "environment setup of {}: listing workspace changes failed: {}",
            task.instance_id,
            bound_tail(&status.output, ERROR_TAIL)
        )));
    }
    Ok(status
        .output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}
