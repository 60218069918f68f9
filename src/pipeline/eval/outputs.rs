//! Everything an evaluation leaves in its output directory, written atomically at the end of a
//! run (the durable state during the run is `units.jsonl`, trajectories and bundles):
//! `results.jsonl`, `tests.jsonl`, `predictions/<condition>/run-<k>.jsonl` (SWE-bench's format:
//! `instance_id`, `model_name_or_path`, `model_patch`), `report.json`, `report.md` and
//! `plots/*.svg`. [`write_report`] rebuilds the report from the two row files alone.

use super::plots;
use super::protocol::EvalOutcome;
use super::records::{read_rows, to_jsonl, ResultRow, TestRow};
use super::report::Report;
use super::EvalError;
use crate::pipeline::durable::write_atomically;
use std::path::Path;

fn write(path: &Path, text: &str) -> Result<(), EvalError> {
    write_atomically(path, text.as_bytes()).map_err(EvalError::io(format!("writing {}", path.display())))
}

/// Write the rows, predictions and report of a finished run; returns the report.
pub fn write_outcome(out: &Path, o: &EvalOutcome) -> Result<Report, EvalError> {
    write(&out.join("results.jsonl"), &to_jsonl(&o.results))?;
    write(&out.join("tests.jsonl"), &to_jsonl(&o.tests))?;
    for (cond, run, preds) in &o.predictions {
        write(&out.join("predictions").join(cond).join(format!("run-{run}.jsonl")), &to_jsonl(preds))?;
    }
    write_report(out)
}

/// Read `DIR/results.jsonl` and `DIR/tests.jsonl`.
pub fn read_outcome(dir: &Path) -> Result<(Vec<ResultRow>, Vec<TestRow>), EvalError> {
    let results = read_rows(&dir.join("results.jsonl"))?;
    let tests = if dir.join("tests.jsonl").exists() { read_rows(&dir.join("tests.jsonl"))? } else { Vec::new() };
    Ok((results, tests))
}

/// (Re)build `report.json`, `report.md` and the plots of `dir` from its row files.
pub fn write_report(dir: &Path) -> Result<Report, EvalError> {
    let (results, tests) = read_outcome(dir)?;
    let report = Report::compute(&results, &tests);
    let json = serde_json::to_string_pretty(&report).map_err(|e| EvalError::Io { what: "serializing the report".into(), source: std::io::Error::other(e) })?;
    write(&dir.join("report.json"), &(json + "\n"))?;
    let title = format!("Evaluation report: {}", dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned()));
    write(&dir.join("report.md"), &report.markdown(&title))?;
    let plots_dir = dir.join("plots");
    write(&plots_dir.join("resolved.svg"), &plots::resolved_svg(&report))?;
    write(&plots_dir.join("revision_turns.svg"), &plots::revision_turns_svg(&report))?;
    write(&plots_dir.join("outcomes.svg"), &plots::outcomes_svg(&results))?;
    Ok(report)
}
