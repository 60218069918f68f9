//! Settings of an evaluation: the paper's budgets and sampling settings as defaults (Table 9:
//! 60 Test turns, a 600 s Test-generation instance timeout, 200 Round-0 turns, 5 × 40 revision
//! turns, temperature 0.6, three Repair runs; the harness's 240 s test timeout is
//! `harness::gate::TEST_TIMEOUT` and its environment install timeout
//! `harness::environment::SETUP_TIMEOUT`, 600 s, for both roles), overridable in a TOML file, and
//! the test conditions compared in one run.

use super::EvalError;
use crate::episode::repair::RepairConfig;
use crate::episode::test_episode::TestEpisodeConfig;
use crate::harness::SandboxKind;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a condition's Test bundles come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// No Test bundle: the Round-0 patch is the terminal patch.
    None,
    /// One Test-agent generation per issue; at most one qualified bundle.
    Generated,
    /// The selected Oracle F2P test (privileged reference feedback, not the deployment setting).
    Oracle,
    /// Bundles given as `DIR/<instance_id>/` (qualified on Base before use).
    Bundles(PathBuf),
}

impl Condition {
    /// Parse `generated`, `oracle`, `none` or a directory.
    pub fn parse(s: &str) -> Result<Condition, EvalError> {
        match s.trim() {
            "none" => Ok(Condition::None),
            "generated" => Ok(Condition::Generated),
            "oracle" => Ok(Condition::Oracle),
            "" => Err(EvalError::BadCondition(s.to_string())),
            dir if Path::new(dir).is_dir() => Ok(Condition::Bundles(PathBuf::from(dir))),
            other => Err(EvalError::BadCondition(other.to_string())),
        }
    }

    /// The name used in file names, rows and the report.
    pub fn label(&self) -> String {
        match self {
            Condition::None => "none".into(),
            Condition::Generated => "generated".into(),
            Condition::Oracle => "oracle".into(),
            Condition::Bundles(d) => format!(
                "bundles-{}",
                d.file_name().map_or_else(|| "dir".into(), |n| n.to_string_lossy().into_owned())
            ),
        }
    }
}

/// Budgets and sampling (defaults: the paper's Table 9 and Table 8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budgets {
    /// Test agent: maximum turns (60).
    pub test_turns: usize,
    /// Test agent: wall-clock limit of one generation episode, seconds (600: Table 9's instance
    /// timeout of Test generation; training uses 900).
    pub test_wall_secs: u64,
    /// Test agent: submissions per episode (5).
    pub test_submissions: usize,
    /// Test agent temperature (`None`: the backend default).
    pub test_temperature: Option<f32>,
    /// Repair agent: Round-0 turns (200).
    pub round0_turns: usize,
    /// Repair agent: revision rounds after Round 0 (5).
    pub revision_rounds: usize,
    /// Repair agent: turns per revision round (40).
    pub revision_turns: usize,
    /// Repair agent: wall-clock limit of one run, seconds.
    pub repair_wall_secs: u64,
    /// Repair sampling temperature (0.6).
    pub temperature: f32,
    /// Maximum new tokens per model turn (8,192).
    pub max_tokens: u32,
    /// Timeout of one agent bash command, seconds.
    pub command_timeout_secs: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            test_turns: 60,
            test_wall_secs: 600,
            test_submissions: 5,
            test_temperature: None,
            round0_turns: 200,
            revision_rounds: 5,
            revision_turns: 40,
            repair_wall_secs: 4 * 3600,
            temperature: 0.6,
            max_tokens: 8192,
            command_timeout_secs: 120,
        }
    }
}

impl Budgets {
    /// Read a TOML file of overrides (every key optional, unknown keys rejected).
    pub fn from_toml_file(path: &Path) -> Result<Budgets, EvalError> {
        let bad = |reason: String| EvalError::Config { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        toml::from_str(&text).map_err(|e| bad(e.to_string()))
    }

    /// The Test episode's settings.
    pub fn test_config(&self, sandbox: SandboxKind) -> TestEpisodeConfig {
        let mut c = TestEpisodeConfig::default();
        c.limits.step_limit = self.test_turns;
        c.limits.wall_limit = Duration::from_secs(self.test_wall_secs);
        c.limits.command_timeout = Duration::from_secs(self.command_timeout_secs);
        c.max_submissions = self.test_submissions;
        c.sampling.max_tokens = self.max_tokens;
        if let Some(t) = self.test_temperature {
            c.sampling.temperature = t;
        }
        c.sandbox = sandbox;
        c
    }

    /// The Repair controller's settings.
    pub fn repair_config(&self, sandbox: SandboxKind) -> RepairConfig {
        let mut c = RepairConfig {
            round0_turns: self.round0_turns,
            revision_rounds: self.revision_rounds,
            revision_turns: self.revision_turns,
            wall_limit: Duration::from_secs(self.repair_wall_secs),
            command_timeout: Duration::from_secs(self.command_timeout_secs),
            sandbox,
            ..RepairConfig::default()
        };
        c.sampling.temperature = self.temperature;
        c.sampling.max_tokens = self.max_tokens;
        c
    }
}

/// One evaluation's settings.
#[derive(Clone, Debug)]
pub struct EvalConfig {
    pub budgets: Budgets,
    pub conditions: Vec<Condition>,
    /// Repair runs per instance and condition (3).
    pub runs: usize,
    pub sandbox: SandboxKind,
    /// Instances in flight at once.
    pub workers: usize,
    /// Docker hosts the instances are spread over (the least busy host with room; a host's
    /// capacity is never exceeded; empty: `DOCKER_HOST` or local).
    pub docker_hosts: Vec<crate::harness::sandbox::docker_host::DockerHost>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            budgets: Budgets::default(),
            conditions: vec![Condition::Generated],
            runs: 3,
            sandbox: SandboxKind::Local,
            workers: 1,
            docker_hosts: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_table_9() {
        let b = Budgets::default();
        assert_eq!((b.test_turns, b.round0_turns, b.revision_rounds, b.revision_turns), (60, 200, 5, 40));
        assert_eq!((b.temperature, b.test_wall_secs), (0.6, 600));
        assert_eq!(EvalConfig::default().runs, 3);
        assert_eq!(crate::harness::gate::TEST_TIMEOUT, Duration::from_secs(240));
    }

    #[test]
    fn toml_overrides_some_keys_and_rejects_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("eval.toml");
        std::fs::write(&p, "revision_rounds = 2\ntemperature = 0.2\n").unwrap();
        let b = Budgets::from_toml_file(&p).unwrap();
        assert_eq!((b.revision_rounds, b.temperature, b.round0_turns), (2, 0.2, 200));
        std::fs::write(&p, "revision_round = 2\n").unwrap();
        assert!(matches!(Budgets::from_toml_file(&p), Err(EvalError::Config { .. })));
    }

    #[test]
    fn conditions_parse_and_label() {
        assert_eq!(Condition::parse("none").unwrap(), Condition::None);
        assert_eq!(Condition::parse("generated").unwrap().label(), "generated");
        let dir = tempfile::tempdir().unwrap();
        let c = Condition::parse(dir.path().to_str().unwrap()).unwrap();
        assert!(c.label().starts_with("bundles-"));
        assert!(matches!(Condition::parse("/no/such/dir"), Err(EvalError::BadCondition(_))));
    }
}
