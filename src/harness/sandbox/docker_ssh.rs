//! `ssh://[user@]host[:port]` docker hosts, reached as the docker CLI reaches them: every
//! connection runs `ssh … docker system dial-stdio` on the host and speaks the Docker API through
//! that process's stdin and stdout. We give the client a private unix socket (in a fresh
//! temporary directory) and bridge each connection accepted on it to its own `ssh` process; the
//! API client then connects to that socket like to a local daemon.
//!
//! The `ssh` client is the system's (its configuration, agent, keys and known hosts), run with
//! `BatchMode=yes` so that it never prompts; its last error message is kept and appended to the
//! error of a request that could not reach the daemon. (bollard's own ssh transport drops the
//! port of `ssh://user@host:port`: it hands `user@host:port` to ssh as a host name.)
//!
//! One bridge per URL for the life of the process, served by its own thread.

use crate::harness::error::HarnessError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A running bridge: its socket and the last thing `ssh` said on stderr.
#[derive(Clone)]
struct Bridge {
    socket: PathBuf,
    last_error: Arc<Mutex<String>>,
}

fn bridges() -> &'static Mutex<HashMap<String, Bridge>> {
    static BRIDGES: OnceLock<Mutex<HashMap<String, Bridge>>> = OnceLock::new();
    BRIDGES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `ssh` arguments for `url` (`ssh://[user@]host[:port]`), before the remote command.
pub fn ssh_args(url: &str) -> Result<Vec<String>, HarnessError> {
    let bad = |why: &str| HarnessError::Docker(format!("docker host {url:?}: {why} (expected ssh://[user@]host[:port])"));
    let rest = url.strip_prefix("ssh://").ok_or_else(|| bad("not an ssh:// URL"))?;
    if rest.contains('/') || rest.contains('?') || rest.contains('#') {
        return Err(bad("a path, query or fragment is not supported"));
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let p: u16 = p.parse().map_err(|_| bad("the port is not a number"))?;
            (h.trim_start_matches('[').trim_end_matches(']'), Some(p))
        }
        _ => (hostport, None),
    };
    let shell_safe = |s: &str| !s.is_empty() && !s.starts_with('-') && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-:%".contains(c));
    if !shell_safe(host) || user.is_some_and(|u| !shell_safe(u)) {
        return Err(bad("the user or host holds characters ssh would not read as a name"));
    }
    let mut args = vec!["-o".to_string(), "BatchMode=yes".to_string(), "-T".to_string()];
    if let Some(u) = user {
        args.extend(["-l".to_string(), u.to_string()]);
    }
    if let Some(p) = port {
        args.extend(["-p".to_string(), p.to_string()]);
    }
    args.extend(["--".to_string(), host.to_string()]);
    Ok(args)
}

/// The local socket that reaches `url`'s daemon (started on first use).
pub fn socket_for(url: &str) -> Result<PathBuf, HarnessError> {
    let mut map = bridges().lock().map_err(|_| HarnessError::Other("poisoned".into()))?;
    if let Some(b) = map.get(url) {
        return Ok(b.socket.clone());
    }
    let args = ssh_args(url)?;
    let dir = tempfile::Builder::new()
        .prefix("execcritic-ssh")
        .tempdir()
        .map_err(|e| HarnessError::Docker(format!("a directory for the ssh bridge to {url}: {e}")))?
        .keep();
    let socket = dir.join("docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| HarnessError::Docker(format!("the ssh bridge's socket {}: {e}", socket.display())))?;
    let bridge = Bridge {
        socket: socket.clone(),
        last_error: Arc::new(Mutex::new(String::new())),
    };
    let last_error = bridge.last_error.clone();
    std::thread::Builder::new()
        .name("docker-ssh".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(serve(listener, args, last_error));
        })
        .map_err(|e| HarnessError::Docker(format!("starting the ssh bridge to {url}: {e}")))?;
    map.insert(url.to_string(), bridge);
    Ok(socket)
}

/// What `ssh` last said on stderr for `url` (empty when nothing, or no bridge).
pub fn last_error(url: &str) -> String {
    bridges()
        .lock()
        .ok()
        .and_then(|m| m.get(url).and_then(|b| b.last_error.lock().ok().map(|e| e.clone())))
        .unwrap_or_default()
}

async fn serve(listener: std::os::unix::net::UnixListener, args: Vec<String>, last_error: Arc<Mutex<String>>) {
    let Ok(listener) = tokio::net::UnixListener::from_std(listener) else {
        return;
    };
    while let Ok((conn, _)) = listener.accept().await {
        tokio::spawn(pipe(conn, args.clone(), last_error.clone()));
    }
}

/// One connection through its own `ssh … docker system dial-stdio`.
async fn pipe(conn: tokio::net::UnixStream, args: Vec<String>, last_error: Arc<Mutex<String>>) {
    let child = tokio::process::Command::new("ssh")
        .args(&args)
        .args(["docker", "system", "dial-stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            if let Ok(mut l) = last_error.lock() {
                *l = format!("ssh could not start: {e}");
            }
            return;
        }
    };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
        return;
    };
    let (mut rd, mut wr) = conn.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut rd, &mut stdin).await;
        let _ = stdin.shutdown().await;
    };
    // What ssh said is recorded before the client sees the connection close, so that the
    // request's error can quote it.
    let down = async {
        let err = async {
            // At most 4 KiB of what ssh says is kept.
            let mut buf = Vec::new();
            let _ = (&mut stderr).take(4096).read_to_end(&mut buf).await;
            buf
        };
        let (_, said) = tokio::join!(tokio::io::copy(&mut stdout, &mut wr), err);
        let status = child.wait().await;
        let said = String::from_utf8_lossy(&said).trim().to_string();
        if !said.is_empty() || status.is_ok_and(|s| !s.success()) {
            if let Ok(mut l) = last_error.lock() {
                *l = if said.is_empty() { "ssh exited with an error".into() } else { said };
            }
        }
        let _ = wr.shutdown().await;
    };
    tokio::join!(up, down);
}

#[cfg(test)]
mod tests {
    use super::ssh_args;

    #[test]
    fn urls_become_ssh_arguments() {
        assert_eq!(
            ssh_args("ssh://me@box:2222").unwrap(),
            ["-o", "BatchMode=yes", "-T", "-l", "me", "-p", "2222", "--", "box"]
        );
        assert_eq!(ssh_args("ssh://box").unwrap(), ["-o", "BatchMode=yes", "-T", "--", "box"]);
        assert_eq!(ssh_args("ssh://[::1]:22").unwrap()[3..], ["-p", "22", "--", "::1"]);
        for bad in ["ssh://-oProxyCommand=x", "ssh://box/path", "ssh://me@box:port", "ssh://a b", "tcp://box", "ssh://"] {
            assert!(ssh_args(bad).is_err(), "{bad}");
        }
    }
}
