//! SWE-bench task formats as published: swebench 4.x rows (eval script derived from the
//! embedded 4.1.0 table, compared byte for byte with what swebench 4.1.0 and 5.0.2 write,
//! `scripts/swebench-eval-oracle.py`), swebench 5.x rows (their own eval script) and SWE-bench
//! Pro rows (run script, parser and Dockerfiles beside the task file), their round trip through
//! JSON, and one clear error per malformed field.

use std::path::{Path, PathBuf};

use execcritic::task::official::{self, pro, Source};
use execcritic::task::{
    load_tasks, Activation, EvalType, Family, Runner, TaskError, TaskInstance,
};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/task_formats")
}

fn expected(name: &str) -> String {
    std::fs::read_to_string(fixtures().join("expected").join(name)).unwrap()
}

fn rows(file: &str) -> Vec<Value> {
    std::fs::read_to_string(fixtures().join(file))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn row(file: &str, id_prefix: &str) -> Value {
    rows(file)
        .into_iter()
        .find(|r| r["instance_id"].as_str().unwrap().starts_with(id_prefix))
        .unwrap()
}

fn error(v: Value, base_dir: Option<&Path>) -> String {
    let e = TaskInstance::from_json(v, base_dir).expect_err("malformed row");
    assert!(matches!(e, TaskError::Field { .. }), "{e:?}");
    e.to_string()
}

/// A 4.x row's script is byte for byte what swebench 4.1.0 writes, and its spec holds that
/// script's swebench 5.x run form (`expected/<id>.eval.sh`, `.run.sh`).
fn assert_published_scripts(t: &TaskInstance) {
    let id = &t.instance_id;
    let published = official::swebench4_published_script(
        &t.repo,
        t.version.as_deref().unwrap(),
        &t.base_commit,
        &t.test_patch,
    )
    .unwrap();
    assert_eq!(published, expected(&format!("{id}.eval.sh")), "{id}");
    assert_eq!(t.official.as_ref().unwrap().eval_script, expected(&format!("{id}.run.sh")), "{id}");
}

#[test]
fn swebench4_rows_get_the_script_swebench_4_1_0_writes() {
    let tasks = load_tasks(&fixtures().join("swebench4.jsonl")).unwrap();
    assert_eq!(tasks.len(), 5);
    for t in &tasks {
        let id = &t.instance_id;
        let o = t.official.as_ref().expect("official spec");
        assert_eq!(o.family, Family::Swebench4, "{id}");
        assert_eq!(o.workdir, "/testbed");
        assert_eq!(o.activation, Activation::Conda { env: "testbed".into() });
        assert_eq!(o.image, execcritic::task::default_image(id));
        assert_eq!(t.image, o.image);
        assert_eq!(o.eval_type, EvalType::PassAndFail);
        assert!(o.files.is_empty() && o.image_assets.is_none());
        assert_published_scripts(t);
        let (parser, runner) = match t.repo.as_str() {
            "django/django" => ("parse_log_django", Runner::Django),
            "sympy/sympy" => ("parse_log_sympy", Runner::Sympy),
            "astropy/astropy" => ("parse_log_pytest_v2", Runner::Pytest),
            "psf/requests" => ("parse_log_pytest_options", Runner::Pytest),
            other => panic!("unexpected repo {other}"),
        };
        assert_eq!(o.log_parser, parser, "{id}");
        assert_eq!(t.runner, runner, "{id}");
        // Our own test command stays the runner's; the official one is in the spec.
        assert_eq!(t.test_cmd, runner.default_test_cmd());
    }
    let django = &tasks[1];
    assert!(django.official.as_ref().unwrap().eval_script.contains(
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 proxy_models.tests\n"
    ));
    let sympy = &tasks[2];
    assert_eq!(
        sympy.official.as_ref().unwrap().test_cmd.as_deref(),
        Some("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose")
    );
}

/// SWE-bench Multilingual's rows as published (4.x: `repo` + `version`): the script swebench
/// 4.1.0's `make_eval_script_list_common` / `_js` writes (wp-calypso's per-path Jest commands
/// included), no conda activation, and the language's parser.
#[test]
fn multilingual_4x_rows_get_the_script_swebench_4_1_0_writes() {
    use execcritic::harness::official::language_of;
    let tasks = load_tasks(&fixtures().join("multilingual4.jsonl")).unwrap();
    assert_eq!(tasks.len(), 9);
    let mut seen = Vec::new();
    for t in &tasks {
        let id = &t.instance_id;
        let o = t.official.as_ref().expect("official spec");
        assert_eq!(o.family, Family::Swebench4, "{id}");
        assert_eq!(o.activation, Activation::None, "{id}");
        assert_eq!(o.image, execcritic::task::default_image(id));
        assert_published_scripts(t);
        assert!(execcritic::harness::official::parser(&o.log_parser).is_some(), "{id}: {}", o.log_parser);
        seen.push((language_of(t), o.log_parser.as_str()));
    }
    assert_eq!(
        seen,
        [
            ("rust", "parse_log_cargo"),
            ("java", "parse_log_maven"),
            ("javascript", "parse_log_jest"),
            ("javascript", "parse_log_calypso"),
            ("c", "parse_log_jq"),
            ("c++", "parse_log_googletest"),
            ("ruby", "parse_log_rspec_transformed_json"),
            ("php", "parse_log_phpunit"),
            ("go", "parse_log_gotest"),
        ]
    );
    // Every Multilingual repository of the table has a parser we implement.
    let table = official::specs::table();
    for (repo, spec) in table.repos.iter().filter(|(_, s)| s.ext != "py") {
        let parser = spec.parser.as_deref().unwrap_or("");
        assert!(execcritic::harness::official::parser(parser).is_some(), "{repo}: {parser}");
    }
}

#[test]
fn swebench5_rows_keep_their_own_script() {
    let mut v = row("swebench4.jsonl", "astropy__");
    v["eval_script"] = json!(expected("astropy__astropy-12907.eval.sh"));
    v["log_parser"] = json!("parse_log_pytest");
    v["eval_type"] = json!("fail_only");
    v["image"] = json!("docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:v2");
    v["image_assets"] = json!("{\"test_patch\": [{\"path\": \"a.png\", \"url\": \"https://x/a.png\"}]}");
    let t = TaskInstance::from_json(v.clone(), None).unwrap();
    let o = t.official.as_ref().unwrap();
    assert_eq!(o.family, Family::Swebench5);
    // swebench's run form, with the asset's restore line before the start marker (as
    // swebench's `_inject_asset_restore` places it when it runs the instance).
    assert_eq!(
        o.eval_script,
        expected("astropy__astropy-12907.run.sh").replace(
            ": '>>>>> Start Test Output'",
            "mkdir -p \"$(dirname a.png)\" && cp /image_assets/a.png a.png\n: '>>>>> Start Test Output'"
        )
    );
    assert_eq!(o.assets.len(), 1);
    assert_eq!((o.assets[0].path.as_str(), o.assets[0].bytes.is_none()), ("a.png", true));
    assert_eq!(o.scratch_dirs, vec!["/image_assets".to_string()]);
    assert_eq!(o.log_parser, "parse_log_pytest");
    assert_eq!(o.eval_type, EvalType::FailOnly);
    assert_eq!(o.activation, Activation::Conda { env: "testbed".into() });
    assert_eq!(o.image, "docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:v2");
    assert_eq!(t.image, o.image);
    assert_eq!(o.image_assets, Some(v["image_assets"].clone()));
    assert!(t.extra.is_empty(), "5.x fields are read, not extra: {:?}", t.extra);
    // A 5.x row needs no table entry.
    let mut unknown = v;
    unknown["repo"] = json!("acme/widget");
    unknown["version"] = json!("0.1");
    unknown["eval_script"] = json!("#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\nnpx jest\n: '>>>>> End Test Output'\n");
    let t = TaskInstance::from_json(unknown, None).unwrap();
    let o = t.official.unwrap();
    assert_eq!(o.test_cmd, None);
    assert_eq!(o.activation, Activation::None);
    assert!(o.eval_script.ends_with("npx jest\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\necho \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\n"));
}

#[test]
fn pro_rows_read_their_scripts_beside_the_task_file() {
    let tasks = load_tasks(&fixtures().join("pro/pro.jsonl")).unwrap();
    assert_eq!(tasks.len(), 3);
    for t in &tasks {
        let o = t.official.as_ref().unwrap();
        assert_eq!(o.family, Family::Pro);
        assert_eq!(o.workdir, "/app");
        assert_eq!(o.log_parser, "pro_parser_py");
        assert_eq!(o.eval_type, EvalType::PassAndFail);
        assert_eq!(t.runner, Runner::Pytest);
        assert!(o.image.starts_with("jefzda/sweap-images:"));
        assert_eq!(t.image, o.image);
        let paths: Vec<&str> = o.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["/workspace/run_script.sh", "/workspace/parser.py", "/workspace/test.patch"]);
        assert_eq!(o.files[2].content, t.test_patch);
        assert_eq!(o.scratch_dirs, ["/workspace"]);
        // The fix commit's test files come from the test patch (no sandbox holds the fix).
        assert!(o.eval_script.contains("git apply -v --include="), "{}", o.eval_script);
        let Source::Pro(pro) = &o.source else { panic!("a Pro source") };
        let fix = pro.before_repo_set_cmd.split_whitespace().rev().find(|w| w.len() == 40).unwrap().to_string();
        assert!(!o.eval_script.contains(&fix), "the fix commit {fix} is not named: {}", o.eval_script);
        assert!(o.files[0].content.contains("run_selected_tests"));
        assert!(o.files[1].content.contains("json.dump"));
        let Activation::Exports { lines } = &o.activation else {
            panic!("Pro activation is exports")
        };
        assert!(lines.iter().all(|l| l.starts_with("export ")), "{lines:?}");
        assert!(lines.contains(&"export UV_HTTP_TIMEOUT=60".to_string()));
        // requirements/interface/issue_* are kept as given.
        assert!(t.extra.contains_key("requirements") && t.extra.contains_key("interface"));
    }
    let py = &tasks[0];
    assert_eq!(
        py.fail_to_pass,
        vec![
            "tests/unit/utils/test_urlutils.py::test_fuzzy_url[file:///tmp/foo-True]",
            "tests/unit/utils/test_urlutils.py::TestSearchUrl::test_get_search_url['quoted' term]",
        ]
    );
    let go = &tasks[1];
    assert_eq!(go.fail_to_pass, vec!["TestLoad"]);
    assert_eq!(go.pass_to_pass, vec!["TestServeHTTP", "TestJSONField"]);
    let o = go.official.as_ref().unwrap();
    assert_eq!(
        o.image,
        "jefzda/sweap-images:flipt-io.flipt-flipt-io__flipt-3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f"
    );
    assert_eq!(
        o.eval_script,
        "#!/bin/bash\n\
         set -x\n\
         export GOFLAGS=-mod=mod\n\
         export CGO_ENABLED=1\n\
         export PYTEST_ADDOPTS=\"--tb=short -v --continue-on-collection-errors --reruns=3\"\n\
         export UV_HTTP_TIMEOUT=60\n\
         cd /app\n\
         if git cat-file -e 5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081:internal/config/config_test.go 2>/dev/null; \
         then git checkout 5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081 -- internal/config/config_test.go; \
         else rm -rf -- internal/config/config_test.go; fi\n\
         git apply -v --include=internal/config/config_test.go --include='internal/config/config_test.go/*' \
         /workspace/test.patch || { echo 'execcritic: the test patch does not apply' >&2; exit 97; }\n\
         : '>>>>> Start Test Output'\n\
         { set +x; } 2>/dev/null\n\
         _execcritic_tag() { local l; while IFS= read -r l || [ -n \"$l\" ]; do printf '%s%s\\n' \"$1\" \"$l\"; done; }\n\
         exec 4>&1\n\
         set -o pipefail\n\
         { bash /workspace/run_script.sh TestLoad,TestServeHTTP 2>&1 1>&3 3>&- 4>&- | _execcritic_tag 'E|' >&4 4>&-; } 3>&1 | _execcritic_tag 'O|'\n\
         SWEBENCH_TEST_EXIT_CODE=$?\n\
         set +o pipefail\n\
         exec 4>&-\n\
         set -x\n\
         : '>>>>> End Test Output'\n\
         echo \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\n"
    );
    let js = &tasks[2];
    let Activation::Exports { lines } = &js.official.as_ref().unwrap().activation else {
        unreachable!()
    };
    assert_eq!(
        lines[0],
        "export SETUP='{ \"url\": \"http://127.0.0.1:4567/forum\", \"database\": \"redis\" }'"
    );
    assert!(js.official.as_ref().unwrap().eval_script.contains(
        "{ bash /workspace/run_script.sh test/translator.js,test/user.js 2>&1 1>&3"
    ));
}

