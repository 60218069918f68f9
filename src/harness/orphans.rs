//! Sandbox directories left behind by a harness that died without running its destructors
//! (SIGKILL, power loss): every sandbox root is created under the temp dir with a name that
//! carries its owner — `execcritic-sbx-o<pid>_<start time>-XXXXXX` — and [`sweep`] removes the
//! ones whose owner is no longer running. The process start time (from `/proc/<pid>/stat`)
//! tells a reused pid from the original owner, so a live run's directories are never touched.
//!
//! A clean exit (including Ctrl-C and SIGTERM, which the CLI turns into an orderly shutdown)
//! removes its own directories; the sweep only cleans up after the ones that could not.

use std::path::Path;
use std::sync::OnceLock;

/// Every directory the harness owns under the temp dir starts with this.
const FAMILY: &str = "execcritic-";

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain spaces or parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// This process's owner tag, `o<pid>_<start time>`.
fn own_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!("o{pid}_{}", start_time(pid).unwrap_or(0))
    })
}

/// The temp-dir prefix for a directory of `kind` owned by this process, e.g.
/// `owned_prefix("sbx")` = `execcritic-sbx-o4242_181818-`.
pub fn owned_prefix(kind: &str) -> String {
    format!("{FAMILY}{kind}-{}-", own_tag())
}

/// The (pid, start time) an entry name's owner tag names, if it has one.
fn owner_of(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(FAMILY)?;
    rest.split('-').find_map(|part| {
        let (pid, start) = part.strip_prefix('o')?.split_once('_')?;
        Some((pid.parse().ok()?, start.parse().ok()?))
    })
}

/// Whether the process that created an entry named `name` is gone (`false` for names without
/// an owner tag: those are not ours to remove).
fn orphaned(name: &str) -> bool {
    match owner_of(name) {
        None => false,
        Some((pid, start)) => start_time(pid) != Some(start),
    }
}

/// Remove the orphaned sandbox directories under `dir`; returns how many were removed.
pub fn sweep_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !orphaned(&name) {
            continue;
        }
        let path = e.path();
        let gone = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed += 1,
            Err(err) => tracing::warn!("cannot remove the orphaned {}: {err}", path.display()),
        }
    }
    removed
}

/// Remove the orphaned sandbox directories under the temp dir (see the module doc).
pub fn sweep() -> usize {
    sweep_in(&std::env::temp_dir())
}

/// Remove this process's own sandbox directories under `dir`, for a command that has dropped
/// all of its sandboxes: a destructor's removal can lose a race with a sandboxed process that
/// was still writing while it was being killed, so this retries for up to `patience`.
/// Returns how many entries are left.
pub fn remove_own_in(dir: &Path, patience: std::time::Duration) -> usize {
    let start = std::time::Instant::now();
    loop {
        let mut left = 0;
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(FAMILY) || !name.split('-').any(|p| p == own_tag()) {
                continue;
            }
            if std::fs::remove_dir_all(e.path()).is_err() && e.path().exists() {
                left += 1;
            }
        }
        if left == 0 || start.elapsed() >= patience {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`remove_own_in`] the temp dir.
pub fn remove_own(patience: std::time::Duration) -> usize {
    remove_own_in(&std::env::temp_dir(), patience)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_prefix_names_this_process_as_alive() {
        let p = owned_prefix("sbx");
        assert!(p.starts_with("execcritic-sbx-o"));
        let (pid, _) = owner_of(&format!("{p}AbC123")).unwrap();
        assert_eq!(pid, std::process::id());
        assert!(!orphaned(&format!("{p}AbC123")));
    }

    #[test]
    fn sweeps_only_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join(format!("{}x", owned_prefix("sbx")));
        // pid 1 exists but with another start time (a reused pid): its entry is an orphan; so is
        // one of a pid that cannot exist.
        let other_start = start_time(1).map_or(1, |t| t + 1);
        let reused = dir
            .path()
            .join(format!("execcritic-sbx-o1_{other_start}-abc"));
        let dead = dir
            .path()
            .join(format!("execcritic-sbx-o{}_5-abc", u32::MAX));
        let foreign = dir.path().join("execcritic-fixture-12");
        let other = dir.path().join("unrelated-o7_7-x");
        for d in [&mine, &reused, &dead, &foreign, &other] {
            std::fs::create_dir_all(d.join("testbed/.git")).unwrap();
        }
        std::fs::write(dead.join("testbed/file"), "x").unwrap();
        assert_eq!(sweep_in(dir.path()), 2);
        assert!(mine.exists() && foreign.exists() && other.exists());
        assert!(!reused.exists() && !dead.exists());
        // At the end of a command its own directories go too; nobody else's.
        assert_eq!(remove_own_in(dir.path(), std::time::Duration::ZERO), 0);
        assert!(!mine.exists() && foreign.exists() && other.exists());
    }
}
