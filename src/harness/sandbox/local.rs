//! The `local` sandbox: bubblewrap. The sandbox root is an empty tmpfs holding only the
//! read-only host ALLOW-LIST of [`super::allowlist`] (system directories, a named subset of
//! `/etc`, the interpreter's prefix), the workspace bound writable at `/testbed`, a private
//! writable `/tmp`, `/dev`, `/proc` and the task's environment at `/env`; nothing else of the
//! host exists inside. Every namespace is unshared (no network), `--die-with-parent`; bubblewrap
//! starts with descriptors 0, 1 and 2 only (every other descriptor of the harness is marked
//! close-on-exec in the child before exec). As root each sandbox runs as its own unprivileged
//! host uid, leased so that it never repeats among live sandboxes ([`super::uid`]), inside its
//! own memory cgroup bounding the whole process tree ([`super::cgroup`]; `RLIMIT_AS` per process
//! where no cgroup can be made), with rlimits on processes and file size (the kernel exempts
//! root from RLIMIT_NPROC, hence the uid). A timeout SIGKILLs bubblewrap's process group; the
//! pid namespace takes every process inside down with it.
//!
//! Ephemeral runs (root only, overlayfs available): the command sees the workspace through an
//! overlay whose upper layer, like its `/tmp`, lives on a private size-limited tmpfs that
//! vanishes with the command's mount namespace: whatever a candidate writes, `.git/` included,
//! is gone for the next run. (`.git/` is deliberately not read-only: a denied write would turn a
//! failing candidate into an infrastructure-looking error instead of its own failure.) The workspace itself is never written, so the
//! next run starts from the clean Base without any `git reset`/`git clean`.

use super::allowlist::{host_entries, sandbox_path, world_reachable, HostEntry};
use super::capture::Capture;
use super::cgroup::{join_in_child, MemoryCgroup};
use super::uid::UidLease;
use super::{
    reset_command, EnvAccess, ExecOutput, SandboxConfig, SandboxFuture, SandboxLimits, ENV_DIR,
    HANDOFF_DIR, WORKDIR,
};
use crate::harness::error::HarnessError;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Fills an empty directory with the repository and returns its Base commit.
pub type Populate = Box<dyn Fn(&Path) -> Result<String, HarnessError> + Send + Sync>;

/// A bubblewrap sandbox over a private host directory.
pub struct LocalSandbox {
    root: tempfile::TempDir,
    base_commit: String,
    uid: Option<u32>,
    /// The lease keeping `uid` unique among live sandboxes (root only).
    _uid_lease: Option<UidLease>,
    /// The sandbox's memory cgroup (root with a writable hierarchy), `None`: RLIMIT_AS only.
    cgroup: Option<MemoryCgroup>,
    limits: SandboxLimits,
    log_dir: PathBuf,
    populate: Populate,
    counter: AtomicU64,
    bwrap: PathBuf,
    /// Root only: (host path, staging path inside the sandbox root) bind-mounted in a private
    /// mount namespace before dropping to the sandbox uid, so bwrap can reach paths whose
    /// parents the sandbox uid may not traverse (e.g. an interpreter under `/root`).
    staged: Vec<(std::ffi::CString, std::ffi::CString)>,
    /// The read-only host allow-list: (entry, host source when staged).
    entries: Vec<(HostEntry, Option<PathBuf>)>,
    /// The task environment and the host path bwrap binds at `/env` (staged as root).
    env: EnvAccess,
    env_src: Option<PathBuf>,
    /// The host path bwrap binds read-only at [`crate::harness::guard::GUARD_DIR`] (staged as root).
    guard_src: PathBuf,
    /// Ephemeral runs' mounts (root with overlayfs only).
    overlay: Option<OverlaySpec>,
    /// The workspace is known to be the clean Base (fresh, or reset since the last write).
    clean: AtomicBool,
    /// The object store as the snapshot of `.git` saw it.
    git_objects: std::sync::Mutex<Option<super::git_state::ObjectListing>>,
}

