//! Adversarial bundles rejected by validation before anything runs (harness-semantics §2).

mod harness_support;

use execcritic::harness::{Bundle, FrozenBundle, RejectionKind, SandboxKind};
use harness_support::*;

const NODE: &str = "tests/test_calc.py::test_add";

fn good_patch() -> String {
    diff_against_base(&[("tests/test_calc.py", &official_test_file())])
}

fn kind_of(patch: &str, command: &str, contract: &str) -> RejectionKind {
    match Bundle::from_parts(patch, command, contract) {
        Err(r) => r.kind,
        Ok(b) => {
            FrozenBundle::freeze(b)
                .expect_err("bundle must be rejected")
                .kind
        }
    }
}

#[test]
fn good_bundle_validates() {
    let b = Bundle::from_parts(
        &good_patch(),
        &format!("python3 -m pytest --no-header {NODE}\n"),
        CONTRACT,
    )
    .unwrap();
    let f = FrozenBundle::freeze(b).unwrap();
    assert_eq!(f.plan.nodes, vec![NODE]);
    assert!(f.plan.command_sanitized);
    assert_eq!(f.plan.command.removed_flags(), vec!["--no-header"]);
    assert_eq!(f.hash.len(), 64);
}

#[test]
fn bare_test_names_resolve_to_the_selected_node() {
    // The paper's prompt asks for "every exact test_* name": a bare name binds to the one
    // selected node it names, and the plan holds the exact node id.
    let cmd = format!("python3 -m pytest -rA {NODE}");
    let b = Bundle::from_parts(&good_patch(), &cmd, &contract_with_nodes(&["test_add"])).unwrap();
    let f = FrozenBundle::freeze(b).unwrap();
    assert_eq!(f.plan.nodes, vec![NODE]);
    // A bare name that the command does not select is still rejected.
    assert_eq!(
        kind_of(&good_patch(), &cmd, &contract_with_nodes(&["test_sub"])),
        RejectionKind::NodeNotSelected
    );
    // A bare name and its exact id together are a duplicate.
    assert_eq!(
        kind_of(
            &good_patch(),
            &cmd,
            &contract_with_nodes(&["test_add", NODE])
        ),
        RejectionKind::DuplicateNode
    );
}

#[test]
fn patch_path_attacks_are_rejected() {
    let cmd = format!("pytest {NODE}");
    let p = good_patch();
    let traversal = p.replace("tests/test_calc.py", "tests/../../etc/test_x.py");
    assert_eq!(
        kind_of(&traversal, &cmd, CONTRACT),
        RejectionKind::PathTraversal
    );
    let absolute = "--- /etc/tests/test_x.py\n+++ /etc/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n";
    assert_eq!(
        kind_of(absolute, &cmd, CONTRACT),
        RejectionKind::AbsolutePath
    );
    let git = p.replace("tests/test_calc.py", ".git/hooks/tests/test_x.py");
    assert_eq!(kind_of(&git, &cmd, CONTRACT), RejectionKind::GitPath);
    let deleted = "diff --git a/tests/test_calc.py b/tests/test_calc.py\ndeleted file mode 100644\n--- a/tests/test_calc.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
    assert_eq!(kind_of(deleted, &cmd, CONTRACT), RejectionKind::DeletedFile);
    let source = p.replace("tests/test_calc.py", "calc/__init__.py");
    assert_eq!(kind_of(&source, &cmd, CONTRACT), RejectionKind::NonTestPath);
    assert_eq!(kind_of("  \n", &cmd, CONTRACT), RejectionKind::EmptyPatch);
    assert_eq!(
        kind_of("not a diff\n", &cmd, CONTRACT),
        RejectionKind::MalformedPatch
    );
    // The one parser: a context diff is not understood, so it is refused (not handed to `patch`).
    let context = "*** /dev/null\n--- tests/conftest.py\n***************\n*** 0 ****\n--- 1 ----\n+ x = 1\n";
    assert_eq!(kind_of(context, &cmd, CONTRACT), RejectionKind::MalformedPatch);
    // `rename to` / `copy to` targets are checked like any other path.
    let copy = "diff --git a/tests/test_calc.py b/calc/evil.py\ncopy from tests/test_calc.py\ncopy to calc/evil.py\n";
    assert_eq!(kind_of(copy, &cmd, CONTRACT), RejectionKind::NonTestPath);
    let rename = "diff --git a/tests/test_calc.py b/.git/hooks/pre-commit\nrename from tests/test_calc.py\nrename to .git/hooks/pre-commit\n";
    assert_eq!(kind_of(rename, &cmd, CONTRACT), RejectionKind::GitPath);
    // A quoted path is unquoted before it is checked: `\056\056` is `..`.
    let quoted = "diff --git \"a/tests/\\056\\056/x.py\" \"b/tests/\\056\\056/x.py\"\n--- \"a/tests/\\056\\056/x.py\"\n+++ \"b/tests/\\056\\056/x.py\"\n@@ -1 +1 @@\n-a\n+b\n";
    assert_eq!(kind_of(quoted, &cmd, CONTRACT), RejectionKind::PathTraversal);
    let symlink = "diff --git a/tests/test_link.py b/tests/test_link.py\nnew file mode 120000\n--- /dev/null\n+++ b/tests/test_link.py\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n";
    assert_eq!(kind_of(symlink, &cmd, CONTRACT), RejectionKind::SymlinkOrBinary);
    // Runner configuration in a test directory is a tamper class of its own.
    let ini = p.replace("tests/test_calc.py", "tests/pytest.ini");
    assert_eq!(
        kind_of(&ini, &cmd, CONTRACT),
        RejectionKind::Tamper(execcritic::harness::tamper::TamperClass::RunnerConfig)
    );
}

