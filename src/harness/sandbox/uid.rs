//! Sandbox uids: every live local sandbox runs as its own unprivileged host uid (so the process
//! limit binds per sandbox and no sandbox can signal or read another's processes or files).
//! A uid is leased by holding an exclusive `flock` on `/run/lock/execcritic-uids/<uid>.lock`
//! (a host-wide directory, so processes with different `TMPDIR`s still see each other's leases;
//! the temp directory only where `/run/lock` is missing or not writable): the
//! lease is unique among ALL live sandboxes of every process on the host, is released when the
//! [`UidLease`] is dropped, and is released by the kernel when its process dies (even by
//! SIGKILL), so a crashed run never leaks uids.

use crate::harness::error::HarnessError;
use std::path::PathBuf;

/// First uid handed to sandboxes (far above the uids of real accounts).
pub const FIRST_UID: u32 = 200_000;
/// Number of uids in the pool (at most this many live sandboxes on one host).
pub const POOL_SIZE: u32 = 100_000;

/// An exclusive lease on one sandbox uid, held until dropped.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl UidLease {
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// Directory of the lease lock files: host-wide, not per `TMPDIR`.
fn lease_dir() -> PathBuf {
    let host_wide = std::path::Path::new("/run/lock");
    if nix::unistd::access(host_wide, nix::unistd::AccessFlags::W_OK).is_ok() {
        host_wide.join("execcritic-uids")
    } else {
        std::env::temp_dir().join("execcritic-uids")
    }
}

/// Lease the first free uid of the pool, starting the scan at a per-process offset so that
/// concurrent processes rarely contend for the same lock files.
pub fn lease() -> Result<UidLease, HarnessError> {
    let dir = lease_dir();
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(&dir, e))?;
    let start = (std::process::id() % 1000) * (POOL_SIZE / 1000);
    for i in 0..POOL_SIZE {
        let uid = FIRST_UID + (start + i) % POOL_SIZE;
        let path = dir.join(format!("{uid}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| HarnessError::io(&path, e))?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(UidLease { uid, _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(HarnessError::io(&path, std::io::Error::from(e))),
        }
    }
    Err(HarnessError::SandboxStart(format!(
        "all {POOL_SIZE} sandbox uids are in use"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn live_leases_are_distinct_and_released_on_drop() {
        let leases: Vec<UidLease> = (0..300).map(|_| lease().unwrap()).collect();
        let uids: HashSet<u32> = leases.iter().map(UidLease::uid).collect();
        assert_eq!(uids.len(), leases.len(), "a uid was leased twice");
        let first = leases[0].uid();
        drop(leases);
        // Every lock was released: the same scan finds the first uid free again.
        let again = lease().unwrap();
        assert_eq!(again.uid(), first);
    }
}