impl LocalSandbox {
    /// Create a sandbox whose workspace is filled by `populate`.
    pub fn open(populate: Populate, config: &SandboxConfig) -> Result<Self, HarnessError> {
        let bwrap = find_on_path("bwrap").ok_or(HarnessError::BubblewrapMissing)?;
        let root = tempfile::Builder::new()
            .prefix(&crate::harness::orphans::owned_prefix("sbx"))
            .tempdir()
            .map_err(|e| HarnessError::io(std::env::temp_dir(), e))?;
        // SAFETY: plain syscall.
        let uid_lease = if unsafe { libc::geteuid() } == 0 {
            Some(super::uid::lease()?)
        } else {
            None
        };
        let uid = uid_lease.as_ref().map(UidLease::uid);
        let cgroup = uid.and_then(|_| MemoryCgroup::create(config.limits.memory_bytes));
        let log_dir = match &config.log_dir {
            Some(d) => d.clone(),
            None => root.path().join("logs"),
        };
        std::fs::create_dir_all(&log_dir).map_err(|e| HarnessError::io(&log_dir, e))?;
        let workspace = root.path().join("testbed");
        std::fs::create_dir_all(&workspace).map_err(|e| HarnessError::io(&workspace, e))?;
        let base_commit = populate(&workspace)?;
        let (entries, mut staged) =
            stage_entries(root.path(), uid.is_some(), config.environment.network())?;
        let env_src = match config.environment.host_dir() {
            None => None,
            Some(dir) if uid.is_some() => {
                // The sandbox uid may not traverse the cache's parents (e.g. /root): stage it.
                if matches!(config.environment, EnvAccess::Setup(_)) {
                    chown_tree(dir, uid)?;
                }
                let dst = root.path().join("envbind");
                std::fs::create_dir_all(&dst).map_err(|e| HarnessError::io(&dst, e))?;
                staged.push((cstring(dir)?, cstring(&dst)?));
                Some(dst)
            }
            Some(dir) => Some(dir.to_path_buf()),
        };
        let guard_src = {
            let dir = crate::harness::guard::host_dir()?;
            if uid.is_some() {
                // The sandbox uid may not traverse the temp directory's parents: stage it.
                let dst = root.path().join("guardbind");
                std::fs::create_dir_all(&dst).map_err(|e| HarnessError::io(&dst, e))?;
                staged.push((cstring(dir)?, cstring(&dst)?));
                dst
            } else {
                dir.to_path_buf()
            }
        };
        let sb = LocalSandbox {
            root,
            base_commit,
            uid,
            _uid_lease: uid_lease,
            cgroup,
            limits: config.limits.clone(),
            log_dir,
            populate,
            counter: AtomicU64::new(0),
            bwrap,
            staged,
            entries,
            env: config.environment.clone(),
            env_src,
            guard_src,
            overlay: None,
            clean: AtomicBool::new(true),
            git_objects: std::sync::Mutex::new(None),
        };
        let mut sb = sb;
        if sb.uid.is_some() && !config.no_ephemeral && overlay_supported() {
            let ovl = sb.root.path().join("ovl");
            std::fs::create_dir_all(&ovl).map_err(|e| HarnessError::io(&ovl, e))?;
            let owner = sb.uid.unwrap_or(0);
            sb.overlay = OverlaySpec::new(&ovl, &sb.workspace(), owner, sb.limits.max_file_bytes);
        }
        std::fs::create_dir_all(sb.tmp_dir()).map_err(|e| HarnessError::io(sb.tmp_dir(), e))?;
        sb.snapshot_git()?;
        sb.chown_tree(sb.root.path())?;
        Ok(sb)
    }

