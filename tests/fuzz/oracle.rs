//! A long-lived Python process as a differential oracle: a script that reads one JSON value per
//! line on stdin and answers one JSON line (`["ok", value]` or `["err", message]`) per query, so
//! that a target pays Python's start-up once, not per input.

use serde_json::Value as J;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

pub struct Oracle {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The preamble every oracle script starts with: `serve(answer)` runs the query loop.
const PRELUDE: &str = r#"
import sys, json
def serve(answer):
    for line in sys.stdin:
        try:
            out = ["ok", answer(json.loads(line))]
        except Exception as e:
            out = ["err", f"{type(e).__name__}: {e}"]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
"#;

impl Oracle {
    /// `python3 -c PRELUDE+script args…`, or `None` with a note (the target then skips) where
    /// `python3` cannot import `module`.
    pub fn start(target: &str, module: &str, script: &str, args: &[&str]) -> Option<Mutex<Oracle>> {
        let has = Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has {
            eprintln!("skipping {target}: python3 cannot import {module}");
            return None;
        }
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(format!("{PRELUDE}{script}"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = BufReader::new(child.stdout.take()?);
        Some(Mutex::new(Oracle { _child: child, stdin, stdout }))
    }

    /// One query; `None` when the process died.
    pub fn ask(&mut self, query: &J) -> Option<J> {
        self.ask_within(query, None)
    }

    /// One query; `None` when the process died or, with a `limit`, did not answer within it
    /// (the process is then of no further use: drop it, which kills it).
    pub fn ask_within(&mut self, query: &J, limit: Option<std::time::Duration>) -> Option<J> {
        use std::os::fd::AsRawFd;
        writeln!(self.stdin, "{query}").ok()?;
        if let Some(limit) = limit.filter(|_| self.stdout.buffer().is_empty()) {
            let mut fd = libc::pollfd { fd: self.stdout.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = limit.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            if unsafe { libc::poll(&mut fd, 1, ms) } <= 0 {
                return None;
            }
        }
        let mut line = String::new();
        self.stdout.read_line(&mut line).ok()?;
        serde_json::from_str(&line).ok()
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self._child.kill();
        let _ = self._child.wait();
    }
}

/// `ask`, with a dead process as a test failure.
pub fn ask(oracle: &Mutex<Oracle>, query: &J) -> Result<J, proptest::test_runner::TestCaseError> {
    oracle
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .ask(query)
        .ok_or_else(|| proptest::test_runner::TestCaseError::fail("the Python oracle died"))
}
