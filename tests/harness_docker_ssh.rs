//! An `ssh://` docker host for real: an `sshd` on a free loopback port (its own host key and
//! config), a client key held by an `ssh-agent` (`SSH_AUTH_SOCK`), and `connect_to("ssh://root@
//! 127.0.0.1:PORT")` reaching the local daemon through `ssh … docker system dial-stdio`, as the
//! docker CLI does; then a sandbox opened on that host runs a command. An unknown host key and a
//! host key that changed are refused (ssh runs in batch mode), the error quoting ssh. Skipped, saying why, without `sshd`, `ssh-agent`, docker or root. One test in
//! this binary: it sets the process's environment. It leaves nothing in `~/.ssh/known_hosts`
//! (the entry the ssh client adds for the test's port is removed).

mod harness_support;

use execcritic::harness::sandbox::docker::{connect_to, on_host};
use harness_support::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn have(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok().map(|a| a.port())
}

fn keygen(path: &Path) -> bool {
    Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Kills a child process (and waits) when dropped; removes the test's known_hosts entry.
struct Reap(std::process::Child, Option<String>);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if let Some(host) = &self.1 {
            let _ = Command::new("ssh-keygen").args(["-R", host]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_docker_host_runs_a_sandbox() {
    let sshd = "/usr/sbin/sshd";
    if !Path::new(sshd).exists() || !have("ssh-agent") || !have("ssh-add") || unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED an_ssh_docker_host_runs_a_sandbox: needs sshd (openssh-server), ssh-agent and root");
        return;
    }
    if !docker_available().await {
        return;
    }
    let dir = tempfile::Builder::new().prefix("ecssh").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    assert!(keygen(&d.join("host_key")) && keygen(&d.join("id")), "ssh-keygen");
    std::fs::copy(d.join("id.pub"), d.join("authorized_keys")).unwrap();
    let Some(port) = free_port() else {
        eprintln!("SKIPPED an_ssh_docker_host_runs_a_sandbox: no free loopback port");
        return;
    };
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\n",
            d = d.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    let known = format!("[127.0.0.1]:{port}");
    let server = Command::new(sshd).arg("-D").arg("-e").arg("-f").arg(d.join("sshd_config")).stderr(std::fs::File::create(d.join("sshd.log")).unwrap()).spawn().expect("sshd");
    let _server = Reap(server, Some(known.clone()));
    let sock = d.join("agent.sock");
    let agent = Command::new("ssh-agent").arg("-D").arg("-a").arg(&sock).stdout(Stdio::null()).spawn().expect("ssh-agent");
    let _agent = Reap(agent, None);
    for _ in 0..50 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::env::set_var("SSH_AUTH_SOCK", &sock);
    assert!(Command::new("ssh-add").arg("-q").arg(d.join("id")).status().unwrap().success(), "ssh-add");

    let url = format!("ssh://root@127.0.0.1:{port}");
    // An unknown host key: ssh runs in batch mode and refuses, and the error says so.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = match connect_to(Some(&url)).await {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("Host key verification failed"), "{e}\nsshd: {}", std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default());
    // Known: the host key in ~/.ssh/known_hosts (removed again when the test ends).
    let home = std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".ssh");
    std::fs::create_dir_all(&home).unwrap();
    let key = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
    let mut kh = std::fs::OpenOptions::new().create(true).append(true).open(home.join("known_hosts")).unwrap();
    std::io::Write::write_all(&mut kh, format!("{known} {}\n", key.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).as_bytes()).unwrap();
    let mut docker = None;
    let mut last = String::new();
    for _ in 0..30 {
        match connect_to(Some(&url)).await {
            Ok(c) => match c.version().await {
                Ok(_) => {
                    docker = Some(c);
                    break;
                }
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = || std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
    let docker = docker.unwrap_or_else(|| panic!("{url} not reached: {last}\nsshd: {}", log()));
    let image = docker_image();
    assert!(docker.inspect_image(&image).await.is_ok(), "the daemon behind ssh has {image}");

    // A sandbox on that host runs a command (its container is removed through the same host).
    let out = on_host(Some(url.clone()), async {
        let sb = docker_sandbox(&execcritic::harness::sandbox::SandboxConfig::default()).await;
        sb.exec("echo over-ssh", Duration::from_secs(60)).await
    })
    .await
    .expect("a sandbox over ssh runs a command");
    assert!(out.success() && out.output.contains("over-ssh"), "{out:?}");

    // The server's host key changes: the client refuses the host.
    std::fs::remove_file(d.join("host_key")).unwrap();
    std::fs::remove_file(d.join("host_key.pub")).unwrap();
    assert!(keygen(&d.join("host_key")));
    drop(_server);
    let server = Command::new(sshd).arg("-D").arg("-e").arg("-f").arg(d.join("sshd_config")).stderr(Stdio::null()).spawn().expect("sshd");
    let _server = Reap(server, Some(known));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = match connect_to(Some(&url)).await {
        Ok(c) => c.version().await.err().map(|e| e.to_string()).unwrap_or_default(),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("Host key verification failed") || e.contains("REMOTE HOST IDENTIFICATION HAS CHANGED"), "a changed host key is refused: {e}");
}