    /// The sandbox's memory cgroup, when it has one (see [`super::cgroup`]).
    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(MemoryCgroup::dir)
    }

    /// Host path of the workspace (mounted at `/testbed`).
    pub fn workspace(&self) -> PathBuf {
        self.root.path().join("testbed")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.path().join("tmp")
    }

    /// Where the workspace's `.git` metadata is kept as it was at the start (host side; no
    /// sandbox sees it), so a reset puts back hooks, config, `info/` and refs a run may have
    /// changed; objects are checked against their listing instead of copied.
    fn git_snapshot(&self) -> PathBuf {
        self.root.path().join("git-snapshot")
    }

    /// Keep `.git` as it is now (fail closed: no snapshot, no sandbox).
    fn snapshot_git(&self) -> Result<(), HarnessError> {
        let snap = self.git_snapshot();
        if snap.exists() {
            std::fs::remove_dir_all(&snap).map_err(|e| HarnessError::io(&snap, e))?;
        }
        std::fs::create_dir_all(&snap).map_err(|e| HarnessError::io(&snap, e))?;
        let git = self.workspace().join(".git");
        let objects = super::git_state::ObjectListing::read(&git)?;
        for entry in std::fs::read_dir(&git).map_err(|e| HarnessError::io(&git, e))? {
            let entry = entry.map_err(|e| HarnessError::io(&git, e))?;
            if entry.file_name() != "objects" {
                copy_tree(&entry.path(), &snap.join(entry.file_name()))?;
            }
        }
        *self.git_objects.lock().map_err(|_| HarnessError::Other("poisoned".into()))? = Some(objects);
        Ok(())
    }

    /// Put `.git` back as the snapshot has it: metadata copied back, objects a run added
    /// removed; an object that changed or went missing fails (the caller rebuilds).
    fn restore_git(&self) -> Result<(), HarnessError> {
        let git = self.workspace().join(".git");
        let objects = self
            .git_objects
            .lock()
            .map_err(|_| HarnessError::Other("poisoned".into()))?
            .clone()
            .ok_or_else(|| HarnessError::Reset("no snapshot of .git".into()))?;
        if !git.is_dir() || git.is_symlink() {
            return Err(HarnessError::Reset(".git is gone".into()));
        }
        for entry in std::fs::read_dir(&git).map_err(|e| HarnessError::io(&git, e))? {
            let p = entry.map_err(|e| HarnessError::io(&git, e))?.path();
            if p.file_name().is_some_and(|n| n == "objects") && p.is_dir() && !p.is_symlink() {
                continue;
            }
            let r = if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(|e| HarnessError::io(&p, e))?;
        }
        objects.restore(&git)?;
        let snap = self.git_snapshot();
        for entry in std::fs::read_dir(&snap).map_err(|e| HarnessError::io(&snap, e))? {
            let entry = entry.map_err(|e| HarnessError::io(&snap, e))?;
            copy_tree(&entry.path(), &git.join(entry.file_name()))?;
        }
        self.chown_tree(&git)
    }

    /// (Re)create workspace and /tmp from scratch.
    fn rebuild(&self) -> Result<(), HarnessError> {
        for d in [self.workspace(), self.tmp_dir()] {
            if d.exists() {
                std::fs::remove_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
            }
            std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
        }
        let base = (self.populate)(&self.workspace())?;
        if base != self.base_commit {
            return Err(HarnessError::Reset(format!(
                "recreated workspace is at {base}, expected {}",
                self.base_commit
            )));
        }
        self.snapshot_git()?;
        self.chown_tree(&self.workspace())?;
        self.chown_tree(&self.tmp_dir())?;
        Ok(())
    }

    fn chown_tree(&self, dir: &Path) -> Result<(), HarnessError> {
        chown_tree(dir, self.uid)
    }

    fn handoff_dir(&self) -> PathBuf {
        self.tmp_dir().join(".execcritic")
    }

    fn bwrap_command(&self, command: &str, ephemeral: bool) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bwrap);
        c.env_clear();
        for key in ["LANG", "LC_ALL"] {
            if let Ok(v) = std::env::var(key) {
                c.env(key, v);
            }
        }
        let base_path = sandbox_path();
        c.env("PATH", &base_path)
            .env("HOME", "/tmp")
            .env("TMPDIR", "/tmp")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        for (k, v) in self.env.variables(&base_path) {
            c.env(k, v);
        }
        if self.env.network() {
            // The setup sandbox: every namespace but the network's.
            c.args([
                "--unshare-user-try",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ]);
        } else {
            c.arg("--unshare-all");
        }
        c.args(["--die-with-parent", "--new-session"]);
        // The sandbox root is bwrap's empty tmpfs with the allow-list bound read-only, then
        // remounted read-only.
        for (entry, staged) in &self.entries {
            match entry {
                HostEntry::Symlink { path, target } => c.arg("--symlink").arg(target).arg(path),
                HostEntry::Bind(p) => c.arg("--ro-bind").arg(staged.as_ref().unwrap_or(p)).arg(p),
            };
        }
        c.args(["--dev", "/dev", "--proc", "/proc"]);
        match (&self.overlay, ephemeral) {
            (Some(o), true) => {
                c.arg("--bind").arg(&o.merged_path).arg(WORKDIR);
                c.arg("--bind").arg(&o.tmp_path).arg("/tmp");
                c.arg("--ro-bind").arg(self.handoff_dir()).arg(HANDOFF_DIR);
            }
            _ => {
                c.arg("--bind").arg(self.workspace()).arg(WORKDIR);
                c.arg("--bind").arg(self.tmp_dir()).arg("/tmp");
            }
        }
        if let Some(src) = &self.env_src {
            let how = if self.env.network() {
                "--bind"
            } else {
                "--ro-bind"
            };
            c.arg(how).arg(src).arg(ENV_DIR);
        }
        c.arg("--ro-bind")
            .arg(&self.guard_src)
            .arg(crate::harness::guard::GUARD_DIR);
        c.args([
            "--remount-ro",
            "/",
            "--hostname",
            "sandbox",
            "--chdir",
            WORKDIR,
        ]);
        c.args(["--", "/bin/bash", "-c", command]);
        c
    }

    async fn run(&self, command: &str, timeout: Duration) -> Result<ExecOutput, HarnessError> {
        self.clean.store(false, Ordering::SeqCst);
        self.run_with(command, timeout, false, None).await
    }

    /// Ephemeral run: reset first only if the workspace was written since the last reset.
    async fn run_ephemeral(
        &self,
        command: &str,
        timeout: Duration,
        input: Option<&[u8]>,
    ) -> Result<ExecOutput, HarnessError> {
        if self.overlay.is_some() && !self.clean.load(Ordering::SeqCst) {
            super::Sandbox::reset(self).await?;
        }
        self.run_throwaway(command, timeout, input).await
    }

    /// A run through the overlay of the workspace as it is now (no reset first).
    async fn run_throwaway(
        &self,
        command: &str,
        timeout: Duration,
        input: Option<&[u8]>,
    ) -> Result<ExecOutput, HarnessError> {
        if self.overlay.is_none() {
            return Err(HarnessError::Other(
                "this sandbox has no ephemeral runs".into(),
            ));
        }
        let handoff = self.handoff_dir();
        if !handoff.is_dir() {
            std::fs::create_dir_all(&handoff).map_err(|e| HarnessError::io(&handoff, e))?;
            self.chown_tree(&handoff)?;
        }
        self.run_with(command, timeout, true, input).await
    }

    async fn run_with(
        &self,
        command: &str,
        timeout: Duration,
        ephemeral: bool,
        input: Option<&[u8]>,
    ) -> Result<ExecOutput, HarnessError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let log_path = self.log_dir.join(format!("exec-{n:04}.log"));
        // Close-on-exec: neither end may survive into bubblewrap except as its stdout/stderr.
        let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| HarnessError::SandboxStart(format!("pipe: {e}")))?;
        let wr2 = wr
            .try_clone()
            .map_err(|e| HarnessError::SandboxStart(format!("pipe: {e}")))?;
        let mut cmd = self.bwrap_command(command, ephemeral);
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::from(wr))
            .stderr(Stdio::from(wr2));
        cmd.process_group(0).kill_on_drop(true);
        let mut limits = self.limits.clone();
        let cgroup_fd = self.cgroup.as_ref().map(MemoryCgroup::procs_fd);
        let oom_before = self.cgroup.as_ref().map(MemoryCgroup::oom_kills);
        if self.uid.is_none() {
            // Not root: RLIMIT_NPROC also counts this user's processes outside the sandbox.
            limits.max_procs += user_tasks();
        }
        let uid = self.uid;
        let parent = std::process::id() as libc::pid_t;
        let staged = self.staged.clone();
        let overlay = if ephemeral {
            self.overlay.clone()
        } else {
            None
        };
        // SAFETY: only async-signal-safe syscalls (unshare, mount, write, close_range, fcntl,
        // setrlimit, setgroups, setgid, setuid) on data prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                prepare_mounts(&staged, overlay.as_ref())?;
                if let Some(fd) = cgroup_fd {
                    join_in_child(fd)?;
                }
                cloexec_from(3)?;
                apply_limits(&limits, uid, cgroup_fd.is_none())?;
                die_with_parent(parent)
            });
        }
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| HarnessError::SandboxStart(format!("spawning bwrap: {e}")))?;
        drop(cmd); // close our copies of the pipe's write end
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            // Small (a nonce): fits the pipe buffer, so this never waits on the command.
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(data).await;
            drop(stdin);
        }
        let pgid = child.id().map(|p| p as i32);
        // Until the command has been waited for, its process group is killed when this future
        // is dropped (Ctrl-C, a cancelled episode) and by `kill_live_groups` at exit.
        let mut live = pgid.map(LiveGroup::register);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cap = self.limits.output_cap;
        let log_cap = self.limits.log_cap;
        let log_for_thread = log_path.clone();
        std::thread::spawn(move || {
            let mut capture = match Capture::new(cap, Some(&log_for_thread), log_cap) {
                Ok(c) => c,
                Err(_) => Capture::new(cap, None, 0).expect("no file involved"),
            };
            capture.drain_from(std::fs::File::from(rd));
            let _ = tx.send(capture.finish());
        });
        let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(s) => (
                Some(s.map_err(|e| HarnessError::SandboxStart(format!("waiting: {e}")))?),
                false,
            ),
            Err(_) => {
                if let Some(pg) = pgid {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pg),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill().await;
                (None, true)
            }
        };
        if let Some(l) = live.as_mut() {
            l.finished();
        }
        let duration = start.elapsed();
        let (output, truncated) = match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(Ok(r)) => r,
            _ => {
                return Err(HarnessError::Other(
                    "sandbox output stream did not close after the command ended".into(),
                ))
            }
        };
        if let (Some(cg), Some(before)) = (&self.cgroup, oom_before) {
            let after = cg.oom_kills();
            if after > before {
                return Err(HarnessError::ResourceLimit {
                    resource: "memory".into(),
                    limit: cg.limit(),
                    detail: format!(
                        "the sandbox's memory cgroup killed {} process(es) of `{}`",
                        after - before,
                        command.chars().take(200).collect::<String>()
                    ),
                });
            }
        }
        let exit_code = status.and_then(|s| s.code());
        if exit_code.is_none() && !timed_out {
            return Err(HarnessError::Other(format!(
                "bubblewrap was killed by a signal ({:?}); no result",
                status
            )));
        }
        if !timed_out && exit_code == Some(1) && output.starts_with("bwrap: ") {
            return Err(HarnessError::SandboxStart(output.trim().to_string()));
        }
        Ok(ExecOutput {
            exit_code,
            output,
            truncated,
            timed_out,
            duration,
            log_path: Some(log_path),
        })
    }
}

