//! The paper's tables from `results.jsonl` and `tests.jsonl`: per condition the resolved rate
//! (% of all instances, mean ± sample standard deviation over runs) at Round 0 and final, Δ
//! within the condition and against the no-test condition, infrastructure failures (counted
//! unresolved, reported here), the turns added by revision and their distribution among the
//! trajectories that entered repair (§A.3); per Test source the qualified and Base-to-Gold
//! rates of the single generation. Percentiles interpolate linearly between order statistics.

use super::records::{ResultRow, TestRow};
use serde::{Deserialize, Serialize};

/// A rate over runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// Resolved % of each run (all instances in the denominator).
    pub per_run: Vec<f64>,
    pub mean: f64,
    /// Sample standard deviation over runs (0 for one run).
    pub std: f64,
}

impl Rate {
    fn of(per_run: Vec<f64>) -> Rate {
        let n = per_run.len() as f64;
        let mean = if per_run.is_empty() { 0.0 } else { per_run.iter().sum::<f64>() / n };
        let std = if per_run.len() < 2 {
            0.0
        } else {
            (per_run.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        };
        Rate { per_run, mean, std }
    }
}

/// Distribution of the turns added by revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    /// Trajectories that entered feedback-guided repair (all runs).
    pub trajectories: usize,
    pub mean: f64,
    pub median: f64,
    pub p75: f64,
    pub p90: f64,
    /// % of those trajectories using at most 5 / 10 revision turns.
    pub at_most_5_pct: f64,
    pub at_most_10_pct: f64,
    /// The turns of each trajectory, ascending (the histogram's data).
    pub values: Vec<usize>,
}

fn percentile(sorted: &[usize], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] as f64 + (sorted[hi] as f64 - sorted[lo] as f64) * (pos - lo as f64)
}

impl TurnStats {
    fn of(mut values: Vec<usize>) -> TurnStats {
        values.sort_unstable();
        let n = values.len();
        let pct = |k: usize| if n == 0 { 0.0 } else { 100.0 * values.iter().filter(|&&v| v <= k).count() as f64 / n as f64 };
        TurnStats {
            trajectories: n,
            mean: if n == 0 { 0.0 } else { values.iter().sum::<usize>() as f64 / n as f64 },
            median: percentile(&values, 0.5),
            p75: percentile(&values, 0.75),
            p90: percentile(&values, 0.9),
            at_most_5_pct: pct(5),
            at_most_10_pct: pct(10),
            values,
        }
    }
}

/// One condition's numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConditionReport {
    pub condition: String,
    pub instances: usize,
    pub runs: usize,
    pub round0: Rate,
    #[serde(rename = "final")]
    pub final_: Rate,
    /// Final − Round 0 (mean, points).
    pub delta: f64,
    /// Final − the no-test condition's final (mean, points), when that condition ran.
    pub delta_vs_none: Option<f64>,
    /// Rows with an infrastructure failure (unresolved, in the denominator).
    pub infra_errors: usize,
    /// Rows whose condition had a qualified bundle.
    pub qualified_rows: usize,
    pub revision_turns: TurnStats,
}

/// One Test source's single generation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestSourceReport {
    pub source: String,
    pub instances: usize,
    pub qualified: usize,
    pub qualified_pct: f64,
    /// Bundles with Base-to-Gold; `None` where it was not measured: bundles qualified but none
    /// was audited (given `oracle` bundles are not), so the report says n/a rather than 0.
    pub base_to_gold: Option<usize>,
    /// Base-to-Gold % of all instances (`None`: not measured).
    pub base_to_gold_pct: Option<f64>,
    pub infra_errors: usize,
    /// Why bundles did not qualify, with counts (sorted by class).
    pub rejections: Vec<(String, usize)>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub instances: usize,
    pub runs: usize,
    pub conditions: Vec<ConditionReport>,
    pub tests: Vec<TestSourceReport>,
    /// Instances with an infrastructure failure in any row, and the first error of each.
    pub infra: Vec<(String, String)>,
    /// The same numbers per language of the instances (`rust`, `python`, `go`, …; `unknown` for
    /// rows written without one), in order of first appearance.
    #[serde(default)]
    pub by_language: Vec<LanguageReport>,
}

/// One language's share of an evaluation: its instances' conditions and Test sources, with
/// rates over its own instances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LanguageReport {
    pub language: String,
    pub instances: usize,
    pub conditions: Vec<ConditionReport>,
    pub tests: Vec<TestSourceReport>,
}

fn language_of(language: &str) -> &str {
    if language.is_empty() {
        "unknown"
    } else {
        language
    }
}

fn ordered_unique<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in it {
        if !out.iter().any(|x| x == s) {
            out.push(s.to_string());
        }
    }
    out
}

fn pct(k: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * k as f64 / n as f64
    }
}

