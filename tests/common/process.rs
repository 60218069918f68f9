//! The interrupt tests' shared steps: wait until a command spawned with a sandboxed
//! `sleep TOKEN` runs it, signal the command, and wait until the sandboxed process is gone.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A process whose command line contains `text` exists.
pub fn command_running(text: &str) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(text))
    })
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
        assert!(start.elapsed().as_secs() < 10, "{signal}: the sandboxed command survived");
        std::thread::sleep(Duration::from_millis(50));
    }
    status
}