impl super::Sandbox for LocalSandbox {
    fn exec<'a>(&'a self, command: &'a str, timeout: Duration) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(self.run(command, timeout))
    }

    fn reset(&self) -> SandboxFuture<'_, ()> {
        Box::pin(async move {
            let cmd = reset_command(&self.base_commit);
            for _ in 0..2 {
                // Everything a run may have written: `.git/` (hooks, config, `info/`, refs,
                // objects: a git reset restores none of it), /tmp (a `.gitconfig` in $HOME),
                // then the work tree — in that order, so the reset runs no planted git config.
                if self.restore_git().is_err() || clear_dir(&self.tmp_dir()).is_err() {
                    continue;
                }
                if let Ok(out) = self.run(&cmd, Duration::from_secs(120)).await {
                    if out.success() {
                        clear_dir(&self.tmp_dir())?;
                        self.clean.store(true, Ordering::SeqCst);
                        return Ok(());
                    }
                }
            }
            self.rebuild().map_err(|e| {
                HarnessError::Reset(format!("reset failed and recreate failed: {e}"))
            })?;
            self.clean.store(true, Ordering::SeqCst);
            Ok(())
        })
    }

    fn put_file<'a>(&'a self, path: &'a str, contents: &'a [u8]) -> SandboxFuture<'a, ()> {
        Box::pin(async move {
            let host = self.host_path(path)?;
            if !host.starts_with(self.tmp_dir()) {
                self.clean.store(false, Ordering::SeqCst);
            }
            if let Some(parent) = host.parent() {
                std::fs::create_dir_all(parent).map_err(|e| HarnessError::io(parent, e))?;
                self.chown_tree(parent)?;
            }
            std::fs::write(&host, contents).map_err(|e| HarnessError::io(&host, e))?;
            self.chown_tree(&host)
        })
    }

    fn base_commit(&self) -> &str {
        &self.base_commit
    }

    fn ephemeral_runs(&self) -> bool {
        self.overlay.is_some()
    }

    fn exec_ephemeral<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
    ) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(self.run_ephemeral(command, timeout, None))
    }

    fn exec_over_current<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
    ) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(self.run_throwaway(command, timeout, None))
    }

    fn exec_input<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        input: &'a [u8],
        ephemeral: bool,
    ) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(async move {
            if ephemeral {
                self.run_ephemeral(command, timeout, Some(input)).await
            } else {
                self.clean.store(false, Ordering::SeqCst);
                self.run_with(command, timeout, false, Some(input)).await
            }
        })
    }

    fn guard_dir(&self) -> SandboxFuture<'_, String> {
        Box::pin(async { Ok(crate::harness::guard::GUARD_DIR.to_string()) })
    }
}

