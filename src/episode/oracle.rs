//! Oracle bundles: the task's official test patch run on FAIL_TO_PASS nodes, as the fixed test of
//! the paper's Oracle-feedback configuration — the revision-loop benchmark uses every F2P node,
//! Repair training (App. A, Table 8: "Oracle F2P, 1 test per rollout, deterministic selection")
//! exactly one F2P test; a task where no single F2P test gives a valid bundle is skipped by
//! training, never given the whole F2P set instead.

use crate::harness::diff::parse_patch;
use crate::harness::selector::canonical_label;
use crate::harness::validate::validate_oracle_selection;
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
        // `cargo test` selects one package's one target, then exact test paths.
        Runner::Cargo => cargo_selectors(nodes)?,
        // `go test` selects names by one anchored regex over the packages listed.
        Runner::Go => go_selectors(nodes)?,
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

/// `-run '^(A|B)$' ./dir` for go node ids of one package, `-run '^A$/^(x|y)$' ./dir` for
/// subtests (the regex applies to every package listed and its second level to every test of
/// its first, so ids spanning packages, or tests with different subtests selected, would select
/// tests nobody declared).
fn go_selectors(nodes: &[String]) -> Result<Vec<String>, String> {
    use crate::harness::guard::gotest_run::{split_case, split_node};
    use crate::harness::runners::go::quote_meta;
    let mut dir: Option<String> = None;
    // Test functions in order, each with the subtests selected (`None`: the whole test).
    let mut tests: Vec<(String, Vec<Option<String>>)> = Vec::new();
    for n in nodes {
        let (d, name) = split_node(n).ok_or_else(|| format!("`{n}` is not a go test id (./<package dir>::<TestName>[/<case>])"))?;
        match &dir {
            None => dir = Some(d),
            Some(x) if *x == d => {}
            Some(_) => return Err(format!("the tests span several go packages ({} and `{n}`): one command's regex runs in every package it lists", nodes[0])),
        }
        let (test, case) = split_case(name);
        let case = case.map(quote_meta);
        match tests.iter_mut().find(|(t, _)| t == test) {
            Some((_, cases)) => cases.push(case),
            None => tests.push((test.to_string(), vec![case])),
        }
    }
    let dir = dir.ok_or("no test selected")?;
    let cases = &tests[0].1;
    if tests.iter().any(|(_, c)| c != cases) || (cases.len() > 1 && cases.contains(&None)) {
        return Err(format!("the tests select different subtests of their test functions ({}): one `-run` regex selects the same subtests of every test it names", nodes.join(", ")));
    }
    let alternatives = |names: Vec<String>| if names.len() == 1 { format!("^{}$", names[0]) } else { format!("^({})$", names.join("|")) };
    let mut regex = alternatives(tests.iter().map(|(t, _)| t.clone()).collect());
    if let Some(cases) = cases.iter().cloned().collect::<Option<Vec<String>>>() {
        regex = format!("{regex}/{}", alternatives(cases));
    }
    let package = if dir.is_empty() { ".".to_string() } else { format!("./{dir}") };
    Ok(vec!["-run".to_string(), crate::harness::selector::quote(&regex), package])
}

/// `-p <package> <target> -- --exact <path>…` for cargo node ids of one package's one target.
fn cargo_selectors(nodes: &[String]) -> Result<Vec<String>, String> {
    use crate::harness::guard::libtest_run::split_node;
    use crate::harness::selector::quote;
    let mut scope: Option<(&str, Vec<String>)> = None;
    let mut paths = Vec::new();
    for n in nodes {
        let (package, binary, path) =
            split_node(n).ok_or_else(|| format!("`{n}` is not a cargo test id (<package>/<target>::<path>)"))?;
        let flags = binary.cargo_flags();
        match &scope {
            None => scope = Some((package, flags)),
            Some((p, f)) if *p == package && *f == flags => {}
            Some(_) => return Err(format!("the tests span several cargo targets ({} and `{n}`): one command runs one target", nodes[0])),
        }
        paths.push(quote(path));
    }
    let (package, flags) = scope.ok_or("no test selected")?;
    let mut words = vec!["-p".to_string(), quote(package)];
    words.extend(flags.iter().map(|f| quote(f)));
    words.extend(["--".to_string(), "--exact".to_string()]);
    words.extend(paths);
    Ok(words)
}

