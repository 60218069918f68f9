//! A TLS docker host for real: a CA, a server and a client certificate made with `openssl`, a
//! second `dockerd` listening on a loopback port with `--tlsverify`, and `connect_to` reaching it
//! through `tcp://` + `DOCKER_TLS_VERIFY` and through `https://` with `DOCKER_CERT_PATH`; plain
//! http to it fails, and a missing certificate file is named. Skipped, saying why, without
//! `dockerd` or `openssl`. One test in this binary: it sets the process's environment.

#[path = "common/tls.rs"]
mod tls;

use execcritic::harness::sandbox::docker::connect_to;
use std::time::Duration;
use tls::{make_certs, TlsDaemon};

#[tokio::test]
async fn a_tls_docker_host_is_reached_with_client_certificates() {
    let daemon = match TlsDaemon::start() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("SKIPPED a_tls_docker_host_is_reached_with_client_certificates: {why}");
            return;
        }
    };
    let d = daemon.dir.path();
    let certs = daemon.certs();
    let tcp = daemon.tcp();
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
    let https = daemon.https();
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