#[test]
fn every_format_round_trips_through_json() {
    let mut tasks = load_tasks(&fixtures().join("swebench4.jsonl")).unwrap();
    tasks.extend(load_tasks(&fixtures().join("pro/pro.jsonl")).unwrap());
    let mut v5 = row("swebench4.jsonl", "django__django-11099");
    v5["eval_script"] = json!(expected("django__django-11099.eval.sh"));
    v5["log_parser"] = json!("parse_log_django");
    v5["eval_type"] = json!("pass_and_fail");
    v5["image"] = json!("swebench/sweb.eval.x86_64.django_1776_django-11099:latest");
    v5["image_assets"] = json!({"test_patch": []});
    tasks.push(TaskInstance::from_json(v5, None).unwrap());
    for t in &tasks {
        // No task file directory: Pro's texts must come back inline.
        let again = TaskInstance::from_json(t.to_json().unwrap(), None).unwrap();
        assert_eq!(&again, t, "{}", t.instance_id);
    }
    let pro_json = tasks[5].to_json().unwrap();
    assert!(pro_json["run_script"].as_str().unwrap().contains("run_selected_tests"));
    assert_eq!(pro_json["FAIL_TO_PASS"], json!(tasks[5].fail_to_pass));
    assert!(pro_json.get("fail_to_pass").is_none());
}

