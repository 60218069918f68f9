//! Adapter: a harness sandbox as the agent's shell.

use crate::agent::{Shell, ShellError, ShellOutput};
use crate::harness::Sandbox;
use crate::policy::BoxFuture;
use std::time::Duration;

/// The agent's bash tool runs in this sandbox.
pub struct SandboxShell<'a>(pub &'a dyn Sandbox);

impl Shell for SandboxShell<'_> {
    fn run<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
        Box::pin(async move {
            let out = self
                .0
                .exec(command, timeout)
                .await
                .map_err(|e| ShellError(e.to_string()))?;
            Ok(ShellOutput {
                exit_code: out.exit_code,
                output: out.output,
                truncated: out.truncated,
                timed_out: out.timed_out,
                duration: out.duration,
            })
        })
    }
}

/// Bytes read per command when copying a file out of a sandbox (hex-encoded by `od`, the output
/// stays well under the sandbox's output cap).
const READ_CHUNK: usize = 16 * 1024;

/// Read a file from inside the sandbox, losslessly and regardless of the output cap.
/// `Ok(None)` when it does not exist (or is not a regular file).
pub async fn read_sandbox_file(
    sandbox: &dyn Sandbox,
    path: &str,
) -> Result<Option<Vec<u8>>, crate::harness::HarnessError> {
    let quoted = crate::harness::sandbox::shell_quote(path);
    let t = Duration::from_secs(60);
    let probe = sandbox
        .exec(&format!("test -f {quoted} && echo present"), t)
        .await?;
    if probe.output.trim() != "present" {
        return Ok(None);
    }
    let mut data = Vec::new();
    loop {
        let cmd = format!(
            "tail -c +{} {quoted} | head -c {READ_CHUNK} | od -An -v -tx1",
            data.len() + 1
        );
        let out = sandbox.exec(&cmd, t).await?;
        if !out.success() || out.truncated {
            return Err(crate::harness::HarnessError::Other(format!(
                "reading {path} from the sandbox failed: {}",
                out.output.chars().take(300).collect::<String>()
            )));
        }
        let hex: String = out.output.split_whitespace().collect();
        let chunk = hex::decode(&hex).map_err(|e| {
            crate::harness::HarnessError::Other(format!("reading {path}: bad od output: {e}"))
        })?;
        let n = chunk.len();
        data.extend(chunk);
        if n < READ_CHUNK {
            return Ok(Some(data));
        }
    }
}
