//! Docker hosts beyond the local socket: parsing `URL[=N]` (a daemon and how many instances may
//! run on it at once), connecting to it (`unix://`, `tcp://`/`http://`, TLS with `https://` or
//! `tcp://` plus `DOCKER_TLS_VERIFY`, `ssh://`), and the pool that spreads work over several
//! hosts without exceeding any host's capacity.
//!
//! TLS follows the docker CLI: the client certificate, its key and the CA that signed the
//! daemon's certificate are `ca.pem`, `cert.pem` and `key.pem` in `DOCKER_CERT_PATH` (default
//! `~/.docker`); a missing one is an error naming it. `ssh://[user@]host[:port]` runs the `ssh`
//! client (its own configuration and agent) and `docker system dial-stdio` on the host, one
//! process per connection (see [`super::docker_ssh`]).

use crate::harness::error::HarnessError;
use bollard::Docker;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Seconds a request to a daemon may take.
const TIMEOUT_S: u64 = 120;

/// One docker daemon and its capacity (`--docker-host URL[=N]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerHost {
    /// `unix:///path`, `tcp://host:port`, `http://…`, `https://…` or `ssh://[user@]host[:port]`.
    pub url: String,
    /// Instances at once on this host (`None`: no limit beyond the run's `--workers`).
    pub capacity: Option<usize>,
}

/// How a URL reaches its daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Http,
    Tls,
    Ssh,
}

impl Transport {
    /// The transport of `url`; `tcp://` is TLS when `tls_verify` (the `DOCKER_TLS_VERIFY` rule).
    pub fn of(url: &str, tls_verify: bool) -> Result<Transport, HarnessError> {
        let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
        match scheme {
            "unix" => Ok(Transport::Unix),
            "tcp" if tls_verify => Ok(Transport::Tls),
            "tcp" | "http" => Ok(Transport::Http),
            "https" => Ok(Transport::Tls),
            "ssh" => Ok(Transport::Ssh),
            _ => Err(HarnessError::Docker(format!(
                "unsupported docker host {url:?}: the URL must start with unix://, tcp://, http://, https:// or ssh://"
            ))),
        }
    }
}

impl std::str::FromStr for DockerHost {
    type Err = String;

    /// `URL` or `URL=N` (N ≥ 1 concurrent instances on that host).
    fn from_str(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        let (url, capacity) = match spec.rsplit_once('=') {
            Some((url, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let n: usize = n
                    .parse()
                    .map_err(|_| format!("docker host {spec:?}: capacity {n} is too large"))?;
                if n == 0 {
                    return Err(format!("docker host {spec:?}: capacity must be at least 1"));
                }
                (url, Some(n))
            }
            Some((_, n)) if !spec.contains("://") || n.is_empty() => {
                return Err(format!(
                    "docker host {spec:?}: expected URL or URL=N with N a number of instances"
                ))
            }
            _ => (spec, None),
        };
        Transport::of(url, false).map_err(|e| e.to_string())?;
        if url.split_once("://").is_none_or(|(_, rest)| rest.is_empty()) {
            return Err(format!("docker host {spec:?}: no address after the scheme"));
        }
        Ok(DockerHost {
            url: url.to_string(),
            capacity,
        })
    }
}

impl std::fmt::Display for DockerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.capacity {
            Some(n) => write!(f, "{}={n}", self.url),
            None => f.write_str(&self.url),
        }
    }
}

/// Whether `DOCKER_TLS_VERIFY` asks for TLS (set, non-empty, not `0`).
fn tls_verify_env() -> bool {
    std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The client certificate files for TLS: `(ca, cert, key)` in `DOCKER_CERT_PATH` (default
/// `~/.docker`); `Err` names the first one missing.
pub fn tls_files() -> Result<(PathBuf, PathBuf, PathBuf), HarnessError> {
    let dir = match std::env::var_os("DOCKER_CERT_PATH").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").ok_or_else(|| {
                HarnessError::Docker("TLS docker host: neither DOCKER_CERT_PATH nor HOME is set".into())
            })?;
            PathBuf::from(home).join(".docker")
        }
    };
    let file = |name: &str| -> Result<PathBuf, HarnessError> {
        let p = dir.join(name);
        if p.is_file() {
            Ok(p)
        } else {
            Err(HarnessError::Docker(format!(
                "TLS docker host: {} is missing (DOCKER_CERT_PATH must hold ca.pem, cert.pem and key.pem)",
                p.display()
            )))
        }
    };
    Ok((file("ca.pem")?, file("cert.pem")?, file("key.pem")?))
}

