//! Task suites shipped with execcritic. The bundled default suite (three small Python projects
//! written for this repository, embedded in the binary), the PyPI suite (a published sdist,
//! fetched at set-up by `scripts/fetch-pypi-suite.sh`, with bug-introducing patches written here)
//! the crates suite (published Rust crates from crates.io, fetched by
//! `scripts/fetch-crates-suite.sh`, same scheme) and the golang suite (Go libraries as Debian's
//! golang-*-dev packages ship them, fetched by `scripts/fetch-golang-suite.sh`) are built into git
//! repositories under the cache directory on first use.

pub mod builder;
pub mod cache;
pub mod spec;

use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir};
use sha2::{Digest, Sha256};

use crate::task::error::TaskError;

pub use builder::build_suite;
pub use cache::cache_dir;

static BUNDLED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/suites/bundled");
static PYPI: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/suites/pypi");
static EASY: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/suites/easy");
static CRATES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/suites/crates");
static GOLANG: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tests/fixtures/suites/golang");

/// A suite built from pinned upstream releases: its spec, where its fetch script leaves the
/// archives (`<cache>/<sources>/<name>-<version>.<ext>`) and their unpacked trees
/// (`<name>-<version>/`), and the script.
struct Fetched {
    spec: &'static Dir<'static>,
    sources: &'static str,
    ext: &'static str,
    script: &'static str,
}

static PYPI_SUITE: Fetched = Fetched { spec: &PYPI, sources: "pypi", ext: "tar.gz", script: "scripts/fetch-pypi-suite.sh" };
static CRATES_SUITE: Fetched = Fetched { spec: &CRATES, sources: "crates", ext: "crate", script: "scripts/fetch-crates-suite.sh" };
static GOLANG_SUITE: Fetched = Fetched { spec: &GOLANG, sources: "golang", ext: "deb", script: "scripts/fetch-golang-suite.sh" };

/// The bundled default suite: builds (once) and returns the path of its `tasks.jsonl`.
pub fn bundled_suite() -> Result<PathBuf, TaskError> {
    bundled_suite_in(&cache_dir())
}

/// [`bundled_suite`] with an explicit cache directory.
pub fn bundled_suite_in(cache: &Path) -> Result<PathBuf, TaskError> {
    embedded_suite_in(&BUNDLED, "bundled", cache)
}

/// The easy suite (`scripts/make_easy_suite.py`: one tiny project, one-line bugs of two
/// families, real pytest tests) that `execcritic demo train` trains a small model on: builds
/// (once) and returns the path of its `tasks.jsonl`.
pub fn easy_suite() -> Result<PathBuf, TaskError> {
    embedded_suite_in(&EASY, "easy", &cache_dir())
}

/// Build (once per content hash) a suite embedded in the binary without upstream sources.
fn embedded_suite_in(dir: &'static Dir<'static>, name: &str, cache: &Path) -> Result<PathBuf, TaskError> {
    let mut hash = cache::ContentHash::new(name);
    for (path, bytes) in embedded_files(dir) {
        hash.add(&path, bytes);
    }
    let key = format!("{name}-{}", hash.hex16());
    cache::get_or_build(&cache.join("suites"), &key, |out| {
        let spec = extract(dir)?;
        build_suite(spec.path(), None, out)
    })
}

/// Where `scripts/fetch-pypi-suite.sh` puts sdists (`<name>-<version>.tar.gz`) and their
/// unpacked trees (`<name>-<version>/`).
pub fn pypi_source_dir(cache: &Path) -> PathBuf {
    cache.join("pypi")
}

/// The PyPI suite: needs its pinned sdist fetched (and sha256-verified) by
/// `scripts/fetch-pypi-suite.sh`; otherwise [`TaskError::SuiteNotFetched`].
pub fn pypi_suite() -> Result<PathBuf, TaskError> {
    pypi_suite_in(&cache_dir())
}

/// [`pypi_suite`] with an explicit cache directory.
pub fn pypi_suite_in(cache: &Path) -> Result<PathBuf, TaskError> {
    fetched_suite_in(&PYPI_SUITE, cache)
}