/// The Oracle bundle of a task: its official test patch, every FAIL_TO_PASS node (and every
/// PASS_TO_PASS test the patch adds, which a valid bundle must declare) as a selector.
pub fn oracle_bundle(task: &TaskInstance) -> Result<Bundle, String> {
    if task.fail_to_pass.is_empty() {
        return Err("no FAIL_TO_PASS tests".into());
    }
    bundle_for(task, &official_nodes(task))
}

/// An F2P test as the one node of a training bundle: parametrised cases stay distinct nodes
/// (`test_f[a]` and `test_f[b]` are two tests); Django/unittest ids in their dotted label form.
fn case_id(task: &TaskInstance, t: &str) -> String {
    match task.runner {
        Runner::Django => canonical_label(t),
        _ => t.to_string(),
    }
}

/// The fixed training test of a Repair rollout (App. A.2, Table 8: "Oracle F2P, 1 test per
/// rollout, deterministic selection, fixed within each rollout"): the first F2P test, in the
/// task's order, whose one-test bundle validates (the official test patch with a command that
/// selects exactly that node, checked by every bundle rule except that the other tests the
/// official patch adds must be declared: they are simply not run). A one-test bundle does not
/// validate when, e.g., the node cannot be selected exactly by the task's runner. When no F2P
/// test validates the task has no training test: `Err` says why, and the caller skips the task
/// — never a silent fall-back to every F2P test.
pub fn selected_oracle_bundle(task: &TaskInstance) -> Result<FrozenBundle, String> {
    let mut cases: Vec<String> = Vec::new();
    for t in &task.fail_to_pass {
        push_unique(&mut cases, case_id(task, t));
    }
    if cases.is_empty() {
        return Err(format!("{}: no FAIL_TO_PASS tests", task.instance_id));
    }
    let mut first_reason = None;
    for case in &cases {
        let frozen = bundle_for(task, std::slice::from_ref(case)).and_then(|bundle| {
            let plan = validate_oracle_selection(&bundle).map_err(|r| r.to_string())?;
            let hash = bundle.content_hash();
            Ok(FrozenBundle { bundle, hash, plan })
        });
        match frozen {
            Ok(f) => return Ok(f),
            Err(r) => {
                first_reason.get_or_insert(format!("{case}: {r}"));
            }
        }
    }
    Err(format!(
        "{}: none of its {} FAIL_TO_PASS test(s) validates as a one-test training bundle (first: {})",
        task.instance_id,
        cases.len(),
        first_reason.unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::go_selectors;

    fn sel(nodes: &[&str]) -> Result<String, String> {
        let nodes: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
        go_selectors(&nodes).map(|w| w.join(" "))
    }

    #[test]
    fn go_ids_become_one_exact_regex_or_a_reason() {
        assert_eq!(sel(&["./calc::TestA"]).unwrap(), "-run '^TestA$' ./calc");
        assert_eq!(sel(&[".::TestA", ".::TestB"]).unwrap(), "-run '^(TestA|TestB)$' .");
        assert_eq!(sel(&[".::TestA/n=1", ".::TestA/f(2)"]).unwrap(), "-run '^TestA$/^(n=1|f\\(2\\))$' .");
        assert_eq!(sel(&[".::TestA/x", ".::TestB/x"]).unwrap(), "-run '^(TestA|TestB)$/^x$' .");
        // A case name with a quote stays one shell word.
        assert_eq!(sel(&[".::TestA/it's"]).unwrap(), r"-run '^TestA$/^it'\''s$' .");
        for inexact in [&[".::TestA/x", ".::TestB/y"][..], &[".::TestA", ".::TestA/x"], &[".::TestA/x", ".::TestB"], &["./a::TestA", "./b::TestA"]] {
            assert!(sel(inexact).is_err(), "{inexact:?}");
        }
        // The command each regex makes parses back to exactly the ids.
        use crate::harness::runners::parse_native_command;
        for ids in [&[".::TestA/n=1", ".::TestA/f(2)"][..], &[".::TestA/it's"], &["./calc::TestA", "./calc::TestB"]] {
            let cmd = format!("go test {}", sel(ids).unwrap());
            assert_eq!(parse_native_command(&cmd).unwrap().unwrap().nodes, ids, "{cmd}");
        }
    }
}
