//! The local sandbox's view of the host: an explicit ALLOW-LIST of read-only host paths, and
//! nothing else. The sandbox root is an empty tmpfs; onto it go
//!
//! - the system directories a shell, git and an interpreter need: `/usr` and the top-level
//!   `/bin`, `/sbin`, `/lib*` (symlinks into `/usr` recreated as symlinks);
//! - a named subset of `/etc` ([`ETC_FILES`]: the dynamic loader's configuration, user and group
//!   names, name-service and TLS configuration, locale and time zone, alternatives, the python
//!   configuration) — never the rest (`shadow`, `ssh/`, package-manager credentials, …);
//! - the prefix of the host's `python3` (e.g. `~/.pyenv/versions/3.11.7`), found once per
//!   process by asking the interpreter itself ([`python_prefixes`]); its `bin/` leads the
//!   sandbox's `PATH` ([`sandbox_path`]), so version-manager shims and their state are not needed.
//!
//! - the sysroot of the host's Rust toolchain (`rustc --print sysroot`, e.g. a rustup toolchain
//!   directory holding `cargo` and `rustc`; [`rust_sysroot`]), its `bin/` on the `PATH`, for
//!   repositories built with cargo. Nothing of `~/.cargo` (registry, credentials) comes with it.
//!
//! The sandbox itself adds the workspace at `/testbed`, a private `/tmp`, `/dev`, `/proc` and
//! the task's environment at `/env`. Everything else of the host — task files and bundles, other
//! workspaces, the project checkout, home directories, the host's `/tmp`, `/var`, `/opt`, `/srv`,
//! `/mnt` — does not exist inside.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Top-level system entries bound read-only when they exist (symlinks recreated as symlinks).
pub const SYSTEM_ENTRIES: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Entries of `/etc` bound read-only when they exist. Everything else of `/etc` is absent.
pub const ETC_FILES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "alpine-release",
    "redhat-release",
    "os-release",
    "lsb-release",
    "environment",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.conf",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "passwd",
    "pki",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "shells",
    "ssl",
    "terminfo",
    "timezone",
];

/// Extra `/etc` entries of the network-enabled setup sandbox only (package-index configuration).
pub const SETUP_ETC_FILES: &[&str] = &["pip.conf"];

/// `PATH` fallback inside the sandbox (after the environment's and the interpreter's `bin/`).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One read-only host entry of the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostEntry {
    /// Bind the host path at the same path inside.
    Bind(PathBuf),
    /// Recreate a symlink (`path` → `target`).
    Symlink { path: PathBuf, target: PathBuf },
}

impl HostEntry {
    pub fn path(&self) -> &Path {
        match self {
            HostEntry::Bind(p) => p,
            HostEntry::Symlink { path, .. } => path,
        }
    }
}

/// The allow-list for a sandbox (`setup`: the network-enabled environment setup sandbox).
/// Python prefixes are listed after the system entries; ones already inside `/usr` are omitted.
pub fn host_entries(setup: bool) -> Vec<HostEntry> {
    let mut out = Vec::new();
    let entry = |p: PathBuf| -> Option<HostEntry> {
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&p).ok()?;
            Some(HostEntry::Symlink { path: p, target })
        } else {
            Some(HostEntry::Bind(p))
        }
    };
    for e in SYSTEM_ENTRIES {
        out.extend(entry(PathBuf::from(e)));
    }
    let etc = ETC_FILES
        .iter()
        .chain(setup.then_some(SETUP_ETC_FILES).into_iter().flatten());
    for name in etc {
        out.extend(entry(Path::new("/etc").join(name)));
    }
    for prefix in python_prefixes().iter().chain(rust_sysroot()) {
        if !covered(&out, prefix) {
            out.push(HostEntry::Bind(prefix.clone()));
        }
    }
    out
}

/// Whether `p` is inside an entry already bound (a bound directory, or a symlink's target).
fn covered(entries: &[HostEntry], p: &Path) -> bool {
    entries.iter().any(|e| match e {
        HostEntry::Bind(b) => p.starts_with(b),
        HostEntry::Symlink { .. } => false,
    })
}

/// `PATH` inside the sandbox: the interpreter's `bin/` directories, then [`SYSTEM_PATH`].
pub fn sandbox_path() -> String {
    let mut parts: Vec<String> = python_prefixes()
        .iter()
        .chain(rust_sysroot())
        .map(|p| p.join("bin"))
        .filter(|b| b.is_dir())
        .filter_map(|b| b.to_str().map(str::to_string))
        .filter(|b| !SYSTEM_PATH.split(':').any(|s| s == b))
        .collect();
    parts.dedup();
    parts.push(SYSTEM_PATH.to_string());
    parts.join(":")
}

/// The canonical `sys.base_prefix` and `sys.prefix` of the host's `python3` (the one on the
/// host's `PATH`, or `$EXECCRITIC_PYTHON`), asked once per process with `python3 -I`. Empty when
/// there is no python (shell-only tasks still run).
pub fn python_prefixes() -> &'static [PathBuf] {
    static PREFIXES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    PREFIXES.get_or_init(|| {
        let python = std::env::var_os("EXECCRITIC_PYTHON")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "python3".into());
        let out = std::process::Command::new(python)
            .args([
                "-I",
                "-c",
                "import sys; print(sys.base_prefix); print(sys.prefix)",
            ])
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        let Ok(out) = out else { return Vec::new() };
        if !out.status.success() {
            return Vec::new();
        }
        let mut v: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('/'))
            .filter_map(|l| std::fs::canonicalize(l).ok())
            .filter(|p| p != Path::new("/"))
            .collect();
        v.dedup();
        v
    })
}

/// The canonical sysroot of the host's Rust toolchain (`rustc` on the host's `PATH`, or
/// `$EXECCRITIC_RUSTC`), asked once per process; `None` without one.
pub fn rust_sysroot() -> Option<&'static PathBuf> {
    static SYSROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    SYSROOT
        .get_or_init(|| {
            let rustc = std::env::var_os("EXECCRITIC_RUSTC")
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "rustc".into());
            let out = std::process::Command::new(rustc)
                .args(["--print", "sysroot"])
                .current_dir("/")
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let p = std::fs::canonicalize(line).ok()?;
            (out.status.success() && p.join("bin").is_dir() && p != Path::new("/")).then_some(p)
        })
        .as_ref()
}

/// Whether every ancestor of `p` lets "other" traverse it (so an unprivileged sandbox uid can
/// reach `p` without the harness staging it first).
pub fn world_reachable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.ancestors().skip(1).all(|a| {
        std::fs::metadata(a)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_has_no_home_checkout_or_host_tmp() {
        let entries = host_entries(false);
        assert!(entries.iter().any(|e| e.path() == Path::new("/usr")));
        let cwd = std::env::current_dir().unwrap();
        for e in &entries {
            let p = e.path();
            assert!(p != Path::new("/") && p != Path::new("/etc"), "{p:?}");
            for forbidden in [Path::new("/tmp"), Path::new("/var"), Path::new("/home")] {
                assert!(!p.starts_with(forbidden), "{p:?}");
            }
            assert!(
                !cwd.starts_with(p),
                "{p:?} would expose the checkout {cwd:?}"
            );
            assert!(!p.ends_with("shadow") && !p.ends_with("pip.conf"), "{p:?}");
        }
        assert!(host_entries(true).len() >= entries.len());
    }

    #[test]
    fn sandbox_path_ends_with_the_system_path() {
        assert!(sandbox_path().ends_with(SYSTEM_PATH));
    }
}