/// Per condition (in order of first appearance): resolved rates over `runs`, Δs, infrastructure
/// failures and revision turns, with the condition's own instances in the denominator.
fn conditions_of(results: &[&ResultRow], runs: usize) -> Vec<ConditionReport> {
    let mut conditions: Vec<ConditionReport> = ordered_unique(results.iter().map(|r| r.condition.as_str()))
        .into_iter()
        .map(|c| {
            let rows: Vec<&ResultRow> = results.iter().copied().filter(|r| r.condition == c).collect();
            let n = ordered_unique(rows.iter().map(|r| r.instance_id.as_str())).len();
            let rate = |f: fn(&ResultRow) -> bool| {
                Rate::of((1..=runs).map(|k| pct(rows.iter().filter(|r| r.run == k && f(r)).count(), n)).collect())
            };
            let round0 = rate(|r| r.round0_resolved);
            let final_ = rate(|r| r.final_resolved);
            ConditionReport {
                delta: final_.mean - round0.mean,
                condition: c,
                instances: n,
                runs,
                round0,
                final_,
                delta_vs_none: None,
                infra_errors: rows.iter().filter(|r| r.infra_error.is_some()).count(),
                qualified_rows: rows.iter().filter(|r| r.test_qualified == Some(true)).count(),
                revision_turns: TurnStats::of(rows.iter().filter(|r| r.entered_repair).map(|r| r.revision_turns).collect()),
            }
        })
        .collect();
    if let Some(none) = conditions.iter().find(|c| c.condition == "none").map(|c| c.final_.mean) {
        for c in conditions.iter_mut() {
            c.delta_vs_none = Some(c.final_.mean - none);
        }
    }
    conditions
}

/// Per Test source (in order of first appearance): qualified and Base-to-Gold rates, rejection
/// classes.
fn test_sources_of(tests: &[&TestRow]) -> Vec<TestSourceReport> {
    ordered_unique(tests.iter().map(|t| t.source.as_str()))
        .into_iter()
        .map(|s| {
            let rows: Vec<&TestRow> = tests.iter().copied().filter(|t| t.source == s).collect();
            let n = rows.len();
            let qualified = rows.iter().filter(|t| t.qualified).count();
            let b2g = rows.iter().filter(|t| t.base_to_gold == Some(true)).count();
            // Measured when some audit ran, or when nothing qualified (then 0 is exact).
            let measured = qualified == 0 || rows.iter().any(|t| t.base_to_gold.is_some());
            let mut rejections: Vec<(String, usize)> = Vec::new();
            for r in rows.iter().filter_map(|t| t.rejection.as_deref()) {
                match rejections.iter_mut().find(|(k, _)| k == r) {
                    Some(e) => e.1 += 1,
                    None => rejections.push((r.to_string(), 1)),
                }
            }
            rejections.sort();
            TestSourceReport {
                source: s,
                instances: n,
                qualified,
                qualified_pct: pct(qualified, n),
                base_to_gold: measured.then_some(b2g),
                base_to_gold_pct: measured.then(|| pct(b2g, n)),
                infra_errors: rows.iter().filter(|t| t.infra_error.is_some()).count(),
                rejections,
            }
        })
        .collect()
}

impl Report {
    /// Compute the report from the rows of one evaluation.
    pub fn compute(results: &[ResultRow], tests: &[TestRow]) -> Report {
        let instances = ordered_unique(results.iter().map(|r| r.instance_id.as_str())).len();
        let runs = results.iter().map(|r| r.run).max().unwrap_or(0);
        let all_results: Vec<&ResultRow> = results.iter().collect();
        let all_tests: Vec<&TestRow> = tests.iter().collect();
        let mut infra: Vec<(String, String)> = Vec::new();
        for r in results {
            if let Some(e) = &r.infra_error {
                if !infra.iter().any(|(i, _)| *i == r.instance_id) {
                    infra.push((r.instance_id.clone(), e.clone()));
                }
            }
        }
        let languages = ordered_unique(
            results.iter().map(|r| language_of(&r.language)).chain(tests.iter().map(|t| language_of(&t.language))),
        );
        let by_language = languages
            .into_iter()
            .map(|l| {
                let results: Vec<&ResultRow> = results.iter().filter(|r| language_of(&r.language) == l).collect();
                let tests: Vec<&TestRow> = tests.iter().filter(|t| language_of(&t.language) == l).collect();
                let instances = ordered_unique(
                    results.iter().map(|r| r.instance_id.as_str()).chain(tests.iter().map(|t| t.instance_id.as_str())),
                )
                .len();
                LanguageReport {
                    language: l,
                    instances,
                    conditions: conditions_of(&results, runs),
                    tests: test_sources_of(&tests),
                }
            })
            .collect();
        Report {
            instances,
            runs,
            conditions: conditions_of(&all_results, runs),
            tests: test_sources_of(&all_tests),
            infra,
            by_language,
        }
    }