/// The crates suite (Rust crates as published on crates.io, run by `cargo test` under the
/// native guard): needs its pinned `.crate` archives fetched (and sha256-verified) by
/// `scripts/fetch-crates-suite.sh`; otherwise [`TaskError::SuiteNotFetched`].
pub fn crates_suite() -> Result<PathBuf, TaskError> {
    crates_suite_in(&cache_dir())
}

/// [`crates_suite`] with an explicit cache directory.
pub fn crates_suite_in(cache: &Path) -> Result<PathBuf, TaskError> {
    fetched_suite_in(&CRATES_SUITE, cache)
}

/// The golang suite (Go libraries as Debian packages them, run by `go test` under the native
/// guard): needs its pinned `.deb` archives fetched (and sha256-verified) by
/// `scripts/fetch-golang-suite.sh`; otherwise [`TaskError::SuiteNotFetched`].
pub fn golang_suite() -> Result<PathBuf, TaskError> {
    golang_suite_in(&cache_dir())
}

/// [`golang_suite`] with an explicit cache directory.
pub fn golang_suite_in(cache: &Path) -> Result<PathBuf, TaskError> {
    fetched_suite_in(&GOLANG_SUITE, cache)
}

/// Build (once per content hash of the spec and the verified upstream trees) a suite whose
/// projects start from fetched releases.
fn fetched_suite_in(f: &Fetched, cache: &Path) -> Result<PathBuf, TaskError> {
    let spec = extract(f.spec)?;
    let suite: spec::SuiteSpec = spec::read_toml(f.sources, &spec.path().join("suite.toml"))?;
    let sources = cache.join(f.sources);
    let mut hash = cache::ContentHash::new(&suite.name);
    for (path, bytes) in embedded_files(f.spec) {
        hash.add(&path, bytes);
    }
    for project in &suite.projects {
        let p: spec::ProjectSpec =
            spec::read_toml(&suite.name, &spec.path().join(project).join("project.toml"))?;
        let Some(up) = p.upstream else { continue };
        let stem = format!("{}-{}", up.name, up.version);
        let not_fetched = |why: String| TaskError::SuiteNotFetched {
            suite: suite.name.clone(),
            message: format!(
                "{why}; run {} (EXECCRITIC_CACHE={})",
                f.script,
                cache.display()
            ),
        };
        let archives = std::iter::once((stem.clone(), up.sha256.clone()))
            .chain(up.deps.iter().map(|d| (format!("{}-{}", d.name, d.version), d.sha256.clone())));
        for (name, sha256) in archives {
            let archive = sources.join(format!("{name}.{}", f.ext));
            let bytes = std::fs::read(&archive)
                .map_err(|_| not_fetched(format!("{} is missing", archive.display())))?;
            let digest = hex::encode(Sha256::digest(&bytes));
            if !digest.eq_ignore_ascii_case(&sha256) {
                return Err(TaskError::Suite {
                    suite: suite.name.clone(),
                    message: format!("{} has sha256 {digest}, expected {sha256}", archive.display()),
                });
            }
            hash.add(&name, digest.as_bytes());
        }
        let tree = sources.join(&stem);
        if !tree.is_dir() {
            return Err(not_fetched(format!("{} is not unpacked", tree.display())));
        }
        hash.add_tree(&tree)?;
    }
    let key = format!("{}-{}", suite.name, hash.hex16());
    cache::get_or_build(&cache.join("suites"), &key, |out| {
        build_suite(spec.path(), Some(&sources), out)
    })
}

/// Every embedded file as (relative path, bytes), in a stable order.
fn embedded_files(dir: &'static Dir<'static>) -> Vec<(String, &'static [u8])> {
    fn walk(dir: &'static Dir<'static>, out: &mut Vec<(String, &'static [u8])>) {
        for f in dir.files() {
            out.push((f.path().to_string_lossy().into_owned(), f.contents()));
        }
        for d in dir.dirs() {
            walk(d, out);
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Write an embedded suite spec to a temporary directory.
fn extract(dir: &'static Dir<'static>) -> Result<tempfile::TempDir, TaskError> {
    let tmp = tempfile::tempdir().map_err(|e| TaskError::io(std::env::temp_dir(), e))?;
    for (path, bytes) in embedded_files(dir) {
        let dest = tmp.path().join(&path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| TaskError::io(parent, e))?;
        }
        std::fs::write(&dest, bytes).map_err(|e| TaskError::io(&dest, e))?;
    }
    Ok(tmp)
}
