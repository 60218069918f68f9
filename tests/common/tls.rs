//! A second `dockerd` that only speaks TLS, for the tests of TLS docker hosts: a CA, a server and
//! a client certificate made with `openssl`, the daemon on a free loopback port with
//! `--tlsverify` and its own data root, stopped (SIGTERM) when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `ca.pem`, `server-{cert,key}.pem` (for 127.0.0.1) and the client's `cert.pem`/`key.pem`.
pub fn make_certs(dir: &Path) -> bool {
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").is_ok()
        && std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").is_ok()
        && openssl(dir, &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", "/CN=execcritic-test-ca"])
        && openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1"])
        && openssl(dir, &["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-out", "server-cert.pem", "-days", "2", "-extfile", "server.ext"])
        && openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "client.csr", "-subj", "/CN=client"])
        && openssl(dir, &["x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-out", "cert.pem", "-days", "2", "-extfile", "client.ext"])
}

/// A free loopback port (bound, then released).
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok().map(|a| a.port())
}

fn have(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

/// The TLS daemon.
pub struct TlsDaemon {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: std::process::Child,
}

impl TlsDaemon {
    /// Start it (not yet waited for: see [`TlsDaemon::wait_ready`]); `Err` says why it cannot
    /// run here (a reason to skip).
    pub fn start() -> Result<TlsDaemon, String> {
        if !have("dockerd") || !have("openssl") || unsafe { libc::geteuid() } != 0 {
            return Err("needs dockerd, openssl and root".into());
        }
        let dir = tempfile::Builder::new().prefix("ectls").tempdir_in("/tmp").map_err(|e| e.to_string())?;
        let d = dir.path();
        std::fs::create_dir(d.join("certs")).map_err(|e| e.to_string())?;
        if !make_certs(&d.join("certs")) {
            return Err("openssl could not make the certificates".into());
        }
        let port = free_port().ok_or("no free loopback port")?;
        let certs = d.join("certs");
        let child = Command::new("dockerd")
            .arg("--host")
            .arg(format!("tcp://127.0.0.1:{port}"))
            .arg("--tlsverify")
            .arg("--tlscacert")
            .arg(certs.join("ca.pem"))
            .arg("--tlscert")
            .arg(certs.join("server-cert.pem"))
            .arg("--tlskey")
            .arg(certs.join("server-key.pem"))
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("d.pid"))
            .args(["--iptables=false", "--bridge=none"])
            .stdout(std::fs::File::create(d.join("log")).map_err(|e| e.to_string())?)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("dockerd did not start: {e}"))?;
        Ok(TlsDaemon { dir, port, child })
    }

    /// The client certificates (`DOCKER_CERT_PATH`).
    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    pub fn tcp(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    pub fn https(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The docker CLI talking to this daemon with the client certificates.
    pub fn cli(&self) -> Command {
        let mut c = Command::new("docker");
        c.arg("-H").arg(self.tcp()).env("DOCKER_TLS_VERIFY", "1").env("DOCKER_CERT_PATH", self.certs());
        c
    }

    /// Whether the daemon answered `docker info` within `secs` seconds.
    pub fn wait_ready(&self, secs: u64) -> bool {
        for _ in 0..secs {
            if self.cli().arg("info").output().is_ok_and(|o| o.status.success()) {
                return true;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        false
    }
}

impl Drop for TlsDaemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
