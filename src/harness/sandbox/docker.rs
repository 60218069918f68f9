//! The `docker` sandbox (bollard): one container per sandbox from the task's image, network
//! disabled (`none`), memory (swap included) and pids limits, every capability dropped,
//! `no-new-privileges`, a read-only root filesystem, and no host mount but the task's
//! environment at `/env` (read-only). When the harness uploads the repository to `/testbed`, its
//! files are owned by an unprivileged uid ([`SANDBOX_USER`]) and every command runs as that uid;
//! an image's own `/testbed` (SWE-bench instance images) is root's, so commands run as the
//! image's root (or the convention's user) — without capabilities — and its git history is
//! sanitised in the container before the first command (no ref, remote, reflog or object after Base; verified). Commands run via
//! `docker exec` under `timeout -s KILL` inside, and on our side the exec's process group is
//! killed if the daemon does not return in time. No container outlives us: the container's main
//! process reads its attached stdin, so when this process dies (even by SIGKILL) the connection
//! closes, the container stops and `auto_remove` deletes it; `Drop` removes it explicitly, a
//! label-based sweep at start removes leftovers, and `cleanup_all` serves Ctrl-C handlers.
//!
//! Which daemon: `DOCKER_HOST` (unix://, tcp://, https://, ssh://; TLS per `DOCKER_TLS_VERIFY` and
//! `DOCKER_CERT_PATH`: see [`super::docker_host`]), or a host chosen for one piece of work with
//! [`on_host`] (`eval --docker-host`, spreading instances over a fleet). Every container
//! remembers its host, so removal and Ctrl-C cleanup reach the right daemon.
//!
//! How commands run follows the image's [`ImageConvention`] (`SandboxConfig::convention`): its
//! workdir (`/testbed` by default, `/app` for SWE-bench Pro) is the repository's place and every
//! command's working directory, its environment is every command's, and its activation prelude
//! (SWE-bench's conda env) runs before every command of the code under test — never before the
//! harness's own commands (see [`super::convention`]).

use super::capture::Capture;
use super::convention::{ImageConvention, MarkerGate};
use super::{
    reset_command, shell_quote, EnvAccess, ExecOutput, SandboxConfig, SandboxFuture, SandboxLimits,
    ENV_DIR,
};
use crate::harness::error::HarnessError;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, ListContainersOptions, RemoveContainerOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Label put on every container we create.
pub const LABEL: &str = "execcritic.sandbox";
const OWNER_LABEL: &str = "execcritic.owner";
/// argv[0] of the container's lifeline process (spared when killing everything else).
const LIFELINE: &str = "execcritic-lifeline";
/// The unprivileged uid:gid commands run as when the harness uploaded the workspace.
pub const SANDBOX_USER: &str = "65534:65534";

/// Sanitises the image's own repository (run once, as the image's user, at creation): HEAD
/// moved to Base if the image left it elsewhere (as the official Pro evaluation's
/// `git reset --hard <base>` does), only HEAD's branch at Base, no remote, no reflog, nothing unreachable; then verifies that every
/// commit in the store is reachable from HEAD. `$1` is the Base commit, `$2` the workdir.
const SANITIZE_IMAGE_HISTORY: &str = r#"set -e; cd "$2"
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
c=$(git rev-parse --verify "$1^{commit}")
[ "$(git rev-parse HEAD)" = "$c" ] || git reset -q --hard "$c"
b=$(git symbolic-ref --short HEAD 2>/dev/null || { git checkout -q -B main; echo main; })
for r in $(git remote); do git remote remove "$r"; done
git for-each-ref --format='%(refname)' | while read -r r; do
  [ "$r" = "refs/heads/$b" ] || git update-ref --no-deref -d "$r"; done
g=$(git rev-parse --absolute-git-dir)
rm -f "$g/ORIG_HEAD" "$g/FETCH_HEAD" "$g/MERGE_HEAD" "$g/objects/info/alternates" "$g/packed-refs.lock"
git reflog expire --expire=now --expire-unreachable=now --all
git -c gc.cruftPacks=false gc --prune=now --quiet
all=$(git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$' || true)
test "$all" = "$(git rev-list --count HEAD)"
test "$(git for-each-ref --format='%(refname)')" = "refs/heads/$b""#;

/// Live containers of this process and the host each runs on (`None`: the default daemon).
fn live() -> &'static Mutex<HashMap<String, Option<String>>> {
    static LIVE: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashMap::new()))
}