impl LocalSandbox {
    /// Map an absolute in-sandbox path under /testbed or /tmp to its host path.
    fn host_path(&self, path: &str) -> Result<PathBuf, HarnessError> {
        let p = Path::new(path);
        let (base, rest) = if let Ok(r) = p.strip_prefix(WORKDIR) {
            (self.workspace(), r)
        } else if let Ok(r) = p.strip_prefix("/tmp") {
            (self.tmp_dir(), r)
        } else {
            return Err(HarnessError::Other(format!(
                "put_file: {path} is outside /testbed and /tmp"
            )));
        };
        if rest
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(HarnessError::Other(format!(
                "put_file: {path} is not a plain path"
            )));
        }
        Ok(base.join(rest))
    }
}

/// Give a tree to the sandbox uid (root only; `None` leaves ownership alone).
pub(crate) fn chown_tree(dir: &Path, uid: Option<u32>) -> Result<(), HarnessError> {
    let Some(uid) = uid else { return Ok(()) };
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.map_err(|e| HarnessError::Other(format!("walking {dir:?}: {e}")))?;
        std::os::unix::fs::lchown(entry.path(), Some(uid), Some(uid))
            .map_err(|e| HarnessError::io(entry.path(), e))?;
    }
    Ok(())
}

/// Copy a directory tree (files, directories, symbolic links, permissions) with `cp -a`.
fn copy_tree(src: &Path, dst: &Path) -> Result<(), HarnessError> {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .output()
        .map_err(|e| HarnessError::io(src, e))?;
    if !out.status.success() {
        return Err(HarnessError::Other(format!(
            "copying {} to {}: {}",
            src.display(),
            dst.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn cstring(p: &Path) -> Result<std::ffi::CString, HarnessError> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| HarnessError::Other(format!("path {} contains a NUL byte", p.display())))
}

fn clear_dir(dir: &Path) -> Result<(), HarnessError> {
    for entry in std::fs::read_dir(dir).map_err(|e| HarnessError::io(dir, e))? {
        let p = entry.map_err(|e| HarnessError::io(dir, e))?.path();
        let r = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(|e| HarnessError::io(&p, e))?;
    }
    Ok(())
}

/// rlimits and the unprivileged uid, applied between fork and exec of bubblewrap.
/// `address_space`: bound each process's address space (only where no memory cgroup bounds the
/// whole tree).
fn apply_limits(
    limits: &SandboxLimits,
    uid: Option<u32>,
    address_space: bool,
) -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    let set = |r, v: u64| setrlimit(r, v, v).map_err(std::io::Error::from);
    if address_space {
        set(Resource::RLIMIT_AS, limits.memory_bytes)?;
    }
    set(Resource::RLIMIT_NPROC, limits.max_procs)?;
    set(Resource::RLIMIT_FSIZE, limits.max_file_bytes)?;
    set(Resource::RLIMIT_CORE, 0)?;
    if let Some(uid) = uid {
        // SAFETY: plain syscalls on integers.
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        unsafe {
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(uid))?;
            check(libc::setuid(uid))?;
        }
    }
    Ok(())
}

/// Root only, between fork and exec of bubblewrap: a private mount namespace with the toolchain
/// directories bind-mounted into the sandbox's own (uid-owned) directory, and for an ephemeral
/// run the overlay of the workspace.
fn prepare_mounts(
    staged: &[(CString, CString)],
    overlay: Option<&OverlaySpec>,
) -> std::io::Result<()> {
    if staged.is_empty() && overlay.is_none() {
        return Ok(());
    }
    // SAFETY: syscalls on NUL-terminated strings prepared before the fork.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        for (src, dst) in staged {
            check(libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
        }
    }
    match overlay {
        Some(o) => o.mount(),
        None => Ok(()),
    }
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The mounts of an ephemeral run: a private tmpfs at `ovl` (size-limited) holding the overlay's
/// upper and work directories and a fresh `/tmp`, and the overlay of the workspace (lower,
/// never written) at `ovl/merged`. Everything vanishes with the run's mount namespace.
#[derive(Clone, Debug)]
struct OverlaySpec {
    ovl: CString,
    tmpfs_opts: CString,
    upper: CString,
    work: CString,
    merged: CString,
    tmp: CString,
    overlay_opts: CString,
    merged_path: PathBuf,
    tmp_path: PathBuf,
    /// Owner of the workspace: the upper layer's root takes it (an overlay directory shows
    /// the upper directory's owner and mode).
    owner: u32,
}

impl OverlaySpec {
    /// `None` when a path cannot be written into mount options (`,` `:` or NUL in it).
    fn new(ovl: &Path, lower: &Path, owner: u32, size: u64) -> Option<Self> {
        let s = |p: &Path| -> Option<String> {
            let t = p.to_str()?;
            (!t.contains([',', ':', '\0'])).then(|| t.to_string())
        };
        let (o, l) = (s(ovl)?, s(lower)?);
        let c = |t: String| CString::new(t).ok();
        Some(OverlaySpec {
            ovl: c(o.clone())?,
            tmpfs_opts: c(format!("size={size},mode=0755"))?,
            upper: c(format!("{o}/upper"))?,
            work: c(format!("{o}/work"))?,
            merged: c(format!("{o}/merged"))?,
            tmp: c(format!("{o}/tmp"))?,
            overlay_opts: c(format!("lowerdir={l},upperdir={o}/upper,workdir={o}/work"))?,
            merged_path: ovl.join("merged"),
            tmp_path: ovl.join("tmp"),
            owner,
        })
    }

    /// In the child, inside its private mount namespace.
    fn mount(&self) -> std::io::Result<()> {
        let flags = libc::MS_NOSUID | libc::MS_NODEV;
        // SAFETY: syscalls on NUL-terminated strings prepared before the fork.
        unsafe {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.ovl.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                self.tmpfs_opts.as_ptr().cast(),
            ))?;
            for d in [&self.upper, &self.work, &self.merged, &self.tmp] {
                check(libc::mkdir(d.as_ptr(), 0o755))?;
            }
            check(libc::chmod(self.tmp.as_ptr(), 0o1777))?;
            check(libc::chown(self.upper.as_ptr(), self.owner, self.owner))?;
            check(libc::mount(
                c"overlay".as_ptr(),
                self.merged.as_ptr(),
                c"overlay".as_ptr(),
                flags,
                self.overlay_opts.as_ptr().cast(),
            ))?;
        }
        Ok(())
    }
}

