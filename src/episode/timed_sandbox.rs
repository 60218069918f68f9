//! A sandbox wrapper that times the commands run through it, so the Repair controller can split a
//! gate call into the test command's own runtime (harness time) and everything else (controller
//! overhead) without the harness having to report it.

use crate::harness::sandbox::SandboxFuture;
use crate::harness::{ExecOutput, Sandbox};
use std::sync::Mutex;
use std::time::Duration;

/// Delegates to `inner`, recording `(command, duration)` of every `exec`.
pub struct TimedSandbox {
    inner: Box<dyn Sandbox>,
    log: Mutex<Vec<(String, Duration)>>,
}

impl TimedSandbox {
    pub fn new(inner: Box<dyn Sandbox>) -> Self {
        TimedSandbox {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    /// Forget the recorded commands.
    pub fn clear(&self) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Total time of the recorded commands whose text contains `needle`.
    pub fn time_of(&self, needle: &str) -> Duration {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(c, _)| c.contains(needle))
            .map(|(_, d)| *d)
            .sum()
    }
}

impl Sandbox for TimedSandbox {
    fn exec<'a>(&'a self, command: &'a str, timeout: Duration) -> SandboxFuture<'a, ExecOutput> {
        Box::pin(async move {
            let out = self.inner.exec(command, timeout).await?;
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((command.to_string(), out.duration));
            Ok(out)
        })
    }

    fn reset(&self) -> SandboxFuture<'_, ()> {
        self.inner.reset()
    }

    fn put_file<'a>(&'a self, path: &'a str, contents: &'a [u8]) -> SandboxFuture<'a, ()> {
        self.inner.put_file(path, contents)
    }

    fn workdir(&self) -> &str {
        self.inner.workdir()
    }

    fn base_commit(&self) -> &str {
        self.inner.base_commit()
    }
}
