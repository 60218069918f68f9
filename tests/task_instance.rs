//! Task-instance parsing: SWE-bench records (both FAIL_TO_PASS/PASS_TO_PASS encodings), the
//! extensions and their defaults, JSON-list and JSONL files, and one clear error per malformed
//! field naming the instance and the field.

use std::path::Path;

use execcritic::task::{
    default_image, find_task, load_tasks, parse_tasks, Runner, TaskError, TaskInstance,
};
use serde_json::{json, Value};

fn record() -> Value {
    json!({
        "instance_id": "astropy__astropy-12907",
        "repo": "astropy/astropy",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "patch": "diff --git a/x.py b/x.py\n",
        "test_patch": "diff --git a/t.py b/t.py\n",
        "problem_statement": "separability_matrix is wrong for nested models",
        "hints_text": "",
        "created_at": "2022-03-03T15:14:54Z",
        "version": "4.3",
        "FAIL_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]\"]",
        "PASS_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_coord_matrix\", \"astropy/modeling/tests/test_separable.py::test_cdot\"]",
        "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    })
}

fn parse(v: Value) -> Result<TaskInstance, TaskError> {
    TaskInstance::from_json(v, None)
}

/// The error message for `record()` with `field` set to `value` (or removed when None).
fn error_for(field: &str, value: Option<Value>) -> String {
    let mut v = record();
    match value {
        Some(x) => v[field] = x,
        None => {
            v.as_object_mut().unwrap().remove(field);
        }
    }
    let err = parse(v).expect_err(field);
    assert!(matches!(err, TaskError::Field { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn swe_bench_record_with_json_encoded_lists() {
    let t = parse(record()).unwrap();
    assert_eq!(
        t.fail_to_pass,
        vec!["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"]
    );
    assert_eq!(t.pass_to_pass.len(), 2);
    assert_eq!(t.version.as_deref(), Some("4.3"));
    // Defaults of the extensions.
    assert_eq!(t.runner, Runner::Pytest);
    assert_eq!(t.test_cmd, "python -m pytest -rA");
    assert_eq!(
        t.image,
        "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    );
    assert!(t.candidates.is_empty() && t.repo_path.is_none() && t.environment_setup.is_none());
}

#[test]
fn plain_json_lists_are_equivalent_to_encoded_strings() {
    let mut v = record();
    v["FAIL_TO_PASS"] = json!([
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"
    ]);
    v["PASS_TO_PASS"] = json!([
        "astropy/modeling/tests/test_separable.py::test_coord_matrix",
        "astropy/modeling/tests/test_separable.py::test_cdot"
    ]);
    assert_eq!(parse(v).unwrap(), parse(record()).unwrap());
}

#[test]
fn round_trip_through_json() {
    let mut v = record();
    v["runner"] = json!("django");
    v["candidates"] = json!([{"patch": "p", "resolved": true}, {"patch": "q", "resolved": false}]);
    v["environment_setup"] = json!({"commands": ["pip install -e ."], "cache_key": "py311"});
    let t = parse(v).unwrap();
    assert_eq!(parse(t.to_json().unwrap()).unwrap(), t);
    assert_eq!(t.to_json().unwrap()["FAIL_TO_PASS"], json!(t.fail_to_pass));
}

#[test]
fn non_utf8_repo_path_is_an_error_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let mut t = parse(record()).unwrap();
    t.repo_path = Some(std::ffi::OsStr::from_bytes(b"/tmp/\xff").into());
    let err = t.to_json().unwrap_err().to_string();
    assert!(err.contains("field `repo_path`"), "{err}");
}

#[test]
fn runner_inference_and_default_commands() {
    let mut v = record();
    v["repo"] = json!("django/django");
    v["instance_id"] = json!("django__django-11099");
    // A swebench 4.x row: its version must be one swebench knows for the repository.
    v["version"] = json!("3.0");
    let t = parse(v).unwrap();
    assert_eq!(t.runner, Runner::Django);
    assert!(t.test_cmd.starts_with("./tests/runtests.py --verbosity 2"));
    let mut v = record();
    v["repo"] = json!("sympy/sympy");
    v["version"] = json!("1.7");
    assert_eq!(parse(v).unwrap().runner, Runner::Sympy);
    assert_eq!(
        default_image("Django__Django-1"),
        "swebench/sweb.eval.x86_64.django_1776_django-1:latest"
    );
}

#[test]
fn runner_inferred_from_runtests_py_in_repo_path() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .current_dir(repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .args(args)
            .output()
            .unwrap();
        assert!(ok.status.success());
        String::from_utf8(ok.stdout).unwrap().trim().to_string()
    };
    git(&["init", "-q"]);
    std::fs::create_dir(repo.join("tests")).unwrap();
    std::fs::write(repo.join("tests/runtests.py"), "print('hi')\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "x"]);
    let head = git(&["rev-parse", "HEAD"]);
    let mut v = record();
    v["base_commit"] = json!(head);
    v["repo_path"] = json!(repo.to_str().unwrap());
    // Not a published swebench row (no version): the repository decides. (For a swebench
    // row the official log parser decides, see tests/task_formats.rs.)
    v.as_object_mut().unwrap().remove("version");
    assert_eq!(parse(v.clone()).unwrap().runner, Runner::Django);
    v["runner"] = json!("pytest");
    assert_eq!(
        parse(v).unwrap().runner,
        Runner::Pytest,
        "an explicit runner wins"
    );
}

#[test]
fn every_malformed_field_is_named() {
    let cases: Vec<(&str, Option<Value>, &str)> = vec![
        ("repo", None, "field `repo`: missing"),
        (
            "repo",
            Some(json!(5)),
            "field `repo`: expected a string, got a number",
        ),
        (
            "base_commit",
            Some(json!("main")),
            "field `base_commit`: expected a hexadecimal commit id",
        ),
        ("patch", None, "field `patch`: missing"),
        (
            "test_patch",
            Some(json!(["x"])),
            "field `test_patch`: expected a string, got an array",
        ),
        (
            "problem_statement",
            None,
            "field `problem_statement`: missing",
        ),
        (
            "hints_text",
            Some(json!(false)),
            "field `hints_text`: expected a string",
        ),
        (
            "created_at",
            Some(json!(1)),
            "field `created_at`: expected a string",
        ),
        (
            "version",
            Some(json!([4])),
            "field `version`: expected a string",
        ),
        ("FAIL_TO_PASS", None, "field `FAIL_TO_PASS`: missing"),
        (
            "FAIL_TO_PASS",
            Some(json!("not json")),
            "field `FAIL_TO_PASS`: string is not a JSON-encoded list",
        ),
        (
            "FAIL_TO_PASS",
            Some(json!("{\"a\": 1}")),
            "field `FAIL_TO_PASS`: expected a list of test ids, got an object",
        ),
        (
            "PASS_TO_PASS",
            Some(json!([1])),
            "field `PASS_TO_PASS`: entry 0: expected a string, got a number",
        ),
        (
            "PASS_TO_PASS",
            Some(json!(["a", " "])),
            "field `PASS_TO_PASS`: entry 1 is empty",
        ),
        (
            "environment_setup_commit",
            Some(json!({})),
            "field `environment_setup_commit`: expected a string",
        ),
        (
            "difficulty",
            Some(json!(2)),
            "field `difficulty`: expected a string",
        ),
        (
            "repo_path",
            Some(json!(true)),
            "field `repo_path`: expected a string",
        ),
        (
            "runner",
            Some(json!("nose")),
            "field `runner`: `nose` is not one of pytest, django, sympy",
        ),
        (
            "test_cmd",
            Some(json!("  ")),
            "field `test_cmd`: must not be empty",
        ),
        ("image", Some(json!(1)), "field `image`: expected a string"),
        (
            "candidates",
            Some(json!({})),
            "field `candidates`: expected a list",
        ),
        (
            "candidates",
            Some(json!([{"patch": "p"}])),
            "field `candidates[0]`: missing field `resolved`",
        ),
        (
            "candidates",
            Some(json!([{"patch": "p", "resolved": true, "score": 1}])),
            "field `candidates[0]`: unknown field `score`",
        ),
        (
            "environment_setup",
            Some(json!("pip install")),
            "field `environment_setup`: expected an object",
        ),
        (
            "environment_setup",
            Some(json!({"cache_key": "k"})),
            "field `environment_setup.commands`: missing",
        ),
        (
            "environment_setup",
            Some(json!({"commands": [1]})),
            "field `environment_setup.commands`: entry 0",
        ),
        (
            "environment_setup",
            Some(json!({"commands": [], "network": true})),
            "field `environment_setup.network`: unknown field",
        ),
    ];
    for (field, value, expected) in cases {
        let msg = error_for(field, value);
        assert!(
            msg.starts_with("instance astropy__astropy-12907: "),
            "{msg}"
        );
        assert!(
            msg.contains(expected),
            "{field}: {msg:?} does not contain {expected:?}"
        );
    }
}

#[test]
fn instance_id_errors() {
    let mut v = record();
    v.as_object_mut().unwrap().remove("instance_id");
    assert!(parse(v)
        .unwrap_err()
        .to_string()
        .contains("field `instance_id`: missing"));
    let mut v = record();
    v["instance_id"] = json!(7);
    assert!(parse(v)
        .unwrap_err()
        .to_string()
        .contains("field `instance_id`: expected a string"));
}

#[test]
fn environment_setup_default_cache_key_depends_on_commands() {
    let with = |cmds: Value| {
        let mut v = record();
        v["environment_setup"] = json!({ "commands": cmds });
        parse(v).unwrap().environment_setup.unwrap().cache_key
    };
    assert_eq!(
        with(json!(["pip install -e ."])),
        with(json!(["pip install -e ."]))
    );
    assert_ne!(
        with(json!(["pip install -e ."])),
        with(json!(["pip install ."]))
    );
}

#[test]
fn task_files_json_list_and_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let mut second = record();
    second["instance_id"] = json!("astropy__astropy-13033");
    second["repo_path"] = json!("repos/astropy.git");
    let list = dir.path().join("tasks.json");
    std::fs::write(
        &list,
        serde_json::to_string_pretty(&json!([record(), second])).unwrap(),
    )
    .unwrap();
    let jsonl = dir.path().join("tasks.jsonl");
    std::fs::write(&jsonl, format!("{}\n\n{}\n", record(), second)).unwrap();
    let a = load_tasks(&list).unwrap();
    let b = load_tasks(&jsonl).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len(), 2);
    // Relative repo paths resolve against the task file's directory.
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        a[1].repo_path.as_deref(),
        Some(root.join("repos/astropy.git").as_path())
    );
    assert_eq!(
        find_task(&a, "astropy__astropy-13033").unwrap().instance_id,
        "astropy__astropy-13033"
    );
    let err = find_task(&a, "nope").unwrap_err().to_string();
    assert_eq!(err, "instance nope not found among 2 task instances");
}

#[test]
fn task_file_errors() {
    let origin = Path::new("tasks.jsonl");
    let err = parse_tasks("{\"instance_id\": \n", origin, None).unwrap_err();
    assert!(matches!(err, TaskError::Json { line: 2, .. }), "{err:?}");
    let err = parse_tasks("[1]", origin, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks.jsonl: record 0 is not a JSON object"
    );
    let dup = format!("{}\n{}\n", record(), record());
    let err = parse_tasks(&dup, origin, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tasks.jsonl: duplicate instance_id astropy__astropy-12907"
    );
    let err = parse_tasks("{\"repo\": \"a/b\"}", origin, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "instance #0 of tasks.jsonl: field `instance_id`: missing"
    );
    let err = load_tasks(Path::new("/nonexistent/tasks.jsonl")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot access /nonexistent/tasks.jsonl"),
        "{err}"
    );
}

/// SWE-rebench-style records carry fields this crate does not read: they load, are ignored, and
/// are written back unchanged.
#[test]
fn unknown_fields_are_kept_and_ignored() {
    let mut v = record();
    let extra = json!({
        "meta": {"has_test_patch": true, "num_modified_files": 2},
        "license_name": "BSD-3-Clause",
        "install_config": {"python": "3.9", "test_cmd": "pytest -rA"},
        "requirements": "numpy==1.26\n",
        "spurious_field": 1
    });
    for (k, x) in extra.as_object().unwrap() {
        v.as_object_mut().unwrap().insert(k.clone(), x.clone());
    }
    let t = parse(v).expect("a record with unknown fields loads");
    assert_eq!(t.extra["license_name"], json!("BSD-3-Clause"));
    assert_eq!(t.extra.len(), 5);
    // Known fields are unaffected by the extras (install_config.test_cmd is not test_cmd).
    assert_ne!(t.test_cmd, "pytest -rA");
    let back = t.to_json().unwrap();
    assert_eq!(back["meta"]["num_modified_files"], json!(2));
    let again = parse(back).unwrap();
    assert_eq!(again, t);
}
