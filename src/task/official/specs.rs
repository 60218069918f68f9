//! The swebench 4.x per-repository/version facts (test command, eval commands, install,
//! log parser, eval type), embedded from `data/swebench-specs.json`, which
//! `scripts/swebench-specs.py` generates from the published swebench wheel. No network and
//! no Python at load time.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

const TABLE_JSON: &str = include_str!("../../../data/swebench-specs.json");

/// Where the table came from (package, version, files, generation command).
#[derive(Clone, Debug, Deserialize)]
pub struct TableSource {
    pub package: String,
    pub version: String,
    pub wheel: String,
    pub wheel_sha256: String,
    pub files: Vec<String>,
    pub generated_by: String,
}

/// One repository version's facts (MAP_REPO_VERSION_TO_SPECS).
#[derive(Clone, Debug, Deserialize)]
pub struct VersionSpec {
    /// A Python repository's test command, to which the test patch's files are appended.
    /// Absent for a few repositories (swebench cannot evaluate them either).
    pub test_cmd: Option<String>,
    /// Any other repository's test commands, run as given (`get_test_cmds`).
    #[serde(default)]
    pub test_cmds: Vec<String>,
    /// Any other repository's `build` commands, run after the test patch is applied.
    #[serde(default)]
    pub build: Vec<String>,
    pub eval_commands: Vec<String>,
    pub pre_install: Vec<String>,
    /// `None`: the key is absent, so the eval script runs no install command.
    pub install: Option<String>,
    pub python: Option<String>,
}

/// One repository's facts: its language's extension (MAP_REPO_TO_EXT), its log parser
/// (MAP_REPO_TO_PARSER) and versions.
#[derive(Clone, Debug, Deserialize)]
pub struct RepoSpec {
    /// `py`, `js`, `rs`, `go`, `java`, `c`, `rb`, `php`.
    pub ext: String,
    pub parser: Option<String>,
    pub eval_type: String,
    pub versions: BTreeMap<String, VersionSpec>,
}

/// The whole table.
#[derive(Clone, Debug, Deserialize)]
pub struct SpecTable {
    pub source: TableSource,
    pub start_test_output: String,
    pub end_test_output: String,
    pub non_test_exts: Vec<String>,
    pub repos: BTreeMap<String, RepoSpec>,
}

/// The embedded table, parsed once. It is checked in and covered by tests, so a parse
/// failure is a build defect, not a user error.
pub fn table() -> &'static SpecTable {
    static TABLE: OnceLock<SpecTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_json::from_str(TABLE_JSON)
            .unwrap_or_else(|e| panic!("data/swebench-specs.json is malformed: {e}"))
    })
}

impl SpecTable {
    /// The facts of `repo` at `version`; the error names both and what the table holds.
    pub fn lookup(&self, repo: &str, version: &str) -> Result<(&RepoSpec, &VersionSpec), String> {
        let r = self.repos.get(repo).ok_or_else(|| {
            format!(
                "repository `{repo}` (version `{version}`) is not in {} {}'s specs",
                self.source.package, self.source.version
            )
        })?;
        let v = r.versions.get(version).ok_or_else(|| {
            format!(
                "{} {} has no specs for repository `{repo}` version `{version}` (known: {})",
                self.source.package,
                self.source.version,
                r.versions.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        Ok((r, v))
    }
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn embedded_table_parses_and_names_its_source() {
        let t = table();
        assert_eq!(t.source.package, "swebench");
        assert!(t.source.version.starts_with("4."));
        let (repo, v) = t.lookup("django/django", "3.0").unwrap();
        assert_eq!(repo.parser.as_deref(), Some("parse_log_django"));
        assert!(v.test_cmd.as_deref().unwrap().starts_with("./tests/runtests.py"));
        let e = t.lookup("django/django", "9.9").unwrap_err();
        assert!(e.contains("django/django") && e.contains("9.9"), "{e}");
        let (repo, v) = t.lookup("tokio-rs/tokio", "7139").unwrap();
        assert_eq!((repo.ext.as_str(), repo.parser.as_deref()), ("rs", Some("parse_log_cargo")));
        assert!(v.test_cmd.is_none() && v.test_cmds[0].contains("cargo test --test fs_file"));
        let e = t.lookup("acme/widget", "1.0").unwrap_err();
        assert!(e.contains("acme/widget") && e.contains("1.0"), "{e}");
    }
}