tokio::task_local! {
    static HOST: String;
}

/// Run `work` with the docker sandboxes it opens on `host` (a `DOCKER_HOST`-style URL:
/// `unix://`, `tcp://`, `https://` or `ssh://`); `None` keeps the default daemon.
pub async fn on_host<F: std::future::Future>(host: Option<String>, work: F) -> F::Output {
    match host {
        Some(h) => HOST.scope(h, work).await,
        None => work.await,
    }
}

/// The host chosen by the enclosing [`on_host`], if any.
pub fn current_host() -> Option<String> {
    HOST.try_with(Clone::clone).ok()
}

fn derr(what: &str) -> impl Fn(bollard::errors::Error) -> HarnessError + '_ {
    move |e| HarnessError::Docker(format!("{what}: {e}"))
}

/// Connect to the daemon of the enclosing [`on_host`], else `DOCKER_HOST`'s, else the local one
/// (API version negotiated).
pub async fn connect() -> Result<Docker, HarnessError> {
    connect_to(current_host().as_deref()).await
}

/// Connect to `host` (`None`: `DOCKER_HOST` or the local socket); see [`super::docker_host`]
/// for the schemes, TLS and ssh.
pub async fn connect_to(host: Option<&str>) -> Result<Docker, HarnessError> {
    super::docker_host::connect(host).await
}

/// The images of `images` that the daemon at `host` does not hold locally (nothing is pulled).
pub async fn missing_images(host: Option<&str>, images: &[String]) -> Result<Vec<String>, HarnessError> {
    let d = connect_to(host).await?;
    let mut missing = Vec::new();
    for image in images {
        if d.inspect_image(image).await.is_err() {
            missing.push(image.clone());
        }
    }
    Ok(missing)
}

