//! The interrupt tests' shared steps: wait until a command spawned with a sandboxed
//! `sleep TOKEN` runs it, signal the command, and wait until the sandboxed process is gone.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The `/proc` directories of the processes whose command line contains `text`.
fn processes_running(text: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| std::fs::read(p.join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(text)))
        .collect()
}

/// A process whose command line contains `text` exists.
pub fn command_running(text: &str) -> bool {
    !processes_running(text).is_empty()
}

/// What the kernel says of each process running `text` (state, parent, namespaced pids and
/// session, cgroups): the evidence a failing interrupt test prints.
fn describe(text: &str) -> String {
    processes_running(text)
        .iter()
        .map(|p| {
            let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
            let keep: Vec<&str> = status
                .lines()
                .filter(|l| ["Name:", "State:", "PPid:", "NSpid:", "NSsid:", "NSpgid:", "Uid:", "SigPnd:", "ShdPnd:"].iter().any(|k| l.starts_with(k)))
                .collect();
            let cgroup = std::fs::read_to_string(p.join("cgroup")).unwrap_or_default();
            let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
            format!("{}: {} | wchan {wchan} | cgroups {}", p.display(), keep.join(" | "), cgroup.replace('\n', " "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Once a process runs `text`, send `signal` to `child` and return its exit status after the
/// process running `text` is gone too (the sandbox's pid namespace takes the kernel a moment).
pub fn signal_while_running(child: &mut Child, text: &str, signal: nix::sys::signal::Signal) -> ExitStatus {
    let start = Instant::now();
    while !command_running(text) {
        assert!(start.elapsed().as_secs() < 60, "{text:?} never started");
        assert!(child.try_wait().unwrap().is_none(), "the command exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    let start = Instant::now();
    while command_running(text) {
        // Generous: the kernel tears a pid namespace down asynchronously, slowly on a loaded host.
        assert!(start.elapsed().as_secs() < 30, "{signal}: the sandboxed command survived:\n{}", describe(text));
        std::thread::sleep(Duration::from_millis(50));
    }
    status
}