#[test]
fn command_attacks_are_rejected() {
    let p = good_patch();
    for c in [
        format!("pytest {NODE}; touch /tmp/pwned"),
        format!("pytest {NODE} && touch /tmp/pwned"),
        format!("pytest $(echo {NODE})"),
        format!("pytest {NODE} > /tmp/out"),
        format!("pytest {NODE} | tee x"),
        format!("pytest `echo {NODE}`"),
    ] {
        assert_eq!(kind_of(&p, &c, CONTRACT), RejectionKind::ShellSyntax, "{c}");
    }
    assert_eq!(
        kind_of(&p, "pytest tests/test_calc.py", CONTRACT),
        RejectionKind::SelectorNotExact
    );
    assert_eq!(
        kind_of(&p, "pytest tests/test_calc.py -k test_add", CONTRACT),
        RejectionKind::SelectorNotExact
    );
    assert_eq!(
        kind_of(&p, "pytest tests", CONTRACT),
        RejectionKind::SelectorNotExact
    );
    assert_eq!(
        kind_of(&p, &format!("pytest {NODE}\npytest {NODE}"), CONTRACT),
        RejectionKind::MultiLineCommand
    );
    assert_eq!(kind_of(&p, "", CONTRACT), RejectionKind::MissingCommand);
}

#[test]
fn binding_and_contract_attacks_are_rejected() {
    let p = good_patch();
    let cmd = format!("pytest {NODE}");
    // undeclared added test
    let two = diff_against_base(&[(
        "tests/test_calc.py",
        &(official_test_file() + "\n\ndef test_extra():\n    assert False\n"),
    )]);
    assert_eq!(kind_of(&two, &cmd, CONTRACT), RejectionKind::UndeclaredTest);
    // duplicates
    assert_eq!(
        kind_of(&p, &cmd, &contract_with_nodes(&[NODE, NODE])),
        RejectionKind::DuplicateNode
    );
    assert_eq!(
        kind_of(&p, &format!("pytest {NODE} {NODE}"), CONTRACT),
        RejectionKind::DuplicateNode
    );
    // declared but not selected / selected but not declared
    assert_eq!(
        kind_of(
            &p,
            &cmd,
            &contract_with_nodes(&[NODE, "tests/test_calc.py::test_sub"])
        ),
        RejectionKind::NodeNotSelected
    );
    assert_eq!(
        kind_of(
            &p,
            &format!("pytest {NODE} tests/test_calc.py::test_sub"),
            CONTRACT
        ),
        RejectionKind::SelectedNotDeclared
    );
    // malformed JSON / missing or empty fields / unknown fields
    assert_eq!(
        kind_of(&p, &cmd, "{not json"),
        RejectionKind::MalformedContract
    );
    assert_eq!(kind_of(&p, &cmd, "[]"), RejectionKind::MalformedContract);
    assert_eq!(
        kind_of(
            &p,
            &cmd,
            &CONTRACT.replace("\"trigger\": \"add(2, 3)\"", "\"trigger\": \"\"")
        ),
        RejectionKind::MalformedContract
    );
    assert_eq!(
        kind_of(&p, &cmd, &contract_with_nodes(&[])),
        RejectionKind::MalformedContract
    );
    assert_eq!(
        kind_of(
            &p,
            &cmd,
            &CONTRACT.replace("{\"entrypoint\"", "{\"extra\": 1, \"entrypoint\"")
        ),
        RejectionKind::MalformedContract
    );
}

#[test]
fn bundle_dir_round_trip_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let b = Bundle::from_parts(&good_patch(), &format!("pytest {NODE}"), CONTRACT).unwrap();
    b.write_dir(dir.path()).unwrap();
    assert_eq!(Bundle::read_dir(dir.path()).unwrap(), b);
    std::fs::remove_file(dir.path().join("test_contract.json")).unwrap();
    match Bundle::read_dir(dir.path()) {
        Err(execcritic::harness::BundleError::Rejected(r)) => {
            assert_eq!(r.kind, RejectionKind::MissingContract)
        }
        other => panic!("{other:?}"),
    }
    // frozen bundles are stored read-only and bound to their hash
    let f = FrozenBundle::freeze(b).unwrap();
    let store = dir.path().join("frozen");
    f.store(&store).unwrap();
    assert_eq!(
        std::fs::read_to_string(store.join("bundle.sha256"))
            .unwrap()
            .trim(),
        f.hash
    );
    let mut tampered = f.clone();
    tampered.bundle.test_command.push_str(" -x");
    assert!(!tampered.intact());
}

