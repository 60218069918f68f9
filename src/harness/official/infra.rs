//! swebench's advisory infrastructure-failure signatures (`infra_failure.py`): the first
//! signature found in a log names a reason and a tier. swebench consults them only for an
//! instance whose log gave no results, and only to annotate `report.json`
//! (`infra_failure`, `infra_failure_reason`) and the run summary; they never change
//! `resolved`.

use regex::Regex;
use std::sync::OnceLock;

/// How sure the signature is that the environment, not the patch, broke.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Cannot plausibly be caused by patching repository source.
    Environment,
    /// Could be either.
    Ambiguous,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Environment => "environment",
            Tier::Ambiguous => "ambiguous",
        }
    }
}

/// (reason, tier, pattern), tried in order; the first hit wins.
pub const SIGNATURES: &[(&str, Tier, &str)] = &[
    (
        "browser_launch_failed",
        Tier::Environment,
        r"Failed to launch|Failed to connect to the bus",
    ),
    (
        "display_unavailable",
        Tier::Environment,
        r"cannot open display|Missing X server|unable to open X display",
    ),
    (
        "out_of_memory",
        Tier::Environment,
        r"Cannot allocate memory|OutOfMemoryError|^Killed$",
    ),
    (
        "container_unavailable",
        Tier::Environment,
        r"Error response from daemon|Cannot connect to the Docker daemon",
    ),
    (
        "network_unreachable",
        Tier::Environment,
        r"Could not resolve host|Temporary failure in name resolution",
    ),
    (
        "missing_module",
        Tier::Ambiguous,
        r"Cannot find module|MODULE_NOT_FOUND|ModuleNotFoundError",
    ),
    (
        "no_tests_collected",
        Tier::Ambiguous,
        r"no tests ran|collected 0 items",
    ),
    (
        "tests_timed_out",
        Tier::Ambiguous,
        r"Timeout error: \d+ seconds exceeded",
    ),
];

fn compiled() -> &'static [(&'static str, Tier, Regex)] {
    static COMPILED: OnceLock<Vec<(&'static str, Tier, Regex)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        SIGNATURES
            .iter()
            .filter_map(|(reason, tier, p)| {
                Regex::new(&format!("(?m){p}"))
                    .ok()
                    .map(|re| (*reason, *tier, re))
            })
            .collect()
    })
}

/// `classify_text`: the first matching signature's (reason, tier), if any.
pub fn classify_text(text: &str) -> Option<(&'static str, Tier)> {
    compiled()
        .iter()
        .find(|(_, _, re)| re.is_match(text))
        .map(|(r, t, _)| (*r, *t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_signature_wins_and_killed_is_a_whole_line() {
        assert_eq!(classify_text(""), None);
        assert_eq!(
            classify_text("collected 0 items\nCannot allocate memory"),
            Some(("out_of_memory", Tier::Environment))
        );
        assert_eq!(
            classify_text("x\nKilled\n"),
            Some(("out_of_memory", Tier::Environment))
        );
        assert_eq!(classify_text("Killed by signal"), None);
        assert_eq!(
            classify_text("Timeout error: 1800 seconds exceeded"),
            Some(("tests_timed_out", Tier::Ambiguous))
        );
        assert_eq!(compiled().len(), SIGNATURES.len());
    }
}