/// A client for `url` (no request made yet).
pub fn client(url: &str) -> Result<Docker, HarnessError> {
    let what = format!("connecting to the docker daemon {url}");
    let version = bollard::API_DEFAULT_VERSION;
    let d = match Transport::of(url, tls_verify_env())? {
        Transport::Unix => Docker::connect_with_unix(url, TIMEOUT_S, version),
        Transport::Http => Docker::connect_with_http(url, TIMEOUT_S, version),
        Transport::Tls => {
            let (ca, cert, key) = tls_files()?;
            Docker::connect_with_ssl(url, &key, &cert, &ca, TIMEOUT_S, version)
        }
        Transport::Ssh => {
            let socket = super::docker_ssh::socket_for(url)?;
            Docker::connect_with_unix(&format!("unix://{}", socket.display()), TIMEOUT_S, version)
        }
    };
    d.map_err(|e| HarnessError::Docker(format!("{what}: {e}")))
}

/// Connect to `host` (`None`: `DOCKER_HOST` — TLS when `DOCKER_TLS_VERIFY` — or the local
/// socket) and negotiate the API version.
pub async fn connect(host: Option<&str>) -> Result<Docker, HarnessError> {
    let from_env = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let url = host.map(str::to_string).or(from_env);
    let d = match &url {
        Some(u) => client(u)?,
        None => Docker::connect_with_defaults()
            .map_err(|e| HarnessError::Docker(format!("connecting to the local docker daemon: {e}")))?,
    };
    let name = url.as_deref().unwrap_or("(local socket)");
    d.negotiate_version().await.map_err(|e| {
        let ssh = url
            .as_deref()
            .filter(|u| u.starts_with("ssh://"))
            .map(super::docker_ssh::last_error)
            .filter(|said| !said.is_empty())
            .map(|said| format!("; ssh said: {said}"))
            .unwrap_or_default();
        HarnessError::Docker(format!("docker daemon {name} not reachable (is dockerd running?): {e}{ssh}"))
    })
}

/// Hosts with capacities; [`HostPool::acquire`] hands out a slot on the least busy host with
/// room (ties in turn, round robin), waiting while every host is full.
#[derive(Debug)]
pub struct HostPool {
    hosts: Vec<DockerHost>,
    /// Slots in use per host, and the host whose turn it is among equally busy ones.
    busy: Mutex<(Vec<usize>, usize)>,
    freed: tokio::sync::Notify,
}

/// A held slot on one host; dropping it frees the slot.
#[derive(Debug)]
pub struct HostSlot {
    pool: Arc<HostPool>,
    index: usize,
}

impl HostSlot {
    /// The host's URL.
    pub fn url(&self) -> &str {
        &self.pool.hosts[self.index].url
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        if let Ok(mut busy) = self.pool.busy.lock() {
            busy.0[self.index] -= 1;
        }
        self.pool.freed.notify_waiters();
    }
}

impl HostPool {
    /// A pool over `hosts` (`None` when there are none: the default daemon, no limit).
    pub fn new(hosts: &[DockerHost]) -> Option<Arc<HostPool>> {
        (!hosts.is_empty()).then(|| {
            Arc::new(HostPool {
                hosts: hosts.to_vec(),
                busy: Mutex::new((vec![0; hosts.len()], 0)),
                freed: tokio::sync::Notify::new(),
            })
        })
    }

    /// The host with room and the fewest busy slots (the next in turn among those), taken.
    fn try_take(self: &Arc<Self>) -> Option<HostSlot> {
        let mut guard = self.busy.lock().ok()?;
        let (busy, next) = &mut *guard;
        let n = self.hosts.len();
        let index = (0..n)
            .filter(|&i| self.hosts[i].capacity.is_none_or(|c| busy[i] < c))
            .min_by_key(|&i| (busy[i], (i + n - *next) % n))?;
        busy[index] += 1;
        *next = (index + 1) % n;
        Some(HostSlot {
            pool: self.clone(),
            index,
        })
    }

