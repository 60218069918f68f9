//! swebench's per-instance `report.json` and run-summary shapes, built the way
//! `get_eval_report` and `make_run_report` build them, and written the way Python's
//! `json.dumps(..., indent=4)` writes them (4-space indent, every non-ASCII character as a
//! `\uXXXX` escape), so that ours diffs line by line against `swebench.harness.run_evaluation`'s.

use super::grading::{
    eval_tests_report, official_logs_eval, resolution_status, EvalType, ResolvedStatus, TestsStatus,
};
use super::infra::{classify_text, Tier};
use super::status::StatusMap;
use super::parsers::{LogParser, ParseError};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::{BTreeMap, BTreeSet};

/// What one instance is graded against.
#[derive(Clone, Debug)]
pub struct GradingSpec<'a> {
    /// The log parser by registry name, with the instance it reads for.
    pub parser: LogParser<'a>,
    pub fail_to_pass: &'a [String],
    pub pass_to_pass: &'a [String],
    pub eval_type: EvalType,
}

/// The value under the instance id in `report.json`, keys in swebench's order.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InstanceReport {
    #[serde(rename = "patch_is_None")]
    pub patch_is_none: bool,
    pub patch_exists: bool,
    pub patch_successfully_applied: bool,
    pub resolved: bool,
    pub infra_failure: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infra_failure_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_status: Option<TestsStatus>,
}

/// A whole `report.json`: `{instance_id: InstanceReport}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalReport {
    pub instance_id: String,
    pub report: InstanceReport,
    /// The resolution computed from the tests report (not a key of `report.json`).
    pub resolution: Option<ResolvedStatus>,
}

impl Serialize for EvalReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(&self.instance_id, &self.report)?;
        map.end()
    }
}

/// swebench 5.0.2 `get_eval_report` for one prediction (`model_patch: None` is Python's `None`)
/// and the text of its `test_output.txt`. `Err` where swebench raises (no report is written).
pub fn eval_report(
    instance_id: &str,
    model_patch: Option<&str>,
    spec: &GradingSpec<'_>,
    test_output: &str,
    include_tests_status: bool,
) -> Result<EvalReport, ParseError> {
    let mut report = InstanceReport::default();
    let out = |report, resolution| EvalReport {
        instance_id: instance_id.to_string(),
        report,
        resolution,
    };
    if model_patch.is_none() {
        report.patch_is_none = true;
        return Ok(out(report, None));
    }
    report.patch_exists = true;
    let logs = official_logs_eval(spec.parser, test_output)?;
    if !logs.found() {
        if let Some((reason, tier)) = classify_text(test_output) {
            report.infra_failure = tier == Tier::Environment;
            report.infra_failure_reason = Some(reason.to_string());
        }
        return Ok(out(report, None));
    }
    Ok(report_from_statuses(instance_id, spec, &logs.status_map, include_tests_status))
}

/// The `report.json` of a run whose statuses were read (the patch applied): swebench's tests
/// report and resolution. Also the report of a SWE-bench Pro run, whose statuses come from the
/// instance's `parser.py` (the Pro harness itself writes only a resolved flag per instance).
pub fn report_from_statuses(
    instance_id: &str,
    spec: &GradingSpec<'_>,
    status_map: &StatusMap,
    include_tests_status: bool,
) -> EvalReport {
    let tests = eval_tests_report(spec.fail_to_pass, spec.pass_to_pass, status_map, spec.eval_type);
    let resolution = resolution_status(&tests);
    let report = InstanceReport {
        patch_exists: true,
        patch_successfully_applied: true,
        resolved: resolution == ResolvedStatus::Full,
        tests_status: include_tests_status.then_some(tests),
        ..InstanceReport::default()
    };
    EvalReport {
        instance_id: instance_id.to_string(),
        report,
        resolution: Some(resolution),
    }
}

/// What `make_run_report` finds in an instance's `report.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredReport {
    /// No file: the instance did not run to the end (an error).
    Missing,
    /// Blank, not JSON, or without `[instance_id]["resolved"]` (an error, but completed).
    Unusable,
    /// `[instance_id]["resolved"]`, by Python truthiness.
    Resolved(bool),
}

impl StoredReport {
    /// Reads a `report.json` text as `make_run_report` does.
    pub fn read(text: &str, instance_id: &str) -> Self {
        let value: Option<serde_json::Value> = serde_json::from_str(text.trim()).ok();
        match value
            .as_ref()
            .and_then(|v| v.get(instance_id))
            .and_then(|r| r.get("resolved"))
        {
            Some(resolved) => StoredReport::Resolved(truthy(resolved)),
            None => StoredReport::Unusable,
        }
    }
}