#[test]
fn other_rows_have_no_official_spec() {
    // No version, or a repository swebench 4.x does not know (our suites, SWE-rebench).
    let mut v = row("swebench4.jsonl", "sympy__");
    v.as_object_mut().unwrap().remove("version");
    let t = TaskInstance::from_json(v, None).unwrap();
    assert!(t.official.is_none());
    assert_eq!(t.runner, Runner::Sympy);
    let mut v = row("swebench4.jsonl", "psf__");
    v["repo"] = json!("acme/widget");
    assert!(TaskInstance::from_json(v, None).unwrap().official.is_none());
}

#[test]
fn malformed_rows_give_errors_naming_instance_and_field() {
    let dj = row("swebench4.jsonl", "django__django-11099");
    let mut v = dj.clone();
    v["version"] = json!("9.9");
    let e = error(v, None);
    assert!(
        e.contains("django__django-11099") && e.contains("`version`") && e.contains("django/django") && e.contains("9.9"),
        "{e}"
    );
    let mut v = dj.clone();
    v["repo"] = json!("dbt-labs/dbt-core");
    v["version"] = json!("0.13");
    assert!(error(v, None).contains("dbt-labs/dbt-core"));

    let five = |k: &str, val: Value| {
        let mut v = dj.clone();
        v["eval_script"] = json!("#!/bin/bash\necho hi\n");
        v["log_parser"] = json!("parse_log_django");
        v["eval_type"] = json!("pass_and_fail");
        v["image"] = json!("img");
        if val.is_null() {
            v.as_object_mut().unwrap().remove(k);
        } else {
            v[k] = val;
        }
        error(v, None)
    };
    assert!(five("eval_type", json!("all")).contains("field `eval_type`: `all` is not one of"));
    assert!(five("log_parser", Value::Null).contains("field `log_parser`: missing"));
    assert!(five("image", Value::Null).contains("field `image`: missing"));
    assert!(five("eval_script", json!(" ")).contains("field `eval_script`: must not be empty"));
    assert!(five("image_assets", json!("not json")).contains("field `image_assets`"));
    assert!(five("dockerhub_tag", json!("t")).contains("ambiguous format"));

    let go = row("pro/pro.jsonl", "instance_flipt");
    let pro_dir = fixtures().join("pro");
    let e = error(go.clone(), None);
    assert!(e.contains("field `run_script`") && e.contains("run_scripts/instance_flipt"), "{e}");
    let e = error(go.clone(), Some(&fixtures()));
    assert!(e.contains("field `run_script`") && e.contains("cannot be read"), "{e}");
    let mut v = go.clone();
    v["FAIL_TO_PASS"] = json!(["TestLoad"]);
    assert!(error(v, Some(&pro_dir)).contains("field `fail_to_pass`: given together with `FAIL_TO_PASS`"));
    let mut v = go.clone();
    v["fail_to_pass"] = json!("['TestLoad'");
    assert!(error(v, Some(&pro_dir)).contains("field `fail_to_pass`: not a list of string literals"));
    let mut v = go.clone();
    v["selected_test_files_to_run"] = json!(7);
    assert!(error(v, Some(&pro_dir)).contains("field `selected_test_files_to_run`"));
    let mut v = go.clone();
    v.as_object_mut().unwrap().remove("dockerhub_tag");
    assert!(error(v, Some(&pro_dir)).contains("field `dockerhub_tag`: missing"));
    let mut v = go;
    v["instance_id"] = json!("../escape");
    assert!(error(v, Some(&pro_dir)).contains("cannot name a file"));
}