    /// A slot on some host, waiting until one has room.
    pub async fn acquire(self: &Arc<Self>) -> HostSlot {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.try_take() {
                return slot;
            }
            freed.await;
        }
    }

    /// Slots in use per host, in order (for tests and progress).
    pub fn busy(&self) -> Vec<usize> {
        self.busy.lock().map(|b| b.0.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Result<DockerHost, String> {
        s.parse()
    }

    #[test]
    fn urls_and_capacities_parse() {
        assert_eq!(
            host("tcp://10.0.0.2:2376=4").unwrap(),
            DockerHost { url: "tcp://10.0.0.2:2376".into(), capacity: Some(4) }
        );
        assert_eq!(
            host("unix:///var/run/docker.sock").unwrap(),
            DockerHost { url: "unix:///var/run/docker.sock".into(), capacity: None }
        );
        assert_eq!(host("ssh://me@box:22=2").unwrap().capacity, Some(2));
        assert_eq!(host("https://d.example:2376").unwrap().url, "https://d.example:2376");
        assert_eq!(host("tcp://h:2375=3").unwrap().to_string(), "tcp://h:2375=3");
    }

    #[test]
    fn bad_hosts_are_named() {
        let e = host("tcp://h:2375=0").unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        let e = host("ftp://h:21").unwrap_err();
        assert!(e.contains("unsupported docker host \"ftp://h:21\""), "{e}");
        assert!(host("h:2375").unwrap_err().contains("unsupported"));
        assert!(host("tcp://h:2375=").unwrap_err().contains("URL=N"));
        assert!(host("tcp://").unwrap_err().contains("no address"));
        assert!(host("tcp://h=99999999999999999999999").unwrap_err().contains("too large"));
    }

    #[test]
    fn transports() {
        assert_eq!(Transport::of("tcp://h:1", false).unwrap(), Transport::Http);
        assert_eq!(Transport::of("tcp://h:1", true).unwrap(), Transport::Tls);
        assert_eq!(Transport::of("https://h:1", false).unwrap(), Transport::Tls);
        assert_eq!(Transport::of("ssh://h", false).unwrap(), Transport::Ssh);
        assert_eq!(Transport::of("unix:///s", true).unwrap(), Transport::Unix);
    }

    #[test]
    fn a_missing_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "x").unwrap();
        // Only this test touches DOCKER_CERT_PATH in the library's tests.
        std::env::set_var("DOCKER_CERT_PATH", dir.path());
        let e = client("https://127.0.0.1:1").err().unwrap().to_string();
        std::env::remove_var("DOCKER_CERT_PATH");
        assert!(e.contains(&format!("{}/cert.pem is missing", dir.path().display())), "{e}");
    }

    #[tokio::test]
    async fn the_pool_never_exceeds_a_hosts_capacity() {
        let hosts: Vec<DockerHost> =
            vec![host("tcp://a:1=2").unwrap(), host("tcp://b:1=1").unwrap()];
        let pool = HostPool::new(&hosts).unwrap();
        let s1 = pool.acquire().await;
        let s2 = pool.acquire().await;
        let s3 = pool.acquire().await;
        let mut urls = vec![s1.url().to_string(), s2.url().to_string(), s3.url().to_string()];
        urls.sort();
        assert_eq!(urls, ["tcp://a:1", "tcp://a:1", "tcp://b:1"]);
        assert_eq!(pool.busy(), [2, 1]);
        // Full: the fourth waits until a slot is freed, then takes that host.
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.acquire().await.url().to_string() });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        let freed = s3.url().to_string();
        drop(s3);
        assert_eq!(waiter.await.unwrap(), freed);
        drop((s1, s2));
        assert_eq!(pool.busy(), [0, 0]);
        assert!(HostPool::new(&[]).is_none());
    }

    #[tokio::test]
    async fn unlimited_hosts_share_work_evenly() {
        let hosts: Vec<DockerHost> = vec![host("tcp://a:1").unwrap(), host("tcp://b:1").unwrap()];
        let pool = HostPool::new(&hosts).unwrap();
        let slots: Vec<HostSlot> = futures_util::future::join_all((0..4).map(|_| pool.acquire())).await;
        assert_eq!(pool.busy(), [2, 2]);
        drop(slots);
        // One at a time, hosts take turns.
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(pool.acquire().await.url().to_string());
        }
        assert_eq!(seen, ["tcp://a:1", "tcp://b:1", "tcp://a:1"]);
    }
}