fn truthy(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The run summary `make_run_report` writes (without a docker client), keys in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    pub total_instances: usize,
    pub submitted_instances: usize,
    pub completed_instances: usize,
    pub resolved_instances: usize,
    pub unresolved_instances: usize,
    pub infra_failure_instances: usize,
    pub ambiguous_failure_instances: usize,
    pub empty_patch_instances: usize,
    pub error_instances: usize,
    pub completed_ids: Vec<String>,
    pub incomplete_ids: Vec<String>,
    pub empty_patch_ids: Vec<String>,
    pub submitted_ids: Vec<String>,
    pub resolved_ids: Vec<String>,
    pub unresolved_ids: Vec<String>,
    pub infra_failure_ids: Vec<String>,
    pub ambiguous_failure_ids: Vec<String>,
    pub failure_reasons: BTreeMap<String, String>,
    pub error_ids: Vec<String>,
    pub schema_version: u32,
}

/// One run's inputs to the summary.
#[derive(Clone, Debug, Default)]
pub struct RunInputs {
    /// The dataset's instance ids, in dataset order (duplicates count in `total_instances`).
    pub dataset: Vec<String>,
    /// Every prediction: instance id → `model_patch` (`None` for Python's `None`).
    pub predictions: BTreeMap<String, Option<String>>,
    /// What each predicted instance left as `report.json` (absent = [`StoredReport::Missing`]).
    pub reports: BTreeMap<String, StoredReport>,
    /// `classify_logs` of each instance's `test_output.txt` + `run_instance.log`.
    pub classifications: BTreeMap<String, (String, Tier)>,
}

#[derive(Default)]
struct Sets {
    completed: BTreeSet<String>,
    resolved: BTreeSet<String>,
    unresolved: BTreeSet<String>,
    error: BTreeSet<String>,
    incomplete: BTreeSet<String>,
    empty_patch: BTreeSet<String>,
}

impl Sets {
    fn sort(&mut self, inputs: &RunInputs, id: &str) {
        let Some(patch) = inputs.predictions.get(id) else {
            self.incomplete.insert(id.to_string());
            return;
        };
        if patch.as_deref().unwrap_or("").is_empty() {
            self.empty_patch.insert(id.to_string());
            return;
        }
        let stored = inputs.reports.get(id).unwrap_or(&StoredReport::Missing);
        if *stored != StoredReport::Missing {
            self.completed.insert(id.to_string());
        }
        let bucket = match stored {
            StoredReport::Missing | StoredReport::Unusable => &mut self.error,
            StoredReport::Resolved(true) => &mut self.resolved,
            StoredReport::Resolved(false) => &mut self.unresolved,
        };
        bucket.insert(id.to_string());
    }
}

fn list(set: &BTreeSet<String>) -> Vec<String> {
    set.iter().cloned().collect()
}

/// `make_run_report`'s summary (no docker client) from a run's inputs.
pub fn run_summary(inputs: &RunInputs) -> RunSummary {
    let mut sets = Sets::default();
    for id in &inputs.dataset {
        sets.sort(inputs, id);
    }
    let mut reasons = BTreeMap::new();
    let (mut infra, mut ambiguous) = (BTreeSet::new(), BTreeSet::new());
    for id in sets.unresolved.union(&sets.error) {
        if let Some((reason, tier)) = inputs.classifications.get(id) {
            reasons.insert(id.clone(), reason.clone());
            match tier {
                Tier::Environment => infra.insert(id.clone()),
                Tier::Ambiguous => ambiguous.insert(id.clone()),
            };
        }
    }
    RunSummary {
        total_instances: inputs.dataset.len(),
        submitted_instances: inputs.predictions.len(),
        completed_instances: sets.completed.len(),
        resolved_instances: sets.resolved.len(),
        unresolved_instances: sets.unresolved.len(),
        infra_failure_instances: infra.len(),
        ambiguous_failure_instances: ambiguous.len(),
        empty_patch_instances: sets.empty_patch.len(),
        error_instances: sets.error.len(),
        completed_ids: list(&sets.completed),
        incomplete_ids: list(&sets.incomplete),
        empty_patch_ids: list(&sets.empty_patch),
        submitted_ids: inputs.predictions.keys().cloned().collect(),
        resolved_ids: list(&sets.resolved),
        unresolved_ids: list(&sets.unresolved),
        infra_failure_ids: list(&infra),
        ambiguous_failure_ids: list(&ambiguous),
        failure_reasons: reasons,
        error_ids: list(&sets.error),
        schema_version: 2,
    }
}

