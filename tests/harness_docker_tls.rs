//! A TLS docker host for real: a CA, a server and a client certificate made with `openssl`, a
//! second `dockerd` listening on a loopback port with `--tlsverify`, and `connect_to` reaching it
//! through `tcp://` + `DOCKER_TLS_VERIFY` and through `https://` with `DOCKER_CERT_PATH`; plain
//! http to it fails, and a missing certificate file is named. Skipped, saying why, without
//! `dockerd` or `openssl`. One test in this binary: it sets the process's environment.

use execcritic::harness::sandbox::docker::connect_to;
use std::path::Path;
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
fn make_certs(dir: &Path) -> bool {
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

/// The TLS daemon, stopped (SIGTERM) when dropped.
struct TlsDaemon(std::process::Child);

impl Drop for TlsDaemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_tls_docker_host_is_reached_with_client_certificates() {
    let which = |p: &str| Command::new("sh").args(["-c", &format!("command -v {p}")]).output().is_ok_and(|o| o.status.success());
    if !which("dockerd") || !which("openssl") || unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED a_tls_docker_host_is_reached_with_client_certificates: needs dockerd, openssl and root");
        return;
    }
    let dir = tempfile::Builder::new().prefix("ectls").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    let certs = d.join("certs");
    std::fs::create_dir(&certs).unwrap();
    if !make_certs(&certs) {
        eprintln!("SKIPPED a_tls_docker_host_is_reached_with_client_certificates: openssl could not make the certificates");
        return;
    }
    let Some(port) = free_port() else {
        eprintln!("SKIPPED a_tls_docker_host_is_reached_with_client_certificates: no free loopback port");
        return;
    };
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
        .stdout(std::fs::File::create(d.join("log")).unwrap())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        eprintln!("SKIPPED a_tls_docker_host_is_reached_with_client_certificates: dockerd did not start");
        return;
    };
    let _daemon = TlsDaemon(child);
    let tcp = format!("tcp://127.0.0.1:{port}");
    std::env::set_var("DOCKER_CERT_PATH", &certs);
    std::env::set_var("DOCKER_TLS_VERIFY", "1");
    let mut docker = None;
    for _ in 0..60 {
        if let Ok(c) = connect_to(Some(&tcp)).await {
            docker = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let Some(docker) = docker else {
        let e = connect_to(Some(&tcp)).await.err().map(|e| e.to_string()).unwrap_or_default();
        panic!("the TLS daemon on {tcp} was not reached in 60 s: {e}");
    };
    let images = docker.list_images(None::<bollard::query_parameters::ListImagesOptions>).await.unwrap();
    assert!(images.is_empty(), "a fresh daemon has no image: {images:?}");
    let info = docker.info().await.unwrap();
    assert!(info.id.is_some());

    // https:// needs no DOCKER_TLS_VERIFY.
    std::env::remove_var("DOCKER_TLS_VERIFY");
    let https = format!("https://127.0.0.1:{port}");
    let d2 = connect_to(Some(&https)).await.expect("https:// with DOCKER_CERT_PATH");
    assert!(d2.list_images(None::<bollard::query_parameters::ListImagesOptions>).await.is_ok());
    // Plain http to a TLS daemon does not connect.
    assert!(connect_to(Some(&tcp)).await.is_err());

    // Without the client key: an error naming the file, before any connection.
    std::fs::remove_file(certs.join("key.pem")).unwrap();
    let e = connect_to(Some(&https)).await.err().expect("no key, no client").to_string();
    assert!(e.contains(&format!("{}/key.pem is missing", certs.display())), "{e}");
    // A client certificate the daemon's CA did not sign is refused by the daemon.
    let other = d.join("other");
    std::fs::create_dir(&other).unwrap();
    assert!(make_certs(&other));
    std::fs::copy(certs.join("ca.pem"), other.join("ca.pem")).unwrap();
    std::env::set_var("DOCKER_CERT_PATH", &other);
    assert!(connect_to(Some(&https)).await.is_err(), "a client certificate from another CA is refused");
    std::env::remove_var("DOCKER_CERT_PATH");
}