#[test]
fn sources_are_kept_for_the_grader() {
    let t = load_tasks(&fixtures().join("pro/pro.jsonl")).unwrap().remove(1);
    let Source::Pro(p) = &t.official.as_ref().unwrap().source else {
        panic!("pro source")
    };
    assert_eq!(p.selected_test_files, vec!["TestLoad", "TestServeHTTP"]);
    assert_eq!(p.repo_language.as_deref(), Some("go"));
    assert_eq!(pro::PRO_OUTPUT_PATH, "/workspace/output.json");
}

#[test]
fn format_fields_are_known_fields() {
    use execcritic::task::instance::{is_known_field, KNOWN_FIELDS};
    for f in official::PRO_FIELDS.iter().chain(official::SWEBENCH5_FIELDS).chain(KNOWN_FIELDS) {
        assert!(is_known_field(f), "{f} is not a known field");
    }
    assert!(!is_known_field("requirements"), "Pro's requirements are kept in `extra`");
}

/// The language an evaluation report files each row under (`harness::official::language_of`).
#[test]
fn rows_of_every_format_have_a_language() {
    use execcritic::harness::official::language_of;
    let of = |v: Value| language_of(&TaskInstance::from_json(v, None).unwrap());
    let astropy = row("swebench4.jsonl", "astropy__");
    assert_eq!(of(astropy.clone()), "python");
    let multilingual = |repo: &str, parser: &str| {
        let mut v = astropy.clone();
        v["repo"] = json!(repo);
        v["instance_id"] = json!(format!("{}-1", repo.replace('/', "__")));
        v["eval_script"] = json!("#!/bin/bash\n: '>>>>> Start Test Output'\ntrue\n: '>>>>> End Test Output'\n");
        v["log_parser"] = json!(parser);
        v["eval_type"] = json!("pass_and_fail");
        v["image"] = json!("swebench/sweb.eval.x86_64.x:latest");
        v
    };
    assert_eq!(of(multilingual("tokio-rs/tokio", "parse_log_cargo")), "rust");
    assert_eq!(of(multilingual("fmtlib/fmt", "parse_log_googletest")), "c++");
    assert_eq!(of(multilingual("jqlang/jq", "parse_log_jq")), "c");
    assert_eq!(of(multilingual("google/gson", "parse_log_maven")), "java");
    assert_eq!(of(multilingual("rubocop/rubocop", "parse_log_rspec_transformed_json")), "ruby");
    assert_eq!(of(multilingual("laravel/framework", "parse_log_phpunit")), "php");
    // A repository swebench does not map: its parser's language.
    assert_eq!(of(multilingual("acme/widget", "parse_log_maven")), "java");
    assert_eq!(of(multilingual("acme/widget", "parse_log_nobody")), "unknown");
    // SWE-bench Pro says it itself.
    let pro = load_tasks(&fixtures().join("pro/pro.jsonl")).unwrap();
    let langs: Vec<&str> = pro.iter().map(language_of).collect();
    assert_eq!(langs, ["python", "go", "javascript"]);
    // A row this crate runs with its own runners (the bundled and PyPI suites).
    let mut own = row("swebench4.jsonl", "psf__");
    own["repo"] = json!("acme/widget");
    assert_eq!(of(own.clone()), "python");
    // A cargo task of this crate's own (the crates suite): rust.
    own["runner"] = json!("cargo");
    assert_eq!(of(own), "rust");
}