/// Remove containers left by earlier runs whose owner process is gone.
pub async fn sweep_stale(docker: &Docker) -> Result<usize, HarnessError> {
    let mut filters = HashMap::new();
    filters.insert("label".to_string(), vec![LABEL.to_string()]);
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(derr("listing containers"))?;
    let mut removed = 0;
    for c in list {
        let owner = c
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
            .and_then(|o| o.parse::<i32>().ok());
        let alive = owner.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            if let Some(id) = c.id {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptions {
                            force: true,
                            ..Default::default()
                        }),
                    )
                    .await;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// Remove every container this process created (for Ctrl-C handlers).
pub async fn cleanup_all() {
    let ids: Vec<(String, Option<String>)> = live()
        .lock()
        .map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (id, host) in ids {
        if let Ok(d) = connect_to(host.as_deref()).await {
            let _ = d
                .remove_container(
                    &id,
                    Some(RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await;
        }
    }
}

/// Fills an empty host directory with the repository and returns its Base commit.
pub type Populate = Box<dyn Fn(&Path) -> Result<String, HarnessError> + Send + Sync>;

/// A docker container sandbox.
pub struct DockerSandbox {
    docker: Docker,
    /// The daemon's host when not the default one.
    host: Option<String>,
    image: String,
    id: Mutex<String>,
    base_commit: String,
    limits: SandboxLimits,
    log_dir: PathBuf,
    _logs: tempfile::TempDir,
    repo_tar: Vec<u8>,
    /// Sanitise the history of the image's own `/testbed` (when no repository is uploaded).
    sanitize_image_history: bool,
    /// `uid:gid` of every command (`None`: the image's user).
    user: Option<String>,
    /// How the image expects commands to run (workdir, activation, environment).
    convention: ImageConvention,
    /// The convention's environment as `KEY=VALUE` (validated at open).
    convention_env: Vec<String>,
    counter: AtomicU64,
    /// The task environment, bind-mounted at `/env` (the daemon must be local).
    env: EnvAccess,
    /// Attached stdin of the container's main process: dropping it (or dying) ends the container.
    _lifeline: tokio::sync::Mutex<Vec<Pin<Box<dyn tokio::io::AsyncWrite + Send>>>>,
    /// `.git` as it was before the first run: its metadata (a tar of everything but `objects/`,
    /// kept on the host) and the listing of its object files (see [`super::git_state`]).
    git_snapshot: tokio::sync::Mutex<Option<(Vec<u8>, super::git_state::ObjectListing)>>,
}

/// The one file `name` of a tar archive (what the daemon sends for a downloaded path).
fn inner_tar(outer: &[u8], name: &str) -> Result<Vec<u8>, HarnessError> {
    use std::io::Write;
    let mut child = std::process::Command::new("tar")
        .args(["-xOf", "-", name])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| HarnessError::Other(format!("running tar: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let data = outer.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child
        .wait_with_output()
        .map_err(|e| HarnessError::Other(format!("running tar: {e}")))?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(HarnessError::Other(format!(
            "extracting {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(out.stdout)
}

/// `tar` of a host directory's contents, every entry owned by `owner` (`uid:gid`) when given.
fn tar_dir(dir: &Path, owner: Option<&str>) -> Result<Vec<u8>, HarnessError> {
    let mut cmd = std::process::Command::new("tar");
    cmd.arg("-C").arg(dir);
    if let Some((u, g)) = owner.and_then(|o| o.split_once(':')) {
        cmd.arg(format!("--owner={u}"))
            .arg(format!("--group={g}"))
            .arg("--numeric-owner");
    }
    let out = cmd
        .args(["-cf", "-", "."])
        .output()
        .map_err(|e| HarnessError::io(dir, e))?;
    if !out.status.success() {
        return Err(HarnessError::Other(format!(
            "tar of {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(out.stdout)
}

impl DockerSandbox {
    /// Create a container from `image` holding the repository produced by `populate`; with
    /// `populate = None` the image's own `/testbed` at `base_commit` is used, its history
    /// sanitised first when `sanitize_history`.
    pub async fn open(
        image: &str,
        populate: Option<Populate>,
        base_commit: &str,
        sanitize_history: bool,
        config: &SandboxConfig,
    ) -> Result<Self, HarnessError> {
        let host = current_host();
        let docker = connect_to(host.as_deref()).await?;
        // Leftovers of earlier runs, once per daemon.
        static SWEPT: OnceLock<Mutex<HashSet<Option<String>>>> = OnceLock::new();
        let first = SWEPT
            .get_or_init(|| Mutex::new(HashSet::new()))
            .lock()
            .map(|mut s| s.insert(host.clone()))
            .unwrap_or(false);
        if first {
            let _ = sweep_stale(&docker).await;
        }
        let staging = tempfile::Builder::new()
            .prefix(&crate::harness::orphans::owned_prefix("docker"))
            .tempdir()
            .map_err(|e| HarnessError::io(std::env::temp_dir(), e))?;
        let ws = staging.path().join("testbed");
        std::fs::create_dir_all(&ws).map_err(|e| HarnessError::io(&ws, e))?;
        // Non-root when we own the workspace; the setup sandbox writes the host's /env as root.
        let user = if populate.is_some() && !config.environment.network() {
            Some(SANDBOX_USER.to_string())
        } else if populate.is_none() {
            config.convention.user.clone()
        } else {
            None
        };
        let convention_env = config
            .convention
            .env_pairs()
            .map_err(HarnessError::SandboxStart)?;
        let below_root = |d: &str| d.starts_with('/') && d != "/" && !d.split('/').any(|c| c == "..");
        if let Some(bad) = std::iter::once(&config.convention.workdir)
            .chain(&config.convention.scratch_dirs)
            .find(|d| !below_root(d))
        {
            return Err(HarnessError::SandboxStart(format!(
                "the image convention's directory {bad:?} is not an absolute directory below /"
            )));
        }
        let owner = user.clone();
        let (base_commit, repo_tar) = match populate {
            Some(populate) => {
                tokio::task::spawn_blocking(move || -> Result<(String, Vec<u8>), HarnessError> {
                    let base = populate(&ws)?;
                    Ok((base, tar_dir(&ws, owner.as_deref())?))
                })
                .await
                .map_err(|e| HarnessError::Other(format!("workspace task: {e}")))??
            }
            None => (base_commit.to_string(), Vec::new()),
        };
        let logs = tempfile::Builder::new()
            .prefix(&crate::harness::orphans::owned_prefix("docker-logs"))
            .tempdir()
            .map_err(|e| HarnessError::io(std::env::temp_dir(), e))?;
        let log_dir = config
            .log_dir
            .clone()
            .unwrap_or_else(|| logs.path().to_path_buf());
        std::fs::create_dir_all(&log_dir).map_err(|e| HarnessError::io(&log_dir, e))?;
        let sb = DockerSandbox {
            docker,
            host,
            image: image.to_string(),
            id: Mutex::new(String::new()),
            base_commit,
            limits: config.limits.clone(),
            log_dir,
            _logs: logs,
            repo_tar,
            sanitize_image_history: sanitize_history,
            user,
            convention: config.convention.clone(),
            convention_env,
            counter: AtomicU64::new(0),
            env: config.environment.clone(),
            _lifeline: tokio::sync::Mutex::new(Vec::new()),
            git_snapshot: tokio::sync::Mutex::new(None),
        };
        sb.create().await?;
        Ok(sb)
    }

    fn id(&self) -> String {
        self.id.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Create and start the container, upload the repository.
    async fn create(&self) -> Result<(), HarnessError> {
        use bollard::models::{ContainerCreateBody, HostConfig};
        let mut labels = HashMap::new();
        labels.insert(LABEL.to_string(), "1".to_string());
        labels.insert(OWNER_LABEL.to_string(), std::process::id().to_string());
        let body = ContainerCreateBody {
            image: Some(self.image.clone()),
            // The lifeline reads our attached stdin and ends (stopping the container) when it
            // closes; docker's init (pid 1) reaps orphans.
            cmd: Some(vec![
                "bash".into(),
                "-c".into(),
                format!("exec -a {LIFELINE} cat"),
            ]),
            labels: Some(labels),
            working_dir: Some("/".into()),
            // Only the setup container has a network (the host's: these daemons may run
            // without a bridge); every other container has none.
            network_disabled: Some(!self.env.network()),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            volumes: Some(
                [self.convention.workdir.as_str(), "/tmp"]
                    .into_iter()
                    .chain(self.convention.scratch_dirs.iter().map(String::as_str))
                    .map(|d| (d.to_string(), HashMap::new()))
                    .collect(),
            ),
            host_config: Some(HostConfig {
                readonly_rootfs: Some(true),
                network_mode: Some(if self.env.network() { "host" } else { "none" }.into()),
                binds: self.env.host_dir().map(|dir| {
                    let mode = if self.env.network() { "rw" } else { "ro" };
                    vec![format!("{}:{ENV_DIR}:{mode}", dir.display())]
                }),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges:true".into()]),
                memory: Some(self.limits.memory_bytes as i64),
                memory_swap: Some(self.limits.memory_bytes as i64),
                pids_limit: Some(self.limits.max_procs as i64),
                auto_remove: Some(true),
                init: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .map_err(derr(&format!(
                "creating a container from image {}",
                self.image
            )))?;
        let id = created.id;
        if let Ok(mut s) = live().lock() {
            s.insert(id.clone(), self.host.clone());
        }
        *self
            .id
            .lock()
            .map_err(|_| HarnessError::Other("poisoned".into()))? = id.clone();
        let attached = self
            .docker
            .attach_container(
                &id,
                Some(AttachContainerOptions {
                    stdin: true,
                    stream: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(derr("attaching the container's lifeline"))?;
        self._lifeline.lock().await.push(attached.input);
        self.docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(derr("starting the container"))?;
        self.check_activation().await?;
        if self.repo_tar.is_empty() {
            // The image's own repository (SWE-bench instance images) is the workspace.
            if self.sanitize_image_history {
                let cmd = format!(
                    "bash -c {} sanitize {} {}",
                    shell_quote(SANITIZE_IMAGE_HISTORY),
                    shell_quote(&self.base_commit),
                    self.wd()
                );
                let out = self.run_as(&cmd, Duration::from_secs(600), None).await?;
                if !out.success() {
                    return Err(HarnessError::SandboxStart(format!(
                        "sanitising the history of the image's {} failed: {}",
                    self.convention.workdir,
                        out.output.chars().take(2000).collect::<String>()
                    )));
                }
            }
            return self.snapshot_git().await;
        }
        // As the image's root (without capabilities: it may only touch what it owns): empty the
        // volumes and open the workdir's top directory to the sandbox user.
        let prep = self
            .run_as(
                &format!(
                    "find {wd} /tmp{scratch} -mindepth 1 -delete && chmod 0777 {wd}{scratch}",
                    wd = self.wd(),
                    scratch = self
                        .convention
                        .scratch_dirs
                        .iter()
                        .map(|d| format!(" {}", shell_quote(d)))
                        .collect::<String>()
                ),
                Duration::from_secs(60),
                None,
            )
            .await?;
        if !prep.success() {
            return Err(HarnessError::SandboxStart(format!(
                "preparing the container: {}",
                prep.output
            )));
        }
        self.docker
            .upload_to_container(
                &id,
                Some(UploadToContainerOptions {
                    path: self.convention.workdir.clone(),
                    ..Default::default()
                }),
                bollard::body_full(self.repo_tar.clone().into()),
            )
            .await
            .map_err(derr("uploading the repository"))?;
        self.snapshot_git().await
    }

    /// Keep `.git` as it is before the first run: its metadata as a host-side tar, its object
    /// files as a listing. Fails closed: no snapshot, no sandbox.
    async fn snapshot_git(&self) -> Result<(), HarnessError> {
        let t = Duration::from_secs(600);
        let stage = "/tmp/.execcritic-gitmeta.tar";
        let mk = self
            .run(
                &format!("cd {} && tar -cf {stage} --exclude=.git/objects .git", self.wd()),
                t,
            )
            .await?;
        if !mk.success() {
            return Err(HarnessError::SandboxStart(format!(
                "snapshot of .git: {}",
                mk.output.chars().take(2000).collect::<String>()
            )));
        }
        let mut outer = Vec::new();
        let mut stream = self.docker.download_from_container(
            &self.id(),
            Some(bollard::query_parameters::DownloadFromContainerOptions { path: stage.into() }),
        );
        while let Some(chunk) = stream.next().await {
            outer.extend_from_slice(&chunk.map_err(derr("downloading the snapshot of .git"))?);
        }
        let meta = inner_tar(&outer, ".execcritic-gitmeta.tar")?;
        let listing = self.object_listing().await?;
        self.run(&format!("rm -f {stage}"), t).await?;
        *self.git_snapshot.lock().await = Some((meta, listing));
        Ok(())
    }

    /// The object files of the workspace's `.git` as they are now.
    async fn object_listing(&self) -> Result<super::git_state::ObjectListing, HarnessError> {
        let out = self
            .run(
                &format!("cd {} && find .git/objects -type f -printf '%P\\t%s\\t%i\\t%C@\\n'", self.wd()),
                Duration::from_secs(120),
            )
            .await?;
        if !out.success() || out.truncated {
            return Err(HarnessError::Reset(format!(
                "listing .git/objects: {}",
                out.output.chars().take(500).collect::<String>()
            )));
        }
        Ok(super::git_state::ObjectListing::parse(&out.output))
    }

    /// Put `.git` back as the snapshot has it (see [`super::git_state`]); `Err` when an object
    /// file changed (the caller recreates the container).
    async fn restore_git(&self) -> Result<(), HarnessError> {
        let snap = self.git_snapshot.lock().await.clone();
        let Some((meta, listing)) = snap else {
            return Err(HarnessError::Reset("no snapshot of .git".into()));
        };
        let t = Duration::from_secs(120);
        let rm = self
            .run(
                &format!("cd {} && find .git -mindepth 1 -maxdepth 1 ! -name objects -exec rm -rf {{}} +", self.wd()),
                t,
            )
            .await?;
        if !rm.success() {
            return Err(HarnessError::Reset(format!("clearing .git: {}", rm.output)));
        }
        let now = self.object_listing().await?;
        let added = listing.added_since(&now).map_err(HarnessError::Reset)?;
        for chunk in added.chunks(200) {
            let files: Vec<String> = chunk
                .iter()
                .map(|p| shell_quote(&format!(".git/objects/{p}")))
                .collect();
            let out = self
                .run(&format!("cd {} && rm -f -- {}", self.wd(), files.join(" ")), t)
                .await?;
            if !out.success() {
                return Err(HarnessError::Reset(format!("removing objects: {}", out.output)));
            }
        }
        self.docker
            .upload_to_container(
                &self.id(),
                Some(UploadToContainerOptions {
                    path: self.convention.workdir.clone(),
                    ..Default::default()
                }),
                bollard::body_full(meta.into()),
            )
            .await
            .map_err(derr("restoring .git"))?;
        Ok(())
    }

    async fn remove(&self) {
        let id = self.id();
        if !id.is_empty() {
            let _ = self
                .docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await;
            if let Ok(mut s) = live().lock() {
                s.remove(&id);
            }
        }
        self._lifeline.lock().await.clear();
    }

    /// A harness command (never the convention's prelude: see [`super::convention`]).
    async fn run(&self, command: &str, timeout: Duration) -> Result<ExecOutput, HarnessError> {
        self.run_as(command, timeout, self.user.as_deref()).await
    }

    /// The workdir, shell-quoted.
    fn wd(&self) -> String {
        shell_quote(&self.convention.workdir)
    }

    /// With an activation prelude: run it once so that an image without it fails at open, with
    /// an infrastructure error naming it.
    async fn check_activation(&self) -> Result<(), HarnessError> {
        if self.convention.activation.is_some() {
            self.run_full("true", Duration::from_secs(120), self.user.as_deref(), None, true)
                .await?;
        }
        Ok(())
    }

    /// Run as `user` (`None`: the image's user).
    async fn run_as(
        &self,
        command: &str,
        timeout: Duration,
        user: Option<&str>,
    ) -> Result<ExecOutput, HarnessError> {
        self.run_full(command, timeout, user, None, false).await
    }

    /// Run as `user` with `input` on the command's stdin; `convention`: a command of the code
    /// under test, run under the image's convention (its prelude: a prelude that fails is an
    /// infrastructure error, the command never ran).
    async fn run_full(
        &self,
        command: &str,
        timeout: Duration,
        user: Option<&str>,
        input: Option<&[u8]>,
        convention: bool,
    ) -> Result<ExecOutput, HarnessError> {
        let gated = convention && self.convention.activation.is_some();
        let wrapped;
        let command = if gated {
            wrapped = self.convention.wrap(command);
            wrapped.as_str()
        } else {
            command
        };
        let mut gate = MarkerGate::new(gated);
        use bollard::exec::{StartExecOptions, StartExecResults};
        use bollard::models::ExecConfig;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let log_path = self.log_dir.join(format!("exec-{n:04}.log"));
        let pidfile = format!("/tmp/.execcritic-exec-{n}.pid");
        let secs = timeout.as_secs().max(1);
        // `timeout` leads its own process group; its pid is recorded so we can kill the group.
        // `timeout` leads its own process group; when the command ends, whatever it left
        // running in that group is killed (as the local sandbox's pid namespace does).
        // A background job's stdin is /dev/null unless redirected: keep ours when there is input.
        let keep_stdin = if input.is_some() { " 0<&0" } else { "" };
        let wrapper = format!(
            "timeout -s KILL {secs} bash -c {}{keep_stdin} & t=$!; echo $t > {pidfile}; wait $t; rc=$?; \
             for i in 1 2 3; do kill -KILL -- -$t 2>/dev/null || break; sleep 0.05; done; exit $rc",
            shell_quote(command)
        );
        let id = self.id();
        let exec = self
            .docker
            .create_exec(
                &id,
                ExecConfig {
                    cmd: Some(vec!["bash".into(), "-c".into(), wrapper]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    attach_stdin: Some(input.is_some()),
                    working_dir: Some(self.convention.workdir.clone()),
                    env: Some(self.exec_env()),
                    user: user.map(str::to_string),
                    ..Default::default()
                },
            )
            .await
            .map_err(derr("creating an exec"))?;
        let start = Instant::now();
        let mut capture =
            Capture::new(self.limits.output_cap, Some(&log_path), self.limits.log_cap)
                .map_err(|e| HarnessError::io(&log_path, e))?;
        let started = self
            .docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(derr("starting an exec"))?;
        let mut killed_by_us = false;
        if let StartExecResults::Attached { mut output, input: mut sink } = started {
            if let Some(data) = input {
                use tokio::io::AsyncWriteExt;
                let _ = sink.write_all(data).await;
                let _ = sink.shutdown().await;
            }
            drop(sink);
            let deadline = tokio::time::Instant::now() + timeout + Duration::from_secs(5);
            loop {
                match tokio::time::timeout_at(deadline, output.next()).await {
                    Ok(Some(Ok(bollard::container::LogOutput::StdOut { message }))) => {
                        capture.push(&gate.stdout(&message))
                    }
                    Ok(Some(Ok(chunk))) => capture.push(&chunk.into_bytes()),
                    Ok(Some(Err(e))) => {
                        return Err(HarnessError::Docker(format!("reading exec output: {e}")))
                    }
                    Ok(None) => break,
                    Err(_) => {
                        killed_by_us = true;
                        break;
                    }
                }
            }
        }
        let duration = start.elapsed();
        let inspect = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(derr("inspecting an exec"))?;
        let code = inspect.exit_code.map(|c| c as i32);
        let timed_out =
            killed_by_us || (code == Some(137) && duration + Duration::from_millis(200) >= timeout);
        if timed_out {
            // Kill every process but the container's init (the lifeline), including any that
            // escaped the process group while forking.
            self.kill_all(&id).await;
        }
        let (activated, held) = gate.finish();
        capture.push(&held);
        let (output, truncated) = capture.finish();
        if !activated {
            let prelude = self.convention.activation.as_deref().unwrap_or_default();
            return Err(HarnessError::SandboxStart(format!(
                "image {}: the activation prelude `{prelude}` failed{}, the command did not run \
                 (does the image follow this convention?): {}",
                self.image,
                if timed_out { " (timed out)" } else { "" },
                output.chars().take(2000).collect::<String>()
            )));
        }
        Ok(ExecOutput {
            exit_code: if timed_out { None } else { code },
            output,
            truncated,
            timed_out,
            duration,
            log_path: Some(log_path),
        })
    }
}

impl DockerSandbox {
    /// Environment of every exec (the task environment's variables included).
    /// The image convention's variables come first: ours (later ones win) keep git's
    /// `safe.directory` for the workdir, whoever owns it, without any config file.
    fn exec_env(&self) -> Vec<String> {
        let mut env: Vec<String> = self.convention_env.clone();
        env.extend([
            "HOME=/tmp".into(),
            "GIT_CONFIG_COUNT=1".into(),
            "GIT_CONFIG_KEY_0=safe.directory".into(),
            "GIT_CONFIG_VALUE_0=*".into(),
        ]);
        let base_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        env.extend(
            self.env
                .variables(base_path)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        env
    }

    /// Kill every process of the container but docker's init and the lifeline: freeze the
    /// container (so a fork bomb cannot outrun us), SIGKILL its processes by host pid, thaw.
    /// Falls back to an in-container kill loop when the daemon's pids are not ours (remote).
    async fn kill_all(&self, id: &str) {
        use bollard::query_parameters::TopOptions;
        let mut host_killed = false;
        if self.docker.pause_container(id).await.is_ok() {
            if let Ok(top) = self
                .docker
                .top_processes(
                    id,
                    Some(TopOptions {
                        ps_args: "-eo pid,args".into(),
                    }),
                )
                .await
            {
                let titles = top.titles.unwrap_or_default();
                let pid_col = titles.iter().position(|t| t == "PID");
                for row in top.processes.unwrap_or_default() {
                    let (Some(pc), Some(cmd)) = (pid_col, row.last()) else {
                        continue;
                    };
                    if cmd.starts_with(LIFELINE) || cmd.contains("docker-init") {
                        continue;
                    }
                    if let Some(pid) = row.get(pc).and_then(|p| p.parse::<i32>().ok()) {
                        host_killed |= nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        )
                        .is_ok();
                    }
                }
            }
            let _ = self.docker.unpause_container(id).await;
        }
        if host_killed {
            // Wait for docker's init to reap the killed processes (they hold pids until then).
            for _ in 0..50 {
                let n = self
                    .docker
                    .top_processes(
                        id,
                        Some(TopOptions {
                            ps_args: "-eo pid,args".into(),
                        }),
                    )
                    .await
                    .map(|t| t.processes.map_or(0, |p| p.len()))
                    .unwrap_or(0);
                if n <= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return;
        }
        use bollard::exec::{StartExecOptions, StartExecResults};
        use bollard::models::ExecConfig;
        let cmd = format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do for p in /proc/[0-9]*; do pid=${{p#/proc/}}; \
             [ \"$pid\" = 1 ] && continue; [ \"$pid\" = $$ ] && continue; \
             case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in {LIFELINE}*) continue;; esac; \
             kill -KILL \"$pid\" 2>/dev/null; done; sleep 0.1; done; true"
        );
        let cfg = ExecConfig {
            cmd: Some(vec!["bash".into(), "-c".into(), cmd]),
            attach_stdout: Some(true),
            // Without capabilities only the commands' own user may signal them.
            user: self.user.clone(),
            ..Default::default()
        };
        let Ok(e) = self.docker.create_exec(id, cfg).await else {
            return;
        };
        if let Ok(StartExecResults::Attached { mut output, .. }) = self
            .docker
            .start_exec(
                &e.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: None,
                }),
            )
            .await
        {
            let _ = tokio::time::timeout(Duration::from_secs(30), async {
                while output.next().await.is_some() {}
            })
            .await;
        }
    }
}

/// Where a docker sandbox receives the guard's files (see [`super::Sandbox::guard_dir`]).
pub const DOCKER_GUARD_DIR: &str = "/tmp/.execcritic-guard";

impl super::Sandbox for DockerSandbox {
    fn exec<'a>(&'a self, command: &'a str, timeout: Duration) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(self.run_full(command, timeout, self.user.as_deref(), None, true))
    }

    fn workdir(&self) -> &str {
        &self.convention.workdir
    }

    fn exec_input<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        input: &'a [u8],
        _ephemeral: bool,
    ) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(self.run_full(command, timeout, self.user.as_deref(), Some(input), true))
    }

    fn identity(&self) -> String {
        format!("docker:{}", self.image)
    }

    fn guard_dir(&self) -> SandboxFuture<'_, String> {
        Box::pin(async move {
            // Uploaded afresh before every guarded run: /tmp is emptied between runs, so nothing
            // a run changes here reaches the next one.
            let dir = DOCKER_GUARD_DIR;
            self.put_file(&format!("{dir}/sitecustomize.py"), crate::harness::guard::SITECUSTOMIZE.as_bytes())
                .await?;
            self.put_file(
                &format!("{dir}/{}", crate::harness::guard::PLANNER_FILE),
                crate::harness::guard::PLANNER.as_bytes(),
            )
            .await?;
            Ok(dir.to_string())
        })
    }

    fn reset(&self) -> SandboxFuture<'_, ()> {
        Box::pin(async move {
            // Nothing of a run survives into the next: its processes (a daemon that left the
            // command's process group too), `.git/` (hooks, config, info/, refs, objects: a git
            // reset restores none of it), the work tree, /tmp and /dev/shm.
            self.kill_all(&self.id()).await;
            let cmd = format!(
                "find /tmp -mindepth 1 -delete && {{ [ ! -d /dev/shm ] || find /dev/shm -mindepth 1 -delete 2>/dev/null || true; }} && {}",
                reset_command(&self.base_commit)
            );
            for _ in 0..2 {
                if self.restore_git().await.is_err() {
                    break;
                }
                if let Ok(out) = self.run(&cmd, Duration::from_secs(120)).await {
                    if out.success() {
                        return Ok(());
                    }
                }
            }
            self.remove().await;
            self.create()
                .await
                .map_err(|e| HarnessError::Reset(format!("reset failed and recreate failed: {e}")))
        })
    }

    fn put_file<'a>(&'a self, path: &'a str, contents: &'a [u8]) -> SandboxFuture<'a, ()> {
        Box::pin(async move {
            let p = Path::new(path);
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                return Err(HarnessError::Other(format!("put_file: bad path {path}")));
            };
            let stage =
                tempfile::tempdir().map_err(|e| HarnessError::io(std::env::temp_dir(), e))?;
            std::fs::write(stage.path().join(name), contents)
                .map_err(|e| HarnessError::io(stage.path(), e))?;
            let tar = tar_dir(stage.path(), self.user.as_deref())?;
            let mk = self
                .run(
                    &format!("mkdir -p {}", shell_quote(&parent.to_string_lossy())),
                    Duration::from_secs(30),
                )
                .await?;
            if !mk.success() {
                return Err(HarnessError::Other(format!("put_file: {}", mk.output)));
            }
            self.docker
                .upload_to_container(
                    &self.id(),
                    Some(UploadToContainerOptions {
                        path: parent.to_string_lossy().into(),
                        ..Default::default()
                    }),
                    bollard::body_full(tar.into()),
                )
                .await
                .map_err(derr("uploading a file"))
        })
    }

    fn base_commit(&self) -> &str {
        &self.base_commit
    }
}

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        let id = self.id();
        if id.is_empty() {
            return;
        }
        if let Ok(mut s) = live().lock() {
            s.remove(&id);
        }
        let host = self.host.clone();
        // Remove on a separate thread with its own runtime (Drop may run inside a runtime).
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    if let Ok(d) = connect_to(host.as_deref()).await {
                        let _ = d
                            .remove_container(
                                &id,
                                Some(RemoveContainerOptions {
                                    force: true,
                                    ..Default::default()
                                }),
                            )
                            .await;
                    }
                });
            }
        })
        .join();
    }
}
