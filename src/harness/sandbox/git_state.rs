//! Fresh `.git` state between runs. A run can write anything under `.git/` that a `git reset`
//! keeps: hooks and config (`core.fsmonitor`, filters) that later git commands of the harness
//! execute, `info/attributes` and `info/exclude`, refs, loose objects, even pack files. Before
//! the first run a sandbox keeps its metadata (everything but `objects/`, small) and a listing of
//! its object files; a reset copies the metadata back, removes object files a run added, and
//! fails (the caller rebuilds the sandbox) when an object file changed or disappeared — the
//! kernel's change time and inode number show any write, and no process can set them.

use crate::harness::error::HarnessError;
use std::collections::BTreeMap;
use std::path::Path;

/// Every file under `.git/objects`: path → (size, inode, change time in ns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectListing {
    files: BTreeMap<String, (u64, u64, i128)>,
}

impl ObjectListing {
    /// List a host repository's object files.
    pub fn read(git: &Path) -> Result<ObjectListing, HarnessError> {
        use std::os::unix::fs::MetadataExt;
        let root = git.join("objects");
        let mut files = BTreeMap::new();
        if !root.is_dir() {
            return Ok(ObjectListing { files });
        }
        for entry in walkdir::WalkDir::new(&root) {
            let entry =
                entry.map_err(|e| HarnessError::Other(format!("listing {}: {e}", root.display())))?;
            if entry.file_type().is_dir() {
                continue;
            }
            let md = entry
                .path()
                .symlink_metadata()
                .map_err(|e| HarnessError::io(entry.path(), e))?;
            let rel = entry
                .path()
                .strip_prefix(&root)
                .unwrap_or(entry.path())
                .to_string_lossy()
                .into_owned();
            let ctime = md.ctime() as i128 * 1_000_000_000 + md.ctime_nsec() as i128;
            files.insert(rel, (md.size(), md.ino(), ctime));
        }
        Ok(ObjectListing { files })
    }

    /// Parse the in-container listing `find .git/objects -type f -printf '%P\t%s\t%i\t%C@\n'`.
    pub fn parse(text: &str) -> ObjectListing {
        let mut files = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 4 {
                continue;
            }
            let ctime = f[3]
                .split_once('.')
                .map(|(s, ns)| {
                    let s: i128 = s.parse().unwrap_or(0);
                    let ns: String = ns.chars().chain(std::iter::repeat('0')).take(9).collect();
                    s * 1_000_000_000 + ns.parse::<i128>().unwrap_or(0)
                })
                .unwrap_or_else(|| f[3].parse::<i128>().unwrap_or(0) * 1_000_000_000);
            files.insert(
                f[0].to_string(),
                (f[1].parse().unwrap_or(0), f[2].parse().unwrap_or(0), ctime),
            );
        }
        ObjectListing { files }
    }

    /// Compare with the listing now: the files a run added (to remove), or `Err` naming a file
    /// that changed or disappeared.
    pub fn added_since(&self, now: &ObjectListing) -> Result<Vec<String>, String> {
        for (path, meta) in &self.files {
            match now.files.get(path) {
                Some(m) if m == meta => {}
                Some(_) => return Err(format!("object file {path} was rewritten")),
                None => return Err(format!("object file {path} was removed")),
            }
        }
        Ok(now
            .files
            .keys()
            .filter(|p| !self.files.contains_key(*p))
            .cloned()
            .collect())
    }

    /// Remove what a run added to a host repository's objects; `Err` when it changed any.
    pub fn restore(&self, git: &Path) -> Result<(), HarnessError> {
        let now = ObjectListing::read(git)?;
        let added = self
            .added_since(&now)
            .map_err(|why| HarnessError::Reset(format!("{why} since the sandbox started")))?;
        for p in added {
            let f = git.join("objects").join(&p);
            std::fs::remove_file(&f).map_err(|e| HarnessError::io(&f, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_objects_are_removed_and_rewritten_ones_fail() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("objects/ab")).unwrap();
        std::fs::write(git.join("objects/ab/cdef"), "x").unwrap();
        let snap = ObjectListing::read(&git).unwrap();
        std::fs::create_dir_all(git.join("objects/12")).unwrap();
        std::fs::write(git.join("objects/12/3456"), "new").unwrap();
        snap.restore(&git).unwrap();
        assert!(!git.join("objects/12/3456").exists());
        assert!(git.join("objects/ab/cdef").exists());
        // A rewrite in place changes the change time, whatever the content.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(git.join("objects/ab/cdef"), "x").unwrap();
        assert!(snap.restore(&git).is_err());
    }

    #[test]
    fn find_listing_parses() {
        let l = ObjectListing::parse("pack/p.pack\t10\t77\t1700000000.5\nab/cd\t3\t78\t1700000001.123456789\n");
        assert_eq!(l.files["pack/p.pack"], (10, 77, 1_700_000_000_500_000_000));
        assert_eq!(l.files["ab/cd"].2, 1_700_000_001_123_456_789);
    }
}