/// Whether ephemeral runs work here (root, overlayfs over the temp dir's filesystem), probed
/// once per process by a child that mounts an overlay and writes through it. Set
/// `EXECCRITIC_NO_OVERLAY=1` to disable them (every run then resets with git).
fn overlay_supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        std::env::var_os("EXECCRITIC_NO_OVERLAY").is_none_or(|v| v.is_empty() || v == "0")
            && probe_overlay().unwrap_or(false)
    })
}

fn probe_overlay() -> std::io::Result<bool> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::Builder::new()
        .prefix(&crate::harness::orphans::owned_prefix("ovl-probe"))
        .tempdir()?;
    let (lower, ovl) = (dir.path().join("lower"), dir.path().join("ovl"));
    std::fs::create_dir_all(&lower)?;
    std::fs::create_dir_all(&ovl)?;
    std::fs::write(lower.join("f"), "x")?;
    // Like a sandbox: an unprivileged uid owning the workspace writes through the overlay.
    const NOBODY: u32 = 65534;
    std::os::unix::fs::chown(&lower, Some(NOBODY), Some(NOBODY))?;
    let Some(spec) = OverlaySpec::new(&ovl, &lower, NOBODY, 1 << 20) else {
        return Ok(false);
    };
    let merged = spec.merged_path.clone();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("test -f \"$1/f\" && echo y > \"$1/g\"")
        .arg("probe")
        .arg(&merged)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: only syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            prepare_mounts(&[], Some(&spec))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(NOBODY))?;
            check(libc::setuid(NOBODY))
        });
    }
    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
    Ok(ok && !lower.join("g").exists())
}

