//! The revision-loop benchmark: Repair episodes on tasks with an Oracle bundle (the official test
//! patch, the FAIL_TO_PASS nodes as the command — the paper's Oracle-feedback configuration), and
//! the time of every round split into model time, agent tool time, harness time (the test
//! command itself) and controller overhead (everything else a CHECK costs: exporting the
//! candidate, resetting the gate sandbox, applying patches, parsing, building the envelope).

use super::oracle::oracle_bundle;
use super::repair::{run_repair, RepairConfig, RepairInputs, TerminalReason};
use crate::harness::{self, Bundle, Qualification};
use crate::policy::Policy;
use crate::task::TaskInstance;
use serde::Serialize;

/// Settings of the benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub repair: RepairConfig,
    /// Episodes per task.
    pub repeat: usize,
    /// A bundle to use for every task instead of its Oracle bundle.
    pub bundle: Option<Bundle>,
}

/// One round's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct RoundSample {
    pub instance_id: String,
    pub episode: usize,
    pub round: usize,
    pub turns: usize,
    pub model_ms: u64,
    pub tool_ms: u64,
    /// The test command's own runtime, summed over the round's gate runs.
    pub harness_ms: u64,
    /// Controller overhead of the round's checks (export + gate − test command).
    pub controller_ms: u64,
    pub wall_ms: u64,
    pub gate_runs: usize,
}

/// Median and 90th percentile (nearest rank) of a series.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median_ms: f64,
    pub p90_ms: f64,
}

impl Summary {
    pub fn of(values: &[u64]) -> Summary {
        if values.is_empty() {
            return Summary {
                n: 0,
                median_ms: 0.0,
                p90_ms: 0.0,
            };
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2] as f64
        } else {
            (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
        };
        let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n);
        Summary {
            n,
            median_ms: median,
            p90_ms: v[rank - 1] as f64,
        }
    }
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub rounds: Vec<RoundSample>,
    /// Controller overhead of each gated CHECK (export + gate − test command), ms.
    pub check_overhead_ms: Vec<u64>,
    pub skipped: Vec<String>,
    pub model: Summary,
    pub tool: Summary,
    pub harness: Summary,
    pub controller: Summary,
    pub overhead_per_check: Summary,
    /// The two parts of the overhead per gated CHECK: exporting the candidate from the agent's
    /// workspace, and the gate call minus the test command.
    pub export_per_check: Summary,
    pub gate_overhead_per_check: Summary,
    pub round_wall: Summary,
}

impl BenchReport {
    /// A readable table.
    pub fn render(&self) -> String {
        let mut s = format!(
            "revision-loop benchmark: {} rounds, {} gated checks\n{:<28}{:>8}{:>12}{:>12}\n",
            self.rounds.len(),
            self.check_overhead_ms.len(),
            "per round",
            "n",
            "median ms",
            "p90 ms"
        );
        for (name, m) in [
            ("model", self.model),
            ("agent tools", self.tool),
            ("harness (test command)", self.harness),
            ("controller overhead", self.controller),
            ("round wall", self.round_wall),
            ("overhead per CHECK", self.overhead_per_check),
            ("  export of the candidate", self.export_per_check),
            ("  gate minus test command", self.gate_overhead_per_check),
        ] {
            s.push_str(&format!(
                "{name:<28}{:>8}{:>12.1}{:>12.1}\n",
                m.n, m.median_ms, m.p90_ms
            ));
        }
        for k in &self.skipped {
            s.push_str(&format!("skipped: {k}\n"));
        }
        s
    }
}

/// Run the benchmark.
pub async fn bench_revision_loop(
    tasks: &[TaskInstance],
    policy: &dyn Policy,
    config: &BenchConfig,
) -> Result<BenchReport, harness::HarnessError> {
    let mut rounds = Vec::new();
    let mut per_check = Vec::new();
    let mut export_ms = Vec::new();
    let mut gate_over_ms = Vec::new();
    let mut skipped = Vec::new();
    for task in tasks {
        let bundle = match config
            .bundle
            .clone()
            .map_or_else(|| oracle_bundle(task), Ok)
        {
            Ok(b) => b,
            Err(e) => {
                skipped.push(format!("{}: {e}", task.instance_id));
                continue;
            }
        };
        let frozen = match harness::qualify(task, &bundle, config.repair.sandbox).await? {
            Qualification::Accepted(f) => f,
            other => {
                skipped.push(format!(
                    "{}: oracle bundle does not qualify: {other:?}",
                    task.instance_id
                ));
                continue;
            }
        };
        for episode in 0..config.repeat.max(1) {
            let r = run_repair(
                task,
                Some(&frozen),
                policy,
                &config.repair,
                RepairInputs::default(),
            )
            .await;
            if let TerminalReason::InfraError { message } = &r.record.terminal {
                skipped.push(format!(
                    "{} episode {episode}: infrastructure error: {message}",
                    task.instance_id
                ));
                continue;
            }
            for round in &r.record.rounds {
                let gated: Vec<_> = round
                    .checks
                    .iter()
                    .filter(|c| c.verdict.is_some())
                    .collect();
                per_check.extend(gated.iter().map(|c| c.overhead_ms));
                export_ms.extend(gated.iter().map(|c| c.export_ms));
                gate_over_ms.extend(gated.iter().map(|c| {
                    c.gate_ms
                        .saturating_sub(c.verdict.as_ref().map_or(0, |v| v.test_ms))
                }));
                rounds.push(RoundSample {
                    instance_id: task.instance_id.clone(),
                    episode,
                    round: round.index,
                    turns: round.turns,
                    model_ms: round.model_ms,
                    tool_ms: round.tool_ms,
                    harness_ms: gated
                        .iter()
                        .filter_map(|c| c.verdict.as_ref())
                        .map(|v| v.test_ms)
                        .sum(),
                    controller_ms: round.checks.iter().map(|c| c.overhead_ms).sum(),
                    wall_ms: round.wall_ms,
                    gate_runs: gated.len(),
                });
            }
        }
    }
    let col = |f: fn(&RoundSample) -> u64| Summary::of(&rounds.iter().map(f).collect::<Vec<_>>());
    Ok(BenchReport {
        model: col(|r| r.model_ms),
        tool: col(|r| r.tool_ms),
        harness: col(|r| r.harness_ms),
        controller: col(|r| r.controller_ms),
        round_wall: col(|r| r.wall_ms),
        overhead_per_check: Summary::of(&per_check),
        export_per_check: Summary::of(&export_ms),
        gate_overhead_per_check: Summary::of(&gate_over_ms),
        check_overhead_ms: per_check,
        skipped,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::Summary;

    #[test]
    fn median_and_p90() {
        let s = Summary::of(&[5, 1, 3, 2, 4, 6, 7, 8, 9, 10]);
        assert_eq!((s.n, s.median_ms, s.p90_ms), (10, 5.5, 9.0));
        assert_eq!(Summary::of(&[7]).p90_ms, 7.0);
        assert_eq!(Summary::of(&[]).n, 0);
    }
}
