//! A total memory limit per local sandbox: one memory cgroup per sandbox, joined by every
//! command it runs, so the WHOLE process tree of the sandbox (not each process alone, as
//! `RLIMIT_AS` does) is bounded by `SandboxLimits::memory_bytes`, swap included where the kernel
//! accounts it. When the limit is hit the kernel's OOM killer ends a process of the sandbox; the
//! sandbox sees the cgroup's OOM-kill counter rise and reports
//! [`HarnessError::ResourceLimit`](crate::harness::HarnessError::ResourceLimit) — an
//! infrastructure signal, never a behavioural verdict.
//!
//! cgroup v2 (`memory.max`, `memory.swap.max`, `memory.events`) is used where the `memory`
//! controller is enabled for our cgroup's children, else cgroup v1 (`memory.limit_in_bytes`,
//! `memory.memsw.limit_in_bytes`, `memory.oom_control`). Creating a cgroup needs write access to
//! the hierarchy (root, usually); where neither works the sandbox falls back to the per-process
//! `RLIMIT_AS` alone ([`MemoryCgroup::create`] returns `None`, and
//! [`MemoryCgroup::unavailable_reason`] says why).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A sandbox's memory cgroup; removed on drop.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
    /// `cgroup.procs`, opened (close-on-exec) before any fork so a child joins with one write.
    procs: std::fs::File,
    limit: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl MemoryCgroup {
    /// A fresh cgroup limited to `limit` bytes, or `None` when no writable memory hierarchy
    /// exists (see [`MemoryCgroup::unavailable_reason`]).
    pub fn create(limit: u64) -> Option<Self> {
        let (parent, version) = parent_dir()?;
        sweep_stale(&parent);
        let name = format!(
            "execcritic-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        let cg = || -> std::io::Result<MemoryCgroup> {
            match version {
                Version::V2 => {
                    write(&dir.join("memory.max"), limit)?;
                    // Swap would let the tree exceed the limit unnoticed.
                    let _ = write(&dir.join("memory.swap.max"), 0);
                }
                Version::V1 => {
                    write(&dir.join("memory.limit_in_bytes"), limit)?;
                    let _ = write(&dir.join("memory.memsw.limit_in_bytes"), limit);
                }
            }
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            Ok(MemoryCgroup {
                dir: dir.clone(),
                version,
                procs,
                limit,
            })
        };
        match cg() {
            Ok(c) => Some(c),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Why [`MemoryCgroup::create`] cannot work on this host (`None`: it can).
    pub fn unavailable_reason() -> Option<String> {
        match parent_dir() {
            None => Some(
                "no writable cgroup memory controller (v2 with `memory` in the parent's \
                 subtree_control, or v1 at /sys/fs/cgroup/memory): the sandbox's memory is \
                 bounded per process by RLIMIT_AS only"
                    .into(),
            ),
            Some(_) => None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Descriptor of `cgroup.procs` for [`join_in_child`].
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// How many times the kernel's OOM killer ended a process of this cgroup so far.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|v| v.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }
}

impl MemoryCgroup {
    /// SIGKILL every process in the cgroup: the whole sandbox tree, whatever its process
    /// groups, sessions or pid namespaces (a sandboxed command that calls `setsid`, or a pid
    /// namespace whose init is slow to go, is not out of reach). cgroup v2's `cgroup.kill`
    /// where the kernel has it, else one signal per listed pid, repeated until the list is
    /// empty or stops changing (a process forked between reading and killing is caught on
    /// the next pass).
    pub fn kill_all(&self) {
        if self.version == Version::V2 && write(&self.dir.join("cgroup.kill"), 1).is_ok() {
            return;
        }
        for _ in 0..20 {
            let Ok(text) = std::fs::read_to_string(self.dir.join("cgroup.procs")) else {
                return;
            };
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Normally the sandbox's pid namespace is gone with its last command; where a command
        // is still running (the sandbox dropped mid-command: Ctrl-C, a cancelled episode) its
        // whole tree is killed first. A cgroup with no process left can be removed (a few
        // tries: the kernel frees exiting tasks asynchronously).
        self.kill_all();
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Remove the cgroups of sandboxes whose process is gone (killed before its destructors ran):
/// `execcritic-<pid>-<n>` with no live `<pid>`. Their processes died with the pid namespace, so
/// the directories are empty and `rmdir` succeeds; one still busy is left alone.
pub fn sweep_stale(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("execcritic-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// The parent directory of sandbox cgroups on this host (`None`: no writable hierarchy).
pub fn parent() -> Option<PathBuf> {
    parent_dir().map(|(p, _)| p)
}

/// In a forked child before exec: move the calling process into the cgroup whose `cgroup.procs`
/// is open at `fd`. Only async-signal-safe calls (getpid, write) on a stack buffer.
pub fn join_in_child(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: plain syscalls on a stack buffer.
    let pid = unsafe { libc::getpid() } as u64;
    let mut buf = [0u8; 24];
    let mut i = buf.len();
    let mut n = pid;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &buf[i..];
    let rc = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    if rc == digits.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write(path: &Path, value: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.to_string().as_bytes())
}

/// The directory under which sandbox cgroups are created, and its hierarchy's version.
fn parent_dir() -> Option<(PathBuf, Version)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // cgroup v2: "0::/path", with the memory controller delegated to children.
    let v2_root = Path::new("/sys/fs/cgroup");
    if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        let dir = v2_root.join(rel.trim_start_matches('/'));
        let controls = std::fs::read_to_string(dir.join("cgroup.subtree_control")).ok();
        if controls.is_some_and(|c| c.split_whitespace().any(|w| w == "memory")) && writable(&dir) {
            return Some((dir, Version::V2));
        }
    }
    // cgroup v1: "N:memory:/path" under /sys/fs/cgroup/memory.
    let rel = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
    (dir.join("memory.limit_in_bytes").is_file() && writable(&dir)).then_some((dir, Version::V1))
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: plain syscall on a NUL-terminated string.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}
