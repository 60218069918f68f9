//! The Repair training test (App. A.2, Table 8: Oracle F2P, one test per rollout, deterministic
//! selection): exactly one F2P node, parametrised cases being distinct nodes, other tests of the
//! official patch not run; a task where no single F2P test gives a valid bundle is skipped,
//! never trained on the whole F2P set.

mod harness_support;

use execcritic::episode::oracle::selected_oracle_bundle;
use execcritic::pipeline::grpo::{training_tasks, Role};
use execcritic::task::{bundled_suite, load_tasks, TaskInstance};
use harness_support::*;

/// The fixture task with another official test file and FAIL_TO_PASS list.
fn task_with(id: &str, test_file: &str, f2p: &[&str]) -> TaskInstance {
    let mut v = fixture_task().to_json().unwrap();
    v["instance_id"] = serde_json::json!(id);
    v["test_patch"] = serde_json::json!(diff_against_base(&[("tests/test_calc.py", test_file)]));
    v["FAIL_TO_PASS"] = serde_json::json!(f2p);
    TaskInstance::from_json(v, None).unwrap()
}

#[test]
fn the_training_test_is_one_f2p_node() {
    let t = fixture_task();
    let b = selected_oracle_bundle(&t).unwrap();
    assert_eq!(b.plan.nodes, ["tests/test_calc.py::test_add"]);
    assert_eq!(
        b.plan.command.nodes(),
        ["tests/test_calc.py::test_add"],
        "{}",
        b.bundle.test_command
    );
}

#[test]
fn parametrised_cases_are_distinct_nodes() {
    let file = format!(
        "import pytest\n{}\n\n@pytest.mark.parametrize(\"a\", [1, 2])\ndef test_add(a):\n    assert add(a, 3) == a + 3\n",
        TEST_BASE.replace("from calc import sub", "from calc import add, sub")
    );
    let t = task_with(
        "calc__calc-param",
        &file,
        &[
            "tests/test_calc.py::test_add[1]",
            "tests/test_calc.py::test_add[2]",
        ],
    );
    let b = selected_oracle_bundle(&t).unwrap();
    assert_eq!(
        b.plan.nodes,
        ["tests/test_calc.py::test_add[1]"],
        "one case, not the whole function"
    );
}

#[test]
fn other_tests_the_official_patch_adds_are_not_run() {
    // The official patch adds two tests: the training test is still the first F2P one alone.
    let file = format!(
        "{}\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_add_zero():\n    assert add(0, 3) == 3\n",
        TEST_BASE.replace("from calc import sub", "from calc import add, sub")
    );
    let two = task_with(
        "calc__calc-two",
        &file,
        &[
            "tests/test_calc.py::test_add",
            "tests/test_calc.py::test_add_zero",
        ],
    );
    let b = selected_oracle_bundle(&two).unwrap();
    assert_eq!(b.plan.command.nodes(), ["tests/test_calc.py::test_add"]);
    // The Test agent's own bundles still must declare every test they add.
    assert!(execcritic::harness::FrozenBundle::freeze(b.bundle.clone()).is_err());
}

#[test]
fn a_task_without_a_valid_one_test_bundle_is_skipped() {
    // F2P names a test no exact selector can name (a whole file): no one-test bundle validates.
    let none = task_with(
        "calc__calc-none",
        &official_test_file(),
        &["tests/test_calc.py"],
    );
    let reason = selected_oracle_bundle(&none).unwrap_err();
    assert!(
        reason.contains("calc__calc-none") && reason.contains("none of its 1"),
        "{reason}"
    );
    let kept = training_tasks(Role::Repair, vec![none, fixture_task()]);
    assert_eq!(kept.len(), 1, "the task without a training test is skipped");
    assert_eq!(kept[0].0.instance_id, "calc__calc-1");
    assert_eq!(kept[0].1.as_ref().unwrap().plan.nodes.len(), 1);
    // The Test role needs no training bundle.
    assert_eq!(training_tasks(Role::Test, vec![fixture_task()]).len(), 1);
}

#[test]
fn bundled_suite_training_tests_are_single_f2p_nodes() {
    let tasks = load_tasks(&bundled_suite().unwrap()).unwrap();
    let mut selected = 0;
    for t in &tasks {
        match selected_oracle_bundle(t) {
            Ok(b) => {
                assert_eq!(b.plan.nodes.len(), 1, "{}", t.instance_id);
                selected += 1;
            }
            Err(reason) => eprintln!("skipped: {reason}"),
        }
    }
    eprintln!(
        "{selected}/{} bundled tasks have a one-test training bundle",
        tasks.len()
    );
    assert_eq!(
        selected,
        tasks.len(),
        "every bundled task has a training test"
    );
}