/// The allow-list of [`super::allowlist`], each entry with its staged host source where the
/// sandbox uid could not reach it (root only: bind-mounted at run time into a directory of the
/// sandbox's own root, see [`prepare_mounts`]).
#[allow(clippy::type_complexity)]
fn stage_entries(
    root: &Path,
    stage: bool,
    setup: bool,
) -> Result<
    (
        Vec<(HostEntry, Option<PathBuf>)>,
        Vec<(std::ffi::CString, std::ffi::CString)>,
    ),
    HarnessError,
> {
    let mut out = Vec::new();
    let mut staged = Vec::new();
    for entry in host_entries(setup) {
        let src = match &entry {
            HostEntry::Bind(p) if stage && !world_reachable(p) => {
                let dst = root.join("hostbind").join(staged.len().to_string());
                if p.is_dir() {
                    std::fs::create_dir_all(&dst).map_err(|e| HarnessError::io(&dst, e))?;
                } else {
                    std::fs::create_dir_all(root.join("hostbind"))
                        .map_err(|e| HarnessError::io(root, e))?;
                    std::fs::write(&dst, b"").map_err(|e| HarnessError::io(&dst, e))?;
                }
                staged.push((cstring(p)?, cstring(&dst)?));
                Some(dst)
            }
            _ => None,
        };
        out.push((entry, src));
    }
    Ok((out, staged))
}