#[tokio::test]
async fn qualify_rejects_before_running() {
    let task = fixture_task();
    let pwned = std::path::Path::new("/tmp/execcritic-pwned");
    for (cmd, kind) in [
        (
            format!("pytest {NODE}; touch {}", pwned.display()),
            RejectionKind::ShellSyntax,
        ),
        (
            "pytest tests/test_calc.py".to_string(),
            RejectionKind::SelectorNotExact,
        ),
    ] {
        let b = Bundle::from_parts(&good_patch(), &cmd, CONTRACT).unwrap();
        // Rejected without opening a sandbox: the docker kind (unavailable) would otherwise error.
        match execcritic::harness::qualify(&task, &b, SandboxKind::Docker)
            .await
            .unwrap()
        {
            execcritic::harness::Qualification::Rejected(r) => assert_eq!(r.kind, kind),
            other => panic!("{other:?}"),
        }
    }
    assert!(!pwned.exists());
}

/// The bundle hash covers the contract: a frozen bundle whose contract changed is not intact.
#[test]
fn bundle_hash_covers_the_contract() {
    let b = Bundle::from_parts(&good_patch(), &format!("pytest {NODE}"), CONTRACT).unwrap();
    let f = FrozenBundle::freeze(b).unwrap();
    let mut tampered = f.clone();
    tampered.bundle.contract.expected_output = "anything".into();
    assert!(!tampered.intact());
    let mut tampered = f.clone();
    tampered.bundle.contract.non_assertions.push("more".into());
    assert_ne!(tampered.bundle.content_hash(), f.hash);
}

/// Bundle files are read once, capped, and must be regular files: an oversized file, a symlink
/// (to a huge or host file) and a FIFO are rejected with their own class.
#[test]
fn bundle_reads_are_capped_and_regular_files_only() {
    use execcritic::harness::bundle::{COMMAND_CAP, PATCH_CAP};
    use execcritic::harness::BundleError;
    let kind = |dir: &std::path::Path| match Bundle::read_dir(dir) {
        Err(BundleError::Rejected(r)) => r.kind,
        other => panic!("{other:?}"),
    };
    let b = Bundle::from_parts(&good_patch(), &format!("pytest {NODE}"), CONTRACT).unwrap();
    let dir = tempfile::tempdir().unwrap();
    b.write_dir(dir.path()).unwrap();
    let big = format!(
        "{}{}",
        good_patch(),
        "+x\n".repeat(PATCH_CAP as usize / 3 + 1)
    );
    std::fs::write(dir.path().join("test.patch"), big).unwrap();
    assert_eq!(kind(dir.path()), RejectionKind::BundleTooLarge);
    b.write_dir(dir.path()).unwrap();
    std::fs::write(
        dir.path().join("test_command"),
        format!("pytest {NODE} {}", "-q ".repeat(COMMAND_CAP as usize)),
    )
    .unwrap();
    assert_eq!(kind(dir.path()), RejectionKind::BundleTooLarge);
    b.write_dir(dir.path()).unwrap();
    std::fs::remove_file(dir.path().join("test.patch")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("test.patch")).unwrap();
    assert_eq!(kind(dir.path()), RejectionKind::BundleFileType);
    std::fs::remove_file(dir.path().join("test.patch")).unwrap();
    let fifo = std::ffi::CString::new(dir.path().join("test.patch").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(kind(dir.path()), RejectionKind::BundleFileType);
}

/// A sympy task's Oracle bundle (bare F2P names, `bin/test` runner) validates: its command
/// selects the test file and each name with `-k`.
#[test]
fn sympy_oracle_bundles_validate() {
    use execcritic::episode::oracle::oracle_bundle;
    let test_patch = "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n--- a/sympy/core/tests/test_basic.py\n+++ b/sympy/core/tests/test_basic.py\n@@ -1,2 +1,6 @@\n from sympy import S\n \n+\n+def test_issue_1():\n+    assert S(1) == 1\n+\n";
    let v = serde_json::json!({
        "instance_id": "sympy__sympy-1",
        "repo": "sympy/sympy",
        "base_commit": "0123456789abcdef0123456789abcdef01234567",
        "patch": "diff --git a/sympy/core/basic.py b/sympy/core/basic.py\n",
        "test_patch": test_patch,
        "problem_statement": "x",
        "FAIL_TO_PASS": ["test_issue_1"],
        "PASS_TO_PASS": ["test_other"],
    });
    let task = execcritic::task::TaskInstance::from_json(v, None).unwrap();
    assert_eq!(task.runner, execcritic::task::Runner::Sympy);
    let b = oracle_bundle(&task).unwrap();
    assert_eq!(
        b.test_command,
        "bin/test -C --verbose 'sympy/core/tests/test_basic.py' -k 'test_issue_1'"
    );
    let f = FrozenBundle::freeze(b).unwrap();
    assert_eq!(f.plan.nodes, vec!["test_issue_1"]);
}