/// Python's `json.dumps(value, indent=4)`: 4-space indent, `": "` and `","` separators, and
/// every character outside printable ASCII escaped (`ensure_ascii`). `report.json` is written
/// without a trailing newline, the run summary with one.
pub fn python_json<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    value.serialize(&mut ser)?;
    let text = String::from_utf8_lossy(&buf);
    Ok(ascii_escape(&text))
}

/// Outside strings, serde's pretty output is printable ASCII; inside them, Python escapes
/// everything not in `' '..='~'` that serde left raw.
fn ascii_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (' '..='~').contains(&c) || c == '\n' {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::official::status::{OfficialStatus, StatusMap};

    #[test]
    fn instance_report_keys_and_layout_match_swebench() {
        let f2p = vec!["t[é]".to_string()];
        let spec = GradingSpec {
            parser: "parse_log_pytest".into(),
            fail_to_pass: &f2p,
            pass_to_pass: &[],
            eval_type: EvalType::PassAndFail,
        };
        let log = ">>>>> Start Test Output\nPASSED t[é]\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n";
        let r = eval_report("a__b-1", Some("diff"), &spec, log, true).ok();
        let text = r
            .as_ref()
            .and_then(|r| python_json(r).ok())
            .unwrap_or_default();
        let expected = "{\n    \"a__b-1\": {\n        \"patch_is_None\": false,\n        \"patch_exists\": true,\n        \"patch_successfully_applied\": true,\n        \"resolved\": true,\n        \"infra_failure\": false,\n        \"tests_status\": {\n            \"FAIL_TO_PASS\": {\n                \"success\": [\n                    \"t[\\u00e9]\"\n                ],\n                \"failure\": []\n            },\n            \"PASS_TO_PASS\": {\n                \"success\": [],\n                \"failure\": []\n            },\n            \"FAIL_TO_FAIL\": {\n                \"success\": [],\n                \"failure\": []\n            },\n            \"PASS_TO_FAIL\": {\n                \"success\": [],\n                \"failure\": []\n            }\n        }\n    }\n}";
        assert_eq!(text, expected);
        let none = eval_report("x", None, &spec, "", true)
            .ok()
            .map(|r| r.report);
        assert_eq!(
            none,
            Some(InstanceReport {
                patch_is_none: true,
                ..Default::default()
            })
        );
        let _ = StatusMap::new().get("x").map(OfficialStatus::as_str);
    }

    #[test]
    fn run_summary_sorts_every_instance_into_swebench_buckets() {
        let mut inputs = RunInputs::default();
        inputs.dataset = ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec();
        for (id, patch) in [
            ("a", Some("p")),
            ("b", Some("p")),
            ("c", Some("")),
            ("d", Some("p")),
            ("e", Some("p")),
            ("z", None),
        ] {
            inputs
                .predictions
                .insert(id.into(), patch.map(String::from));
        }
        inputs.reports.insert(
            "a".into(),
            StoredReport::read("{\"a\": {\"resolved\": true}}", "a"),
        );
        inputs.reports.insert(
            "b".into(),
            StoredReport::read("{\"b\": {\"resolved\": false}}", "b"),
        );
        inputs
            .reports
            .insert("d".into(), StoredReport::read("  ", "d"));
        inputs
            .classifications
            .insert("b".into(), ("out_of_memory".into(), Tier::Environment));
        inputs
            .classifications
            .insert("e".into(), ("no_tests_collected".into(), Tier::Ambiguous));
        let s = run_summary(&inputs);
        assert_eq!(
            (
                s.total_instances,
                s.submitted_instances,
                s.completed_instances
            ),
            (6, 6, 3)
        );
        assert_eq!(s.resolved_ids, vec!["a"]);
        assert_eq!(s.unresolved_ids, vec!["b"]);
        assert_eq!(s.error_ids, vec!["d", "e"]);
        assert_eq!(s.empty_patch_ids, vec!["c"]);
        assert_eq!(s.incomplete_ids, vec!["f"]);
        assert_eq!(s.infra_failure_ids, vec!["b"]);
        assert_eq!(s.ambiguous_failure_ids, vec!["e"]);
        let keys: Vec<String> = serde_json::to_value(&s)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        assert_eq!(keys.first().map(String::as_str), Some("total_instances"));
        assert_eq!(keys.last().map(String::as_str), Some("schema_version"));
        assert_eq!(keys.len(), 20);
    }
}
