//! The Test bundle (`test.patch`, `test_command`, `test_contract.json`), its contract, reading and
//! writing bundle directories, and frozen (hash-bound, validated) bundles.

use super::validate::{validate, Rejection, RejectionKind, TestPlan};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub const PATCH_FILE: &str = "test.patch";
pub const COMMAND_FILE: &str = "test_command";
pub const CONTRACT_FILE: &str = "test_contract.json";

/// The structured contract of a bundle (paper App. B.3.1); structurally validated metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestContract {
    pub entrypoint: String,
    pub trigger: String,
    pub expected_output: String,
    pub issue_evidence: Vec<String>,
    pub alternative_hypotheses: Vec<String>,
    pub non_assertions: Vec<String>,
    pub test_nodes: Vec<String>,
}

impl TestContract {
    /// Parse and check types and non-emptiness of every field.
    pub fn parse(json: &str) -> Result<TestContract, Rejection> {
        let bad = |m: String| Rejection::new(RejectionKind::MalformedContract, m);
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| bad(format!("test_contract.json is not valid JSON: {e}")))?;
        if !value.is_object() {
            return Err(bad("test_contract.json must be a JSON object".into()));
        }
        let c: TestContract =
            serde_json::from_value(value).map_err(|e| bad(format!("test_contract.json: {e}")))?;
        for (name, v) in [
            ("entrypoint", &c.entrypoint),
            ("trigger", &c.trigger),
            ("expected_output", &c.expected_output),
        ] {
            if v.trim().is_empty() {
                return Err(bad(format!(
                    "test_contract.json: `{name}` must be a non-empty string"
                )));
            }
        }
        for (name, v) in [
            ("issue_evidence", &c.issue_evidence),
            ("alternative_hypotheses", &c.alternative_hypotheses),
            ("non_assertions", &c.non_assertions),
            ("test_nodes", &c.test_nodes),
        ] {
            if v.is_empty() || v.iter().any(|s| s.trim().is_empty()) {
                return Err(bad(format!(
                    "test_contract.json: `{name}` must be a non-empty list of non-empty strings"
                )));
            }
        }
        Ok(c)
    }
}

/// A Test bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bundle {
    pub test_patch: String,
    pub test_command: String,
    pub contract: TestContract,
}

/// Reading a bundle directory failed: I/O, or the content is rejected.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Rejected(Rejection),
}

impl Bundle {
    /// Build a bundle from its three texts (checks 1, 3, 4 of harness-semantics §2).
    pub fn from_parts(
        patch: &str,
        command: &str,
        contract_json: &str,
    ) -> Result<Bundle, Rejection> {
        if patch.trim().is_empty() {
            return Err(Rejection::new(
                RejectionKind::EmptyPatch,
                "test.patch is empty",
            ));
        }
        let lines: Vec<&str> = command.lines().filter(|l| !l.trim().is_empty()).collect();
        let command = match lines.as_slice() {
            [] => {
                return Err(Rejection::new(
                    RejectionKind::MissingCommand,
                    "test_command is empty",
                ))
            }
            [one] if command.trim_end_matches('\n').lines().count() == 1 => one.trim().to_string(),
            _ => {
                return Err(Rejection::new(
                    RejectionKind::MultiLineCommand,
                    "test_command must be exactly one line",
                ))
            }
        };
        let contract = TestContract::parse(contract_json)?;
        Ok(Bundle {
            test_patch: patch.to_string(),
            test_command: command,
            contract,
        })
    }

    /// Read `test.patch`, `test_command`, `test_contract.json` from a directory: each file is
    /// opened once (a symlink or anything but a regular file is rejected), read at most up to
    /// its cap ([`PATCH_CAP`], [`COMMAND_CAP`], [`CONTRACT_CAP`]; a larger file is rejected as
    /// `bundle_too_large`), and everything after works on these bytes: validation, freezing and
    /// the hash see the same content, whatever happens to the directory meanwhile.
    pub fn read_dir(dir: &Path) -> Result<Bundle, BundleError> {
        let patch = read_capped(dir, PATCH_FILE, PATCH_CAP, RejectionKind::EmptyPatch)?;
        let command = read_capped(
            dir,
            COMMAND_FILE,
            COMMAND_CAP,
            RejectionKind::MissingCommand,
        )?;
        let contract = read_capped(
            dir,
            CONTRACT_FILE,
            CONTRACT_CAP,
            RejectionKind::MissingContract,
        )?;
        Bundle::from_parts(&patch, &command, &contract).map_err(BundleError::Rejected)
    }