/// Process groups of the bubblewrap commands this process has started and not yet waited for.
static LIVE_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// A running command's process group: registered while it runs; SIGKILLed when dropped before
/// the command was waited for, so no path out of `exec` leaves a sandbox running.
struct LiveGroup {
    pgid: i32,
    done: bool,
}

impl LiveGroup {
    fn register(pgid: i32) -> LiveGroup {
        if let Ok(mut v) = LIVE_GROUPS.lock() {
            v.push(pgid);
        }
        LiveGroup { pgid, done: false }
    }

    fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for LiveGroup {
    fn drop(&mut self) {
        if !self.done {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if let Ok(mut v) = LIVE_GROUPS.lock() {
            v.retain(|g| *g != self.pgid);
        }
    }
}

/// SIGKILL every bubblewrap process group this process started and has not waited for (the
/// CLI's last step on Ctrl-C/SIGTERM, after its runtime is gone). Returns how many there were.
pub fn kill_live_groups() -> usize {
    let groups = LIVE_GROUPS.lock().map(|v| v.clone()).unwrap_or_default();
    for pg in &groups {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(*pg),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    groups.len()
}

/// In the forked child, after the uid change (which clears it): SIGKILL this process when the
/// harness thread that spawned it dies, and refuse to start when the harness is already gone.
/// bubblewrap's own `--die-with-parent` is set only once bubblewrap runs, so a harness that
/// exits (Ctrl-C, SIGTERM) between the fork and that point would otherwise leave an orphaned
/// sandbox running.
fn die_with_parent(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: plain syscalls on integers.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) })?;
    if unsafe { libc::getppid() } != parent {
        return Err(std::io::Error::other("the harness exited before the sandbox started"));
    }
    Ok(())
}

/// Mark every descriptor from `first` on close-on-exec (in the forked child before exec), so
/// bubblewrap — and the sandbox — inherit only stdin, stdout and stderr.
fn cloexec_from(first: u32) -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: plain syscalls on integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // Kernels before 5.11: one fcntl per possible descriptor.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on integers and a stack struct.
    unsafe {
        check(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim))?;
        let max = lim.rlim_cur.min(1 << 20) as libc::c_int;
        for fd in first as libc::c_int..max {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// Number of tasks (threads) the current real uid runs now.
fn user_tasks() -> u64 {
    // SAFETY: plain syscall.
    let me = unsafe { libc::getuid() }.to_string();
    let mut n = 0;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for e in rd.flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let uid_ok = status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(me.as_str()));
        if uid_ok {
            n += status
                .lines()
                .find_map(|l| {
                    l.strip_prefix("Threads:")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .unwrap_or(1);
        }
    }
    n
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