    /// The report as Markdown (the paper's tables).
    pub fn markdown(&self, title: &str) -> String {
        let mut s = format!("# {title}\n\n{} instances, {} run(s) per condition; resolved % of all instances, mean ± std over runs.\n\n", self.instances, self.runs);
        s += "| condition | Round 0 | final | Δ | Δ vs none | infra errors | entered repair |\n|---|---|---|---|---|---|---|\n";
        for c in &self.conditions {
            s += &format!(
                "| {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {:+.1} | {} | {} | {} |\n",
                c.condition,
                c.round0.mean,
                c.round0.std,
                c.final_.mean,
                c.final_.std,
                c.delta,
                c.delta_vs_none.map_or_else(|| "—".into(), |d| format!("{d:+.1}")),
                c.infra_errors,
                c.revision_turns.trajectories
            );
        }
        if !self.tests.is_empty() {
            s += "\n## Test generation (one run per issue and source)\n\n| source | qualified | Base-to-Gold | infra errors | not qualified |\n|---|---|---|---|---|\n";
            for t in &self.tests {
                let rej: Vec<String> = t.rejections.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                s += &format!(
                    "| {} | {}/{} ({:.1}%) | {} | {} | {} |\n",
                    t.source, t.qualified, t.instances, t.qualified_pct,
                    match (t.base_to_gold, t.base_to_gold_pct) {
                        (Some(b), Some(p)) => format!("{b}/{} ({p:.1}%)", t.instances),
                        _ => "n/a (not audited)".to_string(),
                    },
                    t.infra_errors,
                    if rej.is_empty() { "—".into() } else { rej.join(", ") }
                );
            }
        }
        s += "\n## Turns added by revision (trajectories that entered repair)\n\n| condition | trajectories | mean | median | p75 | p90 | ≤ 5 turns | ≤ 10 turns |\n|---|---|---|---|---|---|---|---|\n";
        for c in self.conditions.iter().filter(|c| c.revision_turns.trajectories > 0) {
            let t = &c.revision_turns;
            s += &format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1}% | {:.1}% |\n",
                c.condition, t.trajectories, t.mean, t.median, t.p75, t.p90, t.at_most_5_pct, t.at_most_10_pct
            );
        }
        s += &self.language_markdown();
        if !self.infra.is_empty() {
            s += "\n## Infrastructure failures (counted as unresolved)\n\n";
            for (id, e) in &self.infra {
                s += &format!("- `{id}`: {}\n", e.lines().next().unwrap_or_default());
            }
        }
        s += "\nPlots: `plots/resolved.svg`, `plots/revision_turns.svg`, `plots/outcomes.svg`.\n";
        s
    }
}

impl Report {
    /// The per-language table: each language's resolved rates (of its own instances) per
    /// condition, and its Test sources' qualified and Base-to-Gold counts.
    fn language_markdown(&self) -> String {
        if self.by_language.is_empty() {
            return String::new();
        }
        let mut s = String::from("\n## By language\n\n| language | instances | condition | Round 0 | final | Δ | infra errors |\n|---|---|---|---|---|---|---|\n");
        for l in &self.by_language {
            for c in &l.conditions {
                s += &format!(
                    "| {} | {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {:+.1} | {} |\n",
                    l.language, l.instances, c.condition, c.round0.mean, c.round0.std, c.final_.mean, c.final_.std, c.delta, c.infra_errors
                );
            }
        }
        if self.by_language.iter().any(|l| !l.tests.is_empty()) {
            s += "\n| language | source | qualified | Base-to-Gold |\n|---|---|---|---|\n";
            for l in &self.by_language {
                for t in &l.tests {
                    s += &format!(
                        "| {} | {} | {}/{} ({:.1}%) | {} |\n",
                        l.language,
                        t.source,
                        t.qualified,
                        t.instances,
                        t.qualified_pct,
                        match (t.base_to_gold, t.base_to_gold_pct) {
                            (Some(b), Some(p)) => format!("{b}/{} ({p:.1}%)", t.instances),
                            _ => "n/a (not audited)".to_string(),
                        }
                    );
                }
            }
        }
        s
    }
}

