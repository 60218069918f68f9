//! Oracle bundles: the task's official test patch run on FAIL_TO_PASS nodes, as the fixed test of
//! the paper's Oracle-feedback configuration — the revision-loop benchmark uses every F2P node,
//! Repair training (App. A, Table 8: "Oracle F2P, 1 test per rollout, deterministic selection")
//! one selected node.

use crate::harness::diff::parse_patch;
use crate::harness::selector::canonical_label;
use crate::harness::{sandbox::shell_quote, Bundle, FrozenBundle};
use crate::task::{Runner, TaskInstance};

/// A test id as the task's runner selects it: parameters dropped (a node id selects all its
/// parameter cases), Django/unittest ids in their canonical dotted label form.
fn node_id(task: &TaskInstance, t: &str) -> String {
    let id = t.split('[').next().unwrap_or(t);
    match task.runner {
        Runner::Django => canonical_label(id),
        _ => id.to_string(),
    }
}

/// Push `id` unless present.
fn push_unique(nodes: &mut Vec<String>, id: String) {
    if !nodes.contains(&id) {
        nodes.push(id);
    }
}

/// F2P node ids, in the task's order, without duplicates.
fn f2p_nodes(task: &TaskInstance) -> Vec<String> {
    let mut nodes = Vec::new();
    for t in &task.fail_to_pass {
        push_unique(&mut nodes, node_id(task, t));
    }
    nodes
}

/// F2P nodes plus the PASS_TO_PASS tests the official test patch adds: a valid bundle must
/// declare every test its patch adds.
fn official_nodes(task: &TaskInstance) -> Vec<String> {
    let added: Vec<String> = parse_patch(&task.test_patch)
        .map(|files| files.into_iter().flat_map(|f| f.added_tests).collect())
        .unwrap_or_default();
    let function = |n: &str| {
        let label = canonical_label(n);
        let last = label.rsplit(['.', ':']).next().unwrap_or("").to_string();
        last.split('[').next().unwrap_or("").to_string()
    };
    let mut nodes = f2p_nodes(task);
    for t in task.pass_to_pass.iter().filter(|t| added.contains(&function(t))) {
        push_unique(&mut nodes, node_id(task, t));
    }
    nodes
}

/// The Python test files the official test patch touches (sympy selects a node as file + name).
fn sympy_test_files(task: &TaskInstance) -> Vec<String> {
    parse_patch(&task.test_patch)
        .map(|files| {
            files
                .into_iter()
                .filter_map(|f| f.new_path)
                .filter(|p| p.ends_with(".py"))
                .collect()
        })
        .unwrap_or_default()
}

/// A bundle of the official test patch whose command selects (and whose contract declares) `nodes`.
fn bundle_for(task: &TaskInstance, nodes: &[String]) -> Result<Bundle, String> {
    let selectors: Vec<String> = match task.runner {
        // sympy's `bin/test` selects by file and `-k name` (F2P ids are bare function names).
        Runner::Sympy => sympy_test_files(task)
            .iter()
            .map(|f| shell_quote(f))
            .chain(nodes.iter().flat_map(|n| ["-k".to_string(), shell_quote(n)]))
            .collect(),
        _ => nodes.iter().map(|t| shell_quote(t)).collect(),
    };
    let command = format!("{} {}", task.test_cmd, selectors.join(" "));
    let contract = serde_json::json!({
        "entrypoint": "official FAIL_TO_PASS tests",
        "trigger": "the issue",
        "expected_output": "the official tests pass",
        "issue_evidence": ["official test patch"],
        "alternative_hypotheses": ["none: oracle feedback"],
        "non_assertions": ["none: oracle feedback"],
        "test_nodes": nodes,
    });
    Bundle::from_parts(&task.test_patch, &command, &contract.to_string()).map_err(|r| r.to_string())
}

/// The Oracle bundle of a task: its official test patch, every FAIL_TO_PASS node (and every
/// PASS_TO_PASS test the patch adds, which a valid bundle must declare) as a selector.
pub fn oracle_bundle(task: &TaskInstance) -> Result<Bundle, String> {
    if task.fail_to_pass.is_empty() {
        return Err("no FAIL_TO_PASS tests".into());
    }
    bundle_for(task, &official_nodes(task))
}

/// The fixed training test of a Repair rollout: one F2P node, chosen deterministically (the
/// first in the task's order). When the official test patch adds tests besides that node, a
/// one-node bundle is not valid (the harness rejects undeclared added tests), so the bundle
/// falls back to [`oracle_bundle`] (every test the patch adds); the second value says which happened (`true` = one node).
pub fn selected_oracle_bundle(task: &TaskInstance) -> Result<(FrozenBundle, bool), String> {
    let nodes = f2p_nodes(task);
    let Some(first) = nodes.first() else {
        return Err(format!("{}: no FAIL_TO_PASS tests", task.instance_id));
    };
    if let Ok(f) = bundle_for(task, std::slice::from_ref(first)).and_then(|b| FrozenBundle::freeze(b).map_err(|r| r.to_string())) {
        return Ok((f, true));
    }
    let all = oracle_bundle(task)?;
    FrozenBundle::freeze(all).map(|f| (f, false)).map_err(|r| format!("{}: oracle bundle rejected: {r}", task.instance_id))
}