    /// Write the bundle's three files into `dir` (created if needed).
    pub fn write_dir(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(PATCH_FILE), &self.test_patch)?;
        std::fs::write(dir.join(COMMAND_FILE), format!("{}\n", self.test_command))?;
        let json = serde_json::to_string_pretty(&self.contract).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(CONTRACT_FILE), json + "\n")
    }

    /// sha256 over patch, command and contract (the contract in its canonical JSON form, field
    /// order fixed by [`TestContract`]); each part length-prefixed so the split is unambiguous.
    pub fn content_hash(&self) -> String {
        let contract = serde_json::to_string(&self.contract).unwrap_or_default();
        let mut h = Sha256::new();
        for part in [&self.test_patch, &self.test_command, &contract] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// Largest `test.patch` a bundle may have (bytes).
pub const PATCH_CAP: u64 = 4 << 20;
/// Largest `test_command` file (bytes).
pub const COMMAND_CAP: u64 = 16 << 10;
/// Largest `test_contract.json` (bytes).
pub const CONTRACT_CAP: u64 = 256 << 10;

/// Read one bundle file once, capped at `cap` bytes, refusing symlinks and non-regular files.
fn read_capped(
    dir: &Path,
    name: &str,
    cap: u64,
    missing: RejectionKind,
) -> Result<String, BundleError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(name);
    let rejected = |kind, m: String| BundleError::Rejected(Rejection::new(kind, m));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&p);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(rejected(missing, format!("{name} is missing")))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(rejected(
                RejectionKind::BundleFileType,
                format!("{name} is a symlink; bundle files must be regular files"),
            ))
        }
        Err(e) => return Err(BundleError::Io { path: p, source: e }),
    };
    let meta = file.metadata().map_err(|e| BundleError::Io {
        path: p.clone(),
        source: e,
    })?;
    if !meta.is_file() {
        return Err(rejected(
            RejectionKind::BundleFileType,
            format!("{name} is not a regular file"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| BundleError::Io {
            path: p.clone(),
            source: e,
        })?;
    if bytes.len() as u64 > cap {
        return Err(rejected(
            RejectionKind::BundleTooLarge,
            format!("{name} is larger than its limit of {cap} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        rejected(
            RejectionKind::MalformedPatch,
            format!("{name} is not valid UTF-8"),
        )
    })
}

/// A validated bundle bound to its content hash. Construct with [`FrozenBundle::freeze`]; the
/// gates re-check the hash before every use, so a modified bundle is never run as frozen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrozenBundle {
    pub bundle: Bundle,
    pub hash: String,
    pub plan: TestPlan,
}

impl FrozenBundle {
    pub fn freeze(bundle: Bundle) -> Result<FrozenBundle, Rejection> {
        let plan = validate(&bundle)?;
        let hash = bundle.content_hash();
        Ok(FrozenBundle { bundle, hash, plan })
    }

    /// The bundle still has the content it was frozen with.
    pub fn intact(&self) -> bool {
        self.bundle.content_hash() == self.hash
    }

    /// Store immutably: the three files + `bundle.sha256`, all read-only.
    pub fn store(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if dir.join("bundle.sha256").exists() {
            let existing = std::fs::read_to_string(dir.join("bundle.sha256"))?;
            if existing.trim() == self.hash {
                return Ok(());
            }
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} already holds a different frozen bundle", dir.display()),
            ));
        }
        self.bundle.write_dir(dir)?;
        std::fs::write(dir.join("bundle.sha256"), format!("{}\n", self.hash))?;
        for f in [PATCH_FILE, COMMAND_FILE, CONTRACT_FILE, "bundle.sha256"] {
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o444))?;
        }
        Ok(())
    }
}