/// Several reports side by side (`execcritic report A B …`).
pub fn compare_markdown(reports: &[(String, Report)]) -> String {
    let mut s = String::from("# Comparison\n\n| run | condition | instances | Round 0 | final | Δ | infra errors |\n|---|---|---|---|---|---|---|\n");
    for (name, r) in reports {
        for c in &r.conditions {
            s += &format!(
                "| {name} | {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {:+.1} | {} |\n",
                c.condition, c.instances, c.round0.mean, c.round0.std, c.final_.mean, c.final_.std, c.delta, c.infra_errors
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_std_and_percentiles() {
        let r = Rate::of(vec![50.0, 100.0, 75.0]);
        assert_eq!(r.mean, 75.0);
        assert!((r.std - 25.0).abs() < 1e-12);
        assert_eq!(Rate::of(vec![40.0]).std, 0.0);
        let t = TurnStats::of(vec![10, 2, 4, 40]);
        assert_eq!(t.values, vec![2, 4, 10, 40]);
        assert_eq!((t.mean, t.median), (14.0, 7.0));
        assert!((t.p75 - 17.5).abs() < 1e-12);
        assert!((t.p90 - 31.0).abs() < 1e-12);
        assert_eq!((t.at_most_5_pct, t.at_most_10_pct), (50.0, 75.0));
    }

    fn row(source: &str, qualified: bool, b2g: Option<bool>) -> TestRow {
        TestRow {
            instance_id: format!("i{}", b2g.map_or(0, |b| b as u8)),
            source: source.into(),
            qualified,
            rejection: (!qualified).then(|| "no_bundle".to_string()),
            base_to_gold: b2g,
            gold_status: None,
            turns: 0,
            completion_tokens: 0,
            bundle_sha256: None,
            infra_error: None,
            language: String::new(),
        }
    }

    #[test]
    fn base_to_gold_is_not_applicable_where_nothing_was_audited() {
        let tests = vec![
            row("oracle", true, None),
            row("oracle", true, None),
            row("model", true, Some(true)),
            row("model", true, Some(false)),
            row("none-qualified", false, None),
        ];
        let r = Report::compute(&[], &tests);
        let by = |s: &str| r.tests.iter().find(|t| t.source == s).unwrap().clone();
        assert_eq!((by("oracle").base_to_gold, by("oracle").base_to_gold_pct), (None, None));
        assert_eq!((by("model").base_to_gold, by("model").base_to_gold_pct), (Some(1), Some(50.0)));
        assert_eq!(by("none-qualified").base_to_gold, Some(0));
        let md = r.markdown("t");
        assert!(md.contains("| oracle | 2/2 (100.0%) | n/a (not audited) |"), "{md}");
        assert!(md.contains("| model | 2/2 (100.0%) | 1/2 (50.0%) |"), "{md}");
    }

    fn result(id: &str, language: &str, run: usize, resolved: bool) -> ResultRow {
        ResultRow {
            instance_id: id.into(),
            condition: "generated".into(),
            run,
            test_qualified: Some(true),
            entered_repair: false,
            round0_resolved: resolved,
            final_resolved: resolved,
            terminal_reason: "pass_at_round0".into(),
            terminal_round: 0,
            revision_rounds: 0,
            checks: 0,
            terminal_gate: None,
            round0_turns: 1,
            revision_turns: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            wall_ms: 0,
            round0_patch_sha256: String::new(),
            final_patch_sha256: String::new(),
            infra_error: None,
            docker_host: None,
            language: language.into(),
        }
    }

    #[test]
    fn a_mixed_language_run_is_broken_down_by_language() {
        let results = vec![
            result("tokio-rs__tokio-1", "rust", 1, true),
            result("tokio-rs__tokio-2", "rust", 1, false),
            result("django__django-1", "python", 1, true),
            result("gin-gonic__gin-1", "go", 1, false),
            result("old-row", "", 1, true),
        ];
        let mut tests = vec![row("generated", true, Some(true)), row("generated", false, None)];
        (tests[0].instance_id, tests[0].language) = ("tokio-rs__tokio-1".into(), "rust".into());
        (tests[1].instance_id, tests[1].language) = ("gin-gonic__gin-1".into(), "go".into());
        let r = Report::compute(&results, &tests);
        assert_eq!(r.conditions[0].final_.mean, 60.0);
        let langs: Vec<(&str, usize, f64)> = r
            .by_language
            .iter()
            .map(|l| (l.language.as_str(), l.instances, l.conditions[0].final_.mean))
            .collect();
        assert_eq!(
            langs,
            vec![("rust", 2, 50.0), ("python", 1, 100.0), ("go", 1, 0.0), ("unknown", 1, 100.0)]
        );
        let rust = &r.by_language[0];
        assert_eq!((rust.tests[0].qualified, rust.tests[0].base_to_gold), (1, Some(1)));
        let md = r.markdown("t");
        assert!(md.contains("| rust | 2 | generated | 50.0 ± 0.0 | 50.0 ± 0.0 | +0.0 | 0 |"), "{md}");
        assert!(md.contains("| go | generated | 0/1 (0.0%) | 0/1 (0.0%) |"), "{md}");
        // Rows written before languages were recorded still read.
        let old: ResultRow = serde_json::from_str(
            &serde_json::to_string(&result("x", "", 1, true)).unwrap(),
        )
        .unwrap();
        assert_eq!(old.language, "");
    }
}
